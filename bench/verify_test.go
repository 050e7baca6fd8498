package bench

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
)

const testRun = 0xabc

var (
	qA = QueueRef{Topic: "t0", Broker: "broker-a", QueueID: 0}
	qB = QueueRef{Topic: "t0", Broker: "broker-a", QueueID: 1}
	qC = QueueRef{Topic: "t1", Broker: "broker-a", QueueID: 0} // another topic
)

// A step is one event of a verifier script. Producers are registered on topic t0 first (ids 0,
// 1, ...) unless the script adds others.
type step func(t *testing.T, v *Verifier)

func bodyOf(p uint32, seq uint64) []byte { return fmt.Appendf(nil, "body of %d/%d", p, seq) }

func sent(p uint32, seqs ...uint64) step {
	return func(t *testing.T, v *Verifier) {
		for _, s := range seqs {
			b := bodyOf(p, s)
			v.Sent(p, s, bodyCRC(b), len(b))
		}
	}
}

// ack acknowledges attempt 0 of seq at q, offset.
func ack(p uint32, seq uint64, q QueueRef, off int64) step {
	return ackAttempt(p, seq, 0, q, off)
}

func ackAttempt(p uint32, seq uint64, attempt uint8, q QueueRef, off int64) step {
	return func(t *testing.T, v *Verifier) { v.Acked(p, seq, attempt, q, off) }
}

// sentAcked registers and acknowledges seqs at consecutive offsets of q from off.
func sentAcked(p uint32, q QueueRef, off int64, seqs ...uint64) step {
	return func(t *testing.T, v *Verifier) {
		for i, s := range seqs {
			sent(p, s)(t, v)
			ack(p, s, q, off+int64(i))(t, v)
		}
	}
}

func failed(p uint32, seq uint64, attempt uint8) step {
	return func(t *testing.T, v *Verifier) { v.Failed(p, seq, attempt, false) }
}

func unknown(p uint32, seq uint64, attempt uint8) step {
	return func(t *testing.T, v *Verifier) { v.Failed(p, seq, attempt, true) }
}

func abandoned(p uint32, seq uint64) step {
	return func(t *testing.T, v *Verifier) { v.Abandoned(p, seq) }
}

func resend(p uint32, seq uint64, wantAttempt uint8, wantOK bool) step {
	return func(t *testing.T, v *Verifier) {
		t.Helper()
		a, ok := v.Resend(p, seq)
		if ok != wantOK || (ok && a != wantAttempt) {
			t.Fatalf("Resend(%d, %d) = %d, %v; want %d, %v", p, seq, a, ok, wantAttempt, wantOK)
		}
	}
}

// delivery builds the delivery of attempt of (p, seq) at q, off with its true body. The client
// producer id is p+1 and its Sequence the offset: a producer's messages in a queue come in the
// order they were sent unless a test says otherwise (withSeq).
func delivery(p uint32, seq uint64, attempt uint8, q QueueRef, off int64) Delivery {
	b := bodyOf(p, seq)
	return Delivery{
		Queue: q, Offset: off,
		ID:      Identity{Run: testRun, Producer: p, Seq: seq, Attempt: attempt, CRC: bodyCRC(b), SentMicros: 1},
		BodyCRC: bodyCRC(b), BodySize: len(b),
		ProducerID: int64(p) + 1, Sequence: int32(off),
	}
}

// withSeq sets the client producer's Sequence of a delivery.
func withSeq(d Delivery, seq int32) Delivery {
	d.Sequence = seq
	return d
}

// withoutProducerID makes a delivery as the NATS driver's, whose messages carry no client
// producer id.
func withoutProducerID(d Delivery) Delivery {
	d.ProducerID, d.Sequence = 0, 0
	return d
}

// finalRead reads queue q on member (0: the master) for the final read: its min offset, the
// offset the read starts at, the messages found, and where it ended (err: why it stopped).
func finalRead(member int64, q QueueRef, min, from, end int64, err error, ds ...Delivery) step {
	return func(t *testing.T, v *Verifier) {
		fr := v.StartFinalRead(member, q)
		fr.Bounds(min, from)
		fr.Read(ds)
		fr.Done(end, err)
	}
}

// foreignAt is message n of another run found at q, off.
func foreignAt(q QueueRef, off int64, n uint64) Delivery {
	return Delivery{Queue: q, Offset: off, ID: Identity{Run: 99, Seq: n}, BodyCRC: 7, BodySize: 3, ProducerID: 99, Sequence: int32(n)}
}

func consume(sub int, ds ...Delivery) step {
	return func(t *testing.T, v *Verifier) { v.Consumed(sub, ds) }
}

// got is a delivery of attempt 0.
func got(p uint32, seq uint64, q QueueRef, off int64) Delivery { return delivery(p, seq, 0, q, off) }

func withBody(d Delivery, body string) Delivery {
	d.BodyCRC, d.BodySize = bodyCRC([]byte(body)), len(body)
	return d
}

func checkOutstanding(want int64) step {
	return func(t *testing.T, v *Verifier) {
		t.Helper()
		if got := v.Outstanding(); got != want {
			t.Fatalf("Outstanding() = %d, want %d", got, want)
		}
	}
}

