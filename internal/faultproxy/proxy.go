// Package faultproxy is a fault-injecting TCP proxy for tests: cluster tests put one in front
// of a broker (or name server) and cut, blackhole or heal the link on loopback to simulate
// network partitions between processes.
//
// A Proxy listens on a loopback address and forwards every accepted connection to its target,
// with one goroutine per direction per connection. All goroutines belong to the Proxy and are
// stopped by Close. The Proxy's mutex is a leaf lock: nothing else is taken while it is held.
package faultproxy

import (
	"context"
	"errors"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"time"
)

const (
	// dialTimeout bounds the dial to the target of one accepted connection.
	dialTimeout = 5 * time.Second
	// acceptBackoff is the pause after an Accept error other than the listener being closed
	// (such as running out of file descriptors).
	acceptBackoff = 10 * time.Millisecond
	// bufSize is the size in bytes of each direction's copy buffer.
	bufSize = 32 << 10
)

// mode is what the proxy does with new connections.
type mode int

const (
	forwarding  mode = iota // dial the target and copy both ways
	partitioned             // accept and reset at once
	blackholed              // accept, never dial, discard what the client sends
)

// Stats are a Proxy's counters since Start. Byte counts are in bytes; the others are numbers
// of connections.
type Stats struct {
	Accepted        int64 // connections accepted, including refused ones
	Refused         int64 // connections accepted and reset at once because of Partition
	Open            int64 // proxied connections currently open (forwarding or blackholed)
	BytesToTarget   int64 // bytes forwarded from clients to the target
	BytesFromTarget int64 // bytes forwarded from the target to clients
	BytesDropped    int64 // bytes read in either direction and discarded while blackholed
}

// Proxy is a fault-injecting TCP proxy. Its methods are safe for concurrent use.
type Proxy struct {
	ln     net.Listener
	ctx    context.Context // cancelled by Close, aborts pending dials
	cancel context.CancelFunc
	dialer net.Dialer
	wg     sync.WaitGroup // the accept loop and every copy goroutine

	mu       sync.Mutex
	target   string
	mode     mode
	links    map[*link]struct{} // open proxied connections
	closed   bool
	closeErr error

	accepted, refused, toTarget, fromTarget, dropped atomic.Int64
}

// link is one proxied connection: the accepted client side and, once dialled, the target side.
type link struct {
	client net.Conn
	server net.Conn // nil until dialled (and forever for a connection accepted while blackholed); set under Proxy.mu
	// dropping makes both directions discard what they read instead of forwarding it. Once
	// set it is never cleared: Heal closes dropping links.
	dropping atomic.Bool
	ends     atomic.Int32 // directions that ended with a clean EOF while forwarding
}

// Start listens on 127.0.0.1 on a port chosen by the kernel and forwards every accepted
// connection to target (host:port). Addr returns the chosen address.
func Start(target string) (*Proxy, error) {
	return StartOn("127.0.0.1:0", target)
}

// StartOn is Start listening on the given address (host:port), for tests that need a fixed
// port, such as one restarted proxy standing for the same broker address. The listening socket
// has SO_REUSEADDR (Go sets it on Unix listeners), so the port can be reused while connections
// of a previous listener are in TIME_WAIT.
func StartOn(listen, target string) (*Proxy, error) {
	var lc net.ListenConfig
	ln, err := lc.Listen(context.Background(), "tcp", listen)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	p := &Proxy{
		ln:     ln,
		ctx:    ctx,
		cancel: cancel,
		dialer: net.Dialer{Timeout: dialTimeout},
		target: target,
		links:  map[*link]struct{}{},
	}
	p.wg.Add(1)
	go p.acceptLoop()
	return p, nil
}

// Addr returns the address (host:port) the proxy listens on.
func (p *Proxy) Addr() string {
	return p.ln.Addr().String()
}

// Partition cuts the link like a partition that answers with RST: every open proxied
// connection is reset at once on both sides, and from now on new connections are accepted and
// reset immediately, until Heal.
func (p *Proxy) Partition() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.mode = partitioned
	for l := range p.links {
		p.abortLocked(l)
	}
}

// Blackhole cuts the link silently, like a partition that drops packets: open connections stay
// open but nothing more is forwarded in either direction, and new connections are accepted but
// never forwarded to the target. Bytes the proxy reads meanwhile are discarded (counted in
// Stats.BytesDropped); bytes it had already read when Blackhole was called may still be
// delivered, like packets in flight. Heal closes the blackholed connections.
func (p *Proxy) Blackhole() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.mode = blackholed
	for l := range p.links {
		l.dropping.Store(true)
	}
}

// Heal ends a Partition or Blackhole: new connections are forwarded again. Connections reset by
// Partition stay closed, and connections blackholed by Blackhole are reset now, on both sides,
// so that the peers notice and reconnect.
func (p *Proxy) Heal() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.mode = forwarding
	for l := range p.links {
		if l.dropping.Load() {
			p.abortLocked(l)
		}
	}
}

