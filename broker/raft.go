package broker

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/petrel-mq/petrel/ha"
	"github.com/petrel-mq/petrel/internal/ratelog"
	"github.com/petrel-mq/petrel/protocol"
	"github.com/petrel-mq/petrel/protocol/rpc"
)

// ErrRestart is delivered on Broker.Fatal when the broker asked for its own restart: a member of
// a Raft-elected group whose log holds what the group's master never confirmed has written a
// crash-safe truncation request (commitlog.PrepareTruncate), which the next open of the store
// carries out. The owner closes the broker and runs a new one with the same config
// (petrel-broker does so in place).
var ErrRestart = errors.New("broker: restart requested to truncate the log to the master's")

// raftMember is a broker's part in a Raft-elected group (enableRaftHA; ARCHITECTURE.md
// "Election"): its Raft node for the group's control state, its durable epoch starts, confirmed
// mark and truncation log, and the I/O the member state machine (ha.Member, driven by the role
// loop, member.go) asks of a Raft-elected member:
//   - the Raft leader asks the in-sync members for their logs (candidates) and ha.DecideLeader
//     picks the master: the electable in-sync member with the longest log acts as master
//     (startMaster: a barrier, a new epoch at its log end, then it accepts writes and registers
//     as brokerId 0); a leader that should not be master hands leadership over;
//   - a member that is not leader gives up the master role at once (a leader that lost its
//     quorum steps down within the leader lease, before another can be elected), then follows
//     the master the control state names. That master acknowledges its pulls only while its
//     log is a prefix of the master's, and otherwise says where it diverged; the member then
//     cuts its log there (ha.PlanTruncation: after a read index, never below what the group
//     confirmed, never twice for one epoch, out of the in-sync set first; the cut happens
//     through a restart).
type raftMember struct {
	b      *Broker
	selfID string
	peers  []ha.RaftPeer
	node   *ha.RaftNode
	epochs *epochLog
	warn   ratelog.Limiter
	// restarting is set once a truncation asked for the restart that carries it out.
	restarting atomic.Bool
	// diverging is set from a master's divergence answer until the role loop has taken it (the
	// role then says Cutting): the member is not electable meanwhile.
	diverging atomic.Bool
	// confirmed is the highest offset this member knows the group confirmed; floor says it is
	// enforced (a SYNC group, whose acknowledgements wait for the in-sync set): no cut below it,
	// not electable while the log ends below it. cuts records the truncations made, so that a
	// second one for the same epoch stops the member instead of looping.
	confirmed *confirmedMark
	floor     bool // enforce confirmed: the group acknowledges synchronously
	cuts      *truncationLog
}

// testBeforeTruncate, when not nil, runs as a member starts cutting its log (tests look at the
// group's state at that moment). Nil in production.
var testBeforeTruncate func(m *raftMember)

const (
	// reconcileInterval is how often the role loop re-checks the role without an event.
	reconcileInterval = 100 * time.Millisecond
	// raftOpTimeout bounds a Barrier or a proposal of the loop.
	raftOpTimeout = 2 * time.Second
	// logEndQueryTimeout bounds the leader's question to another member for its log end.
	logEndQueryTimeout = 200 * time.Millisecond
	// readIndexTimeout bounds a read index: the question to the leader, then the wait until
	// this member has applied the index.
	readIndexTimeout = time.Second
	// leaveRequestTimeout bounds a request to the master to leave the in-sync set.
	leaveRequestTimeout = 4 * time.Second
)

// newRaftMember opens the member's epoch file; the Raft node starts with start.
func newRaftMember(b *Broker) (*raftMember, error) {
	peers, err := b.cfg.RaftPeerList()
	if err != nil {
		return nil, err
	}
	el, err := openEpochLog(filepath.Join(b.cfg.StorePathRootDir, "epochs"))
	if err != nil {
		return nil, err
	}
	// Epochs that start past the log end lost their data (a crash before the flush): drop them.
	if err := el.truncateTo(b.store.LogEndOffset() + 1); err != nil {
		return nil, err
	}
	cm, err := openConfirmedMark(filepath.Join(b.cfg.StorePathRootDir, "confirmed"))
	if err != nil {
		return nil, err
	}
	cuts, err := openTruncationLog(filepath.Join(b.cfg.StorePathRootDir, "truncations"))
	if err != nil {
		return nil, err
	}
	return &raftMember{
		b:         b,
		selfID:    b.cfg.RaftSelfID,
		peers:     peers,
		epochs:    el,
		confirmed: cm,
		floor:     b.cfg.BrokerRole == RoleSyncMaster,
		cuts:      cuts,
	}, nil
}

