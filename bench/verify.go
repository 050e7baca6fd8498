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
	// ProducerID and Sequence are the client producer's id and the message's number among
	// that producer's messages sent to this queue (client.MessageExt). ProducerID is 0 when the
	// driver has none (NATS): such messages are order-checked by their bench sequence number.
	ProducerID int64
	Sequence   int32
}

// VerifyCounts is the verifier's account of a run. Message counts count messages; the problem
// counts (Lost, Duplicated, ...) count (message, subscription) pairs for what consumption
// found, since every subscription must receive every message, and (message, member) pairs for
// what the final read of each member found; Inconsistent counts queue offsets.
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

	// Lost: acknowledged but never consumed, counted per subscription; and acknowledged but
	// not found at its acknowledged queue offset by the final read, counted per member read.
	Lost int64 `json:"lost"`
	// Duplicated: the same send attempt consumed more than once.
	Duplicated int64 `json:"duplicated"`
	// DuplicatedAfterRetry: a message resent after an unknown outcome consumed once per
	// attempt; expected, not an error.
	DuplicatedAfterRetry int64 `json:"duplicatedAfterRetry"`
	// Reordered: in a consumer's stream of a queue, an offset not above the previous one; or,
	// within a queue, a producer's acknowledged messages out of the order in which they were
	// sent to that queue (their Sequence not increasing), as consumed or as the final read
	// found them.
	Reordered int64 `json:"reordered"`
	// Corrupted: a body whose CRC or size differs from what was sent, a message with an
	// identity of this run that this run never sent, or one found at another queue position
	// than its acknowledgement named. A message without a bench identity is foreign, not
	// corrupted: its batch passed the CRC check, so it is stored as its producer wrote it.
	Corrupted int64 `json:"corrupted"`
	// Phantom: consumed although its send failed definitely (per subscription), or found by
	// the final read although its send failed definitely (per member read).
	Phantom int64 `json:"phantom"`
	// UnknownDelivered: consumed after a send with an unknown outcome; fine.
	UnknownDelivered int64 `json:"unknownDelivered"`
	// Inconsistent counts the queue offsets named for two different messages: by two
	// acknowledgements, by an acknowledgement and a consumption, by two consumptions, or by
	// any of those and the final read of a member (or by the final reads of two members).
	// Each offset counts once, however many claims disagree.
	Inconsistent int64 `json:"inconsistent"`
	// OffsetMoved counts the OFFSET_MOVED answers the consumers followed (informational:
	// retention moves them forward); OffsetMovedBack those that moved a consumer's position
	// backwards, to offsets it had consumed past: the broker gave those offsets up. The
	// Verifier does not see them; the run fills them in from the consumers' statistics.
	OffsetMoved     int64 `json:"offsetMoved"`
	OffsetMovedBack int64 `json:"offsetMovedBack"`
	// FinalReadMembers is the number of members the final read read (each group's master, and
	// member ReadBrokerID when reads were pinned to a slave); FinalReadQueues and
	// FinalReadMessages sum the queues read completely and the messages read over them, and
	// FinalReadUnchecked the acknowledged messages the final read could not check (their queue
	// was not read, or its read stopped early): neither found nor counted lost. See
	// Verifier.FinalRead for the numbers per member.
	FinalReadMembers   int   `json:"finalReadMembers"`
	FinalReadQueues    int64 `json:"finalReadQueues"`
	FinalReadMessages  int64 `json:"finalReadMessages"`
	FinalReadUnchecked int64 `json:"finalReadUnchecked"`
}

// OK reports whether the counts show no error: nothing lost, duplicated, reordered, corrupted,
// phantom or inconsistent, and no consumer's offset moved backwards.
func (c *VerifyCounts) OK() bool {
	return c.Lost == 0 && c.Duplicated == 0 && c.Reordered == 0 && c.Corrupted == 0 && c.Phantom == 0 &&
		c.Inconsistent == 0 && c.OffsetMovedBack == 0
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
	flags        uint8 // recUnknown, recSeen, recFinal << member
}

const (
	recUnknown uint8 = 1 << iota // some attempt had an unknown outcome
	recSeen                      // queue and offset are a consumed position, not an acknowledged one
	// recFinal << m: the final read of member m settled the message: found at its
	// acknowledged position, counted lost there, or (a failed send) counted phantom.
	recFinal
)

type producerLog struct {
	topic string
	recs  chunked[msgRecord]
	// consumed[sub] at seq has bit a set once attempt a was consumed by subscription sub.
	consumed []chunked[uint8]
}

// queueOrder is a subscription's view of one queue: the last offset consumed and each
// producer's last acknowledged message.
type queueOrder struct {
	lastOffset int64
	producers  producerOrder
}

