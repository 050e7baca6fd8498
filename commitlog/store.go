package commitlog

import (
	"encoding/binary"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Store is a broker's commit log and consume queues.
//
// Append and DeleteTopic serialise on the store mutex; Read, ReadLog, WaitFlushed and the
// accessors may be called from any goroutine concurrently with them and with each other and do
// not take it. Close may be called once from any goroutine; every method returns ErrClosed (or a
// zero value) after it.
type Store struct {
	cfg    Config
	logger *slog.Logger
	logDir string
	cqDir  string
	lock   *os.File

	// mu is the store mutex. It guards the fields marked (mu), serialises appends, rolls and
	// every change of the segment list or of a queue's file list. It is never held across an
	// msync; it is held across file creation only on the slow paths (a roll the pre-allocator
	// has not prepared for, a new queue or consume-queue file).
	mu       sync.Mutex
	closed   bool        // (mu)
	active   *mappedFile // (mu) segment appends go to
	writePos int64       // (mu) physical offset of the next append (== end)
	// replInfos is AppendReplicated's scratch list of checked batches. (mu)
	replInfos []replInfo
	// deleted maps a topic whose queues a deletion record removed to the record's position at
	// its last deletion: the topic's batches below it belong to the deleted queues (deletions
	// file). (mu)
	deleted map[string]int64
	// fenced holds the topics DeleteTopic deleted and AllowTopic has not allowed again: Append
	// refuses them. Memory only. (mu)
	fenced map[string]struct{}
	// lastTS is the store timestamp of the log's newest batch, and lastOrdered says that batch
	// lies at or after orderedFrom, so the next batch must not go below lastTS (History). (mu)
	lastTS      int64
	lastOrdered bool
	// orderedFrom is the position from which the log's store timestamps never go down, as the
	// history file records it. (mu)
	orderedFrom int64
	// runFrom is where this run's writes began (the log end Open recovered, or a reset's base):
	// every batch after it was indexed by Append or AppendReplicated, so a queue of a topic
	// deleted after it that has no entry holds no batch since the deletion. (mu)
	runFrom int64

	// lastEpoch is the epoch of the log's newest batch, written under mu.
	lastEpoch atomic.Uint32
	// recovery is what Open found; set before Open returns, then read-only.
	recovery Recovery

	closedFlag atomic.Bool
	segs       atomic.Pointer[[]*mappedFile] // copy-on-write, written under mu
	end        atomic.Int64                  // log end offset, published after each append
	minOffset  atomic.Int64                  // log min offset
	nextBase   atomic.Int64                  // base of the segment after the active one
	// prefaultedTo is the physical offset up to which the pre-allocator populated page tables,
	// cachedTo the one up to which it read pages into the page cache without mapping them
	// (prefaultAhead).
	prefaultedTo atomic.Int64
	cachedTo     atomic.Int64
	// wbuf holds the batch Append stamps before writing it through the active segment's file
	// (its capacity is the largest batch so written). Under mu.
	wbuf []byte
	// batchAvg is a moving average of the sizes of the writes to the log with
	// the segment's writer (bytes: Append's batches, AppendReplicated's chunks; nextBatchAvg).
	// Under mu. smallBatches says it is under smallWrite: the pre-allocator then populates the
	// page tables ahead, and the writes that land there copy into the mapping (see "Writing the
	// active segment" in log.go). Written under mu, read by the pre-allocator.
	batchAvg     int64
	smallBatches atomic.Bool
	// populateUnsupported is set once the kernel refused MADV_POPULATE_WRITE (before 5.14):
	// the pre-allocator then populates nothing, and small appends write through the file.
	populateUnsupported atomic.Bool

	// qmu guards topics for readers; writers hold mu and qmu.
	qmu    sync.RWMutex
	topics map[string]*topicQueues

	// Flusher state (flush.go).
	flushed   atomic.Int64
	flushKick chan struct{}
	fmu       sync.Mutex
	waiters   []flushWaiter // (fmu)
	flushErr  error         // (fmu) sticky
	flushDone bool          // (fmu) the flusher has stopped; complete waiters inline
	syncCount atomic.Int64  // msync calls of the log, for tests and metrics
	ready     []flushWaiter // flusher goroutine only

	// Pre-allocator state (log.go).
	amu       sync.Mutex
	prepared  *mappedFile // (amu)
	allocErr  error       // (amu) last background failure, logged once
	allocKick chan struct{}

	// Cleaner state (segment.go, retention.go).
	gcMu      sync.Mutex
	gcInline  bool          // (gcMu)
	garbage   []*mappedFile // (gcMu)
	trashDirs []string      // (gcMu)
	gcKick    chan struct{}
	// retentionKick asks for a retention pass now: a roll with a size limit set, so the log
	// does not outgrow RetentionBytes by a whole check interval of writes.
	retentionKick chan struct{}
	liveFiles     atomic.Int64

	// Queue flusher state (flush.go).
	qflushKick chan struct{}
	dirMu      sync.Mutex
	dirtyDirs  map[string]struct{} // (dirMu) directories with unsynced creations
	lastCkpt   checkpoint          // queue flusher goroutine only

	// History file state (history.go): histGen counts changes of what the file holds (mu, or
	// recovery); histWritten is the generation last written, stored under histMu, which
	// serialises the file's writers.
	histGen     uint64
	histMu      sync.Mutex
	histWritten atomic.Uint64

	stop chan struct{}
	wg   sync.WaitGroup
}

// AppendResult describes a stored batch.
type AppendResult struct {
	// PhysicalOffset is the batch's position in the log, in bytes.
	PhysicalOffset int64
	// BaseQueueOffset is the queue offset of the batch's first message.
	BaseQueueOffset int64
	// Size is the batch's length in bytes.
	Size int
	// StoreTimestamp is the store time stamped into the batch, in Unix milliseconds.
	StoreTimestamp int64
	// EndOffset is the log end offset after this batch: pass it to WaitFlushed.
	EndOffset int64
}

// QueueID names a consume queue.
type QueueID struct {
	// Topic is the topic name.
	Topic string
	// QueueID is the queue's number within the topic (>= 0).
	QueueID int32
}

// Open opens (creating if needed) the store in cfg.Dir, recovers it (see the package
// documentation) and starts its goroutines: the flusher, the queue flusher, the segment
// pre-allocator and the retention goroutine. It returns an error wrapping ErrInvalidConfig,
// ErrLocked (another Store has the directory), ErrCorrupt (a segment is missing in the middle of
// the log), ErrDiskFull, or an I/O error. Any goroutine.
func Open(cfg Config) (*Store, error) {
	if err := cfg.setDefaults(); err != nil {
		return nil, err
	}
	s := &Store{
		cfg:           cfg,
		logger:        cfg.Logger,
		logDir:        filepath.Join(cfg.Dir, "commitlog"),
		cqDir:         filepath.Join(cfg.Dir, "consumequeue"),
		topics:        make(map[string]*topicQueues),
		deleted:       make(map[string]int64),
		fenced:        make(map[string]struct{}),
		flushKick:     make(chan struct{}, 1),
		allocKick:     make(chan struct{}, 1),
		gcKick:        make(chan struct{}, 1),
		retentionKick: make(chan struct{}, 1),
		qflushKick:    make(chan struct{}, 1),
		dirtyDirs:     make(map[string]struct{}),
		stop:          make(chan struct{}),
		gcInline:      true,
		batchAvg:      4 * smallWrite, // small after a dozen small writes or so, not after one
	}
	for _, d := range []string{cfg.Dir, s.logDir, s.cqDir} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return nil, fmt.Errorf("cannot create directory %q: %w", d, err)
		}
	}
	lock, err := lockDir(cfg.Dir)
	if err != nil {
		return nil, err
	}
	s.lock = lock
	if err := s.recover(); err != nil {
		s.releaseAll()
		_ = s.lock.Close()
		return nil, err
	}
	s.gcMu.Lock()
	s.gcInline = false
	s.gcMu.Unlock()
	s.wg.Add(4)
	go s.flushLoop()
	go s.queueFlushLoop()
	go s.allocLoop()
	go s.retentionLoop()
	kick(s.allocKick)
	return s, nil
}

