package commitlog

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/petrel-mq/petrel/internal/failpoint"
	"golang.org/x/sys/unix"
)

// createSegment creates, preallocates, fsyncs and maps the segment starting at base, and fsyncs
// the log directory. Errors wrap ErrDiskFull when the disk is full.
func (s *Store) createSegment(base int64) (*mappedFile, error) {
	path := filePath(s.logDir, base)
	m, err := createMapped(path, s.cfg.SegmentSize, s.cfg.Preallocate, true)
	if err != nil {
		return nil, fmt.Errorf("cannot create segment at offset %d: %w", base, err)
	}
	if err := fsyncDir(s.logDir); err != nil {
		_ = m.Unmap()
		return nil, err
	}
	f := s.newMappedFile(path, base, m)
	return f, nil
}

// rollLocked seals the active segment with a marker and makes the next segment active. The next
// segment is obtained first, so a failure (disk full) changes nothing. Caller holds mu.
func (s *Store) rollLocked() error {
	old := s.active
	next, err := s.takeSegmentLocked(old.end())
	if err != nil {
		return err
	}
	failpoint.Inject("commitlog-roll") // crash tests: killed before the marker
	if rel := s.writePos - old.base; old.size-rel >= markerSize {
		binary.BigEndian.PutUint32(old.data[rel:], 0)
		binary.BigEndian.PutUint32(old.data[rel+4:], SegmentEndMagic)
	}
	failpoint.Inject("commitlog-roll-marker") // crash tests: killed after the marker
	cur := *s.segs.Load()
	list := make([]*mappedFile, len(cur), len(cur)+1)
	copy(list, cur)
	list = append(list, next)
	s.segs.Store(&list)
	s.setActiveLocked(next)
	s.writePos = next.base
	kick(s.allocKick)
	if s.cfg.RetentionBytes > 0 {
		kick(s.retentionKick)
	}
	return nil
}

// takeSegmentLocked returns the segment starting at base: the pre-allocated one if it is ready,
// otherwise it creates it inline (waiting for a pre-allocation in progress first). A
// pre-allocated segment that starts where the new one ends (a log reset to the segment before
// it) stays pre-allocated as the next one; any other is discarded.
func (s *Store) takeSegmentLocked(base int64) (*mappedFile, error) {
	s.amu.Lock()
	defer s.amu.Unlock()
	p := s.prepared
	if p != nil && p.base == base {
		s.prepared = nil
		s.nextBase.Store(p.end())
		return p, nil
	}
	f, err := s.createSegment(base)
	if err != nil {
		return nil, err
	}
	s.nextBase.Store(f.end())
	if p != nil && p.base != f.end() {
		s.prepared = nil
		s.discardPreparedLocked(p)
	}
	return f, nil
}

// discardPreparedLocked drops the pre-allocated segment p, never written: its file is first
// moved out of the way (the suffix a reset gives the segments it drops, which Open deletes), so
// that a segment created at its base before the cleaner removes it (a prefault may still map it)
// does not find the file there. Caller holds amu.
func (s *Store) discardPreparedLocked(p *mappedFile) {
	old := p.path()
	moved := old + resetSuffix
	if err := os.Rename(old, moved); err != nil {
		s.logger.Warn("commitlog: cannot move a discarded pre-allocated segment aside; it is removed in place", "path", old, "err", err)
	} else {
		p.pathp.Store(&moved)
	}
	p.remove.Store(true)
	p.release()
}

// allocLoop is the segment pre-allocator goroutine (RocketMQ AllocateMappedFileService): after
// each roll it creates the segment after the active one, so the next roll does not wait for
// fallocate and fsync.
func (s *Store) allocLoop() {
	defer s.wg.Done()
	s.prefaultAhead()
	for {
		select {
		case <-s.stop:
			return
		case <-s.allocKick:
		}
		s.createNext()
		s.prefaultAhead()
	}
}

// prefaultWindow is how far ahead of the log end the pre-allocator prepares pages (bytes). A
// window rather than the whole segment: populating writes zero pages, which the kernel would
// otherwise write back to disk ahead of the data, and a 1 GiB segment would cost 1 GiB of page
// cache at once.
const prefaultWindow = 8 << 20

// cacheStep is how much of the window the pre-allocator reads into the page cache per call when
// appends write through the files (bytes): each call zeroes its pages in the kernel without a
// break, so it is kept short.
const cacheStep = 64 << 10

