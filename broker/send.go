package broker

import (
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"github.com/petrel-mq/petrel/commitlog"
	"github.com/petrel-mq/petrel/protocol"
	"github.com/petrel-mq/petrel/protocol/rpc"
)

// handleSend stores one batch (CodeSendMessage) on the event loop: validate, append (a copy
// into the mapped commit log under the store's mutex), wake long polls of the queue, answer.
// Under SYNC_FLUSH the answer waits for the group commit that covers the batch and is written
// by the flusher goroutine. r is the master role dispatch admitted the send with. A send whose
// header is a protocol.TraceHeader is traced (trace.go) while the trace ring is on, and served
// as any other while it is off.
func (b *Broker) handleSend(cs *connState, f *protocol.Frame, r *role) {
	var ts traceStart
	if len(f.Header) != 0 {
		var th protocol.TraceHeader
		if th.ReadFrom(f.Header) != nil {
			b.replyError(cs, f, protocol.StatusRequestMalformed, "send request header must be empty or a trace header", "")
			return
		}
		if b.trace != nil {
			ts = traceStart{on: true, id: th.ID, read: cs.readAt, dispatched: time.Now().UnixNano()}
		}
	}
	h, tagHash, err := protocol.ValidateBatch(f.Body, b.limits)
	if err == nil && h.Size != len(f.Body) {
		err = errTrailingBytes
	}
	if err == nil && int64(h.Size) > b.cfg.MappedFileSizeCommitLog/2 {
		err = errBatchTooLarge
	}
	if err != nil {
		st := protocol.StatusMessageIllegal
		if errors.Is(err, protocol.ErrTopicInvalid) {
			st = protocol.StatusTopicInvalid
		}
		b.stats.putErrors.Add(1)
		b.replyError(cs, f, st, err.Error(), "")
		return
	}
	tp := b.topics.get(h.Topic)
	if tp == nil {
		if b.cfg.AutoCreateTopicEnable {
			b.autoCreateThenSend(cs, f, string(h.Topic))
			return
		}
		b.stats.putErrors.Add(1)
		b.replyError(cs, f, protocol.StatusTopicNotExist, "topic "+string(h.Topic)+" does not exist on broker "+b.cfg.BrokerName, "")
		return
	}
	if tp.cfg.Perm&protocol.PermWrite == 0 {
		b.stats.putErrors.Add(1)
		b.replyError(cs, f, protocol.StatusNoPermission, "topic "+tp.cfg.Topic+" is not writable", "")
		return
	}
	if h.QueueID >= tp.cfg.WriteQueueNums {
		b.stats.putErrors.Add(1)
		b.replyError(cs, f, protocol.StatusQueueNotExist, "queue id out of range of the topic's write queues", "")
		return
	}
	syncRepl := r.Mode == RoleSyncMaster
	// Checked before the append: these refusals mean "not stored".
	if st, why := b.replicasShort(r); st != protocol.StatusSuccess {
		b.stats.putErrors.Add(1)
		b.replyError(cs, f, st, why+": not stored", "")
		return
	}
	var appendStart time.Time
	if b.metrics != nil {
		appendStart = time.Now()
	}
	res, err := b.store.Append(h.Topic, h.QueueID, f.Body, h.Count, tagHash, r.Epoch, stampBatch)
	var tr traceRef
	if ts.on && err == nil {
		tr = b.trace.claim(&ts, tp, h.QueueID, h.Count, &res)
	}
	if b.metrics != nil && err == nil {
		b.metrics.appendLatency.Observe(time.Since(appendStart).Seconds())
	}
	if err != nil {
		b.stats.putErrors.Add(1)
		if errors.Is(err, commitlog.ErrTopicDeleted) {
			// Admitted as the topic was being deleted: the deletion record is in the log.
			b.replyError(cs, f, protocol.StatusTopicNotExist, "topic "+tp.cfg.Topic+" was deleted on broker "+b.cfg.BrokerName, "")
			return
		}
		b.appendLog.Warn(b.log, "append failed", "topic", tp.cfg.Topic, "queue", h.QueueID, "err", err)
		b.replyError(cs, f, appendStatus(err), err.Error(), "")
		return
	}
	b.stats.putMessages.Add(int64(h.Count))
	b.stats.putBytes.Add(int64(res.Size))
	r.master.NotifyAppend(res.EndOffset)
	// NB: with a high watermark (hwm) a held pull can read the batch only once it is
	// replicated: the replication waiter below wakes it then.
	if !syncRepl || !b.hwm || f.Flags.IsOneway() {
		if ws := tp.waiters.take(h.QueueID); ws != nil {
			b.wakeWaiters(ws)
		}
	}

	if f.Flags.IsOneway() {
		tr.finish(0)
		return
	}
	resp := protocol.SendResponseHeader{
		QueueID:        h.QueueID,
		QueueOffset:    res.BaseQueueOffset,
		Count:          h.Count,
		PhysicalOffset: res.PhysicalOffset,
		StoreTimestamp: res.StoreTimestamp,
	}
	waits := b.durableWaits(r)
	if waits == 0 {
		cs.out = appendSendResponse(cs.out[:0], f.RequestID, &resp)
		if tr.s != nil {
			cs.writeTraced(cs.out, tr)
		} else {
			cs.write(cs.out)
		}
		return
	}
	// Answered later, by whichever of the flusher and the replication waiter finishes last.
	a := &pendingAck{b: b, cs: cs, id: f.RequestID, resp: resp, tp: tp, qid: h.QueueID, trace: tr}
	a.pending.Store(waits)
	cs.inflight.Add(1)
	b.awaitDurable(r, res.EndOffset, a)
}

