package client

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/petrel-mq/petrel/protocol"
	"github.com/petrel-mq/petrel/protocol/rpc"
	"github.com/valyala/bytebufferpool"
)

// Offsets of the batch header fields a producer rewrites when it sends a batch to a queue other
// than the one it was built for (a retry on another broker group). They are part of the wire
// format drawn in package protocol's doc; the CRC is recomputed afterwards.
const (
	batchOffQueueID      = 42
	batchOffBaseSequence = 74
)

// batchPool holds the buffers batches are built in (sync sends and async accumulation).
var batchPool bytebufferpool.Pool

// propsPool holds scratch buffers for encoding properties.
var propsPool bytebufferpool.Pool

// Producer sends messages: synchronously (SendSync, SendBatchSync), asynchronously with
// batching (SendAsync) or without waiting for an answer (SendOneway). All methods are safe for
// concurrent use.
//
// Queue selection: an unkeyed message goes round-robin over the topic's write queues (every
// broker group with a master and write permission), skipping groups in fault backoff (see
// WithFaultBackoff: one failure event, however many requests it failed, avoids a group until
// the backoff ends, a send to it succeeds, or it has a new master); SendAsync keeps appending to
// one queue until its batch is sealed, then moves on (a sticky round-robin, so batches fill),
// and skips queues holding more than their share of the buffer (WithBufferBytes over the
// queues it sends to), so that the queues of a group whose master hangs cannot take the whole
// buffer. A message with a ShardingKey goes to the queue its key hashes to, in backoff or not.
//
// Retries: a send that failed definitely and retriably (a network failure before the request
// was written, or a status whose Retriable() is true) is retried up to WithRetries times, on
// another group when there is one (keyed messages stay on their queue), spread over that group's
// queues. An asynchronous batch whose group went into backoff while it waited goes to another
// group at its first attempt. A NOT_MASTER answer makes the producer refresh the route and send
// to the master it names. A request written but not answered is an unknown outcome
// (ErrUnknownOutcome) and is never retried; a master that stops answering is found out by the
// client's liveness probe (WithLivenessProbe) well before the send timeout.
//
// Order: a producer's messages keep, within a queue, the order in which they were sent to that
// queue. Every batch carries the producer's id (ID) and a base sequence counted per producer
// and queue; a batch takes its sequence in one step with queuing its frame on the broker's
// connection, and a connection writes its frames, and the broker stores them, in that order.
// So the acknowledged batches of a producer appear in a queue in increasing sequence order:
//   - SendAsync messages of one queue are batched and stored in the order of the SendAsync calls
//     (one batch in flight per queue);
//   - concurrent SendSync callers sending to the same queue, and batches retried onto it from
//     another group, are ordered by the sequence the client assigned as it wrote them: the
//     order in which they reached the connection, not the order in which the calls began;
//   - each attempt takes a new sequence, so a batch retried on its queue after a definite
//     failure comes after the batches written meanwhile.
//
// Not promised: the order of sends whose outcome is unknown (written on a connection that then
// failed, such a batch may be stored after batches written later on a new connection, or not
// at all); an order across queues, or for messages that changed queue (a retry moved to
// another group, keyed messages after the topic's queue count changed).
type Producer struct {
	c     *Client
	cfg   producerConfig
	id    int64
	fault *faultTracker
	trace *sendTracer

	// rr holds the topics the producer found a route of, each with its round-robin counter:
	// the producer holds each on the client (holdTopic) until Close, unless released (Close
	// has let them go) was set first.
	rrMu     sync.RWMutex // guards rr, released
	rr       map[string]*atomic.Uint32
	released bool

	seqMu sync.RWMutex // guards seqs
	seqs  map[MessageQueue]*queueSeq

	// Asynchronous sends.
	budget   *byteBudget
	pending  pendingCounter
	flushing atomic.Int32

	mu     sync.RWMutex // guards closed; held for reading while a message is enqueued
	closed bool

	detectMu  sync.Mutex // guards detecting
	detecting bool       // the fault detector runs (detect)

	qMu    sync.Mutex // guards queues, sticky, slots
	queues map[MessageQueue]*asyncQueue
	sticky map[string]stickyChoice
	slots  map[string]chan struct{}

	ctx       context.Context // ends when Close gives up waiting: in-flight batches are abandoned
	cancel    context.CancelFunc
	wg        sync.WaitGroup // the queue goroutines
	closeOnce sync.Once
	closeErr  error

	// testHookSequenced, set by tests before the first send, runs when a batch has taken its
	// sequence on a queue and its frame is about to be queued on the connection.
	testHookSequenced func(mq MessageQueue, seq int32)
}

