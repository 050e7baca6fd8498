package client

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/petrel-mq/petrel/internal/fakebroker"
	"github.com/petrel-mq/petrel/internal/testutil"
	"github.com/petrel-mq/petrel/protocol"
	"github.com/petrel-mq/petrel/protocol/rpc"
)

// Tests of the client against broker groups with slaves (internal/fakebroker): reads that follow
// the brokers' suggestions, "not here" answers, a dead master, pinned reads, commits to slaves,
// and producers that skip a group whose master is dead.

// produceSync sends messages from..to-1 one by one, so each is a batch of its own.
func produceSync(t testing.TB, p *Producer, topic string, from, to int) {
	t.Helper()
	ctx := testCtx(t, 20*time.Second)
	for i := from; i < to; i++ {
		if _, err := p.SendSync(ctx, &Message{Topic: topic, Body: []byte(fmt.Sprintf("m%06d", i))}); err != nil {
			t.Fatalf("send %d: %v", i, err)
		}
	}
}

// checkExactlyOnce fails unless col received bodies m<from>..m<to-1> exactly once each and
// nothing else.
func checkExactlyOnce(t testing.TB, col *collector, from, to int) {
	t.Helper()
	col.mu.Lock()
	defer col.mu.Unlock()
	for i := from; i < to; i++ {
		if n := col.body[fmt.Sprintf("m%06d", i)]; n != 1 {
			t.Errorf("message %d delivered %d times", i, n)
		}
	}
	if col.n != to-from {
		t.Errorf("%d deliveries, want %d", col.n, to-from)
	}
}

func TestConsumerNotHereGoesToMaster(t *testing.T) {
	fc := fakebroker.New(t)
	g := fc.AddGroup("a", 1, map[string]int32{"T": 1}).Members()
	master, slave := g[0], g[1]
	master.SetSuggestBrokerID(1) // read from the slave
	slave.SetSuggestBrokerID(1)  // and stay there
	slave.SetReplicatedUpTo(5)   // which lags: it holds offsets 0..4
	c := newTestClient(t, fc.Addr())
	p := newTestProducer(t, c)
	produceSync(t, p, "T", 0, 20)

	col := newCollector(t)
	co := newTestConsumer(t, c, "G", "T", WithPullMaxMessages(2))
	stop := runConsumer(t, co, col.handle)
	testutil.Eventually(t, "everything consumed", func() bool { return col.count() >= 20 })
	st := co.Stats()
	if st.ServedBy[1].NotHere == 0 || st.ServedBy[1].Messages != 3 || st.ServedBy[0].Messages != 17 {
		t.Fatalf("served by %+v; want the slave to serve 2..4 and answer NOT_HERE past them", st.ServedBy)
	}
	// The slave catches up: reads stay on it.
	slave.SetReplicatedUpTo(-1)
	masterPulls := master.Pulls()
	produceSync(t, p, "T", 20, 40)
	testutil.Eventually(t, "new messages consumed", func() bool { return col.count() >= 40 })
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	checkExactlyOnce(t, col, 0, 40)
	st = co.Stats()
	if got := st.ServedBy[1].Messages; got < 20 || master.Pulls() > masterPulls+2 {
		t.Fatalf("after the slave caught up: served by %+v, master pulls %d -> %d", st.ServedBy, masterPulls, master.Pulls())
	}
	if st.PullErrors != 0 || st.ServedBy[0].Messages+st.ServedBy[1].Messages != 40 || st.Delivered != 40 {
		t.Fatalf("stats %+v", st)
	}
}

func TestConsumerSwitchesMembersWithoutSkipOrRepeat(t *testing.T) {
	fc := fakebroker.New(t)
	g := fc.AddGroup("a", 2, map[string]int32{"T": 4}).Members()
	// Every answer sends the next pull to the next member: 0 -> 1 -> 2 -> 0 ...
	for i, b := range g {
		b.SetSuggestBrokerID(int64((i + 1) % len(g)))
	}
	c := newTestClient(t, fc.Addr())
	p := newTestProducer(t, c, WithMaxBatchBytes(64))
	produce(t, p, "T", 0, 600)
	col := newCollector(t)
	co := newTestConsumer(t, c, "G", "T", WithPullMaxMessages(3))
	stop := runConsumer(t, co, col.handle)
	testutil.Eventually(t, "everything consumed", func() bool { return col.count() >= 600 })
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	checkExactlyOnce(t, col, 0, 600)
	st := co.Stats()
	var sum int64
	for id := range int64(3) {
		if st.ServedBy[id].Messages == 0 {
			t.Errorf("member %d served nothing: %+v", id, st.ServedBy)
		}
		sum += st.ServedBy[id].Messages
	}
	if sum != 600 {
		t.Errorf("served %d messages, want 600: %+v", sum, st.ServedBy)
	}
	// Committed where consumed: the final commit covers every queue.
	for _, qp := range co.Progress() {
		if qp.Committed != qp.Consumed {
			t.Errorf("queue %v: committed %d, consumed %d", qp.Queue, qp.Committed, qp.Consumed)
		}
	}
}

