package commitlog

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"

	"github.com/petrel-mq/petrel/internal/testutil"
)

// replicate copies master to slave with ReadReplication/AppendReplicated until the slave's
// end reaches the master's, in chunks of at most chunk bytes.
func replicate(t tb, master, slave *Store, chunk int) {
	t.Helper()
	for i := 0; slave.LogEndOffset() < master.LogEndOffset(); i++ {
		if i > 1<<20 {
			t.Fatal("replication does not progress")
		}
		from := slave.LogEndOffset()
		err := master.ReadReplication(from, chunk, func(start int64, data []byte) error {
			if start < from {
				return fmt.Errorf("start %d before the request %d", start, from)
			}
			_, err := slave.AppendReplicated(start, data)
			if len(data) == 0 && start > from {
				// Only a segment jump at the very end: nothing to copy yet.
				return nil
			}
			return err
		})
		if err != nil {
			t.Fatalf("replicate from %d: %v", from, err)
		}
	}
}

// sameLog checks that master and slave hold byte-identical logs (Store.Checksum) and returns
// the checksum.
func sameLog(t tb, master, slave *Store) string {
	t.Helper()
	_, _, mc, err := master.Checksum(-1, -1)
	if err != nil {
		t.Fatal(err)
	}
	_, _, sc, err := slave.Checksum(-1, -1)
	if err != nil {
		t.Fatal(err)
	}
	if mc != sc {
		t.Fatalf("logs differ: master %s, slave %s", mc, sc)
	}
	return mc
}

func TestReplicationByteIdentical(t *testing.T) {
	master := mustOpen(t, testConfig(t.TempDir()))
	defer master.Close()
	slave := mustOpen(t, testConfig(t.TempDir()))
	defer slave.Close()
	r := rand.New(rand.NewPCG(1, 2))
	m := newModel()
	for i := 0; i < 600; i++ { // ~10 segments of 64 KiB: many rolls with markers
		appendRec(t, master, m, fmt.Sprintf("t%d", i%3), int32(i%4), 1+int32(r.IntN(3)), randPayload(r, 10, 2000))
		if i%97 == 0 {
			replicate(t, master, slave, 1+r.IntN(8000))
		}
	}
	replicate(t, master, slave, 4096)
	if slave.LogEndOffset() != master.LogEndOffset() {
		t.Fatalf("slave ends at %d, master at %d", slave.LogEndOffset(), master.LogEndOffset())
	}
	mc := sameLog(t, master, slave)
	// The slave's consume queues serve the same batches at the same queue offsets.
	for k, recs := range m.queues {
		if got := slave.MaxOffset([]byte(k.topic), k.qid); got != m.maxOffset(k) {
			t.Fatalf("%v: slave max offset %d, want %d", k, got, m.maxOffset(k))
		}
		var rr ReadResult
		for _, rc := range recs {
			if err := slave.Read([]byte(k.topic), k.qid, rc.base, 1, 1, &rr); err != nil || rr.Status != Found {
				t.Fatalf("%v offset %d: %v %v", k, rc.base, rr.Status, err)
			}
			if !bytes.Equal(payloadOf(rr.Slices[0].B), rc.payload) {
				t.Fatalf("%v offset %d: payload differs", k, rc.base)
			}
			rr.Release()
		}
	}
	// Reopened, the slave recovers the same log.
	slave.Close()
	reopened := mustOpen(t, testConfig(slave.cfg.Dir))
	defer reopened.Close()
	if _, _, sc2, _ := reopened.Checksum(-1, -1); sc2 != mc {
		t.Fatal("slave log changed across a restart")
	}
}

func TestReadReplicationErrors(t *testing.T) {
	s := mustOpen(t, testConfig(t.TempDir()))
	defer s.Close()
	m := newModel()
	rec := appendRec(t, s, m, "a", 0, 1, make([]byte, 100))
	appendRec(t, s, m, "a", 0, 1, make([]byte, 100))
	nop := func(int64, []byte) error { return nil }
	if err := s.ReadReplication(s.LogEndOffset()+1, 1<<20, nop); !errors.Is(err, ErrBeyondEnd) {
		t.Fatalf("beyond end: %v", err)
	}
	if err := s.ReadReplication(rec.phys+3, 1<<20, nop); !errors.Is(err, ErrNotBatchBoundary) {
		t.Fatalf("inside a batch: %v", err)
	}
	var got []byte
	if err := s.ReadReplication(rec.phys, 1, func(start int64, data []byte) error {
		got = append(got, data...)
		return nil
	}); err != nil || len(got) != rec.size {
		t.Fatalf("first batch whole even past maxBytes: %d bytes, %v", len(got), err)
	}
	calledAtEnd := false
	if err := s.ReadReplication(s.LogEndOffset(), 1<<20, func(start int64, data []byte) error {
		calledAtEnd = start == s.LogEndOffset() && len(data) == 0
		return nil
	}); err != nil || !calledAtEnd {
		t.Fatalf("at the end: %v %v", calledAtEnd, err)
	}
}

