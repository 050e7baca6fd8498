package ha

import (
	"cmp"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/petrel-mq/petrel/internal/ratelog"
	"github.com/petrel-mq/petrel/protocol"
	"github.com/petrel-mq/petrel/protocol/rpc"
)

// Defaults of MasterConfig.
const (
	DefaultMaxChunkBytes     = 1 << 20
	DefaultMaxWait           = 5 * time.Second
	DefaultInSyncMaxLagBytes = 256 << 20
	DefaultInSyncMaxLagTime  = time.Second
	// tickInterval is how often the master re-evaluates the in-sync set, so silent slaves leave
	// it without an acknowledgement to trigger the evaluation.
	tickInterval = 100 * time.Millisecond
	// idleTimeout closes a replication connection that sends no request for this long (a slave
	// sends its next pull as soon as it has stored the previous answer).
	idleTimeout = time.Minute
)

// MasterConfig configures a Master. Zero values take the defaults.
type MasterConfig struct {
	// BrokerName is the broker group; pulls naming another group are fenced.
	BrokerName string
	// Log is the commit log replicated.
	Log MasterLog
	// ListenAddr is the HA address to listen on (host:port; the broker picks listenPort+1).
	ListenAddr string
	// Codec compresses chunks: CodecS2 (default), CodecZstd or CodecNone.
	Codec Codec
	// MaxChunkBytes caps the uncompressed bytes of one answer (default 1 MiB); a single batch
	// larger than this is sent whole.
	MaxChunkBytes int
	// MaxWait caps how long a pull with nothing to return is held (default 5 s).
	MaxWait time.Duration
	// InSyncMaxLagBytes and InSyncMaxLagTime: a slave lagging more than InSyncMaxLagBytes
	// (default 256 MiB, RocketMQ's haMaxGapNotInSync) for longer than InSyncMaxLagTime (default
	// 1 s), or not heard from for InSyncMaxLagTime, leaves the in-sync set.
	InSyncMaxLagBytes int64
	InSyncMaxLagTime  time.Duration
	// InSyncRejoinLagBytes: a slave joins the set once it lags at most this much (default 0:
	// fully caught up).
	InSyncRejoinLagBytes int64
	// Logger receives replication events; default slog.Default().
	Logger *slog.Logger
	// Now is the clock of the in-sync rules; default time.Now.
	Now func() time.Time
	// ClientAddr, when set, returns the broker's client address (host:port, "" before it is
	// known); every answer carries it so that slaves learn where their master serves clients.
	ClientAddr func() string
	// Loaded, when set, tells whether the broker counts as loaded; every answer carries it
	// (HAPullResponse.MasterLoaded) so that slaves keep the consumers the master sends them.
	// It must be cheap (an atomic load).
	Loaded func() bool
	// CommitSyncSet, when set (a Raft-elected group), commits a change of the in-sync set
	// before the master relies on it (RocketMQ 5's AlterSyncStateSet through the controller):
	// it gets the slaves of the new set and returns once the change is committed, or an error
	// (the master retries). A slave joining counts for acknowledgements at once (stricter); a
	// slave leaving stops counting only after the commit, so every member of the committed set
	// always holds every acknowledged message. Nil: changes take effect at once (static roles).
	CommitSyncSet func(slaves []SyncMember) error
	// InitialSyncSet (with CommitSyncSet) lists the slaves of the committed set this master
	// starts its epoch with: they count for acknowledgements from the start, and leave by the
	// in-sync rules (a member that never connects leaves after InSyncMaxLagTime).
	InitialSyncSet []SyncMember
	// Epochs, when set (a Raft-elected group), returns the epoch starts of the master's log,
	// ascending (a shared slice the master does not modify): a pull naming the slave's newest
	// epoch is acknowledged only when the slave's log is a prefix of the master's
	// (DivergingEpoch), else answered HAOutOfRange with where the logs part. It must be cheap
	// (it runs on every pull).
	Epochs func() []EpochStart
	// MinAcks is how many in-sync slaves besides the master must hold a batch for it to be
	// confirmed (minInSyncReplicas - 1): ConfirmedOffset advances only while at least that many
	// slaves count. 0: the master alone confirms what no counted slave has to hold.
	MinAcks int
	// InitialConfirmed is the confirmed offset the master starts from (what this member knew
	// the group confirmed before it took over; at most its log end), so that consumers reading
	// up to the confirmed offset never see it go back at a change of master. 0 by default.
	InitialConfirmed int64
}

// SyncMember is a slave of a Raft-elected group's in-sync set.
type SyncMember struct {
	MemberID string // its Raft server id
	BrokerID int64
	Addr     string // its client address
}

