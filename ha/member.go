package ha

// The member state machine: what one broker does in its group, as a pure, single-threaded
// value in the shape of etcd-io/raft's RawNode. Events go in (Step); actions come out, for a
// driver (the broker) to carry out on the replication Master and Slave, the Raft node and the
// store, feeding the results back as events. Static groups and Raft-elected groups are two
// sources of events for the same machine. The machine owns the member's Role: the driver
// publishes the Role the Publish actions carry, and nothing else.
//
// Nothing here reads a clock, does I/O or keeps a goroutine: times come in the events, so a
// script can drive a member (ha/testdata/member).

import (
	"fmt"
	"slices"
	"time"
)

// MemberState is what a member does in its group now.
type MemberState uint8

// Member states. A member starts Between, and passes through Between on every change of role:
// the old role's replication is stopped before the new one's starts. DESIGN.md ("One owner for a
// member's role") tabulates the transitions.
const (
	// MemberBetween: no role. Sends are refused (NOT_MASTER) and nothing is replicated.
	MemberBetween MemberState = iota
	// MemberMaster: accepts sends of the Role's epoch and serves replication.
	MemberMaster
	// MemberHandingOver: a master handing its role to a slave (electMaster): it refuses sends
	// while the slave catches up, but still serves replication.
	MemberHandingOver
	// MemberSlave: pulls the master's log.
	MemberSlave
	// MemberStopped: the member refused a cut it would have had to make (below what the group
	// confirmed, or a loop); it replicates nothing and alerts until an operator acts.
	MemberStopped
	// MemberRestarting: the member asked for a restart that cuts its log.
	MemberRestarting
)

var memberStateNames = [...]string{"between", "master", "handing-over", "slave", "stopped", "restarting"}

func (s MemberState) String() string {
	if int(s) < len(memberStateNames) {
		return memberStateNames[s]
	}
	return fmt.Sprintf("MemberState(%d)", s)
}

// Role is a member's role as the broker's handlers see it: immutable, replaced as a whole.
type Role struct {
	State MemberState
	// Epoch is the group's epoch the role belongs to: a master stamps its batches with it and
	// fences pulls of newer epochs; a slave refuses answers of older ones.
	Epoch uint32
	// Mode is a master's acknowledgement mode, as the broker names it (SYNC_MASTER or
	// ASYNC_MASTER; "" when not master).
	Mode string
	// BrokerID is the brokerId the member registers with the NameServers: 0 while master (in a
	// static group, after an electMaster too), else its own.
	BrokerID int64
	// Master is the group's master as this member knows it (itself while master): the one a
	// slave pulls from. ID is empty in a static group and the addresses empty while unknown; a
	// Raft-elected member that gives the master role up forgets itself here.
	Master MemberInfo
	// NoMaster, in a Raft-elected group, says why this member does not know its group's
	// current master ("" when it does, or is the master): it hears from no Raft leader, or the
	// Raft leader is not the master the control state names (a master is being elected).
	// Master may still name the master it followed then; KnownMaster does not.
	NoMaster string
	// Cutting: a master answered that this log diverged from its own and the member has not
	// decided or finished what to cut: it may not become master meanwhile.
	Cutting bool
	// Stopped says why the member stopped (MemberStopped).
	Stopped string
}

// IsMaster reports whether the role accepts sends.
func (r Role) IsMaster() bool { return r.State == MemberMaster }

// KnownMaster returns the master this member knows to be its group's current one, the one an
// answer that sends a client to the master (NOT_MASTER) names: itself while master or handing
// over, else Master while NoMaster is empty and its client address is known. ok is false when
// the member knows none: a refusal then names no master, never one that may be gone or
// deposed (a client would ask it in a loop).
func (r Role) KnownMaster() (MemberInfo, bool) {
	switch {
	case r.State == MemberMaster || r.State == MemberHandingOver:
		return r.Master, true
	case r.NoMaster != "" || r.Master.Addr == "":
		return MemberInfo{}, false
	}
	return r.Master, true
}

// knownMaster is KnownMaster's master, empty when none is known.
func (r Role) knownMaster() MemberInfo {
	mi, _ := r.KnownMaster()
	return mi
}

// Why a Raft-elected member knows no current master (Role.NoMaster).
const (
	// NoMasterNoLeader: the member hears from no Raft leader.
	NoMasterNoLeader = "no Raft leader: fewer than a majority of the group's members are reachable (no quorum), or an election is under way"
	// NoMasterElecting: there is a Raft leader, but it is not the master the control state
	// names (yet): the old master is gone or deposed, and the leader is taking the role or
	// handing it to the member with the longest log.
	NoMasterElecting = "a new master is being elected"
)

