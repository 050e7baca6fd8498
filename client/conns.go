package client

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/petrel-mq/petrel/protocol/rpc"
)

// connPool keeps one rpc.Conn per address. A connection that closed (the broker restarted, the
// network failed) is replaced by a new dial on next use; after a failed dial the address is
// given a backoff during which get fails at once, so a dead broker costs callers nothing. It is
// safe for concurrent use.
type connPool struct {
	opts       rpc.Options
	backoff    time.Duration
	maxBackoff time.Duration
	now        func() time.Time

	mu     sync.RWMutex // guards conns, closed
	conns  map[string]*poolConn
	closed bool
}

// poolConn is the slot of one address.
type poolConn struct {
	conn atomic.Pointer[rpc.Conn] // the current connection, possibly closed

	mu       sync.Mutex    // guards the fields below
	dialing  chan struct{} // closed when the dial in progress ends; nil when none
	nextDial time.Time     // no dial before this time
	backoff  time.Duration // the wait after the next failed dial
	lastErr  error         // why the last dial failed
}

func newConnPool(opts rpc.Options, backoff, maxBackoff time.Duration) *connPool {
	return &connPool{
		opts:       opts,
		backoff:    backoff,
		maxBackoff: maxBackoff,
		now:        time.Now,
		conns:      make(map[string]*poolConn),
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
		return c, nil
	}
	for {
		pc.mu.Lock()
		if c := pc.conn.Load(); isOpen(c) {
			pc.mu.Unlock()
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
