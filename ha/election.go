package ha

// The control state of a Raft-elected broker group and the rules that drive it, as pure
// functions: the Raft glue (issue 4) applies Commands through the Raft log and asks DecideLeader
// what a leader does; a member rejoining a master asks TruncationPoint where to cut its log.
// Nothing here reads a clock, the disk or a map in iteration order, so every member that applies
// the same commands holds the same state (a Raft FSM must be deterministic).

import (
	"errors"
	"fmt"
	"slices"

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
}

// CommandKind says what a Command does.
type CommandKind uint8

// Command kinds.
const (
	// CmdNewEpoch makes MasterID the master of a new epoch starting at StartOffset (its log end
	// after the Raft barrier). The new master must be in the in-sync set (or the set empty: the
	// group's first election), and StartOffset must not be below the previous epoch's start.
	CmdNewEpoch CommandKind = 1
	// CmdSetSyncStateSet replaces the in-sync set. Epoch must be the current epoch (a deposed
	// master's late change is refused) and the set must contain the master.
	CmdSetSyncStateSet CommandKind = 2
)

// Command is one entry of the group's Raft log.
type Command struct {
	Kind         CommandKind
	Epoch        uint32 // CmdSetSyncStateSet: the epoch the proposer is master of
	MasterID     string // CmdNewEpoch
	StartOffset  int64  // CmdNewEpoch
	SyncStateSet []string
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
		}
		// The set keeps its members; the first election starts it with the master alone.
		next.SyncStateSet = normalizeSet(append(slices.Clone(s.SyncStateSet), c.MasterID))
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
		return next, nil
	}
	return s, fmt.Errorf("%w: kind %d", ErrBadCommand, c.Kind)
}

func (s ControlState) clone() ControlState {
	s.Epochs = slices.Clone(s.Epochs)
	s.SyncStateSet = slices.Clone(s.SyncStateSet)
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

// DecideLeader returns what the Raft leader self does given the control state and the log ends
// (bytes) of the members it can reach. Only a member of the in-sync set may act as master,
// because only its log holds everything acknowledged; the group's first leader (empty set) acts
// at once. A leader outside the set hands leadership to the reachable in-sync member with the
// largest log end (ties: the smallest id), or waits when none is reachable.
func DecideLeader(self string, s ControlState, logEnds map[string]int64) (LeaderAction, string) {
	if len(s.SyncStateSet) == 0 || slices.Contains(s.SyncStateSet, self) {
		return ActMaster, self
	}
	best, bestEnd := "", int64(-1)
	for _, id := range s.SyncStateSet { // sorted: ties go to the smallest id
		end, ok := logEnds[id]
		if !ok {
			continue
		}
		if end > bestEnd {
			best, bestEnd = id, end
		}
	}
	if best == "" {
		return ActWait, ""
	}
	return ActTransfer, best
}

// TruncationPoint returns the offset a member must cut its log to before it follows a master:
// the end of the last epoch both logs share (same epoch, same start offset), that is the smaller
// of where that epoch ends in the member's log and in the master's (Kafka's OffsetsForLeaderEpoch
// rule). mine and theirs list epoch starts ascending; myEnd and masterEnd are the log ends. It
// returns myEnd when nothing needs cutting, and -1 when the logs share no epoch (the member must
// copy the master's log afresh).
func TruncationPoint(mine []EpochStart, myEnd int64, theirs []EpochStart, masterEnd int64) int64 {
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
		if !found || theirs[j].StartOffset != e.StartOffset {
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

// MarshalBinary encodes c for the Raft log with the protocol package's primitives: kind, epoch,
// start offset, master id, then the set as a u32 count of u16-prefixed strings.
func (c Command) MarshalBinary() ([]byte, error) {
	b := []byte{byte(c.Kind)}
	b = protocol.AppendU32(b, c.Epoch)
	b = protocol.AppendI64(b, c.StartOffset)
	b = protocol.AppendString(b, c.MasterID)
	b = protocol.AppendU32(b, uint32(len(c.SyncStateSet)))
	for _, id := range c.SyncStateSet {
		b = protocol.AppendString(b, id)
	}
	return b, nil
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
	if err := r.Done(); err != nil {
		return fmt.Errorf("%w: %v", ErrBadCommand, err)
	}
	*c = next
	return nil
}