// producerOrder is each producer's last acknowledged message in one queue, in the order a
// consumer or the final read met them. Messages with a client producer id are ordered by their
// Sequence: the producer numbers what it sends to each queue, so a batch it retried on
// another broker group after sending newer messages there comes after them, rightly. Messages
// without one (NATS) are ordered by their bench sequence number, first attempts only: that
// driver never moves a send to another queue, so within a queue those numbers are the send
// order. A Sequence wraps after 2^31 messages of one producer to one queue (not handled).
type producerOrder struct {
	bySeq   map[int64]seqPos
	byBench map[uint32]uint64
}

// seqPos is a producer's last message in a queue: its Sequence and its bench number.
type seqPos struct {
	seq int32
	msg uint64
}

// check records d and returns its producer's previous message in the queue when d
// does not come after it.
func (o *producerOrder) check(d *Delivery) (prev uint64, prevSeq int32, back bool) {
	if d.ProducerID != 0 {
		if o.bySeq == nil {
			o.bySeq = map[int64]seqPos{}
		}
		if last, ok := o.bySeq[d.ProducerID]; ok && d.Sequence <= last.seq {
			return last.msg, last.seq, true
		}
		o.bySeq[d.ProducerID] = seqPos{d.Sequence, d.ID.Seq}
		return 0, 0, false
	}
	if d.ID.Attempt != 0 {
		return 0, 0, false // a resend is sent after newer messages by nature
	}
	if o.byBench == nil {
		o.byBench = map[uint32]uint64{}
	}
	if last, ok := o.byBench[d.ID.Producer]; ok && d.ID.Seq < last {
		return last, 0, true
	}
	o.byBench[d.ID.Producer] = d.ID.Seq
	return 0, 0, false
}

// describeBack describes a message d coming before prev, its producer's previous message.
func describeBack(d *Delivery, prev uint64, prevSeq int32) string {
	if d.ProducerID != 0 {
		return fmt.Sprintf("producer %d message %d (sequence %d in the queue) after message %d (sequence %d)", d.ID.Producer, d.ID.Seq, d.Sequence, prev, prevSeq)
	}
	return fmt.Sprintf("producer %d message %d after message %d", d.ID.Producer, d.ID.Seq, prev)
}

// maxProblems bounds the problem descriptions kept for the report.
const maxProblems = 20

// Verifier checks that every acknowledged message is consumed exactly once per subscription,
// intact and in queue order, and that the final read finds it where it was acknowledged,
// without keeping bodies: producers register each message (CRC and size) before sending it and
// report its outcome; consumers report what they receive, carrying the identity the producer
// embedded (see Identity); at the end the final read (StartFinalRead) reports what each
// member's queues hold.
//
// Besides a record per message it keeps, per queue, which message each offset was first named
// for (offsetTable, 8 bytes per offset), so that two messages at one offset are seen wherever
// the two claims come from: acknowledgements, consumptions, final reads.
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
	tables      []offsetTable           // by queue index
	order       []map[int32]*queueOrder // per subscription, by queue index
	outstanding int64                   // (acked message, subscription) pairs not consumed yet
	// final holds the final read's members, by member slot (the order first read).
	final []*finalMember
	// untracked says some claim could not be kept in the offset tables (see runSlot and
	// maxOffsetChunks): the inconsistency check missed it.
	untracked bool
	c         VerifyCounts
	problems  []string
	dropped   int // problems not kept
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
	if id, ok := runSlot(producer, seq, attempt); ok {
		v.claimLocked(qi, offset, withSource(id, slotAcked, 0), -1)
	} else {
		v.untracked = true
	}
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
	v.tables = append(v.tables, offsetTable{})
	v.queueIndex[q] = i
	return i
}

// claimLocked names the message of slot s (identity bits with their source) as the one stored
// at offset of queue qi; sub is the consuming subscription of a consumption's claim. The first
// claim of an offset is kept; a later one naming another message is a conflict: the offset
// counts as inconsistent (once) and its first conflict is described. It returns the slot's
// first claim and whether it conflicts.
func (v *Verifier) claimLocked(qi int32, offset int64, s uint64, sub int) (first uint64, conflict bool) {
	ref := v.tables[qi].ref(offset)
	if ref == nil {
		v.untracked = true
		return 0, false
	}
	if *ref == 0 {
		*ref = s
		return s, false
	}
	first = *ref
	if first&slotIdentity == s&slotIdentity {
		return first, false
	}
	if first&slotConflict == 0 {
		*ref |= slotConflict
		v.c.Inconsistent++
		v.problemLocked("inconsistent: %s offset %d %s, %s", v.queues[qi], offset, v.claimText(s, sub), v.claimText(first, -1))
	}
	return first, true
}

