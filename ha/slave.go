package ha

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/petrel-mq/petrel/internal/ratelog"
	"github.com/petrel-mq/petrel/protocol"
	"github.com/petrel-mq/petrel/protocol/rpc"
)

// Defaults of SlaveConfig.
const (
	DefaultWaitMs     = 5000
	DefaultBackoff    = 100 * time.Millisecond
	DefaultMaxBackoff = 3 * time.Second
	// DefaultMaxBatchBytes is the largest single batch a slave accepts (bytes): a batch reaches
	// the master in one frame, so it is smaller than the frame limit.
	DefaultMaxBatchBytes = protocol.DefaultMaxFrameSize
	// callMargin is added to WaitMs for a pull's timeout: the master answers a held pull after
	// at most WaitMs, so an answer later than this means the link or the master is dead.
	callMargin = 3 * time.Second
	// defaultDialTimeout is SlaveConfig.DialTimeout's default.
	defaultDialTimeout = 2 * time.Second
	// frameMargin is the room for the frame prefix and response header above the body.
	frameMargin = 64 << 10
	// divergedWait is how long a slave whose log diverged waits for its member's decision
	// (an OutOfRange event, then Kick) before it pulls again.
	divergedWait = 5 * time.Second
)

// SlaveConfig configures a Slave. Zero values take the defaults.
type SlaveConfig struct {
	// BrokerName is the broker group; SlaveID this slave's brokerId (> 0); SlaveAddr its client
	// address (for the master's read suggestions).
	BrokerName string
	SlaveID    int64
	SlaveAddr  func() string
	// MasterHAAddr returns the master's HA address ("" when unknown: the slave waits). The
	// broker learns it from its config or from the NameServer's registration answer; it is
	// called before every connection attempt and before every pull, and a change drops the
	// current connection. It must be cheap and safe to call from the Slave's goroutine.
	MasterHAAddr func() string
	// Log is the slave's commit log.
	Log SlaveLog
	// MaxChunkBytes is the most uncompressed bytes asked per pull (default 1 MiB).
	MaxChunkBytes int
	// MaxBatchBytes is the largest single batch accepted (default DefaultMaxBatchBytes): the
	// master sends a batch larger than MaxChunkBytes whole. The decompression bound of a chunk is
	// max(MaxChunkBytes, MaxBatchBytes); a chunk announcing more closes the link.
	MaxBatchBytes int
	// WaitMs is how long the master may hold a pull with nothing new (default 5000).
	WaitMs int32
	// Backoff is the first reconnect delay (default 100 ms), doubling up to MaxBackoff (default
	// 3 s); it starts over after a pull succeeds.
	Backoff    time.Duration
	MaxBackoff time.Duration
	// DialTimeout bounds a connection attempt to the master (an address that drops packets);
	// default 2 s. Kick ends an attempt at once.
	DialTimeout time.Duration
	// Logger receives replication events; default slog.Default().
	Logger *slog.Logger
	// dial connects to the master (default rpc.Dial); tests put a cut-off network in its way.
	dial func(ctx context.Context, addr string, opts rpc.Options) (*rpc.Conn, error)
	// OnProgress, when set, runs on the Slave's goroutine after every append with the new log
	// end and the master's end; it must be short.
	OnProgress func(end, masterEnd int64)
	// Now is the clock of LastContact; default time.Now.
	Now func() time.Time
	// MemberID is the slave's Raft server id in a Raft-elected group ("" with static roles);
	// every pull carries it.
	MemberID string
	// LastEpoch, when set (a Raft-elected group), returns the newest epoch of the slave's log
	// and where it starts there; every pull carries them, so that the master acknowledges only
	// a log that is a prefix of its own. Called before every pull from the Slave's goroutine;
	// it must be cheap.
	LastEpoch func() (epoch uint32, start int64)
	// Events, when set, receives what the slave learns for its member's state machine, on the
	// Slave's goroutine (it must not block): MasterLearnt when the master's answers name a client
	// address other than the last one (HAPullResponse.MasterAddr), MasterGone when the master's
	// process looks gone rather than silent (its connection closed or its port refused the
	// connection), and, with DecidesCuts, OutOfRange.
	Events func(Event)
	// DecidesCuts (a Raft-elected group): an OUT_OF_RANGE answer (this log is ahead of the
	// master's or diverged from it) goes to Events as OutOfRange instead of the default (set the
	// log aside and copy the master's), and the member decides what to cut: the link is dropped
	// and the slave pulls again only after a Kick (or divergedWait).
	DecidesCuts bool
}

