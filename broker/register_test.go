package broker

import (
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/petrel-mq/petrel/internal/testutil"
	"github.com/petrel-mq/petrel/namesrv"
)

// TestNextRegistration: the backoff of a NameServer link whose registrations fail.
func TestNextRegistration(t *testing.T) {
	cases := []struct {
		failures int
		period   time.Duration
		want     time.Duration
	}{
		{1, 30 * time.Second, registerRetry},
		{2, 30 * time.Second, 2 * registerRetry},
		{3, 30 * time.Second, 4 * registerRetry},
		{4, 30 * time.Second, 8 * registerRetry},
		{5, 30 * time.Second, registerRetryMax},
		{1000, 30 * time.Second, registerRetryMax},
		{1, 50 * time.Millisecond, 50 * time.Millisecond},
		{3, 200 * time.Millisecond, 200 * time.Millisecond},
	}
	for _, tc := range cases {
		if got := nextRegistration(tc.failures, tc.period); got != tc.want {
			t.Errorf("nextRegistration(%d, %v) = %v, want %v", tc.failures, tc.period, got, tc.want)
		}
	}
}

// resettingListener accepts connections and closes each at once, counting them: a NameServer
// that fails every registration.
type resettingListener struct {
	ln       net.Listener
	accepted atomic.Int64
	wg       sync.WaitGroup
}

func startResetting(t *testing.T) *resettingListener {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	r := &resettingListener{ln: ln}
	r.wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			r.accepted.Add(1)
			_ = c.Close()
		}
	})
	t.Cleanup(func() {
		_ = ln.Close()
		r.wg.Wait()
	})
	return r
}

// TestNameServersRegisteredApart: each NameServer is registered with on its own. While one
// fails every registration, the broker keeps trying it, and registers again with the healthy
// one only at its own times (here: never, the period being an hour), not at every retry of
// the failing one.
func TestNameServersRegisteredApart(t *testing.T) {
	healthy := namesrv.New(namesrv.Config{ListenAddr: "127.0.0.1:0", Logger: testLogger(t)})
	if err := healthy.Start(); err != nil {
		t.Fatal(err)
	}
	defer healthy.Close()
	failing := startResetting(t)
	cfg := testConfig(t.TempDir())
	cfg.NamesrvAddr = healthy.Addr() + ";" + failing.ln.Addr().String()
	cfg.RegisterNameServerPeriod = time.Hour
	b := startBroker(t, cfg)
	defer b.Close()
	lastUpdate := func() time.Time {
		for _, lb := range healthy.LiveBrokers() {
			if lb.Addr == b.Addr() {
				return lb.LastUpdate
			}
		}
		return time.Time{}
	}
	tries := func(n int64) func() bool { return func() bool { return failing.accepted.Load() >= n } }
	testutil.Eventually(t, "the first registration with the healthy NameServer", func() bool { return !lastUpdate().IsZero() })
	// Past the start (its role taken, which registers again): three tries of the failing one.
	testutil.Eventually(t, "three registrations tried with the failing NameServer", tries(3))
	before := lastUpdate()
	seen := failing.accepted.Load()
	testutil.Eventually(t, "three more tries with the failing NameServer", tries(seen+3))
	if after := lastUpdate(); !after.Equal(before) {
		t.Fatalf("the healthy NameServer was registered with again (at %v, after %v) while the other one failed", after, before)
	}
}
