package broker

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/panjf2000/gnet/v2"

	"github.com/petrel-mq/petrel/commitlog"
	"github.com/petrel-mq/petrel/internal/netguard"
	"github.com/petrel-mq/petrel/protocol"
	"github.com/petrel-mq/petrel/protocol/rpc"
)

// maxPausedInbound closes a paused connection whose client keeps sending past this many
// unread bytes: it ignores backpressure, and gnet would buffer without bound.
const maxPausedInbound = 64 << 20

// connState is the broker's per-connection state, stored as the gnet conn's context. Fields
// marked "loop" are touched only on the connection's event loop.
type connState struct {
	c      gnet.Conn
	remote string
	// inflight counts requests answered later (sync flush, long polls, admin work).
	inflight atomic.Int32
	closed   atomic.Bool

	paused  bool                 // loop
	partial int                  // loop: bytes of an incomplete frame buffered
	pending bool                 // loop: a frame is awaited since partialSince
	rr      commitlog.ReadResult // loop: reused by every pull of the connection
	// partialSince is when the frame awaited began (unix ns, 0: none): its first byte, or the
	// connection's open for its first frame. The housekeeping goroutine closes connections
	// whose frame is not whole FrameReadTimeout after it.
	partialSince atomic.Int64
	// partialGot and partialWant are the bytes of the awaited frame buffered and the frame's
	// size once its prefix is in (0 before), for the line that closes a slow sender; stored by
	// the loop only when they change.
	partialGot, partialWant atomic.Int64
	want                    int // loop: partialWant's value
	// framed is set once the connection's first frame was whole; until then probe holds what
	// the bytes buffered look like (netguard.Sniff), for the line that closes it.
	framed atomic.Bool
	probe  atomic.Uint32
	out    []byte   // loop: response scratch
	iov    [][]byte // loop: writev scratch
	// corked is set while OnTraffic dispatches the frames of one read: the answers written on
	// the loop meanwhile collect in pend and leave in one write when OnTraffic returns, so a
	// client with many requests in flight (64 producers on one connection) costs one system
	// call per read, not one per request.
	corked bool   // loop
	pend   []byte // loop
	// pendTraces are the traced sends whose answers wait in pend: they are answered when pend
	// is written.
	pendTraces []traceRef // loop
	// readAt is when OnTraffic began (Unix ns), the TraceRead of the sends it dispatches; kept
	// only while the trace ring is on.
	readAt int64 // loop
	// answers collects the answers finished off the loop (group commit, replication waits,
	// admin work) until one task on the loop writes all of them (writeAnswers); answerN counts
	// them. A group commit that acknowledges 50 sends of a connection writes once.
	answerMu    sync.Mutex
	answers     []byte // (answerMu)
	answerN     int32  // (answerMu)
	answerSpare []byte // (answerMu) the buffer written last, reused next; set only on the loop
	// answerTraces are the traced sends whose answers are in answers; answerTraceSpare is the
	// slice of the last write, reused next.
	answerTraces     []traceRef // (answerMu)
	answerTraceSpare []traceRef // (answerMu)
}

// handler is the gnet event handler. Every method runs on an event loop and never blocks: work
// that must wait (sync flush, long polls, disk-bound admin requests) is answered later, through
// connState.queueAnswer from the goroutine that finishes it or a task on the loop.
type handler struct {
	gnet.BuiltinEventEngine
	b *Broker
}

func (h *handler) OnBoot(eng gnet.Engine) gnet.Action {
	h.b.engine = eng
	h.b.booted <- nil
	return gnet.None
}

func (h *handler) OnOpen(c gnet.Conn) ([]byte, gnet.Action) {
	b := h.b
	if !admitConn(&b.conns, int64(b.maxConns)) {
		b.warn.Warn(b.log, "refusing connection: maxConnections reached", "remote", c.RemoteAddr().String(), "maxConnections", b.maxConns)
		return nil, gnet.Close
	}
	cs := &connState{c: c, remote: c.RemoteAddr().String(), pending: true}
	cs.partialSince.Store(time.Now().UnixNano()) // the first frame's clock runs from the open
	c.SetContext(cs)
	b.connSet.add(cs)
	return nil, gnet.None
}

