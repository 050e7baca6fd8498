package client

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/petrel-mq/petrel/internal/fakebroker"
	"github.com/petrel-mq/petrel/protocol"
)

// TestAdminPull reads one queue at chosen offsets from the master and from a slave that holds
// part of it, without a consumer group.
func TestAdminPull(t *testing.T) {
	fc := fakebroker.New(t)
	g := fc.AddGroup("a", 1, map[string]int32{"T": 1}).Members()
	master, slave := g[0], g[1]
	c := newTestClient(t, fc.Addr())
	p := newTestProducer(t, c)
	produceSync(t, p, "T", 0, 6)
	admin := NewAdmin(c)
	ctx := testCtx(t, 10*time.Second)
	mq := MessageQueue{Topic: "T", BrokerName: "a", QueueID: 0}

	ans, err := admin.Pull(ctx, master.Addr(), mq, 2, 3)
	if err != nil || ans.Result != protocol.PullFound || len(ans.Messages) != 3 || ans.NextOffset != 5 || ans.MinOffset != 0 || ans.MaxOffset != 6 {
		t.Fatalf("pull at 2: %+v, %v", ans, err)
	}
	for i, m := range ans.Messages {
		off := int64(2 + i)
		if m.QueueOffset != off || string(m.Body) != fmt.Sprintf("m%06d", off) || m.ProducerID != p.ID() || m.Sequence != int32(off) ||
			m.BrokerAddr != master.Addr() || m.BrokerID != -1 || m.Topic != "T" || m.BrokerName != "a" {
			t.Fatalf("message %d: %+v", i, m)
		}
	}
	// The messages own their bytes: a later pull does not overwrite them.
	if _, err := admin.Pull(ctx, master.Addr(), mq, 0, 6); err != nil || string(ans.Messages[0].Body) != "m000002" {
		t.Fatalf("after another pull: %q, %v", ans.Messages[0].Body, err)
	}
	if ans, err := admin.Pull(ctx, master.Addr(), mq, 6, 10); err != nil || ans.Result != protocol.PullNoNewMessage || len(ans.Messages) != 0 || ans.NextOffset != 6 {
		t.Fatalf("pull at the end: %+v, %v", ans, err)
	}
	if ans, err := admin.Pull(ctx, master.Addr(), mq, 9, 10); err != nil || ans.Result != protocol.PullOffsetMoved || ans.NextOffset != 6 {
		t.Fatalf("pull past the end: %+v, %v", ans, err)
	}

	// A slave holding offsets below 4 answers "not here" past them.
	slave.SetReplicatedUpTo(4)
	if ans, err := admin.Pull(ctx, slave.Addr(), mq, 0, 10); err != nil || ans.Result != protocol.PullFound || len(ans.Messages) != 4 || ans.NextOffset != 4 {
		t.Fatalf("slave pull at 0: %+v, %v", ans, err)
	}
	if ans, err := admin.Pull(ctx, slave.Addr(), mq, 4, 10); err != nil || ans.Result != protocol.PullNotHere || len(ans.Messages) != 0 {
		t.Fatalf("slave pull at 4: %+v, %v", ans, err)
	}

	if _, err := admin.Pull(ctx, master.Addr(), MessageQueue{Topic: "Nope", BrokerName: "a"}, 0, 1); !errors.Is(err, ErrTopicNotExist) {
		t.Fatalf("unknown topic: %v", err)
	}
	master.Group().Corrupt("T", 0, 3)
	ans, err = admin.Pull(ctx, master.Addr(), mq, 2, 10)
	if !errors.Is(err, ErrCorruptBatch) || ans == nil || len(ans.Messages) != 1 || ans.NextOffset != 3 {
		t.Fatalf("corrupt batch at 3: %+v, %v", ans, err)
	}
}