// epochLog returns the member's epoch log, nil on a broker with static roles.
func (m *raftMember) epochLog() *epochLog {
	if m == nil {
		return nil
	}
	return m.epochs
}

// start starts the Raft node (the role loop starts after it).
func (m *raftMember) start() error {
	var self string
	for _, p := range m.peers {
		if p.ID == m.selfID {
			self = p.Addr
		}
	}
	node, err := ha.StartRaftNode(ha.RaftConfig{
		SelfID:           m.selfID,
		Peers:            m.peers,
		Dir:              filepath.Join(m.b.cfg.StorePathRootDir, "raft"),
		HeartbeatTimeout: m.b.cfg.RaftHeartbeatTimeout,
		ElectionTimeout:  m.b.cfg.RaftElectionTimeout,
		FrameReadTimeout: m.b.cfg.FrameReadTimeout,
		MaxConns:         m.b.cfg.RaftMaxConnections,
		Logger:           m.b.log.With("component", "raft"),
		OnChange:         func(ha.ControlState) { m.b.roles.poke() },
		OnTopics:         m.b.applyRaftTopics,
	})
	if err != nil {
		return fmt.Errorf("cannot start the Raft member %s on %s: %w", m.selfID, self, err)
	}
	m.node = node
	if lo, hi, ok := ephemeralPorts(); ok {
		if _, p, _ := net.SplitHostPort(self); p != "" {
			if n, _ := strconv.Atoi(p); n >= lo && n <= hi {
				m.b.log.Warn("the Raft port is in the ephemeral port range: while this member is down an outgoing connection may take it and keep it from listening again; pick a port below it",
					"raftAddr", self, "ephemeralRange", fmt.Sprintf("%d-%d", lo, hi))
			}
		}
	}
	m.b.log.Info("Raft member started", "raftSelfId", m.selfID, "raftAddr", self, "peers", len(m.peers))
	return nil
}

// close persists the confirmed mark and stops the Raft node (after the role loop stopped).
func (m *raftMember) close() {
	m.noteConfirmed(m.b.role.Load())
	if err := m.confirmed.persist(time.Now(), true); err != nil {
		m.b.log.Warn("confirmed mark not persisted", "err", err)
	}
	if m.node != nil {
		if err := m.node.Close(); err != nil {
			m.b.log.Warn("Raft member did not close cleanly", "err", err)
		}
	}
}

// observe is the role loop's view of Raft for the member (ha.Tick); it also raises and persists
// the confirmed mark and warns about a brokerId two members share.
func (m *raftMember) observe(d *roleDriver) ha.Event {
	b := m.b
	st := m.node.State()
	m.noteConfirmed(b.role.Load())
	if err := m.confirmed.persist(time.Now(), false); err != nil {
		m.warn.Warn(b.log, "confirmed mark not persisted", "err", err)
	}
	for _, mem := range st.Members {
		if mem.BrokerID == b.cfg.BrokerID && mem.ID != m.selfID {
			m.warn.Warn(b.log, "another member of the group has this member's brokerId: give every member its own brokerId",
				"brokerId", b.cfg.BrokerID, "other", mem.ID, "otherAddr", mem.Addr)
		}
	}
	return ha.Tick{Now: time.Now(), State: st, Leader: m.node.IsLeader(), Term: m.node.Term(), LeaderID: m.node.LeaderID()}
}

// noteConfirmed raises the member's confirmed mark from its role: a master's confirmed offset,
// or, for a slave, the part of its own log below the confirmed offset its master last
// acknowledged its pulls with. The mark is thus always what this member's own log holds of
// what the group confirmed, never an offset of another history (a master that found this log
// diverged may have confirmed its own epoch past the point where this log must be cut).
func (m *raftMember) noteConfirmed(r *role) {
	switch {
	case r.master != nil:
		m.noteMaster(r.master)
	case r.slave != nil:
		m.noteSlave(r.slave)
	}
}

