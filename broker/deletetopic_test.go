package broker

import (
	"context"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/petrel-mq/petrel/internal/testutil"
	"github.com/petrel-mq/petrel/protocol"
	"github.com/petrel-mq/petrel/protocol/rpc"
)

// deleteTopicOn sends DELETE_TOPIC_IN_BROKER to the broker at c and returns whether the broker
// said it held the topic.
func deleteTopicOn(t testing.TB, c *rpc.Conn, topic string) (bool, error) {
	t.Helper()
	var h protocol.DeleteResponseHeader
	err := c.CallDecode(ctx5s(t), protocol.CodeDeleteTopicInBroker, &protocol.TopicHeader{Topic: topic}, nil, &h, nil)
	return h.Existed, err
}

// offsetsOf returns a member's committed offsets of topic, by group and queue.
func offsetsOf(b *Broker, topic string) map[string]map[int32]int64 {
	out := map[string]map[int32]int64{}
	for _, o := range b.offsets.table().Offsets {
		if o.Topic == topic {
			if out[o.ConsumerGroup] == nil {
				out[o.ConsumerGroup] = map[int32]int64{}
			}
			out[o.ConsumerGroup][o.QueueID] = o.Offset
		}
	}
	return out
}

// TestDeleteTopicInBroker deletes a topic on a SYNC_MASTER with a slave: the answer comes once
// the slave holds the deletion record; sends and pulls of the topic then get TOPIC_NOT_EXIST
// (a pull held on it is answered so at once), every group's offsets of it are gone on both
// members, the slave's queues went at the same log position (identical logs), another topic is
// untouched, the NameServer no longer routes it, and a topic created again under the name
// starts at offset 0, on both members and across their restarts.
func TestDeleteTopicInBroker(t *testing.T) {
	hc := newHACluster(t, RoleSyncMaster, 1, func(c *Config) { c.MinInSyncReplicas = 2 })
	hc.waitInSync(1)
	m, s := hc.b(0), hc.b(1)
	mc, sc := dial(t, m.Addr()), dial(t, s.Addr())
	createTopic(t, mc, "Gone", 2)
	createTopic(t, mc, "Kept", 1)
	hc.waitTopic(1, "Gone")
	for i := range 10 {
		send(t, mc, "Gone", int32(i%2), "old", "old")
		send(t, mc, "Kept", 0, "kept")
	}
	commitOffset(t, mc, "g1", "Gone", 0, 6)
	commitOffset(t, mc, "g1", "Kept", 0, 4)
	commitOffset(t, mc, "g2", "Gone", 1, 2)
	hc.waitCaughtUp(1)
	testutil.Eventually(t, "the slave has the offsets", func() bool { return len(offsetsOf(s, "Gone")) == 2 })

	// A pull held on the topic: answered TOPIC_NOT_EXIST once the topic is deleted.
	held := make(chan error, 1)
	go func() {
		_, err := pullE(mc, "Gone", 0, 10, 20000)
		held <- err
	}()
	testutil.Eventually(t, "the pull is held", func() bool { return m.topics.get([]byte("Gone")).waiters.n.Load() == 1 })

	_, admin := hc.newAdmin()
	if err := admin.WaitTopicRoute(ctx5s(t), "Gone", 1); err != nil {
		t.Fatal(err)
	}
	if existed, err := deleteTopicOn(t, mc, "Gone"); err != nil || !existed {
		t.Fatalf("delete: %v, existed %t; want it existed", err, existed)
	}
	if s.store.LogEndOffset() < m.store.LogEndOffset() {
		t.Fatalf("answered before the in-sync slave held the record: slave at %d, master at %d", s.store.LogEndOffset(), m.store.LogEndOffset())
	}
	select {
	case err := <-held:
		if statusOf(err) != protocol.StatusTopicNotExist {
			t.Fatalf("held pull: %v, want TOPIC_NOT_EXIST", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the held pull was not answered")
	}
	if _, err := sendBatch(mc, buildBatch("Gone", 0, "after")); statusOf(err) != protocol.StatusTopicNotExist {
		t.Fatalf("send after the deletion: %v, want TOPIC_NOT_EXIST", err)
	}
	if _, err := pullE(mc, "Gone", 0, 0, 0); statusOf(err) != protocol.StatusTopicNotExist {
		t.Fatalf("pull after the deletion: %v, want TOPIC_NOT_EXIST", err)
	}
	if got := offsetsOf(m, "Gone"); len(got) != 0 {
		t.Fatalf("master still holds offsets of the deleted topic: %v", got)
	}
	if got := offsetsOf(m, "Kept"); got["g1"][0] != 4 {
		t.Fatalf("offsets of another topic: %v", got)
	}
	testutil.Eventually(t, "the slave drops the topic and its offsets", func() bool {
		return s.topics.get([]byte("Gone")) == nil && len(offsetsOf(s, "Gone")) == 0 && s.store.MaxOffset([]byte("Gone"), 0) == 0
	})
	if _, err := admin.TopicRoute(ctx5s(t), "Gone"); statusOf(err) != protocol.StatusTopicNotExist {
		t.Fatalf("route after the broker's deletion: %v, want TOPIC_NOT_EXIST (the broker registered without it)", err)
	}
	assertIdentical(t, admin, m, s)
	if got := pullQueue(t, sc, "Kept", 0, 10); len(got) != 10 {
		t.Fatalf("slave: %d messages of the other topic", len(got))
	}
	// Deleting it again succeeds, changes nothing and says the topic did not exist.
	end := m.store.LogEndOffset()
	if existed, err := deleteTopicOn(t, mc, "Gone"); err != nil || existed || m.store.LogEndOffset() != end {
		t.Fatalf("a second deletion: %v, existed %t, log end %d -> %d", err, existed, end, m.store.LogEndOffset())
	}
	// A slave refuses the deletion.
	if _, err := deleteTopicOn(t, sc, "Kept"); statusOf(err) != protocol.StatusNotMaster {
		t.Fatalf("deletion on the slave: %v, want NOT_MASTER", err)
	}

	// Created again: offsets start at 0, on both members, and stay so across restarts.
	createTopic(t, mc, "Gone", 2)
	if r := send(t, mc, "Gone", 0, "new"); r.QueueOffset != 0 {
		t.Fatalf("the re-created topic's first message at offset %d", r.QueueOffset)
	}
	hc.waitCaughtUp(1)
	hc.waitTopic(1, "Gone")
	if got := pullQueue(t, sc, "Gone", 0, 1); got[0] != "new" || len(got) != 1 {
		t.Fatalf("slave serves %v of the re-created topic", got)
	}
	hc.stop(1)
	hc.stop(0)
	hc.start(0)
	hc.start(1)
	hc.waitInSync(1)
	m, s = hc.b(0), hc.b(1)
	for _, b := range []*Broker{m, s} {
		if got := b.store.MaxOffset([]byte("Gone"), 0); got != 1 {
			t.Fatalf("after a restart: max offset %d of the re-created queue", got)
		}
		if got := b.store.MaxOffset([]byte("Kept"), 0); got != 10 {
			t.Fatalf("after a restart: max offset %d of the other topic", got)
		}
	}
	mc = dial(t, m.Addr())
	if got := pullQueue(t, mc, "Gone", 0, 1); got[0] != "new" || len(got) != 1 {
		t.Fatalf("master serves %v of the re-created topic after a restart", got)
	}
}

// TestDeleteTopicRace sends to a topic from several connections while it is deleted and
// created again: every send is either stored (before the deletion record, or in the new topic)
// or refused TOPIC_NOT_EXIST, the queues after each deletion hold only what was acknowledged
// after it, and no send acknowledged before a deletion shows up after it.
func TestDeleteTopicRace(t *testing.T) {
	b := startBroker(t, testConfig(t.TempDir()))
	defer b.Close()
	c := dial(t, b.Addr())
	createTopic(t, c, "Churn", 1)
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	var mu sync.Mutex
	acked := map[string]bool{}
	for w := range 4 {
		wc := dial(t, b.Addr())
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ctx.Err() == nil; i++ {
				body := strconv.Itoa(w) + "-" + strconv.Itoa(i)
				_, err := sendBatch(wc, buildBatch("Churn", 0, body))
				switch st := statusOf(err); {
				case err == nil:
					mu.Lock()
					acked[body] = true
					mu.Unlock()
				case st == protocol.StatusTopicNotExist:
				default:
					t.Errorf("send %s: %v", body, err)
					return
				}
			}
		}()
	}
	for range 30 {
		time.Sleep(2 * time.Millisecond) // let sends land between the deletions
		if _, err := deleteTopicOn(t, c, "Churn"); err != nil {
			t.Fatalf("delete: %v", err)
		}
		mu.Lock()
		before := acked
		acked = map[string]bool{}
		mu.Unlock()
		createTopic(t, c, "Churn", 1)
		// The new topic holds nothing acknowledged before the deletion.
		p, err := pullE(c, "Churn", 0, 0, 0)
		if err != nil {
			t.Fatal(err)
		}
		for _, body := range p.bodies {
			if before[body] {
				t.Fatalf("%s, acknowledged before the deletion, is in the topic created after it", body)
			}
		}
	}
	cancel()
	wg.Wait()
}

// TestDeleteSubGroup removes a group's offsets on the master: the slave drops them at its next
// offset sync instead of bringing them back, another group is untouched, and a commit of the
// group afterwards brings it back (it is in use again).
func TestDeleteSubGroup(t *testing.T) {
	hc := newHACluster(t, RoleAsyncMaster, 1, nil)
	hc.waitInSync(1)
	m, s := hc.b(0), hc.b(1)
	mc, sc := dial(t, m.Addr()), dial(t, s.Addr())
	createTopic(t, mc, "T", 2)
	hc.waitTopic(1, "T")
	for range 5 {
		send(t, mc, "T", 0, "m")
		send(t, mc, "T", 1, "m")
	}
	hc.waitCaughtUp(1)
	commitOffset(t, mc, "gone", "T", 0, 3)
	commitOffset(t, mc, "kept", "T", 1, 2)
	commitOffset(t, sc, "gone", "T", 1, 4) // a commit that rode with a pull served by the slave
	testutil.Eventually(t, "both members hold both groups", func() bool {
		return len(m.offsets.groupQueues("gone", "")) == 2 && len(s.offsets.groupQueues("gone", "")) == 2
	})
	del := func(c *rpc.Conn, group string) (bool, error) {
		var h protocol.DeleteResponseHeader
		err := c.CallDecode(ctx5s(t), protocol.CodeDeleteSubscriptionGroup, &protocol.GroupHeader{ConsumerGroup: group}, nil, &h, nil)
		return h.Existed, err
	}
	if _, err := del(sc, "gone"); statusOf(err) != protocol.StatusNotMaster {
		t.Fatalf("on the slave: %v, want NOT_MASTER", err)
	}
	if existed, err := del(mc, "gone"); err != nil || !existed {
		t.Fatalf("delete: %v, existed %t; want it existed", err, existed)
	}
	// A group with no offset on the master: nothing to delete, and the answer says so.
	if existed, err := del(mc, "neverSeen"); err != nil || existed {
		t.Fatalf("delete of a group with no offset: %v, existed %t", err, existed)
	}
	testutil.Eventually(t, "the slave drops the group", func() bool { return len(s.offsets.groupQueues("gone", "")) == 0 })
	// The slave dropped it on the master's refusal of its merge: the master never took it back.
	if got := m.offsets.groupQueues("gone", ""); len(got) != 0 {
		t.Fatalf("the slave's sync brought the group back: %v", got)
	}
	if got := m.offsets.groupQueues("kept", ""); len(got) != 1 || got[0].ConsumerOffset != 2 {
		t.Fatalf("the other group: %v", got)
	}
	commitOffset(t, mc, "gone", "T", 0, 1)
	if got := m.offsets.groupQueues("gone", ""); len(got) != 1 || got[0].ConsumerOffset != 1 {
		t.Fatalf("the group in use again: %v", got)
	}
	testutil.Eventually(t, "the slave has the group again", func() bool { return len(s.offsets.groupQueues("gone", "")) == 1 })
}
