package ha

import (
	"bytes"
	"context"
	"errors"
	"io"
	"reflect"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"github.com/petrel-mq/petrel/protocol"
)

// TestDivergedSlaveAcknowledgesNothing: a pull whose epochs show the slave's log is not a
// prefix of the master's is answered out of range with where the logs part, and acknowledges
// nothing, even when its offset is a batch boundary of the master's log.
func TestDivergedSlaveAcknowledgesNothing(t *testing.T) {
	mlog := newMemLog(64 << 10)
	fill(mlog, 0, 10, 100)
	size := int64(100 + memHeader)
	// The master's history: epoch 1 from 0, epoch 3 from 4 batches in (it never had epoch 2).
	epochs := []EpochStart{{1, 0}, {3, 4 * size}}
	m := startMaster(t, mlog, MasterConfig{Epochs: func() []EpochStart { return epochs }})
	c := dialMaster(t, m)
	// The slave's last epoch is 2, from batch 3 on, and it asks from batch 6: a boundary of the
	// master's log, but its batches 3-5 are epoch 2's, not the master's.
	req := protocol.HAPullRequest{BrokerName: "broker-a", SlaveID: 2, Offset: 6 * size, MaxBytes: 1 << 20, LastEpoch: 2, LastEpochStart: 3 * size}
	h := pull(t, c, req)
	if h.Result != protocol.HAOutOfRange || h.DivergingEpoch != 1 || h.TruncateTo != 4*size {
		t.Fatalf("diverged pull: %+v, want out of range naming epoch 1, which ends at %d on the master", h, 4*size)
	}
	if a := ackedOf(m, 2); a != -1 && a != -2 {
		t.Fatalf("a diverged slave's pull acknowledged %d", a)
	}
	// The same slave after cutting to 3*size: its last epoch is now 1, a prefix of the master's.
	req.Offset, req.LastEpoch, req.LastEpochStart = 3*size, 1, 0
	if h := pull(t, c, req); h.Result != protocol.HAOK || h.RawLength == 0 {
		t.Fatalf("pull after the cut: %+v", h)
	}
	if a := ackedOf(m, 2); a != 3*size {
		t.Fatalf("acked %d after the cut, want %d", a, 3*size)
	}
	// Epoch 1 ends at 4*size on the master: a slave of epoch 1 past it diverged.
	req.Offset = 5 * size
	if h := pull(t, c, req); h.Result != protocol.HAOutOfRange || h.DivergingEpoch != 1 || h.TruncateTo != 4*size {
		t.Fatalf("epoch 1 past its end on the master: %+v", h)
	}
	// A slave that keeps no epochs (static roles) is not checked.
	c2 := dialMaster(t, m)
	if h := pull(t, c2, protocol.HAPullRequest{BrokerName: "broker-a", SlaveID: 3, Offset: 6 * size, MaxBytes: 1, LastEpochStart: -1}); h.Result != protocol.HAOK {
		t.Fatalf("pull without epochs: %+v", h)
	}
}

// TestLeaveAnswersOnceUncounted: a slave that asks to leave the in-sync set (before cutting its
// log) gets its answer only once the set without it is committed and the master no longer
// counts it; meanwhile it still counts (the committed set may still hold it), afterwards its
// acknowledgements bring it back only over a new connection.
func TestLeaveAnswersOnceUncounted(t *testing.T) {
	mlog, slog := newMemLog(64<<10), newMemLog(64<<10)
	fill(mlog, 0, 5, 100)
	release := make(chan struct{})
	var mu sync.Mutex
	var commits [][]SyncMember
	commit := func(slaves []SyncMember) error {
		mu.Lock()
		commits = append(commits, slaves)
		n := len(commits)
		mu.Unlock()
		if n > 1 && len(slaves) == 0 {
			<-release // the commit that drops the slave waits for the test
		}
		return nil
	}
	p := startPair(t, mlog, slog, MasterConfig{InSyncMaxLagTime: time.Hour, CommitSyncSet: commit},
		SlaveConfig{SlaveID: 2, MemberID: "b2"})
	p.waitEqual(t, 5*time.Second)
	eventually(t, 5*time.Second, "the slave counted", func() bool { return p.m.InSyncCount() == 1 })
	p.s.Close() // a slave stops replicating before it asks to leave

	answered := make(chan error, 1)
	go func() {
		answered <- RequestLeave(context.Background(), p.m.Addr(), protocol.HALeaveRequest{
			BrokerName: "broker-a", SlaveID: 2, MemberID: "b2", Epoch: p.m.Epoch(), TruncateTo: 100})
	}()
	eventually(t, 5*time.Second, "the commit without the slave", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(commits) >= 2
	})
	select {
	case err := <-answered:
		t.Fatalf("answered before the set without the slave was committed: %v", err)
	default:
	}
	if p.m.InSyncCount() != 1 {
		t.Fatal("the slave stopped counting before the set without it was committed")
	}
	close(release)
	if err := waitErr(t, answered, 5*time.Second); err != nil {
		t.Fatal(err)
	}
	if n := p.m.InSyncCount(); n != 0 {
		t.Fatalf("counted slaves after the leave: %d", n)
	}
	// A new connection of the slave (after its cut) may rejoin once caught up.
	s2 := startSlave(t, p.slog, p.m.Addr(), SlaveConfig{SlaveID: 2, MemberID: "b2"})
	_ = s2
	eventually(t, 5*time.Second, "the slave rejoins over a new connection", func() bool { return p.m.InSyncCount() == 1 })

	// A leave of another epoch is refused.
	err := RequestLeave(context.Background(), p.m.Addr(), protocol.HALeaveRequest{BrokerName: "broker-a", SlaveID: 2, Epoch: p.m.Epoch() + 1})
	if !errors.Is(err, protocol.StatusServiceNotAvailable) {
		t.Fatalf("leave of another epoch: %v", err)
	}
}

