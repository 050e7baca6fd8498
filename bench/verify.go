package bench

import (
	"fmt"
	"sync"
)

// QueueRef names one queue of a topic on one broker group.
type QueueRef struct {
	Topic   string
	Broker  string
	QueueID int32
}

func (q QueueRef) String() string { return fmt.Sprintf("%s@%s#%d", q.Topic, q.Broker, q.QueueID) }

// Delivery is one message as a consumer received it, reduced to what the verifier checks.
type Delivery struct {
	Queue  QueueRef
	Offset int64
	// ID is the identity parsed from the message's properties; IDErr is set when it had none
	// (a message the bench did not write: counted as foreign).
	ID    Identity
	IDErr error
	// BodyCRC and BodySize describe the body as received.
	BodyCRC  uint32
	BodySize int
}

// VerifyCounts is the verifier's account of a run. Message counts count messages; the problem
// counts (Lost, Duplicated, ...) count (message, subscription) pairs, since every subscription
// must receive every message.
type VerifyCounts struct {
	// Sent is the number of distinct messages handed to the client (resends not counted);
	// Resent the number of resends after an unknown outcome.
	Sent   int64 `json:"sent"`
	Resent int64 `json:"resent"`
	// Acked, Failed, Unknown and Abandoned split Sent by final outcome. Unknown includes sends
	// never answered; Abandoned messages were never handed over (the run stopped first).
	Acked     int64 `json:"acked"`
	Failed    int64 `json:"failed"`
	Unknown   int64 `json:"unknown"`
	Abandoned int64 `json:"abandoned"`
	// Delivered counts every delivery of a message of this run; Foreign counts the messages
	// found on the topics that are not this run's (ignored): another run's, or one without a
	// bench identity (not written by the bench).
	Delivered int64 `json:"delivered"`
	Foreign   int64 `json:"foreign"`

	// Lost: acknowledged but never consumed.
	Lost int64 `json:"lost"`
	// Duplicated: the same send attempt consumed more than once.
	Duplicated int64 `json:"duplicated"`
	// DuplicatedAfterRetry: a message resent after an unknown outcome consumed once per
	// attempt; expected, not an error.
	DuplicatedAfterRetry int64 `json:"duplicatedAfterRetry"`
	// Reordered: within a queue, an offset not above the previous one, or a producer's
	// sequence going backwards.
	Reordered int64 `json:"reordered"`
	// Corrupted: a body whose CRC or size differs from what was sent, a message with an
	// identity of this run that this run never sent, or one found at another queue position
	// than its acknowledgement named. A message without a bench identity is foreign, not
	// corrupted: its batch passed the CRC check, so it is stored as its producer wrote it.
	Corrupted int64 `json:"corrupted"`
	// Phantom: consumed although its send failed definitely.
	Phantom int64 `json:"phantom"`
	// UnknownDelivered: consumed after a send with an unknown outcome; fine.
	UnknownDelivered int64 `json:"unknownDelivered"`
}

// OK reports whether the counts show no error: nothing lost, duplicated, reordered, corrupted
// or phantom.
func (c *VerifyCounts) OK() bool {
	return c.Lost == 0 && c.Duplicated == 0 && c.Reordered == 0 && c.Corrupted == 0 && c.Phantom == 0
}

type sendState uint8

const (
	sendPending   sendState = iota // handed to the client, no answer yet
	sendAcked                      // some attempt was acknowledged
	sendFailed                     // every attempt failed definitely
	sendUnknown                    // some attempt had an unknown outcome, none was acknowledged
	sendAbandoned                  // never handed to the client
)

// maxAttempts bounds the send attempts of one message (the consumed mask has a bit each).
const maxAttempts = 8

// msgRecord is what the verifier keeps per message: 24 bytes plus a byte per subscription,
// whatever the body size.
type msgRecord struct {
	// offset and queue (an index in Verifier.queues, -1 when unset) are where the
	// acknowledged attempt is stored; before the acknowledgement, where attempt seenAttempt
	// was first consumed (seen), to be compared with the acknowledgement when it comes.
	offset       int64
	crc          uint32
	size         uint32
	queue        int32
	state        sendState
	attempts     uint8 // attempts handed to the client
	ackedAttempt uint8 // or, while seen, the attempt consumed
	flags        uint8 // recUnknown, recSeen
}

const (
	recUnknown uint8 = 1 << iota // some attempt had an unknown outcome
	recSeen                      // queue and offset are a consumed position, not an acknowledged one
)

