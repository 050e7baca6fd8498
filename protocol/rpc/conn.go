// Package rpc carries protocol frames over TCP: a client connection with many requests in
// flight (Conn) and a small goroutine-per-connection server for control-plane services such as
// the NameServer (Server). The broker's data path does not use Server; it runs on gnet.
package rpc

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/petrel-mq/petrel/protocol"
	"github.com/valyala/bytebufferpool"
)

// Errors returned by Conn.
var (
	// ErrClosed is returned by calls on a closed connection, and to calls still waiting when the
	// connection closes (their outcome is unknown).
	ErrClosed = errors.New("rpc: connection closed")
	// ErrTooManyInFlight is returned when a connection already has MaxInFlight calls waiting.
	ErrTooManyInFlight = errors.New("rpc: too many requests in flight on the connection")
)

// Options tune a connection. The zero value is usable.
type Options struct {
	// DialTimeout bounds connection establishment; default 3s.
	DialTimeout time.Duration
	// MaxFrameSize bounds frames read from the server (bytes); default protocol.DefaultMaxFrameSize.
	MaxFrameSize int
	// MaxInFlight bounds requests waiting for a response; default 4096.
	MaxInFlight int
	// LateResponses, when not nil, is incremented for every response that arrives for a call
	// nobody waits for any more (forgotten with Forget, or whose Call's ctx ended): the reader
	// drops such a response quietly. Several connections may share one counter.
	LateResponses *atomic.Int64
}

func (o *Options) fill() {
	if o.DialTimeout <= 0 {
		o.DialTimeout = 3 * time.Second
	}
	if o.MaxFrameSize <= 0 {
		o.MaxFrameSize = protocol.DefaultMaxFrameSize
	}
	if o.MaxInFlight <= 0 {
		o.MaxInFlight = 4096
	}
}

var framePool bytebufferpool.Pool

// monoEpoch is the origin of Conn.lastRecv. Offsets from it keep time.Time's monotonic reading,
// so LastReceive compares safely with time.Now() across wall-clock jumps.
var monoEpoch = time.Now()

// recvChunk is how much of a frame the reader reads between two updates of the last receive
// time (bytes).
const recvChunk = 64 << 10

// testHookDropped, when set (by tests, before any Dial), is called by the reader after it has
// released the buffer of a response nobody waits for any more.
var testHookDropped func(requestID uint32)

// Response is a success response. Header and Body are views of a pooled buffer: call Release
// once done with them.
type Response struct {
	Header []byte
	Body   []byte
	buf    *bytebufferpool.ByteBuffer
}

// Release returns the response's buffer to the pool; Header and Body must not be used after.
func (r *Response) Release() {
	if r != nil && r.buf != nil {
		framePool.Put(r.buf)
		r.buf = nil
		r.Header, r.Body = nil, nil
	}
}

// Callback receives the outcome of an asynchronous call. It runs on the connection's reader
// goroutine (or the caller's, when sending fails), so it must be short and must not call
// blocking methods of the same Conn. resp is nil when err is not nil; the callback owns resp
// and must Release it.
type Callback func(resp *Response, err error)

type call struct {
	cb   Callback
	done chan struct{}
	resp *Response
	err  error
}

// Conn is a client connection. All methods are safe for concurrent use. Requests are written by
// one writer goroutine that coalesces whatever is queued into one write, and responses are read
// by one reader goroutine; both stop when the connection closes.
type Conn struct {
	nc     net.Conn
	addr   string
	opts   Options
	nextID atomic.Uint32
	// lastRecv is when the reader last received a frame prefix or a recvChunk of a frame's
	// rest, as nanoseconds since monoEpoch; 0 before the first.
	lastRecv atomic.Int64

	mu      sync.Mutex // guards pending, queue, closed, err
	pending map[uint32]*call
	queue   []*bytebufferpool.ByteBuffer
	closed  bool
	err     error

	kick chan struct{}
	done chan struct{}
	wg   sync.WaitGroup
}

// Dial connects to addr (host:port).
func Dial(ctx context.Context, addr string, opts Options) (*Conn, error) {
	opts.fill()
	d := net.Dialer{Timeout: opts.DialTimeout}
	nc, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("cannot connect to %s: %w", addr, err)
	}
	if tc, ok := nc.(*net.TCPConn); ok {
		_ = tc.SetNoDelay(true)
	}
	c := &Conn{
		nc:      nc,
		addr:    addr,
		opts:    opts,
		pending: make(map[uint32]*call),
		kick:    make(chan struct{}, 1),
		done:    make(chan struct{}),
	}
	c.wg.Add(2)
	go c.readLoop()
	go c.writeLoop()
	return c, nil
}

// Addr returns the address the connection was dialled to.
func (c *Conn) Addr() string { return c.addr }

// Done is closed when the connection has closed.
func (c *Conn) Done() <-chan struct{} { return c.done }

// LastReceive returns when the connection last received something: a frame's fixed prefix, or
// another recvChunk of a large frame (so a frame that takes long to arrive over a slow link
// shows progress); the zero Time when it has received nothing. A caller that sees a request
// time out with nothing received since it was sent can tell a dead connection from a slow
// server. It is one atomic load.
func (c *Conn) LastReceive() time.Time {
	d := c.lastRecv.Load()
	if d == 0 {
		return time.Time{}
	}
	return monoEpoch.Add(time.Duration(d))
}

