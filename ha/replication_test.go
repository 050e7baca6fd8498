package ha

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/petrel-mq/petrel/internal/testutil"
	"github.com/petrel-mq/petrel/protocol"
	"github.com/petrel-mq/petrel/protocol/rpc"
)

// appendN appends count batches of about size bytes to the master's log and notifies the master,
// as the broker does after every append.
func (p *pair) appendN(first, count, size int) int64 {
	for i := 0; i < count; i++ {
		_, end := p.mlog.Append(payload(first+i*7, size))
		p.m.NotifyAppend(end)
	}
	return p.mlog.LogEndOffset()
}

func TestReplicateManyChunks(t *testing.T) {
	for _, codec := range []Codec{CodecS2, CodecZstd, CodecNone} {
		t.Run(string(codec), func(t *testing.T) {
			mlog, slog := newMemLog(64<<10), newMemLog(64<<10)
			end := fill(mlog, 0, 400, 1000) // ~400 KB over 7 segments, before the slave starts
			var progress atomic.Int64
			p := startPair(t, mlog, slog,
				MasterConfig{Codec: codec, MaxChunkBytes: 8 << 10},
				SlaveConfig{MaxChunkBytes: 8 << 10, OnProgress: func(e, _ int64) { progress.Store(e) }})
			p.waitEqual(t, 10*time.Second)
			if progress.Load() != end {
				t.Fatalf("OnProgress saw end %d, want %d", progress.Load(), end)
			}
			// And keeps up with appends while it runs.
			end = p.appendN(1000, 300, 700)
			p.waitEqual(t, 10*time.Second)
			eventually(t, 5*time.Second, "confirmed offset", func() bool { return p.m.ConfirmedOffset() == end })

			st := p.m.Status()
			if len(st.Slaves) != 1 {
				t.Fatalf("status lists %d slaves", len(st.Slaves))
			}
			ss := st.Slaves[0]
			if ss.BrokerID != 1 || !ss.InSync || !ss.Connected || ss.AckedOffset != end || ss.LagBytes != 0 || st.InSyncReplicas != 2 {
				t.Fatalf("slave status %+v (in-sync replicas %d)", ss, st.InSyncReplicas)
			}
			if ss.RawBytes < end-mlog.LogMinOffset()-64<<10 {
				t.Fatalf("raw bytes %d for a log of %d", ss.RawBytes, end)
			}
			ratio := float64(ss.RawBytes) / float64(ss.WireBytes)
			t.Logf("codec %s: raw %d wire %d ratio %.2f", codec, ss.RawBytes, ss.WireBytes, ratio)
			switch codec {
			case CodecNone:
				if ss.WireBytes != ss.RawBytes {
					t.Fatalf("codec none: wire %d != raw %d", ss.WireBytes, ss.RawBytes)
				}
			default:
				if ratio < 2 {
					t.Fatalf("codec %s: ratio %.2f on log text", codec, ratio)
				}
			}
			if ls := p.s.Status(); !ls.Connected || ls.MasterEnd != end || ls.LogEnd != end || ls.LastContact.IsZero() || p.s.MasterEnd() != end || !p.s.Connected() {
				t.Fatalf("slave link status %+v", ls)
			}
			if sr := p.m.SlavesForRead(); len(sr) != 1 || !sr[0].InSync || sr[0].Acked != end || sr[0].BrokerID != 1 {
				t.Fatalf("SlavesForRead %+v", sr)
			}
		})
	}
}

func TestLongPoll(t *testing.T) {
	mlog, slog := newMemLog(1<<20), newMemLog(1<<20)
	fill(mlog, 0, 10, 500)
	cl := &countingLog{MasterLog: mlog}
	got := make(chan int64, 100)
	// Pulls may be held for a minute: an append that reaches the slave within the test's
	// deadline woke the held pull; the end of the wait did not answer it.
	m := startMaster(t, cl, MasterConfig{MaxWait: time.Minute})
	s := startSlave(t, slog, m.Addr(), SlaveConfig{WaitMs: 60_000, OnProgress: func(e, _ int64) { got <- e }})
	p := &pair{m: m, s: s, mlog: mlog, slog: slog}
	p.waitEqual(t, 5*time.Second)
	// The slave is caught up and its pull is held: no busy polling while nothing happens.
	eventually(t, 2*time.Second, "a held pull", func() bool {
		m.mu.Lock()
		defer m.mu.Unlock()
		s, ok := m.tr.Slave(1)
		return ok && s.Holding == 1
	})
	reads := cl.reads.Load()
	time.Sleep(300 * time.Millisecond)
	if n := cl.reads.Load() - reads; n != 0 {
		t.Fatalf("%d log reads in 300 ms of a held pull", n)
	}
	for len(got) > 0 {
		<-got
	}
	for i := 0; i < 5; i++ {
		end := p.appendN(100+i, 1, 300)
		select {
		case e := <-got:
			if e != end {
				t.Fatalf("slave at %d, want %d", e, end)
			}
		case <-time.After(20 * time.Second):
			t.Fatal("the held pull was not answered after an append")
		}
	}
	p.waitEqual(t, 5*time.Second)
}

