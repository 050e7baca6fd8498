package faultproxy

import (
	"bytes"
	"errors"
	"io"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/petrel-mq/petrel/internal/testutil"
)

func TestMain(m *testing.M) { testutil.VerifyTestMain(m) }

const (
	// waitTimeout bounds every wait for something that must happen.
	waitTimeout = 5 * time.Second
	// stallTimeout is how long a read must stay blocked to count as stalled.
	stallTimeout = 200 * time.Millisecond
)

// server is a loopback TCP server for the proxy to forward to.
type server struct {
	ln       net.Listener
	wg       sync.WaitGroup
	received atomic.Int64  // bytes read from all connections
	ended    chan struct{} // one value per connection whose handler returned
	once     sync.Once

	mu    sync.Mutex
	conns map[net.Conn]struct{}
}

// startServer starts a server that writes greeting to each new connection and then echoes
// everything it reads until EOF or an error, then closes the connection.
func startServer(t *testing.T, greeting string) *server {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := &server{ln: ln, ended: make(chan struct{}, 100), conns: map[net.Conn]struct{}{}}
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			s.mu.Lock()
			s.conns[c] = struct{}{}
			s.mu.Unlock()
			s.wg.Add(1)
			go s.handle(c, greeting)
		}
	}()
	t.Cleanup(s.close)
	return s
}

func (s *server) handle(c net.Conn, greeting string) {
	defer s.wg.Done()
	defer func() {
		s.mu.Lock()
		delete(s.conns, c)
		s.mu.Unlock()
		_ = c.Close()
		s.ended <- struct{}{}
	}()
	if greeting != "" {
		if _, err := c.Write([]byte(greeting)); err != nil {
			return
		}
	}
	buf := make([]byte, 4096)
	for {
		n, err := c.Read(buf)
		s.received.Add(int64(n))
		if n > 0 {
			if _, werr := c.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

func (s *server) addr() string { return s.ln.Addr().String() }

// close stops the server and waits for its goroutines.
func (s *server) close() {
	s.once.Do(func() {
		_ = s.ln.Close()
		s.mu.Lock()
		for c := range s.conns {
			_ = c.Close()
		}
		s.mu.Unlock()
		s.wg.Wait()
	})
}

// waitEnded waits until n more server connections have ended.
func (s *server) waitEnded(t *testing.T, n int) {
	t.Helper()
	timer := time.NewTimer(waitTimeout)
	defer timer.Stop()
	for i := 0; i < n; i++ {
		select {
		case <-s.ended:
		case <-timer.C:
			t.Fatalf("only %d of %d server connections ended within %v", i, n, waitTimeout)
		}
	}
}

func startProxy(t *testing.T, target string) *Proxy {
	t.Helper()
	p, err := Start(target)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Close() })
	return p
}

func dial(t *testing.T, addr string) net.Conn {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, waitTimeout)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// readExactly reads len(want) bytes from c and checks they are want.
func readExactly(t *testing.T, c net.Conn, want string) {
	t.Helper()
	_ = c.SetReadDeadline(time.Now().Add(waitTimeout))
	got := make([]byte, len(want))
	if _, err := io.ReadFull(c, got); err != nil {
		t.Fatalf("reading %q: %v (got %q)", want, err, got)
	}
	if string(got) != want {
		t.Fatalf("read %q, want %q", got, want)
	}
}

// roundTrip writes msg to c and checks it comes back.
func roundTrip(t *testing.T, c net.Conn, msg string) {
	t.Helper()
	if _, err := c.Write([]byte(msg)); err != nil {
		t.Fatalf("writing %q: %v", msg, err)
	}
	readExactly(t, c, msg)
}

// expectCut checks that c is closed or reset: a read fails, and not by timing out.
func expectCut(t *testing.T, c net.Conn) {
	t.Helper()
	_ = c.SetReadDeadline(time.Now().Add(waitTimeout))
	n, err := c.Read(make([]byte, 1))
	if err == nil || errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("read on a cut connection returned %d bytes, %v; want EOF or reset", n, err)
	}
}

// expectStall checks that nothing arrives on c for stallTimeout and c stays open.
func expectStall(t *testing.T, c net.Conn) {
	t.Helper()
	_ = c.SetReadDeadline(time.Now().Add(stallTimeout))
	n, err := c.Read(make([]byte, 1))
	if !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("read on a blackholed connection returned %d bytes, %v; want a timeout", n, err)
	}
}

