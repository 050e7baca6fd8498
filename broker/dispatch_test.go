package broker

import (
	"errors"
	"math"
	"strconv"
	"strings"
	"testing"

	"github.com/panjf2000/gnet/v2"

	"github.com/petrel-mq/petrel/protocol"
)

// discardConn is a gnet.Conn that takes every write and drops it, so that a test can drive
// dispatch from its own goroutine as the connection's event loop would. Any other method
// panics (the embedded interface is nil): dispatch of a send or a pull calls none.
type discardConn struct{ gnet.Conn }

func (discardConn) Write(p []byte) (int, error) { return len(p), nil }

func (discardConn) Writev(bs [][]byte) (int, error) {
	n := 0
	for _, b := range bs {
		n += len(b)
	}
	return n, nil
}

// requestFrame encodes a request and decodes it again, as the event loop hands it to dispatch.
func requestFrame(t testing.TB, code protocol.RequestCode, h protocol.Header, body []byte) protocol.Frame {
	t.Helper()
	f, err := protocol.ParseFrame(protocol.AppendFrame(nil, uint16(code), 0, 1, h, body), protocol.DefaultMaxFrameSize)
	if err != nil {
		t.Fatal(err)
	}
	return f
}

// dataPath is a running ASYNC_MASTER with topic "Hot" (one queue holding one batch) and a
// connection state whose answers are dropped: the request path of a send and of a pull, on
// their own.
type dataPath struct {
	b          *Broker
	cs         *connState
	send, pull protocol.Frame
	traced     protocol.Frame // a send with a TraceHeader
}

func newDataPath(t testing.TB, edit func(*Config)) *dataPath {
	t.Helper()
	b := startEdited(t, edit)
	if _, err := b.topics.upsert(protocol.TopicConfig{Topic: "Hot", ReadQueueNums: 1, WriteQueueNums: 1, Perm: protocol.PermReadWrite}); err != nil {
		t.Fatal(err)
	}
	p := &dataPath{b: b, cs: &connState{c: discardConn{}, remote: "test"}}
	p.send = requestFrame(t, protocol.CodeSendMessage, nil, buildBatch("Hot", 0, "a message of the hot path"))
	p.traced = requestFrame(t, protocol.CodeSendMessage, &protocol.TraceHeader{ID: 1}, buildBatch("Hot", 0, "a message of the hot path"))
	p.pull = requestFrame(t, protocol.CodePullMessage, &protocol.PullRequestHeader{
		ConsumerGroup: "g", Topic: "Hot", QueueOffset: 0, MaxMessages: 1, MaxBytes: 1 << 20, CommitOffset: -1,
	}, nil)
	p.serve(p.send) // the batch every pull reads, and the store's first write out of the way
	return p
}

// serve dispatches a copy of f made here, so that a frame dispatch let escape would cost an
// allocation per request, as the event loop's frame would.
func (p *dataPath) serve(f protocol.Frame) {
	g := f
	p.b.dispatch(p.cs, &g)
}

// TestDispatchDataPathAllocs guards the hot path: dispatching a send (ASYNC_FLUSH, answered at
// once), untraced and traced (recorded in the trace ring), a pull that finds its batch, and one
// that commits the group's offset (checked against the queue's max offset) allocates nothing.
func TestDispatchDataPathAllocs(t *testing.T) {
	p := newDataPath(t, nil)
	commit := requestFrame(t, protocol.CodePullMessage, &protocol.PullRequestHeader{
		ConsumerGroup: "g", Topic: "Hot", QueueOffset: 0, MaxMessages: 1, MaxBytes: 1 << 20, CommitOffset: 1,
	}, nil)
	withLife := requestFrame(t, protocol.CodePullMessage, &protocol.PullRequestHeader{
		ConsumerGroup: "g", Topic: "Hot", QueueOffset: 0, MaxMessages: 1, MaxBytes: 1 << 20, CommitOffset: 1,
		Incarnation: p.b.store.QueueIncarnation([]byte("Hot"), 0), HasIncarnation: true,
	}, nil)
	for _, tc := range []struct {
		name string
		f    protocol.Frame
	}{{"send", p.send}, {"traced send", p.traced}, {"pull", p.pull}, {"pull with a commit", commit}, {"pull with a commit and the queue's incarnation", withLife}} {
		p.serve(tc.f) // scratch buffers grown once
		if n := testing.AllocsPerRun(200, func() { p.serve(tc.f) }); n != 0 {
			t.Errorf("dispatch of a %s: %v allocations, want 0", tc.name, n)
		}
	}
}