// TestLongPollTimeoutAnswersEmpty: a pull with nothing to read is held for its wait, capped by
// MaxWait, then answered empty; one that asks for no wait is answered at once. (pull gives up
// after 10 s: a pull held for its minute-long WaitMs, or for the hour of MaxWait, fails it.)
func TestLongPollTimeoutAnswersEmpty(t *testing.T) {
	mlog := newMemLog(1 << 20)
	fill(mlog, 0, 3, 100)
	end := mlog.LogEndOffset()
	m := startMaster(t, mlog, MasterConfig{MaxWait: 50 * time.Millisecond})
	c := dialMaster(t, m)
	start := time.Now()
	h := pull(t, c, protocol.HAPullRequest{BrokerName: "broker-a", SlaveID: 7, Offset: end, WaitMs: 60_000})
	if d := time.Since(start); d < 50*time.Millisecond {
		t.Fatalf("answered after %v, before MaxWait (50ms) was over", d)
	}
	if h.Result != protocol.HAOK || h.RawLength != 0 || h.Offset != end || h.MasterEnd != end {
		t.Fatalf("answer %+v", h)
	}
	// WaitMs 0 answers at once, however long the master could hold it.
	patient := startMaster(t, mlog, MasterConfig{MaxWait: time.Hour})
	h = pull(t, dialMaster(t, patient), protocol.HAPullRequest{BrokerName: "broker-a", SlaveID: 7, Offset: end})
	if h.Result != protocol.HAOK || h.RawLength != 0 || h.Offset != end {
		t.Fatalf("answer to a pull with WaitMs 0: %+v", h)
	}
}

func TestSegmentJump(t *testing.T) {
	mlog, slog := newMemLog(4<<10), newMemLog(4<<10)
	// 1500-byte batches: two per 4 KiB segment, each segment ends with a marker.
	fill(mlog, 0, 9, 1500-memHeader)
	if len(mlog.markers) < 3 {
		t.Fatalf("test log has %d markers", len(mlog.markers))
	}
	p := startPair(t, mlog, slog, MasterConfig{MaxChunkBytes: 100 << 10}, SlaveConfig{})
	p.waitEqual(t, 5*time.Second)
	// The slave stops exactly at a marker; the next append goes to a new segment.
	p.appendN(50, 1, 1500-memHeader)
	p.appendN(51, 2, 1500-memHeader)
	p.waitEqual(t, 5*time.Second)
	if len(slog.markers) != len(mlog.markers) {
		t.Fatalf("markers: slave %d, master %d", len(slog.markers), len(mlog.markers))
	}
}

func TestSlaveAheadResyncs(t *testing.T) {
	mlog, slog := newMemLog(64<<10), newMemLog(64<<10)
	fill(mlog, 0, 20, 500)
	fill(slog, 0, 20, 500)
	fill(slog, 100, 5, 500) // the slave has more than the master
	before := slices.Clone(slog.data)
	p := startPair(t, mlog, slog, MasterConfig{}, SlaveConfig{})
	p.waitEqual(t, 5*time.Second)
	if st := p.s.Status(); st.Resyncs != 1 {
		t.Fatalf("resyncs %d", st.Resyncs)
	}
	// The diverged log (maybe the only copy of messages the master lost) was set aside whole.
	slog.mu.Lock()
	kept := slog.kept
	slog.mu.Unlock()
	if len(kept) != 1 || !bytes.Equal(kept[0], before) {
		t.Fatalf("diverged log not kept: %d logs kept", len(kept))
	}
	p.appendN(200, 10, 500)
	p.waitEqual(t, 5*time.Second)
}

func TestSlaveDivergedResyncs(t *testing.T) {
	mlog, slog := newMemLog(64<<10), newMemLog(64<<10)
	fill(mlog, 0, 20, 500)
	fill(slog, 0, 3, 777) // ends inside a master batch
	p := startPair(t, mlog, slog, MasterConfig{}, SlaveConfig{})
	p.waitEqual(t, 5*time.Second)
	if st := p.s.Status(); st.Resyncs != 1 {
		t.Fatalf("resyncs %d", st.Resyncs)
	}
}

func TestSlaveBelowMinResyncs(t *testing.T) {
	mlog, slog := newMemLog(4<<10), newMemLog(4<<10)
	fill(mlog, 0, 20, 1000)
	fill(slog, 0, 2, 1000) // the slave replicated the first two batches once
	mlog.TrimTo(3 * 4 << 10)
	p := startPair(t, mlog, slog, MasterConfig{}, SlaveConfig{})
	p.waitEqual(t, 5*time.Second)
	if slog.LogMinOffset() != 3*4<<10 || p.s.Status().Resyncs != 1 {
		t.Fatalf("slave min %d, resyncs %d", slog.LogMinOffset(), p.s.Status().Resyncs)
	}
}

