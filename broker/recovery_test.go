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

	seg := filepath.Join(dir, "commitlog", fmt.Sprintf("%020d", 0))
	data, err := os.ReadFile(seg)
	if err != nil {
		t.Fatal(err)
	}
	var starts []int
	end := 0
	for protocol.PeekBatchSize(data[end:]) != 0 {
		starts = append(starts, end)
		end += protocol.PeekBatchSize(data[end:])
	}
	if len(starts) != 30 {
		t.Fatalf("%d batches in the log, want 30", len(starts))
	}
	h, err := protocol.ReadBatchHeader(data[starts[10]:])
	if err != nil {
		t.Fatal(err)
	}
	stale := append([]byte(nil), data[starts[10]:starts[10]+h.Size]...)
	protocol.StampBatch(stale, int64(end), h.BaseQueueOffset, h.StoreTimestamp, h.Epoch) // only the physical offset changes
	f, err := os.OpenFile(seg, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt(stale, int64(end)); err != nil {
		t.Fatal(err)
	}
	f.Close()

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
	info := map[string]string{}
	for _, kv := range b.runtimeInfo().Entries {
		info[kv.Key] = kv.Value
	}
	if cut := info["commitLogRecoveryCut"]; !strings.Contains(cut, fmt.Sprintf("from=%d ", end)) {
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
