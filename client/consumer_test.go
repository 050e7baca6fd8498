package client

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/petrel-mq/petrel/internal/fakebroker"
	"github.com/petrel-mq/petrel/internal/testutil"
	"github.com/petrel-mq/petrel/protocol"
	"github.com/petrel-mq/petrel/protocol/rpc"
)

// collector is a Handler that records what it got and checks per-queue order.
type collector struct {
	t    testing.TB
	mu   sync.Mutex
	next map[MessageQueue]int64 // next expected offset per queue, once seen
	body map[string]int         // deliveries per body
	n    int
	busy map[MessageQueue]bool
}

func newCollector(t testing.TB) *collector {
	return &collector{t: t, next: map[MessageQueue]int64{}, body: map[string]int{}, busy: map[MessageQueue]bool{}}
}

func (c *collector) handle(_ context.Context, msgs []MessageExt) error {
	mq := MessageQueue{Topic: msgs[0].Topic, BrokerName: msgs[0].BrokerName, QueueID: msgs[0].QueueID}
	c.mu.Lock()
	if c.busy[mq] {
		c.t.Errorf("handler called concurrently for %v", mq)
	}
	c.busy[mq] = true
	c.mu.Unlock()
	time.Sleep(time.Millisecond)
	c.mu.Lock()
	defer c.mu.Unlock()
	c.busy[mq] = false
	for _, m := range msgs {
		if m.QueueID != mq.QueueID || m.BrokerName != mq.BrokerName {
			c.t.Errorf("mixed queues in one call")
		}
		if want, ok := c.next[mq]; ok && m.QueueOffset != want {
			c.t.Errorf("queue %v: offset %d, want %d", mq, m.QueueOffset, want)
		}
		c.next[mq] = m.QueueOffset + 1
		c.body[string(m.Body)]++
		c.n++
	}
	return nil
}

func (c *collector) count() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.n
}

// runConsumer runs co in the background; the returned stop cancels it and returns Run's error.
func runConsumer(t testing.TB, co *Consumer, h Handler) (stop func() error) {
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() { errc <- co.Run(ctx, h) }()
	var once sync.Once
	var err error
	stop = func() error {
		once.Do(func() { cancel(); err = <-errc })
		return err
	}
	t.Cleanup(func() { _ = stop() })
	return stop
}

