package netguard

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/petrel-mq/petrel/internal/ratelog"
)

// GuardConfig configures a Guarded listener.
type GuardConfig struct {
	// FrameTimeout bounds a request from its first byte to its last, and a connection's first
	// request from its accept. Required.
	FrameTimeout time.Duration
	// MaxConns caps the connections open at once (0: no cap).
	MaxConns int
	// MaxConnsKey names the cap's config key in the line of a refused connection.
	MaxConnsKey string
	// Port names the port in its lines ("closing Raft connection: ...").
	Port string
	// Speaks names the port's protocol in the line that says a probe reached it.
	Speaks string
	// Opens, when set, tells whether a connection's first OpeningLen bytes (1 to 8) open a
	// request of the port's protocol; a connection whose first bytes do not is logged (what
	// they are, as a peer's bad input) and closed before the server reads them, so that the
	// server's own complaint about them (at its level, not the port's) never comes.
	Opens      func(first []byte) bool
	OpeningLen int
	// KeepAlive probes idle connections (net.ListenConfig.KeepAliveConfig).
	KeepAlive net.KeepAliveConfig
	// Logger receives the lines, rate-limited per reason.
	Logger *slog.Logger
}

// Guarded is a TCP listener for a request/response protocol whose frames carry no length the
// listener could read (hashicorp/raft's type byte and msgpack body), so its rules go by reads
// and writes: the server answers each request before it reads the next one's first byte
// (pipelined requests aside, whose bytes may already be buffered), so the bytes read since
// the last write are one request. A request must be whole within FrameTimeout of its first
// byte, and a connection's first request within it of the accept; between requests a
// connection may stay silent (a client pool's idle connections; the cap and the keepalive
// probes bound those). A first read that looks like another protocol's opening (Sniff) is
// logged as such and ends the connection, as does a write that cannot finish within
// FrameTimeout (a peer that stopped reading). Closing the listener closes every connection it
// accepted.
//
// Each connection's Read and Write must be called from one goroutine at a time (the server's
// goroutine of the connection); Close may be called from any.
type Guarded struct {
	ln  *LimitListener
	cfg GuardConfig
	// The lines' messages, one constant string per reason.
	refusedMsg, silentMsg, stalledMsg, writeMsg, junkMsg string
	warn                                                 ratelog.Reasons

	mu     sync.Mutex // a leaf: the accepted connections, closed with the listener, and pending
	conns  map[*guardedConn]struct{}
	closed bool
	// pending holds the server's lines about a connection it did not name (ServerFailed), oldest
	// first, until the server closes that connection.
	pending []serverLine
}

// serverLine is a line of the server waiting for the connection it is about.
type serverLine struct {
	at   time.Time
	msg  string
	args []any
}

// Bounds of the lines waiting for their connection: a line no close claims within
// serverLineWait is logged without an address, and at most maxPendingLines wait at once.
const (
	serverLineWait  = time.Second
	maxPendingLines = 16
)

// Listen listens on addr (TCP) under cfg's rules.
func Listen(addr string, cfg GuardConfig) (*Guarded, error) {
	lc := net.ListenConfig{KeepAliveConfig: cfg.KeepAlive}
	inner, err := lc.Listen(context.Background(), "tcp", addr)
	if err != nil {
		return nil, err
	}
	g := &Guarded{cfg: cfg, conns: make(map[*guardedConn]struct{})}
	g.refusedMsg = "refusing " + cfg.Port + " connection: " + cfg.MaxConnsKey + " reached"
	g.silentMsg = "closing " + cfg.Port + " connection: no request within the frame read timeout of connecting"
	g.stalledMsg = "closing " + cfg.Port + " connection: request incomplete for the frame read timeout"
	g.writeMsg = "closing " + cfg.Port + " connection: answer not written"
	g.junkMsg = "closing " + cfg.Port + " connection: its first bytes are not " + cfg.Speaks
	if cfg.Opens != nil && (cfg.OpeningLen < 1 || cfg.OpeningLen > maxOpeningLen) {
		_ = inner.Close()
		return nil, fmt.Errorf("netguard: OpeningLen %d, want 1 to %d", cfg.OpeningLen, maxOpeningLen)
	}
	g.ln = Limit(inner, cfg.MaxConns, func(remote net.Addr) {
		g.warn.Warn(g.cfg.Logger, g.refusedMsg, "remote", remote.String(), cfg.MaxConnsKey, cfg.MaxConns)
	})
	return g, nil
}

