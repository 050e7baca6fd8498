package bench

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/petrel-mq/petrel/client"
	"github.com/petrel-mq/petrel/protocol"
)

// producer is what the bench needs of a producer; *client.Producer is one.
type producer interface {
	SendAsync(ctx context.Context, m *client.Message, cb func(client.SendResult, error)) error
	SendSync(ctx context.Context, m *client.Message) (client.SendResult, error)
	Flush(ctx context.Context) error
	Close(ctx context.Context) error
}

// consumer is what the bench needs of a consumer; *client.Consumer is one.
type consumer interface {
	Run(ctx context.Context, h client.Handler) error
}

// cluster is the system under test, as OMB's driver: it makes topics, producers and consumers.
// The Petrel implementation wraps the client; tests use an in-memory fake.
type cluster interface {
	// createTopic creates topic with the given queue count and waits until producers can use it.
	createTopic(ctx context.Context, topic string, queues int) error
	newProducer() (producer, error)
	newConsumer(group, topic string) (consumer, error)
	// corruptBatches returns the batches consumers rejected for a bad CRC or structure.
	corruptBatches() int64
	// offsetMoves sums, over every consumer made, the OFFSET_MOVED answers followed and those
	// that moved a consumer's position backwards (client.ConsumerStats).
	offsetMoves() (moved, back int64)
	// servedBy sums, over every consumer made, what each member of the broker groups served
	// (by brokerId: 0 the master, > 0 a slave); nil when the cluster cannot tell.
	servedBy() map[int64]client.ServedCount
	// groups returns the broker groups serving topics, sorted by name, with their masters and
	// slave counts as the NameServer's routes list them.
	groups(ctx context.Context, topics []string) ([]groupInfo, error)
	// haStatus returns the replication status of the broker at addr.
	haStatus(ctx context.Context, addr string) (*protocol.HAStatus, error)
	// queueBounds returns the min and max offsets of every read queue of topic, asked of each
	// group's master (or, when it is down, of a live member).
	queueBounds(ctx context.Context, topic string) ([]queueBound, error)
	close() error
}

// groupInfo is one broker group serving the run's topics.
type groupInfo struct {
	name   string
	master string // the master's address; "" when the route lists none
	slaves int    // members with brokerId > 0 in the route (for information: see newLagSampler)
}

// queueBound is one read queue of a topic with its offsets at the start of a consume-only run:
// the messages at queue offsets [min, max) must all be consumed.
type queueBound struct {
	q        QueueRef
	min, max int64
}

// clusterOptions are the settings of a petrelCluster beyond its NameServers.
type clusterOptions struct {
	// target is where topics are created: a broker address, a cluster name or "" (all masters).
	target string
	// waitTopicOn lists broker addresses (the embedded group's slaves) that must hold a new
	// topic before the run uses it. A slave refuses topic updates (NOT_MASTER); it gets the
	// master's topic configs at its next sync (slaveSyncInterval).
	waitTopicOn []string
	// readBrokerID pins consumers to one member of each group (client.WithReadBrokerID); -1:
	// they follow the brokers' suggestions.
	readBrokerID int64
	// linger is Config.Linger.
	linger time.Duration
}

// petrelCluster runs the bench through Petrel's client. Producers share one client, consumers
// another and admin requests (topic creation, replication status samples) a third, so pulls,
// sends and admin requests travel on separate connections: an admin request that times out
// closes its connection (the client replaces hung connections), which must not take sends in
// flight with it. It is safe for concurrent use (consumers are remade from their goroutines).
type petrelCluster struct {
	prodClient  *client.Client
	consClient  *client.Client
	adminClient *client.Client
	admin       *client.Admin
	opts        clusterOptions
	log         *slog.Logger

	mu        sync.Mutex // guards consumers
	consumers []*client.Consumer

	// trace collects send traces when tracing is on (startTracing), nil otherwise; producers and
	// consumers made after startTracing report to it.
	trace      *tracer
	traceAddrs []string
}