// queueSeq is the producer's sequence counter of one queue. Taking a batch's sequence and
// queuing its frame on the connection is one step under mu, so the frames of one queue are
// queued, and on one connection written and stored, in the order of their sequences.
type queueSeq struct {
	mu   sync.Mutex // guards next; held from stamping a batch to queuing its frame
	next int32
}

// stickyChoice is the queue SendAsync appends unkeyed messages of a topic to, until the batch
// open when it was chosen (gen) is sealed.
type stickyChoice struct {
	q     *asyncQueue
	gen   uint64
	route *topicRoute
	// until ends the choice after the linger time even when the batch is not sealed yet: the
	// queue's sender seals it then unless it is stuck waiting on a hung master, and a stuck
	// queue must not take every new message of the topic meanwhile.
	until time.Time
}

// NewProducer returns a producer sending through c. It starts no goroutine until SendAsync is
// used. Close it before closing c (closing c closes it too). Errors: ErrInvalidArgument for a
// nil c; ErrInvalidOption for an option given a value outside its range (see ClientOption), or
// a max message size that does not fit the client's frames; ErrClientClosed.
func NewProducer(c *Client, opts ...ProducerOption) (*Producer, error) {
	if c == nil {
		return nil, fmt.Errorf("%w: NewProducer: nil Client", ErrInvalidArgument)
	}
	cfg := defaultProducerConfig()
	if err := apply(&cfg, &cfg.errs, "ProducerOption", opts); err != nil {
		return nil, err
	}
	if limit := c.cfg.maxFrameSize - frameOverhead; cfg.maxBatchBytes > limit {
		cfg.maxBatchBytes = limit
	}
	if cfg.maxMessageSize > c.cfg.maxFrameSize-frameOverhead {
		return nil, fmt.Errorf("%w: WithMaxMessageSize: %d bytes do not fit a frame of %d bytes (WithMaxFrameSize)", ErrInvalidOption, cfg.maxMessageSize, c.cfg.maxFrameSize)
	}
	ctx, cancel := context.WithCancel(context.Background())
	p := &Producer{
		c:      c,
		cfg:    cfg,
		id:     int64(rand.Uint64() &^ (1 << 63)),
		fault:  newFaultTracker(cfg.faultBackoff, cfg.maxFaultBackoff),
		trace:  newSendTracer(cfg.traceEvery, cfg.traceObserver),
		rr:     make(map[string]*atomic.Uint32),
		seqs:   make(map[MessageQueue]*queueSeq),
		budget: newByteBudget(cfg.bufferBytes),
		queues: make(map[MessageQueue]*asyncQueue),
		sticky: make(map[string]stickyChoice),
		slots:  make(map[string]chan struct{}),
		ctx:    ctx,
		cancel: cancel,
	}
	if p.id == 0 {
		p.id = 1
	}
	if err := c.addUser(p); err != nil {
		cancel()
		return nil, err
	}
	return p, nil
}

// ID returns the producer id written into every batch (a random positive int64).
func (p *Producer) ID() int64 { return p.id }

// SendSync sends one message as a batch of one, at once (it never waits for a linger time), and
// waits for the broker's answer. The send, retries included, is bounded by WithSendTimeout, or
// by ctx's deadline when it is earlier.
//
// Errors: a validation error (ErrMessageInvalid, ErrMessageTooLarge, ErrTopicInvalid); no
// route or queue (ErrTopicNotExist, ErrNoQueue); ErrUnknownOutcome when the request was written
// and no answer came (ctx ended, timeout, connection lost) or the broker stored it without
// confirming the flush; otherwise a definite failure carrying the last status (errors.Is with
// ErrSystemBusy...) or network error (ErrBrokerUnavailable). ErrProducerClosed after Close, an
// error matching ErrClientClosed too after the Client's Close. ErrInvalidArgument for a nil
// ctx, before anything else. A ctx that has already ended fails the call at once with ctx's
// error (wrapped: errors.Is with context.Canceled or context.DeadlineExceeded), a definite
// failure: nothing was sent. Only a ctx that ends once the request was written gives
// ErrUnknownOutcome.
func (p *Producer) SendSync(ctx context.Context, m *Message) (SendResult, error) {
	if err := p.usable(ctx, "Producer.SendSync"); err != nil {
		return SendResult{}, err
	}
	tr := p.trace.start()
	if err := p.checkMessage(m); err != nil {
		return SendResult{}, err
	}
	route, err := p.route(ctx, m.Topic)
	if err != nil {
		return SendResult{}, err
	}
	mq, pinned, err := p.pickQueue(route, m.ShardingKey, "")
	if err != nil {
		return SendResult{}, err
	}
	buf := batchPool.Get()
	defer batchPool.Put(buf)
	if buf.B, err = p.encodeOne(buf.B[:0], m, mq, time.Now().UnixMilli()); err != nil {
		return SendResult{}, err
	}
	return p.sendSync(ctx, &sendJob{topic: m.Topic, batch: buf.B, count: 1, mq: mq, pinned: pinned, key: m.ShardingKey, route: route, tr: tr})
}

