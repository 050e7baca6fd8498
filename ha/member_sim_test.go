package ha

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/cockroachdb/datadriven"
)

// TestMemberScenarios runs the scripts of testdata/member over a simulated group of pure
// Members (go test ./ha -run TestMemberScenarios -rewrite regenerates the expected output).
// The simulation replaces what the broker's driver does with I/O: its "Raft" is one committed
// control state with a leader the script or the rules pick, its transport delivers or drops by
// the partitions the script makes, its logs are lists of batches (offset ranges stamped with an
// epoch), and its clock moves only when the script says. After every command it checks the
// safety rule the member exists for: the acknowledged prefix of the log (what the masters
// confirmed) is a prefix of every master's log, forever.
func TestMemberScenarios(t *testing.T) {
	datadriven.Walk(t, "testdata/member", func(t *testing.T, path string) {
		var s *sim
		datadriven.RunTest(t, path, func(t *testing.T, td *datadriven.TestData) string {
			if td.Cmd == "group" {
				s = newSim(t, td)
				return s.flush()
			}
			if s == nil {
				td.Fatalf(t, "the first command must be group")
			}
			s.run(t, td)
			s.checkSafety(t, td)
			return s.flush()
		})
	})
}

// simBatch is a range of a simulated log written in one epoch.
type simBatch struct {
	start, end int64
	epoch      uint32
}

// simMember is one simulated broker: a Member and what its driver would hold.
type simMember struct {
	id       string
	brokerID int64
	m        *Member
	up       bool
	log      []simBatch
	min      int64 // the log's first offset
	epochs   []EpochStart
	known    int64 // the confirmed mark
	cutEpoch uint32
	cutPoint int64
	// applied is the control state this member applied: the group's, as of the last time it
	// could reach the Raft leader.
	applied ControlState
	slave   bool // a replication slave runs
	master  bool // a replication master runs
	// As master: the in-sync tracker the replication master would keep, and the replication
	// connection (session) of each slave, by member id.
	tr        Tracker
	sess      map[string]uint64
	confirmed int64
	restarts  int
	seenEpoch uint32 // the newest epoch a static slave saw in its master's answers
}

func (m *simMember) end() int64 {
	if n := len(m.log); n > 0 {
		return m.log[n-1].end
	}
	return m.min
}

// sim is a broker group of simulated members.
type sim struct {
	raft    bool
	minAcks int
	maxLag  time.Duration
	now     time.Time
	members []*simMember
	state   ControlState
	leader  string
	term    uint64
	cut     map[[2]string]bool
	out     strings.Builder
	// acked is the longest prefix any master confirmed: the messages the group acknowledged.
	acked    []simBatch
	reply    *Reply
	sessions uint64 // the last replication connection id handed out
}

func newSim(t *testing.T, td *datadriven.TestData) *sim {
	s := &sim{now: time.Unix(1_000_000, 0), cut: map[[2]string]bool{}, maxLag: time.Second, minAcks: 1}
	var ids []string
	td.ScanArgs(t, "members", &ids)
	s.raft = td.HasArg("raft")
	td.MaybeScanArgs(t, "min-acks", &s.minAcks)
	for i, id := range ids {
		cfg := MemberConfig{SelfID: id, BrokerID: int64(i + 1), Raft: s.raft, Mode: "SYNC_MASTER"}
		if !s.raft {
			cfg.SelfID, cfg.BrokerID = "", int64(i)
		}
		sm := &simMember{id: id, brokerID: cfg.BrokerID, m: NewMember(cfg), up: true, known: -1, cutPoint: -1}
		s.members = append(s.members, sm)
		s.state.Members = append(s.state.Members, MemberInfo{ID: id, BrokerID: cfg.BrokerID, Addr: id + ":10911", HAAddr: id + ":10912"})
	}
	slices.SortFunc(s.state.Members, func(a, b MemberInfo) int { return strings.Compare(a.ID, b.ID) })
	if !s.raft {
		// Static roles: the first member is the master, the others follow it.
		for i, sm := range s.members {
			s.step(sm, StartStatic{Slave: i > 0, BrokerID: sm.brokerID, Master: s.staticMasterInfo(s.members[0])})
		}
	}
	fmt.Fprintf(&s.out, "group of %d, %s\n", len(ids), map[bool]string{true: "Raft-elected", false: "static roles"}[s.raft])
	return s
}