func TestFreshSlaveAfterRetention(t *testing.T) {
	mlog, slog := newMemLog(4<<10), newMemLog(4<<10)
	fill(mlog, 0, 20, 1000)
	mlog.TrimTo(2 * 4 << 10)
	p := startPair(t, mlog, slog, MasterConfig{}, SlaveConfig{})
	p.waitEqual(t, 5*time.Second)
}

// dialMaster opens a raw replication connection, for tests that play a slave by hand.
func dialMaster(t *testing.T, m *Master) *rpc.Conn {
	t.Helper()
	c, err := rpc.Dial(context.Background(), m.Addr(), rpc.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

func pull(t *testing.T, c *rpc.Conn, req protocol.HAPullRequest) protocol.HAPullResponse {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var h protocol.HAPullResponse
	if err := c.CallDecode(ctx, protocol.CodeHAPull, &req, nil, &h, nil); err != nil {
		t.Fatal(err)
	}
	return h
}

func ackedOf(m *Master, id int64) int64 {
	for _, s := range m.Status().Slaves {
		if s.BrokerID == id {
			return s.AckedOffset
		}
	}
	return -2
}

func TestOutOfRangeAcknowledgesNothing(t *testing.T) {
	mlog := newMemLog(64 << 10)
	fill(mlog, 0, 10, 100)
	m := startMaster(t, mlog, MasterConfig{})
	c := dialMaster(t, m)
	req := protocol.HAPullRequest{BrokerName: "broker-a", SlaveID: 3, Offset: 2 * (100 + memHeader), MaxBytes: 1}
	h := pull(t, c, req)
	if h.Result != protocol.HAOK || h.Offset != req.Offset || h.RawLength != 100+memHeader {
		t.Fatalf("answer %+v", h)
	}
	if a := ackedOf(m, 3); a != req.Offset {
		t.Fatalf("acked %d, want %d", a, req.Offset)
	}
	end := mlog.LogEndOffset()
	for _, bad := range []int64{end + 1, end + 1000, req.Offset + 5} {
		h := pull(t, c, protocol.HAPullRequest{BrokerName: "broker-a", SlaveID: 3, Offset: bad})
		if h.Result != protocol.HAOutOfRange || h.MasterEnd != end || h.MasterMin != 0 || h.RawLength != 0 {
			t.Fatalf("pull from %d: %+v", bad, h)
		}
		if a := ackedOf(m, 3); a != req.Offset {
			t.Fatalf("pull from %d moved acked to %d", bad, a)
		}
	}
	// A new slave whose first pull is out of range has acknowledged nothing (-1) and is not in
	// sync, so it holds no waiter back, and its waiters' set stays empty.
	c2 := dialMaster(t, m)
	pull(t, c2, protocol.HAPullRequest{BrokerName: "broker-a", SlaveID: 4, Offset: end + 8})
	if a := ackedOf(m, 4); a != -1 {
		t.Fatalf("slave 4 acked %d", a)
	}
	// Slave 3 acked a position behind the end and joined? It lags (ReadEnd = end): not in sync.
	if n := m.InSyncCount(); n != 0 {
		t.Fatalf("in-sync count %d", n)
	}
	// The lower offset of a valid pull is recorded (the slave's log is the truth).
	pull(t, c, protocol.HAPullRequest{BrokerName: "broker-a", SlaveID: 3, Offset: 0, MaxBytes: 1})
	if a := ackedOf(m, 3); a != 0 {
		t.Fatalf("acked %d after a pull from 0", a)
	}
	// A malformed request gets an error status.
	_, err := c.Call(context.Background(), protocol.CodeHAPull, &protocol.HAPullRequest{BrokerName: "broker-a", SlaveID: 0}, nil)
	if !errors.Is(err, protocol.StatusRequestMalformed) {
		t.Fatalf("slave id 0: %v", err)
	}
	// Another slave id on the same connection is refused.
	_, err = c.Call(context.Background(), protocol.CodeHAPull, &protocol.HAPullRequest{BrokerName: "broker-a", SlaveID: 9}, nil)
	if !errors.Is(err, protocol.StatusRequestMalformed) {
		t.Fatalf("slave id change: %v", err)
	}
}

func TestFenced(t *testing.T) {
	mlog := newMemLog(64 << 10)
	fill(mlog, 0, 3, 100)
	m := startMaster(t, mlog, MasterConfig{Epoch: func() uint32 { return 5 }})
	c := dialMaster(t, m)
	for _, req := range []protocol.HAPullRequest{
		{BrokerName: "broker-b", SlaveID: 1},
		{BrokerName: "broker-a", SlaveID: 1, Epoch: 6},
	} {
		h := pull(t, c, req)
		if h.Result != protocol.HAFenced || h.Epoch != 5 {
			t.Fatalf("%+v: %+v", req, h)
		}
	}
	// A fenced pull binds no slave record: slave 1 is not even listed (-2).
	if a := ackedOf(m, 1); a != -2 {
		t.Fatalf("fenced pull left slave 1 with acknowledged offset %d", a)
	}
	h := pull(t, c, protocol.HAPullRequest{BrokerName: "broker-a", SlaveID: 1, Epoch: 4})
	if h.Result != protocol.HAOK || h.Epoch != 5 || m.Epoch() != 5 {
		t.Fatalf("older epoch: %+v", h)
	}

	// A slave of another group keeps backing off and never writes.
	slog := newMemLog(64 << 10)
	s := startSlave(t, slog, m.Addr(), SlaveConfig{BrokerName: "broker-b"})
	time.Sleep(100 * time.Millisecond)
	if slog.LogEndOffset() != 0 || s.Status().LastContact.IsZero() {
		t.Fatalf("fenced slave: end %d, status %+v", slog.LogEndOffset(), s.Status())
	}
}

func TestSlaveWaitsForMasterAddress(t *testing.T) {
	mlog, slog := newMemLog(64<<10), newMemLog(64<<10)
	fill(mlog, 0, 10, 100)
	m := startMaster(t, mlog, MasterConfig{})
	var addr atomic.Value
	addr.Store("")
	s := startSlave(t, slog, "", SlaveConfig{WaitMs: 100, MasterHAAddr: func() string { return addr.Load().(string) }})
	time.Sleep(50 * time.Millisecond)
	if s.Connected() || slog.LogEndOffset() != 0 {
		t.Fatal("slave replicated without an address")
	}
	addr.Store(m.Addr())
	p := &pair{m: m, s: s, mlog: mlog, slog: slog}
	p.waitEqual(t, 5*time.Second)

	// The master moves: the slave follows the new address.
	mlog2 := newMemLog(64 << 10)
	fill(mlog2, 0, 10, 100)
	fill(mlog2, 50, 10, 100)
	m2 := startMaster(t, mlog2, MasterConfig{})
	addr.Store(m2.Addr())
	p2 := &pair{m: m2, s: s, mlog: mlog2, slog: slog}
	// The first 10 batches are the same bytes, so the slave continues where it was.
	p2.waitEqual(t, 10*time.Second)
	if st := s.Status(); st.MasterHAAddr != m2.Addr() || st.Resyncs != 0 {
		t.Fatalf("status %+v", st)
	}
}

// TestBadAppendReconnects: a chunk the slave's log rejects drops the link; nothing bad is
// written, and the slave reconnects and catches up.
func TestBadAppendReconnects(t *testing.T) {
	mlog, slog := newMemLog(64<<10), newMemLog(64<<10)
	fill(mlog, 0, 50, 300)
	var failed atomic.Int32
	rl := &rejectingLog{memLog: slog, reject: func() bool { return failed.Add(1) <= 2 }}
	m := startMaster(t, mlog, MasterConfig{MaxChunkBytes: 2 << 10})
	s := NewSlave(SlaveConfig{BrokerName: "broker-a", SlaveID: 1, Log: rl, MasterHAAddr: m.Addr,
		Backoff: 5 * time.Millisecond, Logger: testLogger(t), MaxChunkBytes: 2 << 10})
	if err := s.Start(); err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	p := &pair{m: m, s: s, mlog: mlog, slog: slog}
	p.waitEqual(t, 5*time.Second)
	if failed.Load() < 3 {
		t.Fatalf("appends %d", failed.Load())
	}
}

type rejectingLog struct {
	*memLog
	reject func() bool
}

func (r *rejectingLog) AppendReplicated(start int64, data []byte) (int64, error) {
	if r.reject() {
		return r.LogEndOffset(), errors.New("injected CRC mismatch")
	}
	return r.memLog.AppendReplicated(start, data)
}

func TestWaitReplicated(t *testing.T) {
	mlog, slog := newMemLog(64<<10), newMemLog(64<<10)
	fill(mlog, 0, 5, 100)
	gate := newGate()
	slog.appendHook = gate.pass
	p := startPair(t, mlog, slog, MasterConfig{InSyncMaxLagTime: time.Hour}, SlaveConfig{})
	t.Cleanup(gate.open) // runs before the pair's cleanup: a failed test must not leave the slave frozen
	p.waitEqual(t, 5*time.Second)
	eventually(t, 2*time.Second, "slave in sync", func() bool { return p.m.InSyncCount() == 1 })

	// Completes when the in-sync slave acknowledges.
	var wg sync.WaitGroup
	results := make(chan error, 20)
	for i := 0; i < 10; i++ {
		end := p.appendN(10+i, 1, 100)
		wg.Add(1)
		p.m.WaitReplicated(end, 1, 5*time.Second, func(err error) { results <- err; wg.Done() })
	}
	wg.Wait()
	for i := 0; i < 10; i++ {
		if err := <-results; err != nil {
			t.Fatal(err)
		}
	}
	// An offset already acknowledged completes at once, on a master goroutine.
	done := make(chan error, 1)
	p.m.WaitReplicated(p.mlog.LogEndOffset(), 1, time.Second, func(err error) { done <- err })
	if err := waitErr(t, done, time.Second); err != nil {
		t.Fatal(err)
	}

	// The slave freezes in AppendReplicated: waiters time out.
	gate.close()
	end := p.appendN(30, 1, 100)
	start := time.Now()
	p.m.WaitReplicated(end, 1, 100*time.Millisecond, func(err error) { done <- err })
	if err := waitErr(t, done, 10*time.Second); !errors.Is(err, ErrReplicationTimeout) {
		t.Fatalf("frozen slave: %v", err)
	}
	if d := time.Since(start); d < 100*time.Millisecond {
		t.Fatalf("timed out after %v, before its 100ms", d)
	}
	// Many waiters with mixed timeouts all end with a timeout.
	for i := 0; i < 50; i++ {
		wg.Add(1)
		p.m.WaitReplicated(end+int64(i), 1, time.Duration(10+rand.IntN(50))*time.Millisecond, func(err error) {
			if !errors.Is(err, ErrReplicationTimeout) {
				t.Errorf("waiter: %v", err)
			}
			wg.Done()
		})
	}
	wg.Wait()
	if n := p.m.waiters.len(); n != 0 {
		t.Fatalf("%d waiters left", n)
	}
	// A waiter pending when the slave thaws completes.
	p.m.WaitReplicated(end, 1, 5*time.Second, func(err error) { done <- err })
	gate.open()
	if err := waitErr(t, done, 5*time.Second); err != nil {
		t.Fatal(err)
	}
}

func TestWaitReplicatedEmptySet(t *testing.T) {
	mlog := newMemLog(64 << 10)
	end := fill(mlog, 0, 5, 100)
	m := startMaster(t, mlog, MasterConfig{})
	done := make(chan error, 1)
	m.WaitReplicated(end+1000, 0, time.Hour, func(err error) { done <- err })
	if err := waitErr(t, done, time.Second); err != nil {
		t.Fatal(err)
	}
	if m.ConfirmedOffset() != end || m.InSyncCount() != 0 || m.ConnectedSlaves() != 0 {
		t.Fatalf("confirmed %d in-sync %d connected %d", m.ConfirmedOffset(), m.InSyncCount(), m.ConnectedSlaves())
	}
}

func TestMasterCloseAnswersWaiters(t *testing.T) {
	mlog, slog := newMemLog(64<<10), newMemLog(64<<10)
	fill(mlog, 0, 5, 100)
	gate := newGate()
	slog.appendHook = gate.pass
	p := startPair(t, mlog, slog, MasterConfig{InSyncMaxLagTime: time.Hour}, SlaveConfig{})
	t.Cleanup(gate.open) // runs before the pair's cleanup: a failed test must not leave the slave frozen
	p.waitEqual(t, 5*time.Second)
	eventually(t, 2*time.Second, "slave in sync", func() bool { return p.m.InSyncCount() == 1 })
	// The slave freezes with a batch it cannot acknowledge: a waiter for it stays pending.
	gate.close()
	end := p.appendN(9, 1, 100)
	done := make(chan error, 1)
	p.m.WaitReplicated(end, 1, time.Hour, func(err error) { done <- err })
	// A second, raw slave whose pull is held at the end (after the append, which would wake it).
	c := dialMaster(t, p.m)
	held := make(chan error, 1)
	go func() {
		_, err := c.Call(context.Background(), protocol.CodeHAPull,
			&protocol.HAPullRequest{BrokerName: "broker-a", SlaveID: 2, Offset: end, WaitMs: 60_000}, nil)
		held <- err
	}()
	eventually(t, 2*time.Second, "held pull", func() bool {
		for _, s := range p.m.Status().Slaves {
			if s.BrokerID == 2 && s.Connected && s.AckedOffset == end {
				return true
			}
		}
		return false
	})
	closed := make(chan error, 1)
	go func() { closed <- p.m.Close() }()
	if err := waitErr(t, closed, 10*time.Second); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if err := waitErr(t, done, time.Second); !errors.Is(err, ErrClosed) {
		t.Fatalf("waiter after Close: %v", err)
	}
	if err := waitErr(t, held, 5*time.Second); err == nil {
		t.Fatal("held pull answered OK after Close")
	}
	// After Close, WaitReplicated answers at once.
	p.m.WaitReplicated(end, 1, time.Hour, func(err error) { done <- err })
	if err := <-done; !errors.Is(err, ErrClosed) {
		t.Fatal(err)
	}
	gate.open()
}

func TestInSyncLeaveAndRejoin(t *testing.T) {
	mlog, slog := newMemLog(64<<10), newMemLog(64<<10)
	fill(mlog, 0, 5, 100)
	gate := newGate()
	slog.appendHook = gate.pass
	const lagTime = 300 * time.Millisecond
	p := startPair(t, mlog, slog, MasterConfig{InSyncMaxLagTime: lagTime, InSyncMaxLagBytes: 1000}, SlaveConfig{})
	t.Cleanup(gate.open) // runs before the pair's cleanup: a failed test must not leave the slave frozen
	p.waitEqual(t, 5*time.Second)
	eventually(t, 2*time.Second, "slave in sync", func() bool { return p.m.InSyncCount() == 1 })
	// A caught-up slave whose pull is held for longer than the lag time stays in the set.
	time.Sleep(2 * lagTime)
	if p.m.InSyncCount() != 1 {
		t.Fatal("an idle caught-up slave left the set")
	}

	// The slave stops pulling (frozen in AppendReplicated) while the master writes on.
	gate.close()
	stopped := time.Now()
	for i := 0; i < 30; i++ {
		p.appendN(100+i, 1, 200)
	}
	needsSlave := make(chan error, 1)
	p.m.WaitReplicated(p.mlog.LogEndOffset(), 1, 3*lagTime, func(err error) { needsSlave <- err })
	eventually(t, 5*time.Second, "slave leaves the set", func() bool { return p.m.InSyncCount() == 0 })
	// The set emptied during the wait: a send that needs one slave must not succeed.
	if err := waitErr(t, needsSlave, 5*time.Second); !errors.Is(err, ErrReplicationTimeout) {
		t.Fatalf("waiter needing a slave after the set emptied: %v", err)
	}
	if d := time.Since(stopped); d < lagTime-50*time.Millisecond {
		t.Fatalf("left after %v, lag time %v", d, lagTime)
	}
	if p.m.ConfirmedOffset() != p.mlog.LogEndOffset() {
		t.Fatal("with no slave in sync, the confirmed offset is the log end")
	}
	if sr := p.m.SlavesForRead(); sr[0].InSync {
		t.Fatal("SlavesForRead still says in sync")
	}
	st := p.m.Status().Slaves[0]
	if st.InSync || st.LagBytes == 0 || st.LagMs < int64(lagTime/time.Millisecond)-50 {
		t.Fatalf("status of a stopped slave: %+v", st)
	}
	// With an empty set, waiters complete at once.
	done := make(chan error, 1)
	p.m.WaitReplicated(p.mlog.LogEndOffset(), 0, time.Hour, func(err error) { done <- err })
	if err := waitErr(t, done, time.Second); err != nil {
		t.Fatal(err)
	}
	// ... but not one that needs a slave, even for an offset the slave once acknowledged.
	p.m.WaitReplicated(1, 1, 100*time.Millisecond, func(err error) { done <- err })
	if err := waitErr(t, done, 5*time.Second); !errors.Is(err, ErrReplicationTimeout) {
		t.Fatalf("waiter needing a slave with an empty set: %v", err)
	}

	gate.open()
	p.waitEqual(t, 5*time.Second)
	eventually(t, 2*time.Second, "slave rejoins", func() bool { return p.m.InSyncCount() == 1 })
	if p.m.ConfirmedOffset() != p.mlog.LogEndOffset() {
		t.Fatal("confirmed offset after rejoining")
	}
	p.m.WaitReplicated(p.mlog.LogEndOffset(), 1, 5*time.Second, func(err error) { done <- err })
	if err := waitErr(t, done, 6*time.Second); err != nil {
		t.Fatalf("waiter after rejoining: %v", err)
	}
}

// TestRejoinUnderLoad: with InSyncRejoinLagBytes 0 a slave rejoins while the master writes
// continuously (the lag is judged against the master's end at its last answer).
func TestRejoinUnderLoad(t *testing.T) {
	mlog, slog := newMemLog(1<<20), newMemLog(1<<20)
	p := startPair(t, mlog, slog, MasterConfig{InSyncMaxLagTime: 200 * time.Millisecond, InSyncMaxLagBytes: 1}, SlaveConfig{})
	// The load goes on until the test stops it (also when it fails), so the slave joins and
	// stays while writes go on.
	stop := make(chan struct{})
	var appended atomic.Int64
	var wg sync.WaitGroup
	halt := sync.OnceFunc(func() { close(stop); wg.Wait() })
	t.Cleanup(halt) // before the pair's cleanup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			p.appendN(i, 1, 200)
			appended.Add(1)
			time.Sleep(20 * time.Microsecond)
		}
	}()
	eventually(t, 10*time.Second, "writes under way", func() bool { return appended.Load() > 0 })
	eventually(t, 10*time.Second, "slave in sync under load", func() bool { return p.m.InSyncCount() == 1 })
	// And it stays in while the load goes on: more batches are written after it joined.
	joined := appended.Load()
	time.Sleep(500 * time.Millisecond)
	eventually(t, 10*time.Second, "more writes after the join", func() bool { return appended.Load() > joined })
	if p.m.InSyncCount() != 1 {
		t.Fatal("the slave left the set under load")
	}
	halt()
	p.waitEqual(t, 5*time.Second)
}

