package broker

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/petrel-mq/petrel/protocol"
)

func TestDecideOffset(t *testing.T) {
	const (
		x, y = 0xa1, 0xb2 // two lives of a queue
	)
	c := func(off int64, inc uint64) committed { return committed{off: off, inc: inc} }
	q := func(min, max int64, inc uint64) queueLife { return queueLife{min: min, max: max, inc: inc} }
	for _, tc := range []struct {
		name      string
		cur       committed
		held      bool
		in        committed
		q         queueLife
		elsewhere bool
		want      committed
		store     bool
		clamped   bool
		other     bool
	}{
		// Incarnations not known on either side (older peers): within the queue as before.
		{"first commit", c(0, 0), false, c(5, 0), q(0, 10, 0), false, c(5, 0), true, false, false},
		{"first commit at the max", c(0, 0), false, c(10, 0), q(0, 10, 0), false, c(10, 0), true, false, false},
		{"first commit on an empty queue", c(0, 0), false, c(0, 0), q(0, 0, 0), false, c(0, 0), true, false, false},
		{"forward", c(3, 0), true, c(7, 0), q(0, 10, 0), false, c(7, 0), true, false, false},
		{"forward to the max", c(3, 0), true, c(10, 0), q(0, 10, 0), false, c(10, 0), true, false, false},
		{"the same", c(7, 0), true, c(7, 0), q(0, 10, 0), false, c(7, 0), false, false, false},
		{"never backwards", c(7, 0), true, c(3, 0), q(0, 10, 0), false, c(7, 0), false, false, false},
		{"the store not open yet", c(100, 0), true, c(200, 0), q(0, 1<<62, 0), true, c(200, 0), true, false, false},
		// Beyond the max, this member's own view (a slave behind replication, held offsets):
		// lowered to the max.
		{"beyond the max on a slave", c(0, 0), false, c(100, 0), q(0, 10, 0), false, c(10, 0), true, true, false},
		{"beyond an empty queue on a slave", c(0, 0), false, c(100, x), q(0, 0, 0), false, c(0, x), true, true, false},
		{"held at the max, commit beyond it on a slave", c(10, 0), true, c(11, 0), q(0, 10, 0), false, c(10, 0), false, true, false},
		{"held beyond the max, lower commit", c(100, 0), true, c(4, 0), q(2, 10, 0), true, c(10, 0), true, true, false},
		{"held beyond an empty queue", c(100, 0), true, c(100, 0), q(0, 0, 0), false, c(0, 0), true, true, false},
		// Beyond the max from elsewhere on a master: to the max only when known to be of the
		// queue's life, else to the min, skipping no stored message.
		{"beyond the max, same life", c(3, x), true, c(100, x), q(2, 10, x), true, c(10, x), true, true, false},
		{"beyond the max, life not known", c(0, 0), false, c(100, 0), q(2, 10, x), true, c(2, x), true, true, false},
		{"beyond the max, no life yet", c(0, 0), false, c(364, x), q(0, 0, 0), true, c(0, x), true, true, false},
		{"beyond the max, life not known, lower held", c(1, x), true, c(100, 0), q(2, 10, x), true, c(2, x), true, true, false},
		// Another life of the queue.
		{"commit of another life", c(3, y), true, c(364, x), q(0, 10, y), true, c(3, y), false, false, true},
		{"commit of another life on a slave", c(0, 0), false, c(5, y), q(0, 10, x), false, c(0, 0), false, false, true},
		{"held of another life, lower commit", c(364, x), true, c(3, y), q(0, 10, y), true, c(3, y), true, false, false},
		{"held of another life, commit beyond it", c(2, x), true, c(9, y), q(0, 10, y), true, c(9, y), true, false, false},
		{"held of another life, commit not known", c(364, x), true, c(3, 0), q(0, 10, y), true, c(3, y), true, false, false},
		// Known lives that agree; an unknown one takes the queue's.
		{"held not known, commit of the life", c(7, 0), true, c(3, x), q(0, 10, x), true, c(7, x), true, false, false},
		{"same life forward", c(3, x), true, c(7, x), q(0, 10, x), true, c(7, x), true, false, false},
		{"queue's life not known keeps the commit's", c(3, x), true, c(7, y), q(0, 10, 0), true, c(7, y), true, false, false},
	} {
		d := decideOffset(tc.cur, tc.held, tc.in, tc.q, tc.elsewhere)
		if d.off != tc.want.off || d.inc != tc.want.inc || d.store != tc.store || d.clamped != tc.clamped || d.otherLife != tc.other {
			t.Errorf("%s: decideOffset(%+v, %v, %+v, %+v, %v) = %+v; want %+v, store %v, clamped %v, otherLife %v",
				tc.name, tc.cur, tc.held, tc.in, tc.q, tc.elsewhere, d, tc.want, tc.store, tc.clamped, tc.other)
		}
	}
}