func (s *sim) staticMasterInfo(sm *simMember) MemberInfo {
	return MemberInfo{BrokerID: 0, Addr: sm.id + ":10911", HAAddr: sm.id + ":10912"}
}

func (s *sim) member(t *testing.T, td *datadriven.TestData, key string) *simMember {
	var id string
	td.ScanArgs(t, key, &id)
	for _, sm := range s.members {
		if sm.id == id {
			return sm
		}
	}
	td.Fatalf(t, "no member %s", id)
	return nil
}

func (s *sim) byID(id string) *simMember {
	for _, sm := range s.members {
		if sm.id == id {
			return sm
		}
	}
	return nil
}

func (s *sim) byBrokerID(id int64) *simMember {
	for _, sm := range s.members {
		if sm.m.Role().BrokerID == id || sm.brokerID == id {
			return sm
		}
	}
	return nil
}

// reach reports whether a and b can talk (both up, no partition between them).
func (s *sim) reach(a, b *simMember) bool {
	return a.up && b.up && !s.cut[[2]string{a.id, b.id}] && !s.cut[[2]string{b.id, a.id}]
}

func (s *sim) flush() string {
	out := s.out.String()
	s.out.Reset()
	if out == "" {
		return "ok\n"
	}
	return out
}

func (s *sim) printf(format string, args ...any) { fmt.Fprintf(&s.out, format, args...) }

func (s *sim) run(t *testing.T, td *datadriven.TestData) {
	switch td.Cmd {
	case "tick":
		// tick [advance=<duration>] [rounds=N]: the clock moves, then every member up ticks
		// (Raft) and replication runs, N rounds (default 3).
		if td.HasArg("advance") {
			var d string
			td.ScanArgs(t, "advance", &d)
			dur, err := time.ParseDuration(d)
			if err != nil {
				td.Fatalf(t, "advance: %v", err)
			}
			s.now = s.now.Add(dur)
		}
		rounds := 3
		td.MaybeScanArgs(t, "rounds", &rounds)
		for range rounds {
			s.pickLeader()
			for _, sm := range s.members {
				if sm.up && s.raft {
					s.tick(sm)
				}
			}
			s.replicate()
		}
	case "append":
		// append size=<bytes> [n=<batches>]: the master writes (its epoch on every batch).
		var size int64
		n := 1
		td.ScanArgs(t, "size", &size)
		td.MaybeScanArgs(t, "n", &n)
		m := s.master()
		if m == nil {
			s.printf("no master: append refused\n")
			return
		}
		for range n {
			e := m.end()
			m.log = append(m.log, simBatch{start: e, end: e + size, epoch: m.m.Role().Epoch})
		}
		s.printf("%s appended %d batch(es); log end %d\n", m.id, n, m.end())
	case "replicate":
		rounds := 1
		td.MaybeScanArgs(t, "rounds", &rounds)
		for range rounds {
			s.replicate()
		}
	case "partition":
		// partition a=<id> b=<id> | partition a=<id> (from everyone)
		a := s.member(t, td, "a")
		var b *simMember
		if td.HasArg("b") {
			b = s.member(t, td, "b")
		}
		for _, o := range s.members {
			if o != a && (b == nil || o == b) {
				s.cut[[2]string{a.id, o.id}] = true
			}
		}
		s.printf("partitioned %s\n", td.CmdArgs)
	case "heal":
		s.cut = map[[2]string]bool{}
		s.printf("healed\n")
	case "kill":
		sm := s.member(t, td, "id")
		sm.up, sm.slave, sm.master = false, false, false
		s.dropConns(sm)
		if s.leader == sm.id {
			s.leader = ""
		}
		s.printf("killed %s\n", sm.id)
	case "restart":
		sm := s.member(t, td, "id")
		s.restart(sm)
	case "leader":
		// leader id=<id>: Raft leadership goes to id (a new term).
		sm := s.member(t, td, "id")
		s.setLeader(sm.id)
	case "elect-master":
		// elect-master at=<id> target=<brokerId> [force]
		at := s.member(t, td, "at")
		var target int64
		td.ScanArgs(t, "target", &target)
		s.electMaster(at, target, td.HasArg("force"))
	case "diverge":
		// diverge id=<id> size=<bytes> epoch=<e>: the member's log gets a batch no master
		// wrote (what a deposed master wrote and never confirmed).
		sm := s.member(t, td, "id")
		var size int64
		var epoch int
		td.ScanArgs(t, "size", &size)
		td.ScanArgs(t, "epoch", &epoch)
		e := sm.end()
		sm.log = append(sm.log, simBatch{start: e, end: e + size, epoch: uint32(epoch)})
		if n := len(sm.epochs); n == 0 || sm.epochs[n-1].Epoch < uint32(epoch) {
			sm.epochs = append(sm.epochs, EpochStart{Epoch: uint32(epoch), StartOffset: e})
		}
		s.printf("%s wrote %d bytes in epoch %d; log end %d\n", sm.id, size, epoch, sm.end())
	case "bogus-pull":
		// bogus-pull id=<id> offset=<o>: the member's slave asks its master from offset o (a
		// stray or corrupted pull): the master answers out of range.
		sm := s.member(t, td, "id")
		var off int64
		td.ScanArgs(t, "offset", &off)
		s.pull(sm, off)
	case "status":
		s.status()
	default:
		td.Fatalf(t, "unknown command %s", td.Cmd)
	}
}

