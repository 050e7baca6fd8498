package client

import (
	"time"

	"github.com/petrel-mq/petrel/protocol"
)

// The choice of the member a queue's puller pulls next, and of the wait before it, apart from
// the pulls themselves: pullState is what the pull loop remembers between pulls, pickPull
// chooses the member before a pull, and pullState.after updates the state from how the pull
// ended and says what the loop must do about it. They do no I/O.

// pullState is what a queue's pull loop remembers between pulls to choose where the next pull
// goes and how long it waits.
type pullState struct {
	// pinned: reads go to member want alone (WithReadBrokerID), whatever the answers suggest.
	pinned bool
	// want is the member to pull from next: the last answer's suggestion (SuggestBrokerID), the
	// master after a failure, or the member reads are pinned to.
	want int64
	// notHereID answered "not here" notHere times in a row, with nothing served since.
	notHereID int64
	notHere   int
	// backoff is the wait before the retry after the last failure; 0 once a member answered.
	backoff time.Duration
}

// newPullState is the state of a pull loop that starts: at the master, or at the member reads
// are pinned to (readBrokerID >= 0).
func newPullState(readBrokerID int64) pullState {
	return pullState{pinned: readBrokerID >= 0, want: max(readBrokerID, 0), notHereID: -1}
}

// minPullBackoff is the first wait after a failure, and the first wait before pulling a slave
// again after it answered "not here"; both double up to the consumer's retry delay.
const minPullBackoff = 50 * time.Millisecond

// failed is the state after a failure: the wait before the retry doubles, from minPullBackoff
// up to retryDelay.
func (s pullState) failed(retryDelay time.Duration) pullState {
	s.backoff = min(max(2*s.backoff, minPullBackoff), retryDelay)
	return s
}

// pullPickInput is what the choice of the member to pull reads.
type pullPickInput struct {
	state pullState
	// group is the queue's broker group as the route lists it: its live members (nil when the
	// route lacks the group).
	group *protocol.BrokerData
	// usable reports whether a member may be pulled: no pull or commit to it failed recently
	// (nil: every member).
	usable func(addr string) bool
	// retryDelay bounds the wait before pulling a slave again after "not here" answers.
	retryDelay time.Duration
}

// pullPick is the member to pull, and how long to wait before the pull.
type pullPick struct {
	addr string
	id   int64
	// ok is false when the group has no member to pull: no live member at all, or, pinned,
	// not the pinned one (id).
	ok   bool
	wait time.Duration
}

// pickPull chooses the member of the queue's broker group to pull next. Pinned, it is the
// pinned member, if it is live. Otherwise it is the wanted member (the last answer's
// suggestion, else the master), passing over members that failed recently and the one that
// just answered "not here": then the master, then the lowest brokerId (see pickMember). A pull
// that goes to a slave after "not here" answers (the master is out of reach, or reads are
// pinned) waits first, doubling from minPullBackoff up to the retry delay, so the loop never
// spins between members lacking the offset.
func pickPull(in pullPickInput) pullPick {
	s := in.state
	var p pullPick
	if s.pinned {
		p.id = s.want
		p.addr, p.ok = memberAddr(in.group, s.want)
	} else {
		avoid := int64(-1)
		if s.notHere > 0 {
			avoid = s.notHereID
		}
		p.addr, p.id, _, p.ok = pickMember(in.group, s.want, avoid, in.usable)
	}
	if p.ok && s.notHere > 0 && p.id != 0 {
		p.wait = min(minPullBackoff<<min(s.notHere-1, 10), in.retryDelay)
	}
	return p
}

// pullOutcomeKind is how a pull ended.
type pullOutcomeKind int

const (
	// pullNoMember: the group had no member to pull (pickPull's ok was false).
	pullNoMember pullOutcomeKind = iota
	// pullUnreachable: no connection to the member could be made; the pull was not sent.
	pullUnreachable
	// pullLost: the pull was sent and no answer came (timeout, connection lost).
	pullLost
	// pullRefused: the member answered an error status.
	pullRefused
	// pullGarbled: the member answered, with a header that does not decode.
	pullGarbled
	// pullAnswered: the member answered the pull.
	pullAnswered
)

// pullOutcome is how a pull ended, as the choice of the next member needs it.
type pullOutcome struct {
	kind pullOutcomeKind
	// id is the member pulled (for pullNoMember, the pinned member missing).
	id int64
	// status is the error status of a pullRefused answer.
	status protocol.Status
	// result, suggest, next and incarnation are an answer's Result, SuggestBrokerID,
	// NextQueueOffset and Incarnation; offset is the offset pulled, known the incarnation of
	// the queue it belongs to (0: not known).
	result      protocol.PullResult
	suggest     int64
	next        int64
	offset      int64
	incarnation uint64
	known       uint64
}