type producerLog struct {
	topic string
	recs  chunked[msgRecord]
	// consumed[sub] at seq has bit a set once attempt a was consumed by subscription sub.
	consumed []chunked[uint8]
}

// queueOrder is a subscription's view of one queue: the last offset consumed and each
// producer's last sequence (first attempts only; a resend is out of order by nature).
type queueOrder struct {
	lastOffset int64
	lastSeq    map[uint32]uint64
}

// maxProblems bounds the problem descriptions kept for the report.
const maxProblems = 20

// Verifier checks that every acknowledged message is consumed exactly once per subscription,
// intact and in queue order, without keeping bodies: producers register each message (CRC and
// size) before sending it and report its outcome; consumers report what they receive, carrying
// the identity the producer embedded (see Identity).
//
// Producers number their messages 0, 1, 2, ... (Sent must be called in that order per
// producer). Subscriptions are numbered 0..subs-1 within a topic; every producer's topic has
// the same number of them.
//
// Concurrency: all methods are safe for concurrent use; one mutex guards everything. Consumers
// report a batch per call to keep the locking per batch.
type Verifier struct {
	run  uint64
	subs int

	mu          sync.Mutex // guards every field below
	producers   []*producerLog
	queues      []QueueRef
	queueIndex  map[QueueRef]int32
	order       []map[int32]*queueOrder // per subscription, by queue index
	outstanding int64                   // (acked message, subscription) pairs not consumed yet
	c           VerifyCounts
	problems    []string
	dropped     int // problems not kept
}

// NewVerifier returns a verifier for run (the Identity.Run of this run's messages) with subs
// subscriptions per topic.
func NewVerifier(run uint64, subs int) *Verifier {
	v := &Verifier{run: run, subs: subs, queueIndex: map[QueueRef]int32{}}
	v.order = make([]map[int32]*queueOrder, subs)
	for i := range v.order {
		v.order[i] = map[int32]*queueOrder{}
	}
	return v
}

// AddProducer registers a producer sending to topic and returns its id.
func (v *Verifier) AddProducer(topic string) uint32 {
	v.mu.Lock()
	defer v.mu.Unlock()
	p := &producerLog{topic: topic, consumed: make([]chunked[uint8], v.subs)}
	v.producers = append(v.producers, p)
	return uint32(len(v.producers) - 1)
}

func (v *Verifier) producerLocked(id uint32) *producerLog {
	if int(id) >= len(v.producers) {
		panic(fmt.Sprintf("BUG: verifier: unknown producer %d", id))
	}
	return v.producers[id]
}

func (v *Verifier) recordLocked(producer uint32, seq uint64) *msgRecord {
	p := v.producerLocked(producer)
	if seq >= uint64(p.recs.len()) {
		panic(fmt.Sprintf("BUG: verifier: producer %d message %d was never registered", producer, seq))
	}
	return p.recs.at(int(seq))
}

// Sent registers the first attempt of message seq of a producer, before it is handed to the
// client. seq must be the producer's next number.
func (v *Verifier) Sent(producer uint32, seq uint64, crc uint32, size int) {
	v.mu.Lock()
	defer v.mu.Unlock()
	p := v.producerLocked(producer)
	if seq != uint64(p.recs.len()) {
		panic(fmt.Sprintf("BUG: verifier: producer %d registered message %d, want %d", producer, seq, p.recs.len()))
	}
	p.recs.push(msgRecord{crc: crc, size: uint32(size), queue: -1, state: sendPending, attempts: 1})
	for i := range p.consumed {
		p.consumed[i].push(0)
	}
	v.c.Sent++
}

// Resend registers another attempt of a message whose last attempt had an unknown outcome and
// returns its attempt number, or false when the message may not be sent again (it reached
// maxAttempts or its outcome is no longer unknown).
func (v *Verifier) Resend(producer uint32, seq uint64) (uint8, bool) {
	v.mu.Lock()
	defer v.mu.Unlock()
	r := v.recordLocked(producer, seq)
	if r.state != sendUnknown || r.attempts >= maxAttempts {
		return 0, false
	}
	r.attempts++
	r.state = sendPending
	v.c.Resent++
	return r.attempts - 1, true
}

