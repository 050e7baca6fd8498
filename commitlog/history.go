package commitlog

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"os"
	"path/filepath"
	"syscall"
)

// The history file holds what recovery needs of the log's history that the log itself may no
// longer show: the position from which store timestamps never go down along the log (History)
// and each queue's incarnation (incarnation.go), whose first batch retention may have removed.
// One file for the whole store, read once by Open: recovery costs no file per queue. It is
// replaced atomically (writeFileDurably) by the queue flusher before the checkpoint whenever
// it changed, so a checkpoint never vouches for a queue's entries before its incarnation is
// durable (recovery derives the incarnation again from any first batch it indexes, which always
// lies after the checkpoint it starts from), and synchronously, under Store.mu, when the order
// of store timestamps restarts (before the batch that restarts it is written) and when ResetTo
// drops every queue.
//
// Layout, big-endian:
//
//	magic "PHST" u32 | version=1 u32 | ordered from i64 (-1: not known) | queues u32 |
//	queues x (topic length u16 | topic | queueId i32 | incarnation u64) | crc32c u32 of all before
//
// Queues whose incarnation is not known (0) are left out.
const (
	historyName    = "history"
	historyMagic   = 0x50485354 // "PHST"
	historyVersion = 1
	historyHeader  = 20 // magic, version, ordered from, queue count
	historyEntry   = 2 + 4 + 8
)

// history is the history file as read by Open.
type history struct {
	// ok says the file was there and checked out; without it nothing is known (a store of a
	// version before the file, or a file lost or damaged): the timestamps' order starts again at the
	// recovered end, and incarnations are derived from the queues' first batches (deriveBorn).
	ok bool
	// orderedFrom is where store timestamps are in order from, -1 when not known.
	orderedFrom int64
	// queues is the encoded queue section (ok only), applied by applyHistory once the queues
	// are loaded.
	queues []byte
	count  int
}

// readHistory reads the history file. A missing file is not an error; a file that does not check
// out is logged by the caller (err wraps ErrCorrupt) and treated as missing.
func readHistory(dir string) (history, error) {
	path := filepath.Join(dir, historyName)
	b, err := readFileInto(path, nil)
	if errors.Is(err, os.ErrNotExist) {
		return history{orderedFrom: -1}, nil
	}
	if err != nil {
		return history{orderedFrom: -1}, fmt.Errorf("cannot read %q: %w", path, err)
	}
	if len(b) == 0 {
		return history{orderedFrom: -1}, fmt.Errorf("%q is empty (a write a crash cut short?): %w", path, ErrCorrupt)
	}
	h, ok := parseHistory(b)
	if !ok {
		return history{orderedFrom: -1}, fmt.Errorf("%q holds %d bytes that are not a history record: %w", path, len(b), ErrCorrupt)
	}
	return h, nil
}

// parseHistory checks and splits an encoded history file. Pure.
func parseHistory(b []byte) (history, bool) {
	if len(b) < historyHeader+4 || binary.BigEndian.Uint32(b) != historyMagic ||
		binary.BigEndian.Uint32(b[4:]) != historyVersion ||
		binary.BigEndian.Uint32(b[len(b)-4:]) != crc32.Checksum(b[:len(b)-4], castagnoli) {
		return history{}, false
	}
	h := history{ok: true, orderedFrom: int64(binary.BigEndian.Uint64(b[8:]))}
	if h.orderedFrom < -1 {
		return history{}, false
	}
	h.count = int(binary.BigEndian.Uint32(b[16:]))
	h.queues = b[historyHeader : len(b)-4]
	rest := h.queues
	for range h.count {
		if len(rest) < 2 {
			return history{}, false
		}
		n := int(binary.BigEndian.Uint16(rest))
		if n == 0 || n > maxTopicLen || len(rest) < historyEntry+n {
			return history{}, false
		}
		rest = rest[historyEntry+n:]
	}
	if len(rest) != 0 {
		return history{}, false
	}
	return h, true
}

// applyHistory gives the loaded queues the incarnations h holds and returns how many of h's
// queues are not loaded (gone since the file was written: the next write drops them). Recovery
// only, after loadQueues; no allocation.
func (s *Store) applyHistory(h history) (gone int) {
	rest := h.queues
	for range h.count {
		n := int(binary.BigEndian.Uint16(rest))
		topic := rest[2 : 2+n]
		id := int32(binary.BigEndian.Uint32(rest[2+n:]))
		v := binary.BigEndian.Uint64(rest[6+n:])
		rest = rest[historyEntry+n:]
		if t := s.topics[string(topic)]; t != nil && t.queues[id] != nil {
			t.queues[id].born.Store(v)
		} else {
			gone++
		}
	}
	return gone
}

