package commitlog

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"pgregory.net/rapid"

	"github.com/petrel-mq/petrel/internal/testutil"
)

// Offsets of the broker-assigned fields of the test batch format (outside its CRC).
const (
	tbPhysOff  = 8
	tbBaseOff  = 16
	tbEpochOff = 32
)

// storedBatch returns a copy of the stored bytes of r.
func storedBatch(t tb, dir string, segSize int64, r rec) []byte {
	t.Helper()
	base := r.phys / segSize * segSize
	return readAt(t, segPath(dir, base), r.phys-base, r.size)
}

// patched returns a copy of b with its stored physical offset set to phys, and its base queue
// offset and epoch to base and epoch when they are not negative.
func patched(b []byte, phys, base int64, epoch int64) []byte {
	c := append([]byte(nil), b...)
	binary.BigEndian.PutUint64(c[tbPhysOff:], uint64(phys))
	if base >= 0 {
		binary.BigEndian.PutUint64(c[tbBaseOff:], uint64(base))
	}
	if epoch >= 0 {
		binary.BigEndian.PutUint32(c[tbEpochOff:], uint32(epoch))
	}
	return c
}

// logEnd returns the end of the model's log and the base of the segment holding its last byte.
func logEnd(m *model, segSize int64) (end, segBase int64) {
	if len(m.all) == 0 {
		return 0, 0
	}
	last := lastRec(m)
	end = last.phys + int64(last.size)
	return end, last.phys / segSize * segSize
}

// TestRecoveryStaleBatchAtEnd: after a clean shutdown, a copy of an earlier batch is placed at
// the log end with only its physical-offset field (outside the CRC) patched to that position, so
// it passes the parser. It does not continue its queue (or the epochs), so recovery cuts it:
// every queue keeps its max offset, nothing acknowledged vanishes, the cut is reported and does
// not come back. Before the history checks, recovery indexed it and truncated its queue back to
// the copy's base queue offset.
func TestRecoveryStaleBatchAtEnd(t *testing.T) {
	for _, variant := range []string{"physical offset patched", "queue offset patched, older epoch", "zeros then a copy", "after a crash"} {
		t.Run(variant, func(t *testing.T) {
			dir := t.TempDir()
			cfg := testConfig(dir)
			cfg.SegmentSize = 1 << 20
			s := mustOpen(t, cfg)
			m := newModel()
			// 300 messages on 2 queues, 10 per batch; the later half in epoch 1.
			for i := range 30 {
				appendRecEpoch(t, s, m, "T", int32(i%2), 10, make([]byte, 50+i), uint32(i/15))
			}
			if variant == "after a crash" {
				s.abandon()
			} else if err := s.Close(); err != nil {
				t.Fatal(err)
			}
			stale := m.all[11] // queue 1, base queue offset 50, epoch 0
			end, segBase := logEnd(m, cfg.SegmentSize)
			b := storedBatch(t, dir, cfg.SegmentSize, stale)
			at := end
			switch variant {
			case "queue offset patched, older epoch":
				b = patched(b, at, m.maxOffset(qkey{"T", 1}), -1) // continues the queue, but in epoch 0 after epoch 1
			case "zeros then a copy":
				at = end + 100
				b = patched(b, at, -1, -1)
			default:
				b = patched(b, at, -1, -1)
			}
			writeAt(t, segPath(dir, segBase), at-segBase, b)

			s = mustOpen(t, cfg)
			verifyAll(t, s, m)
			checkEnd(t, s, m)
			checkZeroAfter(t, s, dir)
			for q := int32(0); q < 2; q++ {
				if got := s.MaxOffset([]byte("T"), q); got != 150 {
					t.Fatalf("queue %d: max offset %d after the restart, want 150", q, got)
				}
			}
			rec := s.Recovery()
			if wantCut := variant != "zeros then a copy"; rec.Cut != wantCut || rec.QueuesBack != 0 || rec.End != end {
				t.Fatalf("Recovery() = %+v, want cut %v at %d, no queue back", rec, wantCut, end)
			}
			if s.LastEpoch() != 1 {
				t.Fatalf("LastEpoch %d, want 1", s.LastEpoch())
			}
			// Appends continue at the queues' offsets; a clean reopen keeps them, the copy stays gone.
			appendRecEpoch(t, s, m, "T", 1, 3, []byte("after"), 1)
			reopenClean(t, s, cfg, m).Close()
		})
	}
}