func TestForward(t *testing.T) {
	s := startServer(t, "")
	p := startProxy(t, s.addr())
	c := dial(t, p.Addr())
	roundTrip(t, c, "hello")
	roundTrip(t, c, "world")

	// A payload larger than the socket buffers, written while it is read back, so that both
	// directions run at once.
	payload := bytes.Repeat([]byte("0123456789abcdef"), 1<<16) // 1 MiB
	werr := make(chan error, 1)
	go func() {
		_, err := c.Write(payload)
		werr <- err
	}()
	got := make([]byte, len(payload))
	_ = c.SetReadDeadline(time.Now().Add(waitTimeout))
	if _, err := io.ReadFull(c, got); err != nil {
		t.Fatalf("reading the echoed payload: %v", err)
	}
	if err := <-werr; err != nil {
		t.Fatalf("writing the payload: %v", err)
	}
	if !bytes.Equal(got, payload) {
		t.Fatal("echoed payload differs")
	}

	want := int64(len("hello") + len("world") + len(payload))
	testutil.Eventually(t, "byte counters", func() bool {
		st := p.Stats()
		return st.BytesToTarget == want && st.BytesFromTarget == want
	})
	st := p.Stats()
	if st.Accepted != 1 || st.Open != 1 || st.Refused != 0 || st.BytesDropped != 0 {
		t.Fatalf("stats %+v", st)
	}

	// Several connections at once are independent.
	c2 := dial(t, p.Addr())
	roundTrip(t, c2, "second")
	roundTrip(t, c, "first")
	if st := p.Stats(); st.Accepted != 2 || st.Open != 2 {
		t.Fatalf("stats %+v, want 2 accepted and open", st)
	}
}

func TestHalfClose(t *testing.T) {
	s := startServer(t, "")
	p := startProxy(t, s.addr())
	c := dial(t, p.Addr())
	if _, err := c.Write([]byte("last words")); err != nil {
		t.Fatal(err)
	}
	if err := c.(*net.TCPConn).CloseWrite(); err != nil {
		t.Fatal(err)
	}
	// The server sees EOF only if the proxy forwarded the half-close; it then echoes the rest
	// and closes, which the proxy forwards as EOF.
	_ = c.SetReadDeadline(time.Now().Add(waitTimeout))
	got, err := io.ReadAll(c)
	if err != nil || string(got) != "last words" {
		t.Fatalf("read %q, %v; want the echo then EOF", got, err)
	}
	s.waitEnded(t, 1)
	testutil.Eventually(t, "the link to be closed", func() bool { return p.Stats().Open == 0 })
}

func TestPartition(t *testing.T) {
	s := startServer(t, "")
	p := startProxy(t, s.addr())
	c1 := dial(t, p.Addr())
	c2 := dial(t, p.Addr())
	roundTrip(t, c1, "one")
	roundTrip(t, c2, "two")

	p.Partition()
	// Both sides of every open connection are cut at once.
	expectCut(t, c1)
	expectCut(t, c2)
	s.waitEnded(t, 2)
	if st := p.Stats(); st.Open != 0 {
		t.Fatalf("stats %+v, want no open connection", st)
	}

	// New connections are accepted and reset, and never reach the server.
	for i := 0; i < 3; i++ {
		c, err := net.DialTimeout("tcp", p.Addr(), waitTimeout)
		if err != nil {
			continue // refused outright also counts as cut
		}
		expectCut(t, c)
		_ = c.Close()
	}
	testutil.Eventually(t, "3 refused connections", func() bool { return p.Stats().Refused == 3 })
	if got := s.received.Load(); got != int64(len("one")+len("two")) {
		t.Fatalf("server received %d bytes, want %d", got, len("one")+len("two"))
	}

	p.Heal()
	c3 := dial(t, p.Addr())
	roundTrip(t, c3, "healed")
	// The connections cut before Heal stay cut.
	if _, err := c1.Write([]byte("x")); err == nil {
		expectCut(t, c1)
	}
}

