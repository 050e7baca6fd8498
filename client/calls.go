package client

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/petrel-mq/petrel/protocol"
	"github.com/petrel-mq/petrel/protocol/rpc"
)

// callState classifies how a request ended.
type callState uint8

const (
	// callOK: a success response.
	callOK callState = iota
	// callRejected: the server answered with a non-success status (a *protocol.Error).
	callRejected
	// callNotSent: the request was never written (closed connection, too many in flight,
	// frame too large): a definite failure.
	callNotSent
	// callUnknown: the request was (or may have been) written and no answer came: its
	// connection failed, or the request's own timeout passed.
	callUnknown
	// callAbandoned: the request was written and its caller gave up (its ctx ended, by
	// cancellation or by a deadline at or before the request's own) before the answer came.
	// The outcome is unknown, as for callUnknown, but it tells nothing of the broker or the
	// connection: the request is forgotten, its late answer dropped, and nothing else changes.
	callAbandoned
)

// pendingCall is one request sent with rpc.Conn.CallAsync, awaited with a context and a
// deadline. It is pooled: the send path allocates nothing of its own per request. A pendingCall
// is used by one goroutine at a time; its callback is the only other party and hands over
// through done.
type pendingCall struct {
	pool   *connPool
	conn   *rpc.Conn
	id     uint32
	sentAt time.Time     // when the request was queued on conn
	done   chan struct{} // receives one value when the callback has run
	resp   *rpc.Response
	err    error
	cb     rpc.Callback // complete, bound once so CallAsync gets no new closure
	timer  *time.Timer
	// recvAt, when not nil, receives the Unix ns at which the outcome came off the connection
	// (a traced send, an observed pull). The callback writes it before it hands over through
	// done, so the waiter reads it after wait returns.
	recvAt *int64
}

var pendingPool = sync.Pool{New: func() any {
	p := &pendingCall{done: make(chan struct{}, 1), timer: time.NewTimer(time.Hour)}
	p.timer.Stop()
	p.cb = p.complete
	return p
}}

func (p *pendingCall) complete(resp *rpc.Response, err error) {
	if p.recvAt != nil {
		*p.recvAt = time.Now().UnixNano()
	}
	p.resp, p.err = resp, err
	p.done <- struct{}{}
}

// startCall sends a request on conn, a connection of the pool. The result is awaited with wait,
// which also recycles the pendingCall.
func (cp *connPool) startCall(conn *rpc.Conn, code protocol.RequestCode, h protocol.Header, body []byte) *pendingCall {
	return cp.startCallAt(conn, code, h, body, time.Now(), nil)
}

// startCallAt is startCall for a caller that has just read the clock: now stands for the time
// the request is sent. recvAt, when not nil, receives the Unix ns at which the outcome came off
// the connection (see pendingCall.recvAt).
func (cp *connPool) startCallAt(conn *rpc.Conn, code protocol.RequestCode, h protocol.Header, body []byte, now time.Time, recvAt *int64) *pendingCall {
	p := pendingPool.Get().(*pendingCall)
	p.pool, p.conn = cp, conn
	p.sentAt = now
	p.recvAt = recvAt
	// CallAsync returns 0 when it did not send the request; the callback then already ran.
	p.id = conn.CallAsync(code, h, body, p.cb)
	return p
}

// wait waits for the response until ctx ends or deadline, the request's own timeout, passes
// (zero: none), and recycles p. The caller owns a returned response and must Release it. On
// callUnknown and callAbandoned the error says why the wait ended; on callRejected it is the
// *protocol.Error.
//
// The end of ctx is the caller giving up (callAbandoned): the request is forgotten and nothing
// is concluded about its connection, which other callers' requests share. A deadline of ctx
// at or before deadline is the caller's too, whichever timer fires first. Only the request's
// own timeout makes it callUnknown, and closes the connection when nothing was received on it
// since the request was sent and the liveness probes are off (connPool.requestTimedOut).
func (p *pendingCall) wait(ctx context.Context, deadline time.Time) (*rpc.Response, callState, error) {
	defer p.recycle()
	if p.id == 0 {
		<-p.done
		return nil, callNotSent, p.err
	}
	var timeout <-chan time.Time
	if !deadline.IsZero() {
		p.timer.Reset(time.Until(deadline))
		defer p.timer.Stop()
		timeout = p.timer.C
	}
	select {
	case <-p.done:
		return p.result()
	case <-ctx.Done():
		return p.abandon(ctx.Err(), false)
	case <-timeout:
		if cd, ok := ctx.Deadline(); ok && !cd.After(deadline) {
			return p.abandon(context.DeadlineExceeded, false) // the caller's deadline
		}
		return p.abandon(context.DeadlineExceeded, true)
	}
}

// abandon ends a wait that gave up for why (ctx's error, or DeadlineExceeded); timedOut says
// the request's own timeout passed, rather than the caller giving up.
func (p *pendingCall) abandon(why error, timedOut bool) (*rpc.Response, callState, error) {
	if p.conn.Forget(p.id) {
		if timedOut {
			p.pool.requestTimedOut(p.conn, p.sentAt)
			return nil, callUnknown, fmt.Errorf("no response from %s in time: %w", p.conn.Addr(), why)
		}
		p.pool.abandoned.Add(1)
		return nil, callAbandoned, fmt.Errorf("gave up waiting for the response from %s: %w", p.conn.Addr(), why)
	}
	<-p.done // the answer raced with the end of the wait: the callback has run or is running
	return p.result()
}

func (p *pendingCall) result() (*rpc.Response, callState, error) {
	if p.err == nil {
		return p.resp, callOK, nil
	}
	var pe *protocol.Error
	if errors.As(p.err, &pe) {
		if pe.Status == protocol.StatusShuttingDown {
			p.pool.shuttingDown(p.conn.Addr())
		}
		return nil, callRejected, p.err
	}
	// The connection failed after the request was queued: it may have been written.
	return nil, callUnknown, p.err
}

func (p *pendingCall) recycle() {
	p.pool, p.conn, p.id, p.sentAt, p.resp, p.err, p.recvAt = nil, nil, 0, time.Time{}, nil, nil, nil
	pendingPool.Put(p)
}