// Master serves replication pulls on its own TCP port (RocketMQ's HAService with one
// HAConnection per slave) and tracks the slaves' acknowledgements, the in-sync set and the
// SYNC_MASTER waiters.
//
// All methods are safe for concurrent use. NotifyAppend, WaitReplicated, ConfirmedOffset,
// InSyncCount, ConnectedSlaves, SlavesForRead and Epoch never block on I/O or on a lock held
// across I/O, so the broker may call them from its event loops.
//
// Goroutines: the rpc server's accept loop and one goroutine per slave connection (which serves
// that slave's pulls in order, holding a pull while there is nothing new), a notifier that wakes
// held pulls after NotifyAppend, and a service goroutine that ticks the in-sync rules and times
// out WaitReplicated waiters.
type Master struct {
	cfg   MasterConfig
	rules SyncRules
	codec uint8
	log   *slog.Logger
	warn  ratelog.Limiter

	// end is the highest end passed to NotifyAppend: held pulls wake when it moves.
	end   atomic.Int64
	epoch atomic.Uint32
	// ackLimit is the lowest offset acknowledged by a member of the in-sync set, MaxInt64 when
	// the set is empty: every waiter whose end is at most ackLimit is complete.
	ackLimit atomic.Int64
	// confirmed is the highest offset held by at least MinAcks counted slaves (and the master),
	// never lowered; confirmedLive is set while MinAcks is 0 and no slave counts, when the
	// master alone confirms its whole log (ConfirmedOffset is then the log end). Both are
	// written under mu (publishLocked).
	confirmed     atomic.Int64
	confirmedLive atomic.Bool
	inSyncN       atomic.Int32
	connected     atomic.Int32
	reads         atomic.Pointer[[]SlaveRead]
	// clientAddrB caches MasterConfig.ClientAddr once known.
	clientAddrB atomic.Pointer[[]byte]

	appendKick chan struct{} // NotifyAppend -> notifier, capacity 1
	waitKick   chan struct{} // WaitReplicated -> service goroutine, capacity 1
	setKick    chan struct{} // in-sync verdict changed -> syncSetCommitter, capacity 1
	done       chan struct{} // closed by Close
	wg         sync.WaitGroup

	// poll wakes held pulls: a held pull takes the current channel; the notifier closes it.
	poll struct {
		sync.Mutex
		ch chan struct{}
	}

	waiters waitQueue

	mu       sync.Mutex // guards the fields below
	slaves   map[int64]*slaveState
	sessions map[uint64]*session // by rpc.Peer ID
	started  bool
	closed   bool
	srv      *rpc.Server
	addr     string
	// committed is the in-sync set (slave member ids, sorted) last committed through
	// CommitSyncSet.
	committed []string
}

// slaveState is the master's record of one slave (by SlaveID). Guarded by Master.mu, except the
// byte counters.
type slaveState struct {
	id           int64
	addr         string // client address
	haAddr       string // remote address of its replication connection
	acked        int64  // -1: nothing acknowledged
	readEnd      int64  // master's end when it last read for the slave; -1 before the first read
	readAt       time.Time
	lastSeen     time.Time
	lastCaughtUp time.Time
	// lastFull is the last time the slave held everything the master had when it last read for
	// it (acked >= readEnd) or had a pull held (nothing new): the time lag of Status is
	// measured from it.
	lastFull time.Time
	inSync   bool
	// counted: the slave counts for acknowledgements (ackLimit, inSyncN). Equal to inSync
	// without CommitSyncSet; with it, see MasterConfig.CommitSyncSet.
	counted  bool
	memberID string
	// graceUntil: a slave of MasterConfig.InitialSyncSet stays in the set until then although it
	// has acknowledged nothing to this master yet.
	graceUntil time.Time
	regressed  bool
	// leaving: the slave asked to leave the set before cutting its log (CodeHALeave); it stays
	// out, whatever it acknowledges, until it connects again.
	leaving   bool
	session   uint64 // peer id of its current connection, 0 when none
	holding   int    // pulls of the slave being held
	rawBytes  atomic.Int64
	wireBytes atomic.Int64
}

func (s *slaveState) progressLocked(now time.Time) SlaveProgress {
	p := SlaveProgress{
		Acked:        s.acked,
		ReadEnd:      s.readEnd,
		ReadAt:       s.readAt,
		LastSeen:     s.lastSeen,
		LastCaughtUp: s.lastCaughtUp,
		Regressed:    s.regressed,
		Connected:    s.session != 0,
	}
	if s.holding > 0 {
		p.LastSeen = now
	}
	return p
}

// session is one slave connection. Its fields are used only by the connection's goroutine,
// except slave, which is set under Master.mu.
type session struct {
	peer  *rpc.Peer
	slave *slaveState
	enc   chunkEncoder
	resp  protocol.HAPullResponse // the reply header: read by the server after the handler returns
	timer *time.Timer
	ready []*waiter // scratch for completed waiters
}