func (h *handler) OnClose(c gnet.Conn, err error) gnet.Action {
	cs, ok := c.Context().(*connState)
	if !ok { // refused in OnOpen
		return gnet.None
	}
	b := h.b
	b.log.Debug("connection closed", "remote", cs.remote, "reason", err)
	cs.closed.Store(true)
	b.setPartial(cs, 0)
	b.paused.remove(cs)
	b.connSet.remove(cs)
	cs.rr.Release()
	for _, id := range b.consumers.remove(cs, time.Time{}) {
		b.warn.Info(b.log, "consumer client left: connection closed", "client", id, "remote", cs.remote)
	}
	b.conns.Add(-1)
	return gnet.None
}

// admitConn counts one more connection in conns unless that would pass max, and reports whether
// it did: a compare-and-swap, so that the count (which every event loop moves) never shows more
// connections than the cap, not even for a moment.
func admitConn(conns *atomic.Int64, max int64) bool {
	for {
		n := conns.Load()
		if n >= max {
			return false
		}
		if conns.CompareAndSwap(n, n+1) {
			return true
		}
	}
}

// OnTick resumes paused connections (backpressure, or requests that arrived before the broker
// took its first role): each is woken on its loop, where OnTraffic checks again whether it may
// read.
func (h *handler) OnTick() (time.Duration, gnet.Action) {
	h.b.paused.wakeAll()
	return 5 * time.Millisecond, gnet.None
}

func (cs *connState) overloaded(b *Broker) bool {
	return int(cs.inflight.Load()) >= b.cfg.ConnMaxInFlight || cs.c.OutboundBuffered()+len(cs.pend) >= b.cfg.ConnMaxOutboundBytes
}

// OnTraffic decodes every whole frame buffered on c and dispatches it; the answers given on the
// loop leave in one write at the end. A malformed or oversized frame closes the connection with
// a logged reason; nothing else is affected.
func (h *handler) OnTraffic(c gnet.Conn) gnet.Action {
	cs := c.Context().(*connState)
	if h.b.trace != nil {
		cs.readAt = time.Now().UnixNano()
	}
	cs.corked = true
	action := h.traffic(c, cs)
	cs.corked = false
	cs.flushPending()
	return action
}

// write sends an answer from the loop: now, or with the rest of this read's answers (corked;
// they leave early once pendFlushBytes have collected). gnet copies what the socket does not
// take at once, so p may be reused on return.
func (cs *connState) write(p []byte) {
	if !cs.corked {
		_, _ = cs.c.Write(p)
		return
	}
	cs.pend = append(cs.pend, p...)
	if len(cs.pend) >= pendFlushBytes {
		cs.flushPending()
	}
}

// flushPending writes the answers collected while corked. Loop.
func (cs *connState) flushPending() {
	if len(cs.pend) == 0 {
		return
	}
	written := !cs.closed.Load()
	at := traceAnswerTime(cs.pendTraces, written)
	if written {
		_, _ = cs.c.Write(cs.pend)
	}
	if len(cs.pendTraces) > 0 {
		finishTraces(cs.pendTraces, at)
		clear(cs.pendTraces)
		cs.pendTraces = cs.pendTraces[:0]
	}
	cs.pendingWritten()
}

// writeTraced writes the answer of the traced send tr from the loop (write) and completes its
// record, answered the moment the answer is handed to the connection's write. Loop.
func (cs *connState) writeTraced(p []byte, tr traceRef) {
	if cs.corked {
		cs.pendTraces = append(cs.pendTraces, tr) // before write, which may write pend at once
		cs.write(p)
		return
	}
	tr.finish(time.Now().UnixNano())
	cs.write(p)
}

// traceAnswerTime is the TraceAnswered of the traced sends trs whose answers are about to be
// written (written) or dropped (0): taken before the write, so that it precedes the client's
// reading of the answer.
func traceAnswerTime(trs []traceRef, written bool) int64 {
	if !written || len(trs) == 0 {
		return 0
	}
	return time.Now().UnixNano()
}