func TestTwoSlaves(t *testing.T) {
	mlog, s1, s2 := newMemLog(16<<10), newMemLog(16<<10), newMemLog(16<<10)
	fill(mlog, 0, 50, 500)
	m := startMaster(t, mlog, MasterConfig{Codec: CodecZstd})
	startSlave(t, s1, m.Addr(), SlaveConfig{SlaveID: 1})
	startSlave(t, s2, m.Addr(), SlaveConfig{SlaveID: 2})
	for i := 0; i < 100; i++ {
		_, end := mlog.Append(payload(i, 300))
		m.NotifyAppend(end)
	}
	for _, sl := range []*memLog{s1, s2} {
		(&pair{mlog: mlog, slog: sl}).waitEqual(t, 5*time.Second)
	}
	eventually(t, 2*time.Second, "both in sync", func() bool { return m.InSyncCount() == 2 && m.ConnectedSlaves() == 2 })
	sr := m.SlavesForRead()
	if len(sr) != 2 || sr[0].BrokerID != 1 || sr[1].BrokerID != 2 {
		t.Fatalf("%+v", sr)
	}
	if got := SuggestReadBroker(SuggestInput{SlaveReadEnable: true, Loaded: true, LogEnd: mlog.LogEndOffset(), NextPhys: 0, Slaves: sr}); got != 1 {
		t.Fatalf("suggested %d", got)
	}
}

