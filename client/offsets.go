package client

import "sync"

// offsetTracker holds one queue's consumer position: consumed is the next offset to deliver
// (advanced after the handler accepted everything before it), committed the last offset the
// broker confirmed, and incarnation the life of the queue both belong to (the brokers'
// PullResponseHeader.Incarnation; 0 while none is known). A commit never moves backwards: only a
// consumed offset above the committed one is proposed, and a confirmation never lowers
// committed. The exceptions are reset, after the broker answered OFFSET_MOVED, and reborn, after
// the queue was created again: the offsets of its earlier life mean nothing in the new one. The
// three change together under one lock, so that a commit never pairs an offset of one life with
// the incarnation of another. Safe for concurrent use: the puller advances, the committer
// commits.
type offsetTracker struct {
	mu          sync.Mutex // guards consumed, committed, incarnation
	consumed    int64      // -1 until the start position is known
	committed   int64      // -1 when nothing is known to be committed
	incarnation uint64
}

func newOffsetTracker() *offsetTracker {
	return &offsetTracker{consumed: -1, committed: -1}
}

// start sets the position a puller starts from, of the queue's incarnation inc (0: not known);
// committed says the broker holds it as the group's offset.
func (t *offsetTracker) start(offset int64, committed bool, inc uint64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.consumed, t.incarnation = offset, inc
	if committed {
		t.committed = max(t.committed, offset)
	}
}

// advance records that everything before next was consumed.
func (t *offsetTracker) advance(next int64) {
	t.mu.Lock()
	t.consumed = next
	t.mu.Unlock()
}

// reset moves the position to next after an OFFSET_MOVED answer and lets it be committed even
// below the committed offset: the broker says the old position no longer exists (a truncated
// queue), and keeping the old commit would make a restarted consumer skip whatever lands in
// between.
func (t *offsetTracker) reset(next int64) {
	t.mu.Lock()
	t.consumed, t.committed = next, -1
	t.mu.Unlock()
}

// reborn moves the position to next in the queue's new life inc: nothing of the old life's
// position or commit carries over.
func (t *offsetTracker) reborn(next int64, inc uint64) {
	t.mu.Lock()
	t.consumed, t.committed, t.incarnation = next, -1, inc
	t.mu.Unlock()
}

// learn takes inc as the incarnation of the position when none is known yet.
func (t *offsetTracker) learn(inc uint64) {
	t.mu.Lock()
	if t.incarnation == 0 {
		t.incarnation = inc
	}
	t.mu.Unlock()
}

// toCommit returns the offset to commit and the incarnation it belongs to, if the consumed
// position is ahead of the committed one.
func (t *offsetTracker) toCommit() (int64, uint64, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.consumed < 0 || t.consumed <= t.committed {
		return 0, 0, false
	}
	return t.consumed, t.incarnation, true
}

// confirm records that the broker committed v of incarnation inc; a confirmation of another
// life than the position's (a commit sent before the queue was found reborn) changes nothing.
func (t *offsetTracker) confirm(v int64, inc uint64) {
	t.mu.Lock()
	if inc == t.incarnation {
		t.committed = max(t.committed, v)
	}
	t.mu.Unlock()
}

// position returns the consumed and committed offsets and their incarnation.
func (t *offsetTracker) position() (consumed, committed int64, inc uint64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.consumed, t.committed, t.incarnation
}
