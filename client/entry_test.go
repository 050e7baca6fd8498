package client

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/petrel-mq/petrel/internal/fakebroker"
	"github.com/petrel-mq/petrel/internal/testcluster"
	"github.com/petrel-mq/petrel/protocol"
	"github.com/petrel-mq/petrel/protocol/rpc"
)

// entryPoint is one exported method of the client that takes a context, called with valid
// arguments: what the tests below call with an ended context or after a Close.
type entryPoint struct {
	name string
	call func(ctx context.Context) error
}

// entryTarget is what the entry points act on: a topic of one queue on the master broker (an
// address) of cluster, and a consumer group of it.
type entryTarget struct {
	cluster, broker, topic, group string
}

// producerEntryPoints are the Producer's methods taking a context; a SendAsync callback that
// runs adds to called.
func producerEntryPoints(p *Producer, tg entryTarget, called *atomic.Int32) []entryPoint {
	msg := func() *Message { return &Message{Topic: tg.topic, Body: []byte("ended")} }
	return []entryPoint{
		{"Producer.SendSync", func(ctx context.Context) error { _, err := p.SendSync(ctx, msg()); return err }},
		{"Producer.SendBatchSync", func(ctx context.Context) error {
			_, err := p.SendBatchSync(ctx, tg.topic, []Message{*msg(), *msg()})
			return err
		}},
		{"Producer.SendOneway", func(ctx context.Context) error { return p.SendOneway(ctx, msg()) }},
		{"Producer.SendAsync", func(ctx context.Context) error {
			return p.SendAsync(ctx, msg(), func(SendResult, error) { called.Add(1) })
		}},
		{"Producer.Flush", p.Flush},
	}
}

// consumerEntryPoints are the Consumer's methods taking a context, Close excepted.
func consumerEntryPoints(co *Consumer) []entryPoint {
	return []entryPoint{
		{"Consumer.Run", func(ctx context.Context) error {
			return co.Run(ctx, func(context.Context, []MessageExt) error { return nil })
		}},
		{"Consumer.Lag", func(ctx context.Context) error { _, err := co.Lag(ctx); return err }},
	}
}