func TestVerifier(t *testing.T) {
	tests := []struct {
		name      string
		subs      int
		producers []string // topics; default one producer on t0
		steps     []step
		want      VerifyCounts
		problem   string // a substring of some problem, when one is expected
	}{
		{
			name:  "clean: every message once, in order",
			steps: []step{sentAcked(0, qA, 0, 0, 1, 2), consume(0, got(0, 0, qA, 0), got(0, 1, qA, 1), got(0, 2, qA, 2))},
			want:  VerifyCounts{Sent: 3, Acked: 3, Delivered: 3},
		},
		{
			name: "clean across queues, interleaved",
			steps: []step{
				sent(0, 0, 1, 2, 3), ack(0, 0, qA, 0), ack(0, 1, qB, 0), ack(0, 2, qA, 1), ack(0, 3, qB, 1),
				consume(0, got(0, 1, qB, 0)), consume(0, got(0, 0, qA, 0), got(0, 2, qA, 1)), consume(0, got(0, 3, qB, 1)),
			},
			want: VerifyCounts{Sent: 4, Acked: 4, Delivered: 4},
		},
		{
			name:    "lost: acknowledged, never consumed",
			steps:   []step{sentAcked(0, qA, 0, 0, 1, 2), consume(0, got(0, 0, qA, 0), got(0, 2, qA, 2))},
			want:    VerifyCounts{Sent: 3, Acked: 3, Delivered: 2, Lost: 1},
			problem: "lost: producer 0 message 1 acknowledged at t0@broker-a#0 offset 1",
		},
		{
			name:    "lost on one subscription only",
			subs:    2,
			steps:   []step{sentAcked(0, qA, 0, 0, 1), consume(0, got(0, 0, qA, 0), got(0, 1, qA, 1)), consume(1, got(0, 0, qA, 0))},
			want:    VerifyCounts{Sent: 2, Acked: 2, Delivered: 3, Lost: 1},
			problem: "not consumed by subscription 1",
		},
		{
			name:  "each subscription gets its copy: not a duplicate",
			subs:  2,
			steps: []step{sentAcked(0, qA, 0, 0), consume(0, got(0, 0, qA, 0)), consume(1, got(0, 0, qA, 0))},
			want:  VerifyCounts{Sent: 1, Acked: 1, Delivered: 2},
		},
		{
			name:    "duplicated: same attempt consumed twice",
			steps:   []step{sentAcked(0, qA, 0, 0, 1), consume(0, got(0, 0, qA, 0), got(0, 1, qA, 1)), consume(0, got(0, 1, qA, 1))},
			want:    VerifyCounts{Sent: 2, Acked: 2, Delivered: 3, Duplicated: 1},
			problem: "duplicated: producer 0 message 1 attempt 0",
		},
		{
			name: "duplicated redelivery of a range is not also reordered",
			steps: []step{
				sentAcked(0, qA, 0, 0, 1, 2, 3),
				consume(0, got(0, 0, qA, 0), got(0, 1, qA, 1), got(0, 2, qA, 2)),
				consume(0, got(0, 1, qA, 1), got(0, 2, qA, 2), got(0, 3, qA, 3)),
			},
			want: VerifyCounts{Sent: 4, Acked: 4, Delivered: 6, Duplicated: 2},
		},
		{
			name:    "reordered: queue offset goes backwards",
			steps:   []step{sentAcked(0, qA, 0, 0, 1), consume(0, got(0, 1, qA, 1), got(0, 0, qA, 0))},
			want:    VerifyCounts{Sent: 2, Acked: 2, Delivered: 2, Reordered: 1}, // the offset: the producer's order is not told from a stream going back
			problem: "reordered: subscription 0 t0@broker-a#0 offset 0 after offset 1",
		},
		{
			name: "reordered: a producer's Sequence goes backwards among acknowledged messages in a queue",
			steps: []step{
				// The producer sent message 1 to the queue before message 0 (Sequence 0, then
				// 1), but the broker stored message 0 (Sequence 1) first.
				sentAcked(0, qA, 0, 0, 1),
				consume(0, withSeq(got(0, 0, qA, 0), 1), withSeq(got(0, 1, qA, 1), 0)),
			},
			want:    VerifyCounts{Sent: 2, Acked: 2, Delivered: 2, Reordered: 1},
			problem: "reordered: subscription 0 t0@broker-a#0 offset 1: producer 0 message 1 (sequence 0 in the queue) after message 0 (sequence 1)",
		},
		{
			name: "a cross-group retry behind newer messages of its producer is in order",
			steps: []step{
				// Message 0 failed on another group and was retried on qA after messages 1 and 2
				// had gone there: the producer sent it to qA third (Sequence 2).
				sent(0, 0, 1, 2), ack(0, 1, qA, 0), ack(0, 2, qA, 1), ack(0, 0, qA, 2),
				consume(0, got(0, 1, qA, 0), got(0, 2, qA, 1), got(0, 0, qA, 2)),
				finalRead(0, qA, 0, 0, 3, nil, got(0, 1, qA, 0), got(0, 2, qA, 1), got(0, 0, qA, 2)),
			},
			want: VerifyCounts{Sent: 3, Acked: 3, Delivered: 3, FinalReadMembers: 1, FinalReadQueues: 1, FinalReadMessages: 3},
		},
		{
			name: "messages with an unknown outcome are not order-checked",
			steps: []step{
				sent(0, 0, 1), unknown(0, 0, 0), ack(0, 1, qA, 0),
				consume(0, withSeq(got(0, 1, qA, 0), 5), withSeq(got(0, 0, qA, 1), 2)),
				finalRead(0, qA, 0, 0, 2, nil, withSeq(got(0, 1, qA, 0), 5), withSeq(got(0, 0, qA, 1), 2)),
			},
			want: VerifyCounts{Sent: 2, Acked: 1, Unknown: 1, Delivered: 2, UnknownDelivered: 1, FinalReadMembers: 1, FinalReadQueues: 1, FinalReadMessages: 2},
		},
		{
			name: "reordered: without a producer id (NATS), first attempts by their bench sequence",
			steps: []step{
				// The broker stored message 1 before message 0 on the same queue.
				sent(0, 0, 1), ack(0, 1, qA, 0), ack(0, 0, qA, 1),
				consume(0, withoutProducerID(got(0, 1, qA, 0)), withoutProducerID(got(0, 0, qA, 1))),
			},
			want:    VerifyCounts{Sent: 2, Acked: 2, Delivered: 2, Reordered: 1},
			problem: "producer 0 message 0 after message 1",
		},
		{
			name: "reordered in the final read: acknowledged after their consumption",
			steps: []step{
				sent(0, 0, 1), consume(0, withSeq(got(0, 0, qA, 0), 1), withSeq(got(0, 1, qA, 1), 0)),
				ack(0, 0, qA, 0), ack(0, 1, qA, 1),
				finalRead(0, qA, 0, 0, 2, nil, withSeq(got(0, 0, qA, 0), 1), withSeq(got(0, 1, qA, 1), 0)),
			},
			want:    VerifyCounts{Sent: 2, Acked: 2, Delivered: 2, Reordered: 1, FinalReadMembers: 1, FinalReadQueues: 1, FinalReadMessages: 2},
			problem: "reordered (final read on the master): t0@broker-a#0 offset 1: producer 0 message 1 (sequence 0 in the queue) after message 0 (sequence 1)",
		},
		{
			name:    "inconsistent: two acknowledgements name the same queue offset",
			steps:   []step{sent(0, 0, 1), ack(0, 0, qA, 5), ack(0, 1, qA, 5), consume(0, got(0, 1, qA, 5))},
			want:    VerifyCounts{Sent: 2, Acked: 2, Delivered: 1, Lost: 1, Inconsistent: 1},
			problem: "inconsistent: t0@broker-a#0 offset 5 acknowledged as producer 0 message 1, acknowledged as producer 0 message 0",
		},
		{
			name: "inconsistent: two subscriptions consume different messages at one offset; each offset counts once",
			subs: 2,
			steps: []step{
				sent(0, 0, 1), unknown(0, 0, 0), unknown(0, 1, 0),
				consume(0, got(0, 0, qA, 3)), consume(1, got(0, 1, qA, 3)), consume(1, got(0, 0, qA, 4)), consume(0, got(0, 1, qA, 4)),
				finalRead(0, qA, 3, 3, 5, nil, got(0, 1, qA, 3), got(0, 1, qA, 4)),
			},
			want:    VerifyCounts{Sent: 2, Unknown: 2, Delivered: 4, UnknownDelivered: 4, Inconsistent: 2, FinalReadMembers: 1, FinalReadQueues: 1, FinalReadMessages: 2},
			problem: "inconsistent: t0@broker-a#0 offset 3 consumed by subscription 1 as producer 0 message 1, consumed as producer 0 message 0",
		},
		{
			name: "lost in the final read: consumed and acknowledged at offset 100, another message there at the end",
			steps: []step{
				sent(0, 0, 1), ack(0, 0, qA, 100), consume(0, got(0, 0, qA, 100)), unknown(0, 1, 0),
				// The log was truncated and offset 100 given to message 1, whose outcome was
				// unknown.
				finalRead(0, qA, 0, 100, 101, nil, got(0, 1, qA, 100)),
			},
			want:    VerifyCounts{Sent: 2, Acked: 1, Unknown: 1, Delivered: 1, Lost: 1, Inconsistent: 1, FinalReadMembers: 1, FinalReadQueues: 1, FinalReadMessages: 1},
			problem: "lost (final read on the master): producer 0 message 0 acknowledged at t0@broker-a#0 offset 100; offset 100 holds producer 0 message 1",
		},
		{
			name: "lost in the final read: the queue ends before the acknowledged offset",
			steps: []step{
				sentAcked(0, qA, 100, 0), consume(0, got(0, 0, qA, 100)),
				finalRead(0, qA, 0, 90, 90, nil),
			},
			want:    VerifyCounts{Sent: 1, Acked: 1, Delivered: 1, Lost: 1, FinalReadMembers: 1, FinalReadQueues: 1},
			problem: "lost (final read on the master): producer 0 message 0 acknowledged at t0@broker-a#0 offset 100; the member's queue ends at offset 90",
		},
		{
			name: "lost in the final read: below the member's min offset",
			steps: []step{
				sentAcked(0, qA, 3, 0, 1), consume(0, got(0, 0, qA, 3), got(0, 1, qA, 4)),
				finalRead(0, qA, 4, 3, 5, nil, got(0, 1, qA, 4)),
			},
			want:    VerifyCounts{Sent: 2, Acked: 2, Delivered: 2, Lost: 1, FinalReadMembers: 1, FinalReadQueues: 1, FinalReadMessages: 1},
			problem: "the member's queue starts at offset 4 (deleted or truncated)",
		},
		{
			name: "lost in the final read: the read passed the offset without finding it",
			steps: []step{
				sentAcked(0, qA, 0, 0, 1, 2), consume(0, got(0, 0, qA, 0), got(0, 1, qA, 1), got(0, 2, qA, 2)),
				finalRead(0, qA, 0, 0, 3, nil, got(0, 0, qA, 0), got(0, 2, qA, 2)),
			},
			want:    VerifyCounts{Sent: 3, Acked: 3, Delivered: 3, Lost: 1, FinalReadMembers: 1, FinalReadQueues: 1, FinalReadMessages: 2},
			problem: "producer 0 message 1 acknowledged at t0@broker-a#0 offset 1; the read found another message or none at offset 1",
		},
		{
			name: "a slave that lacks the master's message: lost on the slave, inconsistent",
			steps: []step{
				sentAcked(0, qA, 0, 0, 1), consume(0, got(0, 0, qA, 0), got(0, 1, qA, 1)),
				finalRead(0, qA, 0, 0, 2, nil, got(0, 0, qA, 0), got(0, 1, qA, 1)),
				finalRead(1, qA, 0, 0, 2, nil, got(0, 0, qA, 0), foreignAt(qA, 1, 1)),
			},
			want: VerifyCounts{Sent: 2, Acked: 2, Delivered: 2, Lost: 1, Inconsistent: 1,
				FinalReadMembers: 2, FinalReadQueues: 2, FinalReadMessages: 4},
			problem: "lost (final read on slave 1): producer 0 message 1 acknowledged at t0@broker-a#0 offset 1; offset 1 holds a message of another run or not the bench's",
		},
		{
			name: "two members' final reads disagree on a message nobody else named",
			steps: []step{
				sentAcked(0, qA, 0, 0), consume(0, got(0, 0, qA, 0)),
				finalRead(0, qA, 0, 0, 2, nil, got(0, 0, qA, 0), foreignAt(qA, 1, 1)),
				finalRead(1, qA, 0, 0, 2, nil, got(0, 0, qA, 0), foreignAt(qA, 1, 2)),
			},
			want:    VerifyCounts{Sent: 1, Acked: 1, Delivered: 1, Inconsistent: 1, FinalReadMembers: 2, FinalReadQueues: 2, FinalReadMessages: 4},
			problem: "found by the final read on slave 1 as a message of another run or not the bench's, found by the final read on the master as a message",
		},
		{
			name: "phantom in the final read: a failed send is stored",
			steps: []step{
				sent(0, 0, 1), failed(0, 0, 0), ack(0, 1, qA, 1), consume(0, got(0, 1, qA, 1)),
				finalRead(0, qA, 0, 0, 2, nil, got(0, 0, qA, 0), got(0, 1, qA, 1)),
			},
			want:    VerifyCounts{Sent: 2, Acked: 1, Failed: 1, Delivered: 1, Phantom: 1, FinalReadMembers: 1, FinalReadQueues: 1, FinalReadMessages: 2},
			problem: "phantom (final read on the master): producer 0 message 0 failed to send but is stored at t0@broker-a#0 offset 0",
		},
		{
			name: "a final read that stops early leaves the rest unchecked, not lost",
			steps: []step{
				sentAcked(0, qA, 0, 0, 1), sentAcked(0, qB, 0, 2), consume(0, got(0, 0, qA, 0), got(0, 1, qA, 1), got(0, 2, qB, 0)),
				finalRead(0, qA, 0, 0, 1, errors.New("member gone"), got(0, 0, qA, 0)),
				// qB is never read.
			},
			want:    VerifyCounts{Sent: 3, Acked: 3, Delivered: 3, FinalReadMembers: 1, FinalReadMessages: 1, FinalReadUnchecked: 2},
			problem: "final read on the master: 2 acknowledged message(s) not checked: t0@broker-a#0 (1) read up to offset 1: member gone; t0@broker-a#1 (1) not read",
		},
		{
			name: "corrupted in the final read",
			steps: []step{
				sentAcked(0, qA, 0, 0), consume(0, got(0, 0, qA, 0)),
				finalRead(0, qA, 0, 0, 2, nil, withBody(got(0, 0, qA, 0), "garbage"), got(0, 9, qA, 1)),
			},
			want:    VerifyCounts{Sent: 1, Acked: 1, Delivered: 1, Corrupted: 2, FinalReadMembers: 1, FinalReadQueues: 1, FinalReadMessages: 2},
			problem: "corrupted (final read on the master): t0@broker-a#0 offset 1: producer 0 message 9 was never sent",
		},
		{
			name: "sequence order is per queue: gaps and other queues are fine",
			steps: []step{
				sent(0, 0, 1, 2), ack(0, 0, qA, 0), ack(0, 1, qB, 0), ack(0, 2, qA, 1),
				consume(0, got(0, 2, qA, 1)), consume(0, got(0, 1, qB, 0)), // message 0 of qA comes... never
			},
			want: VerifyCounts{Sent: 3, Acked: 3, Delivered: 2, Lost: 1},
		},
		{
			name:      "two producers interleaved on one queue",
			producers: []string{"t0", "t0"},
			steps: []step{
				sent(0, 0, 1), sent(1, 0, 1),
				ack(0, 0, qA, 0), ack(1, 0, qA, 1), ack(0, 1, qA, 2), ack(1, 1, qA, 3),
				consume(0, got(0, 0, qA, 0), got(1, 0, qA, 1), got(0, 1, qA, 2), got(1, 1, qA, 3)),
			},
			want: VerifyCounts{Sent: 4, Acked: 4, Delivered: 4},
		},
		{
			name:    "corrupted: body differs",
			steps:   []step{sentAcked(0, qA, 0, 0), consume(0, withBody(got(0, 0, qA, 0), "garbage"))},
			want:    VerifyCounts{Sent: 1, Acked: 1, Delivered: 1, Corrupted: 1},
			problem: "corrupted: producer 0 message 0 at t0@broker-a#0 offset 0: body crc",
		},
		{
			name: "corrupted: same crc, truncated size",
			steps: []step{sentAcked(0, qA, 0, 0), func(t *testing.T, v *Verifier) {
				d := got(0, 0, qA, 0)
				d.BodySize--
				v.Consumed(0, []Delivery{d})
			}},
			want: VerifyCounts{Sent: 1, Acked: 1, Delivered: 1, Corrupted: 1},
		},
		{
			name: "foreign: a message without a bench identity is not corrupted",
			steps: []step{sentAcked(0, qA, 0, 0), consume(0, got(0, 0, qA, 0)),
				consume(0, Delivery{Queue: qA, Offset: 1, IDErr: errNoIdentity})},
			want: VerifyCounts{Sent: 1, Acked: 1, Delivered: 1, Foreign: 1},
		},
		{
			name:    "corrupted: unknown producer or sequence",
			steps:   []step{sentAcked(0, qA, 0, 0), consume(0, got(0, 0, qA, 0), got(0, 7, qA, 1), got(3, 0, qA, 2))},
			want:    VerifyCounts{Sent: 1, Acked: 1, Delivered: 3, Corrupted: 2},
			problem: "producer 0 message 7 was never sent",
		},
		{
			name:    "corrupted: attempt never sent",
			steps:   []step{sentAcked(0, qA, 0, 0), consume(0, delivery(0, 0, 2, qA, 0))},
			want:    VerifyCounts{Sent: 1, Acked: 1, Delivered: 1, Corrupted: 1, Lost: 1},
			problem: "attempt 2 was never sent",
		},
		{
			name:    "corrupted: consumed at another position than acknowledged",
			steps:   []step{sentAcked(0, qA, 0, 0, 1), consume(0, got(0, 0, qA, 0)), consume(0, got(0, 1, qB, 5))},
			want:    VerifyCounts{Sent: 2, Acked: 2, Delivered: 2, Corrupted: 1},
			problem: "consumed at t0@broker-a#1 offset 5, acknowledged at t0@broker-a#0 offset 1",
		},
		{
			name: "consumed before its acknowledgement: position checked at the end",
			steps: []step{
				sent(0, 0, 1), consume(0, got(0, 0, qA, 0), got(0, 1, qA, 1)),
				ack(0, 0, qA, 0), ack(0, 1, qA, 7), // 1 was really at offset 1
			},
			want:    VerifyCounts{Sent: 2, Acked: 2, Delivered: 2, Corrupted: 1},
			problem: "consumed at t0@broker-a#0 offset 1, acknowledged at t0@broker-a#0 offset 7",
		},
		{
			name: "consumed before its acknowledgement by two subscriptions at different positions",
			subs: 2,
			steps: []step{
				sent(0, 0), consume(0, got(0, 0, qA, 0)), consume(1, got(0, 0, qA, 3)), ack(0, 0, qA, 0),
			},
			want:    VerifyCounts{Sent: 1, Acked: 1, Delivered: 2, Corrupted: 1},
			problem: "consumed at t0@broker-a#0 offset 3, first consumed at t0@broker-a#0 offset 0",
		},
		{
			name:    "corrupted: consumed from another topic",
			steps:   []step{sentAcked(0, qA, 0, 0), consume(0, got(0, 0, qC, 0))},
			want:    VerifyCounts{Sent: 1, Acked: 1, Delivered: 1, Corrupted: 1},
			problem: "for topic t0 consumed from t1@broker-a#0",
		},
		{
			name:    "phantom: failed definitely, consumed anyway",
			steps:   []step{sent(0, 0), failed(0, 0, 0), consume(0, got(0, 0, qA, 0))},
			want:    VerifyCounts{Sent: 1, Failed: 1, Delivered: 1, Phantom: 1},
			problem: "phantom: producer 0 message 0",
		},
		{
			name:    "phantom: abandoned, consumed anyway",
			steps:   []step{sent(0, 0), abandoned(0, 0), consume(0, got(0, 0, qA, 0))},
			want:    VerifyCounts{Sent: 1, Abandoned: 1, Delivered: 1, Phantom: 1},
			problem: "phantom",
		},
		{
			name:  "failed and not consumed: neither lost nor phantom",
			steps: []step{sent(0, 0, 1), failed(0, 0, 0), ack(0, 1, qA, 0), consume(0, got(0, 1, qA, 0))},
			want:  VerifyCounts{Sent: 2, Acked: 1, Failed: 1, Delivered: 1},
		},
		{
			name:  "unknown outcome, not consumed: not lost",
			steps: []step{sent(0, 0), unknown(0, 0, 0)},
			want:  VerifyCounts{Sent: 1, Unknown: 1},
		},
		{
			name:  "unknown outcome, consumed: unknownDelivered",
			steps: []step{sent(0, 0), unknown(0, 0, 0), consume(0, got(0, 0, qA, 3))},
			want:  VerifyCounts{Sent: 1, Unknown: 1, Delivered: 1, UnknownDelivered: 1},
		},
		{
			name:  "never answered counts as unknown",
			steps: []step{sent(0, 0), consume(0, got(0, 0, qA, 0))},
			want:  VerifyCounts{Sent: 1, Unknown: 1, Delivered: 1, UnknownDelivered: 1},
		},
		{
			name: "retry after unknown: both copies consumed is duplicatedAfterRetry",
			steps: []step{
				sent(0, 0, 1), unknown(0, 0, 0), ack(0, 1, qA, 1),
				resend(0, 0, 1, true), ackAttempt(0, 0, 1, qA, 2),
				// attempt 0 was stored after all (offset 0), then message 1, then attempt 1.
				consume(0, got(0, 0, qA, 0), got(0, 1, qA, 1), delivery(0, 0, 1, qA, 2)),
			},
			want: VerifyCounts{Sent: 2, Resent: 1, Acked: 2, Delivered: 3, DuplicatedAfterRetry: 1},
		},
		{
			name: "retry after unknown: only the retry consumed",
			steps: []step{
				sent(0, 0), unknown(0, 0, 0), resend(0, 0, 1, true), ackAttempt(0, 0, 1, qA, 0),
				consume(0, delivery(0, 0, 1, qA, 0)),
			},
			want: VerifyCounts{Sent: 1, Resent: 1, Acked: 1, Delivered: 1},
		},
		{
			name: "retry after unknown: a copy of one attempt consumed twice is still duplicated",
			steps: []step{
				sent(0, 0), unknown(0, 0, 0), resend(0, 0, 1, true), ackAttempt(0, 0, 1, qA, 1),
				consume(0, got(0, 0, qA, 0), delivery(0, 0, 1, qA, 1)), consume(0, delivery(0, 0, 1, qA, 1)),
			},
			want: VerifyCounts{Sent: 1, Resent: 1, Acked: 1, Delivered: 3, DuplicatedAfterRetry: 1, Duplicated: 1},
		},
		{
			name: "retry after unknown, retry failed definitely: still unknown, not phantom",
			steps: []step{
				sent(0, 0), unknown(0, 0, 0), resend(0, 0, 1, true), failed(0, 0, 1),
				consume(0, got(0, 0, qA, 0)),
			},
			want: VerifyCounts{Sent: 1, Resent: 1, Unknown: 1, Delivered: 1, UnknownDelivered: 1},
		},
		{
			name:  "retry after unknown, retry abandoned: still unknown",
			steps: []step{sent(0, 0), unknown(0, 0, 0), resend(0, 0, 1, true), abandoned(0, 0)},
			want:  VerifyCounts{Sent: 1, Resent: 1, Unknown: 1},
		},
		{
			name: "retry after unknown, both unacknowledged but consumed",
			steps: []step{
				sent(0, 0), unknown(0, 0, 0), resend(0, 0, 1, true), unknown(0, 0, 1),
				consume(0, got(0, 0, qA, 0), delivery(0, 0, 1, qA, 1)),
			},
			want: VerifyCounts{Sent: 1, Resent: 1, Unknown: 1, Delivered: 2, UnknownDelivered: 1, DuplicatedAfterRetry: 1},
		},
		{
			name: "resend refused unless the outcome is unknown",
			steps: []step{
				sentAcked(0, qA, 0, 0), resend(0, 0, 0, false),
				sent(0, 1), failed(0, 1, 0), resend(0, 1, 0, false),
				sent(0, 2), resend(0, 2, 0, false), // pending
				consume(0, got(0, 0, qA, 0)),
			},
			want: VerifyCounts{Sent: 3, Acked: 1, Failed: 1, Unknown: 1, Delivered: 1},
		},
		{
			name: "resends stop at maxAttempts",
			steps: func() []step {
				s := []step{sent(0, 0)}
				for a := uint8(0); a < maxAttempts-1; a++ {
					s = append(s, unknown(0, 0, a), resend(0, 0, a+1, true))
				}
				return append(s, unknown(0, 0, maxAttempts-1), resend(0, 0, 0, false))
			}(),
			want: VerifyCounts{Sent: 1, Resent: maxAttempts - 1, Unknown: 1},
		},
		{
			name: "a late failure does not undo an acknowledgement",
			steps: []step{sent(0, 0), unknown(0, 0, 0), resend(0, 0, 1, true), ackAttempt(0, 0, 1, qA, 0),
				unknown(0, 0, 0), consume(0, delivery(0, 0, 1, qA, 0))},
			want: VerifyCounts{Sent: 1, Resent: 1, Acked: 1, Delivered: 1},
		},
		{
			name:  "foreign messages are ignored",
			steps: []step{sentAcked(0, qA, 0, 0), consume(0, Delivery{Queue: qA, Offset: 0, ID: Identity{Run: 99}}, got(0, 0, qA, 1))},
			want:  VerifyCounts{Sent: 1, Acked: 1, Delivered: 1, Foreign: 1, Corrupted: 1, Inconsistent: 1}, // offset 1 != acked 0, and 0 holds another message
		},
		{
			name: "outstanding counts acknowledged pairs not yet consumed",
			subs: 2,
			steps: []step{
				sent(0, 0, 1), checkOutstanding(0),
				consume(0, got(0, 0, qA, 0)), // before its ack
				ack(0, 0, qA, 0), checkOutstanding(1), ack(0, 1, qA, 1), checkOutstanding(3),
				consume(1, got(0, 0, qA, 0), got(0, 1, qA, 1)), checkOutstanding(1),
				consume(1, got(0, 1, qA, 1)), checkOutstanding(1), // a duplicate changes nothing
				consume(0, got(0, 1, qA, 1)), checkOutstanding(0),
			},
			want: VerifyCounts{Sent: 2, Acked: 2, Delivered: 5, Duplicated: 1},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			subs := tt.subs
			if subs == 0 {
				subs = 1
			}
			v := NewVerifier(testRun, subs)
			topics := tt.producers
			if topics == nil {
				topics = []string{"t0"}
			}
			for i, topic := range topics {
				if id := v.AddProducer(topic); id != uint32(i) {
					t.Fatalf("AddProducer = %d, want %d", id, i)
				}
			}
			for _, s := range tt.steps {
				s(t, v)
			}
			got, problems := v.Finish()
			if got != tt.want {
				t.Errorf("counts:\n got %+v\nwant %+v\nproblems: %q", got, tt.want, problems)
			}
			if tt.want.OK() != got.OK() {
				t.Errorf("OK() = %v", got.OK())
			}
			if tt.problem != "" && !strings.Contains(strings.Join(problems, "\n"), tt.problem) {
				t.Errorf("problems %q: none contains %q", problems, tt.problem)
			}
			if tt.want.OK() && tt.want.Duplicated == 0 && tt.problem == "" && len(problems) != 0 {
				t.Errorf("unexpected problems: %q", problems)
			}
			// Finish does not change the state: a second call agrees.
			if again, _ := v.Finish(); again != got {
				t.Errorf("second Finish = %+v, want %+v", again, got)
			}
		})
	}
}