// Acked records that an attempt was acknowledged at queue q, offset.
func (v *Verifier) Acked(producer uint32, seq uint64, attempt uint8, q QueueRef, offset int64) {
	v.mu.Lock()
	defer v.mu.Unlock()
	r := v.recordLocked(producer, seq)
	if r.state == sendAcked {
		v.problemLocked("BUG? producer %d message %d acknowledged twice (attempts %d and %d)", producer, seq, r.ackedAttempt, attempt)
		return
	}
	qi := v.queueLocked(q)
	if r.flags&recSeen != 0 && r.ackedAttempt == attempt && (r.queue != qi || r.offset != offset) {
		v.c.Corrupted++
		v.problemLocked("corrupted: producer %d message %d consumed at %s offset %d, acknowledged at %s offset %d",
			producer, seq, v.queues[r.queue], r.offset, q, offset)
	}
	r.flags &^= recSeen
	r.state = sendAcked
	r.ackedAttempt = attempt
	r.queue = qi
	r.offset = offset
	p := v.producers[producer]
	for s := range p.consumed {
		if *p.consumed[s].at(int(seq)) == 0 {
			v.outstanding++
		}
	}
}

// Failed records that an attempt failed: definitely, or with an unknown outcome.
func (v *Verifier) Failed(producer uint32, seq uint64, attempt uint8, unknown bool) {
	v.mu.Lock()
	defer v.mu.Unlock()
	r := v.recordLocked(producer, seq)
	if r.state == sendAcked {
		return // another attempt was acknowledged; this one cannot change that
	}
	if unknown {
		r.flags |= recUnknown
	}
	if r.flags&recUnknown != 0 {
		r.state = sendUnknown
	} else {
		r.state = sendFailed
	}
}

// Abandoned records that an attempt registered with Sent or Resend was never handed to the
// client after all.
func (v *Verifier) Abandoned(producer uint32, seq uint64) {
	v.mu.Lock()
	defer v.mu.Unlock()
	r := v.recordLocked(producer, seq)
	switch {
	case r.state == sendAcked:
	case r.flags&recUnknown != 0:
		r.state = sendUnknown // an earlier attempt may still arrive
	case r.attempts == 1:
		r.state = sendAbandoned
	default:
		r.state = sendFailed
	}
}

func (v *Verifier) queueLocked(q QueueRef) int32 {
	if i, ok := v.queueIndex[q]; ok {
		return i
	}
	i := int32(len(v.queues))
	v.queues = append(v.queues, q)
	v.queueIndex[q] = i
	return i
}

func (v *Verifier) problemLocked(format string, args ...any) {
	if len(v.problems) >= maxProblems {
		v.dropped++
		return
	}
	v.problems = append(v.problems, fmt.Sprintf(format, args...))
}

