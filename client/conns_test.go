package client

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/petrel-mq/petrel/internal/fakebroker"
	"github.com/petrel-mq/petrel/internal/testutil"
	"github.com/petrel-mq/petrel/protocol"
	"github.com/petrel-mq/petrel/protocol/rpc"
)

// lockedBuffer collects log output written from many goroutines.
type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

func (b *lockedBuffer) count(sub string) int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return strings.Count(b.buf.String(), sub)
}

// rawBroker is a raw TCP server speaking just enough of the protocol to answer every request
// with an empty success. A connection accepted while answering is false is never answered nor
// closed (its requests are read and dropped): a hung server, or a connection left to a listener
// that is going away. Pulls, and requests whose ConsumerOffsetHeader names queue 1, are held
// (answered by releaseHeld, if ever) while the connection goes on answering the requests behind
// them, as a broker holds a long poll or a SYNC_MASTER's send; each arrival is signalled on
// held. probes counts the liveness probes received.
type rawBroker struct {
	ln        net.Listener
	answering atomic.Bool
	accepted  atomic.Int32
	probes    atomic.Int32
	held      chan struct{}

	mu      sync.Mutex // guards conns, holding
	conns   []net.Conn
	holding []heldRequest
	wg      sync.WaitGroup
}

// rawConn is a connection of a rawBroker; wmu serialises its writes.
type rawConn struct {
	nc  net.Conn
	wmu sync.Mutex
}

func (rc *rawConn) answer(id uint32) error {
	out := protocol.AppendFrame(nil, uint16(protocol.StatusSuccess), protocol.FlagResponse, id, nil, nil)
	rc.wmu.Lock()
	defer rc.wmu.Unlock()
	_, err := rc.nc.Write(out)
	return err
}

type heldRequest struct {
	rc *rawConn
	id uint32
}

func startRawBroker(t *testing.T) *rawBroker {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	rb := &rawBroker{ln: ln, held: make(chan struct{}, 16)}
	rb.wg.Go(func() {
		for {
			nc, err := ln.Accept()
			if err != nil {
				return
			}
			rb.accepted.Add(1)
			rb.mu.Lock()
			rb.conns = append(rb.conns, nc)
			rb.mu.Unlock()
			answer := rb.answering.Load()
			rb.wg.Go(func() { rb.serve(&rawConn{nc: nc}, answer) })
		}
	})
	t.Cleanup(func() {
		_ = ln.Close()
		rb.mu.Lock()
		for _, nc := range rb.conns {
			_ = nc.Close()
		}
		rb.mu.Unlock()
		rb.wg.Wait()
	})
	return rb
}

func (rb *rawBroker) addr() string { return rb.ln.Addr().String() }

// releaseHeld answers every request held so far.
func (rb *rawBroker) releaseHeld() {
	rb.mu.Lock()
	held := rb.holding
	rb.holding = nil
	rb.mu.Unlock()
	for _, h := range held {
		_ = h.rc.answer(h.id)
	}
}

func (rb *rawBroker) serve(rc *rawConn, answer bool) {
	br := bufio.NewReader(rc.nc)
	var prefix [protocol.FramePrefixSize]byte
	for {
		if _, err := io.ReadFull(br, prefix[:]); err != nil {
			return
		}
		fh, err := protocol.ParseFrameHeader(prefix[:], protocol.DefaultMaxFrameSize)
		if err != nil {
			return
		}
		rest := make([]byte, fh.TotalSize()-protocol.FramePrefixSize)
		if _, err := io.ReadFull(br, rest); err != nil {
			return
		}
		code := protocol.RequestCode(fh.Code)
		if code == protocol.CodeGetConsumerListByGroup {
			rb.probes.Add(1)
		}
		if !answer {
			continue
		}
		var h protocol.ConsumerOffsetHeader
		if code == protocol.CodePullMessage || code == protocol.CodeUpdateConsumerOffset && h.ReadFrom(rest[:fh.HeaderLength]) == nil && h.QueueID == 1 {
			rb.mu.Lock()
			rb.holding = append(rb.holding, heldRequest{rc, fh.RequestID})
			rb.mu.Unlock()
			rb.held <- struct{}{}
			continue
		}
		if err := rc.answer(fh.RequestID); err != nil {
			return
		}
	}
}

