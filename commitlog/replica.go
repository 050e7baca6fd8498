package commitlog

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"time"
)

// Replication errors.
var (
	// ErrBeyondEnd is wrapped by ReadReplication when the offset is past the log end.
	ErrBeyondEnd = errors.New("commitlog: offset beyond the log end")
	// ErrBelowMin is wrapped by ReadReplication when the offset was deleted by retention.
	ErrBelowMin = errors.New("commitlog: offset below the log's min offset")
	// ErrNotBatchBoundary is wrapped by ReadReplication when no batch starts at the offset.
	ErrNotBatchBoundary = errors.New("commitlog: offset is not a batch boundary")
	// ErrReplicaMismatch is wrapped by AppendReplicated when the replicated bytes do not go
	// where the log ends, do not fit the segment, or break a queue's offsets.
	ErrReplicaMismatch = errors.New("commitlog: replicated data does not continue the log")
)

// isMarkerAt reports whether a segment-end marker (or a tail too short for one) is at rel.
func isMarkerAt(f *mappedFile, rel int64) bool {
	if f.size-rel < markerSize {
		return true
	}
	return binary.BigEndian.Uint32(f.data[rel:]) == 0 && binary.BigEndian.Uint32(f.data[rel+4:]) == SegmentEndMagic
}

// ReadReplication calls fn with whole batches of the log starting at from, as a master sends
// them to its slaves. When from is the end of a segment's data (its segment-end marker, or a
// tail too short for one) the batches start at the next segment's base instead: start tells.
// It returns at most maxBytes of batches, but always the first batch whole. data is a view of
// the mapping, valid only during fn. At the log end fn gets (end, nil).
//
// Every batch is checked with the Parser (CRC and stored offset), so a request for an offset
// that is not a batch start fails with ErrNotBatchBoundary. Other errors wrap ErrBeyondEnd,
// ErrBelowMin (retention removed it) or ErrClosed, or are fn's. Any goroutine.
func (s *Store) ReadReplication(from int64, maxBytes int, fn func(start int64, data []byte) error) error {
	for range maxReadAttempts {
		if s.closedFlag.Load() {
			return ErrClosed
		}
		end, lo := s.end.Load(), s.minOffset.Load()
		switch {
		case from > end:
			return fmt.Errorf("cannot replicate from %d (log is [%d, %d)): %w", from, lo, end, ErrBeyondEnd)
		case from < lo:
			return fmt.Errorf("cannot replicate from %d (log is [%d, %d)): %w", from, lo, end, ErrBelowMin)
		case from == end:
			return fn(end, nil)
		}
		seg := findSegment(*s.segs.Load(), from)
		if seg == nil || !seg.tryAcquire() {
			continue // removed by retention meanwhile
		}
		start := from
		if isMarkerAt(seg, from-seg.base) {
			next := seg.end()
			seg.release()
			if next >= end {
				return fn(next, nil)
			}
			if seg = findSegment(*s.segs.Load(), next); seg == nil || seg.base != next || !seg.tryAcquire() {
				continue
			}
			start = next
		}
		err := s.readBatches(seg, start, min(end, seg.end()), maxBytes, fn)
		seg.release()
		return err
	}
	return fmt.Errorf("cannot replicate from %d: %w", from, errRetry)
}

// readBatches passes fn the whole batches of seg in [start, limit), up to maxBytes.
func (s *Store) readBatches(seg *mappedFile, start, limit int64, maxBytes int, fn func(int64, []byte) error) error {
	pos := start
	for pos < limit {
		rel := pos - seg.base
		if pos > start && isMarkerAt(seg, rel) {
			break
		}
		info, err := s.cfg.Parser(seg.data[rel:limit-seg.base], pos)
		if err != nil {
			if pos == start {
				return fmt.Errorf("cannot replicate from %d: %w: %v", start, ErrNotBatchBoundary, err)
			}
			return fmt.Errorf("cannot replicate: damaged batch at %d: %w: %v", pos, ErrCorrupt, err)
		}
		if pos > start && pos+int64(info.Size)-start > int64(maxBytes) {
			break
		}
		pos += int64(info.Size)
	}
	a, b := start-seg.base, pos-seg.base
	return fn(start, seg.data[a:b:b])
}

