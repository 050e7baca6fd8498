package broker

import (
	"math"
	"sync/atomic"
	"time"

	"github.com/petrel-mq/petrel/commitlog"
	"github.com/petrel-mq/petrel/protocol"
	"github.com/petrel-mq/petrel/protocol/rpc"
)

// Send tracing (protocol/trace.go): a send whose request header is a protocol.TraceHeader has
// the Unix ns at which it passed each broker stage recorded in a fixed ring, which
// CodeGetSendTraces serves. The ring is allocated once at New; recording takes no lock and
// allocates nothing, so the event loops stamp a traced send as they serve it. A broker with
// traceRingEntries 0 has no ring (Broker.trace is nil) and pays one nil check per read.
//
// A record is written by several goroutines: the loop that serves the send (its claim and the
// stages up to the append, and an answer written on the loop), the flusher, the replication
// waiter and the goroutines of the slaves' connections, and the loop task that writes an
// answer finished off the loop. Every field is an atomic, so a reader never sees a torn value;
// a reader that copies a record checks the slot's state before and after, so a record reused
// while it was being copied is counted as dropped, never served mixed.
//
// A late stamp (the flush of a send whose slot the ring reused meanwhile) must not land in the
// record that reused the slot: a writer announces itself in the slot's busy count before it
// checks that the slot still holds its record, and a claim publishes the slot's new state
// before it checks busy (both sequentially consistent), so either the writer sees the new
// state and writes nothing, or the claim sees the writer and leaves the slot void (that send
// is not traced; the reader counts its sequence number as dropped).

// Flags in the low bits of traceSlot.state; the bits above hold the record's sequence number
// plus one (0: the slot was never used).
const (
	traceOpen     = 0 // being recorded: not served yet
	traceComplete = 1 // answered (or its connection closed): served
	traceVoid     = 2 // claimed while a late stamp of the previous record was being written
	traceFlagBits = 2
	traceFlagMask = 1<<traceFlagBits - 1
)

// traceWatchEntries is how many of the newest traced sends the replication stamps look for:
// a send older than that many traced sends gets no more slave stamps.
const traceWatchEntries = 32

// maxTracesPerAnswer bounds the traces of one GET_SEND_TRACES answer (a few hundred bytes
// each, well under a frame); the reader asks again from Next for the rest.
const maxTracesPerAnswer = 4096

// maxTraceRingEntries bounds traceRingEntries (about 200 bytes a record).
const maxTraceRingEntries = 1 << 20

// traceSlot is one record of the ring.
type traceSlot struct {
	state atomic.Uint64
	busy  atomic.Int32 // writers and claims in progress
	id    atomic.Uint64
	topic atomic.Pointer[topic] // its cfg.Topic names the send's topic
	qid   atomic.Int32
	count atomic.Int32
	base  atomic.Int64
	// end is the log offset after the batch: the replication stamps look for answers holding
	// it and acknowledgements covering it.
	end    atomic.Int64
	stamps [protocol.TraceStamps]atomic.Int64
	slaves [protocol.MaxTraceSlaves]traceSlaveSlot
}

// traceSlaveSlot is one slave's stamps of a record; id 0 is a free slot (slaves have brokerId
// >= 1).
type traceSlaveSlot struct {
	id, pulled, served, acked atomic.Int64
}

// traceWatch names one of the newest traced sends for the replication stamps.
type traceWatch struct {
	seq atomic.Uint64 // the record's sequence number plus one (0: none)
	end atomic.Int64
}

// traceRing is the broker's ring of send traces.
type traceRing struct {
	slots []traceSlot
	// next is the sequence number the next traced send claims.
	next  atomic.Uint64
	watch [traceWatchEntries]traceWatch
}

// newTraceRing returns a ring of n records, nil for n <= 0 (tracing off).
func newTraceRing(n int) *traceRing {
	if n <= 0 {
		return nil
	}
	return &traceRing{slots: make([]traceSlot, n)}
}