// Append stores batch as the next batch of queue (topic, queueID) and returns where it went.
// The batch must follow the batch contract (package documentation); count is its number of
// messages (>= 1) and tagHash goes into the consume-queue entry. epoch is the master epoch
// the batch is stored in: never below LastEpoch. stamp (may be nil) is called with the stored
// copy to write the assigned fields. The store timestamp is the clock's time (Config.Now), but
// never below the log's newest unless the clock is more than a second behind it (History). The
// batch is visible to Read when Append returns; it is durable once WaitFlushed(result.EndOffset)
// completes.
//
// Errors wrap ErrInvalidBatch, ErrInvalidTopic, ErrStaleEpoch, ErrTopicDeleted, ErrClosed, ErrDiskFull (no space for the next
// segment or consume-queue file: nothing was written and a later Append retries) or an I/O
// error. Any goroutine (typically event loops); appends are serialised by the store mutex and
// make one pwrite for a batch written through the file (none when copied into the mapping,
// see viaFileLocked) and no allocation except when a segment, queue or queue file is created,
// when the write buffer grows to a larger batch than any before, or when the clock is more than a second behind the
// log's newest store timestamp (the ordered file records where the order restarts).
func (s *Store) Append(topic []byte, queueID int32, batch []byte, count int32, tagHash uint32, epoch uint32, stamp StampFunc) (AppendResult, error) {
	size := len(batch)
	if size < minBatchSize || int64(size) > s.cfg.SegmentSize || binary.BigEndian.Uint32(batch) == 0 || count <= 0 {
		return AppendResult{}, fmt.Errorf("cannot append batch of %d bytes (%d messages, segment size %d): %w", size, count, s.cfg.SegmentSize, ErrInvalidBatch)
	}
	if len(topic) == 0 || len(topic) > maxTopicLen || queueID < 0 {
		return AppendResult{}, fmt.Errorf("cannot append to queue %q/%d: %w", string(topic), queueID, ErrInvalidTopic)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return AppendResult{}, ErrClosed
	}
	lastEpoch := s.lastEpoch.Load()
	if epoch < lastEpoch {
		return AppendResult{}, fmt.Errorf("cannot append a batch of epoch %d after one of epoch %d: %w", epoch, lastEpoch, ErrStaleEpoch)
	}
	if len(s.fenced) != 0 {
		if _, ok := s.fenced[string(topic)]; ok {
			return AppendResult{}, fmt.Errorf("cannot append to %q: %w", string(topic), ErrTopicDeleted)
		}
	}
	q := s.queueLocked(topic, queueID)
	if q == nil {
		var err error
		if q, err = s.createQueueLocked(string(topic), queueID); err != nil {
			return AppendResult{}, err
		}
	}
	if err := q.ensureRoomLocked(); err != nil {
		return AppendResult{}, err
	}
	seg := s.active
	if s.writePos+int64(size) > seg.end() {
		if err := s.rollLocked(); err != nil {
			return AppendResult{}, err
		}
		seg = s.active
	}
	pos := s.writePos
	ts, err := s.storeTimeLocked(pos, s.lastTS)
	if err != nil {
		return AppendResult{}, err
	}
	rel := pos - seg.base
	base := q.next
	s.noteWriteLocked(size)
	if s.viaFileLocked(seg, pos, size) {
		// The batch is stamped in a copy (the caller's bytes stay as they are), written whole.
		s.wbuf = append(s.wbuf[:0], batch...)
		buf := s.wbuf[:size:size]
		if stamp != nil {
			stamp(buf, pos, base, ts, epoch)
		}
		if err := s.pwriteLocked(seg, rel, buf); err != nil {
			return AppendResult{}, err
		}
	} else {
		dst := seg.data[rel : rel+int64(size) : rel+int64(size)]
		copy(dst, batch)
		if stamp != nil {
			stamp(dst, pos, base, ts, epoch)
		}
	}
	if q.cnt == 0 && base == 0 { // the queue's first batch: a new life
		s.setBorn(q, pos, ts)
	}
	q.writeEntryLocked(pos, size, base, count, tagHash, ts)
	end := s.advanceLocked(seg, pos, size, ts, epoch, lastEpoch)
	if end-s.flushed.Load() >= s.cfg.FlushDirtyBytes {
		kick(s.flushKick)
	}
	s.kickPrefault(end)
	return AppendResult{PhysicalOffset: pos, BaseQueueOffset: base, Size: size, StoreTimestamp: ts, EndOffset: end}, nil
}

