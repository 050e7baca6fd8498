package ha

import (
	"errors"
	"reflect"
	"slices"
	"testing"
)

func TestControlStateApply(t *testing.T) {
	var s ControlState
	step := func(c Command, wantErr error) {
		t.Helper()
		before := s.clone()
		next, err := s.Apply(c)
		if !errors.Is(err, wantErr) {
			t.Fatalf("%+v: err %v, want %v", c, err, wantErr)
		}
		if !reflect.DeepEqual(s, before) {
			t.Fatalf("Apply modified its receiver: %+v -> %+v", before, s)
		}
		if err != nil && !reflect.DeepEqual(next, s) {
			t.Fatalf("a refused command changed the state: %+v", next)
		}
		s = next
	}
	// The first election: any member, the set starts with it alone.
	step(Command{Kind: CmdNewEpoch, MasterID: "b1", StartOffset: 0}, nil)
	if s.MasterID != "b1" || s.Epoch != 1 || !reflect.DeepEqual(s.Epochs, []EpochStart{{1, 0}}) || !reflect.DeepEqual(s.SyncStateSet, []string{"b1"}) {
		t.Fatalf("after the first election: %+v", s)
	}
	// The master widens the set (sorted, without repeats or empty ids).
	step(Command{Kind: CmdSetSyncStateSet, Epoch: 1, SyncStateSet: []string{"b3", "b1", "", "b3", "b2"}}, nil)
	if !reflect.DeepEqual(s.SyncStateSet, []string{"b1", "b2", "b3"}) {
		t.Fatalf("set %v", s.SyncStateSet)
	}
	// Refused: a set without the master, a stale epoch, a member outside the set as master, an
	// epoch starting below the previous one, an empty master, an unknown kind.
	step(Command{Kind: CmdSetSyncStateSet, Epoch: 1, SyncStateSet: []string{"b2"}}, ErrBadCommand)
	step(Command{Kind: CmdSetSyncStateSet, Epoch: 0, SyncStateSet: []string{"b1"}}, ErrStaleEpoch)
	step(Command{Kind: CmdSetSyncStateSet, Epoch: 1, SyncStateSet: []string{"b1"}}, nil) // b2, b3 leave
	step(Command{Kind: CmdNewEpoch, MasterID: "b2", StartOffset: 500}, ErrNotInSync)
	step(Command{Kind: CmdSetSyncStateSet, Epoch: 1, SyncStateSet: []string{"b1", "b2"}}, nil)
	step(Command{Kind: CmdNewEpoch, MasterID: "b2", StartOffset: 500}, nil)
	if s.MasterID != "b2" || s.Epoch != 2 || !reflect.DeepEqual(s.Epochs, []EpochStart{{1, 0}, {2, 500}}) || !reflect.DeepEqual(s.SyncStateSet, []string{"b1", "b2"}) {
		t.Fatalf("after the second election: %+v", s)
	}
	// The deposed master's late change is refused.
	step(Command{Kind: CmdSetSyncStateSet, Epoch: 1, SyncStateSet: []string{"b1"}}, ErrStaleEpoch)
	step(Command{Kind: CmdNewEpoch, MasterID: "b1", StartOffset: 499}, ErrBadCommand)
	step(Command{Kind: CmdNewEpoch, MasterID: "", StartOffset: 600}, ErrBadCommand)
	step(Command{Kind: 9}, ErrBadCommand)
	// The same master may start a new epoch at the same offset (it re-won an election without
	// writing in between).
	step(Command{Kind: CmdNewEpoch, MasterID: "b2", StartOffset: 500}, nil)
	if s.Epoch != 3 || len(s.Epochs) != 3 {
		t.Fatalf("%+v", s)
	}
}