// master returns the member acting as master, nil when none.
func (s *sim) master() *simMember {
	for _, sm := range s.members {
		if sm.up && sm.m.Role().IsMaster() {
			return sm
		}
	}
	return nil
}

// pickLeader keeps Raft leadership where it is while its holder reaches a majority, else moves
// it to the smallest id that does (none: no leader).
func (s *sim) pickLeader() {
	if !s.raft {
		return
	}
	majority := func(sm *simMember) bool {
		n := 0
		for _, o := range s.members {
			if o == sm || s.reach(sm, o) {
				n++
			}
		}
		return sm.up && n > len(s.members)/2
	}
	if l := s.byID(s.leader); l != nil && majority(l) {
		return
	}
	next := ""
	for _, sm := range s.members {
		if majority(sm) {
			next = sm.id
			break
		}
	}
	if next != s.leader {
		s.setLeader(next)
	}
}

func (s *sim) setLeader(id string) {
	s.leader = id
	s.term++
	if id == "" {
		s.printf("no Raft leader\n")
		return
	}
	s.printf("Raft leader %s (term %d)\n", id, s.term)
}

// leaderOf returns the leader as sm sees it: "" when it cannot reach it.
func (s *sim) leaderOf(sm *simMember) string {
	l := s.byID(s.leader)
	if l == nil || (l != sm && !s.reach(sm, l)) {
		return ""
	}
	return l.id
}

func (s *sim) tick(sm *simMember) {
	leader := s.leaderOf(sm)
	if leader != "" {
		sm.applied = s.state
	}
	s.step(sm, Tick{Now: s.now, State: sm.applied, Leader: leader == sm.id, Term: s.term, LeaderID: leader})
}

// step feeds sm an event and carries out its actions as the broker's driver would.
func (s *sim) step(sm *simMember, ev Event) {
	for _, a := range sm.m.Step(ev) {
		if next := s.exec(sm, a); next != nil {
			s.step(sm, next)
		}
	}
}

