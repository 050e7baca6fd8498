package broker

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/petrel-mq/petrel/client"
	"github.com/petrel-mq/petrel/internal/faultproxy"
	"github.com/petrel-mq/petrel/internal/testutil"
	"github.com/petrel-mq/petrel/protocol"
	"github.com/petrel-mq/petrel/protocol/rpc"
)

// sendQueues sends n messages to each of the topic's queues, 10 to a batch.
func sendQueues(t testing.TB, c *rpc.Conn, topic string, queues int32, n int) {
	t.Helper()
	for q := int32(0); q < queues; q++ {
		for i := 0; i < n; i += 10 {
			bodies := make([]string, 0, 10)
			for k := i; k < min(i+10, n); k++ {
				bodies = append(bodies, fmt.Sprintf("%s-%d-%d", topic, q, k))
			}
			send(t, c, topic, q, bodies...)
		}
	}
}

// consumeGroup runs a consumer of group on topic until it delivered total distinct messages (or
// 30 s passed) and returns how many it delivered; the consumer commits its offsets when it ends.
func consumeGroup(t *testing.T, hc *haCluster, group, topic string, total int) int {
	t.Helper()
	c, _ := hc.newAdmin()
	co, err := client.NewConsumer(c, group, topic, client.WithPollTimeout(200*time.Millisecond),
		client.WithRebalanceInterval(200*time.Millisecond), client.WithCommitInterval(100*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	_, n, _ := consumeQueues(t, co, total, -1)
	return n
}

// groupOffsets returns member b's committed offsets of group on topic by queue.
func groupOffsets(b *Broker, group, topic string) map[int32]int64 {
	out := map[int32]int64{}
	for _, q := range b.offsets.groupQueues(group, topic) {
		out[q.QueueID] = q.ConsumerOffset
	}
	return out
}

// checkProgress fails the test when a queue of the group's progress on the master
// (consumerProgress's rows) shows a consumer offset beyond the broker offset (a negative diff).
func checkProgress(t *testing.T, admin *client.Admin, group, topic string) []protocol.ConsumeQueueStats {
	t.Helper()
	st, err := admin.ConsumeStats(ctx5s(t), group, topic)
	if err != nil || len(st) != 1 {
		t.Fatalf("consume stats of %s: %+v %v", group, st, err)
	}
	for _, q := range st[0].Stats.Queues {
		if q.BrokerOffset-q.ConsumerOffset < 0 {
			t.Fatalf("queue %d: consumer offset %d beyond the broker offset %d (diff %d)", q.QueueID, q.ConsumerOffset, q.BrokerOffset, q.BrokerOffset-q.ConsumerOffset)
		}
	}
	return st[0].Stats.Queues
}

// TestCommittedOffsetBeyondTheQueue: a SYNC_MASTER loses its store (stopped, data directory
// deleted, restarted) after group gx2 consumed 100 messages of each queue. The slave sets its
// diverged log aside and copies the master's, and the offsets it sends back are those of the
// new log (0), not 100 over queues whose max is 0 and then 10: the 20 messages acknowledged
// afterwards all reach gx2, and the group's progress never shows a consumer offset beyond the
// broker's.
func TestCommittedOffsetBeyondTheQueue(t *testing.T) {
	hc := newHACluster(t, RoleSyncMaster, 1, nil)
	m, s := hc.b(0), hc.b(1)
	mc := dial(t, m.Addr())
	createTopic(t, mc, "Lost", 2)
	hc.waitTopic(1, "Lost")
	hc.waitInSync(1)
	sendQueues(t, mc, "Lost", 2, 100)
	if n := consumeGroup(t, hc, "gx2", "Lost", 200); n != 200 {
		t.Fatalf("gx2 consumed %d of 200 messages", n)
	}
	want := map[int32]int64{0: 100, 1: 100}
	testutil.Eventually(t, "gx2's offsets (100 on each queue) on both members", func() bool {
		return fmt.Sprint(groupOffsets(m, "gx2", "Lost")) == fmt.Sprint(want) && fmt.Sprint(groupOffsets(s, "gx2", "Lost")) == fmt.Sprint(want)
	})

	hc.stop(0)
	if err := os.RemoveAll(hc.cfg(0).StorePathRootDir); err != nil {
		t.Fatal(err)
	}
	m = hc.start(0)
	testutil.Eventually(t, "the slave set its diverged log aside", func() bool {
		r := s.role.Load()
		return r.slave != nil && r.slave.Status().Resyncs > 0
	})
	mc = dial(t, m.Addr())
	createTopic(t, mc, "Lost", 2)
	hc.waitInSync(1)
	testutil.Eventually(t, "gx2's offsets on the restarted master (sent by the slave)", func() bool {
		return len(groupOffsets(m, "gx2", "Lost")) == 2
	})
	for _, b := range []*Broker{m, s} {
		for q, off := range groupOffsets(b, "gx2", "Lost") {
			if maxOff := b.store.MaxOffset([]byte("Lost"), q); off > maxOff {
				t.Errorf("member %d holds gx2's offset %d on queue %d, whose max offset is %d", b.cfg.BrokerID, off, q, maxOff)
			}
		}
	}
	sendQueues(t, mc, "Lost", 2, 10)
	if n := consumeGroup(t, hc, "gx2", "Lost", 20); n != 20 {
		t.Fatalf("gx2 got %d of the 20 messages acknowledged after the master lost its store", n)
	}
	_, admin := hc.newAdmin()
	testutil.Eventually(t, "gx2 caught up on the master", func() bool {
		for _, q := range checkProgress(t, admin, "gx2", "Lost") {
			if q.ConsumerOffset != 10 || q.BrokerOffset != 10 {
				return false
			}
		}
		return true
	})
}

// TestDivergedSlaveSendsNoOffsets: an ASYNC_MASTER lost its store and took 20 new messages
// before its slave returned. The slave, whose old log has not yet been found diverged (its
// replication link is cut), syncs with the master: it takes the master's topics and offsets but
// sends none of its own, which are of its old log (gx2 at 100); once the link heals it sets the
// old log aside and copies the master's, and gx2 gets all 20 messages.
func TestDivergedSlaveSendsNoOffsets(t *testing.T) {
	var proxy *faultproxy.Proxy
	hc := newHACluster(t, RoleAsyncMaster, 1, func(c *Config) {
		if c.BrokerID != 0 {
			c.HAMasterAddress = proxy.Addr() // the slave replicates through the proxy
			return
		}
		c.HAListenPort = testutil.FreePorts(t, 1)[0]
		var err error
		if proxy, err = faultproxy.Start(fmt.Sprintf("127.0.0.1:%d", c.HAListenPort)); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = proxy.Close() })
	})
	m, s := hc.b(0), hc.b(1)
	mc := dial(t, m.Addr())
	createTopic(t, mc, "Gone", 2)
	hc.waitTopic(1, "Gone")
	sendQueues(t, mc, "Gone", 2, 100)
	if n := consumeGroup(t, hc, "gx2", "Gone", 200); n != 200 {
		t.Fatalf("gx2 consumed %d of 200 messages", n)
	}
	want := map[int32]int64{0: 100, 1: 100}
	testutil.Eventually(t, "gx2's offsets (100 on each queue) on the slave", func() bool {
		return fmt.Sprint(groupOffsets(s, "gx2", "Gone")) == fmt.Sprint(want)
	})

	hc.stop(1)
	hc.stop(0)
	if err := os.RemoveAll(hc.cfg(0).StorePathRootDir); err != nil {
		t.Fatal(err)
	}
	m = hc.start(0)
	mc = dial(t, m.Addr())
	createTopic(t, mc, "Gone", 2)
	sendQueues(t, mc, "Gone", 2, 10)
	proxy.Partition()
	s = hc.start(1)
	// Two rounds of the sync: the second takes a topic created after the first round sent
	// the slave's offsets (when it sends them).
	for _, marker := range []string{"Marker1", "Marker2"} {
		createTopic(t, mc, marker, 1)
		hc.waitTopic(1, marker)
	}
	if got := groupOffsets(m, "gx2", "Gone"); len(got) != 0 {
		t.Fatalf("the slave, whose log was not acknowledged, sent gx2's offsets %v to the master", got)
	}
	proxy.Heal()
	testutil.Eventually(t, "the slave set its diverged log aside", func() bool {
		r := s.role.Load()
		return r.slave != nil && r.slave.Status().Resyncs > 0
	})
	hc.waitCaughtUp(1)
	if n := consumeGroup(t, hc, "gx2", "Gone", 20); n != 20 {
		t.Fatalf("gx2 got %d of the 20 messages acknowledged after the master lost its store", n)
	}
	_, admin := hc.newAdmin()
	checkProgress(t, admin, "gx2", "Gone")
}

