package rpc

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/petrel-mq/petrel/internal/testutil"
	"github.com/petrel-mq/petrel/protocol"
)

// Tests of a real Server on 127.0.0.1:0 and a real Conn, plus raw sockets on either side for
// what a well-behaved peer never sends.

const waitLong = 5 * time.Second

type testServer struct {
	*Server
	addr         string
	logs         *testutil.SyncBuffer // the Server's log lines
	disconnected chan uint64
}

// startServer serves h on 127.0.0.1:0 until the test ends.
func startServer(t *testing.T, h Handler, opts ServerOptions) *testServer {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ts := &testServer{addr: ln.Addr().String(), logs: &testutil.SyncBuffer{}, disconnected: make(chan uint64, 100)}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.NewTextHandler(ts.logs, nil))
	}
	if opts.OnDisconnect == nil {
		opts.OnDisconnect = func(p *Peer) { ts.disconnected <- p.ID() }
	}
	ts.Server = NewServer(h, opts)
	served := make(chan error, 1)
	go func() { served <- ts.Serve(ln) }()
	t.Cleanup(func() {
		if err := ts.Close(); err != nil {
			t.Error(err)
		}
		if err := <-served; err != nil {
			t.Errorf("Serve: %v", err)
		}
	})
	return ts
}

func dial(t *testing.T, addr string, opts Options) *Conn {
	t.Helper()
	c, err := Dial(context.Background(), addr, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), waitLong)
	t.Cleanup(cancel)
	return ctx
}

// gate blocks handlers until it is opened; opening it twice is harmless.
type gate struct {
	ch   chan struct{}
	once sync.Once
}

func newGate() *gate  { return &gate{ch: make(chan struct{})} }
func (g *gate) open() { g.once.Do(func() { close(g.ch) }) }
func (g *gate) wait() { <-g.ch }

// handler is the test service:
//   - GetMaxOffset(QueueHeader) -> OffsetHeader{QueueID*1000 + len(Topic)}
//   - SendMessage(body) -> SendResponseHeader{Count: len(body)}, the body echoed
//   - GetRouteInfoByTopic(TopicHeader) -> a TopicRouteData body naming the topic
//   - GetBrokerRuntimeInfo -> a KVTable body
//   - UnregisterBroker -> NOT_MASTER naming a master
//   - QueryConsumerOffset -> waits for blocked (if set), then OffsetHeader{7}
//   - UpdateConsumerOffset (oneway) -> records the offset in oneways
type service struct {
	blocked *gate
	oneways chan int64
	served  atomic.Int64
}

func newService() *service { return &service{oneways: make(chan int64, 100)} }

func (s *service) handle(req *Request) Reply {
	s.served.Add(1)
	switch req.Code {
	case protocol.CodeGetMaxOffset:
		var h protocol.QueueHeader
		if err := h.ReadFrom(req.Header); err != nil {
			return Errorf(protocol.StatusRequestMalformed, "%v", err)
		}
		return Reply{Header: &protocol.OffsetHeader{Offset: int64(h.QueueID)*1000 + int64(len(h.Topic))}}
	case protocol.CodeSendMessage:
		return Reply{Header: &protocol.SendResponseHeader{Count: int32(len(req.Body))}, Body: req.Body}
	case protocol.CodeGetRouteInfoByTopic:
		var h protocol.TopicHeader
		if err := h.ReadFrom(req.Header); err != nil {
			return Errorf(protocol.StatusRequestMalformed, "%v", err)
		}
		route := protocol.TopicRouteData{
			QueueDatas:  []protocol.QueueData{{BrokerName: "broker-" + h.Topic, ReadQueueNums: 4, WriteQueueNums: 4, Perm: protocol.PermReadWrite}},
			BrokerDatas: []protocol.BrokerData{{Cluster: "c", BrokerName: "broker-" + h.Topic, Addrs: []protocol.BrokerAddr{{BrokerID: 0, Addr: "127.0.0.1:1"}}}},
		}
		return Reply{Body: route.AppendTo(nil)}
	case protocol.CodeGetBrokerRuntimeInfo:
		kv := protocol.KVTable{Entries: []protocol.KV{{Key: "version", Value: "test"}}}
		return Reply{Body: kv.AppendTo(nil)}
	case protocol.CodeUnregisterBroker:
		return Reply{Status: protocol.StatusNotMaster, Remark: "this broker is a slave", MasterAddr: "10.0.0.1:10911"}
	case protocol.CodeQueryConsumerOffset:
		if s.blocked != nil {
			s.blocked.wait()
		}
		return Reply{Header: &protocol.OffsetHeader{Offset: 7}}
	case protocol.CodeUpdateConsumerOffset:
		var h protocol.ConsumerOffsetHeader
		if err := h.ReadFrom(req.Header); err == nil {
			s.oneways <- h.Offset
		}
		return Reply{}
	}
	return Errorf(protocol.StatusSystemError, "unexpected code %s", req.Code)
}

func pendingCount(c *Conn) int { return c.Waiting() }

// waitPending waits until c has n calls waiting.
func waitPending(t *testing.T, c *Conn, n int) {
	t.Helper()
	testutil.Eventually(t, fmt.Sprintf("%d calls pending", n), func() bool { return pendingCount(c) == n })
}