func TestDecideLeader(t *testing.T) {
	set := ControlState{MasterID: "b1", Epoch: 4, SyncStateSet: []string{"b1", "b2", "b3"}}
	cases := []struct {
		name   string
		self   string
		s      ControlState
		ends   map[string]int64
		act    LeaderAction
		target string
	}{
		{"first election: act at once", "b3", ControlState{}, nil, ActMaster, "b3"},
		{"in the set, the longest log: act", "b2", set, map[string]int64{"b1": 10, "b2": 10, "b3": 9}, ActMaster, "b2"},
		{"in the set, alone reachable: act", "b2", set, map[string]int64{"b2": 10}, ActMaster, "b2"},
		{"in the set but behind: hand over to the longest", "b2", set, map[string]int64{"b2": 10, "b3": 11}, ActTransfer, "b3"},
		{"in the set, tie with a smaller id: self keeps it", "b2", set, map[string]int64{"b1": 10, "b2": 10}, ActMaster, "b2"},
		{"outside: the most caught-up in-sync member", "b4", set, map[string]int64{"b1": 100, "b2": 300, "b3": 200, "b4": 999}, ActTransfer, "b2"},
		{"outside: ties go to the smallest id", "b4", set, map[string]int64{"b3": 300, "b2": 300}, ActTransfer, "b2"},
		{"outside: unreachable members are skipped", "b4", set, map[string]int64{"b3": 1}, ActTransfer, "b3"},
		{"outside: nobody in sync reachable: wait", "b4", set, map[string]int64{"b4": 999, "b5": 1}, ActWait, ""},
	}
	for _, c := range cases {
		act, target := DecideLeader(c.self, c.s, c.ends)
		if act != c.act || target != c.target {
			t.Errorf("%s: got %d %q, want %d %q", c.name, act, target, c.act, c.target)
		}
	}
}

func TestTruncationPoint(t *testing.T) {
	e := func(pairs ...int64) []EpochStart {
		var out []EpochStart
		for i := 0; i < len(pairs); i += 2 {
			out = append(out, EpochStart{Epoch: uint32(pairs[i]), StartOffset: pairs[i+1]})
		}
		return out
	}
	cases := []struct {
		name        string
		mine        []EpochStart
		myEnd       int64
		theirs      []EpochStart
		masterEnd   int64
		want        int64
		explanation string
	}{
		{"same history, behind", e(1, 0, 2, 100), 150, e(1, 0, 2, 100), 300, 150, "nothing to cut"},
		{"same history, ahead of the master", e(1, 0, 2, 100), 350, e(1, 0, 2, 100), 300, 300, "cut what the master never had"},
		{"old master returns: its last epoch was never confirmed", e(1, 0, 2, 100), 250, e(1, 0, 2, 100, 3, 180), 400, 180, "epoch 2 ended at 180 on the new master"},
		{"behind in an old epoch", e(1, 0), 50, e(1, 0, 2, 100, 3, 180), 400, 50, "nothing to cut"},
		{"ahead inside an old epoch", e(1, 0), 150, e(1, 0, 2, 100), 400, 100, "epoch 1 ended at 100"},
		{"my last epoch unknown to the master", e(1, 0, 2, 100, 3, 200), 260, e(1, 0, 2, 100, 4, 150), 400, 150, "epoch 3 was never the master's: back to epoch 2's end there"},
		{"same epoch number, another start: not shared", e(1, 0, 2, 120), 200, e(1, 0, 2, 100), 300, 100, "epoch 2 differs: epoch 1 ended at 100 there and 120 here"},
		{"nothing shared", e(5, 1000), 2000, e(1, 0, 2, 100), 300, -1, "copy afresh"},
		{"no epochs at all", nil, 0, e(1, 0), 10, -1, "copy afresh"},
	}
	for _, c := range cases {
		if got := TruncationPoint(c.mine, c.myEnd, c.theirs, c.masterEnd); got != c.want {
			t.Errorf("%s: got %d, want %d (%s)", c.name, got, c.want, c.explanation)
		}
	}
}

func TestCommandRoundTrip(t *testing.T) {
	for _, c := range []Command{
		{Kind: CmdNewEpoch, MasterID: "b1", StartOffset: 1 << 40},
		{Kind: CmdSetSyncStateSet, Epoch: 7, SyncStateSet: []string{"b1", "b2", "b3"}},
		{Kind: CmdSetSyncStateSet, Epoch: 1},
	} {
		b, err := c.MarshalBinary()
		if err != nil {
			t.Fatal(err)
		}
		var got Command
		if err := got.UnmarshalBinary(b); err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(got, c) {
			t.Fatalf("round trip: %+v -> %+v", c, got)
		}
		for n := 0; n < len(b); n++ {
			if err := new(Command).UnmarshalBinary(b[:n]); !errors.Is(err, ErrBadCommand) {
				t.Fatalf("%d of %d bytes: %v", n, len(b), err)
			}
		}
		if err := new(Command).UnmarshalBinary(append(b, 0)); !errors.Is(err, ErrBadCommand) {
			t.Fatalf("trailing byte: %v", err)
		}
	}
}

