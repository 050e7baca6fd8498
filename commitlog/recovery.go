package commitlog

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Recovery is what Open found and did (Store.Recovery).
type Recovery struct {
	// End is the log end offset Open recovered.
	End int64
	// Cut is true when Open dropped bytes after End that were not the log's end: a torn or
	// damaged batch, a batch that does not continue the log's history, or a truncation request.
	Cut bool
	// CutTo is the end of the log's last segment file before the cut: [End, CutTo) was zeroed
	// or removed (the segments' unwritten tails included). Set when Cut.
	CutTo int64
	// Reason says why the scan stopped at End.
	Reason string
	// QueuesBack counts the queues whose max offset went below what their consume queue held
	// before the restart (each is logged): the log was cut, or lost its tail in a crash.
	QueuesBack int
}

// recover loads and repairs the store; see the package documentation. Open only: no other
// goroutine runs yet, and files are freed inline.
func (s *Store) recover() error {
	start := time.Now()
	_ = os.Remove(filepath.Join(s.cfg.Dir, checkpointName+".tmp"))

	segs, err := s.loadSegments()
	if err != nil {
		return err
	}
	s.segs.Store(&segs)
	ck, ckErr := readCheckpoint(s.cfg.Dir)
	ckOK := ckErr == nil
	if ckErr != nil && !errors.Is(ckErr, os.ErrNotExist) {
		s.logger.Warn("commitlog: ignoring bad checkpoint; scanning the whole log", "err", ckErr)
	}
	// Store timestamps are checked only where their order is vouched for: a checkpoint with
	// checkpointOrdered, and the history file's order start (History). A store whose checkpoint lacks the flag
	// (written last by a broker that does not keep the order: an upgrade, a downgrade and back)
	// is recovered without the check.
	hist, err := readHistory(s.cfg.Dir)
	histLost := "" // why the history file tells nothing, for the line deriveBorn's use gets
	if errors.Is(err, ErrCorrupt) {
		s.logger.Warn("commitlog: ignoring bad history file; store timestamps and queue incarnations are not known from it", "err", err)
		histLost = "damaged"
	} else if err != nil {
		return err
	} else if !hist.ok {
		histLost = "missing"
	}
	orderedFrom, orderedOK := hist.orderedFrom, hist.orderedFrom >= 0
	ordered := ckOK && ck.ordered && orderedOK
	fresh := len(segs) == 0 && !ckOK // a new store: nothing to recover
	if len(segs) == 0 {
		seg, err := s.createSegment(0)
		if err != nil {
			return fmt.Errorf("cannot create the first segment: %w", err)
		}
		segs = []*mappedFile{seg}
		s.segs.Store(&segs)
	}
	logMin := segs[0].base
	lastEnd := segs[len(segs)-1].end()
	scanFrom, dispatchFrom := logMin, logMin
	if ckOK {
		if ck.logDurable >= logMin && ck.logDurable <= lastEnd {
			scanFrom = ck.logDurable
			dispatchFrom = min(max(ck.queueDurable, logMin), lastEnd)
		} else {
			s.logger.Warn("commitlog: checkpoint is outside the log; scanning the whole log",
				"checkpoint", ck.logDurable, "logMin", logMin, "logEnd", lastEnd)
		}
	}

	// A truncation request (PrepareTruncate) caps the scan: everything from its offset on is
	// treated as a torn tail.
	truncAt, truncOK, err := readTruncateRequest(s.cfg.Dir)
	if err != nil {
		return err
	}
	if truncOK && (truncAt < logMin || truncAt > lastEnd) {
		s.logger.Warn("commitlog: ignoring a truncation request outside the log", "offset", truncAt, "logMin", logMin, "logEnd", lastEnd)
		truncOK = false
	}
	if truncOK {
		scanFrom, dispatchFrom = min(scanFrom, truncAt), min(dispatchFrom, truncAt)
	}
	// Batches past the durable log are checked against their queues too, even where the
	// queues' entries are durable: the bytes there may not be what was appended.
	dispatchFrom = min(dispatchFrom, scanFrom)

	if d, err := readDeletions(s.cfg.Dir); err != nil {
		return err
	} else if d != nil {
		s.deleted = d
	}
	damage, err := s.loadQueues()
	if err != nil {
		return err
	}
	if gone := s.applyHistory(hist); gone > 0 || !hist.ok {
		s.historyChangedLocked()
	}
	dispatchFrom = min(dispatchFrom, max(damage, logMin))
	crashed := !fresh && (!ckOK || !ck.clean) || truncOK

	// Scan (and re-dispatch) from the start of the segment holding the earlier of the two. Every
	// batch must continue the log's history (package documentation, "History"); the scan stops
	// at the first one that does not (cut: the bytes there are not the log's end).
	k := segIndex(segs, min(scanFrom, dispatchFrom))
	scanStart := segs[k].base
	pos := scanStart
	segs[k].newestTS.Store(0)
	before, beforeAt, hasBefore := s.batchBefore(scanStart)
	epoch := before.Epoch
	// floor is the store timestamp the next batch must not go below when floorSet: that of
	// the batch before it (a lower bound for the first one scanned) lying in the ordered part.
	floor, floorSet := before.StoreTimestamp, ordered && hasBefore && beforeAt >= orderedFrom
	var (
		reason              string
		cut, history        bool // stopped at bytes that are not the end; at a whole batch that does not continue
		batches, dispatched int
		deletionsHealed     bool // a deletion record the deletions file lacked
		afresh              afreshQueues
	)
	ahead := startScanAhead(segs[k:], pos)
	defer ahead.close() // on an error return; the scan's end closes it first
	for {
		seg := segs[k]
		if truncOK && pos >= truncAt {
			reason = fmt.Sprintf("truncation requested at %d", truncAt)
			cut = true
			break
		}
		rel := pos - seg.base
		rem := seg.size - rel
		if rem < markerSize || binary.BigEndian.Uint32(seg.data[rel:]) == 0 &&
			binary.BigEndian.Uint32(seg.data[rel+4:]) == SegmentEndMagic {
			// Without room for a marker the log moves on only to a next segment that holds a
			// batch: an empty one was preallocated ahead of the roll, and the end is here, as a
			// live store that had not rolled yet reported it (a slave recovering past it would
			// ask its master for an offset beyond the master's end).
			if k+1 < len(segs) && (rem >= markerSize || binary.BigEndian.Uint32(segs[k+1].data) != 0) {
				k++
				pos = segs[k].base
				segs[k].newestTS.Store(0)
				continue
			}
			if rem < markerSize {
				reason = "end of the last segment"
			} else {
				reason = "segment-end marker without a next segment"
			}
			break
		}
		b := seg.data[rel:]
		if binary.BigEndian.Uint32(b) == 0 {
			reason = "end of log"
			break
		}
		cut = true // unless the batch passes every check below
		info, err := s.cfg.Parser(b, pos)
		if err != nil {
			reason = "batch rejected by parser: " + err.Error()
			break
		}
		if info.Size < minBatchSize || int64(info.Size) > rem {
			reason = fmt.Sprintf("batch size %d outside [%d, %d]", info.Size, minBatchSize, rem)
			break
		}
		if info.Count <= 0 || info.QueueID < 0 || len(info.Topic) == 0 || len(info.Topic) > maxTopicLen || info.BaseQueueOffset < 0 {
			reason = fmt.Sprintf("batch with count %d, queue %q/%d, base offset %d", info.Count, info.Topic, info.QueueID, info.BaseQueueOffset)
			break
		}
		if info.Epoch < epoch {
			reason = fmt.Sprintf("batch of %s/%d (base queue offset %d) is of epoch %d, after one of epoch %d",
				info.Topic, info.QueueID, info.BaseQueueOffset, info.Epoch, epoch)
			history = true
			break
		}
		if floorSet && info.StoreTimestamp < floor {
			reason = fmt.Sprintf("batch of %s/%d (base queue offset %d) has store timestamp %d, below the previous batch's %d",
				info.Topic, info.QueueID, info.BaseQueueOffset, info.StoreTimestamp, floor)
			history = true
			break
		}
		if why := afresh.check(pos, &info); why != "" {
			reason, history = why, true
			break
		}
		if info.Control {
			if info.DeletesTopic && s.recoverDeletion(pos, info.Topic) {
				deletionsHealed = true
			}
		} else if pos >= dispatchFrom {
			did, why, err := s.redispatch(pos, &info, dispatchFrom)
			if err != nil {
				return err
			}
			if why != "" {
				reason, history = why, true
				break
			}
			if did {
				dispatched++
			}
		}
		cut = false
		if info.StoreTimestamp > seg.newestTS.Load() {
			seg.newestTS.Store(info.StoreTimestamp)
		}
		epoch = info.Epoch
		floor, floorSet = info.StoreTimestamp, ordered && pos >= orderedFrom
		pos += int64(info.Size)
		batches++
		ahead.advance(pos)
	}
	ahead.close()
	end := pos
	endSeg := segs[k]
	if end != ck.logDurable || cut {
		crashed = true // not where the clean shutdown left it, or something was written after it
	}
	if !crashed {
		// A clean Close left zeros after the end; bytes that are not (written while the store
		// was closed) would be read as the log's continuation once appends reach them.
		rel := end - endSeg.base
		if !allZero(endSeg.data[rel:min(rel+tailCheckWindow, endSeg.size)]) {
			s.logger.Warn("commitlog: bytes that are not zero after the end of a cleanly closed log; zeroing the segment's tail", "end", end)
			crashed = true
		}
	}

	// Consume queues first: entries at or after dispatchFrom that no scanned batch confirmed
	// (dangling past the end, or junk) go, and after a crash each queue's file tail is zeroed.
	// Then the log's tail: zero the rest of the end segment, and only then delete later segments.
	zeroedQueues := 0
	for q := range s.eachQueue {
		// Entries at or after the end (even below dispatchFrom, when the log lost durable
		// consume-queue entries' batches) have no batch.
		z, err := q.finishTail(min(dispatchFrom, end), crashed)
		if err != nil {
			return err
		}
		if z {
			zeroedQueues++
		}
	}
	if zeroedQueues > 0 { // one commit for all the queues' zeroed tails
		if err := syncFS(s.cqDir); err != nil {
			return err
		}
	}
	back := s.queuesBack(end, cut)
	var zeroed int64
	if crashed { // after a clean Close the tail is known to be zero
		if err := zeroTail(endSeg.path(), endSeg.data, end-endSeg.base, true); err != nil {
			return fmt.Errorf("cannot truncate the log at offset %d: %w", end, err)
		}
		zeroed = endSeg.end() - end
	}
	removed := len(segs) - (k + 1)
	for j := len(segs) - 1; j > k; j-- {
		segs[j].remove.Store(true)
		segs[j].release()
	}
	segs = slices.Clone(segs[:k+1])
	s.segs.Store(&segs)
	if removed > 0 {
		if err := fsyncDir(s.logDir); err != nil {
			return err
		}
	}

	s.setActiveLocked(endSeg)
	s.writePos = end
	s.end.Store(end)
	s.minOffset.Store(logMin)
	s.nextBase.Store(endSeg.end())
	if err := s.syncLog(scanStart, end); err != nil {
		return err
	}
	s.flushed.Store(end)

	// Deletions whose records the log no longer holds (cut, or lost in a crash) did not happen
	// in this log's history: their topics' batches are indexed again.
	undone, err := s.finishDeletions(logMin, end, deletionsHealed)
	if err != nil {
		return err
	}
	if len(undone) > 0 {
		n, err := s.reindexTopics(undone, logMin, end)
		if err != nil {
			return err
		}
		dispatched += n
	}
	queues, err := s.finishQueues(logMin)
	if err != nil {
		return err
	}
	if n := s.deriveBorn(); n > 0 || histLost != "" && !fresh {
		if histLost == "" {
			histLost = "without these queues"
		}
		s.logger.Warn("commitlog: queue incarnations not known from the history file: derived from each queue's first batch still in the log (a queue whose first batch retention removed stays not known); store timestamps are checked from the recovered end on",
			"historyFile", histLost, "derived", n, "queues", queues)
	}
	s.lastEpoch.Store(epoch)
	// From here on the store keeps its timestamps in order: the next batch keeps the order of the last one
	// when it is known exactly (a batch scanned) and in the ordered part; otherwise the order
	// starts at the end. The history file is durable before the checkpoint that vouches for it.
	s.lastTS, s.lastOrdered = floor, batches > 0 && floorSet
	newFrom := end
	if s.lastOrdered {
		newFrom = min(orderedFrom, end)
	}
	s.orderedFrom = newFrom
	if !orderedOK || newFrom != orderedFrom {
		s.historyChangedLocked()
	}
	if s.histGen != s.histWritten.Load() {
		if err := s.writeHistoryLocked(); err != nil {
			return err
		}
	}
	s.runFrom = end
	ck = checkpoint{logDurable: end, queueDurable: end, ordered: true}
	if err := writeCheckpoint(s.cfg.Dir, ck, s.cfg.Now()); err != nil {
		return err
	}
	s.lastCkpt = ck
	if truncOK {
		if end != truncAt {
			s.logger.Error("commitlog: truncation request was not on a batch boundary; cut at the next one", "requested", truncAt, "end", end)
		}
		if err := doneTruncateRequest(s.cfg.Dir); err != nil {
			return fmt.Errorf("cannot remove the truncation request: %w", err)
		}
	}
	s.recovery = Recovery{End: end, Cut: cut, Reason: reason, QueuesBack: back}
	if cut {
		s.recovery.CutTo = lastEnd
		// A torn write is what a crash leaves; anything else after the end (a clean shutdown
		// left it zero) or a whole batch that does not continue the history was not written
		// by this log's appends.
		level := slog.LevelWarn
		if history || ckOK && ck.clean && !truncOK {
			level = slog.LevelError
		}
		s.logger.Log(context.Background(), level, "commitlog: recovery cut the log; everything from the first batch that does not continue the log's history is dropped",
			"cutFrom", end, "cutTo", lastEnd, "reason", reason, "segmentsRemoved", removed, "queuesWentBack", back)
	}
	s.logger.Info("commitlog: recovered",
		"dir", s.cfg.Dir,
		"logMin", logMin,
		"endOffset", end,
		"scanFrom", scanStart,
		"dispatchFrom", dispatchFrom,
		"batchesScanned", batches,
		"entriesRebuilt", dispatched,
		"stop", reason,
		"crashed", crashed,
		"tailZeroedBytes", zeroed,
		"segmentsRemoved", removed,
		"queueTailsZeroed", zeroedQueues,
		"queues", queues,
		"took", time.Since(start))
	return nil
}

