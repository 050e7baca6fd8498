package ha

// The control state of a Raft-elected broker group and the rules that drive it, as pure
// functions: the Raft glue applies Commands through the Raft log and asks DecideLeader
// what a leader does; a member rejoining a master asks TruncationPoint where to cut its log.
// Nothing here reads a clock, the disk or a map in iteration order, so every member that applies
// the same commands holds the same state (a Raft FSM must be deterministic).

import (
	"cmp"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/petrel-mq/petrel/protocol"
)

// EpochStart is one epoch of a group and the commit-log offset its master started it at (Kafka's
// leader-epoch cache entry, KIP-101; RocketMQ 5's EpochEntry). A member's log holds, from
// StartOffset up to the next epoch's start, what that epoch's master wrote.
type EpochStart struct {
	Epoch       uint32
	StartOffset int64
}

// ControlState is what a group's Raft log agrees on (messages never go through it): the master,
// the epoch and where each epoch started, and the in-sync set (RocketMQ 5's SyncStateSet) whose
// members count for SYNC acknowledgements. Members are named by their Raft server ids.
type ControlState struct {
	// MasterID is the member acting as master ("" before the first election).
	MasterID string
	// Epoch is the current epoch (0 before the first election); Epochs lists every epoch's start,
	// ascending, the last one being Epoch.
	Epoch  uint32
	Epochs []EpochStart
	// SyncStateSet holds the in-sync members, the master included, sorted.
	SyncStateSet []string
	// Members is what the group knows of its members' addresses, sorted by ID: every master
	// records itself with its new epoch and the slaves it serves with its in-sync set, so that
	// members learn the master's addresses and a leader outside the set can reach the set.
	Members []MemberInfo
}

// MemberInfo is one broker of a Raft-elected group as the control state knows it.
type MemberInfo struct {
	ID       string // Raft server id (raftSelfId)
	BrokerID int64  // the brokerId of its config (it registers as 0 while master)
	Addr     string // client address, host:port
	HAAddr   string // replication address, host:port ("" for a member never master)
}

// Member returns the entry of member id.
func (s ControlState) Member(id string) (MemberInfo, bool) {
	i, ok := slices.BinarySearchFunc(s.Members, id, func(m MemberInfo, id string) int { return strings.Compare(m.ID, id) })
	if !ok {
		return MemberInfo{}, false
	}
	return s.Members[i], true
}

// MemberByBrokerID returns the entry whose BrokerID is id.
func (s ControlState) MemberByBrokerID(id int64) (MemberInfo, bool) {
	for _, m := range s.Members {
		if m.BrokerID == id {
			return m, true
		}
	}
	return MemberInfo{}, false
}

// upsertMembers returns members with ms put in (replacing entries of the same ID), sorted.
func upsertMembers(members []MemberInfo, ms []MemberInfo) []MemberInfo {
	out := slices.Clone(members)
	for _, m := range ms {
		if m.ID == "" {
			continue
		}
		i, ok := slices.BinarySearchFunc(out, m.ID, func(x MemberInfo, id string) int { return strings.Compare(x.ID, id) })
		if ok {
			if m.HAAddr == "" { // a slave's entry keeps the HA address it had as master
				m.HAAddr = out[i].HAAddr
			}
			out[i] = m
		} else {
			out = slices.Insert(out, i, m)
		}
	}
	return out
}

// CommandKind says what a Command does.
type CommandKind uint8

// Command kinds.
const (
	// CmdNewEpoch makes MasterID the master of a new epoch starting at StartOffset (its log end
	// after the Raft barrier). The new master must be in the in-sync set (or the set empty: the
	// group's first election), and StartOffset must not be below the previous epoch's start.
	// SyncStateSet, when not empty, is the set the epoch starts with: members of the old set
	// only (the master is added).
	CmdNewEpoch CommandKind = 1
	// CmdSetSyncStateSet replaces the in-sync set. Epoch must be the current epoch (a deposed
	// master's late change is refused) and the set must contain the master.
	CmdSetSyncStateSet CommandKind = 2
	// CmdNoop changes nothing: a leader commits one for a read index (RaftNode.ReadIndex), so
	// that its index is one every member applies.
	CmdNoop CommandKind = 3
	// CmdPutTopic creates or updates the topic Topics[0] in the group's topic table
	// (TopicTable); the master commits it before it answers UPDATE_AND_CREATE_TOPIC.
	CmdPutTopic CommandKind = 4
	// CmdDeleteTopic removes the topic named by Topics[0] from the topic table, once the
	// master's deletion record is in the log (DELETE_TOPIC_IN_BROKER).
	CmdDeleteTopic CommandKind = 5
	// CmdInitTopics sets the topic table to Topics while the group has none committed (a group
	// whose stores predate topic configs in Raft: its first master commits its store's table);
	// refused with ErrTopicsKnown afterwards.
	CmdInitTopics CommandKind = 6
)

