package bench

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"maps"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/petrel-mq/petrel/client"
	"github.com/petrel-mq/petrel/protocol"
)

// This file holds an in-memory cluster for testing the run loop: queues in memory, producers
// that answer through a goroutine each (callbacks in send order), a consumer that delivers
// every queue of its topic, and a fault hook deciding the fate of every send.

// fault is what happens to one send.
type fault int

const (
	faultNone           fault = iota
	faultFail                 // not stored; a definite error
	faultPhantom              // stored, but a definite error
	faultUnknownStored        // stored; ErrUnknownOutcome
	faultUnknownDropped       // not stored; ErrUnknownOutcome
	faultLose                 // acknowledged, never stored
	faultDuplicate            // stored twice
	faultCorrupt              // stored with a damaged body
	faultRefuse               // SendAsync itself returns an error
)

type fakeCluster struct {
	mu      sync.Mutex
	queues  map[string][][]client.MessageExt // topic -> queue id -> messages
	changed chan struct{}                    // closed and replaced on every store
	sends   int
	fault   func(n int, attempt uint8) fault // fate of the n-th send (from 0); nil: none
	rr      map[string]int
	// swapOnce makes a consumer deliver the first two messages of one batch swapped.
	swapOnce bool
	// slaves is the slave count the fake's one group ("fake") reports; haStatus answers with
	// that many slaves, lagging by lagBytes.
	slaves   int
	lagBytes int64
	// syncDelay is how long a SendSync waits for its "acknowledgement"; a context ending first
	// makes the outcome unknown, as the real client's.
	syncDelay time.Duration
	haCalls   int
	// haMaster, when set, is the group's master after a failover: groups lists it, and
	// haStatus of any other address fails as a dead broker's would.
	haMaster string
	// pulls and delivered count the consumers' batches and messages (served by brokerId 0).
	pulls, delivered int64
	// failoverAt, when positive, fails the group over at the failoverAt-th send (from 0): that
	// send and every later one waits until failoverPause has passed since the first of them
	// (no send is stored meanwhile; consumers go on), then is stored by fake:1 instead of
	// fake:0.
	failoverAt    int
	failoverPause time.Duration
	resumeAt      time.Time
	// producers numbers the producers made (each stamps its id, from 1, on what it stores) and
	// seqs is each producer's next Sequence per queue, as the client's.
	producers int64
	seqs      map[fakeSeqKey]int32
	// moved and movedBack are what offsetMoves reports.
	moved, movedBack int64
	// beforeFinalRead, when set, runs once (under mu) at the final read's first request: the
	// test changes what the queues hold after everything was consumed.
	beforeFinalRead func(c *fakeCluster)
	finalReads      int // pulls the final read made
	// slaveQueues, when set, is what slave brokerId 1 holds instead of the master's queues;
	// slaveBehind is how many of its next final-read pulls slave 1 answers "not here" (it has
	// not replicated the offset yet), -1 for every one.
	slaveQueues map[string][][]client.MessageExt
	slaveBehind int
}

// fakeSeqKey is one producer's queue.
type fakeSeqKey struct {
	producer int64
	topic    string
	queue    int
}

// fakeAddr is the address of the fake's broker before a failover; fakeAddrAfter after it.
const (
	fakeAddr      = "fake:0"
	fakeAddrAfter = "fake:1"
)

func newFakeCluster(f func(n int, attempt uint8) fault) *fakeCluster {
	return &fakeCluster{queues: map[string][][]client.MessageExt{}, changed: make(chan struct{}), fault: f, rr: map[string]int{}, seqs: map[fakeSeqKey]int32{}}
}

func (c *fakeCluster) createTopic(_ context.Context, topic string, queues int) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := c.queues[topic]; !ok {
		c.queues[topic] = make([][]client.MessageExt, queues)
	}
	return nil
}