// noMasterReason returns Role.NoMaster for a Raft-elected member after tick e, given whether
// it acts as master of the control state's current epoch: a member knows the master the
// state names only while that master leads Raft (a master that is not leader gives its role
// up at once).
func noMasterReason(e Tick, actingMaster bool) string {
	switch {
	case e.Leader && actingMaster:
		return ""
	case e.Leader:
		return NoMasterElecting
	case e.LeaderID == "":
		return NoMasterNoLeader
	case e.LeaderID != e.State.MasterID:
		return NoMasterElecting
	}
	return ""
}

// Electable reports whether a member in this role may become master, given its log end and
// the highest offset it knows the group confirmed (-1: none), both in bytes of the commit log:
// it has not stopped, is not about to cut its log, and its log holds everything it knows
// confirmed.
func (r Role) Electable(logEnd, knownConfirmed int64) bool {
	return r.State != MemberStopped && r.State != MemberRestarting && !r.Cutting && logEnd >= knownConfirmed
}

// MemberConfig configures a Member.
type MemberConfig struct {
	// SelfID is the member's Raft server id ("" in a static group); BrokerID its configured
	// brokerId.
	SelfID   string
	BrokerID int64
	// Raft: the group elects its master through Raft (enableRaftHA).
	Raft bool
	// Mode is the acknowledgement mode this member has as master in a Raft-elected group (its
	// brokerRole), and a static master's at start.
	Mode string
	// TransferInterval is the least time between two leadership transfers a leader asks for
	// (default 1 s); FailedTransferHold how long a member a transfer failed to is left out of
	// the candidates (default 5 s); RelaxAfter how long shortened Raft timeouts stay when no
	// other leader shows up (default 5 s).
	TransferInterval   time.Duration
	FailedTransferHold time.Duration
	RelaxAfter         time.Duration
}

// Member is the state of one member of a broker group. It is not safe for concurrent use: one
// goroutine (the broker's role loop) steps it; other goroutines read the published Role.
type Member struct {
	cfg  MemberConfig
	role Role

	// Raft-elected groups.
	barrierTerm  uint64 // the term in which this member, as leader, last passed a barrier
	lastTransfer time.Time
	failedTarget string
	failedUntil  time.Time
	hurriedAt    time.Time // when the Raft timeouts were shortened (zero: they are not)
	hurriedFrom  string    // the leader then
	diverged     *Divergence
	pendingCut   *TruncationPlan // a cut waiting for its leave from the in-sync set
	pendingIn    TruncationInput
	// Static groups: a hand-over in progress (electMaster to a slave).
	handOver *ElectMaster
	prior    Role // the master role a hand-over or failed promotion goes back to
}

// NewMember returns a member in MemberBetween of epoch 0.
func NewMember(cfg MemberConfig) *Member {
	if cfg.TransferInterval <= 0 {
		cfg.TransferInterval = time.Second
	}
	if cfg.FailedTransferHold <= 0 {
		cfg.FailedTransferHold = 5 * time.Second
	}
	if cfg.RelaxAfter <= 0 {
		cfg.RelaxAfter = 5 * time.Second
	}
	return &Member{cfg: cfg, role: Role{BrokerID: cfg.BrokerID}}
}

// Role returns the member's current role.
func (m *Member) Role() Role { return m.role }

// Divergence is a master's HAOutOfRange answer to this member's pull: the master's newest
// epoch at or before this log's newest and where it ends there (TruncateTo, -1 when the master
// could not tell), the master's log bounds (bytes) and its epoch.
type Divergence struct {
	DivergingEpoch uint32
	TruncateTo     int64
	MasterMin      int64
	MasterEnd      int64
	Epoch          uint32
}

// Event is an input of Member.Step.
type Event interface{ event() }

// StartStatic starts a member of a static group in its configured role: Slave (following
// Master, whose addresses may be partly unknown) or master with Mode; Epoch is the epoch it
// starts with (from the record electMaster left), BrokerID the one it registers with.
type StartStatic struct {
	Slave    bool
	Epoch    uint32
	BrokerID int64
	Master   MemberInfo
}

// Tick is the Raft side's view, sent whenever leadership or the control state changes and
// periodically: the control state this member applied, whether it is the Raft leader, the
// leader's term and id.
type Tick struct {
	Now      time.Time
	State    ControlState
	Leader   bool
	Term     uint64
	LeaderID string
}

// BarrierDone answers a Barrier: Err nil when everything committed before Term is applied;
// State is the control state after it.
type BarrierDone struct {
	Now   time.Time
	Term  uint64
	State ControlState
	Err   error
}

// CandidatesFound answers QueryCandidates: what each reachable in-sync member (this one
// included) says of itself.
type CandidatesFound struct {
	Now        time.Time
	State      ControlState
	Candidates map[string]Candidate
}

// MasterStarted answers StartMaster: the epoch the member is master of and its own entry
// (addresses included), or Err (it stays Between; a static promotion goes back to following).
type MasterStarted struct {
	Epoch uint32
	Self  MemberInfo
	Err   error
}

