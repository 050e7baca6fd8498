package ha

import (
	"fmt"
	"path/filepath"
	"reflect"
	"testing"
	"time"

	"github.com/petrel-mq/petrel/internal/testutil"
)

// TestRaftNodeDurableFailover: three members with durable stores on real TCP; the leader is
// stopped, another member leads within the election timeout and commits a new epoch; the stopped
// member restarts from its own raft.db and catches up to the same state.
func TestRaftNodeDurableFailover(t *testing.T) {
	addrs := testutil.FreeAddrs(t, 3)
	var peers []RaftPeer
	for i, a := range addrs {
		peers = append(peers, RaftPeer{ID: fmt.Sprintf("b%d", i+1), Addr: a})
	}
	dir := t.TempDir()
	start := func(id string) *RaftNode {
		t.Helper()
		n, err := StartRaftNode(RaftConfig{SelfID: id, Peers: peers, Dir: filepath.Join(dir, id),
			HeartbeatTimeout: 150 * time.Millisecond, ElectionTimeout: 150 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	nodes := map[string]*RaftNode{}
	for _, p := range peers {
		nodes[p.ID] = start(p.ID)
	}
	t.Cleanup(func() {
		for _, n := range nodes {
			_ = n.Close()
		}
	})
	leaderOf := func() *RaftNode {
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
		return l
	}
	l := leaderOf()
	if err := l.Barrier(time.Second); err != nil {
		t.Fatal(err)
	}
	if err := l.Propose(Command{Kind: CmdNewEpoch, MasterID: l.cfg.SelfID, StartOffset: 0}, time.Second); err != nil {
		t.Fatal(err)
	}
	if err := l.Propose(Command{Kind: CmdSetSyncStateSet, Epoch: 1, SyncStateSet: []string{"b1", "b2", "b3"}}, time.Second); err != nil {
		t.Fatal(err)
	}
	for _, n := range nodes {
		if n != l {
			if err := n.Propose(Command{Kind: CmdSetSyncStateSet, Epoch: 1, SyncStateSet: []string{"b1"}}, time.Second); err == nil {
				t.Fatal("a follower committed a proposal")
			}
		}
	}

	// The leader stops: another member leads and starts epoch 2.
	old := l.cfg.SelfID
	stopped := time.Now()
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	delete(nodes, old)
	nl := leaderOf()
	t.Logf("new leader %s after %v", nl.cfg.SelfID, time.Since(stopped))
	if err := nl.Barrier(time.Second); err != nil {
		t.Fatal(err)
	}
	if act, _ := DecideLeader(nl.cfg.SelfID, nl.State(), map[string]Candidate{nl.cfg.SelfID: {KnownConfirmed: -1, Electable: true}}); act != ActMaster {
		t.Fatalf("the new leader is in the set and must act: %d", act)
	}
	if err := nl.Propose(Command{Kind: CmdNewEpoch, MasterID: nl.cfg.SelfID, StartOffset: 8192}, time.Second); err != nil {
		t.Fatal(err)
	}
	want := ControlState{MasterID: nl.cfg.SelfID, Epoch: 2, Epochs: []EpochStart{{1, 0}, {2, 8192}}, SyncStateSet: []string{"b1", "b2", "b3"}}

	// The old leader restarts from its durable state and catches up.
	nodes[old] = start(old)
	eventually(t, 5*time.Second, "every member at epoch 2", func() bool {
		for _, n := range nodes {
			if !reflect.DeepEqual(n.State(), want) {
				return false
			}
		}
		return true
	})
	if got := nodes[old].LeaderID(); got != nl.cfg.SelfID && got != "" {
		t.Fatalf("restarted member sees leader %q, want %q", got, nl.cfg.SelfID)
	}

	// Hurry cuts a follower's timeouts to the leader lease; Relax restores them.
	f := nodes[old]
	if err := f.Hurry(); err != nil {
		t.Fatal(err)
	}
	if rc := f.r.ReloadableConfig(); rc.HeartbeatTimeout != f.cfg.LeaderLeaseTimeout || rc.ElectionTimeout != f.cfg.LeaderLeaseTimeout {
		t.Fatalf("hurried timeouts %v/%v, want the lease %v", rc.HeartbeatTimeout, rc.ElectionTimeout, f.cfg.LeaderLeaseTimeout)
	}
	if err := f.Relax(); err != nil {
		t.Fatal(err)
	}
	if rc := f.r.ReloadableConfig(); rc.HeartbeatTimeout != f.cfg.HeartbeatTimeout || rc.ElectionTimeout != f.cfg.ElectionTimeout {
		t.Fatalf("relaxed timeouts %v/%v", rc.HeartbeatTimeout, rc.ElectionTimeout)
	}
}
