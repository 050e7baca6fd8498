package bench

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/petrel-mq/petrel/client"
	"github.com/petrel-mq/petrel/internal/fakebroker"
)

// coMsg builds the delivery of message seq of producer 0 of run 1 at offset off of queue q.
func coMsg(q QueueRef, off int64, seq uint64) Delivery {
	return Delivery{Queue: q, Offset: off, ID: Identity{Run: 1, Seq: seq, CRC: 0xabc}, BodyCRC: 0xabc}
}

func TestConsumeChecker(t *testing.T) {
	qa := QueueRef{Topic: "t", Broker: "a", QueueID: 0}
	qb := QueueRef{Topic: "t", Broker: "b", QueueID: 1}
	bounds := []queueBound{{q: qa, min: 10, max: 15}, {q: qb, min: 0, max: 3}}
	// f checks one delivery sequence: the counts, and that the problems mention each of want.
	f := func(name string, ds []Delivery, want consumeOnlyCounts, problems ...string) {
		t.Helper()
		k, err := newConsumeChecker(bounds)
		if err != nil {
			t.Fatal(err)
		}
		k.consumed(ds)
		got, probs := k.finish()
		want.Expected = 8
		if got != want {
			t.Errorf("%s: counts %+v, want %+v; problems %q", name, got, want, probs)
		}
		if got.OK() != (len(problems) == 0) {
			t.Errorf("%s: OK %v with problems %q", name, got.OK(), probs)
		}
		for _, p := range problems {
			if !slices.ContainsFunc(probs, func(s string) bool { return strings.Contains(s, p) }) {
				t.Errorf("%s: no problem mentions %q: %q", name, p, probs)
			}
		}
	}
	clean := []Delivery{coMsg(qa, 10, 0), coMsg(qa, 11, 1), coMsg(qa, 12, 2), coMsg(qa, 13, 3), coMsg(qa, 14, 4), coMsg(qb, 0, 5), coMsg(qb, 1, 6), coMsg(qb, 2, 7)}
	f("clean", clean, consumeOnlyCounts{Consumed: 8, Distinct: 8})
	f("newer messages are outside the ranges", append(slices.Clone(clean), coMsg(qa, 15, 8), coMsg(QueueRef{Topic: "t", Broker: "c"}, 0, 9)),
		consumeOnlyCounts{Consumed: 10, Distinct: 8, Outside: 2})

	gap := slices.Delete(slices.Clone(clean), 1, 3) // offsets 11 and 12 of qa
	gap = slices.Delete(gap, 4, 5)                  // offset 1 of qb
	f("gaps", gap, consumeOnlyCounts{Consumed: 5, Distinct: 5, Gaps: 3}, "t@a#0: 2 of offsets [10, 15) never consumed: 11..12", "t@b#1: 1 of offsets [0, 3) never consumed: 1")

	dupOffset := append(slices.Clone(clean[:3]), clean[2]) // offset 12 delivered twice
	dupOffset = append(dupOffset, clean[3:]...)
	f("offset twice", dupOffset, consumeOnlyCounts{Consumed: 9, Distinct: 8, Duplicated: 1}, "t@a#0 offset 12 delivered again")

	storedTwice := slices.Clone(clean)
	storedTwice[6] = coMsg(qb, 1, 1) // message 1 of the producer stored again, at another position
	f("stored twice", storedTwice, consumeOnlyCounts{Consumed: 8, Distinct: 8, Duplicated: 1}, "message 1 attempt 0 stored again, at t@b#1 offset 1")
	resent := slices.Clone(clean)
	resent[6] = coMsg(qb, 1, 1)
	resent[6].ID.Attempt = 1 // a resend after an unknown outcome is another attempt: fine
	f("resend", resent, consumeOnlyCounts{Consumed: 8, Distinct: 8})

	swapped := slices.Clone(clean)
	swapped[1], swapped[2] = swapped[2], swapped[1] // offsets 12, 11
	f("offsets swapped", swapped, consumeOnlyCounts{Consumed: 8, Distinct: 8, Reordered: 2}, "t@a#0 offset 11 after offset 12", "message 1 after message 2")
	seqBack := slices.Clone(clean)
	seqBack[3].ID.Seq, seqBack[4].ID.Seq = 4, 3 // the producer's sequence goes backwards in a queue
	f("sequence backwards", seqBack, consumeOnlyCounts{Consumed: 8, Distinct: 8, Reordered: 1}, "message 3 after message 4")
	// With a client producer id, the producer's per-queue Sequence gives the order: message 0
	// retried on qa after messages 1 to 4 had gone there is in order...
	withSeqs := func(ds []Delivery, seqs ...int32) []Delivery {
		ds = slices.Clone(ds)
		for i := range ds {
			ds[i].ProducerID, ds[i].Sequence = 77, seqs[i]
		}
		return ds
	}
	retried := slices.Clone(clean)
	retried[0].ID.Seq, retried[1].ID.Seq, retried[2].ID.Seq, retried[3].ID.Seq, retried[4].ID.Seq = 1, 2, 3, 4, 0
	f("cross-group retry", withSeqs(retried, 0, 1, 2, 3, 4, 0, 1, 2), consumeOnlyCounts{Consumed: 8, Distinct: 8})
	// ... and a Sequence going backwards is reordered, whatever the bench numbers say.
	f("producer sequence backwards", withSeqs(clean, 0, 1, 3, 2, 4, 0, 1, 2), consumeOnlyCounts{Consumed: 8, Distinct: 8, Reordered: 1},
		"t@a#0 offset 13: run 1 producer 0 message 3 (sequence 2 in the queue) after message 2 (sequence 3)")

	corrupt := slices.Clone(clean)
	corrupt[0].BodyCRC = 0xdef
	f("corrupted", corrupt, consumeOnlyCounts{Consumed: 8, Distinct: 8, Corrupted: 1}, "body crc 00000def, its identity says 00000abc")
	// A message without a bench identity (not written by the bench) is foreign: its offset
	// counts, nothing else is checked.
	foreign := slices.Clone(clean)
	foreign[5].IDErr, foreign[5].ID, foreign[5].BodyCRC = errNoIdentity, Identity{}, 0x123
	f("foreign", foreign, consumeOnlyCounts{Consumed: 8, Distinct: 8, Foreign: 1})

	// remaining and passed drive the end of the run.
	k, _ := newConsumeChecker(bounds)
	if n, passed := k.remaining(); n != 8 || passed {
		t.Errorf("at the start: remaining %d passed %v", n, passed)
	}
	k.consumed(gap)
	if n, passed := k.remaining(); n != 3 || !passed {
		t.Errorf("past the gaps: remaining %d passed %v", n, passed)
	}
	k.consumed([]Delivery{coMsg(qa, 11, 1), coMsg(qa, 12, 2), coMsg(qb, 1, 6)})
	if n, _ := k.remaining(); n != 0 {
		t.Errorf("after the gaps were filled: remaining %d", n)
	}
	// Empty queues expect nothing and are passed at once.
	k, _ = newConsumeChecker([]queueBound{{q: qa, min: 4, max: 4}})
	if n, passed := k.remaining(); n != 0 || !passed {
		t.Errorf("empty queue: remaining %d passed %v", n, passed)
	}
	if _, err := newConsumeChecker([]queueBound{{q: qa, min: 5, max: 4}}); err == nil {
		t.Error("max below min accepted")
	}
	if _, err := newConsumeChecker([]queueBound{{q: qa}, {q: qa}}); err == nil {
		t.Error("a queue listed twice accepted")
	}
}

