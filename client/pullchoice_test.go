package client

import (
	"slices"
	"testing"
	"time"

	"github.com/petrel-mq/petrel/protocol"
)

func TestPickPull(t *testing.T) {
	three := &protocol.BrokerData{BrokerName: "a", Addrs: []protocol.BrokerAddr{{BrokerID: 0, Addr: "m"}, {BrokerID: 1, Addr: "s1"}, {BrokerID: 2, Addr: "s2"}}}
	slaves := &protocol.BrokerData{BrokerName: "a", Addrs: []protocol.BrokerAddr{{BrokerID: 1, Addr: "s1"}, {BrokerID: 2, Addr: "s2"}}}
	follow := newPullState(-1)
	notHere := func(s pullState, id int64, n int) pullState {
		s.notHereID, s.notHere = id, n
		return s
	}
	wanting := func(s pullState, id int64) pullState {
		s.want = id
		return s
	}
	const retry = time.Second
	for _, tc := range []struct {
		name     string
		state    pullState
		group    *protocol.BrokerData
		down     []string
		wantAddr string
		wantID   int64
		wantOK   bool
		wantWait time.Duration
	}{
		{"the master at first", follow, three, nil, "m", 0, true, 0},
		{"the suggestion of the last answer", wanting(follow, 2), three, nil, "s2", 2, true, 0},
		{"the suggested slave failed lately: the master", wanting(follow, 2), three, []string{"s2"}, "m", 0, true, 0},
		{"the suggested slave left the route: the master", wanting(follow, 2), &protocol.BrokerData{Addrs: three.Addrs[:2]}, nil, "m", 0, true, 0},
		{"master down: the lowest slave", follow, three, []string{"m"}, "s1", 1, true, 0},
		{"master out of the route: the lowest slave", follow, slaves, nil, "s1", 1, true, 0},
		{"not here: the master, at once", notHere(follow, 1, 1), three, nil, "m", 0, true, 0},
		{"not here, master down: another slave, after a wait", notHere(follow, 1, 1), three, []string{"m"}, "s2", 2, true, minPullBackoff},
		{"not here again and again, the slave alone left: it, after a doubled wait", notHere(follow, 1, 3), three, []string{"m", "s2"}, "s1", 1, true, 4 * minPullBackoff},
		{"the wait is capped by the retry delay", notHere(follow, 1, 60), three, []string{"m", "s2"}, "s1", 1, true, retry},
		{"nothing usable: the suggestion anyway", wanting(follow, 2), three, []string{"m", "s1", "s2"}, "s2", 2, true, 0},
		{"pinned: the pinned member", newPullState(2), three, nil, "s2", 2, true, 0},
		{"pinned: the pinned member even when it failed lately", newPullState(2), three, []string{"s2"}, "s2", 2, true, 0},
		{"pinned, not here: the pinned member after a wait", notHere(newPullState(2), 2, 2), three, nil, "s2", 2, true, 2 * minPullBackoff},
		{"pinned to the master, not here from it: no wait", notHere(newPullState(0), 0, 2), three, nil, "m", 0, true, 0},
		{"pinned member not in the route", newPullState(2), &protocol.BrokerData{Addrs: three.Addrs[:2]}, nil, "", 2, false, 0},
		{"the group not in the route", follow, nil, nil, "", 0, false, 0},
		{"the group without members", follow, &protocol.BrokerData{}, nil, "", 0, false, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := pickPull(pullPickInput{state: tc.state, group: tc.group, usable: func(a string) bool { return !slices.Contains(tc.down, a) }, retryDelay: retry})
			if p.addr != tc.wantAddr || p.id != tc.wantID || p.ok != tc.wantOK || p.wait != tc.wantWait {
				t.Fatalf("pickPull = %+v; want %q id %d ok %v wait %v", p, tc.wantAddr, tc.wantID, tc.wantOK, tc.wantWait)
			}
		})
	}
}