func TestAppendReplicatedRejectsBadData(t *testing.T) {
	master := mustOpen(t, testConfig(t.TempDir()))
	defer master.Close()
	slave := mustOpen(t, testConfig(t.TempDir()))
	defer slave.Close()
	m := newModel()
	appendRec(t, master, m, "a", 0, 2, make([]byte, 300))
	appendRec(t, master, m, "a", 0, 2, make([]byte, 300))
	var chunk []byte
	_ = master.ReadReplication(0, 1<<20, func(_ int64, d []byte) error { chunk = append([]byte(nil), d...); return nil })
	bad := append([]byte(nil), chunk...)
	bad[len(bad)-1] ^= 1 // CRC breaks in the second batch
	if _, err := slave.AppendReplicated(0, bad); err == nil {
		t.Fatal("a corrupt batch was replicated")
	}
	if slave.LogEndOffset() != 0 {
		t.Fatalf("a rejected chunk wrote %d bytes", slave.LogEndOffset())
	}
	if _, err := slave.AppendReplicated(100, chunk); !errors.Is(err, ErrReplicaMismatch) {
		t.Fatalf("wrong offset: %v", err)
	}
	if end, err := slave.AppendReplicated(0, chunk); err != nil || end != master.LogEndOffset() {
		t.Fatalf("good chunk: end %d, %v", end, err)
	}
}

// TestAppendReplicatedExactlyFullSegment: a master batch that ends exactly at its segment's end
// (no room for a marker) is followed by one at the start of the next segment; the slave must
// roll there too, not copy past the end of the full segment.
func TestAppendReplicatedExactlyFullSegment(t *testing.T) {
	cfg := testConfig(t.TempDir())
	master := mustOpen(t, cfg)
	defer master.Close()
	slave := mustOpen(t, testConfig(t.TempDir()))
	defer slave.Close()
	m := newModel()
	appendRec(t, master, m, "a", 0, 1, make([]byte, 1000))
	first := master.LogEndOffset()
	overhead := first - 1000
	appendRec(t, master, m, "a", 0, 1, make([]byte, cfg.SegmentSize-first-overhead))
	if end := master.LogEndOffset(); end != cfg.SegmentSize {
		t.Fatalf("the second batch ends at %d, want the segment end %d", end, cfg.SegmentSize)
	}
	appendRec(t, master, m, "a", 0, 1, make([]byte, 500)) // starts the next segment
	for off := int64(0); off < master.LogEndOffset(); {
		err := master.ReadReplication(off, 1<<20, func(start int64, d []byte) error {
			if d == nil {
				return nil
			}
			end, err := slave.AppendReplicated(start, d)
			off = end
			return err
		})
		if err != nil {
			t.Fatalf("replicating from %d: %v", off, err)
		}
	}
	if slave.LogEndOffset() != master.LogEndOffset() {
		t.Fatalf("slave ends at %d, master at %d", slave.LogEndOffset(), master.LogEndOffset())
	}
	var rr ReadResult
	if err := slave.Read([]byte("a"), 0, 2, 1, 0, &rr); err != nil || rr.Status != Found {
		t.Fatalf("the batch after the full segment: %v %v", rr.Status, err)
	}
	rr.Release()
}

func TestResetTo(t *testing.T) {
	cfg := testConfig(t.TempDir())
	s := mustOpen(t, cfg)
	m := newModel()
	for i := 0; i < 200; i++ {
		appendRec(t, s, m, "a", 0, 1, make([]byte, 1000))
	}
	var held Slice
	held, err := s.ReadLog(0, 100)
	if err != nil {
		t.Fatal(err)
	}
	base := 4 * cfg.SegmentSize
	if kept, err := s.ResetTo(base, false); err != nil || kept != "" {
		t.Fatal(kept, err)
	}
	held.Release() // the old mapping stayed valid until now
	if s.LogMinOffset() != base || s.LogEndOffset() != base || s.MaxOffset([]byte("a"), 0) != 0 {
		t.Fatalf("after reset: log [%d, %d), queue max %d", s.LogMinOffset(), s.LogEndOffset(), s.MaxOffset([]byte("a"), 0))
	}
	if _, err := s.ResetTo(base+1, false); err == nil {
		t.Fatal("reset to a non-segment boundary accepted")
	}
	// A master whose log starts at base feeds the reset slave; queue offsets continue from the
	// master's, not from 0.
	master := mustOpen(t, testConfig(t.TempDir()))
	defer master.Close()
	mm := newModel()
	for int64(master.LogEndOffset()) < base+cfg.SegmentSize/2 {
		appendRec(t, master, mm, "a", 0, 1, make([]byte, 1000))
	}
	master.cfg.RetentionBytes = 1
	master.runRetention()
	if master.LogMinOffset() != base {
		t.Fatalf("master min %d, want %d", master.LogMinOffset(), base)
	}
	replicate(t, master, s, 1<<20)
	if got, want := s.MaxOffset([]byte("a"), 0), master.MaxOffset([]byte("a"), 0); got != want {
		t.Fatalf("queue max %d, want %d", got, want)
	}
	s.Close()
	s = mustOpen(t, cfg)
	defer s.Close()
	if s.LogMinOffset() != base || s.LogEndOffset() != master.LogEndOffset() {
		t.Fatalf("reopened after reset: log [%d, %d)", s.LogMinOffset(), s.LogEndOffset())
	}
}

