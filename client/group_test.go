package client

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/petrel-mq/petrel/internal/fakebroker"
	"github.com/petrel-mq/petrel/internal/testutil"
	"github.com/petrel-mq/petrel/protocol"
)

// groupLog records what the consumers of one group delivered, to check the group as a whole:
// every message once, each queue in order, each queue from one consumer at a time.
type groupLog struct {
	t  testing.TB
	mu sync.Mutex
	// bodies counts deliveries per body.
	bodies map[string]int
	// offsets lists the offsets delivered per queue, in delivery order.
	offsets map[MessageQueue][]int64
	// by names the consumers that delivered messages of each queue.
	by map[MessageQueue]map[string]bool
	// busy marks the queues a handler call is in progress for; overlaps counts calls that
	// found their queue busy (two consumers holding one queue at once).
	busy     map[MessageQueue]bool
	overlaps int
	n        int
}

func newGroupLog(t testing.TB) *groupLog {
	return &groupLog{t: t, bodies: map[string]int{}, offsets: map[MessageQueue][]int64{}, by: map[MessageQueue]map[string]bool{}, busy: map[MessageQueue]bool{}}
}

// handler returns the Handler of consumer name.
func (g *groupLog) handler(name string) Handler {
	return func(_ context.Context, msgs []MessageExt) error {
		mq := MessageQueue{Topic: msgs[0].Topic, BrokerName: msgs[0].BrokerName, QueueID: msgs[0].QueueID}
		g.mu.Lock()
		if g.busy[mq] {
			g.overlaps++
		}
		g.busy[mq] = true
		g.mu.Unlock()
		time.Sleep(time.Millisecond)
		g.mu.Lock()
		defer g.mu.Unlock()
		g.busy[mq] = false
		if g.by[mq] == nil {
			g.by[mq] = map[string]bool{}
		}
		g.by[mq][name] = true
		for _, m := range msgs {
			g.offsets[mq] = append(g.offsets[mq], m.QueueOffset)
			g.bodies[string(m.Body)]++
			g.n++
		}
		return nil
	}
}

func (g *groupLog) count() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.n
}

// has reports whether every message from..to-1 of produce was delivered.
func (g *groupLog) has(from, to int) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	for i := from; i < to; i++ {
		if g.bodies[fmt.Sprintf("m%06d", i)] == 0 {
			return false
		}
	}
	return true
}

// duplicates returns the deliveries beyond the first of each body.
func (g *groupLog) duplicates() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	d := 0
	for _, n := range g.bodies {
		d += n - 1
	}
	return d
}

// checkExactlyOnce fails unless messages from..to-1 were each delivered once, nothing else
// was, every queue's offsets strictly increase, and no handler calls of one queue overlapped.
// distinct returns the number of distinct bodies delivered.
func (g *groupLog) distinct() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return len(g.bodies)
}

func (g *groupLog) checkExactlyOnce(from, to int) {
	g.t.Helper()
	g.mu.Lock()
	defer g.mu.Unlock()
	for i := from; i < to; i++ {
		if n := g.bodies[fmt.Sprintf("m%06d", i)]; n != 1 {
			g.t.Fatalf("message %d delivered %d times", i, n)
		}
	}
	if len(g.bodies) != to-from || g.n != to-from {
		g.t.Fatalf("%d deliveries of %d bodies, want %d", g.n, len(g.bodies), to-from)
	}
	g.checkOrderLocked()
	if g.overlaps != 0 {
		g.t.Fatalf("%d handler calls overlapped another of the same queue", g.overlaps)
	}
}

// checkOrderLocked fails unless every queue's offsets strictly increase. Lock should be held.
func (g *groupLog) checkOrderLocked() {
	g.t.Helper()
	for mq, offs := range g.offsets {
		for i := 1; i < len(offs); i++ {
			if offs[i] <= offs[i-1] {
				g.t.Fatalf("queue %s: offset %d delivered after %d", mq, offs[i], offs[i-1])
			}
		}
	}
}

// owners returns the consumers that delivered messages of mq.
func (g *groupLog) owners(mq MessageQueue) []string {
	g.mu.Lock()
	defer g.mu.Unlock()
	var out []string
	for name := range g.by[mq] {
		out = append(out, name)
	}
	slices.Sort(out)
	return out
}

