package ha

import (
	"encoding/binary"
	"fmt"
	"io"
	"sync"
	"time"

	"github.com/hashicorp/raft"

	"github.com/petrel-mq/petrel/protocol"
)

// ControlFSM is the raft.FSM of a group's control state: the Raft log holds Commands (never
// messages), and every member applies them to the same ControlState in the same order. A command
// the rules refuse is still a committed log entry: it changes nothing, on every member alike, and
// its error is the Apply response the proposer reads from raft.ApplyFuture.Response.
type ControlFSM struct {
	mu sync.Mutex
	st ControlState
	// topics is the group's topic table (topic commands change it, not st).
	topics TopicTable
	// index is the Raft log index of the last command applied (refused ones too: they are
	// committed entries), or of the snapshot restored; applied is closed and replaced after
	// every command, waking WaitApplied.
	index   uint64
	applied chan struct{}
	// onChange, when set, runs after every command that changed the state, on Raft's FSM
	// goroutine, with no lock held; it must be short.
	onChange func(ControlState)
	// onTopics, when set, runs after every topic command applied and every restore, on Raft's
	// FSM goroutine, with no lock held, before the proposer hears the command applied.
	onTopics func(TopicTable)
}

// NewControlFSM returns an FSM at the empty state; onChange (may be nil) hears every change of
// the control state, onTopics (may be nil) every change of the topic table.
func NewControlFSM(onChange func(ControlState), onTopics func(TopicTable)) *ControlFSM {
	return &ControlFSM{onChange: onChange, onTopics: onTopics, applied: make(chan struct{})}
}

// Topics returns the group's topic table as this member applied it (its slice is shared: do
// not modify it). Safe for concurrent use.
func (f *ControlFSM) Topics() TopicTable {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.topics
}

// AppliedIndex returns the Raft log index of the last command this member applied (0 before
// the first). Safe for concurrent use.
func (f *ControlFSM) AppliedIndex() uint64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.index
}

// WaitApplied waits until the member has applied the command at Raft log index index (or a
// later one), at most timeout; it reports whether it has. A read index from the leader
// (RaftNode.ReadIndex) waited for this way makes State at least as new as the leader's.
func (f *ControlFSM) WaitApplied(index uint64, timeout time.Duration) bool {
	t := time.NewTimer(timeout)
	defer t.Stop()
	for {
		f.mu.Lock()
		done, ch := f.index >= index, f.applied
		f.mu.Unlock()
		if done {
			return true
		}
		select {
		case <-ch:
		case <-t.C:
			return f.AppliedIndex() >= index
		}
	}
}

// advanceLocked records that the command at index was applied and wakes WaitApplied. f.mu must
// be held.
func (f *ControlFSM) advanceLocked(index uint64) {
	if index > f.index {
		f.index = index
	}
	close(f.applied)
	f.applied = make(chan struct{})
}

// State returns a copy of the current state. Safe for concurrent use.
func (f *ControlFSM) State() ControlState {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.st.clone()
}

// Apply implements raft.FSM: it decodes the entry's Command and applies it. It returns nil when
// the state changed, else the error (ErrBadCommand, ErrNotInSync, ErrStaleEpoch).
func (f *ControlFSM) Apply(l *raft.Log) any {
	if l.Type != raft.LogCommand {
		return nil
	}
	var c Command
	if err := c.UnmarshalBinary(l.Data); err != nil {
		f.mu.Lock()
		f.advanceLocked(l.Index)
		f.mu.Unlock()
		return err
	}
	if isTopicCommand(c.Kind) {
		f.mu.Lock()
		next, err := f.topics.ApplyTopic(c)
		if err == nil {
			f.topics = next
		}
		f.advanceLocked(l.Index)
		f.mu.Unlock()
		if err != nil {
			return err
		}
		if f.onTopics != nil {
			f.onTopics(next)
		}
		return nil
	}
	f.mu.Lock()
	next, err := f.st.Apply(c)
	if err == nil {
		f.st = next
	}
	f.advanceLocked(l.Index)
	f.mu.Unlock()
	if err != nil {
		return err
	}
	if f.onChange != nil {
		f.onChange(next.clone())
	}
	return nil
}

