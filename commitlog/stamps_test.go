package commitlog

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// testClock is a clock a test moves by hand (Config.Now): store timestamps then differ by what
// the test says, not by how fast it runs.
type testClock struct{ ms atomic.Int64 }

func newTestClock() *testClock {
	c := &testClock{}
	c.ms.Store(time.Now().UnixMilli())
	return c
}

func (c *testClock) now() time.Time { return time.UnixMilli(c.ms.Load()) }

func (c *testClock) add(ms int64) { c.ms.Add(ms) }

// clockedStore opens a store in a new directory, with segments of segSize bytes (0: the test
// default), whose store timestamps come from a test clock.
func clockedStore(t *testing.T, segSize int64) (Config, *testClock, *Store, *model) {
	t.Helper()
	cfg := testConfig(t.TempDir())
	if segSize > 0 {
		cfg.SegmentSize = segSize
	}
	clock := newTestClock()
	cfg.Now = clock.now
	return cfg, clock, mustOpen(t, cfg), newModel()
}

// asPreviousVersion leaves the store's files as a version that does not order store timestamps
// leaves them: a checkpoint (if there is one) without checkpointOrdered and, unless this version
// opened the store before that one (a downgrade and back), no history file.
func asPreviousVersion(t tb, dir string, downgraded bool) {
	t.Helper()
	if !downgraded {
		if err := os.Remove(filepath.Join(dir, historyName)); err != nil && !os.IsNotExist(err) {
			t.Fatal(err)
		}
	} else if h, err := readHistory(dir); !h.ok || h.orderedFrom < 0 || err != nil {
		t.Fatalf("no history file with the order's start left by this version: %+v, %v", h, err)
	}
	ck, err := readCheckpoint(dir)
	if err != nil {
		return
	}
	ck.ordered = false
	if err := writeCheckpoint(dir, ck, time.Now()); err != nil {
		t.Fatal(err)
	}
}

// wantCutAt checks that recovery cut the log at end because a batch there does not continue its
// history, and that no queue's max offset went back.
func wantCutAt(t tb, s *Store, end int64, why string) {
	t.Helper()
	rec := s.Recovery()
	if !rec.Cut || rec.End != end || rec.QueuesBack != 0 || !strings.Contains(rec.Reason, why) {
		t.Fatalf("Recovery() = %+v, want a cut at %d because of %q and no queue back", rec, end, why)
	}
}

// TestRecoveryStaleBatchOfDeletedTopic: a topic is deleted (its deletion record written), then a
// copy of one of its earlier batches is placed at the log end with its physical offset patched
// to that position. The topic's queues are empty after the record, so the queue offsets cannot
// tell the copy from a batch of the topic created again. Recovery cuts it all the same: its store
// timestamp is below the record's (the record is stamped after every batch before it, and no
// batch after it goes below it), and a queue's first batch after the record starts at queue
// offset 0, which a copy of any later batch does not. Once the topic is created again, its
// queues hold only what was written to them afresh. (Recovery used to index the copy in the
// empty queue: consumers of the topic created again read the deleted message.)
func TestRecoveryStaleBatchOfDeletedTopic(t *testing.T) {
	for _, variant := range []string{"queue's first batch", "later batch", "queue's first batch, after a crash",
		"later batch, checkpoint of the previous version"} {
		t.Run(variant, func(t *testing.T) {
			cfg, clock, s, m := clockedStore(t, 0)
			dir := cfg.Dir
			for i := range 20 {
				clock.add(1)
				appendRec(t, s, m, "T", int32(i%2), 2, make([]byte, 60+i))
				clock.add(1)
				appendRec(t, s, m, "U", 0, 1, make([]byte, 30))
			}
			stale := m.all[2] // T/1 at base queue offset 0
			if strings.HasPrefix(variant, "later") {
				stale = m.all[10] // T/1 at 4
			}
			if stale.topic != "T" || stale.qid != 1 {
				t.Fatalf("picked %+v", stale)
			}
			clock.add(1)
			deleteRec(t, s, m, "T", 0)
			for range 3 {
				clock.add(1)
				appendRec(t, s, m, "U", 0, 1, make([]byte, 30))
			}
			if strings.Contains(variant, "crash") {
				s.abandon()
			} else if err := s.Close(); err != nil {
				t.Fatal(err)
			}
			if strings.Contains(variant, "previous version") {
				// The timestamps are not known to be in order: only the queue offset tells.
				asPreviousVersion(t, dir, false)
			}
			end, segBase := logEnd(m, cfg.SegmentSize)
			writeAt(t, segPath(dir, segBase), end-segBase, patched(storedBatch(t, dir, cfg.SegmentSize, stale), end, -1, -1))

			s = mustOpen(t, cfg)
			why := "store timestamp"
			if strings.Contains(variant, "previous version") {
				why = "first since the topic's deletion record"
			}
			wantCutAt(t, s, end, why)
			verifyAll(t, s, m)
			checkEnd(t, s, m)
			checkZeroAfter(t, s, dir)
			// The topic created again: its queues start at 0 and hold only the new batches.
			clock.add(1)
			appendRec(t, s, m, "T", 1, 1, []byte("afresh"))
			clock.add(1)
			appendRec(t, s, m, "T", 0, 1, []byte("afresh too"))
			verifyAll(t, s, m)
			reopenClean(t, s, cfg, m).Close()
		})
	}
}