// TransferDone answers TransferLeadership.
type TransferDone struct {
	Now    time.Time
	Target string
	Err    error
}

// Following answers Follow: the slave runs (Err nil) or could not start.
type Following struct {
	Epoch  uint32
	Master MemberInfo
	Err    error
}

// OutOfRange reports a master's answer that this log diverged from its own.
type OutOfRange struct{ Divergence Divergence }

// ReadIndexDone answers ReadIndex: OK when the control state has caught up with the Raft
// leader's commit; Input then holds everything PlanTruncation needs except the master's answer
// (the member fills that in).
type ReadIndexDone struct {
	OK    bool
	Input TruncationInput
}

// LeaveDone answers Leave: the master no longer counts this member (Err nil).
type LeaveDone struct{ Err error }

// CutDone answers Truncate (only when it failed: a truncation that succeeds ends in a restart)
// and Reset.
type CutDone struct{ Err error }

// MasterGone reports that the master's replication connection closed or was refused: its
// process is likely gone. LeaderID is the Raft leader this member knew then.
type MasterGone struct {
	Now      time.Time
	LeaderID string
}

// MasterLearnt reports the master's addresses as a static slave learns them (a NameServer's
// answer, the master's replication answers); empty fields leave what was known.
type MasterLearnt struct {
	Addr, HAAddr string
}

// ElectMaster is an electMaster request (petrelctl electMaster, RocketMQ 5's mqadmin
// electMaster): make brokerId Target the master. Force lets a static slave promote itself (its
// master is down); Mode is the acknowledgement mode the new master takes. SlaveEpoch is the
// newest epoch a static slave has seen in its master's answers; InSyncTarget and TargetAddr say
// whether Target is a connected in-sync slave of this master, and where it serves clients.
type ElectMaster struct {
	Target       int64
	TargetID     string // its Raft server id (Raft-elected groups)
	Force        bool
	Mode         string
	SlaveEpoch   uint32
	InSyncTarget bool
	TargetAddr   string
}

// TargetCaughtUp answers AwaitCaughtUp: OK when the hand-over's target holds the whole log.
type TargetCaughtUp struct{ OK bool }

// TargetElected answers AskTargetToTakeOver: the static slave that took over answered with its
// epoch and addresses (Err nil), or did not.
type TargetElected struct {
	Epoch  uint32
	Master MemberInfo
	Err    error
}

func (StartStatic) event()     {}
func (Tick) event()            {}
func (BarrierDone) event()     {}
func (CandidatesFound) event() {}
func (MasterStarted) event()   {}
func (TransferDone) event()    {}
func (Following) event()       {}
func (OutOfRange) event()      {}
func (ReadIndexDone) event()   {}
func (LeaveDone) event()       {}
func (CutDone) event()         {}
func (MasterGone) event()      {}
func (MasterLearnt) event()    {}
func (ElectMaster) event()     {}
func (TargetCaughtUp) event()  {}
func (TargetElected) event()   {}

// Action is an output of Member.Step, for the driver to carry out in order.
type Action interface{ action() }

// Publish makes Role the role the broker's handlers see.
type Publish struct{ Role Role }

// StopSlave closes the replication slave: no replicated append happens after it.
type StopSlave struct{}

// CloseMaster closes the replication master: sends waiting for replication are answered.
type CloseMaster struct{}

// Follow starts a replication slave of epoch Epoch pulling from Master, registering as
// BrokerID; answered by Following.
type Follow struct {
	Epoch    uint32
	Master   MemberInfo
	BrokerID int64
}

// FollowEpoch makes the running slave follow the master of a newer epoch at once.
type FollowEpoch struct{ Epoch uint32 }

// KickSlave makes the running slave pull again now.
type KickSlave struct{}

// Barrier asks the Raft node for a barrier in Term; answered by BarrierDone.
type Barrier struct{ Term uint64 }

// QueryCandidates asks the in-sync members of State what the election needs of them, leaving
// out Exclude; answered by CandidatesFound.
type QueryCandidates struct {
	State   ControlState
	Exclude string
}

// StartMaster starts a replication master and takes the master role: in a Raft-elected group
// (Raft) after a barrier, with a new epoch committed at the log end (its in-sync set from
// EpochSyncSet); in a static group at Epoch. Answered by MasterStarted.
type StartMaster struct {
	Raft  bool
	Epoch uint32
	Mode  string
	// Promotion: a static slave takes over (electMaster), so it adopts the topics its log holds
	// that its topic table lacks.
	Promotion bool
}

// TransferLeadership hands Raft leadership to Target; answered by TransferDone.
type TransferLeadership struct{ Target string }

// ReadIndex makes sure the control state has caught up with the Raft leader's commit;
// answered by ReadIndexDone.
type ReadIndex struct{}

// Leave asks Master to take this member out of the in-sync set of Epoch before it cuts its log
// to Point; answered by LeaveDone.
type Leave struct {
	Master MemberInfo
	Epoch  uint32
	Point  int64
}

