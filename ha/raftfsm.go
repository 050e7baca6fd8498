package ha

import (
	"fmt"
	"io"
	"sync"

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
	// onChange, when set, runs after every command that changed the state, on Raft's FSM
	// goroutine, with no lock held; it must be short.
	onChange func(ControlState)
}

// NewControlFSM returns an FSM at the empty state; onChange (may be nil) hears every change.
func NewControlFSM(onChange func(ControlState)) *ControlFSM {
	return &ControlFSM{onChange: onChange}
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
		return err
	}
	f.mu.Lock()
	next, err := f.st.Apply(c)
	if err == nil {
		f.st = next
	}
	f.mu.Unlock()
	if err != nil {
		return err
	}
	if f.onChange != nil {
		f.onChange(next.clone())
	}
	return nil
}

// Snapshot implements raft.FSM.
func (f *ControlFSM) Snapshot() (raft.FSMSnapshot, error) {
	return controlSnapshot(f.State().MarshalBinary()), nil
}

// Restore implements raft.FSM: it replaces the state with a snapshot's.
func (f *ControlFSM) Restore(rc io.ReadCloser) error {
	defer rc.Close()
	b, err := io.ReadAll(io.LimitReader(rc, 16<<20))
	if err != nil {
		return fmt.Errorf("cannot read the control-state snapshot: %w", err)
	}
	var st ControlState
	if err := st.UnmarshalBinary(b); err != nil {
		return err
	}
	f.mu.Lock()
	f.st = st
	f.mu.Unlock()
	if f.onChange != nil {
		f.onChange(st.clone())
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
