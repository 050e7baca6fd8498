package commitlog

import (
	"bytes"
	"errors"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/petrel-mq/petrel/internal/testutil"
)

func TestMain(m *testing.M) {
	if dir := os.Getenv(childEnv); dir != "" {
		childMain(dir)
		return
	}
	testutil.VerifyTestMain(m)
}

func TestFlushModeString(t *testing.T) {
	if AsyncFlush.String() != "ASYNC_FLUSH" || SyncFlush.String() != "SYNC_FLUSH" {
		t.Fatal(AsyncFlush.String(), SyncFlush.String())
	}
}

func TestOpenConfigErrors(t *testing.T) {
	if _, err := Open(Config{}); !errors.Is(err, ErrInvalidConfig) {
		t.Fatal(err)
	}
	if _, err := Open(Config{Dir: t.TempDir()}); !errors.Is(err, ErrInvalidConfig) {
		t.Fatal(err)
	}
	cfg := testConfig(t.TempDir())
	cfg.SegmentSize = 100
	if _, err := Open(cfg); !errors.Is(err, ErrInvalidConfig) {
		t.Fatal(err)
	}
}

func TestLockedDir(t *testing.T) {
	cfg := testConfig(t.TempDir())
	s := mustOpen(t, cfg)
	if _, err := Open(cfg); !errors.Is(err, ErrLocked) {
		t.Fatalf("second Open: %v", err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); !errors.Is(err, ErrClosed) {
		t.Fatal(err)
	}
	s = mustOpen(t, cfg)
	s.Close()
}

func TestAppendValidation(t *testing.T) {
	s := mustOpen(t, testConfig(t.TempDir()))
	defer s.Close()
	good := makeBatch("t", 0, 1, 0, nil)
	for _, c := range []struct {
		topic string
		qid   int32
		batch []byte
		count int32
		want  error
	}{
		{"t", 0, []byte{1, 2, 3}, 1, ErrInvalidBatch},
		{"t", 0, make([]byte, 16), 1, ErrInvalidBatch},
		{"t", 0, make([]byte, 65<<10), 1, ErrInvalidBatch},
		{"t", 0, good, 0, ErrInvalidBatch},
		{"", 0, good, 1, ErrInvalidTopic},
		{"t", -1, good, 1, ErrInvalidTopic},
	} {
		if _, err := s.Append([]byte(c.topic), c.qid, c.batch, c.count, 0, 0, nil); !errors.Is(err, c.want) {
			t.Errorf("Append(%q, %d, %d bytes, %d) = %v, want %v", c.topic, c.qid, len(c.batch), c.count, err, c.want)
		}
	}
}

// fill appends n random batches over several topics and queues.
func fill(t tb, s *Store, m *model, r *rand.Rand, n int, maxPayload int) {
	t.Helper()
	topics := []string{"orders", "pay/ments", ".hidden", "x"}
	for range n {
		topic := topics[r.IntN(len(topics))]
		appendRec(t, s, m, topic, int32(r.IntN(3)), int32(1+r.IntN(4)), randPayload(r, 0, maxPayload))
	}
}

func TestRoundTripManyRolls(t *testing.T) {
	for _, segSize := range []int64{64 << 10, 1 << 20} {
		t.Run(fmtSize(segSize), func(t *testing.T) {
			dir := t.TempDir()
			cfg := testConfig(dir)
			cfg.SegmentSize = segSize
			s := mustOpen(t, cfg)
			m := newModel()
			r := rand.New(rand.NewPCG(1, uint64(segSize)))
			fill(t, s, m, r, 3000, 3000)
			if n := len(*s.segs.Load()); n < 4 {
				t.Fatalf("only %d segments", n)
			}
			verifyAll(t, s, m)
			// Every queue offset, including offsets inside a batch, returns the batch holding it.
			var rr ReadResult
			for k, rs := range m.queues {
				for _, rc := range rs {
					for off := rc.base; off < rc.base+int64(rc.count); off++ {
						if err := s.Read([]byte(k.topic), k.qid, off, 1, 0, &rr); err != nil || rr.Status != Found {
							t.Fatalf("%v @%d: %v %v", k, off, rr.Status, err)
						}
						if len(rr.Slices) != 1 || rr.Messages != int(rc.count) || rr.NextQueueOffset != rc.base+int64(rc.count) {
							t.Fatalf("%v @%d: %d slices, %d msgs, next %d", k, off, len(rr.Slices), rr.Messages, rr.NextQueueOffset)
						}
						checkBatch(t, rr.Slices[0].B, rc)
						rr.Release()
					}
				}
			}
			// Random offsets (non-sequential, defeats the hint).
			for range 2000 {
				ks := m.keys()
				k := ks[r.IntN(len(ks))]
				rs := m.queues[k]
				rc := rs[r.IntN(len(rs))]
				off := rc.base + r.Int64N(int64(rc.count))
				if err := s.Read([]byte(k.topic), k.qid, off, 1, 0, &rr); err != nil || rr.Status != Found {
					t.Fatalf("%v @%d: %v %v", k, off, rr.Status, err)
				}
				checkBatch(t, rr.Slices[0].B, rc)
				rr.Release()
			}
			end := s.LogEndOffset()
			if err := s.Close(); err != nil {
				t.Fatal(err)
			}
			// (a) clean reopen: same state.
			s = mustOpen(t, cfg)
			defer s.Close()
			if s.LogEndOffset() != end || s.FlushedOffset() != end {
				t.Fatalf("reopen: end %d flushed %d, want %d", s.LogEndOffset(), s.FlushedOffset(), end)
			}
			verifyAll(t, s, m)
			for k, rs := range m.queues {
				if got, want := s.LastStoreTimestamp([]byte(k.topic), k.qid), s.lastStamp(t, rs[len(rs)-1]); got != want {
					t.Fatalf("%v: LastStoreTimestamp %d, want %d", k, got, want)
				}
			}
			fill(t, s, m, r, 500, 3000)
			verifyAll(t, s, m)
		})
	}
}

// lastStamp returns the store timestamp stamped into a stored batch.
func (s *Store) lastStamp(t tb, r rec) int64 {
	sl, err := s.ReadLog(r.phys, r.size)
	if err != nil {
		t.Fatal(err)
	}
	defer sl.Release()
	info, err := testParser(sl.B, r.phys)
	if err != nil {
		t.Fatal(err)
	}
	return info.StoreTimestamp
}

func fmtSize(n int64) string {
	if n >= 1<<20 {
		return itoa(n>>20) + "MiB"
	}
	return itoa(n>>10) + "KiB"
}

func itoa(n int64) string { return string(appendInt(nil, n)) }

func appendInt(b []byte, n int64) []byte {
	if n >= 10 {
		b = appendInt(b, n/10)
	}
	return append(b, byte('0'+n%10))
}

func TestReadStatuses(t *testing.T) {
	cfg := testConfig(t.TempDir())
	cfg.RetentionBytes = 3 * cfg.SegmentSize
	cfg.RetentionCheckInterval = time.Hour // only the runRetention below: the bounds checked stay put
	s := mustOpen(t, cfg)
	defer s.Close()
	var rr ReadResult
	check := func(topic string, off int64, st ReadStatus, next, lo, hi int64) {
		t.Helper()
		if err := s.Read([]byte(topic), 0, off, 10, 0, &rr); err != nil {
			t.Fatal(err)
		}
		defer rr.Release()
		if rr.Status != st || rr.NextQueueOffset != next || rr.MinOffset != lo || rr.MaxOffset != hi {
			t.Fatalf("Read(%s, %d) = %v next %d min %d max %d; want %v %d %d %d", topic, off, rr.Status, rr.NextQueueOffset, rr.MinOffset, rr.MaxOffset, st, next, lo, hi)
		}
	}
	check("none", 0, NoQueue, 0, 0, 0)
	m := newModel()
	for i := range 10 {
		appendRec(t, s, m, "a", 0, 2, bytes.Repeat([]byte{byte(i)}, 100))
	}
	check("a", 20, NoNewMessage, 20, 0, 20)
	check("a", 25, OffsetOverflow, 20, 0, 20)
	check("a", 0, Found, 10, 0, 20) // 10 messages max: 5 batches
	check("a", 3, Found, 12, 0, 20) // starts at the batch holding 3
	// Fill the log with another queue so retention removes "a"'s segment.
	for range 400 {
		appendRec(t, s, m, "b", 0, 1, make([]byte, 1000))
	}
	// A segment roll also starts a retention pass of its own: the bounds checked below hold
	// once no pass has anything left to remove.
	testutil.Eventually(t, "retention to be done", func() bool {
		before := s.LogMinOffset()
		s.runRetention()
		return before != 0 && s.LogMinOffset() == before
	})
	check("a", 0, OffsetTooSmall, 20, 20, 20)
	check("a", 20, NoNewMessage, 20, 20, 20)
	if s.MinOffset([]byte("a"), 0) != 20 || s.MaxOffset([]byte("a"), 0) != 20 {
		t.Fatal(s.MinOffset([]byte("a"), 0), s.MaxOffset([]byte("a"), 0))
	}
	lo := s.MinOffset([]byte("b"), 0)
	if lo == 0 {
		t.Fatal("b min offset not advanced")
	}
	check("b", lo-1, OffsetTooSmall, lo, lo, 400)
	check("b", lo, Found, lo+10, lo, 400)
}

func TestReadLimitsAndMerge(t *testing.T) {
	cfg := testConfig(t.TempDir())
	cfg.SegmentSize = 1 << 20
	s := mustOpen(t, cfg)
	defer s.Close()
	m := newModel()
	for range 10 {
		appendRec(t, s, m, "a", 0, 1, make([]byte, 100))
	}
	for range 10 {
		appendRec(t, s, m, "a", 0, 1, make([]byte, 100))
		appendRec(t, s, m, "b", 0, 1, make([]byte, 100))
	}
	var rr ReadResult
	defer rr.Release()
	if err := s.Read([]byte("a"), 0, 0, 100, 0, &rr); err != nil {
		t.Fatal(err)
	}
	// The 11 contiguous batches share one slice; the 9 interleaved ones get one each.
	if rr.Messages != 20 || len(rr.Slices) != 10 || len(rr.Slices[0].B) != 11*m.queues[qkey{"a", 0}][0].size {
		t.Fatalf("%d msgs, %d slices", rr.Messages, len(rr.Slices))
	}
	rr.Release()
	size := m.queues[qkey{"a", 0}][0].size
	if err := s.Read([]byte("a"), 0, 0, 100, 3*size+1, &rr); err != nil || rr.Messages != 3 || rr.Bytes != 3*size {
		t.Fatalf("maxBytes: %d msgs %d bytes %v", rr.Messages, rr.Bytes, err)
	}
	rr.Release()
	if err := s.Read([]byte("a"), 0, 0, 100, 1, &rr); err != nil || rr.Messages != 1 {
		t.Fatalf("maxBytes below one batch: %d msgs %v", rr.Messages, err)
	}
	rr.Release()
	if err := s.Read([]byte("a"), 0, 0, 4, 0, &rr); err != nil || rr.Messages != 4 || rr.NextQueueOffset != 4 {
		t.Fatalf("maxMessages: %d msgs %v", rr.Messages, err)
	}
}

func TestReadLog(t *testing.T) {
	cfg := testConfig(t.TempDir())
	s := mustOpen(t, cfg)
	defer s.Close()
	m := newModel()
	r := rand.New(rand.NewPCG(3, 3))
	fill(t, s, m, r, 200, 2000)
	// Walk the log like a replica: batch by batch, following markers.
	pos := s.LogMinOffset()
	i := 0
	for pos < s.LogEndOffset() {
		sl, err := s.ReadLog(pos, 1<<20)
		if err != nil {
			t.Fatal(err)
		}
		b := sl.B
		for len(b) >= 8 && !(b[0] == 0 && b[1] == 0 && b[2] == 0 && b[3] == 0) {
			n := int(uint32(b[0])<<24 | uint32(b[1])<<16 | uint32(b[2])<<8 | uint32(b[3]))
			if m.all[i].phys != pos {
				t.Fatalf("batch %d at %d, want %d", i, pos, m.all[i].phys)
			}
			checkBatch(t, b[:n], m.all[i])
			i++
			pos += int64(n)
			b = b[n:]
		}
		if pos < s.LogEndOffset() {
			pos = (pos/cfg.SegmentSize + 1) * cfg.SegmentSize
		}
		sl.Release()
	}
	if i != len(m.all) {
		t.Fatalf("walked %d batches, want %d", i, len(m.all))
	}
	if sl, err := s.ReadLog(s.LogEndOffset(), 10); err != nil || len(sl.B) != 0 {
		t.Fatal(err)
	}
	if _, err := s.ReadLog(s.LogEndOffset()+1, 10); !errors.Is(err, ErrOffsetOutOfRange) {
		t.Fatal(err)
	}
	if _, err := s.ReadLog(-1, 10); !errors.Is(err, ErrOffsetOutOfRange) {
		t.Fatal(err)
	}
}

func TestRetentionRefcountDefersUnmap(t *testing.T) {
	dir := t.TempDir()
	cfg := testConfig(dir)
	s := mustOpen(t, cfg)
	defer func() { s.Close() }()
	m := newModel()
	for range 200 {
		appendRec(t, s, m, "a", 0, 1, make([]byte, 1000))
	}
	var rr ReadResult
	if err := s.Read([]byte("a"), 0, 0, 5, 0, &rr); err != nil || rr.Status != Found {
		t.Fatal(err)
	}
	held := bytes.Clone(rr.Slices[0].B)
	first := segPath(dir, 0)
	s.cfg.RetentionBytes = 2 * cfg.SegmentSize
	s.runRetention()
	if s.LogMinOffset() == 0 {
		t.Fatal("retention did nothing")
	}
	if _, err := os.Stat(first); err != nil {
		t.Fatalf("segment removed while a slice is held: %v", err)
	}
	if !bytes.Equal(rr.Slices[0].B, held) {
		t.Fatal("held slice changed")
	}
	// A new read sees the new minimum.
	var rr2 ReadResult
	if err := s.Read([]byte("a"), 0, 0, 5, 0, &rr2); err != nil || rr2.Status != OffsetTooSmall || rr2.NextQueueOffset == 0 {
		t.Fatalf("%v %v", rr2.Status, err)
	}
	rr.Release()
	q := s.lookupQueue([]byte("a"), 0)
	testutil.Eventually(t, "queue flush", func() bool { return q.flushedIdx.Load() == q.count.Load() })
	s.runRetention()
	testutil.Eventually(t, "segment removal", func() bool {
		_, err := os.Stat(first)
		return os.IsNotExist(err)
	})
	// Consume-queue files that only point below the log start are gone too (but not the last).
	files := *s.lookupQueue([]byte("a"), 0).files.Load()
	if files[0].base == 0 {
		t.Fatal("consume-queue files not cleaned")
	}
	verifyQueueFrom(t, s, m, qkey{"a", 0}, s.MinOffset([]byte("a"), 0))
	s.Close()
	s = mustOpen(t, cfg)
	verifyQueueFrom(t, s, m, qkey{"a", 0}, s.MinOffset([]byte("a"), 0))
}

// verifyQueueFrom checks the queue from queue offset from on.
func verifyQueueFrom(t tb, s *Store, m *model, k qkey, from int64) {
	t.Helper()
	mm := newModel()
	for _, r := range m.queues[k] {
		if r.base >= from {
			mm.add(r)
		}
	}
	verifyQueue(t, s, mm, k, 3, 0)
}

func TestRetentionByAge(t *testing.T) {
	cfg := testConfig(t.TempDir())
	var now atomic.Int64
	now.Store(time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC).UnixNano())
	cfg.Now = func() time.Time { return time.Unix(0, now.Load()) }
	s := mustOpen(t, cfg)
	defer s.Close()
	m := newModel()
	for range 150 {
		appendRec(t, s, m, "a", 0, 1, make([]byte, 1000))
	}
	s.runRetention()
	if s.LogMinOffset() != 0 {
		t.Fatal("deleted young segments")
	}
	now.Add(int64(73 * time.Hour))
	appendRec(t, s, m, "a", 0, 1, make([]byte, 1000))
	s.runRetention()
	segs := *s.segs.Load()
	if len(segs) != 1 || s.LogMinOffset() != segs[0].base {
		t.Fatalf("%d segments left, min %d", len(segs), s.LogMinOffset())
	}
}

