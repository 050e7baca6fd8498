package commitlog

import (
	"errors"
	"fmt"
	"os"
	"time"
)

type flushWaiter struct {
	off int64
	cb  func(error)
}

// WaitFlushed calls cb once the log is durable up to physical offset offset (normally an
// AppendResult.EndOffset), with nil, or with an error: the sticky error of a failed msync (every
// later call gets it too) or ErrClosed. It never blocks: cb runs later on the flusher goroutine
// (or on the goroutine calling Close), and must be short and must not call Close. In SyncFlush mode it wakes the flusher at once (group commit: one msync acknowledges
// every waiter it covers); in AsyncFlush mode cb waits for the next periodic flush. After Close,
// cb runs on the calling goroutine with ErrClosed. Any goroutine.
func (s *Store) WaitFlushed(offset int64, cb func(error)) {
	s.fmu.Lock()
	if s.flushDone {
		s.fmu.Unlock()
		cb(ErrClosed)
		return
	}
	s.waiters = append(s.waiters, flushWaiter{off: offset, cb: cb})
	s.fmu.Unlock()
	if s.cfg.FlushMode == SyncFlush || offset <= s.flushed.Load() {
		kick(s.flushKick)
	}
}

// flushLoop is the flusher goroutine. It never takes the store mutex.
func (s *Store) flushLoop() {
	defer s.wg.Done()
	t := time.NewTicker(s.cfg.FlushInterval)
	defer t.Stop()
	for {
		select {
		case <-s.stop:
			return // Close does the final flush
		case <-s.flushKick:
		case <-t.C:
		}
		s.flushOnce()
		s.completeWaiters()
	}
}

// flushOnce msyncs [flushed, end) of the log. Flusher goroutine (or Close after it stopped).
func (s *Store) flushOnce() {
	s.fmu.Lock()
	failed := s.flushErr != nil
	s.fmu.Unlock()
	if failed {
		return
	}
	end := s.end.Load()
	from := s.flushed.Load()
	if end <= from {
		return
	}
	var start time.Time
	if s.cfg.OnFlush != nil {
		start = time.Now()
	}
	if err := s.syncLog(from, end); err != nil {
		s.logger.Error("commitlog: flush failed; durability can no longer be acknowledged", "from", from, "to", end, "err", err)
		s.fmu.Lock()
		s.flushErr = err
		s.fmu.Unlock()
		return
	}
	s.flushed.Store(end)
	if s.cfg.OnFlush != nil {
		s.cfg.OnFlush(time.Since(start), end-from)
	}
}

// syncLog msyncs the log bytes in [from, to), segment by segment (a range crosses a roll's
// marker and tail too).
func (s *Store) syncLog(from, to int64) error {
	for _, seg := range *s.segs.Load() {
		if seg.end() <= from || seg.base >= to {
			continue
		}
		if !seg.tryAcquire() {
			continue // removed by retention: nothing to make durable
		}
		lo, hi := max(from, seg.base)-seg.base, min(to, seg.end())-seg.base
		err := msyncRange(seg.data, lo, hi)
		seg.release()
		s.syncCount.Add(1)
		if err != nil {
			return fmt.Errorf("cannot msync segment %q [%d, %d): %w", seg.path(), lo, hi, err)
		}
	}
	return nil
}

// completeWaiters runs the callbacks of the waiters the flushed offset (or the sticky error)
// covers, outside fmu. Flusher goroutine.
func (s *Store) completeWaiters() {
	flushed := s.flushed.Load()
	s.fmu.Lock()
	err := s.flushErr
	ready := s.ready[:0]
	keep := s.waiters[:0]
	for _, w := range s.waiters {
		if err != nil || w.off <= flushed {
			ready = append(ready, w)
		} else {
			keep = append(keep, w)
		}
	}
	clear(s.waiters[len(keep):])
	s.waiters = keep
	s.fmu.Unlock()
	for _, w := range ready {
		w.cb(err)
	}
	clear(ready)
	s.ready = ready[:0]
}