// advanceLocked moves the log end past a batch of size bytes written at pos of segment seg, of
// store time ts and epoch (lastEpoch: the log's newest before it), and returns the new end.
// Append and DeleteTopic call it once the batch is in place. s.mu must be held.
func (s *Store) advanceLocked(seg *mappedFile, pos int64, size int, ts int64, epoch, lastEpoch uint32) int64 {
	seg.newestTS.Store(ts)
	s.lastTS, s.lastOrdered = ts, true
	if epoch != lastEpoch {
		s.lastEpoch.Store(epoch)
	}
	end := pos + int64(size)
	s.writePos = end
	s.end.Store(end)
	return end
}

// LogMinOffset returns the physical offset of the oldest byte still in the log. Any goroutine.
func (s *Store) LogMinOffset() int64 { return s.minOffset.Load() }

// LogEndOffset returns the physical offset just past the newest batch. Any goroutine.
func (s *Store) LogEndOffset() int64 { return s.end.Load() }

// LastEpoch returns the epoch of the log's newest batch (0 for an empty log): Append refuses a
// lower one. After Open it is the newest epoch recovery found, from the scanned batches or the
// batch before them. Any goroutine.
func (s *Store) LastEpoch() uint32 { return s.lastEpoch.Load() }

// Recovery returns what Open found and cut. Any goroutine.
func (s *Store) Recovery() Recovery { return s.recovery }