func newPetrelCluster(ctx context.Context, nameServers string, o clusterOptions, log *slog.Logger) (*petrelCluster, error) {
	opts := []client.ClientOption{client.WithNameServers(nameServers), client.WithLogger(log)}
	pc, err := client.New(ctx, opts...)
	if err != nil {
		return nil, err
	}
	cc, err := client.New(ctx, opts...)
	if err != nil {
		_ = pc.Close()
		return nil, err
	}
	ac, err := client.New(ctx, opts...)
	if err != nil {
		_ = pc.Close()
		_ = cc.Close()
		return nil, err
	}
	return &petrelCluster{prodClient: pc, consClient: cc, adminClient: ac, admin: client.NewAdmin(ac), opts: o, log: log}, nil
}

// topicReadyTimeout bounds the wait for a new topic to appear in the NameServer's routes.
// It exceeds a NameServer's default registration period, which a cluster that just started
// waits out before it answers the cluster table.
const topicReadyTimeout = 45 * time.Second

func (c *petrelCluster) createTopic(ctx context.Context, topic string, queues int) error {
	ctx, cancel := context.WithTimeout(ctx, topicReadyTimeout)
	defer cancel()
	tc := protocol.TopicConfig{Topic: topic, ReadQueueNums: int32(queues), WriteQueueNums: int32(queues), Perm: protocol.PermReadWrite}
	var done []client.BrokerTarget
	for backoff := 50 * time.Millisecond; ; backoff = min(2*backoff, time.Second) {
		var err error
		done, err = c.admin.CreateTopic(ctx, c.opts.target, tc)
		if err == nil {
			break
		}
		// A cluster name needs the brokers registered with the NameServer; right after start
		// they may not be yet (the cluster is unknown, or a group has no master yet), or the
		// NameServers not ready (in their first registration period). Creating the topic again
		// on the masters that have it changes nothing.
		if !startingUp(err) || !sleepCtx(ctx, backoff) {
			return fmt.Errorf("cannot create topic %s: %w", topic, err)
		}
	}
	for _, addr := range c.opts.waitTopicOn {
		if err := c.waitTopicOn(ctx, addr, tc); err != nil {
			return fmt.Errorf("topic %s created but not synced to %s: %w", topic, addr, err)
		}
	}
	if err := c.admin.WaitTopicRoute(ctx, topic, len(done)); err != nil {
		return fmt.Errorf("topic %s created but not routable: %w", topic, err)
	}
	return nil
}

// startingUp reports whether err is what CreateTopic answers while a cluster starts: its
// brokers not registered yet, or the NameServers in their first registration period.
func startingUp(err error) bool {
	for _, want := range []error{client.ErrUnknownCluster, client.ErrNoMaster, client.ErrNoQueue, client.ErrNamesrvNotReady} {
		if errors.Is(err, want) {
			return true
		}
	}
	return false
}

// waitTopicOn waits until the broker at addr (a slave) holds tc, synced from its master.
func (c *petrelCluster) waitTopicOn(ctx context.Context, addr string, tc protocol.TopicConfig) error {
	for backoff := 20 * time.Millisecond; ; backoff = min(2*backoff, 200*time.Millisecond) {
		l, err := c.admin.AllTopicConfig(ctx, addr)
		if err == nil && slices.ContainsFunc(l.Topics, func(t protocol.TopicConfig) bool {
			return t.Topic == tc.Topic && t.ReadQueueNums == tc.ReadQueueNums && t.WriteQueueNums == tc.WriteQueueNums
		}) {
			return nil
		}
		if !sleepCtx(ctx, backoff) {
			if err == nil {
				err = ctx.Err()
			}
			return err
		}
	}
}

// benchBufferBytes is the producers' buffer: large enough to keep every queue's batches full.
const benchBufferBytes = 64 << 20

