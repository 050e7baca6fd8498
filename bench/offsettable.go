package bench

import "fmt"

// An offsetTable keeps, for one queue, which message is known to be stored at each offset: the
// first one named there by an acknowledgement, a consumption or the final read (a slot). A later
// claim naming another message finds the conflict: one (queue, offset) holding two messages,
// which is how the verifier sees a log truncated and its offsets handed out again.
//
// Slots are 8 bytes in chunks of offsetChunk, made when first written, indexed from the first
// chunk written (a queue of a reused topic starts far from 0). The chunks are small so that a
// run with many queues of few messages stays small.
type offsetTable struct {
	first  int64 // chunk number of chunks[0]
	chunks []*[offsetChunk]uint64
	// low is the lowest offset written (valid once written is true).
	low     int64
	written bool
}

// offsetChunk is the number of slots per chunk (32 KiB).
const offsetChunk = 1 << 12

// maxOffsetChunks bounds the chunk index of one table (2^34 offsets), so that a wild offset
// cannot make it allocate without bound: such offsets are not tracked.
const maxOffsetChunks = 1 << 22

// get returns the slot of off, 0 when nothing was written there (or off is not tracked).
func (t *offsetTable) get(off int64) uint64 {
	if off < 0 {
		return 0
	}
	i := off/offsetChunk - t.first
	if i < 0 || i >= int64(len(t.chunks)) || t.chunks[i] == nil {
		return 0
	}
	return t.chunks[i][off%offsetChunk]
}

// ref returns the slot of off for writing, making its chunk; nil when off cannot be tracked
// (negative, or too far from the offsets already held).
func (t *offsetTable) ref(off int64) *uint64 {
	if off < 0 {
		return nil
	}
	cn := off / offsetChunk
	if len(t.chunks) == 0 {
		t.first = cn
	}
	if cn < t.first {
		grow := t.first - cn
		if grow+int64(len(t.chunks)) > maxOffsetChunks {
			return nil
		}
		t.chunks = append(make([]*[offsetChunk]uint64, grow, grow+int64(len(t.chunks))), t.chunks...)
		t.first = cn
	}
	i := cn - t.first
	if i >= maxOffsetChunks {
		return nil
	}
	if i >= int64(len(t.chunks)) {
		t.chunks = append(t.chunks, make([]*[offsetChunk]uint64, i+1-int64(len(t.chunks)))...)
	}
	ch := t.chunks[i]
	if ch == nil {
		ch = new([offsetChunk]uint64)
		t.chunks[i] = ch
	}
	if !t.written || off < t.low {
		t.low, t.written = off, true
	}
	return &ch[off%offsetChunk]
}

// A slot packs what was claimed at an offset:
//
//	bits 0-41   sequence number (of this run's message)
//	bits 42-44  send attempt
//	bits 45-57  producer
//	bit  58     a conflict at this offset was counted (slotConflict)
//	bits 59-60  the member whose final read made the claim (source slotFinalRead)
//	bit  61     a foreign message (not this run's): bits 0-57 hold a hash of what it is
//	bits 62-63  the source of the claim; 0: empty slot
//
// Two slots name the same message when their slotIdentity bits are equal.
const (
	slotAttemptShift  = 42
	slotProducerShift = 45
	slotMaxSeq        = 1 << slotAttemptShift
	slotMaxProducers  = 1 << 13
	slotConflict      = 1 << 58
	slotMemberShift   = 59
	slotForeign       = 1 << 61
	slotSourceShift   = 62
	slotHashMask      = 1<<58 - 1
	slotIdentity      = slotHashMask | slotForeign
)

// Sources of a claim.
const (
	slotAcked     = 1 // an acknowledgement named the offset
	slotConsumed  = 2 // a consumer received the message there
	slotFinalRead = 3 // the final read found it there
)

// maxFinalMembers is the number of members the final read can check (the slot's member bits
// and msgRecord's flag bits).
const maxFinalMembers = 4

// runSlot returns the identity bits of attempt of message seq of producer; false when they do
// not fit (the offset is then not tracked).
func runSlot(producer uint32, seq uint64, attempt uint8) (uint64, bool) {
	if producer >= slotMaxProducers || seq >= slotMaxSeq || attempt >= maxAttempts {
		return 0, false
	}
	return seq | uint64(attempt)<<slotAttemptShift | uint64(producer)<<slotProducerShift, true
}

// foreignSlot returns the identity bits of a message that is not this run's: a hash of what
// the delivery says of it, so that two members holding different foreign messages at one
// offset disagree (a hash collision, 2^-58, would hide it).
func foreignSlot(d *Delivery) uint64 {
	h := uint64(d.ProducerID)*0x9e3779b97f4a7c15 ^ uint64(uint32(d.Sequence))<<32 ^ uint64(d.BodyCRC) ^ uint64(d.BodySize)<<40
	if d.IDErr == nil {
		h ^= d.ID.Run*0xbf58476d1ce4e5b9 ^ uint64(d.ID.Producer)<<20 ^ d.ID.Seq*0x94d049bb133111eb ^ uint64(d.ID.Attempt)<<56
	}
	h ^= h >> 31
	h *= 0xd6e8feb86659fd93
	h ^= h >> 32
	return h&slotHashMask | slotForeign
}

// withSource returns identity bits claimed by source (and, for the final read, member slot m).
func withSource(id uint64, source, member int) uint64 {
	return id | uint64(source)<<slotSourceShift | uint64(member)<<slotMemberShift
}

func slotSource(s uint64) int { return int(s >> slotSourceShift) }
func slotMember(s uint64) int { return int(s >> slotMemberShift & 3) }

// slotMessage decodes the identity of a run's message; false for a foreign one.
func slotMessage(s uint64) (producer uint32, seq uint64, attempt uint8, ok bool) {
	if s&slotForeign != 0 {
		return 0, 0, 0, false
	}
	return uint32(s >> slotProducerShift & (slotMaxProducers - 1)), s & (slotMaxSeq - 1), uint8(s >> slotAttemptShift & 7), true
}

// describeSlot names the message of a slot for a problem report.
func describeSlot(s uint64) string {
	p, seq, a, ok := slotMessage(s)
	if !ok {
		return "a message of another run or not the bench's"
	}
	return describeMessage(p, seq, a)
}

// describeMessage names attempt of message seq of producer ("producer 0 message 12", with the
// attempt when it is a resend).
func describeMessage(producer uint32, seq uint64, attempt uint8) string {
	if attempt == 0 {
		return fmt.Sprintf("producer %d message %d", producer, seq)
	}
	return fmt.Sprintf("producer %d message %d attempt %d", producer, seq, attempt)
}