// adminEntryPoints are every method of Admin. The ones that change something would create a
// topic "<topic>-new", move the group's offset of queue 0 to 5, delete the topic and the group,
// or elect brokerId 1 master.
func adminEntryPoints(a *Admin, tg entryTarget) []entryPoint {
	mq := MessageQueue{Topic: tg.topic, BrokerName: "broker-a", QueueID: 0}
	newTopic := protocol.TopicConfig{Topic: tg.topic + "-new", ReadQueueNums: 1, WriteQueueNums: 1}
	err1 := func(_ any, err error) error { return err }
	err2 := func(_, _ any, err error) error { return err }
	return []entryPoint{
		{"Admin.CreateTopic on a broker", func(ctx context.Context) error { return err1(a.CreateTopic(ctx, tg.broker, newTopic)) }},
		{"Admin.CreateTopic on a cluster", func(ctx context.Context) error { return err1(a.CreateTopic(ctx, tg.cluster, newTopic)) }},
		{"Admin.UpdateConsumerOffset", func(ctx context.Context) error {
			return a.UpdateConsumerOffset(ctx, tg.broker, tg.group, tg.topic, 0, 5)
		}},
		{"Admin.ElectMaster", func(ctx context.Context) error { return err1(a.ElectMaster(ctx, "broker-a", 1)) }},
		{"Admin.DeleteSubGroup", func(ctx context.Context) error { return err1(a.DeleteSubGroup(ctx, tg.cluster, tg.group)) }},
		{"Admin.DeleteTopic", func(ctx context.Context) error { return err2(a.DeleteTopic(ctx, tg.cluster, tg.topic)) }},
		{"Admin.ClusterMasters", func(ctx context.Context) error { return err1(a.ClusterMasters(ctx, tg.cluster)) }},
		{"Admin.TopicRoute", func(ctx context.Context) error { return err1(a.TopicRoute(ctx, tg.topic)) }},
		{"Admin.WaitTopicRoute", func(ctx context.Context) error { return a.WaitTopicRoute(ctx, tg.topic, 1) }},
		{"Admin.ClusterInfo", func(ctx context.Context) error { return err1(a.ClusterInfo(ctx)) }},
		{"Admin.TopicStats", func(ctx context.Context) error { return err1(a.TopicStats(ctx, tg.topic)) }},
		{"Admin.TopicStatsFrom", func(ctx context.Context) error { return err1(a.TopicStatsFrom(ctx, tg.topic, 0)) }},
		{"Admin.ConsumeStats", func(ctx context.Context) error { return err1(a.ConsumeStats(ctx, tg.group, tg.topic)) }},
		{"Admin.ConsumerClients", func(ctx context.Context) error { return err1(a.ConsumerClients(ctx, tg.group, tg.topic)) }},
		{"Admin.BrokerRuntimeInfo", func(ctx context.Context) error { return err1(a.BrokerRuntimeInfo(ctx, tg.broker)) }},
		{"Admin.AllTopicConfig", func(ctx context.Context) error { return err1(a.AllTopicConfig(ctx, tg.broker)) }},
		{"Admin.MinOffset", func(ctx context.Context) error { return err1(a.MinOffset(ctx, tg.broker, tg.topic, 0)) }},
		{"Admin.MaxOffset", func(ctx context.Context) error { return err1(a.MaxOffset(ctx, tg.broker, tg.topic, 0)) }},
		{"Admin.QueryConsumerOffset", func(ctx context.Context) error {
			return err1(a.QueryConsumerOffset(ctx, tg.broker, tg.group, tg.topic, 0))
		}},
		{"Admin.HAStatus", func(ctx context.Context) error { return err1(a.HAStatus(ctx, tg.broker)) }},
		{"Admin.LogChecksum", func(ctx context.Context) error { return err1(a.LogChecksum(ctx, tg.broker, -1, -1)) }},
		{"Admin.AllConsumerOffsets", func(ctx context.Context) error { return err1(a.AllConsumerOffsets(ctx, tg.broker)) }},
		{"Admin.Pull", func(ctx context.Context) error { return err1(a.Pull(ctx, tg.broker, mq, 0, 1)) }},
	}
}

