package ha

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/petrel-mq/petrel/protocol"
)

func TestPlanPull(t *testing.T) {
	// The master of broker-a in epoch 5 with a log of 10_000 bytes: epoch 1 from 0, epoch 3
	// from 4000, epoch 5 from 8000 (it never had epochs 2 and 4).
	epochs := []EpochStart{{1, 0}, {3, 4000}, {5, 8000}}
	base := pullInput{Group: "broker-a", Epoch: 5, CheckEpochs: true, Epochs: epochs, LogEnd: 10_000,
		MaxChunkBytes: 1 << 20, MaxWait: 5 * time.Second}
	req := protocol.HAPullRequest{BrokerName: "broker-a", SlaveID: 1, Offset: 9000, WaitMs: 1000, Epoch: 5, LastEpoch: 5, LastEpochStart: 8000}
	cases := []struct {
		name string
		edit func(in *pullInput, h *protocol.HAPullRequest)
		act  pullAction
		plan pullPlan
	}{
		{name: "a pull of the current epoch is read", act: pullRead,
			plan: pullPlan{MaxBytes: 1 << 20, Wait: time.Second, TruncateTo: -1}},
		{name: "slave id 0", act: pullMalformed, plan: pullPlan{TruncateTo: -1},
			edit: func(_ *pullInput, h *protocol.HAPullRequest) { h.SlaveID = 0 }},
		{name: "negative offset", act: pullMalformed, plan: pullPlan{TruncateTo: -1},
			edit: func(_ *pullInput, h *protocol.HAPullRequest) { h.Offset = -1 }},
		{name: "another broker group is fenced", act: pullFenced, plan: pullPlan{TruncateTo: -1},
			edit: func(_ *pullInput, h *protocol.HAPullRequest) { h.BrokerName = "broker-b" }},
		{name: "a newer epoch is fenced (this master was deposed)", act: pullFenced, plan: pullPlan{TruncateTo: -1},
			edit: func(_ *pullInput, h *protocol.HAPullRequest) { h.Epoch = 6 }},
		{name: "an older epoch is served (the slave learns the new one from the answer)", act: pullRead,
			plan: pullPlan{MaxBytes: 1 << 20, Wait: time.Second, TruncateTo: -1},
			edit: func(_ *pullInput, h *protocol.HAPullRequest) { h.Epoch = 3 }},
		{name: "fenced before the epochs are looked at", act: pullFenced, plan: pullPlan{TruncateTo: -1},
			edit: func(_ *pullInput, h *protocol.HAPullRequest) { h.Epoch = 6; h.LastEpoch = 2 }},
		{name: "a last epoch this master never had diverges at the end of its newest epoch before it", act: pullDiverged,
			plan: pullPlan{DivergingEpoch: 1, TruncateTo: 4000},
			edit: func(_ *pullInput, h *protocol.HAPullRequest) { h.Offset, h.LastEpoch, h.LastEpochStart = 5000, 2, 3000 }},
		{name: "a shared epoch past its end on the master diverges where it ends", act: pullDiverged,
			plan: pullPlan{DivergingEpoch: 3, TruncateTo: 8000},
			edit: func(_ *pullInput, h *protocol.HAPullRequest) { h.Offset, h.LastEpoch, h.LastEpochStart = 8500, 3, 4000 }},
		{name: "a shared epoch up to its end on the master is a prefix", act: pullRead,
			plan: pullPlan{MaxBytes: 1 << 20, Wait: time.Second, TruncateTo: -1},
			edit: func(_ *pullInput, h *protocol.HAPullRequest) { h.Offset, h.LastEpoch, h.LastEpochStart = 8000, 3, 4000 }},
		{name: "the newest epoch past the log end diverges at the end", act: pullDiverged,
			plan: pullPlan{DivergingEpoch: 5, TruncateTo: 10_000},
			edit: func(_ *pullInput, h *protocol.HAPullRequest) { h.Offset = 10_001 }},
		{name: "an epoch older than all the master's diverges at its first start", act: pullDiverged,
			plan: pullPlan{DivergingEpoch: 0, TruncateTo: 0},
			edit: func(in *pullInput, h *protocol.HAPullRequest) {
				in.Epochs = []EpochStart{{3, 0}}
				h.LastEpoch = 2
			}},
		{name: "a master with no epoch recorded yet still refuses an offset past its end", act: pullDiverged,
			plan: pullPlan{DivergingEpoch: 5, TruncateTo: 10_000},
			edit: func(in *pullInput, h *protocol.HAPullRequest) { in.Epochs = nil; h.Offset = 12_000 }},
		{name: "a slave that keeps no epochs is not checked", act: pullRead,
			plan: pullPlan{MaxBytes: 1 << 20, Wait: time.Second, TruncateTo: -1},
			edit: func(_ *pullInput, h *protocol.HAPullRequest) { h.LastEpoch, h.LastEpochStart, h.Offset = 0, -1, 12_000 }},
		{name: "a master that keeps no epochs (static roles) checks none", act: pullRead,
			plan: pullPlan{MaxBytes: 1 << 20, Wait: time.Second, TruncateTo: -1},
			edit: func(in *pullInput, h *protocol.HAPullRequest) {
				in.CheckEpochs, in.Epochs = false, nil
				h.LastEpoch = 2
			}},
		{name: "the slave's smaller chunk is taken", act: pullRead,
			plan: pullPlan{MaxBytes: 4096, Wait: time.Second, TruncateTo: -1},
			edit: func(_ *pullInput, h *protocol.HAPullRequest) { h.MaxBytes = 4096 }},
		{name: "a larger chunk than the master's is capped", act: pullRead,
			plan: pullPlan{MaxBytes: 1 << 20, Wait: time.Second, TruncateTo: -1},
			edit: func(_ *pullInput, h *protocol.HAPullRequest) { h.MaxBytes = 8 << 20 }},
		{name: "a wait longer than MaxWait is capped", act: pullRead,
			plan: pullPlan{MaxBytes: 1 << 20, Wait: 5 * time.Second, TruncateTo: -1},
			edit: func(_ *pullInput, h *protocol.HAPullRequest) { h.WaitMs = 60_000 }},
		{name: "a negative wait is no wait", act: pullRead,
			plan: pullPlan{MaxBytes: 1 << 20, TruncateTo: -1},
			edit: func(_ *pullInput, h *protocol.HAPullRequest) { h.WaitMs = -5 }},
	}
	for _, c := range cases {
		in, h := base, req
		if c.edit != nil {
			c.edit(&in, &h)
		}
		in.Req = &h
		plan, act := planPull(in)
		if act != c.act || plan != c.plan {
			t.Errorf("%s: planPull(%+v) = %+v, %d; want %+v, %d", c.name, h, plan, act, c.plan, c.act)
		}
	}
}