// sendSync sends the batch of a synchronous send (SendSync, SendBatchSync) and hands its trace,
// when it is traced, to the observer before returning.
func (p *Producer) sendSync(ctx context.Context, job *sendJob) (SendResult, error) {
	if job.tr == nil {
		return p.send(ctx, p.deadline(ctx), job)
	}
	job.tr.sealed = time.Now().UnixNano()
	job.tr.taken = job.tr.sealed
	res, err := p.send(ctx, p.deadline(ctx), job)
	p.trace.finish(job.tr, job.topic, job.count, job.mq, res, err)
	return res, err
}

// encodeOne appends a batch holding m alone, for queue mq, to dst. send stamps the sequence and
// computes the CRC.
func (p *Producer) encodeOne(dst []byte, m *Message, mq MessageQueue, now int64) ([]byte, error) {
	dst = protocol.AppendBatchHeader(dst, m.Topic, mq.QueueID, p.id, 0)
	return p.appendMessage(dst, m, now)
}

// SendBatchSync sends msgs as one batch to one queue and waits for the answer; the result's
// QueueOffset is that of the first message and Count the number of messages. Every message's
// Topic must be topic or empty. The queue is chosen as for SendSync, by the first message's
// ShardingKey when it has one. The batch must fit in a frame (16 MiB by default). Errors as
// SendSync.
func (p *Producer) SendBatchSync(ctx context.Context, topic string, msgs []Message) (SendResult, error) {
	if err := p.usable(ctx, "Producer.SendBatchSync"); err != nil {
		return SendResult{}, err
	}
	tr := p.trace.start()
	if len(msgs) == 0 {
		return SendResult{}, fmt.Errorf("%w: empty batch", ErrMessageInvalid)
	}
	for i := range msgs {
		if msgs[i].Topic != "" && msgs[i].Topic != topic {
			return SendResult{}, fmt.Errorf("%w: message %d has topic %q in a batch for %q", ErrMessageInvalid, i, msgs[i].Topic, topic)
		}
		if err := p.checkBody(&msgs[i]); err != nil {
			return SendResult{}, fmt.Errorf("message %d: %w", i, err)
		}
	}
	route, err := p.route(ctx, topic)
	if err != nil {
		return SendResult{}, err
	}
	mq, pinned, err := p.pickQueue(route, msgs[0].ShardingKey, "")
	if err != nil {
		return SendResult{}, err
	}
	buf := batchPool.Get()
	defer batchPool.Put(buf)
	buf.B = protocol.AppendBatchHeader(buf.B[:0], topic, mq.QueueID, p.id, 0)
	now := time.Now().UnixMilli()
	for i := range msgs {
		if buf.B, err = p.appendMessage(buf.B, &msgs[i], now); err != nil {
			return SendResult{}, fmt.Errorf("message %d: %w", i, err)
		}
	}
	if limit := p.c.cfg.maxFrameSize - frameOverhead; len(buf.B) > limit {
		return SendResult{}, fmt.Errorf("%w: batch of %d bytes, limit %d", ErrMessageTooLarge, len(buf.B), limit)
	}
	return p.sendSync(ctx, &sendJob{topic: topic, batch: buf.B, count: int32(len(msgs)), mq: mq, pinned: pinned, key: msgs[0].ShardingKey, route: route, tr: tr})
}

