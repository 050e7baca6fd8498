package ha

import (
	"errors"
	"math"
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

// ends makes candidates of log ends alone: electable, knowing no confirmed offset.
func ends(m map[string]int64) map[string]Candidate {
	out := map[string]Candidate{}
	for id, e := range m {
		out[id] = Candidate{LogEnd: e, KnownConfirmed: -1, Electable: true}
	}
	return out
}

func TestDecideLeader(t *testing.T) {
	set := ControlState{MasterID: "b1", Epoch: 4, SyncStateSet: []string{"b1", "b2", "b3"}}
	cases := []struct {
		name   string
		self   string
		s      ControlState
		cands  map[string]Candidate
		act    LeaderAction
		target string
	}{
		{"first election: act at once", "b3", ControlState{}, nil, ActMaster, "b3"},
		{"first election, but this member stopped: wait", "b3", ControlState{}, map[string]Candidate{"b3": {Electable: false}}, ActWait, ""},
		{"in the set, the longest log: act", "b2", set, ends(map[string]int64{"b1": 10, "b2": 10, "b3": 9}), ActMaster, "b2"},
		{"in the set, alone reachable: act", "b2", set, ends(map[string]int64{"b2": 10}), ActMaster, "b2"},
		{"in the set but behind: hand over to the longest", "b2", set, ends(map[string]int64{"b2": 10, "b3": 11}), ActTransfer, "b3"},
		{"in the set, tie with a smaller id: self keeps it", "b2", set, ends(map[string]int64{"b1": 10, "b2": 10}), ActMaster, "b2"},
		{"outside: the most caught-up in-sync member", "b4", set, ends(map[string]int64{"b1": 100, "b2": 300, "b3": 200, "b4": 999}), ActTransfer, "b2"},
		{"outside: ties go to the smallest id", "b4", set, ends(map[string]int64{"b3": 300, "b2": 300}), ActTransfer, "b2"},
		{"outside: unreachable members are skipped", "b4", set, ends(map[string]int64{"b3": 1}), ActTransfer, "b3"},
		{"outside: nobody in sync reachable: wait", "b4", set, ends(map[string]int64{"b4": 999, "b5": 1}), ActWait, ""},
		{"a member whose log is below a known confirmed offset is never chosen", "b2", set, map[string]Candidate{
			"b2": {LogEnd: 100, KnownConfirmed: 100, Electable: true},
			"b3": {LogEnd: 150, KnownConfirmed: 300, Electable: true}, // it lost its tail: longer, yet short of what it knows confirmed
		}, ActWait, ""},
		{"the floor is the highest confirmed offset any member knows", "b3", set, map[string]Candidate{
			"b2": {LogEnd: 400, KnownConfirmed: 350, Electable: true},
			"b3": {LogEnd: 300, KnownConfirmed: 100, Electable: true}, // self: not stopped, but behind what b2 knows confirmed
		}, ActTransfer, "b2"},
		{"a member that stopped is not electable", "b2", set, map[string]Candidate{
			"b2": {LogEnd: 100, KnownConfirmed: -1, Electable: true},
			"b3": {LogEnd: 999, KnownConfirmed: -1, Electable: false},
		}, ActMaster, "b2"},
	}
	for _, c := range cases {
		act, target := DecideLeader(c.self, c.s, c.cands)
		if act != c.act || target != c.target {
			t.Errorf("%s: got %d %q, want %d %q", c.name, act, target, c.act, c.target)
		}
	}
}

// epochs makes an epoch list from (epoch, start) pairs.
func epochs(pairs ...int64) []EpochStart {
	var out []EpochStart
	for i := 0; i < len(pairs); i += 2 {
		out = append(out, EpochStart{Epoch: uint32(pairs[i]), StartOffset: pairs[i+1]})
	}
	return out
}

func TestTruncationPoint(t *testing.T) {
	e := epochs
	cases := []struct {
		name        string
		mine        []EpochStart
		myMin       int64
		myEnd       int64
		theirs      []EpochStart
		masterEnd   int64
		want        int64
		explanation string
	}{
		{"same history, behind", e(1, 0, 2, 100), 0, 150, e(1, 0, 2, 100), 300, 150, "nothing to cut"},
		{"same history, ahead of the master", e(1, 0, 2, 100), 0, 350, e(1, 0, 2, 100), 300, 300, "cut what the master never had"},
		{"old master returns: its last epoch was never confirmed", e(1, 0, 2, 100), 0, 250, e(1, 0, 2, 100, 3, 180), 400, 180, "epoch 2 ended at 180 on the new master"},
		{"behind in an old epoch", e(1, 0), 0, 50, e(1, 0, 2, 100, 3, 180), 400, 50, "nothing to cut"},
		{"ahead inside an old epoch", e(1, 0), 0, 150, e(1, 0, 2, 100), 400, 100, "epoch 1 ended at 100"},
		{"my last epoch unknown to the master", e(1, 0, 2, 100, 3, 200), 0, 260, e(1, 0, 2, 100, 4, 150), 400, 150, "epoch 3 was never the master's: back to epoch 2's end there"},
		{"same epoch number, another start: not shared", e(1, 0, 2, 120), 0, 200, e(1, 0, 2, 100), 300, 100, "epoch 2 differs: epoch 1 ended at 100 there and 120 here"},
		{"nothing shared", e(5, 1000), 1000, 2000, e(1, 0, 2, 100), 300, -1, "copy afresh"},
		{"no epochs at all", nil, 0, 0, e(1, 0), 10, -1, "copy afresh"},
		{"an epoch older than the log is recorded at the log's start", e(3, 4096), 4096, 5000, e(1, 0, 2, 100, 3, 4000), 6000, 5000,
			"the log restarted at 4096 inside epoch 3: nothing to cut"},
		{"an epoch older than the log, ahead of the master", e(3, 4096), 4096, 5000, e(1, 0, 2, 100, 3, 4000, 4, 4500), 6000, 4500,
			"epoch 3 ended at 4500"},
	}
	for _, c := range cases {
		if got := TruncationPoint(c.mine, c.myMin, c.myEnd, c.theirs, c.masterEnd); got != c.want {
			t.Errorf("%s: got %d, want %d (%s)", c.name, got, c.want, c.explanation)
		}
	}
}

func TestDivergingEpoch(t *testing.T) {
	e := epochs
	// The master's log: epoch 1 from 0, 2 from 100, 4 from 300 (it never saw epoch 3), end 500.
	master := e(1, 0, 2, 100, 4, 300)
	cases := []struct {
		name      string
		lastEpoch uint32
		epoch     uint32
		end       int64
	}{
		{"an epoch the master has: its end there", 2, 2, 300},
		{"the master's newest epoch: its log end", 4, 4, 500},
		{"an epoch the master never had: its epoch before it", 3, 2, 300},
		{"newer than the master's history: its newest", 7, 4, 500},
		{"older than the master's history", 0, 0, 0},
	}
	for _, c := range cases {
		if epoch, end := DivergingEpoch(master, 500, c.lastEpoch); epoch != c.epoch || end != c.end {
			t.Errorf("%s: got epoch %d end %d, want %d %d", c.name, epoch, end, c.epoch, c.end)
		}
	}
	if epoch, end := DivergingEpoch(e(3, 4096), 9000, 1); epoch != 0 || end != 4096 {
		t.Errorf("before the master's first epoch: %d %d", epoch, end)
	}
	if epoch, end := DivergingEpoch(nil, 77, 3); epoch != 3 || end != 77 {
		t.Errorf("no epochs: %d %d, want the slave's epoch and the log end", epoch, end)
	}
}

// TestDivergenceAcrossSeveralEpochs: the slave has two epochs the master never had, the newer
// one without data; the master's answer (its epoch before them and its end) and the slave's own
// epochs find where the logs part, the start of the first epoch the master lacks, not the
// start of the last one.
func TestDivergenceAcrossSeveralEpochs(t *testing.T) {
	e := epochs
	master := e(1, 0, 4, 300)                 // end 500
	slave := e(1, 0, 2, 100, 3, 250)          // epoch 3 holds nothing: the log ends at 250
	last, start := NewestWithData(slave, 250) // epoch 2, from 100
	if last != 2 || start != 100 {
		t.Fatalf("newest epoch with data: %d at %d, want 2 at 100", last, start)
	}
	epoch, end := DivergingEpoch(master, 500, last)
	if epoch == last {
		t.Fatal("the master has the slave's epoch 2")
	}
	if got := min(end, EpochEnd(slave, epoch, 250)); got != 100 {
		t.Fatalf("the logs part at %d, want 100 (where the slave's epoch 2 starts)", got)
	}
	plan := PlanTruncation(TruncationInput{Self: "b1", State: ControlState{MasterID: "b2", Epoch: 4, Epochs: e(1, 0, 2, 100, 3, 250, 4, 300)},
		Mine: slave, LogEnd: 250, DivergedAt: end, DivergingEpoch: epoch, KnownConfirmed: 90, LastCutPoint: -1})
	if plan.Action != TruncCut || plan.Point != 100 {
		t.Fatalf("plan %+v, want a cut at 100", plan)
	}
	if got := EpochEnd(slave, 3, 250); got != 250 {
		t.Fatalf("EpochEnd of the newest epoch: %d, want the log end", got)
	}
	if e, s := NewestWithData(e(5, 40), 40); e != 0 || s != -1 {
		t.Fatalf("an empty log's epochs: %d %d", e, s)
	}
}

func TestPlanTruncation(t *testing.T) {
	e := epochs
	group := ControlState{MasterID: "b2", Epoch: 3, Epochs: e(1, 0, 2, 100, 3, 180), SyncStateSet: []string{"b2", "b3"}}
	cases := []struct {
		name  string
		in    TruncationInput
		want  TruncateAction
		point int64
	}{
		{"a prefix of the master's log: follow", TruncationInput{Self: "b3", State: group, Mine: e(1, 0, 2, 100), LogEnd: 150, DivergedAt: -1, MasterEnd: math.MaxInt64, KnownConfirmed: 120},
			TruncNone, 150},
		{"the deposed master returns: cut its unconfirmed tail", TruncationInput{Self: "b1", State: group, Mine: e(1, 0, 2, 100), LogEnd: 250, DivergedAt: -1, MasterEnd: math.MaxInt64, KnownConfirmed: 170},
			TruncCut, 180},
		{"a member of the committed set must leave it before it cuts", TruncationInput{Self: "b3", State: group, Mine: e(1, 0, 2, 100), LogEnd: 250, DivergedAt: -1, MasterEnd: math.MaxInt64, KnownConfirmed: 170},
			TruncLeaveFirst, 180},
		{"a state older than this log (not yet caught up): wait", TruncationInput{Self: "b1", State: ControlState{MasterID: "b2", Epoch: 2, Epochs: e(1, 0, 2, 100)},
			Mine: e(1, 0, 2, 100, 3, 180), LogEnd: 900, DivergedAt: -1, MasterEnd: math.MaxInt64}, TruncStale, 0},
		{"never below what the group confirmed", TruncationInput{Self: "b1", State: group, Mine: e(1, 0, 2, 100), LogEnd: 250, DivergedAt: -1, MasterEnd: math.MaxInt64, KnownConfirmed: 200},
			TruncRefuse, 180},
		{"never twice for one epoch", TruncationInput{Self: "b1", State: group, Mine: e(1, 0, 2, 100), LogEnd: 250, DivergedAt: -1, MasterEnd: math.MaxInt64, KnownConfirmed: -1, LastCutEpoch: 3, LastCutPoint: 180},
			TruncRefuse, 180},
		{"a second cut for one epoch that goes lower is the next round", TruncationInput{Self: "b1", State: group, Mine: e(1, 0, 2, 100), LogEnd: 250, DivergedAt: -1, MasterEnd: math.MaxInt64, KnownConfirmed: -1, LastCutEpoch: 3, LastCutPoint: 200},
			TruncCut, 180},
		{"a cut for an earlier epoch does not block this one", TruncationInput{Self: "b1", State: group, Mine: e(1, 0, 2, 100), LogEnd: 250, DivergedAt: -1, MasterEnd: math.MaxInt64, KnownConfirmed: -1, LastCutEpoch: 2, LastCutPoint: 100},
			TruncCut, 180},
		{"no shared epoch: copy afresh", TruncationInput{Self: "b1", State: group, Mine: e(1, 50), LogMin: 10, LogEnd: 400, DivergedAt: -1, MasterEnd: math.MaxInt64, KnownConfirmed: -1},
			TruncReset, 10},
		{"the master's answer wins over the epochs", TruncationInput{Self: "b1", State: group, Mine: e(1, 0, 2, 100), LogEnd: 250, DivergedAt: 170, DivergingEpoch: 2, MasterEnd: 400, KnownConfirmed: 160},
			TruncCut, 170},
		{"the master's epoch ends earlier on this log", TruncationInput{Self: "b1", State: group, Mine: e(1, 0, 2, 100), LogEnd: 250, DivergedAt: 170, DivergingEpoch: 1, MasterEnd: 400, KnownConfirmed: -1},
			TruncCut, 100},
		{"a divergence below the log's start: reset", TruncationInput{Self: "b1", State: group, Mine: e(2, 4096), LogMin: 4096, LogEnd: 5000, DivergedAt: 100, MasterEnd: 400, KnownConfirmed: -1},
			TruncReset, 4096},
		{"the reset of a member of the set leaves it first", TruncationInput{Self: "b3", State: group, Mine: e(2, 4096), LogMin: 4096, LogEnd: 5000, DivergedAt: 100, MasterEnd: 400, KnownConfirmed: -1},
			TruncReset, 4096},
		{"a reset never discards what the group confirmed", TruncationInput{Self: "b1", State: group, Mine: e(2, 4096), LogMin: 4096, LogEnd: 5000, DivergedAt: 100, MasterEnd: 400, KnownConfirmed: 4500},
			TruncRefuse, 4096},
		{"an empty log the master refused (not on its batch boundaries): reset", TruncationInput{Self: "b1", State: group, LogMin: 4096, LogEnd: 4096, DivergedAt: -1, MasterEnd: math.MaxInt64},
			TruncReset, 4096},
		{"the epochs show nothing to cut", TruncationInput{Self: "b1", State: group, Mine: e(1, 0, 2, 100, 3, 180), LogEnd: 250, DivergedAt: -1, MasterEnd: math.MaxInt64},
			TruncNone, 250},
	}
	for _, c := range cases {
		got := PlanTruncation(c.in)
		if got.Action != c.want || (c.want != TruncStale && got.Point != c.point) {
			t.Errorf("%s: got %+v, want action %d at %d", c.name, got, c.want, c.point)
		}
		if (got.Action == TruncRefuse || got.Action == TruncStale) && got.Reason == "" {
			t.Errorf("%s: %d without a reason", c.name, got.Action)
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
	b1 := MemberInfo{ID: "b1", BrokerID: 1, Addr: "h:1", HAAddr: "h:2"}
	s, err := s.Apply(Command{Kind: CmdNewEpoch, MasterID: "b1", StartOffset: 0, Members: []MemberInfo{b1}})
	if err != nil {
		t.Fatal(err)
	}
	s, err = s.Apply(Command{Kind: CmdSetSyncStateSet, Epoch: 1, SyncStateSet: []string{"b1", "b2", "b3"},
		Members: []MemberInfo{{ID: "b3", BrokerID: 3, Addr: "h:5"}, {ID: "b2", BrokerID: 2, Addr: "h:3"}}})
	if err != nil {
		t.Fatal(err)
	}
	if got := []string{s.Members[0].ID, s.Members[1].ID, s.Members[2].ID}; !slices.Equal(got, []string{"b1", "b2", "b3"}) {
		t.Fatalf("members not sorted: %v", got)
	}
	// b2 takes over without b1 (the dead master): the set keeps b3.
	b2 := MemberInfo{ID: "b2", BrokerID: 2, Addr: "h:3", HAAddr: "h:4"}
	next, err := s.Apply(Command{Kind: CmdNewEpoch, MasterID: "b2", StartOffset: 100, SyncStateSet: []string{"b3"}, Members: []MemberInfo{b2}})
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
	after, err := next.Apply(Command{Kind: CmdSetSyncStateSet, Epoch: 2, SyncStateSet: []string{"b2", "b1"}, Members: []MemberInfo{{ID: "b1", BrokerID: 1, Addr: "h:9"}}})
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
	c := Command{Kind: CmdNewEpoch, MasterID: "b2", StartOffset: 100, SyncStateSet: []string{"b3"}, Members: []MemberInfo{b2}}
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