// TestConfirmedNeedsMinAcks: the confirmed offset advances only while at least MinAcks slaves
// count, never goes back, and is the live log end only with MinAcks 0 and no slave counted.
func TestConfirmedNeedsMinAcks(t *testing.T) {
	mlog, slog := newMemLog(64<<10), newMemLog(64<<10)
	fill(mlog, 0, 5, 100)
	m := startMaster(t, mlog, MasterConfig{MinAcks: 1, InitialConfirmed: 2 * (100 + memHeader), InSyncMaxLagTime: 300 * time.Millisecond})
	if got := m.ConfirmedOffset(); got != 2*(100+memHeader) {
		t.Fatalf("confirmed %d with no slave, want the initial %d", got, 2*(100+memHeader))
	}
	// NB: a master notices a closed connection only once the pull it holds is answered, so the
	// slave's pulls wait little: its Close below takes it out of the set within WaitMs.
	s := startSlave(t, slog, m.Addr(), SlaveConfig{WaitMs: 100})
	eventually(t, 5*time.Second, "confirmed reaches the log end", func() bool { return m.ConfirmedOffset() == mlog.LogEndOffset() })
	held := m.ConfirmedOffset()
	_ = s.Close()
	eventually(t, 5*time.Second, "the slave leaves the set", func() bool { return m.InSyncCount() == 0 })
	fill(mlog, 50, 5, 100)
	m.NotifyAppend(mlog.LogEndOffset())
	if got := m.ConfirmedOffset(); got != held {
		t.Fatalf("confirmed %d with no slave counted, want %d (held by the last in-sync set)", got, held)
	}

	alone := startMaster(t, mlog, MasterConfig{})
	if got := alone.ConfirmedOffset(); got != mlog.LogEndOffset() {
		t.Fatalf("MinAcks 0, no slave: confirmed %d, want the log end %d", got, mlog.LogEndOffset())
	}
}

// TestControlFSMAppliedIndex: the FSM tracks the index of the last command applied, refused
// commands included, carries it in its snapshots, restores snapshots of the first format (no
// index), and WaitApplied waits for an index.
func TestControlFSMAppliedIndex(t *testing.T) {
	f := NewControlFSM(nil, nil)
	apply := func(i uint64, c Command) {
		b, _ := c.MarshalBinary()
		f.Apply(&raft.Log{Index: i, Type: raft.LogCommand, Data: b})
	}
	apply(3, Command{Kind: CmdNewEpoch, MasterID: "b1"})
	apply(5, Command{Kind: CmdSetSyncStateSet, Epoch: 9, SyncStateSet: []string{"b1"}}) // refused: stale epoch
	if got := f.AppliedIndex(); got != 5 {
		t.Fatalf("applied index %d, want 5", got)
	}
	done := make(chan bool, 1)
	go func() { done <- f.WaitApplied(7, 5*time.Second) }()
	apply(7, Command{Kind: CmdSetSyncStateSet, Epoch: 1, SyncStateSet: []string{"b1", "b2"}})
	if !<-done {
		t.Fatal("WaitApplied(7) gave up after index 7 was applied")
	}
	if f.WaitApplied(8, 10*time.Millisecond) {
		t.Fatal("WaitApplied(8) succeeded before index 8")
	}
	snap, err := f.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	sink := &memSink{}
	if err := snap.Persist(sink); err != nil {
		t.Fatal(err)
	}
	g := NewControlFSM(nil, nil)
	if err := g.Restore(io.NopCloser(bytes.NewReader(sink.Bytes()))); err != nil {
		t.Fatal(err)
	}
	if g.AppliedIndex() != 7 || !reflect.DeepEqual(g.State(), f.State()) {
		t.Fatalf("restored index %d state %+v, want 7 %+v", g.AppliedIndex(), g.State(), f.State())
	}
	old := NewControlFSM(nil, nil)
	if err := old.Restore(io.NopCloser(bytes.NewReader(f.State().MarshalBinary()))); err != nil {
		t.Fatalf("a snapshot of the first format: %v", err)
	}
	if !reflect.DeepEqual(old.State(), f.State()) || old.AppliedIndex() != 0 {
		t.Fatalf("first-format restore: index %d state %+v", old.AppliedIndex(), old.State())
	}
	if err := old.Restore(io.NopCloser(bytes.NewReader([]byte{snapshotVersion, 1, 2}))); !errors.Is(err, ErrBadCommand) {
		t.Fatalf("a short snapshot: %v", err)
	}
}