// prefaultAhead prepares the pages of [end, end+prefaultWindow) in the active segment and,
// past its end, in the pre-allocated next segment, so appends do not allocate them: it
// populates their page tables for writing (prefault, then prefaultedTo), or, when appends
// write through the segment's file and are not small (smallBatches), reads them into the page
// cache without mapping them (MADV_WILLNEED in cacheStep steps, then cachedTo), so a pwrite
// finds its page there and writeback has no mapping to write-protect. Only what it prepared
// counts: a range it could not reach or prepare stops the counter there, and a ResetTo
// meanwhile (which sets the counters to its base) wins over this pass.
// Pre-allocator goroutine; appends may write into the range meanwhile, which is harmless (a
// page an append wrote is not read in again).
func (s *Store) prefaultAhead() {
	if s.cfg.DisablePrefault {
		return
	}
	populate := s.populatesSegments()
	done := &s.cachedTo
	if populate {
		done = &s.prefaultedTo
	}
	old := done.Load()
	end := s.end.Load()
	to := end + prefaultWindow
	from := max(old, end)
	if from >= to {
		return
	}
	reached := from // prepared up to here
	segs := *s.segs.Load()
	if len(segs) > 0 {
		if seg := segs[len(segs)-1]; from >= seg.base && from < seg.end() {
			if !seg.tryAcquire() {
				return
			}
			hi := min(to, seg.end())
			ok := s.preparePages(seg, from, hi, populate)
			seg.release()
			if !ok {
				return
			}
			from, reached = hi, hi
		}
	}
	if from < to {
		s.amu.Lock()
		p := s.prepared
		if p != nil && !p.tryAcquire() {
			p = nil
		}
		s.amu.Unlock()
		if p != nil {
			// What lies between the active segment's end and the next one's base is never
			// appended into.
			from = max(from, p.base)
			if from < p.end() && s.preparePages(p, from, min(to, p.end()), populate) {
				reached = min(to, p.end())
			}
			p.release()
		}
	}
	if reached > old {
		done.CompareAndSwap(old, reached)
	}
}

// preparePages prepares the pages of [from, to) (physical offsets) of seg for appends:
// populates their page tables for writing, or reads them into the page cache, and says whether
// it did. A failure is logged; a kernel without MADV_POPULATE_WRITE (before 5.14) stops the
// populating for good (populateUnsupported): appends then write through the file.
func (s *Store) preparePages(seg *mappedFile, from, to int64, populate bool) bool {
	// madvise takes page-aligned ranges of the mapping (a segment's base need not be).
	m := seg.data[(from-seg.base)&^(pageSize-1) : to-seg.base]
	if populate {
		err := prefault(m)
		if errors.Is(err, errPopulateUnsupported) {
			if !s.populateUnsupported.Swap(true) {
				s.logger.Warn("commitlog: the kernel cannot populate page tables ahead (MADV_POPULATE_WRITE, Linux 5.14); small appends write through the file", "path", seg.path())
			}
			return false
		}
		if err != nil {
			s.logger.Warn("commitlog: cannot prefault segment", "path", seg.path(), "err", err)
			return false
		}
		return true
	}
	for len(m) > 0 {
		n := min(len(m), cacheStep)
		if err := willNeed(m[:n]); err != nil {
			s.logger.Warn("commitlog: cannot read segment pages ahead", "path", seg.path(), "err", err)
			return false
		}
		m = m[n:]
	}
	return true
}

// populatesSegments says whether the pre-allocator populates segments' page tables for
// writing: unless appends write through the segments' files and their writes are not small
// (smallBatches), or the kernel cannot (populateUnsupported). Any goroutine.
func (s *Store) populatesSegments() bool {
	return s.cfg.WriteThroughMapping || s.smallBatches.Load() && !s.populateUnsupported.Load()
}

// kickPrefault wakes the pre-allocator once the log end at end has used half of the window it
// prepared (see prefaultAhead).
func (s *Store) kickPrefault(end int64) {
	if s.cfg.DisablePrefault {
		return
	}
	done := s.cachedTo.Load()
	if s.populatesSegments() {
		done = s.prefaultedTo.Load()
	}
	if end+prefaultWindow/2 > done {
		kick(s.allocKick)
	}
}

