package rpc

import (
	"context"
	"encoding/binary"
	"errors"
	"io"
	"log/slog"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"github.com/petrel-mq/petrel/protocol"
)

// flakyListener fails its first accepts with a non-timeout error, as accept does when the
// process is out of file descriptors.
type flakyListener struct {
	net.Listener
	fails atomic.Int32
}

func (l *flakyListener) Accept() (net.Conn, error) {
	if l.fails.Add(-1) >= 0 {
		return nil, errors.New("accept4: too many open files")
	}
	return l.Listener.Accept()
}

func startLimited(t *testing.T, opts ServerOptions, wrap func(net.Listener) net.Listener) (*Server, string) {
	t.Helper()
	opts.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	srv := NewServer(func(*Request) Reply { return Reply{} }, opts)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	if wrap != nil {
		ln = wrap(ln)
	}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	return srv, addr
}

func callOK(t *testing.T, addr string) {
	t.Helper()
	c, err := Dial(context.Background(), addr, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	if _, err := c.Call(ctx, protocol.CodeGetBrokerClusterInfo, nil, nil); err != nil {
		t.Fatalf("call: %v", err)
	}
}

func serverClosed(nc net.Conn, d time.Duration) bool {
	_ = nc.SetReadDeadline(time.Now().Add(d))
	_, err := io.ReadAll(nc)
	var ne net.Error
	return !(errors.As(err, &ne) && ne.Timeout())
}

func framePrefix(bodyLen int) []byte {
	p := make([]byte, 16)
	binary.BigEndian.PutUint32(p, uint32(12+bodyLen))
	binary.BigEndian.PutUint16(p[4:], uint16(protocol.CodeGetBrokerClusterInfo))
	p[7] = protocol.Version
	return p
}

func TestAcceptErrorsAreRetried(t *testing.T) {
	fl := &flakyListener{}
	fl.fails.Store(3)
	_, addr := startLimited(t, ServerOptions{}, func(ln net.Listener) net.Listener { fl.Listener = ln; return fl })
	callOK(t, addr)
}

func TestMaxConns(t *testing.T) {
	_, addr := startLimited(t, ServerOptions{MaxConns: 2}, nil)
	a, _ := net.Dial("tcp", addr)
	b, _ := net.Dial("tcp", addr)
	defer a.Close()
	defer b.Close()
	time.Sleep(50 * time.Millisecond)
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if !serverClosed(c, 2*time.Second) {
		t.Fatal("third connection not closed")
	}
	a.Close()
	time.Sleep(50 * time.Millisecond)
	callOK(t, addr)
}

func TestFrameBufferBudget(t *testing.T) {
	_, addr := startLimited(t, ServerOptions{MaxFrameSize: 4 << 20, MaxBufferedBytes: 1 << 20}, nil)
	closed := 0
	var conns []net.Conn
	for i := 0; i < 3; i++ { // 3 x 600 KiB of a 3 MiB frame each: over the 1 MiB budget
		nc, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer nc.Close()
		conns = append(conns, nc)
		if _, err := nc.Write(append(framePrefix(3<<20), make([]byte, 600<<10)...)); err != nil {
			closed++
		}
	}
	for _, nc := range conns {
		if serverClosed(nc, 500*time.Millisecond) {
			closed++
		}
	}
	if closed == 0 {
		t.Fatal("1.8 MiB of incomplete frames held under a 1 MiB budget")
	}
	callOK(t, addr)
}

func TestFrameReadTimeout(t *testing.T) {
	_, addr := startLimited(t, ServerOptions{FrameReadTimeout: 200 * time.Millisecond}, nil)
	nc, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	if _, err := nc.Write(append(framePrefix(100), 1, 2, 3)); err != nil {
		t.Fatal(err)
	}
	if !serverClosed(nc, 2*time.Second) {
		t.Fatal("stalled frame not closed")
	}
	// An idle connection between whole frames is not closed by the frame timeout.
	c, err := Dial(context.Background(), addr, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	for i := 0; i < 2; i++ {
		if _, err := c.Call(context.Background(), protocol.CodeGetBrokerClusterInfo, nil, nil); err != nil {
			t.Fatalf("call %d: %v", i, err)
		}
		time.Sleep(400 * time.Millisecond)
	}
}