func TestSyncGroupCommit(t *testing.T) {
	cfg := testConfig(t.TempDir())
	cfg.FlushMode = SyncFlush
	cfg.FlushInterval = time.Hour
	cfg.SegmentSize = 1 << 20
	s := mustOpen(t, cfg)
	defer s.Close()
	const writers, per = 8, 100
	var wg sync.WaitGroup
	var acked atomic.Int64
	for w := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			done := make(chan error, 1)
			for i := range per {
				res, err := s.Append([]byte("t"), int32(w), makeBatch("t", int32(w), 1, 0, make([]byte, 200+i)), 1, 0, 0, testStamp)
				if err != nil {
					t.Error(err)
					return
				}
				s.WaitFlushed(res.EndOffset, func(err error) { done <- err })
				if err := <-done; err != nil {
					t.Error(err)
					return
				}
				if s.FlushedOffset() < res.EndOffset {
					t.Error("acknowledged before durable")
				}
				acked.Add(1)
			}
		}()
	}
	wg.Wait()
	syncs := s.syncCount.Load()
	t.Logf("%d appends acknowledged by %d msyncs", acked.Load(), syncs)
	if acked.Load() != writers*per || syncs >= writers*per {
		t.Fatalf("%d acked, %d syncs", acked.Load(), syncs)
	}
}