// segIndex returns the index of the segment containing off (the last one for the log end).
func segIndex(segs []*mappedFile, off int64) int {
	for i, f := range segs {
		if off < f.end() {
			return i
		}
	}
	return len(segs) - 1
}

// loadSegments maps every segment file, checking that they are contiguous. A trailing empty
// file (a pre-allocation cut short) is removed.
func (s *Store) loadSegments() ([]*mappedFile, error) {
	ents, err := os.ReadDir(s.logDir)
	if err != nil {
		return nil, fmt.Errorf("cannot list %q: %w", s.logDir, err)
	}
	var bases []int64
	for _, e := range ents {
		if strings.HasSuffix(e.Name(), resetSuffix) { // left over by a ResetTo that crashed
			if err := os.Remove(filepath.Join(s.logDir, e.Name())); err != nil {
				return nil, fmt.Errorf("cannot remove %q: %w", e.Name(), err)
			}
			continue
		}
		b, ok := parseFileName(e.Name())
		if !ok || !e.Type().IsRegular() {
			s.logger.Warn("commitlog: ignoring unexpected file in the log directory", "name", e.Name())
			continue
		}
		bases = append(bases, b)
	}
	slices.Sort(bases)
	var segs []*mappedFile
	fail := func(err error) ([]*mappedFile, error) {
		for _, f := range segs {
			f.release()
		}
		return nil, err
	}
	for i, b := range bases {
		path := filePath(s.logDir, b)
		m, size, fi, err := mapExisting(path)
		if err != nil {
			return fail(err)
		}
		if size == 0 {
			if i == len(bases)-1 {
				s.logger.Warn("commitlog: removing empty segment file", "path", path)
				if err := os.Remove(path); err != nil {
					return fail(fmt.Errorf("cannot remove %q: %w", path, err))
				}
				continue
			}
			return fail(fmt.Errorf("cannot load segment %q: empty file in the middle of the log: %w", path, ErrCorrupt))
		}
		f := s.newMappedFile(path, b, m)
		f.newestTS.Store(fi.ModTime().UnixMilli())
		if len(segs) > 0 && segs[len(segs)-1].end() != b {
			prev := segs[len(segs)-1]
			f.release()
			return fail(fmt.Errorf("cannot load segment %q: it does not start where %q (%d bytes) ends: %w", path, prev.path(), prev.size, ErrCorrupt))
		}
		segs = append(segs, f)
	}
	return segs, nil
}