// TestAppendRefusesOlderEpoch: Append never stores a batch whose epoch is below the log's
// newest: recovery would cut it (and everything after it).
func TestAppendRefusesOlderEpoch(t *testing.T) {
	cfg := testConfig(t.TempDir())
	s := mustOpen(t, cfg)
	m := newModel()
	appendRecEpoch(t, s, m, "a", 0, 1, nil, 3)
	end := s.LogEndOffset()
	if _, err := s.Append([]byte("a"), 0, makeBatch("a", 0, 1, 0, nil), 1, 0, 2, testStamp); !errors.Is(err, ErrStaleEpoch) {
		t.Fatalf("Append in epoch 2 after epoch 3: %v, want ErrStaleEpoch", err)
	}
	if s.LogEndOffset() != end {
		t.Fatal("the refused batch moved the log end")
	}
	appendRecEpoch(t, s, m, "b", 0, 1, nil, 3)
	appendRecEpoch(t, s, m, "a", 0, 1, nil, 4)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s = mustOpen(t, cfg)
	defer s.Close()
	verifyAll(t, s, m)
	if s.LastEpoch() != 4 {
		t.Fatalf("LastEpoch after reopen %d, want 4", s.LastEpoch())
	}
}

// TestLastEpochFromEarlierSegment: when recovery scans only the last segment and it holds no
// batch, the log's newest epoch still comes from the batch before it.
func TestLastEpochFromEarlierSegment(t *testing.T) {
	cfg := testConfig(t.TempDir())
	cfg.SegmentSize = 4096
	s := mustOpen(t, cfg)
	m := newModel()
	for s.LogEndOffset() < 3*cfg.SegmentSize {
		appendRecEpoch(t, s, m, "a", 0, 1, make([]byte, 1500), 7)
	}
	// A truncation at a segment's first batch leaves the last segment without a batch.
	last := appendRecEpoch(t, s, m, "a", 0, 1, make([]byte, 4096-tbHeader-1-12), 7)
	if last.phys%cfg.SegmentSize != 0 {
		t.Fatalf("a full-segment batch at %d", last.phys)
	}
	if err := s.PrepareTruncate(last.phys); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	m.truncate(last.phys)
	s = mustOpen(t, cfg)
	defer s.Close()
	verifyAll(t, s, m)
	if s.LastEpoch() != 7 {
		t.Fatalf("LastEpoch %d, want 7", s.LastEpoch())
	}
	if _, err := s.Append([]byte("a"), 0, makeBatch("a", 0, 1, 0, nil), 1, 0, 6, testStamp); !errors.Is(err, ErrStaleEpoch) {
		t.Fatalf("Append in epoch 6: %v, want ErrStaleEpoch", err)
	}
}

