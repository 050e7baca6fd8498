package rpc

import (
	"bufio"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/petrel-mq/petrel/internal/testutil"
	"github.com/petrel-mq/petrel/protocol"
)

// validFrame is a request the test service answers.
func validFrame() []byte {
	return protocol.AppendFrame(nil, uint16(protocol.CodeGetMaxOffset), 0, 1, &protocol.QueueHeader{Topic: "T"}, nil)
}

// TestStalledPrefixClosed: 12 bytes of a 16-byte frame prefix, then silence. The frame read
// timeout runs from the frame's first byte, so the connection is closed although the idle
// timeout is an hour away: as a connection's first frame and after a whole one.
func TestStalledPrefixClosed(t *testing.T) {
	for _, afterFrame := range []bool{false, true} {
		srv := startServer(t, newService().handle, ServerOptions{FrameReadTimeout: 300 * time.Millisecond, IdleTimeout: time.Hour})
		nc, err := net.Dial("tcp", srv.addr)
		if err != nil {
			t.Fatal(err)
		}
		defer nc.Close()
		if afterFrame {
			if _, err := nc.Write(validFrame()); err != nil {
				t.Fatal(err)
			}
			if _, err := readFrame(bufio.NewReader(nc)); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := nc.Write(framePrefix(100)[:12]); err != nil {
			t.Fatal(err)
		}
		testutil.WaitClosed(t, nc, "12 bytes of a frame prefix")
		srv.logs.WaitForLine(t, "closing connection: request frame incomplete for the frame read timeout", "remote="+nc.LocalAddr().String(), "got=12", "waited=")
	}
}

// TestSilentConnectionClosed: a connection that sends nothing is closed once the frame read
// timeout has passed since its accept, whatever the idle timeout.
func TestSilentConnectionClosed(t *testing.T) {
	srv := startServer(t, newService().handle, ServerOptions{FrameReadTimeout: 300 * time.Millisecond})
	nc, err := net.Dial("tcp", srv.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	testutil.WaitClosed(t, nc, "a silent connection")
	srv.logs.WaitForLine(t, "closing connection: no request within the frame read timeout of connecting", "remote="+nc.LocalAddr().String())
}

// TestUnreadAnswersClosed: a peer that stops reading its answers is closed after the write
// timeout instead of holding the connection's goroutine.
func TestUnreadAnswersClosed(t *testing.T) {
	srv := startServer(t, newService().handle, ServerOptions{WriteTimeout: 200 * time.Millisecond})
	nc, err := net.Dial("tcp", srv.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	_ = nc.(*net.TCPConn).SetReadBuffer(4 << 10)
	frames := make([]byte, 0, 64<<10)
	for len(frames) < cap(frames)-64 {
		frames = append(frames, validFrame()...)
	}
	go func() { // until the server closes the connection; nothing is read
		for {
			if _, err := nc.Write(frames); err != nil {
				return
			}
		}
	}()
	srv.logs.WaitForLine(t, "closing connection: write failed", "remote="+nc.LocalAddr().String(), "timeout")
}

// TestJunkConnectionFlood: many connections that never complete a frame (part of a prefix, a
// TLS ClientHello cut short, nothing at all) are all closed, never more than MaxConns are
// served at once, the log stays a few lines, the heap returns to where it was, and a real
// client is served throughout.
func TestJunkConnectionFlood(t *testing.T) {
	const conns, maxConns = 1000, 100
	srv := startServer(t, newService().handle, ServerOptions{FrameReadTimeout: 300 * time.Millisecond, IdleTimeout: time.Hour, MaxConns: maxConns})
	good := dial(t, srv.addr, Options{})
	if _, err := getMaxOffset(ctxT(t), good, "T", 0); err != nil { // within the first frame's bound
		t.Fatal(err)
	}
	junk := [][]byte{framePrefix(100)[:12], {0x16, 0x03, 0x01, 0x02, 0x00, 0x01}, nil, []byte("GET /")}
	r := testutil.FloodUntilClosed(t, srv.addr, conns, junk, srv.Conns, func() {
		testutil.Eventually(t, "every junk connection closed on the server", func() bool { return srv.Conns() <= 1 })
		if _, err := getMaxOffset(ctxT(t), good, "T", 0); err != nil {
			t.Fatalf("the real client was not served: %v", err)
		}
	})
	r.Check(t, maxConns, 8<<20)
	if n := strings.Count(srv.logs.String(), "\n"); n > 40 {
		t.Fatalf("%d log lines for %d junk connections:\n%s", n, conns, srv.logs.String())
	}
	srv.logs.WaitForLine(t, "looks like a TLS ClientHello")
}