// TestRecoveryStaleCopyContinuingItsQueue: a copy of an earlier batch with its base queue offset
// patched to its queue's next offset and its physical offset to the log end continues its queue
// and the epochs; its store timestamp, older than the batches before it, gives it away (store
// timestamps never go down along the log). The same batch stored again by a producer's retry
// (same producer id and sequence) is stamped anew and kept.
func TestRecoveryStaleCopyContinuingItsQueue(t *testing.T) {
	for _, variant := range []string{"clean shutdown", "after a crash", "a retry stored before the copy"} {
		t.Run(variant, func(t *testing.T) {
			cfg, clock, s, m := clockedStore(t, 0)
			dir := cfg.Dir
			// 300 messages on 2 queues, 10 per batch, one millisecond apart.
			for i := range 30 {
				clock.add(1)
				appendRec(t, s, m, "T", int32(i%2), 10, make([]byte, 50+i))
			}
			stale := m.all[11] // queue 1 at base queue offset 50
			if variant == "a retry stored before the copy" {
				clock.add(1)
				r := appendRec(t, s, m, "T", 1, 10, stale.payload)
				if !bytes.Equal(storedBatch(t, dir, cfg.SegmentSize, r)[tbCRCStart:], storedBatch(t, dir, cfg.SegmentSize, stale)[tbCRCStart:]) {
					t.Fatal("the retry's content differs from the first send's")
				}
			}
			if variant == "after a crash" {
				s.abandon()
			} else if err := s.Close(); err != nil {
				t.Fatal(err)
			}
			end, segBase := logEnd(m, cfg.SegmentSize)
			copied := patched(storedBatch(t, dir, cfg.SegmentSize, stale), end, m.maxOffset(qkey{"T", 1}), -1)
			writeAt(t, segPath(dir, segBase), end-segBase, copied)

			s = mustOpen(t, cfg)
			wantCutAt(t, s, end, "store timestamp")
			verifyAll(t, s, m)
			checkEnd(t, s, m)
			clock.add(1)
			appendRec(t, s, m, "T", 1, 3, []byte("after"))
			reopenClean(t, s, cfg, m).Close()
		})
	}
}