func newTestConsumer(t testing.TB, c *Client, group, topic string, opts ...ConsumerOption) *Consumer {
	t.Helper()
	opts = append([]ConsumerOption{WithPollTimeout(time.Second), WithCommitInterval(20 * time.Millisecond), WithRetryDelay(20 * time.Millisecond)}, opts...)
	co, err := NewConsumer(c, group, topic, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return co
}

func produce(t testing.TB, p *Producer, topic string, from, to int) {
	t.Helper()
	ctx := testCtx(t, 20*time.Second)
	for i := from; i < to; i++ {
		if err := p.SendAsync(ctx, &Message{Topic: topic, Tags: "t", Keys: "k" + strconv.Itoa(i), Body: []byte(fmt.Sprintf("m%06d", i))}, func(_ SendResult, err error) {
			if err != nil {
				t.Errorf("send %d: %v", i, err)
			}
		}); err != nil {
			t.Fatal(err)
		}
	}
	if err := p.Flush(ctx); err != nil {
		t.Fatal(err)
	}
}

func TestConsumeAllInOrderAndResume(t *testing.T) {
	fc, _, _ := twoGroups(t, 3)
	pc := newTestClient(t, fc.Addr())
	p := newTestProducer(t, pc, WithMaxBatchBytes(2<<10))
	produce(t, p, "T", 0, 2000)

	c := newTestClient(t, fc.Addr())
	col := newCollector(t)
	co := newTestConsumer(t, c, "G", "T", WithPullMaxMessages(100))
	stop := runConsumer(t, co, col.handle)
	testutil.Eventually(t, "everything consumed", func() bool { return col.count() >= 2000 })
	produce(t, p, "T", 2000, 2500)
	testutil.Eventually(t, "new messages consumed", func() bool { return col.count() >= 2500 })
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	if col.count() != 2500 || len(col.body) != 2500 {
		t.Fatalf("%d deliveries of %d bodies", col.count(), len(col.body))
	}
	var total int64
	for _, qp := range co.Progress() {
		if qp.Committed != qp.Consumed || qp.Consumed != qp.MaxOffset || qp.Err != nil {
			t.Fatalf("progress after Run: %+v", qp)
		}
		total += qp.Consumed
	}
	if total != 2500 || co.Stats().Delivered != 2500 {
		t.Fatalf("total %d, stats %+v", total, co.Stats())
	}
	if err := co.Run(context.Background(), col.handle); !errors.Is(err, ErrConsumerClosed) {
		t.Fatal("second Run")
	}

	// A new consumer of the group resumes at the committed offsets: it sees only new messages.
	produce(t, p, "T", 2500, 2600)
	col2 := newCollector(t)
	co2 := newTestConsumer(t, c, "G", "T")
	lag, err := co2.Lag(testCtx(t, 10*time.Second))
	if err != nil || lag != 100 {
		t.Fatalf("lag %d, %v", lag, err)
	}
	stop2 := runConsumer(t, co2, col2.handle)
	testutil.Eventually(t, "the new messages", func() bool { return col2.count() >= 100 })
	time.Sleep(50 * time.Millisecond)
	if err := stop2(); err != nil {
		t.Fatal(err)
	}
	if col2.count() != 100 {
		t.Fatalf("resumed consumer got %d messages, want 100", col2.count())
	}
	for i := 2500; i < 2600; i++ {
		if col2.body[fmt.Sprintf("m%06d", i)] != 1 {
			t.Fatalf("message %d missing", i)
		}
	}
	// Another group starts from the first message; ConsumeFromLast from the end.
	col3 := newCollector(t)
	stop3 := runConsumer(t, newTestConsumer(t, c, "G3", "T"), col3.handle)
	testutil.Eventually(t, "a new group reads everything", func() bool { return col3.count() >= 2600 })
	_ = stop3()
	col4 := newCollector(t)
	co4 := newTestConsumer(t, c, "G4", "T", WithConsumeFrom(ConsumeFromLast))
	stop4 := runConsumer(t, co4, col4.handle)
	testutil.Eventually(t, "ConsumeFromLast positions", func() bool {
		ps := co4.Progress()
		for _, p := range ps {
			if p.Consumed < 0 {
				return false
			}
		}
		return len(ps) == 6
	})
	produce(t, p, "T", 2600, 2610)
	testutil.Eventually(t, "ConsumeFromLast gets new messages", func() bool { return col4.count() >= 10 })
	_ = stop4()
	if col4.count() != 10 {
		t.Fatalf("ConsumeFromLast got %d", col4.count())
	}
}

func TestConsumerMessageFields(t *testing.T) {
	fc, a, _ := twoGroups(t, 1)
	c := newTestClient(t, fc.Addr())
	p := newTestProducer(t, c)
	ctx := testCtx(t, 10*time.Second)
	before := time.Now().UnixMilli()
	res, err := p.SendSync(ctx, &Message{Topic: "T", Keys: "k1 k2", Tags: "TagA", Properties: map[string]string{"color": "red"}, Body: []byte("payload"), ShardingKey: "x"})
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan MessageExt, 1)
	co := newTestConsumer(t, c, "G", "T")
	stop := runConsumer(t, co, func(_ context.Context, msgs []MessageExt) error {
		for i := range msgs {
			got <- msgs[i].Clone()
		}
		return nil
	})
	m := <-got
	_ = stop()
	if m.Topic != "T" || m.BrokerName != res.BrokerName || m.QueueID != res.QueueID || m.QueueOffset != 0 ||
		string(m.Keys) != "k1 k2" || string(m.Tags) != "TagA" || string(m.Body) != "payload" ||
		m.ProducerID != p.ID() || m.Sequence != 0 || m.BornTimestamp < before || m.StoreTimestamp != res.StoreTimestamp {
		t.Fatalf("%+v vs %+v", m, res)
	}
	if v, ok := m.Property("color"); !ok || v != "red" {
		t.Fatal("property")
	}
	if res.BrokerName == "a" && (m.BrokerAddr != a.Addr() || m.BrokerID != 0) {
		t.Fatalf("served by %s/%d", m.BrokerAddr, m.BrokerID)
	}
}

