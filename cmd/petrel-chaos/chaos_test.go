package main

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/petrel-mq/petrel/internal/netns"
	"github.com/petrel-mq/petrel/internal/testutil"
)

// chaosTestBudget is the wall time the whole test may take, the build included.
const chaosTestBudget = 5 * time.Minute

// chaosFinishReserve is what the run keeps of its budget for the end: the final heal, the
// bench's drain and report, the log checksums and the teardown.
const chaosFinishReserve = 80 * time.Second

// canMakeNamespaces tries what the harness needs: two namespaces, a bridge, a veth pair and an
// iptables rule; it removes them again.
func canMakeNamespaces() error {
	if os.Geteuid() != 0 {
		return fmt.Errorf("not root (uid %d)", os.Geteuid())
	}
	for _, tool := range []string{"ip", "iptables-restore"} {
		if _, err := exec.LookPath(tool); err != nil {
			return err
		}
	}
	// Not the harness's prefix: a run's stale cleanup must not take this for a dead run's.
	prefix := fmt.Sprintf("chaos-check-%d-", os.Getpid())
	br, n := prefix+"br", prefix+"n"
	defer func() {
		_ = netns.Delete(n)
		_ = netns.Delete(br)
	}()
	for _, step := range []func() error{
		func() error { return netns.Add(br) },
		func() error { return netns.AddBridge(br, "br0") },
		func() error { return netns.Add(n) },
		func() error {
			return netns.AddVeth(br, "br0", "v-n", n, "eth0", netip.MustParsePrefix("10.215.0.1/24"))
		},
		func() error { return netns.InitFilter(n) },
		func() error { return netns.Block(n, netip.MustParseAddr("10.215.0.2")) },
	} {
		if err := step(); err != nil {
			return err
		}
	}
	return nil
}

var verdictRE = regexp.MustCompile(`(?m)^chaos: (PASS|FAIL) .*$`)

// TestChaos builds the binaries and runs ten fault cycles with short holds against a real
// cluster in network namespaces, under the bench's verification, and wants a PASS.
func TestChaos(t *testing.T) {
	if testing.Short() {
		t.Skip("chaos: skipped under -short (a fault-injection run of several minutes)")
	}
	if err := canMakeNamespaces(); err != nil {
		t.Skip("chaos: cannot create network namespaces: " + err.Error())
	}
	began := time.Now()
	deadline := began.Add(chaosTestBudget)
	if d, ok := t.Deadline(); ok && d.Before(deadline) {
		deadline = d.Add(-10 * time.Second)
	}
	ctx, cancel := context.WithDeadline(context.Background(), deadline)
	defer cancel()

	repo, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	bin := t.TempDir()
	// Without -race: the test measures the cluster, not the race detector's slowdown.
	build := exec.CommandContext(ctx, "go", "build", "-o", bin+string(filepath.Separator),
		"./cmd/petrel-namesrv", "./cmd/petrel-broker", "./cmd/petrelctl", "./cmd/petrel-bench", "./cmd/petrel-chaos")
	build.Dir = repo
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	built := time.Since(began)

	// The run stops injecting when its budget is used up (a problem: the verdict is FAIL), so
	// that it always finishes and cleans up inside the test's.
	budget := time.Until(deadline) - chaosFinishReserve
	if budget < time.Minute {
		t.Fatalf("chaos: only %v left after the build (%v): too little for 10 cycles", budget, built)
	}
	args := []string{
		"--bin", bin, "--repo", repo, "--cycles", "10", "--hold", "500ms-2s", "--settle", "500ms", "--median-min-samples", "3",
		"--health-timeout", "45s", "--flow-timeout", "15s", "--drain-timeout", "60s", "--budget", budget.Round(time.Second).String(),
		"--store-size", "1GiB",
	}
	var out testutil.SyncBuffer
	run := exec.CommandContext(ctx, filepath.Join(bin, "petrel-chaos"), args...)
	run.Stdout, run.Stderr = &out, &out
	// On the deadline the harness gets SIGTERM, stops its processes and removes its
	// namespaces; SIGKILL only if it takes longer than that.
	run.Cancel = func() error { return run.Process.Signal(syscall.SIGTERM) }
	run.WaitDelay = 30 * time.Second
	runErr := run.Run()
	took := time.Since(began)
	text := out.String()
	verdict := verdictRE.FindString(text)
	t.Logf("petrel-chaos %s (build %v, total %v):\n%s", strings.Join(args, " "), built.Round(time.Second), took.Round(time.Second), text)
	switch {
	case verdict == "":
		t.Fatalf("chaos: no verdict (%v after %v)", runErr, took.Round(time.Second))
	case !strings.HasPrefix(verdict, "chaos: PASS"):
		t.Fatalf("%s", verdict)
	case runErr != nil:
		t.Fatalf("chaos: PASS but %v", runErr)
	}
}
