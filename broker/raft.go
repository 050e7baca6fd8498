package broker

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
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
// "Election"): its Raft node for the group's control state, its durable epoch starts, and the
// loop that gives the broker its role. Only the loop changes the role.
//
// The loop reconciles the role with Raft every time leadership or the control state changes
// (and every reconcileInterval):
//   - the Raft leader asks ha.DecideLeader: the electable in-sync member with the longest log
//     acts as master (Barrier, then a new epoch at its log end, then it accepts writes and
//     registers as brokerId 0); a leader that should not be master hands leadership over;
//   - a member that is not leader gives up the master role at once (a leader that lost its
//     quorum steps down within the leader lease, before another can be elected), then follows
//     the master the control state names. That master acknowledges its pulls only while its
//     log is a prefix of the master's, and otherwise says where it diverged; the member then
//     cuts its log there (handleDivergence, ha.PlanTruncation: after a read index, never below
//     what the group confirmed, never twice for one epoch, out of the in-sync set first; the
//     cut happens through a restart).
type raftMember struct {
	b      *Broker
	selfID string
	peers  []ha.RaftPeer
	node   *ha.RaftNode
	epochs *epochLog
	kick   chan struct{}
	stop   chan struct{}
	wg     sync.WaitGroup
	warn   ratelog.Limiter
	// lastTransfer rate-limits leadership transfers; failedTarget is the member a transfer last
	// failed to (left out of the candidates until failedUntil). Loop only.
	lastTransfer time.Time
	failedTarget string
	failedUntil  time.Time
	// barrierTerm is the Raft term in which this member, as leader, last passed a barrier: in
	// that term its control state holds everything committed before the term. Loop only.
	barrierTerm uint64
	restarting  atomic.Bool
	// hurriedAt is when the member shortened its Raft timeouts because the master's process
	// looked gone (UnixNano, 0: not hurried); hurriedLeader the leader it had then.
	hurriedAt     atomic.Int64
	hurriedLeader atomic.Pointer[string]
	// confirmed is the highest offset this member knows the group confirmed; floor says it is
	// enforced (a SYNC group, whose acknowledgements wait for the in-sync set): no cut below it,
	// not electable while the log ends below it. cuts records the truncations made, so that a
	// second one for the same epoch stops the member instead of looping.
	confirmed *confirmedMark
	floor     bool // enforce confirmed: the group acknowledges synchronously
	cuts      *truncationLog
	// stopped, when set, says why this member stopped following its group (it alerts and
	// replicates nothing until an operator acts); stoppedLog rate-limits the alert.
	stopped    atomic.Pointer[string]
	stoppedLog ratelog.Limiter // Interval set by newRaftMember
	divergeLog ratelog.Limiter
	// diverged is what the master answered when it found this log diverged from its own
	// (set by the slave's goroutine, taken by the loop), nil when none.
	diverged atomic.Pointer[divergence]
}

// testBeforeTruncate, when not nil, runs as a member starts cutting its log (tests look at the
// group's state at that moment). Nil in production.
var testBeforeTruncate func(m *raftMember)

// divergence is a master's HAOutOfRange answer: its newest epoch at or before this log's and
// where it ends there (TruncateTo, -1 when the master could not tell), the master's log bounds
// and epoch.
type divergence struct {
	divergingEpoch uint32
	truncateTo     int64
	masterMin      int64
	masterEnd      int64
	epoch          uint32
}

const (
	// reconcileInterval is how often the loop re-checks the role without an event.
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
		b:          b,
		selfID:     b.cfg.RaftSelfID,
		peers:      peers,
		epochs:     el,
		kick:       make(chan struct{}, 1),
		stop:       make(chan struct{}),
		confirmed:  cm,
		floor:      b.cfg.BrokerRole == RoleSyncMaster,
		cuts:       cuts,
		stoppedLog: ratelog.Limiter{Interval: 10 * time.Second},
	}, nil
}