func TestVerifierProblemsAreBounded(t *testing.T) {
	v := NewVerifier(testRun, 1)
	v.AddProducer("t0")
	for s := range uint64(100) {
		sent(0, s)(t, v)
		ack(0, s, qA, int64(s))(t, v)
	}
	c, problems := v.Finish()
	if c.Lost != 100 {
		t.Fatalf("lost = %d, want 100", c.Lost)
	}
	if len(problems) != maxProblems+1 || !strings.Contains(problems[maxProblems], "80 more") {
		t.Fatalf("problems: %d, last %q", len(problems), problems[len(problems)-1])
	}
}

func TestVerifierMisuse(t *testing.T) {
	for name, f := range map[string]func(v *Verifier){
		"out-of-order registration": func(v *Verifier) { v.Sent(0, 1, 0, 1) },
		"unknown producer":          func(v *Verifier) { v.Sent(5, 0, 0, 1) },
		"unregistered message":      func(v *Verifier) { v.Acked(0, 3, 0, qA, 0) },
		"subscription out of range": func(v *Verifier) { v.Consumed(1, nil) },
		"a queue read twice on one member": func(v *Verifier) {
			v.StartFinalRead(1, qA)
			v.StartFinalRead(1, qA)
		},
		"too many members read": func(v *Verifier) {
			for id := range int64(maxFinalMembers + 1) {
				v.StartFinalRead(id, qA)
			}
		},
		"final read done twice": func(v *Verifier) {
			fr := v.StartFinalRead(0, qA)
			fr.Done(0, nil)
			fr.Done(0, nil)
		},
	} {
		t.Run(name, func(t *testing.T) {
			v := NewVerifier(testRun, 1)
			v.AddProducer("t0")
			defer func() {
				if r := recover(); r == nil || !strings.HasPrefix(fmt.Sprint(r), "BUG: ") {
					t.Fatalf("recover() = %v, want a BUG panic", r)
				}
			}()
			f(v)
		})
	}
}