func getMaxOffset(ctx context.Context, c *Conn, topic string, queueID int32) (int64, error) {
	var off protocol.OffsetHeader
	err := c.CallDecode(ctx, protocol.CodeGetMaxOffset, &protocol.QueueHeader{Topic: topic, QueueID: queueID}, nil, &off, nil)
	return off.Offset, err
}

func TestCall(t *testing.T) {
	srv := startServer(t, newService().handle, ServerOptions{})
	c := dial(t, srv.addr, Options{})
	if c.Addr() != srv.addr {
		t.Fatalf("Addr %q", c.Addr())
	}
	resp, err := c.Call(ctxT(t), protocol.CodeSendMessage, nil, []byte("hello"))
	if err != nil {
		t.Fatal(err)
	}
	var h protocol.SendResponseHeader
	if err := h.ReadFrom(resp.Header); err != nil || h.Count != 5 || string(resp.Body) != "hello" {
		t.Fatalf("response %+v %q: %v", h, resp.Body, err)
	}
	resp.Release()
	resp.Release() // twice is harmless
	if resp.Header != nil || resp.Body != nil {
		t.Fatal("Release kept the views")
	}
	var nilResp *Response
	nilResp.Release()
	// An empty header and body.
	resp, err = c.Call(ctxT(t), protocol.CodeSendMessage, nil, nil)
	if err != nil || len(resp.Body) != 0 {
		t.Fatalf("empty call: %v", err)
	}
	resp.Release()
	if c.Err() != nil {
		t.Fatal(c.Err())
	}
}

func TestCallDecode(t *testing.T) {
	srv := startServer(t, newService().handle, ServerOptions{})
	c := dial(t, srv.addr, Options{})
	if off, err := getMaxOffset(ctxT(t), c, "TopicA", 3); err != nil || off != 3006 {
		t.Fatalf("max offset %d: %v", off, err)
	}
	var route protocol.TopicRouteData
	if err := c.CallDecode(ctxT(t), protocol.CodeGetRouteInfoByTopic, &protocol.TopicHeader{Topic: "T1"}, nil, nil, &route); err != nil {
		t.Fatal(err)
	}
	if len(route.BrokerDatas) != 1 || route.BrokerDatas[0].BrokerName != "broker-T1" || route.BrokerDatas[0].MasterAddr() != "127.0.0.1:1" {
		t.Fatalf("route %+v", route)
	}
	var kv protocol.KVTable
	if err := c.CallDecode(ctxT(t), protocol.CodeGetBrokerRuntimeInfo, nil, nil, nil, &kv); err != nil || kv.Get("version") != "test" {
		t.Fatalf("runtime info %+v: %v", kv, err)
	}
	// A response that does not decode as asked is an error naming the code.
	var wrong protocol.SendResponseHeader
	err := c.CallDecode(ctxT(t), protocol.CodeGetMaxOffset, &protocol.QueueHeader{Topic: "T"}, nil, &wrong, nil)
	if err == nil || !errors.Is(err, protocol.ErrShort) || !strings.Contains(err.Error(), "GET_MAX_OFFSET") {
		t.Fatalf("decoding into the wrong type: %v", err)
	}
	err = c.CallDecode(ctxT(t), protocol.CodeGetBrokerRuntimeInfo, nil, nil, nil, &route)
	if err == nil || !strings.Contains(err.Error(), "body") {
		t.Fatalf("decoding a body into the wrong type: %v", err)
	}
	// Errors pass through.
	err = c.CallDecode(ctxT(t), protocol.CodeUnregisterBroker, nil, nil, &wrong, nil)
	if !errors.Is(err, protocol.StatusNotMaster) {
		t.Fatalf("error status: %v", err)
	}
}

func TestErrorStatus(t *testing.T) {
	srv := startServer(t, newService().handle, ServerOptions{})
	c := dial(t, srv.addr, Options{})
	_, err := c.Call(ctxT(t), protocol.CodeUnregisterBroker, &protocol.BrokerHeader{BrokerName: "b"}, nil)
	if !errors.Is(err, protocol.StatusNotMaster) {
		t.Fatalf("got %v, want NOT_MASTER", err)
	}
	var pe *protocol.Error
	if !errors.As(err, &pe) || pe.MasterAddr != "10.0.0.1:10911" || pe.Remark != "this broker is a slave" || !pe.Retriable() {
		t.Fatalf("error %+v", pe)
	}
	// Unknown request codes are answered by the server itself.
	_, err = c.Call(ctxT(t), protocol.RequestCode(9999), nil, nil)
	if !errors.Is(err, protocol.StatusRequestCodeNotSupported) || !errors.As(err, &pe) || !strings.Contains(pe.Remark, "9999") {
		t.Fatalf("unknown code: %v", err)
	}
	// The connection survives error responses.
	if _, err := getMaxOffset(ctxT(t), c, "T", 1); err != nil {
		t.Fatal(err)
	}
}

