package protocol

import (
	"fmt"
	"testing"
)

// TestHotPathAllocs is the zero-allocation guard of the data path (STYLE.md: "Hot paths have a
// zero-allocation guard test that runs in make test, not only in benchmarks"). It covers what the
// benchmarks in bench_test.go measure.
//
// It runs under -race too: the race detector does not allocate on the Go heap for these paths
// (checked with Go 1.26). Should a future toolchain's instrumentation allocate, raceEnabled
// (race_on_test.go/race_off_test.go) is the switch to skip it there.
func TestHotPathAllocs(t *testing.T) {
	f := func(name string, fn func()) {
		t.Helper()
		fn() // warm up: let reused buffers reach their size
		if n := testing.AllocsPerRun(100, fn); n != 0 {
			t.Errorf("%s: %v allocations per run, want 0 (race detector on: %v)", name, n, raceEnabled)
		}
	}

	sendHdr := SendResponseHeader{QueueID: 3, QueueOffset: 1 << 40, Count: 100, PhysicalOffset: 1 << 33, StoreTimestamp: 1732890000000}
	body := make([]byte, 1024)
	frameBuf := make([]byte, 0, 2048)
	f("frame encode", func() {
		frameBuf = StartFrame(frameBuf[:0], uint16(StatusSuccess), FlagResponse, 42)
		frameBuf = sendHdr.AppendTo(frameBuf)
		EndHeader(frameBuf, 0)
		frameBuf = append(frameBuf, body...)
		EndFrame(frameBuf, 0, 0)
	})
	pullFrame := sampleFrames()[2]
	f("ParseFrameHeader", func() {
		if _, err := ParseFrameHeader(pullFrame, DefaultMaxFrameSize); err != nil {
			t.Fatal(err)
		}
	})
	f("ParseFrame", func() {
		if _, err := ParseFrame(pullFrame, DefaultMaxFrameSize); err != nil {
			t.Fatal(err)
		}
	})
	pullHdr := sampleHeaders()[1].AppendTo(nil)
	var view PullRequestView
	f("PullRequestView.ReadFrom", func() {
		if err := view.ReadFrom(pullHdr); err != nil {
			t.Fatal(err)
		}
	})
	hdrBuf := make([]byte, 0, SendResponseHeaderSize)
	f("SendResponseHeader.AppendTo", func() { hdrBuf = sendHdr.AppendTo(hdrBuf[:0]) })
	sendEnc := sendHdr.AppendTo(nil)
	var sendDec SendResponseHeader
	f("SendResponseHeader.ReadFrom", func() {
		if err := sendDec.ReadFrom(sendEnc); err != nil {
			t.Fatal(err)
		}
	})
	pullResp := PullResponseHeader{Result: PullFound, NextQueueOffset: 10, MaxOffset: 20}
	f("PullResponseHeader.AppendTo", func() { hdrBuf = pullResp.AppendTo(hdrBuf[:0]) })

	for _, c := range benchBatchCases {
		msgs := testMessages(c.msgs, c.size)
		// Equal tags longer than the compiler's 32-byte stack buffer, so that ValidateBatch
		// compares every message's tags without converting them to strings on the heap.
		for i := range msgs {
			msgs[i].Tags = []byte("a-tag-that-is-longer-than-thirty-two-bytes")
		}
		var bb BatchBuilder
		name := fmt.Sprintf("msgs=%d/size=%d", c.msgs, c.size)
		f("BatchBuilder "+name, func() {
			bb.Reset("TopicA", 1, 77, 1000)
			for i := range msgs {
				bb.Add(&msgs[i])
			}
			_ = bb.Finish()
		})
		batch := buildBatch("TopicA", 1, msgs)
		f("ValidateBatch "+name, func() {
			if _, _, err := ValidateBatch(batch, BatchLimits{}); err != nil {
				t.Fatal(err)
			}
		})
		h, err := ReadBatchHeader(batch)
		if err != nil {
			t.Fatal(err)
		}
		f("MessageIterator "+name, func() {
			it := NewMessageIterator(batch, h)
			for {
				if _, ok := it.Next(); !ok {
					break
				}
			}
			if it.Err() != nil {
				t.Fatal(it.Err())
			}
		})
		f("StampBatch "+name, func() { StampBatch(batch, 1<<30, 500, 1732890000000, 2) })
	}
}
