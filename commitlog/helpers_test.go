package commitlog

import (
	"bytes"
	"encoding/binary"
	"errors"
	"flag"
	"fmt"
	"hash/crc32"
	"io"
	"log/slog"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sort"
	"testing"
	"time"
)

// Test batch format (big-endian):
//
//	0 size u32 | 4 crc32c u32 over [36, size) | 8 phys i64 | 16 base i64 | 24 storeTs i64 |
//	32 epoch u32 | 36 topicLen u16 | 38 topic | queueID i32 | count i32 | tagHash u32 | payload
const (
	tbHeader   = 38
	tbCRCStart = 36
)

func makeBatch(topic string, qid int32, count int32, tag uint32, payload []byte) []byte {
	size := tbHeader + len(topic) + 12 + len(payload)
	b := make([]byte, size)
	binary.BigEndian.PutUint32(b[0:], uint32(size))
	binary.BigEndian.PutUint16(b[tbCRCStart:], uint16(len(topic)))
	p := tbHeader + copy(b[tbHeader:], topic)
	binary.BigEndian.PutUint32(b[p:], uint32(qid))
	binary.BigEndian.PutUint32(b[p+4:], uint32(count))
	binary.BigEndian.PutUint32(b[p+8:], tag)
	copy(b[p+12:], payload)
	binary.BigEndian.PutUint32(b[4:], crc32.Checksum(b[tbCRCStart:], castagnoli))
	return b
}

// makeDeletion builds the test format's deletion record of topic (Store.DeleteTopic): a batch of
// queue id -1 and one message.
func makeDeletion(topic string) []byte { return makeBatch(topic, -1, 1, 0, nil) }

func testStamp(dst []byte, phys, base, ts int64, epoch uint32) {
	binary.BigEndian.PutUint64(dst[8:], uint64(phys))
	binary.BigEndian.PutUint64(dst[16:], uint64(base))
	binary.BigEndian.PutUint64(dst[24:], uint64(ts))
	binary.BigEndian.PutUint32(dst[32:], epoch)
}

var errTestCorrupt = errors.New("test batch corrupt")

func testParser(b []byte, phys int64) (BatchInfo, error) {
	if len(b) < 8 {
		return BatchInfo{}, fmt.Errorf("%d bytes: %w", len(b), ErrIncomplete)
	}
	size := int(binary.BigEndian.Uint32(b))
	if size < tbHeader+12 {
		return BatchInfo{}, fmt.Errorf("size %d: %w", size, errTestCorrupt)
	}
	if len(b) < size {
		return BatchInfo{}, fmt.Errorf("%d of %d bytes: %w", len(b), size, ErrIncomplete)
	}
	b = b[:size]
	if binary.BigEndian.Uint32(b[4:]) != crc32.Checksum(b[tbCRCStart:], castagnoli) {
		return BatchInfo{}, fmt.Errorf("crc: %w", errTestCorrupt)
	}
	if got := int64(binary.BigEndian.Uint64(b[8:])); got != phys {
		return BatchInfo{}, fmt.Errorf("stored offset %d != %d: %w", got, phys, errTestCorrupt)
	}
	tl := int(binary.BigEndian.Uint16(b[tbCRCStart:]))
	if tbHeader+tl+12 > size {
		return BatchInfo{}, fmt.Errorf("topic length: %w", errTestCorrupt)
	}
	p := tbHeader + tl
	info := BatchInfo{
		Size:            size,
		Topic:           b[tbHeader:p],
		QueueID:         int32(binary.BigEndian.Uint32(b[p:])),
		BaseQueueOffset: int64(binary.BigEndian.Uint64(b[16:])),
		Count:           int32(binary.BigEndian.Uint32(b[p+4:])),
		TagHash:         binary.BigEndian.Uint32(b[p+8:]),
		StoreTimestamp:  int64(binary.BigEndian.Uint64(b[24:])),
		Epoch:           binary.BigEndian.Uint32(b[32:]),
	}
	if info.QueueID == -1 { // a deletion record (makeDeletion)
		info.QueueID, info.Control, info.DeletesTopic = 0, true, true
	}
	return info, nil
}

// payloadOf returns the payload of a stored test batch.
func payloadOf(b []byte) []byte {
	tl := int(binary.BigEndian.Uint16(b[tbCRCStart:]))
	return b[tbHeader+tl+12 : binary.BigEndian.Uint32(b)]
}