type memSink struct{ bytes.Buffer }

func (s *memSink) ID() string    { return "mem" }
func (s *memSink) Cancel() error { return nil }
func (s *memSink) Close() error  { return nil }

// TestReadIndex: the leader's read index, waited for on a follower, makes the follower's state
// at least as new as the leader's; a follower gives no read index.
func TestReadIndex(t *testing.T) {
	nodes := startNodeGroup(t, nil)
	var l *RaftNode
	eventually(t, 5*time.Second, "a leader", func() bool {
		for _, n := range nodes {
			if n.IsLeader() {
				l = n
				return true
			}
		}
		return false
	})
	if err := l.Barrier(time.Second); err != nil {
		t.Fatal(err)
	}
	for i := range 5 {
		if err := l.Propose(Command{Kind: CmdNewEpoch, MasterID: l.cfg.SelfID, StartOffset: int64(i) * 100}, time.Second); err != nil {
			t.Fatal(err)
		}
	}
	idx, term, err := l.ReadIndex(time.Second)
	if err != nil || idx == 0 || term != l.Term() {
		t.Fatalf("read index %d term %d: %v", idx, term, err)
	}
	for _, n := range nodes {
		if n == l {
			continue
		}
		if _, _, err := n.ReadIndex(time.Second); !errors.Is(err, ErrNotLeader) {
			t.Fatalf("a follower's read index: %v", err)
		}
		if !n.WaitApplied(idx, 5*time.Second) {
			t.Fatalf("follower %s did not apply %d", n.cfg.SelfID, idx)
		}
		if got := n.State(); got.Epoch != 5 {
			t.Fatalf("follower %s after the read index: epoch %d, want 5", n.cfg.SelfID, got.Epoch)
		}
	}
}

// TestDivergedSlaveLearnsNoConfirmedOffset: the master's confirmed offset in an answer that found
// the slave's log diverged is about the master's history, not the slave's: the slave keeps what
// it knew (taken as its own, it would put its floor above the cut it has to make), and serves
// consumers nothing more because of it.
func TestDivergedSlaveLearnsNoConfirmedOffset(t *testing.T) {
	mlog, slog := newMemLog(64<<10), newMemLog(64<<10)
	fill(mlog, 0, 10, 100)
	fill(slog, 0, 6, 100) // the same first batches, then epoch 2's, which the master never had
	size := int64(100 + memHeader)
	epochs := []EpochStart{{1, 0}, {3, 4 * size}}
	m := startMaster(t, mlog, MasterConfig{Epochs: func() []EpochStart { return epochs }})
	diverged := make(chan Divergence, 1)
	s := startSlave(t, slog, m.Addr(), SlaveConfig{
		MemberID:    "b2",
		LastEpoch:   func() (uint32, int64) { return 2, 4 * size },
		DecidesCuts: true,
		Events: func(ev Event) {
			if o, ok := ev.(OutOfRange); ok {
				diverged <- o.Divergence
			}
		},
	})
	var h Divergence
	select {
	case h = <-diverged:
	case <-time.After(10 * time.Second):
		t.Fatal("no out-of-range answer")
	}
	if h.DivergingEpoch != 1 || h.TruncateTo != 4*size || h.MasterEnd != mlog.LogEndOffset() {
		t.Fatalf("answer %+v", h)
	}
	if got := s.ConfirmedOffset(); got != 0 {
		t.Fatalf("the diverged slave took the master's confirmed offset %d", got)
	}
	if got := s.Status().ConfirmedOffset; got != 0 {
		t.Fatalf("status confirmed %d", got)
	}
}