func waitErr(t *testing.T, ch <-chan error, d time.Duration) error {
	t.Helper()
	select {
	case err := <-ch:
		return err
	case <-time.After(d):
		t.Fatalf("no result within %v", d)
		return nil
	}
}

// gate blocks pass while closed.
type gate struct {
	mu sync.Mutex
	ch chan struct{} // nil when open
}

func newGate() *gate { return &gate{} }

func (g *gate) close() {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.ch == nil {
		g.ch = make(chan struct{})
	}
}

func (g *gate) open() {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.ch != nil {
		close(g.ch)
		g.ch = nil
	}
}

func (g *gate) pass() {
	g.mu.Lock()
	ch := g.ch
	g.mu.Unlock()
	if ch != nil {
		<-ch
	}
}

var _ = fmt.Sprintf

// TestDuplicateSlaveID: a second slave started with the same brokerId takes the record over and
// the first one's connection is closed; once the duplicate is gone, the real slave reconnects and
// counts again (connected, in sync, acknowledging).
func TestDuplicateSlaveID(t *testing.T) {
	mlog, real, dup := newMemLog(64<<10), newMemLog(64<<10), newMemLog(64<<10)
	fill(mlog, 0, 20, 300)
	m := startMaster(t, mlog, MasterConfig{InSyncMaxLagTime: 300 * time.Millisecond})
	startSlave(t, real, m.Addr(), SlaveConfig{SlaveID: 1, Backoff: 10 * time.Millisecond, MaxBackoff: 50 * time.Millisecond})
	(&pair{mlog: mlog, slog: real}).waitEqual(t, 5*time.Second)
	eventually(t, 2*time.Second, "real slave in sync", func() bool { return m.InSyncCount() == 1 })

	d := startSlave(t, dup, m.Addr(), SlaveConfig{SlaveID: 1, Backoff: 10 * time.Millisecond, MaxBackoff: 50 * time.Millisecond})
	(&pair{mlog: mlog, slog: dup}).waitEqual(t, 5*time.Second)
	if err := d.Close(); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 20; i++ {
		_, end := mlog.Append(payload(1000+i, 300))
		m.NotifyAppend(end)
	}
	(&pair{mlog: mlog, slog: real}).waitEqual(t, 5*time.Second)
	eventually(t, 5*time.Second, "the real slave connected and in sync again", func() bool {
		st := m.Status()
		return m.ConnectedSlaves() == 1 && m.InSyncCount() == 1 && len(st.Slaves) == 1 &&
			st.Slaves[0].AckedOffset == mlog.LogEndOffset()
	})
}