func (c *petrelCluster) newProducer() (producer, error) {
	linger := c.opts.linger
	switch linger {
	case 0:
		linger = DefaultLinger
	case NoLinger:
		linger = 0
	}
	opts := []client.ProducerOption{client.WithLinger(linger), client.WithBufferBytes(benchBufferBytes)}
	if c.trace != nil {
		opts = append(opts, client.WithTraceEvery(c.trace.every), client.WithSendTraceObserver(c.trace.sent))
	}
	return client.NewProducer(c.prodClient, opts...)
}

// startTracing turns send tracing on for the producers and consumers made from now on, when
// every master of groups records send traces, and polls their rings until close.
func (c *petrelCluster) startTracing(ctx context.Context, every int, groups []groupInfo) error {
	var addrs []string
	t := newTracer(every)
	for _, g := range groups {
		if g.master == "" {
			continue
		}
		head, err := probe(ctx, c.admin, g.master)
		if err != nil {
			return err
		}
		t.startAt(g.master, head)
		addrs = append(addrs, g.master)
	}
	c.trace = t
	c.trace.startPolling(c.admin, addrs)
	c.traceAddrs = addrs
	return nil
}

// traceBreakdown reads the masters' rings a last time and returns the breakdown (nil without
// tracing). from and the thresholds (ms) as tracer.breakdown's.
func (c *petrelCluster) traceBreakdown(from int64, pub99, pub999, e2e99, e2e999 float64) *LatencyBreakdown {
	if c.trace == nil {
		return nil
	}
	c.trace.stop()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	c.trace.poll(ctx, c.admin, c.traceAddrs)
	return c.trace.breakdown(from, pub99, pub999, e2e99, e2e999)
}

// traceDelivered notes that the handler started on the pull of (topic, queue) from offset.
func (c *petrelCluster) traceDelivered(topic string, queue int32, from int64, at int64) {
	if c.trace != nil {
		c.trace.delivered(topic, queue, from, at)
	}
}

func (c *petrelCluster) newConsumer(group, topic string) (consumer, error) {
	opts := []client.ConsumerOption{client.WithConsumeFrom(client.ConsumeFromFirst)}
	if c.trace != nil {
		opts = append(opts, client.WithPullObserver(c.trace.pulled))
	}
	if c.opts.readBrokerID >= 0 {
		opts = append(opts, client.WithReadBrokerID(c.opts.readBrokerID))
	}
	co, err := client.NewConsumer(c.consClient, group, topic, opts...)
	if err != nil {
		return nil, err
	}
	c.mu.Lock()
	c.consumers = append(c.consumers, co)
	c.mu.Unlock()
	return co, nil
}

func (c *petrelCluster) corruptBatches() int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	var n int64
	for _, co := range c.consumers {
		n += co.Stats().CorruptBatches
	}
	return n
}

func (c *petrelCluster) offsetMoves() (moved, back int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, co := range c.consumers {
		st := co.Stats()
		moved += st.OffsetMoved
		back += st.OffsetMovedBack
	}
	return moved, back
}

func (c *petrelCluster) memberAddr(ctx context.Context, topic, group string, brokerID int64) (string, error) {
	route, err := c.admin.TopicRoute(ctx, topic)
	if err != nil {
		return "", fmt.Errorf("cannot get the route of %s: %w", topic, err)
	}
	for i := range route.BrokerDatas {
		bd := &route.BrokerDatas[i]
		if bd.BrokerName != group {
			continue
		}
		for _, a := range bd.Addrs {
			if a.BrokerID == brokerID {
				return a.Addr, nil
			}
		}
		return "", fmt.Errorf("the route of %s lists no member with brokerId %d in broker group %s (live: %v)", topic, brokerID, group, bd.Addrs)
	}
	return "", fmt.Errorf("the route of %s lists no broker group %s", topic, group)
}

func (c *petrelCluster) members(ctx context.Context, topic string) (map[string][]int64, error) {
	route, err := c.admin.TopicRoute(ctx, topic)
	if err != nil {
		return nil, err
	}
	out := map[string][]int64{}
	for _, bd := range route.BrokerDatas {
		for _, a := range bd.Addrs {
			out[bd.BrokerName] = append(out[bd.BrokerName], a.BrokerID)
		}
	}
	return out, nil
}