func TestConsumerSkipsMessagesBelowOffset(t *testing.T) {
	fc := fakebroker.New(t)
	a := fc.AddGroup("a", 0, map[string]int32{"T": 1}).Master()
	c := newTestClient(t, fc.Addr())
	p := newTestProducer(t, c)
	ctx := testCtx(t, 10*time.Second)
	msgs := make([]Message, 10)
	for i := range msgs {
		msgs[i].Body = []byte{byte(i)}
	}
	if _, err := p.SendBatchSync(ctx, "T", msgs); err != nil {
		t.Fatal(err)
	}
	if err := NewAdmin(c).UpdateConsumerOffset(ctx, a.Addr(), "G", "T", 0, 6); err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var got []int64
	co := newTestConsumer(t, c, "G", "T")
	stop := runConsumer(t, co, func(_ context.Context, ms []MessageExt) error {
		mu.Lock()
		defer mu.Unlock()
		for _, m := range ms {
			got = append(got, m.QueueOffset)
		}
		return nil
	})
	testutil.Eventually(t, "consumed", func() bool { mu.Lock(); defer mu.Unlock(); return len(got) >= 4 })
	_ = stop()
	if fmt.Sprint(got) != "[6 7 8 9]" {
		t.Fatalf("got %v", got)
	}
}

func TestConsumerHandlerRetry(t *testing.T) {
	fc, _, _ := twoGroups(t, 1)
	c := newTestClient(t, fc.Addr())
	p := newTestProducer(t, c)
	produce(t, p, "T", 0, 20)
	var mu sync.Mutex
	calls := map[int64]int{}
	col := newCollector(t)
	co := newTestConsumer(t, c, "G", "T")
	stop := runConsumer(t, co, func(ctx context.Context, msgs []MessageExt) error {
		mu.Lock()
		calls[msgs[0].QueueOffset]++
		n := calls[msgs[0].QueueOffset]
		mu.Unlock()
		if n < 3 {
			return errors.New("not yet")
		}
		return col.handle(ctx, msgs)
	})
	testutil.Eventually(t, "consumed after retries", func() bool { return col.count() >= 20 })
	_ = stop()
	if col.count() != 20 {
		t.Fatalf("%d deliveries", col.count())
	}
}

func TestConsumerCorruptBatch(t *testing.T) {
	fc := fakebroker.New(t)
	a := fc.AddGroup("a", 0, map[string]int32{"T": 2}).Master()
	c := newTestClient(t, fc.Addr())
	p := newTestProducer(t, c)
	ctx := testCtx(t, 10*time.Second)
	var q0 int32 = -1
	for i := 0; i < 10; i++ {
		res, err := p.SendSync(ctx, &Message{Topic: "T", Body: []byte("m" + strconv.Itoa(i)), ShardingKey: "k"})
		if err != nil {
			t.Fatal(err)
		}
		q0 = res.QueueID
	}
	for i := 0; i < 10; i++ {
		if _, err := p.SendSync(ctx, &Message{Topic: "T", Body: []byte("other"), ShardingKey: otherKey(t, c, "k")}); err != nil {
			t.Fatal(err)
		}
	}
	a.Group().Corrupt("T", q0, 5)
	col := newCollector(t)
	co := newTestConsumer(t, c, "G", "T")
	stop := runConsumer(t, co, col.handle)
	testutil.Eventually(t, "the corrupt batch detected", func() bool { return co.Stats().CorruptBatches == 1 })
	testutil.Eventually(t, "the other queue consumed", func() bool { return col.count() >= 15 })
	time.Sleep(50 * time.Millisecond)
	_ = stop()
	if col.count() != 15 {
		t.Fatalf("%d delivered: the corrupt message or those behind it leaked", col.count())
	}
	for _, qp := range co.Progress() {
		if qp.Queue.QueueID == q0 {
			if !errors.Is(qp.Err, ErrCorruptBatch) || !errors.Is(qp.Err, protocol.ErrBatchCRC) || qp.Consumed != 5 || qp.Committed != 5 {
				t.Fatalf("%+v", qp)
			}
		} else if qp.Err != nil || qp.Consumed != 10 {
			t.Fatalf("%+v", qp)
		}
	}
}

