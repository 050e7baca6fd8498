package bench

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/petrel-mq/petrel/client"
	"github.com/petrel-mq/petrel/protocol"
)

// The NATS JetStream driver (--driver nats) runs the same workloads against a running
// nats-server (see scripts/nats-server.sh); it starts none. The mapping:
//
//   - a topic is a stream named after it (file storage, --nats-replicas replicas) holding the
//     subjects <topic>.<partition>, partition 0..partitionsPerTopic-1: an OMB partition is a
//     subject, the bench's queue.
//   - a producer publishes with PublishMsgAsync (PublishMsg with --sync-send) on one shared
//     connection; the PubAck is the acknowledgement. A key (ShardingKey) picks the partition by
//     an FNV-1a hash, as the in-memory fake does; without one a producer goes round robin.
//   - the identity travels in the header "pbid"; consumers turn it back into the property list
//     the handler parses.
//   - a subscription (consumer group) is one durable pull consumer per partition, named
//     <group>-p<partition>, filtered on the partition's subject, ack-all (the last message of
//     each handler call is acked). One goroutine reads each partition, so per-partition order
//     is what the verifier checks. The first consumer of a group to run takes every partition
//     not taken; the group's other consumers stand by and take a partition over when its
//     reader stops (parallelism comes from the partitions, not the consumer count).
//   - the verifier's queue is QueueRef{Topic: topic, Broker: "nats", QueueID: partition} and a
//     message's offset is its stream sequence: unique in the stream, increasing within a
//     subject, and both the PubAck and the delivery's metadata carry it, so "consumed where it
//     was acknowledged" and per-queue order are checked as for Petrel. Offsets of one
//     partition are not contiguous (the stream interleaves partitions).
//
// Replication lag sampling, consume-only runs and existing topics are Petrel-only.

// natsBroker is the broker name of every queue of the NATS driver.
const natsBroker = "nats"

// natsHeader is the header carrying the identity (identityProperty).
const natsHeader = identityProperty

// natsSubject returns the subject of partition p of topic.
func natsSubject(topic string, p int) string { return topic + "." + strconv.Itoa(p) }

// natsDurable returns the durable consumer name of partition p for group.
func natsDurable(group string, p int) string { return group + "-p" + strconv.Itoa(p) }

// natsPartition picks the partition of a message: by key hash when it has a key, else rr.
func natsPartition(key string, rr uint64, partitions int) int {
	if key != "" {
		h := fnv.New32a()
		h.Write([]byte(key))
		return int(h.Sum32() % uint32(partitions))
	}
	return int(rr % uint64(partitions))
}

// natsQueue returns the verifier's queue for partition p of topic.
func natsQueue(topic string, p int) QueueRef {
	return QueueRef{Topic: topic, Broker: natsBroker, QueueID: int32(p)}
}

// Settings of the NATS driver.
const (
	natsMaxPending    = 8192             // async publishes in flight per connection
	natsAckWait       = 10 * time.Minute // longer than a backlog pause: no redelivery during one
	natsMaxAckPending = 100000
	natsPullBatch     = 1000
	natsSendTimeout   = 30 * time.Second
)

type natsCluster struct {
	url      string
	replicas int
	log      *slog.Logger
	prodConn *nats.Conn
	consConn *nats.Conn
	prodJS   jetstream.JetStream
	consJS   jetstream.JetStream

	mu         sync.Mutex
	partitions map[string]int          // topic -> partition count
	claimed    map[string]map[int]bool // group/topic -> partitions being read
	delivered  atomic.Int64
	pulls      atomic.Int64
}

func newNatsCluster(url string, replicas int, log *slog.Logger) (*natsCluster, error) {
	if replicas <= 0 {
		replicas = 1
	}
	opts := []nats.Option{nats.Name("petrel-bench"), nats.MaxReconnects(-1)}
	pc, err := nats.Connect(url, opts...)
	if err != nil {
		return nil, fmt.Errorf("cannot connect to NATS at %s: %w", url, err)
	}
	cc, err := nats.Connect(url, opts...)
	if err != nil {
		pc.Close()
		return nil, fmt.Errorf("cannot connect to NATS at %s: %w", url, err)
	}
	pjs, err := jetstream.New(pc, jetstream.WithPublishAsyncMaxPending(natsMaxPending), jetstream.WithPublishAsyncTimeout(natsSendTimeout))
	if err == nil {
		var cjs jetstream.JetStream
		cjs, err = jetstream.New(cc)
		if err == nil {
			return &natsCluster{url: url, replicas: replicas, log: log, prodConn: pc, consConn: cc, prodJS: pjs, consJS: cjs,
				partitions: map[string]int{}, claimed: map[string]map[int]bool{}}, nil
		}
	}
	pc.Close()
	cc.Close()
	return nil, err
}