// LinkStatus is a Slave's view of its replication link.
type LinkStatus struct {
	Connected    bool
	MasterHAAddr string
	// MasterMin, MasterEnd and ConfirmedOffset are the master's log bounds and confirmed offset
	// as last heard; Epoch the master's epoch.
	MasterMin       int64
	MasterEnd       int64
	ConfirmedOffset int64
	Epoch           uint32
	// LogMin and LogEnd are this slave's log bounds.
	LogMin int64
	LogEnd int64
	// LastContact is when the master last answered (the zero Time if never).
	LastContact time.Time
	// Resyncs counts the times the slave discarded its log to follow the master.
	Resyncs int64
}

// HAStatus returns the status as the CodeGetHAStatus body of a slave (Role "SLAVE"; the broker
// fills MasterAddr and may override Role).
func (st LinkStatus) HAStatus(brokerID int64) protocol.HAStatus {
	return protocol.HAStatus{
		Role:            "SLAVE",
		BrokerID:        brokerID,
		Epoch:           st.Epoch,
		LogMin:          st.LogMin,
		LogEnd:          st.LogEnd,
		ConfirmedOffset: st.ConfirmedOffset,
		MasterHAAddr:    st.MasterHAAddr,
		MasterEnd:       st.MasterEnd,
		Connected:       st.Connected,
	}
}

// Slave pulls the master's commit log into its own (RocketMQ's HAClient): one goroutine
// connects to the master's HA port, pulls from its log end, appends what it gets, and reconnects
// with backoff after any failure. It never writes a chunk it could not decode or the log
// rejected. Start and Close may be called from any goroutine; the status methods are safe for
// concurrent use.
type Slave struct {
	cfg   SlaveConfig
	log   *slog.Logger
	bound int

	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup
	once   sync.Once

	dec        chunkDecoder // the goroutine's
	divergeLog ratelog.Limiter

	connected atomic.Bool
	// acked: the master's last answer on the current link acknowledged this slave's log end
	// (HAOK): the log is a prefix of the master's.
	acked     atomic.Bool
	masterEnd atomic.Int64
	confirmed atomic.Int64
	// masterLoaded is the master's load flag as last heard.
	masterLoaded atomic.Bool
	// masterAddr is the master's client address as last heard; only the Slave's goroutine
	// uses it.
	masterAddr string
	kick       chan struct{} // Kick -> the sleeping goroutine, capacity 1

	mu         sync.Mutex // guards st and linkCancel
	st         LinkStatus
	linkCancel context.CancelFunc // ends the current link's pull (Kick)
}

// errFenced and errMasterMoved end a link on purpose.
var (
	errDiverged    = errors.New("ha: this slave's log diverged from the master's; waiting for the broker to truncate it")
	errFenced      = errors.New("ha: the master fenced the pull (other broker group or newer epoch)")
	errStaleMaster = errors.New("ha: answer of a master with an older epoch")
	errMasterMoved = errors.New("ha: the master's address changed")
)

// slaveAddr returns the slave's client address ("" when not configured).
func (s *Slave) slaveAddr() string {
	if s.cfg.SlaveAddr == nil {
		return ""
	}
	return s.cfg.SlaveAddr()
}

