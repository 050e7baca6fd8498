package broker

import (
	"sync"
	"sync/atomic"
	"time"

	"github.com/petrel-mq/petrel/commitlog"
	"github.com/petrel-mq/petrel/protocol"
)

// handlePull serves CodePullMessage on the event loop. Found batches are written with writev as
// slices of the mapped commit log (no copy into a response buffer; gnet copies only what the
// socket does not take at once, so the slices are released right after). A pull that finds
// nothing and asks for long polling is held until a message arrives on its queue or its
// timeout passes (RocketMQ's PullRequestHoldService, driven by appends instead of a 5 s scan).
func (b *Broker) handlePull(cs *connState, f *protocol.Frame) {
	var req protocol.PullRequestView
	if err := req.ReadFrom(f.Header); err != nil {
		b.replyError(cs, f, protocol.StatusRequestMalformed, "cannot decode pull request: "+err.Error(), "")
		return
	}
	if err := protocol.ValidateTopic(req.Topic); err != nil {
		b.replyError(cs, f, protocol.StatusTopicInvalid, err.Error(), "")
		return
	}
	tp := b.topics.get(req.Topic)
	if tp == nil {
		b.replyError(cs, f, protocol.StatusTopicNotExist, "topic "+string(req.Topic)+" does not exist on broker "+b.cfg.BrokerName, "")
		return
	}
	if tp.cfg.Perm&protocol.PermRead == 0 {
		b.replyError(cs, f, protocol.StatusNoPermission, "topic "+tp.cfg.Topic+" is not readable", "")
		return
	}
	if req.QueueID < 0 || req.QueueID >= tp.cfg.ReadQueueNums {
		b.replyError(cs, f, protocol.StatusQueueNotExist, "queue id out of range of the topic's read queues", "")
		return
	}
	if req.CommitOffset >= 0 && len(req.ConsumerGroup) > 0 {
		if err := protocol.ValidateGroup(req.ConsumerGroup); err != nil {
			b.replyError(cs, f, protocol.StatusRequestMalformed, err.Error(), "")
			return
		}
		_ = b.commitOffset(req.ConsumerGroup, req.Topic, req.QueueID, req.CommitOffset, req.Incarnation, cs.remote) // the pull is served all the same; the line says why nothing was recorded
	}
	p := pullParams{
		id:          f.RequestID,
		topic:       req.Topic,
		queueID:     req.QueueID,
		offset:      req.QueueOffset,
		maxMsgs:     clamp32(req.MaxMessages, 1, int32(b.cfg.MaxPullMessages)),
		maxBytes:    int(clamp32(req.MaxBytes, 1, int32(b.cfg.MaxPullBytes))),
		incarnation: req.Incarnation,
		hasInc:      req.HasIncarnation,
	}
	if b.pullOnce(cs, &p, false) {
		return
	}
	wait := time.Duration(req.PollTimeoutMs) * time.Millisecond
	if wait > b.cfg.LongPollingMaxWait {
		wait = b.cfg.LongPollingMaxWait
	}
	p.topic = []byte(string(req.Topic)) // the frame's bytes are gone once OnTraffic returns
	b.hold(cs, tp, p, wait)
}

// maxIovecs is the number of buffers passed to one writev (Linux IOV_MAX is 1024).
const maxIovecs = 512

type pullParams struct {
	id       uint32
	topic    []byte
	queueID  int32
	offset   int64
	maxMsgs  int32
	maxBytes int
	// incarnation is the life of the queue offset belongs to (0: not known); hasInc says the
	// client reads the incarnation in the answer.
	incarnation uint64
	hasInc      bool
}

func clamp32(v, lo, hi int32) int32 {
	if v < lo {
		return lo
	}
	if v > hi {
		return hi
	}
	return v
}

