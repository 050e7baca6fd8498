package broker

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/petrel-mq/petrel/protocol"
)

// TestRestartCutsStaleBatchAtEnd: 300 messages on 2 queues, the broker stopped cleanly; a copy
// of batch 10 is placed at the log end with only its physical-offset field (outside the CRC)
// patched to that position, so it passes the CRC and the position check. After the restart no
// queue's max offset goes back and every acknowledged message is there: the copy does not
// continue its queue, so recovery cuts it, and says so in brokerStatus. (Recovery used to index
// it and truncate its queue back to the copy's base queue offset: consumers lost the messages
// after it.)
func TestRestartCutsStaleBatchAtEnd(t *testing.T) {
	dir := t.TempDir()
	cfg := testConfig(dir)
	b := startBroker(t, cfg)
	c := dial(t, b.Addr())
	createTopic(t, c, "S", 2)
	for i := range 30 {
		bodies := make([]string, 10)
		for j := range bodies {
			bodies[j] = fmt.Sprintf("m%d-%d", i, j)
		}
		send(t, c, "S", int32(i%2), bodies...)
	}
	c.Close()
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}

	batches, end := storedBatches(t, dir)
	if len(batches) != 30 {
		t.Fatalf("%d batches in the log, want 30", len(batches))
	}
	stale := batches[10]
	h, err := protocol.ReadBatchHeader(stale)
	if err != nil {
		t.Fatal(err)
	}
	protocol.StampBatch(stale, int64(end), h.BaseQueueOffset, h.StoreTimestamp, h.Epoch) // only the physical offset changes
	writeLogAt(t, dir, int64(end), stale)

	b = startBroker(t, cfg)
	defer b.Close()
	c = dial(t, b.Addr())
	for q := int32(0); q < 2; q++ {
		if got := b.store.MaxOffset([]byte("S"), q); got != 150 {
			t.Errorf("queue %d: max offset %d after the restart, want 150", q, got)
		}
		var got []string
		for off := int64(0); off < 150; {
			p := pull(t, c, "S", q, off, 0)
			if p.hdr.Result != protocol.PullFound {
				t.Fatalf("queue %d offset %d after the restart: %+v", q, off, p.hdr)
			}
			got = append(got, p.bodies...)
			off = p.hdr.NextQueueOffset
		}
		for i, body := range got {
			if want := fmt.Sprintf("m%d-%d", 2*(i/10)+int(q), i%10); body != want {
				t.Fatalf("queue %d offset %d: %q, want %q", q, i, body, want)
			}
		}
	}
	if r := send(t, c, "S", h.QueueID, "after"); r.QueueOffset != 150 {
		t.Fatalf("the next send to queue %d got offset %d, want 150", h.QueueID, r.QueueOffset)
	}
	if cut := recoveryCut(b); !strings.Contains(cut, fmt.Sprintf("from=%d ", end)) {
		t.Fatalf("brokerStatus commitLogRecoveryCut = %q, want the cut from %d", cut, end)
	}
}

// TestStaticMasterStartsInItsLogsEpoch: a static master without an elected file (removed, or
// the roles swapped in the config files) whose log holds batches of epoch 3 starts in epoch 3,
// not 0: the commit log refuses batches of an older epoch than its newest (a restart would cut
// them), so sends would fail.
func TestStaticMasterStartsInItsLogsEpoch(t *testing.T) {
	dir := t.TempDir()
	cfg := testConfig(dir)
	s := openTestStoreCfg(t, dir, cfg.MappedFileSizeCommitLog)
	appendStamped(t, s, 0, 3, "from epoch 3")
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	b := startBroker(t, cfg)
	c := dial(t, b.Addr())
	createTopic(t, c, "T", 1)
	if r := send(t, c, "T", 0, "now"); r.QueueOffset != 1 {
		t.Fatalf("send: offset %d, want 1", r.QueueOffset)
	}
	if e := b.role.Load().Epoch; e != 3 {
		t.Fatalf("the master's epoch is %d, want 3", e)
	}
	c.Close()
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	b = startBroker(t, cfg)
	defer b.Close()
	if got := b.store.MaxOffset([]byte("T"), 0); got != 2 || b.store.Recovery().Cut {
		t.Fatalf("after the restart: max offset %d, recovery %+v", got, b.store.Recovery())
	}
}

// storedBatches returns a copy of every batch of the first commit-log segment, in log order,
// and where the log ends (the first segment holds the whole log).
func storedBatches(t *testing.T, dir string) ([][]byte, int) {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(dir, "commitlog", fmt.Sprintf("%020d", 0)))
	if err != nil {
		t.Fatal(err)
	}
	var out [][]byte
	end := 0
	for n := protocol.PeekBatchSize(data[end:]); n != 0; n = protocol.PeekBatchSize(data[end:]) {
		out = append(out, append([]byte(nil), data[end:end+n]...))
		end += n
	}
	return out, end
}