// TestVerifierFinalReadMembers: the final read's account per member, the master first.
func TestVerifierFinalReadMembers(t *testing.T) {
	v := NewVerifier(testRun, 1)
	v.AddProducer("t0")
	for _, s := range []step{
		sentAcked(0, qA, 0, 0, 1, 2), sentAcked(0, qB, 0, 3), sent(0, 4), failed(0, 4, 0),
		consume(0, got(0, 0, qA, 0), got(0, 1, qA, 1), got(0, 2, qA, 2), got(0, 3, qB, 0)),
		finalRead(0, qA, 0, 0, 3, nil, got(0, 0, qA, 0), got(0, 1, qA, 1), got(0, 2, qA, 2)),
		finalRead(0, qB, 0, 0, 2, nil, got(0, 3, qB, 0), got(0, 4, qB, 1)),
		// Slave 2 lacks the end of qA and never answered for qB.
		finalRead(2, qA, 0, 0, 1, nil, got(0, 0, qA, 0)),
		finalRead(2, qB, 0, 0, 0, errors.New("no answer")),
	} {
		s(t, v)
	}
	got := v.FinalRead()
	want := []FinalReadMember{
		{BrokerID: 0, Queues: 2, Messages: 5, Phantom: 1},
		{BrokerID: 2, Queues: 1, Incomplete: 1, Messages: 1, Lost: 2, Unchecked: 1},
	}
	if !slices.Equal(got, want) {
		t.Fatalf("final read:\n got %+v\nwant %+v", got, want)
	}
	c, problems := v.Finish()
	if c.Lost != 2 || c.Phantom != 1 || c.FinalReadMembers != 2 || c.FinalReadQueues != 3 || c.FinalReadMessages != 6 || c.FinalReadUnchecked != 1 {
		t.Fatalf("counts %+v; problems %q", c, problems)
	}
	if lo, ok := v.LowestOffset(qB); !ok || lo != 0 {
		t.Fatalf("LowestOffset(qB) = %d, %v", lo, ok)
	}
	if _, ok := v.LowestOffset(qC); ok {
		t.Fatal("LowestOffset of a queue nobody named")
	}
}

