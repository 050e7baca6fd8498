package ha

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
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
	// DefaultMaxConns caps the replication connections served at once: a group's slaves hold
	// one each, and one more while they ask to leave the in-sync set.
	DefaultMaxConns = 64
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
	// FrameReadTimeout closes a connection whose request frame is not whole this long after its
	// first byte, or that sends no whole request this long after it connects (default
	// rpc.DefaultFrameReadTimeout). A connection that sends no request for a minute between
	// two is closed too: a slave pulls again as soon as it has stored an answer.
	FrameReadTimeout time.Duration
	// MaxConns caps the replication connections served at once (default DefaultMaxConns); more
	// are closed as they come, with a log line.
	MaxConns int
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
	// Now is the master's clock (default time.Now): the in-sync rules, the timeouts of
	// WaitReplicated and the waits of held pulls and of HA_LEAVE are measured on it; timers only
	// say when to look at them again.
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
	// Epoch returns the epoch this master serves, the broker's role's (ha.Role.Epoch): pulls that
	// carry a newer epoch are fenced, and answers carry it. It must be cheap (it runs on every
	// pull). Nil: epoch 0.
	Epoch func() uint32
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
	// MemberOf, when set (a Raft-elected group), tells whether a member id is one of the
	// group's members (raftPeers, this member excluded): a pull or HA_LEAVE naming another is
	// refused before the master records anything of it, so no slave the group does not have
	// counts for acknowledgements, enters the committed in-sync set or the control state's
	// member table. It must be cheap (it runs on every pull).
	MemberOf func(memberID string) bool
	// KnownSlave, when set, tells whether a slave (brokerId, member id) is a known member of the
	// group: its record, and its per-slave metrics, are kept while it is disconnected. Any other
	// disconnected slave that does not count is forgotten ha.DefaultForgetAfter after its
	// connection closed, and at most ha.DefaultMaxDisconnected of them are kept
	// (TrackerConfig). It is called under the master's lock and must take none of the master's.
	// Nil: no slave is known (static roles configure none).
	KnownSlave func(brokerID int64, memberID string) bool
	// Observer, when set, hears each answer that carries log bytes to a slave and each
	// acknowledgement (the broker's send tracing). It is called on the slave's connection
	// goroutine, without the master's locks, and must be short and allocation-free.
	Observer ReplicationObserver
}

// ReplicationObserver hears the progress of replication, offset by offset, for a per-send
// timeline of it (MasterConfig.Observer).
type ReplicationObserver interface {
	// ReplicationServed: the master is handing slave brokerID the answer that holds the log's
	// bytes [start, end), to the pull that reached it at pulled (Unix ns); the connection
	// writes it when this returns.
	ReplicationServed(brokerID, start, end, pulled int64)
	// ReplicationAcked: slave brokerID acknowledged every byte before offset (a pull from it);
	// called before the master counts the acknowledgement, so before any SYNC_MASTER waiter
	// it completes.
	ReplicationAcked(brokerID, offset int64)
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
	codec uint8
	log   *slog.Logger
	// warn rate-limits, per reason, the lines a slave's (or any peer's) pulls cause.
	warn ratelog.Reasons

	// end is the highest end passed to NotifyAppend: held pulls wake when it moves.
	end atomic.Int64
	// The tracker's results, published under mu (publishLocked) for readers that take no lock:
	// the acknowledgement limit (every waiter whose end is at most it is complete), the confirmed
	// offset and whether the master alone confirms its whole log (Tracker.Confirmed), the
	// counted and the connected slaves, and the slaves for read suggestions.
	ackLimit      atomic.Int64
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

	mu sync.Mutex // guards the fields below
	// tr is what the master knows of its slaves and the in-sync set; sessions are the open
	// connections (by rpc.Peer ID); bytes the replication byte counters of each slave (by
	// brokerId), kept as long as the tracker lists the slave.
	tr       Tracker
	sessions map[uint64]*session
	bytes    map[int64]*slaveBytes
	started  bool
	closed   bool
	srv      *rpc.Server
	addr     string
}

