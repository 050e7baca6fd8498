package ha

import (
	"errors"
	"time"

	"github.com/petrel-mq/petrel/protocol"
)

// What the master answers a replication pull, decided without I/O: planPull judges the request
// before the log is read, then the plan's methods judge every read of the log and every wake of a
// held pull. Master.handle does the reads, the waits and the answers the plan names.

// pullAction is what the master does next with a pull.
type pullAction int

const (
	// pullMalformed: refuse the request (no slave sends it).
	pullMalformed pullAction = iota + 1
	// pullFenced: answer HAFenced: the pull names another broker group or a newer epoch.
	pullFenced
	// pullDiverged: answer HAOutOfRange with where the slave's log leaves this one
	// (pullPlan.DivergingEpoch, TruncateTo); the pull acknowledges nothing.
	pullDiverged
	// pullRead: read the log from the pull's offset.
	pullRead
	// pullOutOfRange: answer HAOutOfRange: the offset is beyond the log end or not a batch
	// boundary; the pull acknowledges nothing.
	pullOutOfRange
	// pullResync: answer HAResync at the master's min offset: retention removed the offset.
	pullResync
	// pullReadError: answer a system error: the log could not be read.
	pullReadError
	// pullAnswer: answer HAOK with what the read found (nothing, when the wait is over).
	pullAnswer
	// pullHold: hold the pull until an append or the end of its wait (pullPlan.hold).
	pullHold
)

// pullInput is what planPull decides from. Offsets are bytes of the commit log.
type pullInput struct {
	Req *protocol.HAPullRequest
	// Group is the master's broker group, Epoch its epoch.
	Group string
	Epoch uint32
	// CheckEpochs tells that the master keeps epochs (MasterConfig.Epochs), Epochs their starts.
	CheckEpochs bool
	Epochs      []EpochStart
	// LogEnd is the master's log end.
	LogEnd int64
	// MaxChunkBytes and MaxWait are the master's caps (MasterConfig).
	MaxChunkBytes int
	MaxWait       time.Duration
}

// pullPlan is the plan of one pull (see planPull); its methods move it along as the master
// reads the log and holds the pull.
type pullPlan struct {
	// MaxBytes is the most uncompressed bytes the answer carries (a first batch larger than this
	// is sent whole); Wait is how long the pull may be held when there is nothing new.
	MaxBytes int
	Wait     time.Duration
	// DivergingEpoch and TruncateTo name where the slave's log leaves the master's (pullDiverged).
	DivergingEpoch uint32
	TruncateTo     int64

	acked    bool      // a read found the offset valid: the slave's acknowledgement is recorded
	waited   bool      // the wait is over: the next read is answered, even with nothing
	deadline time.Time // when the wait ends; zero until the pull is first held
}

// planPull judges a pull before the log is read: malformed, fenced (checked before the
// connection is bound to a slave, so that a stray pull naming a real slave's id never takes its
// record over), diverged (the epochs show the slave's log is not a prefix of this one up to its
// offset, DivergingEpoch), or to be read (pullRead).
func planPull(in pullInput) (pullPlan, pullAction) {
	h := in.Req
	p := pullPlan{TruncateTo: -1}
	if h.SlaveID <= 0 || h.Offset < 0 {
		return p, pullMalformed
	}
	if h.BrokerName != in.Group || h.Epoch > in.Epoch {
		return p, pullFenced
	}
	if h.LastEpoch != 0 && in.CheckEpochs {
		if epoch, end := DivergingEpoch(in.Epochs, in.LogEnd, h.LastEpoch); epoch != h.LastEpoch || h.Offset > end {
			// NB: acknowledges nothing: the slave's log past end is not this master's, or its
			// newest epoch is one this master never had.
			p.DivergingEpoch, p.TruncateTo = epoch, end
			return p, pullDiverged
		}
	}
	p.MaxBytes = in.MaxChunkBytes
	if h.MaxBytes > 0 && int(h.MaxBytes) < p.MaxBytes {
		p.MaxBytes = int(h.MaxBytes)
	}
	p.Wait = min(time.Duration(max(h.WaitMs, 0))*time.Millisecond, in.MaxWait)
	return p, pullRead
}

// readStep is what follows one read of the log for a pull.
type readStep struct {
	// Action is pullOutOfRange, pullResync, pullReadError, pullAnswer or pullHold.
	Action pullAction
	// Ack: record the slave's acknowledgement of the pull's offset (the first read that found
	// the offset valid). ReadFor: record the log end of a later read that found data.
	Ack     bool
	ReadFor bool
}

// afterRead judges a read of the log that ended with err (MasterLog.ReadReplication's) and found
// raw bytes after the pull's offset.
func (p *pullPlan) afterRead(err error, raw int) readStep {
	switch {
	case errors.Is(err, ErrBeyondEnd), errors.Is(err, ErrNotBatchBoundary):
		// NB: acknowledges nothing: the slave's log does not match this one at that offset.
		return readStep{Action: pullOutOfRange}
	case errors.Is(err, ErrBelowMin):
		return readStep{Action: pullResync}
	case err != nil:
		return readStep{Action: pullReadError}
	}
	st := readStep{Action: pullHold}
	if !p.acked {
		st.Ack, p.acked = true, true
	} else if raw > 0 {
		st.ReadFor = true
	}
	if raw > 0 || p.waited || p.Wait <= 0 {
		st.Action = pullAnswer
	}
	return st
}

// hold returns, at now, how long to hold the pull (the wait starts when it is first held), or
// false when the wait is over: the log is read once more and the pull answered.
func (p *pullPlan) hold(now time.Time) (time.Duration, bool) {
	if p.deadline.IsZero() {
		p.deadline = now.Add(p.Wait)
	}
	left := p.deadline.Sub(now)
	if left <= 0 {
		p.waited = true
		return 0, false
	}
	return left, true
}

// timedOut records that a held pull woke at the end of its wait (not because the log end
// moved): the next read is answered whatever it finds.
func (p *pullPlan) timedOut() { p.waited = true }
