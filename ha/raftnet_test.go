package ha

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/hashicorp/raft"
	"golang.org/x/sys/unix"

	"github.com/petrel-mq/petrel/internal/testutil"
)

// startGuardedGroup starts three members on loopback with the Raft port guard's timeout and cap,
// logging to logs, and returns them once one leads.
func startGuardedGroup(t *testing.T, frameTimeout time.Duration, maxConns int, logs *testutil.SyncBuffer) []*RaftNode {
	t.Helper()
	return startNodeGroup(t, func(c *RaftConfig) {
		c.FrameReadTimeout, c.MaxConns = frameTimeout, maxConns
		c.Logger = slog.New(slog.NewTextHandler(logs, nil)).With("member", c.SelfID)
	})
}

// startNodeGroup starts three RaftNodes b1-b3 on loopback with 150 ms timeouts, each config
// changed by adjust (when not nil), closes them when the test ends and returns them once the
// group's leader commits.
func startNodeGroup(t *testing.T, adjust func(*RaftConfig)) []*RaftNode {
	t.Helper()
	addrs := testutil.FreeAddrs(t, 3)
	var peers []RaftPeer
	for i, a := range addrs {
		peers = append(peers, RaftPeer{ID: fmt.Sprintf("b%d", i+1), Addr: a})
	}
	dir := t.TempDir()
	var nodes []*RaftNode
	t.Cleanup(func() {
		for _, n := range nodes {
			_ = n.Close()
		}
	})
	for _, p := range peers {
		cfg := RaftConfig{SelfID: p.ID, Peers: peers, Dir: filepath.Join(dir, p.ID),
			HeartbeatTimeout: 150 * time.Millisecond, ElectionTimeout: 150 * time.Millisecond}
		if adjust != nil {
			adjust(&cfg)
		}
		n, err := StartRaftNode(cfg)
		if err != nil {
			t.Fatal(err)
		}
		nodes = append(nodes, n)
	}
	waitCommit(t, nodes)
	return nodes
}

// waitCommit waits until the group's leader commits a command.
func waitCommit(t *testing.T, nodes []*RaftNode) {
	t.Helper()
	testutil.Eventually(t, "the group's leader commits", func() bool {
		for _, n := range nodes {
			if n.IsLeader() {
				return n.Propose(Command{Kind: CmdNoop}, time.Second) == nil
			}
		}
		return false
	})
}

// TestRaftPortGuard: on a member's Raft port, an RPC left incomplete, a connection that sends
// nothing, a TLS ClientHello, first bytes that open no RPC and an RPC that does not decode are
// each closed with a line that says why and names the peer's address, at WARN as on every other
// port (never ERROR: a peer's bad input), and the group goes on committing.
func TestRaftPortGuard(t *testing.T) {
	var logs testutil.SyncBuffer
	nodes := startGuardedGroup(t, 300*time.Millisecond, 16, &logs)
	addr := nodes[0].cfg.Peers[0].Addr
	for _, tc := range []struct {
		name  string
		bytes []byte
		line  string
	}{
		// An AppendEntries type byte and the start of its msgpack map, then silence.
		{"incomplete RPC", []byte{0x00, 0x8f, 0xa4}, "closing Raft connection: request incomplete for the frame read timeout"},
		{"silent", nil, "closing Raft connection: no request within the frame read timeout of connecting"},
		{"TLS", []byte{0x16, 0x03, 0x01, 0x02, 0x00, 0x01, 0x00, 0x01, 0xfc}, "looks like a TLS ClientHello; this port speaks hashicorp/raft's binary protocol"},
		{"HTTP", []byte("GET / HTTP/1.1\r\n\r\n"), "looks like an HTTP/1.x request; this port speaks hashicorp/raft's binary protocol"},
		// Petrel's protocol on the wrong port: 12 bytes of a frame prefix.
		{"Petrel frame prefix", []byte{0, 0, 0, 52, 0, 105, 0, 1, 0, 0, 0, 7}, "closing Raft connection: its first bytes are not hashicorp/raft's binary protocol"},
		// A RequestVote type byte and a one-entry msgpack map whose key is 0xc1, a byte
		// msgpack never uses: hashicorp/raft's own line.
		{"undecodable RPC", []byte{0x01, 0x81, 0xc1, 0xc1, 0xc1, 0xc1}, "raft: failed to decode incoming command"},
	} {
		nc, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		if len(tc.bytes) > 0 {
			if _, err := nc.Write(tc.bytes); err != nil {
				t.Fatal(err)
			}
		}
		testutil.WaitClosed(t, nc, tc.name)
		parts := []string{"level=WARN", tc.line}
		switch tc.name {
		case "undecodable RPC": // hashicorp/raft's line names no connection: the guard adds it
			parts = append(parts, "remote="+nc.LocalAddr().String(), "error=")
		case "incomplete RPC":
			parts = append(parts, "remote="+nc.LocalAddr().String(), "got=3", "waited=") // the facts of every port's slow-sender line
		default:
			parts = append(parts, "remote="+nc.LocalAddr().String())
		}
		logs.WaitForLine(t, parts...)
		nc.Close()
	}
	waitCommit(t, nodes)
	if logs.HasLine("level=ERROR", "closing") || logs.HasLine("level=ERROR", "failed to decode") {
		t.Fatalf("a peer's bad input logged at ERROR:\n%s", logs.String())
	}
}

