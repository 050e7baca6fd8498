package client

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/petrel-mq/petrel/protocol"
)

func TestAdmin(t *testing.T) {
	fc := newFakeCluster(t)
	a := fc.addGroup("a", 1, nil)
	b := fc.addGroup("b", 0, nil)
	c := newTestClient(t, fc.addr)
	admin := NewAdmin(c)
	ctx := testCtx(t, 10*time.Second)

	ci, err := admin.ClusterInfo(ctx)
	if err != nil || len(ci.Brokers) != 2 || len(ci.Clusters) != 1 || len(ci.Brokers[0].Addrs) != 2 {
		t.Fatalf("%+v %v", ci, err)
	}
	masters, err := admin.ClusterMasters(ctx, "DefaultCluster")
	if err != nil || len(masters) != 2 || masters[0].Addr != a[0].addr || masters[1].Addr != b[0].addr {
		t.Fatalf("%+v %v", masters, err)
	}
	if _, err := admin.ClusterMasters(ctx, "Nope"); !errors.Is(err, ErrNoQueue) {
		t.Fatal(err)
	}

	// Create on a whole cluster, then on one broker.
	done, err := admin.CreateTopic(ctx, "DefaultCluster", protocol.TopicConfig{Topic: "T", ReadQueueNums: 4, WriteQueueNums: 4})
	if err != nil || len(done) != 2 {
		t.Fatalf("%+v %v", done, err)
	}
	if _, err := admin.CreateTopic(ctx, b[0].addr, protocol.TopicConfig{Topic: "U", ReadQueueNums: 1, WriteQueueNums: 1}); err != nil {
		t.Fatal(err)
	}
	if _, err := admin.CreateTopic(ctx, "DefaultCluster", protocol.TopicConfig{Topic: "bad topic", ReadQueueNums: 1, WriteQueueNums: 1}); !errors.Is(err, ErrTopicInvalid) {
		t.Fatal(err)
	}
	if err := admin.WaitTopicRoute(ctx, "T", 2); err != nil {
		t.Fatal(err)
	}
	short, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
	defer cancel()
	if err := admin.WaitTopicRoute(short, "U", 2); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatal(err)
	}
	route, err := admin.TopicRoute(ctx, "T")
	if err != nil || len(route.QueueDatas) != 2 || route.QueueDatas[0].Perm != protocol.PermReadWrite {
		t.Fatalf("%+v %v", route, err)
	}
	if _, err := admin.TopicRoute(ctx, "Nope"); !errors.Is(err, ErrTopicNotExist) {
		t.Fatal(err)
	}
	cfgs, err := admin.AllTopicConfig(ctx, b[0].addr)
	if err != nil || len(cfgs.Topics) != 2 {
		t.Fatalf("%+v %v", cfgs, err)
	}

	// Produce and consume a little, then look at the stats.
	p := newTestProducer(t, c)
	produce(t, p, "T", 0, 80)
	col := newCollector(t)
	stop := runConsumer(t, newTestConsumer(t, c, "G", "T"), col.handle)
	eventually(t, "consumed", func() bool { return col.count() >= 80 })
	if err := stop(); err != nil {
		t.Fatal(err)
	}

	ts, err := admin.TopicStats(ctx, "T")
	if err != nil || len(ts) != 2 || ts[0].BrokerName != "a" {
		t.Fatalf("%+v %v", ts, err)
	}
	var total int64
	for _, bs := range ts {
		for _, q := range bs.Stats.Queues {
			total += q.MaxOffset - q.MinOffset
		}
	}
	if total != 80 {
		t.Fatalf("topic stats count %d messages", total)
	}
	cs, err := admin.ConsumeStats(ctx, "G", "T")
	if err != nil || len(cs) != 2 {
		t.Fatalf("%+v %v", cs, err)
	}
	for _, bs := range cs {
		for _, q := range bs.Stats.Queues {
			if q.ConsumerOffset != q.BrokerOffset {
				t.Fatalf("%s: %+v", bs.BrokerName, q)
			}
		}
	}
	if all, err := admin.ConsumeStats(ctx, "G", ""); err != nil || len(all) != 2 {
		t.Fatalf("%+v %v", all, err)
	}
	kv, err := admin.BrokerRuntimeInfo(ctx, a[0].addr)
	if err != nil || kv.Get("brokerName") != "a" {
		t.Fatalf("%+v %v", kv, err)
	}
	maxOff, err := admin.MaxOffset(ctx, a[0].addr, "T", 0)
	if err != nil || maxOff != ts[0].Stats.Queues[0].MaxOffset {
		t.Fatal(maxOff, err)
	}
	minOff, err := admin.MinOffset(ctx, a[0].addr, "T", 0)
	if err != nil || minOff != 0 {
		t.Fatal(minOff, err)
	}
	if err := admin.UpdateConsumerOffset(ctx, a[0].addr, "G2", "T", 1, 3); err != nil {
		t.Fatal(err)
	}
	if off, err := admin.QueryConsumerOffset(ctx, a[0].addr, "G2", "T", 1); err != nil || off != 3 {
		t.Fatal(off, err)
	}
	if _, err := admin.QueryConsumerOffset(ctx, a[0].addr, "G3", "T", 1); !errors.Is(err, ErrQueryNotFound) {
		t.Fatal(err)
	}
}
