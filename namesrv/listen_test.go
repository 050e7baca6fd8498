package namesrv

import (
	"encoding/binary"
	"io"
	"log/slog"
	"net"
	"testing"
	"time"

	"github.com/petrel-mq/petrel/internal/testutil"
	"github.com/petrel-mq/petrel/protocol"
)

// startLogged starts a NameServer whose log lines the test reads; edit adjusts the config.
func startLogged(t *testing.T, edit func(*Config)) (*Server, *testutil.SyncBuffer) {
	t.Helper()
	logs := &testutil.SyncBuffer{}
	s := startServer(t, func(c *Config) {
		c.Logger = slog.New(slog.NewTextHandler(io.MultiWriter(logs, t.Output()), nil))
		edit(c)
	})
	return s, logs
}

// TestStalledFrameClosed: 12 bytes of a 16-byte frame prefix, then silence. The NameServer
// closes the connection once the frame read timeout has passed since the frame's first byte,
// though BrokerExpiry, its idle timeout, is two minutes away, and says why.
func TestStalledFrameClosed(t *testing.T) {
	s, logs := startLogged(t, func(c *Config) { c.FrameReadTimeout = 300 * time.Millisecond })
	nc, err := net.Dial("tcp", s.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	prefix := make([]byte, protocol.FramePrefixSize)
	binary.BigEndian.PutUint32(prefix, 12+40)
	binary.BigEndian.PutUint16(prefix[4:], uint16(protocol.CodeGetRouteInfoByTopic))
	prefix[7] = protocol.Version
	if _, err := nc.Write(prefix[:12]); err != nil {
		t.Fatal(err)
	}
	testutil.WaitClosed(t, nc, "the connection")
	logs.WaitForLine(t, "request frame incomplete", "remote="+nc.LocalAddr().String(), "got=12")
	// A client served before and after is not disturbed.
	served(t, dial(t, s.Addr()))
}

// TestProbeNamed: a TLS client pointed at the NameServer gets one line that says what it is.
func TestProbeNamed(t *testing.T) {
	s, logs := startLogged(t, func(*Config) {})
	nc, err := net.Dial("tcp", s.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	hello := append([]byte{0x16, 0x03, 0x01, 0x00, 0xf8, 0x01, 0x00, 0x00, 0xf4, 0x03, 0x03}, make([]byte, 32)...)
	if _, err := nc.Write(hello); err != nil {
		t.Fatal(err)
	}
	testutil.WaitClosed(t, nc, "the connection")
	line := logs.WaitForLine(t, "looks like a TLS ClientHello; this port speaks Petrel's binary protocol", "remote="+nc.LocalAddr().String())
	if logs.Count("remote="+nc.LocalAddr().String()) != 1 {
		t.Fatalf("more than one line for one probe:\n%s", logs.String())
	}
	t.Log(line)
}

// TestMaxConnections: past maxConnections the NameServer closes new connections as they come,
// and serves again once one closed.
func TestMaxConnections(t *testing.T) {
	s, logs := startLogged(t, func(c *Config) { c.MaxConnections = 2 })
	a, b := dial(t, s.Addr()), dial(t, s.Addr())
	served(t, a)
	served(t, b)
	nc, err := net.Dial("tcp", s.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	testutil.WaitClosed(t, nc, "the connection")
	logs.WaitForLine(t, "refusing connection: too many connections", "maxConns=2")
	_ = a.Close()
	testutil.Eventually(t, "a slot free again", func() bool { return s.rpc.Conns() < 2 })
	served(t, dial(t, s.Addr()))
}

// TestSuppressedCountLogged: three bad frames in a moment give one line of that reason, and
// the count of the two suppressed is logged on its own once the rate limit's interval ends,
// with no later bad frame.
func TestSuppressedCountLogged(t *testing.T) {
	s, logs := startLogged(t, func(*Config) {})
	junk := make([]byte, protocol.FramePrefixSize)
	binary.BigEndian.PutUint32(junk, 0xffffff00) // far above the largest frame
	for range 3 {
		nc, err := net.Dial("tcp", s.Addr())
		if err != nil {
			t.Fatal(err)
		}
		if _, err := nc.Write(junk); err != nil {
			t.Fatal(err)
		}
		testutil.WaitClosed(t, nc, "a bad frame's connection")
		nc.Close()
	}
	logs.WaitForLine(t, "level=WARN", "lines suppressed by the rate limit", `reason="closing connection: bad frame"`, "similar_not_logged=2")
}