// traceRef is a traced send's hold on its record; the zero traceRef is an untraced send, and
// every method of it does nothing.
type traceRef struct {
	s   *traceSlot
	seq uint64
}

// traceStart is what a traced send knows before it claims its record, after its append.
type traceStart struct {
	on               bool
	id               uint64
	read, dispatched int64
}

func traceState(seq uint64, flag uint64) uint64 { return (seq+1)<<traceFlagBits | flag }

// claim records a traced send that was appended as res: its stamps up to TraceAppended, which
// is now. It returns the zero traceRef when the slot cannot be reused this instant (a late
// stamp of its previous record is being written). Loop.
func (r *traceRing) claim(st *traceStart, tp *topic, qid, count int32, res *commitlog.AppendResult) traceRef {
	appended := time.Now().UnixNano()
	seq := r.next.Add(1) - 1
	s := &r.slots[seq%uint64(len(r.slots))]
	s.busy.Add(1)
	s.state.Store(traceState(seq, traceOpen))
	if s.busy.Load() != 1 {
		s.state.Store(traceState(seq, traceVoid))
		s.busy.Add(-1)
		return traceRef{}
	}
	s.id.Store(st.id)
	s.topic.Store(tp)
	s.qid.Store(qid)
	s.count.Store(count)
	s.base.Store(res.BaseQueueOffset)
	s.end.Store(res.EndOffset)
	for i := range s.stamps {
		s.stamps[i].Store(0)
	}
	s.stamps[protocol.TraceRead].Store(st.read)
	s.stamps[protocol.TraceDispatched].Store(st.dispatched)
	s.stamps[protocol.TraceAppended].Store(appended)
	for i := range s.slaves {
		sl := &s.slaves[i]
		sl.id.Store(0)
		sl.served.Store(0)
		sl.acked.Store(0)
	}
	s.busy.Add(-1)
	w := &r.watch[seq%traceWatchEntries]
	w.seq.Store(0)
	w.end.Store(res.EndOffset)
	w.seq.Store(seq + 1)
	return traceRef{s: s, seq: seq}
}

// stamp records that the send passed stage i now. Any goroutine.
func (t traceRef) stamp(i int) {
	if t.s == nil {
		return
	}
	now := time.Now().UnixNano()
	t.s.busy.Add(1)
	if t.s.state.Load() == traceState(t.seq, traceOpen) {
		t.s.stamps[i].Store(now)
	}
	t.s.busy.Add(-1)
}

// finish completes the record, the reader may serve it from now on: answered is when its
// answer was written (0: it was not, a one-way send or a closed connection). Any goroutine.
func (t traceRef) finish(answered int64) {
	if t.s == nil {
		return
	}
	t.s.busy.Add(1)
	if open := traceState(t.seq, traceOpen); t.s.state.Load() == open {
		if answered != 0 {
			t.s.stamps[protocol.TraceAnswered].Store(answered)
		}
		t.s.state.CompareAndSwap(open, traceState(t.seq, traceComplete))
	}
	t.s.busy.Add(-1)
}

// stampSlave records a slave's stage at now: its Served (acked false; with Pulled, when the
// pull it answers arrived) or its Acked, the first time only. A record still takes slave stamps
// once complete (a slave outside the in-sync set acknowledges after the answer). Any goroutine.
func (t traceRef) stampSlave(brokerID int64, acked bool, now, pulled int64) {
	s := t.s
	s.busy.Add(1)
	defer s.busy.Add(-1)
	if st := s.state.Load(); st>>traceFlagBits != t.seq+1 || st&traceFlagMask == traceVoid {
		return
	}
	for i := range s.slaves {
		sl := &s.slaves[i]
		id := sl.id.Load()
		if id == 0 && sl.id.CompareAndSwap(0, brokerID) {
			id = brokerID
		} else if id == 0 {
			id = sl.id.Load()
		}
		if id != brokerID {
			continue
		}
		if acked {
			sl.acked.CompareAndSwap(0, now)
		} else if sl.served.CompareAndSwap(0, now) {
			sl.pulled.Store(pulled)
		}
		return
	}
}