// otherKey returns a sharding key that maps to another queue than key.
func otherKey(t testing.TB, c *Client, key string) string {
	r, err := c.route(context.Background(), "T")
	if err != nil {
		t.Fatal(err)
	}
	n := len(r.writeQueues)
	for i := 0; ; i++ {
		k := "o" + strconv.Itoa(i)
		if shardIndex(k, n) != shardIndex(key, n) {
			return k
		}
	}
}

func TestConsumerOffsetMoved(t *testing.T) {
	fc := fakebroker.New(t)
	a := fc.AddGroup("a", 0, map[string]int32{"T": 1}).Master()
	c := newTestClient(t, fc.Addr())
	p := newTestProducer(t, c)
	produce(t, p, "T", 0, 5)
	ctx := testCtx(t, 10*time.Second)
	// A committed offset past the end (the broker lost data): the pull says OFFSET_MOVED.
	admin := NewAdmin(c)
	if err := admin.UpdateConsumerOffset(ctx, a.Addr(), "G", "T", 0, 100); err != nil {
		t.Fatal(err)
	}
	col := newCollector(t)
	co := newTestConsumer(t, c, "G", "T")
	stop := runConsumer(t, co, col.handle)
	testutil.Eventually(t, "moved to the max offset", func() bool {
		ps := co.Progress()
		return len(ps) == 1 && ps[0].Consumed == 5
	})
	produce(t, p, "T", 5, 8)
	testutil.Eventually(t, "new messages", func() bool { return col.count() >= 3 })
	_ = stop()
	// After OFFSET_MOVED the broker's position wins, even below the old commit.
	off, err := admin.QueryConsumerOffset(ctx, a.Addr(), "G", "T", 0)
	if err != nil || off != 8 {
		t.Fatalf("committed %d, %v", off, err)
	}
	// One move, from 100 down to 5: backwards.
	if st := co.Stats(); st.OffsetMoved != 1 || st.OffsetMovedBack != 1 {
		t.Fatalf("stats: offset moved %d, backwards %d; want 1 and 1", st.OffsetMoved, st.OffsetMovedBack)
	}
}

// TestConsumerOffsetMovedForward: a position below the queue's min offset (retention) moves
// forward: counted in OffsetMoved, not in OffsetMovedBack.
func TestConsumerOffsetMovedForward(t *testing.T) {
	fc := fakebroker.New(t)
	a := fc.AddGroup("a", 0, map[string]int32{"T": 1}).Master()
	c := newTestClient(t, fc.Addr())
	p := newTestProducer(t, c)
	produce(t, p, "T", 0, 5)
	// The first pull, at 0, is answered as if offsets below 3 had been deleted.
	var first atomic.Bool
	a.ControlPull(func(h *protocol.PullRequestHeader) (rpc.Reply, fakebroker.Verdict) {
		if h.QueueOffset != 0 || !first.CompareAndSwap(false, true) {
			return rpc.Reply{}, fakebroker.Pass
		}
		return rpc.Reply{Header: &protocol.PullResponseHeader{Result: protocol.PullOffsetMoved, NextQueueOffset: 3, MinOffset: 3, MaxOffset: 5}}, fakebroker.Answer
	})
	col := newCollector(t)
	co := newTestConsumer(t, c, "G", "T")
	stop := runConsumer(t, co, col.handle)
	testutil.Eventually(t, "messages 3 and 4 consumed", func() bool { return col.count() >= 2 })
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	if st := co.Stats(); st.OffsetMoved != 1 || st.OffsetMovedBack != 0 {
		t.Fatalf("stats: offset moved %d, backwards %d; want 1 and 0", st.OffsetMoved, st.OffsetMovedBack)
	}
}

