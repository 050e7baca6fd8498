package commitlog

import (
	"os"
	"sort"
	"testing"
	"time"

	"pgregory.net/rapid"
)

// expectRead computes what Read should return from the model.
func (m *model) expectRead(k qkey, off int64, maxMsgs int32, maxBytes int) (st ReadStatus, recs []rec, next, lo, hi int64) {
	rs := m.queues[k]
	if len(rs) == 0 {
		return NoQueue, nil, 0, 0, 0
	}
	lo, hi = rs[0].base, m.maxOffset(k)
	switch {
	case off < lo:
		return OffsetTooSmall, nil, lo, lo, hi
	case off == hi:
		return NoNewMessage, nil, hi, lo, hi
	case off > hi:
		return OffsetOverflow, nil, hi, lo, hi
	}
	i := 0
	for rs[i].base+int64(rs[i].count) <= off {
		i++
	}
	msgs, bytes := 0, 0
	for ; i < len(rs); i++ {
		r := rs[i]
		if msgs > 0 && (maxMsgs > 0 && msgs >= int(maxMsgs) || maxBytes > 0 && bytes+r.size > maxBytes) {
			break
		}
		recs = append(recs, r)
		msgs += int(r.count)
		bytes += r.size
		next = r.base + int64(r.count)
	}
	return Found, recs, next, lo, hi
}

// TestModel compares the store with an in-memory model over random appends, reads, clean
// reopens, crashes (kill -9) and crashes that tear the log's tail.
func TestModel(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		dir, err := os.MkdirTemp("", "commitlog-rapid-")
		if err != nil {
			rt.Fatal(err)
		}
		defer os.RemoveAll(dir)
		cfg := testConfig(dir)
		cfg.SegmentSize = int64(rapid.SampledFrom([]int{4096, 8192, 20000}).Draw(rt, "segmentSize"))
		cfg.QueueFileEntries = rapid.IntRange(1, 9).Draw(rt, "queueFileEntries")
		cfg.FlushInterval = time.Hour // only reopen makes data durable: tornCrash needs that
		s := mustOpen(rt, cfg)
		defer func() { s.Close() }()
		m := newModel()
		topics := []string{"a", "b/c"}
		var rr ReadResult
		reopen := func() {
			s = mustOpen(rt, cfg)
		}
		rt.Repeat(map[string]func(*rapid.T){
			"append": func(rt *rapid.T) {
				topic := rapid.SampledFrom(topics).Draw(rt, "topic")
				qid := rapid.Int32Range(0, 2).Draw(rt, "qid")
				count := rapid.Int32Range(1, 4).Draw(rt, "count")
				n := rapid.IntRange(0, 3000).Draw(rt, "payload")
				p := make([]byte, n)
				for i := range p {
					p[i] = byte(i*7 + n)
				}
				appendRec(rt, s, m, topic, qid, count, p)
			},
			"read": func(rt *rapid.T) {
				k := qkey{rapid.SampledFrom(topics).Draw(rt, "topic"), rapid.Int32Range(0, 2).Draw(rt, "qid")}
				off := rapid.Int64Range(0, m.maxOffset(k)+2).Draw(rt, "off")
				maxMsgs := rapid.Int32Range(0, 6).Draw(rt, "maxMsgs")
				maxBytes := rapid.IntRange(0, 8000).Draw(rt, "maxBytes")
				if err := s.Read([]byte(k.topic), k.qid, off, maxMsgs, maxBytes, &rr); err != nil {
					rt.Fatalf("Read: %v", err)
				}
				defer rr.Release()
				st, recs, next, lo, hi := m.expectRead(k, off, maxMsgs, maxBytes)
				if rr.Status != st || rr.NextQueueOffset != next || rr.MinOffset != lo || rr.MaxOffset != hi {
					rt.Fatalf("Read(%v, %d) = %v next %d [%d, %d]; want %v next %d [%d, %d]",
						k, off, rr.Status, rr.NextQueueOffset, rr.MinOffset, rr.MaxOffset, st, next, lo, hi)
				}
				var got [][]byte
				for _, sl := range rr.Slices {
					got = append(got, splitBatches(rt, sl.B)...)
				}
				if len(got) != len(recs) {
					rt.Fatalf("Read(%v, %d): %d batches, want %d", k, off, len(got), len(recs))
				}
				for i, b := range got {
					checkBatch(rt, b, recs[i])
				}
			},
			"reopen": func(rt *rapid.T) {
				if err := s.Close(); err != nil {
					rt.Fatal(err)
				}
				reopen()
			},
			"crash": func(rt *rapid.T) {
				s.abandon()
				reopen()
			},
			"tornCrash": func(rt *rapid.T) {
				if len(m.all) == 0 {
					rt.Skip("empty")
				}
				// Corrupt one of the last few batches that are not durable yet (a torn write can
				// only hit those): it and everything after are lost.
				flushed := s.FlushedOffset()
				s.abandon()
				first := sort.Search(len(m.all), func(i int) bool { return m.all[i].phys >= flushed })
				if first == len(m.all) {
					reopen()
					rt.Skip("everything durable")
				}
				i := rapid.IntRange(max(first, len(m.all)-4), len(m.all)-1).Draw(rt, "torn")
				r := m.all[i]
				base := r.phys / cfg.SegmentSize * cfg.SegmentSize
				writeAt(rt, segPath(dir, base), r.phys-base+12, []byte{0xEE, 0xEE}) // stored offset
				m.truncate(r.phys)
				reopen()
			},
			"": func(rt *rapid.T) {
				for _, k := range m.keys() {
					if got, want := s.MaxOffset([]byte(k.topic), k.qid), m.maxOffset(k); got != want {
						rt.Fatalf("%v: MaxOffset %d, want %d", k, got, want)
					}
					if got, want := s.MinOffset([]byte(k.topic), k.qid), m.queues[k][0].base; got != want {
						rt.Fatalf("%v: MinOffset %d, want %d", k, got, want)
					}
				}
				if len(s.Queues()) != len(m.queues) {
					rt.Fatalf("%d queues, want %d", len(s.Queues()), len(m.queues))
				}
			},
		})
		verifyAll(rt, s, m)
	})
}