// slaveBytes counts the bytes replicated to one slave: uncompressed and on the wire. The
// connection's goroutine adds to them without Master.mu.
type slaveBytes struct {
	raw  atomic.Int64
	wire atomic.Int64
}

// session is one slave connection. Its fields are used only by the connection's goroutine,
// except slaveID and bytes, which are set under Master.mu before the connection's first pull
// is served.
type session struct {
	peer    *rpc.Peer
	slaveID int64
	bytes   *slaveBytes
	enc     chunkEncoder
	resp    protocol.HAPullResponse // the reply header: read by the server after the handler returns
	timer   *time.Timer
	ready   []*waiter // scratch for completed waiters
}

// NewMaster returns a Master; Start makes it listen.
func NewMaster(cfg MasterConfig) *Master {
	if cfg.MaxChunkBytes <= 0 {
		cfg.MaxChunkBytes = DefaultMaxChunkBytes
	}
	if cfg.MaxWait <= 0 {
		cfg.MaxWait = DefaultMaxWait
	}
	if cfg.MaxConns <= 0 {
		cfg.MaxConns = DefaultMaxConns
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
		cfg:        cfg,
		log:        cfg.Logger.With("component", "ha-master"),
		appendKick: make(chan struct{}, 1),
		setKick:    make(chan struct{}, 1),
		waitKick:   make(chan struct{}, 1),
		done:       make(chan struct{}),
		sessions:   make(map[uint64]*session),
		bytes:      make(map[int64]*slaveBytes),
	}
	m.tr = MakeTracker(TrackerConfig{
		Rules: SyncRules{
			MaxLagBytes:    cfg.InSyncMaxLagBytes,
			MaxLagTime:     cfg.InSyncMaxLagTime,
			RejoinLagBytes: cfg.InSyncRejoinLagBytes,
		},
		MinAcks:          cfg.MinAcks,
		CommitSet:        cfg.CommitSyncSet != nil,
		InitialSet:       cfg.InitialSyncSet,
		InitialConfirmed: cfg.InitialConfirmed,
		Known:            cfg.KnownSlave,
	}, cfg.Now())
	m.mu.Lock()
	m.publishLocked()
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
		IdleTimeout:      idleTimeout,
		FrameReadTimeout: m.cfg.FrameReadTimeout,
		MaxConns:         m.cfg.MaxConns,
		OnDisconnect:     m.onDisconnect,
		Logger:           m.log,
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

// Epoch returns the master's epoch (MasterConfig.Epoch).
func (m *Master) Epoch() uint32 {
	if m.cfg.Epoch == nil {
		return 0
	}
	return m.cfg.Epoch()
}

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
	w.end, w.minAcks, w.deadline, w.cb = end, max(minAcks, 0), m.cfg.Now().Add(timeout), cb
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

// QuorumHeard reports whether MinAcks counted slaves sent a request within InSyncMaxLagTime
// (Tracker.QuorumHeard): evidence that this master still leads its group. It takes the master's
// lock, which is never held across I/O; the broker asks it only before moving a consumer's
// offset.
func (m *Master) QuorumHeard() bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.tr.QuorumHeard(m.cfg.Now(), m.cfg.InSyncMaxLagTime)
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
	defer m.mu.Unlock()
	for _, s := range m.tr.Slaves() { // by brokerId
		ss := protocol.SlaveStatus{
			BrokerID:    s.BrokerID,
			Addr:        s.Addr,
			HAAddr:      s.HAAddr,
			AckedOffset: s.Acked,
			LagBytes:    LagBytes(s.Progress(now), logEnd),
			LagMs:       s.LagTime(now, logEnd).Milliseconds(),
			InSync:      s.InSync,
			Connected:   s.Session != 0,
		}
		if b := m.bytes[s.BrokerID]; b != nil {
			ss.RawBytes, ss.WireBytes = b.raw.Load(), b.wire.Load()
		}
		st.Slaves = append(st.Slaves, ss)
	}
	st.InSyncReplicas = int32(m.tr.CountedSlaves()) + 1
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
		ws, next = m.waiters.popExpired(m.cfg.Now(), ws)
		ws = runAll(ws, ErrReplicationTimeout)
		if !next.IsZero() && !next.Equal(armed) {
			timer.Reset(next.Sub(m.cfg.Now()))
			armed = next
		}
	}
}

