package broker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/panjf2000/gnet/v2"
	"golang.org/x/sys/unix"

	"github.com/petrel-mq/petrel/commitlog"
	"github.com/petrel-mq/petrel/internal/ratelog"
	"github.com/petrel-mq/petrel/protocol"
	"github.com/petrel-mq/petrel/protocol/rpc"
)

// Version is the broker version reported in runtime info.
const Version = "0.1.0"

// Broker is one member of a broker group: the gnet server, the store, topic configs, consumer
// offsets and the NameServer registration. Construct it with New, then Start; Close shuts it
// down gracefully. All methods are safe for concurrent use.
type Broker struct {
	cfg Config
	log *slog.Logger
	// rateLog holds the rate limiters of the broker's lines (log's, every component's) that
	// suppressed lines; housekeeping logs their counts once their intervals pass.
	rateLog *ratelog.Pending

	store     *commitlog.Store
	topics    *topicTable
	offsets   *offsetTable
	consumers *consumerTable
	stats     stats
	metrics   *metrics   // nil unless metricsPromExporterPort is set (metrics.go)
	trace     *traceRing // nil unless traceRingEntries > 0 (trace.go); set by Start
	limits    protocol.BatchLimits
	started   time.Time

	engine   gnet.Engine
	addr     atomic.Pointer[string] // advertised client address host:port, set once serving
	booted   chan error
	runErr   chan error
	stopping atomic.Bool
	// serving is set once the role loop holds the broker's first role (startHA): until then a
	// connection's requests wait unread, so a static master's first answers are a master's, not
	// NOT_MASTER from a broker that has not taken its configured role yet.
	serving atomic.Bool

	paused   pausedConns
	connSet  connSet
	conns    atomic.Int64
	maxConns int
	// warn rate-limits, per reason, the lines a client can cause on the client port (a refused
	// or closed connection, a bad frame) and on its request paths.
	warn           ratelog.Reasons
	appendLog      ratelog.Limiter // "append failed": once a second, not once per send (disk full)
	regLog         ratelog.Limiter // "cannot register": once a second while a NameServer is down
	inboundPartial atomic.Int64    // bytes of incomplete frames over all connections
	fatal          chan error
	workers        sync.WaitGroup // admin request goroutines
	// topicOps serialises the creation, update and deletion of topics (admin workers), so that
	// a topic's deletion record, config and the store's refusal of it change together.
	topicOps sync.Mutex

	// Replication (replication.go): a master's server for its slaves, or a slave's link to
	// its master and what it knows of the master.
	role      atomic.Pointer[role] // never nil after New; stored only by roles (publish)
	roles     *roleDriver          // the role loop: the member state machine and its driver
	raft      *raftMember          // nil unless enableRaftHA
	elected   uint32               // the epoch electMaster left a static member in (checkElected)
	hwm       bool                 // consumers read up to the high watermark (highWatermark)
	lastHWM   atomic.Int64
	slowBytes int64       // reads further behind the log end than this are old (bytes)
	loaded    atomic.Bool // the master's put rate is over slaveReadLoadMsgsPerSec
	syncMu    sync.Mutex  // guards syncConn
	syncConn  *rpc.Conn   // a slave's connection to its master for the config/offset sync
	syncLog   ratelog.Limiter
	offsetLog ratelog.Limiter // consumer offsets lowered to their queues' max offsets
	lifeLog   ratelog.Limiter // consumer offsets of another life of their queue, left out

	registrar *registrar
	stop      chan struct{}
	bg        sync.WaitGroup // housekeeping goroutines
	closeOnce sync.Once
	closeErr  error
}

// testPreallocate, when not nil, replaces how the store gives a new file its size: tests set it
// before New to make the disk look full. Nil in production.
var testPreallocate func(f *os.File, size int64) error

