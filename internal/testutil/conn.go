package testutil

import (
	"errors"
	"io"
	"net"
	"runtime"
	"sync"
	"sync/atomic"
	"time"
)

// WaitClosed waits, as Eventually does, until the other end closes nc (reading and discarding
// whatever it sends first), and fails t when DefaultWait passes first; what names the
// connection in the failure. A reset counts as closed.
func WaitClosed(t TB, nc net.Conn, what string) {
	t.Helper()
	_ = nc.SetReadDeadline(time.Now().Add(DefaultWait))
	_, err := io.Copy(io.Discard, nc)
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		t.Fatalf("%s: the connection is still open after %v", what, DefaultWait)
	}
}

// Flood opens n connections to addr, the i-th writing junk[i%len(junk)] (nothing for a nil
// one) and then nothing more: a flood of clients that never complete a request. A connection
// the server refuses may be closed before its write; that is not an error. The connections
// are closed when the test ends.
func Flood(t interface {
	TB
	Cleanup(func())
}, addr string, n int, junk [][]byte) []net.Conn {
	t.Helper()
	conns := make([]net.Conn, 0, n)
	t.Cleanup(func() {
		for _, nc := range conns {
			_ = nc.Close()
		}
	})
	for i := 0; i < n; i++ {
		nc, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatalf("dial %s (connection %d): %v", addr, i, err)
		}
		conns = append(conns, nc)
		if b := junk[i%len(junk)]; b != nil {
			_, _ = nc.Write(b)
		}
	}
	return conns
}

// HeapInUse returns the heap's bytes in use after a collection: what a test measures before
// and after a flood to see that memory returns to where it was.
func HeapInUse() uint64 {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapInuse
}

// Peak samples count every millisecond on a goroutine of its own until the returned function
// is called, which stops it and returns the highest count seen (a connection count that must
// never pass a cap).
func Peak(count func() int) (stop func() int) {
	var peak atomic.Int64
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		t := time.NewTicker(time.Millisecond)
		defer t.Stop()
		for {
			if n := int64(count()); n > peak.Load() {
				peak.Store(n)
			}
			select {
			case <-done:
				return
			case <-t.C:
			}
		}
	}()
	return func() int {
		close(done)
		wg.Wait()
		if n := int64(count()); n > peak.Load() {
			peak.Store(n)
		}
		return int(peak.Load())
	}
}
