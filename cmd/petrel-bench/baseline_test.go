package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"testing"

	"github.com/petrel-mq/petrel/bench"
)

// TestBaselineHiccup runs the hiccup meter through the command line: its line, its JSON, and
// GOMAXPROCS given back afterwards. Nothing about the machine's lateness is asserted.
func TestBaselineHiccup(t *testing.T) {
	procs := runtime.GOMAXPROCS(0)
	file := filepath.Join(t.TempDir(), "h.json")
	code, stdout, stderr := run(t.Context(), "baseline", "hiccup", "--duration", "200ms", "--json", file)
	if code != exitOK {
		t.Fatalf("exit %d, stderr %q", code, stderr)
	}
	line := regexp.MustCompile(`^hiccup: wake-up lateness over 0\.[0-9]s at a 1ms interval: p50 [0-9.]+ (us|ms) p99 [0-9.]+ (us|ms) ` +
		`p99\.9 [0-9.]+ (us|ms) max [0-9.]+ (us|ms) \([1-9][0-9]* samples\)$`)
	if !line.MatchString(strings.TrimSuffix(stdout, "\n")) {
		t.Errorf("output %q", stdout)
	}
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	var r bench.HiccupResult
	if err := json.Unmarshal(b, &r); err != nil {
		t.Fatal(err)
	}
	if r.IntervalMs != 1 || r.Samples < 1 || r.P50Ms < 0 || r.MaxMs < r.P999Ms {
		t.Errorf("JSON %s", b)
	}
	for _, key := range []string{"intervalMs", "durationSeconds", "samples", "p50Ms", "p90Ms", "p99Ms", "p999Ms", "p9999Ms", "maxMs"} {
		if !strings.Contains(string(b), `"`+key+`":`) {
			t.Errorf("JSON lacks %s: %s", key, b)
		}
	}
	if got := runtime.GOMAXPROCS(0); got != procs {
		t.Errorf("GOMAXPROCS %d after the command, was %d", got, procs)
	}
}

func TestBaselineHiccupUsageErrors(t *testing.T) {
	for _, tt := range []struct {
		args []string
		want string
	}{
		{[]string{"--interval", "0s"}, "--interval 0s and --duration 10s must be positive"},
		{[]string{"--duration", "-1s"}, "must be positive"},
		// A sleep is not interrupted: a long one would outlast --duration and any signal.
		{[]string{"--interval", "1h", "--duration", "2s"}, "--interval 1h0m0s: at most 1s"},
		{[]string{"--interval", "2s", "--duration", "1s"}, "at most --duration 1s"},
		{[]string{"--json", "/nonexistent-dir/h.json"}, "its directory does not exist"},
		{[]string{"extra"}, "unknown command"},
	} {
		code, _, stderr := run(t.Context(), append([]string{"baseline", "hiccup"}, tt.args...)...)
		if code != exitCantRun || !strings.Contains(stderr, tt.want) {
			t.Errorf("%q: exit %d, stderr %q; want %d and %q", tt.args, code, stderr, exitCantRun, tt.want)
		}
	}
}