// TestRaftOpening: the first bytes of every RPC hashicorp/raft sends pass the guard's check;
// other protocols' openings do not.
func TestRaftOpening(t *testing.T) {
	for _, tc := range []struct {
		first []byte
		want  bool
	}{
		{[]byte{0x00, 0x88}, true}, // AppendEntries, fixmap
		{[]byte{0x04, 0x8f}, true}, // RequestPreVote
		{[]byte{0x02, 0xde}, true}, // InstallSnapshot, map16
		{[]byte{0x03, 0xdf}, true}, // TimeoutNow, map32
		{[]byte{0x05, 0x88}, false},
		{[]byte{0x00, 0x00}, false}, // a Petrel frame's length
		{[]byte{0x00, 0x90}, false}, // a msgpack array
		{[]byte("GE"), false},
	} {
		if got := raftOpening(tc.first); got != tc.want {
			t.Errorf("raftOpening(% x) = %v, want %v", tc.first, got, tc.want)
		}
	}
}

// TestRaftPortFlood: a flood of silent and junk connections on a member's Raft port never
// holds more than the cap, is closed within the frame read timeout, costs a bounded heap, and
// leaves a group that commits again.
func TestRaftPortFlood(t *testing.T) {
	const conns, maxConns = 500, 32
	var logs testutil.SyncBuffer
	nodes := startGuardedGroup(t, 300*time.Millisecond, maxConns, &logs)
	stream := nodes[0].stream
	r := testutil.FloodUntilClosed(t, stream.Addr().String(), conns, [][]byte{nil, {0x00, 0x8f}},
		stream.Open, func() { waitCommit(t, nodes) })
	r.Check(t, maxConns, 16<<20)
	logs.WaitForLine(t, "refusing Raft connection: raftMaxConnections reached")
}

// raftAnswerer is one member's Raft transport on addr that grants every vote, for transport
// tests; close stops it and closes its port (every connection it accepted).
type raftAnswerer struct {
	trans *raft.NetworkTransport
	done  chan struct{}
	wg    sync.WaitGroup
}

