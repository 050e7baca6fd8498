package commitlog

// A queue's incarnation identifies its current life: queue offsets start at 0 again when a
// queue is created again (its topic deleted and re-created, or the store lost), and an offset
// of one life means nothing in another. It is fixed by the batch that creates the queue, its
// first with base queue offset 0, from two of the batch's stored fields (its physical offset
// and store timestamp), so every member that holds that batch computes the same value: a
// slave that creates the queue from the replicated batch, and recovery that indexes it again.
// A later life starts at another physical offset (a re-created topic's first batch lies after
// its deletion record) or at another store time (a store restarted empty). The value is kept
// in the history file (history.go), because retention may remove the first batch. A queue first
// seen at a later offset (a log reset to its master's min offset, past the queue's first batch),
// or loaded without a history file that names it once retention removed its first batch (else
// recovery derives the value from that batch: deriveBorn), has incarnation 0: not known, which
// nothing compares.

// incarnationOf returns the incarnation of a queue whose first batch lies at physical offset
// phys with store timestamp ts: a mix of both bits (splitmix64's finalizer), never 0.
func incarnationOf(phys, ts int64) uint64 {
	x := uint64(phys)*0x9e3779b97f4a7c15 ^ uint64(ts)
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	x ^= x >> 31
	if x == 0 {
		return 1
	}
	return x
}

// QueueIncarnation returns the incarnation of the queue's current life (see above), 0 when the
// queue does not exist or its incarnation is not known. Any goroutine; no allocation.
func (s *Store) QueueIncarnation(topic []byte, queueID int32) uint64 {
	q := s.lookupQueue(topic, queueID)
	if q == nil || q.deleted.Load() {
		return 0
	}
	return q.born.Load()
}

// setBorn gives q the incarnation its first batch, at physical offset phys and of store time ts,
// fixes; the queue flusher writes it to the history file before a checkpoint vouches for the
// batch. Caller holds mu, or is recovery.
func (s *Store) setBorn(q *consumeQueue, phys, ts int64) {
	v := incarnationOf(phys, ts)
	if q.born.Load() == v {
		return
	}
	q.born.Store(v)
	s.historyChangedLocked()
}

// deriveBorn gives each queue whose incarnation is not known (the history file was lost or
// damaged, or predates the queue) the one its first batch fixes, when that batch is still in
// the log: the consume queue's entry 0 with base queue offset 0 (a queue a reset started at its
// master's later offsets has none). So a store that lost its history file computes the values
// its slaves hold, rather than leaving the queues at 0, which nothing compares (a consumer of a
// deleted and re-created topic would then keep its offset of the earlier life). Returns how
// many it derived. Recovery only, once the queues are final.
func (s *Store) deriveBorn() int {
	n := 0
	for q := range s.eachQueue {
		if q.born.Load() != 0 {
			continue
		}
		files := *q.files.Load()
		if len(files) == 0 || files[0].base != 0 || q.cnt == 0 {
			continue
		}
		e, ok := q.rawEntry(0)
		if !ok || e.base != 0 {
			continue
		}
		if info, ok := s.parseEntry(e); ok {
			s.setBorn(q, e.phys, info.StoreTimestamp)
			n++
		}
	}
	return n
}