// TestOffsetTable: slots keep their values across chunks, in both directions from the first
// offset written, and offsets too far away are refused rather than allocated.
func TestOffsetTable(t *testing.T) {
	var tb offsetTable
	base := int64(1_000_000_000)
	for _, off := range []int64{base, base + 1, base + offsetChunk, base - 1, base - 3*offsetChunk} {
		ref := tb.ref(off)
		if ref == nil || *ref != 0 {
			t.Fatalf("ref(%d) = %v", off, ref)
		}
		*ref = uint64(off)
	}
	for _, off := range []int64{base, base + 1, base + offsetChunk, base - 1, base - 3*offsetChunk} {
		if got := tb.get(off); got != uint64(off) {
			t.Fatalf("get(%d) = %d", off, got)
		}
	}
	if tb.get(base+2) != 0 || tb.get(base-2*offsetChunk) != 0 || tb.get(-1) != 0 || tb.get(1<<60) != 0 {
		t.Fatal("a slot never written is not empty")
	}
	if !tb.written || tb.low != base-3*offsetChunk {
		t.Fatalf("low %d", tb.low)
	}
	var far offsetTable
	if far.ref(1<<40) == nil || tb.ref(-1) != nil || tb.ref(base+maxOffsetChunks*offsetChunk) != nil || far.ref(0) != nil {
		t.Fatal("a wild offset was taken")
	}
	// Slots name messages: a run's, decoded back, and foreign ones apart from them.
	s, ok := runSlot(slotMaxProducers-1, slotMaxSeq-1, maxAttempts-1)
	if p, seq, a, isRun := slotMessage(withSource(s, slotFinalRead, 3)); !ok || !isRun || p != slotMaxProducers-1 || seq != slotMaxSeq-1 || a != maxAttempts-1 {
		t.Fatalf("slot of the largest identity: %d %d %d %v", p, seq, a, isRun)
	}
	if _, ok := runSlot(slotMaxProducers, 0, 0); ok {
		t.Fatal("a producer beyond the slot's bits")
	}
	f := foreignAt(qA, 0, 1)
	if fs := foreignSlot(&f); fs&slotForeign == 0 || fs&^slotIdentity != 0 || fs == foreignSlot(&Delivery{ID: Identity{Run: 99, Seq: 2}}) {
		t.Fatalf("foreign slot %x", fs)
	}
}