// noteMaster raises the confirmed mark to a master's confirmed offset (nil-safe: a no-op in a
// static group).
func (m *raftMember) noteMaster(hm *ha.Master) {
	if m != nil {
		m.confirmed.raise(hm.ConfirmedOffset())
	}
}

// noteSlave raises the confirmed mark to what the slave's log holds of the confirmed offset its
// master last acknowledged (nil-safe).
func (m *raftMember) noteSlave(s *ha.Slave) {
	if m != nil {
		m.confirmed.raise(min(s.ConfirmedOffset(), m.b.store.LogEndOffset()))
	}
}

// knownConfirmed returns the confirmed offset this member enforces as its floor, -1 when it
// enforces none (a group that acknowledges without waiting for its slaves).
func (m *raftMember) knownConfirmed() int64 {
	if !m.floor {
		return -1
	}
	return m.confirmed.get()
}

// electable reports whether this member may become master (ha.Role.Electable): it has not
// stopped, is not about to cut its log, and its log holds everything it knows confirmed.
func (m *raftMember) electable() bool {
	return !m.restarting.Load() && !m.diverging.Load() &&
		m.b.role.Load().Electable(m.b.store.LogEndOffset(), m.knownConfirmed())
}

// startMaster takes the master role (ha.StartMaster in a Raft-elected group): the Raft barrier
// makes the control state current, a new epoch starts at this member's log end, and the
// replication master serves it.
func (m *raftMember) startMaster(d *roleDriver) ha.Event {
	b := m.b
	began := time.Now()
	if err := m.node.Barrier(raftOpTimeout); err != nil {
		return ha.MasterStarted{Err: fmt.Errorf("Raft barrier failed: %w", err)}
	}
	if err := m.initTopics(); err != nil {
		return ha.MasterStarted{Err: err}
	}
	st := m.node.State()
	end := b.store.LogEndOffset()
	keep, initial := ha.EpochSyncSet(st, m.selfID) // the set this epoch starts with: the old one without the old master
	// The replication port listens before the epoch starts, so that the epoch names its address.
	var hm *ha.Master
	hm = b.newMasterHA(func(slaves []ha.SyncMember) error { return m.commitSyncSet(hm.Epoch(), slaves) }, initial, min(m.confirmed.get(), end))
	if err := startWithRetry(hm); err != nil {
		return ha.MasterStarted{Err: fmt.Errorf("cannot serve replication: %w", err)}
	}
	self := b.selfInfo(hm)
	cmd := ha.Command{Kind: ha.CmdNewEpoch, MasterID: m.selfID, StartOffset: end, SyncStateSet: keep, Members: []ha.MemberInfo{self}}
	if err := m.node.Propose(cmd, raftOpTimeout); err != nil {
		_ = hm.Close()
		return ha.MasterStarted{Err: fmt.Errorf("cannot start a new epoch: %w", err)}
	}
	st = m.node.State()
	if st.MasterID != m.selfID {
		_ = hm.Close()
		return ha.MasterStarted{Err: fmt.Errorf("the new epoch names %q as master", st.MasterID)}
	}
	if err := m.epochs.append(ha.EpochStart{Epoch: st.Epoch, StartOffset: end}); err != nil {
		_ = hm.Close()
		return ha.MasterStarted{Err: fmt.Errorf("cannot record epoch %d: %w", st.Epoch, err)}
	}
	if last := b.store.LastEpoch(); st.Epoch < last {
		b.log.Error("the new epoch is below the epoch of this log's newest batch (Raft state reset with the store kept?); "+
			"the commit log refuses sends until the group's epoch passes it", "epoch", st.Epoch, "logEpoch", last)
	}
	d.master = hm
	b.log.Info("acting as master", "epoch", st.Epoch, "epochStart", end, "syncStateSet", st.SyncStateSet,
		"took", time.Since(began).Round(time.Millisecond))
	return ha.MasterStarted{Epoch: st.Epoch, Self: self}
}

