package commitlog

import (
	"errors"
	"fmt"
	"math"
)

// maxReadAttempts bounds the retries of a read that raced with retention.
const maxReadAttempts = 64

var errNoQueue = errors.New("commitlog: no such queue")

// ReadStatus is the outcome of Store.Read.
type ReadStatus int

const (
	// Found means Slices holds at least one batch.
	Found ReadStatus = iota + 1
	// NoNewMessage means the offset equals the queue's max offset: nothing to read yet.
	NoNewMessage
	// OffsetTooSmall means the offset is below the queue's min offset (retention removed it);
	// NextQueueOffset is the min offset.
	OffsetTooSmall
	// OffsetOverflow means the offset is beyond the queue's max offset; NextQueueOffset is the
	// max offset.
	OffsetOverflow
	// NoQueue means the queue has never been written (MinOffset = MaxOffset = 0).
	NoQueue
)

// String returns the status name.
func (s ReadStatus) String() string {
	switch s {
	case Found:
		return "Found"
	case NoNewMessage:
		return "NoNewMessage"
	case OffsetTooSmall:
		return "OffsetTooSmall"
	case OffsetOverflow:
		return "OffsetOverflow"
	case NoQueue:
		return "NoQueue"
	}
	return fmt.Sprintf("ReadStatus(%d)", int(s))
}

// ReadResult is the result of Store.Read. It is reusable: Read resets it (without releasing),
// so call Release (or release every Slice) before passing it to Read again. A ReadResult is
// used by one goroutine at a time.
type ReadResult struct {
	// Status says what was found; the other fields are set for every status.
	Status ReadStatus
	// Slices holds whole batches in queue order; batches that are adjacent in the log share one
	// Slice. Each Slice holds a reference on its segment.
	Slices []Slice
	// Bytes is the total length of Slices.
	Bytes int
	// Messages is the number of messages in the returned batches (including the messages of the
	// first batch that precede the requested offset: batches are never split).
	Messages int
	// NextQueueOffset is where the next read should start.
	NextQueueOffset int64
	// MinOffset and MaxOffset are the queue's bounds at the time of the read.
	MinOffset, MaxOffset int64
	// Incarnation is the queue's incarnation (Store.QueueIncarnation), 0 for NoQueue or when
	// not known.
	Incarnation uint64
}

// Release releases every Slice and empties Slices. It is safe on an empty result.
func (r *ReadResult) Release() {
	for _, s := range r.Slices {
		s.Release()
	}
	clear(r.Slices)
	r.Slices = r.Slices[:0]
}

func (r *ReadResult) reset() {
	clear(r.Slices)
	*r = ReadResult{Slices: r.Slices[:0]}
}

// Read returns the batches of queue (topic, queueID) from the batch holding queueOffset on: at
// least one batch when the status is Found, then more while the total stays within maxBytes and
// maxMessages (<= 0: no limit). The Slices are views into the log and must be released (see
// Slice). Errors: ErrClosed, or one wrapping ErrCorrupt for a damaged consume-queue entry. Any
// goroutine; no syscalls and, with a reused ReadResult, no allocation.
//
// NB: a cold batch page-faults in whichever goroutine touches the Slice's bytes; Read itself
// touches only the consume queue.
func (s *Store) Read(topic []byte, queueID int32, queueOffset int64, maxMessages int32, maxBytes int, r *ReadResult) error {
	return s.ReadUpTo(topic, queueID, queueOffset, maxMessages, maxBytes, math.MaxInt64, r)
}