func quietLogger() *slog.Logger {
	if flag.Parsed() && testing.Verbose() {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	return slog.New(slog.NewTextHandler(io.Discard, nil))
}

func testConfig(dir string) Config {
	return Config{
		Dir:                    dir,
		SegmentSize:            64 << 10,
		QueueFileEntries:       16,
		FlushInterval:          20 * time.Millisecond,
		QueueFlushInterval:     50 * time.Millisecond,
		RetentionCheckInterval: time.Hour,
		Parser:                 testParser,
		Logger:                 quietLogger(),
		// make test runs the package a second time with every append copied into the mapping.
		WriteThroughMapping: os.Getenv("PETREL_WRITE_THROUGH_MAPPING") == "1",
	}
}

func mustOpen(t tb, cfg Config) *Store {
	t.Helper()
	s, err := Open(cfg)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	return s
}

// abandon simulates kill -9: goroutines stop, nothing is flushed or checkpointed, the prepared
// segment is left on disk, everything is unmapped (the page cache keeps what was written).
func (s *Store) abandon() {
	s.mu.Lock()
	s.closed = true
	s.closedFlag.Store(true)
	s.mu.Unlock()
	close(s.stop)
	s.wg.Wait()
	s.fmu.Lock()
	s.flushDone = true
	ws := s.waiters
	s.waiters = nil
	s.fmu.Unlock()
	for _, w := range ws {
		w.cb(ErrClosed)
	}
	s.amu.Lock()
	if p := s.prepared; p != nil {
		s.prepared = nil
		p.release()
	}
	s.amu.Unlock()
	s.gcMu.Lock()
	s.gcInline = true
	s.gcMu.Unlock()
	s.drainGarbage()
	s.releaseAll()
	_ = s.lock.Close()
}

// rec is the model of one appended batch (or, with control set, of a deletion record).
type rec struct {
	control bool
	topic   string
	qid     int32
	base    int64
	count   int32
	tag     uint32
	phys    int64
	size    int
	payload []byte
	epoch   uint32
	ts      int64 // store timestamp
}

type qkey struct {
	topic string
	qid   int32
}

// model is what the store should contain.
type model struct {
	queues map[qkey][]rec
	all    []rec // in log order, deletion records included
	// deletions are the topic deletions made, oldest first, with the queues each removed: a
	// truncation below one undoes it.
	deletions []modelDeletion
}

// modelDeletion is one topic deletion of the model.
type modelDeletion struct {
	phys   int64
	topic  string
	queues map[qkey][]rec
}

// deleteTopic records topic's deletion by a record at phys of size bytes.
func (m *model) deleteTopic(topic string, phys int64, size int, epoch uint32) {
	d := modelDeletion{phys: phys, topic: topic, queues: map[qkey][]rec{}}
	for k, rs := range m.queues {
		if k.topic == topic {
			d.queues[k] = rs
			delete(m.queues, k)
		}
	}
	m.deletions = append(m.deletions, d)
	m.all = append(m.all, rec{control: true, topic: topic, phys: phys, size: size, epoch: epoch, count: 1})
}

func newModel() *model { return &model{queues: map[qkey][]rec{}} }

func (m *model) maxOffset(k qkey) int64 {
	rs := m.queues[k]
	if len(rs) == 0 {
		return 0
	}
	return rs[len(rs)-1].base + int64(rs[len(rs)-1].count)
}

func (m *model) add(r rec) {
	k := qkey{r.topic, r.qid}
	m.queues[k] = append(m.queues[k], r)
	m.all = append(m.all, r)
}

// truncate keeps the batches below physical offset end; a deletion record it cuts is undone.
func (m *model) truncate(end int64) {
	n := sort.Search(len(m.all), func(i int) bool { return m.all[i].phys >= end })
	m.all = m.all[:n]
	for len(m.deletions) > 0 && m.deletions[len(m.deletions)-1].phys >= end {
		d := m.deletions[len(m.deletions)-1]
		m.deletions = m.deletions[:len(m.deletions)-1]
		for k := range m.queues {
			if k.topic == d.topic {
				delete(m.queues, k) // created after the deletion: past end
			}
		}
		for k, rs := range d.queues {
			m.queues[k] = rs
		}
	}
	for k, rs := range m.queues {
		j := sort.Search(len(rs), func(i int) bool { return rs[i].phys >= end })
		if j == 0 {
			delete(m.queues, k)
		} else {
			m.queues[k] = rs[:j]
		}
	}
}

func (m *model) keys() []qkey {
	var ks []qkey
	for k := range m.queues {
		ks = append(ks, k)
	}
	sort.Slice(ks, func(i, j int) bool {
		if ks[i].topic != ks[j].topic {
			return ks[i].topic < ks[j].topic
		}
		return ks[i].qid < ks[j].qid
	})
	return ks
}

// deleteRec deletes topic in the store and the model, in epoch.
func deleteRec(t tb, s *Store, m *model, topic string, epoch uint32) AppendResult {
	t.Helper()
	res, err := s.DeleteTopic([]byte(topic), makeDeletion(topic), epoch, testStamp)
	if err != nil {
		t.Fatalf("DeleteTopic(%s): %v", topic, err)
	}
	m.deleteTopic(topic, res.PhysicalOffset, res.Size, epoch)
	m.all[len(m.all)-1].ts = res.StoreTimestamp
	s.AllowTopic([]byte(topic))
	return res
}

func appendRec(t tb, s *Store, m *model, topic string, qid int32, count int32, payload []byte) rec {
	t.Helper()
	return appendRecEpoch(t, s, m, topic, qid, count, payload, 0)
}

// appendRecEpoch is appendRec in a master epoch.
func appendRecEpoch(t tb, s *Store, m *model, topic string, qid int32, count int32, payload []byte, epoch uint32) rec {
	t.Helper()
	return appendRecAt(t, s, m, topic, qid, count, payload, epoch, -1)
}

// appendRecAt is appendRecEpoch, with ts (when not negative) stamped into the batch in place of
// the store timestamp Append chose, as an earlier version's clock may have stamped it.
func appendRecAt(t tb, s *Store, m *model, topic string, qid int32, count int32, payload []byte, epoch uint32, ts int64) rec {
	t.Helper()
	tag := uint32(len(payload)) * 7
	stamp := testStamp
	if ts >= 0 {
		stamp = stampAt(ts)
	}
	res, err := s.Append([]byte(topic), qid, makeBatch(topic, qid, count, tag, payload), count, tag, epoch, stamp)
	if err != nil {
		t.Fatalf("Append(%s/%d): %v", topic, qid, err)
	}
	k := qkey{topic, qid}
	if want := m.maxOffset(k); res.BaseQueueOffset != want {
		t.Fatalf("Append(%s/%d): base %d, want %d", topic, qid, res.BaseQueueOffset, want)
	}
	if ts < 0 {
		ts = res.StoreTimestamp
	}
	r := rec{topic: topic, qid: qid, base: res.BaseQueueOffset, count: count, tag: tag, phys: res.PhysicalOffset, size: res.Size, payload: payload, epoch: epoch, ts: ts}
	m.add(r)
	return r
}

// stampAt is testStamp with the store timestamp ts in place of the one the store passes.
func stampAt(ts int64) StampFunc {
	return func(dst []byte, phys, base, _ int64, epoch uint32) { testStamp(dst, phys, base, ts, epoch) }
}

func randPayload(r *rand.Rand, lo, hi int) []byte {
	p := make([]byte, lo+r.IntN(hi-lo+1))
	for i := range p {
		p[i] = byte(r.Uint32())
	}
	return p
}

// splitBatches splits concatenated stored batches.
func splitBatches(t tb, b []byte) [][]byte {
	t.Helper()
	var out [][]byte
	for len(b) > 0 {
		if len(b) < 8 {
			t.Fatalf("trailing %d bytes", len(b))
		}
		n := int(binary.BigEndian.Uint32(b))
		if n > len(b) || n < 8 {
			t.Fatalf("bad batch size %d of %d", n, len(b))
		}
		out = append(out, b[:n])
		b = b[n:]
	}
	return out
}

// checkBatch checks a stored batch against its model record.
func checkBatch(t tb, b []byte, r rec) {
	t.Helper()
	info, err := testParser(b, r.phys)
	if err != nil {
		t.Fatalf("batch %s/%d@%d: %v", r.topic, r.qid, r.base, err)
	}
	if info.Size != len(b) || string(info.Topic) != r.topic || info.QueueID != r.qid || info.BaseQueueOffset != r.base ||
		info.Count != r.count || info.TagHash != r.tag || info.Epoch != r.epoch || !bytes.Equal(payloadOf(b), r.payload) {
		t.Fatalf("batch %s/%d@%d mismatch: %+v", r.topic, r.qid, r.base, info)
	}
}

// verifyQueue reads the whole queue in steps and compares it with the model.
func verifyQueue(t tb, s *Store, m *model, k qkey, maxMsgs int32, maxBytes int) {
	t.Helper()
	rs := m.queues[k]
	var rr ReadResult
	defer rr.Release()
	if s.MaxOffset([]byte(k.topic), k.qid) != m.maxOffset(k) {
		t.Fatalf("%v: MaxOffset %d, want %d", k, s.MaxOffset([]byte(k.topic), k.qid), m.maxOffset(k))
	}
	off := int64(0)
	if len(rs) > 0 {
		off = rs[0].base
	}
	i := 0
	for i < len(rs) {
		if err := s.Read([]byte(k.topic), k.qid, off, maxMsgs, maxBytes, &rr); err != nil {
			t.Fatalf("%v: Read(%d): %v", k, off, err)
		}
		if rr.Status != Found {
			t.Fatalf("%v: Read(%d): status %v (min %d max %d)", k, off, rr.Status, rr.MinOffset, rr.MaxOffset)
		}
		var got [][]byte
		for _, sl := range rr.Slices {
			got = append(got, splitBatches(t, sl.B)...)
		}
		if len(got) == 0 {
			t.Fatalf("%v: Read(%d) returned nothing", k, off)
		}
		for _, b := range got {
			checkBatch(t, b, rs[i])
			i++
		}
		if rr.NextQueueOffset != rs[i-1].base+int64(rs[i-1].count) {
			t.Fatalf("%v: next %d", k, rr.NextQueueOffset)
		}
		off = rr.NextQueueOffset
		rr.Release()
	}
	if err := s.Read([]byte(k.topic), k.qid, off, maxMsgs, maxBytes, &rr); err != nil || rr.Status != NoNewMessage && len(rs) > 0 {
		t.Fatalf("%v: Read at end %d: %v %v", k, off, rr.Status, err)
	}
}

// verifyAll checks every queue of the model and that the store has no other queue.
func verifyAll(t tb, s *Store, m *model) {
	t.Helper()
	var want []QueueID
	for _, k := range m.keys() {
		want = append(want, QueueID{k.topic, k.qid})
		verifyQueue(t, s, m, k, 7, 1<<20)
	}
	got := s.Queues()
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("Queues() = %v, want %v", got, want)
	}
}