func TestConsumerNotHereWithMasterUnreachableBacksOff(t *testing.T) {
	fc := fakebroker.New(t)
	g := fc.AddGroup("a", 1, map[string]int32{"T": 1}).Members()
	master, slave := g[0], g[1]
	c := newTestClient(t, fc.Addr())
	p := newTestProducer(t, c)
	produceSync(t, p, "T", 0, 10)
	slave.SetReplicatedUpTo(5)
	// The master stops answering but stays in the route; the slave still thinks it is linked,
	// so past offset 5 it answers NOT_HERE.
	master.Stop()
	col := newCollector(t)
	co := newTestConsumer(t, c, "G", "T", WithRetryDelay(500*time.Millisecond))
	stop := runConsumer(t, co, col.handle)
	testutil.Eventually(t, "the slave's messages consumed", func() bool { return col.count() >= 5 })
	before := slave.Pulls()
	time.Sleep(2 * time.Second)
	pulls := slave.Pulls() - before
	// Backing off from 50 ms, doubling up to the retry delay: a handful of pulls, not a spin.
	if pulls > 15 {
		t.Fatalf("%d pulls of the slave in 2 s while it has nothing more and the master is unreachable", pulls)
	}
	ps := co.Progress()
	if len(ps) != 1 || ps[0].Consumed != 5 || col.count() != 5 {
		t.Fatalf("progress %+v, %d delivered", ps, col.count())
	}
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	// The commit went to the slave, the master being unreachable.
	if slave.Commits() == 0 {
		t.Fatal("nothing committed to the slave")
	}
	if off, _ := slave.Group().CommittedOffset("G", "T", 0); off != 5 {
		t.Fatalf("committed %d, want 5", off)
	}
}

func TestConsumerReadsSlavesWhenMasterDead(t *testing.T) {
	fc := fakebroker.New(t)
	g := fc.AddGroup("a", 2, map[string]int32{"T": 2}).Members()
	master := g[0]
	c := newTestClient(t, fc.Addr(), WithRouteRefreshInterval(100*time.Millisecond))
	p := newTestProducer(t, c)
	produce(t, p, "T", 0, 100)

	// The master dies: out of the route, its slaves' links down.
	master.Stop()
	fc.SetRegistered(master, false)
	for _, s := range g[1:] {
		s.SetMasterLinked(false)
	}
	col := newCollector(t)
	co := newTestConsumer(t, c, "G", "T")
	stop := runConsumer(t, co, col.handle)
	testutil.Eventually(t, "everything consumed from the slaves", func() bool { return col.count() >= 100 })
	time.Sleep(200 * time.Millisecond) // nothing more comes
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	checkExactlyOnce(t, col, 0, 100)
	st := co.Stats()
	if st.ServedBy[0].Pulls != 0 || st.ServedBy[1].Messages+st.ServedBy[2].Messages != 100 {
		t.Fatalf("served by %+v", st.ServedBy)
	}
	if g[1].Commits()+g[2].Commits() == 0 {
		t.Fatal("no commit reached a slave")
	}

	// The master returns: the group resumes from the offsets committed to the slaves.
	master.Start()
	fc.SetRegistered(master, true)
	for _, s := range g[1:] {
		s.SetMasterLinked(true)
	}
	testutil.Eventually(t, "producing to the master again", func() bool {
		_, err := p.SendSync(testCtx(t, time.Second), &Message{Topic: "T", Body: []byte(fmt.Sprintf("m%06d", 100))})
		return err == nil
	})
	produceSync(t, p, "T", 101, 110)
	col2 := newCollector(t)
	co2 := newTestConsumer(t, c, "G", "T")
	stop2 := runConsumer(t, co2, col2.handle)
	testutil.Eventually(t, "the new messages consumed", func() bool { return col2.count() >= 10 })
	time.Sleep(100 * time.Millisecond)
	if err := stop2(); err != nil {
		t.Fatal(err)
	}
	checkExactlyOnce(t, col2, 100, 110)
}