// ReadUpTo is Read limited to batches that end at or before the physical offset limit: a batch
// past it is not returned, and when the batch at queueOffset is past it the status is
// NoNewMessage (the messages exist but may not be served yet). A replicated broker passes its
// high watermark (the offset every in-sync member holds), so that no read can be undone by a
// failover (Kafka's high watermark).
func (s *Store) ReadUpTo(topic []byte, queueID int32, queueOffset int64, maxMessages int32, maxBytes int, limit int64, r *ReadResult) error {
	r.reset()
	for range maxReadAttempts {
		if s.closedFlag.Load() {
			return ErrClosed
		}
		q := s.lookupQueue(topic, queueID)
		if q == nil {
			r.Status = NoQueue
			return nil
		}
		err := s.readQueue(q, queueOffset, maxMessages, maxBytes, limit, r)
		switch {
		case err == nil:
			return nil
		case err == errNoQueue:
			r.Release()
			r.reset()
			r.Status = NoQueue
			return nil
		case err != errRetry:
			r.Release()
			r.reset()
			return fmt.Errorf("cannot read %s/%d at queue offset %d: %w", string(topic), queueID, queueOffset, err)
		}
		r.Release()
		r.reset()
	}
	return fmt.Errorf("cannot read %s/%d at queue offset %d: %w", string(topic), queueID, queueOffset, errRetry)
}

func (s *Store) readQueue(q *consumeQueue, off int64, maxMessages int32, maxBytes int, limit int64, r *ReadResult) error {
	var c cqCursor
	defer c.close()
	b, err := q.bounds(&c)
	if err != nil {
		return err
	}
	r.MinOffset, r.MaxOffset = b.minOff, b.maxOff
	r.Incarnation = q.born.Load()
	switch {
	case off < b.minOff:
		r.Status, r.NextQueueOffset = OffsetTooSmall, b.minOff
		return nil
	case off == b.maxOff:
		r.Status, r.NextQueueOffset = NoNewMessage, b.maxOff
		return nil
	case off > b.maxOff:
		r.Status, r.NextQueueOffset = OffsetOverflow, b.maxOff
		return nil
	}
	i, err := q.find(&c, b, off)
	if err != nil {
		return err
	}
	segs := *s.segs.Load()
	var (
		pend    Slice // the Slice being extended
		pendEnd int64 // physical offset just past pend
		pendOff int64 // physical offset of pend.B[0]
		next    int64
	)
	var loopErr error
	for ; i < b.cnt; i++ {
		e, err := c.entry(i)
		if err != nil {
			loopErr = err
			break
		}
		if e.end() > limit {
			break
		}
		if r.Messages > 0 && (maxMessages > 0 && r.Messages >= int(maxMessages) ||
			maxBytes > 0 && r.Bytes+int(e.size) > maxBytes) {
			break
		}
		if pend.f != nil && e.phys == pendEnd && e.end() <= pend.f.end() {
			pendEnd = e.end()
			a, z := pendOff-pend.f.base, pendEnd-pend.f.base
			pend.B = pend.f.data[a:z:z]
		} else {
			seg := findSegment(segs, e.phys)
			if seg == nil || e.end() > seg.end() {
				if e.phys < s.minOffset.Load() {
					loopErr = errRetry // removed by retention under us
				} else {
					loopErr = fmt.Errorf("consume-queue entry %d points at [%d, %d) outside the log: %w", i, e.phys, e.end(), ErrCorrupt)
				}
				break
			}
			if !seg.tryAcquire() {
				loopErr = errRetry
				break
			}
			if pend.f != nil {
				r.Slices = append(r.Slices, pend)
			}
			a, z := e.phys-seg.base, e.end()-seg.base
			pend = Slice{B: seg.data[a:z:z], f: seg}
			pendOff, pendEnd = e.phys, e.end()
		}
		r.Bytes += int(e.size)
		r.Messages += int(e.count)
		next = e.nextOff()
	}
	if pend.f != nil {
		r.Slices = append(r.Slices, pend) // on error too, so the caller releases it
	}
	if loopErr != nil && (loopErr != errRetry || r.Messages == 0) {
		return loopErr
	}
	if r.Messages == 0 { // the batch at off ends past limit
		r.Status, r.NextQueueOffset = NoNewMessage, off
		return nil
	}
	q.hint.Store(i)
	r.Status = Found
	r.NextQueueOffset = next
	return nil
}