func TestCallAsync(t *testing.T) {
	srv := startServer(t, newService().handle, ServerOptions{})
	c := dial(t, srv.addr, Options{})
	const n = 200
	type result struct {
		i    int
		body string
		err  error
	}
	results := make(chan result, n)
	ids := map[uint32]bool{}
	for i := range n {
		id := c.CallAsync(protocol.CodeSendMessage, nil, []byte(fmt.Sprint(i)), func(resp *Response, err error) {
			r := result{i: i, err: err}
			if err == nil {
				r.body = string(resp.Body)
				resp.Release()
			}
			results <- r
		})
		if id == 0 || ids[id] {
			t.Fatalf("request id %d reused or zero", id)
		}
		ids[id] = true
	}
	for range n {
		select {
		case r := <-results:
			if r.err != nil || r.body != fmt.Sprint(r.i) {
				t.Fatalf("call %d: %q %v", r.i, r.body, r.err)
			}
		case <-time.After(waitLong):
			t.Fatal("async calls did not complete")
		}
	}
	// An error status reaches the callback as an error.
	errc := make(chan error, 1)
	c.CallAsync(protocol.CodeUnregisterBroker, nil, nil, func(resp *Response, err error) {
		if resp != nil {
			resp.Release()
		}
		errc <- err
	})
	if err := <-errc; !errors.Is(err, protocol.StatusNotMaster) {
		t.Fatalf("async error: %v", err)
	}
}

func TestOneway(t *testing.T) {
	svc := newService()
	srv := startServer(t, svc.handle, ServerOptions{})
	c := dial(t, srv.addr, Options{})
	for i := range 10 {
		if err := c.Oneway(protocol.CodeUpdateConsumerOffset, &protocol.ConsumerOffsetHeader{ConsumerGroup: "g", Topic: "T", Offset: int64(i)}, nil); err != nil {
			t.Fatal(err)
		}
	}
	// Requests of one connection are served in order, so once this call returns every oneway
	// request before it has been handled.
	if _, err := getMaxOffset(ctxT(t), c, "T", 0); err != nil {
		t.Fatal(err)
	}
	for i := range 10 {
		select {
		case got := <-svc.oneways:
			if got != int64(i) {
				t.Fatalf("oneway %d carried %d", i, got)
			}
		default:
			t.Fatalf("oneway %d not handled", i)
		}
	}
	if pendingCount(c) != 0 {
		t.Fatal("oneway requests left pending calls")
	}
}

// TestReplyFlushedBeforeOneway: a request followed, in the same write, by a oneway request (or by
// one with an unknown code) is still answered: the reply held back while the next frame is
// read must be flushed after a oneway frame too, before the server blocks on the socket.
func TestReplyFlushedBeforeOneway(t *testing.T) {
	svc := newService()
	srv := startServer(t, svc.handle, ServerOptions{})
	for _, second := range [][]byte{
		protocol.AppendFrame(nil, uint16(protocol.CodeUpdateConsumerOffset), protocol.FlagOneway, 2, &protocol.ConsumerOffsetHeader{Topic: "T", Offset: 5}, nil),
		protocol.AppendFrame(nil, 9999, protocol.FlagOneway, 2, nil, nil),
	} {
		nc, err := net.Dial("tcp", srv.addr)
		if err != nil {
			t.Fatal(err)
		}
		req := protocol.AppendFrame(nil, uint16(protocol.CodeGetMaxOffset), 0, 1, &protocol.QueueHeader{Topic: "T", QueueID: 1}, nil)
		if _, err := nc.Write(append(req, second...)); err != nil {
			t.Fatal(err)
		}
		_ = nc.SetReadDeadline(time.Now().Add(2 * time.Second))
		f, err := readFrame(bufio.NewReader(nc))
		if err != nil {
			t.Fatalf("no reply to a request pipelined with a oneway one: %v", err)
		}
		if f.RequestID != 1 || protocol.Status(f.Code) != protocol.StatusSuccess {
			t.Fatalf("reply %+v", f.FrameHeader)
		}
		_ = nc.Close()
	}
}

// readFrame reads one whole frame.
func readFrame(br *bufio.Reader) (protocol.Frame, error) {
	p, err := br.Peek(protocol.FramePrefixSize)
	if err != nil {
		return protocol.Frame{}, err
	}
	h, err := protocol.ParseFrameHeader(p, protocol.DefaultMaxFrameSize)
	if err != nil {
		return protocol.Frame{}, err
	}
	buf := make([]byte, h.TotalSize())
	if _, err := io.ReadFull(br, buf); err != nil {
		return protocol.Frame{}, err
	}
	return protocol.ParseFrame(buf, protocol.DefaultMaxFrameSize)
}

// TestConcurrentPipelined runs many calls from many goroutines on one connection; every response
// must reach its own caller.
func TestConcurrentPipelined(t *testing.T) {
	svc := newService()
	srv := startServer(t, svc.handle, ServerOptions{})
	c := dial(t, srv.addr, Options{})
	const goroutines, calls = 32, 100
	var wg sync.WaitGroup
	errc := make(chan error, goroutines)
	for g := range goroutines {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range calls {
				want := fmt.Sprintf("g%d-i%d-%s", g, i, strings.Repeat("x", (g*calls+i)%300))
				resp, err := c.Call(context.Background(), protocol.CodeSendMessage, nil, []byte(want))
				if err != nil {
					errc <- err
					return
				}
				got := string(resp.Body)
				resp.Release()
				if got != want {
					errc <- fmt.Errorf("call %q got %q", want, got)
					return
				}
				if i%10 == 0 {
					off, err := getMaxOffset(context.Background(), c, "TopicZ", int32(g))
					if err != nil || off != int64(g)*1000+6 {
						errc <- fmt.Errorf("max offset %d: %v", off, err)
						return
					}
				}
			}
		}()
	}
	wg.Wait()
	close(errc)
	for err := range errc {
		t.Error(err)
	}
	if pendingCount(c) != 0 {
		t.Fatalf("%d calls left pending", pendingCount(c))
	}
}