// TestSlaveRefusesOlderEpoch: once a slave has followed a master of epoch 5, a master of epoch 3
// (a deposed one) feeds it nothing: the slave's requests carry epoch 5, which that master fences,
// and an answer of an older epoch would be refused by the slave too (both sides check).
func TestSlaveRefusesOlderEpoch(t *testing.T) {
	newer, older, slog := newMemLog(64<<10), newMemLog(64<<10), newMemLog(64<<10)
	fill(newer, 0, 10, 300)
	fill(older, 0, 10, 300)
	fill(older, 50, 10, 300) // the deposed master wrote on alone
	mNew := startMaster(t, newer, MasterConfig{Epoch: func() uint32 { return 5 }})
	mOld := startMaster(t, older, MasterConfig{Epoch: func() uint32 { return 3 }})
	var addr atomic.Pointer[string]
	a := mNew.Addr()
	addr.Store(&a)
	s := startSlave(t, slog, "", SlaveConfig{MasterHAAddr: func() string { return *addr.Load() }, WaitMs: 50,
		Backoff: 10 * time.Millisecond, MaxBackoff: 20 * time.Millisecond})
	(&pair{mlog: newer, slog: slog}).waitEqual(t, 5*time.Second)
	end := slog.LogEndOffset()
	b := mOld.Addr()
	addr.Store(&b)
	eventually(t, 5*time.Second, "the slave talks to the deposed master", func() bool {
		return s.Status().MasterHAAddr == b && !s.Status().LastContact.IsZero()
	})
	time.Sleep(200 * time.Millisecond) // several refused answers
	if got := slog.LogEndOffset(); got != end {
		t.Fatalf("a master of an older epoch fed the slave: end %d -> %d", end, got)
	}
	if st := s.Status(); st.Epoch != 5 || st.Resyncs != 0 {
		t.Fatalf("status %+v", st)
	}
}