func parseFileName(name string) (int64, bool) {
	if len(name) != nameDigits {
		return 0, false
	}
	for i := 0; i < len(name); i++ {
		if name[i] < '0' || name[i] > '9' {
			return 0, false
		}
	}
	n, err := strconv.ParseInt(name, 10, 64)
	return n, err == nil
}

// loadQueues loads every consume queue. It returns the lowest physical offset from which a
// damaged queue must be rebuilt (math.MaxInt64 when none is damaged).
func (s *Store) loadQueues() (int64, error) {
	damage := int64(math.MaxInt64)
	tds, err := os.ReadDir(s.cqDir)
	if err != nil {
		return 0, fmt.Errorf("cannot list %q: %w", s.cqDir, err)
	}
	for _, td := range tds {
		name := td.Name()
		dir := filepath.Join(s.cqDir, name)
		if strings.HasPrefix(name, ".trash-") {
			if err := os.RemoveAll(dir); err != nil {
				return 0, fmt.Errorf("cannot remove deleted queues %q: %w", dir, err)
			}
			s.markDirDirty(s.cqDir)
			continue
		}
		topic, err := unescapeTopic(name)
		if !td.IsDir() || err != nil || topic == "" || len(topic) > maxTopicLen {
			s.logger.Warn("commitlog: ignoring unexpected entry in the consume-queue directory", "name", name)
			continue
		}
		qds, err := os.ReadDir(dir)
		if err != nil {
			return 0, fmt.Errorf("cannot list %q: %w", dir, err)
		}
		for _, qd := range qds {
			id, err := strconv.ParseInt(qd.Name(), 10, 32)
			if !qd.IsDir() || err != nil || id < 0 || s.topics[topic] != nil && s.topics[topic].queues[int32(id)] != nil {
				s.logger.Warn("commitlog: ignoring unexpected entry in a topic directory", "dir", dir, "name", qd.Name())
				continue
			}
			d, err := s.loadQueue(topic, name, int32(id), filepath.Join(dir, qd.Name()))
			if err != nil {
				return 0, err
			}
			damage = min(damage, d)
		}
	}
	return damage, nil
}