// New validates cfg and opens the broker's store (recovering it after a crash). It does not
// listen yet; call Start.
func New(cfg Config, logger *slog.Logger) (*Broker, error) {
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("invalid broker config: %w", err)
	}
	elected, err := checkElected(&cfg)
	if err != nil {
		return nil, err
	}
	if logger == nil {
		logger = slog.Default()
	}
	// Every component logs through the broker's logger, so the housekeeping goroutine logs the
	// counts of the lines their rate limiters suppressed once each limiter's interval passes.
	rateLog := &ratelog.Pending{}
	logger = rateLog.Logger(logger.With("broker", cfg.BrokerName, "brokerId", cfg.BrokerID))
	root := cfg.StorePathRootDir
	cfgDir := filepath.Join(root, "config")
	if err := os.MkdirAll(cfgDir, 0o755); err != nil {
		return nil, fmt.Errorf("cannot create store directory: %w", err)
	}
	topics, err := openTopicTable(cfgDir)
	if err != nil {
		return nil, err
	}
	offsets, err := openOffsetTable(cfgDir)
	if err != nil {
		return nil, err
	}
	met := newMetrics(&cfg, logger.With("component", "metrics"))
	mode := commitlog.AsyncFlush
	if cfg.FlushDiskType == SyncFlush {
		mode = commitlog.SyncFlush
	}
	store, err := commitlog.Open(commitlog.Config{
		Dir:                 root,
		SegmentSize:         cfg.MappedFileSizeCommitLog,
		QueueFileEntries:    cfg.ConsumeQueueFileEntries,
		FlushMode:           mode,
		FlushInterval:       cfg.FlushIntervalCommitLog,
		FlushDirtyBytes:     cfg.FlushCommitLogDirtyBytes,
		WriteThroughMapping: !cfg.CommitLogWriteThroughFile,
		RetentionAge:        cfg.FileReservedTime,
		RetentionBytes:      cfg.RetentionBytes,
		Parser:              parseStoredBatch,
		Logger:              logger.With("component", "commitlog"),
		Preallocate:         testPreallocate,
		OnFlush:             met.onFlush(),
	})
	if err != nil {
		return nil, fmt.Errorf("cannot open store: %w", err)
	}
	// Offsets are checked against the log from now on, those loaded too: recovery, or the
	// truncation this start carries out, may have cut queues below what groups committed.
	offsets.log = store
	offsets.maxGroups = cfg.MaxConsumerGroups
	if n, first := offsets.clampToLog(); n > 0 {
		logger.Warn("consumer offsets loaded beyond the max offsets of the recovered log were lowered to them", "lowered", n, "first", first)
	}
	b := &Broker{
		cfg:       cfg,
		log:       logger,
		rateLog:   rateLog,
		store:     store,
		topics:    topics,
		offsets:   offsets,
		consumers: newConsumerTable(),
		metrics:   met,
		limits:    protocol.BatchLimits{MaxMessageSize: cfg.MaxMessageSize},
		booted:    make(chan error, 1),
		runErr:    make(chan error, 1),
		stop:      make(chan struct{}),
	}
	b.paused.m = map[*connState]struct{}{}
	b.connSet.m = map[*connState]struct{}{}
	b.fatal = make(chan error, 1)
	b.maxConns = cfg.MaxConnections
	if b.maxConns == 0 {
		b.maxConns = defaultMaxConnections()
	}
	b.registrar = newRegistrar(b)
	b.slowBytes = slowReadBytes(&cfg)
	empty := ""
	b.addr.Store(&empty)
	b.elected = elected
	if cfg.EnableRaftHA {
		if b.raft, err = newRaftMember(b); err != nil {
			store.Close()
			return nil, err
		}
		b.hwm = cfg.BrokerRole == RoleSyncMaster
	}
	b.roles = newRoleDriver(b)
	if met != nil {
		met.register(b)
	}
	return b, nil
}

// parseStoredBatch is the commit log's recovery parser: it validates a stored batch (CRC and
// structure) and checks that it sits where it says it does. A control batch is a topic's
// deletion record (protocol.ControlDeleteTopic, the only control type), whose copy of its
// broker-assigned fields under its CRC must match them (protocol.StampControlBatch).
func parseStoredBatch(b []byte, phys int64) (commitlog.BatchInfo, error) {
	h, tagHash, err := protocol.ValidateBatch(b, protocol.BatchLimits{MaxMessageSize: 1 << 30, AllowControl: true})
	if err != nil {
		if errors.Is(err, protocol.ErrShort) {
			return commitlog.BatchInfo{}, fmt.Errorf("%w: %v", commitlog.ErrIncomplete, err)
		}
		return commitlog.BatchInfo{}, err
	}
	if h.PhysicalOffset != phys {
		return commitlog.BatchInfo{}, fmt.Errorf("%w: batch at %d says it is at %d", commitlog.ErrCorrupt, phys, h.PhysicalOffset)
	}
	control := h.Attributes&protocol.AttrControl != 0 // ValidateBatch checked its type: a deletion record
	return commitlog.BatchInfo{
		Control:         control,
		DeletesTopic:    control,
		Size:            h.Size,
		Topic:           h.Topic,
		QueueID:         h.QueueID,
		BaseQueueOffset: h.BaseQueueOffset,
		Count:           h.Count,
		TagHash:         tagHash,
		StoreTimestamp:  h.StoreTimestamp,
		Epoch:           h.Epoch,
	}, nil
}

// stampBatch is the Append StampFunc: the broker-assigned fields, with the epoch of the master
// role that admitted the send.
func stampBatch(dst []byte, phys, baseQueueOffset, storeTimestamp int64, epoch uint32) {
	protocol.StampBatch(dst, phys, baseQueueOffset, storeTimestamp, epoch)
}