func TestOverflowTarget(t *testing.T) {
	for _, tc := range []struct {
		name string
		inc  uint64
		q    queueLife
		want int64
	}{
		{"same life: the consumer read everything below the max", 7, queueLife{min: 0, max: 100, inc: 7}, 100},
		{"life not known by the consumer", 0, queueLife{min: 0, max: 100, inc: 7}, 0},
		{"life not known by the queue", 7, queueLife{min: 0, max: 100}, 0},
		{"neither known", 0, queueLife{min: 3, max: 100}, 3},
		{"retention moved the min", 0, queueLife{min: 40, max: 100, inc: 7}, 40},
	} {
		if got := overflowTarget(tc.inc, tc.q); got != tc.want {
			t.Errorf("%s: overflowTarget(%#x, %+v) = %d, want %d", tc.name, tc.inc, tc.q, got, tc.want)
		}
	}
}

// fakeQueues is a queueLog over a map "topic/queue" -> queueLife.
type fakeQueues map[string]queueLife

func (f fakeQueues) get(topic []byte, qid int32) queueLife {
	return f[fmt.Sprintf("%s/%d", topic, qid)]
}
func (f fakeQueues) MaxOffset(topic []byte, qid int32) int64 { return f.get(topic, qid).max }
func (f fakeQueues) MinOffset(topic []byte, qid int32) int64 { return f.get(topic, qid).min }
func (f fakeQueues) QueueIncarnation(topic []byte, qid int32) uint64 {
	return f.get(topic, qid).inc
}

// TestOffsetTableChecksTheLog: commits, merges and offsets loaded from disk are held at most at
// their queue's max offset, and clampToLog lowers what a shrunk log no longer covers.
func TestOffsetTableChecksTheLog(t *testing.T) {
	dir := t.TempDir()
	queues := fakeQueues{"T/0": {max: 10}, "T/1": {}}
	tbl, err := openOffsetTable(dir)
	if err != nil {
		t.Fatal(err)
	}
	// Before the store is open nothing is checked (offsets loaded from disk are clamped once it is).
	tbl.commit([]byte("g"), []byte("T"), 0, 50, 0, true)
	tbl.log = queues
	if n, first := tbl.clampToLog(); n != 1 || first.Offset != 50 || first.Max != 10 {
		t.Fatalf("clampToLog lowered %d, first %v; want 1 offset, 50 to 10", n, first)
	}
	if d, q := tbl.commit([]byte("g"), []byte("T"), 0, 10, 0, true); d.clamped || d.store || q.max != 10 {
		t.Fatalf("commit at the max: %+v, queue %+v", d, q)
	}
	if d, _ := tbl.commit([]byte("g"), []byte("T"), 1, 3, 0, true); !d.clamped || d.off != 0 {
		t.Fatalf("commit beyond an empty queue: %+v", d)
	}
	res := tbl.merge(&protocol.ConsumerOffsetTable{Offsets: []protocol.ConsumerOffset{
		{ConsumerGroup: "h", Topic: "T", QueueID: 0, Offset: 100},
		{ConsumerGroup: "h", Topic: "T", QueueID: 1, Offset: 0},
		{ConsumerGroup: "h", Topic: "Other", QueueID: 0, Offset: 7},
	}}, nil, time.Now())
	if res.moved != 3 || res.clamped != 2 || res.first.Offset != 100 || res.first.Max != 10 {
		t.Fatalf("merge: %+v", res)
	}
	for _, w := range []struct {
		group, topic string
		qid          int32
		want         int64
	}{{"g", "T", 0, 10}, {"g", "T", 1, 0}, {"h", "T", 0, 10}, {"h", "T", 1, 0}, {"h", "Other", 0, 0}} {
		if got, ok := tbl.get([]byte(w.group), []byte(w.topic), w.qid); !ok || got.off != w.want {
			t.Errorf("%s on %s/%d: %d %v; want %d", w.group, w.topic, w.qid, got.off, ok, w.want)
		}
	}
	// The log was reset: every queue is empty.
	queues["T/0"] = queueLife{}
	if n, _ := tbl.clampToLog(); n != 2 {
		t.Fatalf("clampToLog after a reset lowered %d offsets; want 2", n)
	}
	if err := tbl.persist(); err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(filepath.Join(dir, "consumerOffset.json"))
	if err != nil || strings.Contains(string(data), "10") {
		t.Fatalf("persisted table %s, %v: want every offset 0", data, err)
	}
}