// finishTraces completes the records of traced sends whose answers were written, answered at at
// (0: dropped).
func finishTraces(trs []traceRef, at int64) {
	for _, tr := range trs {
		tr.finish(at)
	}
}

// pendingWritten empties pend after its bytes went out (gnet copied what the socket did not
// take). Loop.
func (cs *connState) pendingWritten() {
	if cap(cs.pend) > maxKeptPending {
		cs.pend = nil // one burst of answers does not pin its buffer for the connection's life
	} else {
		cs.pend = cs.pend[:0]
	}
}

const (
	// pendFlushBytes is how many bytes of corked answers are written before the read's end.
	pendFlushBytes = 64 << 10
	// maxKeptPending is the largest answer buffer (pend, answers) a connection keeps between
	// uses.
	maxKeptPending = 1 << 20
)

func (h *handler) traffic(c gnet.Conn, cs *connState) gnet.Action {
	b := h.b
	for {
		if !b.serving.Load() || cs.overloaded(b) {
			if c.InboundBuffered() > maxPausedInbound {
				b.warn.Warn(b.log, "closing connection: client ignores backpressure", "remote", cs.remote, "unread", c.InboundBuffered())
				return gnet.Close
			}
			if !cs.paused {
				cs.paused = true
				b.paused.add(cs)
			}
			return gnet.None
		}
		if cs.paused {
			cs.paused = false
			b.paused.remove(cs)
		}
		n := c.InboundBuffered()
		if n < protocol.FramePrefixSize {
			return b.incomplete(cs, n, 0)
		}
		p, _ := c.Peek(protocol.FramePrefixSize)
		fh, err := protocol.ParseFrameHeader(p, b.cfg.MaxFrameSize)
		if err == nil && fh.Flags.IsResponse() {
			err = errResponseFrame
		}
		if err != nil {
			if !cs.framed.Load() {
				if probe := netguard.Sniff(p); probe != netguard.NoProbe {
					b.warn.Warn(b.log, probe.Reason(clientPortSpeaks), "remote", cs.remote, "reason", err)
					return gnet.Close
				}
			}
			b.warn.Warn(b.log, "closing connection: bad frame", "remote", cs.remote, "reason", err)
			return gnet.Close
		}
		total := fh.TotalSize()
		if n < total {
			return b.incomplete(cs, n, total)
		}
		frame, err := c.Next(total)
		if err != nil {
			b.warn.Warn(b.log, "closing connection: cannot read frame", "remote", cs.remote, "reason", err)
			return gnet.Close
		}
		cs.frameDone()
		hdrEnd := protocol.FramePrefixSize + int(fh.HeaderLength)
		f := protocol.Frame{FrameHeader: fh, Header: frame[protocol.FramePrefixSize:hdrEnd], Body: frame[hdrEnd:]}
		b.dispatch(cs, &f)
	}
}

// incomplete accounts for the n bytes of an incomplete frame of want bytes (0: its prefix is
// not in yet) left buffered on cs and closes the connection when incomplete frames over all
// connections exceed MaxInboundBufferedBytes: a client announcing big frames and sending them
// slowly must not exhaust memory.
func (b *Broker) incomplete(cs *connState, n, want int) gnet.Action {
	total := b.setPartial(cs, n)
	if want != cs.want {
		cs.want = want
		cs.partialWant.Store(int64(want))
	}
	if n > 0 && !cs.framed.Load() && cs.probe.Load() == uint32(netguard.NoProbe) {
		p, _ := cs.c.Peek(min(n, protocol.FramePrefixSize))
		cs.probe.Store(uint32(netguard.Sniff(p)))
	}
	if n > 0 && total > b.cfg.MaxInboundBufferedBytes {
		b.warn.Warn(b.log, "closing connection: incomplete frames over all connections exceed maxInboundBufferedBytes",
			"remote", cs.remote, "buffered", n, "total", total, "limit", b.cfg.MaxInboundBufferedBytes)
		return gnet.Close
	}
	return gnet.None
}

