package broker

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/petrel-mq/petrel/commitlog"
	"github.com/petrel-mq/petrel/internal/testutil"
	"github.com/petrel-mq/petrel/protocol"
	"github.com/petrel-mq/petrel/protocol/rpc"
)

// tracedSend sends a batch marked with a TraceHeader of id and returns the answer.
func tracedSend(t testing.TB, c *rpc.Conn, id uint64, topic string, qid int32, bodies ...string) protocol.SendResponseHeader {
	t.Helper()
	var resp protocol.SendResponseHeader
	if err := c.CallDecode(ctx5s(t), protocol.CodeSendMessage, &protocol.TraceHeader{ID: id}, buildBatch(topic, qid, bodies...), &resp, nil); err != nil {
		t.Fatalf("traced send: %v", err)
	}
	return resp
}

// sendTraces asks the broker on c for its send traces from from on.
func sendTraces(t testing.TB, c *rpc.Conn, from uint64) protocol.SendTraceTable {
	t.Helper()
	resp, err := c.Call(ctx5s(t), protocol.CodeGetSendTraces, &protocol.GetSendTracesRequest{From: from}, nil)
	if err != nil {
		t.Fatalf("GET_SEND_TRACES: %v", err)
	}
	defer resp.Release()
	var tbl protocol.SendTraceTable
	if err := tbl.ReadFrom(resp.Body); err != nil {
		t.Fatalf("GET_SEND_TRACES answer: %v", err)
	}
	return tbl
}

// waitTraces waits until the broker serves n traces from from on.
func waitTraces(t testing.TB, c *rpc.Conn, from uint64, n int) protocol.SendTraceTable {
	t.Helper()
	var tbl protocol.SendTraceTable
	testutil.Eventually(t, "complete send traces", func() bool {
		tbl = sendTraces(t, c, from)
		return len(tbl.Traces) >= n
	})
	return tbl
}

// checkOrdered fails unless every stage named is set and each is at or after the one before.
func checkOrdered(t testing.TB, what string, stamps ...int64) {
	t.Helper()
	if err := ordered(stamps...); err != nil {
		t.Fatalf("%s: %v", what, err)
	}
}

// ordered says which of stamps is not set or comes before the one before it.
func ordered(stamps ...int64) error {
	for i, v := range stamps {
		if v == 0 {
			return fmt.Errorf("stage %d of %v not stamped", i, stamps)
		}
		if i > 0 && v < stamps[i-1] {
			return fmt.Errorf("stage %d before stage %d: %v", i, i-1, stamps)
		}
	}
	return nil
}

// traceBroker starts a broker of testConfig changed by edit (nil: as is) with topic of queues
// queues, and returns it and a connection to it.
func traceBroker(t *testing.T, edit func(*Config), topic string, queues int32) (*Broker, *rpc.Conn) {
	t.Helper()
	b := startEdited(t, edit)
	c := dial(t, b.Addr())
	createTopic(t, c, topic, queues)
	return b, c
}

