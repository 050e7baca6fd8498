package client

import (
	"cmp"
	"slices"
	"testing"
	"time"

	"github.com/petrel-mq/petrel/internal/testcluster"
	"github.com/petrel-mq/petrel/internal/testutil"
	"github.com/petrel-mq/petrel/protocol"
)

// Consumer groups against a real NameServer and broker: the broker's member list, its
// forgetting of clients that unregister or whose connection closes, and offsets handed over
// through the broker.

const groupRebalanceInterval = 200 * time.Millisecond

// groupCluster starts a broker with an 8-queue topic "GT" and returns the cluster, a producer
// and the topic's queues.
func groupCluster(t *testing.T) (*testcluster.Cluster, *Producer, []MessageQueue) {
	t.Helper()
	rc := testcluster.New(t, testcluster.Options{}, testcluster.GroupSpec{Name: "broker-a"})
	c := newTestClient(t, rc.NamesrvAddr())
	admin := NewAdmin(c)
	ctx := testCtx(t, 30*time.Second)
	if _, err := admin.CreateTopic(ctx, "DefaultCluster", protocol.TopicConfig{Topic: "GT", ReadQueueNums: 8, WriteQueueNums: 8}); err != nil {
		t.Fatal(err)
	}
	if err := admin.WaitTopicRoute(ctx, "GT", 1); err != nil {
		t.Fatal(err)
	}
	queues := topicQueues(t, c, "GT")
	if len(queues) != 8 {
		t.Fatalf("%d queues", len(queues))
	}
	return rc, newTestProducer(t, c), queues
}

// twoInGroup starts two consumers of group on their own clients and waits until they share the
// queues 4 and 4; it returns them in client-id order (the order of their shares).
func twoInGroup(t *testing.T, rc *testcluster.Cluster, group string, queues []MessageQueue, g *groupLog) (cos []*Consumer, clients []*Client, stops []func() error) {
	t.Helper()
	for i := range 2 {
		c, co := groupConsumer(t, rc.NamesrvAddr(), group, "GT", WithRebalanceInterval(groupRebalanceInterval), WithPollTimeout(500*time.Millisecond))
		stops = append(stops, runConsumer(t, co, g.handler(co.ClientID())))
		cos, clients = append(cos, co), append(clients, c)
		if i == 0 { // the first one alone takes everything
			waitShares(t, queues, cos, 8)
		}
	}
	if cmp.Compare(cos[0].ClientID(), cos[1].ClientID()) > 0 {
		slices.Reverse(cos)
		slices.Reverse(clients)
		slices.Reverse(stops)
	}
	waitShares(t, queues, cos, 4, 4)
	return cos, clients, stops
}

// TestIntegrationGroupSplitsQueues: two consumers of one group on an 8-queue topic get 4
// disjoint queues each (the first block to the lower client id) and, with the group steady,
// consume every message exactly once, each queue in order and from its owner only.
func TestIntegrationGroupSplitsQueues(t *testing.T) {
	rc, p, queues := groupCluster(t)
	g := newGroupLog(t)
	cos, _, _ := twoInGroup(t, rc, "GG", queues, g)
	if cos[0].ClientID() == cos[1].ClientID() {
		t.Fatal("equal client ids")
	}
	if a := cos[0].Assignment(); !slices.Equal(a, queues[:4]) {
		t.Fatalf("first share %v", a)
	}
	rebalances := []int64{cos[0].Stats().Rebalances, cos[1].Stats().Rebalances}

	produce(t, p, "GT", 0, 4000)
	testutil.Eventually(t, "every message", func() bool { return g.count() >= 4000 })
	time.Sleep(3 * groupRebalanceInterval) // room for duplicates to show
	g.checkExactlyOnce(0, 4000)
	for i, co := range cos {
		for _, mq := range co.Assignment() {
			if got := g.owners(mq); len(got) > 0 && !slices.Equal(got, []string{co.ClientID()}) {
				t.Fatalf("queue %s delivered by %v, owner %s", mq, got, co.ClientID())
			}
		}
		if st := co.Stats(); st.Rebalances != rebalances[i] {
			t.Fatalf("the group was not steady: %d rebalances, then %d", rebalances[i], st.Rebalances)
		}
	}
}