// tick re-evaluates every slave, so that silent slaves leave the set.
func (m *Master) tick() {
	end := m.cfg.Log.LogEndOffset()
	m.mu.Lock()
	defer m.mu.Unlock()
	now := m.cfg.Now()
	changes := m.tr.Tick(end, now)
	if len(changes) > 0 {
		m.verdictsChangedLocked(changes)
	}
	gone := m.tr.Expire(now)
	for _, s := range gone {
		delete(m.bytes, s.BrokerID)
		m.warn.Info(m.log, "forgetting a disconnected slave that is not a known member of the group",
			"slave", s.BrokerID, "member", s.MemberID, "remote", s.HAAddr, "disconnectedFor", now.Sub(s.DisconnectedAt).Round(time.Millisecond))
	}
	if len(changes) > 0 || len(gone) > 0 {
		m.publishLocked()
	}
}

// verdictsChangedLocked logs the tracker's verdict changes (extra: more key-value pairs for the
// line) and, in a Raft-elected group, wakes the committer of the set. m.mu must be held.
func (m *Master) verdictsChangedLocked(changes []VerdictChange, extra ...any) {
	for _, c := range changes {
		args := []any{"slave", c.BrokerID, "inSync", c.InSync, "reason", string(c.Reason)}
		args = append(args, extra...)
		if c.Reason == ReasonDisconnected || c.Reason == ReasonLeaving {
			args = append(args, "acked", c.Acked)
		} else { // a verdict of the in-sync rules
			args = append(args, "lagBytes", c.LagBytes, "acked", c.Acked, "masterEnd", c.MasterEnd)
		}
		m.log.Info("in-sync set changed", append(args, "countedSlaves", c.Counted)...)
	}
	if len(changes) > 0 && m.cfg.CommitSyncSet != nil {
		select {
		case m.setKick <- struct{}{}:
		default:
		}
	}
}

// ackState returns ackLimit and the in-sync count as one consistent pair (both are published
// under m.mu).
func (m *Master) ackState() (limit int64, inSync int) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.ackLimit.Load(), int(m.inSyncN.Load())
}

// publishLocked publishes the tracker's acknowledgement limit, confirmed offset, counted and
// connected slaves and the SlavesForRead snapshot. m.mu must be held.
func (m *Master) publishLocked() {
	m.ackLimit.Store(m.tr.AckLimit())
	m.inSyncN.Store(int32(m.tr.CountedSlaves()))
	m.connected.Store(int32(m.tr.ConnectedSlaves()))
	// NB: the offset before the flag: a reader that sees the master stop confirming alone sees
	// the offset that kept what it confirmed.
	off, live := m.tr.Confirmed()
	m.confirmed.Store(off)
	m.confirmedLive.Store(live)
	reads := m.tr.SlavesForRead()
	m.reads.Store(&reads)
}