// Start listens on the configured port, starts serving and registers with the NameServers; with
// metricsPromExporterPort set it also serves metrics and pprof (MetricsAddr). It returns once
// the server accepts connections.
func (b *Broker) Start() error {
	b.started = time.Now()
	b.trace = newTraceRing(b.cfg.TraceRingEntries)
	h := &handler{b: b}
	loops := b.cfg.NumEventLoop
	var releaseProcs func()
	if b.cfg.ReserveLoopProcs {
		releaseProcs = reserveLoopProcs(b.cfg.eventLoops())
	}
	go func() {
		err := gnet.Run(h, "tcp://"+b.cfg.listenAddr(),
			gnet.WithMulticore(true),
			gnet.WithNumEventLoop(loops),
			gnet.WithTCPNoDelay(gnet.TCPNoDelay),
			gnet.WithReuseAddr(true),
			gnet.WithTicker(true),
			gnet.WithReadBufferCap(256<<10),
			gnet.WithLogger(gnetLogger{l: b.log, warn: &b.warn}),
		)
		if releaseProcs != nil {
			releaseProcs() // the loops are gone
		}
		select {
		case b.booted <- err: // failed before boot
		default:
			if !b.stopping.Load() {
				// The engine stopped on its own (gnet stops it when accept fails): the broker
				// can no longer serve; whoever runs it must stop and restart it.
				b.log.Error("server stopped unexpectedly", "err", err)
				b.fatal <- fmt.Errorf("server stopped unexpectedly: %w", err)
			}
		}
		b.runErr <- err
	}()
	if err := <-b.booted; err != nil {
		b.store.Close()
		return fmt.Errorf("cannot listen on %s: %w", b.cfg.listenAddr(), err)
	}
	port, err := b.boundPort()
	if err != nil {
		b.Close()
		return err
	}
	addr := net.JoinHostPort(b.cfg.advertisedHost(), strconv.Itoa(port))
	b.addr.Store(&addr)
	if err := b.startHA(); err != nil {
		b.Close()
		return err
	}
	b.serving.Store(true)
	b.paused.wakeAll()
	if b.metrics != nil {
		if err := b.metrics.start(b.cfg.metricsListenAddr()); err != nil {
			b.Close()
			return err
		}
	}
	b.bg.Add(2)
	go b.housekeeping()
	go b.registrar.run()
	b.log.Info("broker started", "addr", addr, "role", b.cfg.BrokerRole, "flush", b.cfg.FlushDiskType,
		"store", b.cfg.StorePathRootDir, "logEnd", b.store.LogEndOffset())
	return nil
}

// boundPort returns the port the engine listens on (the configured one, or the one the kernel
// picked for port 0).
func (b *Broker) boundPort() (int, error) {
	if b.cfg.ListenPort != 0 {
		return b.cfg.ListenPort, nil
	}
	fd, err := b.engine.Dup()
	if err != nil {
		return 0, fmt.Errorf("cannot inspect listener: %w", err)
	}
	defer unix.Close(fd)
	sa, err := unix.Getsockname(fd)
	if err != nil {
		return 0, fmt.Errorf("cannot inspect listener: %w", err)
	}
	switch a := sa.(type) {
	case *unix.SockaddrInet4:
		return a.Port, nil
	case *unix.SockaddrInet6:
		return a.Port, nil
	}
	return 0, fmt.Errorf("unexpected listener address %T", sa)
}

// Fatal delivers an error when the broker can no longer serve (its network engine stopped on
// its own); the owner should Close it and exit non-zero so a supervisor restarts it.
func (b *Broker) Fatal() <-chan error { return b.fatal }

// defaultMaxConnections is the open-file limit minus 1024 descriptors kept for the store
// (segments, consume queues), at least 64.
func defaultMaxConnections() int {
	var rl unix.Rlimit
	if err := unix.Getrlimit(unix.RLIMIT_NOFILE, &rl); err != nil || rl.Cur > 1<<30 {
		return 1 << 20
	}
	return max(int(rl.Cur)-1024, 64)
}

// Addr returns the address clients dial (host:port), valid after Start.
func (b *Broker) Addr() string { return *b.addr.Load() }

// Config returns the broker's configuration.
func (b *Broker) Config() Config { return b.cfg }

// Store returns the broker's store (for tests and tools in the same process).
func (b *Broker) Store() *commitlog.Store { return b.store }

// Close shuts the broker down: new requests are refused with StatusShuttingDown, held pulls are
// answered, pending sync flushes complete, the broker unregisters from its NameServers, the
// server stops, and the store flushes and closes. It is safe to call more than once.
func (b *Broker) Close() error {
	b.closeOnce.Do(func() { b.closeErr = b.shutdown() })
	return b.closeErr
}

