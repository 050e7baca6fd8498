package client

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/petrel-mq/petrel/internal/fakebroker"
	"github.com/petrel-mq/petrel/internal/testutil"
	"github.com/petrel-mq/petrel/protocol"
	"github.com/petrel-mq/petrel/protocol/rpc"
)

// sendHeaders records the request headers of the SEND_MESSAGE requests a fake broker received.
type sendHeaders struct {
	mu       sync.Mutex
	traced   map[uint64]int // TraceHeader.ID -> requests carrying it
	untraced int            // requests without a header
	bad      []string       // headers that are not a TraceHeader
}

func recordSendHeaders(b *fakebroker.Broker) *sendHeaders {
	l := &sendHeaders{traced: map[uint64]int{}}
	b.Control(protocol.CodeSendMessage, func(req *rpc.Request) (rpc.Reply, fakebroker.Verdict) {
		l.mu.Lock()
		defer l.mu.Unlock()
		if len(req.Header) == 0 {
			l.untraced++
			return rpc.Reply{}, fakebroker.Pass
		}
		var h protocol.TraceHeader
		if err := h.ReadFrom(req.Header); err != nil {
			l.bad = append(l.bad, fmt.Sprintf("%x: %v", req.Header, err))
		} else {
			l.traced[h.ID]++
		}
		return rpc.Reply{}, fakebroker.Pass
	})
	return l
}

func (l *sendHeaders) snapshot() (traced map[uint64]int, untraced int, bad []string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	traced = make(map[uint64]int, len(l.traced))
	for k, v := range l.traced {
		traced[k] = v
	}
	return traced, l.untraced, append([]string(nil), l.bad...)
}

// checkStamps fails unless the client stamps of st are set and in the order a batch passes them.
func checkStamps(t *testing.T, st SendTraceClient) {
	t.Helper()
	stamps := []int64{st.Created, st.Sealed, st.Taken, st.Written, st.Received, st.Done}
	names := []string{"Created", "Sealed", "Taken", "Written", "Received", "Done"}
	for i, v := range stamps {
		if v == 0 {
			t.Errorf("trace %#x: %s is 0: %+v", st.ID, names[i], st)
			return
		}
		if i > 0 && v < stamps[i-1] {
			t.Errorf("trace %#x: %s %d before %s %d: %+v", st.ID, names[i], v, names[i-1], stamps[i-1], st)
		}
	}
}

// checkSample checks what the broker saw against what the observer got: every traced batch's
// header reached the broker once, with its ID, and no other request carried a header; and
// about one in every of n batches was traced, spread over more than one queue.
func checkSample(t *testing.T, l *sendHeaders, obs []SendTraceClient, n, every int) {
	t.Helper()
	traced, untraced, bad := l.snapshot()
	if len(bad) > 0 {
		t.Fatalf("headers that are not a TraceHeader: %v", bad)
	}
	queues := map[int32]bool{}
	for _, st := range obs {
		if traced[st.ID] != 1 {
			t.Errorf("trace %#x reached the broker %d times, want once", st.ID, traced[st.ID])
		}
		queues[st.QueueID] = true
	}
	if len(traced) != len(obs) || untraced != n-len(obs) {
		t.Errorf("broker saw %d traced and %d untraced sends; the observer got %d traces of %d batches", len(traced), untraced, len(obs), n)
	}
	// Binomial(n, 1/every): the bounds are more than 5 standard deviations from the mean.
	if lo, hi := n/every/2, n/every*3/2; len(obs) < lo || len(obs) > hi {
		t.Errorf("%d of %d batches traced with WithTraceEvery(%d), want %d..%d", len(obs), n, every, lo, hi)
	}
	if every > 1 && len(queues) < 2 {
		t.Errorf("the traced batches all went to queues %v: the draw fell in step with the round-robin", queues)
	}
}