// rawServer accepts one connection on 127.0.0.1:0 and runs serve on it.
func rawServer(t *testing.T, serve func(nc net.Conn)) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		nc, err := ln.Accept()
		_ = ln.Close()
		if err != nil {
			return
		}
		defer nc.Close()
		serve(nc)
	}()
	t.Cleanup(func() {
		_ = ln.Close()
		<-done
	})
	return ln.Addr().String()
}

// TestResponsesOutOfOrder: a server may answer in any order; responses are matched by request id.
func TestResponsesOutOfOrder(t *testing.T) {
	const n = 50
	addr := rawServer(t, func(nc net.Conn) {
		br := bufio.NewReader(nc)
		var reqs []protocol.Frame
		for len(reqs) < n {
			f, err := readFrame(br)
			if err != nil {
				return
			}
			reqs = append(reqs, f)
		}
		var out []byte
		for i := len(reqs) - 1; i >= 0; i-- { // newest first
			out = protocol.AppendFrame(out, uint16(protocol.StatusSuccess), protocol.FlagResponse, reqs[i].RequestID, nil, reqs[i].Body)
		}
		_, _ = nc.Write(out)
		_, _ = io.Copy(io.Discard, nc) // until the client closes
	})
	c := dial(t, addr, Options{})
	var wg sync.WaitGroup
	errc := make(chan error, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			want := fmt.Sprintf("request-%d", i)
			resp, err := c.Call(ctxT(t), protocol.CodeSendMessage, nil, []byte(want))
			if err != nil {
				errc <- err
				return
			}
			if string(resp.Body) != want {
				errc <- fmt.Errorf("%s got %q", want, resp.Body)
			}
			resp.Release()
		}()
	}
	wg.Wait()
	close(errc)
	for err := range errc {
		t.Error(err)
	}
}

// TestCallTimeout: when ctx ends first the outcome is unknown; the late response is dropped and
// its buffer released, and the connection keeps working.
func TestCallTimeout(t *testing.T) {
	svc := newService()
	svc.blocked = newGate()
	srv := startServer(t, svc.handle, ServerOptions{})
	defer svc.blocked.open()
	c := dial(t, srv.addr, Options{})

	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err := c.Call(ctx, protocol.CodeQueryConsumerOffset, &protocol.ConsumerOffsetHeader{Topic: "T"}, nil)
	if !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), "QUERY_CONSUMER_OFFSET") {
		t.Fatalf("got %v, want a deadline error", err)
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Fatalf("timed out after %v", d)
	}
	id := c.nextID.Load()
	if pendingCount(c) != 0 {
		t.Fatal("the timed-out call is still pending")
	}
	svc.blocked.open()
	waitDropped(t, id)
	// A cancelled context behaves the same.
	ctx2, cancel2 := context.WithCancel(context.Background())
	cancel2()
	if _, err := c.Call(ctx2, protocol.CodeQueryConsumerOffset, &protocol.ConsumerOffsetHeader{Topic: "T"}, nil); err != nil && !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled call: %v", err)
	}
	if _, err := getMaxOffset(ctxT(t), c, "T", 2); err != nil {
		t.Fatalf("connection after a timeout: %v", err)
	}
	waitPending(t, c, 0)
}

// waitDropped waits until the reader dropped the late response to request id.
func waitDropped(t *testing.T, id uint32) {
	t.Helper()
	timeout := time.After(waitLong)
	for {
		select {
		case got := <-dropped:
			if got == id {
				return
			}
		case <-timeout:
			t.Fatalf("the late response to request %d was not dropped", id)
		}
	}
}

func TestForget(t *testing.T) {
	svc := newService()
	svc.blocked = newGate()
	srv := startServer(t, svc.handle, ServerOptions{})
	defer svc.blocked.open()
	c := dial(t, srv.addr, Options{})
	called := make(chan struct{}, 1)
	id := c.CallAsync(protocol.CodeQueryConsumerOffset, &protocol.ConsumerOffsetHeader{Topic: "T"}, nil, func(resp *Response, err error) {
		resp.Release()
		called <- struct{}{}
	})
	waitPending(t, c, 1)
	if !c.Forget(id) || c.Forget(id) {
		t.Fatal("Forget: want true once, then false")
	}
	svc.blocked.open()
	waitDropped(t, id)
	select {
	case <-called:
		t.Fatal("the callback of a forgotten call ran")
	default:
	}
}

