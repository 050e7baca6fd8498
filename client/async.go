package client

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/petrel-mq/petrel/protocol"
	"github.com/valyala/bytebufferpool"
)

// asyncQueue accumulates the asynchronous messages of one queue. A goroutine (runQueue) runs
// while the queue has messages: it seals the open batch when it is full or its linger time has
// passed, sends sealed batches one at a time and runs their callbacks in order, so callbacks of
// one queue come in the order SendAsync was called.
type asyncQueue struct {
	mq   MessageQueue
	kick chan struct{} // capacity 1: wakes runQueue when a batch is sealed or a flush starts
	gen  atomic.Uint64 // incremented when the open batch is sealed
	// held is the producer buffer (bytes) the queue's messages hold until they are answered.
	// Unkeyed messages go to queues holding less than their share (queueForMessage), so a
	// queue that does not drain, its master hung, cannot take the buffer of the others.
	held atomic.Int64

	mu      sync.Mutex // guards cur, ready, running
	cur     *asyncBatch
	ready   []*asyncBatch
	running bool
}

// asyncBatch is one batch being accumulated or waiting to be sent.
type asyncBatch struct {
	buf     *bytebufferpool.ByteBuffer
	topic   string
	count   int32
	cbs     []func(SendResult, error)
	bytes   int  // buffer budget held
	pinned  bool // holds a keyed message: retries stay on the queue
	key     string
	created time.Time
	// traced says the batch is traced (WithTraceEvery), tr holds its trace.
	traced bool
	tr     batchTrace
}

var asyncBatchPool = sync.Pool{New: func() any { return new(asyncBatch) }}

func (b *asyncBatch) recycle() {
	batchPool.Put(b.buf)
	clear(b.cbs)
	*b = asyncBatch{cbs: b.cbs[:0]}
	asyncBatchPool.Put(b)
}

func (q *asyncQueue) kickIt() {
	select {
	case q.kick <- struct{}{}:
	default:
	}
}

// sealLocked moves the open batch to the ready list. q.mu must be held.
func (q *asyncQueue) sealLocked() {
	if q.cur == nil {
		return
	}
	if q.cur.traced {
		q.cur.tr.sealed = time.Now().UnixNano()
	}
	q.ready = append(q.ready, q.cur)
	q.cur = nil
	q.gen.Add(1)
}