func (c *natsCluster) createTopic(ctx context.Context, topic string, queues int) error {
	ctx, cancel := context.WithTimeout(ctx, topicReadyTimeout)
	defer cancel()
	_, err := c.prodJS.CreateOrUpdateStream(ctx, jetstream.StreamConfig{
		Name:     topic,
		Subjects: []string{topic + ".*"},
		Storage:  jetstream.FileStorage,
		Replicas: c.replicas,
	})
	if err != nil {
		return fmt.Errorf("cannot create stream %s: %w", topic, err)
	}
	c.mu.Lock()
	c.partitions[topic] = queues
	c.mu.Unlock()
	return nil
}

func (c *natsCluster) partitionsOf(topic string) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	n, ok := c.partitions[topic]
	if !ok || n <= 0 {
		return 0, fmt.Errorf("%w: %s (the NATS driver uses the streams it creates)", client.ErrTopicNotExist, topic)
	}
	return n, nil
}

func (c *natsCluster) newProducer() (producer, error) {
	p := &natsProducer{c: c, acks: make(chan natsPending, natsMaxPending), done: make(chan struct{})}
	go p.run()
	return p, nil
}

func (c *natsCluster) newConsumer(group, topic string) (consumer, error) {
	n, err := c.partitionsOf(topic)
	if err != nil {
		return nil, err
	}
	return &natsConsumer{c: c, group: group, topic: topic, partitions: n}, nil
}

func (c *natsCluster) corruptBatches() int64 { return 0 }

// offsetMoves returns none: a durable consumer's position is the server's.
func (c *natsCluster) offsetMoves() (moved, back int64) { return 0, 0 }

func (c *natsCluster) servedBy() map[int64]client.ServedCount {
	return map[int64]client.ServedCount{0: {Pulls: c.pulls.Load(), Messages: c.delivered.Load()}}
}

// groups returns none: there is no replication lag to sample.
func (c *natsCluster) groups(context.Context, []string) ([]groupInfo, error) { return nil, nil }

func (c *natsCluster) haStatus(context.Context, string) (*protocol.HAStatus, error) {
	return nil, errors.New("bench: the NATS driver has no replication status")
}

// queueBounds returns the partitions of topic with the stream's first and last sequences
// (+1) as every partition's bounds: partitions interleave in the stream.
func (c *natsCluster) queueBounds(ctx context.Context, topic string) ([]queueBound, error) {
	n, err := c.partitionsOf(topic)
	if err != nil {
		return nil, err
	}
	s, err := c.prodJS.Stream(ctx, topic)
	if err != nil {
		return nil, err
	}
	st := s.CachedInfo().State
	out := make([]queueBound, n)
	for p := range out {
		out[p] = queueBound{q: natsQueue(topic, p), min: int64(st.FirstSeq), max: int64(st.LastSeq) + 1}
	}
	return out, nil
}

func (c *natsCluster) close() error {
	c.prodConn.Close()
	c.consConn.Close()
	return nil
}

// claim takes the partitions of group/topic nobody reads; release gives them back.
func (c *natsCluster) claim(group, topic string, partitions int) []int {
	c.mu.Lock()
	defer c.mu.Unlock()
	k := group + "/" + topic
	m := c.claimed[k]
	if m == nil {
		m = map[int]bool{}
		c.claimed[k] = m
	}
	var out []int
	for p := range partitions {
		if !m[p] {
			m[p] = true
			out = append(out, p)
		}
	}
	return out
}

func (c *natsCluster) release(group, topic string, p int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.claimed[group+"/"+topic], p)
}

// natsPending is an async publish waiting for its acknowledgement.
type natsPending struct {
	f         jetstream.PubAckFuture
	topic     string
	partition int
	cb        func(client.SendResult, error)
	flush     chan struct{} // a Flush marker instead of a publish
}

type natsProducer struct {
	c    *natsCluster
	rr   uint64
	acks chan natsPending // in send order; run calls the callbacks
	done chan struct{}

	mu     sync.Mutex // guards closed and orders sends
	closed bool
}