func (s *sim) exec(sm *simMember, a Action) Event {
	switch a := a.(type) {
	case Publish:
		r := a.Role
		s.printf("%s: %s epoch=%d brokerId=%d", sm.id, r.State, r.Epoch, r.BrokerID)
		if r.Master.Addr != "" {
			s.printf(" master=%s", strings.TrimSuffix(r.Master.Addr, ":10911"))
		}
		switch r.NoMaster {
		case NoMasterNoLeader:
			s.printf(" nomaster=no-leader")
		case NoMasterElecting:
			s.printf(" nomaster=electing")
		}
		if r.Cutting {
			s.printf(" cutting")
		}
		if r.Stopped != "" {
			s.printf(" stopped=%q", r.Stopped)
		}
		s.printf("\n")
		if !s.raft && r.State == MemberMaster {
			// The NameServers' route names the new master; the static slaves learn it.
			for _, o := range s.members {
				if o != sm && o.up && !o.master {
					s.step(o, MasterLearnt{Addr: r.Master.Addr, HAAddr: r.Master.HAAddr})
				}
			}
		}
	case StopSlave:
		sm.slave = false
		s.dropConns(sm)
	case CloseMaster:
		sm.master = false
	case Follow:
		sm.slave = true
		return Following{Epoch: a.Epoch, Master: a.Master}
	case FollowEpoch, KickSlave, Register, Hurry, Relax, RecordElected:
	case Barrier:
		if s.leader != sm.id {
			return BarrierDone{Now: s.now, Term: a.Term, State: s.state, Err: errors.New("not the leader")}
		}
		return BarrierDone{Now: s.now, Term: a.Term, State: s.state}
	case QueryCandidates:
		cands := map[string]Candidate{sm.id: s.candidate(sm)}
		for _, id := range a.State.SyncStateSet {
			o := s.byID(id)
			if o == nil || o == sm || id == a.Exclude || id == a.State.MasterID || !s.reach(sm, o) {
				continue
			}
			cands[id] = s.candidate(o)
		}
		return CandidatesFound{Now: s.now, State: a.State, Candidates: cands}
	case StartMaster:
		return s.startMaster(sm, a)
	case TransferLeadership:
		o := s.byID(a.Target)
		if o == nil || !s.reach(sm, o) || s.leader != sm.id {
			return TransferDone{Now: s.now, Target: a.Target, Err: errors.New("unreachable")}
		}
		s.printf("%s hands Raft leadership to %s\n", sm.id, a.Target)
		s.setLeader(a.Target)
		return TransferDone{Now: s.now, Target: a.Target}
	case ReadIndex:
		if l := s.leaderOf(sm); l == "" || l == sm.id {
			return ReadIndexDone{}
		}
		sm.applied = s.state
		return ReadIndexDone{OK: true, Input: TruncationInput{State: s.state, Mine: slices.Clone(sm.epochs),
			LogMin: sm.min, LogEnd: sm.end(), KnownConfirmed: sm.known, LastCutEpoch: sm.cutEpoch, LastCutPoint: sm.cutPoint}}
	case Leave:
		m := s.byID(a.Master.ID)
		if m == nil || !m.master || !s.reach(sm, m) {
			return LeaveDone{Err: errors.New("master unreachable")}
		}
		if _, changes, err := m.tr.Leave(sm.brokerID, sm.id, m.end()); err != nil {
			return LeaveDone{Err: err}
		} else {
			s.printChanges(m, changes)
		}
		s.commitVerdicts(m)
		if m.tr.Counted(sm.brokerID) {
			return LeaveDone{Err: errors.New("the set without the slave is not committed")}
		}
		s.printf("%s left the in-sync set\n", sm.id)
		return LeaveDone{}
	case Truncate:
		s.printf("%s truncates its log %d -> %d (epoch %d) and restarts\n", sm.id, sm.end(), a.Point, a.Epoch)
		sm.cutEpoch, sm.cutPoint = a.Epoch, a.Point
		cutLog(sm, a.Point)
		s.restart(sm)
	case Reset:
		s.printf("%s resets its log %d..%d to start at %d (epoch %d)\n", sm.id, sm.min, sm.end(), a.Base, a.Epoch)
		sm.cutEpoch, sm.cutPoint = a.Epoch, a.Input.LogMin
		sm.log, sm.epochs, sm.min = nil, nil, a.Base
		return CutDone{}
	case Alert:
		if a.First {
			s.printf("%s ALERT: %s\n", sm.id, a.Reason)
		}
	case AwaitCaughtUp:
		o := s.byBrokerID(a.Target)
		for range 3 {
			s.replicate()
		}
		return TargetCaughtUp{OK: o != nil && o.end() == sm.end() && s.reach(sm, o)}
	case AskTargetToTakeOver:
		o := s.byBrokerID(a.Target)
		if o == nil || !s.reach(sm, o) {
			return TargetElected{Err: errors.New("unreachable")}
		}
		prev := s.reply
		s.reply = nil
		s.step(o, ElectMaster{Target: a.Target, Force: true, Mode: a.Mode, SlaveEpoch: o.seenEpoch})
		r := s.reply
		s.reply = prev
		if r == nil || r.Err != nil {
			return TargetElected{Err: fmt.Errorf("no takeover: %v", r)}
		}
		return TargetElected{Epoch: r.Epoch, Master: r.Master}
	case Reply:
		s.reply = &a
	case Note:
		if a.Warn {
			s.printf("%s: %s\n", sm.id, a.Msg)
		}
	default:
		panic(fmt.Sprintf("sim: action %T", a))
	}
	return nil
}