// SendAsync queues m for sending in a batch and returns; cb (which may be nil) later receives
// the outcome of that message. The message is copied before SendAsync returns.
//
// Batching: messages of one queue are collected into a batch until it holds WithMaxBatchBytes
// (256 KiB) or its first message has waited WithLinger (5 ms); each queue has at most one batch
// in flight, and each broker group at most WithMaxInFlightPerBroker. Every batch is bounded by
// WithSendTimeout once it starts sending, and retried as SendSync.
//
// Back-pressure: the bytes of messages not yet answered are bounded by WithBufferBytes
// (32 MiB); when the buffer is full SendAsync blocks until space frees or ctx ends. ctx bounds
// only this wait and the route lookup, not the send itself.
//
// Callbacks: for the messages of one queue they are called in the order of the SendAsync calls
// (an unkeyed message's queue is chosen by SendAsync). They run on the queue's sender
// goroutine, one at a time, so they must be quick and must not block on this producer: calling
// SendAsync from a callback may deadlock when the buffer is full. The SendResult of each message
// carries its own QueueOffset; Count is the batch's. The error is ErrUnknownOutcome (wrapped)
// when the batch was sent but not answered, ErrProducerClosed when Close gave up before sending
// it, or a definite failure as for SendSync.
//
// SendAsync returns an error, and cb is never called, when ctx is nil (ErrInvalidArgument), the
// message is invalid, the topic has no route, ctx has ended (before the call: ctx's error,
// wrapped, with nothing buffered) or ends while waiting for space, or the producer is closed
// (ErrProducerClosed; after the Client's Close, an error matching ErrClientClosed too).
func (p *Producer) SendAsync(ctx context.Context, m *Message, cb func(SendResult, error)) error {
	if err := p.usable(ctx, "Producer.SendAsync"); err != nil {
		return err
	}
	if err := p.checkMessage(m); err != nil {
		return err
	}
	route, err := p.route(ctx, m.Topic)
	if err != nil {
		return err
	}
	if len(route.writeQueues) == 0 {
		return fmt.Errorf("%w: topic %q has no writable queue", ErrNoQueue, m.Topic)
	}
	size := encodedSize(m)
	for k, v := range m.Properties {
		size += len(k) + len(v) + 2
	}
	held, err := p.budget.acquire(ctx, size)
	if err != nil {
		if errors.Is(err, ErrProducerClosed) {
			return p.closedErr()
		}
		return err
	}
	p.mu.RLock()
	defer p.mu.RUnlock()
	if p.closed {
		p.budget.release(held)
		return p.closedErr()
	}
	q := p.queueForMessage(route, m)
	now := time.Now()
	q.mu.Lock()
	if q.cur != nil && q.cur.buf.Len()+size > p.cfg.maxBatchBytes {
		q.sealLocked()
	}
	fresh := q.cur == nil
	if fresh {
		b := asyncBatchPool.Get().(*asyncBatch)
		b.buf = batchPool.Get()
		b.buf.B = protocol.AppendBatchHeader(b.buf.B[:0], m.Topic, q.mq.QueueID, p.id, 0)
		b.topic = m.Topic
		b.created = now
		if id, ok := p.trace.draw(); ok {
			b.traced = true
			b.tr = batchTrace{hdr: protocol.TraceHeader{ID: id}, created: now.UnixNano()}
		}
		q.cur = b
	}
	b := q.cur
	b.buf.B, err = p.appendMessage(b.buf.B, m, now.UnixMilli())
	if err != nil {
		if fresh {
			q.cur = nil
			b.recycle()
		}
		q.mu.Unlock()
		p.budget.release(held)
		return err
	}
	b.count++
	b.cbs = append(b.cbs, cb)
	b.bytes += held
	q.held.Add(int64(held))
	if m.ShardingKey != "" && !b.pinned {
		b.pinned, b.key = true, m.ShardingKey
	}
	sealed := false
	if b.buf.Len() >= p.cfg.maxBatchBytes {
		q.sealLocked()
		sealed = true
	}
	p.pending.add(1)
	start := !q.running
	if start {
		q.running = true
		p.wg.Add(1)
	}
	q.mu.Unlock()
	if start {
		go p.runQueue(q)
	} else if sealed || fresh {
		q.kickIt()
	}
	return nil
}

// queueForMessage returns the accumulator of the queue m goes to. p.mu is held for reading.
//
// An unkeyed message goes to the topic's sticky queue while its open batch is not sealed, its
// group is not in fault backoff, and it holds less than its share of the producer's buffer
// (WithBufferBytes over the queues the producer sends to, of every topic); else to a queue
// picked round-robin among those that qualify, when some do. The share keeps queues that stop
// draining (their master hangs: the batch in flight gets no answer, the messages behind it pile
// up) from taking more than their part of the buffer before any request has failed, which
// would block SendAsync for every group.
func (p *Producer) queueForMessage(route *topicRoute, m *Message) *asyncQueue {
	if m.ShardingKey != "" {
		qs := route.writeQueues
		return p.asyncQueue(qs[shardIndex(m.ShardingKey, len(qs))])
	}
	p.qMu.Lock()
	st, ok := p.sticky[m.Topic]
	share := max(int64(p.cfg.bufferBytes/max(len(p.queues), len(route.writeQueues))), 1)
	p.qMu.Unlock()
	now := time.Now()
	if ok && st.route == route && st.q.gen.Load() == st.gen && now.Before(st.until) && st.q.held.Load() < share && p.groupAvailable(route, st.q.mq.BrokerName) {
		return st.q
	}
	q := p.asyncQueue(p.pickUnkeyed(route, "", func(mq MessageQueue) bool {
		p.qMu.Lock()
		q := p.queues[mq]
		p.qMu.Unlock()
		return q == nil || q.held.Load() < share
	}))
	p.qMu.Lock()
	p.sticky[m.Topic] = stickyChoice{q: q, gen: q.gen.Load(), route: route, until: now.Add(p.cfg.linger)}
	p.qMu.Unlock()
	return q
}

func (p *Producer) asyncQueue(mq MessageQueue) *asyncQueue {
	p.qMu.Lock()
	defer p.qMu.Unlock()
	q := p.queues[mq]
	if q == nil {
		q = &asyncQueue{mq: mq, kick: make(chan struct{}, 1)}
		p.queues[mq] = q
	}
	return q
}