func TestConsumerPinnedToOneMember(t *testing.T) {
	fc := fakebroker.New(t)
	g := fc.AddGroup("a", 2, map[string]int32{"T": 2}).Members()
	master, s1, s2 := g[0], g[1], g[2]
	master.SetSuggestBrokerID(1)
	s1.SetSuggestBrokerID(0)
	s2.SetSuggestBrokerID(0)
	c := newTestClient(t, fc.Addr())
	p := newTestProducer(t, c)
	produceSync(t, p, "T", 0, 50)
	s2.SetReplicatedUpTo(10) // holds queue offsets 0..9 of each queue

	col := newCollector(t)
	co := newTestConsumer(t, c, "G", "T", WithReadBrokerID(2), WithPullMaxMessages(4))
	stop := runConsumer(t, co, col.handle)
	testutil.Eventually(t, "what the pinned slave holds consumed", func() bool { return col.count() >= 20 })
	time.Sleep(300 * time.Millisecond)
	if n := col.count(); n != 20 {
		t.Fatalf("%d delivered while the pinned slave holds 20", n)
	}
	s2.SetReplicatedUpTo(-1)
	testutil.Eventually(t, "everything consumed", func() bool { return col.count() >= 50 })
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	checkExactlyOnce(t, col, 0, 50)
	st := co.Stats()
	if len(st.ServedBy) != 1 || st.ServedBy[2].Messages != 50 || st.ServedBy[2].NotHere == 0 {
		t.Fatalf("served by %+v; want member 2 alone, with NOT_HERE answers", st.ServedBy)
	}
	if master.Pulls() != 0 || s1.Pulls() != 0 {
		t.Fatalf("pulls: master %d, slave 1 %d", master.Pulls(), s1.Pulls())
	}
}

func TestConsumerIgnoresSlaveOffsetMovedBackwards(t *testing.T) {
	fc := fakebroker.New(t)
	g := fc.AddGroup("a", 1, map[string]int32{"T": 1}).Members()
	master, slave := g[0], g[1]
	master.SetSuggestBrokerID(1)
	slave.SetSuggestBrokerID(1)
	c := newTestClient(t, fc.Addr())
	p := newTestProducer(t, c)
	produceSync(t, p, "T", 0, 10)
	// A slave answering OFFSET_MOVED to offset 0 for anything past 5 (a broken slave).
	slave.ControlPull(func(h *protocol.PullRequestHeader) (rpc.Reply, fakebroker.Verdict) {
		if h.QueueOffset < 5 {
			return rpc.Reply{}, fakebroker.Pass
		}
		return rpc.Reply{Header: &protocol.PullResponseHeader{Result: protocol.PullOffsetMoved, NextQueueOffset: 0, MaxOffset: 0}}, fakebroker.Answer
	})
	col := newCollector(t)
	co := newTestConsumer(t, c, "G", "T", WithPullMaxMessages(2))
	stop := runConsumer(t, co, col.handle)
	testutil.Eventually(t, "everything consumed", func() bool { return col.count() >= 10 })
	produceSync(t, p, "T", 10, 15)
	testutil.Eventually(t, "new messages consumed", func() bool { return col.count() >= 15 })
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	checkExactlyOnce(t, col, 0, 15)
	// Taken as "not here": the position did not move, and no move is counted.
	if st := co.Stats(); st.OffsetMoved != 0 || st.OffsetMovedBack != 0 || st.ServedBy[1].NotHere == 0 {
		t.Fatalf("stats: offset moved %d, backwards %d, served by %+v; want no move and NOT_HERE answers of slave 1", st.OffsetMoved, st.OffsetMovedBack, st.ServedBy)
	}
}