// Command is one entry of the group's Raft log.
type Command struct {
	Kind         CommandKind
	Epoch        uint32 // CmdSetSyncStateSet: the epoch the proposer is master of
	MasterID     string // CmdNewEpoch
	StartOffset  int64  // CmdNewEpoch
	SyncStateSet []string
	// Members are put into the state's member table (both kinds): the new master itself, or
	// the slaves of the in-sync set.
	Members []MemberInfo
	// Topics are the topic commands' configs (CmdPutTopic, CmdDeleteTopic: one; CmdInitTopics:
	// the table).
	Topics []protocol.TopicConfig
}

// Errors of Apply. A refused command leaves the state unchanged.
var (
	// ErrNotInSync refuses a new master outside the in-sync set: it may lack acknowledged
	// messages.
	ErrNotInSync = errors.New("ha: the new master is not in the in-sync set")
	// ErrStaleEpoch refuses a command proposed under an epoch that is no longer current.
	ErrStaleEpoch = errors.New("ha: command of a stale epoch")
	// ErrBadCommand refuses a malformed command.
	ErrBadCommand = errors.New("ha: bad control command")
)

// Apply returns the state after c, or the unchanged state and an error when the rules refuse c.
// It never modifies s (the slices of the result are fresh).
func (s ControlState) Apply(c Command) (ControlState, error) {
	switch c.Kind {
	case CmdNewEpoch:
		if c.MasterID == "" || c.StartOffset < 0 {
			return s, fmt.Errorf("%w: new epoch with master %q at %d", ErrBadCommand, c.MasterID, c.StartOffset)
		}
		if len(s.SyncStateSet) > 0 && !slices.Contains(s.SyncStateSet, c.MasterID) {
			return s, fmt.Errorf("%w: %s, set %v", ErrNotInSync, c.MasterID, s.SyncStateSet)
		}
		if n := len(s.Epochs); n > 0 && c.StartOffset < s.Epochs[n-1].StartOffset {
			return s, fmt.Errorf("%w: epoch start %d below the previous epoch's %d", ErrBadCommand, c.StartOffset, s.Epochs[n-1].StartOffset)
		}
		next := ControlState{
			MasterID: c.MasterID,
			Epoch:    s.Epoch + 1,
			Epochs:   append(slices.Clone(s.Epochs), EpochStart{Epoch: s.Epoch + 1, StartOffset: c.StartOffset}),
			Members:  upsertMembers(s.Members, c.Members),
		}
		// The new master names the set it starts with (it counts those members for
		// acknowledgements from the start); without one the set keeps its members. Only members
		// of the old set may stay: dropping members is always safe, adding one that may lack
		// acknowledged messages is not. The first election starts the set with the master.
		set := s.SyncStateSet
		if len(c.SyncStateSet) > 0 {
			set = c.SyncStateSet
			for _, id := range set {
				if id != c.MasterID && len(s.SyncStateSet) > 0 && !slices.Contains(s.SyncStateSet, id) {
					return s, fmt.Errorf("%w: %s joins the set with a new epoch, set %v", ErrNotInSync, id, s.SyncStateSet)
				}
			}
		}
		next.SyncStateSet = normalizeSet(append(slices.Clone(set), c.MasterID))
		return next, nil
	case CmdSetSyncStateSet:
		if c.Epoch != s.Epoch || s.MasterID == "" {
			return s, fmt.Errorf("%w: proposed in epoch %d, current %d", ErrStaleEpoch, c.Epoch, s.Epoch)
		}
		set := normalizeSet(slices.Clone(c.SyncStateSet))
		if !slices.Contains(set, s.MasterID) {
			return s, fmt.Errorf("%w: the in-sync set %v lacks the master %s", ErrBadCommand, set, s.MasterID)
		}
		next := s.clone()
		next.SyncStateSet = set
		next.Members = upsertMembers(s.Members, c.Members)
		return next, nil
	case CmdNoop:
		return s, nil
	}
	return s, fmt.Errorf("%w: kind %d", ErrBadCommand, c.Kind)
}