// durability hears the waits an append makes before it is acknowledged (awaitDurable): its
// flush and its replication, each with its error.
type durability interface {
	flushed(err error)
	replicated(err error)
}

// durableWaits returns how many waits an append makes under role r before it is
// acknowledged: the flush under SYNC_FLUSH, the replication to the in-sync set on a
// SYNC_MASTER.
func (b *Broker) durableWaits(r *role) int32 {
	return boolInt(b.cfg.FlushDiskType == SyncFlush) + boolInt(r.Mode == RoleSyncMaster)
}

// awaitDurable starts the waits (durableWaits) for the append that ends at end under role r;
// w hears each as it completes, off the caller's goroutine. Sends and topic deletions are
// acknowledged alike.
func (b *Broker) awaitDurable(r *role, end int64, w durability) {
	if b.cfg.FlushDiskType == SyncFlush {
		b.store.WaitFlushed(end, w.flushed)
	}
	if r.Mode == RoleSyncMaster {
		r.master.WaitReplicated(end, b.cfg.MinInSyncReplicas-1, b.cfg.SyncReplicationTimeout, w.replicated)
	}
}

// appendStatus is the status of the answer to an append the store refused with err.
func appendStatus(err error) protocol.Status {
	switch {
	case errors.Is(err, commitlog.ErrDiskFull):
		return protocol.StatusDiskFull
	case errors.Is(err, commitlog.ErrClosed):
		return protocol.StatusShuttingDown
	}
	return protocol.StatusSystemError
}

// pendingAck is a send answered once its flush and/or replication complete; the first failure
// decides the answer.
type pendingAck struct {
	b       *Broker
	cs      *connState
	id      uint32
	resp    protocol.SendResponseHeader
	tp      *topic // the send's topic and queue, whose held pulls its replication wakes
	qid     int32
	trace   traceRef // the send's record, if traced: stamped as its waits complete
	pending atomic.Int32
	mu      sync.Mutex // guards failSt, failMsg
	failSt  protocol.Status
	failMsg string
}