// AppendReplicated writes batches copied from the master's log at start, which must be the log
// end or, when the master rolled there, the base of the next segment (this log then writes its
// own segment-end marker and rolls, so both logs stay byte-identical). data holds whole
// batches, checked before anything is written: each must pass the Parser at its position and
// continue the log's history (package documentation, "History": its base queue offset is its
// queue's next offset, its epoch is not below the previous batch's). A deletion record
// (BatchInfo.DeletesTopic) deletes its topic's queues there, as DeleteTopic did on the master;
// the topic's batches after it start new queues, at queue offset 0. A store timestamp below
// the previous batch's is taken, and where the order restarts recorded first (it makes a file
// write). It returns the new log end. Errors wrap ErrReplicaMismatch, ErrDiskFull, ErrClosed, or
// the Parser's. Master and slave must use the same segment size. Slave only: the log must not
// take Appends meanwhile.
func (s *Store) AppendReplicated(start int64, data []byte) (int64, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return 0, ErrClosed
	}
	if len(data) == 0 {
		return s.writePos, nil
	}
	seg := s.active
	if start != s.writePos {
		if start != seg.end() {
			return 0, fmt.Errorf("cannot append replicated data at %d: log ends at %d: %w", start, s.writePos, ErrReplicaMismatch)
		}
	}
	limit := seg.end()
	if start == seg.end() {
		limit = start + s.cfg.SegmentSize
	}
	if start+int64(len(data)) > limit {
		return 0, fmt.Errorf("cannot append %d replicated bytes at %d: they cross the segment end %d (same mappedFileSizeCommitLog on master and slave?): %w",
			len(data), start, limit, ErrReplicaMismatch)
	}
	// Check everything before writing anything.
	s.replInfos = s.replInfos[:0]
	epoch := s.lastEpoch.Load()
	// A store timestamp below the previous batch's is taken, not refused: the master's clock
	// stepped back further than it stamps ahead, or the master does not order them (History);
	// the order restarts at the last such batch, recorded before it is written.
	ts, tsOrdered, restartAt := s.lastTS, s.lastOrdered, int64(-1)
	for pos := 0; pos < len(data); {
		at := start + int64(pos)
		info, err := s.cfg.Parser(data[pos:], at)
		if err != nil {
			return 0, fmt.Errorf("cannot append replicated batch at %d: %w", at, err)
		}
		if info.Size < minBatchSize || info.Size > len(data)-pos || info.Count <= 0 || info.BaseQueueOffset < 0 {
			return 0, fmt.Errorf("replicated batch at %d: size %d of %d bytes left, count %d, base queue offset %d: %w",
				at, info.Size, len(data)-pos, info.Count, info.BaseQueueOffset, ErrReplicaMismatch)
		}
		// A control batch is indexed nowhere: only its epoch continues the history.
		if next, known := s.pendingNext(info); !info.Control && known && info.BaseQueueOffset != next {
			return 0, fmt.Errorf("replicated batch at %d has queue offset %d for %s/%d, which continues at %d: %w",
				at, info.BaseQueueOffset, info.Topic, info.QueueID, next, ErrReplicaMismatch)
		}
		if info.Epoch < epoch {
			return 0, fmt.Errorf("replicated batch at %d is of epoch %d, after one of epoch %d: %w", at, info.Epoch, epoch, ErrReplicaMismatch)
		}
		if tsOrdered && info.StoreTimestamp < ts {
			restartAt = at
		}
		epoch = info.Epoch
		ts, tsOrdered = info.StoreTimestamp, true
		s.replInfos = append(s.replInfos, replInfo{BatchInfo: info, pos: at})
		pos += info.Size
	}
	if restartAt >= 0 {
		if err := s.restartOrderLocked(restartAt); err != nil {
			return 0, err
		}
		s.logger.Warn("commitlog: a replicated batch's store timestamp is below the previous batch's; the log's timestamp order restarts there",
			"at", restartAt)
	}
	// The data starts the next segment: after a marker the master wrote, or right at the end of
	// a segment the master filled exactly (start == writePos == seg.end()).
	if start == seg.end() {
		if err := s.rollLocked(); err != nil {
			return 0, err
		}
		seg = s.active
	}
	rel := s.writePos - seg.base
	s.noteWriteLocked(len(data))
	if err := s.writeLocked(seg, rel, data); err != nil {
		return 0, err
	}
	for i := range s.replInfos {
		ri := &s.replInfos[i]
		if ri.Control {
			if ri.DeletesTopic {
				if err := s.deleteTopicReplicatedLocked(ri.Topic, ri.pos); err != nil {
					return s.publishReplicatedLocked(seg, ri.pos), err
				}
			}
			seg.newestTS.Store(ri.StoreTimestamp)
			s.lastEpoch.Store(ri.Epoch)
			s.lastTS, s.lastOrdered = ri.StoreTimestamp, true
			continue
		}
		q := s.queueLocked(ri.Topic, ri.QueueID)
		if q == nil {
			var err error
			if q, err = s.createQueueLocked(string(ri.Topic), ri.QueueID); err != nil {
				return s.publishReplicatedLocked(seg, ri.pos), err
			}
		}
		if err := q.ensureRoomLocked(); err != nil {
			return s.publishReplicatedLocked(seg, ri.pos), err
		}
		if q.cnt == 0 {
			q.next = ri.BaseQueueOffset
			if ri.BaseQueueOffset == 0 { // the queue's first batch, as the master stored it
				s.setBorn(q, ri.pos, ri.StoreTimestamp)
			}
		}
		q.writeEntryLocked(ri.pos, ri.Size, ri.BaseQueueOffset, ri.Count, ri.TagHash, ri.StoreTimestamp)
		seg.newestTS.Store(ri.StoreTimestamp)
		s.lastEpoch.Store(ri.Epoch)
		s.lastTS, s.lastOrdered = ri.StoreTimestamp, true
	}
	return s.publishReplicatedLocked(seg, start+int64(len(data))), nil
}