func TestAsyncFlush(t *testing.T) {
	cfg := testConfig(t.TempDir())
	cfg.FlushInterval = time.Hour
	cfg.FlushDirtyBytes = 16 << 10
	s := mustOpen(t, cfg)
	defer s.Close()
	m := newModel()
	appendRec(t, s, m, "a", 0, 1, make([]byte, 100))
	time.Sleep(20 * time.Millisecond)
	if s.FlushedOffset() != 0 {
		t.Fatal("flushed before the interval or dirty threshold")
	}
	for range 20 {
		appendRec(t, s, m, "a", 0, 1, make([]byte, 1000))
	}
	testutil.Eventually(t, "dirty-bytes flush", func() bool { return s.FlushedOffset() > 16<<10 })
	// WaitFlushed in async mode for an already durable offset completes promptly.
	done := make(chan error, 1)
	s.WaitFlushed(s.FlushedOffset(), func(err error) { done <- err })
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	// A pending waiter is completed by Close (durable by the final flush).
	res := appendRec(t, s, m, "a", 0, 1, make([]byte, 10))
	s.WaitFlushed(res.phys+int64(res.size), func(err error) { done <- err })
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	s.WaitFlushed(1, func(err error) { done <- err })
	if err := <-done; !errors.Is(err, ErrClosed) {
		t.Fatal(err)
	}
}