// FlushedOffset returns the physical offset up to which the log is known durable. Any goroutine.
func (s *Store) FlushedOffset() int64 { return s.flushed.Load() }

// MaxOffset returns the queue's next queue offset (last batch's base + count), 0 for an unknown
// queue. Any goroutine.
func (s *Store) MaxOffset(topic []byte, queueID int32) int64 {
	q := s.lookupQueue(topic, queueID)
	if q == nil {
		return 0
	}
	return q.maxOffset.Load()
}

// MinOffset returns the queue offset of the oldest batch of the queue that is still in the log
// (the first entry whose physical offset is >= LogMinOffset), or MaxOffset when retention has
// removed all of them; 0 for an unknown queue or after Close. Any goroutine.
func (s *Store) MinOffset(topic []byte, queueID int32) int64 {
	for range maxReadAttempts {
		if s.closedFlag.Load() {
			return 0
		}
		q := s.lookupQueue(topic, queueID)
		if q == nil {
			return 0
		}
		var c cqCursor
		b, err := q.bounds(&c)
		c.close()
		if err == nil {
			return b.minOff
		}
	}
	return 0
}

// LastStoreTimestamp returns the store timestamp (Unix ms) of the queue's newest batch, 0 for an
// unknown queue. After a restart it comes from parsing that batch (or 0 if retention removed
// it). Any goroutine.
func (s *Store) LastStoreTimestamp(topic []byte, queueID int32) int64 {
	q := s.lookupQueue(topic, queueID)
	if q == nil {
		return 0
	}
	return q.lastTS.Load()
}

