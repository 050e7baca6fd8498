package commitlog

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"os"
	"path/filepath"
	"testing"
)

func TestFileNames(t *testing.T) {
	for _, n := range []int64{0, 1, 9, 10, 64 << 10, 1 << 30, 1<<40 + 7, 1<<63 - 1} {
		want := fmt.Sprintf("%020d", n)
		if got := fileName(n); got != want {
			t.Errorf("fileName(%d) = %q, want %q", n, got, want)
		}
		if got, want := filePath("/a/b", n), filepath.Join("/a/b", want); got != want {
			t.Errorf("filePath(%d) = %q, want %q", n, got, want)
		}
	}
}

// encodeHistory builds a history file by hand: ordered from, then (topic, queue, incarnation)
// triples.
func encodeHistory(from int64, queues ...any) []byte {
	b := binary.BigEndian.AppendUint32(nil, historyMagic)
	b = binary.BigEndian.AppendUint32(b, historyVersion)
	b = binary.BigEndian.AppendUint64(b, uint64(from))
	b = binary.BigEndian.AppendUint32(b, uint32(len(queues)/3))
	for i := 0; i+2 < len(queues); i += 3 {
		topic := queues[i].(string)
		b = binary.BigEndian.AppendUint16(b, uint16(len(topic)))
		b = append(b, topic...)
		b = binary.BigEndian.AppendUint32(b, uint32(queues[i+1].(int)))
		b = binary.BigEndian.AppendUint64(b, queues[i+2].(uint64))
	}
	return binary.BigEndian.AppendUint32(b, crc32.Checksum(b, castagnoli))
}

// reseal recomputes the CRC of a history file after a test changed its body.
func reseal(b []byte) []byte {
	b = bytes.Clone(b)
	binary.BigEndian.PutUint32(b[len(b)-4:], crc32.Checksum(b[:len(b)-4], castagnoli))
	return b
}

func TestParseHistory(t *testing.T) {
	good := encodeHistory(4096, "T", 0, uint64(7), "TopicB", 3, uint64(1<<60))
	countTooHigh := reseal(binary.BigEndian.AppendUint32(bytes.Clone(good[:16]), 3))
	countTooHigh = reseal(append(countTooHigh[:20], good[20:]...))
	zeroTopic := reseal(append(bytes.Clone(good[:20]), append([]byte{0, 0}, good[23:]...)...))
	for _, tc := range []struct {
		name  string
		b     []byte
		ok    bool
		from  int64
		count int
	}{
		{"two queues", good, true, 4096, 2},
		{"no queues, order not known", encodeHistory(-1), true, -1, 0},
		{"empty", nil, false, 0, 0},
		{"header only", good[:historyHeader], false, 0, 0},
		{"cut short", good[:len(good)-1], false, 0, 0},
		{"bit flipped", append(append(bytes.Clone(good[:25]), good[25]^1), good[26:]...), false, 0, 0},
		{"other magic", reseal(append([]byte("PCKP"), good[4:]...)), false, 0, 0},
		{"other version", reseal(append(append(bytes.Clone(good[:4]), 0, 0, 0, 2), good[8:]...)), false, 0, 0},
		{"order below -1", encodeHistory(-2), false, 0, 0},
		{"more queues counted than held", countTooHigh, false, 0, 0},
		{"topic of length 0", zeroTopic, false, 0, 0},
		{"trailing bytes", reseal(append(bytes.Clone(good[:len(good)-4]), 0, 0, 0, 0, 0)), false, 0, 0},
	} {
		h, ok := parseHistory(tc.b)
		if ok != tc.ok || ok && (h.orderedFrom != tc.from || h.count != tc.count) {
			t.Errorf("%s: parseHistory = %+v, %v; want ok %v, from %d, %d queues", tc.name, h, ok, tc.ok, tc.from, tc.count)
		}
	}
}