func TestStickyFlushError(t *testing.T) {
	cfg := testConfig(t.TempDir())
	cfg.FlushMode = SyncFlush
	s := mustOpen(t, cfg)
	var fail atomic.Bool
	msync = func(b []byte, flags int) error {
		if fail.Load() {
			return syscall.EIO
		}
		return unix.Msync(b, flags)
	}
	defer func() { msync = unix.Msync }()
	res, err := s.Append([]byte("a"), 0, makeBatch("a", 0, 1, 0, nil), 1, 0, 0, testStamp)
	if err != nil {
		t.Fatal(err)
	}
	fail.Store(true)
	done := make(chan error, 1)
	s.WaitFlushed(res.EndOffset, func(err error) { done <- err })
	if err := <-done; !errors.Is(err, syscall.EIO) {
		t.Fatalf("WaitFlushed: %v", err)
	}
	fail.Store(false)
	s.WaitFlushed(res.EndOffset, func(err error) { done <- err })
	if err := <-done; !errors.Is(err, syscall.EIO) {
		t.Fatalf("sticky: %v", err)
	}
	if err := s.Close(); !errors.Is(err, syscall.EIO) {
		t.Fatalf("Close: %v", err)
	}
}

func TestDiskFull(t *testing.T) {
	cfg := testConfig(t.TempDir())
	var full atomic.Bool
	cfg.Preallocate = func(f *os.File, size int64) error {
		if full.Load() {
			return syscall.ENOSPC
		}
		return defaultPreallocate(f, size)
	}
	s := mustOpen(t, cfg)
	defer s.Close()
	m := newModel()
	for range 50 {
		appendRec(t, s, m, "a", 0, 1, make([]byte, 1000))
	}
	full.Store(true)
	// Keep appending until a roll needs a segment: the pre-allocated one is used first.
	var err error
	for i := 0; i < 500 && err == nil; i++ {
		payload := make([]byte, 1000)
		var res AppendResult
		res, err = s.Append([]byte("a"), 0, makeBatch("a", 0, 1, 0, payload), 1, 0, 0, testStamp)
		if err == nil {
			m.add(rec{topic: "a", qid: 0, base: res.BaseQueueOffset, count: 1, phys: res.PhysicalOffset, size: res.Size, payload: payload})
		}
	}
	if !errors.Is(err, ErrDiskFull) {
		t.Fatalf("want ErrDiskFull, got %v", err)
	}
	// A new queue needs a consume-queue file: disk full too.
	if _, err := s.Append([]byte("new"), 0, makeBatch("new", 0, 1, 0, nil), 1, 0, 0, testStamp); !errors.Is(err, ErrDiskFull) {
		t.Fatalf("new queue: %v", err)
	}
	end := s.LogEndOffset()
	verifyQueue(t, s, m, qkey{"a", 0}, 10, 0)
	if _, err := s.Append([]byte("a"), 0, makeBatch("a", 0, 1, 0, make([]byte, 1000)), 1, 0, 0, testStamp); !errors.Is(err, ErrDiskFull) {
		t.Fatal(err)
	}
	if s.LogEndOffset() != end {
		t.Fatal("failed append moved the end")
	}
	full.Store(false)
	for range 100 {
		appendRec(t, s, m, "a", 0, 1, make([]byte, 1000))
	}
	appendRec(t, s, m, "new", 0, 1, nil)
	verifyAll(t, s, m)
}

