// Package testutil holds what Petrel's tests share: waiting until a condition holds
// (Eventually), capturing log output that many goroutines write (SyncBuffer), picking free
// loopback ports for servers a test starts later (FreePorts), the goroutine leak check that
// every package's TestMain runs (VerifyTestMain), and what listener tests need: a flood of
// connections that never complete a request (Flood), waiting for a server to close one
// (WaitClosed), the peak of a count while it runs (Peak), the heap in use (HeapInUse), and a
// server that accepts connections and never answers (SilentListener).
//
// Only tests import it. It imports nothing of Petrel's, so that any package's tests, internal
// ones included, can use it without an import cycle.
package testutil

import (
	"testing"
	"time"

	"go.uber.org/goleak"
)

// TB is the part of testing.TB the helpers call: *testing.T, *testing.B and *rapid.T have it.
// The helpers report a failure with Fatalf, so they must run on the test's own goroutine.
type TB interface {
	Helper()
	Fatalf(format string, args ...any)
}

// DefaultWait is how long Eventually waits before it fails the test: far longer than anything a
// test waits for takes on an idle machine, so that a loaded one (two cores shared with other
// test binaries and benchmark runs) does not fail a test that is only slow. A test never
// passes sooner for a shorter wait; only a failing one ends later.
const DefaultWait = 20 * time.Second

// Eventually calls cond until it returns true, and fails t when DefaultWait passes first; what
// names the condition in the failure ("timed out after 20s waiting for <what>"). See
// EventuallyWithin for how often cond is called.
func Eventually(t TB, what string, cond func() bool) {
	t.Helper()
	EventuallyWithin(t, DefaultWait, what, cond)
}

// EventuallyWithin is Eventually with a wait of d instead of DefaultWait, for a wait that may
// take longer than it (a cluster of processes catching up) or a test that bounds its own run.
//
// cond is called at once, then again after pauses of about a twentieth of the time waited so
// far, from 1 ms up to 50 ms (pollInterval): a condition that holds soon is seen within a
// millisecond or two, and a long wait costs little CPU. So cond should report a state that
// stays once reached (a count reached, a member in sync), not one that may pass unseen between
// two calls. It is called from the caller's goroutine and may call t.Fatal itself.
func EventuallyWithin(t TB, d time.Duration, what string, cond func() bool) {
	t.Helper()
	if !poll(d, cond) {
		t.Fatalf("timed out after %v waiting for %s", d, what)
	}
}

// poll calls cond as EventuallyWithin describes until it returns true (then poll returns true)
// or d has passed since the first call (false).
func poll(d time.Duration, cond func() bool) bool {
	start := time.Now()
	for !cond() {
		waited := time.Since(start)
		if waited > d {
			return false
		}
		time.Sleep(pollInterval(waited))
	}
	return true
}

// pollInterval is the pause before the next call of an Eventually condition that has been
// waited for for waited: a twentieth of it, at least 1 ms and at most 50 ms.
func pollInterval(waited time.Duration) time.Duration {
	return min(max(waited/20, time.Millisecond), 50*time.Millisecond)
}

// leakIgnores are the goroutines VerifyTestMain accepts in every package: gnet's worker pool
// (ants) starts its purge and ticker goroutines with the first broker of the process and never
// stops them, so any test that starts a broker in-process leaves them behind.
var leakIgnores = []goleak.Option{
	goleak.IgnoreTopFunction("github.com/panjf2000/ants/v2.(*poolCommon).purgeStaleWorkers"),
	goleak.IgnoreTopFunction("github.com/panjf2000/ants/v2.(*poolCommon).ticktock"),
}

// VerifyTestMain runs the package's tests (m.Run) and exits the process: with status 1 when a
// test failed or when, after the last test, goroutines are still running that the tests
// started and never stopped (a server, a loop, a timer's callback), which it lists. It accepts
// gnet's worker pool (leakIgnores); opts add a package's own exceptions
// (goleak.IgnoreTopFunction, goleak.IgnoreAnyFunction). Call it as a package's TestMain:
//
//	func TestMain(m *testing.M) { testutil.VerifyTestMain(m) }
func VerifyTestMain(m *testing.M, opts ...goleak.Option) {
	goleak.VerifyTestMain(m, append(append([]goleak.Option{}, leakIgnores...), opts...)...)
}