// TestRecoveryLegacyLogOutOfOrder: a log the previous version wrote, whose store timestamps go
// down where its clock stepped back or a failover moved to a master whose clock was behind (a
// deletion record below the batch before it, the topic's first batch afterwards below the
// record), recovers exactly as it is: that version's checkpoint does not vouch for the order,
// so no timestamp is checked, also where this version had opened the store before and left its
// history file (a downgrade and back). This version's appends continue from its end in order,
// and the next recovery, which checks them, keeps everything, after a crash too.
func TestRecoveryLegacyLogOutOfOrder(t *testing.T) {
	for _, variant := range []string{"clean shutdown", "crash", "no checkpoint", "downgraded and back"} {
		t.Run(variant, func(t *testing.T) {
			// The log spans segments: recovery scans only the last ones.
			cfg, clock, s, m := clockedStore(t, 4096)
			dir := cfg.Dir
			now := clock.ms.Load()
			stamps := []int64{now, now - 5, now + 10, now - 3600_000, now - 3600_000 + 1, now - 2*3600_000}
			for i := range 40 {
				appendRecAt(t, s, m, "T", int32(i%2), 1, make([]byte, 200), 0, stamps[i%len(stamps)]-int64(i))
			}
			res, err := s.DeleteTopic([]byte("T"), makeDeletion("T"), 0, stampAt(now-4*3600_000))
			if err != nil {
				t.Fatal(err)
			}
			m.deleteTopic("T", res.PhysicalOffset, res.Size, 0)
			s.AllowTopic([]byte("T"))
			appendRecAt(t, s, m, "T", 0, 1, []byte("created again, stamped before the deletion"), 0, now-5*3600_000)
			appendRecAt(t, s, m, "U", 0, 1, []byte("later still, earlier again"), 0, now-6*3600_000)
			switch variant {
			case "crash":
				s.abandon()
			default:
				if err := s.Close(); err != nil {
					t.Fatal(err)
				}
			}
			asPreviousVersion(t, dir, variant == "downgraded and back")
			if variant == "no checkpoint" {
				os.Remove(filepath.Join(dir, checkpointName))
			}

			s = mustOpen(t, cfg)
			if rec := s.Recovery(); rec.Cut || rec.QueuesBack != 0 {
				t.Fatalf("a log of the previous version: Recovery() = %+v, want no cut", rec)
			}
			verifyAll(t, s, m)
			checkEnd(t, s, m)
			// This version's appends: in order from the end on, whatever the clock did before.
			for i := range 10 {
				clock.add(1)
				appendRec(t, s, m, "U", int32(i%2), 1, make([]byte, 300))
			}
			clock.add(-3600_000) // the clock steps back: the order restarts, recorded
			appendRec(t, s, m, "T", 0, 1, []byte("clock stepped back"))
			clock.add(-500) // within a second: stamped in order
			appendRec(t, s, m, "T", 0, 1, []byte("clock behind a little"))
			if variant == "crash" {
				s.abandon()
				s = mustOpen(t, cfg)
			} else {
				s = reopenClean(t, s, cfg, m)
			}
			if rec := s.Recovery(); rec.Cut || rec.QueuesBack != 0 {
				t.Fatalf("after this version's appends: Recovery() = %+v, want no cut", rec)
			}
			verifyAll(t, s, m)
			// A scan of the whole log that checks the timestamps where they are vouched for.
			if err := s.Close(); err != nil {
				t.Fatal(err)
			}
			if err := writeCheckpoint(dir, checkpoint{ordered: true}, time.Now()); err != nil {
				t.Fatal(err)
			}
			s = mustOpen(t, cfg)
			defer s.Close()
			if rec := s.Recovery(); rec.Cut || rec.QueuesBack != 0 {
				t.Fatalf("a scan of the whole log: Recovery() = %+v, want no cut", rec)
			}
			verifyAll(t, s, m)
		})
	}
}

// TestStoreTimestampsAcrossFailover: a master's batches are replicated to a slave whose clock is
// behind, which then becomes master and appends, and the old master follows it. Less than a
// second behind, the new master stamps its batches at the log's newest store timestamp (in
// order, never more than a second ahead of its clock); further behind it stamps its clock's
// time and records that the order restarts there, and so does the old master when it
// replicates those batches. Crashes and restarts of both keep every batch.
func TestStoreTimestampsAcrossFailover(t *testing.T) {
	for _, behind := range []int64{300, 3600_000} {
		t.Run(time.Duration(behind*int64(time.Millisecond)).String(), func(t *testing.T) {
			acfg, bcfg := testConfig(t.TempDir()), testConfig(t.TempDir())
			acfg.SegmentSize, bcfg.SegmentSize = 8192, 8192
			aclock, bclock := newTestClock(), newTestClock()
			bclock.add(-behind)
			acfg.Now, bcfg.Now = aclock.now, bclock.now
			a, b := mustOpen(t, acfg), mustOpen(t, bcfg)
			m := newModel()
			for i := range 20 {
				aclock.add(1)
				appendRecEpoch(t, a, m, "T", int32(i%2), 1, make([]byte, 400), 1)
			}
			replicate(t, a, b, 3000)
			last := lastRec(m).ts
			var first rec
			for i := range 20 {
				bclock.add(1)
				r := appendRecEpoch(t, b, m, "T", int32(i%2), 1, make([]byte, 400), 2)
				if i == 0 {
					first = r
				}
				switch {
				case behind <= maxStampAhead.Milliseconds() && (r.ts < last || r.ts > bclock.ms.Load()+maxStampAhead.Milliseconds()):
					t.Fatalf("batch %d of the new master stamped %d: the log's newest was %d, its clock %d", i, r.ts, last, bclock.ms.Load())
				case behind > maxStampAhead.Milliseconds() && r.ts != bclock.ms.Load():
					t.Fatalf("batch %d of the new master stamped %d, its clock %d", i, r.ts, bclock.ms.Load())
				}
				last = r.ts
			}
			b.mu.Lock()
			from := b.orderedFrom
			b.mu.Unlock()
			if restarted := behind > maxStampAhead.Milliseconds(); restarted != (from == first.phys) {
				t.Fatalf("the new master's order starts at %d; its first batch is at %d", from, first.phys)
			}
			replicate(t, b, a, 3000) // the old master follows
			a.abandon()
			b.abandon()
			for _, cfg := range []Config{acfg, bcfg} {
				s := mustOpen(t, cfg)
				if rec := s.Recovery(); rec.Cut || rec.QueuesBack != 0 {
					t.Fatalf("%s: Recovery() = %+v, want no cut", cfg.Dir, rec)
				}
				verifyAll(t, s, m)
				reopenClean(t, s, cfg, m).Close()
			}
		})
	}
}