func TestBlackhole(t *testing.T) {
	s := startServer(t, "")
	p := startProxy(t, s.addr())
	c1 := dial(t, p.Addr())
	roundTrip(t, c1, "before")
	before := s.received.Load()

	p.Blackhole()
	// The open connection stays open but nothing goes through.
	if _, err := c1.Write([]byte("lost")); err != nil {
		t.Fatalf("writing to a blackholed connection: %v", err)
	}
	expectStall(t, c1)
	// A new connection is accepted, and stalls too.
	c2 := dial(t, p.Addr())
	if _, err := c2.Write([]byte("also lost")); err != nil {
		t.Fatalf("writing to a new blackholed connection: %v", err)
	}
	expectStall(t, c2)
	testutil.Eventually(t, "dropped bytes", func() bool {
		return p.Stats().BytesDropped == int64(len("lost")+len("also lost"))
	})
	if st := p.Stats(); st.Accepted != 2 || st.Open != 2 || st.Refused != 0 {
		t.Fatalf("stats %+v, want 2 accepted and open", st)
	}

	p.Heal()
	// The blackholed connections are closed so that peers reconnect; only c1 had reached the
	// server, and the server never received the dropped bytes.
	expectCut(t, c1)
	expectCut(t, c2)
	s.waitEnded(t, 1)
	if got := s.received.Load(); got != before {
		t.Fatalf("server received %d bytes, want %d (none while blackholed)", got, before)
	}
	c3 := dial(t, p.Addr())
	roundTrip(t, c3, "after")
	if st := p.Stats(); st.Open != 1 {
		t.Fatalf("stats %+v, want only the new connection open", st)
	}
}

func TestSetTarget(t *testing.T) {
	a := startServer(t, "A")
	b := startServer(t, "B")
	p := startProxy(t, a.addr())
	c1 := dial(t, p.Addr())
	readExactly(t, c1, "A")

	p.SetTarget(b.addr())
	c2 := dial(t, p.Addr())
	readExactly(t, c2, "B")
	roundTrip(t, c2, "to b")
	// The open connection keeps its target.
	roundTrip(t, c1, "to a")
	if got := a.received.Load(); got != int64(len("to a")) {
		t.Fatalf("A received %d bytes, want %d", got, len("to a"))
	}
	if got := b.received.Load(); got != int64(len("to b")) {
		t.Fatalf("B received %d bytes, want %d", got, len("to b"))
	}
}

func TestTargetDown(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	target := ln.Addr().String()
	_ = ln.Close()
	p := startProxy(t, target)
	// The client sees a reset, which may already fail its connect.
	if c, err := net.DialTimeout("tcp", p.Addr(), waitTimeout); err == nil {
		expectCut(t, c)
		_ = c.Close()
	}
	testutil.Eventually(t, "the connection to be accepted", func() bool { return p.Stats().Accepted == 1 })
	testutil.Eventually(t, "the link to be dropped", func() bool { return p.Stats().Open == 0 })
}

func TestStartOnSameAddress(t *testing.T) {
	s := startServer(t, "")
	p1 := startProxy(t, s.addr())
	addr := p1.Addr()
	c1 := dial(t, addr)
	roundTrip(t, c1, "first life")
	if err := p1.Close(); err != nil {
		t.Fatal(err)
	}
	expectCut(t, c1)

	// The port is free again at once although connections through it were just closed.
	p2, err := StartOn(addr, s.addr())
	if err != nil {
		t.Fatalf("StartOn(%s) after Close: %v", addr, err)
	}
	defer p2.Close()
	if p2.Addr() != addr {
		t.Fatalf("listening on %s, want %s", p2.Addr(), addr)
	}
	c2 := dial(t, addr)
	roundTrip(t, c2, "second life")
}

func TestCloseLeavesNoGoroutines(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	s := startServer(t, "")
	p, err := Start(s.addr())
	if err != nil {
		t.Fatal(err)
	}
	// Connections in every state: forwarding, half-closed, blackholed before and after being
	// dialled.
	fwd := dial(t, p.Addr())
	roundTrip(t, fwd, "fwd")
	half := dial(t, p.Addr())
	roundTrip(t, half, "half")
	if err := half.(*net.TCPConn).CloseWrite(); err != nil {
		t.Fatal(err)
	}
	old := dial(t, p.Addr())
	roundTrip(t, old, "old")
	p.Blackhole()
	fresh := dial(t, p.Addr())
	if _, err := fresh.Write([]byte("x")); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, "the fresh connection to be accepted", func() bool { return p.Stats().Accepted == 4 })

	if err := p.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	for _, c := range []net.Conn{fwd, old, fresh} {
		expectCut(t, c)
	}
	if st := p.Stats(); st.Open != 0 {
		t.Fatalf("stats after Close %+v, want nothing open", st)
	}
	if err := p.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	if c, err := net.DialTimeout("tcp", p.Addr(), waitTimeout); err == nil {
		expectCut(t, c) // another listener may have taken the port; it must not be the proxy
		_ = c.Close()
	}
	for _, c := range []net.Conn{fwd, half, old, fresh} {
		_ = c.Close()
	}
	s.close()
}