func TestConsumerFollowsSuggestion(t *testing.T) {
	fc := fakebroker.New(t)
	group := fc.AddGroup("a", 1, map[string]int32{"T": 1}).Members()
	master, slave := group[0], group[1]
	master.SetSuggestBrokerID(1)
	c := newTestClient(t, fc.Addr())
	p := newTestProducer(t, c)
	produce(t, p, "T", 0, 10)
	var mu sync.Mutex
	servedBy := map[int64]int{}
	// The master answers the consumer's first pull with nothing and a suggestion of the slave,
	// which then has the whole backlog to serve, whatever the timing.
	var first atomic.Bool
	master.ControlPull(func(h *protocol.PullRequestHeader) (rpc.Reply, fakebroker.Verdict) {
		if !first.CompareAndSwap(false, true) {
			return rpc.Reply{}, fakebroker.Pass
		}
		return rpc.Reply{Header: &protocol.PullResponseHeader{Result: protocol.PullNoNewMessage,
			NextQueueOffset: h.QueueOffset, MaxOffset: 10, SuggestBrokerID: 1}}, fakebroker.Answer
	})
	co := newTestConsumer(t, c, "G", "T")
	stop := runConsumer(t, co, func(_ context.Context, ms []MessageExt) error {
		mu.Lock()
		defer mu.Unlock()
		for _, m := range ms {
			servedBy[m.BrokerID]++
		}
		return nil
	})
	deadline := time.Now().Add(10 * time.Second)
	for {
		mu.Lock()
		n := servedBy[1]
		mu.Unlock()
		if n > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the slave served nothing: slave pulls %d, master pulls %d, stats %+v", slave.Pulls(), master.Pulls(), co.Stats())
		}
		time.Sleep(10 * time.Millisecond)
	}
	produce(t, p, "T", 10, 20)
	testutil.Eventually(t, "all consumed", func() bool { return co.Stats().Delivered >= 20 })
	// The slave goes away: back to the master.
	slave.Stop()
	produce(t, p, "T", 20, 30)
	testutil.Eventually(t, "consumed from the master after the slave left", func() bool { return co.Stats().Delivered >= 30 })
	_ = stop()
	mu.Lock()
	defer mu.Unlock()
	if servedBy[1] == 0 || master.Pulls() == 0 {
		t.Fatalf("served by %v; master pulls %d", servedBy, master.Pulls())
	}
	// Offsets were committed to the master even while pulling from the slave.
	off, err := NewAdmin(c).QueryConsumerOffset(testCtx(t, 5*time.Second), master.Addr(), "G", "T", 0)
	if err != nil || off != 30 {
		t.Fatalf("committed %d, %v", off, err)
	}
}

func TestConsumerSurvivesBrokerRestart(t *testing.T) {
	fc := fakebroker.New(t)
	a := fc.AddGroup("a", 0, map[string]int32{"T": 2}).Master()
	c := newTestClient(t, fc.Addr())
	p := newTestProducer(t, c)
	produce(t, p, "T", 0, 100)
	col := newCollector(t)
	co := newTestConsumer(t, c, "G", "T")
	stop := runConsumer(t, co, col.handle)
	testutil.Eventually(t, "first half", func() bool { return col.count() >= 100 })
	a.Restart()
	testutil.Eventually(t, "producing after the restart", func() bool {
		_, err := p.SendSync(testCtx(t, time.Second), &Message{Topic: "T", Body: []byte("after")})
		return err == nil
	})
	testutil.Eventually(t, "consuming after the restart", func() bool { return col.count() >= 101 })
	_ = stop()
}

