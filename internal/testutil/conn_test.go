package testutil

import (
	"io"
	"net"
	"sync"
	"sync/atomic"
	"testing"
)

// TestFloodWaitClosedPeak: Flood's connections write their junk, a server that reads and
// closes them is seen closing by WaitClosed, and Peak saw the most open at once.
func TestFloodWaitClosedPeak(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	var open, got atomic.Int64
	release := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := 0; i < 4; i++ {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			open.Add(1)
			go func() {
				defer open.Add(-1)
				defer c.Close()
				b := make([]byte, 1)
				if _, err := io.ReadFull(c, b); err == nil {
					got.Add(1)
				}
				<-release
			}()
		}
	}()
	sampledAll := make(chan struct{}) // closed once Peak has sampled all four open
	var once sync.Once
	peak := Peak(func() int {
		n := int(open.Load())
		if n == 4 {
			once.Do(func() { close(sampledAll) })
		}
		return n
	})
	conns := Flood(t, ln.Addr().String(), 4, [][]byte{{1}, {2}})
	Eventually(t, "every connection served", func() bool { return got.Load() == 4 })
	<-sampledAll // a loaded machine may run the sampler late; the connections wait for it
	close(release)
	for _, nc := range conns {
		WaitClosed(t, nc, "flooded")
	}
	<-done
	Eventually(t, "every connection closed", func() bool { return open.Load() == 0 })
	if p := peak(); p != 4 {
		t.Fatalf("peak %d, want 4", p)
	}
	if HeapInUse() == 0 {
		t.Fatal("no heap in use")
	}
}
