package client

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/petrel-mq/petrel/internal/ratelog"
	"github.com/petrel-mq/petrel/protocol"
	"github.com/petrel-mq/petrel/protocol/rpc"
)

// connPool keeps one rpc.Conn per address. A connection that closed (the broker restarted, the
// network failed) is replaced by a new dial on next use; after a failed dial the address is
// given a backoff during which get fails at once, so a dead broker costs callers nothing. An
// address whose server answered SHUTTING_DOWN gets the same kind of backoff (shuttingDown)
// while its connection stays open: a stopping broker waits for its clients to go quiet before
// it closes their connections, and requests sent meanwhile would only be refused.
//
// A connection is shared by every request to its address, so it is closed only when it is
// dead, never because one request's caller gave up: its reader or writer failed (rpc.Conn
// closes itself), or requests waited on it and nothing at all arrived for the liveness
// interval and the probe timeout after it (watch), or, with the probes off, a request timed out
// by its own timeout with nothing received since it was sent (requestTimedOut). A request whose
// caller's ctx ended is forgotten (rpc.Conn.Forget) and its late answer dropped (counted in
// lateResponses).
//
// Liveness: a goroutine (watch) looks at every connection a few times per liveness interval. A
// connection on which requests are waiting and nothing has been received for the interval gets
// a probe, a request the broker answers at once on its event loop; when nothing at all arrives
// within the probe timeout after it, the connection is closed as dead (declareDead) long before
// the requests would time out. A request that the broker legitimately holds (a long-polling
// pull, a send waiting for a SYNC_MASTER's slaves) does not make a live connection look dead:
// the probe's answer arrives. It is safe for concurrent use.
type connPool struct {
	opts       rpc.Options
	backoff    time.Duration
	maxBackoff time.Duration
	live       livenessConfig
	// skew (ns), added to the time backoffs are measured in, lets tests move that clock.
	skew atomic.Int64
	log  *slog.Logger

	mu     sync.RWMutex // guards conns, closed
	conns  map[string]*poolConn
	closed bool

	stop chan struct{} // closed by close: the watch goroutine returns
	wg   sync.WaitGroup

	// Counters over all connections (ClientStats).
	probesSent    atomic.Int64 // liveness probes sent
	dials         atomic.Int64 // connections established (dials that succeeded)
	deadConns     atomic.Int64 // connections closed as dead (declareDead, requestTimedOut)
	abandoned     atomic.Int64 // requests forgotten because their caller gave up
	lateResponses atomic.Int64 // answers that came after their request was forgotten, dropped
}

// livenessConfig tunes the pool's liveness check; silence <= 0 turns it off, and a probe
// timeout <= 0 is taken to be silence.
type livenessConfig struct {
	silence      time.Duration // requests waiting and nothing received for this long: probe
	probeTimeout time.Duration // nothing received this long after the probe: dead
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

	live liveState // owned by the pool's watch goroutine
	// deadLog rate-limits the line declareDead logs: a hung master found dead again after
	// every reconnect of the fault detector would log one a second or more.
	deadLog ratelog.Limiter
}

// liveState is what the liveness check knows of a slot's connection.
type liveState struct {
	conn *rpc.Conn // the connection the state is about
	// waitingSince is when requests were first seen waiting on conn since it last proved alive
	// (zero: none waiting); probeSent is when the outstanding probe was sent (zero: none).
	waitingSince, probeSent time.Time
}

func newConnPool(opts rpc.Options, backoff, maxBackoff time.Duration, live livenessConfig, log *slog.Logger) *connPool {
	if live.probeTimeout <= 0 {
		live.probeTimeout = live.silence
	}
	p := &connPool{
		opts:       opts,
		backoff:    backoff,
		maxBackoff: maxBackoff,
		live:       live,
		log:        log,
		conns:      make(map[string]*poolConn),
		stop:       make(chan struct{}),
	}
	p.opts.LateResponses = &p.lateResponses
	if live.silence > 0 {
		p.wg.Add(1)
		go p.watch()
	}
	return p
}

// now returns the time backoffs are measured in.
func (p *connPool) now() time.Time { return time.Now().Add(time.Duration(p.skew.Load())) }

// errConnHung is the cause a connection closed by declareDead reports.
var errConnHung = errors.New("client: requests were waiting and nothing, a liveness probe included, was received on the connection")

// probeHeader is the liveness probe's request: GET_CONSUMER_LIST_BY_GROUP for a group nobody
// uses. A broker answers it on its event loop from memory (no disk, no wait), so an answer comes
// at once from a broker that runs, however long it holds the other requests of the connection;
// a NameServer answers it at once too (with an error status, which is as good an answer).
var probeHeader = &protocol.GroupHeader{ConsumerGroup: "PETREL_CLIENT_LIVENESS_PROBE"}