func TestProducerSkipsGroupWithDeadMaster(t *testing.T) {
	fc := fakebroker.New(t)
	ga := fc.AddGroup("a", 1, map[string]int32{"T": 4}).Members()
	gb := fc.AddGroup("b", 1, map[string]int32{"T": 4}).Members()
	refresh := 100 * time.Millisecond
	c := newTestClient(t, fc.Addr(), WithRouteRefreshInterval(refresh))
	p := newTestProducer(t, c)
	ctx := testCtx(t, 20*time.Second)
	unknown := 0
	send := func(n int) map[string]int {
		t.Helper()
		by := map[string]int{}
		for i := range n {
			res, err := p.SendSync(ctx, &Message{Topic: "T", Body: []byte(fmt.Sprintf("x%d", i))})
			if errors.Is(err, ErrUnknownOutcome) && unknown == 0 {
				// The request in flight when the master died (its connection had not
				// noticed yet); once.
				unknown++
				continue
			}
			if err != nil {
				t.Fatalf("send %d: %v", i, err)
			}
			by[res.BrokerName]++
			if res.BrokerAddr != ga[0].Addr() && res.BrokerAddr != gb[0].Addr() {
				t.Fatalf("sent to %s, not a master", res.BrokerAddr)
			}
		}
		return by
	}
	if by := send(40); by["a"] == 0 || by["b"] == 0 {
		t.Fatalf("sends by group %v", by)
	}
	// Group a's master dies. Until the route drops it, sends to it fail and are retried on b.
	ga[0].Stop()
	send(40)
	fc.SetRegistered(ga[0], false)
	time.Sleep(2 * refresh) // one route refresh
	aSends := ga[0].Sends()
	if by := send(100); by["b"] != 100 {
		t.Fatalf("after the route refresh: sends by group %v", by)
	}
	if ga[0].Sends() != aSends || ga[1].Sends() != 0 || gb[1].Sends() != 0 {
		t.Fatalf("sends: dead master %d (was %d), slaves %d %d", ga[0].Sends(), aSends, ga[1].Sends(), gb[1].Sends())
	}
	// The master returns: sends come back to its group once its fault backoff ends.
	ga[0].Start()
	fc.SetRegistered(ga[0], true)
	testutil.Eventually(t, "sends to group a again", func() bool { return send(10)["a"] > 0 })
}

func TestProducerFollowsNotMasterFromSlave(t *testing.T) {
	// A route that still lists a slave as the master (roles just changed): the slave's
	// NOT_MASTER names the master, and the send follows it.
	fc := fakebroker.New(t)
	g := fc.AddGroup("a", 1, map[string]int32{"T": 1}).Members()
	master, slave := g[0], g[1]
	c := newTestClient(t, fc.Addr())
	var route protocol.TopicRouteData
	route.QueueDatas = []protocol.QueueData{{BrokerName: "a", ReadQueueNums: 1, WriteQueueNums: 1, Perm: protocol.PermReadWrite}}
	route.BrokerDatas = []protocol.BrokerData{{Cluster: "DefaultCluster", BrokerName: "a", Addrs: []protocol.BrokerAddr{{BrokerID: 0, Addr: slave.Addr()}}}}
	fc.SetRegistered(master, false)
	fc.SetRegistered(slave, false)
	c.routesMu.Lock()
	slot := &routeSlot{}
	slot.route.Store(newTopicRoute("T", route, time.Now()))
	slot.lastAttempt = time.Now().Add(time.Hour) // no refresh: keep the stale route
	c.routes["T"] = slot
	c.routesMu.Unlock()
	p := newTestProducer(t, c)
	res, err := p.SendSync(testCtx(t, 5*time.Second), &Message{Topic: "T", Body: []byte("x")})
	if err != nil {
		t.Fatal(err)
	}
	if res.BrokerAddr != master.Addr() || slave.Sends() != 1 || master.Sends() != 1 {
		t.Fatalf("result %+v; sends: slave %d, master %d", res, slave.Sends(), master.Sends())
	}
}

