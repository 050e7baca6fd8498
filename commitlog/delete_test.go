package commitlog

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"

	"pgregory.net/rapid"
)

// sameQueues checks that two stores serve the same queues: the same ones, the same offsets, the
// same batches at every offset (read back batch by batch from the model's records).
func sameQueues(t tb, a, b *Store, m *model) {
	t.Helper()
	verifyAll(t, a, m)
	verifyAll(t, b, m)
	if fmt.Sprint(a.Queues()) != fmt.Sprint(b.Queues()) {
		t.Fatalf("queues differ: %v and %v", a.Queues(), b.Queues())
	}
}

// TestDeleteTopicProperty deletes and re-creates topics among appends, restarts, crashes, cuts
// of the log's tail and replication to a second store: the master and the slave always serve
// what the model says (the deleted topic's old batches never again, the re-created topic's
// offsets from 0, other topics untouched; a cut below a deletion record undoes it), and their
// logs are byte-identical.
func TestDeleteTopicProperty(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		mdir, err := os.MkdirTemp("", "commitlog-delete-master-")
		if err != nil {
			rt.Fatal(err)
		}
		defer os.RemoveAll(mdir)
		sdir, err := os.MkdirTemp("", "commitlog-delete-slave-")
		if err != nil {
			rt.Fatal(err)
		}
		defer os.RemoveAll(sdir)
		mcfg, scfg := testConfig(mdir), testConfig(sdir)
		seg := int64(rapid.SampledFrom([]int{4096, 8192}).Draw(rt, "segmentSize"))
		entries := rapid.IntRange(1, 9).Draw(rt, "queueFileEntries")
		mcfg.SegmentSize, scfg.SegmentSize = seg, seg
		mcfg.QueueFileEntries, scfg.QueueFileEntries = entries, entries
		master, slave := mustOpen(rt, mcfg), mustOpen(rt, scfg)
		defer func() { master.Close(); slave.Close() }()
		m := newModel()
		topics := []string{"a", "b"}
		rt.Repeat(map[string]func(*rapid.T){
			"append": func(rt *rapid.T) {
				topic := rapid.SampledFrom(topics).Draw(rt, "topic")
				qid := rapid.Int32Range(0, 1).Draw(rt, "qid")
				appendRec(rt, master, m, topic, qid, rapid.Int32Range(1, 3).Draw(rt, "count"), make([]byte, rapid.IntRange(0, 1500).Draw(rt, "payload")))
			},
			"delete": func(rt *rapid.T) {
				deleteRec(rt, master, m, rapid.SampledFrom(topics).Draw(rt, "topic"), 0)
			},
			"replicate": func(rt *rapid.T) {
				replicate(rt, master, slave, rapid.IntRange(1, 3000).Draw(rt, "chunk"))
			},
			"restart": func(rt *rapid.T) {
				replicate(rt, master, slave, 4096)
				if rapid.IntRange(0, 3).Draw(rt, "rarely") != 0 { // restarts cost fsyncs: fewer of them
					return
				}
				if err := master.Close(); err != nil {
					rt.Fatal(err)
				}
				if err := slave.Close(); err != nil {
					rt.Fatal(err)
				}
				if rapid.Bool().Draw(rt, "fullScan") {
					os.Remove(filepath.Join(mdir, checkpointName))
					os.Remove(filepath.Join(sdir, checkpointName))
				}
				master, slave = mustOpen(rt, mcfg), mustOpen(rt, scfg)
				sameQueues(rt, master, slave, m)
			},
			"cut": func(rt *rapid.T) {
				// Both logs cut at one of the last batches (as a truncation through a restart
				// does): deletions at or after the cut are undone.
				replicate(rt, master, slave, 4096)
				if len(m.all) == 0 {
					rt.Skip("empty")
				}
				if rapid.IntRange(0, 2).Draw(rt, "rarely") != 0 {
					return
				}
				at := m.all[rapid.IntRange(max(0, len(m.all)-6), len(m.all)-1).Draw(rt, "cutAt")].phys
				for _, s := range []*Store{master, slave} {
					if err := s.PrepareTruncate(at); err != nil {
						rt.Fatal(err)
					}
					s.abandon()
				}
				m.truncate(at)
				master, slave = mustOpen(rt, mcfg), mustOpen(rt, scfg)
				sameQueues(rt, master, slave, m)
				if master.LogEndOffset() != at || slave.LogEndOffset() != at {
					rt.Fatalf("cut at %d: the logs end at %d and %d", at, master.LogEndOffset(), slave.LogEndOffset())
				}
			},
			"": func(rt *rapid.T) {
				verifyAll(rt, master, m)
			},
		})
		replicate(rt, master, slave, 4096)
		sameQueues(rt, master, slave, m)
		sameLog(rt, master, slave)
	})
}

