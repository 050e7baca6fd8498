package ha

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"time"

	"github.com/hashicorp/raft"
	raftboltdb "github.com/hashicorp/raft-boltdb/v2"
)

// RaftPeer is one member of a Raft-elected broker group: its Raft server id (raftSelfId, e.g.
// "b1") and the address of its Raft port.
type RaftPeer struct {
	ID   string
	Addr string
}

// RaftConfig configures a RaftNode. Durations are LAN-tuned by default (hundreds of ms).
type RaftConfig struct {
	// SelfID is this member's id; Peers lists every member, this one included.
	SelfID string
	Peers  []RaftPeer
	// Dir holds the Raft log and stable store (raft.db, bbolt) and the snapshots.
	Dir string
	// HeartbeatTimeout and ElectionTimeout (default 300 ms each) and LeaderLeaseTimeout (default
	// half the heartbeat timeout, at least 5 ms: a leader cut off from its quorum steps down
	// before another can be elected).
	HeartbeatTimeout   time.Duration
	ElectionTimeout    time.Duration
	LeaderLeaseTimeout time.Duration
	// FrameReadTimeout closes a Raft connection whose RPC is not whole this long after its
	// first byte, or that sends no whole RPC this long after it connects (default
	// DefaultRaftFrameReadTimeout).
	FrameReadTimeout time.Duration
	// MaxConns caps the Raft port's connections (default DefaultRaftMaxConns); more are
	// closed as they come, with a log line.
	MaxConns int
	// Logger receives Raft's log lines at warn level and above; default slog.Default().
	Logger *slog.Logger
	// OnChange hears every change of the control state (see ControlFSM).
	OnChange func(ControlState)
	// OnTopics hears every change of the group's topic table (see ControlFSM).
	OnTopics func(TopicTable)
}

// RaftNode is one member's Raft node for the group's control state: a durable log and stable
// store (hashicorp/raft-boltdb v2), file snapshots, and a TCP transport on the member's Raft
// port. Messages never go through it.
type RaftNode struct {
	cfg   RaftConfig
	rc    raft.Config
	fsm   *ControlFSM
	r     *raft.Raft
	store *raftboltdb.BoltStore
	trans *raft.NetworkTransport
	// stream is the transport's listener and its guard.
	stream *raftStream
}

// ErrNotLeader is returned by Propose on a member that is not the Raft leader.
var ErrNotLeader = errors.New("ha: not the Raft leader")