// TestCloseFailsWaitingCalls: Close fails every waiting call (sync and async) with ErrClosed, and
// every later call too.
func TestCloseFailsWaitingCalls(t *testing.T) {
	svc := newService()
	svc.blocked = newGate()
	srv := startServer(t, svc.handle, ServerOptions{})
	defer svc.blocked.open()
	c := dial(t, srv.addr, Options{})

	const n = 3
	errc := make(chan error, 2*n)
	for range n {
		go func() {
			_, err := c.Call(context.Background(), protocol.CodeQueryConsumerOffset, &protocol.ConsumerOffsetHeader{Topic: "T"}, nil)
			errc <- err
		}()
		c.CallAsync(protocol.CodeQueryConsumerOffset, &protocol.ConsumerOffsetHeader{Topic: "T"}, nil, func(resp *Response, err error) {
			resp.Release()
			errc <- err
		})
	}
	waitPending(t, c, 2*n)
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	for range 2 * n {
		if err := <-errc; !errors.Is(err, ErrClosed) {
			t.Fatalf("waiting call: %v, want ErrClosed", err)
		}
	}
	select {
	case <-c.Done():
	default:
		t.Fatal("Done not closed")
	}
	if !errors.Is(c.Err(), ErrClosed) {
		t.Fatalf("Err() = %v", c.Err())
	}
	if _, err := c.Call(ctxT(t), protocol.CodeGetMaxOffset, nil, nil); !errors.Is(err, ErrClosed) {
		t.Fatalf("call after Close: %v", err)
	}
	if err := c.Oneway(protocol.CodeUpdateConsumerOffset, nil, nil); !errors.Is(err, ErrClosed) {
		t.Fatalf("oneway after Close: %v", err)
	}
	if id := c.CallAsync(protocol.CodeGetMaxOffset, nil, nil, func(_ *Response, err error) { errc <- err }); id != 0 {
		t.Fatalf("CallAsync after Close returned id %d", id)
	}
	if err := <-errc; !errors.Is(err, ErrClosed) {
		t.Fatalf("async call after Close: %v", err)
	}
	if err := c.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
}

// TestServerCloseFailsCalls: a server going away fails the waiting calls with ErrClosed.
func TestServerCloseFailsCalls(t *testing.T) {
	svc := newService()
	svc.blocked = newGate()
	srv := startServer(t, svc.handle, ServerOptions{})
	c := dial(t, srv.addr, Options{})
	errc := make(chan error, 1)
	go func() {
		_, err := c.Call(context.Background(), protocol.CodeQueryConsumerOffset, &protocol.ConsumerOffsetHeader{Topic: "T"}, nil)
		errc <- err
	}()
	waitPending(t, c, 1)
	closed := make(chan error, 1)
	go func() { closed <- srv.Close() }()
	select {
	case err := <-errc:
		if !errors.Is(err, ErrClosed) {
			t.Fatalf("call on a closed server: %v", err)
		}
	case <-time.After(waitLong):
		t.Fatal("the waiting call did not fail")
	}
	svc.blocked.open() // lets the handler return, so that Close can finish
	if err := <-closed; err != nil {
		t.Fatal(err)
	}
	<-c.Done()
	if c.Err() == nil {
		t.Fatal("Err() is nil after the server closed")
	}
}

func TestOnDisconnect(t *testing.T) {
	srv := startServer(t, newService().handle, ServerOptions{})
	c := dial(t, srv.addr, Options{})
	if _, err := getMaxOffset(ctxT(t), c, "T", 0); err != nil {
		t.Fatal(err)
	}
	_ = c.Close()
	select {
	case id := <-srv.disconnected:
		if id == 0 {
			t.Fatal("peer id 0")
		}
	case <-time.After(waitLong):
		t.Fatal("OnDisconnect did not run")
	}
	// Each connection has its own id.
	c1, c2 := dial(t, srv.addr, Options{}), dial(t, srv.addr, Options{})
	_, _ = getMaxOffset(ctxT(t), c1, "T", 0)
	_, _ = getMaxOffset(ctxT(t), c2, "T", 0)
	_, _ = c1.Close(), c2.Close()
	a, b := <-srv.disconnected, <-srv.disconnected
	if a == b {
		t.Fatalf("two connections share peer id %d", a)
	}
}

func TestIdleTimeout(t *testing.T) {
	srv := startServer(t, newService().handle, ServerOptions{IdleTimeout: 100 * time.Millisecond})
	c := dial(t, srv.addr, Options{})
	if _, err := getMaxOffset(ctxT(t), c, "T", 0); err != nil {
		t.Fatal(err)
	}
	select {
	case <-c.Done():
	case <-time.After(waitLong):
		t.Fatal("the idle connection was not closed")
	}
	<-srv.disconnected
}