// setPartial records that cs holds n bytes of an incomplete frame and returns the total over
// all connections; the frame's clock starts with its first byte, unless it runs already (the
// first frame's, from the open). Loop only.
func (b *Broker) setPartial(cs *connState, n int) int64 {
	total := b.inboundPartial.Add(int64(n - cs.partial))
	if n != cs.partial {
		cs.partial = n
		cs.partialGot.Store(int64(n))
	}
	if n > 0 && !cs.pending {
		cs.pending = true
		cs.partialSince.Store(time.Now().UnixNano())
	}
	return total
}

// frameDone records that a whole frame was taken from cs: no frame is awaited until the next
// byte. Loop only.
func (cs *connState) frameDone() {
	if cs.want != 0 {
		cs.want = 0
		cs.partialWant.Store(0)
	}
	if cs.pending {
		cs.pending = false
		cs.partialSince.Store(0)
		if !cs.framed.Load() {
			cs.framed.Store(true)
		}
	}
}

// clientPortSpeaks names the client port's protocol in the line that says a probe reached it.
const clientPortSpeaks = "Petrel's binary protocol"

// closeStalled closes connections whose awaited frame began more than FrameReadTimeout ago:
// an incomplete frame, or no whole frame since the open (housekeeping goroutine).
func (b *Broker) closeStalled(now time.Time) {
	limit := now.Add(-b.cfg.FrameReadTimeout).UnixNano()
	for _, cs := range b.connSet.snapshot() {
		since := cs.partialSince.Load()
		if since == 0 || since >= limit {
			continue
		}
		waited := now.Sub(time.Unix(0, since))
		stalled := netguard.StalledAttrs(cs.remote, cs.partialGot.Load(), cs.partialWant.Load(), waited, b.cfg.FrameReadTimeout)
		switch probe := netguard.Probe(cs.probe.Load()); {
		case cs.framed.Load():
			b.warn.Warn(b.log, "closing connection: request frame incomplete for the frame read timeout", stalled...)
		case probe != netguard.NoProbe:
			b.warn.Warn(b.log, probe.Reason(clientPortSpeaks), "remote", cs.remote, "waited", waited.Round(time.Millisecond))
		default:
			b.warn.Warn(b.log, "closing connection: no whole request within frameReadTimeout of connecting", stalled...)
		}
		_ = cs.c.Close()
	}
}

var errResponseFrame = fmt.Errorf("%w: a response frame sent to the broker", protocol.ErrFrameMalformed)

// reply writes rep on the event loop (c.Write copies what the socket does not take at once).
func (b *Broker) reply(cs *connState, f *protocol.Frame, rep *rpc.Reply) {
	if f.Flags.IsOneway() {
		return
	}
	cs.out = rpc.AppendReply(cs.out[:0], f.RequestID, rep)
	cs.write(cs.out)
}

func (b *Broker) replyError(cs *connState, f *protocol.Frame, st protocol.Status, remark, masterAddr string) {
	rep := rpc.Reply{Status: st, Remark: remark, MasterAddr: masterAddr}
	b.reply(cs, f, &rep)
}

// asyncReply sends rep from any goroutine and ends one in-flight request of the connection.
func (b *Broker) asyncReply(cs *connState, requestID uint32, rep *rpc.Reply) {
	var scratch [256]byte
	cs.queueAnswer(rpc.AppendReply(scratch[:0], requestID, rep))
}

// queueAnswer sends an answer frame finished off the loop and ends one in-flight request of the
// connection. The first answer queued since the last write schedules a task on the loop that
// writes every answer queued by the time it runs, in one system call. frame may be reused on
// return. Any goroutine.
//
// The task goes to gnet's normal task queue (AsyncWrite used its urgent one): under load the
// answers may wait behind other tasks of the loop (at most 256 per loop turn).
func (cs *connState) queueAnswer(frame []byte) {
	cs.queueTracedAnswer(frame, traceRef{})
}

