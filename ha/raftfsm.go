package ha

import (
	"encoding/binary"
	"fmt"
	"io"
	"sync"

	"github.com/hashicorp/raft"
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
// in-sync set, strings as u16 length + bytes, counts as u32.
func (s ControlState) MarshalBinary() []byte {
	b := appendStr(nil, s.MasterID)
	b = binary.BigEndian.AppendUint32(b, s.Epoch)
	b = binary.BigEndian.AppendUint32(b, uint32(len(s.Epochs)))
	for _, e := range s.Epochs {
		b = binary.BigEndian.AppendUint32(b, e.Epoch)
		b = binary.BigEndian.AppendUint64(b, uint64(e.StartOffset))
	}
	b = binary.BigEndian.AppendUint32(b, uint32(len(s.SyncStateSet)))
	for _, id := range s.SyncStateSet {
		b = appendStr(b, id)
	}
	return b
}

// UnmarshalBinary decodes what MarshalBinary encoded; anything else fails with ErrBadCommand.
func (s *ControlState) UnmarshalBinary(b []byte) error {
	d := cmdDecoder{b: b}
	st := ControlState{MasterID: d.str(), Epoch: d.u32()}
	n := int(d.u32())
	if d.err == nil && n > len(d.b)/12 {
		d.err = errShort
	}
	for i := 0; i < n && d.err == nil; i++ {
		st.Epochs = append(st.Epochs, EpochStart{Epoch: d.u32(), StartOffset: int64(d.u64())})
	}
	n = int(d.u32())
	if d.err == nil && n > len(d.b)/2 {
		d.err = errShort
	}
	for i := 0; i < n && d.err == nil; i++ {
		st.SyncStateSet = append(st.SyncStateSet, d.str())
	}
	if d.err == nil && len(d.b) != 0 {
		d.err = fmt.Errorf("%d trailing bytes", len(d.b))
	}
	if d.err != nil {
		return fmt.Errorf("%w: control-state snapshot: %v", ErrBadCommand, d.err)
	}
	*s = st
	return nil
}
