package client

import (
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/petrel-mq/petrel/internal/testutil"
)

// fixedRate sends at a fixed rate until stop is closed: every tick one asynchronous message,
// to the topics in turn, and every tenth tick one synchronous send to the first topic, on a
// goroutine of its own (so that sends held by a hung broker do not slow the others down). It
// counts the messages acknowledged by group "a", the unknown outcomes and the other failures.
type fixedRate struct {
	topics                             []string
	asyncOnA, syncOnA, unknown, failed atomic.Int64
}

func (f *fixedRate) count(r SendResult, err error) {
	switch {
	case err == nil && r.BrokerName == "a":
		f.asyncOnA.Add(1)
	case errors.Is(err, ErrUnknownOutcome):
		f.unknown.Add(1)
	case err != nil:
		f.failed.Add(1)
	}
}

func (f *fixedRate) run(t *testing.T, p *Producer, stop chan struct{}, wg *sync.WaitGroup) {
	ctx := testCtx(t, time.Minute)
	body := make([]byte, 100)
	wg.Go(func() {
		tick := time.NewTicker(time.Millisecond)
		defer tick.Stop()
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			case <-tick.C:
			}
			if err := p.SendAsync(ctx, &Message{Topic: f.topics[i%len(f.topics)], Body: body}, f.count); err != nil {
				t.Error(err)
				return
			}
			if i%10 == 0 {
				wg.Go(func() {
					r, err := p.SendSync(ctx, &Message{Topic: f.topics[0], Body: body})
					if err == nil && r.BrokerName == "a" {
						f.syncOnA.Add(1)
						return
					}
					if err != nil && !errors.Is(err, ErrUnknownOutcome) {
						t.Errorf("synchronous send: %v", err)
					}
				})
			}
		}
	})
}

// TestHungGroupKeepsHealthyGroupsRate: while the master of group b accepts connections and
// answers nothing (and no probe or timeout has ended its requests yet), a producer sending at a
// fixed rate keeps sending to group a: b's queues hold a bounded share of the producer's buffer,
// so SendAsync never blocks on buffer space held by b, and synchronous sends to a are not held
// up by those waiting on b. The producer sends to two topics, whose queues share the buffer.
func TestHungGroupKeepsHealthyGroupsRate(t *testing.T) {
	fc, a, b := twoGroups(t, 4)
	a.Group().CreateTopic("U", 4)
	b.Group().CreateTopic("U", 4)
	release := b.Hang()
	// No probes, long timeouts: b's requests stay unanswered for the whole test.
	c := newTestClient(t, fc.Addr(), WithLivenessProbe(0, 0))
	const buffer = 32 << 10
	p := newTestProducer(t, c, WithBufferBytes(buffer), WithLinger(time.Millisecond), WithSendTimeout(time.Minute))
	f := fixedRate{topics: []string{"T", "U"}}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	defer wg.Wait()
	defer release()
	defer close(stop)
	f.run(t, p, stop, &wg)
	// Buffered on b's queues, a message of 100 bytes takes about 150 bytes of the 32 KiB: a
	// producer whose buffer b could fill would stall after a few hundred messages.
	testutil.Eventually(t, "1000 asynchronous and 50 synchronous messages stored on a", func() bool {
		return f.asyncOnA.Load() >= 1000 && f.syncOnA.Load() >= 50
	})
	if b.Received() == 0 {
		t.Fatal("b received nothing: the test did not test a hung group")
	}
	if stored := b.Group().StoredBatches(); stored != 0 || f.unknown.Load() != 0 || f.failed.Load() != 0 {
		t.Fatalf("b stored %d batches, %d unknown outcomes, %d failures: b's requests were answered", stored, f.unknown.Load(), f.failed.Load())
	}
	if n := p.BufferedBytes(); n > buffer {
		t.Fatalf("buffered %d bytes, more than the buffer", n)
	}
}

// TestHungGroupsBacklogMovesAfterLiveness: once the liveness probe has closed the connection of
// a hung master (its requests ending as unknown outcomes, one fault event for the group), the
// batches queued behind them for the group's queues go to the healthy group without trying the
// failed group again: the hung broker gets no further batch (only the fault detector's probes),
// and the group's backoff stays that of one event.
func TestHungGroupsBacklogMovesAfterLiveness(t *testing.T) {
	fc, _, b := twoGroups(t, 4)
	release := b.Hang()
	c := newTestClient(t, fc.Addr(), WithLivenessProbe(20*time.Millisecond, 50*time.Millisecond))
	p := newTestProducer(t, c, WithLinger(time.Millisecond), WithSendTimeout(time.Minute), WithFaultBackoff(time.Hour, time.Hour))
	f := fixedRate{topics: []string{"T"}}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	defer wg.Wait()
	defer release()
	defer close(stop)
	f.run(t, p, stop, &wg)
	testutil.Eventually(t, "b's requests ended as unknown outcomes", func() bool { return f.unknown.Load() > 0 })
	after := f.asyncOnA.Load()
	testutil.Eventually(t, "1000 more messages stored on a", func() bool { return f.asyncOnA.Load() >= after+1000 })
	// A hung fake broker reads only the first request of a connection: the first batch, then
	// only the fault detector's probes (each on a connection of its own, as the one before was
	// found dead).
	if n := b.ReceivedSends(); n != 1 {
		t.Fatalf("b received %d batches, want 1: batches queued for it were sent to it again after it failed", n)
	}
	if f.failed.Load() != 0 {
		t.Fatalf("%d definite failures", f.failed.Load())
	}
	p.fault.mu.RLock()
	it := p.fault.items["b"]
	events := 0
	if it != nil {
		events = it.events
	}
	p.fault.mu.RUnlock()
	if events != 1 {
		t.Fatalf("%d fault events for b, want 1", events)
	}
}

// TestStuckQueueDoesNotTakeEveryMessage: with the default buffer, a queue of a hung group whose
// sender waits for an answer that does not come never seals its open batch, so a producer that
// stayed on it until the batch was sealed sent every new message of the topic there, and the
// healthy group got nothing until the hung connection was found dead. The choice of queue ends
// with the linger time: the healthy group keeps getting its share.
func TestStuckQueueDoesNotTakeEveryMessage(t *testing.T) {
	fc, _, b := twoGroups(t, 4)
	release := b.Hang()
	c := newTestClient(t, fc.Addr(), WithLivenessProbe(0, 0))
	p := newTestProducer(t, c, WithLinger(time.Millisecond), WithSendTimeout(time.Minute))
	ctx := testCtx(t, time.Minute)
	defer release()
	var onA atomic.Int64
	body := make([]byte, 100)
	const n = 2000
	for range n {
		if err := p.SendAsync(ctx, &Message{Topic: "T", Body: body}, func(r SendResult, err error) {
			if err == nil && r.BrokerName == "a" {
				onA.Add(1)
			}
		}); err != nil {
			t.Fatal(err)
		}
		time.Sleep(100 * time.Microsecond) // a few messages per linger time
	}
	// Round-robin over eight queues, four of them a's: about half the messages belong to a.
	testutil.Eventually(t, "a quarter of the messages stored on a", func() bool { return onA.Load() >= n/4 })
}