// Waiting returns how many calls are waiting for their response (Forget and the end of the
// connection remove calls). With LastReceive it lets a caller tell a connection that owes
// answers and receives nothing, a hung server, from an idle one.
func (c *Conn) Waiting() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.pending)
}

// Err returns why the connection closed, or nil while it is open.
func (c *Conn) Err() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.err
}

// Close closes the connection; waiting calls fail with ErrClosed. It waits for the reader and
// writer goroutines to stop.
func (c *Conn) Close() error {
	c.fail(ErrClosed)
	c.wg.Wait()
	return nil
}

// Abort closes the connection with cause (which Err returns from then on) and fails every
// waiting call, as Close does, but without waiting for the reader and writer goroutines; it
// reports whether this call closed the connection (false when it was closed already). A caller
// uses it to drop a connection it judges dead, and learns whether it is the one to say so.
func (c *Conn) Abort(cause error) bool {
	return c.fail(cause)
}

// fail closes the connection with err (the first error wins) and fails every waiting call; it
// reports whether this call closed it.
func (c *Conn) fail(err error) bool {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return false
	}
	c.closed = true
	c.err = err
	pending := c.pending
	c.pending = nil
	queue := c.queue
	c.queue = nil
	c.mu.Unlock()
	close(c.done)
	_ = c.nc.Close()
	for _, b := range queue {
		framePool.Put(b)
	}
	for _, cl := range pending {
		cl.finish(nil, fmt.Errorf("%w: %s: %v", ErrClosed, c.addr, err))
	}
	return true
}

func (cl *call) finish(resp *Response, err error) {
	if cl.cb != nil {
		cl.cb(resp, err)
		return
	}
	cl.resp, cl.err = resp, err
	close(cl.done)
}

// Call sends a request and waits for its response or ctx's end. h may be nil for an empty
// header. A non-success status comes back as a *protocol.Error. When ctx ends first the outcome
// is unknown: the request may still be executed.
func (c *Conn) Call(ctx context.Context, code protocol.RequestCode, h protocol.Header, body []byte) (*Response, error) {
	cl := &call{done: make(chan struct{})}
	id, err := c.send(code, 0, h, body, cl)
	if err != nil {
		return nil, err
	}
	select {
	case <-cl.done:
		return cl.resp, cl.err
	case <-ctx.Done():
		c.mu.Lock()
		_, still := c.pending[id]
		delete(c.pending, id)
		c.mu.Unlock()
		if !still {
			<-cl.done // the response raced with ctx; take it so its buffer is released
			cl.resp.Release()
		}
		return nil, fmt.Errorf("request %s to %s: %w", code, c.addr, ctx.Err())
	}
}

// CallAsync sends a request; cb receives the outcome. A request that cannot be sent (closed
// connection, too many in flight) reports the error through cb before CallAsync returns, and
// CallAsync then returns 0; otherwise it returns the request id, which is never 0. So a caller
// tells "never written" (a definite failure) from "written, then failed" (unknown outcome).
// Timeouts are the caller's business (see Forget).
func (c *Conn) CallAsync(code protocol.RequestCode, h protocol.Header, body []byte, cb Callback) uint32 {
	id, err := c.send(code, 0, h, body, &call{cb: cb})
	if err != nil {
		cb(nil, err)
	}
	return id
}

// Forget drops the waiting call with request id id, if any, and reports whether it was still
// waiting; its callback is never called afterwards. Callers use it for their own timeouts.
func (c *Conn) Forget(id uint32) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	_, ok := c.pending[id]
	delete(c.pending, id)
	return ok
}

// Oneway sends a request that expects no response.
func (c *Conn) Oneway(code protocol.RequestCode, h protocol.Header, body []byte) error {
	_, err := c.send(code, protocol.FlagOneway, h, body, nil)
	return err
}

// CallDecode calls and decodes the success response's header into respHdr and body into
// respBody (either may be nil), releasing the response.
func (c *Conn) CallDecode(ctx context.Context, code protocol.RequestCode, h protocol.Header, body []byte, respHdr, respBody interface{ ReadFrom([]byte) error }) error {
	resp, err := c.Call(ctx, code, h, body)
	if err != nil {
		return err
	}
	defer resp.Release()
	if respHdr != nil {
		if err := respHdr.ReadFrom(resp.Header); err != nil {
			return fmt.Errorf("cannot decode %s response header from %s: %w", code, c.addr, err)
		}
	}
	if respBody != nil {
		if err := respBody.ReadFrom(resp.Body); err != nil {
			return fmt.Errorf("cannot decode %s response body from %s: %w", code, c.addr, err)
		}
	}
	return nil
}