// TestSendTraceSyncFlush: on a SYNC_FLUSH broker a send with a TraceHeader is recorded with its
// batch and its stages in order, Read to Answered, no replication; a send without a header is
// answered as before and records nothing.
func TestSendTraceSyncFlush(t *testing.T) {
	_, c := traceBroker(t, func(c *Config) { c.FlushDiskType = SyncFlush }, "T", 2)
	if got := send(t, c, "T", 1, "untraced"); got.QueueOffset != 0 || got.Count != 1 {
		t.Fatalf("untraced send answered %+v", got)
	}
	resp := tracedSend(t, c, 0xfeed, "T", 1, "a", "b")
	tbl := waitTraces(t, c, 0, 1)
	if tbl.Next != 1 || tbl.Dropped != 0 || len(tbl.Traces) != 1 {
		t.Fatalf("table: next %d, dropped %d, %d traces; want 1, 0, 1 (the untraced send records nothing)", tbl.Next, tbl.Dropped, len(tbl.Traces))
	}
	tr := tbl.Traces[0]
	if tr.ID != 0xfeed || tr.Topic != "T" || tr.QueueID != 1 || tr.BaseQueueOffset != resp.QueueOffset || tr.Count != 2 {
		t.Fatalf("trace %+v, want ID 0xfeed of T/1 at %d, 2 messages", tr, resp.QueueOffset)
	}
	s := tr.Stamps
	checkOrdered(t, "SYNC_FLUSH send", s[protocol.TraceRead], s[protocol.TraceDispatched], s[protocol.TraceAppended], s[protocol.TraceFlushed], s[protocol.TraceAnswered])
	if s[protocol.TraceReplicated] != 0 || len(tr.Slaves) != 0 {
		t.Fatalf("replication stamped on a lone broker: %+v", tr)
	}
	if again := sendTraces(t, c, tbl.Next); len(again.Traces) != 0 || again.Next != 1 || again.Dropped != 0 {
		t.Fatalf("asked again from Next: %+v", again)
	}
}

// TestSendTraceSyncMaster: on a SYNC_MASTER with a slave a traced send is stamped replicated,
// and the slave's answer and acknowledgement come between its append and its replication.
func TestSendTraceSyncMaster(t *testing.T) {
	hc := newHACluster(t, RoleSyncMaster, 1, nil)
	m := hc.b(0)
	hc.waitInSync(1)
	c := dial(t, m.Addr())
	createTopic(t, c, "R", 1)
	tracedSend(t, c, 7, "R", 0, "replicated")
	tr := waitTraces(t, c, 0, 1).Traces[0]
	s := tr.Stamps
	checkOrdered(t, "SYNC_MASTER send", s[protocol.TraceRead], s[protocol.TraceDispatched], s[protocol.TraceAppended], s[protocol.TraceReplicated], s[protocol.TraceAnswered])
	if s[protocol.TraceFlushed] != 0 {
		t.Fatalf("flush stamped under ASYNC_FLUSH: %v", s)
	}
	if len(tr.Slaves) != 1 || tr.Slaves[0].BrokerID != 1 {
		t.Fatalf("slaves %+v, want slave 1", tr.Slaves)
	}
	sl := tr.Slaves[0]
	checkOrdered(t, "slave 1", s[protocol.TraceAppended], sl.Served, sl.Acked, s[protocol.TraceReplicated])
	if sl.Pulled == 0 || sl.Pulled > sl.Served {
		t.Fatalf("slave 1 pulled at %d, served at %d: want the pull's arrival before its answer", sl.Pulled, sl.Served)
	}
}

// TestSendTraceRingWraps: traces the ring overwrote before they were read count as dropped, and
// the reader goes on from the oldest the ring holds.
func TestSendTraceRingWraps(t *testing.T) {
	_, c := traceBroker(t, func(c *Config) { c.TraceRingEntries = 4 }, "W", 1)
	for i := range 10 {
		tracedSend(t, c, uint64(100+i), "W", 0, "m")
	}
	tbl := waitTraces(t, c, 0, 4)
	if tbl.Next != 10 || tbl.Dropped != 6 || len(tbl.Traces) != 4 {
		t.Fatalf("next %d, dropped %d, %d traces; want 10, 6, 4", tbl.Next, tbl.Dropped, len(tbl.Traces))
	}
	for i, tr := range tbl.Traces {
		if tr.ID != uint64(106+i) || tr.BaseQueueOffset != int64(6+i) {
			t.Fatalf("trace %d: ID %d at %d, want %d at %d", i, tr.ID, tr.BaseQueueOffset, 106+i, 6+i)
		}
	}
	// A reader that kept up drops nothing; one that asks past the ring's end is told where it is.
	if tbl = sendTraces(t, c, 8); tbl.Next != 10 || tbl.Dropped != 0 || len(tbl.Traces) != 2 {
		t.Fatalf("from 8: %+v", tbl)
	}
	if tbl = sendTraces(t, c, 50); tbl.Next != 10 || len(tbl.Traces) != 0 {
		t.Fatalf("from 50: %+v", tbl)
	}
}