// TestDeleteTopic deletes a topic under a reader: the reader's slices stay valid, the queues go,
// the record sits in the log, appends are refused until AllowTopic and then start new queues,
// and all of it survives a restart.
func TestDeleteTopic(t *testing.T) {
	dir := t.TempDir()
	cfg := testConfig(dir)
	s := mustOpen(t, cfg)
	m := newModel()
	for i := range 100 {
		appendRec(t, s, m, "gone", int32(i%2), 1, make([]byte, 100))
		appendRec(t, s, m, "kept", 0, 1, make([]byte, 100))
	}
	var rr ReadResult
	if err := s.Read([]byte("gone"), 0, 0, 1, 0, &rr); err != nil || rr.Status != Found {
		t.Fatal(err)
	}
	if _, err := s.DeleteTopic([]byte("gone"), makeDeletion("other"), 0, testStamp); !errors.Is(err, ErrInvalidBatch) {
		t.Fatalf("a record of another topic: %v, want ErrInvalidBatch", err)
	}
	if _, err := s.DeleteTopic([]byte("gone"), makeBatch("gone", 0, 1, 0, nil), 0, testStamp); !errors.Is(err, ErrInvalidBatch) {
		t.Fatalf("a message batch as the record: %v, want ErrInvalidBatch", err)
	}
	first := m.queues[qkey{"gone", 0}][0]
	end := s.LogEndOffset()
	res, err := s.DeleteTopic([]byte("gone"), makeDeletion("gone"), 0, testStamp)
	if err != nil {
		t.Fatal(err)
	}
	if res.PhysicalOffset != end || res.EndOffset != end+int64(res.Size) || s.LogEndOffset() != res.EndOffset {
		t.Fatalf("DeleteTopic = %+v, log end before %d, after %d", res, end, s.LogEndOffset())
	}
	m.deleteTopic("gone", res.PhysicalOffset, res.Size, 0)
	var rr2 ReadResult
	if err := s.Read([]byte("gone"), 0, 0, 1, 0, &rr2); err != nil || rr2.Status != NoQueue {
		t.Fatal(rr2.Status, err)
	}
	checkBatch(t, splitBatches(t, rr.Slices[0].B)[0], first) // still mapped: the old bytes
	rr.Release()
	if _, err := s.Append([]byte("gone"), 0, makeBatch("gone", 0, 1, 0, nil), 1, 0, 0, testStamp); !errors.Is(err, ErrTopicDeleted) {
		t.Fatalf("an append after the deletion: %v, want ErrTopicDeleted", err)
	}
	s.AllowTopic([]byte("gone"))
	// Re-created from scratch.
	appendRec(t, s, m, "gone", 0, 1, make([]byte, 10))
	verifyAll(t, s, m)
	checkEnd(t, s, m)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s = mustOpen(t, cfg)
	verifyAll(t, s, m)
	checkEnd(t, s, m)
	// Appends are allowed after a restart: the broker's topic table decides.
	appendRec(t, s, m, "gone", 0, 1, make([]byte, 10))
	s = rescanned(t, s, cfg, m)
	ents, _ := os.ReadDir(filepath.Join(dir, "consumequeue"))
	for _, e := range ents {
		if e.Name()[0] == '.' {
			t.Fatalf("trash left: %s", e.Name())
		}
	}
}

