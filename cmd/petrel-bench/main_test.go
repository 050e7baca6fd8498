package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m,
		goleak.IgnoreTopFunction("github.com/panjf2000/ants/v2.(*poolCommon).purgeStaleWorkers"),
		goleak.IgnoreTopFunction("github.com/panjf2000/ants/v2.(*poolCommon).ticktock"),
	)
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func run(ctx context.Context, args ...string) (code int, stdout, stderr string) {
	var out, errOut syncBuffer
	code = execute(ctx, args, &out, &errOut)
	return code, out.String(), errOut.String()
}

func TestUsageErrors(t *testing.T) {
	for _, tt := range []struct {
		args []string
		want string
	}{
		{nil, "give --workload, --payload-dir or both"},
		{[]string{"--payload-dir", "x", "extra"}, "unknown command"},
		{[]string{"--bogus"}, "unknown flag: --bogus"},
		{[]string{"--payload-dir", "x", "--segment-size", "12Q"}, "--segment-size"},
		{[]string{"--payload-dir", "x", "--log-level", "loud"}, "--log-level"},
		{[]string{"--payload-dir", "x", "--flush", "LATER"}, "flush type"},
		{[]string{"--workload", "nope.yaml"}, "cannot read workload"},
		{[]string{"--payload-dir", "x", "--duration", "0s"}, "--duration 0s: must be positive"},
		{[]string{"--payload-dir", "x", "--duration", "-1s"}, "--duration -1s: must be positive"},
	} {
		code, _, stderr := run(t.Context(), tt.args...)
		if code != exitCantRun || !strings.Contains(stderr, tt.want) {
			t.Errorf("%q: exit %d, stderr %q; want %d and %q", tt.args, code, stderr, exitCantRun, tt.want)
		}
	}
}

func TestHelp(t *testing.T) {
	code, stdout, _ := run(t.Context(), "--help")
	if code != exitOK {
		t.Fatalf("exit %d", code)
	}
	for _, flag := range []string{"--workload", "--payload-dir", "--duration", "--warmup", "--verify", "--progress-interval",
		"--json", "-n, --namesrv", "--no-create-topic", "--topic-prefix", "--keep-data", "--flush", "--segment-size"} {
		if !strings.Contains(stdout, flag) {
			t.Errorf("help lacks %s", flag)
		}
	}
}

func TestParseSize(t *testing.T) {
	for in, want := range map[string]int64{
		"65536": 65536, "64K": 64 << 10, "64KiB": 64 << 10, "64kb": 64 << 10, "128M": 128 << 20, "1G": 1 << 30, "2GB": 2 << 30,
	} {
		if got, err := parseSize(in); err != nil || got != want {
			t.Errorf("parseSize(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
	for _, in := range []string{"", "0", "-1", "M", "1T", "1.5G", "99999999999G"} {
		if got, err := parseSize(in); err == nil {
			t.Errorf("parseSize(%q) = %d, want an error", in, got)
		}
	}
}

// TestReplay runs the command on a small payload directory against the embedded cluster.
func TestReplay(t *testing.T) {
	dir := t.TempDir()
	var b strings.Builder
	for i := range 500 {
		fmt.Fprintf(&b, "line %d\n", i)
	}
	if err := os.WriteFile(filepath.Join(dir, "a.log"), []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	jsonPath := filepath.Join(t.TempDir(), "out.json")
	code, stdout, stderr := run(t.Context(), "--payload-dir", dir, "--verify", "--json", jsonPath, "--segment-size", "16M")
	if code != exitOK {
		t.Fatalf("exit %d\nstdout:\n%s\nstderr:\n%s", code, stdout, stderr)
	}
	if !strings.HasSuffix(stdout, "lost=0 duplicated=0 reordered=0 corrupted=0 phantom=0\n") {
		t.Fatalf("stdout:\n%s", stdout)
	}
	var res struct {
		MessagesSent, MessagesConsumed int64
		Passed                         bool
	}
	data, err := os.ReadFile(jsonPath)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(data, &res); err != nil || res.MessagesSent != 500 || res.MessagesConsumed != 500 || !res.Passed {
		t.Fatalf("JSON %+v, %v", res, err)
	}
}

// TestInterrupt: a cancelled context (SIGINT) ends the test early; the run drains and
// still prints the summary.
func TestInterrupt(t *testing.T) {
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	time.AfterFunc(time.Second, cancel)
	code, stdout, stderr := run(ctx, "--workload", "../../bench/workloads/1-topic-1-partition-1kb.yaml", "--duration", "1h",
		"--verify", "--progress-interval", "200ms", "--segment-size", "64M")
	if code != exitOK || !strings.Contains(stdout, "interrupted") || !strings.Contains(stdout, "lost=0 duplicated=0") {
		t.Fatalf("exit %d\nstdout:\n%s\nstderr:\n%s", code, stdout, stderr)
	}
}