func (s *sim) candidate(sm *simMember) Candidate {
	return Candidate{LogEnd: sm.end(), KnownConfirmed: sm.known, Electable: sm.m.Role().Electable(sm.end(), sm.known)}
}

// startMaster does what the broker's driver does for StartMaster.
func (s *sim) startMaster(sm *simMember, a StartMaster) Event {
	self := MemberInfo{ID: sm.id, BrokerID: sm.brokerID, Addr: sm.id + ":10911", HAAddr: sm.id + ":10912"}
	if !a.Raft {
		sm.master = true
		sm.tr, sm.sess = MakeTracker(TrackerConfig{Rules: s.rules(), MinAcks: s.minAcks, InitialConfirmed: sm.known}, s.now), map[string]uint64{}
		sm.confirmed = max(sm.known, 0)
		return MasterStarted{Epoch: a.Epoch, Self: MemberInfo{Addr: self.Addr, HAAddr: self.HAAddr}}
	}
	if s.leader != sm.id {
		return MasterStarted{Err: errors.New("not the leader")}
	}
	keep, initial := EpochSyncSet(s.state, sm.id)
	next, err := s.state.Apply(Command{Kind: CmdNewEpoch, MasterID: sm.id, StartOffset: sm.end(), SyncStateSet: keep, Members: []MemberInfo{self}})
	if err != nil {
		return MasterStarted{Err: err}
	}
	s.state = next
	sm.epochs = append(sm.epochs, EpochStart{Epoch: next.Epoch, StartOffset: sm.end()})
	sm.master = true
	sm.confirmed = min(max(sm.known, 0), sm.end())
	sm.tr = MakeTracker(TrackerConfig{Rules: s.rules(), MinAcks: s.minAcks, CommitSet: true, InitialSet: initial, InitialConfirmed: sm.confirmed}, s.now)
	sm.sess = map[string]uint64{}
	s.printf("%s starts epoch %d at %d, in-sync set %v\n", sm.id, next.Epoch, sm.end(), next.SyncStateSet)
	return MasterStarted{Epoch: next.Epoch, Self: self}
}

// restart gives sm a new Member (a broker process restarted on the same store).
func (s *sim) restart(sm *simMember) {
	cfg := sm.m.cfg
	s.dropConns(sm)
	sm.m = NewMember(cfg)
	sm.up, sm.slave, sm.master = true, false, false
	sm.restarts++
	s.printf("%s restarted (log end %d, epochs %v)\n", sm.id, sm.end(), sm.epochs)
	if !s.raft {
		m := s.members[0]
		s.step(sm, StartStatic{Slave: sm != m, BrokerID: sm.brokerID, Master: s.staticMasterInfo(m), Epoch: lastEpoch(sm.epochs)})
	}
}

func lastEpoch(es []EpochStart) uint32 {
	if n := len(es); n > 0 {
		return es[n-1].Epoch
	}
	return 0
}