// finishWaiters completes every waiter after the final flush and makes later WaitFlushed calls
// fail with ErrClosed. Close only.
func (s *Store) finishWaiters() {
	flushed := s.flushed.Load()
	s.fmu.Lock()
	ws := s.waiters
	s.waiters = nil
	s.flushDone = true
	err := s.flushErr
	s.fmu.Unlock()
	for _, w := range ws {
		switch {
		case err != nil:
			w.cb(err)
		case w.off <= flushed:
			w.cb(nil)
		default:
			w.cb(ErrClosed)
		}
	}
}

// queueFlushLoop is the queue flusher goroutine: every QueueFlushInterval it msyncs the consume
// queues and writes the checkpoint.
func (s *Store) queueFlushLoop() {
	defer s.wg.Done()
	t := time.NewTicker(s.cfg.QueueFlushInterval)
	defer t.Stop()
	for {
		select {
		case <-s.stop:
			return // Close does the final flush
		case <-t.C:
		case <-s.qflushKick:
		}
		if err := s.flushQueuesAndCheckpoint(false); err != nil {
			s.logger.Error("commitlog: consume-queue flush failed", "err", err)
		}
	}
}

// flushQueuesAndCheckpoint msyncs every consume queue's new entries, fsyncs directories with new
// files, then writes the checkpoint (unless nothing changed); clean marks a clean shutdown.
// Queue flusher goroutine (or Close).
func (s *Store) flushQueuesAndCheckpoint(clean bool) error {
	end := s.end.Load() // every batch below end has its entry written
	logDurable := s.flushed.Load()
	for _, q := range s.allQueues() {
		if err := q.flush(); err != nil {
			return err
		}
		if !s.cfg.DisablePrefault && !clean {
			q.prefaultAhead()
		}
	}
	if err := s.flushHistory(); err != nil {
		return err
	}
	s.dirMu.Lock()
	dirs := s.dirtyDirs
	s.dirtyDirs = make(map[string]struct{})
	s.dirMu.Unlock()
	for d := range dirs {
		if err := fsyncDir(d); err != nil && !errors.Is(err, os.ErrNotExist) { // gone: DeleteTopic
			s.dirMu.Lock()
			for d := range dirs {
				s.dirtyDirs[d] = struct{}{}
			}
			s.dirMu.Unlock()
			return err
		}
	}
	ck := checkpoint{logDurable: logDurable, queueDurable: end, clean: clean && logDurable == end, ordered: true}
	if ck == s.lastCkpt {
		return nil
	}
	if err := writeCheckpoint(s.cfg.Dir, ck, s.cfg.Now()); err != nil {
		return err
	}
	s.lastCkpt = ck
	return nil
}

// prefaultEntries is how many entries past a queue's end the queue flusher prefaults.
const prefaultEntries = 4096

// prefaultAhead populates the page tables of the next entries of the queue's current file, so
// appends do not page-fault on the consume queue. Queue flusher goroutine.
func (q *consumeQueue) prefaultAhead() {
	cnt := q.count.Load()
	f := fileFor(*q.files.Load(), cnt)
	if f == nil || !f.tryAcquire() {
		return
	}
	defer f.release()
	lo := ((cnt - f.base) * entrySize) &^ (pageSize - 1)
	hi := min(lo+prefaultEntries*entrySize, f.size)
	_ = prefault(f.data[lo:hi])
}

// flush msyncs entries [flushedIdx, count).
func (q *consumeQueue) flush() error {
	from, to := q.flushedIdx.Load(), q.count.Load()
	if to <= from {
		return nil
	}
	for _, f := range *q.files.Load() {
		fe := f.base + f.entries()
		if fe <= from || f.base >= to {
			continue
		}
		if !f.tryAcquire() {
			continue // deleted
		}
		lo, hi := (max(from, f.base)-f.base)*entrySize, (min(to, fe)-f.base)*entrySize
		err := msyncRange(f.data, lo, hi)
		f.release()
		if err != nil {
			return fmt.Errorf("cannot msync consume-queue file %q [%d, %d): %w", f.path(), lo, hi, err)
		}
	}
	q.flushedIdx.Store(to)
	return nil
}