// TestEndedContextSendsNothing: every entry point given a context that has already ended
// (cancelled, or past its deadline) fails at once with an error wrapping the context's, a
// definite failure (not ErrUnknownOutcome), and writes nothing, though the client holds open
// connections to the NameServer and the broker: no request is abandoned, no dial made. Against
// a real broker: no message is stored (the next send gets the queue offset the last one left,
// and the queue's max offset is one past it), no topic created or deleted, no offset moved, no
// SendAsync callback run.
func TestEndedContextSendsNothing(t *testing.T) {
	rc := testcluster.New(t, testcluster.Options{}, testcluster.GroupSpec{Name: "broker-a"})
	tg := entryTarget{cluster: testcluster.ClusterName, broker: rc.Group("broker-a").Member(0).Addr(), topic: "Ended", group: "EndedGroup"}
	rc.CreateTopic(tg.topic, 1)
	c := newTestClient(t, rc.NamesrvAddr())
	a := NewAdmin(c)
	p := newTestProducer(t, c)
	ctx := testCtx(t, time.Minute)
	// The route and both connections, open before the calls.
	first, err := p.SendSync(ctx, &Message{Topic: tg.topic, Body: []byte("first")})
	if err != nil {
		t.Fatal(err)
	}
	if err := a.UpdateConsumerOffset(ctx, tg.broker, tg.group, tg.topic, 0, 1); err != nil {
		t.Fatal(err)
	}
	if _, err := a.ClusterInfo(ctx); err != nil {
		t.Fatal(err)
	}
	var called atomic.Int32
	var calls []entryPoint
	calls = append(calls, producerEntryPoints(p, tg, &called)...)
	calls = append(calls, consumerEntryPoints(newTestConsumer(t, c, tg.group, tg.topic))...)
	calls = append(calls, adminEntryPoints(a, tg)...)

	cancelled, cancel := context.WithCancel(ctx)
	cancel()
	expired, cancel := context.WithDeadline(ctx, time.Now().Add(-time.Second))
	defer cancel()
	for _, ended := range []context.Context{cancelled, expired} {
		for _, ep := range calls {
			before := c.Stats()
			err := ep.call(ended)
			if !errors.Is(err, ended.Err()) || errors.Is(err, ErrUnknownOutcome) {
				t.Errorf("%s with a context that ended (%v): %v; want a definite failure wrapping %v", ep.name, ended.Err(), err, ended.Err())
			}
			if st := c.Stats(); st.Abandoned != before.Abandoned || st.Dials != before.Dials {
				t.Errorf("%s with a context that ended (%v) sent something: stats before %+v, after %+v", ep.name, ended.Err(), before, st)
			}
		}
	}

	if err := p.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if n := called.Load(); n != 0 {
		t.Errorf("%d SendAsync callbacks ran: a message was buffered", n)
	}
	next, err := p.SendSync(ctx, &Message{Topic: tg.topic, Body: []byte("next")})
	if err != nil {
		t.Fatal(err)
	}
	if next.QueueOffset != first.QueueOffset+1 {
		t.Errorf("the next send got queue offset %d, want %d: messages were stored in between", next.QueueOffset, first.QueueOffset+1)
	}
	if max, err := a.MaxOffset(ctx, tg.broker, tg.topic, 0); err != nil || max != next.QueueOffset+1 {
		t.Errorf("max offset %d (%v), want %d", max, err, next.QueueOffset+1)
	}
	if off, err := a.QueryConsumerOffset(ctx, tg.broker, tg.group, tg.topic, 0); err != nil || off != 1 {
		t.Errorf("the group's offset is %d (%v), want 1", off, err)
	}
	topics, err := a.AllTopicConfig(ctx, tg.broker)
	if err != nil {
		t.Fatal(err)
	}
	has := map[string]bool{}
	for _, tc := range topics.Topics {
		has[tc.Topic] = true
	}
	if !has[tg.topic] || has[tg.topic+"-new"] {
		t.Errorf("the broker's topics are %v: want %s and no %s-new", has, tg.topic, tg.topic)
	}
}

// TestContextEndingInFlight: a send whose context ends once its request is on the broker
// (the broker holds it) has an unknown outcome, unlike one whose context had ended before the
// call: the request was written.
func TestContextEndingInFlight(t *testing.T) {
	fc := fakebroker.New(t)
	b := fc.AddGroup("a", 0, map[string]int32{"T": 1}).Master()
	c := newTestClient(t, fc.Addr())
	p := newTestProducer(t, c, WithSendTimeout(time.Hour))
	ctx := testCtx(t, time.Minute)
	if _, err := p.SendSync(ctx, &Message{Topic: "T", Body: []byte("x")}); err != nil {
		t.Fatal(err)
	}
	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	release := make(chan struct{})
	defer close(release)
	b.Control(protocol.CodeSendMessage, func(*rpc.Request) (rpc.Reply, fakebroker.Verdict) {
		cancel()
		<-release
		return rpc.Reply{}, fakebroker.Pass
	})
	_, err := p.SendSync(sctx, &Message{Topic: "T", Body: []byte("y")})
	if !errors.Is(err, ErrUnknownOutcome) || !errors.Is(err, context.Canceled) {
		t.Fatalf("send whose context ended in flight: %v; want ErrUnknownOutcome wrapping context.Canceled", err)
	}
}