// sessionFor returns the session of the request's connection, binding it to the slave on the
// first request. A connection keeps the SlaveID of its first request.
func (m *Master) sessionFor(p *rpc.Peer, h *protocol.HAPullRequest) (*session, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if sess := m.sessions[p.ID()]; sess != nil {
		if sess.slaveID != h.SlaveID {
			return nil, fmt.Errorf("slave id %d on a connection of slave %d", h.SlaveID, sess.slaveID)
		}
		return sess, nil
	}
	prev, tookOver := m.tr.Connect(SlaveConn{Session: p.ID(), BrokerID: h.SlaveID, MemberID: h.MemberID,
		Addr: h.SlaveAddr, HAAddr: p.RemoteAddr()}, m.cfg.Now())
	if tookOver {
		// A slave that reconnects before its old connection was seen closing, or a second
		// broker configured with the same brokerId: the new connection takes over and the old
		// one is closed, so that no connection replicates under a record it no longer owns
		// (two slaves with one id then keep taking over from each other, loudly).
		m.warn.Warn(m.log, "slave connected again while its previous connection is open; the new one takes over and the old one is closed",
			"slave", h.SlaveID, "remote", p.RemoteAddr(), "old", prev.HAAddr)
		if old := m.sessions[prev.Session]; old != nil {
			_ = old.peer.Close()
		}
	}
	b := m.bytes[h.SlaveID]
	if b == nil {
		b = new(slaveBytes)
		m.bytes[h.SlaveID] = b
	}
	sess := &session{peer: p, slaveID: h.SlaveID, bytes: b}
	sess.enc.codec = m.codec
	m.sessions[p.ID()] = sess
	m.warn.Info(m.log, "slave connected", "slave", h.SlaveID, "addr", h.SlaveAddr, "remote", p.RemoteAddr())
	m.publishLocked()
	return sess, nil
}

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
	res := m.tr.Disconnect(p.ID(), m.cfg.Log.LogEndOffset(), m.cfg.Now())
	if !res.Current {
		return // taken over by a newer connection
	}
	s := res.Slave
	m.warn.Info(m.log, "slave disconnected", "slave", s.BrokerID, "remote", s.HAAddr, "acked", s.Acked, "inSync", s.InSync)
	m.verdictsChangedLocked(res.Changes)
	if res.Removed {
		delete(m.bytes, s.BrokerID)
	}
	for _, e := range res.Evicted {
		delete(m.bytes, e.BrokerID)
		m.warn.Warn(m.log, "too many disconnected slaves that are not known members of the group; forgetting the longest disconnected",
			"slave", e.BrokerID, "member", e.MemberID, "remote", e.HAAddr, "max", m.tr.cfg.MaxDisconnected)
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
	if o := m.cfg.Observer; o != nil {
		// NB: before the tracker publishes the acknowledgement, which completes waiters (on
		// the service goroutine too): an acknowledgement is heard before what it completes.
		o.ReplicationAcked(sess.slaveID, offset)
	}
	m.mu.Lock()
	res := m.tr.Ack(sess.peer.ID(), offset, readEnd, m.cfg.Log.LogEndOffset(), m.cfg.Now())
	if res.Regressed {
		m.warn.Warn(m.log, "slave's acknowledged offset went back; it no longer counts for what it lost",
			"slave", res.BrokerID, "remote", sess.peer.RemoteAddr(), "from", res.From, "to", offset)
	}
	m.verdictsChangedLocked(res.Changes)
	m.publishLocked()
	limit, n := m.ackLimit.Load(), int(m.inSyncN.Load())
	m.mu.Unlock()
	sess.ready = runAll(m.waiters.popReady(limit, n, sess.ready), nil)
}

// readFor records that a held pull of sess woke and read the log up to readEnd: the slave is
// caught up once it acknowledges that end (SlaveProgress.ReadEnd).
func (m *Master) readFor(sess *session, readEnd int64) {
	m.mu.Lock()
	m.tr.ReadFor(sess.peer.ID(), readEnd, m.cfg.Now())
	m.mu.Unlock()
}

// hold marks a pull of sess as held (delta +1) or no longer held (-1).
func (m *Master) hold(sess *session, delta int) {
	m.mu.Lock()
	m.tr.Hold(sess.peer.ID(), delta, m.cfg.Now())
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
	return m.pull(req.Peer, &h)
}