// waitShares waits until the consumers' assignments are disjoint, cover want, and have the
// sizes given (in consumer order).
func waitShares(t testing.TB, want []MessageQueue, cos []*Consumer, sizes ...int) {
	t.Helper()
	testutil.Eventually(t, fmt.Sprintf("assignments of sizes %v", sizes), func() bool {
		var all []MessageQueue
		for i, co := range cos {
			a := co.Assignment()
			if len(a) != sizes[i] {
				return false
			}
			all = append(all, a...)
		}
		slices.SortFunc(all, compareQueues)
		return slices.Equal(all, want)
	})
}

// topicQueues returns the topic's read queues from c's route.
func topicQueues(t testing.TB, c *Client, topic string) []MessageQueue {
	t.Helper()
	r, err := c.route(testCtx(t, 10*time.Second), topic)
	if err != nil {
		t.Fatal(err)
	}
	return r.readQueues
}

// groupConsumer makes a consumer of group on its own client (its own "process").
func groupConsumer(t testing.TB, nsAddr, group, topic string, opts ...ConsumerOption) (*Client, *Consumer) {
	t.Helper()
	c := newTestClient(t, nsAddr)
	opts = append([]ConsumerOption{WithRebalanceInterval(100 * time.Millisecond)}, opts...)
	return c, newTestConsumer(t, c, group, topic, opts...)
}

func TestConsumerGroupSharesQueues(t *testing.T) {
	fc, _, _ := twoGroups(t, 3)
	pc := newTestClient(t, fc.Addr())
	p := newTestProducer(t, pc)
	queues := topicQueues(t, pc, "T")
	g := newGroupLog(t)

	_, co1 := groupConsumer(t, fc.Addr(), "G", "T")
	runConsumer(t, co1, g.handler("co1"))
	waitShares(t, queues, []*Consumer{co1}, 6)
	_, co2 := groupConsumer(t, fc.Addr(), "G", "T")
	runConsumer(t, co2, g.handler("co2"))
	_, co3 := groupConsumer(t, fc.Addr(), "G", "T")
	stop3 := runConsumer(t, co3, g.handler("co3"))
	cos := []*Consumer{co1, co2, co3}
	// The shares follow the client-id order, not the start order.
	slices.SortFunc(cos, func(a, b *Consumer) int { return cmp.Compare(a.ClientID(), b.ClientID()) })
	waitShares(t, queues, cos, 2, 2, 2)

	produce(t, p, "T", 0, 600)
	testutil.Eventually(t, "every message", func() bool { return g.count() >= 600 })
	time.Sleep(50 * time.Millisecond)
	g.checkExactlyOnce(0, 600)
	for _, co := range cos {
		if st := co.Stats(); st.Rebalances < 1 {
			t.Fatalf("%s: stats %+v", co.ClientID(), st)
		}
	}

	// One leaves: the other two take its queues and resume where it committed.
	if err := stop3(); err != nil {
		t.Fatal(err)
	}
	if a := co3.Assignment(); len(a) != 0 {
		t.Fatalf("assignment after Run: %v", a)
	}
	rest := slices.DeleteFunc(slices.Clone(cos), func(co *Consumer) bool { return co == co3 })
	waitShares(t, queues, rest, 3, 3)
	produce(t, p, "T", 600, 1200)
	testutil.Eventually(t, "every message after the leave", func() bool { return g.count() >= 1200 })
	time.Sleep(50 * time.Millisecond)
	g.checkExactlyOnce(0, 1200)
}

// TestConsumerKeepsAssignment: a consumer keeps its queues while the group's list is
// unavailable, and while the broker has forgotten it (then it heartbeats again at once).
func TestConsumerKeepsAssignment(t *testing.T) {
	fc, a, b := twoGroups(t, 3)
	pc := newTestClient(t, fc.Addr())
	p := newTestProducer(t, pc)
	queues := topicQueues(t, pc, "T")
	g := newGroupLog(t)
	_, co := groupConsumer(t, fc.Addr(), "G", "T", WithHeartbeatInterval(time.Hour))
	runConsumer(t, co, g.handler("co"))
	waitShares(t, queues, []*Consumer{co}, 6)

	unavailable := fakebroker.Refuse(protocol.StatusSystemError, "fake: member list unavailable")
	removeA := a.Control(protocol.CodeGetConsumerListByGroup, unavailable)
	removeB := b.Control(protocol.CodeGetConsumerListByGroup, unavailable)
	produce(t, p, "T", 0, 100)
	testutil.Eventually(t, "consumed while the list fails", func() bool { return g.count() >= 100 })
	time.Sleep(300 * time.Millisecond) // a few rebalances
	if got := co.Assignment(); !slices.Equal(got, queues) {
		t.Fatalf("assignment changed while the list failed: %v", got)
	}
	removeA()
	removeB()

	beats := a.Heartbeats()
	a.ForgetClients()
	b.ForgetClients()
	testutil.Eventually(t, "heartbeat again", func() bool { return len(a.Clients("G")) == 1 && len(b.Clients("G")) == 1 })
	if a.Heartbeats() == beats {
		t.Fatal("no new heartbeat")
	}
	produce(t, p, "T", 100, 200)
	testutil.Eventually(t, "consumed after", func() bool { return g.count() >= 200 })
	time.Sleep(50 * time.Millisecond)
	if got := co.Assignment(); !slices.Equal(got, queues) {
		t.Fatalf("assignment changed: %v", got)
	}
	g.checkExactlyOnce(0, 200)
	if st := co.Stats(); st.Rebalances != 1 {
		t.Fatalf("stats %+v", st)
	}
}