func (p *natsProducer) msg(m *client.Message) (*nats.Msg, int, error) {
	n, err := p.c.partitionsOf(m.Topic)
	if err != nil {
		return nil, 0, err
	}
	part := natsPartition(m.ShardingKey, p.rr, n)
	if m.ShardingKey == "" {
		p.rr++
	}
	nm := nats.NewMsg(natsSubject(m.Topic, part))
	for k, v := range m.Properties {
		nm.Header.Set(k, strings.Clone(v)) // the bench reuses the value's bytes
	}
	nm.Data = m.Body // PublishMsgAsync writes it to the connection's buffer before returning
	return nm, part, nil
}

func (p *natsProducer) SendAsync(ctx context.Context, m *client.Message, cb func(client.SendResult, error)) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return client.ErrProducerClosed
	}
	nm, part, err := p.msg(m)
	if err != nil {
		return err
	}
	var f jetstream.PubAckFuture
	for {
		f, err = p.c.prodJS.PublishMsgAsync(nm, jetstream.WithStallWait(time.Second))
		if !errors.Is(err, jetstream.ErrTooManyStalledMsgs) {
			break
		}
		if err := ctx.Err(); err != nil {
			return err
		}
	}
	if err != nil {
		return err
	}
	select {
	case p.acks <- natsPending{f: f, topic: m.Topic, partition: part, cb: cb}:
		return nil
	case <-ctx.Done():
		// Published, but nobody will report it: its outcome is unknown to the run.
		go cb(client.SendResult{}, fmt.Errorf("%w: %w", client.ErrUnknownOutcome, ctx.Err()))
		return nil
	}
}

func (p *natsProducer) run() {
	defer close(p.done)
	for a := range p.acks {
		if a.flush != nil {
			close(a.flush)
			continue
		}
		select {
		case ack := <-a.f.Ok():
			a.cb(natsResult(a.partition, ack), nil)
		case err := <-a.f.Err():
			a.cb(client.SendResult{}, natsSendError(err))
		}
	}
}

func natsResult(part int, ack *jetstream.PubAck) client.SendResult {
	return client.SendResult{BrokerName: natsBroker, BrokerAddr: natsBroker, QueueID: int32(part), QueueOffset: int64(ack.Sequence), Count: 1}
}

// natsSendError marks the errors after which a message may be stored as unknown outcomes.
func natsSendError(err error) error {
	var apiErr *jetstream.APIError
	switch {
	case errors.As(err, &apiErr), errors.Is(err, jetstream.ErrNoStreamResponse), errors.Is(err, nats.ErrNoResponders):
		return err // refused: not stored
	default: // timeouts, a closed or reconnecting connection
		return fmt.Errorf("%w: %w", client.ErrUnknownOutcome, err)
	}
}

func (p *natsProducer) SendSync(ctx context.Context, m *client.Message) (client.SendResult, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return client.SendResult{}, client.ErrProducerClosed
	}
	nm, part, err := p.msg(m)
	if err != nil {
		return client.SendResult{}, err
	}
	ctx, cancel := context.WithTimeout(ctx, natsSendTimeout)
	defer cancel()
	ack, err := p.c.prodJS.PublishMsg(ctx, nm)
	if err != nil {
		return client.SendResult{}, natsSendError(err)
	}
	return natsResult(part, ack), nil
}

func (p *natsProducer) Flush(ctx context.Context) error {
	ch := make(chan struct{})
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return nil
	}
	select {
	case p.acks <- natsPending{flush: ch}:
	case <-ctx.Done():
		p.mu.Unlock()
		return ctx.Err()
	}
	p.mu.Unlock()
	select {
	case <-ch:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (p *natsProducer) Close(ctx context.Context) error {
	err := p.Flush(ctx)
	p.mu.Lock()
	if !p.closed {
		p.closed = true
		close(p.acks)
	}
	p.mu.Unlock()
	select {
	case <-p.done:
	case <-ctx.Done():
		return errors.Join(err, ctx.Err())
	}
	return err
}

type natsConsumer struct {
	c          *natsCluster
	group      string
	topic      string
	partitions int
}

// Run reads every partition of the topic its group does not read yet (and, every second,
// those another consumer of the group gave up) until ctx ends or a reader fails.
func (co *natsConsumer) Run(ctx context.Context, h client.Handler) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	errc := make(chan error, co.partitions)
	var wg sync.WaitGroup
	defer wg.Wait()
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for {
		for _, p := range co.c.claim(co.group, co.topic, co.partitions) {
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer co.c.release(co.group, co.topic, p)
				if err := co.readPartition(ctx, p, h); err != nil && ctx.Err() == nil {
					errc <- fmt.Errorf("partition %d: %w", p, err)
				}
			}()
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case err := <-errc:
			return err
		case <-tick.C:
		}
	}
}