// TestAppendReplicatedChecksHistory: replicated batches are refused unless they continue the
// slave's log: the epoch never goes down (also within one chunk), and a queue the slave does
// not hold yet must be contiguous within the chunk. Epoch changes and segment rolls replicate.
func TestAppendReplicatedChecksHistory(t *testing.T) {
	mcfg := testConfig(t.TempDir())
	mcfg.SegmentSize = 4096
	master := mustOpen(t, mcfg)
	defer master.Close()
	scfg := testConfig(t.TempDir())
	scfg.SegmentSize = 4096
	slave := mustOpen(t, scfg)
	defer slave.Close()
	m := newModel()
	r := rand.New(rand.NewPCG(3, 3))
	epoch := uint32(1)
	for range 60 { // many rolls, epochs changing at random
		if r.IntN(5) == 0 {
			epoch++
		}
		appendRecEpoch(t, master, m, "a", int32(r.IntN(2)), 1, randPayload(r, 100, 1400), epoch)
	}
	replicate(t, master, slave, 3000)
	verifyAll(t, slave, m)
	if slave.LastEpoch() != epoch {
		t.Fatalf("slave LastEpoch %d, want %d", slave.LastEpoch(), epoch)
	}

	end := slave.LogEndOffset()
	older := makeBatch("a", 0, 1, 0, []byte("x"))
	testStamp(older, end, m.maxOffset(qkey{"a", 0}), 1, epoch-1)
	if _, err := slave.AppendReplicated(end, older); !errors.Is(err, ErrReplicaMismatch) {
		t.Fatalf("a batch of an older epoch: %v, want ErrReplicaMismatch", err)
	}
	b1 := makeBatch("new", 0, 2, 0, []byte("y"))
	testStamp(b1, end, 40, 1, epoch)
	b2 := makeBatch("new", 0, 1, 0, []byte("z"))
	testStamp(b2, end+int64(len(b1)), 45, 1, epoch) // the queue continues at 42
	if _, err := slave.AppendReplicated(end, append(append([]byte(nil), b1...), b2...)); !errors.Is(err, ErrReplicaMismatch) {
		t.Fatalf("a new queue with a gap inside one chunk: %v, want ErrReplicaMismatch", err)
	}
	b3 := makeBatch("new", 0, 1, 0, []byte("z"))
	testStamp(b3, end+int64(len(b1)), 42, 1, epoch+1)
	b4 := makeBatch("a", 1, 1, 0, []byte("w"))
	testStamp(b4, end+int64(len(b1)+len(b3)), m.maxOffset(qkey{"a", 1}), 1, epoch)
	if _, err := slave.AppendReplicated(end, append(append(append([]byte(nil), b1...), b3...), b4...)); !errors.Is(err, ErrReplicaMismatch) {
		t.Fatalf("an epoch going down inside one chunk: %v, want ErrReplicaMismatch", err)
	}
	if slave.LogEndOffset() != end {
		t.Fatalf("a refused chunk moved the log end to %d", slave.LogEndOffset())
	}
	if got, err := slave.AppendReplicated(end, append(append([]byte(nil), b1...), b3...)); err != nil || got != end+int64(len(b1)+len(b3)) {
		t.Fatalf("a new queue, contiguous, in a newer epoch: %d, %v", got, err)
	}
	if slave.MaxOffset([]byte("new"), 0) != 43 || slave.LastEpoch() != epoch+1 {
		t.Fatalf("new queue max offset %d, last epoch %d", slave.MaxOffset([]byte("new"), 0), slave.LastEpoch())
	}
}

// TestDeleteTopicSurvivesCrash: a crash that loses the checkpoint written after DeleteTopic
// must neither index the deleted queues' batches again nor take the re-created queue's batches
// (whose offsets start at 0 again) for a break in the queue's history; a cut below the deletion
// record undoes the deletion (the log's history no longer has it), and one that loses the
// deletions file's entry finds the record (self-healing).
func TestDeleteTopicSurvivesCrash(t *testing.T) {
	for _, variant := range []string{"deleted", "deleted and re-created", "re-created, no checkpoint",
		"re-created, cut below the deletion", "re-created, deletions file lost", "cut below the deletion, no checkpoint"} {
		t.Run(variant, func(t *testing.T) {
			dir := t.TempDir()
			cfg := testConfig(dir)
			s := mustOpen(t, cfg)
			m := newModel()
			for i := range 20 {
				appendRec(t, s, m, "gone", int32(i%2), 2, make([]byte, 100))
				appendRec(t, s, m, "kept", 0, 1, make([]byte, 100))
			}
			if err := s.Close(); err != nil {
				t.Fatal(err)
			}
			durable := s.LogEndOffset() // the checkpoint the crash falls back to
			s = mustOpen(t, cfg)
			for i := range 10 {
				appendRec(t, s, m, "gone", int32(i%2), 2, make([]byte, 100))
			}
			deleteRec(t, s, m, "gone", 0)
			if variant != "deleted" {
				appendRec(t, s, m, "gone", 0, 1, make([]byte, 10))
				appendRec(t, s, m, "kept", 0, 1, make([]byte, 10))
				appendRec(t, s, m, "gone", 0, 1, make([]byte, 10))
			}
			s.abandon()
			cut := strings.HasPrefix(variant, "cut") || strings.Contains(variant, ", cut")
			switch {
			case variant == "re-created, no checkpoint":
				os.Remove(filepath.Join(dir, checkpointName))
			case cut:
				// The log is cut below the deletion (with the re-created queue): the deletion
				// is undone, and the deleted queues' batches below the cut are indexed again.
				if err := os.WriteFile(filepath.Join(dir, truncateName), []byte(fmt.Sprint(durable)), 0o644); err != nil {
					t.Fatal(err)
				}
				m.truncate(durable)
				if strings.HasSuffix(variant, "no checkpoint") {
					os.Remove(filepath.Join(dir, checkpointName))
					break
				}
				fallthrough
			default:
				if variant == "re-created, deletions file lost" {
					os.Remove(filepath.Join(dir, deletionsName))
				}
				if err := writeCheckpoint(dir, checkpoint{logDurable: durable, queueDurable: durable}, time.Now()); err != nil {
					t.Fatal(err)
				}
			}
			s = mustOpen(t, cfg)
			verifyAll(t, s, m)
			checkEnd(t, s, m)
			if rec := s.Recovery(); rec.QueuesBack != 0 && !cut {
				t.Fatalf("Recovery() = %+v", rec)
			}
			if variant != "deleted" {
				appendRec(t, s, m, "gone", 0, 1, make([]byte, 10))
			}
			rescanned(t, s, cfg, m)
		})
	}
}