// tailCheckWindow is how far past the end of a cleanly closed log recovery checks that the
// bytes are zero.
const tailCheckWindow = 64 << 10

// crashZeroWindow is how far past a queue's last entry recovery zeroes its file after a crash
// (a range FALLOC_FL_ZERO_RANGE clears cheaply). NB: a crash of the machine (not just
// the process) can persist pages out of order, so entries written after the last queue flush
// may survive behind a hole; this clears them for any queue that wrote fewer than 32768 entries
// per QueueFlushInterval.
const crashZeroWindow = 1 << 20

// queueCheckFiles is how many of a queue's newest files recovery checks entry by entry; older
// files get their first and last entries checked.
const queueCheckFiles = 3

// loadQueue maps one queue's files, keeps the longest valid prefix of entries and zeroes the
// rest. It returns the physical offset to rebuild the queue from if it was damaged.
func (s *Store) loadQueue(topic, dirName string, id int32, dir string) (int64, error) {
	damage := int64(math.MaxInt64)
	ents, err := os.ReadDir(dir)
	if err != nil {
		return 0, fmt.Errorf("cannot list %q: %w", dir, err)
	}
	var bases []int64
	for _, e := range ents {
		if b, ok := parseFileName(e.Name()); ok && e.Type().IsRegular() {
			bases = append(bases, b)
		}
	}
	slices.Sort(bases)
	q := s.newQueue(topic, dirName, id)
	q.dir = dir
	var files []*mappedFile
	damaged := false
	for i, b := range bases {
		path := filePath(dir, b)
		if damaged {
			if err := os.Remove(path); err != nil {
				return 0, fmt.Errorf("cannot remove %q: %w", path, err)
			}
			s.markDirDirty(dir)
			continue
		}
		m, size, _, err := mapExisting(path)
		if err != nil {
			for _, f := range files {
				f.release()
			}
			return 0, err
		}
		var f *mappedFile
		if size >= entrySize {
			f = s.newMappedFile(path, b, m)
		} else if m != nil {
			_ = m.Unmap()
		}
		if f == nil || len(files) > 0 && files[len(files)-1].base+files[len(files)-1].entries() != b {
			// A short file or a gap: everything from here on goes; it is only damage if
			// anything follows (a trailing short file is a creation cut short by a crash).
			damaged = i < len(bases)-1 || f != nil
			if f != nil {
				f.remove.Store(true)
				f.release()
			} else if err := os.Remove(path); err != nil {
				return 0, fmt.Errorf("cannot remove %q: %w", path, err)
			}
			s.markDirDirty(dir)
			s.logger.Warn("commitlog: dropping consume-queue files", "from", path)
			continue
		}
		files = append(files, f)
	}
	q.files.Store(&files)
	if len(files) == 0 {
		return damage, nil // finishQueues removes it
	}

	// Quick check of the older files, then entry by entry from the newest ones.
	first := max(0, len(files)-queueCheckFiles)
	var prev entry
	hasPrev := false
	for i := 0; i < first; i++ {
		f := files[i]
		e0, ok0 := decodeEntry(f.data[:entrySize])
		en, okn := decodeEntry(f.data[(f.entries()-1)*entrySize : f.entries()*entrySize])
		if !ok0 || !okn || hasPrev && !e0.follows(prev) || f.entries() > 1 && !en.follows(e0) {
			first, hasPrev = 0, false
			s.logger.Warn("commitlog: consume-queue file fails the quick check; checking every entry", "path", f.path())
			break
		}
		f.firstBase.Store(e0.base)
		prev, hasPrev = en, true
	}
	idx := files[first].base
	bad := false
scan:
	for _, f := range files[first:] {
		for j := int64(0); j < f.entries(); j++ {
			b := f.data[j*entrySize : (j+1)*entrySize]
			if allZero(b) {
				break scan
			}
			e, ok := decodeEntry(b)
			if !ok || hasPrev && !e.follows(prev) {
				bad = true
				break scan
			}
			if j == 0 {
				f.firstBase.Store(e.base)
			}
			prev, hasPrev = e, true
			idx++
		}
	}
	// Anything non-zero after the valid prefix was written once: a hole or a torn entry in
	// front of it means entries may be missing, so rebuild from the last valid one. Only the
	// rest of the page holding the prefix's end is looked at (faulting in more zero pages costs
	// too much with many queues); after a crash finishTail zeroes the whole tail anyway.
	if f := fileFor(files, idx); !bad && f != nil {
		lo := (idx - f.base) * entrySize
		hi := min((lo/pageSize+1)*pageSize, f.size)
		bad = !allZero(f.data[lo:hi])
	}
	// So does a newest file shorter than its predecessor (or than configured).
	if lf := files[len(files)-1]; len(files) > 1 && lf.size < files[len(files)-2].size ||
		len(files) == 1 && lf.size < int64(s.cfg.QueueFileEntries)*entrySize && lf.base+lf.entries() == idx {
		bad = true
	}
	q.hwm = idx + 1 // a torn entry at idx
	q.truncateRecovery(idx)
	q.loaded = q.next
	if d, ok := s.deleted[topic]; ok && q.cnt > files[0].base {
		if e, _ := q.rawEntry(files[0].base); e.phys < d {
			// Left by a crash in a topic deletion, after the record and before the move.
			s.logger.Warn("commitlog: removing a consume queue its topic's recorded deletion removed", "topic", topic, "queue", id, "deletedAt", d)
			s.dropQueueRecovery(q)
			return damage, nil
		}
	}
	q.needZero = bad || damaged
	if bad || damaged {
		damage = 0
		if hasPrev {
			damage = prev.end()
		}
		s.logger.Warn("commitlog: consume queue damaged; rebuilding it from the log",
			"topic", topic, "queue", id, "validEntries", idx-files[0].base, "rebuildFrom", damage)
	}
	return damage, nil
}