func (s ControlState) clone() ControlState {
	s.Epochs = slices.Clone(s.Epochs)
	s.SyncStateSet = slices.Clone(s.SyncStateSet)
	s.Members = slices.Clone(s.Members)
	return s
}

// normalizeSet sorts ids and drops empty and repeated ones.
func normalizeSet(ids []string) []string {
	ids = slices.DeleteFunc(ids, func(id string) bool { return id == "" })
	slices.Sort(ids)
	return slices.Compact(ids)
}

// LeaderAction is what a Raft leader does with the group (DecideLeader).
type LeaderAction uint8

// Leader actions.
const (
	// ActMaster: act as master (after a Barrier and a CmdNewEpoch at the log end, unless already
	// the master of the current epoch).
	ActMaster LeaderAction = 1
	// ActTransfer: hand Raft leadership to Target, the most caught-up in-sync member.
	ActTransfer LeaderAction = 2
	// ActWait: no in-sync member can take over yet; stay leader without acting as master.
	ActWait LeaderAction = 3
)

// Candidate is what the leader knows of one member when it decides who is master: its log end
// (bytes), the highest offset it knows the group confirmed (KnownConfirmed, -1 for none), and
// whether it says it may be master (Electable: it has not stopped and its log holds what it
// knows confirmed).
type Candidate struct {
	LogEnd         int64
	KnownConfirmed int64
	Electable      bool
}

// DecideLeader returns what the Raft leader self does given the control state and what it
// knows of the members it can reach, itself included (cands, by member id). Only a member of
// the in-sync set may act as master, because only its log holds everything acknowledged; the
// group's first leader (empty set) acts at once. A member is eligible when it is in the set,
// says it is electable, and its log reaches every confirmed offset any reachable member knows
// (a member whose log shrank below what the group acknowledged is never chosen, whatever the
// in-sync set says). Among the eligible the one with the longest log takes over: the others'
// logs are prefixes of it (they pulled from the same master), so none of them has to cut
// anything. The group's first leader acts unless it says it is not electable. A leader that is not the best eligible member hands leadership to it (ties: the
// smallest id, self preferred), or waits when none is reachable.
func DecideLeader(self string, s ControlState, cands map[string]Candidate) (LeaderAction, string) {
	if len(s.SyncStateSet) == 0 {
		if c, ok := cands[self]; ok && !c.Electable {
			return ActWait, ""
		}
		return ActMaster, self
	}
	floor := int64(-1)
	for _, c := range cands {
		floor = max(floor, c.KnownConfirmed)
	}
	eligible := func(id string) (int64, bool) {
		c, ok := cands[id]
		if !ok || !c.Electable || c.LogEnd < floor || !slices.Contains(s.SyncStateSet, id) {
			return 0, false
		}
		return c.LogEnd, true
	}
	best, bestEnd := "", int64(-1)
	if end, ok := eligible(self); ok {
		best, bestEnd = self, end
	}
	for _, id := range s.SyncStateSet { // sorted: ties go to the smallest id
		if end, ok := eligible(id); ok && end > bestEnd {
			best, bestEnd = id, end
		}
	}
	switch best {
	case "":
		return ActWait, ""
	case self:
		return ActMaster, self
	}
	return ActTransfer, best
}

// sameEpochStart reports whether a member's record of an epoch's start (mine) and the group's
// (theirs) name the same boundary. They are equal by construction (an epoch starts at the end
// of the last batch before it, see DESIGN.md "Epochs"), except for an epoch that began before
// the member's log does (a log restarted at the master's min offset): the member records it at
// its log's first offset, logMin.
func sameEpochStart(mine, theirs, logMin int64) bool {
	return mine == theirs || (mine == logMin && theirs < logMin)
}