// tailItem is one thing the property test places after the last good batch.
type tailItem struct {
	kind  string
	bytes []byte
}

// TestRecoveryTailProperty: whatever is placed after the last good batch (stale copies, copies
// with patched fields, copies of a deleted topic's batches, copies whose base queue offset
// continues their queue, garbage, zeros then a copy, several of them), recovery keeps every
// batch written before it intact, queue offsets contiguous, and accepts from the tail only
// batches that continue the log's history (a copy whose patched fields happen to continue it,
// store timestamp included, is such a batch): the recovered log is the written one plus a
// prefix of those. A second reopen finds the same, and appends continue.
func TestRecoveryTailProperty(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		dir, err := os.MkdirTemp("", "commitlog-tail-")
		if err != nil {
			rt.Fatal(err)
		}
		defer os.RemoveAll(dir)
		cfg := testConfig(dir)
		cfg.SegmentSize = int64(rapid.SampledFrom([]int{4096, 8192}).Draw(rt, "segmentSize"))
		cfg.QueueFileEntries = rapid.IntRange(1, 9).Draw(rt, "queueFileEntries")
		clock := newTestClock() // batches stored in the same millisecond share a store timestamp
		cfg.Now = clock.now
		s := mustOpen(rt, cfg)
		m := newModel()
		epoch := uint32(rapid.IntRange(0, 2).Draw(rt, "firstEpoch"))
		keys := []qkey{{"a", 0}, {"a", 1}, {"b", 0}}
		var deletedLife []rec // batches of b before its last deletion
		for range rapid.IntRange(1, 30).Draw(rt, "batches") {
			if rapid.IntRange(0, 4).Draw(rt, "newEpoch") == 0 {
				epoch++
			}
			clock.add(int64(rapid.IntRange(0, 2).Draw(rt, "ms")))
			if rapid.IntRange(0, 7).Draw(rt, "deleteB") == 0 {
				deletedLife = deletedLife[:0]
				for _, r := range m.all {
					if r.topic == "b" && !r.control {
						deletedLife = append(deletedLife, r)
					}
				}
				deleteRec(rt, s, m, "b", epoch)
				continue
			}
			k := rapid.SampledFrom(keys).Draw(rt, "queue")
			appendRecEpoch(rt, s, m, k.topic, k.qid, int32(rapid.IntRange(1, 3).Draw(rt, "count")),
				make([]byte, rapid.IntRange(0, 700).Draw(rt, "payload")), epoch)
		}
		if rapid.Bool().Draw(rt, "crash") {
			s.abandon()
		} else if err := s.Close(); err != nil {
			rt.Fatal(err)
		}

		end, segBase := logEnd(m, cfg.SegmentSize)
		segEnd := segBase + cfg.SegmentSize
		// The oracle: what recovery must accept from the tail (batches that continue the log).
		next := map[qkey]int64{}
		for _, k := range m.keys() {
			next[k] = m.maxOffset(k)
		}
		stopped, wantCut := false, false
		pos := end
		lastTS := lastRec(m).ts // store timestamps never go down along the log
		for range rapid.IntRange(1, 4).Draw(rt, "tailItems") {
			if segEnd-pos < 16 {
				break
			}
			r := rapid.SampledFrom(m.all).Draw(rt, "copyOf")
			kinds := []string{"stale copy", "offset patched", "fields patched", "base patched", "garbage", "zeros then a copy"}
			if len(deletedLife) > 0 {
				kinds = append(kinds, "copy of a deleted queue's batch")
			}
			it := tailItem{kind: rapid.SampledFrom(kinds).Draw(rt, "kind")}
			if it.kind == "copy of a deleted queue's batch" {
				r = rapid.SampledFrom(deletedLife).Draw(rt, "deletedBatch")
			}
			b := storedBatch(rt, dir, cfg.SegmentSize, r)
			k := qkey{r.topic, r.qid}
			base, e, copied := r.base, r.epoch, false
			switch it.kind {
			case "stale copy":
				it.bytes = b
			case "offset patched", "copy of a deleted queue's batch":
				// A deleted queue's batch is older than the deletion record after it.
				copied = true
			case "base patched": // continues its queue (a queue without entries takes 0)
				base, e, copied = next[k], epoch, true
			case "fields patched":
				base = rapid.SampledFrom([]int64{next[k], r.base, next[k] + 1, 0}).Draw(rt, "base")
				e = rapid.SampledFrom([]uint32{epoch, epoch + 1, r.epoch, max(epoch, 1) - 1}).Draw(rt, "epoch")
				copied = true
			}
			// A copy is taken only if it continues the log: its queue (a deletion record has
			// none), the epochs, and the store timestamps, which it does only when the batch
			// copied was stored in the log's newest millisecond.
			accept := copied && (r.control || base == next[k]) && e >= epoch && r.ts >= lastTS && pos+int64(len(b)) <= segEnd
			if copied {
				it.bytes = patched(b, pos, base, int64(e))
			}
			if accept && !stopped {
				c := r
				c.phys, c.base, c.epoch = pos, base, e
				if r.control {
					m.deleteTopic(r.topic, pos, r.size, e)
					m.all[len(m.all)-1].ts = r.ts
					for q := range next {
						if q.topic == r.topic {
							delete(next, q)
						}
					}
				} else {
					m.add(c)
					next[k] = base + int64(c.count)
				}
				epoch, lastTS = e, r.ts
			}
			switch it.kind {
			case "garbage":
				it.bytes = []byte(rapid.StringN(1, 400, -1).Draw(rt, "garbage"))
				it.bytes[0] |= 1 // not the end of the log
			case "zeros then a copy":
				z := rapid.IntRange(8, 300).Draw(rt, "zeros")
				it.bytes = append(make([]byte, z), patched(b, pos+int64(z), -1, -1)...)
			}
			if !accept && !stopped {
				stopped, wantCut = true, it.kind != "zeros then a copy"
			}
			it.bytes = it.bytes[:min(int64(len(it.bytes)), segEnd-pos)]
			writeAt(rt, segPath(dir, segBase), pos-segBase, it.bytes)
			pos += int64(len(it.bytes))
		}

		s = mustOpen(rt, cfg)
		verifyAll(rt, s, m)
		checkEnd(rt, s, m)
		if rec := s.Recovery(); rec.Cut != wantCut || rec.QueuesBack != 0 {
			rt.Fatalf("Recovery() = %+v, want cut %v", rec, wantCut)
		}
		if s.LastEpoch() != epoch {
			rt.Fatalf("LastEpoch %d, want %d", s.LastEpoch(), epoch)
		}
		appendRecEpoch(rt, s, m, "a", 0, 1, []byte("after"), epoch)
		reopenClean(rt, s, cfg, m).Close()
	})
}