func cutLog(sm *simMember, point int64) {
	for len(sm.log) > 0 && sm.log[len(sm.log)-1].start >= point {
		sm.log = sm.log[:len(sm.log)-1]
	}
	if n := len(sm.log); n > 0 && sm.log[n-1].end > point {
		sm.log[n-1].end = point
	}
	for len(sm.epochs) > 0 && sm.epochs[len(sm.epochs)-1].StartOffset >= point && sm.epochs[len(sm.epochs)-1].StartOffset > sm.min {
		sm.epochs = sm.epochs[:len(sm.epochs)-1]
	}
}

// masterOf returns the master sm follows, nil when it cannot reach one.
func (s *sim) masterOf(sm *simMember) *simMember {
	r := sm.m.Role()
	for _, o := range s.members {
		if o != sm && o.master && o.m.Role().Master.Addr == r.Master.Addr && r.Master.Addr != "" {
			return o
		}
	}
	return nil
}

// replicate runs one pull of every running slave, then the master's in-sync rules.
func (s *sim) replicate() {
	for _, sm := range s.members {
		if sm.up && sm.slave && sm.m.Role().State == MemberSlave {
			s.pull(sm, sm.end())
		}
	}
	for _, m := range s.members {
		if m.up && m.master {
			s.evalSet(m)
		}
	}
}

// pull is one replication pull of slave sm from offset off: the diverging-epoch check, then a
// copy of what the master has after off.
func (s *sim) pull(sm *simMember, off int64) {
	m := s.masterOf(sm)
	if m == nil || !s.reach(sm, m) {
		return
	}
	if sm.m.Role().Epoch > m.m.Role().Epoch {
		return // fenced
	}
	sm.seenEpoch = max(sm.seenEpoch, m.m.Role().Epoch)
	last, _ := NewestWithData(sm.epochs, sm.end())
	if s.raft && last != 0 {
		if epoch, end := DivergingEpoch(m.epochs, m.end(), last); epoch != last || off > end {
			s.printf("%s pulls from %d: diverged (master %s: epoch %d ends at %d)\n", sm.id, off, m.id, epoch, end)
			s.step(sm, OutOfRange{Divergence: Divergence{DivergingEpoch: epoch, TruncateTo: end, MasterMin: m.min, MasterEnd: m.end(), Epoch: m.m.Role().Epoch}})
			return
		}
	}
	if off != sm.end() || off > m.end() || !boundary(m, off) {
		s.printf("%s pulls from %d: out of range (master %s log %d..%d)\n", sm.id, off, m.id, m.min, m.end())
		if s.raft {
			s.step(sm, OutOfRange{Divergence: Divergence{TruncateTo: -1, MasterMin: m.min, MasterEnd: m.end(), Epoch: m.m.Role().Epoch}})
		}
		return
	}
	// The pull acknowledges off, then copies.
	if m.sess[sm.id] == 0 {
		s.sessions++
		m.sess[sm.id] = s.sessions
		memberID := sm.id
		if !s.raft {
			memberID = ""
		}
		m.tr.Connect(SlaveConn{Session: s.sessions, BrokerID: sm.m.Role().BrokerID, MemberID: memberID}, s.now)
	}
	res := m.tr.Ack(m.sess[sm.id], off, m.end(), m.end(), s.now)
	s.printChanges(m, res.Changes)
	for _, b := range m.log {
		if b.start < off {
			continue
		}
		if n := len(sm.epochs); s.raft && (n == 0 || sm.epochs[n-1].Epoch < b.epoch) {
			sm.epochs = append(sm.epochs, EpochStart{Epoch: b.epoch, StartOffset: sm.end()})
		}
		sm.log = append(sm.log, b)
	}
	sm.known = max(sm.known, min(m.tr.ConfirmedOffset(m.end()), sm.end()))
}

func boundary(m *simMember, off int64) bool {
	if off == m.min || off == m.end() {
		return true
	}
	for _, b := range m.log {
		if b.start == off {
			return true
		}
	}
	return false
}

// evalSet applies the in-sync rules on master m (the tracker's tick), commits a changed set
// through the sim's Raft, and notes what m confirmed.
func (s *sim) evalSet(m *simMember) {
	s.printChanges(m, m.tr.Tick(m.end(), s.now))
	if s.raft {
		s.commitVerdicts(m)
	}
	if c := m.tr.ConfirmedOffset(m.end()); c > m.confirmed {
		m.confirmed = c
		m.known = max(m.known, c)
		s.noteAcked(m, c)
	}
}

