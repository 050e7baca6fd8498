package commitlog

import (
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
)

// Consume-queue entry layout (see doc.go). These constants are part of the on-disk format; do
// not change.
const (
	entrySize       = 32
	entryPhysOff    = 0
	entryBaseOff    = 8
	entrySizeOff    = 16
	entryCountOff   = 20
	entryTagOff     = 24
	entryCRCOff     = 28
	maxTopicLen     = 255 // bytes, before escaping
	maxTopicDirName = 255 // bytes, after escaping (file-name limit)
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// entry is a decoded consume-queue entry.
type entry struct {
	phys  int64
	base  int64
	size  int64
	count int64
	tag   uint32
}

func (e entry) end() int64     { return e.phys + e.size }
func (e entry) nextOff() int64 { return e.base + e.count }

func encodeEntry(b []byte, phys int64, size int, base int64, count int32, tag uint32) {
	_ = b[entrySize-1]
	binary.BigEndian.PutUint64(b[entryPhysOff:], uint64(phys))
	binary.BigEndian.PutUint64(b[entryBaseOff:], uint64(base))
	binary.BigEndian.PutUint32(b[entrySizeOff:], uint32(size))
	binary.BigEndian.PutUint32(b[entryCountOff:], uint32(count))
	binary.BigEndian.PutUint32(b[entryTagOff:], tag)
	binary.BigEndian.PutUint32(b[entryCRCOff:], crc32.Checksum(b[:entryCRCOff], castagnoli))
}

// decodeEntry decodes b; ok is false for a zero, torn or garbage entry.
func decodeEntry(b []byte) (e entry, ok bool) {
	_ = b[entrySize-1]
	if binary.BigEndian.Uint32(b[entryCRCOff:]) != crc32.Checksum(b[:entryCRCOff], castagnoli) {
		return entry{}, false
	}
	e = entry{
		phys:  int64(binary.BigEndian.Uint64(b[entryPhysOff:])),
		base:  int64(binary.BigEndian.Uint64(b[entryBaseOff:])),
		size:  int64(binary.BigEndian.Uint32(b[entrySizeOff:])),
		count: int64(int32(binary.BigEndian.Uint32(b[entryCountOff:]))),
		tag:   binary.BigEndian.Uint32(b[entryTagOff:]),
	}
	if e.phys < 0 || e.base < 0 || e.size < minBatchSize || e.count <= 0 {
		return entry{}, false
	}
	return e, true
}

// follows reports whether e may come right after prev in a queue.
func (e entry) follows(prev entry) bool {
	return e.phys >= prev.end() && e.base >= prev.nextOff()
}

// topicQueues is one topic's queues. Its map is written under Store.mu and Store.qmu.
type topicQueues struct {
	name    string
	dirName string
	queues  map[int32]*consumeQueue
}

// consumeQueue indexes one (topic, queueId). Entry i lives in the file f of files with
// f.base <= i < f.base+f.entries(). Readers use the atomics only; Append, retention and
// topic deletions change the file list (copy-on-write) under Store.mu.
type consumeQueue struct {
	s       *Store
	topic   string
	queueID int32
	dir     string

	files      atomic.Pointer[[]*mappedFile]
	count      atomic.Int64 // published number of entry slots in use (index of the next entry)
	maxOffset  atomic.Int64 // published next queue offset
	minIdx     atomic.Int64 // lower bound of live entries (retention)
	hint       atomic.Int64 // entry after the last one read (sequential consumers)
	lastTS     atomic.Int64 // store time of the newest batch, Unix ms
	flushedIdx atomic.Int64 // entries below are durable (queue flusher)
	deleted    atomic.Bool
	// born is the queue's incarnation (incarnation.go), 0 when not known; set before the
	// queue's first entry is published.
	born atomic.Uint64

	cnt  int64       // (mu) == count
	next int64       // (mu) == maxOffset
	last *mappedFile // (mu) file of entry cnt (or of cnt-1 when full)

	// Recovery only.
	confirm int64 // next entry that must match a re-dispatched batch (-1: not located yet)
	hwm     int64 // one past the highest entry index loaded or written
	loaded  int64 // max offset of the entries loaded, before re-dispatch
	// The entry before confirm, which a re-dispatched batch must follow: its next queue offset
	// and the physical offset it ends at (only what the check needs: the struct stays in a
	// smaller size class, and recovery allocates one per queue).
	prevNext int64
	prevEnd  int64
	hasPrev  bool // prevNext and prevEnd are set (the queue has an entry before confirm)
	needZero bool // the file tail after the last entry may hold stale entries
}

// queueLocked returns the queue or nil. Caller holds mu (or qmu). Does not allocate.
func (s *Store) queueLocked(topic []byte, queueID int32) *consumeQueue {
	t := s.topics[string(topic)]
	if t == nil {
		return nil
	}
	return t.queues[queueID]
}

// lookupQueue returns the queue or nil. Any goroutine. Does not allocate.
func (s *Store) lookupQueue(topic []byte, queueID int32) *consumeQueue {
	s.qmu.RLock()
	q := s.queueLocked(topic, queueID)
	s.qmu.RUnlock()
	return q
}

// newQueue registers an empty queue (no files yet) whose topic directory is named dirName.
// Caller holds mu, or is recovery.
func (s *Store) newQueue(topic, dirName string, queueID int32) *consumeQueue {
	t := s.topics[topic]
	if t == nil {
		t = &topicQueues{name: topic, dirName: dirName, queues: make(map[int32]*consumeQueue)}
	}
	q := &consumeQueue{
		s:       s,
		topic:   topic,
		queueID: queueID,
		dir:     filepath.Join(s.cqDir, t.dirName, strconv.Itoa(int(queueID))),
		confirm: -1,
	}
	q.files.Store(&[]*mappedFile{})
	s.qmu.Lock()
	s.topics[topic] = t
	t.queues[queueID] = q
	s.qmu.Unlock()
	return q
}

// createQueueLocked creates a new queue's directory. Caller holds mu.
func (s *Store) createQueueLocked(topic string, queueID int32) (*consumeQueue, error) {
	dirName := escapeTopic(topic)
	if len(dirName) > maxTopicDirName {
		return nil, fmt.Errorf("cannot create queue %q/%d: topic too long: %w", topic, queueID, ErrInvalidTopic)
	}
	dir := filepath.Join(s.cqDir, dirName, strconv.Itoa(int(queueID)))
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("cannot create consume queue directory %q: %w", dir, err)
	}
	s.markDirDirty(s.cqDir)
	s.markDirDirty(filepath.Dir(dir))
	return s.newQueue(topic, dirName, queueID), nil
}