// Truncate cuts the log to Point for epoch Epoch through a restart (crash-safe; recorded in the
// truncation log); answered by CutDone only when it could not.
type Truncate struct {
	Epoch uint32
	Point int64
	Input TruncationInput
}

// Reset discards the whole log and starts an empty one at Base (the master's min offset), for
// epoch Epoch; answered by CutDone.
type Reset struct {
	Epoch uint32
	Base  int64
	Input TruncationInput
}

// Alert says the member stopped following its group and why; the driver logs it loudly, with
// the log and epochs it decided from when First (the moment it stopped), rate-limited after.
type Alert struct {
	Reason string
	First  bool
	Input  TruncationInput
}

// Register re-registers with the NameServers at once (the role or the brokerId changed).
type Register struct{}

// Hurry shortens the Raft timeouts to the leader lease (the master looks gone); Relax restores
// them.
type Hurry struct{}

// Relax restores the Raft timeouts Hurry shortened.
type Relax struct{}

// AwaitCaughtUp waits until slave Target holds the whole log (sends are refused meanwhile);
// answered by TargetCaughtUp.
type AwaitCaughtUp struct{ Target int64 }

// AskTargetToTakeOver asks static slave Target at Addr to promote itself with Mode; answered by
// TargetElected.
type AskTargetToTakeOver struct {
	Target int64
	Addr   string
	Mode   string
}

// RecordElected durably records the role an electMaster gave a static member (the config files
// still name the old roles).
type RecordElected struct {
	BrokerID int64
	Mode     string // "" for a slave
	Epoch    uint32
}

// Reply answers the electMaster request being handled: Err nil with the master's brokerId,
// epoch and addresses, or why not: NotMaster (ask the master, whose client address is in
// Master.Addr when the member knows it: Role.KnownMaster), Unavailable (the request cannot be served now: retry later or elsewhere), else a
// failure of the hand-over itself.
type Reply struct {
	BrokerID    int64
	Epoch       uint32
	Master      MemberInfo
	NotMaster   bool
	Unavailable bool
	Err         error
}

// Note is a line for the log: Warn for what an operator may want to look at, else Info.
type Note struct {
	Warn bool
	Msg  string
	Args []any
}

func (Publish) action()             {}
func (StopSlave) action()           {}
func (CloseMaster) action()         {}
func (Follow) action()              {}
func (FollowEpoch) action()         {}
func (KickSlave) action()           {}
func (Barrier) action()             {}
func (QueryCandidates) action()     {}
func (StartMaster) action()         {}
func (TransferLeadership) action()  {}
func (ReadIndex) action()           {}
func (Leave) action()               {}
func (Truncate) action()            {}
func (Reset) action()               {}
func (Alert) action()               {}
func (Register) action()            {}
func (Hurry) action()               {}
func (Relax) action()               {}
func (AwaitCaughtUp) action()       {}
func (AskTargetToTakeOver) action() {}
func (RecordElected) action()       {}
func (Reply) action()               {}
func (Note) action()                {}

// actions collects the actions of one step.
type actions []Action

func (a *actions) add(x ...Action) { *a = append(*a, x...) }

// set changes the role and publishes it.
func (m *Member) set(a *actions, r Role) {
	if r == m.role {
		return
	}
	m.role = r
	a.add(Publish{Role: r})
}

// between returns the current role with no role left: same epoch and master, but a
// Raft-elected member that was master forgets itself as master (the group has none it knows
// of until the control state names the next).
func (m *Member) between() Role { return m.betweenOf(m.role) }

// betweenOf is role r given up: r as Between.
func (m *Member) betweenOf(r Role) Role {
	r.State, r.Mode = MemberBetween, ""
	if m.cfg.Raft {
		r.BrokerID = m.cfg.BrokerID
		if r.Master.ID == m.cfg.SelfID {
			r.Master = MemberInfo{}
		}
	}
	return r
}