// NewMaster returns a Master; Start makes it listen.
func NewMaster(cfg MasterConfig) *Master {
	if cfg.MaxChunkBytes <= 0 {
		cfg.MaxChunkBytes = DefaultMaxChunkBytes
	}
	if cfg.MaxWait <= 0 {
		cfg.MaxWait = DefaultMaxWait
	}
	if cfg.InSyncMaxLagBytes <= 0 {
		cfg.InSyncMaxLagBytes = DefaultInSyncMaxLagBytes
	}
	if cfg.InSyncMaxLagTime <= 0 {
		cfg.InSyncMaxLagTime = DefaultInSyncMaxLagTime
	}
	if cfg.InSyncRejoinLagBytes < 0 {
		cfg.InSyncRejoinLagBytes = 0
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	m := &Master{
		cfg: cfg,
		rules: SyncRules{
			MaxLagBytes:    cfg.InSyncMaxLagBytes,
			MaxLagTime:     cfg.InSyncMaxLagTime,
			RejoinLagBytes: cfg.InSyncRejoinLagBytes,
		},
		log:        cfg.Logger.With("component", "ha-master"),
		appendKick: make(chan struct{}, 1),
		setKick:    make(chan struct{}, 1),
		waitKick:   make(chan struct{}, 1),
		done:       make(chan struct{}),
		slaves:     make(map[int64]*slaveState),
		sessions:   make(map[uint64]*session),
	}
	m.ackLimit.Store(math.MaxInt64)
	m.confirmed.Store(max(cfg.InitialConfirmed, 0))
	m.reads.Store(&[]SlaveRead{})
	m.seedSyncSet()
	m.mu.Lock()
	m.publishLocked() // NB: only a master that counts no slave from the start confirms its log alone
	m.mu.Unlock()
	return m
}

// Start listens on ListenAddr and starts serving pulls. It fails on a bad config or when the
// address cannot be bound.
func (m *Master) Start() error {
	codec, err := ParseCodec(string(m.cfg.Codec))
	if err != nil {
		return err
	}
	if m.cfg.Log == nil {
		return errors.New("ha: master has no log")
	}
	m.codec = codec.wire()
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return ErrClosed
	}
	if m.started {
		return errors.New("ha: master already started")
	}
	ln, err := net.Listen("tcp", m.cfg.ListenAddr)
	if err != nil {
		return fmt.Errorf("cannot listen for replication on %s: %w", m.cfg.ListenAddr, err)
	}
	m.started = true
	m.addr = ln.Addr().String()
	m.end.Store(m.cfg.Log.LogEndOffset())
	m.srv = rpc.NewServer(m.handle, rpc.ServerOptions{
		IdleTimeout:  idleTimeout,
		OnDisconnect: m.onDisconnect,
		Logger:       m.log,
	})
	m.wg.Add(3)
	go func() {
		defer m.wg.Done()
		_ = m.srv.Serve(ln)
	}()
	go m.notifier()
	go m.service()
	if m.cfg.CommitSyncSet != nil {
		m.wg.Add(1)
		go m.syncSetCommitter()
	}
	m.log.Info("replication master listening", "addr", m.addr, "broker", m.cfg.BrokerName, "codec", codec)
	return nil
}

// Addr returns the address the master listens on ("" before Start).
func (m *Master) Addr() string {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.addr
}

// Close stops serving: held pulls are answered with an error, connections are closed, the
// goroutines stop, and WaitReplicated callbacks still waiting run with ErrClosed. It is
// idempotent.
func (m *Master) Close() error {
	m.mu.Lock()
	if m.closed {
		m.mu.Unlock()
		return nil
	}
	m.closed = true
	srv := m.srv
	m.mu.Unlock()
	close(m.done)
	if srv != nil {
		_ = srv.Close()
	}
	m.wg.Wait()
	runAll(m.waiters.close(nil), ErrClosed)
	return nil
}

// SetEpoch sets the master's epoch: pulls that carry a newer epoch are fenced, and answers carry
// it. Safe for concurrent use.
func (m *Master) SetEpoch(e uint32) { m.epoch.Store(e) }

// Epoch returns the master's epoch.
func (m *Master) Epoch() uint32 { return m.epoch.Load() }

// NotifyAppend tells the master that the log end moved to end, waking held pulls. The broker
// calls it after every append, from its event loop: it is an atomic update and a non-blocking
// channel send, and takes no lock.
func (m *Master) NotifyAppend(end int64) {
	for {
		cur := m.end.Load()
		if end <= cur {
			return
		}
		if m.end.CompareAndSwap(cur, end) {
			break
		}
	}
	select {
	case m.appendKick <- struct{}{}:
	default:
	}
}

