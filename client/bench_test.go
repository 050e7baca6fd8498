package client

import (
	"context"
	"fmt"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/petrel-mq/petrel/internal/fakebroker"
	"github.com/petrel-mq/petrel/protocol"
)

// Sink keeps benchmark results alive so the compiler cannot drop the work.
var Sink int

func benchMessage(size int) *Message {
	return &Message{Topic: "BenchTopic", Keys: "order-42", Tags: "TagA", Body: make([]byte, size)}
}

// encodeForSend is exactly what SendSync does to a message before handing it to the connection:
// encode it as a batch of one, then, under the queue's sequence lock (startSend), stamp queue
// and sequence and compute the CRC.
func encodeForSend(p *Producer, dst []byte, m *Message, mq MessageQueue) []byte {
	dst, err := p.encodeOne(dst[:0], m, mq, 1700000000000)
	if err != nil {
		panic(err)
	}
	s := p.queueSeq(mq)
	s.mu.Lock()
	stampBatch(dst, mq.QueueID, s.next)
	s.next++
	s.mu.Unlock()
	return dst
}

func newBenchProducer() *Producer {
	return &Producer{id: 1, cfg: defaultProducerConfig(), seqs: map[MessageQueue]*queueSeq{}}
}

// TestSendPathAllocs guards the send path's encoding: no allocation once buffers are warm.
func TestSendPathAllocs(t *testing.T) {
	p := newBenchProducer()
	mq := MessageQueue{Topic: "BenchTopic", BrokerName: "a", QueueID: 3}
	m := benchMessage(1024)
	buf := make([]byte, 0, 4096)
	if n := testing.AllocsPerRun(100, func() { buf = encodeForSend(p, buf, m, mq) }); n != 0 {
		t.Fatalf("encoding a message allocates %.1f times", n)
	}
	m.Properties = map[string]string{"a": "1", "b": "2"}
	if n := testing.AllocsPerRun(100, func() { buf = encodeForSend(p, buf, m, mq) }); n != 0 {
		t.Fatalf("encoding a message with properties allocates %.1f times", n)
	}
	if _, _, err := protocol.ValidateBatch(buf, protocol.BatchLimits{}); err != nil {
		t.Fatal(err)
	}
}

// TestDecodeAllocs guards the consumer's decoding: no allocation once the slice has grown.
func TestDecodeAllocs(t *testing.T) {
	body, co := benchPullBody(10, 100)
	msgs := make([]MessageExt, 0, 1000)
	mq := MessageQueue{Topic: "BenchTopic", BrokerName: "a", QueueID: 0}
	if n := testing.AllocsPerRun(50, func() {
		var err error
		msgs, _, err = co.decode(msgs[:0], body, mq, 0, "addr", 0)
		if err != nil || len(msgs) != 1000 {
			panic(err)
		}
	}); n != 0 {
		t.Fatalf("decoding allocates %.1f times", n)
	}
}

func BenchmarkEncodeSendBatch(b *testing.B) {
	for _, size := range []int{100, 1024, 16 << 10} {
		b.Run("size="+itoaBench(size), func(b *testing.B) {
			p := newBenchProducer()
			mq := MessageQueue{Topic: "BenchTopic", BrokerName: "a", QueueID: 3}
			m := benchMessage(size)
			buf := make([]byte, 0, size+256)
			b.ReportAllocs()
			b.SetBytes(int64(size))
			for b.Loop() {
				buf = encodeForSend(p, buf, m, mq)
			}
			Sink = len(buf)
		})
	}
}

// BenchmarkSendSync measures a whole SendSync against the in-process fake broker over loopback.
// allocs/op includes the fake broker's own allocations (rpc.Server, the stored copy).
func BenchmarkSendSync(b *testing.B) {
	fc := fakebroker.New(b)
	fc.AddGroup("a", 0, map[string]int32{"BenchTopic": 4})
	c := newTestClient(b, fc.Addr())
	p, err := NewProducer(c)
	if err != nil {
		b.Fatal(err)
	}
	defer p.Close(context.Background())
	m := benchMessage(1024)
	ctx := context.Background()
	if _, err := p.SendSync(ctx, m); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	b.SetBytes(1024)
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if _, err := p.SendSync(ctx, m); err != nil {
				b.Error(err)
				return
			}
		}
	})
}