// TestClampLogged: a commit beyond the queue's max offset on a master is lowered and logged, and
// a query answers the lowered offset.
func TestClampLogged(t *testing.T) {
	var logs testutil.SyncBuffer
	cfg := testConfig(t.TempDir())
	b := startBrokerLogging(t, cfg, slogTo(&logs))
	defer b.Close()
	c := dial(t, b.Addr())
	createTopic(t, c, "T", 1)
	send(t, c, "T", 0, "a", "b", "c")
	for i := 0; i < 50; i++ { // one line, not one per commit
		commitOffset(t, c, "g", "T", 0, 100+int64(i))
	}
	// Of a life not known (an older client's commit): lowered to the min offset, skipping no
	// stored message.
	var o protocol.OffsetHeader
	if err := c.CallDecode(ctx5s(t), protocol.CodeQueryConsumerOffset, &protocol.ConsumerOffsetHeader{ConsumerGroup: "g", Topic: "T"}, nil, &o, nil); err != nil || o.Offset != 0 {
		t.Fatalf("committed offset %d, %v; want 0 (the min offset)", o.Offset, err)
	}
	commitOffset(t, c, "g", "T", 0, 3) // exactly the max: valid, not logged
	if n := strings.Count(logs.String(), `msg="a consumer offset committed beyond its queue's max offset`); n != 1 {
		t.Fatalf("%d log lines about the lowered commits; want 1:\n%s", n, logs.String())
	}
	// Of the queue's life: lowered to the max offset (the group read everything below it).
	inc := b.store.QueueIncarnation([]byte("T"), 0)
	h := protocol.ConsumerOffsetHeader{ConsumerGroup: "g2", Topic: "T", Offset: 50, Incarnation: inc, HasIncarnation: true}
	if err := c.CallDecode(ctx5s(t), protocol.CodeUpdateConsumerOffset, &h, nil, nil, nil); err != nil {
		t.Fatal(err)
	}
	h.Offset = 0
	if err := c.CallDecode(ctx5s(t), protocol.CodeQueryConsumerOffset, &h, nil, &o, nil); err != nil || o.Offset != 3 || o.Incarnation != inc || !o.HasIncarnation {
		t.Fatalf("committed offset %+v, %v; want 3 (the max offset) of %#x", o, err, inc)
	}
	// A pull beyond the master's max answers OFFSET_MOVED with the queue's range, moving to
	// the min offset (the life not known) or, of the queue's life, to the max.
	p := pull(t, c, "T", 0, 100, 0)
	if p.hdr.Result != protocol.PullOffsetMoved || p.hdr.NextQueueOffset != 0 || p.hdr.MinOffset != 0 || p.hdr.MaxOffset != 3 {
		t.Fatalf("pull beyond the max: %+v", p.hdr)
	}
	if ph := pullLife(t, c, "T", 0, 100, inc); ph.Result != protocol.PullOffsetMoved || ph.NextQueueOffset != 3 {
		t.Fatalf("pull beyond the max, of the queue's life: %+v", ph)
	}
}