// WaitReplicated calls cb(nil) once every member of the in-sync set has acknowledged end and the
// set has at least minAcks slaves (the broker's minInSyncReplicas minus the master; with minAcks
// 0 an empty set completes at once), or cb(ErrReplicationTimeout) after timeout: a slave that
// leaves the set during the wait never lets a send needing it succeed. It never
// blocks and never runs cb on the caller's goroutine, except after Close, when cb(ErrClosed) runs
// at once. cb runs on a Master goroutine and must be short (queueing an answer).
func (m *Master) WaitReplicated(end int64, minAcks int, timeout time.Duration, cb func(err error)) {
	w := waiterPool.Get().(*waiter)
	w.end, w.minAcks, w.deadline, w.cb = end, max(minAcks, 0), time.Now().Add(timeout), cb
	earliest, closed := m.waiters.add(w)
	if closed {
		w.run(ErrClosed)
		return
	}
	// NB: ackLimit is read after the waiter is queued: an acknowledgement that completed the
	// queue just before either sees this waiter or moved ackLimit before this load.
	if earliest || end <= m.ackLimit.Load() {
		select {
		case m.waitKick <- struct{}{}:
		default:
		}
	}
}

// ConfirmedOffset returns the confirmed offset: the highest offset held by the master and at
// least MinAcks counted slaves, every counted slave included (the lowest acknowledged offset of
// the counted slaves when it was reached), never lower than before; the log end while MinAcks
// is 0 and no slave counts. Everything acknowledged is below it, and every member a new master
// may come from holds it, so no failover undoes a read below it. Two atomic loads.
func (m *Master) ConfirmedOffset() int64 {
	end := m.cfg.Log.LogEndOffset()
	if m.confirmedLive.Load() {
		return end
	}
	return min(m.confirmed.Load(), end)
}

// InSyncCount returns the number of slaves in the in-sync set (the master not counted).
func (m *Master) InSyncCount() int { return int(m.inSyncN.Load()) }

// ConnectedSlaves returns the number of slaves with a replication connection open.
func (m *Master) ConnectedSlaves() int { return int(m.connected.Load()) }

// SlavesForRead returns the slaves for read suggestions, sorted by BrokerID. The slice is shared
// and replaced, never modified, on every change: callers must not modify it. One atomic load.
func (m *Master) SlavesForRead() []SlaveRead { return *m.reads.Load() }

// Status returns a snapshot of the replication state for CodeGetHAStatus. Role is "MASTER" and
// BrokerID 0; the broker may override them (e.g. with its brokerRole).
func (m *Master) Status() protocol.HAStatus {
	logMin, logEnd := m.cfg.Log.LogMinOffset(), m.cfg.Log.LogEndOffset()
	now := m.cfg.Now()
	st := protocol.HAStatus{
		Role:            "MASTER",
		Epoch:           m.Epoch(),
		LogMin:          logMin,
		LogEnd:          logEnd,
		ConfirmedOffset: m.ConfirmedOffset(),
		Connected:       true,
	}
	m.mu.Lock()
	for _, s := range m.slaves {
		p := s.progressLocked(now)
		lagMs := int64(0)
		if LagBytes(p, logEnd) > 0 && s.holding == 0 && !s.lastFull.IsZero() {
			lagMs = now.Sub(s.lastFull).Milliseconds()
		}
		st.Slaves = append(st.Slaves, protocol.SlaveStatus{
			BrokerID:    s.id,
			Addr:        s.addr,
			HAAddr:      s.haAddr,
			AckedOffset: s.acked,
			LagBytes:    LagBytes(p, logEnd),
			LagMs:       lagMs,
			InSync:      s.inSync,
			Connected:   s.session != 0,
			RawBytes:    s.rawBytes.Load(),
			WireBytes:   s.wireBytes.Load(),
		})
	}
	st.InSyncReplicas = int32(m.inSyncN.Load()) + 1
	m.mu.Unlock()
	slices.SortFunc(st.Slaves, func(a, b protocol.SlaveStatus) int { return cmp.Compare(a.BrokerID, b.BrokerID) })
	return st
}

// notifier wakes held pulls after appends.
func (m *Master) notifier() {
	defer m.wg.Done()
	for {
		select {
		case <-m.done:
			return
		case <-m.appendKick:
		}
		m.poll.Lock()
		if m.poll.ch != nil {
			close(m.poll.ch)
			m.poll.ch = nil
		}
		m.poll.Unlock()
	}
}

// pollChan returns the channel the notifier closes after the next append.
func (m *Master) pollChan() <-chan struct{} {
	m.poll.Lock()
	defer m.poll.Unlock()
	if m.poll.ch == nil {
		m.poll.ch = make(chan struct{})
	}
	return m.poll.ch
}

