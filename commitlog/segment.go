package commitlog

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"

	"github.com/edsrzf/mmap-go"
)

// SegmentEndMagic follows 4 zero bytes in a segment-end marker. Part of the on-disk format; do
// not change.
const SegmentEndMagic uint32 = 0xCBD43194

const (
	// markerSize is the size of a segment-end marker. Part of the on-disk format; do not change.
	markerSize = 8
	// minBatchSize is the smallest batch the format allows (a batch starts with 4 non-zero
	// bytes and must be distinguishable from a marker). Part of the on-disk format; do not change.
	minBatchSize = 8
	// nameDigits is the width of segment and consume-queue file names.
	nameDigits = 20
)

// fileName is the name of the segment or consume-queue file starting at n (n >= 0): n in
// decimal, zero-padded to nameDigits.
func fileName(n int64) string {
	var b [nameDigits]byte
	return string(appendFileName(b[:0], n))
}

// filePath is dir joined with fileName(n), built in one allocation (recovery builds one per
// file of every queue). dir must be clean, as filepath.Join would make it.
func filePath(dir string, n int64) string {
	var sb strings.Builder
	sb.Grow(len(dir) + 1 + nameDigits)
	sb.WriteString(dir)
	sb.WriteByte(filepath.Separator)
	var b [nameDigits]byte
	sb.Write(appendFileName(b[:0], n))
	return sb.String()
}

// appendFileName appends fileName(n) to b.
func appendFileName(b []byte, n int64) []byte {
	var d [nameDigits]byte
	digits := strconv.AppendInt(d[:0], n, 10)
	for range nameDigits - len(digits) {
		b = append(b, '0')
	}
	return append(b, digits...)
}

// mappedFile is one mapped commit-log segment or consume-queue file.
//
// Reference counting: refs starts at 1, the owner's reference (the segment list or the queue's
// file list). Readers take a reference with tryAcquire, which fails once refs has reached 0, and
// drop it with release. The owner drops its reference when the file leaves the list (retention,
// DeleteTopic, Close); whoever brings refs to 0 hands the file to Store.freeFile, which unmaps it
// and, if remove is set, deletes it. So a mapping is never unmapped while a reader holds a slice
// of it, and the file is never removed while mapped.
type mappedFile struct {
	s     *Store
	pathp atomic.Pointer[string] // a topic deletion moves files to a trash directory
	base  int64                  // segments: physical offset of byte 0; queue files: first entry index
	size  int64                  // mapped length in bytes
	data  mmap.MMap

	refs   atomic.Int64
	remove atomic.Bool // delete the file once unmapped

	newestTS  atomic.Int64 // segments: newest store timestamp in Unix ms (retention)
	firstBase atomic.Int64 // consume-queue files: base queue offset of entry number base

	dirty bool // recovery only: modified, msync before the checkpoint

	// w is the active segment's file, opened for writing unless Config.WriteThroughMapping:
	// appends beyond the page tables the pre-allocator populated go through it (pwrite), not
	// through the mapping (see Store.setActiveLocked and viaFileLocked). nil for every
	// other file. Set and cleared under the store's mu; closed when the segment stops being
	// active, or at its unmap (unmapFile, once no one can reach the segment).
	w   *os.File
	wfd int // w's descriptor
}

func (s *Store) newMappedFile(path string, base int64, data mmap.MMap) *mappedFile {
	f := &mappedFile{s: s, base: base, size: int64(len(data)), data: data}
	f.pathp.Store(&path)
	f.refs.Store(1)
	s.liveFiles.Add(1)
	return f
}

func (f *mappedFile) path() string { return *f.pathp.Load() }

// end is the first offset (segment) or entry index (queue file) past f.
func (f *mappedFile) end() int64 { return f.base + f.size }

// entries is the number of consume-queue entries f holds.
func (f *mappedFile) entries() int64 { return f.size / entrySize }

func (f *mappedFile) tryAcquire() bool {
	for {
		r := f.refs.Load()
		if r <= 0 {
			return false
		}
		if f.refs.CompareAndSwap(r, r+1) {
			return true
		}
	}
}

func (f *mappedFile) release() {
	switch r := f.refs.Add(-1); {
	case r == 0:
		f.s.freeFile(f)
	case r < 0:
		panic(fmt.Sprintf("BUG: commitlog: %s released more often than acquired", f.path()))
	}
}

// freeFile unmaps f (and removes it if marked) on the cleaner goroutine, or right here when the
// cleaner is not running (recovery, after Close).
func (s *Store) freeFile(f *mappedFile) {
	s.gcMu.Lock()
	if !s.gcInline {
		s.garbage = append(s.garbage, f)
		s.gcMu.Unlock()
		kick(s.gcKick)
		return
	}
	s.gcMu.Unlock()
	s.unmapFile(f)
}

func (s *Store) unmapFile(f *mappedFile) {
	if f.w != nil {
		if err := f.w.Close(); err != nil {
			s.logger.Error("commitlog: cannot close segment", "path", f.path(), "err", err)
		}
		f.w = nil
	}
	if err := f.data.Unmap(); err != nil {
		s.logger.Error("commitlog: cannot unmap file", "path", f.path(), "err", err)
	}
	if f.remove.Load() {
		path := f.path()
		if err := os.Remove(path); err != nil && !os.IsNotExist(err) {
			s.logger.Error("commitlog: cannot remove file", "path", path, "err", err)
		} else if err := fsyncDir(filepath.Dir(path)); err != nil && !os.IsNotExist(err) {
			s.logger.Warn("commitlog: cannot fsync directory after removal", "err", err)
		}
	}
	s.liveFiles.Add(-1)
}

// drainGarbage unmaps (and removes) the files released since the last call. Cleaner goroutine.
func (s *Store) drainGarbage() {
	s.gcMu.Lock()
	g := s.garbage
	s.garbage = nil
	s.gcMu.Unlock()
	for _, f := range g {
		s.unmapFile(f)
	}
}

// Slice is a read-only view of stored bytes inside a mapping, returned by Store.Read (inside a
// ReadResult) and Store.ReadLog. While it is held the mapping stays valid and the file is not
// deleted, even if retention has expired it or the Store is closed.
//
// Rule: every Slice obtained from the Store must be released exactly once, by Slice.Release or
// ReadResult.Release, from any goroutine (for a pull response: in the write-completion callback).
// After the release B must not be touched. Releasing twice is a bug that may unmap memory under
// another reader. B must not be written to.
type Slice struct {
	// B is the bytes: whole batches (Read) or raw log bytes (ReadLog).
	B []byte
	f *mappedFile
}

// Release drops the Slice's reference. It is a no-op for the zero Slice. Any goroutine.
func (s Slice) Release() {
	if s.f != nil {
		s.f.release()
	}
}

func kick(c chan struct{}) {
	select {
	case c <- struct{}{}:
	default:
	}
}