// pullOnce reads and answers the pull on the event loop. When nothing is there yet and final
// is false it answers nothing and returns false, so the caller may hold the request.
func (b *Broker) pullOnce(cs *connState, p *pullParams, final bool) bool {
	rr := &cs.rr
	r := b.role.Load()
	if err := b.store.ReadUpTo(p.topic, p.queueID, p.offset, p.maxMsgs, p.maxBytes, b.highWatermark(r), rr); err != nil {
		rr.Release()
		cs.out = appendError(cs.out[:0], p.id, protocol.StatusSystemError, "cannot read: "+err.Error())
		cs.write(cs.out)
		return true
	}
	hdr := protocol.PullResponseHeader{
		MinOffset:       rr.MinOffset,
		MaxOffset:       rr.MaxOffset,
		NextQueueOffset: p.offset,
		Incarnation:     rr.Incarnation,
		HasIncarnation:  p.hasInc,
	}
	// The consumer's offset is of another life of the queue than this member's (the queue was
	// created again: its topic deleted and re-created, or the store lost): the offset means
	// nothing here, wherever it falls. A master moves the consumer to the first stored message
	// of this life; a slave, whose log may be the stale one, sends it to the master (below).
	reborn := rr.Status != commitlog.NoQueue && otherLife(p.incarnation, rr.Incarnation)
	// A slave has only what it replicated: past its end the master may have more, so it never
	// answers "nothing new" or "offset moved" for an offset beyond its end while the master is
	// alive, nor "offset moved" to a lower offset ever: it sends the consumer to the master. A
	// queue it holds nothing of, asked past 0, is such an overflow too (not a reset to 0).
	slaveBehind := r.slave != nil && (rr.Status == commitlog.OffsetOverflow ||
		(rr.Status == commitlog.NoQueue && p.offset > 0) ||
		((rr.Status == commitlog.NoNewMessage || rr.Status == commitlog.NoQueue) && r.slave.Connected()))
	// Only a master moves a consumer's offset: a slave, or a member between roles (a deposed
	// master, one cut off from its group), may hold less than the group has, or a log about to
	// be cut, so it sends the consumer to the master instead of moving it (an OFFSET_MOVED
	// from it could send the consumer back over what it already consumed). Between roles it
	// serves only what it holds below the high watermark.
	moved := rr.Status == commitlog.OffsetTooSmall || rr.Status == commitlog.OffsetOverflow ||
		(rr.Status == commitlog.NoQueue && p.offset != 0) || reborn
	notMaster := r.master == nil && (moved || (r.slave == nil && rr.Status != commitlog.Found))
	// A master of a Raft-elected SYNC group moves an offset only while its in-sync slaves are
	// heard from: one that was stalled or cut off may be deposed without knowing it yet, and its
	// log end may lie below what the new master served.
	if moved && r.master != nil && b.hwm && !r.master.QuorumHeard() {
		notMaster = true
	}
	switch {
	case slaveBehind && !final && r.slave.MasterLoaded():
		// A loaded master sends even caught-up consumers here: wait for replication to bring
		// the offset (wakeReplicated), and send the consumer to the master only at the timeout.
		rr.Release()
		return false
	case slaveBehind, notMaster:
		hdr.Result = protocol.PullNotHere
	case reborn:
		hdr.Result = protocol.PullOffsetMoved
		hdr.NextQueueOffset = rr.MinOffset
	case rr.Status == commitlog.Found:
		hdr.Result = protocol.PullFound
		hdr.NextQueueOffset = rr.NextQueueOffset
	case rr.Status == commitlog.NoNewMessage:
		if !final {
			rr.Release()
			return false
		}
		hdr.Result = protocol.PullNoNewMessage
	case rr.Status == commitlog.NoQueue:
		if p.offset == 0 && !final {
			rr.Release()
			return false
		}
		hdr.Result = protocol.PullNoNewMessage
		if p.offset != 0 {
			hdr.Result = protocol.PullOffsetMoved
			hdr.NextQueueOffset = 0
		}
	case rr.Status == commitlog.OffsetOverflow:
		// The log holds less than the consumer's position: this member lost entries (or the
		// position is of another log). Move to a position that skips no stored message.
		hdr.Result = protocol.PullOffsetMoved
		hdr.NextQueueOffset = overflowTarget(p.incarnation, queueLife{min: rr.MinOffset, max: rr.MaxOffset, inc: rr.Incarnation})
	default: // OffsetTooSmall: retention removed the offset; the min offset is the next stored
		hdr.Result = protocol.PullOffsetMoved
		hdr.NextQueueOffset = rr.NextQueueOffset
	}
	if hdr.Result != protocol.PullFound && len(rr.Slices) > 0 { // found, but not to be served
		rr.Release()
		rr.Bytes, rr.Messages = 0, 0
	}
	if hdr.Result != protocol.PullNotHere && (r.master != nil || r.slave != nil) {
		hdr.SuggestBrokerID = b.readSuggestion(r, p.topic, p.queueID, hdr.NextQueueOffset)
	}
	cs.out = protocol.StartFrame(cs.out[:0], uint16(protocol.StatusSuccess), protocol.FlagResponse, p.id)
	cs.out = hdr.AppendTo(cs.out)
	protocol.EndHeader(cs.out, 0)
	protocol.EndFrame(cs.out, 0, rr.Bytes)
	// writev takes at most IOV_MAX (1024) buffers: write in chunks; gnet keeps their order.
	// Answers collected earlier in this read go first, in the same writev.
	cs.iov = cs.iov[:0]
	if cs.corked && len(cs.pend) > 0 {
		cs.iov = append(cs.iov, cs.pend)
	}
	cs.iov = append(cs.iov, cs.out)
	for i := range rr.Slices {
		if len(cs.iov) == maxIovecs {
			_, _ = cs.c.Writev(cs.iov)
			clear(cs.iov)
			cs.iov = cs.iov[:0]
			if cs.closed.Load() { // the write failed and closed the connection
				break
			}
		}
		cs.iov = append(cs.iov, rr.Slices[i].B)
	}
	if !cs.closed.Load() {
		_, _ = cs.c.Writev(cs.iov)
	}
	clear(cs.iov)
	cs.pendingWritten() // pend, if any, went first (gnet copied what the socket did not take)
	b.stats.getMessages.Add(int64(rr.Messages))
	b.stats.getBytes.Add(int64(rr.Bytes))
	rr.Release()
	return true
}

