package broker

import (
	"errors"
	"io"
	"log"
	"log/slog"
	"net"
	"os"
	"strings"
	"sync/atomic"
	"time"

	"github.com/petrel-mq/petrel/internal/netguard"
	"github.com/petrel-mq/petrel/internal/ratelog"
)

// The admin HTTP port's bounds besides frameReadTimeout; its cap is metricsMaxConnections.
// net/http applies them: a request's header must be whole within the header timeout
// (frameReadTimeout, at most maxMetricsHeaderTimeout) of its first byte, or of the accept for a
// connection's first request, the whole request within frameReadTimeout, and a keep-alive
// connection is closed after metricsIdleTimeout without a request. No write timeout: a CPU
// profile or trace answers after the seconds it is asked for.
const (
	maxMetricsHeaderTimeout = 10 * time.Second
	metricsIdleTimeout      = 2 * time.Minute
	metricsMaxHeaderBytes   = 64 << 10
)

// metricsGuard holds the admin HTTP port's timeouts and its lines, rate-limited per reason.
type metricsGuard struct {
	log           *slog.Logger
	headerTimeout time.Duration // http.Server.ReadHeaderTimeout
	readTimeout   time.Duration // http.Server.ReadTimeout
	warn          ratelog.Reasons
}

// newMetricsGuard returns the guard of a broker's admin port.
func newMetricsGuard(cfg *Config, log *slog.Logger) metricsGuard {
	return metricsGuard{log: log, headerTimeout: min(cfg.FrameReadTimeout, maxMetricsHeaderTimeout), readTimeout: cfg.FrameReadTimeout}
}

// listener caps ln at max connections and wraps each in a metricsConn.
func (g *metricsGuard) listener(ln net.Listener, max int) net.Listener {
	return &metricsListener{g: g, ln: netguard.Limit(ln, max, func(remote net.Addr) {
		g.warn.Warn(g.log, "refusing metrics connection: metricsMaxConnections reached", "remote", remote.String(), "metricsMaxConnections", max)
	})}
}

// errorLog is the http.Server's ErrorLog: its lines (a handler's panic, accept errors) reach
// the broker's log rate-limited by their first words.
func (g *metricsGuard) errorLog() *log.Logger {
	return log.New(httpLogWriter{g}, "", 0)
}

type httpLogWriter struct{ g *metricsGuard }

func (w httpLogWriter) Write(p []byte) (int, error) {
	line := strings.TrimSpace(string(p))
	reason := line
	if f := strings.Fields(line); len(f) > 3 {
		reason = strings.Join(f[:3], " ") // "http: panic serving", "http: Accept error:"
	}
	w.g.warn.Of(reason).Warn(w.g.log, line, "component", "metrics")
	return len(p), nil
}

// metricsListener wraps the admin port's connections.
type metricsListener struct {
	g  *metricsGuard
	ln *netguard.LimitListener
}

func (l *metricsListener) Accept() (net.Conn, error) {
	c, err := l.ln.Accept()
	if err != nil {
		return nil, err
	}
	mc := &metricsConn{Conn: c, g: l.g, remote: c.RemoteAddr().String()}
	mc.began.Store(time.Now().UnixNano())
	return mc, nil
}

func (l *metricsListener) Close() error   { return l.ln.Close() }
func (l *metricsListener) Addr() net.Addr { return l.ln.Addr() }

// metricsConn logs why net/http closes it (net/http says nothing when a deadline it set
// passes) and ends one whose first bytes are a TLS ClientHello (the port speaks plain HTTP).
// net/http reads it from its serving goroutine and from a background read while a handler
// runs, so its state is atomic.
type metricsConn struct {
	net.Conn
	g      *metricsGuard
	remote string
	reads  atomic.Int64 // reads that returned bytes
	unans  atomic.Int64 // bytes read since the last write (a request not yet answered)
	writes atomic.Int64
	// began is when the request not yet answered began (unix ns): its first byte, or the
	// accept for the first request.
	began atomic.Int64
	// deadline is the read deadline net/http set last (unix ns): one in the distant past is how
	// it ends its background read, not a timeout of the peer's.
	deadline atomic.Int64
}

// abortDeadline is below any deadline net/http sets for a timeout (it ends a background read
// with time.Unix(1, 0)).
var abortDeadline = time.Unix(1<<20, 0).UnixNano()

func (c *metricsConn) SetReadDeadline(t time.Time) error {
	c.deadline.Store(t.UnixNano())
	return c.Conn.SetReadDeadline(t)
}

func (c *metricsConn) SetDeadline(t time.Time) error {
	c.deadline.Store(t.UnixNano())
	return c.Conn.SetDeadline(t)
}

func (c *metricsConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	if n > 0 {
		if c.reads.Add(1) == 1 {
			if speaks := metricsPortSpeaks(netguard.Sniff(p[:n])); speaks != "" {
				c.g.warn.Warn(c.g.log, speaks, "remote", c.remote)
				_ = c.Conn.Close()
				return 0, io.EOF
			}
		}
		if c.unans.Add(int64(n)) == int64(n) && c.writes.Load() > 0 {
			c.began.Store(time.Now().UnixNano()) // a later request's first byte
		}
	}
	if err != nil && errors.Is(err, os.ErrDeadlineExceeded) {
		if dl := c.deadline.Load(); dl != 0 && dl < abortDeadline {
			return n, err
		}
		switch {
		case c.unans.Load() > 0:
			waited := time.Since(time.Unix(0, c.began.Load()))
			c.g.warn.Warn(c.g.log, "closing metrics connection: request incomplete within its read timeout",
				append(netguard.StalledAttrs(c.remote, c.unans.Load(), 0, waited, c.g.readTimeout), "readHeaderTimeout", c.g.headerTimeout)...)
		case c.writes.Load() == 0:
			c.g.warn.Warn(c.g.log, "closing metrics connection: no request within the read header timeout of connecting", "remote", c.remote,
				"readHeaderTimeout", c.g.headerTimeout)
		default:
			c.g.warn.Info(c.g.log, "closing metrics connection: idle", "remote", c.remote, "idleTimeout", metricsIdleTimeout)
		}
	}
	return n, err
}

// metricsPortSpeaks returns the line that closes a connection opening with probe, "" for an
// opening the admin port serves: a TLS client (it is plain HTTP) and an HTTP/2 client with prior
// knowledge (net/http would answer its preface with a bare 400 and say nothing: it speaks
// HTTP/1.1 only, without h2c) are named and closed, as on every port.
func metricsPortSpeaks(probe netguard.Probe) string {
	switch probe {
	case netguard.ProbeTLS:
		return probe.Reason("plain HTTP (metrics, pprof)")
	case netguard.ProbeHTTP2:
		return probe.Reason("HTTP/1.1 (metrics, pprof)")
	}
	return ""
}

func (c *metricsConn) Write(p []byte) (int, error) {
	c.unans.Store(0)
	c.writes.Add(1)
	return c.Conn.Write(p)
}
