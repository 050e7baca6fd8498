package failpoint

import (
	"os"
	"os/exec"
	"syscall"
	"testing"
)

// TestKillsAtCount re-runs this test binary as a child with a failpoint armed for its third
// hit and checks that the child dies of SIGKILL exactly there.
func TestKillsAtCount(t *testing.T) {
	if os.Getenv("FAILPOINT_CHILD") == "1" {
		for i := 1; i <= 5; i++ {
			os.Stdout.WriteString("hit\n")
			Inject("test-point")
		}
		os.Exit(0)
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestKillsAtCount$")
	cmd.Env = append(os.Environ(), "FAILPOINT_CHILD=1", "PETREL_FAILPOINTS=other=1,test-point=3")
	out, err := cmd.Output()
	ws, ok := cmd.ProcessState.Sys().(syscall.WaitStatus)
	if err == nil || !ok || !ws.Signaled() || ws.Signal() != syscall.SIGKILL {
		t.Fatalf("child ended with %v (%v), want SIGKILL", cmd.ProcessState, err)
	}
	if string(out) != "hit\nhit\nhit\n" {
		t.Fatalf("child output %q, want three hits before the kill", out)
	}
}

func TestDisabledIsNoop(t *testing.T) {
	if enabled.Load() {
		t.Skip("PETREL_FAILPOINTS is set in this environment")
	}
	for i := 0; i < 10; i++ {
		Inject("anything")
	}
}