// TestAppendReplicatedRefusesStaleBatchOfDeletedTopic: a slave refuses, as recovery cuts, a
// batch of a deleted topic whose base queue offset is not 0 though it is its queue's first
// after the deletion record: within the chunk that holds the record, and in a later chunk. The
// topic's batches written after the deletion are taken.
func TestAppendReplicatedRefusesStaleBatchOfDeletedTopic(t *testing.T) {
	for _, variant := range []string{"in the record's chunk", "in a later chunk"} {
		t.Run(variant, func(t *testing.T) {
			mcfg := testConfig(t.TempDir())
			master := mustOpen(t, mcfg)
			defer master.Close()
			slave := mustOpen(t, testConfig(t.TempDir()))
			defer slave.Close()
			m := newModel()
			for i := range 10 {
				appendRec(t, master, m, "T", int32(i%2), 2, make([]byte, 50))
			}
			stale := m.all[5] // T/1 at base queue offset 4
			beforeDeletion := master.LogEndOffset()
			res := deleteRec(t, master, m, "T", 0)
			copied := patched(storedBatch(t, mcfg.Dir, mcfg.SegmentSize, stale), res.EndOffset, -1, -1)
			chunk := copied
			if variant == "in the record's chunk" {
				replicateTo(t, master, slave, beforeDeletion)
				chunk = append(storedBatch(t, mcfg.Dir, mcfg.SegmentSize, lastRec(m)), copied...)
			} else {
				replicate(t, master, slave, 3000)
			}
			at, maxOff := slave.LogEndOffset(), slave.MaxOffset([]byte("T"), 1)
			if _, err := slave.AppendReplicated(at, chunk); !errors.Is(err, ErrReplicaMismatch) {
				t.Fatalf("a copy of a deleted queue's batch after the deletion record: %v, want ErrReplicaMismatch", err)
			}
			if slave.LogEndOffset() != at || slave.MaxOffset([]byte("T"), 1) != maxOff {
				t.Fatalf("the refused chunk moved the log end to %d, T/1's max offset to %d", slave.LogEndOffset(), slave.MaxOffset([]byte("T"), 1))
			}
			// What the master writes after the deletion replicates.
			appendRec(t, master, m, "T", 1, 1, []byte("afresh"))
			appendRec(t, master, m, "T", 1, 2, []byte("afresh again"))
			replicate(t, master, slave, 3000)
			sameQueues(t, master, slave, m)
		})
	}
}

// replicateTo replicates the master's log to the slave up to end, a batch boundary.
func replicateTo(t tb, master, slave *Store, end int64) {
	t.Helper()
	for slave.LogEndOffset() < end {
		from := slave.LogEndOffset()
		err := master.ReadReplication(from, int(end-from), func(start int64, data []byte) error {
			if start+int64(len(data)) > end {
				data = data[:end-start]
			}
			_, err := slave.AppendReplicated(start, data)
			return err
		})
		if err != nil {
			t.Fatalf("replicate from %d: %v", from, err)
		}
	}
}