// runQueue sends the queue's batches in order until it has none, then exits.
func (p *Producer) runQueue(q *asyncQueue) {
	defer p.wg.Done()
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	for {
		b := p.nextBatch(q, timer)
		if b == nil {
			return
		}
		var tr *batchTrace // nil: untraced
		if b.traced {
			tr = &b.tr
			tr.taken = time.Now().UnixNano()
		}
		var res SendResult
		var err error
		if p.ctx.Err() != nil {
			err = fmt.Errorf("%w: the batch was not sent", p.closedErr())
		} else {
			route, rerr := p.c.route(p.ctx, b.topic)
			if rerr != nil {
				err = rerr
			} else {
				res, err = p.send(p.ctx, time.Now().Add(p.cfg.sendTimeout), &sendJob{
					topic: b.topic, batch: b.buf.B, count: b.count, mq: q.mq, pinned: b.pinned, key: b.key, route: route, async: true, tr: tr,
				})
			}
			if err != nil && p.ctx.Err() != nil && !errors.Is(err, ErrUnknownOutcome) {
				err = fmt.Errorf("%w: %w", p.closedErr(), err)
			}
		}
		if tr != nil {
			p.trace.finish(tr, b.topic, b.count, q.mq, res, err)
		}
		base := res.QueueOffset
		for i, cb := range b.cbs {
			if cb == nil {
				continue
			}
			r := res
			if err == nil {
				r.QueueOffset = base + int64(i)
			}
			cb(r, err)
		}
		q.held.Add(-int64(b.bytes))
		p.budget.release(b.bytes)
		p.pending.done(len(b.cbs))
		b.recycle()
	}
}

// nextBatch returns the queue's next batch to send, waiting for the open batch's linger time,
// or nil (and marks the queue idle) when there is nothing left.
func (p *Producer) nextBatch(q *asyncQueue, timer *time.Timer) *asyncBatch {
	q.mu.Lock()
	for {
		if len(q.ready) > 0 {
			b := q.ready[0]
			q.ready[0] = nil
			q.ready = q.ready[1:]
			if len(q.ready) == 0 {
				q.ready = q.ready[:0:0]
			}
			q.mu.Unlock()
			return b
		}
		if q.cur == nil {
			q.running = false
			q.mu.Unlock()
			return nil
		}
		wait := p.cfg.linger - time.Since(q.cur.created)
		if wait <= 0 || p.flushing.Load() > 0 || p.ctx.Err() != nil {
			q.sealLocked()
			continue
		}
		q.mu.Unlock()
		timer.Reset(wait)
		select {
		case <-timer.C:
		case <-q.kick:
		case <-p.ctx.Done():
		}
		timer.Stop()
		q.mu.Lock()
	}
}

// Flush sends every buffered asynchronous message at once (ignoring the linger time) and waits
// until all of them, and any sent concurrently with Flush, have been answered and their
// callbacks have returned, or ctx ends (then it returns ctx's error; at once, sending nothing,
// when ctx had ended before the call). On a closed producer it returns ErrProducerClosed (after
// the Client's Close, an error matching ErrClientClosed too): Close flushed what it could.
// Safe for concurrent use.
func (p *Producer) Flush(ctx context.Context) error {
	if err := p.usable(ctx, "Producer.Flush"); err != nil {
		return err
	}
	return p.flush(ctx)
}

// flush is Flush without its checks, for Close.
func (p *Producer) flush(ctx context.Context) error {
	p.flushing.Add(1)
	defer p.flushing.Add(-1)
	p.qMu.Lock()
	for _, q := range p.queues {
		q.kickIt()
	}
	p.qMu.Unlock()
	return p.pending.wait(ctx)
}

// BufferedBytes returns the bytes of asynchronous messages accepted and not yet answered.
func (p *Producer) BufferedBytes() int { return p.budget.inUse() }

// Close stops accepting messages (sends and Flush fail with ErrProducerClosed, SendAsync calls
// waiting for buffer space return it), then flushes the buffered ones and waits for their answers until
// ctx ends. If ctx ends first, batches not yet sent get ErrProducerClosed and batches in flight
// ErrUnknownOutcome in their callbacks, and Close returns ctx's error. When Close returns, every
// callback has returned, the producer's goroutines have exited and the client refreshes the
// routes of its topics no more (unless another user holds them). Later calls return the first
// call's result. A nil ctx is refused (ErrInvalidArgument) before anything is closed, and the
// call does not count as the first.
func (p *Producer) Close(ctx context.Context) error {
	if err := argContext(ctx, "Producer.Close"); err != nil {
		return err
	}
	p.closeOnce.Do(func() {
		p.mu.Lock()
		p.closed = true
		p.mu.Unlock()
		p.budget.close()
		p.closeErr = p.flush(ctx)
		p.cancel()
		p.wg.Wait()
		p.releaseTopics()
		p.c.removeUser(p)
	})
	return p.closeErr
}