// reopenClean closes s, opens it again and checks that it holds m and that recovery cut
// nothing (what an earlier recovery cut never comes back). It returns the open store.
func reopenClean(t tb, s *Store, cfg Config, m *model) *Store {
	t.Helper()
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s = mustOpen(t, cfg)
	verifyAll(t, s, m)
	if s.Recovery().Cut {
		s.Close()
		t.Fatalf("a clean reopen cut: %+v", s.Recovery())
	}
	return s
}

// FuzzRecoveryTail places arbitrary bytes after the last batch of a cleanly closed store:
// recovery keeps every written batch intact, every queue's offsets and the log's epochs stay
// in order (a tail batch is kept only if it continues the log), and a second reopen agrees.
func FuzzRecoveryTail(f *testing.F) {
	tmpl := f.TempDir()
	cfg := testConfig(tmpl)
	cfg.SegmentSize = 8192
	s := mustOpen(f, cfg)
	m := newModel()
	for i := range 12 {
		appendRecEpoch(f, s, m, "a", int32(i%2), int32(1+i%3), make([]byte, 40+i*10), uint32(i/4))
	}
	if err := s.Close(); err != nil {
		f.Fatal(err)
	}
	end, segBase := logEnd(m, cfg.SegmentSize)
	stale := storedBatch(f, tmpl, cfg.SegmentSize, m.all[5])
	f.Add(stale)
	f.Add(patched(stale, end, -1, -1))
	f.Add(patched(stale, end, m.maxOffset(qkey{"a", 1}), 2)) // continues the queue and the epochs
	// A copy of the newest batch continues the store timestamps too.
	f.Add(patched(storedBatch(f, tmpl, cfg.SegmentSize, lastRec(m)), end, m.maxOffset(qkey{"a", lastRec(m).qid}), 2))
	f.Add(patched(stale, end, m.maxOffset(qkey{"a", 1}), 1)) // an older epoch
	f.Add(append(make([]byte, 64), patched(stale, end+64, -1, -1)...))
	f.Add([]byte("\x7fgarbage"))
	files := copyableFiles(f, tmpl)
	f.Fuzz(func(t *testing.T, tail []byte) {
		dir := memDir(t)
		for _, rel := range files {
			data, err := os.ReadFile(filepath.Join(tmpl, rel))
			if err != nil {
				t.Fatal(err)
			}
			if err := os.MkdirAll(filepath.Dir(filepath.Join(dir, rel)), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(dir, rel), data, 0o644); err != nil {
				t.Fatal(err)
			}
		}
		tail = tail[:min(int64(len(tail)), segBase+cfg.SegmentSize-end)]
		writeAt(t, segPath(dir, segBase), end-segBase, tail)
		c := cfg
		c.Dir = dir
		s := mustOpen(t, c)
		got := checkHistory(t, s, m)
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
		s = mustOpen(t, c)
		defer s.Close()
		if again := checkHistory(t, s, m); again != got {
			t.Fatalf("second reopen: %+v, first %+v", again, got)
		}
	})
}