// readPartition consumes partition p through its durable consumer, handing h what arrived
// since the previous call (up to natsPullBatch messages) and acking the last of them.
func (co *natsConsumer) readPartition(ctx context.Context, p int, h client.Handler) error {
	cons, err := co.c.consJS.CreateOrUpdateConsumer(ctx, co.topic, jetstream.ConsumerConfig{
		Durable:       natsDurable(co.group, p),
		FilterSubject: natsSubject(co.topic, p),
		DeliverPolicy: jetstream.DeliverAllPolicy,
		AckPolicy:     jetstream.AckAllPolicy,
		AckWait:       natsAckWait,
		MaxAckPending: natsMaxAckPending,
	})
	if err != nil {
		return err
	}
	// Short pull requests (5 s): with R3 a pull sent while the new consumer elects its leader is
	// lost, and with the default 30 s expiry the partition stalled past the drain timeout. A
	// missing heartbeat fails the reader, so the consumer is remade instead of waiting forever.
	it, err := cons.Messages(jetstream.PullMaxMessages(natsPullBatch), jetstream.PullExpiry(5*time.Second), jetstream.WithMessagesErrOnMissingHeartbeat(true))
	if err != nil {
		return err
	}
	msgs := make(chan jetstream.Msg, natsPullBatch)
	nextErr := make(chan error, 1)
	go func() {
		defer close(msgs)
		for {
			m, err := it.Next()
			if err != nil {
				nextErr <- err
				return
			}
			msgs <- m
		}
	}()
	defer func() {
		it.Stop()
		for range msgs { // let the reader goroutine end
		}
	}()
	batch := make([]jetstream.Msg, 0, natsPullBatch)
	exts := make([]client.MessageExt, 0, natsPullBatch)
	for {
		var m jetstream.Msg
		var ok bool
		select {
		case m, ok = <-msgs:
		case <-ctx.Done():
			return ctx.Err()
		}
		if !ok {
			err := <-nextErr
			if errors.Is(err, jetstream.ErrMsgIteratorClosed) {
				return ctx.Err()
			}
			return err
		}
		batch = append(batch[:0], m)
	more:
		for len(batch) < natsPullBatch {
			select {
			case m, ok = <-msgs:
				if !ok {
					break more
				}
				batch = append(batch, m)
			default:
				break more
			}
		}
		exts = exts[:0]
		for _, m := range batch {
			exts = append(exts, natsExt(co.topic, p, m))
		}
		if err := h(ctx, exts); err != nil {
			return err
		}
		co.c.pulls.Add(1)
		co.c.delivered.Add(int64(len(exts)))
		if err := batch[len(batch)-1].Ack(); err != nil {
			return fmt.Errorf("cannot ack: %w", err)
		}
	}
}

// natsExt turns a delivery of partition p into the message the handler reads: the identity
// header becomes the property list, the stream sequence the queue offset.
func natsExt(topic string, p int, m jetstream.Msg) client.MessageExt {
	e := client.MessageExt{Topic: topic, BrokerName: natsBroker, QueueID: int32(p), Body: m.Data(), BrokerAddr: natsBroker, QueueOffset: -1}
	if v := m.Headers().Get(natsHeader); v != "" {
		e.Properties = protocol.AppendProperty(nil, identityProperty, v)
	}
	if md, err := m.Metadata(); err == nil {
		e.QueueOffset = int64(md.Sequence.Stream)
		e.StoreTimestamp = md.Timestamp.UnixMilli()
	}
	return e
}

// setNatsDefaults checks Driver and, for DriverNats, its settings and the options it lacks.
func (c *Config) setNatsDefaults() error {
	switch c.Driver {
	case "", DriverPetrel:
		c.Driver = DriverPetrel
		return nil
	case DriverNats:
	default:
		return fmt.Errorf("unknown driver %q (petrel or nats)", c.Driver)
	}
	if c.NatsURL == "" {
		c.NatsURL = DefaultNatsURL
	}
	if c.NatsReplicas == 0 {
		c.NatsReplicas = 1
	}
	if c.NatsReplicas < 0 || c.NatsReplicas > 5 {
		return fmt.Errorf("nats-replicas %d: want 1..5", c.NatsReplicas)
	}
	switch {
	case c.ConsumeOnly:
		return errors.New("consume-only is not supported by the nats driver")
	case c.NoCreateTopic:
		return errors.New("no-create-topic is not supported by the nats driver")
	case c.NameServers != "":
		return errors.New("namesrv targets a Petrel cluster: use nats-url with the nats driver")
	}
	// No replication status to sample.
	c.HASampleInterval = -1
	return nil
}
