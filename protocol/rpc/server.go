package rpc

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"runtime/debug"
	"slices"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/petrel-mq/petrel/internal/netguard"
	"github.com/petrel-mq/petrel/internal/ratelog"
	"github.com/petrel-mq/petrel/protocol"
)

// Request is one request frame received by a Server. Header and Body are valid only during the
// handler call.
type Request struct {
	Code   protocol.RequestCode
	Header []byte
	Body   []byte
	// Peer is the connection the request came on.
	Peer *Peer
}

// Reply is what a handler answers: a status, a header (nil for none) and a body. A non-success
// status is sent with an ErrorHeader built from Remark and MasterAddr.
type Reply struct {
	Status     protocol.Status
	Header     protocol.Header
	Body       []byte
	Remark     string
	MasterAddr string
}

// Errorf builds an error reply.
func Errorf(status protocol.Status, format string, args ...any) Reply {
	return Reply{Status: status, Remark: fmt.Sprintf(format, args...)}
}

// Handler serves one request. It runs on the connection's goroutine: requests of one connection
// are served in order, connections in parallel.
type Handler func(req *Request) Reply

// Peer is a server-side connection.
type Peer struct {
	id     uint64
	remote string
	nc     net.Conn
	wmu    sync.Mutex
}

// ID returns a number unique to this connection within its Server.
func (p *Peer) ID() uint64 { return p.id }

// RemoteAddr returns the peer's address.
func (p *Peer) RemoteAddr() string { return p.remote }

// Close closes the peer's connection: the goroutine serving it stops at its next read or write
// and OnDisconnect runs as for any closed connection. Safe to call from any goroutine, more
// than once.
func (p *Peer) Close() error { return p.nc.Close() }

// ServerOptions tune a Server.
type ServerOptions struct {
	// MaxFrameSize bounds request frames (bytes); default protocol.DefaultMaxFrameSize.
	MaxFrameSize int
	// IdleTimeout closes a connection that starts no frame for this long after its previous
	// one; default 0 (never).
	IdleTimeout time.Duration
	// FrameReadTimeout bounds every frame from its first byte to its last, and a connection's
	// first frame from the connection's accept: a connection that sends nothing, or part of a
	// frame, for this long is closed; default DefaultFrameReadTimeout.
	FrameReadTimeout time.Duration
	// WriteTimeout closes a connection whose answers cannot be written for this long (a peer
	// that stopped reading); default DefaultWriteTimeout.
	WriteTimeout time.Duration
	// MaxConns caps open connections; more are closed at once with a log line; default 0
	// (no cap).
	MaxConns int
	// MaxBufferedBytes caps the bytes of request frames being read over all connections: a
	// frame is read into memory as its bytes arrive, and a connection whose frame would pass
	// the cap is closed; default 64 MiB.
	MaxBufferedBytes int64
	// OnDisconnect runs once when a connection closes, after its last request.
	OnDisconnect func(p *Peer)
	// Logger receives connection errors; default slog.Default(). Every line a peer can cause
	// (a refused or closed connection) is rate-limited per reason (ratelog.Reasons).
	Logger *slog.Logger
}

// Defaults of ServerOptions.
const (
	DefaultFrameReadTimeout = 30 * time.Second
	DefaultWriteTimeout     = 30 * time.Second
)

// Buffer sizes of a connection. The read buffer is small: frames larger than it are read
// straight into their own buffer, and a connection that never completes a frame (a scanner, a
// slow sender) costs little. The write buffer is made with the first answer.
const (
	readBufferSize  = 4 << 10
	writeBufferSize = 64 << 10
)

// speaks names the protocol in the line that says a probe reached a port (netguard.Probe).
const speaks = "Petrel's binary protocol"

// Server serves protocol frames with one goroutine per connection. Serve runs until Close.
//
// A peer holds a connection only while it uses it: every frame must be whole within
// FrameReadTimeout of its first byte and a connection's first frame within it of the accept,
// answers must be written within WriteTimeout, a connection idle for IdleTimeout between
// frames is closed, and at most MaxConns are served. The line that closes a connection says
// why, and names the protocol a first frame looks like when it is TLS or HTTP
// (internal/netguard.Sniff); lines are rate-limited per reason.
type Server struct {
	handler Handler
	opts    ServerOptions
	ln      net.Listener
	nextID  atomic.Uint64

	buffered atomic.Int64 // bytes of frames being read, over all connections
	open     atomic.Int32 // connections being served
	warn     ratelog.Reasons

	mu     sync.Mutex
	peers  map[*Peer]struct{}
	closed bool
	wg     sync.WaitGroup
}