// rawEntry decodes entry i. Recovery only (no references taken).
func (q *consumeQueue) rawEntry(i int64) (entry, bool) {
	f := fileFor(*q.files.Load(), i)
	if f == nil {
		return entry{}, false
	}
	rel := (i - f.base) * entrySize
	return decodeEntry(f.data[rel : rel+entrySize])
}

// searchRaw returns the first index in [lo, hi) whose entry satisfies pred (monotone).
func (q *consumeQueue) searchRaw(lo, hi int64, pred func(entry) bool) int64 {
	for lo < hi {
		m := lo + (hi-lo)/2
		e, _ := q.rawEntry(m)
		if pred(e) {
			hi = m
		} else {
			lo = m + 1
		}
	}
	return lo
}

// truncateRecovery keeps the entries below n (logically: finishTail deletes and zeroes what is
// after the last entry). Recovery only.
func (q *consumeQueue) truncateRecovery(n int64) {
	files := *q.files.Load()
	first := files[0].base
	n = max(n, first)
	if n < q.cnt {
		q.needZero = true
	}
	q.cnt = n
	q.next = 0
	if n > first {
		e, _ := q.rawEntry(n - 1)
		q.next = e.nextOff()
	}
	q.last = fileFor(files, max(n-1, first))
	q.count.Store(q.cnt)
	q.maxOffset.Store(q.next)
}