// SendOneway sends one message without waiting for an answer, as RocketMQ's sendOneway: it
// returns once the request is queued on a connection. It retries only failures to connect (on
// another broker group). Nothing tells whether the message was stored. Errors as SendSync: a
// ctx that has already ended, or that ends before the request is queued, sends nothing.
func (p *Producer) SendOneway(ctx context.Context, m *Message) error {
	if err := p.usable(ctx, "Producer.SendOneway"); err != nil {
		return err
	}
	if err := p.checkMessage(m); err != nil {
		return err
	}
	route, err := p.route(ctx, m.Topic)
	if err != nil {
		return err
	}
	buf := batchPool.Get()
	defer batchPool.Put(buf)
	avoid := ""
	var lastErr error
	for attempt := 0; attempt <= p.cfg.retries; attempt++ {
		mq, _, err := p.pickQueue(route, m.ShardingKey, avoid)
		if err != nil {
			return err
		}
		addr := route.masterAddr(mq.BrokerName)
		begun := time.Now()
		conn, err := p.c.pool.get(ctx, addr)
		if err != nil {
			lastErr = err
			if errors.Is(err, ErrClientClosed) || ctx.Err() != nil {
				return err
			}
			p.faulted(mq.BrokerName, addr, begun, true)
			if m.ShardingKey == "" {
				avoid = mq.BrokerName
			}
			continue
		}
		buf.B = protocol.AppendBatchHeader(buf.B[:0], m.Topic, mq.QueueID, p.id, 0)
		if buf.B, err = p.appendMessage(buf.B, m, time.Now().UnixMilli()); err != nil {
			return err
		}
		s := p.queueSeq(mq)
		s.mu.Lock()
		stampBatch(buf.B, mq.QueueID, s.next)
		if err = conn.Oneway(protocol.CodeSendMessage, nil, buf.B); err == nil {
			s.next++
		}
		s.mu.Unlock()
		return err
	}
	return lastErr
}

// usable checks what every send, and Flush, checks before anything else: ctx is not nil
// (ErrInvalidArgument), the producer is open (closedErr) and ctx has not ended (ctxEnded), so
// nothing is buffered or sent otherwise.
func (p *Producer) usable(ctx context.Context, what string) error {
	if err := argContext(ctx, what); err != nil {
		return err
	}
	if p.isClosed() {
		return p.closedErr()
	}
	return ctxEnded(ctx, what)
}

// closedErr is the error of a call on the closed producer: ErrProducerClosed, or after its
// Client's Close an error matching both it and ErrClientClosed.
func (p *Producer) closedErr() error {
	if p.c.isClosed() {
		return errProducerClientClosed
	}
	return ErrProducerClosed
}

func (p *Producer) isClosed() bool {
	p.mu.RLock()
	defer p.mu.RUnlock()
	return p.closed
}

// deadline returns when a send starting now must end: WithSendTimeout from now, or ctx's
// deadline when it is earlier. As RocketMQ's sendMsgTimeout, the send timeout always applies; a
// longer ctx does not lift it.
func (p *Producer) deadline(ctx context.Context) time.Time {
	d := time.Now().Add(p.cfg.sendTimeout)
	if cd, ok := ctx.Deadline(); ok && cd.Before(d) {
		return cd
	}
	return d
}

func (p *Producer) checkBody(m *Message) error {
	if len(m.Body) == 0 {
		return fmt.Errorf("%w: empty body", ErrMessageInvalid)
	}
	if len(m.Body) > p.cfg.maxMessageSize {
		return fmt.Errorf("%w: %d bytes, limit %d", ErrMessageTooLarge, len(m.Body), p.cfg.maxMessageSize)
	}
	return nil
}

func (p *Producer) checkMessage(m *Message) error {
	if m == nil {
		return fmt.Errorf("%w: nil message", ErrMessageInvalid)
	}
	return p.checkBody(m)
}

// appendMessage appends m (timestamp now, ms) to the batch that starts at dst[0].
func (p *Producer) appendMessage(dst []byte, m *Message, now int64) ([]byte, error) {
	pm := protocol.Message{
		Keys:      unsafeBytes(m.Keys),
		Tags:      unsafeBytes(m.Tags),
		Body:      m.Body,
		Timestamp: now,
	}
	var props *bytebufferpool.ByteBuffer
	if len(m.Properties) > 0 {
		props = propsPool.Get()
		defer propsPool.Put(props)
		var err error
		if props.B, err = appendProperties(props.B[:0], m.Properties); err != nil {
			return dst, err
		}
		pm.Properties = props.B
	}
	if err := protocol.CheckMessage(dst, 0, &pm); err != nil {
		return dst, err
	}
	return protocol.AppendMessage(dst, 0, &pm), nil
}