func TestCoQueueGaps(t *testing.T) {
	q := &coQueue{min: 100, max: 300, seen: make([]uint64, 4)}
	for i := range 200 {
		if i != 0 && (i < 64 || i > 70) && i != 150 && i != 199 {
			q.seen[i/64] |= 1 << (i % 64)
		}
	}
	got, more := q.gaps(10)
	if want := []string{"100", "164..170", "250", "299"}; !slices.Equal(got, want) || more {
		t.Errorf("gaps %q more %v, want %q", got, more, want)
	}
	if got, more := q.gaps(2); len(got) != 2 || !more {
		t.Errorf("first 2 gaps %q more %v", got, more)
	}
}

// produceFake runs a verified workload against fb, leaving its messages in the fake group's
// queues, and returns the topic id.
func produceFake(t *testing.T, fb *fakeBench) string {
	t.Helper()
	res, _ := runFake(t, t.Context(), Config{
		WorkloadFile: writeWorkload(t, fmt.Sprintf(fakeWorkload, 3000)),
		Duration:     200 * time.Millisecond,
		Warmup:       0,
		Verify:       true,
		TopicID:      "co",
	}, fb)
	if !res.OK() || res.MessagesAcked == 0 {
		t.Fatalf("producing run: ok %v acked %d", res.OK(), res.MessagesAcked)
	}
	return "co"
}

