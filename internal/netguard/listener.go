package netguard

import (
	"net"
	"sync/atomic"
)

// LimitListener accepts at most Max connections open at once from the listener it wraps: a
// connection accepted past the cap is closed at once (its client sees it closed before
// anything is read) and reported to the refused callback; Accept then waits for the next one. A
// connection counts from its accept until its Close.
type LimitListener struct {
	net.Listener
	max     int
	refused func(remote net.Addr)
	open    atomic.Int64
}

// Limit wraps ln with a cap of max open connections (max <= 0: no cap). refused, when set,
// hears the address of every connection closed for the cap (a log line, rate-limited by the
// caller); it runs on the accepting goroutine and must not block.
func Limit(ln net.Listener, max int, refused func(remote net.Addr)) *LimitListener {
	return &LimitListener{Listener: ln, max: max, refused: refused}
}

// Accept returns the next connection within the cap.
func (l *LimitListener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		if n := l.open.Add(1); l.max > 0 && n > int64(l.max) {
			l.open.Add(-1)
			_ = c.Close()
			if l.refused != nil {
				l.refused(c.RemoteAddr())
			}
			continue
		}
		return &limitConn{Conn: c, l: l}, nil
	}
}

// Open returns the number of connections accepted and not yet closed.
func (l *LimitListener) Open() int { return int(l.open.Load()) }

// limitConn gives its slot back on its first Close.
type limitConn struct {
	net.Conn
	l      *LimitListener
	closed atomic.Bool
}

func (c *limitConn) Close() error {
	if !c.closed.Swap(true) {
		c.l.open.Add(-1)
	}
	return c.Conn.Close()
}