// service ticks the in-sync rules, completes waiters after WaitReplicated kicks and set changes,
// and times waiters out.
func (m *Master) service() {
	defer m.wg.Done()
	ticker := time.NewTicker(tickInterval)
	defer ticker.Stop()
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	defer timer.Stop()
	var armed time.Time
	var ws []*waiter
	for {
		select {
		case <-m.done:
			return
		case <-ticker.C:
			m.tick()
		case <-m.waitKick:
		case <-timer.C:
			armed = time.Time{}
		}
		limit, n := m.ackState()
		ws = runAll(m.waiters.popReady(limit, n, ws), nil)
		var next time.Time
		ws, next = m.waiters.popExpired(time.Now(), ws)
		ws = runAll(ws, ErrReplicationTimeout)
		if !next.IsZero() && !next.Equal(armed) {
			timer.Reset(time.Until(next))
			armed = next
		}
	}
}

// tick re-evaluates every slave, so that silent slaves leave the set.
func (m *Master) tick() {
	end := m.cfg.Log.LogEndOffset()
	m.mu.Lock()
	now := m.cfg.Now()
	changed := false
	for _, s := range m.slaves {
		if s.holding > 0 {
			s.lastSeen = now
			s.lastFull = now
			if CaughtUp(s.progressLocked(now), end, m.rules) {
				s.lastCaughtUp = now
			}
		}
		changed = m.evalLocked(s, end, now) || changed
	}
	if changed {
		m.publishLocked()
	}
	m.mu.Unlock()
}

// evalLocked applies the in-sync rules to s and reports whether its membership changed.
// m.mu must be held.
func (m *Master) evalLocked(s *slaveState, end int64, now time.Time) bool {
	if s.leaving {
		s.regressed = false
		return false // out since it asked to leave (leave)
	}
	if s.acked < 0 && now.Before(s.graceUntil) {
		return false // a member of the committed set this master started with, not heard yet
	}
	p := s.progressLocked(now)
	next, why := NextInSync(s.inSync, p, end, now, m.rules)
	s.regressed = false
	if next == s.inSync {
		return false
	}
	n := m.setInSyncLocked(s, next)
	m.log.Info("in-sync set changed", "slave", s.id, "inSync", next, "reason", string(why),
		"lagBytes", LagBytes(p, end), "acked", s.acked, "masterEnd", end, "countedSlaves", n)
	return true
}

// ackState returns ackLimit and the in-sync count as one consistent pair (both change under
// m.mu: evalLocked moves the count before publishLocked moves the limit).
func (m *Master) ackState() (limit int64, inSync int) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.ackLimit.Load(), int(m.inSyncN.Load())
}

// publishLocked recomputes ackLimit, the confirmed offset and the SlavesForRead snapshot. m.mu
// must be held.
func (m *Master) publishLocked() {
	limit := int64(math.MaxInt64)
	counted := 0
	reads := make([]SlaveRead, 0, len(m.slaves))
	for _, s := range m.slaves {
		if s.counted {
			limit = min(limit, s.acked)
			counted++
		}
		reads = append(reads, SlaveRead{BrokerID: s.id, InSync: s.inSync && s.session != 0, Acked: s.acked})
	}
	slices.SortFunc(reads, func(a, b SlaveRead) int { return cmp.Compare(a.BrokerID, b.BrokerID) })
	m.ackLimit.Store(limit)
	live := m.cfg.MinAcks <= 0 && counted == 0
	switch {
	case live:
	case m.confirmedLive.Load():
		// The master alone confirmed its whole log until now: that stays confirmed.
		m.raiseConfirmed(m.cfg.Log.LogEndOffset())
	case counted >= m.cfg.MinAcks:
		m.raiseConfirmed(limit)
	}
	m.confirmedLive.Store(live)
	m.reads.Store(&reads)
}

// raiseConfirmed moves the confirmed offset up to off (never down). m.mu must be held.
func (m *Master) raiseConfirmed(off int64) {
	if off > m.confirmed.Load() && off != math.MaxInt64 {
		m.confirmed.Store(off)
	}
}

// sessionFor returns the session of the request's connection, binding it to the slave on the
// first request. A connection keeps the SlaveID of its first request.
func (m *Master) sessionFor(p *rpc.Peer, h *protocol.HAPullRequest) (*session, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if sess := m.sessions[p.ID()]; sess != nil {
		if sess.slave.id != h.SlaveID {
			return nil, fmt.Errorf("slave id %d on a connection of slave %d", h.SlaveID, sess.slave.id)
		}
		return sess, nil
	}
	now := m.cfg.Now()
	s := m.slaves[h.SlaveID]
	if s == nil {
		s = &slaveState{id: h.SlaveID, acked: -1, readEnd: -1, lastCaughtUp: now}
		m.slaves[h.SlaveID] = s
	} else if s.session != 0 {
		// A slave that reconnects before its old connection was seen closing, or a second
		// broker configured with the same brokerId: the new connection takes over and the old
		// one is closed, so that no connection replicates under a record it no longer owns
		// (two slaves with one id then keep taking over from each other, loudly).
		m.warn.Warn(m.log, "slave connected again while its previous connection is open; the new one takes over and the old one is closed",
			"slave", s.id, "old", s.haAddr, "new", p.RemoteAddr())
		if old := m.sessionOf(s.session); old != nil {
			_ = old.peer.Close()
		}
	}
	if s.session == 0 {
		m.connected.Add(1)
	}
	s.session = p.ID()
	s.leaving = false // a new connection: the slave has cut its log (or never did) and may rejoin
	s.addr = h.SlaveAddr
	s.memberID = h.MemberID
	s.haAddr = p.RemoteAddr()
	s.lastSeen = now
	s.holding = 0
	sess := &session{peer: p, slave: s}
	sess.enc.codec = m.codec
	m.sessions[p.ID()] = sess
	m.log.Info("slave connected", "slave", s.id, "addr", s.addr, "haAddr", s.haAddr)
	m.publishLocked()
	return sess, nil
}

