package client

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/petrel-mq/petrel/protocol/rpc"
)

// connPool keeps one rpc.Conn per address. A connection that closed (the broker restarted, the
// network failed) is replaced by a new dial on next use; after a failed dial the address is
// given a backoff during which get fails at once, so a dead broker costs callers nothing. A
// connection that stays silent through a request's timeout is closed (closeIfSilent), so it is
// replaced too. An address whose server answered SHUTTING_DOWN gets the same kind of backoff
// (shuttingDown) while its connection stays open: a stopping broker waits for its clients to go
// quiet before it closes their connections, and requests sent meanwhile would only be refused.
// It is safe for concurrent use.
type connPool struct {
	opts       rpc.Options
	backoff    time.Duration
	maxBackoff time.Duration
	now        func() time.Time
	log        *slog.Logger

	mu     sync.RWMutex // guards conns, closed
	conns  map[string]*poolConn
	closed bool
}

// poolConn is the slot of one address.
type poolConn struct {
	conn atomic.Pointer[rpc.Conn] // the current connection, possibly closed

	// downUntil is when the backoff after a SHUTTING_DOWN answer ends (Unix ns of now()); 0 for
	// none. It is written under mu and read without it.
	downUntil atomic.Int64

	mu          sync.Mutex    // guards the fields below
	dialing     chan struct{} // closed when the dial in progress ends; nil when none
	nextDial    time.Time     // no dial before this time
	backoff     time.Duration // the wait after the next failed dial
	lastErr     error         // why the last dial failed
	downBackoff time.Duration // the wait after the next SHUTTING_DOWN answer
}

func newConnPool(opts rpc.Options, backoff, maxBackoff time.Duration, log *slog.Logger) *connPool {
	return &connPool{
		opts:       opts,
		backoff:    backoff,
		maxBackoff: maxBackoff,
		now:        time.Now,
		log:        log,
		conns:      make(map[string]*poolConn),
	}
}

// errSilentConn is the cause a connection closed by closeIfSilent reports.
var errSilentConn = errors.New("client: a request timed out and nothing was received on the connection since it was sent")

// closeIfSilent closes c, whose request sent at sentAt has just timed out, when nothing at all
// was received on c since then: the connection is presumably dead (open, but nobody serves it: a
// hung server, or a connection accepted by a listener that was closing), and every later request
// on it would time out too. Closing it makes get dial a new one on next use; the other calls
// waiting on it fail with an unknown outcome. A connection that received anything since, a late
// answer included, is kept: its server is alive, only slow. RocketMQ's client likewise closes a
// channel whose request timed out (clientCloseSocketIfTimeout). One Warn line is logged per
// connection closed.
func (p *connPool) closeIfSilent(c *rpc.Conn, sentAt time.Time) {
	last := c.LastReceive()
	if !last.Before(sentAt) {
		return
	}
	if c.Abort(errSilentConn) {
		lastSeen := "never"
		if !last.IsZero() {
			lastSeen = time.Since(last).Round(time.Millisecond).String() + " ago"
		}
		p.log.Warn("closing a connection that received nothing since a request that timed out; it is dialled again on next use",
			"addr", c.Addr(), "request_age", time.Since(sentAt).Round(time.Millisecond), "last_receive", lastSeen)
	}
}

func isOpen(c *rpc.Conn) bool {
	if c == nil {
		return false
	}
	select {
	case <-c.Done():
		return false
	default:
		return true
	}
}

func (p *connPool) slot(addr string) (*poolConn, error) {
	p.mu.RLock()
	pc, closed := p.conns[addr], p.closed
	p.mu.RUnlock()
	if closed {
		return nil, ErrClientClosed
	}
	if pc != nil {
		return pc, nil
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return nil, ErrClientClosed
	}
	if pc = p.conns[addr]; pc == nil {
		pc = &poolConn{backoff: p.backoff}
		p.conns[addr] = pc
	}
	return pc, nil
}