// TestZeroAllocs guards the hot paths: Append and Read (with a reused ReadResult) allocate
// nothing in the steady state.
func TestZeroAllocs(t *testing.T) {
	cfg := testConfig(t.TempDir())
	cfg.SegmentSize = 64 << 20
	cfg.QueueFileEntries = 100_000
	s := mustOpen(t, cfg)
	defer s.Close()
	topic := []byte("allocs")
	batch := makeBatch("allocs", 1, 1, 0, make([]byte, 200))
	for range 100 {
		if _, err := s.Append(topic, 1, batch, 1, 0, 0, testStamp); err != nil {
			t.Fatal(err)
		}
	}
	if a := testing.AllocsPerRun(1000, func() {
		if _, err := s.Append(topic, 1, batch, 1, 0, 0, testStamp); err != nil {
			t.Fatal(err)
		}
	}); a != 0 {
		t.Fatalf("Append: %v allocs/op", a)
	}
	var rr ReadResult
	off := int64(0)
	read := func() {
		if err := s.Read(topic, 1, off, 8, 0, &rr); err != nil || rr.Status != Found {
			t.Fatal(rr.Status, err)
		}
		off = rr.NextQueueOffset % 1000
		rr.Release()
	}
	read()
	if a := testing.AllocsPerRun(1000, read); a != 0 {
		t.Fatalf("Read: %v allocs/op", a)
	}
	off = 500 // random access, no hint
	if a := testing.AllocsPerRun(1000, func() {
		off = (off*7 + 13) % 1000
		if err := s.Read(topic, 1, off, 1, 0, &rr); err != nil || rr.Status != Found {
			t.Fatal(rr.Status, err)
		}
		rr.Release()
	}); a != 0 {
		t.Fatalf("random Read: %v allocs/op", a)
	}
}