// encodedSize returns the bytes m takes in a batch, properties excluded.
func encodedSize(m *Message) int {
	return protocol.MessageOverhead + len(m.Keys) + len(m.Tags) + len(m.Body)
}

// route returns the topic's route for a send. A cached route without a writable queue (every
// master of the topic was down when it was fetched) is refreshed first, at most every
// minForcedRefreshGap, and one with a group that has no master is refreshed in the background
// (masterlessRefresh): a new master registers within moments of a failover, and waiting for the
// periodic refresh would stall that group's sends for up to RouteRefreshInterval.
func (p *Producer) route(ctx context.Context, topic string) (*topicRoute, error) {
	r, err := p.c.route(ctx, topic)
	if err != nil {
		return r, err
	}
	p.topic(topic, r)
	if r.masterless || len(r.missing) > 0 {
		// A group without a master is failing over: its new master registers within moments;
		// a group that left the route may be back as soon as its brokers register again.
		if age := p.c.now().Sub(r.fetched); (r.masterless && age >= masterlessRefresh) || (len(r.missing) > 0 && age >= missingRefresh) {
			p.c.refreshSoon(topic)
		}
	}
	if len(r.writeQueues) > 0 {
		return r, nil
	}
	return p.c.refreshedRoute(ctx, topic, r), nil
}

// masterlessRefresh is how old a route naming a group without a master may get before a send
// asks for a fresher one (at most four requests a second to the NameServers per topic while a
// group has no master).
const masterlessRefresh = 250 * time.Millisecond

// pickQueue selects the queue for a message: by sharding key, or as pickUnkeyed avoiding the
// group avoid.
func (p *Producer) pickQueue(route *topicRoute, key, avoid string) (mq MessageQueue, pinned bool, err error) {
	qs := route.writeQueues
	if len(qs) == 0 {
		return MessageQueue{}, false, fmt.Errorf("%w: topic %q has no writable queue", ErrNoQueue, route.topic)
	}
	if key != "" {
		return qs[shardIndex(key, len(qs))], true, nil
	}
	return p.pickUnkeyed(route, avoid, nil), false, nil
}

// pickUnkeyed picks the queue of an unkeyed batch among the route's write queues (at least one):
// round-robin, preferring queues of groups other than avoid that are not in fault backoff and,
// when roomy is not nil, queues roomy accepts (see selectQueue). While a group is in backoff it
// asks the client to refresh the route soon: a new master of the group ends the backoff, and
// the route says when there is one.
func (p *Producer) pickUnkeyed(route *topicRoute, avoid string, roomy func(MessageQueue) bool) MessageQueue {
	start := p.topic(route.topic, route).Add(1)
	var avail func(string) bool
	if !p.fault.empty() {
		now := time.Now()
		// NB: the queues are sorted by group: one look-up per group and pick, not per queue,
		// and one refresh request per pick.
		lastGroup, lastOK, asked := "", false, false
		avail = func(b string) bool {
			if b == lastGroup {
				return lastOK
			}
			lastGroup, lastOK = b, p.fault.available(b, route.masterAddr(b), now)
			if !lastOK && !asked {
				asked = true
				p.c.refreshSoon(route.topic)
			}
			return lastOK
		}
	}
	mq, _ := selectQueue(route.writeQueues, start, avoid, avail, roomy)
	return mq
}

// groupAvailable reports whether a batch may go to the group: it is not in fault backoff, or
// has another master than the one that failed.
func (p *Producer) groupAvailable(route *topicRoute, brokerName string) bool {
	return p.fault.empty() || p.fault.available(brokerName, route.masterAddr(brokerName), time.Now())
}

// topic returns the round-robin counter of a topic whose route r the producer found; the first
// call of a topic holds it on the client (its route is refreshed) until Close.
func (p *Producer) topic(topic string, r *topicRoute) *atomic.Uint32 {
	p.rrMu.RLock()
	c := p.rr[topic]
	p.rrMu.RUnlock()
	if c != nil {
		return c
	}
	p.rrMu.Lock()
	defer p.rrMu.Unlock()
	if c = p.rr[topic]; c == nil {
		c = new(atomic.Uint32)
		c.Store(rand.Uint32()) // as RocketMQ, start at a random queue
		p.rr[topic] = c
		if !p.released {
			p.c.holdTopic(topic, r)
		}
	}
	return c
}