// TestTraceEverySyncSends: with WithTraceEvery(4), about a quarter of the synchronous sends
// carry a TraceHeader that the broker sees, the others none; the observer gets each traced
// send once, before the send returns, with its result and ordered stamps.
func TestTraceEverySyncSends(t *testing.T) {
	fc := fakebroker.New(t)
	g := fc.AddGroup("a", 0, map[string]int32{"T": 4})
	l := recordSendHeaders(g.Master())
	c := newTestClient(t, fc.Addr())
	var obs []SendTraceClient // appended on the sending goroutine
	p := newTestProducer(t, c, WithTraceEvery(4), WithSendTraceObserver(func(st SendTraceClient) { obs = append(obs, st) }))
	ctx := testCtx(t, 30*time.Second)
	const n = 400
	for i := range n {
		before := len(obs)
		var res SendResult
		var err error
		if i%2 == 0 {
			res, err = p.SendSync(ctx, &Message{Topic: "T", Body: []byte("x")})
		} else {
			res, err = p.SendBatchSync(ctx, "T", []Message{{Body: []byte("y")}, {Body: []byte("z")}})
		}
		if err != nil {
			t.Fatal(err)
		}
		switch len(obs) - before {
		case 0:
		case 1:
			st := obs[before]
			checkStamps(t, st)
			if st.Sealed != st.Taken {
				t.Errorf("a synchronous send's Taken %d is not its Sealed %d", st.Taken, st.Sealed)
			}
			if st.Err != nil || st.Topic != "T" || st.QueueID != res.QueueID || st.BaseQueueOffset != res.QueueOffset || st.Count != res.Count {
				t.Errorf("trace %+v of the send answered %+v", st, res)
			}
		default:
			t.Fatalf("one send observed %d times", len(obs)-before)
		}
	}
	checkSample(t, l, obs, n, 4)
}

// TestTraceEveryAsyncBatches: asynchronous batches are sampled as synchronous sends are; the
// observer runs once per traced batch, with its queue, base offset and count, before any
// callback of its messages, and its stamps are ordered.
func TestTraceEveryAsyncBatches(t *testing.T) {
	for _, tc := range []struct {
		name     string
		every, n int
		opts     []ProducerOption
	}{
		// A batch per message (a message is larger than the batch cap): n batches.
		{"batch per message", 3, 300, []ProducerOption{WithMaxBatchBytes(1)}},
		// Every batch traced, batches of several messages.
		{"every batch", 1, 600, []ProducerOption{WithLinger(5 * time.Millisecond)}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fc := fakebroker.New(t)
			g := fc.AddGroup("a", 0, map[string]int32{"T": 4})
			l := recordSendHeaders(g.Master())
			c := newTestClient(t, fc.Addr())
			type event struct {
				seq         int
				base, count int64
			}
			var mu sync.Mutex
			seq := 0
			var obs []SendTraceClient
			observed := map[int32][]event{} // queue -> traced batches
			called := map[int32]map[int64]int{}
			opts := append([]ProducerOption{WithTraceEvery(tc.every), WithSendTraceObserver(func(st SendTraceClient) {
				mu.Lock()
				defer mu.Unlock()
				seq++
				obs = append(obs, st)
				observed[st.QueueID] = append(observed[st.QueueID], event{seq, st.BaseQueueOffset, int64(st.Count)})
			})}, tc.opts...)
			p := newTestProducer(t, c, opts...)
			ctx := testCtx(t, 30*time.Second)
			for i := range tc.n {
				if err := p.SendAsync(ctx, &Message{Topic: "T", Body: fmt.Appendf(nil, "m%d", i)}, func(res SendResult, err error) {
					mu.Lock()
					defer mu.Unlock()
					if err != nil {
						t.Errorf("send %d: %v", i, err)
						return
					}
					seq++
					if called[res.QueueID] == nil {
						called[res.QueueID] = map[int64]int{}
					}
					called[res.QueueID][res.QueueOffset] = seq
				}); err != nil {
					t.Fatal(err)
				}
			}
			if err := p.Flush(ctx); err != nil {
				t.Fatal(err)
			}
			mu.Lock() // Flush has waited for every observer and callback; the lock is for the reader
			messages := 0
			for _, st := range obs {
				checkStamps(t, st)
				if st.Err != nil || st.Topic != "T" || st.Count < 1 {
					t.Errorf("trace %+v", st)
				}
				messages += int(st.Count)
			}
			for q, evs := range observed {
				for _, ev := range evs {
					for off := ev.base; off < ev.base+ev.count; off++ {
						if s, ok := called[q][off]; !ok || s < ev.seq {
							t.Errorf("queue %d offset %d: callback at %d (called %v), its batch observed at %d", q, off, s, ok, ev.seq)
						}
					}
				}
			}
			batches := len(obs)
			if tc.every == 1 {
				if messages != tc.n {
					t.Errorf("the traces count %d messages, %d were sent", messages, tc.n)
				}
				if batches == tc.n {
					t.Logf("no batch held more than one message")
				}
			} else {
				batches = tc.n
				if messages != len(obs) {
					t.Errorf("batches of one message: the traces count %d messages in %d batches", messages, len(obs))
				}
			}
			mu.Unlock()
			checkSample(t, l, obs, batches, tc.every)
		})
	}
}