// Step takes one event and returns what to do, in order.
func (m *Member) Step(ev Event) []Action {
	var a actions
	switch e := ev.(type) {
	case StartStatic:
		m.startStatic(&a, e)
	case Tick:
		m.tick(&a, e)
	case BarrierDone:
		m.barrierDone(&a, e)
	case CandidatesFound:
		m.decide(&a, e)
	case MasterStarted:
		m.masterStarted(&a, e)
	case TransferDone:
		if h := m.handOver; h != nil && m.cfg.Raft {
			m.handOver = nil
			if e.Err != nil {
				m.set(&a, m.prior)
				a.add(Reply{Err: fmt.Errorf("Raft leadership transfer to %s failed: %w", e.Target, e.Err)})
			}
			m.prior = Role{}
			break // the driver waits for the control state to name the target
		}
		if e.Err != nil {
			m.failedTarget, m.failedUntil = e.Target, e.Now.Add(m.cfg.FailedTransferHold)
			a.add(Note{Warn: true, Msg: "leadership transfer failed; leaving that member out for a while", Args: []any{"to", e.Target, "err", e.Err}})
		}
	case Following:
		m.following(&a, e)
	case OutOfRange:
		d := e.Divergence
		m.diverged = &d
		r := m.role
		r.Cutting = true
		m.set(&a, r)
	case ReadIndexDone:
		m.readIndexDone(&a, e)
	case LeaveDone:
		m.leaveDone(&a, e)
	case CutDone:
		r := m.role
		if e.Err != nil {
			// The divergence stays: the next tick decides again.
			r.State = MemberBetween
			m.set(&a, r)
			a.add(Note{Warn: true, Msg: "cannot cut the log; deciding again", Args: []any{"err", e.Err}})
			break
		}
		m.diverged = nil
		r.Cutting = false
		m.set(&a, r)
	case MasterGone:
		if m.cfg.Raft && m.hurriedAt.IsZero() {
			m.hurriedAt, m.hurriedFrom = e.Now, e.LeaderID
			a.add(Hurry{})
		}
	case MasterLearnt:
		m.masterLearnt(&a, e)
	case ElectMaster:
		m.electMaster(&a, e)
	case TargetCaughtUp:
		m.caughtUp(&a, e)
	case TargetElected:
		m.targetElected(&a, e)
	default:
		panic(fmt.Sprintf("ha: unknown member event %T", ev))
	}
	return a
}

// startStatic takes the configured role of a static member.
func (m *Member) startStatic(a *actions, e StartStatic) {
	// Published before the slave starts: it reads its master's address from the role.
	m.set(a, Role{State: MemberBetween, Epoch: e.Epoch, BrokerID: e.BrokerID, Master: e.Master})
	if e.Slave {
		a.add(Follow{Epoch: e.Epoch, Master: e.Master, BrokerID: e.BrokerID})
		return
	}
	a.add(StartMaster{Epoch: e.Epoch, Mode: m.cfg.Mode})
}

// tick brings the role in line with Raft (the reconcile of DESIGN.md "Election").
func (m *Member) tick(a *actions, e Tick) {
	if !m.cfg.Raft || m.role.State == MemberRestarting {
		return
	}
	if !m.hurriedAt.IsZero() && (e.LeaderID != "" && e.LeaderID != m.hurriedFrom || e.Now.Sub(m.hurriedAt) >= m.cfg.RelaxAfter) {
		m.hurriedAt = time.Time{}
		a.add(Relax{})
	}
	st := e.State
	acting := (m.role.State == MemberMaster || m.role.State == MemberHandingOver) && st.MasterID == m.cfg.SelfID && st.Epoch == m.role.Epoch
	r := m.role
	r.NoMaster = noMasterReason(e, acting)
	if st.MasterID != "" && st.MasterID != m.cfg.SelfID {
		if mem, ok := st.Member(st.MasterID); ok {
			r.Master = mem
		}
	}
	// No Raft leader (no quorum, or an election under way): nothing tells a slave whether the
	// master it follows still holds the role, so it follows none until a leader is heard
	// again, and says so (state between, not slave).
	unfollow := !e.Leader && e.LeaderID == "" && r.State == MemberSlave && !r.Cutting
	if unfollow {
		r = m.betweenOf(r)
	}
	m.set(a, r)
	if unfollow {
		a.add(StopSlave{}, Register{}, Note{Warn: true, Msg: "stopped following the master: no Raft leader",
			Args: []any{"master", st.MasterID, "epoch", r.Epoch}})
	}
	if e.Leader {
		if acting {
			return // acting as master of the current epoch
		}
		// A new leader may not have applied everything committed before its term yet (the
		// in-sync set that names it, say): decide on the state after a barrier.
		if e.Term != m.barrierTerm {
			a.add(Barrier{Term: e.Term})
			return
		}
		m.query(a, e.Now, st)
		return
	}
	if m.role.State == MemberMaster || m.role.State == MemberHandingOver {
		m.set(a, m.between())
		a.add(CloseMaster{}, Register{}, Note{Warn: true, Msg: "master role given up", Args: []any{"reason", "no longer the Raft leader", "epoch", m.role.Epoch}})
	}
	if m.role.State == MemberStopped {
		a.add(Alert{Reason: m.role.Stopped})
		return
	}
	if st.MasterID == "" || st.MasterID == m.cfg.SelfID {
		return // no master elected yet, or this member's old term: wait for the new epoch
	}
	if e.LeaderID == "" && !m.role.Cutting {
		return // no Raft leader: follow no master until one is heard (above)
	}
	if m.diverged != nil {
		a.add(ReadIndex{})
		return
	}
	m.follow(a, st)
}