// ensureRoomLocked makes sure the file for entry cnt exists, creating it if needed (ErrDiskFull
// on a full disk; nothing changes then). Caller holds mu (or is recovery).
func (q *consumeQueue) ensureRoomLocked() error {
	if q.last != nil && q.cnt < q.last.base+q.last.entries() {
		return nil
	}
	if f := fileFor(*q.files.Load(), q.cnt); f != nil { // recovery: after a truncation
		q.last = f
		return nil
	}
	s := q.s
	path := filePath(q.dir, q.cnt)
	m, err := createMapped(path, int64(s.cfg.QueueFileEntries)*entrySize, s.cfg.Preallocate, false)
	if err != nil {
		return fmt.Errorf("cannot create consume-queue file for %s/%d at entry %d: %w", q.topic, q.queueID, q.cnt, err)
	}
	s.markDirDirty(q.dir)
	f := s.newMappedFile(path, q.cnt, m)
	cur := *q.files.Load()
	list := make([]*mappedFile, len(cur), len(cur)+1)
	copy(list, cur)
	list = append(list, f)
	q.files.Store(&list)
	q.last = f
	return nil
}

// writeEntryLocked writes entry cnt (its file exists: ensureRoomLocked) and publishes it.
func (q *consumeQueue) writeEntryLocked(phys int64, size int, base int64, count int32, tag uint32, ts int64) {
	f := q.last
	rel := (q.cnt - f.base) * entrySize
	encodeEntry(f.data[rel:rel+entrySize], phys, size, base, count, tag)
	if q.cnt == f.base {
		f.firstBase.Store(base)
	}
	q.cnt++
	q.next = base + int64(count)
	q.lastTS.Store(ts)
	q.maxOffset.Store(q.next)
	q.count.Store(q.cnt)
}

// fileFor returns the file of files holding entry i, or nil.
func fileFor(files []*mappedFile, i int64) *mappedFile {
	lo, hi := 0, len(files)
	for lo < hi {
		m := int(uint(lo+hi) >> 1)
		if files[m].base <= i {
			lo = m + 1
		} else {
			hi = m
		}
	}
	if lo == 0 {
		return nil
	}
	if f := files[lo-1]; i < f.base+f.entries() {
		return f
	}
	return nil
}

// cqCursor reads entries of one queue for a reader, holding a reference on the file it is in.
// Its zero value is ready after setting files; close releases the reference. Lives on the stack.
type cqCursor struct {
	files []*mappedFile
	cur   *mappedFile
}

