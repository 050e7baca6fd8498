package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/HdrHistogram/hdrhistogram-go"
	"golang.org/x/sys/unix"
)

// Baselines measure what the machine itself can do, so a report can put Petrel's numbers next
// to the limits they run into, measured in the same run: the loopback TCP round trip (what a
// synchronous send can at best cost) and the disk's fdatasync rate (what SYNC_FLUSH without
// group commit could at best do).

// LoopbackResult is the outcome of MeasureLoopback. Latencies in µs.
type LoopbackResult struct {
	Size                        int
	RoundTrips                  int
	P50Us, P99Us, P999Us, MaxUs float64
	RoundTripsPerSec            float64
}

// MeasureLoopback sends n messages of size bytes one at a time to an echo server on 127.0.0.1
// (TCP_NODELAY, both ends in this process, a goroutine each) and measures each round trip. A
// nil ctx, or a size or count below 1, is refused before anything starts.
func MeasureLoopback(ctx context.Context, size, n int) (LoopbackResult, error) {
	if ctx == nil {
		return LoopbackResult{}, errors.New("loopback: nil context")
	}
	if size < 1 || n < 1 {
		return LoopbackResult{}, errors.New("loopback: size and count must be positive")
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return LoopbackResult{}, fmt.Errorf("cannot listen on loopback: %w", err)
	}
	defer ln.Close()
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		c, err := ln.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		buf := make([]byte, size)
		for {
			if _, err := io.ReadFull(c, buf); err != nil {
				return
			}
			if _, err := c.Write(buf); err != nil {
				return
			}
		}
	}()
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		return LoopbackResult{}, fmt.Errorf("cannot dial loopback: %w", err)
	}
	stop := context.AfterFunc(ctx, func() { _ = c.Close() })
	defer stop()
	h := hdrhistogram.New(1, 60_000_000, 3)
	msg := make([]byte, size)
	back := make([]byte, size)
	start := time.Now()
	done := 0
	for ; done < n && ctx.Err() == nil; done++ {
		t0 := time.Now()
		if _, err := c.Write(msg); err != nil {
			break
		}
		if _, err := io.ReadFull(c, back); err != nil {
			break
		}
		_ = h.RecordValue(max(time.Since(t0).Microseconds(), 1))
	}
	elapsed := time.Since(start)
	_ = c.Close()
	_ = ln.Close()
	wg.Wait()
	if done == 0 {
		return LoopbackResult{}, errors.New("loopback: no round trip completed")
	}
	return LoopbackResult{
		Size: size, RoundTrips: done,
		P50Us: float64(h.ValueAtQuantile(50)), P99Us: float64(h.ValueAtQuantile(99)),
		P999Us: float64(h.ValueAtQuantile(99.9)), MaxUs: float64(h.Max()),
		RoundTripsPerSec: float64(done) / elapsed.Seconds(),
	}, nil
}

// FsyncResult is the outcome of MeasureFdatasync.
type FsyncResult struct {
	Size        int
	Syncs       int
	SyncsPerSec float64
	P50Us       float64
	P99Us       float64
}

// MeasureFdatasync appends size-byte writes to a new file in dir, each followed by fdatasync,
// for the given duration: the rate a log without group commit could acknowledge. A nil ctx, a
// size below 1 or a duration that is not positive is refused before the file is created.
func MeasureFdatasync(ctx context.Context, dir string, size int, d time.Duration) (FsyncResult, error) {
	if ctx == nil {
		return FsyncResult{}, errors.New("fdatasync: nil context")
	}
	if size < 1 || d <= 0 {
		return FsyncResult{}, fmt.Errorf("fdatasync: size %d and duration %v must be positive", size, d)
	}
	f, err := os.CreateTemp(dir, "petrel-fsync-*")
	if err != nil {
		return FsyncResult{}, fmt.Errorf("cannot create file in %s: %w", dir, err)
	}
	name := f.Name()
	defer os.Remove(name)
	defer f.Close()
	h := hdrhistogram.New(1, 60_000_000, 3)
	buf := make([]byte, size)
	start := time.Now()
	n := 0
	for time.Since(start) < d && ctx.Err() == nil {
		t0 := time.Now()
		if _, err := f.Write(buf); err != nil {
			return FsyncResult{}, fmt.Errorf("cannot write %s: %w", filepath.Base(name), err)
		}
		if err := unix.Fdatasync(int(f.Fd())); err != nil {
			return FsyncResult{}, fmt.Errorf("cannot fdatasync %s: %w", filepath.Base(name), err)
		}
		_ = h.RecordValue(max(time.Since(t0).Microseconds(), 1))
		n++
	}
	return FsyncResult{Size: size, Syncs: n, SyncsPerSec: float64(n) / time.Since(start).Seconds(),
		P50Us: float64(h.ValueAtQuantile(50)), P99Us: float64(h.ValueAtQuantile(99))}, nil
}