// TestBadFrames sends what no well-behaved client sends over raw sockets. The server must close
// that connection with a log line, without allocating for a hostile length, while another
// connection keeps working. (A server per case: lines of one reason are rate-limited.)
func TestBadFrames(t *testing.T) {
	const maxFrame = 64 << 10

	valid := protocol.AppendFrame(nil, uint16(protocol.CodeGetMaxOffset), 0, 1, &protocol.QueueHeader{Topic: "T"}, nil)
	prefix := func(length uint32, flags, version uint8, hdrLen uint32) []byte {
		b := binary.BigEndian.AppendUint32(nil, length)
		b = binary.BigEndian.AppendUint16(b, uint16(protocol.CodeGetMaxOffset))
		b = append(b, flags, version)
		b = binary.BigEndian.AppendUint32(b, 1)
		return binary.BigEndian.AppendUint32(b, hdrLen)
	}
	for _, tc := range []struct {
		name      string
		data      []byte
		closeSend bool // half-close after sending: the server sees the stream end
		log       []string
	}{
		{"HTTP/1.1", []byte("GET / HTTP/1.1\r\nHost: petrel\r\n\r\n"), false, []string{"looks like an HTTP/1.x request; this port speaks Petrel's binary protocol", "frame larger than the maximum"}},
		{"HTTP/2", []byte("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"), false, []string{"looks like the HTTP/2 connection preface; this port speaks Petrel's binary protocol"}},
		{"TLS", append([]byte{0x16, 0x03, 0x01, 0x02, 0x00, 0x01, 0x00, 0x01, 0xfc, 0x03, 0x03}, make([]byte, 40)...), false, []string{"looks like a TLS ClientHello; this port speaks Petrel's binary protocol"}},
		{"garbage", bytes.Repeat([]byte{0xfe}, 16), false, []string{"bad frame", "frame larger than the maximum"}},
		{"2 GiB length", prefix(1<<31, 0, protocol.Version, 0), false, []string{"bad frame", "frame larger than the maximum"}},
		{"over the server's max", prefix(maxFrame, 0, protocol.Version, 0), false, []string{"bad frame", "frame larger than the maximum"}},
		{"length below the prefix", prefix(3, 0, protocol.Version, 0), false, []string{"bad frame", "malformed"}},
		{"header past the frame", prefix(20, 0, protocol.Version, 9), false, []string{"bad frame", "header length"}},
		{"unknown version", prefix(12, 0, 9, 0), false, []string{"bad frame", "version 9"}},
		{"unknown flags", prefix(12, 0x40, protocol.Version, 0), false, []string{"bad frame", "flags"}},
		{"response frame", prefix(12, uint8(protocol.FlagResponse), protocol.Version, 0), false, []string{"bad frame", "response frame sent to a server"}},
		{"truncated frame", valid[:len(valid)-3], true, []string{"truncated frame"}},
		{"truncated prefix", valid[:7], true, []string{"closing connection", "unexpected EOF"}},
		{"good frame then garbage", append(append([]byte(nil), valid...), bytes.Repeat([]byte{0xff}, 16)...), false, []string{"bad frame"}},
		{"good frame then HTTP", append(append([]byte(nil), valid...), "GET / HTTP/1.1\r\n\r\n"...), false, []string{"bad frame"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := startServer(t, newService().handle, ServerOptions{MaxFrameSize: maxFrame})
			good := dial(t, srv.addr, Options{})
			var before, after runtime.MemStats
			runtime.ReadMemStats(&before)
			nc, err := net.Dial("tcp", srv.addr)
			if err != nil {
				t.Fatal(err)
			}
			defer nc.Close()
			if _, err := nc.Write(tc.data); err != nil {
				t.Fatal(err)
			}
			if tc.closeSend {
				_ = nc.(*net.TCPConn).CloseWrite()
			}
			// The server closes the connection: reading ends (after any reply to a good frame)
			// with EOF, or with a reset when the server left bytes unread.
			_ = nc.SetReadDeadline(time.Now().Add(waitLong))
			if _, err := io.Copy(io.Discard, nc); err != nil && !errors.Is(err, syscall.ECONNRESET) {
				t.Fatalf("the server did not close the connection: %v", err)
			}
			srv.logs.WaitForLine(t, append([]string{nc.LocalAddr().String()}, tc.log...)...)
			runtime.ReadMemStats(&after)
			if grew := after.TotalAlloc - before.TotalAlloc; grew > 32<<20 {
				t.Fatalf("the server allocated %d bytes for a bad frame", grew)
			}
			if _, err := getMaxOffset(ctxT(t), good, "T", 1); err != nil {
				t.Fatalf("the good connection broke: %v", err)
			}
		})
	}
}

// TestClientRejectsBadFrames: a server sending a frame the client cannot frame closes the client
// connection and fails its waiting calls.
func TestClientRejectsBadFrames(t *testing.T) {
	for _, tc := range []struct {
		name  string
		reply func(req protocol.Frame) []byte
		want  string
	}{
		{"bad version", func(protocol.Frame) []byte {
			return []byte{0, 0, 0, 12, 0, 0, byte(protocol.FlagResponse), 9, 0, 0, 0, 1, 0, 0, 0, 0}
		}, "bad frame"},
		{"over the client's max", func(req protocol.Frame) []byte {
			return protocol.AppendFrame(nil, 0, protocol.FlagResponse, req.RequestID, nil, make([]byte, 8<<10))
		}, "frame larger"},
		{"request on a client connection", func(req protocol.Frame) []byte {
			return protocol.AppendFrame(nil, uint16(protocol.CodeGetMaxOffset), 0, req.RequestID, nil, nil)
		}, "request code"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			addr := rawServer(t, func(nc net.Conn) {
				f, err := readFrame(bufio.NewReader(nc))
				if err != nil {
					return
				}
				_, _ = nc.Write(tc.reply(f))
				_, _ = io.Copy(io.Discard, nc)
			})
			c := dial(t, addr, Options{MaxFrameSize: 4 << 10})
			_, err := c.Call(ctxT(t), protocol.CodeGetMaxOffset, nil, nil)
			if !errors.Is(err, ErrClosed) {
				t.Fatalf("call: %v, want ErrClosed", err)
			}
			<-c.Done()
			if c.Err() == nil || !strings.Contains(c.Err().Error(), tc.want) {
				t.Fatalf("Err() = %v, want %q", c.Err(), tc.want)
			}
		})
	}
}

