package bench

import (
	"cmp"
	"fmt"
	"maps"
	"slices"
	"strings"
)

// The final read (Jepsen's final read): once the run has drained, every queue of the run's
// topics is read from its min offset to its max offset on each group's master (and on one
// slave per group when reads were pinned to it), independently of what the consumers
// committed, and the Verifier checks what each member holds: every acknowledged message at its
// acknowledged offset (else lost), no offset holding another message than the one
// acknowledged, consumed or found there by another member's read (inconsistent), no failed
// send stored (phantom), and each producer's acknowledged messages in the order it sent them to
// the queue (reordered). Consumption alone cannot see an acknowledged message that vanished
// after it was consumed, its offset given to a newer message.

// FinalReadMember is the final read's account of one member of the broker groups: the
// master (BrokerID 0) of each group, or member BrokerID of each group.
type FinalReadMember struct {
	BrokerID int64 `json:"brokerId"`
	// Queues counts the queues read completely (up to the master's max offset, or to the end
	// of the member's queue); Incomplete those whose read stopped early (the member did not
	// answer, or a slave did not catch up in time) or never started.
	Queues     int64 `json:"queues"`
	Incomplete int64 `json:"incomplete"`
	// Messages counts the messages read, foreign ones included.
	Messages int64 `json:"messages"`
	// Lost, Inconsistent, Phantom, Reordered and Corrupted are this member's share of the run's
	// counts (see VerifyCounts): acknowledged messages it does not hold at their acknowledged
	// offset, offsets at which it holds another message than the first one named there,
	// failed sends it holds, acknowledged messages it holds out of their producer's order, and
	// messages whose body or identity is wrong.
	Lost         int64 `json:"lost"`
	Inconsistent int64 `json:"inconsistent"`
	Phantom      int64 `json:"phantom"`
	Reordered    int64 `json:"reordered"`
	Corrupted    int64 `json:"corrupted"`
	// Unchecked counts the acknowledged messages the read could not check (their queue was not
	// read on this member, or its read stopped before their offset).
	Unchecked int64 `json:"unchecked"`
}

// finalMember is the final read of one member slot.
type finalMember struct {
	brokerID int64
	queues   map[int32]*finalQueue // by queue index
	counts   FinalReadMember       // what the reads found (Lost: the losses seen while reading)
}

// finalQueue is the final read of one queue on one member.
type finalQueue struct {
	bounded bool  // Bounds was called
	min     int64 // the member's min offset
	from    int64 // the first offset read
	done    bool
	end     int64 // Done's offset
	err     error // why the read stopped early
	order   producerOrder
}

// FinalReader is the final read of one queue on one member, made by StartFinalRead. One
// goroutine drives it: Bounds once the member's min offset is known, Read for each pull in
// offset order, then Done. Its methods lock the Verifier.
type FinalReader struct {
	v    *Verifier
	slot int
	qi   int32
	fq   *finalQueue
}

// StartFinalRead starts the final read of queue q on member brokerID of its group (0: the
// master). At most maxFinalMembers members can be read, and each queue once per member; the
// Verifier panics (BUG) otherwise.
func (v *Verifier) StartFinalRead(brokerID int64, q QueueRef) *FinalReader {
	v.mu.Lock()
	defer v.mu.Unlock()
	slot := slices.IndexFunc(v.final, func(m *finalMember) bool { return m.brokerID == brokerID })
	if slot < 0 {
		if len(v.final) == maxFinalMembers {
			panic(fmt.Sprintf("BUG: verifier: final read of more than %d members", maxFinalMembers))
		}
		v.final = append(v.final, &finalMember{brokerID: brokerID, queues: map[int32]*finalQueue{}, counts: FinalReadMember{BrokerID: brokerID}})
		slot = len(v.final) - 1
	}
	qi := v.queueLocked(q)
	m := v.final[slot]
	if m.queues[qi] != nil {
		panic(fmt.Sprintf("BUG: verifier: final read of %s on %s twice", q, memberName(brokerID)))
	}
	fq := &finalQueue{}
	m.queues[qi] = fq
	return &FinalReader{v: v, slot: slot, qi: qi, fq: fq}
}

// LowestOffset returns the lowest offset of q an acknowledgement or a consumption named: the
// final read need not read below it (nor below the queue's max offset at the run's start) to
// find this run's messages. ok is false when nothing named one.
func (v *Verifier) LowestOffset(q QueueRef) (offset int64, ok bool) {
	v.mu.Lock()
	defer v.mu.Unlock()
	qi, known := v.queueIndex[q]
	if !known || !v.tables[qi].written {
		return 0, false
	}
	return v.tables[qi].low, true
}