// pullEvent is one step of a pull's read loop in TestPullPlanSteps: a read of the log that ended
// with err and found raw bytes, a hold at a time (ms since the start), or the hold's timer firing.
type pullEvent struct {
	read    bool
	err     error
	raw     int
	holdAt  int // ms; -1: not a hold
	timeout bool
}

func readOf(err error, raw int) pullEvent {
	return pullEvent{read: true, err: err, raw: raw, holdAt: -1}
}
func holdAt(ms int) pullEvent { return pullEvent{holdAt: ms} }
func timerFired() pullEvent   { return pullEvent{timeout: true, holdAt: -1} }

func TestPullPlanSteps(t *testing.T) {
	t0 := time.Date(2025, 6, 1, 12, 0, 0, 0, time.UTC)
	ioErr := errors.New("disk on fire")
	cases := []struct {
		name   string
		wait   time.Duration
		events []pullEvent
		// want has one line per event: the step of a read ("answer ack"), the hold ("hold
		// 300ms", "read again"), nothing for a timer.
		want []string
	}{
		{name: "data at once is answered and acknowledged", wait: time.Second,
			events: []pullEvent{readOf(nil, 100)}, want: []string{"answer ack"}},
		{name: "nothing and no wait: answered empty at once", wait: 0,
			events: []pullEvent{readOf(nil, 0)}, want: []string{"answer ack"}},
		{name: "nothing: held; an append brings data, recorded as a read for the slave", wait: time.Second,
			events: []pullEvent{readOf(nil, 0), holdAt(0), readOf(nil, 300)},
			want:   []string{"hold ack", "hold 1s", "answer readFor"}},
		{name: "nothing after the wait: answered empty, acknowledged once", wait: time.Second,
			events: []pullEvent{readOf(nil, 0), holdAt(0), timerFired(), readOf(nil, 0)},
			want:   []string{"hold ack", "hold 1s", "", "answer"}},
		{name: "woken by an append for other data: held on for what is left of the wait", wait: time.Second,
			events: []pullEvent{readOf(nil, 0), holdAt(0), readOf(nil, 0), holdAt(700), readOf(nil, 0), holdAt(1000), readOf(nil, 0)},
			want:   []string{"hold ack", "hold 1s", "hold", "hold 300ms", "hold", "read again", "answer"}},
		{name: "beyond the end: out of range, nothing acknowledged", wait: time.Second,
			events: []pullEvent{readOf(ErrBeyondEnd, 0)}, want: []string{"out-of-range"}},
		{name: "inside a batch (wrapped): out of range", wait: time.Second,
			events: []pullEvent{readOf(fmt.Errorf("segment 3: %w", ErrNotBatchBoundary), 0)}, want: []string{"out-of-range"}},
		{name: "below the min: resync", wait: time.Second,
			events: []pullEvent{readOf(ErrBelowMin, 0)}, want: []string{"resync"}},
		{name: "an I/O error: read error", wait: time.Second,
			events: []pullEvent{readOf(ioErr, 0)}, want: []string{"read-error"}},
		{name: "an I/O error after the pull was held: read error (already acknowledged)", wait: time.Second,
			events: []pullEvent{readOf(nil, 0), holdAt(0), readOf(ioErr, 0)},
			want:   []string{"hold ack", "hold 1s", "read-error"}},
	}
	for _, c := range cases {
		h := protocol.HAPullRequest{BrokerName: "g", SlaveID: 1, WaitMs: int32(c.wait / time.Millisecond)}
		p, act := planPull(pullInput{Req: &h, Group: "g", MaxChunkBytes: 1 << 20, MaxWait: time.Hour})
		if act != pullRead {
			t.Fatalf("%s: plan %d", c.name, act)
		}
		var got []string
		for _, e := range c.events {
			switch {
			case e.read:
				got = append(got, stepString(p.afterRead(e.err, e.raw)))
			case e.timeout:
				p.timedOut()
				got = append(got, "")
			default:
				if left, ok := p.hold(t0.Add(time.Duration(e.holdAt) * time.Millisecond)); ok {
					got = append(got, "hold "+left.String())
				} else {
					got = append(got, "read again")
				}
			}
		}
		if fmt.Sprint(got) != fmt.Sprint(c.want) {
			t.Errorf("%s:\n got %q\nwant %q", c.name, got, c.want)
		}
	}
}

func stepString(st readStep) string {
	s := map[pullAction]string{pullOutOfRange: "out-of-range", pullResync: "resync", pullReadError: "read-error",
		pullAnswer: "answer", pullHold: "hold"}[st.Action]
	if st.Ack {
		s += " ack"
	}
	if st.ReadFor {
		s += " readFor"
	}
	return s
}