// sessionOf returns the session of connection id, nil if none. m.mu must be held.
func (m *Master) sessionOf(id uint64) *session { return m.sessions[id] }

// onDisconnect forgets a closed connection (rpc server callback, after its last request).
func (m *Master) onDisconnect(p *rpc.Peer) {
	m.mu.Lock()
	defer m.mu.Unlock()
	sess := m.sessions[p.ID()]
	if sess == nil {
		return
	}
	delete(m.sessions, p.ID())
	if sess.timer != nil {
		sess.timer.Stop()
	}
	s := sess.slave
	if s.session != p.ID() {
		return // taken over by a newer connection
	}
	s.session = 0
	s.holding = 0
	m.connected.Add(-1)
	m.log.Info("slave disconnected", "slave", s.id, "haAddr", s.haAddr, "acked", s.acked, "inSync", s.inSync)
	if s.inSync {
		// A closed connection is a clear sign: the slave leaves the set now rather than after
		// InSyncMaxLagTime of silence, so SYNC sends stop waiting for it at once.
		n := m.setInSyncLocked(s, false)
		m.log.Info("in-sync set changed", "slave", s.id, "inSync", false, "reason", "disconnected",
			"acked", s.acked, "countedSlaves", n)
	}
	if s.acked < 0 && !s.counted {
		delete(m.slaves, s.id) // never acknowledged anything: not worth listing
	}
	m.publishLocked()
	select {
	case m.waitKick <- struct{}{}: // the set changed: waiters may complete or must wait for fewer
	default:
	}
}

// ack records that the slave of sess holds every byte before offset (a request that the log
// accepted), re-evaluates its membership and completes the waiters this allows. readEnd is the
// log end read for this request; the evaluation uses the previous one (see SlaveProgress).
func (m *Master) ack(sess *session, offset, readEnd int64) {
	m.mu.Lock()
	s := sess.slave
	now := m.cfg.Now()
	if s.acked >= 0 && offset < s.acked {
		s.regressed = true
		m.log.Warn("slave's acknowledged offset went back; it no longer counts for what it lost",
			"slave", s.id, "from", s.acked, "to", offset)
	}
	if s.readEnd < 0 {
		s.readEnd, s.readAt = readEnd, now
	}
	if offset >= s.readEnd {
		s.lastFull = now
	}
	s.acked = offset
	s.lastSeen = now
	if CaughtUp(s.progressLocked(now), readEnd, m.rules) {
		s.lastCaughtUp = now
	}
	m.evalLocked(s, readEnd, now)
	s.readEnd, s.readAt = readEnd, now
	m.publishLocked()
	limit, n := m.ackLimit.Load(), int(m.inSyncN.Load())
	m.mu.Unlock()
	sess.ready = runAll(m.waiters.popReady(limit, n, sess.ready), nil)
}

// readFor records that a held pull of sess woke and read the log up to readEnd: the slave is
// caught up once it acknowledges that end (SlaveProgress.ReadEnd).
func (m *Master) readFor(sess *session, readEnd int64) {
	m.mu.Lock()
	if sess.slave.session == sess.peer.ID() {
		sess.slave.readEnd, sess.slave.readAt = readEnd, m.cfg.Now()
	}
	m.mu.Unlock()
}

// hold marks a pull of sess as held (delta +1) or no longer held (-1).
func (m *Master) hold(sess *session, delta int) {
	m.mu.Lock()
	if sess.slave.session == sess.peer.ID() {
		sess.slave.holding += delta
		// A pull held, or woken by an append, finds the slave holding everything.
		sess.slave.lastFull = m.cfg.Now()
		if delta < 0 {
			sess.slave.lastSeen = sess.slave.lastFull
		}
	}
	m.mu.Unlock()
}

// leaveTimeout bounds how long a CodeHALeave request waits for the set without its slave to be
// committed.
const leaveTimeout = 3 * time.Second