const silentWarning = "closing a connection that received nothing"

// TestSilentConnectionIsReplaced: with the liveness probes off, a request that times out by
// its own timeout on a connection that received nothing since it was sent closes that
// connection (one warning), so the next request dials a new one instead of timing out forever
// on the dead one. A request whose caller gives up (its context cancelled, or its deadline
// passing before the request timeout) closes nothing, nor does the end of a long-polling pull's
// context, and a long context does not lift the request timeout.
func TestSilentConnectionIsReplaced(t *testing.T) {
	rb := startRawBroker(t)
	var logs lockedBuffer
	c := newTestClient(t, "127.0.0.1:1", WithRequestTimeout(300*time.Millisecond), WithLivenessProbe(0, 0),
		WithLogger(slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelWarn}))))
	admin := NewAdmin(c)
	ctx := testCtx(t, time.Minute)

	// Cancelled, not timed out: the connection stays.
	conn, err := c.pool.get(ctx, rb.addr())
	if err != nil {
		t.Fatal(err)
	}
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if _, state, err := c.pool.startCall(conn, protocol.CodeUpdateConsumerOffset, &protocol.ConsumerOffsetHeader{ConsumerGroup: "G", Topic: "T"}, nil).wait(cctx, time.Time{}); state != callAbandoned || !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled call: state %d, err %v", state, err)
	}
	if !isOpen(conn) {
		t.Fatal("a cancelled call closed the connection")
	}
	// A pull whose ctx deadline passes (the consumer's Run ending) while the broker holds it:
	// the connection stays too.
	dctx, dcancel := context.WithTimeout(ctx, 20*time.Millisecond)
	defer dcancel()
	if _, state, err := c.pool.startCall(conn, protocol.CodePullMessage, &protocol.PullRequestHeader{ConsumerGroup: "G", Topic: "T", PollTimeoutMs: 15000}, nil).wait(dctx, time.Now().Add(time.Minute)); state != callAbandoned || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("held pull: state %d, err %v", state, err)
	}
	if !isOpen(conn) {
		t.Fatal("the end of a long poll's ctx closed the connection")
	}
	// An admin call whose caller's deadline comes before the request timeout: the caller gave
	// up, the connection stays.
	sctx, scancel := context.WithTimeout(ctx, 20*time.Millisecond)
	defer scancel()
	if err := admin.UpdateConsumerOffset(sctx, rb.addr(), "G", "T", 0, 1); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("call with a short ctx on the hung connection: %v", err)
	}
	if !isOpen(conn) {
		t.Fatal("a caller's deadline closed the connection")
	}

	start := time.Now()
	err = admin.UpdateConsumerOffset(ctx, rb.addr(), "G", "T", 0, 1)
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("first call on the hung connection: %v", err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Fatalf("the call took %v: the minute-long ctx lifted the 300ms request timeout", d)
	}
	if isOpen(conn) {
		t.Fatal("the silent connection is still open")
	}
	if n := logs.count(silentWarning); n != 1 {
		t.Fatalf("%d warnings, want 1:\n%s", n, logs.String())
	}

	// The server now answers new connections (the hung one stays hung).
	rb.answering.Store(true)
	for i := range 2 {
		if err := admin.UpdateConsumerOffset(ctx, rb.addr(), "G", "T", 0, int64(2+i)); err != nil {
			t.Fatalf("call %d after the timeout: %v", 2+i, err)
		}
	}
	if n := rb.accepted.Load(); n != 2 {
		t.Fatalf("%d connections accepted, want 2 (the hung one and its replacement)", n)
	}
	if n := logs.count(silentWarning); n != 1 {
		t.Fatalf("%d warnings, want 1:\n%s", n, logs.String())
	}
}