// NewSlave returns a Slave; Start starts it.
func NewSlave(cfg SlaveConfig) *Slave {
	if cfg.MaxChunkBytes <= 0 {
		cfg.MaxChunkBytes = DefaultMaxChunkBytes
	}
	if cfg.MaxBatchBytes <= 0 {
		cfg.MaxBatchBytes = DefaultMaxBatchBytes
	}
	if cfg.WaitMs <= 0 {
		cfg.WaitMs = DefaultWaitMs
	}
	if cfg.Backoff <= 0 {
		cfg.Backoff = DefaultBackoff
	}
	if cfg.MaxBackoff <= 0 {
		cfg.MaxBackoff = DefaultMaxBackoff
	}
	if cfg.dial == nil {
		cfg.dial = rpc.Dial
	}
	if cfg.DialTimeout <= 0 {
		cfg.DialTimeout = defaultDialTimeout
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.MasterHAAddr == nil {
		cfg.MasterHAAddr = func() string { return "" }
	}
	s := &Slave{
		cfg:   cfg,
		log:   cfg.Logger.With("component", "ha-slave", "slave", cfg.SlaveID),
		bound: max(cfg.MaxChunkBytes, cfg.MaxBatchBytes),
		kick:  make(chan struct{}, 1),
	}
	s.dec.bound = s.bound
	s.ctx, s.cancel = context.WithCancel(context.Background())
	return s
}

// Start starts the replication goroutine. It returns an error on a bad config.
func (s *Slave) Start() error {
	if s.cfg.Log == nil {
		return errors.New("ha: slave has no log")
	}
	if s.cfg.SlaveID <= 0 {
		return fmt.Errorf("ha: slave id %d, want > 0", s.cfg.SlaveID)
	}
	if s.ctx.Err() != nil {
		return ErrClosed
	}
	started := false
	s.once.Do(func() {
		started = true
		s.wg.Add(1)
		go s.run()
	})
	if !started {
		return errors.New("ha: slave already started")
	}
	return nil
}

// Close stops the goroutine and closes the connection. NB: it waits for an AppendReplicated or
// ResetTo in progress to return.
func (s *Slave) Close() error {
	s.cancel()
	s.wg.Wait()
	s.once.Do(func() {}) // a Start after Close does nothing
	s.dec.close()
	return nil
}

// ObserveEpoch raises the epoch the slave has followed to e (the broker learns epochs from
// Raft): answers of a master of an older epoch are refused from now on.
func (s *Slave) ObserveEpoch(e uint32) {
	s.mu.Lock()
	s.st.Epoch = max(s.st.Epoch, e)
	s.mu.Unlock()
}

// Kick ends the current pull (a held one too) and any reconnect backoff, so that the slave
// connects to MasterHAAddr at once: the broker calls it when it learns of a new master.
func (s *Slave) Kick() {
	s.mu.Lock()
	if s.linkCancel != nil {
		s.linkCancel()
	}
	s.mu.Unlock()
	select {
	case s.kick <- struct{}{}:
	default:
	}
}

// Connected reports whether the link to the master is up.
func (s *Slave) Connected() bool { return s.connected.Load() }

// LogAcknowledged reports whether the master's last answer on the current link acknowledged
// this slave's log end, so that the log is a prefix of the master's: false before the first
// answer of a link, after the link ended, and once the master said the log is out of its range
// (until the reset log is acknowledged). State kept beside the log (consumer offsets) is of the
// master's log only while it is true.
func (s *Slave) LogAcknowledged() bool { return s.acked.Load() }

// MasterEnd returns the master's log end as last heard (0 before the first answer).
func (s *Slave) MasterEnd() int64 { return s.masterEnd.Load() }

// ConfirmedOffset returns the master's confirmed offset (held by every in-sync member) as last
// heard in an answer that acknowledged this slave's pull (its log was a prefix of the master's):
// the slave's high watermark for consumers.
func (s *Slave) ConfirmedOffset() int64 { return s.confirmed.Load() }

// MasterLoaded reports whether the master said it was loaded in its last answer.
func (s *Slave) MasterLoaded() bool { return s.masterLoaded.Load() }

// Status returns a snapshot of the link.
func (s *Slave) Status() LinkStatus {
	s.mu.Lock()
	st := s.st
	s.mu.Unlock()
	st.Connected = s.connected.Load()
	st.LogMin, st.LogEnd = s.cfg.Log.LogMinOffset(), s.cfg.Log.LogEndOffset()
	return st
}

func (s *Slave) run() {
	defer s.wg.Done()
	backoff := s.cfg.Backoff
	waitingForAddr := false
	for s.ctx.Err() == nil {
		addr := s.cfg.MasterHAAddr()
		if addr == "" {
			if !waitingForAddr {
				s.log.Info("master HA address unknown; waiting for it")
				waitingForAddr = true
			}
			s.sleep(backoff)
			backoff = min(2*backoff, s.cfg.MaxBackoff)
			continue
		}
		waitingForAddr = false
		progressed, err := s.link(addr)
		if s.ctx.Err() != nil {
			return
		}
		if progressed {
			backoff = s.cfg.Backoff
		}
		if s.cfg.Events != nil && (errors.Is(err, rpc.ErrClosed) || errors.Is(err, syscall.ECONNREFUSED)) {
			s.cfg.Events(MasterGone{Now: s.cfg.Now()})
		}
		switch {
		case errors.Is(err, context.Canceled):
			continue // Kick ended the link or its dial: connect to MasterHAAddr at once
		case errors.Is(err, errMasterMoved):
			s.log.Info("master HA address changed; reconnecting", "old", addr, "new", s.cfg.MasterHAAddr())
			continue
		case errors.Is(err, errDiverged):
			// The member decides what to cut (DecidesCuts) and kicks the slave when it keeps
			// the log; pulling again before that would only be refused again.
			s.sleep(divergedWait)
			continue
		case errors.Is(err, ErrBadChunk):
			s.log.Error("closing the replication link: bad chunk from the master", "master", addr, "err", err)
		default:
			s.log.Warn("replication link down; reconnecting", "master", addr, "err", err, "retryIn", backoff)
		}
		s.sleep(backoff)
		backoff = min(2*backoff, s.cfg.MaxBackoff)
	}
}

// sleep waits for d or Close.
func (s *Slave) sleep(d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-s.kick:
	case <-s.ctx.Done():
	}
}