// StartRaftNode opens (or creates) the member's Raft state in cfg.Dir, listens on its Raft
// address and joins the group; on first start the group is bootstrapped with cfg.Peers (every
// member does it with the same list, which Raft accepts).
func StartRaftNode(cfg RaftConfig) (*RaftNode, error) {
	var self *RaftPeer
	for i := range cfg.Peers {
		if cfg.Peers[i].ID == cfg.SelfID {
			self = &cfg.Peers[i]
		}
	}
	if self == nil || len(cfg.Peers) < 3 {
		return nil, fmt.Errorf("raft: self %q must be one of at least 3 peers, got %v", cfg.SelfID, cfg.Peers)
	}
	if cfg.HeartbeatTimeout <= 0 {
		cfg.HeartbeatTimeout = 300 * time.Millisecond
	}
	if cfg.ElectionTimeout <= 0 {
		cfg.ElectionTimeout = 300 * time.Millisecond
	}
	if cfg.LeaderLeaseTimeout <= 0 {
		cfg.LeaderLeaseTimeout = max(cfg.HeartbeatTimeout/2, 5*time.Millisecond)
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.FrameReadTimeout <= 0 {
		cfg.FrameReadTimeout = DefaultRaftFrameReadTimeout
	}
	if cfg.MaxConns <= 0 {
		cfg.MaxConns = DefaultRaftMaxConns
	}
	if err := os.MkdirAll(cfg.Dir, 0o755); err != nil {
		return nil, fmt.Errorf("raft: %w", err)
	}
	n := &RaftNode{cfg: cfg, fsm: NewControlFSM(cfg.OnChange, cfg.OnTopics)}
	var err error
	if n.store, err = raftboltdb.NewBoltStore(filepath.Join(cfg.Dir, "raft.db")); err != nil {
		return nil, fmt.Errorf("raft: cannot open the log store: %w", err)
	}
	snaps, err := raft.NewFileSnapshotStore(cfg.Dir, 2, io.Discard)
	if err != nil {
		n.store.Close()
		return nil, fmt.Errorf("raft: cannot open the snapshot store: %w", err)
	}
	tcpAddr, err := net.ResolveTCPAddr("tcp", self.Addr)
	if err != nil {
		n.store.Close()
		return nil, fmt.Errorf("raft: address %q: %w", self.Addr, err)
	}
	if tcpAddr.IP == nil || tcpAddr.IP.IsUnspecified() {
		n.store.Close()
		return nil, fmt.Errorf("raft: address %q: not an address other members can reach", self.Addr)
	}
	stream, err := listenRaft(self.Addr, tcpAddr, cfg.FrameReadTimeout, cfg.MaxConns, cfg.Logger)
	if err != nil {
		n.store.Close()
		return nil, fmt.Errorf("raft: cannot listen on %s: %w", self.Addr, err)
	}
	logger := raftLogger(cfg.Logger, stream.Guarded)
	n.trans = raft.NewNetworkTransportWithConfig(&raft.NetworkTransportConfig{
		Stream: stream, MaxPool: 3, Timeout: 2 * time.Second, Logger: logger,
	})
	n.stream = stream
	rc := raft.DefaultConfig()
	rc.LocalID = raft.ServerID(cfg.SelfID)
	rc.HeartbeatTimeout = cfg.HeartbeatTimeout
	rc.ElectionTimeout = cfg.ElectionTimeout
	rc.LeaderLeaseTimeout = cfg.LeaderLeaseTimeout
	rc.CommitTimeout = 5 * time.Millisecond
	rc.Logger = logger
	n.rc = *rc
	if n.r, err = raft.NewRaft(rc, n.fsm, n.store, n.store, snaps, n.trans); err != nil {
		n.trans.Close()
		n.store.Close()
		return nil, fmt.Errorf("raft: %w", err)
	}
	has, err := raft.HasExistingState(n.store, n.store, snaps)
	if err != nil {
		_ = n.Close()
		return nil, fmt.Errorf("raft: %w", err)
	}
	if !has {
		var servers []raft.Server
		for _, p := range cfg.Peers {
			servers = append(servers, raft.Server{ID: raft.ServerID(p.ID), Address: raft.ServerAddress(p.Addr)})
		}
		if err := n.r.BootstrapCluster(raft.Configuration{Servers: servers}).Error(); err != nil && !errors.Is(err, raft.ErrCantBootstrap) {
			_ = n.Close()
			return nil, fmt.Errorf("raft: bootstrap: %w", err)
		}
	}
	return n, nil
}

// IsLeader reports whether this member is the Raft leader now.
func (n *RaftNode) IsLeader() bool { return n.r.State() == raft.Leader }

// LeaderID returns the current leader's id ("" when unknown).
func (n *RaftNode) LeaderID() string {
	_, id := n.r.LeaderWithID()
	return string(id)
}

// Term returns the member's current Raft term.
func (n *RaftNode) Term() uint64 { return n.r.CurrentTerm() }

// LeaderCh delivers true when this member becomes leader and false when it stops being leader
// (raft.Raft.LeaderCh: a slow reader misses intermediate changes, never the latest one).
func (n *RaftNode) LeaderCh() <-chan bool { return n.r.LeaderCh() }

// State returns the control state this member has applied.
func (n *RaftNode) State() ControlState { return n.fsm.State() }

// Topics returns the group's topic table this member has applied (shared: do not modify it).
func (n *RaftNode) Topics() TopicTable { return n.fsm.Topics() }

// ReadIndex is the leader's half of a read index (the Raft paper's section 6.4): it commits a
// no-op command through a quorum, which confirms the leadership and orders the no-op after
// every command committed before it, and returns the no-op's log index with the term. A member
// that has applied that index holds control state at least as new as the leader's when it was
// asked. ErrNotLeader on a member that is not the leader.
func (n *RaftNode) ReadIndex(timeout time.Duration) (index, term uint64, err error) {
	if n.r.State() != raft.Leader {
		return 0, 0, ErrNotLeader
	}
	term = n.r.CurrentTerm()
	b, err := Command{Kind: CmdNoop}.MarshalBinary()
	if err != nil {
		return 0, 0, err
	}
	f := n.r.Apply(b, timeout)
	if err := f.Error(); err != nil {
		if errors.Is(err, raft.ErrNotLeader) || errors.Is(err, raft.ErrLeadershipLost) {
			return 0, 0, fmt.Errorf("%w: %v", ErrNotLeader, err)
		}
		return 0, 0, err
	}
	return f.Index(), term, nil
}

// WaitApplied waits, at most timeout, until this member has applied the command at index (a
// read index of the leader) and reports whether it has.
func (n *RaftNode) WaitApplied(index uint64, timeout time.Duration) bool {
	return n.fsm.WaitApplied(index, timeout)
}

// Barrier waits until every entry committed before it is applied here (a new leader calls it
// before it acts on the state).
func (n *RaftNode) Barrier(timeout time.Duration) error { return n.r.Barrier(timeout).Error() }

// Propose commits c through Raft and returns the rules' verdict (nil, or the Apply error such as
// ErrStaleEpoch), ErrNotLeader on a follower, or Raft's error when the entry did not commit in
// time (then it may still commit later).
func (n *RaftNode) Propose(c Command, timeout time.Duration) error {
	b, err := c.MarshalBinary()
	if err != nil {
		return err
	}
	f := n.r.Apply(b, timeout)
	if err := f.Error(); err != nil {
		if errors.Is(err, raft.ErrNotLeader) || errors.Is(err, raft.ErrLeadershipLost) {
			return fmt.Errorf("%w: %v", ErrNotLeader, err)
		}
		return err
	}
	if err, ok := f.Response().(error); ok {
		return err
	}
	return nil
}

// Hurry shortens the heartbeat and election timeouts to the leader lease, so that this follower
// starts an election as soon as the leader's lease is surely over: the broker calls it when it
// sees the master's process gone (its replication connection closed or refused), which is
// surer than silence. A live leader's heartbeats (every tenth of the timeout) keep the group as
// it is. Relax restores the configured timeouts once a leader is known again.
func (n *RaftNode) Hurry() error {
	d := n.cfg.LeaderLeaseTimeout
	return n.r.ReloadConfig(raft.ReloadableConfig{
		TrailingLogs: n.rc.TrailingLogs, SnapshotInterval: n.rc.SnapshotInterval, SnapshotThreshold: n.rc.SnapshotThreshold,
		HeartbeatTimeout: d, ElectionTimeout: d,
	})
}

// Relax restores the configured timeouts after Hurry.
func (n *RaftNode) Relax() error {
	return n.r.ReloadConfig(raft.ReloadableConfig{
		TrailingLogs: n.rc.TrailingLogs, SnapshotInterval: n.rc.SnapshotInterval, SnapshotThreshold: n.rc.SnapshotThreshold,
		HeartbeatTimeout: n.cfg.HeartbeatTimeout, ElectionTimeout: n.cfg.ElectionTimeout,
	})
}

// TransferLeadership hands leadership to member id (raft.LeadershipTransferToServer).
func (n *RaftNode) TransferLeadership(id string) error {
	for _, p := range n.cfg.Peers {
		if p.ID == id {
			return n.r.LeadershipTransferToServer(raft.ServerID(id), raft.ServerAddress(p.Addr)).Error()
		}
	}
	return fmt.Errorf("raft: no member %q", id)
}

// Close shuts the node down and closes its transport (pooled outbound connections too, so the
// peers' goroutines serving them end) and store.
func (n *RaftNode) Close() error {
	err := n.r.Shutdown().Error()
	n.trans.CloseStreams()
	if e := n.trans.Close(); err == nil {
		err = e
	}
	if e := n.store.Close(); err == nil {
		err = e
	}
	return err
}