// pullReaction is what the pull loop does about a pull's outcome, besides delivering what was
// found and moving its offset.
type pullReaction struct {
	// result is the answer's result to act on: a slave's OFFSET_MOVED backwards is taken as
	// PULL_NOT_HERE.
	result protocol.PullResult
	// markFailed avoids the member for a while; markOK forgets its failures.
	markFailed, markOK bool
	// refreshRoute asks the NameServers for the topic's route again.
	refreshRoute bool
	// failure, when not empty, says what failed: the loop counts a pull error, logs it and
	// waits (see pullState.failed) before the next pull.
	failure string
	// commitHeld: the answer shows that the member holds the offset pulled (FOUND,
	// NO_NEW_MSG), so the commit the pull carried, never beyond that offset, is stored as sent.
	// A member that lacks the offset (NOT_HERE, OFFSET_MOVED, an unknown result) holds no
	// offset beyond its queue's max offset and lowers the commit to it: the commit is not
	// taken as done and goes again, to the master or with the next pull.
	commitHeld bool
	// reborn: the master answered with another life of the queue than the position's; the
	// loop delivers nothing of the answer and goes on at the new life's min offset. learn: the
	// answer names the queue's incarnation and the position has none yet.
	reborn, learn bool
}

// after returns the state after a pull that ended as o, and what the loop must do about it.
//
// A failure sends the next pull to the master (unpinned) and avoids the member for a while,
// except that a refusal by the master is its final word (a slave's refusal, a topic it has not
// synced yet, say, sends us to the master); the route is refreshed unless the member refused
// for another reason than a missing topic or queue. An answer ends the backoff and follows the
// answer's suggestion. A slave must never move a consumer backwards (that would repeat
// committed messages): its OFFSET_MOVED below the offset pulled is taken as "not here", which
// sends the next pull to the member the slave suggests, the master when that is itself, without
// moving the offset; "not here" from the master, which holds everything it acknowledged, is a
// failure. An answer of another life of the queue (its incarnation is not the position's) is
// the queue reborn when the master gives it, and "not here" when a slave does (its log may be
// the stale one; only a master moves a consumer).
func (s pullState) after(o pullOutcome) (pullState, pullReaction) {
	var r pullReaction
	switch o.kind {
	case pullNoMember:
		r.refreshRoute = true
		r.failure = "broker group has no live member"
		if s.pinned {
			r.failure = "the broker group has no live member with the pinned brokerId"
		}
	case pullUnreachable:
		r.markFailed, r.refreshRoute, r.failure = true, true, "cannot connect to pull"
		s = s.toMaster()
	case pullLost:
		r.markFailed, r.refreshRoute, r.failure = true, true, "pull failed"
		s = s.toMaster()
	case pullRefused:
		r.markFailed = o.id != 0
		r.refreshRoute = o.status == protocol.StatusTopicNotExist || o.status == protocol.StatusQueueNotExist
		r.failure = "pull failed"
		s = s.toMaster()
	case pullGarbled:
		s.backoff = 0
		r.markOK, r.failure = true, "cannot decode the pull response"
	case pullAnswered:
		s.backoff = 0
		r.markOK = true
		r.result = o.result
		suggest := o.suggest
		if o.result == protocol.PullOffsetMoved && o.id != 0 && o.next < o.offset {
			r.result, suggest = protocol.PullNotHere, 0
		}
		if otherLife(o.known, o.incarnation) {
			if o.id == 0 {
				r.result, r.reborn = protocol.PullOffsetMoved, true
			} else {
				r.result, suggest = protocol.PullNotHere, 0
			}
		}
		// Only a master's answer tells the queue's life: a slave's log may be the stale one (a
		// position learnt there would be taken for the old life and replayed from the new one).
		r.learn = o.known == 0 && o.incarnation != 0 && o.id == 0 && r.result != protocol.PullNotHere
		r.commitHeld = r.result == protocol.PullFound || r.result == protocol.PullNoNewMessage
		switch {
		case r.result != protocol.PullNotHere:
			s.notHere = 0
			if !s.pinned {
				s.want = suggest
			}
			if !knownPullResult(r.result) {
				r.failure = "unknown pull result"
			}
		case o.id == 0:
			r.failure = "the master answered NOT_HERE"
		default:
			s.notHereID, s.notHere = o.id, s.notHere+1
			if !s.pinned {
				s.want = suggest
				if s.want == o.id {
					s.want = 0
				}
			}
		}
	}
	return s, r
}

// otherLife reports whether incarnations a and b name different lives of a queue: both are
// known and they differ (0, an older broker's, is never taken for another life).
func otherLife(a, b uint64) bool { return a != 0 && b != 0 && a != b }

// toMaster sends the next pull to the master, unless reads are pinned.
func (s pullState) toMaster() pullState {
	if !s.pinned {
		s.want = 0
	}
	return s
}

// knownPullResult reports whether the pull loop knows what to do with r.
func knownPullResult(r protocol.PullResult) bool {
	switch r {
	case protocol.PullFound, protocol.PullNoNewMessage, protocol.PullOffsetMoved, protocol.PullNotHere:
		return true
	}
	return false
}