// TestSlaveFloodForgotten: connections that each name a new brokerId, pull once and go leave a
// bounded slave table: at most DefaultMaxDisconnected of them are kept, and those too are
// forgotten DefaultForgetAfter after they went, while a known member's record stays. A member id
// the group does not have is refused before anything of it is recorded.
func TestSlaveFloodForgotten(t *testing.T) {
	mlog := newMemLog(64 << 10)
	end := fill(mlog, 0, 5, 100)
	clock := testutil.NewClock()
	m := startMaster(t, mlog, MasterConfig{
		Now:        clock.Now,
		MemberOf:   func(id string) bool { return id != "intruder" },
		KnownSlave: func(brokerID int64, memberID string) bool { return brokerID == 1 && memberID == "a1" },
	})
	pullOnce := func(id int64, member string) error {
		c, err := rpc.Dial(context.Background(), m.Addr(), rpc.Options{})
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		resp, err := c.Call(context.Background(), protocol.CodeHAPull,
			&protocol.HAPullRequest{BrokerName: "broker-a", SlaveID: id, MemberID: member, Offset: end, MaxBytes: 1 << 16}, nil)
		if err == nil {
			resp.Release()
		}
		return err
	}
	if err := pullOnce(1, "a1"); err != nil {
		t.Fatal(err)
	}
	if err := pullOnce(2, "intruder"); err == nil {
		t.Fatal("a pull naming a member the group does not have was served")
	}
	const flood = 300
	for i := 0; i < flood; i++ {
		if err := pullOnce(int64(100+i), "x"); err != nil {
			t.Fatal(err)
		}
	}
	eventually(t, 10*time.Second, "every connection seen closed", func() bool { return m.ConnectedSlaves() == 0 })
	ids := func() []int64 {
		var out []int64
		for _, s := range m.Status().Slaves {
			out = append(out, s.BrokerID)
		}
		return out
	}
	if got := ids(); len(got) > DefaultMaxDisconnected+1 || !slices.Contains(got, 1) || slices.Contains(got, 2) {
		t.Fatalf("after %d slaves that pulled once and went the table lists %d slaves (want at most %d, slave 1 among them, slave 2 not): %v",
			flood, len(got), DefaultMaxDisconnected+1, got)
	}
	clock.Advance(DefaultForgetAfter)
	eventually(t, 10*time.Second, "only the known slave left", func() bool { return slices.Equal(ids(), []int64{1}) })
}