// releaseTopics ends the producer's holds on its topics: the client refreshes their routes no
// more (unless something else uses them). Close calls it once the producer's goroutines have
// exited.
func (p *Producer) releaseTopics() {
	p.rrMu.Lock()
	if p.released {
		p.rrMu.Unlock()
		return
	}
	p.released = true
	topics := make([]string, 0, len(p.rr))
	for t := range p.rr {
		topics = append(topics, t)
	}
	p.rrMu.Unlock()
	for _, t := range topics {
		p.c.releaseTopic(t)
	}
}

// queueSeq returns the producer's sequence counter of mq.
func (p *Producer) queueSeq(mq MessageQueue) *queueSeq {
	p.seqMu.RLock()
	s := p.seqs[mq]
	p.seqMu.RUnlock()
	if s != nil {
		return s
	}
	p.seqMu.Lock()
	defer p.seqMu.Unlock()
	if s = p.seqs[mq]; s == nil {
		s = new(queueSeq)
		p.seqs[mq] = s
	}
	return s
}

// stampBatch writes queue id and base sequence into the header of batch and computes its CRC.
func stampBatch(batch []byte, queueID, seq int32) {
	binary.BigEndian.PutUint32(batch[batchOffQueueID:], uint32(queueID))
	binary.BigEndian.PutUint32(batch[batchOffBaseSequence:], uint32(seq))
	protocol.FinishBatch(batch, 0)
}

// startSend gives job.batch the next sequence of mq and queues it on conn, as one step for the
// queue (see queueSeq); now stands for the time it is sent. A batch the connection refuses
// (closed, too many requests in flight) gives its sequences back.
func (p *Producer) startSend(conn *rpc.Conn, mq MessageQueue, job *sendJob, now time.Time) *pendingCall {
	s := p.queueSeq(mq)
	s.mu.Lock()
	defer s.mu.Unlock()
	stampBatch(job.batch, mq.QueueID, s.next)
	if p.testHookSequenced != nil {
		p.testHookSequenced(mq, s.next)
	}
	var h protocol.Header // none for an untraced batch: the broker's untraced path
	var recvAt *int64
	if job.tr != nil {
		job.tr.written = time.Now().UnixNano()
		job.tr.received = 0 // an earlier attempt's
		h, recvAt = &job.tr.hdr, &job.tr.received
	}
	call := p.c.pool.startCallAt(conn, protocol.CodeSendMessage, h, job.batch, now, recvAt)
	if call.id != 0 {
		s.next += job.count
	}
	return call
}

// sendJob is one batch being sent, with what retries need.
type sendJob struct {
	topic  string
	batch  []byte // built for some queue; each attempt rewrites its queue id and sequence
	count  int32
	mq     MessageQueue // the queue to try first
	pinned bool         // a sharding key: stay on mq
	key    string
	route  *topicRoute
	async  bool // take a per-broker in-flight slot for each attempt
	// tr is the trace of a traced batch (nil: untraced): its attempts carry tr.hdr and stamp
	// tr.written and tr.received.
	tr *batchTrace
}