// entry returns entry i. It fails with errRetry when the file went away (retention), and with
// ErrCorrupt when the entry does not check out.
func (c *cqCursor) entry(i int64) (entry, error) {
	f := c.cur
	if f == nil || i < f.base || i >= f.base+f.entries() {
		c.close()
		f = fileFor(c.files, i)
		if f == nil || !f.tryAcquire() {
			return entry{}, errRetry
		}
		c.cur = f
	}
	rel := (i - f.base) * entrySize
	e, ok := decodeEntry(f.data[rel : rel+entrySize])
	if !ok {
		return entry{}, fmt.Errorf("cannot decode consume-queue entry %d in %q: %w", i, f.path(), ErrCorrupt)
	}
	return e, nil
}

func (c *cqCursor) close() {
	if c.cur != nil {
		c.cur.release()
		c.cur = nil
	}
}

// queueBounds is a consistent view of a queue for one read.
type queueBounds struct {
	lo, cnt        int64 // live entries are [lo, cnt)
	minOff, maxOff int64
}

// bounds loads the queue's live range through c (which it sets up). Readers only.
func (q *consumeQueue) bounds(c *cqCursor) (queueBounds, error) {
	var b queueBounds
	b.cnt = q.count.Load()
	c.files = *q.files.Load()
	if b.cnt == 0 || len(c.files) == 0 || q.deleted.Load() {
		return b, errNoQueue
	}
	b.lo = max(q.minIdx.Load(), c.files[0].base)
	if b.lo >= b.cnt {
		b.lo = b.cnt
		b.maxOff = q.maxOffset.Load()
		b.minOff = b.maxOff
		return b, nil
	}
	last, err := c.entry(b.cnt - 1)
	if err != nil {
		return b, err
	}
	b.maxOff = last.nextOff()
	first, err := c.entry(b.lo)
	if err != nil {
		return b, err
	}
	if logMin := q.s.minOffset.Load(); first.phys < logMin {
		// Retention removed segments and has not caught up with this queue yet: find the
		// first entry still in the log.
		lo, hi := b.lo+1, b.cnt
		for lo < hi {
			m := lo + (hi-lo)/2
			e, err := c.entry(m)
			if err != nil {
				return b, err
			}
			if e.phys < logMin {
				lo = m + 1
			} else {
				hi = m
			}
		}
		b.lo = lo
		if lo == b.cnt {
			b.minOff = b.maxOff
			return b, nil
		}
		first, err = c.entry(lo)
		if err != nil {
			return b, err
		}
	}
	b.minOff = first.base
	return b, nil
}

// find returns the index of the first live entry whose batch holds or follows queue offset off
// (minOff <= off < maxOff), i.e. the first with base+count > off.
func (q *consumeQueue) find(c *cqCursor, b queueBounds, off int64) (int64, error) {
	if h := q.hint.Load(); h >= b.lo && h < b.cnt {
		e, err := c.entry(h)
		if err != nil {
			return 0, err
		}
		if e.base <= off && off < e.nextOff() {
			return h, nil
		}
	}
	// Narrow to one file by the files' first bases, then search inside it.
	files := c.files
	nf := len(files)
	for nf > 0 && files[nf-1].base >= b.cnt {
		nf--
	}
	lo, hi := 0, nf
	for lo < hi {
		m := int(uint(lo+hi) >> 1)
		if files[m].firstBase.Load() <= off {
			lo = m + 1
		} else {
			hi = m
		}
	}
	from, to := b.lo, b.cnt
	if lo > 0 {
		f := files[lo-1]
		from = max(from, f.base)
		to = min(to, f.base+f.entries())
	}
	for from < to {
		m := from + (to-from)/2
		e, err := c.entry(m)
		if err != nil {
			return 0, err
		}
		if e.nextOff() <= off {
			from = m + 1
		} else {
			to = m
		}
	}
	return from, nil
}

// escapeTopic maps a topic to a directory name: bytes outside [A-Za-z0-9._-] and a leading '.'
// become %XX.
func escapeTopic(t string) string {
	var sb strings.Builder
	for i := 0; i < len(t); i++ {
		c := t[i]
		if c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-' || c == '.' && i > 0 {
			sb.WriteByte(c)
		} else {
			fmt.Fprintf(&sb, "%%%02X", c)
		}
	}
	return sb.String()
}

func unescapeTopic(name string) (string, error) {
	var sb strings.Builder
	for i := 0; i < len(name); i++ {
		c := name[i]
		if c != '%' {
			sb.WriteByte(c)
			continue
		}
		if i+2 >= len(name) {
			return "", fmt.Errorf("cannot unescape topic directory %q: %w", name, ErrCorrupt)
		}
		v, err := strconv.ParseUint(name[i+1:i+3], 16, 8)
		if err != nil {
			return "", fmt.Errorf("cannot unescape topic directory %q: %w", name, ErrCorrupt)
		}
		sb.WriteByte(byte(v))
		i += 2
	}
	return sb.String(), nil
}