// follow makes a member that is not leader follow the master of st.
func (m *Member) follow(a *actions, st ControlState) {
	master, _ := st.Member(st.MasterID)
	switch {
	case m.role.State != MemberSlave:
		a.add(Follow{Epoch: st.Epoch, Master: master, BrokerID: m.cfg.BrokerID})
	case m.role.Epoch != st.Epoch:
		r := m.role
		r.Epoch, r.Master = st.Epoch, master
		m.set(a, r)
		a.add(FollowEpoch{Epoch: st.Epoch}, Note{Msg: "following the new master", Args: []any{"master", st.MasterID, "epoch", st.Epoch}})
	}
}

func (m *Member) barrierDone(a *actions, e BarrierDone) {
	if e.Err != nil {
		a.add(Note{Warn: true, Msg: "Raft barrier failed", Args: []any{"err", e.Err}})
		return
	}
	m.barrierTerm = e.Term
	m.query(a, e.Now, e.State)
}

// query asks the in-sync members for what the election needs.
func (m *Member) query(a *actions, now time.Time, st ControlState) {
	exclude := ""
	if now.Before(m.failedUntil) {
		exclude = m.failedTarget
	}
	a.add(QueryCandidates{State: st, Exclude: exclude})
}

// decide is the leader's choice (DecideLeader) once it knows the candidates.
func (m *Member) decide(a *actions, e CandidatesFound) {
	switch act, target := DecideLeader(m.cfg.SelfID, e.State, e.Candidates); act {
	case ActMaster:
		if m.role.State == MemberSlave {
			m.set(a, m.between())
			a.add(StopSlave{})
		}
		a.add(StartMaster{Raft: true, Mode: m.cfg.Mode})
	case ActTransfer:
		if !m.lastTransfer.IsZero() && e.Now.Sub(m.lastTransfer) < m.cfg.TransferInterval {
			return
		}
		m.lastTransfer = e.Now
		a.add(Note{Msg: "handing Raft leadership to the in-sync member with the longest log", Args: []any{"to", target, "candidates", e.Candidates, "syncStateSet", e.State.SyncStateSet}},
			TransferLeadership{Target: target})
	default:
		a.add(Note{Warn: true, Msg: "no electable in-sync member reachable: waiting (no master)", Args: []any{"syncStateSet", e.State.SyncStateSet, "candidates", e.Candidates}})
	}
}

func (m *Member) masterStarted(a *actions, e MasterStarted) {
	if e.Err != nil {
		a.add(Note{Warn: true, Msg: "not taking the master role", Args: []any{"err", e.Err}})
		if !m.cfg.Raft && m.prior.State == MemberSlave {
			// A static promotion that failed: follow the old master again.
			p := m.prior
			a.add(Follow{Epoch: p.Epoch, Master: p.Master, BrokerID: p.BrokerID},
				Reply{Err: fmt.Errorf("cannot serve replication: %w", e.Err)})
		}
		m.prior = Role{}
		return
	}
	promoted := !m.cfg.Raft && m.prior.State == MemberSlave
	r := m.role
	r.State, r.Epoch, r.Cutting, r.Master, r.NoMaster = MemberMaster, e.Epoch, false, e.Self, ""
	switch {
	case m.cfg.Raft:
		r.Mode, r.BrokerID = m.cfg.Mode, 0
	case promoted:
		r.Mode, r.BrokerID = m.prior.Mode, 0
	default:
		r.Mode = m.cfg.Mode
	}
	r.Master.BrokerID = r.BrokerID
	m.set(a, r)
	a.add(Register{})
	if promoted {
		a.add(RecordElected{BrokerID: 0, Mode: r.Mode, Epoch: e.Epoch},
			Note{Warn: true, Msg: "promoted to master by electMaster; the config files still name the old roles: update brokerId and brokerRole before the next restart",
				Args: []any{"epoch", e.Epoch, "mode", r.Mode, "oldBrokerId", m.prior.BrokerID}},
			Reply{BrokerID: 0, Epoch: e.Epoch, Master: r.Master})
	}
	m.prior = Role{}
}

func (m *Member) following(a *actions, e Following) {
	if e.Err != nil {
		a.add(Note{Warn: true, Msg: "cannot start replication", Args: []any{"err", e.Err}})
		return
	}
	r := m.role
	r.State, r.Epoch, r.Mode = MemberSlave, e.Epoch, ""
	if e.Master != (MemberInfo{}) {
		r.Master = e.Master
	}
	m.set(a, r)
	a.add(Register{})
	if m.cfg.Raft {
		a.add(Note{Msg: "following the master", Args: []any{"master", e.Master.ID, "epoch", e.Epoch}})
	}
}

