package fakebroker

import (
	"bufio"
	"errors"
	"io"
	"log/slog"
	"net"
	"sync"

	"github.com/petrel-mq/petrel/protocol"
	"github.com/petrel-mq/petrel/protocol/rpc"
)

// answer is what a handler decides about a request: a reply (rep), no reply and the
// connection closed (Drop), or a reply that later gives when it returns, written then while the
// connection's next requests are served (a held pull, which the real broker parks too). later
// returns early when stop is closed (the server is closing).
type answer struct {
	rep   rpc.Reply
	v     Verdict
	later func(stop <-chan struct{}) rpc.Reply
}

// handler serves one request of a server's connection.
type handler func(req *rpc.Request) answer

// server serves the protocol on one listener with a goroutine per connection. It serves a
// connection's requests one at a time, in order, and writes each answer before it reads the
// next request (a held pull excepted): a request that a handler holds delays the requests
// behind it on its connection, as a stalled broker would, and never the answers to those
// before it. (protocol/rpc.Server, the NameServer's, keeps answers to pipelined requests back
// until it would block on a read, which a held request would stall.)
type server struct {
	h       handler
	log     *slog.Logger
	ln      net.Listener
	closing chan struct{} // closed by close: held pulls end

	mu     sync.Mutex // guards conns, closed
	conns  map[net.Conn]struct{}
	closed bool
	wg     sync.WaitGroup // the accept loop, every connection's goroutine and held pulls
}

// serve starts serving ln with h.
func serve(ln net.Listener, h handler, log *slog.Logger) *server {
	s := &server{h: h, log: log, ln: ln, closing: make(chan struct{}), conns: map[net.Conn]struct{}{}}
	s.wg.Add(1)
	go s.accept()
	return s
}

func (s *server) accept() {
	defer s.wg.Done()
	for {
		nc, err := s.ln.Accept()
		if err != nil {
			if !errors.Is(err, net.ErrClosed) {
				s.log.Warn("fakebroker: accept failed; no more connections", "listen", s.ln.Addr().String(), "err", err)
			}
			return
		}
		s.mu.Lock()
		if s.closed {
			s.mu.Unlock()
			_ = nc.Close()
			return
		}
		s.conns[nc] = struct{}{}
		s.wg.Add(1)
		s.mu.Unlock()
		go s.serveConn(nc)
	}
}

func (s *server) serveConn(nc net.Conn) {
	defer s.wg.Done()
	defer func() {
		_ = nc.Close()
		s.mu.Lock()
		delete(s.conns, nc)
		s.mu.Unlock()
	}()
	br := bufio.NewReader(nc)
	var wmu sync.Mutex // serialises the writes of the connection's answers
	write := func(id uint32, rep *rpc.Reply) error {
		out := rpc.AppendReply(nil, id, rep)
		wmu.Lock()
		defer wmu.Unlock()
		_, err := nc.Write(out)
		return err
	}
	var prefix [protocol.FramePrefixSize]byte
	for {
		if _, err := io.ReadFull(br, prefix[:]); err != nil {
			return
		}
		fh, err := protocol.ParseFrameHeader(prefix[:], protocol.DefaultMaxFrameSize)
		if err == nil && fh.Flags.IsResponse() {
			err = errors.New("a response frame sent to a server")
		}
		if err != nil {
			s.log.Warn("fakebroker: closing a connection: bad frame", "remote", nc.RemoteAddr().String(), "err", err)
			return
		}
		frame := make([]byte, fh.TotalSize())
		copy(frame, prefix[:])
		if _, err := io.ReadFull(br, frame[len(prefix):]); err != nil {
			return
		}
		f, err := protocol.ParseFrame(frame, protocol.DefaultMaxFrameSize)
		if err != nil {
			s.log.Warn("fakebroker: closing a connection: bad frame", "remote", nc.RemoteAddr().String(), "err", err)
			return
		}
		code := protocol.RequestCode(f.Code)
		a := answer{rep: rpc.Errorf(protocol.StatusRequestCodeNotSupported, "request code %d is not supported", f.Code), v: Answer}
		if code.Known() {
			a = s.h(&rpc.Request{Code: code, Header: f.Header, Body: f.Body})
		}
		switch {
		case a.v == Drop:
			return
		case a.later != nil:
			s.wg.Add(1)
			go func(id uint32, oneway bool) {
				defer s.wg.Done()
				rep := a.later(s.closing)
				if !oneway {
					_ = write(id, &rep) // a failed write closes the connection's reader too
				}
			}(f.RequestID, f.Flags.IsOneway())
		case f.Flags.IsOneway():
		default:
			if err := write(f.RequestID, &a.rep); err != nil {
				return
			}
		}
	}
}

// close stops accepting, closes every connection and waits for their goroutines, so for the
// requests being handled.
func (s *server) close() {
	s.mu.Lock()
	if !s.closed {
		s.closed = true
		close(s.closing)
		_ = s.ln.Close()
		for nc := range s.conns {
			_ = nc.Close()
		}
	}
	s.mu.Unlock()
	s.wg.Wait()
}