// send sends job.batch, retrying as the Producer doc says, until deadline.
func (p *Producer) send(ctx context.Context, deadline time.Time, job *sendJob) (SendResult, error) {
	route := job.route
	mq := job.mq
	avoid, override := "", ""
	var lastErr error
	for attempt := 0; attempt <= p.cfg.retries; attempt++ {
		if attempt == 0 && !job.pinned && !p.groupAvailable(route, mq.BrokerName) {
			// The queue's group went into backoff after the batch was queued for it (an
			// asynchronous batch waiting behind one that failed): send it elsewhere rather
			// than wait on the failing master again.
			if next := p.pickUnkeyed(route, mq.BrokerName, nil); next.BrokerName != mq.BrokerName && p.groupAvailable(route, next.BrokerName) {
				mq = next
			}
		}
		if attempt > 0 {
			if err := ctx.Err(); err != nil {
				return SendResult{}, fmt.Errorf("%w (last error: %w)", err, lastErr)
			}
			if !time.Now().Before(deadline) {
				return SendResult{}, fmt.Errorf("send timeout after %d attempts: %w", attempt, lastErr)
			}
			if override == "" {
				if job.pinned {
					if qs := route.writeQueues; len(qs) > 0 {
						mq = qs[shardIndex(job.key, len(qs))]
					}
				} else if avoid != "" {
					next, _, err := p.pickQueue(route, "", avoid)
					if err != nil {
						return SendResult{}, err
					}
					// NB: back in the same group (no other one to go to, as when its master
					// fails over), the batch keeps its queue: another queue of that group
					// gains nothing and could store these messages after the producer's
					// newer ones already sent there.
					if next.BrokerName != mq.BrokerName || !route.hasQueue(mq) {
						mq = next
					}
				}
			}
		}
		addr := override
		override = ""
		if addr == "" {
			addr = route.masterAddr(mq.BrokerName)
		}
		if addr == "" {
			lastErr = fmt.Errorf("%w: broker group %s of topic %q has no master", ErrNoQueue, mq.BrokerName, job.topic)
			route = p.c.refreshedRoute(ctx, job.topic, route)
			avoid = mq.BrokerName
			continue
		}
		res, state, sentAt, err := p.attempt(ctx, deadline, addr, mq, job)
		switch state {
		case callOK:
			p.fault.succeeded(mq.BrokerName)
			return res, nil
		case callAbandoned:
			// The caller gave up before the answer: the batch may be stored, and nothing is
			// known of the broker, whose connection other sends share. No fault, no refresh.
			return SendResult{}, fmt.Errorf("%w: send to %s (%s): %w", ErrUnknownOutcome, addr, mq, err)
		case callUnknown:
			// No answer: the master may hang or be gone, and the group may have a new one
			// already. Refresh the route (rate-limited) so that the next sends follow it rather
			// than time out on this broker again.
			p.faulted(mq.BrokerName, addr, sentAt, true)
			rctx, cancel := context.WithTimeout(context.Background(), p.c.cfg.requestTimeout)
			_ = p.c.refreshedRoute(rctx, job.topic, route)
			cancel()
			return SendResult{}, fmt.Errorf("%w: send to %s (%s): %w", ErrUnknownOutcome, addr, mq, err)
		case callNotSent:
			lastErr = fmt.Errorf("cannot send to %s (%s): %w", addr, mq, err)
			if errors.Is(err, ErrClientClosed) || errors.Is(err, ErrProducerClosed) || errors.Is(err, protocol.ErrFrameTooLarge) || ctx.Err() != nil {
				return SendResult{}, lastErr
			}
			if !errors.Is(err, errNoSlot) && !errors.Is(err, rpc.ErrTooManyInFlight) { // local limits, not broker faults
				p.faulted(mq.BrokerName, addr, sentAt, true)
				// The broker may have moved (restarted elsewhere, or left the route).
				route = p.c.refreshedRoute(ctx, job.topic, route)
			}
			avoid = mq.BrokerName
		case callRejected:
			var pe *protocol.Error
			errors.As(err, &pe)
			lastErr = fmt.Errorf("send to %s (%s) refused: %w", addr, mq, err)
			switch {
			case storedButUnconfirmed(pe.Status):
				return SendResult{}, fmt.Errorf("%w: %w", ErrUnknownOutcome, lastErr)
			case pe.Status == protocol.StatusNotMaster:
				// Same group, new master: refresh the route and follow the broker's pointer
				// when the route has not caught up yet.
				route = p.c.refreshedRoute(ctx, job.topic, route)
				// A new master ends a backoff recorded for the old one at once.
				if m := route.masterAddr(mq.BrokerName); m != "" && m != addr {
					override = m
					p.fault.masterMoved(mq.BrokerName, m)
				} else if pe.MasterAddr != "" && pe.MasterAddr != addr {
					override = pe.MasterAddr
					p.fault.masterMoved(mq.BrokerName, pe.MasterAddr)
				} else {
					p.faulted(mq.BrokerName, addr, sentAt, false)
					avoid = mq.BrokerName
				}
			case !pe.Status.Retriable():
				return SendResult{}, lastErr
			default:
				p.faulted(mq.BrokerName, addr, sentAt, false)
				avoid = mq.BrokerName
				if pe.Status == protocol.StatusTopicNotExist || pe.Status == protocol.StatusServiceNotAvailable || pe.Status == protocol.StatusShuttingDown {
					route = p.c.refreshedRoute(ctx, job.topic, route)
				}
			}
		}
	}
	return SendResult{}, lastErr
}