// TestUndecodableErrorHeader: an error status whose header does not decode still reaches the
// caller as a *protocol.Error with the status.
func TestUndecodableErrorHeader(t *testing.T) {
	addr := rawServer(t, func(nc net.Conn) {
		f, err := readFrame(bufio.NewReader(nc))
		if err != nil {
			return
		}
		_, _ = nc.Write(protocol.AppendFrame(nil, uint16(protocol.StatusSystemBusy), protocol.FlagResponse, f.RequestID, rawHeader{0xff}, nil))
		_, _ = io.Copy(io.Discard, nc)
	})
	c := dial(t, addr, Options{})
	_, err := c.Call(ctxT(t), protocol.CodeGetMaxOffset, nil, nil)
	var pe *protocol.Error
	if !errors.As(err, &pe) || pe.Status != protocol.StatusSystemBusy || !strings.Contains(pe.Remark, "undecodable") {
		t.Fatalf("got %v", err)
	}
}

type rawHeader []byte

func (h rawHeader) AppendTo(dst []byte) []byte { return append(dst, h...) }
func (h rawHeader) ReadFrom([]byte) error      { return nil }

func TestMaxInFlight(t *testing.T) {
	svc := newService()
	svc.blocked = newGate()
	srv := startServer(t, svc.handle, ServerOptions{})
	defer svc.blocked.open()
	c := dial(t, srv.addr, Options{MaxInFlight: 2})
	results := make(chan error, 3)
	cb := func(resp *Response, err error) {
		resp.Release()
		results <- err
	}
	for range 2 {
		if id := c.CallAsync(protocol.CodeQueryConsumerOffset, &protocol.ConsumerOffsetHeader{Topic: "T"}, nil, cb); id == 0 {
			t.Fatal("call not sent")
		}
	}
	waitPending(t, c, 2)
	// The third is refused at once, synchronously through its callback.
	if id := c.CallAsync(protocol.CodeQueryConsumerOffset, nil, nil, cb); id != 0 {
		t.Fatalf("third call sent with id %d", id)
	}
	if err := <-results; !errors.Is(err, ErrTooManyInFlight) {
		t.Fatalf("third call: %v", err)
	}
	if _, err := c.Call(ctxT(t), protocol.CodeGetMaxOffset, nil, nil); !errors.Is(err, ErrTooManyInFlight) {
		t.Fatalf("sync call over the limit: %v", err)
	}
	// Oneway requests wait for nothing and are not limited.
	if err := c.Oneway(protocol.CodeUpdateConsumerOffset, &protocol.ConsumerOffsetHeader{Offset: 1}, nil); err != nil {
		t.Fatal(err)
	}
	svc.blocked.open()
	for range 2 {
		if err := <-results; err != nil {
			t.Fatal(err)
		}
	}
	if _, err := getMaxOffset(ctxT(t), c, "T", 1); err != nil {
		t.Fatalf("after the in-flight calls finished: %v", err)
	}
}

func TestRequestTooLarge(t *testing.T) {
	srv := startServer(t, newService().handle, ServerOptions{MaxFrameSize: 4 << 10})
	c := dial(t, srv.addr, Options{MaxFrameSize: 4 << 10})
	// The client refuses to send what its own limit forbids.
	if _, err := c.Call(ctxT(t), protocol.CodeSendMessage, nil, make([]byte, 5<<10)); !errors.Is(err, protocol.ErrFrameTooLarge) {
		t.Fatalf("oversized request: %v", err)
	}
	if _, err := getMaxOffset(ctxT(t), c, "T", 1); err != nil {
		t.Fatal(err)
	}
	// A client with a larger limit gets its connection closed by the server.
	big := dial(t, srv.addr, Options{})
	if _, err := big.Call(ctxT(t), protocol.CodeSendMessage, nil, make([]byte, 5<<10)); !errors.Is(err, ErrClosed) {
		t.Fatalf("request over the server's limit: %v", err)
	}
	srv.logs.WaitForLine(t, "bad frame", "frame larger than the maximum")
}

func TestServeAfterClose(t *testing.T) {
	s := NewServer(newService().handle, ServerOptions{})
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Serve(ln); err != nil {
		t.Fatalf("Serve after Close: %v", err)
	}
	if _, err := ln.Accept(); err == nil {
		t.Fatal("Serve after Close left the listener open")
	}
}

func TestDialFailure(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	_ = ln.Close()
	if _, err := Dial(ctxT(t), addr, Options{DialTimeout: time.Second}); err == nil || !strings.Contains(err.Error(), addr) {
		t.Fatalf("dial to a closed port: %v", err)
	}
}

func TestAppendReply(t *testing.T) {
	b := AppendReply(nil, 9, &Reply{Status: protocol.StatusNotMaster, Remark: "r", MasterAddr: "m", Header: &protocol.OffsetHeader{Offset: 1}, Body: []byte("ignored")})
	f, err := protocol.ParseFrame(b, protocol.DefaultMaxFrameSize)
	if err != nil || f.RequestID != 9 || !f.Flags.IsResponse() || len(f.Body) != 0 {
		t.Fatalf("error reply %+v: %v", f, err)
	}
	var eh protocol.ErrorHeader
	if err := eh.ReadFrom(f.Header); err != nil || eh.Remark != "r" || eh.MasterAddr != "m" {
		t.Fatalf("error header %+v: %v", eh, err)
	}
	rep := Errorf(protocol.StatusTopicNotExist, "topic %s", "T")
	if rep.Status != protocol.StatusTopicNotExist || rep.Remark != "topic T" {
		t.Fatalf("Errorf: %+v", rep)
	}
}

