package netguard

import (
	"bufio"
	"log/slog"
	"net"
	"testing"
	"time"

	"github.com/petrel-mq/petrel/internal/testutil"
)

// startEcho serves a line protocol (a request is a line, its answer the same line) on a
// Guarded listener until the test ends.
func startEcho(t *testing.T, cfg GuardConfig) (*Guarded, *testutil.SyncBuffer) {
	t.Helper()
	logs := &testutil.SyncBuffer{}
	cfg.Logger = slog.New(slog.NewTextHandler(logs, nil))
	g, err := Listen("127.0.0.1:0", cfg)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			c, err := g.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				br := bufio.NewReader(c)
				for {
					line, err := br.ReadBytes('\n')
					if err != nil {
						return
					}
					if _, err := c.Write(line); err != nil {
						return
					}
				}
			}()
		}
	}()
	t.Cleanup(func() {
		_ = g.Close()
		<-done
	})
	return g, logs
}

// dialGuarded connects to g, closing the connection when the test ends.
func dialGuarded(t *testing.T, g *Guarded) net.Conn {
	t.Helper()
	nc, err := net.Dial("tcp", g.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { nc.Close() })
	return nc
}

func TestGuarded(t *testing.T) {
	g, logs := startEcho(t, GuardConfig{FrameTimeout: 300 * time.Millisecond, MaxConns: 4, MaxConnsKey: "echoMaxConnections",
		Port: "echo", Speaks: "lines"})
	dial := func() net.Conn { return dialGuarded(t, g) }

	// A client that asks, idles longer than the timeout between requests, and asks again is
	// served throughout.
	good := dial()
	br := bufio.NewReader(good)
	for i := 0; i < 2; i++ {
		if _, err := good.Write([]byte("ping\n")); err != nil {
			t.Fatal(err)
		}
		if line, err := br.ReadString('\n'); err != nil || line != "ping\n" {
			t.Fatalf("answer %q, %v", line, err)
		}
		time.Sleep(400 * time.Millisecond) // idle between requests is allowed
	}

	silent := dial()
	testutil.WaitClosed(t, silent, "silent")
	logs.WaitForLine(t, "closing echo connection: no request within the frame read timeout of connecting", "remote="+silent.LocalAddr().String())

	stalled := dial()
	if _, err := stalled.Write([]byte("half a requ")); err != nil {
		t.Fatal(err)
	}
	testutil.WaitClosed(t, stalled, "stalled")
	logs.WaitForLine(t, "closing echo connection: request incomplete for the frame read timeout", "remote="+stalled.LocalAddr().String())

	probe := dial()
	if _, err := probe.Write([]byte("GET / HTTP/1.1\r\n\r\n")); err != nil {
		t.Fatal(err)
	}
	testutil.WaitClosed(t, probe, "probe")
	logs.WaitForLine(t, "closing connection: looks like an HTTP/1.x request; this port speaks lines", "remote="+probe.LocalAddr().String())

	var held []net.Conn // with good, the cap
	for i := 0; i < 3; i++ {
		held = append(held, dial())
	}
	testutil.Eventually(t, "the cap reached", func() bool { return g.Open() == 4 })
	refused := dial()
	testutil.WaitClosed(t, refused, "refused")
	logs.WaitForLine(t, "refusing echo connection: echoMaxConnections reached", "echoMaxConnections=4")
	for _, nc := range held {
		testutil.WaitClosed(t, nc, "nc") // silent: closed after the timeout
	}
	testutil.Eventually(t, "every connection gone", func() bool { return g.Open() <= 1 })
	if _, err := good.Write([]byte("still\n")); err != nil {
		t.Fatal(err)
	}
	if line, err := br.ReadString('\n'); err != nil || line != "still\n" {
		t.Fatalf("answer %q, %v", line, err)
	}
}

// TestGuardedOpens: a connection whose first bytes GuardConfig.Opens refuses is closed before
// the server reads them, with a line that shows them, also when they come one byte at a time;
// one whose first bytes it accepts is served. A bad OpeningLen is refused.
func TestGuardedOpens(t *testing.T) {
	g, logs := startEcho(t, GuardConfig{FrameTimeout: 5 * time.Second, Port: "echo", Speaks: "lines of letters",
		Opens: func(first []byte) bool { return first[0] >= 'a' && first[1] >= 'a' }, OpeningLen: 2})
	dial := func() net.Conn { return dialGuarded(t, g) }
	good := dial()
	if _, err := good.Write([]byte("ok\n")); err != nil {
		t.Fatal(err)
	}
	if line, err := bufio.NewReader(good).ReadString('\n'); err != nil || line != "ok\n" {
		t.Fatalf("answer %q, %v", line, err)
	}
	bad := dial()
	for _, b := range []string{"a", "1\n"} { // the second byte decides
		if _, err := bad.Write([]byte(b)); err != nil {
			t.Fatal(err)
		}
		time.Sleep(50 * time.Millisecond) // lets the first byte arrive alone
	}
	testutil.WaitClosed(t, bad, "bad")
	logs.WaitForLine(t, "level=WARN", "closing echo connection: its first bytes are not lines of letters", `first="61 31"`, "remote="+bad.LocalAddr().String())
	if _, err := Listen("127.0.0.1:0", GuardConfig{FrameTimeout: time.Second, Opens: func([]byte) bool { return true }, OpeningLen: 9}); err == nil {
		t.Fatal("OpeningLen 9 accepted")
	}
}