// readIndexDone decides what to cut once the control state is current (PlanTruncation). A
// cut never goes below what the group confirmed, is never repeated for one epoch, and, when
// this member is in the committed in-sync set, happens only once the master has taken it out.
func (m *Member) readIndexDone(a *actions, e ReadIndexDone) {
	d := m.diverged
	if d == nil || !e.OK {
		return
	}
	st := e.Input.State
	if d.Epoch != st.Epoch || st.MasterID == m.cfg.SelfID || st.MasterID == "" {
		a.add(Note{Warn: true, Msg: "ignoring a divergence answer of a master that is not the current one", Args: []any{"answerEpoch", d.Epoch, "epoch", st.Epoch, "master", st.MasterID}})
		m.diverged = nil
		r := m.role
		r.Cutting = false
		m.set(a, r)
		if m.role.State == MemberSlave {
			a.add(KickSlave{}) // the log stays as it is: pull again
		}
		m.follow(a, st)
		return
	}
	in := e.Input
	in.Self = m.cfg.SelfID
	in.DivergedAt, in.DivergingEpoch, in.MasterEnd = d.TruncateTo, d.DivergingEpoch, d.MasterEnd
	plan := PlanTruncation(in)
	switch plan.Action {
	case TruncNone:
		// NB: no KickSlave: the slave pulls again after its divergedWait, not in a loop.
		a.add(Note{Warn: true, Msg: "the master says this log diverged from its own but the epochs show nothing to cut; pulling again later",
			Args: []any{"logEnd", in.LogEnd, "divergingEpoch", d.DivergingEpoch, "truncateTo", d.TruncateTo, "masterEnd", d.MasterEnd, "myEpochs", in.Mine, "groupEpochs", st.Epochs}})
		m.diverged = nil
		r := m.role
		r.Cutting = false
		m.set(a, r)
		return
	case TruncStale:
		a.add(Note{Warn: true, Msg: "the control state is older than this log; deciding once it has caught up", Args: []any{"reason", plan.Reason}})
		return
	case TruncRefuse:
		if m.role.State == MemberSlave {
			m.set(a, m.between())
			a.add(StopSlave{})
		}
		r := m.role
		r.State, r.Stopped = MemberStopped, plan.Reason
		m.set(a, r)
		a.add(Register{}, Alert{Reason: plan.Reason, First: true, Input: in})
		return
	}
	// A cut: nothing is replicated from here on, and a member of the committed in-sync set
	// first leaves it, so that no acknowledgement relies on what it is about to discard.
	if m.role.State == MemberSlave {
		m.set(a, m.between())
		a.add(StopSlave{})
	}
	if plan.LeaveFirst {
		master, _ := st.Member(st.MasterID)
		m.pendingCut, m.pendingIn = &plan, in
		a.add(Leave{Master: master, Epoch: st.Epoch, Point: plan.Point})
		return
	}
	m.cut(a, plan, in)
}

func (m *Member) leaveDone(a *actions, e LeaveDone) {
	plan, in := m.pendingCut, m.pendingIn
	m.pendingCut, m.pendingIn = nil, TruncationInput{}
	if plan == nil {
		return
	}
	if e.Err != nil {
		// The divergence stays: the next tick asks for a read index and decides again.
		a.add(Note{Warn: true, Msg: "cannot leave the in-sync set before cutting the log; retrying", Args: []any{"master", in.State.MasterID, "err", e.Err}})
		return
	}
	a.add(Note{Msg: "left the in-sync set before cutting the log", Args: []any{"master", in.State.MasterID, "epoch", in.State.Epoch, "truncateTo", plan.Point}})
	m.cut(a, *plan, in)
}

// cut carries a cut or reset out.
func (m *Member) cut(a *actions, plan TruncationPlan, in TruncationInput) {
	if plan.Action == TruncReset {
		a.add(Reset{Epoch: in.State.Epoch, Base: m.diverged.MasterMin, Input: in})
		return
	}
	r := m.role
	r.State = MemberRestarting
	m.set(a, r)
	a.add(Truncate{Epoch: in.State.Epoch, Point: plan.Point, Input: in})
}

// masterLearnt records a static slave's news of its master.
func (m *Member) masterLearnt(a *actions, e MasterLearnt) {
	if m.cfg.Raft || m.role.State == MemberMaster || m.role.State == MemberHandingOver {
		return // a master, or a Raft-elected member: it learns the master from Raft
	}
	r := m.role
	if e.Addr != "" {
		r.Master.Addr = e.Addr
	}
	if e.HAAddr != "" {
		r.Master.HAAddr = e.HAAddr
	}
	if r != m.role {
		a.add(Note{Msg: "master learnt", Args: []any{"masterAddr", r.Master.Addr, "masterHAAddr", r.Master.HAAddr}})
		m.set(a, r)
	}
}