func TestHandlerPanicAnswersSystemError(t *testing.T) {
	srv := NewServer(func(req *Request) Reply {
		if req.Code == protocol.CodeGetBrokerClusterInfo {
			panic("boom")
		}
		return Reply{}
	}, ServerOptions{Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go srv.Serve(ln)
	defer srv.Close()
	c, err := Dial(context.Background(), ln.Addr().String(), Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.Call(context.Background(), protocol.CodeGetBrokerClusterInfo, nil, nil); !errors.Is(err, protocol.StatusSystemError) {
		t.Fatalf("panicking handler answered %v", err)
	}
	if _, err := c.Call(context.Background(), protocol.CodeGetRouteInfoByTopic, nil, nil); err != nil {
		t.Fatalf("server did not survive the panic: %v", err)
	}
}

// TestLastReceiveAndAbort: LastReceive is zero until a frame arrives, then moves with each
// frame; Abort closes the connection once, fails waiting calls with ErrClosed and keeps its
// cause as Err.
func TestLastReceiveAndAbort(t *testing.T) {
	svc := newService()
	svc.blocked = newGate()
	srv := startServer(t, svc.handle, ServerOptions{})
	defer svc.blocked.open()
	c := dial(t, srv.addr, Options{})
	if got := c.LastReceive(); !got.IsZero() {
		t.Fatalf("LastReceive before any frame: %v", got)
	}
	before := time.Now()
	if _, err := getMaxOffset(ctxT(t), c, "T", 1); err != nil {
		t.Fatal(err)
	}
	first := c.LastReceive()
	if first.Before(before) || first.After(time.Now()) {
		t.Fatalf("LastReceive %v outside [%v, now]", first, before)
	}
	time.Sleep(2 * time.Millisecond)
	if _, err := getMaxOffset(ctxT(t), c, "T", 1); err != nil {
		t.Fatal(err)
	}
	if second := c.LastReceive(); !second.After(first) {
		t.Fatalf("LastReceive did not move: %v then %v", first, second)
	}

	// A call the server holds: Abort fails it.
	errc := make(chan error, 1)
	c.CallAsync(protocol.CodeQueryConsumerOffset, &protocol.ConsumerOffsetHeader{Topic: "T"}, nil, func(resp *Response, err error) {
		resp.Release()
		errc <- err
	})
	waitPending(t, c, 1)
	cause := errors.New("judged dead")
	if !c.Abort(cause) {
		t.Fatal("the first Abort did not close the connection")
	}
	if c.Abort(errors.New("again")) {
		t.Fatal("a second Abort closed it again")
	}
	if err := <-errc; !errors.Is(err, ErrClosed) || !strings.Contains(err.Error(), "judged dead") {
		t.Fatalf("waiting call: %v", err)
	}
	if n := c.Waiting(); n != 0 {
		t.Fatalf("%d calls waiting after Abort", n)
	}
	if err := c.Err(); err != cause {
		t.Fatalf("Err = %v, want the cause", err)
	}
	select {
	case <-c.Done():
	default:
		t.Fatal("Done is open after Abort")
	}
	_ = c.Close() // waits for the goroutines
}

// TestLastReceiveMovesDuringALargeFrame: a large frame arriving slowly (a big pull response
// over a slow link) moves LastReceive with every recvChunk read, so a connection receiving it is
// not taken for silent.
func TestLastReceiveMovesDuringALargeFrame(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	next := make(chan struct{})
	var wg sync.WaitGroup
	defer wg.Wait()
	defer close(next)
	wg.Go(func() {
		nc, err := ln.Accept()
		if err != nil {
			t.Error(err)
			return
		}
		defer nc.Close()
		var prefix [protocol.FramePrefixSize]byte
		if _, err := io.ReadFull(nc, prefix[:]); err != nil {
			t.Error(err)
			return
		}
		fh, err := protocol.ParseFrameHeader(prefix[:], protocol.DefaultMaxFrameSize)
		if err != nil {
			t.Error(err)
			return
		}
		if _, err := io.ReadFull(nc, make([]byte, fh.TotalSize()-protocol.FramePrefixSize)); err != nil {
			t.Error(err)
			return
		}
		frame := protocol.AppendFrame(nil, uint16(protocol.StatusSuccess), protocol.FlagResponse, fh.RequestID, nil, make([]byte, 4*recvChunk+10))
		// Piece i ends the frame's i-th recvChunk after the prefix; the last piece ends it.
		for off := 0; off < len(frame); {
			end := min(protocol.FramePrefixSize+(off/recvChunk+1)*recvChunk, len(frame))
			if off == 0 {
				end = protocol.FramePrefixSize + recvChunk
			}
			if _, ok := <-next; !ok {
				return
			}
			if _, err := nc.Write(frame[off:end]); err != nil {
				t.Error(err)
				return
			}
			off = end
		}
	})
	c := dial(t, ln.Addr().String(), Options{})
	done := make(chan error, 1)
	c.CallAsync(protocol.CodeGetMaxOffset, nil, nil, func(resp *Response, err error) {
		resp.Release()
		done <- err
	})
	var prev time.Time
	for i := range 4 {
		next <- struct{}{}
		testutil.Eventually(t, fmt.Sprintf("LastReceive to move after piece %d of the frame", i), func() bool { return c.LastReceive().After(prev) })
		prev = c.LastReceive()
	}
	next <- struct{}{}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}