func TestClosedStore(t *testing.T) {
	s := mustOpen(t, testConfig(t.TempDir()))
	m := newModel()
	appendRec(t, s, m, "a", 0, 1, nil)
	var rr ReadResult
	if err := s.Read([]byte("a"), 0, 0, 1, 0, &rr); err != nil {
		t.Fatal(err)
	}
	// Close with a slice held: the mapping stays until released (after the bounded wait).
	s.cfg.CloseTimeout = 10 * time.Millisecond
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	checkBatch(t, rr.Slices[0].B, m.all[0])
	rr.Release()
	if s.liveFiles.Load() != 0 {
		t.Fatalf("%d files still mapped", s.liveFiles.Load())
	}
	if _, err := s.Append([]byte("a"), 0, makeBatch("a", 0, 1, 0, nil), 1, 0, 0, nil); !errors.Is(err, ErrClosed) {
		t.Fatal(err)
	}
	if err := s.Read([]byte("a"), 0, 0, 1, 0, &rr); !errors.Is(err, ErrClosed) {
		t.Fatal(err)
	}
	if _, err := s.ReadLog(0, 1); !errors.Is(err, ErrClosed) {
		t.Fatal(err)
	}
}

func TestEscapeTopic(t *testing.T) {
	for _, topic := range []string{"a", "A-b_c.d", ".", "..", "a/b", "%", "ü", "\x00x", ".trash-1"} {
		e := escapeTopic(topic)
		if e == "." || e == ".." || e[0] == '.' || bytes.ContainsAny([]byte(e), "/\x00") {
			t.Fatalf("escape(%q) = %q", topic, e)
		}
		if u, err := unescapeTopic(e); err != nil || u != topic {
			t.Fatalf("unescape(%q) = %q, %v", e, u, err)
		}
	}
}