// compareLocked is claimLocked for a claim that is not kept when the offset has none yet: a
// consumed foreign message (other runs' messages before this run's would fill the tables).
func (v *Verifier) compareLocked(qi int32, offset int64, s uint64, sub int) {
	if first := v.tables[qi].get(offset); first != 0 {
		v.claimLocked(qi, offset, s, sub)
	}
}

// claimText describes a claim (of subscription sub when it is a consumption and sub >= 0).
func (v *Verifier) claimText(s uint64, sub int) string {
	switch slotSource(s) {
	case slotAcked:
		return "acknowledged as " + describeSlot(s)
	case slotConsumed:
		if sub >= 0 {
			return fmt.Sprintf("consumed by subscription %d as %s", sub, describeSlot(s))
		}
		return "consumed as " + describeSlot(s)
	default:
		return fmt.Sprintf("found by the final read on %s as %s", onMember(v.final[slotMember(s)].brokerID), describeSlot(s))
	}
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
		if qi, ok := v.queueIndex[d.Queue]; ok {
			v.compareLocked(qi, d.Offset, withSource(foreignSlot(d), slotConsumed, 0), sub)
		}
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
	if s, ok := runSlot(id.Producer, id.Seq, id.Attempt); ok {
		if first := v.tables[qi].get(d.Offset); first == 0 || first&slotIdentity != s {
			v.claimLocked(qi, d.Offset, withSource(s, slotConsumed, 0), sub)
		}
	} else {
		v.untracked = true
	}

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
		qo = &queueOrder{lastOffset: -1}
		v.order[sub][qi] = qo
	}
	if d.Offset <= qo.lastOffset {
		// The stream went back; the producers' order cannot be told from it.
		v.c.Reordered++
		v.problemLocked("reordered: subscription %d %s offset %d after offset %d", sub, d.Queue, d.Offset, qo.lastOffset)
		return
	}
	qo.lastOffset = d.Offset
	// The producers' order holds for acknowledged messages, each at its acknowledged position;
	// those acknowledged after their consumption are left to the final read.
	if r.state == sendAcked && r.ackedAttempt == id.Attempt && r.queue == qi && r.offset == d.Offset {
		if prev, prevSeq, back := qo.producers.check(d); back {
			v.c.Reordered++
			v.problemLocked("reordered: subscription %d %s offset %d: %s", sub, d.Queue, d.Offset, describeBack(d, prev, prevSeq))
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
// consuming and in the final read, and those only the end can tell (lost, phantom,
// unknown-but-delivered). Call it once consumers have stopped and the final read is done; it
// may be called more than once. problems describes up to maxProblems problems, then how many
// more there were; a line per member whose final read left acknowledged messages unchecked
// comes on top.
func (v *Verifier) Finish() (c VerifyCounts, problems []string) {
	c, _, problems = v.finish()
	return c, problems
}

// FinalRead returns the final read's account of each member read, in the order first read
// (the master first); empty when there was no final read. Call it as Finish.
func (v *Verifier) FinalRead() []FinalReadMember {
	_, members, _ := v.finish()
	return members
}

func (v *Verifier) finish() (c VerifyCounts, members []FinalReadMember, problems []string) {
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
	members = make([]FinalReadMember, len(v.final))
	unchecked := make([]map[int32]int64, len(v.final)) // per member slot, by queue index
	for slot, m := range v.final {
		members[slot] = m.counts
		unchecked[slot] = map[int32]int64{}
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
			if r.state != sendAcked {
				continue
			}
			for slot := range v.final {
				if r.flags&(recFinal<<slot) != 0 {
					continue
				}
				if desc := v.finalMissingLocked(slot, pid, seq, r, &members[slot], unchecked[slot]); desc != "" {
					note("%s", desc)
				}
			}
		}
	}
	var top []string
	for slot, m := range members {
		c.FinalReadMembers++
		c.FinalReadQueues += m.Queues
		c.FinalReadMessages += m.Messages
		c.FinalReadUnchecked += m.Unchecked
		c.Lost += m.Lost
		if m.Unchecked > 0 {
			top = append(top, v.uncheckedText(slot, m.Unchecked, unchecked[slot]))
		}
	}
	if v.untracked {
		note("note: some queue offsets (over %d producers, sequence numbers of 2^42 and more, or offsets far from the others) were not checked for inconsistency", slotMaxProducers)
	}
	if dropped > 0 {
		problems = append(problems, fmt.Sprintf("... and %d more", dropped))
	}
	return c, members, append(top, problems...)
}