// initTopics commits this member's topic table as the group's when the group has none
// committed yet (stores from before topic configs went through Raft): the first master's
// table, which the config sync gave every member, becomes the group's. A table committed
// meanwhile by another master wins (ha.ErrTopicsKnown).
func (m *raftMember) initTopics() error {
	if m.node.Topics().Known {
		return nil
	}
	list := m.b.topics.list()
	err := m.node.Propose(ha.Command{Kind: ha.CmdInitTopics, Topics: list}, raftOpTimeout)
	switch {
	case errors.Is(err, ha.ErrTopicsKnown):
		return nil
	case err != nil:
		return fmt.Errorf("cannot commit the topic table through Raft: %w", err)
	}
	m.b.log.Info("topic table committed through Raft: the group's topic configs go through Raft from now on", "topics", len(list))
	return nil
}

// topicsKnown reports whether the group's topic table is committed in Raft (nil-safe: false in
// a group with static roles).
func (m *raftMember) topicsKnown() bool {
	return m != nil && m.node != nil && m.node.Topics().Known
}

// proposeTopic commits a topic command (CmdPutTopic, CmdDeleteTopic) through Raft; once it
// returns nil every member applies it, this one already has. A member that is not the Raft
// leader gets an error wrapping ha.ErrNotLeader.
func (m *raftMember) proposeTopic(kind ha.CommandKind, cfg protocol.TopicConfig) error {
	return m.node.Propose(ha.Command{Kind: kind, Topics: []protocol.TopicConfig{cfg}}, raftOpTimeout)
}

// commitSyncSet commits the in-sync set of epoch through Raft (ha.MasterConfig.CommitSyncSet).
func (m *raftMember) commitSyncSet(epoch uint32, slaves []ha.SyncMember) error {
	ids := []string{m.selfID}
	var members []ha.MemberInfo
	for _, s := range slaves {
		ids = append(ids, s.MemberID)
		members = append(members, ha.MemberInfo{ID: s.MemberID, BrokerID: s.BrokerID, Addr: s.Addr})
	}
	return m.node.Propose(ha.Command{Kind: ha.CmdSetSyncStateSet, Epoch: epoch, SyncStateSet: ids, Members: members}, raftOpTimeout)
}

// isPeer reports whether id is another member of the group (raftPeers): the only member ids
// the master replicates to (ha.MasterConfig.MemberOf).
func (m *raftMember) isPeer(id string) bool {
	if id == m.selfID {
		return false
	}
	for _, p := range m.peers {
		if p.ID == id {
			return true
		}
	}
	return false
}

// knownSlave reports whether a slave is a known member of the group (ha.MasterConfig.KnownSlave):
// another member of raftPeers that the control state lists under that brokerId. One brokerId per
// member, so the records kept for known slaves are at most the group's members.
func (m *raftMember) knownSlave(brokerID int64, memberID string) bool {
	if !m.isPeer(memberID) {
		return false
	}
	mi, ok := m.node.State().Member(memberID)
	return ok && mi.BrokerID == brokerID
}

// truncationInput is what ha.PlanTruncation needs of this member, read after a read index.
func (m *raftMember) truncationInput() ha.TruncationInput {
	cutEpoch, cutPoint := m.cuts.last()
	return ha.TruncationInput{
		Self: m.selfID, State: m.node.State(), Mine: m.epochs.list(),
		LogMin: m.b.store.LogMinOffset(), LogEnd: m.b.store.LogEndOffset(),
		KnownConfirmed: m.knownConfirmed(), LastCutEpoch: cutEpoch, LastCutPoint: cutPoint,
	}
}