// TruncationPoint returns the offset a member must cut its log to before it follows a master:
// the end of the last epoch both logs share (same epoch, same start offset), that is the smaller
// of where that epoch ends in the member's log and in the master's (Kafka's OffsetsForLeaderEpoch
// rule). mine and theirs list epoch starts ascending; myMin and myEnd are the member's log
// bounds, masterEnd the master's log end (math.MaxInt64 when unknown). It returns myEnd when
// nothing needs cutting, and -1 when the logs share no epoch (the member must copy the master's
// log afresh).
func TruncationPoint(mine []EpochStart, myMin, myEnd int64, theirs []EpochStart, masterEnd int64) int64 {
	for i := len(mine) - 1; i >= 0; i-- {
		e := mine[i]
		j, found := slices.BinarySearchFunc(theirs, e.Epoch, func(x EpochStart, t uint32) int {
			switch {
			case x.Epoch < t:
				return -1
			case x.Epoch > t:
				return 1
			}
			return 0
		})
		if !found || !sameEpochStart(e.StartOffset, theirs[j].StartOffset, myMin) {
			continue
		}
		myEpochEnd := myEnd
		if i+1 < len(mine) {
			myEpochEnd = mine[i+1].StartOffset
		}
		theirEpochEnd := masterEnd
		if j+1 < len(theirs) {
			theirEpochEnd = theirs[j+1].StartOffset
		}
		return min(myEpochEnd, theirEpochEnd, myEnd)
	}
	return -1
}

// DivergingEpoch is the master's half of Kafka's diverging-epoch check (KIP-101, KIP-320): given
// the master's epoch starts (ascending) and its log end, and the newest epoch of a slave's log
// that holds data, it returns the master's newest epoch at or before it and where that epoch
// ends in the master's log (the next epoch's start, or the log end). One epoch has one master,
// so when epoch is the slave's own the slave's log is a prefix of the master's up to end; when
// it is older (the master never had the slave's newest epoch), the logs part at the latest
// where the master's epoch ends or the slave's does (EpochEnd on the slave's side). With no
// master epoch at or before it, epoch is 0 and end the start of the master's first epoch; a
// master without epochs answers (lastEpoch, masterEnd).
func DivergingEpoch(master []EpochStart, masterEnd int64, lastEpoch uint32) (epoch uint32, end int64) {
	if len(master) == 0 {
		return lastEpoch, masterEnd
	}
	j, found := slices.BinarySearchFunc(master, lastEpoch, func(x EpochStart, t uint32) int {
		return cmp.Compare(x.Epoch, t)
	})
	if !found {
		j-- // the newest master epoch before lastEpoch
	}
	if j < 0 {
		return 0, master[0].StartOffset
	}
	end = masterEnd
	if j+1 < len(master) {
		end = min(master[j+1].StartOffset, masterEnd)
	}
	return master[j].Epoch, end
}

// EpochEnd returns where epoch ends in a log with the epoch starts epochs (ascending) and end
// logEnd: the start of its first epoch newer than epoch, or logEnd. Data of epoch or older
// epochs lies below it, of newer ones at or after it.
func EpochEnd(epochs []EpochStart, epoch uint32, logEnd int64) int64 {
	i, _ := slices.BinarySearchFunc(epochs, epoch+1, func(x EpochStart, t uint32) int {
		return cmp.Compare(x.Epoch, t)
	})
	if i < len(epochs) {
		return min(epochs[i].StartOffset, logEnd)
	}
	return logEnd
}

// NewestWithData returns the newest of epochs (ascending) that holds data in a log ending at
// logEnd (it starts below logEnd), and its start: (0, -1) when none does. An epoch a master took
// and wrote nothing in says nothing of the log's history.
func NewestWithData(epochs []EpochStart, logEnd int64) (uint32, int64) {
	for i := len(epochs) - 1; i >= 0; i-- {
		if epochs[i].StartOffset < logEnd {
			return epochs[i].Epoch, epochs[i].StartOffset
		}
	}
	return 0, -1
}

// TruncateAction is what a member about to follow a master does with its log (PlanTruncation).
type TruncateAction uint8