// Writing the active segment. Appends write through the segment's file (pwrite) into pages the
// pre-allocator read into the page cache ahead of them, unmapped; while the average write is
// small (smallWrite) they copy into the segment's mapping, whose page tables the pre-allocator
// then populates ahead of them (prefaultAhead), as every append does with
// Config.WriteThroughMapping. Readers read through the mapping; both see the one page cache. Writing through the mapping
// costs twice on a small virtual machine, where fresh page-cache pages are expensive to touch:
//   - a write fault on a fresh page reads the page in first, and a fault of a mapping reads
//     around it (read_ahead_kb, 8 MiB on some machines): megabytes of an unwritten extent zeroed
//     in one fault, which a kernel built without preemption does not interrupt; a master's and
//     its slaves' pre-allocators took both CPUs for 15-25 ms at a time. A full-page write(2)
//     zeroes nothing, and a partial one only the rest of its page.
//   - writeback write-protects every page mapped writable and dirty (folio_mkclean), one TLB
//     shootdown per page, an inter-processor interrupt to every CPU the broker runs on: a third
//     of the machine's CPU at the highest rate. A page written with write(2) is mapped, if at
//     all, read-only by a reader, so writeback has nothing to write-protect.
// RocketMQ's transientStorePoolEnable writes through FileChannel for the second reason; Kafka
// always has.

// setActiveLocked makes seg the active segment: the previous one's writer is closed and, unless
// Config.WriteThroughMapping, seg's file is opened for writing. A segment whose file cannot be
// opened is written through its mapping, with a warning: slower (its pages are populated only
// while writes are small), never wrong. Caller holds mu.
func (s *Store) setActiveLocked(seg *mappedFile) {
	if old := s.active; old != nil && old != seg && old.w != nil {
		if err := old.w.Close(); err != nil {
			s.logger.Warn("commitlog: cannot close segment", "path", old.path(), "err", err)
		}
		old.w = nil
	}
	if seg.w == nil && !s.cfg.WriteThroughMapping {
		w, err := os.OpenFile(seg.path(), os.O_WRONLY, 0)
		if err != nil {
			// NB: populated only while writes are small (populatesSegments): appends fault.
			s.logger.Warn("commitlog: cannot open segment for writing, writing through its mapping", "path", seg.path(), "err", err)
		} else {
			seg.w, seg.wfd = w, int(w.Fd())
		}
	}
	s.active = seg
}

// smallWrite is the average write (bytes) below which appends are copied into a populated
// mapping rather than written with pwrite. On the 2-core virtual machine of BENCHMARKS.md a
// pwrite costs about 1.1 us whatever its size (the file system's write path, not the copy); a
// page populated for writing costs the pre-allocator a fault and writeback a TLB shootdown,
// about 4.5 us together, whatever the number of writes it takes: the two cost the same near
// 1 KiB writes. Writes of 1 KiB stay on the mapping's side, where the populating runs off the
// appender's core; from 2 KiB on, a pwrite serves at least half a page.
const smallWrite = 2048

// batchAvgWeight is the weight of the newest write in batchAvg's moving average (1/8: the
// average follows a change of sizes within a few dozen writes).
const batchAvgWeight = 8

// nextBatchAvg returns the moving average of write sizes avg after a write of size bytes.
func nextBatchAvg(avg, size int64) int64 {
	return avg + (size-avg)/batchAvgWeight
}

// smallAfter says whether writes count as small once their moving average is avg, small saying
// whether they did: under smallWrite they turn small, and they stay small up to a quarter
// above it, so an average hovering at the threshold does not switch the pre-allocator's work
// back and forth.
func smallAfter(small bool, avg int64) bool {
	if small {
		return avg < smallWrite+smallWrite/4
	}
	return avg < smallWrite
}

// noteWriteLocked records a write of size bytes to the log (unless Config.WriteThroughMapping):
// while the average write is under smallWrite the pre-allocator populates the page tables
// ahead (prefaultAhead; the write's kickPrefault wakes it). Caller holds mu.
func (s *Store) noteWriteLocked(size int) {
	if s.cfg.WriteThroughMapping {
		return
	}
	s.batchAvg = nextBatchAvg(s.batchAvg, int64(size))
	if was := s.smallBatches.Load(); smallAfter(was, s.batchAvg) != was {
		s.smallBatches.Store(!was)
	}
}

// viaFileLocked says whether a write of size bytes at physical offset pos of segment seg goes
// through the segment's file: it has a writer and the pre-allocator has not populated the page
// tables under the write (prefaultedTo), where a copy into the mapping costs no fault. Caller
// holds mu.
func (s *Store) viaFileLocked(seg *mappedFile, pos int64, size int) bool {
	return seg.w != nil && pos+int64(size) > s.prefaultedTo.Load()
}

// writeLocked writes b at byte rel of segment seg: through its file or through its mapping, as
// viaFileLocked says. Caller holds mu.
func (s *Store) writeLocked(seg *mappedFile, rel int64, b []byte) error {
	if !s.viaFileLocked(seg, seg.base+rel, len(b)) {
		copy(seg.data[rel:rel+int64(len(b))], b)
		return nil
	}
	return s.pwriteLocked(seg, rel, b)
}