// reset discards the whole log, none of which is a prefix of the master's, and starts an empty
// one at base (the master's min offset), recorded in the truncation log; the member then
// follows the master and copies its log. Unlike a cut it needs no restart: nothing of the old
// log is kept to recover.
func (m *raftMember) reset(epoch uint32, base int64, in ha.TruncationInput) error {
	b := m.b
	b.log.Warn("no part of this log is a prefix of the master's: discarding it and copying the master's",
		"logMin", in.LogMin, "logEnd", in.LogEnd, "masterMin", base, "epoch", epoch, "myEpochs", in.Mine,
		"divergingEpoch", in.DivergingEpoch, "truncateTo", in.DivergedAt, "knownConfirmed", in.KnownConfirmed)
	if err := m.cuts.record(epoch, in.LogMin, time.Now()); err != nil {
		return fmt.Errorf("cannot record the reset: %w", err)
	}
	if err := m.epochs.truncateTo(0); err != nil { // before the log: a crash leaves no epoch over an empty log
		return fmt.Errorf("cannot clear the epoch file: %w", err)
	}
	if _, err := b.store.ResetTo(base, false); err != nil {
		return fmt.Errorf("cannot reset the log to %d: %w", base, err)
	}
	b.afterLogReset(base)
	m.diverging.Store(false)
	return nil
}

// truncate cuts the log to point for group epoch epoch: a crash-safe truncation request
// (commitlog.PrepareTruncate), recorded in the truncation log, carried out by a restart
// (ErrRestart).
func (m *raftMember) truncate(epoch uint32, point int64, in ha.TruncationInput) error {
	b := m.b
	if testBeforeTruncate != nil {
		testBeforeTruncate(m)
	}
	b.log.Warn("this log holds what the master never confirmed: truncating it through a restart",
		"logEnd", in.LogEnd, "truncateTo", point, "epoch", epoch, "myEpochs", in.Mine, "groupEpochs", in.State.Epochs,
		"masterEnd", in.MasterEnd, "knownConfirmed", in.KnownConfirmed)
	if err := b.store.PrepareTruncate(point); err != nil {
		return fmt.Errorf("cannot prepare the truncation: %w", err) // never follow a master with a diverged log
	}
	if err := m.cuts.record(epoch, point, time.Now()); err != nil {
		b.log.Error("cannot record the truncation", "err", err)
	}
	if err := m.epochs.truncateTo(point); err != nil {
		b.log.Error("cannot truncate the epoch file", "err", err)
	}
	if m.restarting.CompareAndSwap(false, true) {
		select {
		case b.fatal <- fmt.Errorf("%w: log end %d, truncate to %d", ErrRestart, in.LogEnd, point):
		default:
		}
	}
	return nil
}

// checkElect answers an electMaster request of a Raft-elected group that needs no hand-over
// (done true), or fills in the target for the member (ev).
func (m *raftMember) checkElect(h protocol.ElectMasterRequest, ev *ha.ElectMaster) (rpc.Reply, bool) {
	b := m.b
	st := m.node.State()
	mem, ok := st.MemberByBrokerID(h.BrokerID)
	if !ok {
		var known []string
		for _, m := range st.Members {
			known = append(known, fmt.Sprintf("brokerId %d (%s, %s)", m.BrokerID, m.ID, m.Addr))
		}
		return rpc.Errorf(protocol.StatusServiceNotAvailable, "no member of %s has brokerId %d; members: %s", b.cfg.BrokerName, h.BrokerID, strings.Join(known, ", ")), true
	}
	if st.MasterID == mem.ID {
		return electedReply(st), true
	}
	if r := b.role.Load(); r.State != ha.MemberMaster || !m.node.IsLeader() {
		if m.node.LeaderID() == "" {
			return rpc.Errorf(protocol.StatusServiceNotAvailable, "%s has no Raft leader: fewer than a majority of its %d members are up; a master is elected once a majority runs", b.cfg.BrokerName, len(m.peers)), true
		}
		return notMasterReply(r.Role, "ask the master; in a Raft-elected group a master that is down is replaced automatically"), true
	}
	if !slices.Contains(st.SyncStateSet, mem.ID) {
		return rpc.Errorf(protocol.StatusServiceNotAvailable, "brokerId %d (%s) is not in the in-sync set %v", h.BrokerID, mem.ID, st.SyncStateSet), true
	}
	ev.Target, ev.TargetID = mem.BrokerID, mem.ID
	return rpc.Reply{}, false
}

// waitElected waits, off the role loop, until the control state names member id master after a
// leadership transfer to it, and answers the electMaster request with it.
func (m *raftMember) waitElected(id string, deadline time.Time) rpc.Reply {
	for time.Now().Before(deadline) {
		if st := m.node.State(); st.MasterID == id {
			return electedReply(st)
		}
		time.Sleep(5 * time.Millisecond)
	}
	return rpc.Errorf(protocol.StatusSystemError, "leadership went to %s but it has not started its epoch in time (the master is still %q)", id, m.node.State().MasterID)
}