func (c *fakeCluster) newProducer() (producer, error) {
	c.mu.Lock()
	c.producers++
	id := c.producers
	c.mu.Unlock()
	p := &fakeProducer{c: c, id: id, cbs: make(chan func(), 1<<16), done: make(chan struct{})}
	go p.run()
	return p, nil
}

func (c *fakeCluster) newConsumer(group, topic string) (consumer, error) {
	return &fakeConsumer{c: c, topic: topic}, nil
}

func (c *fakeCluster) corruptBatches() int64 { return 0 }
func (c *fakeCluster) close() error          { return nil }

func (c *fakeCluster) offsetMoves() (moved, back int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.moved, c.movedBack
}

// memberAddr knows the master, fake:0 (or haMaster), and slaves fake:1..fake:<slaves>.
func (c *fakeCluster) memberAddr(_ context.Context, topic, group string, brokerID int64) (string, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.finalReadStartsLocked()
	switch {
	case group != "fake":
		return "", fmt.Errorf("no broker group %s", group)
	case brokerID == 0 && c.haMaster != "":
		return c.haMaster, nil
	case brokerID < 0 || brokerID > int64(c.slaves):
		return "", fmt.Errorf("broker group fake has no member %d", brokerID)
	}
	return fmt.Sprintf("fake:%d", brokerID), nil
}

func (c *fakeCluster) finalReadStartsLocked() {
	if f := c.beforeFinalRead; f != nil {
		c.beforeFinalRead = nil
		f(c)
	}
}

// pull answers as a broker holding the fake's queues: every member holds the same, but slave
// 1 holds slaveQueues when set.
func (c *fakeCluster) pull(_ context.Context, addr string, q QueueRef, offset int64, n int32) (*client.PullAnswer, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.finalReadStartsLocked()
	c.finalReads++
	queues := c.queues
	if addr == "fake:1" && c.slaveBehind != 0 {
		if c.slaveBehind > 0 {
			c.slaveBehind--
		}
		return &client.PullAnswer{Result: protocol.PullNotHere, NextOffset: offset}, nil
	}
	if addr == "fake:1" && c.slaveQueues != nil {
		queues = c.slaveQueues
	}
	qs, ok := queues[q.Topic]
	if !ok || q.Broker != "fake" || int(q.QueueID) >= len(qs) {
		return nil, client.ErrTopicNotExist
	}
	msgs := qs[q.QueueID]
	ans := &client.PullAnswer{}
	if len(msgs) > 0 {
		ans.MinOffset, ans.MaxOffset = msgs[0].QueueOffset, msgs[len(msgs)-1].QueueOffset+1
	}
	ans.NextOffset = offset
	switch {
	case offset < ans.MinOffset || offset > ans.MaxOffset:
		ans.Result = protocol.PullOffsetMoved
		ans.NextOffset = min(ans.MaxOffset, max(ans.MinOffset, offset))
	case offset == ans.MaxOffset:
		ans.Result = protocol.PullNoNewMessage
	default:
		ans.Result = protocol.PullFound
		for _, m := range msgs[offset-ans.MinOffset:] {
			if len(ans.Messages) == int(n) {
				break
			}
			m.BrokerAddr, m.BrokerID = addr, -1
			ans.Messages = append(ans.Messages, m)
		}
		ans.NextOffset = ans.Messages[len(ans.Messages)-1].QueueOffset + 1
	}
	return ans, nil
}

func (c *fakeCluster) servedBy() map[int64]client.ServedCount {
	c.mu.Lock()
	defer c.mu.Unlock()
	return map[int64]client.ServedCount{0: {Pulls: c.pulls, Messages: c.delivered}}
}

func (c *fakeCluster) groups(context.Context, []string) ([]groupInfo, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	master := "fake:0"
	if c.haMaster != "" {
		master = c.haMaster
	}
	return []groupInfo{{name: "fake", master: master, slaves: c.slaves}}, nil
}