// reachable reports whether the broker at addr answers now (nil), for the producer's fault
// detector: with no open connection it dials at once, whatever the reconnect backoff or a dial
// in progress (a dial that succeeds becomes the address's connection and ends the backoff),
// then waits for the answer to a liveness probe until ctx ends. Any answer, an error status
// included, is one.
func (p *connPool) reachable(ctx context.Context, addr string) error {
	pc, err := p.slot(addr)
	if err != nil {
		return err
	}
	c := pc.conn.Load()
	if !isOpen(c) {
		// A dial of its own, beside any other in progress (which may hang on a SYN a partition
		// dropped), that becomes the address's connection when it succeeds first.
		nc, err := rpc.Dial(ctx, addr, p.opts)
		if err != nil {
			return err
		}
		p.dials.Add(1)
		pc.mu.Lock()
		if c, err = p.installLocked(pc, nc); err != nil {
			return err
		}
	}
	resp, err := c.Call(ctx, protocol.CodeGetConsumerListByGroup, probeHeader, nil)
	if err != nil {
		if _, answered := StatusOf(err); answered {
			return nil
		}
		return err
	}
	resp.Release()
	return nil
}

// dropProbeAnswer is the probe's callback: the answer only had to arrive.
func dropProbeAnswer(resp *rpc.Response, _ error) { resp.Release() }

// watch runs the liveness check of every connection a few times per interval until close.
func (p *connPool) watch() {
	defer p.wg.Done()
	tick := max(min(p.live.silence, p.live.probeTimeout)/4, time.Millisecond)
	t := time.NewTicker(tick)
	defer t.Stop()
	var slots []*poolConn
	last := time.Now()
	var heldUp time.Time
	for {
		select {
		case <-p.stop:
			return
		case <-t.C:
		}
		now := time.Now()
		if now.Sub(last) > 3*tick {
			// This goroutine ran late: the process was stopped or starved, and its readers may
			// not have read what arrived meanwhile. Silences and probes are measured from now.
			heldUp = now
		}
		last = now
		p.mu.RLock()
		for _, pc := range p.conns {
			slots = append(slots, pc)
		}
		p.mu.RUnlock()
		for _, pc := range slots {
			p.check(pc, now, heldUp)
		}
		clear(slots)
		slots = slots[:0]
	}
}

// check runs the liveness check of one slot's connection at now; heldUp is when the watch
// goroutine last ran late (silences are not counted before it).
func (p *connPool) check(pc *poolConn, now, heldUp time.Time) {
	c := pc.conn.Load()
	if !isOpen(c) {
		pc.live = liveState{}
		return
	}
	w := &pc.live
	if w.conn != c {
		*w = liveState{conn: c}
	}
	last := c.LastReceive()
	if !w.probeSent.IsZero() {
		switch {
		case !last.Before(w.probeSent): // something arrived: alive
			w.probeSent, w.waitingSince = time.Time{}, time.Time{}
		case now.Sub(latest(w.probeSent, heldUp)) >= p.live.probeTimeout:
			p.declareDead(pc, c, last)
			pc.live = liveState{}
		}
		return
	}
	if c.Waiting() == 0 {
		w.waitingSince = time.Time{}
		return
	}
	if w.waitingSince.IsZero() {
		w.waitingSince = now
		return
	}
	if now.Sub(latest(w.waitingSince, last, heldUp)) < p.live.silence {
		return
	}
	w.probeSent = now
	// CallAsync returns 0 when the probe was not sent (the connection closed, or it has its
	// maximum of requests in flight): the next round tries again.
	if c.CallAsync(protocol.CodeGetConsumerListByGroup, probeHeader, nil, dropProbeAnswer) == 0 {
		w.probeSent = time.Time{}
		return
	}
	p.probesSent.Add(1)
}

// declareDead closes c, the connection of pc on which requests waited and nothing, the
// liveness probe included, arrived in time: its waiting requests end (with rpc.ErrClosed: they
// were written, so their outcome is unknown), and the address gets the reconnect backoff of a
// failed dial, during which requests to it fail at once rather than wait on a new connection to
// the same hung server. One Warn line is logged per connection closed.
func (p *connPool) declareDead(pc *poolConn, c *rpc.Conn, last time.Time) {
	waiting := c.Waiting()
	if !c.Abort(errConnHung) {
		return
	}
	p.deadConns.Add(1)
	pc.mu.Lock()
	pc.lastErr = errConnHung
	pc.nextDial = p.now().Add(pc.backoff)
	pc.backoff = min(pc.backoff*2, p.maxBackoff)
	pc.mu.Unlock()
	lastSeen := "never"
	if !last.IsZero() {
		lastSeen = time.Since(last).Round(time.Millisecond).String() + " ago"
	}
	pc.deadLog.Warn(p.log, "closing a dead connection: requests waited and nothing arrived, not even the answer to a liveness probe; it is dialled again after the reconnect backoff",
		"addr", c.Addr(), "waiting", waiting, "last_receive", lastSeen, "probe_timeout", p.live.probeTimeout)
}