// BenchmarkDispatch measures the broker's request path for one request without the network:
// dispatch, the handler and the answer's encoding.
func BenchmarkDispatch(b *testing.B) {
	p := newDataPath(b, func(c *Config) {
		// Segments and consume-queue files large enough that the benchmark's sends rarely roll.
		c.MappedFileSizeCommitLog, c.ConsumeQueueFileEntries = 256<<20, 300_000
	})
	for _, bc := range []struct {
		name string
		f    protocol.Frame
	}{{"send", p.send}, {"traced send", p.traced}, {"pull", p.pull}} {
		b.Run(bc.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				p.serve(bc.f)
			}
		})
	}
}

// TestRoutesCoverTheProtocol checks the dispatch table against the protocol package: every
// request code it defines is either served on the client port or named as served elsewhere,
// the table names no other code, and each entry is well formed.
func TestRoutesCoverTheProtocol(t *testing.T) {
	served := 0
	for c := 0; c <= math.MaxUint16; c++ {
		code := protocol.RequestCode(c)
		var rt route
		if c < len(routes) {
			rt = routes[c]
		}
		handlers := boolInt(rt.loop != nil) + boolInt(rt.reply != nil)
		switch {
		case !code.Known():
			if handlers != 0 || rt.elsewhere != "" {
				t.Errorf("%v: in the table, but not a code of the protocol package", code)
			}
			continue
		case handlers == 0 && rt.elsewhere == "":
			t.Errorf("%v: neither served on the client port nor named as served elsewhere", code)
		case handlers > 1:
			t.Errorf("%v: both a loop and a reply handler", code)
		case handlers == 1 && rt.elsewhere != "":
			t.Errorf("%v: served, and said to be served by %s", code, rt.elsewhere)
		}
		if handlers == 0 {
			if rt.worker || rt.served != anyMember || rt.toMaster != "" {
				t.Errorf("%v: not served, but has serving rules %+v", code, rt)
			}
			if routeOf(code) != nil {
				t.Errorf("%v: routeOf finds a route for a code served elsewhere", code)
			}
			continue
		}
		served++
		if routeOf(code) != &routes[c] {
			t.Errorf("%v: routeOf does not find its route", code)
		}
		if rt.worker && rt.reply == nil {
			t.Errorf("%v: on a worker without a reply handler", code)
		}
		if (rt.served != anyMember) != (rt.toMaster != "") {
			t.Errorf("%v: served %v with NOT_MASTER remark %q: a refusal needs one, only a refusal", code, rt.served, rt.toMaster)
		}
	}
	if served == 0 {
		t.Fatal("the table serves no code")
	}
}

// String names a verdict in test failures.
func (v verdict) String() string {
	switch v {
	case refuseShuttingDown:
		return "refuseShuttingDown"
	case refuseNotSupported:
		return "refuseNotSupported"
	case refuseNotMaster:
		return "refuseNotMaster"
	case serveOnLoop:
		return "serveOnLoop"
	case serveOnWorker:
		return "serveOnWorker"
	}
	return "verdict(" + strconv.Itoa(int(v)) + ")"
}