// deleteTopicReplicatedLocked applies a replicated deletion record of topic at pos, as
// DeleteTopic did on the master: recorded in the deletions file first, then the topic's queues
// removed. The topic is not fenced: a slave takes no Appends. Caller holds mu.
func (s *Store) deleteTopicReplicatedLocked(topic []byte, pos int64) error {
	name := string(topic)
	if err := s.recordDeletionLocked(name, pos); err != nil {
		return fmt.Errorf("cannot apply the deletion of topic %q at %d: %w", name, pos, err)
	}
	queues := 0
	if t := s.topics[name]; t != nil {
		queues = len(t.queues)
		s.deleteQueuesLocked(t)
	}
	kick(s.qflushKick)
	s.logger.Info("commitlog: topic deleted by a replicated record", "topic", name, "queues", queues, "recordAt", pos)
	return nil
}

// replInfo is a checked replicated batch waiting to be indexed.
type replInfo struct {
	BatchInfo
	pos int64
}

// pendingNext returns where the queue of info continues, counting the batches of this call
// already checked. A queue created afresh after its topic's deletion record starts at 0: a
// record earlier in the call, or one applied in this run (after runFrom, so the queue's batches
// since would have entries). known is false for another queue without entries: its first batch
// sets its offsets (a log reset to the master's min offset starts its queues where the master's
// are).
func (s *Store) pendingNext(info BatchInfo) (next int64, known bool) {
	for i := len(s.replInfos) - 1; i >= 0; i-- { // the queue's latest batch in this call
		ri := &s.replInfos[i]
		if string(ri.Topic) != string(info.Topic) {
			continue
		}
		if ri.DeletesTopic {
			return 0, true
		}
		if !ri.Control && ri.QueueID == info.QueueID {
			return ri.BaseQueueOffset + int64(ri.Count), true
		}
	}
	if q := s.queueLocked(info.Topic, info.QueueID); q != nil && q.cnt > 0 {
		return q.next, true
	}
	if len(s.deleted) != 0 {
		if d, ok := s.deleted[string(info.Topic)]; ok && d >= s.runFrom {
			return 0, true
		}
	}
	return 0, false
}

