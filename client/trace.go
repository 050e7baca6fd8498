package client

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/petrel-mq/petrel/protocol"
)

// Send tracing (WithTraceEvery): a sample of a producer's batches carries a protocol.TraceHeader,
// which makes a broker that supports tracing record when the send passed each of its stages
// (Admin.SendTraces reads them); the producer records the client's stages of the same batches and
// hands them to WithSendTraceObserver. Every stamp is a Unix nanosecond of the wall clock, so
// that client and broker stamps of processes on one machine compare. A broker that predates
// tracing refuses a traced send as malformed: trace only against brokers that support it.

// SendTraceClient is what a producer recorded of one traced batch (see WithTraceEvery). The
// stamps are Unix nanoseconds (time.Now().UnixNano()), in the order a batch passes them; a
// stage the batch never reached is 0.
type SendTraceClient struct {
	// ID is the batch's protocol.TraceHeader.ID, which the broker's protocol.SendTrace of the
	// same send carries: a random 32-bit prefix of the producer and a counter. Every attempt of
	// a retried batch carries it, so brokers may hold a trace of an attempt that failed too.
	ID    uint64
	Topic string
	// QueueID is the queue that stored the batch, or when Err is not nil the queue it was
	// first sent to.
	QueueID int32
	// BaseQueueOffset is the queue offset of the batch's first message; -1 when Err is not nil.
	BaseQueueOffset int64
	// Count is the number of messages in the batch.
	Count int32
	// Created: the batch's first message was queued (SendAsync), or the send began (SendSync,
	// SendBatchSync).
	Created int64
	// Sealed: the batch was closed to further messages (full, its linger time passed, a Flush
	// or Close); for a synchronous send, when it was encoded.
	Sealed int64
	// Taken: the queue's sender took the batch to send it, which it does once the queue's
	// previous batch is answered; for a synchronous send, Sealed.
	Taken int64
	// Written: the request of the batch's last attempt was handed to the connection (queued
	// for its writer, after the queue's sequence lock).
	Written int64
	// Received: the outcome of the last attempt came off the connection (its answer was read,
	// or the connection failed); 0 when none came (the send timed out or was abandoned).
	Received int64
	// Done: the result of the batch was known; the observer runs right after, then the
	// messages' callbacks.
	Done int64
	// Err is the batch's error (nil: stored).
	Err error
}

// batchTrace is the part of a traced batch's SendTraceClient filled while it is sent.
type batchTrace struct {
	hdr      protocol.TraceHeader
	created  int64
	sealed   int64
	taken    int64
	written  int64
	received int64 // stamped by the connection's reader (pendingCall.complete)
}

// sendTracer draws the batches of a producer that are traced and numbers them.
type sendTracer struct {
	every    uint64 // 0: off
	observer func(SendTraceClient)
	prefix   uint64 // the producer's random upper 32 bits of every ID
	counter  atomic.Uint32

	mu  sync.Mutex // guards rng
	rng *rand.PCG
}

func newSendTracer(every int, observer func(SendTraceClient)) *sendTracer {
	t := &sendTracer{every: uint64(every), observer: observer}
	if every > 0 {
		t.prefix = uint64(rand.Uint32()|1) << 32
		t.rng = rand.NewPCG(rand.Uint64(), rand.Uint64())
	}
	return t
}

// draw decides whether a new batch is traced: true about once in every, by a random draw (not
// every every-th batch, which could fall in step with the queues' round-robin and trace one
// queue only). A traced batch gets its ID.
func (t *sendTracer) draw() (uint64, bool) {
	if t.every == 0 {
		return 0, false
	}
	t.mu.Lock()
	hit := t.every == 1 || t.rng.Uint64()%t.every == 0
	t.mu.Unlock()
	if !hit {
		return 0, false
	}
	return t.prefix | uint64(t.counter.Add(1)), true
}

// start returns the trace of a synchronous send beginning now, or nil when it is not traced.
func (t *sendTracer) start() *batchTrace {
	id, ok := t.draw()
	if !ok {
		return nil
	}
	return &batchTrace{hdr: protocol.TraceHeader{ID: id}, created: time.Now().UnixNano()}
}