// Queues returns every consume queue, sorted by topic then queue id. Any goroutine.
func (s *Store) Queues() []QueueID {
	s.qmu.RLock()
	var out []QueueID
	for _, t := range s.topics {
		for id, q := range t.queues {
			if q.count.Load() > 0 { // a queue whose first append failed has no entry
				out = append(out, QueueID{Topic: t.name, QueueID: id})
			}
		}
	}
	s.qmu.RUnlock()
	slices.SortFunc(out, func(a, b QueueID) int {
		if c := strings.Compare(a.Topic, b.Topic); c != 0 {
			return c
		}
		return int(a.QueueID) - int(b.QueueID)
	})
	return out
}

// DeleteTopic deletes topic at the log's end: it appends record, a control batch that the
// Parser reports as deleting topic (BatchInfo.DeletesTopic), and removes every consume queue of
// the topic (their files go once no reader holds them), so that the deletion travels to the
// slaves with the log and takes effect at the same position on every member (AppendReplicated
// and recovery apply it there too). Deleting a topic without queues still appends the record.
// The deletion is recorded durably first (the deletions file: the topic and the record's
// position), so that recovery never indexes the deleted queues' batches again and takes the
// topic's later batches, whose queue offsets start afresh, for the new queues they are. Append
// then refuses the topic (ErrTopicDeleted) until AllowTopic. epoch and stamp are Append's; the
// record's store timestamp is above every earlier batch's (History). The record is durable
// once WaitFlushed(result.EndOffset) completes, and its bytes go with retention.
//
// Errors wrap ErrInvalidBatch (record is not a deletion record of topic), ErrInvalidTopic,
// ErrStaleEpoch, ErrDiskFull, ErrClosed, or the deletions file's write error; nothing is
// deleted then. Any goroutine; takes the store mutex, which it holds across the deletions
// file's write and fsync (an administrative operation, not a hot path).
func (s *Store) DeleteTopic(topic []byte, record []byte, epoch uint32, stamp StampFunc) (AppendResult, error) {
	size := len(record)
	if size < minBatchSize || int64(size) > s.cfg.SegmentSize || binary.BigEndian.Uint32(record) == 0 {
		return AppendResult{}, fmt.Errorf("cannot append a deletion record of %d bytes (segment size %d): %w", size, s.cfg.SegmentSize, ErrInvalidBatch)
	}
	if len(topic) == 0 || len(topic) > maxTopicLen {
		return AppendResult{}, fmt.Errorf("cannot delete topic %q: %w", string(topic), ErrInvalidTopic)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return AppendResult{}, ErrClosed
	}
	lastEpoch := s.lastEpoch.Load()
	if epoch < lastEpoch {
		return AppendResult{}, fmt.Errorf("cannot append a deletion record of epoch %d after a batch of epoch %d: %w", epoch, lastEpoch, ErrStaleEpoch)
	}
	if s.writePos+int64(size) > s.active.end() {
		if err := s.rollLocked(); err != nil {
			return AppendResult{}, err
		}
	}
	seg, pos := s.active, s.writePos
	ts, err := s.storeTimeLocked(pos, s.lastTS+1)
	if err != nil {
		return AppendResult{}, fmt.Errorf("cannot delete topic %q: %w", string(topic), err)
	}
	// Check the record as recovery will read it before anything is recorded or written.
	check := append([]byte(nil), record...)
	if stamp != nil {
		stamp(check, pos, 0, ts, epoch)
	}
	info, err := s.cfg.Parser(check, pos)
	if err != nil || info.Size != size || !info.Control || !info.DeletesTopic || string(info.Topic) != string(topic) {
		return AppendResult{}, fmt.Errorf("cannot delete topic %q: the record is not a deletion record of it (parser: %v): %w", string(topic), err, ErrInvalidBatch)
	}
	name := string(topic)
	if err := s.recordDeletionLocked(name, pos); err != nil {
		return AppendResult{}, fmt.Errorf("cannot delete topic %q: %w", name, err)
	}
	// NB: through the mapping even when the segment has a writer: a copy cannot fail, and
	// nothing may fail once the deletions file names pos (a batch appended there later would be
	// taken for the deletion at the next start). Deletion records are rare.
	rel := pos - seg.base
	copy(seg.data[rel:rel+int64(size)], check)
	queues := 0
	if t := s.topics[name]; t != nil {
		queues = len(t.queues)
		s.deleteQueuesLocked(t)
	}
	s.fenced[name] = struct{}{}
	end := s.advanceLocked(seg, pos, size, ts, epoch, lastEpoch)
	kick(s.flushKick)
	kick(s.qflushKick)
	s.logger.Info("commitlog: topic deleted", "topic", name, "queues", queues, "recordAt", pos)
	return AppendResult{PhysicalOffset: pos, Size: size, StoreTimestamp: ts, EndOffset: end}, nil
}