// Consumed checks the deliveries of one consumer call for subscription sub.
func (v *Verifier) Consumed(sub int, ds []Delivery) {
	if sub < 0 || sub >= v.subs {
		panic(fmt.Sprintf("BUG: verifier: subscription %d of %d", sub, v.subs))
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	for i := range ds {
		v.consumedLocked(sub, &ds[i])
	}
}

func (v *Verifier) consumedLocked(sub int, d *Delivery) {
	id := &d.ID
	if d.IDErr != nil || id.Run != v.run {
		v.c.Foreign++ // not written by the bench, or by another run
		return
	}
	v.c.Delivered++
	if int(id.Producer) >= len(v.producers) || id.Seq >= uint64(v.producers[id.Producer].recs.len()) {
		v.c.Corrupted++
		v.problemLocked("corrupted: %s offset %d: producer %d message %d was never sent", d.Queue, d.Offset, id.Producer, id.Seq)
		return
	}
	p := v.producers[id.Producer]
	r := p.recs.at(int(id.Seq))
	if id.Attempt >= r.attempts {
		v.c.Corrupted++
		v.problemLocked("corrupted: %s offset %d: producer %d message %d attempt %d was never sent", d.Queue, d.Offset, id.Producer, id.Seq, id.Attempt)
		return
	}
	qi := v.queueLocked(d.Queue)
	mask := p.consumed[sub].at(int(id.Seq))
	bit := uint8(1) << id.Attempt
	switch {
	case *mask&bit != 0:
		v.c.Duplicated++
		v.problemLocked("duplicated: producer %d message %d attempt %d consumed again by subscription %d at %s offset %d", id.Producer, id.Seq, id.Attempt, sub, d.Queue, d.Offset)
		return
	case *mask != 0:
		v.c.DuplicatedAfterRetry++
	case r.state == sendAcked:
		v.outstanding--
	}
	*mask |= bit

	switch {
	case d.BodyCRC != r.crc || d.BodySize != int(r.size) || id.CRC != r.crc:
		v.c.Corrupted++
		v.problemLocked("corrupted: producer %d message %d at %s offset %d: body crc %08x size %d, sent crc %08x size %d (carried crc %08x)",
			id.Producer, id.Seq, d.Queue, d.Offset, d.BodyCRC, d.BodySize, r.crc, r.size, id.CRC)
		return
	case d.Queue.Topic != p.topic:
		v.c.Corrupted++
		v.problemLocked("corrupted: producer %d message %d for topic %s consumed from %s", id.Producer, id.Seq, p.topic, d.Queue)
		return
	}
	v.checkPositionLocked(id.Producer, id.Seq, id.Attempt, qi, d.Offset)

	qo := v.order[sub][qi]
	if qo == nil {
		qo = &queueOrder{lastOffset: -1, lastSeq: map[uint32]uint64{}}
		v.order[sub][qi] = qo
	}
	if d.Offset <= qo.lastOffset {
		v.c.Reordered++
		v.problemLocked("reordered: subscription %d %s offset %d after offset %d", sub, d.Queue, d.Offset, qo.lastOffset)
	} else {
		qo.lastOffset = d.Offset
	}
	if id.Attempt == 0 {
		if last, ok := qo.lastSeq[id.Producer]; ok && id.Seq < last {
			v.c.Reordered++
			v.problemLocked("reordered: subscription %d %s producer %d message %d after message %d", sub, d.Queue, id.Producer, id.Seq, last)
		} else {
			qo.lastSeq[id.Producer] = id.Seq
		}
	}
}

// checkPositionLocked compares where an attempt was consumed with where its acknowledgement
// said it was stored. Before the acknowledgement it keeps the first consumed position for
// Acked to compare (and compares later consumptions of the same attempt with it).
func (v *Verifier) checkPositionLocked(producer uint32, seq uint64, attempt uint8, qi int32, offset int64) {
	r := v.producers[producer].recs.at(int(seq))
	switch {
	case r.state == sendPending && r.flags&recSeen == 0:
		r.flags |= recSeen
		r.ackedAttempt, r.queue, r.offset = attempt, qi, offset
	case r.state == sendPending && r.ackedAttempt != attempt:
		// Another attempt of a resent message was seen first; only one position is kept,
		// so this copy goes unchecked.
	case r.state == sendPending || (r.state == sendAcked && r.ackedAttempt == attempt):
		if r.queue != qi || r.offset != offset {
			v.c.Corrupted++
			what := "acknowledged"
			if r.state == sendPending {
				what = "first consumed"
			}
			v.problemLocked("corrupted: producer %d message %d consumed at %s offset %d, %s at %s offset %d",
				producer, seq, v.queues[qi], offset, what, v.queues[r.queue], r.offset)
		}
	}
}

// Outstanding returns the number of (acknowledged message, subscription) pairs not consumed
// yet: the run has drained when it is 0.
func (v *Verifier) Outstanding() int64 {
	v.mu.Lock()
	defer v.mu.Unlock()
	return v.outstanding
}

// Finish returns the final counts: the outcome split of Sent, the problems seen while
// consuming, and those only the end can tell (lost, phantom, unknown-but-delivered). Call it once consumers have stopped; it may be called more than once.
// problems describes up to maxProblems problems, then how many more there were.
func (v *Verifier) Finish() (c VerifyCounts, problems []string) {
	v.mu.Lock()
	defer v.mu.Unlock()
	c = v.c
	problems = append([]string(nil), v.problems...)
	dropped := v.dropped
	note := func(format string, args ...any) {
		if len(problems) >= maxProblems {
			dropped++
			return
		}
		problems = append(problems, fmt.Sprintf(format, args...))
	}
	for pid, p := range v.producers {
		for seq := range p.recs.len() {
			r := p.recs.at(seq)
			switch r.state {
			case sendAcked:
				c.Acked++
			case sendFailed:
				c.Failed++
			case sendUnknown, sendPending:
				c.Unknown++
			case sendAbandoned:
				c.Abandoned++
			}
			for sub := range p.consumed {
				consumed := *p.consumed[sub].at(seq) != 0
				switch {
				case r.state == sendAcked && !consumed:
					c.Lost++
					note("lost: producer %d message %d acknowledged at %s offset %d, not consumed by subscription %d", pid, seq, v.queues[r.queue], r.offset, sub)
				case (r.state == sendFailed || r.state == sendAbandoned) && consumed:
					c.Phantom++
					note("phantom: producer %d message %d failed to send but was consumed by subscription %d", pid, seq, sub)
				case (r.state == sendUnknown || r.state == sendPending) && consumed:
					c.UnknownDelivered++
				}
			}
		}
	}
	if dropped > 0 {
		problems = append(problems, fmt.Sprintf("... and %d more", dropped))
	}
	return c, problems
}