// publishReplicatedLocked makes the log end at end visible. Caller holds mu.
func (s *Store) publishReplicatedLocked(seg *mappedFile, end int64) int64 {
	if end < s.writePos {
		end = s.writePos // an indexing failure: the bytes before stay, the batch is re-sent
	}
	s.writePos = end
	s.end.Store(end)
	if end-s.flushed.Load() >= s.cfg.FlushDirtyBytes {
		kick(s.flushKick)
	}
	s.kickPrefault(end)
	_ = seg
	return end
}

// resetSuffix marks segment files a ResetTo moved aside; Open deletes leftovers.
const resetSuffix = ".reset"

// ResetTo discards the whole log and every consume queue and starts an empty log at base, for
// a slave that must copy the master's log afresh (its own is below the master's min offset,
// or diverged). base must be a segment boundary of the master. With keep, the old segments are
// not deleted but moved into a new directory diverged/<unix ms>/ next to the commit-log
// directory, whose path is returned: a slave whose log is ahead of its master's may hold
// acknowledged messages the master lost, and only an operator should throw them away.
// Crash-safe: queues go first, then segments oldest first, so a crash leaves a shorter log that
// replication resets again. Any goroutine; the log must not take Appends meanwhile.
func (s *Store) ResetTo(base int64, keep bool) (kept string, err error) {
	if base < 0 || base%s.cfg.SegmentSize != 0 {
		return "", fmt.Errorf("cannot reset the log to %d: not a multiple of the segment size %d: %w", base, s.cfg.SegmentSize, ErrInvalidConfig)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return "", ErrClosed
	}
	old := *s.segs.Load()
	if keep {
		kept = filepath.Join(filepath.Dir(s.logDir), "diverged", strconv.FormatInt(time.Now().UnixMilli(), 10))
		if err := os.MkdirAll(kept, 0o755); err != nil {
			return "", fmt.Errorf("cannot set the diverged log aside: %w", err)
		}
	}
	for _, t := range s.topicsSnapshotLocked() {
		s.deleteQueuesLocked(t)
	}
	// No incarnation of the old queues may be applied to the ones the new log creates (at the
	// master's offsets, without their first batches: not known).
	if err := s.writeHistoryLocked(); err != nil {
		return "", fmt.Errorf("cannot reset the log: %w", err)
	}
	// Move the old segments out of the way, oldest first (a crash leaves a shorter log, and
	// Open deletes the moved files); they are removed once no reader maps them, unless kept.
	for _, f := range old {
		p := f.path() + resetSuffix
		if keep {
			p = filepath.Join(kept, filepath.Base(f.path()))
		}
		if err := os.Rename(f.path(), p); err != nil {
			return "", fmt.Errorf("cannot reset the log: %w", err)
		}
		f.pathp.Store(&p)
	}
	if err := fsyncDir(s.logDir); err != nil {
		return "", fmt.Errorf("cannot reset the log: %w", err)
	}
	if keep {
		if err := fsyncDir(kept); err != nil {
			return "", fmt.Errorf("cannot reset the log: %w", err)
		}
	}
	seg, err := s.takeSegmentLocked(base)
	if err != nil {
		return "", err
	}
	list := []*mappedFile{seg}
	s.segs.Store(&list)
	s.setActiveLocked(seg)
	s.writePos = base
	s.minOffset.Store(base)
	s.end.Store(base)
	s.flushed.Store(base)
	s.prefaultedTo.Store(base)
	s.cachedTo.Store(base)
	for _, f := range old {
		f.remove.Store(!keep)
		f.release()
	}
	if err := fsyncDir(s.logDir); err != nil {
		return "", fmt.Errorf("cannot reset the log: %w", err)
	}
	// The new log holds no batch of a deleted queue, nor any epoch yet. (A crash before this
	// leaves records above the new log's end, which recovery moves down to it.)
	clear(s.deleted)
	if err := writeDeletions(s.cfg.Dir, nil); err != nil {
		return "", fmt.Errorf("cannot reset the log: %w", err)
	}
	s.lastEpoch.Store(0)
	// The first batch of the new log follows none of it (the order's start may stay as it is:
	// the batch at the log's min offset is never compared with one before it).
	s.lastTS, s.lastOrdered = 0, false
	s.runFrom = base
	kick(s.allocKick)
	kick(s.qflushKick)
	s.logger.Warn("commitlog: log reset for a resync", "base", base, "segmentsDropped", len(old), "keptIn", kept)
	return kept, nil
}