// TestSlowConnectionIsKept: a request that times out on a connection that did receive something
// since it was sent (here the answer to a later request) leaves the connection open.
func TestSlowConnectionIsKept(t *testing.T) {
	rb := startRawBroker(t)
	rb.answering.Store(true)
	var logs lockedBuffer
	c := newTestClient(t, "127.0.0.1:1", WithLogger(slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelWarn}))))
	admin := NewAdmin(c)
	ctx := testCtx(t, time.Minute)

	conn, err := c.pool.get(ctx, rb.addr())
	if err != nil {
		t.Fatal(err)
	}
	held := c.pool.startCall(conn, protocol.CodeUpdateConsumerOffset, &protocol.ConsumerOffsetHeader{ConsumerGroup: "G", Topic: "T", QueueID: 1}, nil)
	<-rb.held // the server has the request: anything it answers from now on comes after it
	if err := admin.UpdateConsumerOffset(ctx, rb.addr(), "G", "T", 0, 1); err != nil {
		t.Fatal(err)
	}
	if _, state, err := held.wait(ctx, time.Now()); state != callUnknown || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("held call: state %d, err %v", state, err)
	}
	if !isOpen(conn) {
		t.Fatal("a connection that received an answer was closed")
	}
	if err := admin.UpdateConsumerOffset(ctx, rb.addr(), "G", "T", 0, 2); err != nil {
		t.Fatal(err)
	}
	if n := rb.accepted.Load(); n != 1 {
		t.Fatalf("%d connections accepted, want 1", n)
	}
	if n := logs.count(silentWarning); n != 0 {
		t.Fatalf("unexpected warning:\n%s", logs.String())
	}
}

// TestShuttingDownBrokerIsLeftAlone: after a SHUTTING_DOWN answer the client sends the broker
// nothing for a backoff (requests fail at once with ErrBrokerUnavailable), so a stopping broker
// sees its clients go quiet; the backoff doubles while the answers go on, and once the broker
// serves again sends succeed.
func TestShuttingDownBrokerIsLeftAlone(t *testing.T) {
	fc := fakebroker.New(t)
	a := fc.AddGroup("a", 0, map[string]int32{"T": 1}).Master()
	// Backoffs of an hour on a clock the test moves: real time never ends one.
	c := newTestClient(t, fc.Addr(), WithReconnectBackoff(time.Hour, 4*time.Hour))
	skew := &c.pool.skew
	p := newTestProducer(t, c, WithRetries(2))
	ctx := testCtx(t, 10*time.Second)
	send := func() error {
		_, err := p.SendSync(ctx, &Message{Topic: "T", Body: []byte("x")})
		return err
	}
	if err := send(); err != nil {
		t.Fatal(err)
	}
	var refusing atomic.Bool
	refusing.Store(true)
	a.Control(protocol.CodeSendMessage, func(*rpc.Request) (rpc.Reply, fakebroker.Verdict) {
		if refusing.Load() {
			return rpc.Errorf(protocol.StatusShuttingDown, "fake: shutting down"), fakebroker.Answer
		}
		return rpc.Reply{}, fakebroker.Pass
	})
	sends := a.Sends()
	expect := func(what string, wantSends int64) {
		t.Helper()
		if err := send(); !errors.Is(err, ErrBrokerUnavailable) {
			t.Fatalf("%s: %v", what, err)
		}
		if n := a.Sends() - sends; n != wantSends {
			t.Fatalf("%s: the broker got %d sends, want %d", what, n, wantSends)
		}
	}
	// One send reaches the broker; its retries do not, nor do the sends after it.
	expect("first send to the stopping broker", 1)
	expect("during the backoff", 1)
	skew.Add(int64(time.Hour + time.Second))
	expect("after the first backoff", 2) // refused again: the next backoff is 2 h
	skew.Add(int64(time.Hour + time.Second))
	expect("during the doubled backoff", 2)
	refusing.Store(false)
	skew.Add(int64(time.Hour))
	if err := send(); err != nil {
		t.Fatalf("after the broker serves again: %v", err)
	}
}

const deadWarning = "closing a dead connection"

