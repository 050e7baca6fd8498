package client

import (
	"context"
	"errors"
	"log/slog"
	"testing"
	"time"

	"github.com/petrel-mq/petrel/internal/testcluster"
	"github.com/petrel-mq/petrel/internal/testutil"
	"github.com/petrel-mq/petrel/protocol"
)

// TestArgumentValidation: every exported entry point refuses an argument or option it cannot
// use with an error the caller can test (errors.Is against the sentinel), before sending
// anything, and without panicking: a nil Client, context, Handler or option, empty or malformed
// names and addresses, negative queue ids, offsets and brokerIds, durations and sizes outside
// their range. A call refused changes nothing: the Producer and Consumer given a nil context
// are still open, and close as usual afterwards.
func TestArgumentValidation(t *testing.T) {
	// Nothing is ever sent: the NameServer and the broker accept connections and answer nothing,
	// so a call that asked anything would show in the client's dials.
	ns, addr := testutil.SilentListener(t), testutil.SilentListener(t)
	c := newTestClient(t, ns)
	ctx := testCtx(t, time.Minute)
	newClient := func(opts ...ClientOption) error {
		cl, err := New(ctx, opts...)
		if err == nil {
			_ = cl.Close()
		}
		return err
	}
	newProducer := func(opts ...ProducerOption) error {
		p, err := NewProducer(c, opts...)
		if err == nil {
			_ = p.Close(ctx)
		}
		return err
	}
	newConsumer := func(opts ...ConsumerOption) error {
		co, err := NewConsumer(c, "G", "T", opts...)
		if err == nil {
			_ = co.Close(ctx)
		}
		return err
	}
	consumer, err := NewConsumer(c, "G", "T")
	if err != nil {
		t.Fatal(err)
	}
	admin := NewAdmin(c)
	none := NewAdmin(nil)
	mq := MessageQueue{Topic: "T", BrokerName: "a"}
	tc := protocol.TopicConfig{Topic: "T", ReadQueueNums: 1, WriteQueueNums: 1}
	err0 := func(_ any, err error) error { return err }
	err1 := func(_, _ any, err error) error { return err }
	// noCtx is the nil context a careless caller passes (a variable, as vet's nil-context check
	// would rightly flag the literal).
	var noCtx context.Context
	msg := &Message{Topic: "T", Body: []byte("x")}
	ctxProducer := mustProducer(t, c) // refused a nil context at Close: still open below

	for _, tt := range []struct {
		name string
		call func() error
		want error
	}{
		// Client options.
		{"New without NameServers", func() error { return newClient() }, ErrInvalidOption},
		{"WithNameServers empty", func() error { return newClient(WithNameServers(" ; ")) }, ErrInvalidOption},
		{"WithNameServers no port", func() error { return newClient(WithNameServers("localhost")) }, ErrInvalidOption},
		{"WithNameServers bad port", func() error { return newClient(WithNameServers("localhost:http")) }, ErrInvalidOption},
		{"nil ClientOption", func() error { return newClient(WithNameServers(ns), nil) }, ErrInvalidOption},
		{"WithRouteRefreshInterval 0", func() error { return newClient(WithNameServers(ns), WithRouteRefreshInterval(0)) }, ErrInvalidOption},
		{"WithRequestTimeout -1", func() error { return newClient(WithNameServers(ns), WithRequestTimeout(-1)) }, ErrInvalidOption},
		{"WithDialTimeout 0", func() error { return newClient(WithNameServers(ns), WithDialTimeout(0)) }, ErrInvalidOption},
		{"WithReconnectBackoff max < initial", func() error {
			return newClient(WithNameServers(ns), WithReconnectBackoff(time.Second, time.Millisecond))
		}, ErrInvalidOption},
		{"WithReconnectBackoff 0", func() error { return newClient(WithNameServers(ns), WithReconnectBackoff(0, time.Second)) }, ErrInvalidOption},
		{"WithMaxFrameSize 0", func() error { return newClient(WithNameServers(ns), WithMaxFrameSize(0)) }, ErrInvalidOption},
		{"WithLogger nil", func() error { return newClient(WithNameServers(ns), WithLogger(nil)) }, ErrInvalidOption},
		{"valid client options", func() error {
			return newClient(WithNameServers(ns+";"+addr), WithLivenessProbe(0, 0), WithReconnectBackoff(time.Millisecond, time.Millisecond))
		}, nil},

		// Producer.
		{"NewProducer nil Client", func() error { return err0(NewProducer(nil)) }, ErrInvalidArgument},
		{"nil ProducerOption", func() error { return newProducer(nil) }, ErrInvalidOption},
		{"WithLinger -1", func() error { return newProducer(WithLinger(-1)) }, ErrInvalidOption},
		{"WithMaxBatchBytes 0", func() error { return newProducer(WithMaxBatchBytes(0)) }, ErrInvalidOption},
		{"WithBufferBytes -1", func() error { return newProducer(WithBufferBytes(-1)) }, ErrInvalidOption},
		{"WithMaxInFlightPerBroker 0", func() error { return newProducer(WithMaxInFlightPerBroker(0)) }, ErrInvalidOption},
		{"WithRetries -1", func() error { return newProducer(WithRetries(-1)) }, ErrInvalidOption},
		{"WithSendTimeout 0", func() error { return newProducer(WithSendTimeout(0)) }, ErrInvalidOption},
		{"WithFaultBackoff max < initial", func() error { return newProducer(WithFaultBackoff(time.Second, 0)) }, ErrInvalidOption},
		{"WithMaxMessageSize 0", func() error { return newProducer(WithMaxMessageSize(0)) }, ErrInvalidOption},
		{"WithMaxMessageSize over the frame", func() error { return newProducer(WithMaxMessageSize(1 << 30)) }, ErrInvalidOption},
		{"WithTraceEvery -1", func() error { return newProducer(WithTraceEvery(-1)) }, ErrInvalidOption},
		{"WithSendTraceObserver nil", func() error { return newProducer(WithSendTraceObserver(nil)) }, ErrInvalidOption},
		{"valid producer options", func() error { return newProducer(WithLinger(0), WithRetries(0), WithFaultBackoff(0, 0)) }, nil},
		{"valid trace options", func() error { return newProducer(WithTraceEvery(0), WithSendTraceObserver(func(SendTraceClient) {})) }, nil},
		{"SendSync nil message", func() error { return err0(mustProducer(t, c).SendSync(ctx, nil)) }, ErrMessageInvalid},
		{"SendSync empty topic", func() error { return err0(mustProducer(t, c).SendSync(ctx, &Message{Body: []byte("x")})) }, ErrTopicInvalid},
		{"SendAsync nil message", func() error { return mustProducer(t, c).SendAsync(ctx, nil, nil) }, ErrMessageInvalid},
		{"SendOneway empty body", func() error { return mustProducer(t, c).SendOneway(ctx, &Message{Topic: "T"}) }, ErrMessageInvalid},
		{"SendBatchSync no message", func() error { return err0(mustProducer(t, c).SendBatchSync(ctx, "T", nil)) }, ErrMessageInvalid},
		{"SendBatchSync bad topic", func() error {
			return err0(mustProducer(t, c).SendBatchSync(ctx, "a b", []Message{{Body: []byte("x")}}))
		}, ErrTopicInvalid},
		{"SendSync nil context", func() error { return err0(ctxProducer.SendSync(noCtx, msg)) }, ErrInvalidArgument},
		{"SendBatchSync nil context", func() error { return err0(ctxProducer.SendBatchSync(noCtx, "T", []Message{*msg})) }, ErrInvalidArgument},
		{"SendOneway nil context", func() error { return ctxProducer.SendOneway(noCtx, msg) }, ErrInvalidArgument},
		{"SendAsync nil context", func() error { return ctxProducer.SendAsync(noCtx, msg, nil) }, ErrInvalidArgument},
		{"Flush nil context", func() error { return ctxProducer.Flush(noCtx) }, ErrInvalidArgument},
		{"Producer.Close nil context", func() error { return ctxProducer.Close(noCtx) }, ErrInvalidArgument},

		// Consumer.
		{"NewConsumer nil Client", func() error { return err0(NewConsumer(nil, "G", "T")) }, ErrInvalidArgument},
		{"NewConsumer empty group", func() error { return err0(NewConsumer(c, "", "T")) }, ErrGroupInvalid},
		{"NewConsumer bad group", func() error { return err0(NewConsumer(c, "bad group", "T")) }, ErrGroupInvalid},
		{"NewConsumer empty topic", func() error { return err0(NewConsumer(c, "G", "")) }, ErrTopicInvalid},
		{"nil ConsumerOption", func() error { return newConsumer(nil) }, ErrInvalidOption},
		{"WithConsumeFrom unknown", func() error { return newConsumer(WithConsumeFrom(ConsumeFromLast + 1)) }, ErrInvalidOption},
		{"WithPollTimeout -1", func() error { return newConsumer(WithPollTimeout(-1)) }, ErrInvalidOption},
		{"WithPullMaxMessages 0", func() error { return newConsumer(WithPullMaxMessages(0)) }, ErrInvalidOption},
		{"WithPullMaxBytes -1", func() error { return newConsumer(WithPullMaxBytes(-1)) }, ErrInvalidOption},
		{"WithPullObserver nil", func() error { return newConsumer(WithPullObserver(nil)) }, ErrInvalidOption},
		{"WithCommitInterval 0", func() error { return newConsumer(WithCommitInterval(0)) }, ErrInvalidOption},
		{"WithRetryDelay 0", func() error { return newConsumer(WithRetryDelay(0)) }, ErrInvalidOption},
		{"WithHeartbeatInterval 0", func() error { return newConsumer(WithHeartbeatInterval(0)) }, ErrInvalidOption},
		{"WithRebalanceInterval -1", func() error { return newConsumer(WithRebalanceInterval(-1)) }, ErrInvalidOption},
		{"valid consumer options", func() error { return newConsumer(WithPollTimeout(0), WithReadBrokerID(-5)) }, nil},
		{"Run nil handler", func() error { return consumer.Run(ctx, nil) }, ErrInvalidArgument},
		{"Run nil context", func() error { return consumer.Run(noCtx, func(context.Context, []MessageExt) error { return nil }) }, ErrInvalidArgument},
		{"Lag nil context", func() error { return err0(consumer.Lag(noCtx)) }, ErrInvalidArgument},
		{"Consumer.Close nil context", func() error { return consumer.Close(noCtx) }, ErrInvalidArgument},

		// Admin.
		{"Admin without Client", func() error { return err0(none.ClusterInfo(ctx)) }, ErrInvalidArgument},
		{"Admin without Client: TopicRoute", func() error { return err0(none.TopicRoute(ctx, "T")) }, ErrInvalidArgument},
		{"CreateTopic bad address", func() error { return err0(admin.CreateTopic(ctx, "host:", tc)) }, ErrInvalidArgument},
		{"CreateTopic no queues", func() error {
			return err0(admin.CreateTopic(ctx, addr, protocol.TopicConfig{Topic: "T", ReadQueueNums: 0, WriteQueueNums: 1}))
		}, ErrInvalidArgument},
		{"CreateTopic bad permission", func() error {
			return err0(admin.CreateTopic(ctx, addr, protocol.TopicConfig{Topic: "T", ReadQueueNums: 1, WriteQueueNums: 1, Perm: 1}))
		}, ErrInvalidArgument},
		{"CreateTopic bad topic", func() error {
			return err0(admin.CreateTopic(ctx, addr, protocol.TopicConfig{Topic: "", ReadQueueNums: 1, WriteQueueNums: 1}))
		}, ErrTopicInvalid},
		{"TopicRoute bad topic", func() error { return err0(admin.TopicRoute(ctx, "a/b")) }, ErrTopicInvalid},
		{"WaitTopicRoute 0 groups", func() error { return admin.WaitTopicRoute(ctx, "T", 0) }, ErrInvalidArgument},
		{"WaitTopicRoute bad topic", func() error { return admin.WaitTopicRoute(ctx, "", 1) }, ErrTopicInvalid},
		{"TopicStats bad topic", func() error { return err0(admin.TopicStats(ctx, "")) }, ErrTopicInvalid},
		{"ConsumeStats bad group", func() error { return err0(admin.ConsumeStats(ctx, "", "T")) }, ErrGroupInvalid},
		{"ConsumeStats bad topic", func() error { return err0(admin.ConsumeStats(ctx, "G", "a b")) }, ErrTopicInvalid},
		{"ConsumerClients bad group", func() error { return err0(admin.ConsumerClients(ctx, "a b", "")) }, ErrGroupInvalid},
		{"BrokerRuntimeInfo no address", func() error { return err0(admin.BrokerRuntimeInfo(ctx, "")) }, ErrInvalidArgument},
		{"SendTraces no address", func() error { return err0(admin.SendTraces(ctx, "", 0)) }, ErrInvalidArgument},
		{"AllTopicConfig no port", func() error { return err0(admin.AllTopicConfig(ctx, "127.0.0.1")) }, ErrInvalidArgument},
		{"HAStatus no address", func() error { return err0(admin.HAStatus(ctx, "")) }, ErrInvalidArgument},
		{"AllConsumerOffsets no address", func() error { return err0(admin.AllConsumerOffsets(ctx, "")) }, ErrInvalidArgument},
		{"MinOffset negative queue", func() error { return err0(admin.MinOffset(ctx, addr, "T", -1)) }, ErrInvalidArgument},
		{"MaxOffset bad topic", func() error { return err0(admin.MaxOffset(ctx, addr, "", 0)) }, ErrTopicInvalid},
		{"QueryConsumerOffset bad group", func() error { return err0(admin.QueryConsumerOffset(ctx, addr, "", "T", 0)) }, ErrGroupInvalid},
		{"UpdateConsumerOffset negative offset", func() error { return admin.UpdateConsumerOffset(ctx, addr, "G", "T", 0, -1) }, ErrInvalidArgument},
		{"LogChecksum bad range", func() error { return err0(admin.LogChecksum(ctx, addr, 10, 5)) }, ErrInvalidArgument},
		{"LogChecksum bound below -1", func() error { return err0(admin.LogChecksum(ctx, addr, -2, -1)) }, ErrInvalidArgument},
		{"ElectMaster no broker name", func() error { return err0(admin.ElectMaster(ctx, "", 1)) }, ErrInvalidArgument},
		{"ElectMaster negative brokerId", func() error { return err0(admin.ElectMaster(ctx, "a", -1)) }, ErrInvalidArgument},
		{"Pull no address", func() error { return err0(admin.Pull(ctx, "", mq, 0, 1)) }, ErrInvalidArgument},
		{"Pull negative offset", func() error { return err0(admin.Pull(ctx, addr, mq, -1, 1)) }, ErrInvalidArgument},
		{"Pull bad topic", func() error { return err0(admin.Pull(ctx, addr, MessageQueue{}, 0, 1)) }, ErrTopicInvalid},
		{"TopicStatsFrom negative brokerId", func() error { return err0(admin.TopicStatsFrom(ctx, "T", 0, -1)) }, ErrInvalidArgument},
		{"TopicStatsFrom bad topic", func() error { return err0(admin.TopicStatsFrom(ctx, "", 0)) }, ErrTopicInvalid},

		// A nil context, for every call that takes one.
		{"New nil context", func() error { return err0(New(noCtx, WithNameServers(ns))) }, ErrInvalidArgument},
		{"CreateTopic nil context", func() error { return err0(admin.CreateTopic(noCtx, addr, tc)) }, ErrInvalidArgument},
		{"CreateTopic on clusters, nil context", func() error { return err0(admin.CreateTopic(noCtx, "", tc)) }, ErrInvalidArgument},
		{"DeleteTopic nil context", func() error { return err1(admin.DeleteTopic(noCtx, "", "T")) }, ErrInvalidArgument},
		{"DeleteSubGroup nil context", func() error { return err0(admin.DeleteSubGroup(noCtx, "", "G")) }, ErrInvalidArgument},
		{"ClusterMasters nil context", func() error { return err0(admin.ClusterMasters(noCtx, "")) }, ErrInvalidArgument},
		{"TopicRoute nil context", func() error { return err0(admin.TopicRoute(noCtx, "T")) }, ErrInvalidArgument},
		{"WaitTopicRoute nil context", func() error { return admin.WaitTopicRoute(noCtx, "T", 1) }, ErrInvalidArgument},
		{"ClusterInfo nil context", func() error { return err0(admin.ClusterInfo(noCtx)) }, ErrInvalidArgument},
		{"TopicStats nil context", func() error { return err0(admin.TopicStats(noCtx, "T")) }, ErrInvalidArgument},
		{"TopicStatsFrom nil context", func() error { return err0(admin.TopicStatsFrom(noCtx, "T", 0)) }, ErrInvalidArgument},
		{"ConsumeStats nil context", func() error { return err0(admin.ConsumeStats(noCtx, "G", "T")) }, ErrInvalidArgument},
		{"ConsumeStats of every topic, nil context", func() error { return err0(admin.ConsumeStats(noCtx, "G", "")) }, ErrInvalidArgument},
		{"ConsumerClients nil context", func() error { return err0(admin.ConsumerClients(noCtx, "G", "")) }, ErrInvalidArgument},
		{"BrokerRuntimeInfo nil context", func() error { return err0(admin.BrokerRuntimeInfo(noCtx, addr)) }, ErrInvalidArgument},
		{"SendTraces nil context", func() error { return err0(admin.SendTraces(noCtx, addr, 0)) }, ErrInvalidArgument},
		{"AllTopicConfig nil context", func() error { return err0(admin.AllTopicConfig(noCtx, addr)) }, ErrInvalidArgument},
		{"MinOffset nil context", func() error { return err0(admin.MinOffset(noCtx, addr, "T", 0)) }, ErrInvalidArgument},
		{"MaxOffset nil context", func() error { return err0(admin.MaxOffset(noCtx, addr, "T", 0)) }, ErrInvalidArgument},
		{"QueryConsumerOffset nil context", func() error { return err0(admin.QueryConsumerOffset(noCtx, addr, "G", "T", 0)) }, ErrInvalidArgument},
		{"UpdateConsumerOffset nil context", func() error { return admin.UpdateConsumerOffset(noCtx, addr, "G", "T", 0, 0) }, ErrInvalidArgument},
		{"HAStatus nil context", func() error { return err0(admin.HAStatus(noCtx, addr)) }, ErrInvalidArgument},
		{"LogChecksum nil context", func() error { return err0(admin.LogChecksum(noCtx, addr, -1, -1)) }, ErrInvalidArgument},
		{"AllConsumerOffsets nil context", func() error { return err0(admin.AllConsumerOffsets(noCtx, addr)) }, ErrInvalidArgument},
		{"ElectMaster nil context", func() error { return err0(admin.ElectMaster(noCtx, "a", 1)) }, ErrInvalidArgument},
		{"Pull nil context", func() error { return err0(admin.Pull(noCtx, addr, mq, 0, 1)) }, ErrInvalidArgument},
		{"Admin without Client, nil context", func() error { return err0(none.ClusterInfo(noCtx)) }, ErrInvalidArgument},
	} {
		t.Run(tt.name, func(t *testing.T) {
			defer func() {
				if r := recover(); r != nil {
					t.Fatalf("panicked: %v", r)
				}
			}()
			err := tt.call()
			switch {
			case tt.want == nil && err != nil:
				t.Fatalf("unexpected error: %v", err)
			case tt.want != nil && !errors.Is(err, tt.want):
				t.Fatalf("got %v, want an error wrapping %v", err, tt.want)
			}
		})
	}
	if st := c.Stats(); st.Dials != 0 {
		t.Fatalf("an invalid call dialled: %+v", st)
	}
	// The producer refused a nil context at Close is open, and closes.
	if ctxProducer.isClosed() {
		t.Fatal("Producer.Close(nil) closed the producer")
	}
	if err := ctxProducer.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if err := ctxProducer.SendAsync(ctx, msg, nil); !errors.Is(err, ErrProducerClosed) {
		t.Fatalf("SendAsync after Close: %v", err)
	}
	// Run refused for its nil handler or context has not run, and Close refused for its nil
	// context has not closed: it can still be closed, and not run again.
	if a := consumer.Assignment(); len(a) != 0 { // takes the consumer's lock: none is left held
		t.Fatalf("assignment %v", a)
	}
	if err := consumer.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if err := consumer.Run(ctx, func(context.Context, []MessageExt) error { return nil }); !errors.Is(err, ErrConsumerClosed) {
		t.Fatalf("Run after Close: %v", err)
	}
}

