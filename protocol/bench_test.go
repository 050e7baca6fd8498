package protocol

import (
	"fmt"
	"testing"
)

// Benchmarks of the data-path codecs (VictoriaMetrics lib/encoding/*_timing_test.go and pebble
// record_test.go style: b.ReportAllocs, b.SetBytes, size sweeps with b.Run, results written to
// Sink). Every one of them must report 0 allocs/op; TestHotPathAllocs guards the same paths in a
// plain `go test`.
//
// Compare two versions with:
//
//	go test -run '^$' -bench . -benchmem -count 10 ./protocol/ | tee new.txt
//	benchstat old.txt new.txt

// Sink keeps the compiler from optimising benchmarked calls away.
var Sink uint64

var benchSizes = []int{0, 100, 1 << 10, 16 << 10}

// benchBatchCases are the batch shapes the batch benchmarks sweep.
var benchBatchCases = []struct{ msgs, size int }{{1, 100}, {1, 1 << 10}, {100, 100}, {100, 1 << 10}}

func BenchmarkFrameEncode(b *testing.B) {
	h := SendResponseHeader{QueueID: 3, QueueOffset: 1 << 40, Count: 100, PhysicalOffset: 1 << 33, StoreTimestamp: 1732890000000}
	for _, size := range benchSizes {
		b.Run(fmt.Sprintf("size=%d", size), func(b *testing.B) {
			body := make([]byte, size)
			buf := make([]byte, 0, FramePrefixSize+SendResponseHeaderSize+size)
			b.ReportAllocs()
			b.SetBytes(int64(cap(buf)))
			for b.Loop() {
				buf = StartFrame(buf[:0], uint16(StatusSuccess), FlagResponse, 42)
				buf = h.AppendTo(buf)
				EndHeader(buf, 0)
				buf = append(buf, body...)
				EndFrame(buf, 0, 0)
			}
			Sink += uint64(len(buf))
		})
	}
}

func BenchmarkParseFrameHeader(b *testing.B) {
	fr := sampleFrames()[2]
	b.ReportAllocs()
	b.SetBytes(FramePrefixSize)
	for b.Loop() {
		h, err := ParseFrameHeader(fr, DefaultMaxFrameSize)
		if err != nil {
			b.Fatal(err)
		}
		Sink += uint64(h.Length)
	}
}

func BenchmarkParseFrame(b *testing.B) {
	for _, size := range benchSizes {
		b.Run(fmt.Sprintf("size=%d", size), func(b *testing.B) {
			fr := frameOf(uint16(CodeSendMessage), 0, 7, nil, make([]byte, size))
			b.ReportAllocs()
			b.SetBytes(int64(len(fr)))
			for b.Loop() {
				f, err := ParseFrame(fr, DefaultMaxFrameSize)
				if err != nil {
					b.Fatal(err)
				}
				Sink += uint64(len(f.Body))
			}
		})
	}
}

func BenchmarkPullRequestViewReadFrom(b *testing.B) {
	enc := sampleHeaders()[1].AppendTo(nil)
	var v PullRequestView
	b.ReportAllocs()
	b.SetBytes(int64(len(enc)))
	for b.Loop() {
		if err := v.ReadFrom(enc); err != nil {
			b.Fatal(err)
		}
		Sink += uint64(v.QueueOffset)
	}
}

func BenchmarkSendResponseHeader(b *testing.B) {
	h := SendResponseHeader{QueueID: 3, QueueOffset: 1 << 40, Count: 100, PhysicalOffset: 1 << 33, StoreTimestamp: 1732890000000}
	b.Run("encode", func(b *testing.B) {
		buf := make([]byte, 0, SendResponseHeaderSize)
		b.ReportAllocs()
		b.SetBytes(SendResponseHeaderSize)
		for b.Loop() {
			buf = h.AppendTo(buf[:0])
		}
		Sink += uint64(len(buf))
	})
	b.Run("decode", func(b *testing.B) {
		enc := h.AppendTo(nil)
		var d SendResponseHeader
		b.ReportAllocs()
		b.SetBytes(SendResponseHeaderSize)
		for b.Loop() {
			if err := d.ReadFrom(enc); err != nil {
				b.Fatal(err)
			}
			Sink += uint64(d.QueueOffset)
		}
	})
}

func BenchmarkBatchBuild(b *testing.B) {
	for _, c := range benchBatchCases {
		b.Run(fmt.Sprintf("msgs=%d/size=%d", c.msgs, c.size), func(b *testing.B) {
			msgs := testMessages(c.msgs, c.size)
			var bb BatchBuilder
			bb.Reset("TopicA", 1, 77, 1000)
			for i := range msgs { // warm up: grow the builder's buffer once
				bb.Add(&msgs[i])
			}
			b.ReportAllocs()
			b.SetBytes(int64(len(bb.Finish())))
			for b.Loop() {
				bb.Reset("TopicA", 1, 77, 1000)
				for i := range msgs {
					bb.Add(&msgs[i])
				}
				Sink += uint64(len(bb.Finish()))
			}
		})
	}
}

func BenchmarkValidateBatch(b *testing.B) {
	for _, c := range benchBatchCases {
		b.Run(fmt.Sprintf("msgs=%d/size=%d", c.msgs, c.size), func(b *testing.B) {
			batch := buildBatch("TopicA", 1, testMessages(c.msgs, c.size))
			b.ReportAllocs()
			b.SetBytes(int64(len(batch)))
			for b.Loop() {
				h, tagHash, err := ValidateBatch(batch, BatchLimits{})
				if err != nil {
					b.Fatal(err)
				}
				Sink += uint64(h.Count) + uint64(tagHash)
			}
		})
	}
}

func BenchmarkMessageIterator(b *testing.B) {
	for _, c := range benchBatchCases {
		b.Run(fmt.Sprintf("msgs=%d/size=%d", c.msgs, c.size), func(b *testing.B) {
			batch := buildBatch("TopicA", 1, testMessages(c.msgs, c.size))
			h, err := ReadBatchHeader(batch)
			if err != nil {
				b.Fatal(err)
			}
			b.ReportAllocs()
			b.SetBytes(int64(len(batch)))
			for b.Loop() {
				it := NewMessageIterator(batch, h)
				for {
					m, ok := it.Next()
					if !ok {
						break
					}
					Sink += uint64(len(m.Body))
				}
				if it.Err() != nil {
					b.Fatal(it.Err())
				}
			}
		})
	}
}

func BenchmarkStampBatch(b *testing.B) {
	batch := buildBatch("TopicA", 1, testMessages(1, 100))
	b.ReportAllocs()
	b.SetBytes(offCRC - offPhysicalOffset) // the broker-assigned fields it writes
	var off int64
	for b.Loop() {
		off += int64(len(batch))
		StampBatch(batch, off, off>>4, 1732890000000, 3)
	}
	Sink += uint64(off)
}
