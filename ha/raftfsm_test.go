package ha

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"reflect"
	"testing"
	"time"

	"github.com/hashicorp/raft"
)

// raftNode is one member of a test group: a real hashicorp/raft node on an in-memory transport
// (so a test can partition it), with in-memory stores (tests only) and the ControlFSM.
type raftNode struct {
	id    string
	fsm   *ControlFSM
	trans *raft.InmemTransport
	r     *raft.Raft
}

func startRaftGroup(t *testing.T, n int) []*raftNode {
	t.Helper()
	var nodes []*raftNode
	var servers []raft.Server
	for i := 1; i <= n; i++ {
		id := fmt.Sprintf("b%d", i)
		addr, trans := raft.NewInmemTransport(raft.ServerAddress(id))
		nodes = append(nodes, &raftNode{id: id, fsm: NewControlFSM(nil, nil), trans: trans})
		servers = append(servers, raft.Server{ID: raft.ServerID(id), Address: addr})
	}
	for _, a := range nodes {
		for _, b := range nodes {
			if a != b {
				a.trans.Connect(b.trans.LocalAddr(), b.trans)
			}
		}
	}
	for _, nd := range nodes {
		cfg := raft.DefaultConfig()
		cfg.LocalID = raft.ServerID(nd.id)
		cfg.HeartbeatTimeout = 100 * time.Millisecond
		cfg.ElectionTimeout = 100 * time.Millisecond
		cfg.LeaderLeaseTimeout = 50 * time.Millisecond
		cfg.CommitTimeout = 5 * time.Millisecond
		cfg.LogOutput = io.Discard
		store := raft.NewInmemStore()
		r, err := raft.NewRaft(cfg, nd.fsm, store, store, raft.NewInmemSnapshotStore(), nd.trans)
		if err != nil {
			t.Fatal(err)
		}
		nd.r = r
		if err := r.BootstrapCluster(raft.Configuration{Servers: servers}).Error(); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() {
		for _, nd := range nodes {
			_ = nd.r.Shutdown().Error()
			_ = nd.trans.Close()
		}
	})
	return nodes
}

// leader waits for one of nodes to lead and returns it.
func leader(t *testing.T, nodes []*raftNode) *raftNode {
	t.Helper()
	var l *raftNode
	eventually(t, 5*time.Second, "a leader", func() bool {
		for _, nd := range nodes {
			if nd.r.State() == raft.Leader {
				l = nd
				return true
			}
		}
		return false
	})
	return l
}

func propose(nd *raftNode, c Command) error {
	b, _ := c.MarshalBinary()
	f := nd.r.Apply(b, time.Second)
	if err := f.Error(); err != nil {
		return err
	}
	if err, ok := f.Response().(error); ok {
		return err
	}
	return nil
}

// TestControlFSMOnRaft: three real Raft nodes agree on the control state; a partitioned leader
// loses its role, the new leader's epoch wins, and the deposed master's late in-sync change is
// refused on every member; snapshots restore the same state.
func TestControlFSMOnRaft(t *testing.T) {
	nodes := startRaftGroup(t, 3)
	l := leader(t, nodes)
	if act, _ := DecideLeader(l.id, l.fsm.State(), map[string]Candidate{l.id: {KnownConfirmed: -1, Electable: true}}); act != ActMaster {
		t.Fatalf("first leader's decision %d", act)
	}
	if err := propose(l, Command{Kind: CmdNewEpoch, MasterID: l.id, StartOffset: 0}); err != nil {
		t.Fatal(err)
	}
	all := []string{"b1", "b2", "b3"}
	if err := propose(l, Command{Kind: CmdSetSyncStateSet, Epoch: 1, SyncStateSet: all}); err != nil {
		t.Fatal(err)
	}
	converged := func(want ControlState, among []*raftNode) {
		t.Helper()
		eventually(t, 5*time.Second, "every member applies the same state", func() bool {
			for _, nd := range among {
				if !reflect.DeepEqual(nd.fsm.State(), want) {
					return false
				}
			}
			return true
		})
	}
	want := ControlState{MasterID: l.id, Epoch: 1, Epochs: []EpochStart{{1, 0}}, SyncStateSet: all}
	converged(want, nodes)

	// Partition the leader away: the others elect a new leader, which is in the set and starts
	// epoch 2 at its log end.
	var rest []*raftNode
	for _, nd := range nodes {
		if nd != l {
			rest = append(rest, nd)
			l.trans.Disconnect(nd.trans.LocalAddr())
			nd.trans.Disconnect(l.trans.LocalAddr())
		}
	}
	nl := leader(t, rest)
	if act, _ := DecideLeader(nl.id, nl.fsm.State(), map[string]Candidate{nl.id: {KnownConfirmed: -1, Electable: true}}); act != ActMaster {
		t.Fatalf("new leader %s in the set must act", nl.id)
	}
	if err := propose(nl, Command{Kind: CmdNewEpoch, MasterID: nl.id, StartOffset: 4096}); err != nil {
		t.Fatal(err)
	}
	// The old leader cannot commit anything without a quorum.
	if err := propose(l, Command{Kind: CmdSetSyncStateSet, Epoch: 1, SyncStateSet: []string{l.id}}); err == nil {
		t.Fatal("a partitioned leader committed a command")
	}
	// A deposed master's change of its epoch, proposed through the new leader, is refused.
	if err := propose(nl, Command{Kind: CmdSetSyncStateSet, Epoch: 1, SyncStateSet: []string{l.id}}); !errors.Is(err, ErrStaleEpoch) {
		t.Fatalf("stale in-sync change: %v", err)
	}
	// Healed: the old leader catches up to the same state.
	for _, nd := range rest {
		l.trans.Connect(nd.trans.LocalAddr(), nd.trans)
		nd.trans.Connect(l.trans.LocalAddr(), l.trans)
	}
	want = ControlState{MasterID: nl.id, Epoch: 2, Epochs: []EpochStart{{1, 0}, {2, 4096}}, SyncStateSet: all}
	converged(want, nodes)

	// Snapshot and restore give the same state.
	snap, err := nl.fsm.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	fresh := NewControlFSM(nil, nil)
	if err := fresh.Restore(io.NopCloser(bytes.NewReader(snap.(controlSnapshot)))); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(fresh.State(), want) {
		t.Fatalf("restored %+v, want %+v", fresh.State(), want)
	}
}

func TestControlStateSnapshotRejectsGarbage(t *testing.T) {
	good := ControlState{MasterID: "b1", Epoch: 2, Epochs: []EpochStart{{1, 0}, {2, 9}}, SyncStateSet: []string{"b1", "b2"}}.MarshalBinary()
	for n := 0; n < len(good); n++ {
		var s ControlState
		if err := s.UnmarshalBinary(good[:n]); !errors.Is(err, ErrBadCommand) {
			t.Fatalf("%d of %d bytes: %v", n, len(good), err)
		}
	}
	var s ControlState
	if err := s.UnmarshalBinary(good); err != nil || s.MasterID != "b1" || len(s.Epochs) != 2 {
		t.Fatalf("%+v, %v", s, err)
	}
}