// TestLivenessClosesHungConnection: requests waiting on a connection that receives nothing,
// not even the answer to a probe, end long before their timeout: the connection is closed as
// dead (one warning) and its requests, a long-polling pull among them, fail with rpc.ErrClosed
// (an unknown outcome). During the reconnect backoff the address fails at once; then a new
// connection serves.
func TestLivenessClosesHungConnection(t *testing.T) {
	rb := startRawBroker(t)
	var logs lockedBuffer
	c := newTestClient(t, "127.0.0.1:1", WithRequestTimeout(time.Minute), WithLivenessProbe(20*time.Millisecond, 50*time.Millisecond),
		WithReconnectBackoff(time.Hour, time.Hour),
		WithLogger(slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelWarn}))))
	ctx := testCtx(t, time.Minute)
	conn, err := c.pool.get(ctx, rb.addr())
	if err != nil {
		t.Fatal(err)
	}
	far := time.Now().Add(time.Minute)
	commit := c.pool.startCall(conn, protocol.CodeUpdateConsumerOffset, &protocol.ConsumerOffsetHeader{ConsumerGroup: "G", Topic: "T"}, nil)
	pull := c.pool.startCall(conn, protocol.CodePullMessage, &protocol.PullRequestHeader{ConsumerGroup: "G", Topic: "T", PollTimeoutMs: 15000}, nil)
	for name, call := range map[string]*pendingCall{"commit": commit, "pull": pull} {
		if _, state, err := call.wait(ctx, far); state != callUnknown || !errors.Is(err, rpc.ErrClosed) || !strings.Contains(err.Error(), errConnHung.Error()) {
			t.Fatalf("%s on the hung connection: state %d, err %v", name, state, err)
		}
	}
	if rb.probes.Load() == 0 {
		t.Fatal("closed without a probe")
	}
	// The warning follows the end of the requests.
	testutil.Eventually(t, "the warning", func() bool { return logs.count(deadWarning) > 0 })
	if n := logs.count(deadWarning); n != 1 {
		t.Fatalf("%d warnings, want 1:\n%s", n, logs.String())
	}
	admin := NewAdmin(c)
	if err := admin.UpdateConsumerOffset(ctx, rb.addr(), "G", "T", 0, 1); !errors.Is(err, ErrBrokerUnavailable) {
		t.Fatalf("during the reconnect backoff: %v", err)
	}
	rb.answering.Store(true)
	c.pool.skew.Store(int64(2 * time.Hour)) // the reconnect backoff ends
	if err := admin.UpdateConsumerOffset(ctx, rb.addr(), "G", "T", 0, 1); err != nil {
		t.Fatalf("after the backoff: %v", err)
	}
	if n := rb.accepted.Load(); n != 2 {
		t.Fatalf("%d connections accepted, want 2", n)
	}
}

// TestLivenessKeepsHeldRequests: a broker that holds requests (a long-polling pull, a send
// waiting for a SYNC_MASTER's slaves) but answers the probes keeps its connection, however long
// it holds them: the held requests get their answers on the same connection.
func TestLivenessKeepsHeldRequests(t *testing.T) {
	rb := startRawBroker(t)
	rb.answering.Store(true)
	var logs lockedBuffer
	c := newTestClient(t, "127.0.0.1:1", WithLivenessProbe(20*time.Millisecond, 200*time.Millisecond),
		WithLogger(slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelWarn}))))
	ctx := testCtx(t, time.Minute)
	conn, err := c.pool.get(ctx, rb.addr())
	if err != nil {
		t.Fatal(err)
	}
	commit := c.pool.startCall(conn, protocol.CodeUpdateConsumerOffset, &protocol.ConsumerOffsetHeader{ConsumerGroup: "G", Topic: "T", QueueID: 1}, nil)
	pull := c.pool.startCall(conn, protocol.CodePullMessage, &protocol.PullRequestHeader{ConsumerGroup: "G", Topic: "T", PollTimeoutMs: 15000}, nil)
	<-rb.held
	<-rb.held
	// Many probe rounds pass while the requests are held.
	testutil.Eventually(t, "10 probes answered", func() bool { return rb.probes.Load() >= 10 })
	rb.releaseHeld()
	far := time.Now().Add(time.Minute)
	for name, call := range map[string]*pendingCall{"commit": commit, "pull": pull} {
		resp, state, err := call.wait(ctx, far)
		if state != callOK {
			t.Fatalf("held %s: state %d, err %v", name, state, err)
		}
		resp.Release()
	}
	if !isOpen(conn) || rb.accepted.Load() != 1 || logs.count(deadWarning) != 0 {
		t.Fatalf("the live connection was closed (open %v, %d accepted):\n%s", isOpen(conn), rb.accepted.Load(), logs.String())
	}
}