// SetTarget makes new connections go to target (host:port), for instance a restarted process
// listening on a new port. Open connections keep their target.
func (p *Proxy) SetTarget(target string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.target = target
}

// Stats returns the proxy's counters.
func (p *Proxy) Stats() Stats {
	p.mu.Lock()
	open := int64(len(p.links))
	p.mu.Unlock()
	return Stats{
		Accepted:        p.accepted.Load(),
		Refused:         p.refused.Load(),
		Open:            open,
		BytesToTarget:   p.toTarget.Load(),
		BytesFromTarget: p.fromTarget.Load(),
		BytesDropped:    p.dropped.Load(),
	}
}

// Close stops listening, resets every open connection on both sides, cancels pending dials
// and waits for every goroutine of the proxy to return. It returns the error of closing the
// listener; calling it again returns the same error.
func (p *Proxy) Close() error {
	p.mu.Lock()
	if !p.closed {
		p.closed = true
		p.closeErr = p.ln.Close()
		p.cancel()
		for l := range p.links {
			p.abortLocked(l)
		}
	}
	err := p.closeErr
	p.mu.Unlock()
	p.wg.Wait()
	return err
}

// acceptLoop accepts connections until the listener is closed.
func (p *Proxy) acceptLoop() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			time.Sleep(acceptBackoff)
			continue
		}
		p.accepted.Add(1)
		p.mu.Lock()
		if closed := p.closed; closed || p.mode == partitioned {
			p.mu.Unlock()
			if !closed {
				p.refused.Add(1)
			}
			reset(c)
			continue
		}
		l := &link{client: c}
		l.dropping.Store(p.mode == blackholed)
		p.links[l] = struct{}{}
		target := p.target
		p.wg.Add(1)
		p.mu.Unlock()
		go p.serve(l, target)
	}
}

// serve dials the target for l unless it is blackholed, then copies client to target while a
// second goroutine copies target to client.
func (p *Proxy) serve(l *link, target string) {
	defer p.wg.Done()
	if l.dropping.Load() {
		p.pipe(l, l.client, nil, &p.toTarget)
		return
	}
	s, err := p.dialer.DialContext(p.ctx, "tcp", target)
	if err != nil {
		p.abort(l) // the client sees a reset, as from a target refusing connections
		return
	}
	p.mu.Lock()
	if _, open := p.links[l]; !open { // reset by Partition, Heal or Close meanwhile
		p.mu.Unlock()
		reset(s)
		return
	}
	l.server = s
	p.wg.Add(1)
	p.mu.Unlock()
	go func() {
		defer p.wg.Done()
		p.pipe(l, s, l.client, &p.fromTarget)
	}()
	p.pipe(l, l.client, s, &p.toTarget)
}

// pipe copies src to dst until src ends or l is closed, adding the bytes written to
// forwarded. While l is dropping it discards what it reads; dst is nil only for links that
// were dropping from the start.
func (p *Proxy) pipe(l *link, src, dst net.Conn, forwarded *atomic.Int64) {
	buf := make([]byte, bufSize)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			if l.dropping.Load() || dst == nil {
				p.dropped.Add(int64(n))
			} else {
				if _, werr := dst.Write(buf[:n]); werr != nil {
					p.abort(l)
					return
				}
				forwarded.Add(int64(n))
			}
		}
		if err == nil {
			continue
		}
		switch {
		case l.dropping.Load() || dst == nil:
			// Silent: the other side learns nothing; Heal, Partition or Close resets the link.
		case errors.Is(err, io.EOF):
			p.halfClose(l, dst)
		default:
			p.abort(l)
		}
		return
	}
}

// halfClose forwards a clean EOF to dst and closes l once both directions have ended.
func (p *Proxy) halfClose(l *link, dst net.Conn) {
	if cw, ok := dst.(interface{ CloseWrite() error }); !ok || cw.CloseWrite() != nil {
		p.abort(l)
		return
	}
	if l.ends.Add(1) < 2 {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if _, open := p.links[l]; open {
		delete(p.links, l)
		_ = l.client.Close()
		_ = l.server.Close()
	}
}

// abort resets both sides of l if it is still open.
func (p *Proxy) abort(l *link) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.abortLocked(l)
}

// abortLocked is abort with p.mu held.
func (p *Proxy) abortLocked(l *link) {
	if _, open := p.links[l]; !open {
		return
	}
	delete(p.links, l)
	reset(l.client)
	if l.server != nil {
		reset(l.server)
	}
}

// reset closes c so that the peer sees a reset (RST) rather than an orderly close (FIN).
func reset(c net.Conn) {
	if tc, ok := c.(*net.TCPConn); ok {
		_ = tc.SetLinger(0)
	}
	_ = c.Close()
}
