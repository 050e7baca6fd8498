package commitlog

import (
	"time"
)

// retentionLoop is the retention and cleaner goroutine: every RetentionCheckInterval it deletes
// expired segments and consume-queue files, and whenever a mapped file's last reference goes it
// unmaps (and removes) it, so neither munmap nor unlink ever runs on a reader's goroutine.
func (s *Store) retentionLoop() {
	defer s.wg.Done()
	t := time.NewTicker(s.cfg.RetentionCheckInterval)
	defer t.Stop()
	for {
		select {
		case <-s.stop:
			s.drainGarbage()
			return
		case <-t.C:
			s.runRetention()
		case <-s.retentionKick:
			s.runRetention()
		case <-s.gcKick:
		}
		s.drainGarbage()
	}
}

// runRetention deletes the oldest segments, never the active one, while the oldest is older than
// RetentionAge or the log is larger than RetentionBytes, then the consume-queue files that only
// point below the new log start. A segment still held by a reader is unmapped and removed when
// the reader releases it. Retention goroutine (tests call it directly).
func (s *Store) runRetention() {
	segs := *s.segs.Load()
	now := s.cfg.Now().UnixMilli()
	var total int64
	for _, f := range segs {
		total += f.size
	}
	n := 0
	for ; n < len(segs)-1; n++ {
		f := segs[n]
		expired := s.cfg.RetentionAge > 0 && now-f.newestTS.Load() > s.cfg.RetentionAge.Milliseconds()
		over := s.cfg.RetentionBytes > 0 && total > s.cfg.RetentionBytes
		if !expired && !over {
			break
		}
		total -= f.size
	}
	if n > 0 {
		s.mu.Lock()
		cur := *s.segs.Load()
		for n > 0 && (cur[n-1] == s.active || s.closed) {
			n--
		}
		if n == 0 {
			s.mu.Unlock()
			return
		}
		list := make([]*mappedFile, len(cur)-n)
		copy(list, cur[n:])
		s.minOffset.Store(list[0].base)
		s.segs.Store(&list)
		s.mu.Unlock()
		for _, f := range cur[:n] {
			f.remove.Store(true)
			f.release()
		}
		s.logger.Info("commitlog: retention deleted segments", "segments", n,
			"from", cur[0].base, "to", list[0].base, "logBytes", total)
	}
	s.cleanQueues()
	s.gcMu.Lock()
	if len(s.trashDirs) > 0 {
		s.trashDirs = removeTrash(s.trashDirs)
	}
	s.gcMu.Unlock()
}

// cleanQueues advances each queue's min entry to the log start and deletes the files whose
// entries are all below it, except the file holding the queue's last durable entry (so the
// queue's max offset survives a crash).
func (s *Store) cleanQueues() {
	for _, q := range s.allQueues() {
		var c cqCursor
		b, err := q.bounds(&c)
		c.close()
		if err != nil {
			continue
		}
		if b.lo > q.minIdx.Load() {
			q.minIdx.Store(b.lo)
		}
		keepFrom := min(b.lo, q.flushedIdx.Load()-1)
		files := *q.files.Load()
		k := 0
		for k < len(files)-1 && files[k].base+files[k].entries() <= keepFrom {
			k++
		}
		if k == 0 {
			continue
		}
		s.mu.Lock()
		if q.deleted.Load() {
			s.mu.Unlock()
			continue
		}
		cur := *q.files.Load()
		list := make([]*mappedFile, len(cur)-k)
		copy(list, cur[k:])
		q.files.Store(&list)
		s.mu.Unlock()
		for _, f := range cur[:k] {
			f.remove.Store(true)
			f.release()
		}
	}
}