// FuzzCommandUnmarshal: any bytes decode to a command that encodes back to the same bytes, or
// fail with ErrBadCommand; never a panic.
func FuzzCommandUnmarshal(f *testing.F) {
	for _, c := range []Command{{Kind: CmdNewEpoch, MasterID: "b1"}, {Kind: CmdSetSyncStateSet, Epoch: 2, SyncStateSet: []string{"a", "b"}}} {
		b, _ := c.MarshalBinary()
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		var c Command
		if err := c.UnmarshalBinary(b); err != nil {
			if !errors.Is(err, ErrBadCommand) {
				t.Fatalf("error %v does not wrap ErrBadCommand", err)
			}
			return
		}
		back, _ := c.MarshalBinary()
		if string(back) != string(b) {
			t.Fatalf("re-encoding differs: %x -> %x", b, back)
		}
	})
}

func TestNewEpochSetAndMembers(t *testing.T) {
	s := ControlState{}
	b1 := Member{ID: "b1", BrokerID: 1, Addr: "h:1", HAAddr: "h:2"}
	s, err := s.Apply(Command{Kind: CmdNewEpoch, MasterID: "b1", StartOffset: 0, Members: []Member{b1}})
	if err != nil {
		t.Fatal(err)
	}
	s, err = s.Apply(Command{Kind: CmdSetSyncStateSet, Epoch: 1, SyncStateSet: []string{"b1", "b2", "b3"},
		Members: []Member{{ID: "b3", BrokerID: 3, Addr: "h:5"}, {ID: "b2", BrokerID: 2, Addr: "h:3"}}})
	if err != nil {
		t.Fatal(err)
	}
	if got := []string{s.Members[0].ID, s.Members[1].ID, s.Members[2].ID}; !slices.Equal(got, []string{"b1", "b2", "b3"}) {
		t.Fatalf("members not sorted: %v", got)
	}
	// b2 takes over without b1 (the dead master): the set keeps b3.
	b2 := Member{ID: "b2", BrokerID: 2, Addr: "h:3", HAAddr: "h:4"}
	next, err := s.Apply(Command{Kind: CmdNewEpoch, MasterID: "b2", StartOffset: 100, SyncStateSet: []string{"b3"}, Members: []Member{b2}})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(next.SyncStateSet, []string{"b2", "b3"}) || next.MasterID != "b2" || next.Epoch != 2 {
		t.Fatalf("new epoch: %+v", next)
	}
	if m, ok := next.Member("b2"); !ok || m.HAAddr != "h:4" {
		t.Fatalf("b2's entry: %+v %v", m, ok)
	}
	// A slave entry without an HA address keeps the one its member had as master.
	after, err := next.Apply(Command{Kind: CmdSetSyncStateSet, Epoch: 2, SyncStateSet: []string{"b2", "b1"}, Members: []Member{{ID: "b1", BrokerID: 1, Addr: "h:9"}}})
	if err != nil {
		t.Fatal(err)
	}
	if m, _ := after.Member("b1"); m.HAAddr != "h:2" || m.Addr != "h:9" {
		t.Fatalf("b1's entry: %+v", m)
	}
	if m, ok := after.MemberByBrokerID(3); !ok || m.ID != "b3" {
		t.Fatalf("by brokerId: %+v %v", m, ok)
	}
	// A member outside the set cannot join with a new epoch.
	if _, err := s.Apply(Command{Kind: CmdNewEpoch, MasterID: "b2", StartOffset: 100, SyncStateSet: []string{"b9"}}); !errors.Is(err, ErrNotInSync) {
		t.Fatalf("b9 joined with a new epoch: %v", err)
	}
	// Commands and snapshots carry the members.
	c := Command{Kind: CmdNewEpoch, MasterID: "b2", StartOffset: 100, SyncStateSet: []string{"b3"}, Members: []Member{b2}}
	raw, _ := c.MarshalBinary()
	var back Command
	if err := back.UnmarshalBinary(raw); err != nil || !reflect.DeepEqual(back, c) {
		t.Fatalf("command round trip: %+v %v", back, err)
	}
	var st ControlState
	if err := st.UnmarshalBinary(after.MarshalBinary()); err != nil || !reflect.DeepEqual(st, after) {
		t.Fatalf("state round trip: %+v %v", st, err)
	}
}