// handle serves one request of a replication connection.
func (m *Master) handle(req *rpc.Request) rpc.Reply {
	if req.Code == protocol.CodeHALeave {
		return m.leave(req)
	}
	if req.Code != protocol.CodeHAPull {
		return rpc.Errorf(protocol.StatusRequestCodeNotSupported, "the HA port serves only %s and %s, not %s", protocol.CodeHAPull, protocol.CodeHALeave, req.Code)
	}
	var h protocol.HAPullRequest
	if err := h.ReadFrom(req.Header); err != nil {
		return rpc.Errorf(protocol.StatusRequestMalformed, "cannot decode %s header: %v", req.Code, err)
	}
	if h.SlaveID <= 0 || h.Offset < 0 {
		return rpc.Errorf(protocol.StatusRequestMalformed, "slave id %d, offset %d", h.SlaveID, h.Offset)
	}
	epoch := m.Epoch()
	if h.BrokerName != m.cfg.BrokerName || h.Epoch > epoch {
		// NB: fenced before the connection is bound to a slave record, so a stray pull naming
		// a real slave's id never takes over (and, on close, disconnects) that slave.
		m.warn.Warn(m.log, "fencing a replication pull", "slave", h.SlaveID, "remote", req.Peer.RemoteAddr(),
			"broker", h.BrokerName, "want", m.cfg.BrokerName, "epoch", h.Epoch, "masterEpoch", epoch)
		resp := &protocol.HAPullResponse{Offset: h.Offset, Epoch: epoch, Result: protocol.HAFenced, TruncateTo: -1}
		m.fillBounds(resp)
		return rpc.Reply{Header: resp}
	}
	sess, err := m.sessionFor(req.Peer, &h)
	if err != nil {
		return rpc.Errorf(protocol.StatusRequestMalformed, "%v", err)
	}
	sess.resp = protocol.HAPullResponse{Offset: h.Offset, Epoch: epoch, TruncateTo: -1}
	reply := rpc.Reply{Header: &sess.resp}
	if h.LastEpoch != 0 && m.cfg.Epochs != nil {
		if epoch, end := DivergingEpoch(m.cfg.Epochs(), m.cfg.Log.LogEndOffset(), h.LastEpoch); epoch != h.LastEpoch || h.Offset > end {
			// NB: acknowledges nothing: the slave's log past end is not this master's, or its
			// newest epoch is one this master never had.
			m.warn.Warn(m.log, "slave's log diverged from this one; answering out of range with where to cut",
				"slave", h.SlaveID, "offset", h.Offset, "lastEpoch", h.LastEpoch, "lastEpochStart", h.LastEpochStart,
				"divergingEpoch", epoch, "epochEnd", end)
			sess.resp.Result = protocol.HAOutOfRange
			sess.resp.TruncateTo = end
			sess.resp.DivergingEpoch = epoch
			m.fillBounds(&sess.resp)
			return reply
		}
	}
	maxBytes := m.cfg.MaxChunkBytes
	if h.MaxBytes > 0 && int(h.MaxBytes) < maxBytes {
		maxBytes = int(h.MaxBytes)
	}
	wait := min(time.Duration(max(h.WaitMs, 0))*time.Millisecond, m.cfg.MaxWait)
	acked, waited := false, false
	var deadline time.Time
	for {
		seen := m.end.Load()
		readEnd := m.cfg.Log.LogEndOffset()
		var start int64
		var body []byte
		var codec uint8
		raw := 0
		err := m.cfg.Log.ReadReplication(h.Offset, maxBytes, func(st int64, data []byte) error {
			start, raw = st, len(data)
			body, codec = sess.enc.encode(data)
			return nil
		})
		switch {
		case errors.Is(err, ErrBeyondEnd), errors.Is(err, ErrNotBatchBoundary):
			// NB: acknowledges nothing: the slave's log does not match ours at that offset.
			m.warn.Warn(m.log, "slave asks from an offset this log does not have; answering out of range",
				"slave", h.SlaveID, "offset", h.Offset, "err", err,
				"masterMin", m.cfg.Log.LogMinOffset(), "masterEnd", m.cfg.Log.LogEndOffset())
			sess.resp.Result = protocol.HAOutOfRange
			m.fillBounds(&sess.resp)
			return reply
		case errors.Is(err, ErrBelowMin):
			sess.resp.Result = protocol.HAResync
			m.fillBounds(&sess.resp)
			sess.resp.Offset = sess.resp.MasterMin
			m.log.Warn("slave asks from an offset retention removed; telling it to resync",
				"slave", h.SlaveID, "offset", h.Offset, "masterMin", sess.resp.MasterMin)
			return reply
		case err != nil:
			m.warn.Warn(m.log, "cannot read the log for replication", "slave", h.SlaveID, "offset", h.Offset, "err", err)
			return rpc.Errorf(protocol.StatusSystemError, "cannot read the log at %d: %v", h.Offset, err)
		}
		if !acked {
			m.ack(sess, h.Offset, readEnd)
			acked = true
		} else if raw > 0 {
			m.readFor(sess, readEnd)
		}
		if raw > 0 || waited || wait <= 0 {
			sess.resp.Result = protocol.HAOK
			sess.resp.Offset = start
			sess.resp.Codec = codec
			sess.resp.RawLength = int32(raw)
			m.fillBounds(&sess.resp)
			sess.slave.rawBytes.Add(int64(raw))
			sess.slave.wireBytes.Add(int64(len(body)))
			reply.Body = body
			return reply
		}
		// Nothing after the offset: hold the pull until an append or the wait ends.
		ch := m.pollChan()
		if m.end.Load() != seen {
			continue // appended while we read: read again
		}
		if deadline.IsZero() {
			deadline = time.Now().Add(wait)
		}
		left := time.Until(deadline)
		if left <= 0 {
			waited = true
			continue
		}
		if sess.timer == nil {
			sess.timer = time.NewTimer(left)
		} else {
			sess.timer.Reset(left)
		}
		m.hold(sess, 1)
		select {
		case <-ch:
		case <-sess.timer.C:
			waited = true // answer with whatever the next read finds, even nothing
		case <-m.done:
			sess.timer.Stop()
			m.hold(sess, -1)
			return rpc.Errorf(protocol.StatusShuttingDown, "replication master is closing")
		}
		sess.timer.Stop()
		m.hold(sess, -1)
	}
}