// encodeHistoryLocked encodes the store's history as it is now. Caller holds mu (queues are
// created, deleted and given incarnations under it), or is recovery.
func (s *Store) encodeHistoryLocked() []byte {
	size := historyHeader + 4
	for q := range s.eachQueue {
		if q.born.Load() != 0 {
			size += historyEntry + len(q.topic)
		}
	}
	b := make([]byte, historyHeader, size)
	binary.BigEndian.PutUint32(b, historyMagic)
	binary.BigEndian.PutUint32(b[4:], historyVersion)
	binary.BigEndian.PutUint64(b[8:], uint64(s.orderedFrom))
	n := 0
	for q := range s.eachQueue {
		v := q.born.Load()
		if v == 0 {
			continue
		}
		b = binary.BigEndian.AppendUint16(b, uint16(len(q.topic)))
		b = append(b, q.topic...)
		b = binary.BigEndian.AppendUint32(b, uint32(q.queueID))
		b = binary.BigEndian.AppendUint64(b, v)
		n++
	}
	binary.BigEndian.PutUint32(b[16:], uint32(n))
	return binary.BigEndian.AppendUint32(b, crc32.Checksum(b, castagnoli))
}

// historyChangedLocked notes that the history file no longer matches the store (a queue given an
// incarnation or removed, the order restarted). Caller holds mu, or is recovery.
func (s *Store) historyChangedLocked() { s.histGen++ }

// writeHistoryLocked writes the history file now, durably. Caller holds mu (which orders it
// before whatever it must precede: the batch that restarts the order, the queues ResetTo creates
// again).
func (s *Store) writeHistoryLocked() error {
	return s.writeHistory(s.histGen, s.encodeHistoryLocked())
}

// flushHistory writes the history file if it changed since it was last written. Queue flusher
// (and Close), before the checkpoint.
func (s *Store) flushHistory() error {
	s.mu.Lock()
	gen := s.histGen
	if gen == s.histWritten.Load() {
		s.mu.Unlock()
		return nil
	}
	b := s.encodeHistoryLocked()
	s.mu.Unlock()
	return s.writeHistory(gen, b)
}

// writeHistory replaces the history file with b, the encoding of generation gen, unless a later
// generation is already written (writers encode under mu and write under histMu, so the two may
// finish out of order).
func (s *Store) writeHistory(gen uint64, b []byte) error {
	s.histMu.Lock()
	defer s.histMu.Unlock()
	if gen <= s.histWritten.Load() {
		return nil
	}
	if err := writeFileDurably(s.cfg.Dir, historyName, b); err != nil {
		return fmt.Errorf("cannot record the log's history (store timestamps' order, queue incarnations): %w", err)
	}
	s.histWritten.Store(gen)
	return nil
}

// readFileInto reads the file at path into buf and returns what it holds, all of buf when the
// file is as long or longer; with a nil buf it reads the whole file into a buffer of its size.
// Open reads its small files so (checkpoint, history): os.ReadFile's *os.File, stat and buffer
// of at least 512 bytes would cost recovery allocations for nothing.
func readFileInto(path string, buf []byte) ([]byte, error) {
	fd, err := syscall.Open(path, syscall.O_RDONLY|syscall.O_CLOEXEC, 0)
	if err != nil {
		return nil, &os.PathError{Op: "open", Path: path, Err: err}
	}
	defer syscall.Close(fd)
	whole := buf == nil
	if whole {
		var st syscall.Stat_t
		if err := syscall.Fstat(fd, &st); err != nil {
			return nil, &os.PathError{Op: "stat", Path: path, Err: err}
		}
		buf = make([]byte, st.Size+1) // one more to see the end without another read
	}
	n := 0
	for {
		if n == len(buf) {
			if !whole {
				return buf, nil
			}
			buf = append(buf, 0)[:n] // grown meanwhile
			buf = buf[:cap(buf)]
		}
		m, err := syscall.Read(fd, buf[n:])
		if err == syscall.EINTR {
			continue
		}
		if err != nil {
			return nil, &os.PathError{Op: "read", Path: path, Err: err}
		}
		if m == 0 {
			return buf[:n], nil
		}
		n += m
	}
}