// pwriteLocked writes b at byte rel of segment seg through its writer. On an error what the
// write got to is zeroed through the mapping (a write may stop part-way; the log past its end
// holds zeros), and ENOSPC or EDQUOT wraps ErrDiskFull. Caller holds mu.
func (s *Store) pwriteLocked(seg *mappedFile, rel int64, b []byte) error {
	// NB: the raw descriptor: os.File.WriteAt's locking and bookkeeping cost as much as the
	// system call for a small batch. Holders of mu use it; it is closed under mu, or once the
	// segment is out of reach (unmapFile).
	at, rest := rel, b
	for len(rest) > 0 {
		n, err := unix.Pwrite(seg.wfd, rest, at)
		if err == unix.EINTR {
			continue
		}
		if err == nil && n == 0 {
			err = io.ErrShortWrite
		}
		if err != nil {
			clear(seg.data[rel:at]) // what the write got to; the rest was never written
			if errors.Is(err, unix.ENOSPC) || errors.Is(err, unix.EDQUOT) {
				err = fmt.Errorf("%w: %w", ErrDiskFull, err)
			}
			return fmt.Errorf("cannot write %d bytes at %d of segment %q: %w", len(b), rel, seg.path(), err)
		}
		at, rest = at+int64(n), rest[n:]
	}
	return nil
}

// createNext creates the segment after the active one unless it is ready, and returns it (nil
// if there was nothing to do or it failed).
func (s *Store) createNext() *mappedFile {
	s.amu.Lock()
	defer s.amu.Unlock()
	want := s.nextBase.Load() // written under amu, so it cannot move under us
	if p := s.prepared; p != nil {
		if p.base == want {
			return nil
		}
		s.prepared = nil
		s.discardPreparedLocked(p)
	}
	f, err := s.createSegment(want)
	if err != nil {
		if s.allocErr == nil || errors.Is(err, ErrDiskFull) != errors.Is(s.allocErr, ErrDiskFull) {
			s.logger.Warn("commitlog: cannot pre-allocate next segment; the next roll retries inline", "offset", want, "err", err)
		}
		s.allocErr = err
		return nil
	}
	s.allocErr = nil
	s.prepared = f
	return f
}

// findSegment returns the segment of segs containing physical offset off, or nil.
func findSegment(segs []*mappedFile, off int64) *mappedFile {
	lo, hi := 0, len(segs)
	for lo < hi {
		m := int(uint(lo+hi) >> 1)
		if segs[m].base <= off {
			lo = m + 1
		} else {
			hi = m
		}
	}
	if lo == 0 {
		return nil
	}
	if f := segs[lo-1]; off < f.end() {
		return f
	}
	return nil
}

// ReadLog returns raw log bytes starting at physicalOffset (a batch boundary), at most maxBytes
// of them (maxBytes <= 0: no limit), never crossing the end of the segment or of the log. At a
// segment's tail the bytes are the segment-end marker and zeros: the log continues at the next
// segment's base. It returns an empty Slice at LogEndOffset, and errors wrapping
// ErrOffsetOutOfRange outside [LogMinOffset, LogEndOffset] or ErrClosed. The Slice must be
// released (see Slice). Any goroutine.
func (s *Store) ReadLog(physicalOffset int64, maxBytes int) (Slice, error) {
	for range maxReadAttempts {
		if s.closedFlag.Load() {
			return Slice{}, ErrClosed
		}
		end := s.end.Load()
		lo := s.minOffset.Load()
		if physicalOffset < lo || physicalOffset > end {
			return Slice{}, fmt.Errorf("cannot read log at offset %d (log is [%d, %d)): %w", physicalOffset, lo, end, ErrOffsetOutOfRange)
		}
		if physicalOffset == end {
			return Slice{}, nil
		}
		seg := findSegment(*s.segs.Load(), physicalOffset)
		if seg == nil || !seg.tryAcquire() {
			continue // removed by retention meanwhile: minOffset has moved
		}
		hi := seg.end()
		if end < hi {
			hi = end
		}
		if maxBytes > 0 && physicalOffset+int64(maxBytes) < hi {
			hi = physicalOffset + int64(maxBytes)
		}
		a, b := physicalOffset-seg.base, hi-seg.base
		return Slice{B: seg.data[a:b:b], f: seg}, nil
	}
	return Slice{}, fmt.Errorf("cannot read log at offset %d: %w", physicalOffset, errRetry)
}