// electMaster hands the master role to brokerId e.Target, or (static, forced) takes it.
func (m *Member) electMaster(a *actions, e ElectMaster) {
	r := m.role
	if m.cfg.Raft {
		// The driver has checked that this member is the Raft leader and e.TargetID a member of
		// the in-sync set; the election makes the target master once it has the leadership.
		if r.State != MemberMaster {
			a.add(Reply{NotMaster: true, Master: r.knownMaster(), Err: fmt.Errorf("ask the master; in a Raft-elected group a master that is down is replaced automatically")})
			return
		}
		m.prior, m.handOver = r, &e
		h := r
		h.State = MemberHandingOver
		m.set(a, h)
		a.add(AwaitCaughtUp{Target: e.Target})
		return
	}
	if e.Target == r.BrokerID {
		switch {
		case r.State == MemberMaster:
			a.add(Reply{BrokerID: r.BrokerID, Epoch: r.Epoch, Master: r.Master})
		case !e.Force:
			a.add(Reply{NotMaster: true, Master: r.knownMaster(), Err: fmt.Errorf("ask the master to hand its role over (or force the promotion when it is down)")})
		case r.State != MemberSlave:
			a.add(Reply{Unavailable: true, Err: fmt.Errorf("this broker is between roles")})
		default:
			// Promotion: the old master is down (forced) or handing over. The mode is the old
			// master's, or SYNC_MASTER when unknown: with minInSyncReplicas=1 and no slave a
			// SYNC_MASTER acknowledges at once, so it never refuses what ASYNC_MASTER would take.
			m.prior = r
			m.prior.Mode = e.Mode
			m.set(a, m.between())
			a.add(StopSlave{}, StartMaster{Epoch: max(e.SlaveEpoch, r.Epoch) + 1, Mode: e.Mode, Promotion: true})
		}
		return
	}
	if r.State != MemberMaster {
		a.add(Reply{NotMaster: true, Master: r.knownMaster(), Err: fmt.Errorf("broker %d is not the master", r.BrokerID)})
		return
	}
	if !e.InSyncTarget {
		a.add(Reply{Unavailable: true, Err: fmt.Errorf("brokerId %d is not a connected in-sync slave", e.Target)})
		return
	}
	m.prior, m.handOver = r, &e
	h := r
	h.State = MemberHandingOver
	m.set(a, h)
	a.add(AwaitCaughtUp{Target: e.Target})
}

func (m *Member) caughtUp(a *actions, e TargetCaughtUp) {
	h := m.handOver
	if h == nil {
		return
	}
	if !e.OK {
		m.set(a, m.prior)
		m.handOver, m.prior = nil, Role{}
		a.add(Reply{Unavailable: true, Err: fmt.Errorf("brokerId %d did not catch up with the log end in time", h.Target)})
		return
	}
	if m.cfg.Raft {
		a.add(TransferLeadership{Target: h.TargetID})
		return
	}
	a.add(AskTargetToTakeOver{Target: h.Target, Addr: h.TargetAddr, Mode: m.prior.Mode})
}

func (m *Member) targetElected(a *actions, e TargetElected) {
	h := m.handOver
	if h == nil {
		return
	}
	m.handOver = nil
	if e.Err != nil {
		// NB: an unknown outcome (the answer lost) would leave two masters: the slave's epoch is
		// newer, so this broker's slaves fence it once they follow the new one.
		m.set(a, m.prior)
		m.prior = Role{}
		a.add(Reply{Err: fmt.Errorf("brokerId %d did not take over: %w", h.Target, e.Err)})
		return
	}
	m.prior = Role{}
	// The replication master stops before the role names the new epoch: it serves the role's.
	m.set(a, m.between())
	a.add(CloseMaster{})
	m.set(a, Role{State: MemberBetween, Epoch: e.Epoch, BrokerID: h.Target, Master: e.Master})
	a.add(Follow{Epoch: e.Epoch, Master: e.Master, BrokerID: h.Target},
		RecordElected{BrokerID: h.Target, Epoch: e.Epoch},
		Note{Warn: true, Msg: "master role handed over by electMaster; the config files still name the old roles: update brokerId and brokerRole before the next restart",
			Args: []any{"newMaster", e.Master.Addr, "epoch", e.Epoch, "brokerId", h.Target}},
		Reply{BrokerID: h.Target, Epoch: e.Epoch, Master: e.Master})
}

// EpochSyncSet returns the in-sync set a new master self starts its epoch with, from the
// control state after its barrier: the old set without the old master (whose log may hold what
// it never confirmed), and the members besides self as the replication master's initial set.
// The set always names self, so that CmdNewEpoch never keeps the old one (and the old master in
// it) for want of other members.
func EpochSyncSet(st ControlState, self string) (keep []string, initial []SyncMember) {
	keep = []string{self}
	for _, id := range st.SyncStateSet {
		if id == self || id == st.MasterID {
			continue
		}
		keep = append(keep, id)
		if mem, ok := st.Member(id); ok {
			initial = append(initial, SyncMember{MemberID: id, BrokerID: mem.BrokerID, Addr: mem.Addr})
		}
	}
	return keep, slices.Clip(initial)
}