// commitVerdicts commits the set master m's verdicts call for, when it differs from the
// committed one (the replication master's committer).
func (s *sim) commitVerdicts(m *simMember) {
	_, ids, differs := m.tr.ToCommit()
	if !differs {
		return
	}
	if s.commitSet(m, slices.Clone(ids)) {
		m.tr.SetCommitted(ids, m.end())
	}
}

func (s *sim) printChanges(m *simMember, changes []VerdictChange) {
	for _, c := range changes {
		s.printf("%s: slave %d in sync %v (%s)\n", m.id, c.BrokerID, c.InSync, c.Reason)
	}
}

// dropConns closes sm's replication connections to every master (its process or slave ended).
func (s *sim) dropConns(sm *simMember) {
	for _, m := range s.members {
		if id := m.sess[sm.id]; id != 0 && m.master {
			res := m.tr.Disconnect(id, m.end(), s.now)
			s.printChanges(m, res.Changes)
			delete(m.sess, sm.id)
		}
	}
}

func (s *sim) rules() SyncRules { return SyncRules{MaxLagBytes: 1 << 40, MaxLagTime: s.maxLag} }

func (s *sim) commitSet(m *simMember, set []string) bool {
	if !slices.Contains(set, m.id) {
		set = append(set, m.id)
	}
	if s.leaderOf(m) == "" {
		return false // the master cannot reach the Raft leader: nothing commits
	}
	next, err := s.state.Apply(Command{Kind: CmdSetSyncStateSet, Epoch: m.m.Role().Epoch, SyncStateSet: set})
	if err != nil {
		s.printf("%s cannot commit the in-sync set %v: %v\n", m.id, set, err)
		return false
	}
	s.state = next
	s.printf("in-sync set %v\n", next.SyncStateSet)
	return true
}

// noteAcked records that master m confirmed its log up to c: that prefix is acknowledged.
func (s *sim) noteAcked(m *simMember, c int64) {
	var p []simBatch
	for _, b := range m.log {
		if b.start >= c {
			break
		}
		b.end = min(b.end, c)
		p = append(p, b)
	}
	if end(p) > end(s.acked) {
		s.acked = p
	}
}

func end(bs []simBatch) int64 {
	if n := len(bs); n > 0 {
		return bs[n-1].end
	}
	return 0
}

// checkSafety fails the test when a master's log lacks part of what the group acknowledged or
// holds other data there.
func (s *sim) checkSafety(t *testing.T, td *datadriven.TestData) {
	for _, sm := range s.members {
		if !sm.up || !sm.m.Role().IsMaster() {
			continue
		}
		for _, b := range s.acked {
			if !covers(sm.log, b) {
				td.Fatalf(t, "acknowledged data lost: master %s lacks %+v (its log %+v)", sm.id, b, sm.log)
			}
		}
	}
}

func covers(log []simBatch, b simBatch) bool {
	for _, x := range log {
		if x.start <= b.start && x.end >= b.end && x.epoch == b.epoch {
			return true
		}
	}
	return false
}

func (s *sim) electMaster(at *simMember, target int64, force bool) {
	s.reply = nil
	ev := ElectMaster{Target: target, Force: force, Mode: "SYNC_MASTER", SlaveEpoch: at.seenEpoch}
	if s.raft {
		o := s.byBrokerID(target)
		if o == nil || !slices.Contains(s.state.SyncStateSet, o.id) || s.leader != at.id {
			s.printf("electMaster refused by the driver's checks\n")
			return
		}
		ev.TargetID = o.id
	} else if m := at.m.Role(); m.IsMaster() {
		o := s.byBrokerID(target)
		ts, ok := at.tr.Slave(target)
		ev.InSyncTarget = ok && ts.InSync && ts.Session != 0
		if o != nil {
			ev.TargetAddr = o.id + ":10911"
		}
	}
	s.step(at, ev)
	switch r := s.reply; {
	case r == nil && s.raft:
		s.printf("electMaster: leadership transferred; waiting for the election\n")
	case r == nil:
		s.printf("electMaster: no answer\n")
	case r.Err != nil:
		s.printf("electMaster: %v (notMaster=%v unavailable=%v)\n", r.Err, r.NotMaster, r.Unavailable)
	default:
		s.printf("electMaster: master is brokerId %d at %s, epoch %d\n", r.BrokerID, r.Master.Addr, r.Epoch)
	}
}