// link connects to addr and pulls until an error; progressed tells whether any pull succeeded.
func (s *Slave) link(addr string) (progressed bool, err error) {
	linkCtx, linkCancel := context.WithCancel(s.ctx)
	defer linkCancel()
	// Kick ends the dial too: a member that learns of a new master while its slave still dials
	// the old one (cut off, so the dial lasts its whole timeout) must not wait for it.
	s.mu.Lock()
	s.linkCancel = linkCancel
	s.mu.Unlock()
	dctx, dcancel := context.WithTimeout(linkCtx, s.cfg.DialTimeout)
	conn, err := s.cfg.dial(dctx, addr, rpc.Options{MaxFrameSize: s.bound + frameMargin, MaxInFlight: 4})
	dcancel()
	if err != nil {
		return false, err
	}
	s.mu.Lock()
	s.st.MasterHAAddr = addr
	s.mu.Unlock()
	s.acked.Store(false) // a master that came back may hold another log
	s.connected.Store(true)
	s.log.Info("connected to the master", "master", addr)
	defer func() {
		s.acked.Store(false)
		s.connected.Store(false)
		s.masterLoaded.Store(false) // not heard from any more: keep no consumer for it
		_ = conn.Close()
	}()
	timeout := time.Duration(s.cfg.WaitMs)*time.Millisecond + callMargin
	for {
		if a := s.cfg.MasterHAAddr(); a != addr {
			return progressed, errMasterMoved
		}
		s.mu.Lock()
		epoch := s.st.Epoch
		s.mu.Unlock()
		req := protocol.HAPullRequest{
			BrokerName: s.cfg.BrokerName,
			SlaveID:    s.cfg.SlaveID,
			SlaveAddr:  s.slaveAddr(),
			Offset:     s.cfg.Log.LogEndOffset(),
			MaxBytes:   int32(min(s.cfg.MaxChunkBytes, 1<<30)),
			WaitMs:     s.cfg.WaitMs,
			Epoch:      epoch,
			MemberID:   s.cfg.MemberID,
		}
		req.LastEpochStart = -1
		if s.cfg.LastEpoch != nil {
			req.LastEpoch, req.LastEpochStart = s.cfg.LastEpoch()
		}
		ctx, cancel := context.WithTimeout(linkCtx, timeout)
		resp, err := conn.Call(ctx, protocol.CodeHAPull, &req, nil)
		cancel()
		if err != nil {
			return progressed, err
		}
		err = s.apply(req.Offset, resp.Header, resp.Body)
		resp.Release()
		if err != nil {
			return progressed, err
		}
		progressed = true
	}
}