// NewServer returns a Server that answers requests with h.
func NewServer(h Handler, opts ServerOptions) *Server {
	if opts.MaxFrameSize <= 0 {
		opts.MaxFrameSize = protocol.DefaultMaxFrameSize
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if opts.FrameReadTimeout <= 0 {
		opts.FrameReadTimeout = DefaultFrameReadTimeout
	}
	if opts.WriteTimeout <= 0 {
		opts.WriteTimeout = DefaultWriteTimeout
	}
	if opts.MaxBufferedBytes <= 0 {
		opts.MaxBufferedBytes = 64 << 20
	}
	return &Server{handler: h, opts: opts, peers: make(map[*Peer]struct{})}
}

// Serve accepts connections on ln until Close; it returns nil after Close.
func (s *Server) Serve(ln net.Listener) error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		_ = ln.Close()
		return nil
	}
	s.ln = ln
	s.wg.Add(1)
	s.mu.Unlock()
	defer s.wg.Done()
	var backoff time.Duration
	for {
		nc, err := ln.Accept()
		if err != nil {
			s.mu.Lock()
			closed := s.closed
			s.mu.Unlock()
			if closed || errors.Is(err, net.ErrClosed) {
				return nil
			}
			// Out of file descriptors, a connection aborted before accept, ...: keep serving
			// the connections there are and try again (as net/http does).
			backoff = min(max(2*backoff, 5*time.Millisecond), time.Second)
			s.warn.Warn(s.opts.Logger, "cannot accept a connection; retrying", "listen", ln.Addr().String(), "err", err, "retryIn", backoff)
			time.Sleep(backoff)
			continue
		}
		backoff = 0
		if tc, ok := nc.(*net.TCPConn); ok {
			_ = tc.SetNoDelay(true)
		}
		accepted := time.Now()
		p := &Peer{id: s.nextID.Add(1), remote: nc.RemoteAddr().String(), nc: nc}
		s.mu.Lock()
		if s.closed {
			s.mu.Unlock()
			_ = nc.Close()
			return nil
		}
		if s.opts.MaxConns > 0 && len(s.peers) >= s.opts.MaxConns {
			s.mu.Unlock()
			s.warn.Warn(s.opts.Logger, "refusing connection: too many connections", "remote", p.remote, "maxConns", s.opts.MaxConns)
			_ = nc.Close()
			continue
		}
		s.peers[p] = struct{}{}
		s.open.Add(1)
		s.wg.Add(1)
		s.mu.Unlock()
		go s.servePeer(p, accepted)
	}
}

// Close stops accepting, closes every connection and waits for their goroutines.
func (s *Server) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		s.wg.Wait()
		return nil
	}
	s.closed = true
	if s.ln != nil {
		_ = s.ln.Close()
	}
	for p := range s.peers {
		_ = p.nc.Close()
	}
	s.mu.Unlock()
	s.wg.Wait()
	return nil
}

// Conns returns the number of connections being served.
func (s *Server) Conns() int { return int(s.open.Load()) }