// pull serves one pull: it does the reads, waits and answers that the pull's plan (planPull)
// names.
func (m *Master) pull(p *rpc.Peer, h *protocol.HAPullRequest) rpc.Reply {
	var pulled int64 // for the Observer: when the pull arrived (Unix ns, as its other stamps)
	if m.cfg.Observer != nil {
		pulled = m.cfg.Now().UnixNano()
	}
	epoch := m.Epoch()
	in := pullInput{Req: h, Group: m.cfg.BrokerName, Epoch: epoch, MaxChunkBytes: m.cfg.MaxChunkBytes, MaxWait: m.cfg.MaxWait}
	if m.cfg.Epochs != nil {
		in.CheckEpochs, in.Epochs, in.LogEnd = true, m.cfg.Epochs(), m.cfg.Log.LogEndOffset()
	}
	plan, act := planPull(in)
	switch act {
	case pullMalformed:
		return rpc.Errorf(protocol.StatusRequestMalformed, "slave id %d, offset %d", h.SlaveID, h.Offset)
	case pullFenced:
		m.warn.Warn(m.log, "fencing a replication pull", "slave", h.SlaveID, "remote", p.RemoteAddr(),
			"broker", h.BrokerName, "want", m.cfg.BrokerName, "epoch", h.Epoch, "masterEpoch", epoch)
		resp := &protocol.HAPullResponse{Offset: h.Offset, Epoch: epoch, Result: protocol.HAFenced, TruncateTo: -1}
		m.fillBounds(resp)
		return rpc.Reply{Header: resp}
	}
	if m.cfg.MemberOf != nil && !m.cfg.MemberOf(h.MemberID) {
		m.warn.Warn(m.log, "refusing a replication pull from a member this group does not have (not one of raftPeers)",
			"slave", h.SlaveID, "member", h.MemberID, "remote", p.RemoteAddr())
		return rpc.Errorf(protocol.StatusNoPermission, "member %q is not a member of broker group %s", h.MemberID, m.cfg.BrokerName)
	}
	sess, err := m.sessionFor(p, h)
	if err != nil {
		return rpc.Errorf(protocol.StatusRequestMalformed, "%v", err)
	}
	sess.resp = protocol.HAPullResponse{Offset: h.Offset, Epoch: epoch, TruncateTo: -1}
	if act == pullDiverged {
		m.warn.Warn(m.log, "slave's log diverged from this one; answering out of range with where to cut",
			"slave", h.SlaveID, "remote", p.RemoteAddr(), "offset", h.Offset, "lastEpoch", h.LastEpoch, "lastEpochStart", h.LastEpochStart,
			"divergingEpoch", plan.DivergingEpoch, "epochEnd", plan.TruncateTo)
		sess.resp.Result = protocol.HAOutOfRange
		sess.resp.TruncateTo = plan.TruncateTo
		sess.resp.DivergingEpoch = plan.DivergingEpoch
		m.fillBounds(&sess.resp)
		return rpc.Reply{Header: &sess.resp}
	}
	for {
		seen := m.end.Load()
		rd := m.readLog(sess, h.Offset, plan.MaxBytes)
		step := plan.afterRead(rd.err, rd.raw)
		if step.Ack {
			m.ack(sess, h.Offset, rd.readEnd)
		} else if step.ReadFor {
			m.readFor(sess, rd.readEnd)
		}
		if step.Action != pullHold {
			return m.answer(sess, h, step.Action, rd, pulled)
		}
		if !m.holdPull(sess, &plan, seen) {
			return rpc.Errorf(protocol.StatusShuttingDown, "replication master is closing")
		}
	}
}

// logRead is one read of the log for a pull: the log end read before it, where the data starts,
// its uncompressed size, the encoded body and its codec, and the read's error.
type logRead struct {
	readEnd int64
	start   int64
	raw     int
	body    []byte
	codec   uint8
	err     error
}

// readLog reads the log for sess from offset, at most maxBytes, and encodes what it finds.
func (m *Master) readLog(sess *session, offset int64, maxBytes int) logRead {
	rd := logRead{readEnd: m.cfg.Log.LogEndOffset()}
	rd.err = m.cfg.Log.ReadReplication(offset, maxBytes, func(st int64, data []byte) error {
		rd.start, rd.raw = st, len(data)
		rd.body, rd.codec = sess.enc.encode(data)
		return nil
	})
	return rd
}

