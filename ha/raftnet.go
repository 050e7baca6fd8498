package ha

import (
	"encoding/json"
	"fmt"
	"log/slog"
	"net"
	"sort"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"

	"github.com/petrel-mq/petrel/internal/netguard"
	"github.com/petrel-mq/petrel/internal/ratelog"
)

// Defaults of the Raft port's guard (RaftConfig).
const (
	// DefaultRaftFrameReadTimeout bounds an RPC from its first byte to its last, and a
	// connection's first RPC from its accept.
	DefaultRaftFrameReadTimeout = 30 * time.Second
	// DefaultRaftMaxConns caps the Raft port's connections: each other member holds a few
	// (hashicorp/raft pools up to three per peer, plus one for pipelined appends).
	DefaultRaftMaxConns = 64
)

// raftKeepAlive probes the Raft port's idle connections, so that those of a member that
// vanished without closing them (a partition, a machine lost) are closed within about 20 s
// rather than hold a slot of the cap for the system's default of minutes.
var raftKeepAlive = net.KeepAliveConfig{Enable: true, Idle: 5 * time.Second, Interval: 5 * time.Second, Count: 3}

// raftStream is the Raft transport's stream layer (raft.StreamLayer): a netguard.Guarded
// listener and plain TCP dials.
//
// The guard's rules fit the transport: it serves a connection's RPCs in turn and answers each
// before it reads the next one's type byte, so an RPC must be whole within the frame read
// timeout of its first byte and a connection's first RPC within it of the accept, while a
// pooled connection may stay idle between RPCs as long as it likes (hashicorp/raft reuses
// pooled connections without a check: closing an idle one would fail the vote or append that
// takes it next).
type raftStream struct {
	*netguard.Guarded
	advertise net.Addr
}

// listenRaft listens on addr (advertised as advertise) for a Raft transport.
func listenRaft(addr string, advertise net.Addr, frameTimeout time.Duration, maxConns int, log *slog.Logger) (*raftStream, error) {
	g, err := netguard.Listen(addr, netguard.GuardConfig{
		FrameTimeout: frameTimeout,
		MaxConns:     maxConns,
		MaxConnsKey:  "raftMaxConnections",
		Port:         "Raft",
		Speaks:       "hashicorp/raft's binary protocol",
		Opens:        raftOpening,
		OpeningLen:   2,
		KeepAlive:    raftKeepAlive,
		Logger:       log,
	})
	if err != nil {
		return nil, err
	}
	return &raftStream{Guarded: g, advertise: advertise}, nil
}

// raftMaxRPCType is the highest RPC type byte hashicorp/raft's NetworkTransport sends (v1.8:
// AppendEntries 0, RequestVote 1, InstallSnapshot 2, TimeoutNow 3, RequestPreVote 4). An
// upgrade that adds a type must raise it, or the guard closes the connections that send it.
const raftMaxRPCType = 4

// raftOpening reports whether first, a connection's first two bytes, open a request of
// hashicorp/raft's NetworkTransport: it sends nothing before its first RPC, and an RPC is its
// type byte and the request struct as a msgpack map (fixmap, map16 or map32). Anything else
// (a Petrel frame's length, a stray line of text) is a peer that does not speak it: the guard
// says so at WARN and closes the connection, where the transport would log a failed decode at
// ERROR.
func raftOpening(first []byte) bool {
	m := first[1]
	return first[0] <= raftMaxRPCType && (m&0xf0 == 0x80 || m == 0xde || m == 0xdf)
}

// Addr returns the advertised address (the member's Raft address in raftPeers).
func (s *raftStream) Addr() net.Addr { return s.advertise }

// Dial opens a connection to another member: a raftConn, which the transport may pool.
func (s *raftStream) Dial(address raft.ServerAddress, timeout time.Duration) (net.Conn, error) {
	c, err := net.DialTimeout("tcp", string(address), timeout)
	if err != nil {
		return nil, err
	}
	return &raftConn{conn: c, addr: string(address), timeout: timeout}, nil
}

// raftConn is a connection to another member that is replaced, before a request is written on
// it, when the member already closed it.
//
// hashicorp/raft's NetworkTransport pools connections and takes a pooled one without a check.
// Followers call each other only in elections, so the connection a follower pooled in the last
// election is often one the other member closed since (it restarted, or its guard closed it):
// the vote request written on it fails with EOF, the candidate misses that vote, and the group
// waits one more election timeout for a master. So before a write with no read in progress,
// raftConn peeks at the socket without blocking: end of stream or a reset, with nothing left to
// read before it, means the connection is dead, and it dials the member again and writes there,
// the deadlines set before carried over. Bytes waiting are never taken for a dead connection: on
// a pipeline the answer to an earlier append may wait there while its decoder is between
// answers. A member that vanished without closing (a partition) is not seen: the request times
// out as before.
type raftConn struct {
	addr    string
	timeout time.Duration
	reading atomic.Int32

	mu sync.Mutex
	// conn is the current connection; readDeadline and writeDeadline are the last set, for a
	// replacement; closed is set by Close (a replacement dialled meanwhile is closed).
	conn                        net.Conn
	readDeadline, writeDeadline time.Time
	closed                      bool
}

func (c *raftConn) current() net.Conn {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.conn
}

