package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/petrel-mq/petrel/broker"
	"github.com/petrel-mq/petrel/internal/testcluster"
	"github.com/petrel-mq/petrel/internal/testutil"
)

func TestMain(m *testing.M) { testutil.VerifyTestMain(m) }

func run(ctx context.Context, args ...string) (code int, stdout, stderr string) {
	var out, errOut testutil.SyncBuffer
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
		{[]string{"--payload-dir", "x", "--slaves", "9"}, "slaves 9: want 0..8"},
		{[]string{"--payload-dir", "x", "--slaves", "-1"}, "slaves -1"},
		{[]string{"--payload-dir", "x", "--broker-role", "SLAVE"}, "broker role"},
		{[]string{"--payload-dir", "x", "--read-broker-id", "-2"}, "--read-broker-id -2: must not be negative"},
		{[]string{"--payload-dir", "x", "--ha-sample-interval", "-1s"}, "--ha-sample-interval"},
		{[]string{"--payload-dir", "x", "--linger", "-1ms"}, "--linger -1ms: must not be negative"},
		{[]string{"--payload-dir", "x", "--warmup", "-1s"}, "--warmup -1s: must not be negative (0: no warm-up)"},
		{[]string{"--payload-dir", "x", "--drain-timeout", "-1s"}, "--drain-timeout -1s: must be positive"},
		{[]string{"--payload-dir", "x", "--drain-timeout", "0s"}, "--drain-timeout 0s: must be positive (leave it out to use 30s)"},
		{[]string{"--payload-dir", "x", "--progress-interval", "0s"}, "--progress-interval 0s: must be positive (leave it out to use 5s)"},
		{[]string{"--payload-dir", "x", "--progress-interval", "-1s"}, "--progress-interval -1s: must be positive"},
		{[]string{"--payload-dir", "x", "--json", "/nonexistent-dir/r.json"}, "its directory does not exist"},
		{[]string{"--payload-dir", "x", "--cpu-profile", "p", "--exec-trace", "p"}, "name the same file"},
		{[]string{"--consume-only", "--topic-id", "x"}, "consume-only needs a running cluster"},
		{[]string{"--consume-only", "-n", "127.0.0.1:1"}, "consume-only needs the topics"},
		{[]string{"--payload-dir", "x", "--topic", "t"}, "topic names are for consume-only runs"},
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
		"--json", "-n, --namesrv", "--no-create-topic", "--topic-prefix", "--keep-data", "--flush", "--segment-size",
		"--slaves", "--broker-role", "--read-broker-id", "--consume-only", "--topic", "--ha-sample-interval", "--linger"} {
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
	out := t.TempDir()
	jsonPath := filepath.Join(out, "out.json")
	profPath, tracePath := filepath.Join(out, "cpu.prof"), filepath.Join(out, "exec.trace")
	code, stdout, stderr := run(t.Context(), "--payload-dir", dir, "--verify", "--json", jsonPath, "--segment-size", "16M",
		"--cpu-profile", profPath, "--exec-trace", tracePath)
	if code != exitOK {
		t.Fatalf("exit %d\nstdout:\n%s\nstderr:\n%s", code, stdout, stderr)
	}
	if !strings.HasSuffix(stdout, "final read: master queues=8 messages=500\nlost=0 duplicated=0 reordered=0 corrupted=0 phantom=0 inconsistent=0 offsetMovedBack=0\n") {
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
	// The CPU profile is a gzipped protobuf, the trace starts with the runtime's header.
	if prof, err := os.ReadFile(profPath); err != nil || len(prof) < 2 || prof[0] != 0x1f || prof[1] != 0x8b {
		t.Fatalf("--cpu-profile wrote %d bytes (%v), want a gzipped profile", len(prof), err)
	}
	if tr, err := os.ReadFile(tracePath); err != nil || !bytes.HasPrefix(tr, []byte("go 1.")) {
		t.Fatalf("--exec-trace wrote %q... (%v), want a Go execution trace", tr[:min(len(tr), 16)], err)
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

// TestReadBrokerIDNoSuchMember: consumers pinned to a member the broker group does not have are
// refused before the run starts, instead of consuming nothing and reporting every acknowledged
// message lost.
func TestReadBrokerIDNoSuchMember(t *testing.T) {
	code, out, errOut := run(context.Background(), "--workload", "../../bench/workloads/1-topic-16-partitions-1kb.yaml",
		"--verify", "--duration", "1s", "--slaves", "0", "--read-broker-id", "1", "--drain-timeout", "1s")
	if code == 0 || !strings.Contains(errOut, "read-broker-id 1: broker group broker-a has no member with brokerId 1") || strings.Contains(out, "lost=") {
		t.Fatalf("exit %d\nstdout:\n%s\nstderr:\n%s", code, out, errOut)
	}
}

// TestConsumeOnlyAgainstSlave: against a running group (a SYNC_MASTER and one slave, started
// in-process by internal/testcluster), a verified replay, then a consume-only run reading from
// the slave alone: it returns every message and says so; a topic that does not exist cannot
// run.
func TestConsumeOnlyAgainstSlave(t *testing.T) {
	c := testcluster.New(t, testcluster.Options{}, testcluster.GroupSpec{Name: "broker-a", Role: broker.RoleSyncMaster, Slaves: 1})
	// The run starts once the slave is in the routes and replicating.
	c.Group("broker-a").WaitInSync()
	nsAddr := c.NamesrvAddr()

	dir := t.TempDir()
	var b strings.Builder
	for i := range 2000 {
		fmt.Fprintf(&b, "log line %d\n", i)
	}
	if err := os.WriteFile(filepath.Join(dir, "a.log"), []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	code, stdout, stderr := run(t.Context(), "-n", nsAddr, "--payload-dir", dir, "--verify", "--topic-id", "co")
	if code != exitOK || !strings.Contains(stdout, "replication       broker-a slave 1 ") {
		t.Fatalf("producing run: exit %d\nstdout:\n%s\nstderr:\n%s", code, stdout, stderr)
	}
	jsonPath := filepath.Join(t.TempDir(), "co.json")
	code, stdout, stderr = run(t.Context(), "-n", nsAddr, "--consume-only", "--topic", "petrel-bench-co-0", "--read-broker-id", "1", "--json", jsonPath)
	if code != exitOK || !strings.Contains(stdout, "master pulls=0 msgs=0 notHere=0 | slave 1 pulls=") ||
		!strings.Contains(stdout, "PASS: 2000 of 2000 expected consumed") || !strings.HasSuffix(stdout, "gaps=0 duplicated=0 reordered=0 corrupted=0 offsetMovedBack=0 (consume-only: no producer record, acknowledged-but-missing messages are not detectable)\n") {
		t.Fatalf("consume-only: exit %d\nstdout:\n%s\nstderr:\n%s", code, stdout, stderr)
	}
	var res struct {
		Mode             string
		ExpectedMessages int64
		MessagesConsumed int64
		ReadBrokerID     int64
		Passed           bool
		ServedBy         []struct{ BrokerID, Messages int64 }
	}
	data, err := os.ReadFile(jsonPath)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(data, &res); err != nil || res.Mode != "consume-only" || res.ExpectedMessages != 2000 || res.MessagesConsumed != 2000 ||
		res.ReadBrokerID != 1 || !res.Passed || len(res.ServedBy) != 2 || res.ServedBy[1].Messages != 2000 {
		t.Fatalf("JSON %+v, %v", res, err)
	}
	// A producing run pinned to slave 1: its final read checks the master and slave 1.
	code, stdout, stderr = run(t.Context(), "-n", nsAddr, "--payload-dir", dir, "--verify", "--topic-id", "pinned", "--read-broker-id", "1")
	if code != exitOK || !strings.HasSuffix(stdout, "final read: master queues=8 messages=2000; slave 1 queues=8 messages=2000\n"+
		"lost=0 duplicated=0 reordered=0 corrupted=0 phantom=0 inconsistent=0 offsetMovedBack=0\n") {
		t.Fatalf("producing run pinned to slave 1: exit %d\nstdout:\n%s\nstderr:\n%s", code, stdout, stderr)
	}
	code, _, stderr = run(t.Context(), "-n", nsAddr, "--consume-only", "--topic", "nosuch")
	if code != exitCantRun || !strings.Contains(stderr, "nosuch") {
		t.Fatalf("missing topic: exit %d, stderr %s", code, stderr)
	}
}