func (c *Conn) send(code protocol.RequestCode, flags protocol.Flags, h protocol.Header, body []byte, cl *call) (uint32, error) {
	buf := framePool.Get()
	buf.B = protocol.AppendFrame(buf.B[:0], uint16(code), flags, 0, h, body)
	if len(buf.B) > c.opts.MaxFrameSize {
		n := len(buf.B)
		framePool.Put(buf)
		return 0, fmt.Errorf("request %s of %d bytes: %w", code, n, protocol.ErrFrameTooLarge)
	}
	c.mu.Lock()
	if c.closed {
		err := c.err
		c.mu.Unlock()
		framePool.Put(buf)
		return 0, fmt.Errorf("%w: %s: %v", ErrClosed, c.addr, err)
	}
	id := c.nextID.Add(1)
	if id == 0 { // 0 is never a request id: CallAsync returns 0 for a request it did not send
		id = c.nextID.Add(1)
	}
	if cl != nil {
		if len(c.pending) >= c.opts.MaxInFlight {
			c.mu.Unlock()
			framePool.Put(buf)
			return 0, ErrTooManyInFlight
		}
		c.pending[id] = cl
	}
	// The request id goes at bytes 8..12 of the frame prefix.
	buf.B[8], buf.B[9], buf.B[10], buf.B[11] = byte(id>>24), byte(id>>16), byte(id>>8), byte(id)
	c.queue = append(c.queue, buf)
	c.mu.Unlock()
	select {
	case c.kick <- struct{}{}:
	default:
	}
	return id, nil
}

func (c *Conn) writeLoop() {
	defer c.wg.Done()
	var batch []*bytebufferpool.ByteBuffer
	var iov net.Buffers
	var w net.Buffers // WriteTo's pointer receiver moves it to the heap: declare it once
	for {
		select {
		case <-c.done:
			return
		case <-c.kick:
		}
		c.mu.Lock()
		batch, c.queue = c.queue, batch[:0]
		c.mu.Unlock()
		if len(batch) == 0 {
			continue
		}
		iov = iov[:0]
		for _, b := range batch {
			iov = append(iov, b.B)
		}
		// WriteTo consumes the slice it is called on (its length and capacity shrink to 0), so
		// write through a copy of the header and keep iov's backing array for the next round.
		w = iov
		_, err := w.WriteTo(c.nc)
		clear(iov)
		for i, b := range batch {
			framePool.Put(b)
			batch[i] = nil
		}
		if err != nil {
			c.fail(fmt.Errorf("cannot write to %s: %w", c.addr, err))
			return
		}
	}
}

func (c *Conn) readLoop() {
	defer c.wg.Done()
	br := bufio.NewReaderSize(c.nc, 64<<10)
	var prefix [protocol.FramePrefixSize]byte
	for {
		if _, err := io.ReadFull(br, prefix[:]); err != nil {
			c.fail(fmt.Errorf("cannot read from %s: %w", c.addr, err))
			return
		}
		c.markReceived()
		fh, err := protocol.ParseFrameHeader(prefix[:], c.opts.MaxFrameSize)
		if err != nil {
			c.fail(fmt.Errorf("bad frame from %s: %w", c.addr, err))
			return
		}
		if !fh.Flags.IsResponse() {
			c.fail(fmt.Errorf("bad frame from %s: request code %d on a client connection", c.addr, fh.Code))
			return
		}
		buf := framePool.Get()
		rest := fh.TotalSize() - protocol.FramePrefixSize
		if cap(buf.B) < rest {
			buf.B = make([]byte, rest)
		}
		buf.B = buf.B[:rest]
		if err := c.readRest(br, buf.B); err != nil {
			framePool.Put(buf)
			c.fail(fmt.Errorf("cannot read from %s: %w", c.addr, err))
			return
		}
		c.mu.Lock()
		cl := c.pending[fh.RequestID]
		delete(c.pending, fh.RequestID)
		c.mu.Unlock()
		if cl == nil { // forgotten call: its caller gave up or timed out
			framePool.Put(buf)
			if c.opts.LateResponses != nil {
				c.opts.LateResponses.Add(1)
			}
			if testHookDropped != nil {
				testHookDropped(fh.RequestID)
			}
			continue
		}
		hl := int(fh.HeaderLength)
		status := protocol.Status(fh.Code)
		if status != protocol.StatusSuccess {
			var eh protocol.ErrorHeader
			if err := eh.ReadFrom(buf.B[:hl]); err != nil {
				eh.Remark = "undecodable error header: " + err.Error()
			}
			framePool.Put(buf)
			cl.finish(nil, &protocol.Error{Status: status, Remark: eh.Remark, MasterAddr: eh.MasterAddr})
			continue
		}
		cl.finish(&Response{Header: buf.B[:hl:hl], Body: buf.B[hl:], buf: buf}, nil)
	}
}

// markReceived records that something was received now.
func (c *Conn) markReceived() { c.lastRecv.Store(max(int64(time.Since(monoEpoch)), 1)) }

// readRest reads the rest of a frame into b, recording progress after every recvChunk but the
// last.
func (c *Conn) readRest(br *bufio.Reader, b []byte) error {
	for len(b) > recvChunk {
		if _, err := io.ReadFull(br, b[:recvChunk]); err != nil {
			return err
		}
		c.markReceived()
		b = b[recvChunk:]
	}
	_, err := io.ReadFull(br, b)
	return err
}