// TestConsumerFollowsNewBroker: a broker group joining the topic's route gets a heartbeat at
// once (not at the next HeartbeatInterval) and its queues join the assignment.
func TestConsumerFollowsNewBroker(t *testing.T) {
	fc := fakebroker.New(t)
	fc.AddGroup("a", 1, map[string]int32{"T": 2})
	c := newTestClient(t, fc.Addr(), WithRouteRefreshInterval(50*time.Millisecond))
	g := newGroupLog(t)
	co := newTestConsumer(t, c, "G", "T", WithHeartbeatInterval(time.Hour), WithRebalanceInterval(100*time.Millisecond))
	runConsumer(t, co, g.handler("co"))
	testutil.Eventually(t, "group a's queues", func() bool { return len(co.Assignment()) == 2 })
	b := fc.AddGroup("b", 1, map[string]int32{"T": 3}).Members()
	testutil.Eventually(t, "group b's queues", func() bool { return len(co.Assignment()) == 5 })
	// The heartbeat to b and the rebalance that takes b's queues are independent: the member
	// list may come from broker a, which knows the consumer already, so the assignment can grow
	// before b is heartbeaten. Either way b hears from the consumer well before the hour-long
	// HeartbeatInterval.
	for _, bb := range b { // master and slave
		testutil.Eventually(t, fmt.Sprintf("a heartbeat to broker %s/%d", bb.Name(), bb.ID()), func() bool {
			return bb.Heartbeats() > 0 && len(bb.Clients("G")) == 1
		})
	}
	p := newTestProducer(t, c)
	produce(t, p, "T", 0, 200)
	testutil.Eventually(t, "consumed from both groups", func() bool { return g.count() >= 200 })
	time.Sleep(50 * time.Millisecond)
	g.checkExactlyOnce(0, 200)
}

// TestConsumerTakesAQueueBackWhereItLeftIt: a broker group disappears from the route (every
// member down) while its queues' offsets are not committed yet; the consumer releases them (the
// commit fails) and takes them back when the group returns. It resumes where it left them, not
// at the group's older committed offset: nothing it handled is delivered again.
func TestConsumerTakesAQueueBackWhereItLeftIt(t *testing.T) {
	fc := fakebroker.New(t)
	b := fc.AddGroup("b", 0, map[string]int32{"T": 2}).Master()
	fc.AddGroup("a", 0, map[string]int32{"T": 2})
	c := newTestClient(t, fc.Addr(), WithRouteRefreshInterval(50*time.Millisecond))
	g := newGroupLog(t)
	co := newTestConsumer(t, c, "G", "T", WithCommitInterval(time.Hour), WithRebalanceInterval(100*time.Millisecond))
	runConsumer(t, co, g.handler("co"))
	testutil.Eventually(t, "four queues", func() bool { return len(co.Assignment()) == 4 })
	p := newTestProducer(t, c)
	produce(t, p, "T", 0, 200)
	testutil.Eventually(t, "everything consumed", func() bool { return g.count() >= 200 })
	b.Stop()
	testutil.Eventually(t, "group b's queues released", func() bool { return len(co.Assignment()) == 2 })
	b.Start()
	testutil.Eventually(t, "group b's queues taken back", func() bool { return len(co.Assignment()) == 4 })
	produce(t, p, "T", 200, 300)
	// A redelivery comes before the new messages of its queue, so once every new message is in
	// any redelivery is too.
	testutil.Eventually(t, "every message consumed", func() bool { return g.distinct() >= 300 })
	g.checkExactlyOnce(0, 300)
}