func (s *sim) status() {
	if s.raft {
		s.printf("control state: master=%q epoch=%d epochs=%v syncStateSet=%v leader=%q\n", s.state.MasterID, s.state.Epoch, s.state.Epochs, s.state.SyncStateSet, s.leader)
	}
	for _, sm := range s.members {
		r := sm.m.Role()
		up := "up"
		if !sm.up {
			up = "down"
		}
		s.printf("%s %s: %s epoch=%d brokerId=%d log=%d..%d epochs=%v known=%d electable=%v restarts=%d", sm.id, up, r.State, r.Epoch, r.BrokerID, sm.min, sm.end(), sm.epochs, sm.known, r.Electable(sm.end(), sm.known), sm.restarts)
		if sm.master {
			s.printf(" confirmed=%d", sm.confirmed)
		}
		s.printf("\n")
	}
	s.printf("acknowledged up to %d\n", end(s.acked))
}

// TestEpochSyncSet: a new epoch's set never keeps the old master, and always names the new one
// (an empty set would keep the old set, old master included).
func TestEpochSyncSet(t *testing.T) {
	members := []MemberInfo{{ID: "a1", BrokerID: 1, Addr: "h1"}, {ID: "a2", BrokerID: 2, Addr: "h2"}, {ID: "a3", BrokerID: 3, Addr: "h3"}}
	for _, c := range []struct {
		name     string
		set      []string
		master   string
		wantKeep []string
		wantInit []int64
	}{
		{"first election", nil, "", []string{"a2"}, nil},
		{"old master left out", []string{"a1", "a2", "a3"}, "a1", []string{"a2", "a3"}, []int64{3}},
		{"only the old master besides self", []string{"a1", "a2"}, "a1", []string{"a2"}, nil},
		{"self was master (a new term)", []string{"a2", "a3"}, "a2", []string{"a2", "a3"}, []int64{3}},
	} {
		t.Run(c.name, func(t *testing.T) {
			keep, initial := EpochSyncSet(ControlState{MasterID: c.master, SyncStateSet: c.set, Members: members}, "a2")
			var ids []int64
			for _, m := range initial {
				ids = append(ids, m.BrokerID)
			}
			if !slices.Equal(keep, c.wantKeep) || !slices.Equal(ids, c.wantInit) {
				t.Fatalf("keep %v initial %v, want %v %v", keep, ids, c.wantKeep, c.wantInit)
			}
			st, err := ControlState{MasterID: c.master, SyncStateSet: c.set, Members: members}.Apply(Command{Kind: CmdNewEpoch, MasterID: "a2", SyncStateSet: keep})
			if err != nil || slices.Contains(st.SyncStateSet, c.master) && c.master != "a2" {
				t.Fatalf("new epoch: set %v, err %v", st.SyncStateSet, err)
			}
		})
	}
}

// TestRoleElectable is the table of Role.Electable.
func TestRoleElectable(t *testing.T) {
	for _, c := range []struct {
		r          Role
		end, known int64
		want       bool
	}{
		{Role{State: MemberSlave}, 100, 100, true},
		{Role{State: MemberSlave}, 99, 100, false},
		{Role{State: MemberSlave}, 0, -1, true},
		{Role{State: MemberSlave, Cutting: true}, 100, 50, false},
		{Role{State: MemberStopped}, 100, 50, false},
		{Role{State: MemberRestarting}, 100, 50, false},
		{Role{State: MemberBetween}, 100, 50, true},
	} {
		if got := c.r.Electable(c.end, c.known); got != c.want {
			t.Errorf("%+v end %d known %d: %v, want %v", c.r, c.end, c.known, got, c.want)
		}
	}
}