// TestDecide is the table of dispatch decisions: what the broker does with a request, by code,
// shutdown and the member's role.
func TestDecide(t *testing.T) {
	var (
		master      = member{master: true}
		handingOver = member{master: true, handingOver: true}
		slave       = member{}
	)
	for _, tc := range []struct {
		code     protocol.RequestCode
		stopping bool
		m        member
		want     verdict
	}{
		// The data path: sends only on a master that keeps its role, pulls everywhere.
		{protocol.CodeSendMessage, false, master, serveOnLoop},
		{protocol.CodeSendMessage, false, handingOver, refuseNotMaster},
		{protocol.CodeSendMessage, false, slave, refuseNotMaster},
		{protocol.CodePullMessage, false, master, serveOnLoop},
		{protocol.CodePullMessage, false, handingOver, serveOnLoop},
		{protocol.CodePullMessage, false, slave, serveOnLoop},

		// Topic updates: on the master, handing over or not, and on a worker (an fsync).
		{protocol.CodeUpdateAndCreateTopic, false, master, serveOnWorker},
		{protocol.CodeUpdateAndCreateTopic, false, handingOver, serveOnWorker},
		{protocol.CodeUpdateAndCreateTopic, false, slave, refuseNotMaster},

		// In-memory lookups on the loop, on every member.
		{protocol.CodeQueryConsumerOffset, false, slave, serveOnLoop},
		{protocol.CodeUpdateConsumerOffset, false, slave, serveOnLoop},
		{protocol.CodeGetMaxOffset, false, master, serveOnLoop},
		{protocol.CodeGetMinOffset, false, slave, serveOnLoop},
		{protocol.CodeGetTopicStatsInfo, false, slave, serveOnLoop},
		{protocol.CodeGetAllTopicConfig, false, slave, serveOnLoop},
		{protocol.CodeGetAllConsumerOffset, false, master, serveOnLoop},
		{protocol.CodeMergeConsumerOffsets, false, slave, serveOnLoop},
		{protocol.CodeHeartbeat, false, slave, serveOnLoop},
		{protocol.CodeUnregisterClient, false, master, serveOnLoop},
		{protocol.CodeGetConsumerListByGroup, false, slave, serveOnLoop},

		// Requests that may wait, on a worker, on every member (their handlers decide).
		{protocol.CodeGetConsumeStats, false, slave, serveOnWorker},
		{protocol.CodeGetBrokerRuntimeInfo, false, master, serveOnWorker},
		{protocol.CodeGetLogChecksum, false, slave, serveOnWorker},
		{protocol.CodeGetHAStatus, false, handingOver, serveOnWorker},
		{protocol.CodeElectMaster, false, slave, serveOnWorker},
		{protocol.CodeElectMaster, false, handingOver, serveOnWorker},
		{protocol.CodeRaftReadIndex, false, slave, serveOnWorker},

		// Codes not served on the client port: the NameServer's, the HA port's, unknown ones.
		{protocol.CodeRegisterBroker, false, master, refuseNotSupported},
		{protocol.CodeGetRouteInfoByTopic, false, slave, refuseNotSupported},
		{protocol.CodeHAPull, false, master, refuseNotSupported},
		{protocol.CodeHALeave, false, master, refuseNotSupported},
		{0, false, master, refuseNotSupported},
		{9999, false, master, refuseNotSupported},
		{math.MaxUint16, false, slave, refuseNotSupported},

		// A broker that is stopping refuses everything, known or not.
		{protocol.CodeSendMessage, true, master, refuseShuttingDown},
		{protocol.CodeSendMessage, true, slave, refuseShuttingDown},
		{protocol.CodePullMessage, true, slave, refuseShuttingDown},
		{protocol.CodeGetHAStatus, true, master, refuseShuttingDown},
		{9999, true, master, refuseShuttingDown},
	} {
		rt, got := decide(tc.code, tc.stopping, tc.m)
		if got != tc.want {
			t.Errorf("decide(%v, stopping=%t, %+v) = %v, want %v", tc.code, tc.stopping, tc.m, got, tc.want)
		}
		if (got == serveOnLoop || got == serveOnWorker || got == refuseNotMaster) && rt != routeOf(tc.code) {
			t.Errorf("decide(%v): route %p, want the table's %p", tc.code, rt, routeOf(tc.code))
		}
	}
}

// TestCodesServedElsewhere sends every code the table names as served elsewhere (and an unknown
// one) to a running broker's client port: each is answered REQUEST_CODE_NOT_SUPPORTED naming the
// code, and the connection goes on serving.
func TestCodesServedElsewhere(t *testing.T) {
	b := startBroker(t, testConfig(t.TempDir()))
	defer b.Close()
	c := dial(t, b.Addr())
	codes := []protocol.RequestCode{4242}
	for i, rt := range routes {
		if rt.elsewhere != "" {
			codes = append(codes, protocol.RequestCode(i))
		}
	}
	for _, code := range codes {
		_, err := c.Call(ctx5s(t), code, nil, nil)
		var pe *protocol.Error
		if !errors.As(err, &pe) || pe.Status != protocol.StatusRequestCodeNotSupported || !strings.Contains(pe.Remark, code.String()) {
			t.Errorf("%v on the client port: %v; want REQUEST_CODE_NOT_SUPPORTED naming the code", code, err)
		}
	}
	createTopic(t, c, "After", 1)
	send(t, c, "After", 0, "still served")
}