// pullWaiter is a held pull. Exactly one of the queue's append notification, the timeout and
// the shutdown answers it (done guards that), always on the connection's event loop.
type pullWaiter struct {
	cs    *connState
	p     pullParams
	timer *time.Timer
	done  atomic.Bool
	queue *pollWaiters
}

// pollWaiters holds the pulls waiting on the queues of one topic.
type pollWaiters struct {
	n       atomic.Int32 // number of held pulls, so appends skip the lock when there are none
	mu      sync.Mutex
	byQueue map[int32][]*pullWaiter
}

func newPollWaiters() *pollWaiters { return &pollWaiters{byQueue: map[int32][]*pullWaiter{}} }

// hold registers a long poll; the connection counts it as in flight until answered.
func (b *Broker) hold(cs *connState, tp *topic, p pullParams, wait time.Duration) {
	w := &pullWaiter{cs: cs, p: p, queue: tp.waiters}
	cs.inflight.Add(1)
	w.timer = time.AfterFunc(wait, func() {
		w.queue.remove(w)
		b.answer(w)
	})
	tp.waiters.mu.Lock()
	tp.waiters.byQueue[p.queueID] = append(tp.waiters.byQueue[p.queueID], w)
	tp.waiters.n.Add(1)
	tp.waiters.mu.Unlock()
	// An append between our read and the registration above would have found no waiter: check
	// again now that we are registered (the appender updates the queue before it takes waiters),
	// and so would a deletion of the topic, which answered the waiters it found.
	if b.store.MaxOffset(p.topic, p.queueID) > p.offset {
		b.wakeWaiters(tp.waiters.take(p.queueID))
	} else if cur := b.topics.get(p.topic); cur != tp && (cur == nil || cur.waiters != tp.waiters) {
		b.wakeWaiters(tp.waiters.take(p.queueID))
	}
}