// checkEnd checks LogEndOffset against the model's last batch.
func checkEnd(t tb, s *Store, m *model) {
	t.Helper()
	var end int64
	if len(m.all) > 0 {
		last := m.all[len(m.all)-1]
		end = last.phys + int64(last.size)
	}
	if s.LogEndOffset() != end {
		t.Fatalf("LogEndOffset %d, want %d", s.LogEndOffset(), end)
	}
}

func segmentFiles(t tb, dir string) []string {
	t.Helper()
	ents, err := os.ReadDir(filepath.Join(dir, "commitlog"))
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range ents {
		out = append(out, filepath.Join(dir, "commitlog", e.Name()))
	}
	sort.Strings(out)
	return out
}

func segPath(dir string, base int64) string {
	return filepath.Join(dir, "commitlog", fileName(base))
}

func writeAt(t tb, path string, off int64, b []byte) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.WriteAt(b, off); err != nil {
		t.Fatal(err)
	}
}

func readAt(t tb, path string, off int64, n int) []byte {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	b := make([]byte, n)
	if _, err := f.ReadAt(b, off); err != nil {
		t.Fatal(err)
	}
	return b
}

// rescanned closes s, removes its checkpoint and reopens it, closed when the test ends: a
// recovery that scans the whole log must find what the model holds (verifyAll). It returns the
// reopened store.
func rescanned(t *testing.T, s *Store, cfg Config, m *model) *Store {
	t.Helper()
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	os.Remove(filepath.Join(cfg.Dir, checkpointName))
	s = mustOpen(t, cfg)
	t.Cleanup(func() { s.Close() })
	verifyAll(t, s, m)
	return s
}

// tb is the part of testing.TB the helpers need; *rapid.T has it too.
type tb interface {
	Helper()
	Fatal(args ...any)
	Fatalf(format string, args ...any)
}