// Read reads from the current connection.
func (c *raftConn) Read(p []byte) (int, error) {
	c.reading.Add(1)
	defer c.reading.Add(-1)
	return c.current().Read(p)
}

// Write writes p, on a new connection to the member when no read is in progress and the current
// one was closed by the member (peerClosed). The dial runs without the lock, so that Close and
// the deadline setters never wait for it.
func (c *raftConn) Write(p []byte) (int, error) {
	conn := c.current()
	if c.reading.Load() != 0 || !peerClosed(conn) {
		return conn.Write(p)
	}
	fresh, err := net.DialTimeout("tcp", c.addr, c.timeout)
	if err != nil {
		return 0, fmt.Errorf("the member closed this pooled connection and a new one failed: %w", err)
	}
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		_ = fresh.Close()
		return 0, net.ErrClosed
	}
	_ = fresh.SetReadDeadline(c.readDeadline)
	_ = fresh.SetWriteDeadline(c.writeDeadline)
	old := c.conn
	c.conn = fresh
	c.mu.Unlock()
	_ = old.Close()
	return fresh.Write(p)
}

// peerClosed reports whether conn's peer has closed or reset it and nothing is left to read
// before that, without blocking (a peek of the socket's receive queue).
func peerClosed(conn net.Conn) bool {
	sc, ok := conn.(syscall.Conn)
	if !ok {
		return false
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return false
	}
	closed := false
	var b [1]byte
	_ = rc.Read(func(fd uintptr) bool {
		n, _, err := syscall.Recvfrom(int(fd), b[:], syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
		switch {
		case err == nil:
			closed = n == 0 // end of stream; bytes waiting are an answer still to be read
		default:
			closed = err != syscall.EAGAIN && err != syscall.EINTR // a reset or the like
		}
		return true
	})
	return closed
}

// Close closes the current connection; a replacement being dialled is closed when it is made.
func (c *raftConn) Close() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.closed = true
	return c.conn.Close()
}

// LocalAddr returns the current connection's local address.
func (c *raftConn) LocalAddr() net.Addr { return c.current().LocalAddr() }

// RemoteAddr returns the current connection's remote address.
func (c *raftConn) RemoteAddr() net.Addr { return c.current().RemoteAddr() }

// SetDeadline sets both deadlines of the current connection and of a replacement.
func (c *raftConn) SetDeadline(t time.Time) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.readDeadline, c.writeDeadline = t, t
	return c.conn.SetDeadline(t)
}

// SetReadDeadline sets the read deadline of the current connection and of a replacement.
func (c *raftConn) SetReadDeadline(t time.Time) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.readDeadline = t
	return c.conn.SetReadDeadline(t)
}

// SetWriteDeadline sets the write deadline of the current connection and of a replacement.
func (c *raftConn) SetWriteDeadline(t time.Time) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.writeDeadline = t
	return c.conn.SetWriteDeadline(t)
}

// raftLogger returns hashicorp/raft's logger for a member: warnings and errors only, written
// as JSON that raftLogWriter passes to log, rate-limited per message (a peer that is down
// makes the leader warn every heartbeat; a stranger on the port makes the transport fail to
// decode what it sent, which is a peer's bad input: WARN, as on every other port).
func raftLogger(log *slog.Logger, guard *netguard.Guarded) hclog.Logger {
	return hclog.New(&hclog.LoggerOptions{
		Name:       "raft",
		Level:      hclog.Warn,
		Output:     &raftLogWriter{l: log, guard: guard},
		JSONFormat: true,
	})
}

// raftPeerInput are hashicorp/raft's ERROR messages that a remote peer's bad input causes,
// not a fault of this member or of the group: the transport could not decode what a
// connection sent (a stranger whose first bytes passed raftOpening, or a member of another
// version). They are logged at WARN, as every port logs bad input, with the address of the
// connection the transport then closes (the line itself names none: netguard's ServerFailed).
var raftPeerInput = map[string]bool{"failed to decode incoming command": true}

// raftLogWriter passes the JSON lines of raftLogger to a slog logger: the message as "raft: "
// and the message, the fields as attributes, through ratelog.Reasons.
type raftLogWriter struct {
	l     *slog.Logger
	guard *netguard.Guarded // the member's Raft port (nil: lines of raftPeerInput name no remote)
	rate  ratelog.Reasons
}

func (w *raftLogWriter) Write(p []byte) (int, error) {
	var line map[string]any
	if err := json.Unmarshal(p, &line); err != nil {
		w.rate.Warn(w.l, "raft: "+string(p))
		return len(p), nil
	}
	msg, _ := line["@message"].(string)
	level, _ := line["@level"].(string)
	keys := make([]string, 0, len(line))
	for k := range line {
		switch k {
		case "@message", "@level", "@timestamp":
		default:
			keys = append(keys, k)
		}
	}
	sort.Strings(keys)
	args := make([]any, 0, 2*len(keys))
	for _, k := range keys {
		name := k
		if k == "@module" {
			name = "module"
		}
		args = append(args, name, line[k])
	}
	switch {
	case level == "error" && !raftPeerInput[msg]:
		w.rate.Error(w.l, "raft: "+msg, args...)
	case raftPeerInput[msg] && w.guard != nil:
		w.guard.ServerFailed("raft: "+msg, args...)
	default:
		w.rate.Warn(w.l, "raft: "+msg, args...)
	}
	return len(p), nil
}
