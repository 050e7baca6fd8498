package commitlog

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"
)

func benchConfig(b *testing.B) Config {
	cfg := testConfig(b.TempDir())
	cfg.SegmentSize = 64 << 20
	cfg.QueueFileEntries = DefaultQueueFileEntries
	cfg.FlushInterval = DefaultFlushInterval
	cfg.QueueFlushInterval = DefaultQueueFlushInterval
	cfg.RetentionBytes = 512 << 20 // keep the disk footprint bounded
	cfg.RetentionCheckInterval = 100 * time.Millisecond
	return cfg
}

// BenchmarkAppend measures Append (ASYNC_FLUSH, background msync) for several batch sizes.
func BenchmarkAppend(b *testing.B) {
	for _, size := range []int{100, 1024, 65536} {
		b.Run(fmt.Sprintf("size=%d", size), func(b *testing.B) {
			s := mustOpen(b, benchConfig(b))
			defer s.Close()
			topic := []byte("bench")
			batch := makeBatch("bench", 0, 1, 0, make([]byte, size-tbHeader-len(topic)-12))
			b.SetBytes(int64(len(batch)))
			b.ReportAllocs()
			for b.Loop() {
				if _, err := s.Append(topic, 0, batch, 1, 0, 0, testStamp); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkAppendSync measures SYNC_FLUSH group commit: 16 concurrent writers, each waiting for
// durability before its next append. It reports msyncs per append.
func BenchmarkAppendSync(b *testing.B) {
	cfg := benchConfig(b)
	cfg.FlushMode = SyncFlush
	s := mustOpen(b, cfg)
	defer s.Close()
	batch := makeBatch("bench", 0, 1, 0, make([]byte, 1024-tbHeader-5-12))
	b.SetBytes(int64(len(batch)))
	b.ReportAllocs()
	b.SetParallelism(8) // 16 goroutines on 2 cores
	syncs := s.syncCount.Load()
	b.RunParallel(func(pb *testing.PB) {
		done := make(chan error, 1)
		cb := func(err error) { done <- err }
		for pb.Next() {
			res, err := s.Append([]byte("bench"), 0, batch, 1, 0, 0, testStamp)
			if err != nil {
				b.Fatal(err)
			}
			s.WaitFlushed(res.EndOffset, cb)
			if err := <-done; err != nil {
				b.Fatal(err)
			}
		}
	})
	b.ReportMetric(float64(s.syncCount.Load()-syncs)/float64(b.N), "msyncs/op")
}

// BenchmarkRead measures sequential consumption of one queue, 32 batches of 1 KiB per Read.
func BenchmarkRead(b *testing.B) {
	s := mustOpen(b, benchConfig(b))
	defer s.Close()
	const n = 20000
	batch := makeBatch("bench", 0, 1, 0, make([]byte, 1024-tbHeader-5-12))
	for range n {
		if _, err := s.Append([]byte("bench"), 0, batch, 1, 0, 0, testStamp); err != nil {
			b.Fatal(err)
		}
		// Interleave another queue so batches are not all contiguous.
		if _, err := s.Append([]byte("other"), 0, batch, 1, 0, 0, testStamp); err != nil {
			b.Fatal(err)
		}
	}
	var rr ReadResult
	off := int64(0)
	b.SetBytes(32 * int64(len(batch)))
	b.ReportAllocs()
	for b.Loop() {
		if err := s.Read([]byte("bench"), 0, off, 32, 1<<20, &rr); err != nil || rr.Status != Found {
			b.Fatal(rr.Status, err)
		}
		off = rr.NextQueueOffset
		if off >= n {
			off = 0
		}
		rr.Release()
	}
}

// BenchmarkRecovery measures Open on a 256 MiB log: "checkpoint" after a clean Close (scan of
// the last segment), "full" without a checkpoint (scan, CRC and re-dispatch of everything).
func BenchmarkRecovery(b *testing.B) {
	dir := b.TempDir()
	cfg := benchConfig(b)
	cfg.Dir = dir
	cfg.SegmentSize = 32 << 20
	cfg.RetentionBytes = 0
	s := mustOpen(b, cfg)
	var batches [8][]byte
	for q := range batches {
		batches[q] = makeBatch("bench", int32(q), 1, 0, make([]byte, 4096-tbHeader-5-12))
	}
	for s.LogEndOffset() < 256<<20 {
		for q := range int32(8) {
			if _, err := s.Append([]byte("bench"), q, batches[q], 1, 0, 0, testStamp); err != nil {
				b.Fatal(err)
			}
		}
	}
	logBytes := s.LogEndOffset()
	if err := s.Close(); err != nil {
		b.Fatal(err)
	}
	for _, mode := range []string{"checkpoint", "full"} {
		b.Run(mode, func(b *testing.B) {
			b.SetBytes(logBytes)
			if mode == "checkpoint" {
				b.SetBytes(cfg.SegmentSize)
			}
			for b.Loop() {
				if mode == "full" {
					b.StopTimer()
					os.Remove(filepath.Join(dir, checkpointName))
					b.StartTimer()
				}
				s := mustOpen(b, cfg)
				b.StopTimer()
				if err := s.Close(); err != nil {
					b.Fatal(err)
				}
				b.StartTimer()
			}
		})
	}
}