func TestConsumerClose(t *testing.T) {
	fc, _, _ := twoGroups(t, 1)
	c := newTestClient(t, fc.Addr())
	p := newTestProducer(t, c)
	produce(t, p, "T", 0, 10)
	col := newCollector(t)
	co := newTestConsumer(t, c, "G", "T", WithCommitInterval(time.Hour))
	errc := make(chan error, 1)
	go func() { errc <- co.Run(context.Background(), col.handle) }()
	testutil.Eventually(t, "consumed", func() bool { return col.count() >= 10 })
	if err := co.Close(testCtx(t, 5*time.Second)); err != nil {
		t.Fatal(err)
	}
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
	for _, qp := range co.Progress() {
		if qp.Committed != qp.Consumed {
			t.Fatalf("no final commit: %+v", qp)
		}
	}
	never := newTestConsumer(t, c, "G", "T")
	if err := never.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := never.Run(context.Background(), col.handle); !errors.Is(err, ErrConsumerClosed) {
		t.Fatal(err)
	}
}

// TestConsumerPullFailureLogIsRateLimited: while a broker is down, every puller of its queues
// fails on each retry, but the warnings come at most once per broker per failureLogInterval.
func TestConsumerPullFailureLogIsRateLimited(t *testing.T) {
	fc := fakebroker.New(t)
	a := fc.AddGroup("a", 0, map[string]int32{"T": 8}).Master()
	var logs lockedBuffer
	c := newTestClient(t, fc.Addr(), WithLogger(slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelWarn}))))
	p := newTestProducer(t, c)
	produce(t, p, "T", 0, 80)
	col := newCollector(t)
	co := newTestConsumer(t, c, "G", "T", WithRetryDelay(50*time.Millisecond))
	runConsumer(t, co, col.handle)
	testutil.Eventually(t, "everything consumed", func() bool { return col.count() >= 80 })
	before := co.Stats().PullErrors
	a.Stop()
	testutil.Eventually(t, "many pull failures", func() bool { return co.Stats().PullErrors >= before+80 })
	// The pullers' messages; the keys are the broker's address or, once the route has dropped
	// the group, the group's name: at most one line each so far.
	n := 0
	for _, what := range []string{"cannot connect to pull", "pull failed", "broker group has no live member", "no route", "cannot find the queue's start offset"} {
		n += logs.count("msg=\"" + what)
	}
	if n == 0 || n > 2 {
		t.Fatalf("%d pull failure warnings for %d failures, want 1 or 2:\n%s", n, co.Stats().PullErrors-before, logs.buf.String())
	}
}

func TestFailureLog(t *testing.T) {
	var l failureLog
	t0 := time.Now()
	f := func(key string, at time.Duration, wantOK bool, wantUnlogged int) {
		t.Helper()
		ok, unlogged := l.allow(key, t0.Add(at))
		if ok != wantOK || unlogged != wantUnlogged {
			t.Fatalf("allow(%q, +%v) = %v, %d; want %v, %d", key, at, ok, unlogged, wantOK, wantUnlogged)
		}
	}
	f("a", 0, true, 0)
	f("a", time.Second, false, 0)
	f("b", time.Second, true, 0) // keys are independent
	f("a", 2*time.Second, false, 0)
	f("a", failureLogInterval, true, 2)
	f("a", failureLogInterval+time.Second, false, 0)
	f("a", 3*failureLogInterval, true, 1)
	f("a", 5*failureLogInterval, true, 0)
}