func (q *pollWaiters) remove(w *pullWaiter) {
	q.mu.Lock()
	ws := q.byQueue[w.p.queueID]
	for i, x := range ws {
		if x == w {
			ws[i] = ws[len(ws)-1]
			ws[len(ws)-1] = nil
			ws = ws[:len(ws)-1]
			q.n.Add(-1)
			break
		}
	}
	if len(ws) == 0 {
		delete(q.byQueue, w.p.queueID)
	} else {
		q.byQueue[w.p.queueID] = ws
	}
	q.mu.Unlock()
}

// take removes and returns the pulls held on queueID; appends call it after every append to
// the queue and answer what it returns.
func (q *pollWaiters) take(queueID int32) []*pullWaiter {
	if q.n.Load() == 0 {
		return nil
	}
	q.mu.Lock()
	ws := q.byQueue[queueID]
	delete(q.byQueue, queueID)
	q.n.Add(-int32(len(ws)))
	q.mu.Unlock()
	return ws
}

// takeReady removes and returns the pulls whose queue now holds messages at or past their
// offset (maxOffset gives a queue's max offset); a slave calls it as replication extends its
// queues.
func (q *pollWaiters) takeReady(maxOffset func(queueID int32) int64) []*pullWaiter {
	if q.n.Load() == 0 {
		return nil
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	var ready []*pullWaiter
	for id, ws := range q.byQueue {
		max := maxOffset(id)
		keep := ws[:0]
		for _, w := range ws {
			if max > w.p.offset {
				ready = append(ready, w)
				q.n.Add(-1)
			} else {
				keep = append(keep, w)
			}
		}
		clear(ws[len(keep):])
		if len(keep) == 0 {
			delete(q.byQueue, id)
		} else {
			q.byQueue[id] = keep
		}
	}
	return ready
}

// takeAll removes and returns every held pull (shutdown).
func (q *pollWaiters) takeAll() []*pullWaiter {
	q.mu.Lock()
	var all []*pullWaiter
	for id, ws := range q.byQueue {
		all = append(all, ws...)
		delete(q.byQueue, id)
	}
	q.n.Store(0)
	q.mu.Unlock()
	return all
}

// topicGone reports whether the topic a pull was held on was deleted since (the table holds
// another topic of its name, with other waiters, or none).
func (b *Broker) topicGone(w *pullWaiter) bool {
	tp := b.topics.get(w.p.topic)
	return tp == nil || tp.waiters != w.queue
}

// wakeWaiters answers held pulls now.
func (b *Broker) wakeWaiters(ws []*pullWaiter) {
	for _, w := range ws {
		w.timer.Stop()
		b.answer(w)
	}
}

// answer re-runs the held pull on the connection's event loop and answers it, with "no new
// message" if there is still nothing.
func (b *Broker) answer(w *pullWaiter) {
	if !w.done.CompareAndSwap(false, true) {
		return
	}
	cs := w.cs
	if cs.closed.Load() || !onLoop(cs, func() {
		switch {
		case cs.closed.Load():
		case b.topicGone(w):
			cs.out = appendError(cs.out[:0], w.p.id, protocol.StatusTopicNotExist, "topic "+string(w.p.topic)+" was deleted on broker "+b.cfg.BrokerName)
			cs.write(cs.out)
		default:
			b.pullOnce(cs, &w.p, true)
		}
		cs.inflight.Add(-1)
	}) {
		cs.inflight.Add(-1)
	}
}