// TestClosedClientEntryPoints: once its Client is closed, every Producer, Consumer and Admin
// method that does I/O returns an error matching ErrClientClosed, and the Producer's and
// Consumer's also match their own closed error; a Producer or Consumer closed by its own Close
// returns its own closed error alone. New producers and consumers are refused too, and the
// objects' Close still succeeds.
func TestClosedClientEntryPoints(t *testing.T) {
	fc := fakebroker.New(t)
	b := fc.AddGroup("broker-a", 0, map[string]int32{"T": 1}).Master()
	tg := entryTarget{cluster: fakebroker.ClusterName, broker: b.Addr(), topic: "T", group: "G"}
	ctx := testCtx(t, time.Minute)

	// open returns a Client, a Producer that found the topic's route and a Consumer of it.
	open := func(t *testing.T) (*Client, *Producer, *Consumer) {
		c := newTestClient(t, fc.Addr())
		p := newTestProducer(t, c)
		if _, err := p.SendSync(ctx, &Message{Topic: tg.topic, Body: []byte("x")}); err != nil {
			t.Fatal(err)
		}
		return c, p, newTestConsumer(t, c, tg.group, tg.topic)
	}

	t.Run("own Close", func(t *testing.T) {
		_, p, co := open(t)
		if err := p.Close(ctx); err != nil {
			t.Fatal(err)
		}
		if err := co.Close(ctx); err != nil {
			t.Fatal(err)
		}
		var called atomic.Int32
		for _, ep := range producerEntryPoints(p, tg, &called) {
			if err := ep.call(ctx); !errors.Is(err, ErrProducerClosed) || errors.Is(err, ErrClientClosed) {
				t.Errorf("%s after the Producer's Close: %v; want ErrProducerClosed alone", ep.name, err)
			}
		}
		for _, ep := range consumerEntryPoints(co) {
			if err := ep.call(ctx); !errors.Is(err, ErrConsumerClosed) || errors.Is(err, ErrClientClosed) {
				t.Errorf("%s after the Consumer's Close: %v; want ErrConsumerClosed alone", ep.name, err)
			}
		}
	})

	t.Run("Client Close", func(t *testing.T) {
		c, p, co := open(t)
		a := NewAdmin(c)
		if err := c.Close(); err != nil {
			t.Fatal(err)
		}
		var called atomic.Int32
		calls := producerEntryPoints(p, tg, &called)
		calls = append(calls, consumerEntryPoints(co)...)
		calls = append(calls, adminEntryPoints(a, tg)...)
		calls = append(calls,
			entryPoint{"NewProducer", func(context.Context) error { _, err := NewProducer(c); return err }},
			entryPoint{"NewConsumer", func(context.Context) error { _, err := NewConsumer(c, tg.group, tg.topic); return err }},
		)
		for _, ep := range calls {
			err := ep.call(ctx)
			if !errors.Is(err, ErrClientClosed) {
				t.Errorf("%s after the Client's Close: %v; want an error matching ErrClientClosed", ep.name, err)
			}
		}
		for _, ep := range producerEntryPoints(p, tg, &called) {
			if err := ep.call(ctx); !errors.Is(err, ErrProducerClosed) {
				t.Errorf("%s after the Client's Close: %v; want it to match ErrProducerClosed too", ep.name, err)
			}
		}
		for _, ep := range consumerEntryPoints(co) {
			if err := ep.call(ctx); !errors.Is(err, ErrConsumerClosed) {
				t.Errorf("%s after the Client's Close: %v; want it to match ErrConsumerClosed too", ep.name, err)
			}
		}
		if n := called.Load(); n != 0 {
			t.Errorf("%d SendAsync callbacks ran", n)
		}
		if err := p.Close(ctx); err != nil {
			t.Errorf("Producer.Close after the Client's Close: %v", err)
		}
		if err := co.Close(ctx); err != nil {
			t.Errorf("Consumer.Close after the Client's Close: %v", err)
		}
	})
}