func (s *Server) servePeer(p *Peer, accepted time.Time) {
	defer s.wg.Done()
	defer func() {
		_ = p.nc.Close()
		s.mu.Lock()
		delete(s.peers, p)
		s.mu.Unlock()
		s.open.Add(-1)
		if s.opts.OnDisconnect != nil {
			s.opts.OnDisconnect(p)
		}
	}()
	br := bufio.NewReaderSize(p.nc, readBufferSize)
	var bw *bufio.Writer
	var prefix [protocol.FramePrefixSize]byte
	var frame, out []byte
	for first := true; ; first = false {
		// Replies wait in bw only while the next request is already buffered (pipelined requests
		// share one write); flush them before the read below can block. NB: this must happen here,
		// not after each reply: a oneway request or an unknown code can be the last buffered frame.
		if bw != nil && bw.Buffered() > 0 && !nextFrameBuffered(br, s.opts.MaxFrameSize) {
			if err := s.flush(p, bw); err != nil {
				s.warn.Info(s.opts.Logger, "closing connection: write failed", "remote", p.remote, "reason", err)
				return
			}
		}
		// The frame's first byte: within IdleTimeout of the previous frame, or, for the first
		// frame, within FrameReadTimeout of the accept. From it on, the frame must be whole
		// within FrameReadTimeout.
		if err := s.awaitFrame(p, br, first, accepted); err != nil {
			s.logClose(p, err, nil, 0, first, accepted)
			return
		}
		start := accepted
		if !first {
			start = time.Now()
		}
		_ = p.nc.SetReadDeadline(start.Add(s.opts.FrameReadTimeout))
		if n, err := io.ReadFull(br, prefix[:]); err != nil {
			s.logClose(p, err, prefix[:n], 0, first, start)
			return
		}
		fh, err := protocol.ParseFrameHeader(prefix[:], s.opts.MaxFrameSize)
		if err == nil && fh.Flags.IsResponse() {
			err = fmt.Errorf("%w: response frame sent to a server", protocol.ErrFrameMalformed)
		}
		if err != nil {
			s.badFrame(p, prefix[:], first, err)
			return
		}
		frame, err = s.readFrame(br, prefix[:], fh.TotalSize(), frame)
		if err != nil {
			s.logClose(p, err, frame, fh.TotalSize(), false, start)
			return
		}
		f, _ := protocol.ParseFrame(frame, s.opts.MaxFrameSize)
		code := protocol.RequestCode(f.Code)
		var rep Reply
		if !code.Known() {
			rep = Errorf(protocol.StatusRequestCodeNotSupported, "request code %d is not supported", f.Code)
		} else {
			rep = s.serve(&Request{Code: code, Header: f.Header, Body: f.Body, Peer: p})
		}
		if cap(frame) > 1<<20 { // do not keep one huge request's buffer for the connection's life
			frame = nil
		}
		if f.Flags.IsOneway() {
			continue
		}
		if bw == nil {
			bw = bufio.NewWriterSize(p.nc, writeBufferSize)
		}
		out = AppendReply(out[:0], f.RequestID, &rep)
		p.wmu.Lock()
		_ = p.nc.SetWriteDeadline(time.Now().Add(s.opts.WriteTimeout))
		_, err = bw.Write(out)
		p.wmu.Unlock()
		if err != nil {
			s.warn.Info(s.opts.Logger, "closing connection: write failed", "remote", p.remote, "reason", err)
			return
		}
		if cap(out) > 1<<20 {
			out = nil
		}
	}
}

// flush writes the replies waiting in bw, within WriteTimeout.
func (s *Server) flush(p *Peer, bw *bufio.Writer) error {
	p.wmu.Lock()
	defer p.wmu.Unlock()
	_ = p.nc.SetWriteDeadline(time.Now().Add(s.opts.WriteTimeout))
	return bw.Flush()
}

// awaitFrame waits until the first byte of the next frame is buffered: at most IdleTimeout
// (none when 0), or, for the connection's first frame, until FrameReadTimeout after the accept.
func (s *Server) awaitFrame(p *Peer, br *bufio.Reader, first bool, accepted time.Time) error {
	if br.Buffered() > 0 {
		return nil
	}
	var deadline time.Time // zero: none
	switch {
	case first:
		deadline = accepted.Add(s.opts.FrameReadTimeout)
	case s.opts.IdleTimeout > 0:
		deadline = time.Now().Add(s.opts.IdleTimeout)
	}
	_ = p.nc.SetReadDeadline(deadline)
	_, err := br.Peek(1)
	return err
}

// logClose logs why a connection is closed after a read failed with err; got holds the bytes of
// the frame read so far, want its size when its prefix was read (else 0), start when it began
// (its first byte, or the accept for the first frame), and first tells whether it was the
// connection's first frame (whose bytes may be another protocol's opening). A peer that closed
// between frames is not logged.
func (s *Server) logClose(p *Peer, err error, got []byte, want int, first bool, start time.Time) {
	if errors.Is(err, net.ErrClosed) {
		return // the server is closing, or the peer was closed on purpose (Peer.Close)
	}
	if first && len(got) > 0 {
		if probe := netguard.Sniff(got); probe != netguard.NoProbe {
			s.warn.Warn(s.opts.Logger, probe.Reason(speaks), "remote", p.remote, "reason", err)
			return
		}
	}
	timeout := errors.Is(err, os.ErrDeadlineExceeded)
	switch {
	case len(got) == 0 && errors.Is(err, io.EOF):
	case len(got) == 0 && timeout && first:
		s.warn.Warn(s.opts.Logger, "closing connection: no request within the frame read timeout of connecting",
			"remote", p.remote, "frameReadTimeout", s.opts.FrameReadTimeout)
	case len(got) == 0 && timeout:
		s.warn.Info(s.opts.Logger, "closing connection: idle", "remote", p.remote, "idleTimeout", s.opts.IdleTimeout)
	case timeout:
		s.warn.Warn(s.opts.Logger, "closing connection: request frame incomplete for the frame read timeout",
			netguard.StalledAttrs(p.remote, int64(len(got)), int64(want), time.Since(start), s.opts.FrameReadTimeout)...)
	case errors.Is(err, errServerBusy):
		s.warn.Warn(s.opts.Logger, "closing connection: frames being read exceed the server's buffer budget",
			"remote", p.remote, "got", len(got), "want", want, "maxBufferedBytes", s.opts.MaxBufferedBytes)
	case len(got) > 0:
		s.warn.Warn(s.opts.Logger, "closing connection: request frame truncated", "remote", p.remote, "got", len(got), "reason", err)
	default:
		s.warn.Info(s.opts.Logger, "closing connection", "remote", p.remote, "reason", err)
	}
}