func (a *pendingAck) flushed(err error) {
	if err != nil {
		a.b.warn.Error(a.b.log, "sync flush failed", "err", err)
		a.fail(protocol.StatusFlushDiskTimeout, "stored, but the flush failed: "+err.Error())
	} else {
		a.trace.stamp(protocol.TraceFlushed)
	}
	a.done()
}

func (a *pendingAck) replicated(err error) {
	if err != nil {
		a.fail(protocol.StatusFlushSlaveTimeout, "stored on the master, replication not confirmed: "+err.Error())
	} else {
		a.trace.stamp(protocol.TraceReplicated)
	}
	a.done()
	if a.b.hwm {
		if ws := a.tp.waiters.take(a.qid); ws != nil {
			a.b.wakeWaiters(ws)
		}
	}
}

func (a *pendingAck) fail(st protocol.Status, msg string) {
	a.mu.Lock()
	if a.failSt == 0 {
		a.failSt, a.failMsg = st, msg
	}
	a.mu.Unlock()
}

func (a *pendingAck) done() {
	if a.pending.Add(-1) != 0 {
		return
	}
	a.mu.Lock()
	st, msg := a.failSt, a.failMsg
	a.mu.Unlock()
	var scratch [256]byte
	if st != 0 {
		a.cs.queueTracedAnswer(appendError(scratch[:0], a.id, st, msg), a.trace)
	} else {
		a.cs.queueTracedAnswer(appendSendResponse(scratch[:0], a.id, &a.resp), a.trace)
	}
}

func boolInt(v bool) int32 {
	if v {
		return 1
	}
	return 0
}

var (
	errTrailingBytes = errors.New("broker: bytes after the batch in a send request")
	errBatchTooLarge = errors.New("broker: batch larger than half a commit-log segment (mappedFileSizeCommitLog)")
)

func appendSendResponse(dst []byte, id uint32, h *protocol.SendResponseHeader) []byte {
	dst = protocol.StartFrame(dst, uint16(protocol.StatusSuccess), protocol.FlagResponse, id)
	dst = h.AppendTo(dst)
	protocol.EndHeader(dst, 0)
	protocol.EndFrame(dst, 0, 0)
	return dst
}

func appendError(dst []byte, id uint32, st protocol.Status, remark string) []byte {
	eh := protocol.ErrorHeader{Remark: remark}
	return protocol.AppendFrame(dst, uint16(st), protocol.FlagResponse, id, &eh, nil)
}

// autoCreateThenSend creates an unknown topic (autoCreateTopicEnable) on a worker goroutine,
// since persisting the topic table fsyncs, then serves the send again on the connection's
// loop. Sends that arrive on the connection meanwhile may be stored before this one.
func (b *Broker) autoCreateThenSend(cs *connState, f *protocol.Frame, name string) {
	req := &protocol.Frame{FrameHeader: f.FrameHeader, Header: append([]byte(nil), f.Header...), Body: append([]byte(nil), f.Body...)}
	cs.inflight.Add(1)
	b.workers.Add(1)
	go func() {
		defer b.workers.Done()
		cfg := protocol.TopicConfig{Topic: name, ReadQueueNums: b.cfg.DefaultTopicQueueNums, WriteQueueNums: b.cfg.DefaultTopicQueueNums, Perm: protocol.PermReadWrite}
		changed, err := b.putTopic(cfg)
		if err != nil {
			b.warn.Error(b.log, "cannot auto-create topic", "topic", name, "err", err)
			b.asyncReply(cs, req.RequestID, &rpc.Reply{Status: protocol.StatusSystemError, Remark: "cannot auto-create topic: " + err.Error()})
			return
		}
		if changed {
			b.log.Info("topic auto-created", "topic", name, "queues", cfg.WriteQueueNums)
			b.registrar.kick()
		}
		if !onLoop(cs, func() {
			cs.inflight.Add(-1)
			if !cs.closed.Load() {
				b.serveAgain(cs, req)
			}
		}) {
			cs.inflight.Add(-1)
		}
	}()
}