// Bounds records the member's min offset of the queue and the offset the read starts at
// (from >= min; below from the queue holds no message of this run).
func (fr *FinalReader) Bounds(min, from int64) {
	fr.v.mu.Lock()
	defer fr.v.mu.Unlock()
	fr.fq.bounded, fr.fq.min, fr.fq.from = true, min, max(min, from)
}

// Read checks the messages of one pull of the queue, in offset order.
func (fr *FinalReader) Read(ds []Delivery) {
	v := fr.v
	v.mu.Lock()
	defer v.mu.Unlock()
	for i := range ds {
		v.finalReadLocked(fr, &ds[i])
	}
}

// Done ends the read. With err nil the read is complete: the member holds nothing the read
// must check at or after end (the master's max offset, or where the member's queue ends
// before it). Otherwise err says why the read stopped at end: offsets from end on are not
// checked.
func (fr *FinalReader) Done(end int64, err error) {
	v := fr.v
	v.mu.Lock()
	defer v.mu.Unlock()
	fq := fr.fq
	if fq.done {
		panic("BUG: verifier: final read done twice")
	}
	fq.done, fq.end, fq.err = true, end, err
	fq.order = producerOrder{}
	m := v.final[fr.slot]
	if err == nil && fq.bounded {
		m.counts.Queues++
		return
	}
	m.counts.Incomplete++
}

// onMember names a member as the problem reports do ("the master", "slave 1").
func onMember(brokerID int64) string {
	if brokerID == 0 {
		return "the master"
	}
	return memberName(brokerID)
}

func (v *Verifier) finalReadLocked(fr *FinalReader, d *Delivery) {
	m := v.final[fr.slot]
	m.counts.Messages++
	qi, on := fr.qi, onMember(m.brokerID)
	id := &d.ID
	if d.IDErr != nil || id.Run != v.run {
		v.finalClaimLocked(fr, d, foreignSlot(d))
		return
	}
	if int(id.Producer) >= len(v.producers) || id.Seq >= uint64(v.producers[id.Producer].recs.len()) ||
		id.Attempt >= v.producers[id.Producer].recs.at(int(id.Seq)).attempts {
		m.counts.Corrupted++
		v.c.Corrupted++
		v.problemLocked("corrupted (final read on %s): %s offset %d: %s was never sent", on, d.Queue, d.Offset, describeMessage(id.Producer, id.Seq, id.Attempt))
		return
	}
	if s, ok := runSlot(id.Producer, id.Seq, id.Attempt); ok {
		v.finalClaimLocked(fr, d, s)
	} else {
		v.untracked = true
	}
	p := v.producers[id.Producer]
	r := p.recs.at(int(id.Seq))
	bit := recFinal << fr.slot
	atAck := r.state == sendAcked && r.ackedAttempt == id.Attempt && r.queue == qi && r.offset == d.Offset
	if d.BodyCRC != r.crc || d.BodySize != int(r.size) || id.CRC != r.crc || d.Queue.Topic != p.topic {
		m.counts.Corrupted++
		v.c.Corrupted++
		v.problemLocked("corrupted (final read on %s): %s at %s offset %d: body crc %08x size %d, sent crc %08x size %d to topic %s (carried crc %08x)",
			on, describeMessage(id.Producer, id.Seq, id.Attempt), d.Queue, d.Offset, d.BodyCRC, d.BodySize, r.crc, r.size, p.topic, id.CRC)
		if atAck {
			r.flags |= bit // found, corrupted: not also lost
		}
		return
	}
	switch {
	case atAck:
		r.flags |= bit
		if prev, prevSeq, back := fr.fq.order.check(d); back {
			m.counts.Reordered++
			v.c.Reordered++
			v.problemLocked("reordered (final read on %s): %s offset %d: %s", on, d.Queue, d.Offset, describeBack(d, prev, prevSeq))
		}
	case (r.state == sendFailed || r.state == sendAbandoned) && r.flags&bit == 0:
		r.flags |= bit
		m.counts.Phantom++
		v.c.Phantom++
		v.problemLocked("phantom (final read on %s): %s failed to send but is stored at %s offset %d", on, describeMessage(id.Producer, id.Seq, id.Attempt), d.Queue, d.Offset)
	}
}