// Truncate actions.
const (
	// TruncNone: the log is a prefix of the master's; follow it.
	TruncNone TruncateAction = iota
	// TruncCut: cut the log to Point, then follow.
	TruncCut
	// TruncLeaveFirst: the log must be cut to Point, but this member is still in the committed
	// in-sync set: it first asks the master to take it out of the set (and to stop counting its
	// acknowledgements), and cuts only once that is committed.
	TruncLeaveFirst
	// TruncStale: the control state lacks epochs this log holds, so it is older than what this
	// member already replicated: decide again once the state has caught up.
	TruncStale
	// TruncRefuse: the cut would discard what the group confirmed, or repeat a cut already made
	// for this epoch (a loop): the member stops following and alerts (Reason says why).
	TruncRefuse
	// TruncReset: nothing of the log is a prefix of the master's (or the log is empty and does
	// not fit the master's): discard it all and copy the master's from its min offset, under the
	// same rules as a cut (leaving the in-sync set first when in it: Point is then the log's
	// min, and LeaveFirst says so).
	TruncReset
)

// TruncationInput is what PlanTruncation decides from.
type TruncationInput struct {
	// Self is this member's id; State the control state it applied, caught up with the Raft
	// leader's commit.
	Self  string
	State ControlState
	// Mine are this member's epoch starts; LogMin and LogEnd its log bounds (bytes).
	Mine           []EpochStart
	LogMin, LogEnd int64
	// DivergedAt and DivergingEpoch are the master's answer to a pull it found diverged
	// (HAPullResponse.TruncateTo, DivergingEpoch: its newest epoch at or before this log's
	// newest and where it ends there): the logs part at the smaller of DivergedAt and where
	// DivergingEpoch ends in this log. DivergedAt is -1 when the master could not tell; then the
	// point comes from the epochs of State (TruncationPoint) with MasterEnd, the master's log
	// end when known (math.MaxInt64: unknown).
	DivergedAt     int64
	DivergingEpoch uint32
	MasterEnd      int64
	// KnownConfirmed is the highest offset this member knows the group confirmed (-1: none):
	// no cut may go below it.
	KnownConfirmed int64
	// LastCutEpoch and LastCutPoint are the group epoch of this member's last truncation and
	// where it cut (0 and -1: none). A cut for the same epoch that does not go lower would be a
	// loop; one that goes lower is the next round of finding where the logs part.
	LastCutEpoch uint32
	LastCutPoint int64
}

// TruncationPlan is PlanTruncation's answer: the action, the offset to cut to (TruncCut,
// TruncLeaveFirst, TruncRefuse, TruncReset), whether a reset must leave the in-sync set first,
// and, for TruncRefuse and TruncStale, why.
type TruncationPlan struct {
	Action     TruncateAction
	Point      int64
	LeaveFirst bool
	Reason     string
}

// PlanTruncation decides how a member whose log the master of in.State refused (an OUT_OF_RANGE
// answer) cuts it (where the master said the log diverged, else TruncationPoint), and whether it
// may: never against a control state older than its
// own log (TruncStale), never below what the group confirmed, never twice for one epoch
// (TruncRefuse), and only once it is out of the committed in-sync set (TruncLeaveFirst), so that
// no member of the set ever lacks what it acknowledged.
func PlanTruncation(in TruncationInput) TruncationPlan {
	if n := len(in.Mine); n > 0 && in.Mine[n-1].Epoch > in.State.Epoch {
		return TruncationPlan{Action: TruncStale, Reason: fmt.Sprintf("this log holds epoch %d, the control state knows epochs up to %d", in.Mine[n-1].Epoch, in.State.Epoch)}
	}
	point := in.DivergedAt
	if point >= 0 {
		point = min(point, EpochEnd(in.Mine, in.DivergingEpoch, in.LogEnd))
	} else {
		point = TruncationPoint(in.Mine, in.LogMin, in.LogEnd, in.State.Epochs, in.MasterEnd)
	}
	if point >= in.LogEnd && in.LogEnd > in.LogMin {
		return TruncationPlan{Action: TruncNone, Point: in.LogEnd}
	}
	// Nothing in common (or an empty log the master refused: it does not start on one of the
	// master's batch boundaries): copy the master's log afresh.
	reset := point <= in.LogMin
	point = max(point, in.LogMin)
	inSet := in.State.MasterID != in.Self && slices.Contains(in.State.SyncStateSet, in.Self)
	switch {
	case point < in.KnownConfirmed:
		return TruncationPlan{Action: TruncRefuse, Point: point, Reason: fmt.Sprintf(
			"cutting the log to %d would discard what the group confirmed (up to %d); the control state or the epoch file is wrong", point, in.KnownConfirmed)}
	case in.LastCutEpoch != 0 && in.LastCutEpoch == in.State.Epoch && point >= in.LastCutPoint:
		return TruncationPlan{Action: TruncRefuse, Point: point, Reason: fmt.Sprintf(
			"this member already cut its log to %d for epoch %d; cutting it to %d again would be a loop", in.LastCutPoint, in.State.Epoch, point)}
	case reset:
		return TruncationPlan{Action: TruncReset, Point: point, LeaveFirst: inSet}
	case inSet:
		return TruncationPlan{Action: TruncLeaveFirst, Point: point, LeaveFirst: true}
	}
	return TruncationPlan{Action: TruncCut, Point: point}
}

