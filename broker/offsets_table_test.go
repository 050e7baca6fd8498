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
	for _, tc := range []struct {
		name           string
		cur            int64
		held           bool
		off, max       int64
		want           int64
		store, clamped bool
	}{
		{"first commit", 0, false, 5, 10, 5, true, false},
		{"first commit at the max", 0, false, 10, 10, 10, true, false},
		{"first commit beyond the max", 0, false, 100, 10, 10, true, true},
		{"first commit on an empty queue", 0, false, 0, 0, 0, true, false},
		{"first commit beyond an empty queue", 0, false, 100, 0, 0, true, true},
		{"forward", 3, true, 7, 10, 7, true, false},
		{"forward to the max", 3, true, 10, 10, 10, true, false},
		{"forward beyond the max", 3, true, 100, 10, 10, true, true},
		{"the same", 7, true, 7, 10, 7, false, false},
		{"never backwards", 7, true, 3, 10, 7, false, false},
		{"held at the max, commit beyond it", 10, true, 11, 10, 10, false, true},
		{"held beyond the max, lower commit", 100, true, 4, 10, 10, true, true},
		{"held beyond the max, commit beyond it", 100, true, 100, 10, 10, true, true},
		{"held beyond the max, commit at it", 100, true, 10, 10, 10, true, true},
		{"held beyond an empty queue", 100, true, 100, 0, 0, true, true},
		{"the store not open yet", 100, true, 200, 1 << 62, 200, true, false},
	} {
		d := decideOffset(tc.cur, tc.held, tc.off, tc.max)
		if d.off != tc.want || d.store != tc.store || d.clamped != tc.clamped {
			t.Errorf("%s: decideOffset(%d, %v, %d, %d) = %+v; want off %d, store %v, clamped %v",
				tc.name, tc.cur, tc.held, tc.off, tc.max, d, tc.want, tc.store, tc.clamped)
		}
	}
}

// TestOffsetTableChecksTheLog: commits, merges and offsets loaded from disk are held at most at
// their queue's max offset, and clampToLog lowers what a shrunk log no longer covers.
func TestOffsetTableChecksTheLog(t *testing.T) {
	dir := t.TempDir()
	maxOff := map[string]int64{"T/0": 10, "T/1": 0}
	lookup := func(topic []byte, qid int32) int64 { return maxOff[fmt.Sprintf("%s/%d", topic, qid)] }
	tbl, err := openOffsetTable(dir)
	if err != nil {
		t.Fatal(err)
	}
	// Before the store is open nothing is checked (offsets loaded from disk are clamped once it is).
	tbl.commit([]byte("g"), []byte("T"), 0, 50)
	tbl.maxOffset = lookup
	if n, first := tbl.clampToLog(); n != 1 || first.Offset != 50 || first.Max != 10 {
		t.Fatalf("clampToLog lowered %d, first %v; want 1 offset, 50 to 10", n, first)
	}
	if d, m := tbl.commit([]byte("g"), []byte("T"), 0, 10); d.clamped || d.store || m != 10 {
		t.Fatalf("commit at the max: %+v, max %d", d, m)
	}
	if d, _ := tbl.commit([]byte("g"), []byte("T"), 1, 3); !d.clamped || d.off != 0 {
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
		if got, ok := tbl.get([]byte(w.group), []byte(w.topic), w.qid); !ok || got != w.want {
			t.Errorf("%s on %s/%d: %d %v; want %d", w.group, w.topic, w.qid, got, ok, w.want)
		}
	}
	// The log was reset: every queue is empty.
	maxOff["T/0"] = 0
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
