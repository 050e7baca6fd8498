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

// A queue's incarnation identifies its current life: queue offsets start at 0 again when a
// queue is created again (its topic deleted and re-created, or the store lost), and an offset
// of one life means nothing in another. It is fixed by the batch that creates the queue, its
// first with base queue offset 0, from two of the batch's stored fields (its physical offset
// and store timestamp), so every member that holds that batch computes the same value: a
// slave that creates the queue from the replicated batch, and recovery that indexes it again.
// A later life starts at another physical offset (a re-created topic's first batch lies after
// its deletion record) or at another store time (a store restarted empty). The value is kept
// in the queue's directory, because retention may remove the first batch, and goes with the
// directory when the queue is deleted. A queue first seen at a later offset (a log reset to its
// master's min offset, past the queue's first batch) or loaded without the file (a store written
// before queues had incarnations) has incarnation 0: not known, which nothing compares.

// incarnationName is the file in a queue's directory that holds its incarnation.
const incarnationName = "incarnation"

// incarnationMagic opens the incarnation file ("PINC").
const incarnationMagic = 0x50494e43

// incarnationFileSize is the file's size: magic u32, incarnation u64, crc32c u32 of the first 12
// bytes, big-endian.
const incarnationFileSize = 16

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
// fixes, and writes it to the queue's directory when it changed; the queue flusher (or recovery)
// makes the file durable. A file that cannot be written leaves the value in memory only: after a
// restart the queue's incarnation is not known (0), which is safe. Caller holds mu, or is
// recovery.
func (s *Store) setBorn(q *consumeQueue, phys, ts int64) {
	v := incarnationOf(phys, ts)
	if q.born.Load() == v {
		return
	}
	q.born.Store(v)
	var b [incarnationFileSize]byte
	binary.BigEndian.PutUint32(b[0:], incarnationMagic)
	binary.BigEndian.PutUint64(b[4:], v)
	binary.BigEndian.PutUint32(b[12:], crc32.Checksum(b[:12], castagnoli))
	path := filepath.Join(q.dir, incarnationName)
	if err := os.WriteFile(path, b[:], 0o644); err != nil {
		s.logger.Warn("commitlog: cannot record a queue's incarnation; it is not known after a restart",
			"topic", q.topic, "queue", q.queueID, "err", err)
		return
	}
	s.dirMu.Lock()
	s.dirtyDirs[q.dir] = struct{}{}
	s.dirtyFiles[path] = struct{}{}
	s.dirMu.Unlock()
}

// loadBorn reads the incarnation of the queue in dir: 0 when the file is missing (a queue created
// before queues had incarnations) or does not check out (logged). Recovery only.
func (s *Store) loadBorn(q *consumeQueue) {
	var buf [incarnationFileSize + 1]byte
	b, err := readSmall(q.dir+string(filepath.Separator)+incarnationName, &buf)
	if errors.Is(err, os.ErrNotExist) {
		return
	}
	if err == nil && (len(b) != incarnationFileSize || binary.BigEndian.Uint32(b) != incarnationMagic ||
		binary.BigEndian.Uint32(b[12:]) != crc32.Checksum(b[:12], castagnoli)) {
		err = fmt.Errorf("%d bytes that are not an incarnation record: %w", len(b), ErrCorrupt)
	}
	if err != nil {
		s.logger.Warn("commitlog: cannot read a queue's incarnation; it is not known unless recovery indexes its first batch again",
			"topic", q.topic, "queue", q.queueID, "err", err)
		return
	}
	q.born.Store(binary.BigEndian.Uint64(b[4:]))
}

// syncFiles fsyncs the files setBorn wrote (those removed since are skipped); the ones that
// fail stay for the next call.
func (s *Store) syncFiles() error {
	s.dirMu.Lock()
	files := s.dirtyFiles
	s.dirtyFiles = make(map[string]struct{})
	s.dirMu.Unlock()
	for p := range files {
		if err := fsyncFile(p); err != nil && !errors.Is(err, os.ErrNotExist) {
			s.dirMu.Lock()
			for p := range files {
				s.dirtyFiles[p] = struct{}{}
			}
			s.dirMu.Unlock()
			return err
		}
	}
	return nil
}

// fsyncFile opens path and fsyncs it.
func fsyncFile(path string) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	err = f.Sync()
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("cannot fsync %q: %w", path, err)
	}
	return nil
}

// readSmall reads the file at path into buf and returns what it holds (all of buf when the file
// is longer): recovery reads every queue's incarnation file, and os.ReadFile's *os.File, stat
// and buffer would cost it several allocations per queue.
func readSmall(path string, buf *[incarnationFileSize + 1]byte) ([]byte, error) {
	fd, err := syscall.Open(path, syscall.O_RDONLY|syscall.O_CLOEXEC, 0)
	if err != nil {
		return nil, &os.PathError{Op: "open", Path: path, Err: err}
	}
	defer syscall.Close(fd)
	n := 0
	for n < len(buf) {
		m, err := syscall.Read(fd, buf[n:])
		if err == syscall.EINTR {
			continue
		}
		if err != nil {
			return nil, &os.PathError{Op: "read", Path: path, Err: err}
		}
		if m == 0 {
			break
		}
		n += m
	}
	return buf[:n], nil
}