// mustProducer returns a producer of c closed at the end of the test.
func mustProducer(t *testing.T, c *Client) *Producer {
	t.Helper()
	return newTestProducer(t, c)
}

// TestConsumerRunWithoutRoute: against a real NameServer and broker, Consumer.Run of a topic no
// broker has returns at once an error wrapping ErrTopicNotExist, having consumed nothing, and
// the Consumer can run again: once the topic exists, the same Consumer's Run consumes it. While
// no NameServer answers, Run waits; when its ctx ends first it returns ctx's error wrapped with
// the last failure (never nil), and Close ends it with ErrConsumerClosed.
func TestConsumerRunWithoutRoute(t *testing.T) {
	rc := testcluster.New(t, testcluster.Options{}, testcluster.GroupSpec{Name: "broker-a"})
	var logs lockedBuffer
	c := newTestClient(t, rc.NamesrvAddr(), WithLogger(slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelWarn}))))
	col := newCollector(t)
	co := newTestConsumer(t, c, "G", "Later")
	// A bound that only ends a Run that waits forever: Run must return long before it.
	ctx := testCtx(t, 10*time.Second)
	err := co.Run(ctx, col.handle)
	if !errors.Is(err, ErrTopicNotExist) || ctx.Err() != nil {
		t.Fatalf("Run on a topic without a route: %v (ctx: %v)", err, ctx.Err())
	}
	if a := co.Assignment(); len(a) != 0 || col.count() != 0 {
		t.Fatalf("Run without a route consumed: %v", a)
	}

	rc.CreateTopic("Later", 2)
	p := newTestProducer(t, c)
	produceSync(t, p, "Later", 0, 5)
	stop := runConsumer(t, co, col.handle)
	testutil.Eventually(t, "the same consumer consumes once the topic exists", func() bool { return col.count() == 5 })
	if err := stop(); err != nil {
		t.Fatal(err)
	}

	// No NameServer answers (nothing listens at its address): Run waits until its ctx ends,
	// then says why.
	dead := newTestClient(t, testutil.FreeAddrs(t, 1)[0], WithLogger(slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelWarn}))))
	waiting := newTestConsumer(t, dead, "G", "Later")
	short, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	defer cancel()
	// The last failure is the NameServer's silence (or its dial, when the first one was still
	// under way as ctx ended).
	unreached := func(err error) bool {
		return errors.Is(err, ErrNameServerUnavailable) || errors.Is(err, ErrBrokerUnavailable)
	}
	if err := waiting.Run(short, col.handle); !errors.Is(err, context.DeadlineExceeded) || !unreached(err) {
		t.Fatalf("Run while no NameServer answers, ctx ended: %v", err)
	}
	errc := make(chan error, 1)
	go func() { errc <- waiting.Run(ctx, col.handle) }()
	testutil.Eventually(t, "Run retrying", func() bool { return logs.count("no route for the topic yet") >= 2 })
	if err := waiting.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-errc; !errors.Is(err, ErrConsumerClosed) || !unreached(err) {
		t.Fatalf("Run while no NameServer answers, closed: %v", err)
	}
}