// TestKickEndsTheDial: a slave dialling a master that was cut off (the dial lasts its whole
// timeout, here an hour) is told of a new master and kicked: it stops dialling the old one and
// connects to the new one at once, where it used to finish the dial first.
func TestKickEndsTheDial(t *testing.T) {
	mlog, slaveLog := newMemLog(1<<20), newMemLog(1<<20)
	fill(mlog, 0, 10, 100)
	m := startMaster(t, mlog, MasterConfig{})
	// The old master is cut off: its SYNs are dropped, so a dial of it lasts until its context
	// ends (the kernel retransmits until the timeout).
	const old = "10.213.255.1:10912"
	dialling := make(chan struct{}, 1)
	cutOff := func(ctx context.Context, addr string, opts rpc.Options) (*rpc.Conn, error) {
		if addr == old {
			dialling <- struct{}{}
			<-ctx.Done()
			return nil, fmt.Errorf("cannot connect to %s: %w", addr, ctx.Err())
		}
		return rpc.Dial(ctx, addr, opts)
	}
	var target atomic.Pointer[string]
	target.Store(new(old))
	s := startSlave(t, slaveLog, "", SlaveConfig{
		DialTimeout:  time.Hour,
		MasterHAAddr: func() string { return *target.Load() },
		dial:         cutOff,
	})
	<-dialling
	newAddr := m.Addr()
	target.Store(&newAddr)
	s.Kick()
	testutil.Eventually(t, "the kicked slave to connect to the new master", s.Connected)
	p := &pair{m: m, s: s, mlog: mlog, slog: slaveLog}
	p.waitEqual(t, 10*time.Second)
}