// TestConsumerGroupsBounded: commits that name ever new consumer groups stop adding groups at
// maxConsumerGroups: the commit is refused with an error and a line, a pull's commit of such a
// group records nothing (the pull is served), and the groups already held still commit.
func TestConsumerGroupsBounded(t *testing.T) {
	var logs testutil.SyncBuffer
	cfg := testConfig(t.TempDir())
	cfg.MaxConsumerGroups = 5
	b := startBrokerLogging(t, cfg, slogTo(&logs))
	defer b.Close()
	c := dial(t, b.Addr())
	createTopic(t, c, "T", 1)
	send(t, c, "T", 0, "a", "b", "c")
	refused := 0
	for i := range 20 {
		h := protocol.ConsumerOffsetHeader{ConsumerGroup: fmt.Sprintf("g%d", i), Topic: "T", Offset: 1}
		if err := c.CallDecode(ctx5s(t), protocol.CodeUpdateConsumerOffset, &h, nil, nil, nil); err != nil {
			refused++
		}
	}
	if n := b.offsets.groupCount(); n != 5 || refused != 15 {
		t.Fatalf("after commits of 20 groups: %d groups hold offsets, %d commits refused; want 5 and 15", n, refused)
	}
	commitOffset(t, c, "g0", "T", 0, 2) // a group held commits on
	req := protocol.PullRequestHeader{ConsumerGroup: "g-pull", Topic: "T", MaxMessages: 10, MaxBytes: 1 << 20, CommitOffset: 1}
	var ph protocol.PullResponseHeader
	if err := c.CallDecode(ctx5s(t), protocol.CodePullMessage, &req, nil, &ph, nil); err != nil || ph.Result != protocol.PullFound {
		t.Fatalf("a pull committing for a group past the cap: %+v %v", ph, err)
	}
	if n := b.offsets.groupCount(); n != 5 {
		t.Fatalf("%d groups hold offsets after a pull's commit of a new group, want 5", n)
	}
	if !strings.Contains(logs.String(), "refusing a consumer offset of a new consumer group") {
		t.Fatal("no line says a new group's offset was refused")
	}
}