// MarshalBinary encodes c for the Raft log with the protocol package's primitives: kind, epoch,
// start offset, master id, the set as a u32 count of u16-prefixed strings, then the members
// (appendMembers), and for a topic command its configs as a u32-prefixed
// protocol.TopicConfigList (the other kinds end with the members, as before topic commands).
func (c Command) MarshalBinary() ([]byte, error) {
	b := []byte{byte(c.Kind)}
	b = protocol.AppendU32(b, c.Epoch)
	b = protocol.AppendI64(b, c.StartOffset)
	b = protocol.AppendString(b, c.MasterID)
	b = protocol.AppendU32(b, uint32(len(c.SyncStateSet)))
	for _, id := range c.SyncStateSet {
		b = protocol.AppendString(b, id)
	}
	b = appendMembers(b, c.Members)
	if isTopicCommand(c.Kind) {
		l := protocol.TopicConfigList{Topics: c.Topics}
		b = protocol.AppendBytes(b, l.AppendTo(nil))
	}
	return b, nil
}

// appendMembers encodes members as a u32 count of (id, brokerId i64, addr, haAddr).
func appendMembers(b []byte, members []MemberInfo) []byte {
	b = protocol.AppendU32(b, uint32(len(members)))
	for _, m := range members {
		b = protocol.AppendString(b, m.ID)
		b = protocol.AppendI64(b, m.BrokerID)
		b = protocol.AppendString(b, m.Addr)
		b = protocol.AppendString(b, m.HAAddr)
	}
	return b
}

// readMembers decodes what appendMembers encoded.
func readMembers(r *protocol.Reader) []MemberInfo {
	var out []MemberInfo
	for n := r.Count(16); n > 0; n-- {
		out = append(out, MemberInfo{ID: r.Str(maxMemberID), BrokerID: r.I64(), Addr: r.Str(maxMemberID), HAAddr: r.Str(maxMemberID)})
	}
	return out
}

// maxMemberID bounds a member id in encoded commands and snapshots (bytes).
const maxMemberID = 255

// UnmarshalBinary decodes what MarshalBinary encoded; it fails with ErrBadCommand on anything
// else.
func (c *Command) UnmarshalBinary(b []byte) error {
	r := protocol.NewReader(b)
	next := Command{Kind: CommandKind(r.U8()), Epoch: r.U32(), StartOffset: r.I64(), MasterID: r.Str(maxMemberID)}
	for n := r.Count(2); n > 0; n-- {
		next.SyncStateSet = append(next.SyncStateSet, r.Str(maxMemberID))
	}
	next.Members = readMembers(&r)
	if isTopicCommand(next.Kind) {
		raw := r.BytesView(maxTopicTableBytes)
		var l protocol.TopicConfigList
		if r.Err() == nil {
			if err := l.ReadFrom(raw); err != nil {
				r.Fail(err)
			}
		}
		next.Topics = l.Topics
	}
	if err := r.Done(); err != nil {
		return fmt.Errorf("%w: %v", ErrBadCommand, err)
	}
	*c = next
	return nil
}