// AllowTopic lets Append take batches of topic again after DeleteTopic: they go to queues
// created afresh. The broker calls it when the topic is created again. Any goroutine; takes the
// store mutex.
func (s *Store) AllowTopic(topic []byte) {
	s.mu.Lock()
	delete(s.fenced, string(topic))
	s.mu.Unlock()
}

// Close stops the goroutines, flushes the log and the consume queues, writes the checkpoint,
// completes pending WaitFlushed callbacks (with ErrClosed when not durable) and unmaps every
// file, waiting up to Config.CloseTimeout for readers to release their Slices; mappings still
// held after that are unmapped on their last release. It returns the first flush error, or
// ErrClosed when called again. Any goroutine, once.
func (s *Store) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return ErrClosed
	}
	s.closed = true
	s.closedFlag.Store(true)
	s.mu.Unlock()

	close(s.stop)
	s.wg.Wait()

	var firstErr error
	s.flushOnce()
	s.finishWaiters()
	s.fmu.Lock()
	if s.flushErr != nil {
		firstErr = s.flushErr
	}
	s.fmu.Unlock()
	if err := s.flushQueuesAndCheckpoint(firstErr == nil); err != nil && firstErr == nil {
		firstErr = err
	}

	s.amu.Lock()
	if p := s.prepared; p != nil {
		s.prepared = nil
		p.remove.Store(true)
		p.release()
	}
	s.amu.Unlock()
	s.gcMu.Lock()
	s.gcInline = true
	trash := s.trashDirs
	s.trashDirs = nil
	s.gcMu.Unlock()
	s.drainGarbage()
	s.releaseAll()
	removeTrash(trash) // the rest goes at the next Open

	deadline := time.Now().Add(s.cfg.CloseTimeout)
	for s.liveFiles.Load() > 0 && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	if n := s.liveFiles.Load(); n > 0 {
		s.logger.Warn("commitlog: closing with mappings still held by readers; they are unmapped on release",
			"files", n, "waited", s.cfg.CloseTimeout)
	}
	if err := s.lock.Close(); err != nil && firstErr == nil {
		firstErr = fmt.Errorf("cannot release lock file: %w", err)
	}
	return firstErr
}

// releaseAll drops the owner references of every segment and consume-queue file.
func (s *Store) releaseAll() {
	if p := s.segs.Load(); p != nil {
		for _, f := range *p {
			f.release()
		}
		s.segs.Store(&[]*mappedFile{})
	}
	s.qmu.Lock()
	for _, t := range s.topics {
		for _, q := range t.queues {
			if p := q.files.Load(); p != nil {
				for _, f := range *p {
					f.release()
				}
			}
			q.files.Store(&[]*mappedFile{})
		}
	}
	s.qmu.Unlock()
}

// removeTrash removes the directories of deleted queues whose files are all gone and returns
// the ones still holding files (mapped by a reader; removed on release).
func removeTrash(dirs []string) []string {
	var left []string
	for _, d := range dirs {
		subs, _ := os.ReadDir(d)
		for _, sub := range subs {
			_ = os.Remove(filepath.Join(d, sub.Name()))
		}
		if err := os.Remove(d); err != nil && !os.IsNotExist(err) {
			left = append(left, d)
		}
	}
	return left
}

func (s *Store) markDirDirty(dir string) {
	s.dirMu.Lock()
	s.dirtyDirs[dir] = struct{}{}
	s.dirMu.Unlock()
}