// haStatus answers with c.slaves slaves; slave i lags by i*lagBytes bytes and i ms, and was
// sent 3 raw bytes per wire byte.
func (c *fakeCluster) haStatus(_ context.Context, addr string) (*protocol.HAStatus, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.haMaster != "" && addr != c.haMaster {
		return nil, fmt.Errorf("cannot connect to %s: connection refused", addr)
	}
	c.haCalls++
	st := &protocol.HAStatus{Role: "SYNC_MASTER"}
	for i := 1; i <= c.slaves; i++ {
		st.Slaves = append(st.Slaves, protocol.SlaveStatus{
			BrokerID: int64(i), Addr: fmt.Sprintf("fake:%d", i), LagBytes: int64(i) * c.lagBytes, LagMs: int64(i),
			InSync: true, Connected: true, RawBytes: int64(c.haCalls) * 300, WireBytes: int64(c.haCalls) * 100,
		})
	}
	return st, nil
}

// queueBounds returns each queue's first and last stored offsets (+1).
func (c *fakeCluster) queueBounds(_ context.Context, topic string) ([]queueBound, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	qs, ok := c.queues[topic]
	if !ok {
		return nil, client.ErrTopicNotExist
	}
	var out []queueBound
	for i, q := range qs {
		b := queueBound{q: QueueRef{Topic: topic, Broker: "fake", QueueID: int32(i)}}
		if len(q) > 0 {
			b.min, b.max = q[0].QueueOffset, q[len(q)-1].QueueOffset+1
		}
		out = append(out, b)
	}
	return out, nil
}

// store decides a send's fate and stores it. It returns the result for the callback, and
// refused when SendAsync must fail.
func (c *fakeCluster) store(producer int64, m *client.Message) (res client.SendResult, err error, refused bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	addr := fakeAddr
	if c.failoverAt > 0 && c.sends >= c.failoverAt {
		addr = fakeAddrAfter
		if c.resumeAt.IsZero() {
			c.resumeAt = time.Now().Add(c.failoverPause)
		}
		if d := time.Until(c.resumeAt); d > 0 {
			c.mu.Unlock()
			time.Sleep(d)
			c.mu.Lock()
		}
	}
	n := c.sends
	c.sends++
	var props []byte
	for _, k := range slices.Sorted(maps.Keys(m.Properties)) {
		props = protocol.AppendProperty(props, k, m.Properties[k])
	}
	f := faultNone
	if c.fault != nil {
		id, _ := ParseIdentity(props)
		f = c.fault(n, id.Attempt)
	}
	if f == faultRefuse {
		return res, fmt.Errorf("%w: refused by the fake", client.ErrNoQueue), true
	}
	qs := c.queues[m.Topic]
	if qs == nil {
		return res, client.ErrTopicNotExist, true
	}
	var qid int
	if m.ShardingKey != "" {
		h := fnv.New32a()
		h.Write([]byte(m.ShardingKey))
		qid = int(h.Sum32() % uint32(len(qs)))
	} else {
		qid = c.rr[m.Topic] % len(qs)
		c.rr[m.Topic]++
	}
	sk := fakeSeqKey{producer, m.Topic, qid}
	ext := client.MessageExt{Topic: m.Topic, BrokerName: "fake", QueueID: int32(qid), Properties: props, Body: bytes.Clone(m.Body), BrokerAddr: addr,
		ProducerID: producer, Sequence: c.seqs[sk]}
	c.seqs[sk]++
	q := &qs[qid]
	add := func(e client.MessageExt) int64 {
		e.QueueOffset = int64(len(*q))
		*q = append(*q, e)
		return e.QueueOffset
	}
	res = client.SendResult{BrokerName: "fake", BrokerAddr: addr, QueueID: int32(qid)}
	switch f {
	case faultFail:
		return res, client.ErrSystemBusy, false
	case faultUnknownDropped:
		return res, fmt.Errorf("%w: dropped by the fake", client.ErrUnknownOutcome), false
	case faultLose:
		res.QueueOffset = int64(len(*q)) // a position nobody will fill with this message
		return res, nil, false
	case faultCorrupt:
		ext.Body[0] ^= 0xff
	}
	res.QueueOffset = add(ext)
	if f == faultDuplicate {
		add(ext)
	}
	close(c.changed)
	c.changed = make(chan struct{})
	switch f {
	case faultPhantom:
		return res, client.ErrSystemBusy, false
	case faultUnknownStored:
		return res, fmt.Errorf("%w: stored by the fake", client.ErrUnknownOutcome), false
	}
	return res, nil, false
}

