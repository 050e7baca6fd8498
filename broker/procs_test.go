package broker

import (
	"runtime"
	"testing"
)

// TestReserveLoopProcs: each running broker adds one P per event loop to GOMAXPROCS, and the
// value before the first broker comes back once the last one stopped; a broker with
// reserveLoopProcs=false leaves GOMAXPROCS alone.
func TestReserveLoopProcs(t *testing.T) {
	base := runtime.GOMAXPROCS(0)
	cfg := testConfig(t.TempDir())
	cfg.NumEventLoop = 3
	b1 := startBroker(t, cfg)
	// Each broker holds a P per event loop and one for gnet's accepting reactor.
	if got := runtime.GOMAXPROCS(0); got != base+4 {
		t.Fatalf("one broker of 3 loops: GOMAXPROCS %d, want %d", got, base+4)
	}
	cfg2 := testConfig(t.TempDir())
	cfg2.NumEventLoop = 2
	b2 := startBroker(t, cfg2)
	if got := runtime.GOMAXPROCS(0); got != base+7 {
		t.Fatalf("two brokers of 3+2 loops: GOMAXPROCS %d, want %d", got, base+7)
	}
	cfg3 := testConfig(t.TempDir())
	cfg3.ReserveLoopProcs = false
	b3 := startBroker(t, cfg3)
	if got := runtime.GOMAXPROCS(0); got != base+7 {
		t.Fatalf("reserveLoopProcs=false changed GOMAXPROCS to %d, want %d", got, base+7)
	}
	if err := b3.Close(); err != nil {
		t.Fatal(err)
	}
	if err := b1.Close(); err != nil {
		t.Fatal(err)
	}
	if got := runtime.GOMAXPROCS(0); got != base+3 {
		t.Fatalf("after the first broker stopped: GOMAXPROCS %d, want %d", got, base+3)
	}
	if err := b2.Close(); err != nil {
		t.Fatal(err)
	}
	if got := runtime.GOMAXPROCS(0); got != base {
		t.Fatalf("after every broker stopped: GOMAXPROCS %d, want %d as before", got, base)
	}
}
