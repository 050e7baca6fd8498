package ha

import (
	"container/heap"
	"sync"
	"time"
)

// waiter is one WaitReplicated call. It sits in two heaps of a waitQueue at once: by end (for
// completion as acknowledgements move) and by deadline (for timeouts); whichever takes it first
// removes it from the other, so no dead entries pile up while a slave is stuck.
type waiter struct {
	end      int64
	minAcks  int // in-sync slaves needed besides the master
	deadline time.Time
	cb       func(error)
	endIdx   int
	dlIdx    int
}

var waiterPool = sync.Pool{New: func() any { return new(waiter) }}

// run calls the callback with err and recycles the waiter. No lock may be held.
func (w *waiter) run(err error) {
	cb := w.cb
	*w = waiter{}
	waiterPool.Put(w)
	cb(err)
}

type endHeap []*waiter

func (h endHeap) Len() int           { return len(h) }
func (h endHeap) Less(i, j int) bool { return h[i].end < h[j].end }
func (h endHeap) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].endIdx, h[j].endIdx = i, j
}
func (h *endHeap) Push(x any) {
	w := x.(*waiter)
	w.endIdx = len(*h)
	*h = append(*h, w)
}
func (h *endHeap) Pop() any {
	old := *h
	w := old[len(old)-1]
	old[len(old)-1] = nil
	*h = old[:len(old)-1]
	return w
}

type deadlineHeap []*waiter

func (h deadlineHeap) Len() int           { return len(h) }
func (h deadlineHeap) Less(i, j int) bool { return h[i].deadline.Before(h[j].deadline) }
func (h deadlineHeap) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].dlIdx, h[j].dlIdx = i, j
}
func (h *deadlineHeap) Push(x any) {
	w := x.(*waiter)
	w.dlIdx = len(*h)
	*h = append(*h, w)
}
func (h *deadlineHeap) Pop() any {
	old := *h
	w := old[len(old)-1]
	old[len(old)-1] = nil
	*h = old[:len(old)-1]
	return w
}

// waitQueue holds the WaitReplicated waiters. Its methods take mu (a leaf lock) and return the
// waiters to run; callbacks always run after mu is released.
type waitQueue struct {
	mu         sync.Mutex
	byEnd      endHeap
	byDeadline deadlineHeap
	closed     bool
}

// add queues w. It reports whether w has the earliest deadline (the timer must be re-armed), and
// closed when the queue is closed (w was not queued).
func (q *waitQueue) add(w *waiter) (earliest, closed bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.closed {
		return false, true
	}
	heap.Push(&q.byEnd, w)
	heap.Push(&q.byDeadline, w)
	return w.dlIdx == 0, false
}

// popReady removes every waiter whose end is at most limit and whose minAcks is at most inSync
// (the size of the in-sync set that limit is the minimum of), and appends it to out. It stops at
// the first waiter (by end) that is not ready: a waiter needing more in-sync slaves than there
// are holds back the later ones until it times out. The broker passes the same minAcks to every
// call (its minInSyncReplicas), so this never delays a waiter that could complete.
func (q *waitQueue) popReady(limit int64, inSync int, out []*waiter) []*waiter {
	q.mu.Lock()
	defer q.mu.Unlock()
	for len(q.byEnd) > 0 && q.byEnd[0].end <= limit && q.byEnd[0].minAcks <= inSync {
		w := heap.Pop(&q.byEnd).(*waiter)
		heap.Remove(&q.byDeadline, w.dlIdx)
		out = append(out, w)
	}
	return out
}

// popExpired removes every waiter whose deadline is not after now and appends it to out; next
// is the earliest deadline left (the zero Time when none).
func (q *waitQueue) popExpired(now time.Time, out []*waiter) (_ []*waiter, next time.Time) {
	q.mu.Lock()
	defer q.mu.Unlock()
	for len(q.byDeadline) > 0 && !q.byDeadline[0].deadline.After(now) {
		w := heap.Pop(&q.byDeadline).(*waiter)
		heap.Remove(&q.byEnd, w.endIdx)
		out = append(out, w)
	}
	if len(q.byDeadline) > 0 {
		next = q.byDeadline[0].deadline
	}
	return out, next
}

// close marks the queue closed and appends every waiter to out.
func (q *waitQueue) close(out []*waiter) []*waiter {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.closed = true
	out = append(out, q.byEnd...)
	clear(q.byEnd)
	clear(q.byDeadline)
	q.byEnd, q.byDeadline = nil, nil
	return out
}

// len returns the number of waiters.
func (q *waitQueue) len() int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return len(q.byEnd)
}

// runAll runs every waiter of ws with err and returns ws emptied for reuse.
func runAll(ws []*waiter, err error) []*waiter {
	for i, w := range ws {
		ws[i] = nil
		w.run(err)
	}
	return ws[:0]
}
