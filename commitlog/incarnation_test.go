package commitlog

import (
	"encoding/binary"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"
)

// steppingClock returns a clock for Config.Now that moves one millisecond per reading, so that
// every batch gets its own store timestamp.
func steppingClock() func() time.Time {
	var ms atomic.Int64
	ms.Store(1_750_000_000_000)
	return func() time.Time { return time.UnixMilli(ms.Add(1)) }
}

// openClocked opens a store in a new directory with a steppingClock, and a model of it.
func openClocked(t *testing.T) (Config, *Store, *model) {
	t.Helper()
	cfg := testConfig(t.TempDir())
	cfg.Now = steppingClock()
	return cfg, mustOpen(t, cfg), newModel()
}

// incarnations returns the incarnation of every queue of s.
func incarnations(s *Store) map[QueueID]uint64 {
	out := map[QueueID]uint64{}
	for _, q := range s.Queues() {
		out[q] = s.QueueIncarnation([]byte(q.Topic), q.QueueID)
	}
	return out
}

// TestQueueIncarnation: a queue's incarnation is fixed by its first batch, served with every
// read, kept across a restart, and another one when the topic is deleted and created again.
func TestQueueIncarnation(t *testing.T) {
	cfg, s, m := openClocked(t)
	if got := s.QueueIncarnation([]byte("T"), 0); got != 0 {
		t.Fatalf("incarnation of a queue that does not exist: %#x, want 0", got)
	}
	first := appendRec(t, s, m, "T", 0, 2, []byte("first"))
	appendRec(t, s, m, "T", 1, 1, []byte("other queue"))
	born := s.QueueIncarnation([]byte("T"), 0)
	if born == 0 {
		t.Fatal("a new queue has incarnation 0")
	}
	var rr ReadResult
	if err := s.Read([]byte("T"), 0, 0, 0, 0, &rr); err != nil || rr.Status != Found {
		t.Fatalf("read: %v %v", rr.Status, err)
	}
	want := incarnationOf(first.phys, int64(binary.BigEndian.Uint64(rr.Slices[0].B[24:]))) // testStamp's store time
	rr.Release()
	if born != want || rr.Incarnation != born {
		t.Fatalf("incarnation %#x, read's %#x, want %#x (from the first batch)", born, rr.Incarnation, want)
	}
	if other := s.QueueIncarnation([]byte("T"), 1); other == 0 || other == born {
		t.Fatalf("queue 1's incarnation %#x (queue 0's %#x)", other, born)
	}
	appendRec(t, s, m, "T", 0, 1, []byte("second"))
	if got := s.QueueIncarnation([]byte("T"), 0); got != born {
		t.Fatalf("a later batch changed the incarnation: %#x, was %#x", got, born)
	}
	// Out of range too: the answer to any read of the queue names its life.
	for _, off := range []int64{99, 3} {
		if err := s.Read([]byte("T"), 0, off, 0, 0, &rr); err != nil || rr.Incarnation != born {
			t.Fatalf("read at %d: %v, incarnation %#x, want %#x", off, err, rr.Incarnation, born)
		}
		rr.Release()
	}

	before := incarnations(s)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s = mustOpen(t, cfg)
	if got := incarnations(s); !equalIncarnations(got, before) {
		t.Fatalf("after a restart: %v, before %v", got, before)
	}

	deleteRec(t, s, m, "T", 0)
	if got := s.QueueIncarnation([]byte("T"), 0); got != 0 {
		t.Fatalf("incarnation of a deleted queue: %#x", got)
	}
	appendRec(t, s, m, "T", 0, 1, []byte("reborn"))
	reborn := s.QueueIncarnation([]byte("T"), 0)
	if reborn == 0 || reborn == born {
		t.Fatalf("re-created queue's incarnation %#x (the deleted one's %#x)", reborn, born)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s = mustOpen(t, cfg)
	defer s.Close()
	if got := s.QueueIncarnation([]byte("T"), 0); got != reborn {
		t.Fatalf("re-created queue's incarnation after a restart: %#x, want %#x", got, reborn)
	}
	verifyAll(t, s, m)
}

func equalIncarnations(a, b map[QueueID]uint64) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}