// get returns an open connection to addr, dialling one if needed. Errors: ErrClientClosed,
// ErrBrokerUnavailable (wrapping the dial error; also during the backoff after a failed dial),
// or ctx's error. No request was sent when get fails.
func (p *connPool) get(ctx context.Context, addr string) (*rpc.Conn, error) {
	pc, err := p.slot(addr)
	if err != nil {
		return nil, err
	}
	if c := pc.conn.Load(); isOpen(c) {
		if err := p.downErr(pc, addr); err != nil {
			return nil, err
		}
		return c, nil
	}
	for {
		pc.mu.Lock()
		if c := pc.conn.Load(); isOpen(c) {
			pc.mu.Unlock()
			if err := p.downErr(pc, addr); err != nil {
				return nil, err
			}
			return c, nil
		}
		if ch := pc.dialing; ch != nil {
			pc.mu.Unlock()
			select {
			case <-ch:
				continue
			case <-ctx.Done():
				return nil, fmt.Errorf("cannot connect to %s: %w", addr, ctx.Err())
			}
		}
		if now, next := p.now(), pc.nextDial; now.Before(next) {
			err := pc.lastErr
			pc.mu.Unlock()
			return nil, fmt.Errorf("%w: %s: %v (next dial in %v)", ErrBrokerUnavailable, addr, err, next.Sub(now).Round(time.Millisecond))
		}
		ch := make(chan struct{})
		pc.dialing = ch
		old := pc.conn.Swap(nil)
		pc.mu.Unlock()

		if old != nil {
			_ = old.Close() // already closed; this waits for its goroutines
		}
		c, err := rpc.Dial(ctx, addr, p.opts)

		pc.mu.Lock()
		pc.dialing = nil
		close(ch)
		if err != nil {
			if ctx.Err() == nil { // a failure of the address, not of the caller's patience
				pc.lastErr = err
				pc.nextDial = p.now().Add(pc.backoff)
				pc.backoff = min(pc.backoff*2, p.maxBackoff)
			}
			pc.mu.Unlock()
			return nil, fmt.Errorf("%w: %w", ErrBrokerUnavailable, err)
		}
		pc.backoff = p.backoff
		pc.lastErr = nil
		pc.nextDial = time.Time{}
		pc.downUntil.Store(0) // a new connection: the server that was shutting down is gone
		pc.conn.Store(c)
		pc.mu.Unlock()

		p.mu.RLock()
		closed := p.closed
		p.mu.RUnlock()
		if closed { // Close ran while we dialled; it may have missed this connection
			if pc.conn.CompareAndSwap(c, nil) {
				_ = c.Close()
			}
			return nil, ErrClientClosed
		}
		return c, nil
	}
}

// downErr returns ErrBrokerUnavailable while addr is in the backoff after a SHUTTING_DOWN
// answer, else nil.
func (p *connPool) downErr(pc *poolConn, addr string) error {
	until := pc.downUntil.Load()
	if until == 0 {
		return nil
	}
	if left := time.Duration(until - p.now().UnixNano()); left > 0 {
		return fmt.Errorf("%w: %s is shutting down (next attempt in %v)", ErrBrokerUnavailable, addr, left.Round(time.Millisecond))
	}
	return nil
}

// shuttingDown records that the server at addr answered SHUTTING_DOWN: for a backoff (the
// reconnect backoff, doubling while the answers go on, up to its maximum) get fails at once with
// ErrBrokerUnavailable instead of returning the open connection, so the client stops sending to
// the stopping broker and lets it drain; requests already sent still get their answers. The
// answers of one burst of requests start one backoff. A new connection to addr ends it.
func (p *connPool) shuttingDown(addr string) {
	p.mu.RLock()
	pc := p.conns[addr]
	p.mu.RUnlock()
	if pc == nil {
		return
	}
	now := p.now().UnixNano()
	pc.mu.Lock()
	defer pc.mu.Unlock()
	until := pc.downUntil.Load()
	if now < until {
		return
	}
	if until == 0 || time.Duration(now-until) > pc.downBackoff { // a new shutdown, not the same one going on
		pc.downBackoff = p.backoff
	}
	pc.downUntil.Store(now + int64(pc.downBackoff))
	pc.downBackoff = min(2*pc.downBackoff, p.maxBackoff)
}

// close closes every connection and makes get fail with ErrClientClosed.
func (p *connPool) close() {
	p.mu.Lock()
	p.closed = true
	conns := p.conns
	p.conns = map[string]*poolConn{}
	p.mu.Unlock()
	for _, pc := range conns {
		pc.mu.Lock()
		ch := pc.dialing
		pc.mu.Unlock()
		if ch != nil {
			<-ch // the dialler sees closed and closes its connection itself
		}
		if c := pc.conn.Swap(nil); c != nil {
			_ = c.Close()
		}
	}
}