// TestUntracedSendsCarryNoHeader: a producer without WithTraceEvery sends no request header, as
// before tracing, and an observer alone is never called.
func TestUntracedSendsCarryNoHeader(t *testing.T) {
	fc := fakebroker.New(t)
	g := fc.AddGroup("a", 0, map[string]int32{"T": 4})
	l := recordSendHeaders(g.Master())
	c := newTestClient(t, fc.Addr())
	calls := 0
	p := newTestProducer(t, c, WithSendTraceObserver(func(SendTraceClient) { calls++ }))
	ctx := testCtx(t, 30*time.Second)
	for range 50 {
		if _, err := p.SendSync(ctx, &Message{Topic: "T", Body: []byte("x")}); err != nil {
			t.Fatal(err)
		}
	}
	for range 50 {
		if err := p.SendAsync(ctx, &Message{Topic: "T", Body: []byte("y")}, nil); err != nil {
			t.Fatal(err)
		}
	}
	if err := p.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	traced, untraced, bad := l.snapshot()
	if len(traced) != 0 || len(bad) != 0 || untraced < 51 {
		t.Errorf("broker saw %d traced sends, headers %v, %d untraced; want none traced", len(traced), bad, untraced)
	}
	if calls != 0 {
		t.Errorf("observer called %d times without WithTraceEvery", calls)
	}
}

// TestTraceDrawAllocs guards the cost of the draw: an untraced batch, asynchronous (draw) or
// synchronous (start), allocates nothing.
func TestTraceDrawAllocs(t *testing.T) {
	for _, every := range []int{0, 1 << 62} {
		tr := newSendTracer(every, nil)
		if n := testing.AllocsPerRun(100, func() {
			if _, ok := tr.draw(); ok {
				panic("traced")
			}
			if tr.start() != nil {
				panic("traced")
			}
		}); n != 0 {
			t.Errorf("WithTraceEvery(%d): an untraced draw allocates %.1f times", every, n)
		}
	}
}

