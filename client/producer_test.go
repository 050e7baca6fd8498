package client

import (
	"context"
	"errors"
	"fmt"
	"slices"
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

// twoGroups starts a fake cluster with broker groups "a" and "b", each with topic T of n
// queues.
func twoGroups(t *testing.T, n int32) (*fakebroker.Cluster, *fakebroker.Broker, *fakebroker.Broker) {
	fc := fakebroker.New(t)
	a := fc.AddGroup("a", 0, map[string]int32{"T": n}).Members()
	b := fc.AddGroup("b", 0, map[string]int32{"T": n}).Members()
	return fc, a[0], b[0]
}

func newTestProducer(t *testing.T, c *Client, opts ...ProducerOption) *Producer {
	t.Helper()
	p, err := NewProducer(c, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := p.Close(testCtx(t, 10*time.Second)); err != nil {
			t.Errorf("producer Close: %v", err)
		}
	})
	return p
}

func TestSendSyncRoundRobin(t *testing.T) {
	fc, a, b := twoGroups(t, 2)
	c := newTestClient(t, fc.Addr())
	p := newTestProducer(t, c)
	ctx := testCtx(t, 10*time.Second)
	seen := map[MessageQueue]int64{}
	for i := 0; i < 40; i++ {
		res, err := p.SendSync(ctx, &Message{Topic: "T", Keys: "k" + strconv.Itoa(i), Tags: "tag", Properties: map[string]string{"i": strconv.Itoa(i)}, Body: []byte("hello " + strconv.Itoa(i))})
		if err != nil {
			t.Fatal(err)
		}
		mq := MessageQueue{Topic: "T", BrokerName: res.BrokerName, QueueID: res.QueueID}
		if res.QueueOffset != seen[mq] || res.Count != 1 {
			t.Fatalf("result %+v, want offset %d", res, seen[mq])
		}
		seen[mq]++
		if (res.BrokerName == "a" && res.BrokerAddr != a.Addr()) || (res.BrokerName == "b" && res.BrokerAddr != b.Addr()) {
			t.Fatalf("result %+v", res)
		}
	}
	if len(seen) != 4 {
		t.Fatalf("round-robin used %d queues: %v", len(seen), seen)
	}
	for mq, n := range seen {
		if n != 10 {
			t.Fatalf("queue %v got %d of 40", mq, n)
		}
	}
	// The stored batches carry the producer id and increasing sequences per queue.
	for q := range int32(2) {
		for i, raw := range a.Group().Batches("T", q) {
			h, _, err := protocol.ValidateBatch(raw, protocol.BatchLimits{})
			if err != nil {
				t.Fatal(err)
			}
			if h.ProducerID != p.ID() || h.BaseSequence != int32(i) || h.QueueID != q {
				t.Fatalf("batch %d of queue %d: %+v", i, q, h)
			}
		}
	}
}

func TestSendValidation(t *testing.T) {
	fc, _, _ := twoGroups(t, 1)
	c := newTestClient(t, fc.Addr())
	p := newTestProducer(t, c, WithMaxMessageSize(1000))
	ctx := testCtx(t, 10*time.Second)
	f := func(m *Message, want error) {
		t.Helper()
		if _, err := p.SendSync(ctx, m); !errors.Is(err, want) {
			t.Fatalf("SendSync: %v, want %v", err, want)
		}
		if err := p.SendAsync(ctx, m, func(SendResult, error) { t.Error("callback of a refused message") }); !errors.Is(err, want) {
			t.Fatalf("SendAsync: %v, want %v", err, want)
		}
		if err := p.SendOneway(ctx, m); !errors.Is(err, want) {
			t.Fatalf("SendOneway: %v, want %v", err, want)
		}
	}
	f(&Message{Topic: "bad topic", Body: []byte("x")}, ErrTopicInvalid)
	f(&Message{Topic: "", Body: []byte("x")}, ErrTopicInvalid)
	f(&Message{Topic: "T"}, ErrMessageInvalid)
	f(&Message{Topic: "T", Body: make([]byte, 1001)}, ErrMessageTooLarge)
	f(&Message{Topic: "T", Body: []byte("x"), Tags: string(make([]byte, 70000))}, ErrMessageInvalid)
	f(&Message{Topic: "T", Body: []byte("x"), Properties: map[string]string{"a\x02": "b"}}, ErrMessageInvalid)
	f(&Message{Topic: "Nope", Body: []byte("x")}, ErrTopicNotExist)
	if _, err := p.SendBatchSync(ctx, "T", []Message{{Topic: "U", Body: []byte("x")}}); !errors.Is(err, ErrMessageInvalid) {
		t.Fatal(err)
	}
	if _, err := p.SendBatchSync(ctx, "T", nil); !errors.Is(err, ErrMessageInvalid) {
		t.Fatal(err)
	}
}

func TestSendBatchSync(t *testing.T) {
	fc, _, _ := twoGroups(t, 1)
	c := newTestClient(t, fc.Addr())
	p := newTestProducer(t, c)
	ctx := testCtx(t, 10*time.Second)
	msgs := make([]Message, 10)
	for i := range msgs {
		msgs[i] = Message{Body: []byte{byte(i)}}
	}
	res, err := p.SendBatchSync(ctx, "T", msgs)
	if err != nil {
		t.Fatal(err)
	}
	if res.Count != 10 || res.QueueOffset != 0 {
		t.Fatalf("%+v", res)
	}
	res2, err := p.SendBatchSync(ctx, "T", msgs[:3])
	if err != nil {
		t.Fatal(err)
	}
	if res2.Count != 3 || res2.BrokerName == res.BrokerName {
		t.Fatalf("second batch %+v after %+v: want the other group", res2, res)
	}
	// Larger than a frame.
	big := []Message{{Body: make([]byte, 3<<20)}, {Body: make([]byte, 3<<20)}}
	p2 := newTestProducer(t, newTestClient(t, fc.Addr(), WithMaxFrameSize(5<<20)), WithMaxMessageSize(4<<20))
	if _, err := p2.SendBatchSync(ctx, "T", big); !errors.Is(err, ErrMessageTooLarge) {
		t.Fatal(err)
	}
}