// answer builds the answer to the pull h of sess that action (of a read, rd) names.
func (m *Master) answer(sess *session, h *protocol.HAPullRequest, action pullAction, rd logRead, pulled int64) rpc.Reply {
	reply := rpc.Reply{Header: &sess.resp}
	switch action {
	case pullOutOfRange:
		m.warn.Warn(m.log, "slave asks from an offset this log does not have; answering out of range",
			"slave", h.SlaveID, "remote", sess.peer.RemoteAddr(), "offset", h.Offset, "err", rd.err,
			"masterMin", m.cfg.Log.LogMinOffset(), "masterEnd", m.cfg.Log.LogEndOffset())
		sess.resp.Result = protocol.HAOutOfRange
		m.fillBounds(&sess.resp)
	case pullResync:
		sess.resp.Result = protocol.HAResync
		m.fillBounds(&sess.resp)
		sess.resp.Offset = sess.resp.MasterMin
		m.warn.Warn(m.log, "slave asks from an offset retention removed; telling it to resync",
			"slave", h.SlaveID, "remote", sess.peer.RemoteAddr(), "offset", h.Offset, "masterMin", sess.resp.MasterMin)
	case pullReadError:
		m.warn.Warn(m.log, "cannot read the log for replication", "slave", h.SlaveID, "remote", sess.peer.RemoteAddr(), "offset", h.Offset, "err", rd.err)
		return rpc.Errorf(protocol.StatusSystemError, "cannot read the log at %d: %v", h.Offset, rd.err)
	case pullAnswer:
		sess.resp.Result = protocol.HAOK
		sess.resp.Offset = rd.start
		sess.resp.Codec = rd.codec
		sess.resp.RawLength = int32(rd.raw)
		m.fillBounds(&sess.resp)
		sess.bytes.raw.Add(int64(rd.raw))
		sess.bytes.wire.Add(int64(len(rd.body)))
		reply.Body = rd.body
		if o := m.cfg.Observer; o != nil && rd.raw > 0 {
			o.ReplicationServed(sess.slaveID, rd.start, rd.start+int64(rd.raw), pulled)
		}
	}
	return reply
}

// holdPull holds a pull of sess that found nothing after its offset until an append or the end
// of its wait (the plan's); seen is the append end before the read. It returns false when the
// master closes meanwhile. When it returns true the log is read again.
func (m *Master) holdPull(sess *session, plan *pullPlan, seen int64) bool {
	ch := m.pollChan()
	if m.end.Load() != seen {
		return true // appended while we read: read again
	}
	left, ok := plan.hold(m.cfg.Now())
	if !ok {
		return true // the wait is over: read once more and answer
	}
	if sess.timer == nil {
		sess.timer = time.NewTimer(left)
	} else {
		sess.timer.Reset(left)
	}
	m.hold(sess, 1)
	defer m.hold(sess, -1)
	defer sess.timer.Stop()
	select {
	case <-ch:
	case <-sess.timer.C:
		plan.timedOut() // answer with whatever the next read finds, even nothing
	case <-m.done:
		return false
	}
	return true
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
	if m.cfg.MemberOf != nil && !m.cfg.MemberOf(h.MemberID) {
		return rpc.Errorf(protocol.StatusNoPermission, "member %q is not a member of broker group %s", h.MemberID, m.cfg.BrokerName)
	}
	if epoch := m.Epoch(); h.BrokerName != m.cfg.BrokerName || h.Epoch != epoch {
		return rpc.Errorf(protocol.StatusServiceNotAvailable, "this is the master of %s in epoch %d, not of %s in epoch %d", m.cfg.BrokerName, epoch, h.BrokerName, h.Epoch)
	}
	m.mu.Lock()
	known, changes, err := m.tr.Leave(h.SlaveID, h.MemberID, m.cfg.Log.LogEndOffset())
	if err != nil {
		m.mu.Unlock()
		return rpc.Errorf(protocol.StatusRequestMalformed, "%v", err)
	}
	if !known {
		m.mu.Unlock()
		return rpc.Reply{} // never counted
	}
	m.verdictsChangedLocked(changes, "truncateTo", h.TruncateTo)
	m.publishLocked()
	m.mu.Unlock()
	select {
	case m.waitKick <- struct{}{}:
	default:
	}
	deadline := m.cfg.Now().Add(leaveTimeout)
	for {
		m.mu.Lock()
		counted := m.tr.Counted(h.SlaveID)
		m.mu.Unlock()
		if !counted {
			return rpc.Reply{}
		}
		if m.cfg.Now().After(deadline) {
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