// TestPullObserver: the pull observer gets, for every pull that delivered messages and before
// the handler sees them, the offsets delivered and when the pull was sent and answered.
func TestPullObserver(t *testing.T) {
	fc := fakebroker.New(t)
	fc.AddGroup("a", 0, map[string]int32{"T": 1})
	pc := newTestClient(t, fc.Addr())
	p := newTestProducer(t, pc)
	ctx := testCtx(t, 30*time.Second)
	const batches, per = 10, 10
	for i := range batches {
		msgs := make([]Message, per)
		for j := range msgs {
			msgs[j].Body = fmt.Appendf(nil, "m%d-%d", i, j)
		}
		if _, err := p.SendBatchSync(ctx, "T", msgs); err != nil {
			t.Fatal(err)
		}
	}

	c := newTestClient(t, fc.Addr())
	var mu sync.Mutex
	var timings []PullTiming
	delivered := 0
	co := newTestConsumer(t, c, "G", "T", WithPullMaxMessages(25), WithPullObserver(func(pt PullTiming) {
		mu.Lock()
		defer mu.Unlock()
		timings = append(timings, pt)
	}))
	runConsumer(t, co, func(_ context.Context, msgs []MessageExt) error {
		now := time.Now().UnixNano()
		mu.Lock()
		defer mu.Unlock()
		if len(timings) == 0 {
			t.Errorf("messages from %d delivered before any pull was observed", msgs[0].QueueOffset)
			return nil
		}
		last := timings[len(timings)-1]
		if msgs[0].QueueOffset != last.From || msgs[len(msgs)-1].QueueOffset >= last.Next || now < last.Received {
			t.Errorf("handler got offsets %d..%d at %d; the last pull observed: %+v", msgs[0].QueueOffset, msgs[len(msgs)-1].QueueOffset, now, last)
		}
		delivered += len(msgs)
		return nil
	})
	testutil.Eventually(t, "everything consumed", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return delivered >= batches*per
	})
	mu.Lock()
	defer mu.Unlock()
	if len(timings) < 2 {
		t.Fatalf("%d pulls observed, want several (25 messages a pull)", len(timings))
	}
	next := int64(0)
	for _, pt := range timings {
		if pt.Topic != "T" || pt.QueueID != 0 || pt.BrokerID != 0 || pt.From != next || pt.Next <= pt.From ||
			pt.Sent == 0 || pt.Received < pt.Sent {
			t.Errorf("pull %+v (expected from %d)", pt, next)
		}
		next = pt.Next
	}
	if next != batches*per {
		t.Errorf("the pulls observed end at %d, want %d", next, batches*per)
	}
}

// TestAdminSendTraces: SendTraces asks for the traces from its sequence number on and decodes
// the broker's table; a broker without the request answers REQUEST_CODE_NOT_SUPPORTED, which
// the error matches.
func TestAdminSendTraces(t *testing.T) {
	fc := fakebroker.New(t)
	b := fc.AddGroup("a", 0, map[string]int32{"T": 1}).Master()
	admin := NewAdmin(newTestClient(t, fc.Addr()))
	ctx := testCtx(t, 10*time.Second)

	_, err := admin.SendTraces(ctx, b.Addr(), 0)
	if s, ok := StatusOf(err); !ok || s != protocol.StatusRequestCodeNotSupported || !errors.Is(err, protocol.StatusRequestCodeNotSupported) {
		t.Fatalf("against a broker without it: %v (status %v %v), want REQUEST_CODE_NOT_SUPPORTED", err, s, ok)
	}

	want := protocol.SendTraceTable{Next: 9, Dropped: 2, Traces: []protocol.SendTrace{{
		ID: 1<<32 | 5, Topic: "T", QueueID: 0, BaseQueueOffset: 40, Count: 3,
		Stamps: [protocol.TraceStamps]int64{10, 11, 12, 13, 0, 15},
		Slaves: []protocol.TraceSlave{{BrokerID: 1, Served: 14, Acked: 16}},
	}}}
	var asked atomic.Uint64 // the fake broker's serving goroutine stores it
	b.Control(protocol.CodeGetSendTraces, func(req *rpc.Request) (rpc.Reply, fakebroker.Verdict) {
		var h protocol.GetSendTracesRequest
		if err := h.ReadFrom(req.Header); err != nil {
			return rpc.Errorf(protocol.StatusRequestMalformed, "%v", err), fakebroker.Answer
		}
		asked.Store(h.From)
		return rpc.Reply{Body: want.AppendTo(nil)}, fakebroker.Answer
	})
	got, err := admin.SendTraces(ctx, b.Addr(), 7)
	if err != nil {
		t.Fatal(err)
	}
	if asked.Load() != 7 || !reflect.DeepEqual(*got, want) {
		t.Errorf("asked from %d, got %+v; want from 7, %+v", asked.Load(), *got, want)
	}
}