// faulted records a failure event of group (fault.failed) and makes sure the fault detector runs
// while groups are in backoff because their master could not be reached.
func (p *Producer) faulted(group, addr string, sentAt time.Time, unreachable bool) {
	p.fault.failed(group, addr, sentAt, time.Now(), unreachable)
	if !unreachable {
		return
	}
	p.mu.RLock()
	defer p.mu.RUnlock()
	if p.closed {
		return // Close is waiting for the goroutines
	}
	p.detectMu.Lock()
	defer p.detectMu.Unlock()
	if !p.detecting {
		p.detecting = true
		p.wg.Add(1)
		go p.detect()
	}
}

// detectInterval is how often the fault detector probes the masters of the groups in backoff.
const detectInterval = 200 * time.Millisecond

// detect is the fault detector (RocketMQ's LatencyFaultTolerance detector): while a group is in
// backoff because its master could not be reached (a partition, a hung or dead process), it
// probes that master every detectInterval, dialling at once whatever the reconnect backoff, and
// ends the group's backoff as soon as the master answers, so sends return when the network
// heals rather than when the backoff runs out. It exits when no group is left to probe, or the
// producer closes.
func (p *Producer) detect() {
	defer p.wg.Done()
	t := time.NewTicker(detectInterval)
	defer t.Stop()
	for {
		select {
		case <-p.ctx.Done():
			return
		case <-t.C:
		}
		probes := p.fault.probes(time.Now())
		if len(probes) == 0 {
			p.detectMu.Lock()
			if len(p.fault.probes(time.Now())) == 0 {
				p.detecting = false
				p.detectMu.Unlock()
				return
			}
			p.detectMu.Unlock()
			continue
		}
		for _, fp := range probes {
			ctx, cancel := context.WithTimeout(p.ctx, max(p.c.cfg.probeTimeout, detectInterval))
			err := p.c.pool.reachable(ctx, fp.addr)
			cancel()
			if err == nil {
				p.fault.recovered(fp.group, fp.addr)
			}
		}
	}
}

// errNoSlot is returned when an asynchronous batch found no free in-flight slot before its
// deadline; it does not count as a fault of the broker.
var errNoSlot = errors.New("client: no in-flight slot free for the broker group")

// attempt sends the batch once to addr and decodes the answer. sentAt is when the request was
// sent, or when the attempt to send it began: the fault tracker tells by it whether a failure
// belongs to an event it already knows.
func (p *Producer) attempt(ctx context.Context, deadline time.Time, addr string, mq MessageQueue, job *sendJob) (res SendResult, state callState, sentAt time.Time, err error) {
	if job.async {
		release, err := p.acquireSlot(ctx, deadline, mq.BrokerName)
		if err != nil {
			return SendResult{}, callNotSent, time.Now(), err
		}
		defer release()
	}
	sentAt = time.Now()
	conn, err := p.c.pool.get(ctx, addr)
	if err != nil {
		return SendResult{}, callNotSent, sentAt, err
	}
	resp, state, err := p.startSend(conn, mq, job, sentAt).wait(ctx, deadline)
	if state != callOK {
		return SendResult{}, state, sentAt, err
	}
	defer resp.Release()
	var h protocol.SendResponseHeader
	if err := h.ReadFrom(resp.Header); err != nil {
		// The broker answered success: the batch is stored, but we cannot say where.
		return SendResult{}, callUnknown, sentAt, fmt.Errorf("cannot decode the send response: %w", err)
	}
	return SendResult{
		BrokerName:     mq.BrokerName,
		BrokerAddr:     addr,
		QueueID:        h.QueueID,
		QueueOffset:    h.QueueOffset,
		Count:          h.Count,
		PhysicalOffset: h.PhysicalOffset,
		StoreTimestamp: h.StoreTimestamp,
	}, callOK, sentAt, nil
}

// acquireSlot takes one of the broker group's in-flight slots.
func (p *Producer) acquireSlot(ctx context.Context, deadline time.Time, brokerName string) (func(), error) {
	p.qMu.Lock()
	ch := p.slots[brokerName]
	if ch == nil {
		ch = make(chan struct{}, p.cfg.maxInFlightPerBroker)
		p.slots[brokerName] = ch
	}
	p.qMu.Unlock()
	select {
	case ch <- struct{}{}:
		return func() { <-ch }, nil
	default:
	}
	t := time.NewTimer(time.Until(deadline))
	defer t.Stop()
	select {
	case ch <- struct{}{}:
		return func() { <-ch }, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	case <-t.C:
		return nil, errNoSlot
	}
}