// TestSendTraceRingOff: with traceRingEntries 0 a traced send is stored and answered as any
// other, and GET_SEND_TRACES is refused as not available, saying why (an empty table would read
// as nothing traced yet).
func TestSendTraceRingOff(t *testing.T) {
	b, c := traceBroker(t, func(c *Config) { c.TraceRingEntries = 0 }, "O", 1)
	if b.trace != nil || b.replicationObserver() != nil {
		t.Fatal("trace ring allocated while off")
	}
	if got := tracedSend(t, c, 1, "O", 0, "m"); got.QueueOffset != 0 {
		t.Fatalf("answer %+v", got)
	}
	resp, err := c.Call(ctx5s(t), protocol.CodeGetSendTraces, &protocol.GetSendTracesRequest{From: 7}, nil)
	if err == nil {
		resp.Release()
	}
	if st := statusOf(err); st != protocol.StatusServiceNotAvailable || !strings.Contains(err.Error(), "traceRingEntries=0") {
		t.Fatalf("ring off answered %v; want SERVICE_NOT_AVAILABLE naming traceRingEntries=0", err)
	}
}

// TestSendHeaderNotATraceHeader: a send whose header is not a TraceHeader is refused as
// malformed, and nothing is stored.
func TestSendHeaderNotATraceHeader(t *testing.T) {
	b, c := traceBroker(t, nil, "M", 1)
	for _, hdr := range [][]byte{{1, 2, 3}, make([]byte, protocol.TraceHeaderSize+1)} {
		_, err := c.Call(ctx5s(t), protocol.CodeSendMessage, rawHeader(hdr), buildBatch("M", 0, "m"))
		if st := statusOf(err); st != protocol.StatusRequestMalformed {
			t.Fatalf("send with a %d-byte header: %v, want REQUEST_MALFORMED", len(hdr), err)
		}
	}
	if end := b.store.MaxOffset([]byte("M"), 0); end != 0 {
		t.Fatalf("queue max offset %d after refused sends", end)
	}
}

// rawHeader is a request header of the given bytes.
type rawHeader []byte

func (h rawHeader) AppendTo(dst []byte) []byte { return append(dst, h...) }

func (h rawHeader) ReadFrom([]byte) error { return nil }

// TestTraceRingLateStamps: a stamp of a record whose slot the ring reused does not land in the
// new record, and a claim racing a late stamp leaves its slot void, which the reader counts as
// dropped.
func TestTraceRingLateStamps(t *testing.T) {
	r := newTraceRing(1)
	tp := &topic{cfg: protocol.TopicConfig{Topic: "L"}}
	res := commitlog.AppendResult{EndOffset: 100}
	old := r.claim(&traceStart{on: true, id: 1, read: 1, dispatched: 2}, tp, 0, 1, &res)
	cur := r.claim(&traceStart{on: true, id: 2, read: 3, dispatched: 4}, tp, 0, 1, &res)
	if old.s != cur.s || cur.s == nil {
		t.Fatal("a ring of one reuses its slot")
	}
	old.stamp(protocol.TraceFlushed)
	old.stampSlave(9, true, 5, 0)
	old.finish(6)
	if cur.s.stamps[protocol.TraceFlushed].Load() != 0 || cur.s.slaves[0].id.Load() != 0 {
		t.Fatal("a stamp of the reused record landed in the new one")
	}
	var tbl protocol.SendTraceTable
	r.read(0, &tbl)
	if tbl.Next != 1 || tbl.Dropped != 1 || len(tbl.Traces) != 0 {
		t.Fatalf("with record 1 open: %+v, want next 1, dropped 1", tbl)
	}
	cur.finish(7)
	tbl = protocol.SendTraceTable{}
	r.read(1, &tbl)
	if tbl.Next != 2 || len(tbl.Traces) != 1 || tbl.Traces[0].ID != 2 || tbl.Traces[0].Stamps[protocol.TraceAnswered] != 7 {
		t.Fatalf("record 1 complete: %+v", tbl)
	}
	// A late writer is inside the slot when the next claim comes: the claim gives up the slot.
	cur.s.busy.Add(1)
	if void := r.claim(&traceStart{on: true, id: 3}, tp, 0, 1, &res); void.s != nil {
		t.Fatal("claimed a slot a late stamp is writing")
	}
	cur.s.busy.Add(-1)
	if cur.s.id.Load() != 2 {
		t.Fatal("the void claim reset the slot under its writer")
	}
	tbl = protocol.SendTraceTable{}
	r.read(2, &tbl)
	if tbl.Next != 3 || tbl.Dropped != 1 || len(tbl.Traces) != 0 {
		t.Fatalf("void record: %+v, want next 3, dropped 1", tbl)
	}
}