// TestDeleteTopicUnderReaders deletes and re-creates a topic over and over while readers read
// it and another topic: a read sees the old topic, nothing, or the new one, never bytes of an
// unmapped file (the race detector and the CRC check of every batch read tell), and the other
// topic's reads never fail.
func TestDeleteTopicUnderReaders(t *testing.T) {
	cfg := testConfig(t.TempDir())
	cfg.QueueFileEntries = 4 // many queue files, each freed on deletion
	s := mustOpen(t, cfg)
	defer s.Close()
	var stop atomic.Bool
	var wg sync.WaitGroup
	var reads, found atomic.Int64
	for _, topic := range []string{"churn", "kept"} {
		for range 2 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				var rr ReadResult
				for !stop.Load() {
					off := int64(0)
					for i := 0; i < 20 && !stop.Load(); i++ {
						err := s.Read([]byte(topic), 0, off, 8, 1<<20, &rr)
						if err != nil {
							if errors.Is(err, ErrClosed) {
								return
							}
							t.Errorf("read %s at %d: %v", topic, off, err)
							return
						}
						reads.Add(1)
						if rr.Status == Found {
							found.Add(1)
							for _, sl := range rr.Slices {
								for _, b := range splitBatches(t, sl.B) {
									if _, err := testParser(b, physOf(b)); err != nil {
										t.Errorf("read %s at %d: a batch that does not parse: %v", topic, off, err)
									}
								}
							}
							off = rr.NextQueueOffset
						} else {
							off = 0
						}
						rr.Release()
					}
				}
			}()
		}
	}
	payload := make([]byte, 200)
	for i := range 300 {
		for range 8 {
			if _, err := s.Append([]byte("churn"), 0, makeBatch("churn", 0, 1, 0, payload), 1, 0, 0, testStamp); err != nil {
				t.Fatal(err)
			}
			if _, err := s.Append([]byte("kept"), 0, makeBatch("kept", 0, 1, 0, payload), 1, 0, 0, testStamp); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := s.DeleteTopic([]byte("churn"), makeDeletion("churn"), 0, testStamp); err != nil {
			t.Fatalf("deletion %d: %v", i, err)
		}
		s.AllowTopic([]byte("churn"))
	}
	stop.Store(true)
	wg.Wait()
	if found.Load() == 0 {
		t.Fatalf("%d reads, none found anything", reads.Load())
	}
	if got := s.MaxOffset([]byte("kept"), 0); got != 300*8 {
		t.Fatalf("kept: max offset %d, want %d", got, 300*8)
	}
	if s.liveFiles.Load() == 0 {
		t.Fatal("no file mapped")
	}
}

// physOf returns the physical offset stamped in a test batch.
func physOf(b []byte) int64 {
	return int64(uint64(b[8])<<56 | uint64(b[9])<<48 | uint64(b[10])<<40 | uint64(b[11])<<32 |
		uint64(b[12])<<24 | uint64(b[13])<<16 | uint64(b[14])<<8 | uint64(b[15]))
}