func TestRunFakeConsumeOnly(t *testing.T) {
	fb := newFakeBench(t, 0, nil)
	id := produceFake(t, fb)
	stored := 0
	for _, topic := range []string{"petrel-bench-co-0", "petrel-bench-co-1"} {
		for q := range int32(3) {
			stored += int(fb.g.MaxOffset(topic, q))
		}
	}

	// The workload gives the topic count (2); every stored message is consumed once.
	res, out := runFake(t, t.Context(), Config{ConsumeOnly: true, TopicID: id, WorkloadFile: writeWorkload(t, fmt.Sprintf(fakeWorkload, 1))}, fb)
	if !res.OK() || !res.Verified || !res.Drained || res.Mode != "consume-only" || res.ExpectedMessages != int64(stored) || res.MessagesConsumed != int64(stored) ||
		res.Topics != 2 || res.Partitions != 3 || len(res.ServedBy) != 1 {
		t.Fatalf("%s; expected %d consumed %d of %d stored; problems %q", countsOf(res), res.ExpectedMessages, res.MessagesConsumed, stored, res.Problems)
	}
	for _, want := range []string{"consume-only: topics [petrel-bench-co-0 petrel-bench-co-1], 6 queue(s) holding", "messages          expected=",
		"gaps=0 duplicated=0 reordered=0 corrupted=0 offsetMovedBack=0 " + consumeOnlyVerdictNote + "\n"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q", want)
		}
	}
	if strings.Contains(out, "publish latency") {
		t.Error("a consume-only summary shows publish latencies")
	}
	if strings.Contains(out, "lost=") || strings.Contains(out, "phantom=") {
		t.Error("a consume-only summary claims lost or phantom counts it cannot know")
	}

	// Damage the stored topic: a gap, a message stored twice (at a new offset), a corrupted body.
	var gapAt int64
	fb.g.EditQueue("petrel-bench-co-0", 0, func(q0 []fakebroker.StoredMessage) []fakebroker.StoredMessage {
		gapAt = q0[5].QueueOffset
		return slices.Delete(q0, 5, 6)
	})
	fb.g.EditQueue("petrel-bench-co-0", 1, func(q1 []fakebroker.StoredMessage) []fakebroker.StoredMessage {
		dup := q1[3]
		dup.QueueOffset = q1[len(q1)-1].QueueOffset + 1
		q1 = append(q1, dup)
		q1[7].Body[0] ^= 1
		return q1
	})
	res, out = runFake(t, t.Context(), Config{ConsumeOnly: true, Topics: []string{"petrel-bench-co-0"}}, fb)
	if res.OK() || res.Gaps != 1 || res.Lost != 0 || res.Duplicated != 1 || res.Corrupted != 1 || res.Reordered != 0 || res.Drained {
		t.Fatalf("%s; problems %q", countsOf(res), res.Problems)
	}
	for _, want := range []string{fmt.Sprintf("never consumed: %d", gapAt), "stored again", "body crc", "consume-only      incomplete", "verification      FAIL",
		"gaps=1 duplicated=1 reordered=0 corrupted=1 offsetMovedBack=0 " + consumeOnlyVerdictNote + "\n"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q", want)
		}
	}
}

// TestRunFakeConsumeOnlyEnds: a run missing messages that never come gives up after the drain
// timeout (or the duration) instead of waiting for ever, and an empty topic fails.
func TestRunFakeConsumeOnlyEnds(t *testing.T) {
	fb := newFakeBench(t, 0, nil)
	id := produceFake(t, fb)
	// The last message of a queue is gone: the consumers never pass its max offset, which the
	// queue bounds still give as it was.
	cl, err := fb.driver(t.Context(), -1)
	if err != nil {
		t.Fatal(err)
	}
	bounds, err := cl.queueBounds(t.Context(), "petrel-bench-co-1")
	_ = cl.close()
	if err != nil {
		t.Fatal(err)
	}
	fb.g.EditQueue("petrel-bench-co-1", 2, func(q []fakebroker.StoredMessage) []fakebroker.StoredMessage { return q[:len(q)-1] })
	fb.bounds = map[string][]queueBound{"petrel-bench-co-1": bounds}
	start := time.Now()
	res, out := runFake(t, t.Context(), Config{ConsumeOnly: true, TopicID: id, Topics: []string{"petrel-bench-co-1"}, DrainTimeout: 300 * time.Millisecond}, fb)
	if res.OK() || res.Gaps != 1 || !strings.Contains(out, "nothing new for 300ms with 1 message(s) missing") || time.Since(start) > 5*time.Second {
		t.Fatalf("%s after %v", countsOf(res), time.Since(start))
	}
	res, out = runFake(t, t.Context(), Config{ConsumeOnly: true, Topics: []string{"petrel-bench-co-1"}, Duration: 200 * time.Millisecond}, fb)
	if res.OK() || res.Gaps != 1 || !strings.Contains(out, "stopped after 200ms with 1 message(s) missing") {
		t.Fatalf("%s", countsOf(res))
	}

	fb.bounds = nil
	fb.g.CreateTopic("empty", 2)
	res, _ = runFake(t, t.Context(), Config{ConsumeOnly: true, Topics: []string{"empty"}}, fb)
	if res.OK() || len(res.Problems) == 0 || !strings.Contains(res.Problems[0], "hold no message") {
		t.Fatalf("empty topic: ok %v problems %q", res.OK(), res.Problems)
	}
	_, err = Run(t.Context(), Config{ConsumeOnly: true, Topics: []string{"nosuch"}, NameServers: fb.fc.Addr(), Logger: testLogger(t)})
	if !errors.Is(err, client.ErrTopicNotExist) {
		t.Fatalf("missing topic: %v", err)
	}
}