// epochLog returns the member's epoch log, nil on a broker with static roles.
func (m *raftMember) epochLog() *epochLog {
	if m == nil {
		return nil
	}
	return m.epochs
}

// start starts the Raft node and the role loop.
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
		Logger:           m.b.log.With("component", "raft"),
		OnChange:         func(ha.ControlState) { m.poke() },
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
	m.wg.Add(1)
	go m.loop()
	m.b.log.Info("Raft member started", "raftSelfId", m.selfID, "raftAddr", self, "peers", len(m.peers))
	return nil
}

// close stops the loop and the Raft node (the broker closes the role's replication).
func (m *raftMember) close() {
	close(m.stop)
	m.wg.Wait()
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

func (m *raftMember) poke() {
	select {
	case m.kick <- struct{}{}:
	default:
	}
}

func (m *raftMember) loop() {
	defer m.wg.Done()
	t := time.NewTicker(reconcileInterval)
	defer t.Stop()
	leaderCh := m.node.LeaderCh()
	for {
		select {
		case <-m.stop:
			return
		case <-leaderCh:
		case <-m.kick:
		case <-t.C:
		}
		if !m.restarting.Load() {
			m.reconcile()
		}
	}
}

// onMasterGone runs on the slave's goroutine when the master's replication connection closed or
// was refused: the master's process is likely gone, so this member shortens its Raft timeouts
// to the leader lease (RaftNode.Hurry) instead of waiting the whole heartbeat timeout.
func (m *raftMember) onMasterGone() {
	if m.hurriedAt.Load() != 0 {
		return
	}
	leader := m.node.LeaderID()
	m.hurriedLeader.Store(&leader)
	m.hurriedAt.Store(time.Now().UnixNano())
	if err := m.node.Hurry(); err != nil {
		m.b.log.Warn("cannot shorten the Raft timeouts", "err", err)
	}
}

// relaxIfSettled restores the Raft timeouts once another leader is known, or after a while.
func (m *raftMember) relaxIfSettled() {
	at := m.hurriedAt.Load()
	if at == 0 {
		return
	}
	leader := m.node.LeaderID()
	if (leader == "" || leader == *m.hurriedLeader.Load()) && time.Since(time.Unix(0, at)) < 5*time.Second {
		return
	}
	if err := m.node.Relax(); err != nil {
		m.b.log.Warn("cannot restore the Raft timeouts", "err", err)
		return
	}
	m.hurriedAt.Store(0)
}

// reconcile brings the broker's role in line with Raft.
func (m *raftMember) reconcile() {
	b := m.b
	m.relaxIfSettled()
	st := m.node.State()
	r := b.role.Load()
	m.noteConfirmed(r)
	if err := m.confirmed.persist(time.Now(), false); err != nil {
		m.warn.Warn(b.log, "confirmed mark not persisted", "err", err)
	}
	for _, mem := range st.Members {
		if mem.BrokerID == b.cfg.BrokerID && mem.ID != m.selfID {
			m.warn.Warn(b.log, "another member of the group has this member's brokerId: give every member its own brokerId",
				"brokerId", b.cfg.BrokerID, "other", mem.ID, "otherAddr", mem.Addr)
		}
	}
	if st.MasterID != "" && st.MasterID != m.selfID {
		if mem, ok := st.Member(st.MasterID); ok {
			b.setMaster(masterInfo{clientAddr: mem.Addr, haAddr: mem.HAAddr})
		}
	}
	if m.node.IsLeader() {
		if r.master != nil && st.MasterID == m.selfID && st.Epoch == r.epoch {
			return // acting as master of the current epoch
		}
		// A new leader may not have applied everything committed before its term yet (the
		// in-sync set that names it, say): decide on the state after a barrier.
		if term := m.node.Term(); term != m.barrierTerm {
			if err := m.node.Barrier(raftOpTimeout); err != nil {
				b.log.Warn("Raft barrier failed", "err", err)
				return
			}
			m.barrierTerm = term
			st = m.node.State()
		}
		cands := m.candidates(st)
		switch act, target := ha.DecideLeader(m.selfID, st, cands); act {
		case ha.ActMaster:
			m.becomeMaster()
		case ha.ActTransfer:
			if time.Since(m.lastTransfer) < time.Second {
				return
			}
			m.lastTransfer = time.Now()
			b.log.Info("handing Raft leadership to the in-sync member with the longest log", "to", target, "candidates", cands, "syncStateSet", st.SyncStateSet)
			if err := m.node.TransferLeadership(target); err != nil {
				b.log.Warn("leadership transfer failed; leaving that member out for a while", "to", target, "err", err)
				m.failedTarget, m.failedUntil = target, time.Now().Add(5*time.Second)
			}
		default:
			m.warn.Warn(b.log, "no electable in-sync member reachable: waiting (no master)", "syncStateSet", st.SyncStateSet, "candidates", cands)
		}
		return
	}
	if r.master != nil {
		m.demote(r, "no longer the Raft leader")
		r = b.role.Load()
	}
	if why := m.stopped.Load(); why != nil {
		m.stoppedLog.Error(b.log, "this member stopped following its group; it replicates nothing until an operator acts", "reason", *why)
		return
	}
	if st.MasterID == "" || st.MasterID == m.selfID {
		return // no master elected yet, or this member's old term: wait for the new epoch
	}
	if d := m.diverged.Load(); d != nil {
		if m.handleDivergence(d) {
			return
		}
		m.diverged.CompareAndSwap(d, nil)
		if r = b.role.Load(); r.slave != nil {
			r.slave.Kick() // the log stays as it is: pull again
		}
	}
	if r.slave == nil {
		m.becomeSlave(st)
		return
	}
	if r.epoch != st.Epoch {
		r.slave.ObserveEpoch(st.Epoch)
		b.role.Store(&role{slave: r.slave, epoch: st.Epoch})
		r.slave.Kick() // follow the new master now, not after a backoff
		b.log.Info("following the new master", "master", st.MasterID, "epoch", st.Epoch)
	}
}

// noteConfirmed raises the member's confirmed mark from its role: a master's confirmed offset,
// or, for a slave, the part of its own log below the confirmed offset its master last
// acknowledged its pulls with. The mark is thus always what this member's own log holds of
// what the group confirmed, never an offset of another history (a master that found this log
// diverged may have confirmed its own epoch past the point where this log must be cut).
func (m *raftMember) noteConfirmed(r *role) {
	switch {
	case r.master != nil:
		m.confirmed.raise(r.master.ConfirmedOffset())
	case r.slave != nil:
		m.confirmed.raise(min(r.slave.ConfirmedOffset(), m.b.store.LogEndOffset()))
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

// electable reports whether this member may become master: it has not stopped, is not about to
// cut its log (a divergence being handled, a restart asked for), and its log holds everything it
// knows the group confirmed.
func (m *raftMember) electable() bool {
	return m.stopped.Load() == nil && !m.restarting.Load() && m.diverged.Load() == nil &&
		m.b.store.LogEndOffset() >= m.knownConfirmed()
}

// stopReason returns why the member stopped following its group, "" when it did not.
func (m *raftMember) stopReason() string {
	if m == nil {
		return ""
	}
	if why := m.stopped.Load(); why != nil {
		return *why
	}
	return ""
}

// becomeMaster takes the master role: the slave stops, the Raft barrier makes the control state
// current, a new epoch starts at this member's log end, and writes are accepted.
func (m *raftMember) becomeMaster() {
	b := m.b
	began := time.Now()
	if r := b.role.Load(); r.slave != nil {
		b.role.Store(&role{epoch: r.epoch})
		r.slave.Close() // no replicated append after this
		m.noteConfirmed(r)
	}
	if err := m.node.Barrier(raftOpTimeout); err != nil {
		b.log.Warn("Raft barrier failed; not taking the master role yet", "err", err)
		return
	}
	st := m.node.State()
	end := b.store.LogEndOffset()
	var keep []string // the set this epoch starts with: the old one without the old master
	var initial []ha.SyncMember
	for _, id := range st.SyncStateSet {
		if id == m.selfID || id == st.MasterID {
			continue
		}
		keep = append(keep, id)
		if mem, ok := st.Member(id); ok {
			initial = append(initial, ha.SyncMember{MemberID: id, BrokerID: mem.BrokerID, Addr: mem.Addr})
		}
	}
	// The replication port listens before the epoch starts, so that the epoch names its address.
	var hm *ha.Master
	hm = b.newMasterHA(func(slaves []ha.SyncMember) error { return m.commitSyncSet(hm.Epoch(), slaves) }, initial, min(m.confirmed.get(), end))
	hm.SetEpoch(st.Epoch) // fences pulls of a newer epoch until this one starts
	if err := startWithRetry(hm); err != nil {
		b.log.Error("cannot serve replication; not taking the master role", "err", err)
		return
	}
	self := ha.MemberInfo{ID: m.selfID, BrokerID: b.cfg.BrokerID, Addr: b.Addr(), HAAddr: net.JoinHostPort(b.cfg.advertisedHost(), portOf(hm.Addr()))}
	cmd := ha.Command{Kind: ha.CmdNewEpoch, MasterID: m.selfID, StartOffset: end, SyncStateSet: keep, Members: []ha.MemberInfo{self}}
	if err := m.node.Propose(cmd, raftOpTimeout); err != nil {
		b.log.Warn("cannot start a new epoch; not taking the master role", "err", err)
		_ = hm.Close()
		return
	}
	st = m.node.State()
	if st.MasterID != m.selfID {
		_ = hm.Close()
		return
	}
	if err := m.epochs.append(ha.EpochStart{Epoch: st.Epoch, StartOffset: end}); err != nil {
		b.log.Error("cannot record the new epoch; not taking the master role", "epoch", st.Epoch, "err", err)
		_ = hm.Close()
		return
	}
	epoch := st.Epoch
	b.epoch.Store(epoch)
	hm.SetEpoch(epoch)
	b.adoptStoredTopics()
	b.role.Store(&role{master: hm, epoch: epoch, mode: b.cfg.BrokerRole})
	b.registrar.kick()
	b.log.Info("acting as master", "epoch", epoch, "epochStart", end, "syncStateSet", st.SyncStateSet,
		"took", time.Since(began).Round(time.Millisecond))
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

// demote gives up the master role: sends are refused from now on, and sends waiting for
// replication are answered (not confirmed).
func (m *raftMember) demote(r *role, why string) {
	m.b.role.Store(&role{epoch: r.epoch})
	m.noteConfirmed(r)
	_ = r.master.Close()
	m.b.registrar.kick()
	m.b.log.Warn("master role given up", "reason", why, "epoch", r.epoch)
}

// becomeSlave starts pulling from the master the control state names. Its log is not checked
// against the group's epochs first: the master acknowledges a pull only when the log is a
// prefix of its own and otherwise says where to cut (handleDivergence).
func (m *raftMember) becomeSlave(st ha.ControlState) {
	s := m.b.newSlaveHA()
	s.ObserveEpoch(st.Epoch)
	if err := s.Start(); err != nil {
		m.b.log.Error("cannot start replication", "err", err)
		return
	}
	m.b.role.Store(&role{slave: s, epoch: st.Epoch})
	m.b.registrar.kick()
	m.b.log.Info("following the master", "master", st.MasterID, "epoch", st.Epoch)
}

// onOutOfRange runs on the slave's goroutine when the master says this log is not a prefix of
// its own: the loop decides what to cut (handleDivergence), the slave waits for its Kick.
func (m *raftMember) onOutOfRange(h protocol.HAPullResponse) {
	m.diverged.Store(&divergence{divergingEpoch: h.DivergingEpoch, truncateTo: h.TruncateTo, masterMin: h.MasterMin, masterEnd: h.MasterEnd, epoch: h.Epoch})
	m.poke()
}

// handleDivergence decides what to do with a log the master said diverged from its own
// (ha.PlanTruncation) and does it; it reports whether the member is busy with it (the caller
// must not follow the master meanwhile). The decision is made only on control state that has
// caught up with the Raft leader's commit (a read index), and only about a master of the
// current epoch. A cut never goes below what the group confirmed, is never repeated for one
// epoch, and, when this member is in the committed in-sync set, happens only once the master
// has taken it out of the set.
func (m *raftMember) handleDivergence(d *divergence) bool {
	b := m.b
	if !m.caughtUp() {
		return true
	}
	st := m.node.State()
	if d.epoch != st.Epoch || st.MasterID == m.selfID || st.MasterID == "" {
		m.warn.Warn(b.log, "ignoring a divergence answer of a master that is not the current one", "answerEpoch", d.epoch, "epoch", st.Epoch, "master", st.MasterID)
		return false
	}
	cutEpoch, cutPoint := m.cuts.last()
	in := ha.TruncationInput{
		Self: m.selfID, State: st, Mine: m.epochs.list(),
		LogMin: b.store.LogMinOffset(), LogEnd: b.store.LogEndOffset(),
		DivergedAt: d.truncateTo, DivergingEpoch: d.divergingEpoch, MasterEnd: d.masterEnd,
		KnownConfirmed: m.knownConfirmed(), LastCutEpoch: cutEpoch, LastCutPoint: cutPoint,
	}
	plan := ha.PlanTruncation(in)
	switch plan.Action {
	case ha.TruncNone:
		// NB: no Kick: the slave pulls again after its divergedWait, not in a loop.
		m.divergeLog.Error(b.log, "the master says this log diverged from its own but the epochs show nothing to cut; pulling again later",
			"logEnd", in.LogEnd, "divergingEpoch", d.divergingEpoch, "truncateTo", d.truncateTo, "masterEnd", d.masterEnd,
			"myEpochs", in.Mine, "groupEpochs", st.Epochs)
		m.diverged.CompareAndSwap(d, nil)
		return true
	case ha.TruncStale:
		m.warn.Warn(b.log, "the control state is older than this log; deciding once it has caught up", "reason", plan.Reason)
		return true
	case ha.TruncRefuse:
		m.stopFollowing(plan.Reason, in)
		return true
	}
	// A cut: nothing is replicated from here on, and a member of the committed in-sync set
	// first leaves it, so that no acknowledgement relies on what it is about to discard.
	if r := b.role.Load(); r.slave != nil {
		b.role.Store(&role{epoch: r.epoch})
		r.slave.Close()
		m.noteConfirmed(r)
	}
	if plan.LeaveFirst {
		mem, _ := st.Member(st.MasterID)
		ctx, cancel := context.WithTimeout(context.Background(), leaveRequestTimeout)
		err := ha.RequestLeave(ctx, mem.HAAddr, protocol.HALeaveRequest{
			BrokerName: b.cfg.BrokerName, SlaveID: b.cfg.BrokerID, MemberID: m.selfID, Epoch: st.Epoch, TruncateTo: plan.Point})
		cancel()
		if err != nil {
			m.warn.Warn(b.log, "cannot leave the in-sync set before cutting the log; retrying", "master", st.MasterID, "masterHAAddr", mem.HAAddr, "err", err)
			return true
		}
		b.log.Info("left the in-sync set before cutting the log", "master", st.MasterID, "epoch", st.Epoch, "truncateTo", plan.Point)
	}
	if plan.Action == ha.TruncReset {
		m.reset(st, d, in)
		return true
	}
	m.truncate(st.Epoch, plan.Point, in)
	return true
}

// reset discards the whole log, none of which is a prefix of the master's, and starts an empty
// one at the master's min offset, recorded in the truncation log; the member then follows the
// master and copies its log (the next reconcile). Unlike a cut it needs no restart: nothing of
// the old log is kept to recover.
func (m *raftMember) reset(st ha.ControlState, d *divergence, in ha.TruncationInput) {
	b := m.b
	b.log.Warn("no part of this log is a prefix of the master's: discarding it and copying the master's",
		"logMin", in.LogMin, "logEnd", in.LogEnd, "masterMin", d.masterMin, "epoch", st.Epoch, "myEpochs", in.Mine,
		"divergingEpoch", d.divergingEpoch, "truncateTo", d.truncateTo, "knownConfirmed", in.KnownConfirmed)
	if err := m.cuts.record(st.Epoch, in.LogMin, time.Now()); err != nil {
		b.log.Error("cannot record the reset", "err", err)
		return
	}
	if err := m.epochs.truncateTo(0); err != nil { // before the log: a crash leaves no epoch over an empty log
		b.log.Error("cannot clear the epoch file", "err", err)
		return
	}
	if _, err := b.store.ResetTo(d.masterMin, false); err != nil {
		b.log.Error("cannot reset the log", "base", d.masterMin, "err", err)
		return
	}
	m.diverged.CompareAndSwap(d, nil)
}

// truncate cuts the log to point for group epoch epoch: a crash-safe truncation request
// (commitlog.PrepareTruncate), recorded in the truncation log, carried out by a restart
// (ErrRestart).
func (m *raftMember) truncate(epoch uint32, point int64, in ha.TruncationInput) {
	b := m.b
	if testBeforeTruncate != nil {
		testBeforeTruncate(m)
	}
	b.log.Warn("this log holds what the master never confirmed: truncating it through a restart",
		"logEnd", in.LogEnd, "truncateTo", point, "epoch", epoch, "myEpochs", in.Mine, "groupEpochs", in.State.Epochs,
		"masterEnd", in.MasterEnd, "knownConfirmed", in.KnownConfirmed)
	if err := b.store.PrepareTruncate(point); err != nil {
		b.log.Error("cannot prepare the truncation", "err", err)
		return // never follow a master with a diverged log
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
}

// stopFollowing makes this member stop following its group: a cut it would have to make is unsafe
// (below what the group confirmed) or a loop (a second one for the same epoch). It replicates
// nothing, is not electable, and alerts until an operator acts.
func (m *raftMember) stopFollowing(reason string, in ha.TruncationInput) {
	b := m.b
	if r := b.role.Load(); r.slave != nil {
		b.role.Store(&role{epoch: r.epoch})
		r.slave.Close()
	}
	why := reason
	m.stopped.Store(&why)
	b.registrar.kick()
	b.log.Error("STOPPED: this member refuses to cut its log and stops following its group; inspect its log and epoch files "+
		"(remove <storePathRootDir>/truncations to allow another cut) and restart it",
		"reason", reason, "logEnd", in.LogEnd, "myEpochs", in.Mine, "groupEpochs", in.State.Epochs,
		"divergedAt", in.DivergedAt, "knownConfirmed", in.KnownConfirmed, "lastCutEpoch", in.LastCutEpoch)
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
func (m *raftMember) candidates(st ha.ControlState) map[string]ha.Candidate {
	cands := map[string]ha.Candidate{m.selfID: {LogEnd: m.b.store.LogEndOffset(), KnownConfirmed: m.knownConfirmed(), Electable: m.electable()}}
	var mu sync.Mutex
	var wg sync.WaitGroup
	for _, id := range st.SyncStateSet {
		mem, ok := st.Member(id)
		if id == m.selfID || !ok || mem.Addr == "" || id == st.MasterID ||
			id == m.failedTarget && time.Now().Before(m.failedUntil) {
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

// setMaster records the group's master as a Raft-elected member learns it from the control
// state.
func (b *Broker) setMaster(next masterInfo) {
	b.masterMu.Lock()
	defer b.masterMu.Unlock()
	if b.master() != next {
		b.log.Info("master learnt", "masterAddr", next.clientAddr, "masterHAAddr", next.haAddr)
		b.masterAddr.Store(&next)
	}
}