// TestIntegrationGroupTakeoverOnClose: when one consumer Closes (commit, then unregister), the
// other takes all 8 queues within a few RebalanceIntervals and resumes at the committed
// offsets: with messages in flight at the handover, nothing is lost and nothing duplicated.
func TestIntegrationGroupTakeoverOnClose(t *testing.T) {
	rc, p, queues := groupCluster(t)
	g := newGroupLog(t)
	cos, _, _ := twoInGroup(t, rc, "GC", queues, g)

	produce(t, p, "GT", 0, 4000)
	testutil.Eventually(t, "some messages", func() bool { return g.count() >= 1000 })
	closed := time.Now()
	if err := cos[0].Close(testCtx(t, 10*time.Second)); err != nil {
		t.Fatal(err)
	}
	waitShares(t, queues, cos[1:], 8)
	t.Logf("takeover %v after Close returned", time.Since(closed).Round(time.Millisecond))
	produce(t, p, "GT", 4000, 6000)
	testutil.Eventually(t, "every message", func() bool { return g.has(0, 6000) })
	time.Sleep(3 * groupRebalanceInterval)
	g.checkExactlyOnce(0, 6000)
	for _, qp := range cos[0].Progress() {
		if qp.Committed != qp.Consumed {
			t.Fatalf("the closed consumer did not commit: %+v", qp)
		}
	}
}

// TestIntegrationGroupTakeoverOnDeath: a consumer whose connections close without it
// unregistering (its process died) is dropped by the broker at once, and the other consumer
// takes its queues: nothing produced afterwards is lost (what it consumed without committing
// may come again).
func TestIntegrationGroupTakeoverOnDeath(t *testing.T) {
	rc, p, queues := groupCluster(t)
	g := newGroupLog(t)
	cos, clients, _ := twoInGroup(t, rc, "GD", queues, g)
	produce(t, p, "GT", 0, 1000)
	testutil.Eventually(t, "every message", func() bool { return g.has(0, 1000) })

	// "Kill" the first consumer: close its client's connections under it. Its goroutines stay
	// (as a hung process would) but can reach no broker; nothing is unregistered.
	died := time.Now()
	clients[0].pool.close()
	waitShares(t, queues, cos[1:], 8)
	t.Logf("takeover %v after the death", time.Since(died).Round(time.Millisecond))
	// The broker forgot the dead consumer when its connections closed: it sends no heartbeat,
	// and waitShares ends long before the broker's channelExpiredTimeout (120 s) would drop it.
	if ids, err := NewAdmin(clients[1]).ConsumerClients(testCtx(t, 10*time.Second), "GD", "GT"); err != nil || !slices.Equal(ids, []string{cos[1].ClientID()}) {
		t.Fatalf("the broker lists %q (%v) as the group, want only the survivor %s", ids, err, cos[1].ClientID())
	}
	produce(t, p, "GT", 1000, 3000)
	testutil.Eventually(t, "every message after the death", func() bool { return g.has(1000, 3000) })
	t.Logf("%d duplicates", g.duplicates())
}

// TestIntegrationTwoGroups: two groups consume the same topic independently: each gets every
// message exactly once, one with a single consumer holding all queues, one split in two.
func TestIntegrationTwoGroups(t *testing.T) {
	rc, p, queues := groupCluster(t)
	ga, gb := newGroupLog(t), newGroupLog(t)
	_, solo := groupConsumer(t, rc.NamesrvAddr(), "GA", "GT", WithRebalanceInterval(groupRebalanceInterval), WithPollTimeout(500*time.Millisecond))
	runConsumer(t, solo, ga.handler("solo"))
	twoInGroup(t, rc, "GB", queues, gb)
	waitShares(t, queues, []*Consumer{solo}, 8)

	produce(t, p, "GT", 0, 3000)
	testutil.Eventually(t, "every message in both groups", func() bool { return ga.count() >= 3000 && gb.count() >= 3000 })
	time.Sleep(3 * groupRebalanceInterval)
	ga.checkExactlyOnce(0, 3000)
	gb.checkExactlyOnce(0, 3000)
}

// TestIntegrationGroupJoin: a consumer joining a busy group takes half the queues; messages
// may come twice around the handover (at least once), but none is lost.
func TestIntegrationGroupJoin(t *testing.T) {
	rc, p, queues := groupCluster(t)
	g := newGroupLog(t)
	_, first := groupConsumer(t, rc.NamesrvAddr(), "GJ", "GT", WithRebalanceInterval(groupRebalanceInterval), WithPollTimeout(500*time.Millisecond))
	runConsumer(t, first, g.handler("first"))
	waitShares(t, queues, []*Consumer{first}, 8)
	produced := make(chan struct{})
	go func() {
		defer close(produced)
		produce(t, p, "GT", 0, 4000)
	}()
	testutil.Eventually(t, "consuming", func() bool { return g.count() >= 500 })
	_, second := groupConsumer(t, rc.NamesrvAddr(), "GJ", "GT", WithRebalanceInterval(groupRebalanceInterval), WithPollTimeout(500*time.Millisecond))
	runConsumer(t, second, g.handler("second"))
	<-produced
	cos := []*Consumer{first, second}
	slices.SortFunc(cos, func(a, b *Consumer) int { return cmp.Compare(a.ClientID(), b.ClientID()) })
	waitShares(t, queues, cos, 4, 4)
	testutil.Eventually(t, "every message", func() bool { return g.has(0, 4000) })
	t.Logf("%d duplicates around the join", g.duplicates())
}
