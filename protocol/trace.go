package protocol

import "fmt"

// Send tracing: per-stage timing of a sample of sends, so that a benchmark can tell where the
// tail of its latency goes. A client marks a sampled send with a TraceHeader (a send without a
// request header is not traced, so the untraced path is unchanged and older clients are not
// traced); the broker records the Unix nanosecond at which the send passed each of its stages
// into a fixed ring and serves the ring with CodeGetSendTraces. Broker and client clocks are
// compared, so the stamps mean something only between processes on one machine (one
// CLOCK_REALTIME). A broker that predates tracing refuses a send with a TraceHeader as
// malformed: a client traces only when asked to.

// TraceHeader is the request header of a traced CodeSendMessage: the client's identifier of the
// traced batch, which the broker's SendTrace carries back.
type TraceHeader struct {
	ID uint64
}

// TraceHeaderSize is the encoded size of TraceHeader (bytes).
const TraceHeaderSize = 8

// AppendTo implements Header.
func (h *TraceHeader) AppendTo(dst []byte) []byte { return AppendU64(dst, h.ID) }

// ReadFrom implements Header.
func (h *TraceHeader) ReadFrom(src []byte) error {
	r := NewReader(src)
	h.ID = r.U64()
	return r.Done()
}

// The broker stages of a traced send, indexes of SendTrace.Stamps, in the order a send passes
// them.
const (
	// TraceRead: the event loop began reading the data that held the send's frame.
	TraceRead = iota
	// TraceDispatched: the send handler started (after the frames read before it).
	TraceDispatched
	// TraceAppended: Store.Append returned; the batch is in the commit log and visible to
	// pulls (on a master without a Raft high watermark).
	TraceAppended
	// TraceFlushed: the flush covering the batch completed (SYNC_FLUSH; 0 otherwise).
	TraceFlushed
	// TraceReplicated: enough in-sync slaves held the batch (SYNC_MASTER; 0 otherwise).
	TraceReplicated
	// TraceAnswered: the answer was written to the producer's connection.
	TraceAnswered
	// TraceStamps is the number of broker stages.
	TraceStamps
)

// MaxTraceSlaves bounds SendTrace.Slaves.
const MaxTraceSlaves = 4

// TraceSlave is one slave's part in replicating a traced send (Unix ns; 0 = not seen).
type TraceSlave struct {
	BrokerID int64
	// Pulled is when the pull that Served answers reached the master: before the batch's
	// append, the pull was held and woken by it; after, the slave was still busy with its
	// previous answer when the batch was appended.
	Pulled int64
	// Served is when the master wrote the replication answer holding the batch's end.
	Served int64
	// Acked is when the slave's acknowledgement covering the batch's end reached the master.
	Acked int64
}

// SendTrace is what a broker recorded of one traced send.
type SendTrace struct {
	// ID is the client's TraceHeader.ID.
	ID              uint64
	Topic           string
	QueueID         int32
	BaseQueueOffset int64
	Count           int32
	// Stamps are the Unix ns at which the send passed each broker stage (TraceRead...), 0 for
	// a stage it did not pass.
	Stamps [TraceStamps]int64
	// Slaves has an element per slave seen replicating the batch (at most MaxTraceSlaves).
	Slaves []TraceSlave
}

// GetSendTracesRequest is CodeGetSendTraces' header.
type GetSendTracesRequest struct {
	// From is the first sequence number wanted (SendTraceTable.Next of the previous answer; 0
	// at first).
	From uint64
}

// AppendTo implements Header.
func (h *GetSendTracesRequest) AppendTo(dst []byte) []byte { return AppendU64(dst, h.From) }

// ReadFrom implements Header.
func (h *GetSendTracesRequest) ReadFrom(src []byte) error {
	r := NewReader(src)
	h.From = r.U64()
	return r.Done()
}

// SendTraceTable answers CodeGetSendTraces: the traces recorded from the request's From on that
// the ring still held and that are complete (answered).
type SendTraceTable struct {
	// Next is the sequence number to ask from next.
	Next uint64
	// Dropped counts traces at or after From that the ring overwrote before they were read.
	Dropped uint64
	Traces  []SendTrace
}

// sendTraceMinSize is the smallest encoded SendTrace (empty topic, no slaves).
const sendTraceMinSize = 8 + 2 + 4 + 8 + 4 + 8*TraceStamps + 1

// AppendTo appends the encoded table.
func (t *SendTraceTable) AppendTo(dst []byte) []byte {
	dst = AppendU64(dst, t.Next)
	dst = AppendU64(dst, t.Dropped)
	dst = AppendU32(dst, uint32(len(t.Traces)))
	for i := range t.Traces {
		dst = t.Traces[i].AppendTo(dst)
	}
	return dst
}

// AppendTo appends the encoded trace (Slaves beyond MaxTraceSlaves are left out).
func (s *SendTrace) AppendTo(dst []byte) []byte {
	dst = AppendU64(dst, s.ID)
	dst = AppendString(dst, s.Topic)
	dst = AppendI32(dst, s.QueueID)
	dst = AppendI64(dst, s.BaseQueueOffset)
	dst = AppendI32(dst, s.Count)
	for _, v := range s.Stamps {
		dst = AppendI64(dst, v)
	}
	n := min(len(s.Slaves), MaxTraceSlaves)
	dst = AppendU8(dst, uint8(n))
	for _, sl := range s.Slaves[:n] {
		dst = AppendI64(dst, sl.BrokerID)
		dst = AppendI64(dst, sl.Pulled)
		dst = AppendI64(dst, sl.Served)
		dst = AppendI64(dst, sl.Acked)
	}
	return dst
}

// ReadFrom decodes the table from exactly src.
func (t *SendTraceTable) ReadFrom(src []byte) error {
	r := NewReader(src)
	t.Next = r.U64()
	t.Dropped = r.U64()
	n := r.Count(sendTraceMinSize)
	t.Traces = make([]SendTrace, n)
	for i := range t.Traces {
		s := &t.Traces[i]
		s.ID = r.U64()
		s.Topic = r.Str(MaxTopicLength)
		s.QueueID = r.I32()
		s.BaseQueueOffset = r.I64()
		s.Count = r.I32()
		for j := range s.Stamps {
			s.Stamps[j] = r.I64()
		}
		ns := int(r.U8())
		if ns > MaxTraceSlaves && r.Err() == nil {
			r.Fail(fmt.Errorf("%w: %d slaves in a send trace, at most %d", ErrBadValue, ns, MaxTraceSlaves))
		}
		if ns > 0 && r.Err() == nil {
			s.Slaves = make([]TraceSlave, ns)
			for j := range s.Slaves {
				s.Slaves[j] = TraceSlave{BrokerID: r.I64(), Pulled: r.I64(), Served: r.I64(), Acked: r.I64()}
			}
		}
	}
	return r.Done()
}