func startRaftAnswerer(t *testing.T, addr string) *raftAnswerer {
	t.Helper()
	tcp, err := net.ResolveTCPAddr("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	stream, err := listenRaft(addr, tcp, DefaultRaftFrameReadTimeout, DefaultRaftMaxConns, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	a := &raftAnswerer{done: make(chan struct{})}
	a.trans = raft.NewNetworkTransportWithConfig(&raft.NetworkTransportConfig{
		Stream: stream, MaxPool: 3, Timeout: 2 * time.Second, Logger: raftLogger(slog.New(slog.DiscardHandler), stream.Guarded),
	})
	a.wg.Go(func() {
		for {
			select {
			case rpc := <-a.trans.Consumer():
				rpc.Respond(&raft.RequestVoteResponse{Term: 1, Granted: true}, nil)
			case <-a.done:
				return
			}
		}
	})
	return a
}

func (a *raftAnswerer) close() {
	_ = a.trans.Close()
	close(a.done)
	a.wg.Wait()
}

// TestPooledConnectionClosedByMember: a member restarts (its port closes every connection it
// accepted) after another member's transport pooled a connection to it; the next vote request
// is written on a new connection and answered, where the pooled one would fail with EOF and
// cost the candidate that vote.
func TestPooledConnectionClosedByMember(t *testing.T) {
	addrs := testutil.FreeAddrs(t, 2)
	voter := startRaftAnswerer(t, addrs[0])
	candidate := startRaftAnswerer(t, addrs[1])
	defer candidate.close()

	vote := func() error {
		var resp raft.RequestVoteResponse
		err := candidate.trans.RequestVote("v", raft.ServerAddress(addrs[0]), &raft.RequestVoteRequest{
			RPCHeader: raft.RPCHeader{ID: []byte("c"), Addr: []byte(addrs[1])}, Term: 1,
		}, &resp)
		if err == nil && !resp.Granted {
			err = errors.New("vote not granted")
		}
		return err
	}
	if err := vote(); err != nil {
		t.Fatalf("first vote: %v", err)
	}
	voter.close() // the restart: its port closes the pooled connection's other end
	voter = startRaftAnswerer(t, addrs[0])
	defer voter.close()
	// The member's close is seen by the peek once its FIN has arrived: on loopback, at once.
	for i := range 3 {
		if err := vote(); err != nil {
			t.Fatalf("vote %d after the member restarted, on the connection pooled before: %v", i+1, err)
		}
	}
}

// TestPeerClosed: the peek tells a connection its peer closed or reset from a live, quiet one;
// bytes waiting (an answer the pipeline's decoder has yet to read) keep it alive even when the
// peer closed after them, and the peek consumes nothing.
func TestPeerClosed(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	pair := func() (client, server net.Conn) {
		c, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		s, err := ln.Accept()
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = c.Close(); _ = s.Close() })
		return c, s
	}
	quiet, _ := pair()
	if peerClosed(quiet) {
		t.Fatal("a live, quiet connection was taken for closed")
	}
	closed, s := pair()
	_ = s.Close()
	testutil.Eventually(t, "the peer's close is seen", func() bool { return peerClosed(closed) })
	reset, s := pair()
	_ = s.(*net.TCPConn).SetLinger(0)
	_ = s.Close()
	testutil.Eventually(t, "the peer's reset is seen", func() bool { return peerClosed(reset) })
	answered, s := pair()
	if _, err := s.Write([]byte("x")); err != nil {
		t.Fatal(err)
	}
	_ = s.Close()
	testutil.Eventually(t, "the answer has arrived", func() bool { return waiting(t, answered) > 0 })
	if peerClosed(answered) {
		t.Fatal("a connection with an answer waiting was taken for closed")
	}
	b := make([]byte, 1)
	if _, err := io.ReadFull(answered, b); err != nil || b[0] != 'x' {
		t.Fatalf("the peek consumed the answer: %q, %v", b, err)
	}
	testutil.Eventually(t, "the close after the answer is seen once it is read", func() bool { return peerClosed(answered) })
}

// waiting returns the bytes waiting to be read on conn (FIONREAD).
func waiting(t *testing.T, conn net.Conn) int {
	t.Helper()
	rc, err := conn.(syscall.Conn).SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	if err := rc.Control(func(fd uintptr) { n, err = unix.IoctlGetInt(int(fd), unix.SIOCINQ) }); err != nil {
		t.Fatal(err)
	}
	if err != nil {
		t.Fatal(err)
	}
	return n
}