func TestQueuePhysicalOffsetAndChecksum(t *testing.T) {
	s := mustOpen(t, testConfig(t.TempDir()))
	defer s.Close()
	m := newModel()
	var recs []rec
	for i := 0; i < 10; i++ {
		recs = append(recs, appendRec(t, s, m, "q", 0, 3, make([]byte, 500)))
	}
	for _, r := range recs {
		for off := r.base; off < r.base+int64(r.count); off++ {
			if got := s.QueuePhysicalOffset([]byte("q"), 0, off); got != r.phys {
				t.Fatalf("offset %d: phys %d, want %d", off, got, r.phys)
			}
		}
	}
	if got := s.QueuePhysicalOffset([]byte("q"), 0, 30); got != s.LogEndOffset() {
		t.Fatalf("at the queue end: %d, want the log end %d", got, s.LogEndOffset())
	}
	if got := s.QueuePhysicalOffset([]byte("none"), 0, 0); got != s.LogEndOffset() {
		t.Fatalf("missing queue: %d", got)
	}
	from, to, a, err := s.Checksum(-1, recs[5].phys)
	if err != nil || from != 0 || to != recs[5].phys || len(a) != 64 {
		t.Fatalf("checksum [%d, %d) %q %v", from, to, a, err)
	}
	_, _, b, _ := s.Checksum(0, recs[5].phys)
	_, _, c, _ := s.Checksum(0, recs[6].phys)
	if a != b || a == c {
		t.Fatal("checksum not a function of the range")
	}
}

