package broker

import (
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
}

func newDataPath(t testing.TB, edit func(*Config)) *dataPath {
	t.Helper()
	cfg := testConfig(t.TempDir())
	if edit != nil {
		edit(&cfg)
	}
	b := startBroker(t, cfg)
	t.Cleanup(func() { _ = b.Close() })
	if _, err := b.topics.upsert(protocol.TopicConfig{Topic: "Hot", ReadQueueNums: 1, WriteQueueNums: 1, Perm: protocol.PermReadWrite}); err != nil {
		t.Fatal(err)
	}
	p := &dataPath{b: b, cs: &connState{c: discardConn{}, remote: "test"}}
	p.send = requestFrame(t, protocol.CodeSendMessage, nil, buildBatch("Hot", 0, "a message of the hot path"))
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
// once) and a pull that finds its batch allocates nothing.
func TestDispatchDataPathAllocs(t *testing.T) {
	p := newDataPath(t, nil)
	for _, tc := range []struct {
		name string
		f    protocol.Frame
	}{{"send", p.send}, {"pull", p.pull}} {
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
	}{{"send", p.send}, {"pull", p.pull}} {
		b.Run(bc.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				p.serve(bc.f)
			}
		})
	}
}