// apply handles one answer to a pull from offset.
func (s *Slave) apply(offset int64, hdr, body []byte) error {
	h, raw, err := s.dec.readResponse(offset, hdr, body)
	if err != nil {
		return err
	}
	s.mu.Lock()
	seen := s.st.Epoch
	s.mu.Unlock()
	if h.Epoch < seen {
		// A deposed master (an older epoch than one this slave already followed) must not
		// feed it: nothing of the answer is applied.
		return fmt.Errorf("%w: the master answers in epoch %d, this slave has seen epoch %d", errStaleMaster, h.Epoch, seen)
	}
	s.masterEnd.Store(h.MasterEnd)
	if h.Result == protocol.HAOK {
		// NB: only an answer that acknowledged the pull says the master's confirmed offset
		// applies to this log (a prefix of the master's); one that found it diverged does not.
		s.confirmed.Store(h.ConfirmedOffset)
	}
	s.masterLoaded.Store(h.MasterLoaded)
	if len(h.MasterAddr) > 0 && string(h.MasterAddr) != s.masterAddr {
		s.masterAddr = string(h.MasterAddr)
		if s.cfg.Events != nil {
			s.cfg.Events(MasterLearnt{Addr: s.masterAddr})
		}
	}
	s.mu.Lock()
	s.st.MasterMin, s.st.MasterEnd = h.MasterMin, h.MasterEnd
	if h.Result == protocol.HAOK {
		s.st.ConfirmedOffset = h.ConfirmedOffset
	}
	s.st.Epoch = max(s.st.Epoch, h.Epoch)
	s.st.LastContact = s.cfg.Now()
	s.mu.Unlock()
	s.acked.Store(h.Result == protocol.HAOK)
	switch h.Result {
	case protocol.HAOK:
		if len(raw) == 0 {
			return nil
		}
		end, err := s.cfg.Log.AppendReplicated(h.Offset, raw)
		if err != nil {
			s.log.Error("cannot append replicated data; dropping the link", "offset", h.Offset, "bytes", len(raw), "err", err)
			return fmt.Errorf("cannot append %d replicated bytes at %d: %w", len(raw), h.Offset, err)
		}
		if s.cfg.OnProgress != nil {
			s.cfg.OnProgress(end, h.MasterEnd)
		}
		return nil
	case protocol.HAResync:
		s.log.Error("RESYNC: the master no longer has this slave's end offset (retention); discarding the whole log",
			"slaveEnd", offset, "masterMin", h.MasterMin, "masterEnd", h.MasterEnd, "restartAt", h.Offset)
		return s.reset(h.Offset, false)
	case protocol.HAOutOfRange:
		if s.cfg.DecidesCuts && s.cfg.Events != nil {
			s.divergeLog.Error(s.log, "this slave's log is ahead of the master's or diverged from it; the member decides where to cut it",
				"slaveEnd", offset, "masterMin", h.MasterMin, "masterEnd", h.MasterEnd, "divergingEpoch", h.DivergingEpoch, "truncateTo", h.TruncateTo)
			s.cfg.Events(OutOfRange{Divergence: Divergence{DivergingEpoch: h.DivergingEpoch, TruncateTo: h.TruncateTo,
				MasterMin: h.MasterMin, MasterEnd: h.MasterEnd, Epoch: h.Epoch}})
			return errDiverged
		}
		// NB: the old log is kept, not deleted: when the master lost its tail (a crash under
		// ASYNC_FLUSH, a replaced disk), this slave may hold the only copy of acknowledged
		// messages, and only an operator may decide to throw them away.
		s.log.Error("RESYNC: this slave's log is ahead of the master's or diverged from it; setting it aside and copying the master's",
			"slaveEnd", offset, "masterMin", h.MasterMin, "masterEnd", h.MasterEnd)
		return s.reset(h.MasterMin, true)
	case protocol.HAFenced:
		return errFenced
	}
	return fmt.Errorf("%w: result %d", ErrBadChunk, h.Result)
}