// TestOffsetsLoadedBeyondTheLog: offsets read from consumerOffset.json at start that lie beyond
// the recovered log (a config directory restored from another run, a log cut by recovery) are
// lowered to the queues' max offsets, logged, and persisted so.
func TestOffsetsLoadedBeyondTheLog(t *testing.T) {
	dir := t.TempDir()
	b := startBroker(t, testConfig(dir))
	c := dial(t, b.Addr())
	createTopic(t, c, "T", 2)
	sendQueues(t, c, "T", 1, 10)
	commitOffset(t, c, "g", "T", 0, 10)
	c.Close()
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "config", "consumerOffset.json")
	stale := `{"offsetTable": {"T@g": {"0": 100, "1": 7}, "T@h": {"0": 4}, "Gone@g": {"0": 3}}}`
	if err := os.WriteFile(path, []byte(stale), 0o644); err != nil {
		t.Fatal(err)
	}
	var logs testutil.SyncBuffer
	b = startBrokerLogging(t, testConfig(dir), slogTo(&logs))
	want := map[string]int64{"g/T/0": 10, "g/T/1": 0, "h/T/0": 4, "g/Gone/0": 0}
	check := func(b *Broker) {
		t.Helper()
		got := map[string]int64{}
		for _, o := range b.offsets.table().Offsets {
			got[fmt.Sprintf("%s/%s/%d", o.ConsumerGroup, o.Topic, o.QueueID)] = o.Offset
		}
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Fatalf("offsets %v; want %v", got, want)
		}
	}
	check(b)
	if !strings.Contains(logs.String(), "consumer offsets loaded beyond the max offsets") || !strings.Contains(logs.String(), "lowered=3") {
		t.Fatalf("no log line about the 3 offsets lowered:\n%s", logs.String())
	}
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	b = startBroker(t, testConfig(dir))
	defer b.Close()
	check(b)
}

// rawBody keeps a copy of a response body.
type rawBody struct{ b []byte }

func (r *rawBody) ReadFrom(b []byte) error { r.b = append([]byte(nil), b...); return nil }

// TestAllConsumerOffsetsForOlderRequesters: GET_ALL_CONSUMER_OFFSET carries the incarnations
// section only to a requester that asks for it; the table an older requester (no header) gets
// is exactly the list its decoder knows, with nothing after it.
func TestAllConsumerOffsetsForOlderRequesters(t *testing.T) {
	b := startBroker(t, testConfig(t.TempDir()))
	defer b.Close()
	c := dial(t, b.Addr())
	createTopic(t, c, "T", 2)
	send(t, c, "T", 0, "a", "b", "c")
	send(t, c, "T", 1, "d")
	inc := b.store.QueueIncarnation([]byte("T"), 0)
	h := protocol.ConsumerOffsetHeader{ConsumerGroup: "g", Topic: "T", Offset: 2, Incarnation: inc, HasIncarnation: true}
	if err := c.CallDecode(ctx5s(t), protocol.CodeUpdateConsumerOffset, &h, nil, nil, nil); err != nil {
		t.Fatal(err)
	}
	commitOffset(t, c, "g", "T", 1, 1)

	var old rawBody
	if err := c.CallDecode(ctx5s(t), protocol.CodeGetAllConsumerOffset, nil, nil, nil, &old); err != nil {
		t.Fatal(err)
	}
	var got protocol.ConsumerOffsetTable
	if err := got.ReadFrom(old.b); err != nil || len(got.Offsets) != 2 {
		t.Fatalf("table for a requester without the header: %+v, %v", got, err)
	}
	list := protocol.ConsumerOffsetTable{Offsets: got.Offsets}
	if want := list.AppendTo(nil); got.HasIncarnations || string(old.b) != string(want) {
		t.Fatalf("a requester without the header got %d bytes (incarnations section %v), want the %d bytes of the list alone",
			len(old.b), got.HasIncarnations, len(want))
	}

	var table protocol.ConsumerOffsetTable
	if err := c.CallDecode(ctx5s(t), protocol.CodeGetAllConsumerOffset, &protocol.ConsumerOffsetTableRequest{WithIncarnations: true}, nil, nil, &table); err != nil {
		t.Fatal(err)
	}
	if !table.HasIncarnations || len(table.Offsets) != 2 || table.Offsets[0].QueueID != 0 || table.Offsets[0].Incarnation != inc || inc == 0 {
		t.Fatalf("table for a requester that asks: %+v, want queue 0's incarnation %#x", table, inc)
	}
}