// finish hands the trace of a batch whose result is known to the observer.
func (t *sendTracer) finish(tr *batchTrace, topic string, count int32, mq MessageQueue, res SendResult, err error) {
	if t.observer == nil {
		return
	}
	st := SendTraceClient{
		ID:              tr.hdr.ID,
		Topic:           topic,
		QueueID:         mq.QueueID,
		BaseQueueOffset: -1,
		Count:           count,
		Created:         tr.created,
		Sealed:          tr.sealed,
		Taken:           tr.taken,
		Written:         tr.written,
		Received:        tr.received,
		Done:            time.Now().UnixNano(),
		Err:             err,
	}
	if err == nil {
		st.QueueID, st.BaseQueueOffset = res.QueueID, res.QueueOffset
	}
	t.observer(st)
}

// WithTraceEvery traces about one in n of the producer's batches (0, the default: none): a
// traced batch is sent with a protocol.TraceHeader, so that a broker supporting tracing records
// its stages (Admin.SendTraces), and the producer hands its own stages to the
// WithSendTraceObserver function. Which batches are traced is a random draw per batch of the
// producer, asynchronous and synchronous ones alike (SendOneway is never traced). Brokers that
// predate tracing refuse a traced send (REQUEST_MALFORMED). Untraced batches cost nothing more.
// A negative n is ErrInvalidOption.
func WithTraceEvery(n int) ProducerOption {
	return func(c *producerConfig) {
		if n < 0 {
			c.errs.add("WithTraceEvery", "%d is negative", n)
			return
		}
		c.traceEvery = n
	}
}

// WithSendTraceObserver sets the function that receives the SendTraceClient of every traced
// batch (see WithTraceEvery) once its result is known, before the callbacks of its messages.
// For SendAsync it runs on the queue's sender goroutine, for SendSync and SendBatchSync on the
// caller's before the call returns, so it must be quick and must not block on the producer. A
// synchronous send that fails before its batch is built (an invalid message, no route) is not
// reported. A nil fn is ErrInvalidOption.
func WithSendTraceObserver(fn func(SendTraceClient)) ProducerOption {
	return func(c *producerConfig) {
		if fn == nil {
			c.errs.add("WithSendTraceObserver", "nil function")
			return
		}
		c.traceObserver = fn
	}
}

// PullTiming is when one pull that delivered messages was sent and answered (see
// WithPullObserver). Sent and Received are Unix nanoseconds (time.Now().UnixNano()).
type PullTiming struct {
	Topic   string
	QueueID int32
	// From is the queue offset of the first message delivered, Next the offset after the
	// pull's last batch (where the next pull starts).
	From, Next int64
	// Sent: the pull request was handed to the connection; Received: its answer came off it.
	Sent, Received int64
	// BrokerID is the member of the queue's broker group that answered (0: the master).
	BrokerID int64
}

// WithPullObserver sets a function called with the PullTiming of every pull that delivered
// messages, on the queue's pull goroutine before the messages go to the handler; it must be
// quick. A nil fn is ErrInvalidOption.
func WithPullObserver(fn func(PullTiming)) ConsumerOption {
	return func(c *consumerConfig) {
		if fn == nil {
			c.errs.add("WithPullObserver", "nil function")
			return
		}
		c.pullObserver = fn
	}
}

// SendTraces returns the send traces the broker at addr recorded (see WithTraceEvery), the
// complete ones from sequence number from on (0 at first; the table's Next after), with how many
// of them its ring overwrote before they were read (Dropped); from math.MaxUint64 answers no
// trace and the ring's head as Next (where a reader that wants only what comes next starts). A
// broker with tracing off (traceRingEntries=0) refuses the request with
// protocol.StatusServiceNotAvailable; one that predates tracing with
// protocol.StatusRequestCodeNotSupported (errors.Is, or StatusOf).
func (a *Admin) SendTraces(ctx context.Context, addr string, from uint64) (*protocol.SendTraceTable, error) {
	if err := a.args(ctx, "SendTraces", argAddr(addr)); err != nil {
		return nil, err
	}
	var t protocol.SendTraceTable
	if err := a.c.callAddr(ctx, addr, protocol.CodeGetSendTraces, &protocol.GetSendTracesRequest{From: from}, nil, nil, &t); err != nil {
		return nil, fmt.Errorf("cannot get the send traces of %s: %w", addr, err)
	}
	return &t, nil
}