// badFrame logs why a connection whose frame prefix failed ParseFrameHeader is closed: the
// probe its first bytes look like, or the frame's fault.
func (s *Server) badFrame(p *Peer, prefix []byte, first bool, err error) {
	if first {
		if probe := netguard.Sniff(prefix); probe != netguard.NoProbe {
			s.warn.Warn(s.opts.Logger, probe.Reason(speaks), "remote", p.remote, "reason", err)
			return
		}
	}
	s.warn.Warn(s.opts.Logger, "closing connection: bad frame", "remote", p.remote, "reason", err)
}

// errServerBusy is returned by readFrame when frames being read over all connections would
// pass MaxBufferedBytes.
var errServerBusy = errors.New("rpc: frames being read exceed the server's buffer budget")

// readFrame reads the rest of a frame of n bytes whose prefix was read (within the deadline
// set for the frame). The buffer grows as bytes arrive, not to the announced length at once,
// and the bytes count against MaxBufferedBytes while the frame is read, so clients announcing
// big frames cannot reserve memory they do not send.
func (s *Server) readFrame(br *bufio.Reader, prefix []byte, n int, buf []byte) ([]byte, error) {
	buf = append(buf[:0], prefix...)
	held := int64(0)
	defer func() { s.buffered.Add(-held) }()
	const chunk = 64 << 10
	for len(buf) < n {
		step := min(n-len(buf), chunk)
		if cap(buf)-len(buf) < step {
			if s.buffered.Add(int64(step)) > s.opts.MaxBufferedBytes {
				s.buffered.Add(-int64(step))
				return buf, errServerBusy
			}
			held += int64(step)
			buf = slices.Grow(buf, step)
		}
		m, err := io.ReadFull(br, buf[len(buf):len(buf)+step])
		buf = buf[:len(buf)+m]
		if err != nil {
			return buf, fmt.Errorf("truncated frame (%d of %d bytes): %w", len(buf), n, err)
		}
	}
	return buf, nil
}

// AppendReply appends the response frame for rep to dst.
func AppendReply(dst []byte, requestID uint32, rep *Reply) []byte {
	if rep.Status != protocol.StatusSuccess {
		eh := protocol.ErrorHeader{Remark: rep.Remark, MasterAddr: rep.MasterAddr}
		return protocol.AppendFrame(dst, uint16(rep.Status), protocol.FlagResponse, requestID, &eh, nil)
	}
	return protocol.AppendFrame(dst, uint16(rep.Status), protocol.FlagResponse, requestID, rep.Header, rep.Body)
}

// nextFrameBuffered reports whether the next whole frame is already buffered, in which case the
// reply can wait in the write buffer for the next one (pipelined requests share one write).
func nextFrameBuffered(br *bufio.Reader, maxFrameSize int) bool {
	if br.Buffered() < protocol.FramePrefixSize {
		return false
	}
	p, err := br.Peek(protocol.FramePrefixSize)
	if err != nil {
		return false
	}
	fh, err := protocol.ParseFrameHeader(p, maxFrameSize)
	return err == nil && br.Buffered() >= fh.TotalSize()
}

// serve runs the handler; a panic in it answers StatusSystemError with a logged stack instead
// of taking the whole server down.
func (s *Server) serve(req *Request) (rep Reply) {
	defer func() {
		if v := recover(); v != nil {
			s.warn.Error(s.opts.Logger, "BUG: request handler panicked", "code", req.Code, "remote", req.Peer.remote, "panic", v, "stack", string(debug.Stack()))
			rep = Errorf(protocol.StatusSystemError, "internal error serving %s", req.Code)
		}
	}()
	return s.handler(req)
}

// FileLimitConns returns a connection cap that keeps a process under its open-file limit:
// the limit minus reserve descriptors, at least 16 (no cap, 0, when the limit is unknown).
func FileLimitConns(reserve int) int {
	var rl syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &rl); err != nil || rl.Cur > 1<<30 {
		return 0
	}
	return max(int(rl.Cur)-reserve, 16)
}
