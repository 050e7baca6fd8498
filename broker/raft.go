package broker

import (
	"context"
	"errors"
	"fmt"
	"math"
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
//   - the Raft leader asks ha.DecideLeader: the in-sync member with the longest log acts as
//     master (Barrier, then a new epoch at its log end, then it accepts writes and registers as
//     brokerId 0); a leader that should not be master hands leadership over;
//   - a member that is not leader gives up the master role at once (a leader that lost its
//     quorum steps down within the leader lease, before another can be elected), then follows
//     the master the control state names, after cutting what that master never had
//     (TruncationPoint over the epoch starts; the cut happens through a restart).
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
}

const (
	// reconcileInterval is how often the loop re-checks the role without an event.
	reconcileInterval = 100 * time.Millisecond
	// raftOpTimeout bounds a Barrier or a proposal of the loop.
	raftOpTimeout = 2 * time.Second
	// logEndQueryTimeout bounds the leader's question to another member for its log end.
	logEndQueryTimeout = 200 * time.Millisecond
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
	return &raftMember{
		b:      b,
		selfID: b.cfg.RaftSelfID,
		peers:  peers,
		epochs: el,
		kick:   make(chan struct{}, 1),
		stop:   make(chan struct{}),
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
		ends := m.logEnds(st)
		switch act, target := ha.DecideLeader(m.selfID, st, ends); act {
		case ha.ActMaster:
			m.becomeMaster()
		case ha.ActTransfer:
			if time.Since(m.lastTransfer) < time.Second {
				return
			}
			m.lastTransfer = time.Now()
			b.log.Info("handing Raft leadership to the in-sync member with the longest log", "to", target, "ends", ends, "syncStateSet", st.SyncStateSet)
			if err := m.node.TransferLeadership(target); err != nil {
				b.log.Warn("leadership transfer failed; leaving that member out for a while", "to", target, "err", err)
				m.failedTarget, m.failedUntil = target, time.Now().Add(5*time.Second)
			}
		default:
			m.warn.Warn(b.log, "Raft leader outside the in-sync set and no in-sync member reachable: waiting (no master)", "syncStateSet", st.SyncStateSet)
		}
		return
	}
	if r.master != nil {
		m.demote(r, "no longer the Raft leader")
		r = b.role.Load()
	}
	if st.MasterID == "" || st.MasterID == m.selfID {
		return // no master elected yet, or this member's old term: wait for the new epoch
	}
	if m.truncateIfDiverged(st, math.MaxInt64) {
		return
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

// becomeMaster takes the master role: the slave stops, the Raft barrier makes the control state
// current, a new epoch starts at this member's log end, and writes are accepted.
func (m *raftMember) becomeMaster() {
	b := m.b
	began := time.Now()
	if r := b.role.Load(); r.slave != nil {
		b.role.Store(&role{epoch: r.epoch})
		r.slave.Close() // no replicated append after this
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
	hm = b.newMasterHA(func(slaves []ha.SyncMember) error { return m.commitSyncSet(hm.Epoch(), slaves) }, initial)
	hm.SetEpoch(st.Epoch) // fences pulls of a newer epoch until this one starts
	if err := startWithRetry(hm); err != nil {
		b.log.Error("cannot serve replication; not taking the master role", "err", err)
		return
	}
	self := ha.Member{ID: m.selfID, BrokerID: b.cfg.BrokerID, Addr: b.Addr(), HAAddr: net.JoinHostPort(b.cfg.advertisedHost(), portOf(hm.Addr()))}
	cmd := ha.Command{Kind: ha.CmdNewEpoch, MasterID: m.selfID, StartOffset: end, SyncStateSet: keep, Members: []ha.Member{self}}
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
	var members []ha.Member
	for _, s := range slaves {
		ids = append(ids, s.MemberID)
		members = append(members, ha.Member{ID: s.MemberID, BrokerID: s.BrokerID, Addr: s.Addr})
	}
	return m.node.Propose(ha.Command{Kind: ha.CmdSetSyncStateSet, Epoch: epoch, SyncStateSet: ids, Members: members}, raftOpTimeout)
}

// demote gives up the master role: sends are refused from now on, and sends waiting for
// replication are answered (not confirmed).
func (m *raftMember) demote(r *role, why string) {
	m.b.role.Store(&role{epoch: r.epoch})
	_ = r.master.Close()
	m.b.registrar.kick()
	m.b.log.Warn("master role given up", "reason", why, "epoch", r.epoch)
}

// becomeSlave starts pulling from the master the control state names.
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

// onOutOfRange runs on the slave's goroutine when the master says this log is ahead of its own.
func (m *raftMember) onOutOfRange(h protocol.HAPullResponse) {
	if !m.truncateIfDiverged(m.node.State(), h.MasterEnd) {
		m.b.log.Error("the master says this log is ahead of its own but the epochs show nothing to cut; waiting",
			"logEnd", m.b.store.LogEndOffset(), "masterEnd", h.MasterEnd)
	}
}

// truncateIfDiverged cuts the log to the last epoch it shares with the group's master (Kafka's
// OffsetsForLeaderEpoch rule, ha.TruncationPoint) when it holds more, and reports whether it
// did: the cut is written as a crash-safe request and carried out by a restart (ErrRestart).
// masterEnd is the master's log end when known (math.MaxInt64: unknown).
func (m *raftMember) truncateIfDiverged(st ha.ControlState, masterEnd int64) bool {
	b := m.b
	end, low := b.store.LogEndOffset(), b.store.LogMinOffset()
	mine := m.epochs.list()
	point := ha.TruncationPoint(mine, end, st.Epochs, masterEnd)
	if point < 0 {
		if end == low {
			return false // nothing to share yet
		}
		point = low // no epoch in common: copy the master's log afresh
	}
	if point >= end {
		return false
	}
	b.log.Warn("this log holds what the master never confirmed: truncating it through a restart",
		"logEnd", end, "truncateTo", point, "myEpochs", mine, "groupEpochs", st.Epochs, "masterEnd", masterEnd)
	if err := b.store.PrepareTruncate(point); err != nil {
		b.log.Error("cannot prepare the truncation", "err", err)
		return true // never follow a master with a diverged log
	}
	if err := m.epochs.truncateTo(point); err != nil {
		b.log.Error("cannot truncate the epoch file", "err", err)
	}
	if m.restarting.CompareAndSwap(false, true) {
		select {
		case b.fatal <- fmt.Errorf("%w: log end %d, truncate to %d", ErrRestart, end, point):
		default:
		}
	}
	return true
}

// logEnds asks the in-sync members for their log ends (in parallel, briefly); this member's own
// is read locally. Left out: unreachable members, the deposed master (its log may hold what it
// never confirmed, and it lost its Raft leadership: it is down or cut off), and a member a
// leadership transfer just failed to reach.
func (m *raftMember) logEnds(st ha.ControlState) map[string]int64 {
	ends := map[string]int64{m.selfID: m.b.store.LogEndOffset()}
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
			ends[id] = hs.LogEnd
			mu.Unlock()
		}()
	}
	wg.Wait()
	return ends
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

// epochLog is a member's durable epoch starts (ha.EpochFile) with a lock-free check of the newest
// epoch for the replication path.
type epochLog struct {
	mu   sync.Mutex // guards f
	f    *ha.EpochFile
	last atomic.Uint32 // newest epoch recorded
}

func openEpochLog(path string) (*epochLog, error) {
	f, err := ha.OpenEpochFile(path)
	if err != nil {
		return nil, err
	}
	l := &epochLog{f: f}
	if e, ok := f.Last(); ok {
		l.last.Store(e.Epoch)
	}
	return l, nil
}

func (l *epochLog) list() []ha.EpochStart {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.f.Epochs()
}

func (l *epochLog) append(e ha.EpochStart) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if err := l.f.Append(e); err != nil {
		return err
	}
	l.last.Store(e.Epoch)
	return nil
}

func (l *epochLog) truncateTo(offset int64) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if err := l.f.TruncateTo(offset); err != nil {
		return err
	}
	last := uint32(0)
	if e, ok := l.f.Last(); ok {
		last = e.Epoch
	}
	l.last.Store(last)
	return nil
}

// observe records the epochs of the replicated batches data (appended at start) that are newer
// than the newest recorded: each batch carries its master's epoch (protocol.StampBatch), so a
// slave learns where each epoch's data begins in its own log (Kafka assigns leader epochs the
// same way on followers). Only the batch headers are read.
func (l *epochLog) observe(start int64, data []byte) error {
	for off := 0; off < len(data); {
		size := protocol.PeekBatchSize(data[off:])
		e, ok := protocol.BatchEpoch(data[off:])
		if !ok || size <= 0 || off+size > len(data) {
			return nil
		}
		if e > l.last.Load() {
			if err := l.append(ha.EpochStart{Epoch: e, StartOffset: start + int64(off)}); err != nil {
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