func (b *Broker) shutdown() error {
	b.stopping.Store(true)
	b.log.Info("broker shutting down")
	b.metrics.close(b.cfg.ShutdownGracePeriod) // first: scrapes read the store
	close(b.stop)
	b.bg.Wait()
	if b.Addr() != "" {
		b.registrar.unregisterAll()
	}
	// Answer every held pull now, while connections are still open.
	for _, t := range b.topics.list() {
		if tp := b.topics.get([]byte(t.Topic)); tp != nil {
			b.wakeWaiters(tp.waiters.takeAll())
		}
	}
	// Flush so that pending SYNC_FLUSH sends are answered before connections close.
	done := make(chan error, 1)
	b.store.WaitFlushed(b.store.LogEndOffset(), func(err error) { done <- err })
	select {
	case <-done:
	case <-time.After(b.cfg.ShutdownGracePeriod):
		b.log.Warn("flush did not finish within the shutdown grace period")
	}
	b.quiesce()
	b.workers.Wait()
	var errs []error
	if b.engine.Validate() == nil {
		ctx, cancel := context.WithTimeout(context.Background(), b.cfg.ShutdownGracePeriod)
		if err := b.engine.Stop(ctx); err != nil {
			errs = append(errs, fmt.Errorf("cannot stop server: %w", err))
		}
		cancel()
		<-b.runErr
	}
	b.closeHA()
	if err := b.offsets.persist(); err != nil {
		errs = append(errs, err)
	}
	if err := b.store.Close(); err != nil {
		errs = append(errs, fmt.Errorf("cannot close store: %w", err))
	}
	b.rateLog.Flush(time.Now(), true)
	b.log.Info("broker stopped")
	return errors.Join(errs...)
}

// quiesce waits, at most ShutdownGracePeriod, until clients stop sending: every request is
// answered SHUTTING_DOWN by now, and clients back off or move to other brokers. Closing a
// connection with requests still unread makes the kernel reset it, which would discard the
// answers already written and leave clients with unknown outcomes instead of clear refusals.
func (b *Broker) quiesce() {
	deadline := time.Now().Add(b.cfg.ShutdownGracePeriod)
	last, quiet := b.stats.requests.Load(), 0
	for quiet < 2 && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
		if n := b.stats.requests.Load(); n != last {
			last, quiet = n, 0
		} else {
			quiet++
		}
	}
}

// housekeeping persists consumer offsets and samples statistics until Close.
func (b *Broker) housekeeping() {
	defer b.bg.Done()
	offsetTick := time.NewTicker(b.cfg.FlushConsumerOffsetInterval)
	defer offsetTick.Stop()
	statsTick := time.NewTicker(time.Second)
	defer statsTick.Stop()
	for {
		select {
		case <-b.stop:
			return
		case <-offsetTick.C:
			if err := b.offsets.persist(); err != nil {
				b.log.Error("consumer offsets not persisted", "err", err)
			}
		case now := <-statsTick.C:
			b.stats.sample()
			if limit := b.cfg.SlaveReadLoadMsgsPerSec; limit > 0 {
				b.loaded.Store(b.stats.lastPutRate() > float64(limit))
			}
			b.closeStalled(now)
			b.rateLog.Flush(now, false)
			for _, id := range b.consumers.remove(nil, now.Add(-b.cfg.ChannelExpiredTimeout)) {
				b.warn.Info(b.log, "consumer client expired: no heartbeat", "client", id, "timeout", b.cfg.ChannelExpiredTimeout)
			}
		}
	}
}

// gnetLogger passes gnet's lines to the broker's logger; warnings and errors, which a peer
// can cause (accept failures while out of file descriptors, events of a connection already
// closed), are rate-limited per format.
type gnetLogger struct {
	l    *slog.Logger
	warn *ratelog.Reasons
}

func (g gnetLogger) Debugf(format string, args ...any) {
	g.l.Debug(fmt.Sprintf(format, args...), "component", "gnet")
}
func (g gnetLogger) Infof(format string, args ...any) {
	g.l.Debug(fmt.Sprintf(format, args...), "component", "gnet")
}
func (g gnetLogger) Warnf(format string, args ...any) {
	g.warn.Of(format).Warn(g.l, fmt.Sprintf(format, args...), "component", "gnet")
}
func (g gnetLogger) Errorf(format string, args ...any) {
	g.warn.Of(format).Error(g.l, fmt.Sprintf(format, args...), "component", "gnet")
}
func (g gnetLogger) Fatalf(format string, args ...any) {
	g.l.Error(fmt.Sprintf(format, args...), "component", "gnet", "fatal", true)
}