// Snapshot formats. The current one (snapshotVersion) is the version byte, the applied index
// (u64), the state (ControlState.MarshalBinary, u32-prefixed), then the topic table
// (appendTopicTable). snapshotVersionIndex, the one before, is the version byte, the index and
// the state; the first format is the state alone, and starts with the high byte of the master
// id's length, which is 0 (ids are at most 255 bytes), so none can be taken for another. The
// older ones restore with no topic table known.
const (
	snapshotVersionIndex = 0xF1
	snapshotVersion      = 0xF2
)

// Snapshot implements raft.FSM.
func (f *ControlFSM) Snapshot() (raft.FSMSnapshot, error) {
	f.mu.Lock()
	b := protocol.AppendU64([]byte{snapshotVersion}, f.index)
	b = protocol.AppendBytes(b, f.st.MarshalBinary())
	b = appendTopicTable(b, f.topics)
	f.mu.Unlock()
	return controlSnapshot(b), nil
}

// Restore implements raft.FSM: it replaces the state with a snapshot's.
func (f *ControlFSM) Restore(rc io.ReadCloser) error {
	defer rc.Close()
	b, err := io.ReadAll(io.LimitReader(rc, 16<<20))
	if err != nil {
		return fmt.Errorf("cannot read the control-state snapshot: %w", err)
	}
	var index uint64
	var topics TopicTable
	if len(b) > 0 && (b[0] == snapshotVersion || b[0] == snapshotVersionIndex) {
		if len(b) < 9 {
			return fmt.Errorf("%w: control-state snapshot of %d bytes", ErrBadCommand, len(b))
		}
		index = binary.BigEndian.Uint64(b[1:9])
		if b[0] == snapshotVersion {
			r := protocol.NewReader(b[9:])
			b = r.BytesView(len(b))
			topics = readTopicTable(&r)
			if err := r.Done(); err != nil {
				return fmt.Errorf("%w: control-state snapshot: %v", ErrBadCommand, err)
			}
		} else {
			b = b[9:]
		}
	}
	var st ControlState
	if err := st.UnmarshalBinary(b); err != nil {
		return err
	}
	f.mu.Lock()
	f.st = st
	f.topics = topics
	f.index = index
	f.advanceLocked(index)
	f.mu.Unlock()
	if f.onChange != nil {
		f.onChange(st.clone())
	}
	if f.onTopics != nil {
		f.onTopics(topics)
	}
	return nil
}

type controlSnapshot []byte

func (s controlSnapshot) Persist(sink raft.SnapshotSink) error {
	if _, err := sink.Write(s); err != nil {
		_ = sink.Cancel()
		return err
	}
	return sink.Close()
}

func (s controlSnapshot) Release() {}

// MarshalBinary encodes the state (for snapshots): master id, epoch, the epoch starts and the
// in-sync set and the members, with the protocol package's primitives (u32 counts, u16-prefixed strings).
func (s ControlState) MarshalBinary() []byte {
	b := protocol.AppendString(nil, s.MasterID)
	b = protocol.AppendU32(b, s.Epoch)
	b = protocol.AppendU32(b, uint32(len(s.Epochs)))
	for _, e := range s.Epochs {
		b = protocol.AppendU32(b, e.Epoch)
		b = protocol.AppendI64(b, e.StartOffset)
	}
	b = protocol.AppendU32(b, uint32(len(s.SyncStateSet)))
	for _, id := range s.SyncStateSet {
		b = protocol.AppendString(b, id)
	}
	return appendMembers(b, s.Members)
}

// UnmarshalBinary decodes what MarshalBinary encoded; anything else fails with ErrBadCommand.
func (s *ControlState) UnmarshalBinary(b []byte) error {
	r := protocol.NewReader(b)
	st := ControlState{MasterID: r.Str(maxMemberID), Epoch: r.U32()}
	for n := r.Count(12); n > 0; n-- {
		st.Epochs = append(st.Epochs, EpochStart{Epoch: r.U32(), StartOffset: r.I64()})
	}
	for n := r.Count(2); n > 0; n-- {
		st.SyncStateSet = append(st.SyncStateSet, r.Str(maxMemberID))
	}
	st.Members = readMembers(&r)
	if err := r.Done(); err != nil {
		return fmt.Errorf("%w: control-state snapshot: %v", ErrBadCommand, err)
	}
	*s = st
	return nil
}