// electedReply answers electMaster with the master the control state names.
func electedReply(st ha.ControlState) rpc.Reply {
	cur, _ := st.Member(st.MasterID)
	return rpc.Reply{Header: &protocol.ElectMasterResponse{BrokerID: cur.BrokerID, MasterAddr: cur.Addr, Epoch: st.Epoch, MasterHAAddr: cur.HAAddr}}
}

// caughtUp makes sure this member's control state is at least as new as the Raft leader's (a
// read index: the leader commits a no-op through a quorum and names its index, and this member
// waits until it has applied that index too). It reports false when that cannot be done now
// (no leader known, the leader unreachable): nothing may be decided from the state then.
func (m *raftMember) caughtUp() bool {
	b := m.b
	term := m.node.Term()
	leader := m.node.LeaderID()
	if leader == "" || leader == m.selfID {
		return false
	}
	mem, ok := m.node.State().Member(leader)
	if !ok || mem.Addr == "" {
		m.warn.Warn(b.log, "cannot ask the Raft leader for a read index: its client address is unknown", "leader", leader)
		return false
	}
	ctx, cancel := context.WithTimeout(context.Background(), readIndexTimeout)
	defer cancel()
	c, err := rpc.Dial(ctx, mem.Addr, rpc.Options{})
	if err != nil {
		m.warn.Warn(b.log, "cannot reach the Raft leader for a read index", "leader", leader, "addr", mem.Addr, "err", err)
		return false
	}
	defer c.Close()
	var resp protocol.RaftReadIndexResponse
	if err := c.CallDecode(ctx, protocol.CodeRaftReadIndex, &protocol.RaftReadIndexRequest{BrokerName: b.cfg.BrokerName}, nil, &resp, nil); err != nil {
		m.warn.Warn(b.log, "the Raft leader gave no read index", "leader", leader, "addr", mem.Addr, "err", err)
		return false
	}
	if resp.Term != term {
		return false // leadership moved meanwhile: ask again
	}
	deadline, _ := ctx.Deadline()
	if !m.node.WaitApplied(resp.Index, time.Until(deadline)) {
		m.warn.Warn(b.log, "the control state did not catch up with the Raft leader's in time", "readIndex", resp.Index, "leader", leader)
		return false
	}
	return true
}

// readIndex serves CodeRaftReadIndex (the leader's half of caughtUp) on an admin worker.
func (m *raftMember) readIndex(h protocol.RaftReadIndexRequest) rpc.Reply {
	if h.BrokerName != m.b.cfg.BrokerName {
		return rpc.Errorf(protocol.StatusServiceNotAvailable, "this broker is in group %s, not %s", m.b.cfg.BrokerName, h.BrokerName)
	}
	index, term, err := m.node.ReadIndex(readIndexTimeout)
	if err != nil {
		return rpc.Errorf(protocol.StatusServiceNotAvailable, "no read index: %v", err)
	}
	return rpc.Reply{Header: &protocol.RaftReadIndexResponse{Index: index, Term: term}}
}

// candidates asks the in-sync members what the election needs of them (log end, the highest
// offset each knows confirmed, electability), in parallel and briefly; this member's own is
// read locally. Left out: unreachable members, the deposed master (its log may hold what it
// never confirmed, and it lost its Raft leadership: it is down or cut off), and a member a
// leadership transfer just failed to reach.
func (m *raftMember) candidates(st ha.ControlState, exclude string) map[string]ha.Candidate {
	cands := map[string]ha.Candidate{m.selfID: {LogEnd: m.b.store.LogEndOffset(), KnownConfirmed: m.knownConfirmed(), Electable: m.electable()}}
	var mu sync.Mutex
	var wg sync.WaitGroup
	for _, id := range st.SyncStateSet {
		mem, ok := st.Member(id)
		if id == m.selfID || !ok || mem.Addr == "" || id == st.MasterID || id == exclude {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx, cancel := context.WithTimeout(context.Background(), logEndQueryTimeout)
			defer cancel()
			c, err := rpc.Dial(ctx, mem.Addr, rpc.Options{})
			if err != nil {
				return
			}
			defer c.Close()
			var hs protocol.HAStatus
			if err := c.CallDecode(ctx, protocol.CodeGetHAStatus, nil, nil, nil, &hs); err != nil {
				return
			}
			mu.Lock()
			cands[id] = ha.Candidate{LogEnd: hs.LogEnd, KnownConfirmed: hs.KnownConfirmed, Electable: hs.Electable}
			mu.Unlock()
		}()
	}
	wg.Wait()
	return cands
}