// finalClaimLocked claims d's offset for the message the final read found there (identity
// bits s). On a conflict the member counts an inconsistent offset, and when the offset's first
// claim is a message acknowledged there, that message is lost on this member.
func (v *Verifier) finalClaimLocked(fr *FinalReader, d *Delivery, s uint64) {
	first, conflict := v.claimLocked(fr.qi, d.Offset, withSource(s, slotFinalRead, fr.slot), -1)
	if !conflict {
		return
	}
	m := v.final[fr.slot]
	m.counts.Inconsistent++
	p, seq, a, ok := slotMessage(first)
	if !ok || int(p) >= len(v.producers) || seq >= uint64(v.producers[p].recs.len()) {
		return
	}
	r := v.producers[p].recs.at(int(seq))
	bit := recFinal << fr.slot
	if r.state != sendAcked || r.ackedAttempt != a || r.queue != fr.qi || r.offset != d.Offset || r.flags&bit != 0 {
		return
	}
	r.flags |= bit
	m.counts.Lost++
	v.problemLocked("lost (final read on %s): %s acknowledged at %s offset %d; offset %d holds %s",
		onMember(m.brokerID), describeMessage(p, seq, a), d.Queue, d.Offset, d.Offset, describeSlot(s))
}

// finalMissingLocked accounts, at the end, for acknowledged message seq of producer (record r)
// that the final read of member slot did not settle: lost when the read covered its offset or
// the member's queue ends before it, else unchecked. It returns a problem description for a
// loss ("" when unchecked).
func (v *Verifier) finalMissingLocked(slot int, producer int, seq int, r *msgRecord, counts *FinalReadMember, unchecked map[int32]int64) string {
	m := v.final[slot]
	fq := m.queues[r.queue]
	where := fmt.Sprintf("lost (final read on %s): %s acknowledged at %s offset %d", onMember(m.brokerID),
		describeMessage(uint32(producer), uint64(seq), r.ackedAttempt), v.queues[r.queue], r.offset)
	var why string
	switch {
	case fq == nil || !fq.bounded || r.offset < fq.from && r.offset >= fq.min:
	case r.offset < fq.min:
		why = fmt.Sprintf("the member's queue starts at offset %d (deleted or truncated)", fq.min)
	case !fq.done || fq.err != nil && r.offset >= fq.end:
	case r.offset >= fq.end:
		why = fmt.Sprintf("the member's queue ends at offset %d", fq.end)
	default:
		why = fmt.Sprintf("the read found another message or none at offset %d", r.offset)
	}
	if why == "" {
		counts.Unchecked++
		unchecked[r.queue]++
		return ""
	}
	counts.Lost++
	return where + "; " + why
}

// uncheckedText describes, for member slot, the queues whose acknowledged messages the final
// read could not check (unchecked: counts by queue index).
func (v *Verifier) uncheckedText(slot int, total int64, unchecked map[int32]int64) string {
	m := v.final[slot]
	qis := slices.Collect(maps.Keys(unchecked))
	slices.SortFunc(qis, func(a, b int32) int { return cmp.Or(compareQueues(v.queues[a], v.queues[b]), cmp.Compare(a, b)) })
	var parts []string
	for i, qi := range qis {
		if i == 3 {
			parts = append(parts, fmt.Sprintf("%d more queue(s)", len(qis)-3))
			break
		}
		fq := m.queues[qi]
		var why string
		switch {
		case fq == nil:
			why = "not read"
		case !fq.bounded && fq.err != nil:
			why = fmt.Sprintf("not read: %v", fq.err)
		case !fq.bounded:
			why = "not read"
		case fq.err != nil:
			why = fmt.Sprintf("read up to offset %d: %v", fq.end, fq.err)
		case !fq.done:
			why = "read not finished"
		default:
			why = fmt.Sprintf("read from offset %d only", fq.from)
		}
		parts = append(parts, fmt.Sprintf("%s (%d) %s", v.queues[qi], unchecked[qi], why))
	}
	return fmt.Sprintf("final read on %s: %d acknowledged message(s) not checked: %s", onMember(m.brokerID), total, strings.Join(parts, "; "))
}

// Rejected records that the member answered a pull of the queue at offset with a batch that
// failed its CRC or structure check (err): a corrupted message of this member. The read cannot
// go past it; Done follows.
func (fr *FinalReader) Rejected(offset int64, err error) {
	v := fr.v
	v.mu.Lock()
	defer v.mu.Unlock()
	m := v.final[fr.slot]
	m.counts.Corrupted++
	v.c.Corrupted++
	v.problemLocked("corrupted (final read on %s): %s offset %d: %v", onMember(m.brokerID), v.queues[fr.qi], offset, err)
}