// Accept returns the next connection within the cap.
func (g *Guarded) Accept() (net.Conn, error) {
	nc, err := g.ln.Accept()
	if err != nil {
		return nil, err
	}
	c := &guardedConn{Conn: nc, g: g, remote: nc.RemoteAddr().String(), started: time.Now()}
	g.mu.Lock()
	if g.closed {
		g.mu.Unlock()
		_ = nc.Close()
		return nil, net.ErrClosed
	}
	g.conns[c] = struct{}{}
	g.mu.Unlock()
	return c, nil
}

// Close stops accepting and closes every accepted connection.
func (g *Guarded) Close() error {
	g.mu.Lock()
	g.closed = true
	conns := make([]*guardedConn, 0, len(g.conns))
	for c := range g.conns {
		conns = append(conns, c)
	}
	pending := g.pending
	g.pending = nil
	g.mu.Unlock()
	err := g.ln.Close()
	for _, c := range conns {
		_ = c.Close()
	}
	for _, l := range pending {
		g.warn.Warn(g.cfg.Logger, l.msg, l.args...)
	}
	return err
}

// ServerFailed takes a WARN line the server logs about a request it could not serve on one of
// this listener's connections without naming that connection (hashicorp/raft's transport logs
// that it failed to decode a peer's command, then closes the connection, on the connection's
// goroutine): the line is logged, rate-limited, with "remote" the address of the next
// connection the server closes that did not end at EOF, and otherwise waits for that close (at
// most serverLineWait, after which it is logged without an address). Two such failures at the
// same moment may swap their texts, never their addresses: each line names a connection the
// server gave up on. Safe for concurrent use.
func (g *Guarded) ServerFailed(msg string, args ...any) {
	now := time.Now()
	g.mu.Lock()
	var stale []serverLine
	for len(g.pending) > 0 && (now.Sub(g.pending[0].at) > serverLineWait || len(g.pending) >= maxPendingLines) {
		stale = append(stale, g.pending[0])
		g.pending = g.pending[1:]
	}
	g.pending = append(g.pending, serverLine{at: now, msg: msg, args: args})
	g.mu.Unlock()
	for _, l := range stale {
		g.warn.Warn(g.cfg.Logger, l.msg, l.args...)
	}
}

// Addr returns the address listened on.
func (g *Guarded) Addr() net.Addr { return g.ln.Addr() }

// Open returns the number of connections accepted and not yet closed.
func (g *Guarded) Open() int { return g.ln.Open() }

// maxOpeningLen bounds GuardConfig.OpeningLen.
const maxOpeningLen = 8

// guardedConn is a connection accepted by a Guarded listener.
type guardedConn struct {
	net.Conn
	g      *Guarded
	remote string
	// started is when the request being read began (its first byte, or the accept for the
	// first request); zero between an answer and the next request's first byte.
	started time.Time
	reads   int // reads that returned bytes
	got     int // bytes of the request being read (since the last answer)
	// head collects the connection's first OpeningLen bytes for GuardConfig.Opens; screened
	// is set once they were checked.
	head     [maxOpeningLen]byte
	headN    int
	screened bool
	// eof is set once a read returned io.EOF (the peer closed, or the guard ended the
	// connection and logged why): the server's close then is no failure of its own to report.
	eof atomic.Bool
}

