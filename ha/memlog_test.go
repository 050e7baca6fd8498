package ha

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"sync"
)

// memLog is an in-memory commit log with fixed-size segments for the ha tests; it implements
// both MasterLog and SlaveLog. Its batch format (not Petrel's real one, which the broker's end to
// end tests use):
//
//	0  4  size   u32  whole batch (bytes)
//	4  8  phys   i64  the batch's offset in the log
//	12 4  crc    u32  CRC32 (IEEE) of the payload
//	16 .  payload
//
// A batch never spans segments: an append that does not fit writes a segment-end marker (a
// zero size) at the end and continues at the next segment's base.
type memLog struct {
	mu      sync.Mutex
	segSize int64
	min     int64
	data    []byte         // bytes [min, end); the tail of a segment after its marker is zeros
	batches map[int64]bool // batch starts
	markers map[int64]bool // segment-end markers
	// appendHook runs at the start of AppendReplicated without the lock (tests freeze it).
	appendHook func()
	// resetHook runs at the start of ResetTo without the lock.
	resetHook func()
	resets    int
	kept      [][]byte // logs set aside by ResetTo(keep)
}

const memHeader = 16

func newMemLog(segSize int64) *memLog {
	return &memLog{segSize: segSize, batches: map[int64]bool{}, markers: map[int64]bool{}}
}

func (l *memLog) end() int64 { return l.min + int64(len(l.data)) }

func (l *memLog) LogMinOffset() int64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.min
}

func (l *memLog) LogEndOffset() int64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.end()
}

func (l *memLog) segBase(off int64) int64 { return off - off%l.segSize }

// Append stores one batch with the payload and returns its offset and the new end (master side).
func (l *memLog) Append(payload []byte) (off, end int64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	size := int64(memHeader + len(payload))
	if size > l.segSize {
		panic("batch larger than a segment")
	}
	off = l.end()
	if off-l.segBase(off)+size > l.segSize {
		l.markers[off] = true
		next := l.segBase(off) + l.segSize
		l.data = append(l.data, make([]byte, next-off)...)
		off = next
	}
	b := make([]byte, size)
	binary.BigEndian.PutUint32(b[0:], uint32(size))
	binary.BigEndian.PutUint64(b[4:], uint64(off))
	binary.BigEndian.PutUint32(b[12:], crc32.ChecksumIEEE(payload))
	copy(b[memHeader:], payload)
	l.data = append(l.data, b...)
	l.batches[off] = true
	return off, l.end()
}

// TrimTo drops the segments below base (retention; base must be a segment base).
func (l *memLog) TrimTo(base int64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if base%l.segSize != 0 || base < l.min || base > l.end() {
		panic(fmt.Sprintf("bad trim to %d", base))
	}
	l.data = append([]byte(nil), l.data[base-l.min:]...)
	l.min = base
	for o := range l.batches {
		if o < base {
			delete(l.batches, o)
		}
	}
	for o := range l.markers {
		if o < base {
			delete(l.markers, o)
		}
	}
}

func (l *memLog) ReadReplication(from int64, maxBytes int, fn func(start int64, data []byte) error) error {
	l.mu.Lock()
	end := l.end()
	switch {
	case from > end:
		l.mu.Unlock()
		return ErrBeyondEnd
	case from < l.min:
		l.mu.Unlock()
		return ErrBelowMin
	}
	start := from
	if l.markers[from] {
		start = l.segBase(from) + l.segSize
	}
	if start != end && !l.batches[start] {
		l.mu.Unlock()
		return ErrNotBatchBoundary
	}
	stop := start
	segEnd := l.segBase(start) + l.segSize
	for stop < end && l.batches[stop] && stop < segEnd {
		size := int64(binary.BigEndian.Uint32(l.data[stop-l.min:]))
		if stop > start && stop+size-start > int64(maxBytes) {
			break
		}
		stop += size
	}
	// A copy per call: two slaves read concurrently. It is poisoned after fn to catch a master
	// that keeps data beyond fn.
	data := append([]byte(nil), l.data[start-l.min:stop-l.min]...)
	l.mu.Unlock()
	err := fn(start, data)
	for i := range data {
		data[i] = 0xEE
	}
	return err
}

var errMemAppend = errors.New("memlog: bad replicated data")

func (l *memLog) AppendReplicated(start int64, data []byte) (int64, error) {
	if h := l.appendHook; h != nil {
		h()
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	end := l.end()
	if start != end {
		if start != l.segBase(end)+l.segSize || end == l.segBase(end) {
			return end, fmt.Errorf("%w: append at %d, end %d", errMemAppend, start, end)
		}
	}
	// Check every batch before writing anything.
	for p := 0; p < len(data); {
		if len(data)-p < memHeader {
			return end, fmt.Errorf("%w: torn batch header at %d", errMemAppend, start+int64(p))
		}
		size := int(binary.BigEndian.Uint32(data[p:]))
		phys := int64(binary.BigEndian.Uint64(data[p+4:]))
		if size < memHeader || size > len(data)-p {
			return end, fmt.Errorf("%w: batch size %d at %d", errMemAppend, size, start+int64(p))
		}
		if phys != start+int64(p) {
			return end, fmt.Errorf("%w: batch at %d says %d", errMemAppend, start+int64(p), phys)
		}
		if crc32.ChecksumIEEE(data[p+memHeader:p+size]) != binary.BigEndian.Uint32(data[p+12:]) {
			return end, fmt.Errorf("%w: CRC of batch at %d", errMemAppend, phys)
		}
		if l.segBase(phys) != l.segBase(phys+int64(size)-1) {
			return end, fmt.Errorf("%w: batch at %d spans segments", errMemAppend, phys)
		}
		p += size
	}
	if start != end {
		l.markers[end] = true
		l.data = append(l.data, make([]byte, start-end)...)
	}
	for p := 0; p < len(data); {
		size := int(binary.BigEndian.Uint32(data[p:]))
		l.batches[start+int64(p)] = true
		p += size
	}
	l.data = append(l.data, data...)
	return l.end(), nil
}

func (l *memLog) ResetTo(base int64, keep bool) (string, error) {
	if h := l.resetHook; h != nil {
		h()
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if base%l.segSize != 0 {
		return "", fmt.Errorf("memlog: reset to %d, not a segment base", base)
	}
	kept := ""
	if keep {
		l.kept = append(l.kept, append([]byte(nil), l.data...))
		kept = fmt.Sprintf("kept-%d", len(l.kept))
	}
	l.min = base
	l.data = nil
	l.batches = map[int64]bool{}
	l.markers = map[int64]bool{}
	l.resets++
	return kept, nil
}

// equalFrom reports whether l and o hold the same bytes, batches and markers over [from, end),
// and the same end; from must be within both logs.
func (l *memLog) equalFrom(o *memLog, from int64) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	o.mu.Lock()
	defer o.mu.Unlock()
	if l.end() != o.end() {
		return fmt.Errorf("ends differ: %d and %d", l.end(), o.end())
	}
	if from < l.min || from < o.min {
		return fmt.Errorf("from %d below a min (%d, %d)", from, l.min, o.min)
	}
	if !bytes.Equal(l.data[from-l.min:], o.data[from-o.min:]) {
		return fmt.Errorf("bytes differ over [%d, %d)", from, l.end())
	}
	for b := range l.batches {
		if b >= from && !o.batches[b] {
			return fmt.Errorf("batch at %d missing", b)
		}
	}
	for m := range l.markers {
		if m >= from && !o.markers[m] {
			return fmt.Errorf("marker at %d missing", m)
		}
	}
	return nil
}