// TestQueueIncarnationLegacy: a queue loaded without a history file (a store of an older
// version, or one that lost the file) has the incarnation its first batch fixes, the one every
// member computes, while that batch is in the log; once retention removed it, 0 (not known).
func TestQueueIncarnationLegacy(t *testing.T) {
	cfg, s, m := openClocked(t)
	for i := range 20 {
		appendRec(t, s, m, "L", int32(i%2), 1, []byte("legacy"))
	}
	born := incarnations(s)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	removeHistory(t, cfg.Dir)
	s = mustOpen(t, cfg)
	if got := incarnations(s); !equalIncarnations(got, born) {
		t.Fatalf("without the history file: %v, want %v", got, born)
	}
	// A whole scan indexes every first batch again.
	s = rescanned(t, s, cfg, m)
	if got := incarnations(s); !equalIncarnations(got, born) {
		t.Fatalf("after a full scan: %v, want %v", got, born)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s = mustOpen(t, cfg) // and recorded them
	defer s.Close()
	if got := incarnations(s); !equalIncarnations(got, born) {
		t.Fatalf("after a full scan and a restart: %v, want %v", got, born)
	}
}

// TestQueueIncarnationAfterRetention: a queue whose first batch retention removed keeps its
// incarnation from the history file, and without the file it is not known (0).
func TestQueueIncarnationAfterRetention(t *testing.T) {
	cfg, s, m := openClocked(t)
	for range 300 { // several segments
		appendRec(t, s, m, "R", 0, 1, make([]byte, 1000))
	}
	want := s.QueueIncarnation([]byte("R"), 0)
	s.cfg.RetentionBytes = 2 * cfg.SegmentSize
	s.runRetention()
	if s.MinOffset([]byte("R"), 0) == 0 {
		t.Fatal("retention kept R's first batch")
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s = mustOpen(t, cfg)
	if v := s.QueueIncarnation([]byte("R"), 0); v != want || v == 0 {
		t.Fatalf("after retention and a restart: %#x, want %#x", v, want)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	removeHistory(t, cfg.Dir)
	s = mustOpen(t, cfg)
	defer s.Close()
	if v := s.QueueIncarnation([]byte("R"), 0); v != 0 {
		t.Fatalf("without its first batch and the history file: %#x, want 0 (not known)", v)
	}
}

// removeHistory leaves the store as a version before the history file left it.
func removeHistory(t *testing.T, dir string) {
	t.Helper()
	if err := os.Remove(filepath.Join(dir, historyName)); err != nil {
		t.Fatalf("no history file: %v", err)
	}
}

// TestQueueIncarnationReplicated: a slave that creates its queues from the master's batches,
// also after setting a diverged log aside and copying the master's afresh, holds the master's
// incarnations; a master restarted on an empty store gives its queues new ones.
func TestQueueIncarnationReplicated(t *testing.T) {
	mcfg := testConfig(t.TempDir())
	mcfg.Now = steppingClock()
	master := mustOpen(t, mcfg)
	scfg := testConfig(t.TempDir())
	scfg.Now = steppingClock()
	slave := mustOpen(t, scfg)
	t.Cleanup(func() { slave.Close() })
	r := rand.New(rand.NewPCG(3, 4))
	m := newModel()
	for i := range 60 {
		appendRec(t, master, m, []string{"A", "B"}[i%2], int32(i%3), 1, randPayload(r, 10, 3000))
	}
	replicate(t, master, slave, 5000)
	want := incarnations(master)
	if got := incarnations(slave); !equalIncarnations(got, want) {
		t.Fatalf("slave %v, master %v", got, want)
	}
	for q, v := range want {
		if v == 0 {
			t.Fatalf("master's %v has incarnation 0", q)
		}
	}

	// The master loses its store and starts again; the slave sets its log aside and copies the
	// new one.
	if err := master.Close(); err != nil {
		t.Fatal(err)
	}
	if err := os.RemoveAll(mcfg.Dir); err != nil {
		t.Fatal(err)
	}
	master = mustOpen(t, mcfg)
	t.Cleanup(func() { master.Close() })
	m = newModel()
	for i := range 60 {
		appendRec(t, master, m, []string{"A", "B"}[i%2], int32(i%3), 1, randPayload(r, 10, 3000))
	}
	reborn := incarnations(master)
	for q, v := range reborn {
		if v == 0 || v == want[q] {
			t.Fatalf("%v on the wiped master: incarnation %#x, before %#x", q, v, want[q])
		}
	}
	if _, err := slave.ResetTo(0, true); err != nil {
		t.Fatal(err)
	}
	if got := incarnations(slave); len(got) != 0 {
		t.Fatalf("queues after a reset: %v", got)
	}
	replicate(t, master, slave, 7000)
	if got := incarnations(slave); !equalIncarnations(got, reborn) {
		t.Fatalf("slave after the reset %v, master %v", got, reborn)
	}
	if err := slave.Close(); err != nil {
		t.Fatal(err)
	}
	slave = mustOpen(t, scfg)
	if got := incarnations(slave); !equalIncarnations(got, reborn) {
		t.Fatalf("slave after a restart %v, master %v", got, reborn)
	}
}