// finishTail truncates the entries at or after physical offset from that no re-dispatched
// batch confirmed, deletes the files after the last entry (the first file always stays) and,
// after a crash or a truncation, zeroes the rest of the last file; it reports whether it did
// (the caller makes that durable). Recovery only.
func (q *consumeQueue) finishTail(from int64, crashed bool) (bool, error) {
	files := *q.files.Load()
	if len(files) == 0 {
		return false, nil
	}
	first := files[0].base
	if q.confirm < 0 {
		q.confirm = q.searchRaw(first, q.cnt, func(e entry) bool { return e.phys >= from })
	}
	if q.confirm < q.cnt {
		q.truncateRecovery(q.confirm)
	}
	keep := len(files)
	for keep > 1 && files[keep-1].base >= q.cnt {
		keep--
	}
	for j := len(files) - 1; j >= keep; j-- {
		files[j].remove.Store(true)
		files[j].release()
		q.s.markDirDirty(q.dir)
	}
	files = slices.Clone(files[:keep])
	q.files.Store(&files)
	last := files[keep-1]
	q.last = last
	zero := crashed || q.needZero
	if zero {
		// Entries recovery saw past the end, plus a window for entries a crash may have
		// persisted out of order after a hole (see crashZeroWindow).
		hi := min(max(q.hwm, q.cnt+crashZeroWindow/entrySize), last.base+last.entries())
		if err := zeroRange(last.path(), last.data, (q.cnt-last.base)*entrySize, (hi-last.base)*entrySize); err != nil {
			return false, fmt.Errorf("cannot truncate consume queue %s/%d at entry %d: %w", q.topic, q.queueID, q.cnt, err)
		}
	}
	q.needZero = false
	return zero, nil
}

// redispatch indexes the batch at pos (>= from) during recovery, if it continues its queue:
// its base queue offset must be where the queue's entries before from and the batches
// re-dispatched since end (any base for a queue with none, whose first batch sets its offsets).
// Otherwise it returns why not, and recovery cuts the log there. Entries pointing at or after
// from must match the scanned batches one for one, in order: a matching entry is kept, anything
// else from there on is truncated and the batch's entry appended. A batch of a topic below its
// recorded deletion belongs to the deleted queues and is not indexed.
func (s *Store) redispatch(pos int64, info *BatchInfo, from int64) (bool, string, error) {
	if d, ok := s.deleted[string(info.Topic)]; ok && pos < d {
		return false, "", nil
	}
	q := s.queueLocked(info.Topic, info.QueueID)
	if q == nil {
		var err error
		if q, err = s.createQueueLocked(string(info.Topic), info.QueueID); err != nil {
			return false, "", err
		}
	}
	base, size, count := info.BaseQueueOffset, int64(info.Size), int64(info.Count)
	if files := *q.files.Load(); len(files) > 0 {
		first := files[0].base
		if q.confirm < 0 {
			q.confirm = q.searchRaw(first, q.cnt, func(e entry) bool { return e.phys >= from })
			if q.confirm > first {
				e, _ := q.rawEntry(q.confirm - 1)
				q.prevNext, q.prevEnd, q.hasPrev = e.nextOff(), e.end(), true
			}
		}
		if q.hasPrev && (base != q.prevNext || pos < q.prevEnd) {
			return false, fmt.Sprintf("batch of %s/%d has base queue offset %d, but the queue continues at %d (after the batch ending at %d)",
				info.Topic, info.QueueID, base, q.prevNext, q.prevEnd), nil
		}
		if q.confirm < q.cnt {
			if e, ok := q.rawEntry(q.confirm); ok && e.phys == pos && e.base == base && e.size == size &&
				e.count == count && e.tag == info.TagHash {
				if q.confirm == 0 && base == 0 {
					s.setBorn(q, pos, info.StoreTimestamp) // the queue's first batch is at hand
				}
				q.confirm++
				q.prevNext, q.prevEnd, q.hasPrev = e.nextOff(), e.end(), true
				q.lastTS.Store(info.StoreTimestamp)
				return false, "", nil
			}
			q.truncateRecovery(q.confirm)
		}
	}
	if err := q.ensureRoomLocked(); err != nil {
		return false, "", err
	}
	if q.cnt == 0 && base == 0 {
		s.setBorn(q, pos, info.StoreTimestamp)
	}
	q.writeEntryLocked(pos, info.Size, base, info.Count, info.TagHash, info.StoreTimestamp)
	q.last.dirty = true
	q.hwm = max(q.hwm, q.cnt)
	q.confirm = q.cnt
	q.prevNext, q.prevEnd, q.hasPrev = base+count, pos+size, true
	return true, "", nil
}

// recoverDeletion applies the deletion record of topic found at pos during the scan. The
// deletions file normally holds it already (DeleteTopic records it before the record is
// written); if it does not, the record is applied now (self-healing): the topic's queues
// holding only batches below the record go, and the record's position is recorded. It reports
// whether the deletions file must be rewritten. Recovery only.
func (s *Store) recoverDeletion(pos int64, topic []byte) bool {
	if d, ok := s.deleted[string(topic)]; ok && d >= pos {
		return false
	}
	name := string(topic)
	s.logger.Warn("commitlog: a deletion record the deletions file lacks; applying it", "topic", name, "recordAt", pos)
	s.deleted[name] = pos
	s.qmu.RLock()
	var qs []*consumeQueue
	if t := s.topics[name]; t != nil {
		for _, q := range t.queues {
			qs = append(qs, q)
		}
	}
	s.qmu.RUnlock()
	for _, q := range qs {
		files := *q.files.Load()
		if len(files) == 0 || q.cnt == files[0].base {
			continue
		}
		if e, ok := q.rawEntry(q.cnt - 1); !ok || e.phys < pos {
			s.dropQueueRecovery(q)
		}
	}
	return true
}