func TestConcurrentAppendReadRetention(t *testing.T) {
	cfg := testConfig(t.TempDir())
	cfg.RetentionBytes = 4 * cfg.SegmentSize
	cfg.RetentionCheckInterval = 5 * time.Millisecond
	s := mustOpen(t, cfg)
	defer s.Close()
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for w := range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				q := int32(i % 3)
				if _, err := s.Append([]byte("t"), q, makeBatch("t", q, 2, 0, make([]byte, 100+w*50)), 2, 0, 0, testStamp); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	for rd := range 3 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var rr ReadResult
			var off [3]int64
			for {
				select {
				case <-stop:
					return
				default:
				}
				q := int32(rd)
				if err := s.Read([]byte("t"), q, off[q], 16, 64<<10, &rr); err != nil {
					t.Error(err)
					return
				}
				switch rr.Status {
				case Found:
					for _, sl := range rr.Slices {
						for _, b := range splitBatches(t, sl.B) {
							if _, err := testParser(b, int64(-1)); err == nil || errors.Is(err, ErrIncomplete) {
								t.Error("parser accepted wrong offset")
							}
						}
					}
					off[q] = rr.NextQueueOffset
				case OffsetTooSmall, NoNewMessage, OffsetOverflow:
					off[q] = rr.NextQueueOffset
				}
				rr.Release()
				if sl, err := s.ReadLog(s.LogMinOffset(), 4096); err == nil {
					sl.Release()
				}
			}
		}()
	}
	// Retention must remove segments twice while appends and reads go on: once to start, once
	// more with readers that have met the first removal. A loaded machine takes longer to fill
	// the segments; the work, not a fixed time, decides the end.
	testutil.EventuallyWithin(t, time.Minute, "retention to remove a segment", func() bool { return s.LogMinOffset() > 0 })
	first := s.LogMinOffset()
	testutil.EventuallyWithin(t, time.Minute, "retention to remove another segment", func() bool { return s.LogMinOffset() > first })
	close(stop)
	wg.Wait()
}