// topicsSnapshotLocked lists the topics. Caller holds mu.
func (s *Store) topicsSnapshotLocked() []*topicQueues {
	s.qmu.RLock()
	defer s.qmu.RUnlock()
	out := make([]*topicQueues, 0, len(s.topics))
	for _, t := range s.topics {
		out = append(out, t)
	}
	return out
}

// QueuePhysicalOffset returns the physical offset of the batch holding queueOffset in the
// queue, or the log end when queueOffset is at or past the queue's end (the next batch is yet
// to be written) or the queue does not exist. Read suggestions use it to measure how far
// behind the log end a consumer reads. Any goroutine.
func (s *Store) QueuePhysicalOffset(topic []byte, queueID int32, queueOffset int64) int64 {
	q := s.lookupQueue(topic, queueID)
	if q == nil {
		return s.end.Load()
	}
	var c cqCursor
	defer c.close()
	b, err := q.bounds(&c)
	if err != nil || queueOffset >= b.maxOff {
		return s.end.Load()
	}
	if queueOffset < b.minOff {
		queueOffset = b.minOff
	}
	i, err := q.find(&c, b, queueOffset)
	if err != nil || i >= b.cnt {
		return s.end.Load()
	}
	e, err := c.entry(i)
	if err != nil {
		return s.end.Load()
	}
	return e.phys
}

// Checksum returns the SHA-256, in hex, of the log's bytes over [from, to) as stored, segment
// padding included, so that two replicas holding the same log give the same checksum. from < 0
// means the log's min offset, to < 0 its end; both are clamped to the log. It returns the range
// covered. Reads the mapping on the calling goroutine (it may fault pages in): call it off any
// event loop. Any goroutine.
func (s *Store) Checksum(from, to int64) (int64, int64, string, error) {
	lo, end := s.minOffset.Load(), s.end.Load()
	if from < 0 || from < lo {
		from = lo
	}
	if to < 0 || to > end {
		to = end
	}
	if to < from {
		to = from
	}
	h := sha256.New()
	for pos := from; pos < to; {
		seg := findSegment(*s.segs.Load(), pos)
		if seg == nil || !seg.tryAcquire() {
			return from, pos, "", fmt.Errorf("cannot checksum the log at %d: segment gone (retention?): %w", pos, ErrOffsetOutOfRange)
		}
		hi := min(to, seg.end())
		h.Write(seg.data[pos-seg.base : hi-seg.base])
		seg.release()
		pos = hi
	}
	return from, to, hex.EncodeToString(h.Sum(nil)), nil
}

// deleteQueuesLocked removes the queues of t, moving their directory to a trash directory the
// retention goroutine deletes. Caller holds mu.
func (s *Store) deleteQueuesLocked(t *topicQueues) {
	s.qmu.Lock()
	delete(s.topics, t.name)
	s.qmu.Unlock()
	s.historyChangedLocked()
	dir := filepath.Join(s.cqDir, t.dirName)
	trash := filepath.Join(s.cqDir, fmt.Sprintf(".trash-%d-%s", time.Now().UnixNano(), t.dirName))
	renamed := os.Rename(dir, trash) == nil
	if !renamed {
		s.logger.Warn("commitlog: cannot move deleted queues aside; files are kept", "dir", dir)
	} else {
		s.markDirDirty(s.cqDir)
		s.gcMu.Lock()
		s.trashDirs = append(s.trashDirs, trash)
		s.gcMu.Unlock()
	}
	for _, q := range t.queues {
		q.deleted.Store(true)
		for _, f := range *q.files.Load() {
			if renamed {
				p := filepath.Join(trash, filepath.Base(q.dir), filepath.Base(f.path()))
				f.pathp.Store(&p)
				f.remove.Store(true)
			}
			f.release()
		}
	}
}