// reindexTopics indexes the batches of topics in [logMin, end) again from the log, for
// deletions recovery undid (their records were cut, or lost in a crash). A topic whose queues
// still hold entries never had them moved aside (the crash came before the record was written)
// and keeps them; the others lost their queues with the deletion, and their batches belong to
// the queues the log's history still has: the queues are built again, applying the topic's
// older deletion records on the way. A batch that does not continue its queue ends the topic's
// indexing (logged). It returns the number of entries written. Recovery only, after
// finishTail; it rewrites the deletions file when it found older deletion records.
func (s *Store) reindexTopics(topics map[string]bool, logMin, end int64) (int, error) {
	for _, q := range s.allQueues() {
		if files := *q.files.Load(); topics[q.topic] && len(files) > 0 && q.cnt > files[0].base {
			delete(topics, q.topic)
		}
	}
	if len(topics) == 0 {
		return 0, nil
	}
	for _, q := range s.allQueues() {
		if topics[q.topic] { // the re-created queues, whose entries all pointed past end
			s.dropQueueRecovery(q)
		}
	}
	segs := *s.segs.Load()
	k := segIndex(segs, logMin)
	pos := max(segs[k].base, logMin)
	n, deletions := 0, false
	for pos < end {
		seg := segs[k]
		rel := pos - seg.base
		if seg.size-rel < markerSize || binary.BigEndian.Uint32(seg.data[rel:]) == 0 {
			if k+1 >= len(segs) {
				break
			}
			k++
			pos = segs[k].base
			continue
		}
		info, err := s.cfg.Parser(seg.data[rel:min(end, seg.end())-seg.base], pos)
		if err != nil {
			s.logger.Error("commitlog: a batch no longer parses while indexing the topics whose deletion was undone; their later batches are not indexed",
				"at", pos, "err", err)
			break
		}
		name := string(info.Topic)
		if topics[name] {
			switch {
			case info.DeletesTopic:
				for _, q := range s.allQueues() {
					if q.topic == name {
						s.dropQueueRecovery(q)
					}
				}
				s.deleted[name] = pos
				deletions = true
			case !info.Control:
				q := s.queueLocked(info.Topic, info.QueueID)
				if q == nil {
					if q, err = s.createQueueLocked(name, info.QueueID); err != nil {
						return n, err
					}
				}
				if q.cnt > 0 && info.BaseQueueOffset != q.next {
					s.logger.Error("commitlog: a batch does not continue its queue while indexing a topic whose deletion was undone; the topic's later batches are not indexed",
						"topic", name, "queue", info.QueueID, "at", pos, "baseQueueOffset", info.BaseQueueOffset, "queueContinuesAt", q.next)
					delete(topics, name)
					break
				}
				if err := q.ensureRoomLocked(); err != nil {
					return n, err
				}
				if q.cnt == 0 && info.BaseQueueOffset == 0 {
					s.setBorn(q, pos, info.StoreTimestamp)
				}
				q.writeEntryLocked(pos, info.Size, info.BaseQueueOffset, info.Count, info.TagHash, info.StoreTimestamp)
				q.last.dirty = true
				q.hwm = max(q.hwm, q.cnt)
				q.lastTS.Store(info.StoreTimestamp)
				n++
			}
		}
		pos += int64(info.Size)
	}
	if deletions {
		if err := writeDeletions(s.cfg.Dir, s.deleted); err != nil {
			return n, err
		}
	}
	s.logger.Warn("commitlog: indexed again the topics whose deletion was undone", "entries", n)
	return n, nil
}

// batchBefore returns the log's last batch before off as the consume queues index it, and its
// position; ok is false when none is, or it does not parse. Where the scan starts in the middle
// of the log, the history it checks continues that batch's: its epoch, and its store timestamp
// as a lower bound (a deletion record after it, indexed nowhere, may be later). Recovery only.
func (s *Store) batchBefore(off int64) (info BatchInfo, at int64, ok bool) {
	var last entry
	found := false
	for q := range s.eachQueue {
		files := *q.files.Load()
		if len(files) == 0 {
			continue
		}
		i := q.searchRaw(files[0].base, q.cnt, func(e entry) bool { return e.phys >= off })
		if i == files[0].base {
			continue
		}
		if e, ok := q.rawEntry(i - 1); ok && (!found || e.phys > last.phys) {
			last, found = e, true
		}
	}
	if !found {
		return BatchInfo{}, 0, false
	}
	info, ok = s.parseEntry(last)
	return info, last.phys, ok
}

// afreshQueues tracks, for each topic whose deletion record recovery scanned, the queues that
// have had a batch since: the first batch of any other queue of the topic starts a queue created
// afresh, at queue offset 0 (History). Only records the scan met count: the scan saw every batch
// after them, whatever the consume queues hold.
type afreshQueues map[string]map[int32]bool

// check notes the batch at pos and returns why it does not continue its topic's history after a
// deletion ("" when it does): a deletion record starts the topic's queues afresh, and a queue's
// first batch after it must have base queue offset 0.
func (a *afreshQueues) check(pos int64, info *BatchInfo) string {
	if info.Control {
		if info.DeletesTopic {
			if *a == nil {
				*a = afreshQueues{}
			}
			(*a)[string(info.Topic)] = map[int32]bool{}
		}
		return ""
	}
	seen, ok := (*a)[string(info.Topic)]
	if !ok || seen[info.QueueID] {
		return ""
	}
	if info.BaseQueueOffset != 0 {
		return fmt.Sprintf("batch of %s/%d at %d has base queue offset %d, but it is the queue's first since the topic's deletion record, and a queue created afresh starts at 0",
			info.Topic, info.QueueID, pos, info.BaseQueueOffset)
	}
	seen[info.QueueID] = true
	return ""
}

