package testutil

import (
	"errors"
	"fmt"
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

// FloodResult is what a connection flood measured (FloodUntilClosed): the heap in use before,
// while the n connections were open and after, in bytes, and the highest connection count the
// server reported while they were open.
type FloodResult struct {
	Before, During, After uint64
	Conns, Peak           int
}

// FloodUntilClosed floods addr with n connections as Flood does, waits until the server has
// closed every one (WaitClosed), then calls settled (nil for none: e.g. wait for the server's
// own count to drop, or serve a real client) and measures the heap again. count is the server's
// connection count, sampled (Peak) from before the first dial until settled returns.
func FloodUntilClosed(t interface {
	TB
	Cleanup(func())
}, addr string, n int, junk [][]byte, count func() int, settled func()) FloodResult {
	t.Helper()
	r := FloodResult{Before: HeapInUse(), Conns: n}
	peak := Peak(count)
	ncs := Flood(t, addr, n, junk)
	r.During = HeapInUse()
	for i, nc := range ncs {
		WaitClosed(t, nc, fmt.Sprintf("junk connection %d", i))
	}
	if settled != nil {
		settled()
	}
	r.Peak = peak()
	r.After = HeapInUse()
	return r
}

// Check logs r and fails t when more than maxConns connections were open at once or the heap
// grew by more than slack bytes.
func (r FloodResult) Check(t interface {
	TB
	Logf(format string, args ...any)
}, maxConns int, slack uint64) {
	t.Helper()
	t.Logf("heap in use: %d KiB before, %d KiB with %d connections opened, %d KiB after; peak connections %d (cap %d)",
		r.Before>>10, r.During>>10, r.Conns, r.After>>10, r.Peak, maxConns)
	if r.Peak > maxConns {
		t.Fatalf("%d connections open at once, cap %d", r.Peak, maxConns)
	}
	if r.After > r.Before+slack {
		t.Fatalf("heap grew from %d to %d bytes", r.Before, r.After)
	}
}

// SilentListener returns the address of a loopback listener that accepts every connection and
// never reads or answers on it: a server that a call must not have reached (a client's dial to
// it succeeds, and counts), or one that hangs. It and its connections close when the test ends.
func SilentListener(t interface {
	TB
	Cleanup(func())
}) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("silent listener: %v", err)
	}
	var conns []net.Conn // the accepting goroutine's until it returns
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			nc, err := ln.Accept()
			if err != nil {
				return
			}
			conns = append(conns, nc)
		}
	}()
	t.Cleanup(func() {
		_ = ln.Close()
		<-done
		for _, nc := range conns {
			_ = nc.Close()
		}
	})
	return ln.Addr().String()
}