// TestResetToKeeps: a reset that keeps the old log moves its segments, byte for byte, into a
// diverged/ directory that recovery leaves alone; the store reopens with the new log.
func TestResetToKeeps(t *testing.T) {
	dir := t.TempDir()
	cfg := testConfig(dir)
	s := mustOpen(t, cfg)
	m := newModel()
	for i := 0; i < 200; i++ {
		appendRec(t, s, m, "a", 0, 1, make([]byte, 1000))
	}
	end := s.LogEndOffset()
	_, _, want, err := s.Checksum(0, end)
	if err != nil {
		t.Fatal(err)
	}
	kept, err := s.ResetTo(0, true)
	if err != nil || kept == "" {
		t.Fatalf("kept %q, %v", kept, err)
	}
	if s.LogEndOffset() != 0 || s.MaxOffset([]byte("a"), 0) != 0 {
		t.Fatalf("after reset: end %d", s.LogEndOffset())
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	files, err := filepath.Glob(filepath.Join(kept, "*"))
	if err != nil || len(files) == 0 {
		t.Fatalf("nothing kept in %s: %v", kept, err)
	}
	// The kept segments hold the old log: a store opened on a copy of them has it all.
	other := testConfig(t.TempDir())
	if err := os.MkdirAll(filepath.Join(other.Dir, "commitlog"), 0o755); err != nil {
		t.Fatal(err)
	}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(other.Dir, "commitlog", filepath.Base(f)), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	o := mustOpen(t, other)
	defer o.Close()
	if _, _, got, err := o.Checksum(0, end); err != nil || got != want || o.LogEndOffset() != end {
		t.Fatalf("kept log: end %d (want %d), checksum match %v, %v", o.LogEndOffset(), end, got == want, err)
	}
	// The original store reopens with the reset (empty) log and leaves diverged/ alone.
	r := mustOpen(t, cfg)
	defer r.Close()
	if r.LogEndOffset() != 0 {
		t.Fatalf("reopened after the reset: end %d", r.LogEndOffset())
	}
	if files2, _ := filepath.Glob(filepath.Join(kept, "*")); len(files2) != len(files) {
		t.Fatalf("recovery touched the kept log: %d files, had %d", len(files2), len(files))
	}
}

// TestPrepareTruncate: a truncation request cuts the log and the consume queues at a batch
// boundary on the next Open, survives a crash before that Open (it is honoured again), and
// appends after the cut reuse the queue offsets the cut freed — exactly once.
func TestPrepareTruncate(t *testing.T) {
	cfg := testConfig(t.TempDir())
	s := mustOpen(t, cfg)
	m := newModel()
	var recs []rec
	for i := 0; i < 120; i++ {
		recs = append(recs, appendRec(t, s, m, "a", int32(i%2), 2, make([]byte, 900)))
	}
	cut := recs[70]
	if err := s.PrepareTruncate(cut.phys + 1); !errors.Is(err, ErrNotBatchBoundary) {
		t.Fatalf("inside a batch: %v", err)
	}
	if err := s.PrepareTruncate(s.LogEndOffset() + 1); !errors.Is(err, ErrBeyondEnd) {
		t.Fatalf("past the end: %v", err)
	}
	if err := s.PrepareTruncate(cut.phys); err != nil {
		t.Fatal(err)
	}
	_, _, want, err := s.Checksum(0, cut.phys)
	if err != nil {
		t.Fatal(err)
	}
	s.abandon() // a crash right after the request: the next Open still cuts
	for round := 0; round < 2; round++ {
		s = mustOpen(t, cfg)
		if s.LogEndOffset() != cut.phys {
			t.Fatalf("round %d: end %d, want %d", round, s.LogEndOffset(), cut.phys)
		}
		if _, _, got, err := s.Checksum(0, cut.phys); err != nil || got != want {
			t.Fatalf("round %d: the kept part changed: %v", round, err)
		}
		// Queue 0 held batches 0, 2, ..., 68 (35 batches of 2), queue 1 batches 1, ..., 69.
		if q0, q1 := s.MaxOffset([]byte("a"), 0), s.MaxOffset([]byte("a"), 1); q0 != 70 || q1 != 70 {
			t.Fatalf("round %d: queue max offsets %d, %d; want 70, 70", round, q0, q1)
		}
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
	}
	// Appends go on from the cut with the next queue offsets.
	s = mustOpen(t, cfg)
	defer s.Close()
	res, err := s.Append([]byte("a"), 0, makeBatch("a", 0, 1, 0, make([]byte, 10)), 1, 0, 0, testStamp)
	if err != nil || res.PhysicalOffset != cut.phys || res.BaseQueueOffset != 70 {
		t.Fatalf("append after the cut: %+v, %v", res, err)
	}
	if _, err := os.Stat(filepath.Join(cfg.Dir, truncateName)); !os.IsNotExist(err) {
		t.Fatalf("the request outlived the cut: %v", err)
	}
}

// TestResetToAndThePreallocatedSegment: a reset leaves the pre-allocated segment either in use
// as the next one (it starts where the reset log's first segment ends) or out of the way, so
// that the pre-allocator and the next roll never find a leftover file where they create a
// segment ("file exists"), even while a prefault still maps the discarded one.
func TestResetToAndThePreallocatedSegment(t *testing.T) {
	for _, tc := range []struct {
		name  string
		reset int64 // in segments
	}{
		{"the pre-allocated segment follows the reset log's first", 1},
		{"the pre-allocated segment is one the reset log reaches later", 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := testConfig(t.TempDir())
			s := mustOpen(t, cfg)
			defer s.Close()
			m := newModel()
			for s.LogEndOffset() < cfg.SegmentSize+cfg.SegmentSize/2 { // the active segment is the second
				appendRec(t, s, m, "a", 0, 1, make([]byte, 1000))
			}
			prepared := func() (base int64, err error) {
				s.amu.Lock()
				defer s.amu.Unlock()
				base = -1
				if s.prepared != nil {
					base = s.prepared.base
				}
				return base, s.allocErr
			}
			waitPrepared := func(want int64) {
				t.Helper()
				testutil.Eventually(t, fmt.Sprintf("the segment at %d pre-allocated", want), func() bool {
					base, err := prepared()
					if err != nil {
						t.Fatalf("pre-allocating the segment at %d: %v", want, err)
					}
					return base == want
				})
			}
			waitPrepared(2 * cfg.SegmentSize)
			// A prefault of the pre-allocated segment in progress: it stays mapped after the
			// reset, so the cleaner cannot remove its file yet.
			s.amu.Lock()
			held := s.prepared
			if !held.tryAcquire() {
				s.amu.Unlock()
				t.Fatal("cannot hold the pre-allocated segment")
			}
			s.amu.Unlock()
			defer held.release()
			base := tc.reset * cfg.SegmentSize
			if _, err := s.ResetTo(base, true); err != nil {
				t.Fatal(err)
			}
			waitPrepared(base + cfg.SegmentSize)
			// The reset log starts every queue afresh; two rolls past the reset.
			m = newModel()
			for s.LogEndOffset() < base+2*cfg.SegmentSize+cfg.SegmentSize/2 {
				appendRec(t, s, m, "a", 0, 1, make([]byte, 1000))
			}
			waitPrepared(base + 3*cfg.SegmentSize)
		})
	}
}