// TestCloseUnderLoad closes the store while appenders, readers and waiters are running: they
// get ErrClosed (or finish), nothing crashes, no goroutine leaks, and the data reopens.
func TestCloseUnderLoad(t *testing.T) {
	cfg := testConfig(t.TempDir())
	cfg.FlushMode = SyncFlush
	cfg.CloseTimeout = time.Second
	s := mustOpen(t, cfg)
	var wg sync.WaitGroup
	var appended atomic.Int64
	for w := range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				res, err := s.Append([]byte("t"), int32(w), makeBatch("t", int32(w), 1, 0, make([]byte, 300)), 1, 0, 0, testStamp)
				if errors.Is(err, ErrClosed) {
					return
				}
				if err != nil {
					t.Error(err)
					return
				}
				appended.Add(1)
				s.WaitFlushed(res.EndOffset, func(err error) {
					if err != nil && !errors.Is(err, ErrClosed) {
						t.Error(err)
					}
				})
			}
		}()
	}
	for range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var rr ReadResult
			for {
				err := s.Read([]byte("t"), 0, 0, 32, 0, &rr)
				if errors.Is(err, ErrClosed) {
					return
				}
				if err != nil {
					t.Error(err)
					return
				}
				for _, sl := range rr.Slices {
					splitBatches(t, sl.B) // touch the bytes
				}
				rr.Release()
			}
		}()
	}
	time.Sleep(200 * time.Millisecond)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	s = mustOpen(t, cfg)
	defer s.Close()
	if got := s.MaxOffset([]byte("t"), 0) + s.MaxOffset([]byte("t"), 1); got != appended.Load() {
		t.Fatalf("%d messages after reopen, %d appended", got, appended.Load())
	}
}

// TestRetentionBySizeOnRoll: with a size limit, a roll runs retention at once instead of
// waiting for the check interval, so the log never outgrows the limit by an interval's writes.
func TestRetentionBySizeOnRoll(t *testing.T) {
	cfg := testConfig(t.TempDir())
	cfg.RetentionBytes = 2 * cfg.SegmentSize
	cfg.RetentionCheckInterval = time.Hour
	s := mustOpen(t, cfg)
	defer s.Close()
	m := newModel()
	for int64(s.LogEndOffset()) < 5*cfg.SegmentSize {
		appendRec(t, s, m, "big", 0, 1, make([]byte, 4000))
	}
	deadline := time.Now().Add(5 * time.Second)
	for s.LogEndOffset()-s.LogMinOffset() > 3*cfg.SegmentSize {
		if time.Now().After(deadline) {
			t.Fatalf("log spans %d bytes, limit %d", s.LogEndOffset()-s.LogMinOffset(), cfg.RetentionBytes)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