// leave serves CodeHALeave: the slave is about to cut its log, so it leaves the in-sync set now
// and stays out until it connects again. The answer comes once the master no longer counts it,
// that is (with CommitSyncSet) once the set without it is committed: from then on no
// acknowledgement relies on its copy and no new master can come from it. Refused when the
// request names another group or epoch.
func (m *Master) leave(req *rpc.Request) rpc.Reply {
	var h protocol.HALeaveRequest
	if err := h.ReadFrom(req.Header); err != nil {
		return rpc.Errorf(protocol.StatusRequestMalformed, "cannot decode %s header: %v", req.Code, err)
	}
	if h.SlaveID <= 0 {
		return rpc.Errorf(protocol.StatusRequestMalformed, "slave id %d", h.SlaveID)
	}
	if epoch := m.Epoch(); h.BrokerName != m.cfg.BrokerName || h.Epoch != epoch {
		return rpc.Errorf(protocol.StatusServiceNotAvailable, "this is the master of %s in epoch %d, not of %s in epoch %d", m.cfg.BrokerName, epoch, h.BrokerName, h.Epoch)
	}
	m.mu.Lock()
	s := m.slaves[h.SlaveID]
	if s == nil {
		m.mu.Unlock()
		return rpc.Reply{} // never counted
	}
	if h.MemberID != "" && s.memberID != "" && h.MemberID != s.memberID {
		m.mu.Unlock()
		return rpc.Errorf(protocol.StatusRequestMalformed, "slave %d is member %s, not %s", h.SlaveID, s.memberID, h.MemberID)
	}
	s.leaving = true
	if s.inSync {
		n := m.setInSyncLocked(s, false)
		m.log.Info("in-sync set changed", "slave", s.id, "inSync", false, "reason", "leaving to cut its log",
			"truncateTo", h.TruncateTo, "acked", s.acked, "countedSlaves", n)
	}
	m.publishLocked()
	m.mu.Unlock()
	select {
	case m.waitKick <- struct{}{}:
	default:
	}
	deadline := time.Now().Add(leaveTimeout)
	for {
		m.mu.Lock()
		counted := s.counted
		m.mu.Unlock()
		if !counted {
			return rpc.Reply{}
		}
		if time.Now().After(deadline) {
			return rpc.Errorf(protocol.StatusSystemError, "the in-sync set without slave %d is not committed yet; retry", h.SlaveID)
		}
		select {
		case <-m.done:
			return rpc.Errorf(protocol.StatusShuttingDown, "replication master is closing")
		case <-time.After(5 * time.Millisecond):
		}
	}
}

// clientAddr returns the broker's client address as bytes, converted once it is known.
func (m *Master) clientAddr() []byte {
	if p := m.clientAddrB.Load(); p != nil {
		return *p
	}
	if m.cfg.ClientAddr == nil {
		return nil
	}
	a := m.cfg.ClientAddr()
	if a == "" {
		return nil
	}
	b := []byte(a)
	m.clientAddrB.Store(&b)
	return b
}

// fillBounds sets the log bounds and the confirmed offset of an answer.
func (m *Master) fillBounds(r *protocol.HAPullResponse) {
	r.MasterMin = m.cfg.Log.LogMinOffset()
	r.MasterEnd = m.cfg.Log.LogEndOffset()
	r.ConfirmedOffset = min(m.ConfirmedOffset(), r.MasterEnd)
	r.MasterLoaded = m.cfg.Loaded != nil && m.cfg.Loaded()
	r.MasterAddr = m.clientAddr()
}