func (c *petrelCluster) pull(ctx context.Context, addr string, q QueueRef, offset int64, max int32) (*client.PullAnswer, error) {
	return c.admin.Pull(ctx, addr, client.MessageQueue{Topic: q.Topic, BrokerName: q.Broker, QueueID: q.QueueID}, offset, max)
}

func (c *petrelCluster) servedBy() map[int64]client.ServedCount {
	c.mu.Lock()
	defer c.mu.Unlock()
	sum := map[int64]client.ServedCount{}
	for _, co := range c.consumers {
		for id, n := range co.Stats().ServedBy {
			s := sum[id]
			s.Pulls += n.Pulls
			s.Messages += n.Messages
			s.NotHere += n.NotHere
			sum[id] = s
		}
	}
	return sum
}

func (c *petrelCluster) groups(ctx context.Context, topics []string) ([]groupInfo, error) {
	byName := map[string]groupInfo{}
	for _, topic := range topics {
		route, err := c.admin.TopicRoute(ctx, topic)
		if err != nil {
			return nil, fmt.Errorf("cannot get the route of %s: %w", topic, err)
		}
		for i := range route.BrokerDatas {
			bd := &route.BrokerDatas[i]
			g := groupInfo{name: bd.BrokerName, master: bd.MasterAddr()}
			for _, a := range bd.Addrs {
				if a.BrokerID > 0 {
					g.slaves++
				}
			}
			if old, ok := byName[g.name]; !ok || g.slaves > old.slaves || old.master == "" {
				byName[g.name] = g
			}
		}
	}
	out := slices.Collect(maps.Values(byName))
	slices.SortFunc(out, func(a, b groupInfo) int { return strings.Compare(a.name, b.name) })
	return out, nil
}

func (c *petrelCluster) haStatus(ctx context.Context, addr string) (*protocol.HAStatus, error) {
	return c.admin.HAStatus(ctx, addr)
}

func (c *petrelCluster) queueBounds(ctx context.Context, topic string) ([]queueBound, error) {
	route, err := c.admin.TopicRoute(ctx, topic)
	if err != nil {
		return nil, fmt.Errorf("cannot get the route of %s: %w", topic, err)
	}
	readQueues := map[string]int32{}
	for _, qd := range route.QueueDatas {
		if qd.Perm&protocol.PermRead != 0 && qd.ReadQueueNums > 0 {
			readQueues[qd.BrokerName] = qd.ReadQueueNums
		}
	}
	// The master's offsets when it is up, so a run pinned to a slave must find everything the
	// master holds; a group without a live master answers through a slave.
	stats, err := c.admin.TopicStatsFrom(ctx, topic, 0)
	if err != nil {
		return nil, fmt.Errorf("cannot get the offsets of %s: %w", topic, err)
	}
	var out []queueBound
	for _, bs := range stats {
		n, ok := readQueues[bs.BrokerName]
		if !ok {
			continue
		}
		delete(readQueues, bs.BrokerName)
		for _, q := range bs.Stats.Queues {
			if q.QueueID < n {
				out = append(out, queueBound{q: QueueRef{Topic: topic, Broker: bs.BrokerName, QueueID: q.QueueID}, min: q.MinOffset, max: q.MaxOffset})
			}
		}
	}
	for name := range readQueues {
		return nil, fmt.Errorf("cannot get the offsets of %s on broker group %s: no live member answered", topic, name)
	}
	return out, nil
}

func (c *petrelCluster) close() error {
	if c.trace != nil {
		c.trace.stop()
	}
	return errors.Join(c.prodClient.Close(), c.consClient.Close(), c.adminClient.Close())
}

// sleepCtx waits for d or the end of ctx; it reports whether d passed.
func sleepCtx(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}