// queuesBack reports the queues whose max offset is below what their consume queue held when
// Open loaded it: only a cut log (or entries pointing past a log that lost its tail) may do
// that, and it is logged per queue. It returns how many. Recovery only, after finishTail.
func (s *Store) queuesBack(end int64, cut bool) int {
	why := "its entries pointed past the recovered log end"
	if cut {
		why = "the log was cut"
	}
	n := 0
	for q := range s.eachQueue {
		if q.next >= q.loaded {
			continue
		}
		n++
		if n <= maxQueuesBackLogged {
			s.logger.Warn("commitlog: a queue's max offset went back across the restart", "topic", q.topic, "queue", q.queueID,
				"maxOffsetBefore", q.loaded, "maxOffset", q.next, "logEnd", end, "because", why)
		}
	}
	if n > maxQueuesBackLogged {
		s.logger.Warn("commitlog: more queues' max offsets went back", "queues", n, "logged", maxQueuesBackLogged)
	}
	return n
}

// maxQueuesBackLogged bounds the per-queue lines queuesBack logs.
const maxQueuesBackLogged = 20

// eachQueue yields every consume queue under qmu's read lock, without allocating a snapshot:
// the loop body must not create or remove queues, nor take qmu (use allQueues for that).
func (s *Store) eachQueue(yield func(*consumeQueue) bool) {
	s.qmu.RLock()
	defer s.qmu.RUnlock()
	for _, t := range s.topics {
		for _, q := range t.queues {
			if !yield(q) {
				return
			}
		}
	}
}

// allQueues returns every consume queue (a snapshot; callers work on it without qmu).
func (s *Store) allQueues() []*consumeQueue {
	s.qmu.RLock()
	defer s.qmu.RUnlock()
	n := 0
	for _, t := range s.topics {
		n += len(t.queues)
	}
	qs := make([]*consumeQueue, 0, n) // one allocation: the queue flusher calls this every tick
	for _, t := range s.topics {
		for _, q := range t.queues {
			qs = append(qs, q)
		}
	}
	return qs
}

// finishQueues removes queues left without entries, msyncs what recovery changed, and sets each
// queue's published state. It returns the number of queues.
func (s *Store) finishQueues(logMin int64) (int, error) {
	n := 0
	for _, q := range s.allQueues() {
		files := *q.files.Load()
		if len(files) == 0 || q.cnt == files[0].base {
			if len(files) > 0 && files[0].base > 0 {
				s.logger.Warn("commitlog: consume queue has lost all its entries; its offsets restart at 0",
					"topic", q.topic, "queue", q.queueID)
			}
			s.dropQueueRecovery(q)
			continue
		}
		n++
		for _, f := range files {
			if f.dirty {
				if err := msyncRange(f.data, 0, f.size); err != nil {
					return 0, fmt.Errorf("cannot msync consume-queue file %q: %w", f.path(), err)
				}
				f.dirty = false
			}
		}
		first := files[0].base
		q.minIdx.Store(q.searchRaw(first, q.cnt, func(e entry) bool { return e.phys >= logMin }))
		q.flushedIdx.Store(q.cnt)
		q.count.Store(q.cnt)
		q.maxOffset.Store(q.next)
		q.hint.Store(0)
		if q.lastTS.Load() == 0 {
			q.lastTS.Store(s.parseStoreTS(q))
		}
	}
	s.dirMu.Lock()
	dirs := s.dirtyDirs
	s.dirtyDirs = make(map[string]struct{})
	s.dirMu.Unlock()
	for d := range dirs {
		if _, err := os.Stat(d); err != nil {
			continue // removed meanwhile
		}
		if err := fsyncDir(d); err != nil {
			return 0, err
		}
	}
	return n, nil
}

// parseStoreTS returns the store timestamp of the queue's last batch, 0 if it is not in the log.
func (s *Store) parseStoreTS(q *consumeQueue) int64 {
	e, ok := q.rawEntry(q.cnt - 1)
	if !ok {
		return 0
	}
	info, _ := s.parseEntry(e)
	return info.StoreTimestamp
}

// parseEntry parses the batch a consume-queue entry points at; ok is false (and the BatchInfo
// zero) when it is not in the log or does not parse. Recovery only (no references taken).
func (s *Store) parseEntry(e entry) (BatchInfo, bool) {
	seg := findSegment(*s.segs.Load(), e.phys)
	if seg == nil || e.end() > seg.end() {
		return BatchInfo{}, false
	}
	info, err := s.cfg.Parser(seg.data[e.phys-seg.base:e.end()-seg.base], e.phys)
	if err != nil {
		return BatchInfo{}, false
	}
	return info, true
}

// dropQueueRecovery removes an empty queue and its directory. Recovery only.
func (s *Store) dropQueueRecovery(q *consumeQueue) {
	for _, f := range *q.files.Load() {
		f.remove.Store(true)
		f.release()
	}
	q.files.Store(&[]*mappedFile{})
	_ = os.Remove(q.dir)
	s.historyChangedLocked()
	topicDir := filepath.Dir(q.dir)
	s.qmu.Lock()
	t := s.topics[q.topic]
	delete(t.queues, q.queueID)
	if len(t.queues) == 0 {
		delete(s.topics, q.topic)
	}
	s.qmu.Unlock()
	_ = os.Remove(topicDir) // fails while other queues remain
	s.markDirDirty(topicDir)
	s.markDirDirty(s.cqDir)
}