// queueTracedAnswer is queueAnswer for the answer of the traced send tr (the zero traceRef: an
// untraced one), whose record is completed when the answer is written.
func (cs *connState) queueTracedAnswer(frame []byte, tr traceRef) {
	cs.answerMu.Lock()
	first := cs.answerN == 0
	cs.answers = append(cs.answers, frame...)
	cs.answerN++
	if tr.s != nil {
		cs.answerTraces = append(cs.answerTraces, tr)
	}
	cs.answerMu.Unlock()
	if first && (cs.closed.Load() || !onLoop(cs, cs.writeAnswers)) {
		cs.dropAnswers() // nobody will write them
	}
}

// writeAnswers writes the queued answers and ends their in-flight requests. Loop.
func (cs *connState) writeAnswers() {
	cs.answerMu.Lock()
	out, n := cs.answers, cs.answerN
	cs.answers, cs.answerN, cs.answerSpare = cs.answerSpare, 0, nil
	trs := cs.answerTraces
	cs.answerTraces, cs.answerTraceSpare = cs.answerTraceSpare, nil
	cs.answerMu.Unlock()
	cs.inflight.Add(-n)
	written := len(out) > 0 && !cs.closed.Load()
	at := traceAnswerTime(trs, written)
	if written {
		_, _ = cs.c.Write(out) // gnet copies what the socket does not take at once
	}
	if len(trs) > 0 {
		finishTraces(trs, at)
		clear(trs)
	}
	if cap(out) <= maxKeptPending {
		cs.answerMu.Lock()
		cs.answerSpare = out[:0]
		cs.answerTraceSpare = trs[:0]
		cs.answerMu.Unlock()
	}
}

// dropAnswers discards the queued answers of a connection that is closed (or whose loop is
// gone) and ends their in-flight requests. Any goroutine.
func (cs *connState) dropAnswers() {
	cs.answerMu.Lock()
	n := cs.answerN
	trs := cs.answerTraces
	cs.answers, cs.answerN, cs.answerTraces = cs.answers[:0], 0, nil
	cs.answerMu.Unlock()
	cs.inflight.Add(-n)
	finishTraces(trs, 0)
}

// onLoop runs fn on cs's event loop; it reports false when the loop no longer runs.
func onLoop(cs *connState, fn func()) bool {
	err := cs.c.EventLoop().Execute(context.Background(), gnet.RunnableFunc(func(context.Context) error {
		fn()
		return nil
	}))
	return err == nil
}

// pausedConns is the set of connections that stopped reading: backpressure, or requests that
// arrived before the broker took its first role (Broker.serving).
type pausedConns struct {
	mu sync.Mutex
	m  map[*connState]struct{}
}

func (p *pausedConns) add(cs *connState) {
	p.mu.Lock()
	p.m[cs] = struct{}{}
	p.mu.Unlock()
}

func (p *pausedConns) remove(cs *connState) {
	p.mu.Lock()
	delete(p.m, cs)
	p.mu.Unlock()
}

func (p *pausedConns) wakeAll() {
	p.mu.Lock()
	if len(p.m) == 0 {
		p.mu.Unlock()
		return
	}
	conns := make([]*connState, 0, len(p.m))
	for cs := range p.m {
		conns = append(conns, cs)
	}
	p.mu.Unlock()
	for _, cs := range conns {
		_ = cs.c.Wake(nil)
	}
}

// connSet holds the open connections, for the housekeeping scans.
type connSet struct {
	mu sync.Mutex // a leaf
	m  map[*connState]struct{}
}

func (s *connSet) add(cs *connState) {
	s.mu.Lock()
	s.m[cs] = struct{}{}
	s.mu.Unlock()
}

func (s *connSet) remove(cs *connState) {
	s.mu.Lock()
	delete(s.m, cs)
	s.mu.Unlock()
}

func (s *connSet) snapshot() []*connState {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]*connState, 0, len(s.m))
	for cs := range s.m {
		out = append(out, cs)
	}
	return out
}