// ephemeralPorts returns the kernel's ephemeral port range (Linux), ok false when unknown.
func ephemeralPorts() (lo, hi int, ok bool) {
	b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err != nil {
		return 0, 0, false
	}
	f := strings.Fields(string(b))
	if len(f) != 2 {
		return 0, 0, false
	}
	lo, err1 := strconv.Atoi(f[0])
	hi, err2 := strconv.Atoi(f[1])
	return lo, hi, err1 == nil && err2 == nil
}

// portOf returns the port of host:port ("" when malformed).
func portOf(addr string) string {
	_, port, _ := net.SplitHostPort(addr)
	return port
}

// epochLog is a member's durable epoch starts (ha.EpochFile) with lock-free reads for the
// replication path: the newest epoch, and an immutable copy of the list for the master's
// divergence check.
type epochLog struct {
	mu   sync.Mutex // guards f
	f    *ha.EpochFile
	last atomic.Uint32                   // newest epoch recorded
	snap atomic.Pointer[[]ha.EpochStart] // the list, replaced (never modified) on every change
}

func openEpochLog(path string) (*epochLog, error) {
	f, err := ha.OpenEpochFile(path)
	if err != nil {
		return nil, err
	}
	l := &epochLog{f: f}
	l.publishLocked()
	return l, nil
}

// publishLocked refreshes the lock-free views after a change. l.mu must be held (or l not yet
// shared).
func (l *epochLog) publishLocked() {
	list := l.f.Epochs()
	l.snap.Store(&list)
	last := uint32(0)
	if e, ok := l.f.Last(); ok {
		last = e.Epoch
	}
	l.last.Store(last)
}

func (l *epochLog) list() []ha.EpochStart {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.f.Epochs()
}

// snapshot returns the list without copying it (ha.MasterConfig.Epochs): the caller must not
// modify it.
func (l *epochLog) snapshot() []ha.EpochStart { return *l.snap.Load() }

func (l *epochLog) append(e ha.EpochStart) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if err := l.f.Append(e); err != nil {
		return err
	}
	l.publishLocked()
	return nil
}

func (l *epochLog) truncateTo(offset int64) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if err := l.f.TruncateTo(offset); err != nil {
		return err
	}
	l.publishLocked()
	return nil
}

// observe records the epochs of the replicated batches data (appended at start, after a log
// that ended at prevEnd) that are newer than the newest recorded: each batch carries its
// master's epoch (protocol.StampBatch), so a slave learns where each epoch's data begins in its
// own log (Kafka assigns leader epochs the same way on followers). An epoch starts at the end
// of the last batch before it, where its master's log ended when it took over: for the first
// batch of data that is prevEnd, also when the batch went to the next segment because it did
// not fit the rest of the current one (start > prevEnd; the gap is padding), so every member
// records the start the master recorded, whatever the segment layout. Only the batch headers
// are read.
func (l *epochLog) observe(prevEnd, start int64, data []byte) error {
	for off := 0; off < len(data); {
		size := protocol.PeekBatchSize(data[off:])
		e, ok := protocol.BatchEpoch(data[off:])
		if !ok || size <= 0 || off+size > len(data) {
			return nil
		}
		if e > l.last.Load() {
			at := start + int64(off)
			if off == 0 {
				at = prevEnd
			}
			if err := l.append(ha.EpochStart{Epoch: e, StartOffset: at}); err != nil {
				return fmt.Errorf("cannot record epoch %d: %w", e, err)
			}
		}
		off += size
	}
	return nil
}