// slaveStage stamps the slave's stage on every watched send whose batch ends in (lo, hi]
// (pulled: as stampSlave's).
func (r *traceRing) slaveStage(brokerID int64, acked bool, lo, hi, pulled int64) {
	newest := r.next.Load()
	if newest == 0 {
		return
	}
	var now int64
	for i := range r.watch {
		w := &r.watch[i]
		seq := w.seq.Load()
		if seq == 0 || seq+traceWatchEntries < newest {
			continue
		}
		end := w.end.Load()
		if w.seq.Load() != seq || end <= lo || end > hi {
			continue
		}
		if now == 0 {
			now = time.Now().UnixNano()
		}
		traceRef{s: &r.slots[(seq-1)%uint64(len(r.slots))], seq: seq - 1}.stampSlave(brokerID, acked, now, pulled)
	}
}

// ReplicationServed implements ha.ReplicationObserver: the sends whose batch ends in
// (start, end] were served to the slave.
func (r *traceRing) ReplicationServed(brokerID, start, end, pulled int64) {
	r.slaveStage(brokerID, false, start, end, pulled)
}

// ReplicationAcked implements ha.ReplicationObserver: the sends whose batch ends at or before
// offset are held by the slave.
func (r *traceRing) ReplicationAcked(brokerID, offset int64) {
	r.slaveStage(brokerID, true, math.MinInt64, offset, 0)
}

// read copies the complete records from sequence number from on into t, at most
// maxTracesPerAnswer: it stops at the first record still being recorded, which the next read
// asks for again (t.Next). A record the ring
// reused before it was read counts in t.Dropped.
func (r *traceRing) read(from uint64, t *protocol.SendTraceTable) {
	next := r.next.Load()
	if from > next {
		from = next // a reader that knew an earlier life of the broker
	}
	if n := uint64(len(r.slots)); next-from > n {
		t.Dropped += next - n - from
		from = next - n
	}
	seq := from
	for ; seq < next && len(t.Traces) < maxTracesPerAnswer; seq++ {
		s := &r.slots[seq%uint64(len(r.slots))]
		st := s.state.Load()
		switch {
		case st>>traceFlagBits > seq+1, st == traceState(seq, traceVoid):
			t.Dropped++
			continue
		case st != traceState(seq, traceComplete):
			t.Next = seq // not recorded yet, or being recorded: asked for again
			return
		}
		tr := protocol.SendTrace{
			ID:              s.id.Load(),
			QueueID:         s.qid.Load(),
			BaseQueueOffset: s.base.Load(),
			Count:           s.count.Load(),
		}
		if tp := s.topic.Load(); tp != nil {
			tr.Topic = tp.cfg.Topic
		}
		for i := range s.stamps {
			tr.Stamps[i] = s.stamps[i].Load()
		}
		for i := range s.slaves {
			sl := &s.slaves[i]
			if id := sl.id.Load(); id != 0 {
				tr.Slaves = append(tr.Slaves, protocol.TraceSlave{BrokerID: id, Pulled: sl.pulled.Load(), Served: sl.served.Load(), Acked: sl.acked.Load()})
			}
		}
		if s.state.Load() != st {
			t.Dropped++ // reused while it was copied
			continue
		}
		t.Traces = append(t.Traces, tr)
	}
	t.Next = seq
}

// replySendTraces serves CodeGetSendTraces.
func (b *Broker) replySendTraces(req request) rpc.Reply {
	var h protocol.GetSendTracesRequest
	if err := h.ReadFrom(req.header); err != nil {
		return req.malformed(err)
	}
	if b.trace == nil {
		// NB: an empty table would read as "nothing traced yet": the reader would wait for
		// traces that never come.
		return rpc.Errorf(protocol.StatusServiceNotAvailable, "send tracing is off on broker %s (traceRingEntries=0): it records no send traces", b.cfg.BrokerName)
	}
	t := protocol.SendTraceTable{Next: h.From}
	b.trace.read(h.From, &t)
	return rpc.Reply{Body: t.AppendTo(nil)}
}