type fakeProducer struct {
	c    *fakeCluster
	id   int64 // the client producer id it stamps
	cbs  chan func()
	done chan struct{}
	// pending counts the callbacks not run yet; an atomic, so the callbacks never wait for a
	// send holding mu (one held up by a failover pause).
	pending atomic.Int64
	mu      sync.Mutex // guards closed and orders sends
	closed  bool
}

func (p *fakeProducer) run() {
	defer close(p.done)
	for cb := range p.cbs {
		cb()
		p.pending.Add(-1)
	}
}

func (p *fakeProducer) SendAsync(ctx context.Context, m *client.Message, cb func(client.SendResult, error)) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return client.ErrProducerClosed
	}
	res, err, refused := p.c.store(p.id, m)
	if refused {
		return err
	}
	p.pending.Add(1)
	p.cbs <- func() { cb(res, err) }
	return nil
}

func (p *fakeProducer) SendSync(ctx context.Context, m *client.Message) (client.SendResult, error) {
	if err := ctx.Err(); err != nil {
		return client.SendResult{}, err
	}
	p.mu.Lock()
	closed := p.closed
	p.mu.Unlock()
	if closed {
		return client.SendResult{}, client.ErrProducerClosed
	}
	res, err, refused := p.c.store(p.id, m)
	if refused && err == nil {
		err = errors.New("refused")
	}
	if p.c.syncDelay > 0 && !sleepCtx(ctx, p.c.syncDelay) {
		return client.SendResult{}, fmt.Errorf("%w: %w", client.ErrUnknownOutcome, ctx.Err())
	}
	return res, err
}

func (p *fakeProducer) Flush(ctx context.Context) error {
	for {
		if p.pending.Load() == 0 {
			return nil
		}
		if !sleepCtx(ctx, time.Millisecond) {
			return ctx.Err()
		}
	}
}

func (p *fakeProducer) Close(ctx context.Context) error {
	err := p.Flush(ctx)
	p.mu.Lock()
	if !p.closed {
		p.closed = true
		close(p.cbs)
	}
	p.mu.Unlock()
	<-p.done
	return err
}

type fakeConsumer struct {
	c     *fakeCluster
	topic string
}

// Run delivers the new messages of every queue in turn, in batches of up to 100.
func (co *fakeConsumer) Run(ctx context.Context, h client.Handler) error {
	var next []int
	for {
		co.c.mu.Lock()
		qs := co.c.queues[co.topic]
		changed := co.c.changed
		var batches [][]client.MessageExt
		for len(next) < len(qs) {
			next = append(next, 0)
		}
		for i, q := range qs {
			if next[i] < len(q) {
				end := min(len(q), next[i]+100)
				b := q[next[i]:end]
				if co.c.swapOnce && len(b) >= 2 {
					co.c.swapOnce = false
					b = slices.Clone(b)
					b[0], b[1] = b[1], b[0]
				}
				batches = append(batches, b)
				next[i] = end
			}
		}
		co.c.mu.Unlock()
		for _, b := range batches {
			if err := h(ctx, b); err != nil {
				return nil
			}
			co.c.mu.Lock()
			co.c.pulls++
			co.c.delivered += int64(len(b))
			co.c.mu.Unlock()
		}
		if len(batches) > 0 {
			continue
		}
		select {
		case <-ctx.Done():
			return nil
		case <-changed:
		}
	}
}