func TestPullStateAfter(t *testing.T) {
	follow := newPullState(-1)
	pinned := newPullState(2)
	with := func(s pullState, f func(*pullState)) pullState {
		f(&s)
		return s
	}
	// failing is a state after failures, at a slave's suggestion: a failure sends the next pull
	// to the master, an answer ends the backoff.
	failing := with(follow, func(s *pullState) { s.want, s.backoff = 1, 200*time.Millisecond })
	slaveNotHere := with(follow, func(s *pullState) { s.notHereID, s.notHere = 1, 2 })
	answered := func(id int64, result protocol.PullResult, suggest int64) pullOutcome {
		return pullOutcome{kind: pullAnswered, id: id, result: result, suggest: suggest, offset: 10, next: 12}
	}
	moved := func(id, next int64) pullOutcome {
		return pullOutcome{kind: pullAnswered, id: id, result: protocol.PullOffsetMoved, suggest: 1, offset: 10, next: next}
	}
	// life is an answer whose incarnation is got, to a pull whose position belongs to known.
	life := func(o pullOutcome, known, got uint64) pullOutcome {
		o.known, o.incarnation = known, got
		return o
	}
	const x, y = 0xa1, 0xb2
	for _, tc := range []struct {
		name  string
		state pullState
		o     pullOutcome
		want  pullState
		r     pullReaction
	}{
		{"no live member", failing, pullOutcome{kind: pullNoMember}, failing,
			pullReaction{refreshRoute: true, failure: "broker group has no live member"}},
		{"no live member with the pinned brokerId", pinned, pullOutcome{kind: pullNoMember, id: 2}, pinned,
			pullReaction{refreshRoute: true, failure: "the broker group has no live member with the pinned brokerId"}},
		{"unreachable: avoided, back to the master", failing, pullOutcome{kind: pullUnreachable, id: 1}, with(failing, func(s *pullState) { s.want = 0 }),
			pullReaction{markFailed: true, refreshRoute: true, failure: "cannot connect to pull"}},
		{"unreachable, pinned: stays pinned", pinned, pullOutcome{kind: pullUnreachable, id: 2}, pinned,
			pullReaction{markFailed: true, refreshRoute: true, failure: "cannot connect to pull"}},
		{"no answer: avoided, back to the master", failing, pullOutcome{kind: pullLost, id: 1}, with(failing, func(s *pullState) { s.want = 0 }),
			pullReaction{markFailed: true, refreshRoute: true, failure: "pull failed"}},
		{"refused by the master: its final word", follow, pullOutcome{kind: pullRefused, id: 0, status: protocol.StatusSystemBusy}, follow,
			pullReaction{failure: "pull failed"}},
		{"refused by the master, no such topic: route refreshed", follow, pullOutcome{kind: pullRefused, id: 0, status: protocol.StatusTopicNotExist}, follow,
			pullReaction{refreshRoute: true, failure: "pull failed"}},
		{"refused by a slave: avoided, to the master", failing, pullOutcome{kind: pullRefused, id: 1, status: protocol.StatusSystemBusy}, with(failing, func(s *pullState) { s.want = 0 }),
			pullReaction{markFailed: true, failure: "pull failed"}},
		{"refused by a slave, no such queue: route refreshed", failing, pullOutcome{kind: pullRefused, id: 1, status: protocol.StatusQueueNotExist}, with(failing, func(s *pullState) { s.want = 0 }),
			pullReaction{markFailed: true, refreshRoute: true, failure: "pull failed"}},
		{"garbled answer: the member answered, a failure all the same", failing, pullOutcome{kind: pullGarbled, id: 1}, with(failing, func(s *pullState) { s.backoff = 0 }),
			pullReaction{markOK: true, failure: "cannot decode the pull response"}},
		{"found: follow the suggestion, backoff over", failing, answered(1, protocol.PullFound, 2), with(failing, func(s *pullState) { s.want, s.backoff = 2, 0 }),
			pullReaction{markOK: true, result: protocol.PullFound, commitHeld: true}},
		{"found after not-here answers: their count ends", slaveNotHere, answered(0, protocol.PullFound, 1), with(slaveNotHere, func(s *pullState) { s.want, s.notHere = 1, 0 }),
			pullReaction{markOK: true, result: protocol.PullFound, commitHeld: true}},
		{"found, pinned: the suggestion is ignored", pinned, answered(2, protocol.PullFound, 0), pinned,
			pullReaction{markOK: true, result: protocol.PullFound, commitHeld: true}},
		{"no new message", follow, answered(0, protocol.PullNoNewMessage, 1), with(follow, func(s *pullState) { s.want = 1 }),
			pullReaction{markOK: true, result: protocol.PullNoNewMessage, commitHeld: true}},
		{"a slave moving the offset backwards: not here, to the master", follow, moved(1, 3), with(follow, func(s *pullState) { s.notHereID, s.notHere = 1, 1 }),
			pullReaction{markOK: true, result: protocol.PullNotHere}},
		{"a slave moving the offset forwards: moved", follow, moved(1, 20), with(follow, func(s *pullState) { s.want = 1 }),
			pullReaction{markOK: true, result: protocol.PullOffsetMoved}},
		{"the master moving the offset backwards: moved", follow, moved(0, 3), with(follow, func(s *pullState) { s.want = 1 }),
			pullReaction{markOK: true, result: protocol.PullOffsetMoved}},
		{"not here from a slave: the member it suggests", follow, answered(1, protocol.PullNotHere, 2), with(follow, func(s *pullState) { s.want, s.notHereID, s.notHere = 2, 1, 1 }),
			pullReaction{markOK: true, result: protocol.PullNotHere}},
		{"not here from a slave suggesting itself: the master", slaveNotHere, answered(1, protocol.PullNotHere, 1), with(slaveNotHere, func(s *pullState) { s.want, s.notHere = 0, 3 }),
			pullReaction{markOK: true, result: protocol.PullNotHere}},
		{"not here from another slave: it is the one passed over now, the count goes on", slaveNotHere, answered(2, protocol.PullNotHere, 0), with(slaveNotHere, func(s *pullState) { s.notHereID, s.notHere = 2, 3 }),
			pullReaction{markOK: true, result: protocol.PullNotHere}},
		{"not here, pinned: stays pinned, counted", pinned, answered(2, protocol.PullNotHere, 0), with(pinned, func(s *pullState) { s.notHereID, s.notHere = 2, 1 }),
			pullReaction{markOK: true, result: protocol.PullNotHere}},
		{"not here from the master: a failure", slaveNotHere, answered(0, protocol.PullNotHere, 0), slaveNotHere,
			pullReaction{markOK: true, result: protocol.PullNotHere, failure: "the master answered NOT_HERE"}},
		// The queue's incarnation against the position's.
		{"found, same life", follow, life(answered(0, protocol.PullFound, 1), x, x), with(follow, func(s *pullState) { s.want = 1 }),
			pullReaction{markOK: true, result: protocol.PullFound, commitHeld: true}},
		{"found, the position's life not known yet: learnt", follow, life(answered(0, protocol.PullFound, 0), 0, x), follow,
			pullReaction{markOK: true, result: protocol.PullFound, commitHeld: true, learn: true}},
		{"found on a slave, the position's life not known yet: not learnt (the slave's log may be the stale one)", follow, life(answered(1, protocol.PullFound, 1), 0, x), with(follow, func(s *pullState) { s.want = 1 }),
			pullReaction{markOK: true, result: protocol.PullFound, commitHeld: true}},
		{"found, an older broker names no life", follow, life(answered(0, protocol.PullFound, 0), x, 0), follow,
			pullReaction{markOK: true, result: protocol.PullFound, commitHeld: true}},
		{"found, another life, from the master: reborn", follow, life(answered(0, protocol.PullFound, 1), x, y), with(follow, func(s *pullState) { s.want = 1 }),
			pullReaction{markOK: true, result: protocol.PullOffsetMoved, reborn: true}},
		{"moved, another life, from the master: reborn", follow, life(moved(0, 0), x, y), with(follow, func(s *pullState) { s.want = 1 }),
			pullReaction{markOK: true, result: protocol.PullOffsetMoved, reborn: true}},
		{"no new message, another life, from the master: reborn", follow, life(answered(0, protocol.PullNoNewMessage, 0), x, y), follow,
			pullReaction{markOK: true, result: protocol.PullOffsetMoved, reborn: true}},
		{"found, another life, from a slave: not here, to the master", follow, life(answered(1, protocol.PullFound, 1), x, y), with(follow, func(s *pullState) { s.notHereID, s.notHere = 1, 1 }),
			pullReaction{markOK: true, result: protocol.PullNotHere}},
		{"not here from a slave of another life: nothing learnt", follow, life(answered(1, protocol.PullNotHere, 0), 0, y), with(follow, func(s *pullState) { s.notHereID, s.notHere = 1, 1 }),
			pullReaction{markOK: true, result: protocol.PullNotHere}},
		{"an unknown result: a failure, the suggestion followed", slaveNotHere, answered(1, protocol.PullResult(99), 2), with(slaveNotHere, func(s *pullState) { s.want, s.notHere = 2, 0 }),
			pullReaction{markOK: true, result: protocol.PullResult(99), failure: "unknown pull result"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, r := tc.state.after(tc.o)
			if got != tc.want || r != tc.r {
				t.Fatalf("after(%+v) from %+v\n got %+v %+v\nwant %+v %+v", tc.o, tc.state, got, r, tc.want, tc.r)
			}
		})
	}
}

func TestPullStateFailed(t *testing.T) {
	s := newPullState(-1)
	var got []time.Duration
	for range 6 {
		s = s.failed(time.Second)
		got = append(got, s.backoff)
	}
	ms := time.Millisecond
	if want := []time.Duration{50 * ms, 100 * ms, 200 * ms, 400 * ms, 800 * ms, time.Second}; !slices.Equal(got, want) {
		t.Fatalf("backoffs %v, want %v", got, want)
	}
	if s := newPullState(-1).failed(20 * ms); s.backoff != 20*ms {
		t.Fatalf("a retry delay below the first backoff: %v", s.backoff)
	}
	if s := newPullState(3); !s.pinned || s.want != 3 || s.notHereID != -1 {
		t.Fatalf("pinned start %+v", s)
	}
	if s := newPullState(-1); s.pinned || s.want != 0 {
		t.Fatalf("start %+v", s)
	}
}