// TestHistoryFile: the history file holds the queues' incarnations and the order's start across
// restarts; one that is lost or does not check out costs only the order's start: each queue's
// incarnation is derived again from its first batch, also for a topic deleted and created
// again (without it a consumer of the earlier life would keep its offset in the new one), and
// the file is written again.
func TestHistoryFile(t *testing.T) {
	cfg, s, m := openClocked(t)
	for i := range 12 {
		appendRec(t, s, m, []string{"A", "B", "C"}[i%3], int32(i%2), 1, []byte("history"))
	}
	first := incarnations(s)
	deleteRec(t, s, m, "A", 0)
	for i := range 4 {
		appendRec(t, s, m, "A", int32(i%2), 1, []byte("again"))
	}
	born := incarnations(s)
	for _, q := range []QueueID{{"A", 0}, {"A", 1}} {
		if born[q] == first[q] || born[q] == 0 {
			t.Fatalf("%v re-created: incarnation %#x, before %#x", q, born[q], first[q])
		}
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	h, err := readHistory(cfg.Dir)
	if err != nil || !h.ok || h.count != len(born) || h.orderedFrom != 0 {
		t.Fatalf("history after Close: %+v, %v; want %d queues ordered from 0", h, err, len(born))
	}
	s = mustOpen(t, cfg)
	if got := incarnations(s); !equalIncarnations(got, born) {
		t.Fatalf("after a restart: %v, want %v", got, born)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(cfg.Dir, historyName)
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	b[len(b)-1] ^= 1
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
	s = mustOpen(t, cfg)
	if got := incarnations(s); !equalIncarnations(got, born) {
		t.Fatalf("with a damaged history file: %v, want %v (derived from the first batches)", got, born)
	}
	verifyAll(t, s, m)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if h, err := readHistory(cfg.Dir); err != nil || !h.ok {
		t.Fatalf("history not written again: %+v, %v", h, err)
	}
	for _, damage := range []string{"missing", "empty"} {
		if damage == "missing" {
			removeHistory(t, cfg.Dir)
		} else if err := os.WriteFile(path, nil, 0o644); err != nil {
			t.Fatal(err)
		}
		s = mustOpen(t, cfg)
		if got := incarnations(s); !equalIncarnations(got, born) {
			t.Fatalf("history file %s: %v, want %v", damage, got, born)
		}
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
	}
}

// TestHistoryAfterResetAndCrash: a slave that reset its log and took queues from the master at
// the master's later offsets (their first batches not among them) and then crashed before its
// queue flusher wrote the history file has incarnation 0 for them, never the incarnation its own earlier queues of
// the same names had.
func TestHistoryAfterResetAndCrash(t *testing.T) {
	cfg := testConfig(t.TempDir())
	cfg.Now = steppingClock()
	s := mustOpen(t, cfg)
	m := newModel()
	for range 20 {
		appendRec(t, s, m, "a", 0, 1, make([]byte, 1000))
	}
	if err := s.flushQueuesAndCheckpoint(false); err != nil {
		t.Fatal(err)
	}
	if v := s.QueueIncarnation([]byte("a"), 0); v == 0 {
		t.Fatal("no incarnation for a queue created by its first batch")
	}
	s.Close()
	s = mustOpen(t, cfg)
	base := 4 * cfg.SegmentSize
	master := mustOpen(t, testConfig(t.TempDir()))
	defer master.Close()
	mm := newModel()
	for master.LogEndOffset() < base+cfg.SegmentSize/2 {
		appendRec(t, master, mm, "a", 0, 1, make([]byte, 1000))
	}
	master.cfg.RetentionBytes = 1
	master.runRetention()
	if _, err := s.ResetTo(base, false); err != nil {
		t.Fatal(err)
	}
	// At once: the queue flusher ResetTo kicks would write the file too, but a crash may come
	// first.
	if h, err := readHistory(cfg.Dir); err != nil || h.count != 0 {
		t.Fatalf("history file right after the reset: %+v, %v; want no queue's incarnation", h, err)
	}
	replicate(t, master, s, 1<<20)
	s.abandon()
	s = mustOpen(t, cfg)
	defer s.Close()
	if s.MaxOffset([]byte("a"), 0) != master.MaxOffset([]byte("a"), 0) {
		t.Fatalf("queue max %d after the crash, master's %d", s.MaxOffset([]byte("a"), 0), master.MaxOffset([]byte("a"), 0))
	}
	if v := s.QueueIncarnation([]byte("a"), 0); v != 0 {
		t.Fatalf("incarnation %#x after the reset and a crash: the old queue's, want 0 (not known)", v)
	}
}
