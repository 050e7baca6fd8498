package broker

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/petrel-mq/petrel/internal/testutil"
	"github.com/petrel-mq/petrel/protocol"
	"github.com/petrel-mq/petrel/protocol/rpc"
)

// closedWithin reports whether the server closes nc within d.
func closedWithin(t *testing.T, nc net.Conn, d time.Duration) bool {
	t.Helper()
	_ = nc.SetReadDeadline(time.Now().Add(d))
	_, err := io.ReadAll(nc)
	if ne, ok := err.(net.Error); ok && ne.Timeout() {
		return false
	}
	return true
}

// partialFrame returns the prefix of a send frame announcing bodyLen bytes, plus sent bytes of
// that body.
func partialFrame(bodyLen, sent int) []byte {
	p := make([]byte, 16+sent)
	binary.BigEndian.PutUint32(p[0:], uint32(12+bodyLen))
	binary.BigEndian.PutUint16(p[4:], 10)
	p[7] = 1
	binary.BigEndian.PutUint32(p[8:], 1)
	return p
}

func TestMaxConnections(t *testing.T) {
	cfg := testConfig(t.TempDir())
	cfg.MaxConnections = 3
	b := startBroker(t, cfg)
	defer b.Close()
	var open []net.Conn
	defer func() {
		for _, c := range open {
			c.Close()
		}
	}()
	for i := 0; i < 3; i++ {
		nc, err := net.Dial("tcp", b.Addr())
		if err != nil {
			t.Fatal(err)
		}
		open = append(open, nc)
	}
	time.Sleep(100 * time.Millisecond)
	extra, err := net.Dial("tcp", b.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer extra.Close()
	if !closedWithin(t, extra, 2*time.Second) {
		t.Fatal("a connection over maxConnections stayed open")
	}
	// Freeing a slot lets a new client in, and it is served.
	open[0].Close()
	open = open[1:]
	deadline := time.Now().Add(3 * time.Second)
	for {
		c := dial(t, b.Addr())
		if _, err := c.Call(ctx5s(t), 21 /* GET_ALL_TOPIC_CONFIG */, nil, nil); err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("no connection accepted after one closed")
		}
		c.Close()
		time.Sleep(50 * time.Millisecond)
	}
}

func TestIncompleteFramesBudget(t *testing.T) {
	cfg := testConfig(t.TempDir())
	cfg.MaxFrameSize = 512 << 10
	cfg.MaxInboundBufferedBytes = 1 << 20
	b := startBroker(t, cfg)
	defer b.Close()
	good := dial(t, b.Addr())
	createTopic(t, good, "B", 1)
	var conns []net.Conn
	defer func() {
		for _, c := range conns {
			c.Close()
		}
	}()
	closed := 0
	for i := 0; i < 4; i++ { // 4 x 400 KiB of incomplete 500 KiB frames: over the 1 MiB budget
		nc, err := net.Dial("tcp", b.Addr())
		if err != nil {
			t.Fatal(err)
		}
		conns = append(conns, nc)
		if _, err := nc.Write(partialFrame(500<<10, 400<<10)); err != nil {
			closed++
		}
		time.Sleep(50 * time.Millisecond)
	}
	for _, nc := range conns {
		if closedWithin(t, nc, 300*time.Millisecond) {
			closed++
		}
	}
	if closed == 0 {
		t.Fatal("1.6 MiB of incomplete frames buffered under a 1 MiB budget")
	}
	if got := b.inboundPartial.Load(); got > cfg.MaxInboundBufferedBytes {
		t.Fatalf("%d bytes of incomplete frames still buffered", got)
	}
	send(t, good, "B", 0, "still served")
}