func (s *Slave) reset(base int64, keep bool) error {
	kept, err := s.cfg.Log.ResetTo(base, keep)
	if err != nil {
		return fmt.Errorf("cannot reset the log to %d: %w", base, err)
	}
	// The confirmed offset heard before was of the old log: nothing of the new one is known
	// to be confirmed until the master acknowledges it.
	s.confirmed.Store(min(s.confirmed.Load(), base))
	s.mu.Lock()
	s.st.ConfirmedOffset = min(s.st.ConfirmedOffset, base)
	s.st.Resyncs++
	s.mu.Unlock()
	if kept != "" {
		s.log.Error("the diverged log was moved aside: it may hold acknowledged messages the master lost; "+
			"inspect it (e.g. open a copy as a store) before deleting it", "dir", kept)
	}
	return nil
}

// RequestLeave asks the master at haAddr (its HA port) to take this slave out of the in-sync set
// before the slave cuts its log (CodeHALeave), on a connection of its own; it returns once the
// master no longer counts the slave (in a Raft-elected group, once the set without it is
// committed), or the master's refusal or the network's error. The caller must have stopped the
// slave's replication first: a slave that connects again is counted again once caught up.
func RequestLeave(ctx context.Context, haAddr string, req protocol.HALeaveRequest) error {
	c, err := rpc.Dial(ctx, haAddr, rpc.Options{})
	if err != nil {
		return err
	}
	defer c.Close()
	return c.CallDecode(ctx, protocol.CodeHALeave, &req, nil, nil, nil)
}

// readResponse decodes and checks an answer to a pull from reqOffset and returns it with the
// uncompressed chunk (empty unless the result is HAOK with data). Every failure wraps
// ErrBadChunk. The chunk is body itself or a view of the decoder's buffer (see decode).
func (d *chunkDecoder) readResponse(reqOffset int64, hdr, body []byte) (protocol.HAPullResponse, []byte, error) {
	var h protocol.HAPullResponse
	if err := h.ReadFrom(hdr); err != nil {
		return h, nil, fmt.Errorf("%w: header: %v", ErrBadChunk, err)
	}
	if h.MasterMin < 0 || h.MasterEnd < h.MasterMin {
		return h, nil, fmt.Errorf("%w: master bounds [%d, %d)", ErrBadChunk, h.MasterMin, h.MasterEnd)
	}
	switch h.Result {
	case protocol.HAOK:
		if h.Offset < reqOffset || h.RawLength < 0 || h.Offset > h.MasterEnd-int64(h.RawLength) {
			return h, nil, fmt.Errorf("%w: %d bytes at %d for a pull from %d, master end %d", ErrBadChunk, h.RawLength, h.Offset, reqOffset, h.MasterEnd)
		}
		raw, err := d.decode(h.Codec, h.RawLength, body)
		if err != nil {
			return h, nil, err
		}
		return h, raw, nil
	case protocol.HAResync:
		if h.Offset < 0 {
			return h, nil, fmt.Errorf("%w: resync at %d", ErrBadChunk, h.Offset)
		}
	case protocol.HAOutOfRange:
		if h.TruncateTo < -1 {
			return h, nil, fmt.Errorf("%w: out of range with a cut at %d", ErrBadChunk, h.TruncateTo)
		}
	case protocol.HAFenced:
	default:
		return h, nil, fmt.Errorf("%w: unknown result %d", ErrBadChunk, h.Result)
	}
	if len(body) != 0 {
		return h, nil, fmt.Errorf("%w: result %d with a %d-byte body", ErrBadChunk, h.Result, len(body))
	}
	return h, nil, nil
}