// TestSendTraceConcurrent: traced sends pipelined on several connections of a SYNC_FLUSH broker
// (answers written by the loop's task for the group commit) while a reader follows the ring:
// every trace served is whole and ordered, none twice, and every traced send is either served
// or counted as dropped.
func TestSendTraceConcurrent(t *testing.T) {
	b, admin := traceBroker(t, func(c *Config) {
		c.FlushDiskType = SyncFlush
		c.TraceRingEntries = 64
	}, "C", 4)
	const conns, perConn = 4, 150
	const total = conns * perConn
	seen := map[uint64]bool{}
	var next, dropped uint64
	// follow reads the ring once from next on; it runs on the reader goroutine, then on the test's.
	follow := func() error {
		resp, err := admin.Call(context.Background(), protocol.CodeGetSendTraces, &protocol.GetSendTracesRequest{From: next}, nil)
		if err != nil {
			return err
		}
		defer resp.Release()
		var tbl protocol.SendTraceTable
		if err := tbl.ReadFrom(resp.Body); err != nil {
			return err
		}
		for _, tr := range tbl.Traces {
			if tr.ID == 0 || tr.ID > total || seen[tr.ID] {
				return fmt.Errorf("trace ID %d unknown or served twice", tr.ID)
			}
			seen[tr.ID] = true
			s := tr.Stamps
			if err := ordered(s[protocol.TraceRead], s[protocol.TraceDispatched], s[protocol.TraceAppended], s[protocol.TraceFlushed], s[protocol.TraceAnswered]); err != nil {
				return fmt.Errorf("trace %d: %w", tr.ID, err)
			}
			if tr.Topic != "C" || tr.Count != 1 || tr.QueueID != int32((tr.ID-1)/perConn) {
				return fmt.Errorf("trace %+v of another batch", tr)
			}
		}
		next, dropped = tbl.Next, dropped+tbl.Dropped
		return nil
	}
	stop := make(chan struct{})
	readerDone := make(chan error, 1)
	go func() {
		for {
			select {
			case <-stop:
				readerDone <- nil
				return
			default:
			}
			if err := follow(); err != nil {
				readerDone <- err
				return
			}
		}
	}()
	errs := make(chan error, total)
	for g := range conns {
		c := dial(t, b.Addr())
		for i := range perConn {
			id := uint64(g*perConn + i + 1)
			c.CallAsync(protocol.CodeSendMessage, &protocol.TraceHeader{ID: id}, buildBatch("C", int32(g), "m"), func(resp *rpc.Response, err error) {
				_, err = sendAnswerOffset(resp, err)
				errs <- err
			})
		}
	}
	for range total {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	close(stop)
	if err := <-readerDone; err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, "every traced send served or dropped", func() bool {
		if err := follow(); err != nil {
			t.Fatal(err)
		}
		return next == total
	})
	t.Logf("%d traces served, %d dropped", len(seen), dropped)
	if uint64(len(seen))+dropped != total {
		t.Fatalf("%d traces served, %d dropped, of %d traced sends", len(seen), dropped, total)
	}
}