func TestStalledFrameClosed(t *testing.T) {
	cfg := testConfig(t.TempDir())
	cfg.FrameReadTimeout = 300 * time.Millisecond
	b := startBroker(t, cfg)
	defer b.Close()
	nc, err := net.Dial("tcp", b.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	if _, err := nc.Write(partialFrame(1000, 10)); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	if !closedWithin(t, nc, 3*time.Second) {
		t.Fatal("a connection stuck on an incomplete frame stayed open")
	}
	if d := time.Since(start); d < 250*time.Millisecond {
		t.Fatalf("closed after %v, before the frame read timeout", d)
	}
	// A slow but steady sender of whole frames is not closed.
	c := dial(t, b.Addr())
	createTopic(t, c, "S", 1)
	for i := 0; i < 5; i++ {
		send(t, c, "S", 0, "slow")
		time.Sleep(150 * time.Millisecond)
	}
}

// TestGracefulShutdownRefusesCleanly: requests that reach a stopping broker are answered
// SHUTTING_DOWN (a definite "not stored"), and connections close only once clients went quiet,
// so no pipelined request is left with an unknown outcome by a reset.
func TestGracefulShutdownRefusesCleanly(t *testing.T) {
	b := startBroker(t, testConfig(t.TempDir()))
	c := dial(t, b.Addr())
	createTopic(t, c, "G", 2)
	type outcome struct{ ok, refused, unknown int }
	results := make(chan error, 1<<16)
	stop := make(chan struct{})
	done := make(chan struct{})
	var refused atomic.Bool
	go func() { // a pipelining producer that stops sending once refused, as clients back off
		defer close(done)
		for !refused.Load() {
			select {
			case <-stop:
				return
			default:
			}
			for j := 0; j < 32; j++ {
				c.CallAsync(10, nil, buildBatch("G", int32(j%2), "m"), func(resp *rpc.Response, err error) {
					resp.Release()
					if errors.Is(err, protocol.StatusShuttingDown) {
						refused.Store(true)
					}
					results <- err
				})
			}
			time.Sleep(time.Millisecond)
		}
	}()
	time.Sleep(200 * time.Millisecond)
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	close(stop)
	<-done
	time.Sleep(100 * time.Millisecond)
	var o outcome
	for len(results) > 0 {
		err := <-results
		switch {
		case err == nil:
			o.ok++
		case errors.Is(err, protocol.StatusShuttingDown):
			o.refused++
		default:
			o.unknown++
			t.Logf("unknown outcome: %v", err)
		}
	}
	if o.ok == 0 || o.refused == 0 || o.unknown != 0 {
		t.Fatalf("outcomes %+v: want successes, clean refusals and no unknown outcome", o)
	}
}

// TestDiskFullWarningRateLimited: while the disk is full every send is refused with DISK_FULL,
// but the broker logs "append failed" about once a second, not once per refused send, and the
// next line counts the ones it skipped.
func TestDiskFullWarningRateLimited(t *testing.T) {
	var full atomic.Bool
	testPreallocate = func(f *os.File, size int64) error {
		if full.Load() {
			return fmt.Errorf("cannot allocate %d bytes: %w", size, syscall.ENOSPC)
		}
		return f.Truncate(size)
	}
	defer func() { testPreallocate = nil }()
	var logs testutil.SyncBuffer
	cfg := testConfig(t.TempDir())
	cfg.MappedFileSizeCommitLog = 64 << 10
	b := startBrokerLogging(t, cfg, slogTo(&logs))
	defer b.Close()
	c := dial(t, b.Addr())
	createTopic(t, c, "Full", 1)
	send(t, c, "Full", 0, "before the disk filled up")
	full.Store(true)

	body := strings.Repeat("x", 8<<10)
	refused := 0
	for i := 0; refused < 300; i++ {
		if i > 1000 {
			t.Fatalf("only %d of %d sends refused with the disk full", refused, i)
		}
		_, err := sendBatch(c, buildBatch("Full", 0, body))
		if err == nil {
			continue
		}
		if st := statusOf(err); st != protocol.StatusDiskFull {
			t.Fatalf("send with the disk full: %v (status %v), want DISK_FULL", err, st)
		}
		refused++
	}
	lines := func() int { return strings.Count(logs.String(), `msg="append failed"`) }
	if n := lines(); n < 1 || n > 2 {
		t.Fatalf("%d refused sends logged %d \"append failed\" lines, want 1 (2 across a second boundary):\n%s", refused, n, logs.String())
	}
	time.Sleep(1100 * time.Millisecond)
	if _, err := sendBatch(c, buildBatch("Full", 0, body)); statusOf(err) != protocol.StatusDiskFull {
		t.Fatalf("send with the disk full: %v, want DISK_FULL", err)
	}
	if !strings.Contains(logs.String(), "similar_not_logged=") {
		t.Fatalf("the next \"append failed\" line does not count the skipped ones:\n%s", logs.String())
	}
}
