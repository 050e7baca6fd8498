package client

import "sync/atomic"

// offsetTracker holds one queue's consumer position: consumed is the next offset to deliver
// (advanced after the handler accepted everything before it), committed the last offset the
// broker confirmed. A commit never moves backwards: only a consumed offset above the committed
// one is proposed, and a confirmation never lowers committed. The one exception is reset, after
// the broker answered OFFSET_MOVED. Safe for concurrent use: the
// puller advances, the committer commits.
type offsetTracker struct {
	consumed  atomic.Int64 // -1 until the start position is known
	committed atomic.Int64 // -1 when nothing is known to be committed
}

func newOffsetTracker() *offsetTracker {
	t := &offsetTracker{}
	t.consumed.Store(-1)
	t.committed.Store(-1)
	return t
}

// start sets the position a puller starts from; committed says the broker holds it as the
// group's offset.
func (t *offsetTracker) start(offset int64, committed bool) {
	t.consumed.Store(offset)
	if committed {
		t.confirm(offset)
	}
}

// advance records that everything before next was consumed.
func (t *offsetTracker) advance(next int64) { t.consumed.Store(next) }

// reset moves the position to next after an OFFSET_MOVED answer and lets it be committed even
// below the committed offset: the broker says the old position no longer exists (a truncated or
// replaced queue), and keeping the old commit would make a restarted consumer skip whatever
// lands in between.
func (t *offsetTracker) reset(next int64) {
	t.consumed.Store(next)
	t.committed.Store(-1)
}

// toCommit returns the offset to commit, if the consumed position is ahead of the committed one.
func (t *offsetTracker) toCommit() (int64, bool) {
	c := t.consumed.Load()
	if c < 0 || c <= t.committed.Load() {
		return 0, false
	}
	return c, true
}

// confirm records that the broker committed v.
func (t *offsetTracker) confirm(v int64) {
	for {
		cur := t.committed.Load()
		if v <= cur || t.committed.CompareAndSwap(cur, v) {
			return
		}
	}
}