// closeFromClient closes the producer without flushing: buffered batches get
// ErrProducerClosed, batches in flight ErrUnknownOutcome.
func (p *Producer) closeFromClient() {
	p.closeOnce.Do(func() {
		p.mu.Lock()
		p.closed = true
		p.mu.Unlock()
		p.budget.close()
		p.cancel()
		p.wg.Wait()
		p.releaseTopics()
	})
}

// byteBudget is a counting semaphore over bytes with FIFO waiters and context-aware acquire
// (as golang.org/x/sync/semaphore). It is safe for concurrent use.
type byteBudget struct {
	mu      sync.Mutex // guards the fields below
	max     int
	used    int
	closed  bool
	waiters []*budgetWaiter
}

type budgetWaiter struct {
	n     int
	ready chan struct{} // closed when granted or failed
	err   error
}

func newByteBudget(max int) *byteBudget { return &byteBudget{max: max} }

// acquire takes n bytes (at most the whole budget, so one message larger than it still
// passes, alone) and returns how many it took.
func (b *byteBudget) acquire(ctx context.Context, n int) (int, error) {
	n = min(n, b.max)
	b.mu.Lock()
	if b.closed {
		b.mu.Unlock()
		return 0, ErrProducerClosed
	}
	if len(b.waiters) == 0 && b.used+n <= b.max {
		b.used += n
		b.mu.Unlock()
		return n, nil
	}
	w := &budgetWaiter{n: n, ready: make(chan struct{})}
	b.waiters = append(b.waiters, w)
	b.mu.Unlock()
	select {
	case <-w.ready:
		return n, w.err
	case <-ctx.Done():
		b.mu.Lock()
		select {
		case <-w.ready: // granted (or failed) meanwhile
			b.mu.Unlock()
			if w.err == nil {
				b.release(n)
			}
		default:
			for i, x := range b.waiters {
				if x == w {
					b.waiters = append(b.waiters[:i], b.waiters[i+1:]...)
					break
				}
			}
			b.grantLocked() // the head may have changed
			b.mu.Unlock()
		}
		return 0, fmt.Errorf("waiting for producer buffer space: %w", ctx.Err())
	}
}

func (b *byteBudget) release(n int) {
	if n == 0 {
		return
	}
	b.mu.Lock()
	b.used -= n
	if b.used < 0 {
		panic("BUG: producer buffer released more than acquired")
	}
	b.grantLocked()
	b.mu.Unlock()
}

// grantLocked wakes waiters in order while they fit. b.mu must be held.
func (b *byteBudget) grantLocked() {
	for len(b.waiters) > 0 {
		w := b.waiters[0]
		if b.used+w.n > b.max {
			return
		}
		b.used += w.n
		b.waiters[0] = nil
		b.waiters = b.waiters[1:]
		close(w.ready)
	}
}

func (b *byteBudget) inUse() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.used
}

// close fails every waiter and later acquires with ErrProducerClosed.
func (b *byteBudget) close() {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.closed = true
	for _, w := range b.waiters {
		w.err = ErrProducerClosed
		close(w.ready)
	}
	b.waiters = nil
}

// pendingCounter counts messages accepted and not yet answered, and lets Flush wait for zero.
type pendingCounter struct {
	mu   sync.Mutex // guards n, zero
	n    int
	zero chan struct{} // closed when n returns to 0
}

func (c *pendingCounter) add(k int) {
	c.mu.Lock()
	if c.n == 0 {
		c.zero = make(chan struct{})
	}
	c.n += k
	c.mu.Unlock()
}

func (c *pendingCounter) done(k int) {
	c.mu.Lock()
	c.n -= k
	if c.n == 0 {
		close(c.zero)
	}
	c.mu.Unlock()
}

func (c *pendingCounter) wait(ctx context.Context) error {
	c.mu.Lock()
	if c.n == 0 {
		c.mu.Unlock()
		return nil
	}
	ch := c.zero
	c.mu.Unlock()
	select {
	case <-ch:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