// TestVerifierConcurrent drives the verifier as a run does: producers registering and
// acknowledging from several goroutines while consumers report, under the race detector.
func TestVerifierConcurrent(t *testing.T) {
	const producers, perProducer, subs = 4, 2000, 2
	v := NewVerifier(testRun, subs)
	queues := []QueueRef{qA, qB}
	var mu sync.Mutex
	logs := make([][]Delivery, len(queues)) // what each queue holds, in offset order
	var wg sync.WaitGroup
	for range producers {
		id := v.AddProducer("t0")
		wg.Add(1)
		go func() {
			defer wg.Done()
			for s := range uint64(perProducer) {
				b := bodyOf(id, s)
				v.Sent(id, s, bodyCRC(b), len(b))
				qi := int(s) % len(queues)
				mu.Lock()
				off := int64(len(logs[qi]))
				logs[qi] = append(logs[qi], delivery(id, s, 0, queues[qi], off))
				mu.Unlock()
				v.Acked(id, s, 0, queues[qi], off)
			}
		}()
	}
	wg.Wait()
	for sub := range subs {
		for qi := range queues {
			wg.Add(1)
			go func() {
				defer wg.Done()
				ds := logs[qi]
				for len(ds) > 0 {
					n := min(len(ds), 37)
					v.Consumed(sub, ds[:n])
					ds = ds[n:]
				}
			}()
		}
	}
	wg.Wait()
	c, problems := v.Finish()
	want := VerifyCounts{Sent: producers * perProducer, Acked: producers * perProducer, Delivered: subs * producers * perProducer}
	if c != want || len(problems) > 0 {
		t.Fatalf("counts %+v, want %+v; problems %q", c, want, problems)
	}
	if v.Outstanding() != 0 {
		t.Fatalf("outstanding %d", v.Outstanding())
	}
}