func TestSendShardingKey(t *testing.T) {
	fc, _, _ := twoGroups(t, 4)
	c := newTestClient(t, fc.Addr())
	p := newTestProducer(t, c)
	ctx := testCtx(t, 10*time.Second)
	where := map[string]MessageQueue{}
	var mu sync.Mutex
	for i := 0; i < 100; i++ {
		key := "user-" + strconv.Itoa(i%7)
		res, err := p.SendSync(ctx, &Message{Topic: "T", ShardingKey: key, Body: []byte("x")})
		if err != nil {
			t.Fatal(err)
		}
		mq := MessageQueue{Topic: "T", BrokerName: res.BrokerName, QueueID: res.QueueID}
		mu.Lock()
		if prev, ok := where[key]; ok && prev != mq {
			t.Fatalf("key %s moved from %v to %v", key, prev, mq)
		}
		where[key] = mq
		mu.Unlock()
		// Async keyed messages land on the same queue as sync ones.
		err = p.SendAsync(ctx, &Message{Topic: "T", ShardingKey: key, Body: []byte("y")}, func(r SendResult, err error) {
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				t.Error(err)
				return
			}
			if got := (MessageQueue{Topic: "T", BrokerName: r.BrokerName, QueueID: r.QueueID}); got != where[key] {
				t.Errorf("async key %s on %v, sync on %v", key, got, where[key])
			}
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	if err := p.Flush(ctx); err != nil {
		t.Fatal(err)
	}
}

func TestSendAsyncBatchesAndOrder(t *testing.T) {
	fc, a, b := twoGroups(t, 3)
	c := newTestClient(t, fc.Addr())
	p := newTestProducer(t, c, WithLinger(20*time.Millisecond), WithMaxBatchBytes(4<<10))
	ctx := testCtx(t, 20*time.Second)
	const n = 3000
	var mu sync.Mutex
	last := map[MessageQueue]int64{}
	lastSeq := map[MessageQueue]int{}
	var done atomic.Int64
	for i := 0; i < n; i++ {
		i := i
		err := p.SendAsync(ctx, &Message{Topic: "T", Body: []byte(fmt.Sprintf("m%05d", i))}, func(r SendResult, err error) {
			if err != nil {
				t.Errorf("message %d: %v", i, err)
				return
			}
			mu.Lock()
			defer mu.Unlock()
			mq := MessageQueue{Topic: "T", BrokerName: r.BrokerName, QueueID: r.QueueID}
			if prev, ok := last[mq]; ok && r.QueueOffset != prev+1 {
				t.Errorf("queue %v: offset %d after %d", mq, r.QueueOffset, prev)
			}
			if prev, ok := lastSeq[mq]; ok && i <= prev {
				t.Errorf("queue %v: callback of message %d after %d", mq, i, prev)
			}
			last[mq], lastSeq[mq] = r.QueueOffset, i
			done.Add(1)
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	if err := p.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if done.Load() != n {
		t.Fatalf("%d callbacks of %d", done.Load(), n)
	}
	sends := a.Sends() + b.Sends()
	if sends >= n/10 {
		t.Fatalf("%d send requests for %d messages: not batched", sends, n)
	}
	if len(last) < 4 {
		t.Fatalf("only %d of 6 queues used", len(last))
	}
	if p.BufferedBytes() != 0 {
		t.Fatalf("buffered %d after Flush", p.BufferedBytes())
	}
}

func TestSendSyncDoesNotLinger(t *testing.T) {
	fc, _, _ := twoGroups(t, 1)
	c := newTestClient(t, fc.Addr())
	p := newTestProducer(t, c, WithLinger(time.Hour))
	ctx := testCtx(t, 10*time.Second)
	start := time.Now()
	if _, err := p.SendSync(ctx, &Message{Topic: "T", Body: []byte("x")}); err != nil {
		t.Fatal(err)
	}
	// An async message with an hour of linger is sent by Flush.
	got := make(chan error, 1)
	if err := p.SendAsync(ctx, &Message{Topic: "T", Body: []byte("y")}, func(_ SendResult, err error) { got <- err }); err != nil {
		t.Fatal(err)
	}
	select {
	case <-got:
		t.Fatal("sent before the linger time")
	case <-time.After(50 * time.Millisecond):
	}
	if err := p.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-got; err != nil {
		t.Fatal(err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Fatalf("took %v", d)
	}
}

func TestSendAsyncLinger(t *testing.T) {
	fc, a, b := twoGroups(t, 1)
	c := newTestClient(t, fc.Addr())
	p := newTestProducer(t, c, WithLinger(30*time.Millisecond))
	ctx := testCtx(t, 10*time.Second)
	got := make(chan time.Time, 3)
	start := time.Now()
	for i := 0; i < 3; i++ {
		if err := p.SendAsync(ctx, &Message{Topic: "T", Body: []byte("x")}, func(_ SendResult, err error) {
			if err != nil {
				t.Error(err)
			}
			got <- time.Now()
		}); err != nil {
			t.Fatal(err)
		}
	}
	for i := 0; i < 3; i++ {
		if d := (<-got).Sub(start); d < 30*time.Millisecond {
			t.Fatalf("callback after %v, before the linger time", d)
		}
	}
	if s := a.Sends() + b.Sends(); s != 1 {
		t.Fatalf("%d requests for 3 lingering messages", s)
	}
}

func TestSendAsyncBufferFull(t *testing.T) {
	fc, a, b := twoGroups(t, 1)
	release := make(chan struct{})
	hold := func(*rpc.Request) (rpc.Reply, fakebroker.Verdict) { <-release; return rpc.Reply{}, fakebroker.Pass }
	a.Control(protocol.CodeSendMessage, hold)
	b.Control(protocol.CodeSendMessage, hold)
	c := newTestClient(t, fc.Addr())
	p := newTestProducer(t, c, WithBufferBytes(1000), WithLinger(0), WithSendTimeout(10*time.Second))
	ctx := testCtx(t, 10*time.Second)
	body := make([]byte, 400-protocol.MessageOverhead)
	var answered atomic.Int32
	cb := func(_ SendResult, err error) {
		if err != nil {
			t.Error(err)
		}
		answered.Add(1)
	}
	for i := 0; i < 2; i++ {
		if err := p.SendAsync(ctx, &Message{Topic: "T", Body: body}, cb); err != nil {
			t.Fatal(err)
		}
	}
	if p.BufferedBytes() != 800 {
		t.Fatalf("buffered %d", p.BufferedBytes())
	}
	short, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	defer cancel()
	start := time.Now()
	if err := p.SendAsync(short, &Message{Topic: "T", Body: body}, cb); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("SendAsync on a full buffer: %v", err)
	}
	if time.Since(start) < 40*time.Millisecond {
		t.Fatal("did not block")
	}
	// A blocked SendAsync proceeds once space frees.
	errc := make(chan error, 1)
	go func() { errc <- p.SendAsync(ctx, &Message{Topic: "T", Body: body}, cb) }()
	time.Sleep(20 * time.Millisecond)
	close(release)
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
	if err := p.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if answered.Load() != 3 {
		t.Fatalf("%d answered", answered.Load())
	}
}

func TestRetryOnAnotherGroup(t *testing.T) {
	fc, a, b := twoGroups(t, 1)
	busy := func(*rpc.Request) (rpc.Reply, fakebroker.Verdict) {
		return rpc.Errorf(protocol.StatusSystemBusy, "busy"), fakebroker.Answer
	}
	a.Control(protocol.CodeSendMessage, busy)
	c := newTestClient(t, fc.Addr())
	p := newTestProducer(t, c)
	ctx := testCtx(t, 10*time.Second)
	for i := 0; i < 10; i++ {
		res, err := p.SendSync(ctx, &Message{Topic: "T", Body: []byte("x")})
		if err != nil {
			t.Fatal(err)
		}
		if res.BrokerName != "b" {
			t.Fatalf("%+v", res)
		}
	}
	// After the first failure, "a" is avoided: one busy answer only.
	if n := a.Sends(); n != 1 {
		t.Fatalf("a got %d sends; the fault backoff should avoid it", n)
	}
	// Both busy: a definite failure carrying the status, after 1+2 attempts.
	b.Control(protocol.CodeSendMessage, busy)
	before := a.Sends() + b.Sends()
	_, err := p.SendSync(ctx, &Message{Topic: "T", Body: []byte("x")})
	if !errors.Is(err, ErrSystemBusy) || errors.Is(err, ErrUnknownOutcome) {
		t.Fatalf("%v", err)
	}
	if st, ok := StatusOf(err); !ok || st != protocol.StatusSystemBusy {
		t.Fatal("StatusOf")
	}
	if n := a.Sends() + b.Sends() - before; n != 3 {
		t.Fatalf("%d attempts, want 3", n)
	}
}

// TestRetryKeepsQueueInOneGroup: a retry that can only go back to the same broker group (its
// master failing over) keeps the batch's queue, so the producer's messages in that queue stay in
// order; moving them to another queue of the group could store them after newer ones.
func TestRetryKeepsQueueInOneGroup(t *testing.T) {
	fc := fakebroker.New(t)
	b := fc.AddGroup("a", 0, map[string]int32{"T": 4}).Master()
	var queues []int32
	var mu sync.Mutex
	first := true
	b.Control(protocol.CodeSendMessage, func(req *rpc.Request) (rpc.Reply, fakebroker.Verdict) {
		h, err := protocol.ReadBatchHeader(req.Body)
		if err != nil {
			t.Errorf("batch: %v", err)
		}
		mu.Lock()
		defer mu.Unlock()
		queues = append(queues, h.QueueID)
		if first {
			first = false
			return rpc.Errorf(protocol.StatusSystemBusy, "failing over"), fakebroker.Answer
		}
		return rpc.Reply{}, fakebroker.Pass
	})
	c := newTestClient(t, fc.Addr())
	p := newTestProducer(t, c)
	res, err := p.SendSync(testCtx(t, 10*time.Second), &Message{Topic: "T", Body: []byte("x")})
	if err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(queues) != 2 || queues[0] != queues[1] || res.QueueID != queues[0] {
		t.Fatalf("attempts went to queues %v, stored in %d: want one queue", queues, res.QueueID)
	}
}

func TestNoRetryOnIllegal(t *testing.T) {
	fc, a, b := twoGroups(t, 1)
	illegal := func(*rpc.Request) (rpc.Reply, fakebroker.Verdict) {
		return rpc.Errorf(protocol.StatusMessageIllegal, "no"), fakebroker.Answer
	}
	a.Control(protocol.CodeSendMessage, illegal)
	b.Control(protocol.CodeSendMessage, illegal)
	c := newTestClient(t, fc.Addr())
	p := newTestProducer(t, c)
	_, err := p.SendSync(testCtx(t, 10*time.Second), &Message{Topic: "T", Body: []byte("x")})
	if !errors.Is(err, ErrMessageIllegal) {
		t.Fatal(err)
	}
	if n := a.Sends() + b.Sends(); n != 1 {
		t.Fatalf("%d attempts of a non-retriable failure", n)
	}
}

func TestFollowNotMaster(t *testing.T) {
	fc := fakebroker.New(t)
	old := fc.AddGroup("a", 0, map[string]int32{"T": 1}).Master()
	// The new master of group "a" shares the store; the route does not list it yet.
	newer := old.Group().AddMember(0, false)
	old.Control(protocol.CodeSendMessage, func(*rpc.Request) (rpc.Reply, fakebroker.Verdict) {
		return rpc.Reply{Status: protocol.StatusNotMaster, Remark: "demoted", MasterAddr: newer.Addr()}, fakebroker.Answer
	})
	c := newTestClient(t, fc.Addr())
	p := newTestProducer(t, c)
	res, err := p.SendSync(testCtx(t, 10*time.Second), &Message{Topic: "T", Body: []byte("x")})
	if err != nil {
		t.Fatal(err)
	}
	if res.BrokerAddr != newer.Addr() || res.BrokerName != "a" {
		t.Fatalf("%+v", res)
	}
}

func TestUnknownOutcome(t *testing.T) {
	fc, a, b := twoGroups(t, 1)
	c := newTestClient(t, fc.Addr())
	p := newTestProducer(t, c, WithRetries(5))
	release := make(chan struct{})
	defer close(release)
	slow := func(*rpc.Request) (rpc.Reply, fakebroker.Verdict) { <-release; return rpc.Reply{}, fakebroker.Pass }
	a.Control(protocol.CodeSendMessage, slow)
	b.Control(protocol.CodeSendMessage, slow)
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	_, err := p.SendSync(ctx, &Message{Topic: "T", Body: []byte("x")})
	if !errors.Is(err, ErrUnknownOutcome) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("timeout after the request was written: %v", err)
	}
	if n := a.Sends() + b.Sends(); n != 1 {
		t.Fatalf("an unknown outcome was retried: %d sends", n)
	}

	// Same through the producer's send timeout.
	p2 := newTestProducer(t, c, WithSendTimeout(50*time.Millisecond))
	if _, err := p2.SendSync(context.Background(), &Message{Topic: "T", Body: []byte("x")}); !errors.Is(err, ErrUnknownOutcome) {
		t.Fatalf("send timeout: %v", err)
	}
	// A context with a later deadline does not lift the send timeout.
	start := time.Now()
	if _, err := p2.SendSync(testCtx(t, time.Minute), &Message{Topic: "T", Body: []byte("x")}); !errors.Is(err, ErrUnknownOutcome) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("send timeout under a long ctx: %v", err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Fatalf("the send took %v: the minute-long ctx overrode the 50ms send timeout", d)
	}
	// And asynchronously.
	errc := make(chan error, 1)
	if err := p2.SendAsync(context.Background(), &Message{Topic: "T", Body: []byte("x")}, func(_ SendResult, err error) { errc <- err }); err != nil {
		t.Fatal(err)
	}
	if err := <-errc; !errors.Is(err, ErrUnknownOutcome) {
		t.Fatalf("async send timeout: %v", err)
	}
}

func TestUnknownOutcomeOnConnectionLoss(t *testing.T) {
	fc, a, b := twoGroups(t, 1)
	c := newTestClient(t, fc.Addr())
	p := newTestProducer(t, c)
	// The broker dies while holding the request.
	var once sync.Once
	stopped := make(chan struct{})
	kill := func(*rpc.Request) (rpc.Reply, fakebroker.Verdict) {
		once.Do(func() {
			go func() {
				var wg sync.WaitGroup
				wg.Add(2)
				go func() { defer wg.Done(); a.Stop() }()
				go func() { defer wg.Done(); b.Stop() }()
				wg.Wait()
				close(stopped)
			}()
		})
		time.Sleep(time.Second) // Stop closes this connection meanwhile: no answer is written
		return rpc.Reply{}, fakebroker.Pass
	}
	a.Control(protocol.CodeSendMessage, kill)
	b.Control(protocol.CodeSendMessage, kill)
	_, err := p.SendSync(testCtx(t, 10*time.Second), &Message{Topic: "T", Body: []byte("x")})
	if !errors.Is(err, ErrUnknownOutcome) || !errors.Is(err, rpc.ErrClosed) {
		t.Fatalf("connection lost after the write: %v", err)
	}
	// Now both are down (stopped: their listeners are closed, so no new connection reaches
	// them): the request cannot be written, a definite failure. Wait until the client has seen
	// both servers close their connections: on a loaded machine the close can reach it after
	// the next request was written, which would make that one unknown too.
	<-stopped
	for _, addr := range []string{a.Addr(), b.Addr()} {
		testutil.Eventually(t, "the client sees "+addr+" close its connection", func() bool {
			pc, err := c.pool.slot(addr)
			return err != nil || !isOpen(pc.conn.Load())
		})
	}
	_, err = p.SendSync(testCtx(t, 10*time.Second), &Message{Topic: "T", Body: []byte("x")})
	if err == nil || errors.Is(err, ErrUnknownOutcome) || !errors.Is(err, ErrBrokerUnavailable) {
		t.Fatalf("broker down: %v", err)
	}
}

func TestFlushTimeoutIsUnknown(t *testing.T) {
	fc, a, b := twoGroups(t, 1)
	flush := func(*rpc.Request) (rpc.Reply, fakebroker.Verdict) {
		return rpc.Errorf(protocol.StatusFlushDiskTimeout, "slow disk"), fakebroker.Answer
	}
	a.Control(protocol.CodeSendMessage, flush)
	b.Control(protocol.CodeSendMessage, flush)
	c := newTestClient(t, fc.Addr())
	p := newTestProducer(t, c)
	_, err := p.SendSync(testCtx(t, 10*time.Second), &Message{Topic: "T", Body: []byte("x")})
	if !errors.Is(err, ErrUnknownOutcome) || !errors.Is(err, ErrFlushDiskTimeout) {
		t.Fatal(err)
	}
	if n := a.Sends() + b.Sends(); n != 1 {
		t.Fatalf("%d attempts: a stored batch must not be retried", n)
	}
}

func TestSendOneway(t *testing.T) {
	fc, a, b := twoGroups(t, 1)
	c := newTestClient(t, fc.Addr())
	p := newTestProducer(t, c)
	ctx := testCtx(t, 10*time.Second)
	for i := 0; i < 10; i++ {
		if err := p.SendOneway(ctx, &Message{Topic: "T", Body: []byte("x")}); err != nil {
			t.Fatal(err)
		}
	}
	testutil.Eventually(t, "oneway messages stored", func() bool { return a.Sends()+b.Sends() == 10 })
	b.Stop()
	// A group that cannot be reached is skipped (once the client noticed: a oneway message
	// written to a connection the peer is closing is lost, by design).
	testutil.Eventually(t, "the connection to b closed", func() bool {
		c.pool.mu.RLock()
		pc := c.pool.conns[b.Addr()]
		c.pool.mu.RUnlock()
		return !isOpen(pc.conn.Load())
	})
	for i := 0; i < 4; i++ {
		if err := p.SendOneway(ctx, &Message{Topic: "T", Body: []byte("x")}); err != nil {
			t.Fatal(err)
		}
	}
	testutil.Eventually(t, "oneway messages stored on a", func() bool { return a.Sends()+b.Sends() == 14 })
}

func TestProducerClose(t *testing.T) {
	fc, a, b := twoGroups(t, 1)
	c := newTestClient(t, fc.Addr())
	p, err := NewProducer(c, WithLinger(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	ctx := testCtx(t, 10*time.Second)
	var ok atomic.Int32
	for i := 0; i < 5; i++ {
		if err := p.SendAsync(ctx, &Message{Topic: "T", Body: []byte("x")}, func(_ SendResult, err error) {
			if err == nil {
				ok.Add(1)
			}
		}); err != nil {
			t.Fatal(err)
		}
	}
	// Close flushes despite the linger time.
	if err := p.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if ok.Load() != 5 || a.Sends()+b.Sends() == 0 {
		t.Fatalf("%d of 5 sent by Close", ok.Load())
	}
	if _, err := p.SendSync(ctx, &Message{Topic: "T", Body: []byte("x")}); !errors.Is(err, ErrProducerClosed) {
		t.Fatal(err)
	}
	if err := p.SendAsync(ctx, &Message{Topic: "T", Body: []byte("x")}, nil); !errors.Is(err, ErrProducerClosed) {
		t.Fatal(err)
	}

	// Close giving up: buffered batches get ErrProducerClosed, in-flight ones an unknown outcome.
	release := make(chan struct{})
	hold := func(*rpc.Request) (rpc.Reply, fakebroker.Verdict) { <-release; return rpc.Reply{}, fakebroker.Pass }
	a.Control(protocol.CodeSendMessage, hold)
	b.Control(protocol.CodeSendMessage, hold)
	defer close(release)
	p2, err := NewProducer(c, WithLinger(0), WithSendTimeout(time.Minute), WithMaxInFlightPerBroker(1))
	if err != nil {
		t.Fatal(err)
	}
	var unknown, closed atomic.Int32
	sendsBefore := a.Sends() + b.Sends()
	for i := 0; i < 20; i++ {
		if i == 1 { // the first message alone is in flight, the others buffered behind it
			testutil.Eventually(t, "the first batch in flight", func() bool { return a.Sends()+b.Sends() == sendsBefore+1 })
		}
		if err := p2.SendAsync(ctx, &Message{Topic: "T", Body: []byte("x"), ShardingKey: "k"}, func(_ SendResult, err error) {
			switch {
			case errors.Is(err, ErrUnknownOutcome):
				unknown.Add(1)
			case errors.Is(err, ErrProducerClosed):
				closed.Add(1)
			default:
				t.Errorf("unexpected %v", err)
			}
		}); err != nil {
			t.Fatal(err)
		}
	}
	short, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	defer cancel()
	if err := p2.Close(short); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Close: %v", err)
	}
	if unknown.Load() != 1 || closed.Load() != 19 {
		t.Fatalf("unknown %d closed %d", unknown.Load(), closed.Load())
	}
}

func TestBrokerRestartWhileProducing(t *testing.T) {
	fc := fakebroker.New(t)
	a := fc.AddGroup("a", 0, map[string]int32{"T": 2}).Master()
	c := newTestClient(t, fc.Addr())
	p := newTestProducer(t, c, WithSendTimeout(time.Second))
	ctx := testCtx(t, 20*time.Second)
	var okBefore, okAfter, failed int
	for i := 0; i < 50; i++ {
		if _, err := p.SendSync(ctx, &Message{Topic: "T", Body: []byte("before")}); err != nil {
			t.Fatal(err)
		}
		okBefore++
	}
	a.Restart()
	deadline := time.Now().Add(10 * time.Second)
	for okAfter < 50 {
		if time.Now().After(deadline) {
			t.Fatalf("no recovery: %d ok, %d failed after the restart", okAfter, failed)
		}
		if _, err := p.SendSync(ctx, &Message{Topic: "T", Body: []byte("after")}); err != nil {
			failed++
			time.Sleep(10 * time.Millisecond)
			continue
		}
		okAfter++
	}
	var stored int64
	for q := range int32(2) {
		stored += a.Group().MaxOffset("T", q)
	}
	if stored < int64(okBefore+okAfter) {
		t.Fatalf("stored %d, acknowledged %d", stored, okBefore+okAfter)
	}
}

func TestClientCloseStopsProducersAndConsumers(t *testing.T) {
	fc, _, _ := twoGroups(t, 1)
	c, err := New(context.Background(), WithNameServers(fc.Addr()), WithLogger(testLogger(t)))
	if err != nil {
		t.Fatal(err)
	}
	p, err := NewProducer(c, WithLinger(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	ctx := testCtx(t, 10*time.Second)
	got := make(chan error, 1)
	if err := p.SendAsync(ctx, &Message{Topic: "T", Body: []byte("x")}, func(_ SendResult, err error) { got <- err }); err != nil {
		t.Fatal(err)
	}
	co, err := NewConsumer(c, "G", "T", WithPollTimeout(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	runErr := make(chan error, 1)
	go func() {
		runErr <- co.Run(context.Background(), func(context.Context, []MessageExt) error { return nil })
	}()
	testutil.Eventually(t, "the consumer pulls", func() bool { return len(co.Progress()) > 0 })
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	if err := <-got; !errors.Is(err, ErrProducerClosed) {
		t.Fatalf("buffered message: %v", err)
	}
	<-runErr
	if _, err := p.SendSync(ctx, &Message{Topic: "T", Body: []byte("x")}); !errors.Is(err, ErrProducerClosed) {
		t.Fatal(err)
	}
	if _, err := NewProducer(c); !errors.Is(err, ErrClientClosed) {
		t.Fatal(err)
	}
}

func TestNameServerFailover(t *testing.T) {
	fc, _, _ := twoGroups(t, 1)
	// The first NameServer address refuses connections.
	dead := fakebroker.New(t)
	deadAddr := dead.Addr()
	dead.StopNameServer()
	c := newTestClient(t, deadAddr+";"+fc.Addr())
	p := newTestProducer(t, c)
	if _, err := p.SendSync(testCtx(t, 10*time.Second), &Message{Topic: "T", Body: []byte("x")}); err != nil {
		t.Fatal(err)
	}
	if c.nsFirst.Load() != 1 {
		t.Fatal("the answering NameServer is not remembered")
	}
	// None answers.
	c2 := newTestClient(t, deadAddr)
	if _, err := NewAdmin(c2).ClusterInfo(testCtx(t, 10*time.Second)); !errors.Is(err, ErrNameServerUnavailable) {
		t.Fatal(err)
	}
	if _, err := New(context.Background()); err == nil {
		t.Fatal("New without NameServers")
	}
}

func TestRouteRefresh(t *testing.T) {
	fc := fakebroker.New(t)
	fc.AddGroup("a", 0, map[string]int32{"T": 1})
	c := newTestClient(t, fc.Addr(), WithRouteRefreshInterval(20*time.Millisecond))
	p := newTestProducer(t, c)
	ctx := testCtx(t, 10*time.Second)
	if _, err := p.SendSync(ctx, &Message{Topic: "T", Body: []byte("x")}); err != nil {
		t.Fatal(err)
	}
	fc.AddGroup("b", 0, map[string]int32{"T": 1})
	testutil.Eventually(t, "the new group in the route", func() bool {
		r, err := c.route(ctx, "T")
		return err == nil && len(r.writeQueues) == 2
	})
}

func TestConnPoolBackoff(t *testing.T) {
	pool := newConnPool(rpc.Options{DialTimeout: time.Second}, 50*time.Millisecond, 200*time.Millisecond, livenessConfig{silence: time.Second, probeTimeout: time.Second}, testLogger(t))
	defer pool.close()
	// A closed port.
	fc := fakebroker.New(t)
	addr := fc.Addr()
	fc.StopNameServer()
	ctx := testCtx(t, 10*time.Second)
	if _, err := pool.get(ctx, addr); !errors.Is(err, ErrBrokerUnavailable) {
		t.Fatal(err)
	}
	start := time.Now()
	_, err := pool.get(ctx, addr)
	if !errors.Is(err, ErrBrokerUnavailable) || time.Since(start) > 20*time.Millisecond {
		t.Fatalf("during the backoff: %v after %v", err, time.Since(start))
	}
	time.Sleep(60 * time.Millisecond)
	if _, err := pool.get(ctx, addr); !errors.Is(err, ErrBrokerUnavailable) {
		t.Fatal(err)
	}
	pool.mu.RLock()
	pc := pool.conns[addr]
	pool.mu.RUnlock()
	pc.mu.Lock()
	if pc.backoff != 200*time.Millisecond {
		t.Fatalf("backoff %v after two failures", pc.backoff)
	}
	pc.mu.Unlock()
	pool.close()
	if _, err := pool.get(ctx, addr); !errors.Is(err, ErrClientClosed) {
		t.Fatal(err)
	}
}

func TestSendAsyncRetriesOnAnotherGroup(t *testing.T) {
	fc, a, b := twoGroups(t, 2)
	a.Control(protocol.CodeSendMessage, func(*rpc.Request) (rpc.Reply, fakebroker.Verdict) {
		return rpc.Errorf(protocol.StatusServiceNotAvailable, "not now"), fakebroker.Answer
	})
	c := newTestClient(t, fc.Addr())
	// A long fault backoff: after the first failure every batch goes to b.
	p := newTestProducer(t, c, WithLinger(time.Millisecond), WithFaultBackoff(time.Minute, time.Minute))
	ctx := testCtx(t, 10*time.Second)
	var mu sync.Mutex
	byGroup := map[string]int{}
	for i := 0; i < 200; i++ {
		if err := p.SendAsync(ctx, &Message{Topic: "T", Body: []byte("x")}, func(r SendResult, err error) {
			if err != nil {
				t.Error(err)
				return
			}
			mu.Lock()
			byGroup[r.BrokerName]++
			mu.Unlock()
		}); err != nil {
			t.Fatal(err)
		}
		if i%10 == 9 { // seal batches often so the round-robin reaches group a
			if err := p.Flush(ctx); err != nil {
				t.Fatal(err)
			}
		}
	}
	if byGroup["b"] != 200 || a.Sends() == 0 {
		t.Fatalf("stored %v; a refused %d", byGroup, a.Sends())
	}
	// The retargeted batches carry b's queue ids and sequences, with valid CRCs (the fake
	// validates every batch).
	for q := range int32(2) {
		var seq int32
		for _, raw := range b.Group().Batches("T", q) {
			h, _, err := protocol.ValidateBatch(raw, protocol.BatchLimits{})
			if err != nil || h.QueueID != q || h.BaseSequence != seq {
				t.Fatalf("queue %d: %+v %v (want sequence %d)", q, h, err, seq)
			}
			seq += h.Count
		}
	}
}

func TestBrokerMovesAddress(t *testing.T) {
	fc := fakebroker.New(t)
	old := fc.AddGroup("a", 0, map[string]int32{"T": 1}).Master()
	c := newTestClient(t, fc.Addr())
	p := newTestProducer(t, c)
	ctx := testCtx(t, 10*time.Second)
	if _, err := p.SendSync(ctx, &Message{Topic: "T", Body: []byte("x")}); err != nil {
		t.Fatal(err)
	}
	// The group's master comes back on another port with the same data.
	old.Stop()
	moved := old.Group().AddMember(0, true)
	testutil.Eventually(t, "a send to the moved broker", func() bool {
		res, err := p.SendSync(ctx, &Message{Topic: "T", Body: []byte("y")})
		return err == nil && res.BrokerAddr == moved.Addr()
	})
	// Consumers follow too.
	col := newCollector(t)
	stop := runConsumer(t, newTestConsumer(t, c, "G", "T"), col.handle)
	testutil.Eventually(t, "consumed from the moved broker", func() bool { return col.count() >= 2 })
	_ = stop()
}

// connTo returns the client's open connection to addr, or nil.
func connTo(c *Client, addr string) *rpc.Conn {
	c.pool.mu.RLock()
	pc := c.pool.conns[addr]
	c.pool.mu.RUnlock()
	if pc == nil {
		return nil
	}
	if conn := pc.conn.Load(); isOpen(conn) {
		return conn
	}
	return nil
}

// TestBackoffIsOneEventPerFailure: when every request in flight to a group fails together (its
// master failing over answers them all), the group's backoff is that of one failure event, not
// doubled per request: the group is used again after the base backoff.
func TestBackoffIsOneEventPerFailure(t *testing.T) {
	fc, a, _ := twoGroups(t, 1)
	release := make(chan struct{})
	var failing atomic.Bool
	failing.Store(true)
	a.Control(protocol.CodeSendMessage, func(*rpc.Request) (rpc.Reply, fakebroker.Verdict) {
		<-release
		if failing.Load() {
			return rpc.Errorf(protocol.StatusSystemBusy, "failing over"), fakebroker.Answer
		}
		return rpc.Reply{}, fakebroker.Pass
	})
	c := newTestClient(t, fc.Addr())
	// Twenty failures doubling a 100 ms backoff would reach the minute.
	p := newTestProducer(t, c, WithFaultBackoff(100*time.Millisecond, time.Minute))
	ctx := testCtx(t, 20*time.Second)
	const n = 40 // the round-robin sends half of them to a
	var wg sync.WaitGroup
	for range n {
		wg.Go(func() {
			res, err := p.SendSync(ctx, &Message{Topic: "T", Body: []byte("x")})
			if err != nil || res.BrokerName != "b" {
				t.Errorf("send: %+v %v (want a retry on b)", res, err)
			}
		})
	}
	testutil.Eventually(t, "20 sends in flight to a", func() bool {
		conn := connTo(c, a.Addr())
		return conn != nil && conn.Waiting() == n/2
	})
	close(release)
	wg.Wait()
	if a.Sends() != n/2 {
		t.Fatalf("a received %d sends, want %d (retries go to b)", a.Sends(), n/2)
	}
	failing.Store(false)
	testutil.Eventually(t, "a send stored on a again", func() bool {
		res, err := p.SendSync(ctx, &Message{Topic: "T", Body: []byte("x")})
		if err != nil {
			t.Fatal(err)
		}
		return res.BrokerName == "a"
	})
}

// failOnce makes one unkeyed send fail on b (answered SYSTEM_BUSY, retried on the other group)
// so that b's group is in fault backoff.
func failOnce(t *testing.T, p *Producer, b *fakebroker.Broker) {
	t.Helper()
	ctx := testCtx(t, 10*time.Second)
	remove := b.Control(protocol.CodeSendMessage, fakebroker.Refuse(protocol.StatusSystemBusy, "failing"))
	for b.Sends() == 0 {
		if _, err := p.SendSync(ctx, &Message{Topic: "T", Body: []byte("x")}); err != nil {
			t.Fatal(err)
		}
	}
	remove()
}

// TestNewMasterInRouteEndsBackoff: a group avoided after its master failed is used again as soon
// as the route names another master, not when the backoff ends; while the group is avoided the
// route is refreshed without waiting for the periodic refresh (30 s here).
func TestNewMasterInRouteEndsBackoff(t *testing.T) {
	fc, a, _ := twoGroups(t, 1)
	c := newTestClient(t, fc.Addr())
	p := newTestProducer(t, c, WithFaultBackoff(time.Hour, time.Hour))
	failOnce(t, p, a)
	// The group's new master shares its store; the old one leaves the route.
	newer := a.Group().AddMember(0, true)
	fc.SetRegistered(a, false)
	ctx := testCtx(t, 20*time.Second)
	testutil.Eventually(t, "a send stored by a's new master", func() bool {
		res, err := p.SendSync(ctx, &Message{Topic: "T", Body: []byte("x")})
		if err != nil {
			t.Fatal(err)
		}
		return res.BrokerAddr == newer.Addr()
	})
}

// TestNotMasterPointerEndsBackoff: a NOT_MASTER answer naming a new master ends the group's
// backoff at once, before the route names it and before a send to it succeeded.
func TestNotMasterPointerEndsBackoff(t *testing.T) {
	fc, a, _ := twoGroups(t, 1)
	// The fake serves a connection's requests one at a time: holding one, it answers no probe.
	c := newTestClient(t, fc.Addr(), WithLivenessProbe(0, 0))
	p := newTestProducer(t, c, WithFaultBackoff(time.Hour, time.Hour))
	failOnce(t, p, a)
	// The new master (not in the route yet) holds the first send it gets.
	newer := a.Group().AddMember(0, false)
	release := make(chan struct{})
	newer.Control(protocol.CodeSendMessage, fakebroker.Hold(release))
	a.Control(protocol.CodeSendMessage, fakebroker.NotMaster(newer.Addr()))
	ctx := testCtx(t, 20*time.Second)
	var wg sync.WaitGroup
	defer wg.Wait()
	defer close(release)
	key := ""
	for i := 0; key == ""; i++ {
		if k := "k" + strconv.Itoa(i); shardIndex(k, 2) == 0 { // queue a#0
			key = k
		}
	}
	wg.Go(func() {
		if res, err := p.SendSync(ctx, &Message{Topic: "T", ShardingKey: key, Body: []byte("x")}); err != nil || res.BrokerAddr != newer.Addr() {
			t.Errorf("keyed send: %+v %v", res, err)
		}
	})
	testutil.Eventually(t, "the keyed send at the new master", func() bool { return newer.Sends() == 1 })
	before := a.Sends()
	for range 2 { // the round-robin gives one of two sends to a, unless a is avoided
		wg.Go(func() {
			if _, err := p.SendSync(ctx, &Message{Topic: "T", Body: []byte("y")}); err != nil {
				t.Error(err)
			}
		})
	}
	testutil.Eventually(t, "an unkeyed send to group a", func() bool { return a.Sends() > before })
}

// storedSequences returns the base sequences of the batches stored in a queue, in stored order,
// checking that each carries the producer's id.
func storedSequences(t *testing.T, b *fakebroker.Broker, topic string, queueID int32, producer int64) []int32 {
	t.Helper()
	var seqs []int32
	for _, raw := range b.Group().Batches(topic, queueID) {
		h, _, err := protocol.ValidateBatch(raw, protocol.BatchLimits{})
		if err != nil || h.ProducerID != producer {
			t.Fatalf("stored batch %+v: %v", h, err)
		}
		seqs = append(seqs, h.BaseSequence)
	}
	return seqs
}

// TestSequenceOrderIsWriteOrder: two sends to one queue cannot take their sequences in one
// order and write their frames in the other. The first send pauses once it has its sequence,
// until the second send has started and either waits for it (taking a sequence and queuing the
// frame are one step) or, were they two, has written its frame with the next sequence; the
// broker then stores them in sequence order.
func TestSequenceOrderIsWriteOrder(t *testing.T) {
	fc := fakebroker.New(t)
	a := fc.AddGroup("a", 0, map[string]int32{"T": 1}).Master()
	c := newTestClient(t, fc.Addr())
	p := newTestProducer(t, c)
	ctx := testCtx(t, 10*time.Second)
	if _, err := p.SendSync(ctx, &Message{Topic: "T", Body: []byte("0")}); err != nil {
		t.Fatal(err)
	}
	entered, secondStarted := make(chan struct{}), make(chan struct{})
	p.testHookSequenced = func(_ MessageQueue, seq int32) {
		if seq != 1 {
			return
		}
		close(entered)
		<-secondStarted
		// The second send's frame cannot be awaited when it rightly waits for this one: give
		// it a moment to get ahead, were it able to.
		for start := time.Now(); a.Sends() < 3 && time.Since(start) < 200*time.Millisecond; {
			time.Sleep(time.Millisecond)
		}
	}
	var wg sync.WaitGroup
	results := make([]SendResult, 2)
	wg.Go(func() {
		var err error
		if results[0], err = p.SendSync(ctx, &Message{Topic: "T", Body: []byte("1")}); err != nil {
			t.Error(err)
		}
	})
	<-entered
	wg.Go(func() {
		close(secondStarted)
		var err error
		if results[1], err = p.SendSync(ctx, &Message{Topic: "T", Body: []byte("2")}); err != nil {
			t.Error(err)
		}
	})
	wg.Wait()
	if got := storedSequences(t, a, "T", 0, p.ID()); !slices.Equal(got, []int32{0, 1, 2}) {
		t.Fatalf("stored sequences %v, want [0 1 2]", got)
	}
	if results[0].QueueOffset != 1 || results[1].QueueOffset != 2 {
		t.Fatalf("results %+v", results)
	}
}

// TestSequenceOrderUnderConcurrency: many SendSync callers and the asynchronous sender on the
// same queues; every queue stores the producer's batches in increasing sequence order.
func TestSequenceOrderUnderConcurrency(t *testing.T) {
	fc, a, b := twoGroups(t, 2)
	c := newTestClient(t, fc.Addr())
	p := newTestProducer(t, c, WithLinger(0))
	ctx := testCtx(t, 30*time.Second)
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			for i := range 50 {
				m := &Message{Topic: "T", Body: []byte(strconv.Itoa(g*1000 + i))}
				if g%2 == 0 {
					if _, err := p.SendSync(ctx, m); err != nil {
						t.Error(err)
						return
					}
				} else if err := p.SendAsync(ctx, m, nil); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	if err := p.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	for _, br := range []*fakebroker.Broker{a, b} {
		for q := range int32(2) {
			seqs := storedSequences(t, br, "T", q, p.ID())
			if !slices.IsSorted(seqs) || len(slices.Compact(slices.Clone(seqs))) != len(seqs) {
				t.Fatalf("%s queue %d: sequences %v not increasing", br.Name(), q, seqs)
			}
		}
	}
}

// TestMasterlessGroupRefreshesSoon: a route fetched while a group had no master (its old master
// left the route before the new one registered) is refreshed within moments, not at the next
// periodic refresh, so the producer sends to the group again as soon as its master registers.
func TestMasterlessGroupRefreshesSoon(t *testing.T) {
	fc := fakebroker.New(t)
	a := fc.AddGroup("a", 1, map[string]int32{"T": 2}).Members()
	fc.AddGroup("b", 0, map[string]int32{"T": 2})
	fc.SetRegistered(a[0], false) // group a: only its slave registered
	c := newTestClient(t, fc.Addr(), WithRouteRefreshInterval(time.Hour))
	p := newTestProducer(t, c)
	ctx := testCtx(t, 20*time.Second)
	if _, err := p.SendSync(ctx, &Message{Topic: "T", Body: []byte("x")}); err != nil {
		t.Fatal(err)
	}
	fc.SetRegistered(a[0], true) // the master registers
	testutil.Eventually(t, "a send to group a's master", func() bool {
		res, err := p.SendSync(ctx, &Message{Topic: "T", Body: []byte("y")})
		if err != nil {
			t.Fatal(err)
		}
		return res.BrokerName == "a"
	})
}

// TestUnreachableMasterBackIsDetected: a group whose master stops answering (a stopped process,
// a partition dropping packets) is avoided once the liveness probe finds its connection dead,
// and probed in the background: once the master answers again the producer sends to it at
// once, without waiting for its backoff (an hour here) to run out.
func TestUnreachableMasterBackIsDetected(t *testing.T) {
	fc, a, _ := twoGroups(t, 2)
	c := newTestClient(t, fc.Addr(), WithLivenessProbe(20*time.Millisecond, 50*time.Millisecond))
	p := newTestProducer(t, c, WithFaultBackoff(time.Hour, time.Hour))
	ctx := testCtx(t, 30*time.Second)
	release := a.Hang()
	testutil.Eventually(t, "a send to a's hung master with an unknown outcome", func() bool {
		_, err := p.SendSync(ctx, &Message{Topic: "T", Body: []byte("x")})
		return errors.Is(err, ErrUnknownOutcome)
	})
	if p.fault.available("a", a.Addr(), time.Now()) {
		t.Fatal("group a is not avoided")
	}
	release()
	testutil.Eventually(t, "a send stored on a again", func() bool {
		res, err := p.SendSync(ctx, &Message{Topic: "T", Body: []byte("y")})
		return err == nil && res.BrokerName == "a"
	})
}

// TestGroupBackInTheRouteIsUsedSoon: a group whose members were all down left the route; the
// producer, which saw it before, refreshes the route every second while it is missing, so it
// sends to the group again moments after its brokers register, not at the next periodic refresh.
func TestGroupBackInTheRouteIsUsedSoon(t *testing.T) {
	fc, _, b := twoGroups(t, 2)
	c := newTestClient(t, fc.Addr(), WithRouteRefreshInterval(time.Hour))
	p := newTestProducer(t, c)
	ctx := testCtx(t, 30*time.Second)
	testutil.Eventually(t, "a send stored on b", func() bool {
		res, err := p.SendSync(ctx, &Message{Topic: "T", Body: []byte("x")})
		return err == nil && res.BrokerName == "b"
	})
	b.Stop()
	testutil.Eventually(t, "b gone from the producer's route", func() bool {
		_, _ = p.SendSync(ctx, &Message{Topic: "T", Body: []byte("y")})
		r, err := c.route(ctx, "T")
		return err == nil && r.groups["b"] == nil
	})
	b.Start()
	testutil.Eventually(t, "a send stored on b again", func() bool {
		res, err := p.SendSync(ctx, &Message{Topic: "T", Body: []byte("z")})
		return err == nil && res.BrokerName == "b"
	})
}