// writeLogAt writes b into the first commit-log segment at offset off.
func writeLogAt(t *testing.T, dir string, off int64, b []byte) {
	t.Helper()
	f, err := os.OpenFile(filepath.Join(dir, "commitlog", fmt.Sprintf("%020d", 0)), os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.WriteAt(b, off); err != nil {
		t.Fatal(err)
	}
}

// recoveryCut returns brokerStatus's commitLogRecoveryCut.
func recoveryCut(b *Broker) string {
	for _, kv := range b.runtimeInfo().Entries {
		if kv.Key == "commitLogRecoveryCut" {
			return kv.Value
		}
	}
	return ""
}

// TestRestartCutsStaleBatchOfDeletedTopic: a topic is deleted, and a copy of the first batch of
// one of its queues (queue offset 0) is placed at the log end with its physical offset patched.
// The topic's queues are empty after the deletion record, so no queue offset gives the copy
// away; its store timestamp does (the record is stamped after every batch before it, and no
// batch after it goes below it): the restart cuts it, and once the topic is created again its
// queue serves only what was sent to it afresh. (Recovery used to index the copy in the empty
// queue: consumers of the topic created again read the deleted message.)
func TestRestartCutsStaleBatchOfDeletedTopic(t *testing.T) {
	dir := t.TempDir()
	cfg := testConfig(dir)
	b := startBroker(t, cfg)
	c := dial(t, b.Addr())
	createTopic(t, c, "D", 2)
	createTopic(t, c, "K", 1)
	for i := range 10 {
		send(t, c, "D", int32(i%2), fmt.Sprintf("deleted-%d", i))
		send(t, c, "K", 0, "kept")
	}
	if existed, err := deleteTopicOn(t, c, "D"); err != nil || !existed {
		t.Fatalf("delete: %v, existed %t", err, existed)
	}
	send(t, c, "K", 0, "after the deletion")
	c.Close()
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}

	batches, end := storedBatches(t, dir)
	var stale []byte
	for _, sb := range batches {
		if h, err := protocol.ReadBatchHeader(sb); err == nil && string(h.Topic) == "D" && h.QueueID == 1 && h.BaseQueueOffset == 0 {
			stale = sb
			protocol.StampBatch(stale, int64(end), 0, h.StoreTimestamp, h.Epoch) // only the physical offset changes
		}
	}
	if stale == nil {
		t.Fatal("no batch of D/1 at queue offset 0")
	}
	writeLogAt(t, dir, int64(end), stale)

	b = startBroker(t, cfg)
	defer b.Close()
	c = dial(t, b.Addr())
	createTopic(t, c, "D", 2)
	if p := pull(t, c, "D", 1, 0, 0); len(p.bodies) != 0 {
		t.Fatalf("queue 1 of the topic created again serves %q at offsets %v before anything was sent to it", p.bodies, p.offs)
	}
	if cut := recoveryCut(b); !strings.Contains(cut, fmt.Sprintf("from=%d ", end)) || !strings.Contains(cut, "store timestamp") {
		t.Fatalf("brokerStatus commitLogRecoveryCut = %q, want the cut from %d", cut, end)
	}
	if r := send(t, c, "D", 1, "afresh"); r.QueueOffset != 0 {
		t.Fatalf("the first send to the topic created again got offset %d, want 0", r.QueueOffset)
	}
	if p := pull(t, c, "D", 1, 0, 0); len(p.bodies) != 1 || p.bodies[0] != "afresh" {
		t.Fatalf("queue 1 of the topic created again serves %q, want only what was sent to it", p.bodies)
	}
	if got := b.store.MaxOffset([]byte("K"), 0); got != 11 {
		t.Fatalf("the other topic's max offset %d, want 11", got)
	}
}

// TestRestartCutsStaleDeletionRecord: a copy of a topic's deletion record is placed at the log
// end, with its physical offset and store timestamp patched to pass there. Applied, it would
// delete the topic created again since, and the messages acknowledged to it. The record carries
// its broker-assigned fields under its CRC, so the copy fails the parser: the restart cuts it
// and the topic keeps its messages.
func TestRestartCutsStaleDeletionRecord(t *testing.T) {
	dir := t.TempDir()
	cfg := testConfig(dir)
	b := startBroker(t, cfg)
	c := dial(t, b.Addr())
	createTopic(t, c, "D", 1)
	send(t, c, "D", 0, "deleted")
	if existed, err := deleteTopicOn(t, c, "D"); err != nil || !existed {
		t.Fatalf("delete: %v, existed %t", err, existed)
	}
	createTopic(t, c, "D", 1)
	if r := send(t, c, "D", 0, "acknowledged after the re-creation"); r.QueueOffset != 0 {
		t.Fatalf("send to the topic created again: offset %d", r.QueueOffset)
	}
	c.Close()
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}

	batches, end := storedBatches(t, dir)
	last, err := protocol.ReadBatchHeader(batches[len(batches)-1])
	if err != nil {
		t.Fatal(err)
	}
	var stale []byte
	for _, sb := range batches {
		if a, _ := protocol.BatchAttributes(sb); a&protocol.AttrControl != 0 {
			stale = sb
		}
	}
	if stale == nil {
		t.Fatal("no deletion record in the log")
	}
	h, err := protocol.ReadBatchHeader(stale)
	if err != nil {
		t.Fatal(err)
	}
	protocol.StampBatch(stale, int64(end), 0, last.StoreTimestamp, h.Epoch) // in order, where it lies
	writeLogAt(t, dir, int64(end), stale)

	b = startBroker(t, cfg)
	defer b.Close()
	c = dial(t, b.Addr())
	if got := b.store.MaxOffset([]byte("D"), 0); got != 1 {
		t.Fatalf("the topic created again has max offset %d after the restart, want 1", got)
	}
	if p := pull(t, c, "D", 0, 0, 0); len(p.bodies) != 1 || p.bodies[0] != "acknowledged after the re-creation" {
		t.Fatalf("the topic created again serves %q", p.bodies)
	}
	if cut := recoveryCut(b); !strings.Contains(cut, fmt.Sprintf("from=%d ", end)) {
		t.Fatalf("brokerStatus commitLogRecoveryCut = %q, want the cut from %d", cut, end)
	}
}