// memDir returns a new directory, removed at the end of the test, in memory (/dev/shm) where
// there is one: Open and Close fsync several times, which on a disk makes each fuzz input cost
// milliseconds.
func memDir(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("/dev/shm", "commitlog-fuzz-")
	if err != nil {
		return t.TempDir()
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}

// copyableFiles lists the files of a store directory, relative to it (the lock file left out).
func copyableFiles(t tb, dir string) []string {
	t.Helper()
	var out []string
	err := filepath.Walk(dir, func(p string, info os.FileInfo, err error) error {
		if err != nil || info.IsDir() || info.Name() == "LOCK" {
			return err
		}
		rel, err := filepath.Rel(dir, p)
		out = append(out, rel)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// historyState summarises a recovered store for comparison between reopens.
type historyState struct {
	end     int64
	maxOffs string
}

// checkHistory checks that the store holds every batch of m intact and that what follows
// continues the log's history: every batch where it says it is, epochs and store timestamps
// never going down, each queue's offsets contiguous from the model's.
func checkHistory(t tb, s *Store, m *model) historyState {
	t.Helper()
	next := map[qkey]int64{}
	var epoch uint32
	var ts int64
	pos, i := int64(0), 0
	for pos < s.LogEndOffset() {
		sl, err := s.ReadLog(pos, 0)
		if err != nil {
			t.Fatalf("ReadLog(%d): %v", pos, err)
		}
		b := sl.B
		if isMarkerAt(findSegment(*s.segs.Load(), pos), pos%s.cfg.SegmentSize) {
			sl.Release()
			pos = (pos/s.cfg.SegmentSize + 1) * s.cfg.SegmentSize
			continue
		}
		info, err := testParser(b, pos)
		if err != nil {
			t.Fatalf("batch at %d: %v", pos, err)
		}
		k := qkey{string(info.Topic), info.QueueID}
		if i < len(m.all) {
			checkBatch(t, b[:info.Size], m.all[i])
			i++
		} else if want, ok := next[k]; ok && info.BaseQueueOffset != want || info.Epoch < epoch || info.StoreTimestamp < ts {
			t.Fatalf("batch at %d after the written ones (%+v) does not continue %v at %d after epoch %d, store timestamp %d", pos, info, k, want, epoch, ts)
		}
		sl.Release()
		next[k] = info.BaseQueueOffset + int64(info.Count)
		epoch, ts = info.Epoch, info.StoreTimestamp
		pos += int64(info.Size)
	}
	if i < len(m.all) {
		t.Fatalf("log ends at %d after %d of %d written batches", pos, i, len(m.all))
	}
	var st historyState
	st.end = s.LogEndOffset()
	for _, k := range m.keys() {
		if got := s.MaxOffset([]byte(k.topic), k.qid); got != next[k] {
			t.Fatalf("%v: max offset %d, the log says %d", k, got, next[k])
		}
		st.maxOffs += fmt.Sprint(k, next[k], ";")
		verifyPrefix(t, s, m, k)
	}
	if s.LastEpoch() != epoch {
		t.Fatalf("LastEpoch %d, the log's newest batch is of epoch %d", s.LastEpoch(), epoch)
	}
	return st
}

// verifyPrefix reads queue k from its first offset and checks the model's batches come first.
func verifyPrefix(t tb, s *Store, m *model, k qkey) {
	t.Helper()
	var rr ReadResult
	defer rr.Release()
	i, off := 0, int64(0)
	rs := m.queues[k]
	for i < len(rs) {
		if err := s.Read([]byte(k.topic), k.qid, off, 64, 1<<20, &rr); err != nil || rr.Status != Found {
			t.Fatalf("%v: Read(%d): %v %v", k, off, rr.Status, err)
		}
		for _, sl := range rr.Slices {
			for _, b := range splitBatches(t, sl.B) {
				if i < len(rs) {
					checkBatch(t, b, rs[i])
					i++
				}
			}
		}
		off = rr.NextQueueOffset
		rr.Release()
	}
}

// TestRecoveryEndWithoutRoomForAMarker: a crash with the log ending less than a segment-end
// marker before its segment's end, and the next segment already preallocated (empty), recovers
// the end where the live store had it, not at the next segment's base (where a slave would ask
// its master for an offset beyond the master's end); the next append rolls as it would have.
func TestRecoveryEndWithoutRoomForAMarker(t *testing.T) {
	dir := t.TempDir()
	cfg := testConfig(dir)
	cfg.SegmentSize = 4096
	s := mustOpen(t, cfg)
	m := newModel()
	first := appendRec(t, s, m, "T", 0, 1, make([]byte, 100))
	second := appendRec(t, s, m, "T", 0, 1, make([]byte, 200))
	perByte := float64(second.size-first.size) / 100
	if perByte != 1 {
		t.Fatalf("batch size grows by %v per payload byte; the test assumes 1", perByte)
	}
	overhead := int64(first.size) - 100
	const want = 4096 - 6
	for s.LogEndOffset()+overhead+1000 < want {
		appendRec(t, s, m, "T", 0, 1, make([]byte, 1000))
	}
	appendRec(t, s, m, "T", 0, 1, make([]byte, want-s.LogEndOffset()-overhead))
	if got := s.LogEndOffset(); got != want {
		t.Fatalf("log end %d before the crash, want %d", got, want)
	}
	testutil.Eventually(t, "the next segment preallocated", func() bool {
		s.amu.Lock()
		defer s.amu.Unlock()
		return s.prepared != nil && s.prepared.base == 4096
	})
	s.abandon()

	s = mustOpen(t, cfg)
	checkEnd(t, s, m)
	verifyAll(t, s, m)
	r := appendRec(t, s, m, "T", 0, 1, []byte("after"))
	if r.phys != 4096 {
		t.Fatalf("the append after recovery went to %d, want the next segment's base 4096", r.phys)
	}
	reopenClean(t, s, cfg, m).Close()
}