// TestOffsetTableLives: an offset is kept with the incarnation it belongs to, across a restart;
// one of an earlier life of the queue is answered as the current life's min offset, replaced by
// the first commit of the new life, and a commit or merge of another life than the queue's is
// left out.
func TestOffsetTableLives(t *testing.T) {
	const old, cur = 0x01d, 0xc0
	dir := t.TempDir()
	queues := fakeQueues{"T/0": {min: 0, max: 400, inc: old}}
	tbl, err := openOffsetTable(dir)
	if err != nil {
		t.Fatal(err)
	}
	tbl.log = queues
	if d, _ := tbl.commit([]byte("g"), []byte("T"), 0, 364, old, true); !d.store || d.inc != old {
		t.Fatalf("commit: %+v", d)
	}
	if err := tbl.persist(); err != nil {
		t.Fatal(err)
	}
	if tbl, err = openOffsetTable(dir); err != nil {
		t.Fatal(err)
	}
	tbl.log = queues
	if got, ok := tbl.get([]byte("g"), []byte("T"), 0); !ok || got != (committed{364, old}) {
		t.Fatalf("after a restart: %+v %v, want 364 of %#x", got, ok, old)
	}
	// The queue is created again (topic re-created, store lost) and holds 8 messages.
	queues["T/0"] = queueLife{min: 0, max: 8, inc: cur}
	if got, _ := tbl.get([]byte("g"), []byte("T"), 0); got != (committed{0, cur}) {
		t.Fatalf("query of the old life's offset: %+v, want the new life's min 0 of %#x", got, cur)
	}
	if st := tbl.groupQueues("g", "T"); len(st) != 1 || st[0].ConsumerOffset != 0 {
		t.Fatalf("progress of the old life's offset: %+v, want 0", st)
	}
	if d, _ := tbl.commit([]byte("g"), []byte("T"), 0, 364, old, true); !d.otherLife || d.store {
		t.Fatalf("a commit of the old life: %+v, want it left out", d)
	}
	res := tbl.merge(&protocol.ConsumerOffsetTable{Offsets: []protocol.ConsumerOffset{
		{ConsumerGroup: "g", Topic: "T", QueueID: 0, Offset: 364, Incarnation: old},
	}, HasIncarnations: true}, func(string) bool { return true }, time.Now())
	if res.otherLife != 1 || res.moved != 0 {
		t.Fatalf("a merge of the old life: %+v", res)
	}
	if d, _ := tbl.commit([]byte("g"), []byte("T"), 0, 3, cur, true); !d.store || !d.replaced || d.off != 3 {
		t.Fatalf("the new life's first commit, below the old offset: %+v", d)
	}
	if got, _ := tbl.get([]byte("g"), []byte("T"), 0); got != (committed{3, cur}) {
		t.Fatalf("after the new life's commit: %+v", got)
	}
	if o := tbl.table().Offsets; len(o) != 1 || o[0].Incarnation != cur || o[0].Offset != 3 {
		t.Fatalf("table: %+v", o)
	}
}