// BenchmarkSendAsync measures batched asynchronous sends against the fake broker.
func BenchmarkSendAsync(b *testing.B) {
	fc := fakebroker.New(b)
	fc.AddGroup("a", 0, map[string]int32{"BenchTopic": 4})
	c := newTestClient(b, fc.Addr())
	p, err := NewProducer(c, WithLinger(time.Millisecond))
	if err != nil {
		b.Fatal(err)
	}
	defer p.Close(context.Background())
	m := benchMessage(1024)
	ctx := context.Background()
	b.ReportAllocs()
	b.SetBytes(1024)
	for b.Loop() {
		if err := p.SendAsync(ctx, m, nil); err != nil {
			b.Fatal(err)
		}
	}
	if err := p.Flush(ctx); err != nil {
		b.Fatal(err)
	}
}

// benchPullBody builds a pull response body of batches batches of n 1 KiB messages.
func benchPullBody(batches, n int) ([]byte, *Consumer) {
	p := newBenchProducer()
	var body []byte
	m := benchMessage(1024)
	for i := 0; i < batches; i++ {
		b := protocol.AppendBatchHeader(nil, "BenchTopic", 0, 1, int32(i*n))
		for j := 0; j < n; j++ {
			var err error
			if b, err = p.appendMessage(b, m, 1700000000000); err != nil {
				panic(err)
			}
		}
		protocol.FinishBatch(b, 0)
		protocol.StampBatch(b, int64(len(body)), int64(i*n), 1700000000001, 0)
		body = append(body, b...)
	}
	co := &Consumer{c: &Client{cfg: defaultClientConfig()}, topic: "BenchTopic"}
	return body, co
}

func BenchmarkConsumerDecode(b *testing.B) {
	body, co := benchPullBody(10, 100)
	msgs := make([]MessageExt, 0, 1000)
	mq := MessageQueue{Topic: "BenchTopic", BrokerName: "a", QueueID: 0}
	b.ReportAllocs()
	b.SetBytes(int64(len(body)))
	for b.Loop() {
		var err error
		msgs, _, err = co.decode(msgs[:0], body, mq, 0, "addr", 0)
		if err != nil {
			b.Fatal(err)
		}
	}
	Sink = len(msgs)
}

func itoaBench(n int) string {
	switch {
	case n >= 1<<10 && n%(1<<10) == 0:
		return strconv.Itoa(n>>10) + "KiB"
	}
	return strconv.Itoa(n) + "B"
}

// TestPickQueueAllocs guards the queue choice of unkeyed sends, a group in fault backoff
// included: no allocation.
func TestPickQueueAllocs(t *testing.T) {
	p := newBenchProducer()
	p.c = &Client{routes: map[string]*routeSlot{}, refreshKick: make(chan struct{}, 1), now: time.Now}
	p.fault = newFaultTracker(time.Hour, time.Hour)
	p.rr = map[string]*atomic.Uint32{}
	route := testRoute()
	now := time.Now()
	p.fault.failed("a", route.masterAddr("a"), now, now, false)
	roomy := func(MessageQueue) bool { return true }
	if n := testing.AllocsPerRun(100, func() {
		if mq, _, err := p.pickQueue(route, "", ""); err != nil || mq.BrokerName != "b" {
			panic(fmt.Sprint(mq, err))
		}
		if mq := p.pickUnkeyed(route, "b", roomy); mq.BrokerName != "a" {
			panic(mq)
		}
	}); n != 0 {
		t.Fatalf("picking a queue allocates %.1f times", n)
	}
}