func TestCommitGoesToLiveMember(t *testing.T) {
	fc := fakebroker.New(t)
	g := fc.AddGroup("a", 2, map[string]int32{"T": 2}).Members()
	master, s1, s2 := g[0], g[1], g[2]
	c := newTestClient(t, fc.Addr())
	co := newTestConsumer(t, c, "G", "T")
	route, err := c.route(testCtx(t, 5*time.Second), "T")
	if err != nil {
		t.Fatal(err)
	}
	var states []*queueState
	for _, mq := range route.readQueues {
		qs := &queueState{mq: mq, offsets: newOffsetTracker()}
		qs.offsets.start(7, false, 0)
		states = append(states, qs)
	}
	commitAll := func() error {
		return co.commitQueues(testCtx(t, 5*time.Second), states)
	}
	// Master up: commits go there.
	if err := commitAll(); err != nil {
		t.Fatal(err)
	}
	if master.Commits() != 2 || s1.Commits()+s2.Commits() != 0 {
		t.Fatalf("commits: %d %d %d", master.Commits(), s1.Commits(), s2.Commits())
	}
	// Master and slave 1 down: slave 2 takes them.
	master.Stop()
	s1.Stop()
	for _, qs := range states {
		qs.offsets.advance(9)
	}
	if err := commitAll(); err != nil {
		t.Fatal(err)
	}
	if s2.Commits() != 2 {
		t.Fatalf("slave 2 got %d commits", s2.Commits())
	}
	for _, qs := range states {
		if _, c, _ := qs.offsets.position(); c != 9 {
			t.Fatalf("%v committed %d", qs.mq, c)
		}
	}
	// Nothing reachable: an error, and the committed offsets stay.
	s2.Stop()
	for _, qs := range states {
		qs.offsets.advance(11)
	}
	if err := commitAll(); err == nil {
		t.Fatal("commit with every member down succeeded")
	}
	for _, qs := range states {
		if _, c, _ := qs.offsets.position(); c != 9 {
			t.Fatalf("%v committed %d", qs.mq, c)
		}
	}
}

func TestServedCountsConcurrent(t *testing.T) {
	var s servedCounts
	if m := s.snapshot(); m == nil || len(m) != 0 {
		t.Fatalf("empty snapshot %v", m)
	}
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Go(func() {
			for j := range 1000 {
				c := s.cell(int64((i + j) % 3))
				c.pulls.Add(1)
				c.messages.Add(2)
				_ = s.snapshot()
			}
		})
	}
	wg.Wait()
	m := s.snapshot()
	var pulls, msgs int64
	for _, v := range m {
		pulls += v.Pulls
		msgs += v.Messages
	}
	if len(m) != 3 || pulls != 8000 || msgs != 16000 {
		t.Fatalf("%v", m)
	}
	ids := slices.Sorted(maps.Keys(m))
	if !slices.Equal(ids, []int64{0, 1, 2}) {
		t.Fatalf("ids %v", ids)
	}
}

// TestCommitToALaggingSlaveIsMadeAgain: a commit that rides with a pull answered NOT_HERE by a
// slave (which lowers it to what it replicated) is not taken as done: the consumer makes it
// again, and it reaches the master, before the consumer consumes anything else.
func TestCommitToALaggingSlaveIsMadeAgain(t *testing.T) {
	fc := fakebroker.New(t)
	g := fc.AddGroup("a", 1, map[string]int32{"T": 1}).Members()
	master, slave := g[0], g[1]
	master.SetSuggestBrokerID(1) // the consumer's next pull goes to the slave...
	slave.SetReplicatedUpTo(0)   // ...which holds nothing: NOT_HERE, back to the master
	var mu sync.Mutex
	var slaveCommits, masterCommits []int64
	recordCommits := func(to *[]int64) func(h *protocol.PullRequestHeader) (rpc.Reply, fakebroker.Verdict) {
		return func(h *protocol.PullRequestHeader) (rpc.Reply, fakebroker.Verdict) {
			mu.Lock()
			defer mu.Unlock()
			if h.CommitOffset >= 0 {
				*to = append(*to, h.CommitOffset)
			}
			return rpc.Reply{}, fakebroker.Pass
		}
	}
	slave.ControlPull(recordCommits(&slaveCommits))
	master.ControlPull(recordCommits(&masterCommits))
	master.Control(protocol.CodeUpdateConsumerOffset, func(req *rpc.Request) (rpc.Reply, fakebroker.Verdict) {
		var h protocol.ConsumerOffsetHeader
		if h.ReadFrom(req.Header) == nil {
			mu.Lock()
			masterCommits = append(masterCommits, h.Offset)
			mu.Unlock()
		}
		return rpc.Reply{}, fakebroker.Pass
	})
	c := newTestClient(t, fc.Addr())
	p := newTestProducer(t, c)
	produceSync(t, p, "T", 0, 5)
	col := newCollector(t)
	// Commits ride with pulls only (the commit loop is far off).
	co := newTestConsumer(t, c, "G", "T", WithCommitInterval(time.Hour), WithPollTimeout(100*time.Millisecond))
	stop := runConsumer(t, co, col.handle)
	defer stop()
	testutil.Eventually(t, "the commit of 5 sent to the slave, then to the master", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return slices.Contains(slaveCommits, 5) && slices.Contains(masterCommits, 5)
	})
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	checkExactlyOnce(t, col, 0, 5)
}
