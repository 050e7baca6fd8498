package client

import (
	"context"
	"errors"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/petrel-mq/petrel/internal/fakebroker"
	"github.com/petrel-mq/petrel/internal/testutil"
	"github.com/petrel-mq/petrel/protocol"
)

func TestAdmin(t *testing.T) {
	fc := fakebroker.New(t)
	a := fc.AddGroup("a", 1, nil).Members()
	b := fc.AddGroup("b", 0, nil).Members()
	c := newTestClient(t, fc.Addr())
	admin := NewAdmin(c)
	ctx := testCtx(t, 10*time.Second)

	ci, err := admin.ClusterInfo(ctx)
	if err != nil || len(ci.Brokers) != 2 || len(ci.Clusters) != 1 || len(ci.Brokers[0].Addrs) != 2 {
		t.Fatalf("%+v %v", ci, err)
	}
	masters, err := admin.ClusterMasters(ctx, "DefaultCluster")
	if err != nil || len(masters) != 2 || masters[0].Addr != a[0].Addr() || masters[1].Addr != b[0].Addr() {
		t.Fatalf("%+v %v", masters, err)
	}
	if _, err := admin.ClusterMasters(ctx, "Nope"); !errors.Is(err, ErrUnknownCluster) || !strings.Contains(err.Error(), `cluster "Nope" is not known to the NameServers (known: DefaultCluster)`) {
		t.Fatal(err)
	}

	// Create on a whole cluster, then on one broker.
	done, err := admin.CreateTopic(ctx, "DefaultCluster", protocol.TopicConfig{Topic: "T", ReadQueueNums: 4, WriteQueueNums: 4})
	if err != nil || len(done) != 2 {
		t.Fatalf("%+v %v", done, err)
	}
	if _, err := admin.CreateTopic(ctx, b[0].Addr(), protocol.TopicConfig{Topic: "U", ReadQueueNums: 1, WriteQueueNums: 1}); err != nil {
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
	cfgs, err := admin.AllTopicConfig(ctx, b[0].Addr())
	if err != nil || len(cfgs.Topics) != 2 {
		t.Fatalf("%+v %v", cfgs, err)
	}

	// Produce and consume a little, then look at the stats.
	p := newTestProducer(t, c)
	produce(t, p, "T", 0, 80)
	col := newCollector(t)
	stop := runConsumer(t, newTestConsumer(t, c, "G", "T"), col.handle)
	testutil.Eventually(t, "consumed", func() bool { return col.count() >= 80 })
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
	kv, err := admin.BrokerRuntimeInfo(ctx, a[0].Addr())
	if err != nil || kv.Get("brokerName") != "a" {
		t.Fatalf("%+v %v", kv, err)
	}
	maxOff, err := admin.MaxOffset(ctx, a[0].Addr(), "T", 0)
	if err != nil || maxOff != ts[0].Stats.Queues[0].MaxOffset {
		t.Fatal(maxOff, err)
	}
	minOff, err := admin.MinOffset(ctx, a[0].Addr(), "T", 0)
	if err != nil || minOff != 0 {
		t.Fatal(minOff, err)
	}
	if err := admin.UpdateConsumerOffset(ctx, a[0].Addr(), "G2", "T", 1, 3); err != nil {
		t.Fatal(err)
	}
	if off, err := admin.QueryConsumerOffset(ctx, a[0].Addr(), "G2", "T", 1); err != nil || off != 3 {
		t.Fatal(off, err)
	}
	if _, err := admin.QueryConsumerOffset(ctx, a[0].Addr(), "G3", "T", 1); !errors.Is(err, ErrQueryNotFound) {
		t.Fatal(err)
	}
}

// TestAdminErrorNamesTarget: an error names the broker by address, with its group name in
// parentheses only when it has one.
func TestAdminErrorNamesTarget(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := ln.Addr().String()
	_ = ln.Close()
	c := newTestClient(t, "127.0.0.1:1")
	_, err = NewAdmin(c).CreateTopic(testCtx(t, 10*time.Second), dead, protocol.TopicConfig{Topic: "zt", ReadQueueNums: 1, WriteQueueNums: 1})
	if want := `cannot create topic "zt" on ` + dead + ": "; err == nil || !strings.HasPrefix(err.Error(), want) || strings.Contains(err.Error(), "()") {
		t.Fatalf("err = %v; want it to start %q", err, want)
	}
	if got := (BrokerTarget{Addr: "h:1"}).String(); got != "h:1" {
		t.Fatalf("String without a name: %q", got)
	}
	if got := (BrokerTarget{Addr: "h:1", BrokerName: "b"}).String(); got != "h:1 (b)" {
		t.Fatalf("String with a name: %q", got)
	}
}

// TestAdminConsumerClients: the group's live members, as the masters know them.
func TestAdminConsumerClients(t *testing.T) {
	fc, _, _ := twoGroups(t, 2)
	c := newTestClient(t, fc.Addr())
	admin := NewAdmin(c)
	ctx := testCtx(t, 10*time.Second)
	if ids, err := admin.ConsumerClients(ctx, "G", "T"); err != nil || len(ids) != 0 {
		t.Fatalf("before any consumer: %q %v", ids, err)
	}
	co := newTestConsumer(t, c, "G", "T")
	runConsumer(t, co, func(context.Context, []MessageExt) error { return nil })
	for _, topic := range []string{"T", ""} {
		testutil.Eventually(t, "the consumer listed", func() bool {
			ids, err := admin.ConsumerClients(ctx, "G", topic)
			return err == nil && len(ids) == 1 && ids[0] == co.ClientID()
		})
	}
	if _, err := admin.ConsumerClients(ctx, "bad group!", ""); !errors.Is(err, ErrGroupInvalid) {
		t.Fatal(err)
	}
}

// TestNoNameServer: a client made WithNoNameServer reaches brokers by address; what needs a
// NameServer fails with ErrNameServerUnavailable.
func TestNoNameServer(t *testing.T) {
	fc := fakebroker.New(t)
	a := fc.AddGroup("a", 0, map[string]int32{"T": 1}).Master()
	c, err := New(context.Background(), WithNoNameServer(), WithLogger(testLogger(t)))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	admin := NewAdmin(c)
	ctx := testCtx(t, 10*time.Second)
	if kv, err := admin.BrokerRuntimeInfo(ctx, a.Addr()); err != nil || len(kv.Entries) == 0 {
		t.Fatalf("runtime info: %+v %v", kv, err)
	}
	if _, err := admin.CreateTopic(ctx, a.Addr(), protocol.TopicConfig{Topic: "U", ReadQueueNums: 1, WriteQueueNums: 1}); err != nil {
		t.Fatal(err)
	}
	if _, err := admin.ClusterInfo(ctx); !errors.Is(err, ErrNameServerUnavailable) {
		t.Fatalf("cluster info: %v", err)
	}
	p := newTestProducer(t, c)
	if _, err := p.SendSync(ctx, &Message{Topic: "T", Body: []byte("x")}); !errors.Is(err, ErrNameServerUnavailable) {
		t.Fatalf("send: %v", err)
	}
}

// TestDeleteAnswer: a deletion's answer says whether the master held what was deleted; a
// broker that predates DeleteResponseHeader sends an empty header, read as "deleted" (not
// told), as before.
func TestDeleteAnswer(t *testing.T) {
	for _, c := range []struct {
		hdr    []byte
		absent bool
	}{
		{nil, false},
		{(&protocol.DeleteResponseHeader{Existed: true}).AppendTo(nil), false},
		{(&protocol.DeleteResponseHeader{Existed: false}).AppendTo(nil), true},
	} {
		var d deleteAnswer
		if err := d.ReadFrom(c.hdr); err != nil || d.absent != c.absent {
			t.Errorf("header %x: absent %t, %v; want absent %t", c.hdr, d.absent, err, c.absent)
		}
	}
	var d deleteAnswer
	if err := d.ReadFrom([]byte{7}); !errors.Is(err, protocol.ErrBadValue) {
		t.Errorf("header 07: %v, want ErrBadValue", err)
	}
}