// latest returns the latest of ts.
func latest(ts ...time.Time) time.Time {
	var l time.Time
	for _, t := range ts {
		if t.After(l) {
			l = t
		}
	}
	return l
}

// errSilentConn is the cause a connection closed by requestTimedOut reports.
var errSilentConn = errors.New("client: a request timed out and nothing was received on the connection since it was sent")

// requestTimedOut is told that a request sent on c at sentAt has just timed out by its own
// timeout (not its caller's ctx). With the liveness probes on it does nothing: the watch
// goroutine alone judges whether c is dead, from everything waiting on it. With the probes off it
// is the only such judge: when nothing at all was received on c since sentAt, the connection is
// presumably dead (open, but nobody serves it: a hung server, or a connection accepted by a
// listener that was closing), and every later request on it would time out too, so it is
// closed; get dials a new one on next use, and the other calls waiting on it end as unknown
// outcomes. A connection that received anything since, a late answer included, is kept: its
// server is alive, only slow. RocketMQ's client likewise closes a channel whose request timed
// out (clientCloseSocketIfTimeout). One Warn line is logged per connection closed.
func (p *connPool) requestTimedOut(c *rpc.Conn, sentAt time.Time) {
	if p.live.silence > 0 {
		return
	}
	last := c.LastReceive()
	if !last.Before(sentAt) {
		return
	}
	if c.Abort(errSilentConn) {
		p.deadConns.Add(1)
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
	// Every request goes through here before its first byte is written: a caller whose ctx
	// has ended sends nothing, even on an open connection, rather than write a request only
	// to give up on its answer at once (an unknown outcome, for a send).
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("not sent to %s: %w", addr, err)
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
			// NB: the fault detector may connect while a dial of ours hangs (a partition
			// that just healed drops no more packets, but this dial's SYN was dropped): look
			// again now and then rather than only when this dial ends.
			t := time.NewTimer(dialRecheck)
			select {
			case <-ch:
			case <-t.C:
			case <-ctx.Done():
				t.Stop()
				return nil, fmt.Errorf("cannot connect to %s: %w", addr, ctx.Err())
			}
			t.Stop()
			continue
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
		begun := time.Now()
		c, err := rpc.Dial(ctx, addr, p.opts)

		pc.mu.Lock()
		pc.dialing = nil
		close(ch)
		if err != nil {
			if cur := pc.conn.Load(); isOpen(cur) { // the fault detector connected meanwhile
				pc.mu.Unlock()
				return cur, nil
			}
			if dialFailed(ctx, err, begun, p.opts.DialTimeout) {
				pc.lastErr = err
				pc.nextDial = p.now().Add(pc.backoff)
				pc.backoff = min(pc.backoff*2, p.maxBackoff)
			}
			pc.mu.Unlock()
			return nil, fmt.Errorf("%w: %w", ErrBrokerUnavailable, err)
		}
		p.dials.Add(1)
		return p.installLocked(pc, c)
	}
}

// dialFailed reports whether a dial that began at begun and failed with err is a failure of the
// address, which puts it in the reconnect backoff (every request to it then fails at once),
// rather than of its caller's patience, which must not: ctx ended, or its deadline, earlier
// than the dial timeout would have, cut the dial short (the dial's timeout error may come just
// before ctx reports its end). A refused or unreachable address, or a dial that ran out its own
// dial timeout, is the address's failure.
func dialFailed(ctx context.Context, err error, begun time.Time, dialTimeout time.Duration) bool {
	if ctx.Err() != nil {
		return false
	}
	var ne net.Error
	if d, ok := ctx.Deadline(); ok && d.Before(begun.Add(dialTimeout)) && errors.As(err, &ne) && ne.Timeout() {
		return false
	}
	return true
}

// dialRecheck is how often a caller waiting for another's dial looks whether a connection was
// made meanwhile by other means (the fault detector's own dial).
const dialRecheck = 50 * time.Millisecond

// installLocked makes c, just dialled, the address's connection and ends its reconnect backoff,
// unless an open connection is there already (made meanwhile by another dial): then c is
// closed and that one returned. pc.mu must be held; installLocked releases it.
func (p *connPool) installLocked(pc *poolConn, c *rpc.Conn) (*rpc.Conn, error) {
	if cur := pc.conn.Load(); isOpen(cur) {
		pc.mu.Unlock()
		_ = c.Close()
		return cur, nil
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

// close stops the liveness check, closes every connection and makes get fail with
// ErrClientClosed.
func (p *connPool) close() {
	p.mu.Lock()
	first := !p.closed
	p.closed = true
	conns := p.conns
	p.conns = map[string]*poolConn{}
	p.mu.Unlock()
	if first {
		close(p.stop)
	}
	p.wg.Wait()
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