// Read reads within the request's deadline. A deadline passed, a probe, or the connection
// closed here reads as io.EOF once the reason is logged: the server need not log a failed
// decode as well.
func (c *guardedConn) Read(p []byte) (int, error) {
	n, err := c.read(p)
	if err == io.EOF {
		c.eof.Store(true)
	}
	return n, err
}

// read is Read but for noting the end of the connection.
func (c *guardedConn) read(p []byte) (int, error) {
	var deadline time.Time // zero: between requests, none
	if !c.started.IsZero() {
		deadline = c.started.Add(c.g.cfg.FrameTimeout)
	}
	_ = c.Conn.SetReadDeadline(deadline)
	n, err := c.Conn.Read(p)
	if n > 0 {
		if c.started.IsZero() {
			c.started = time.Now()
		}
		c.reads++
		c.got += n
		if c.reads == 1 {
			if probe := Sniff(p[:n]); probe != NoProbe {
				c.g.warn.Warn(c.g.cfg.Logger, probe.Reason(c.g.cfg.Speaks), "remote", c.remote)
				_ = c.Close()
				return 0, io.EOF
			}
		}
		if !c.screen(p[:n]) {
			c.g.warn.Warn(c.g.cfg.Logger, c.g.junkMsg, "remote", c.remote, "first", fmt.Sprintf("% x", c.head[:c.headN]))
			_ = c.Close()
			return 0, io.EOF
		}
	}
	switch {
	case err == nil:
	case errors.Is(err, net.ErrClosed):
		return n, io.EOF
	case errors.Is(err, os.ErrDeadlineExceeded):
		if c.reads == 0 {
			c.g.warn.Warn(c.g.cfg.Logger, c.g.silentMsg, "remote", c.remote, "frameReadTimeout", c.g.cfg.FrameTimeout)
		} else {
			c.g.warn.Warn(c.g.cfg.Logger, c.g.stalledMsg, StalledAttrs(c.remote, int64(c.got), 0, time.Since(c.started), c.g.cfg.FrameTimeout)...)
		}
		return n, io.EOF
	}
	return n, err
}

// screen collects the connection's first bytes from b (what a read returned) and reports
// false once they are known not to open a request of the port's protocol (GuardConfig.Opens).
func (c *guardedConn) screen(b []byte) bool {
	if c.screened || c.g.cfg.Opens == nil {
		return true
	}
	c.headN += copy(c.head[c.headN:c.g.cfg.OpeningLen], b)
	if c.headN < c.g.cfg.OpeningLen {
		return true
	}
	c.screened = true
	return c.g.cfg.Opens(c.head[:c.headN])
}

// Write writes an answer within FrameTimeout; the next byte read starts the next request.
func (c *guardedConn) Write(p []byte) (int, error) {
	_ = c.Conn.SetWriteDeadline(time.Now().Add(c.g.cfg.FrameTimeout))
	n, err := c.Conn.Write(p)
	c.started, c.got = time.Time{}, 0
	if err != nil && (errors.Is(err, os.ErrDeadlineExceeded) || errors.Is(err, syscall.EPIPE)) {
		c.g.warn.Info(c.g.cfg.Logger, c.g.writeMsg, "remote", c.remote, "reason", err)
	}
	return n, err
}

// Close closes the connection and forgets it. The server's first close of a connection that
// did not end at EOF, while the listener is open, claims the oldest line of ServerFailed.
func (c *guardedConn) Close() error {
	var line serverLine
	claimed := false
	c.g.mu.Lock()
	_, open := c.g.conns[c]
	delete(c.g.conns, c)
	if open && !c.g.closed && !c.eof.Load() && len(c.g.pending) > 0 {
		line, claimed = c.g.pending[0], true
		c.g.pending = c.g.pending[1:]
	}
	c.g.mu.Unlock()
	if claimed {
		c.g.warn.Warn(c.g.cfg.Logger, line.msg, append(line.args, "remote", c.remote)...)
	}
	return c.Conn.Close()
}
