package namesrv

import (
	"context"
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

// minIdleTimeout is the least time a connection may stay silent before the NameServer closes
// it, whatever BrokerExpiry says.
const minIdleTimeout = time.Second

// Errors returned by Server.Start.
var (
	// ErrServerClosed is returned by Start after Close.
	ErrServerClosed = errors.New("namesrv: server closed")
	// ErrAlreadyStarted is returned by a second Start.
	ErrAlreadyStarted = errors.New("namesrv: server already started")
)

// Server is a NameServer. New makes one, Start listens and serves in the background, Close stops
// it.
//
// Concurrency: all methods are safe for concurrent use. The route tables have their own lock
// (see routeTable); mu guards only the lifecycle fields. The Server owns the accept loop, one
// goroutine per connection (both in rpc.Server) and the expiry scanner; Close stops and waits
// for every one of them.
type Server struct {
	cfg     Config
	log     *slog.Logger
	table   *routeTable
	closing atomic.Bool
	// warn rate-limits, per reason, the lines a peer's requests cause (a refused registration,
	// which the broker retries; two brokers with one brokerId, which displace each other).
	warn ratelog.Reasons
	// rateLog holds the rate limiters of the server's lines (log's, the rpc server's) that
	// suppressed lines; the scan loop logs their counts once their intervals pass.
	rateLog *ratelog.Pending
	// startedAt is when Start listened, by Config.Now (Unix ns; 0 before Start); registered is
	// set by the first registration accepted; readyLogged by the first request answered as
	// ready. Together they make the readiness (see notReady).
	startedAt   atomic.Int64
	registered  atomic.Bool
	readyLogged atomic.Bool

	mu      sync.Mutex // guards the fields below
	started bool
	closed  bool
	ln      net.Listener
	rpc     *rpc.Server
	stop    chan struct{}
	wg      sync.WaitGroup
}

// New returns a Server configured by cfg; zero fields take their defaults (see DefaultConfig).
// Nothing runs and cfg is not validated until Start.
func New(cfg Config) *Server {
	cfg = cfg.withDefaults()
	rateLog := &ratelog.Pending{}
	return &Server{
		cfg:     cfg,
		log:     rateLog.Logger(cfg.Logger.With("component", "namesrv")),
		rateLog: rateLog,
		table:   newRouteTable(),
		stop:    make(chan struct{}),
	}
}

// Start validates the configuration, listens on Config.ListenAddr and serves in the background.
// It returns once the listener is open, or an error: an invalid configuration (wrapping
// ErrConfig), a listen failure (wrapping the net error), ErrAlreadyStarted or ErrServerClosed.
func (s *Server) Start() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case s.closed:
		return ErrServerClosed
	case s.started:
		return ErrAlreadyStarted
	}
	if err := s.cfg.Validate(); err != nil {
		return err
	}
	ln, err := net.Listen("tcp", s.cfg.ListenAddr)
	if err != nil {
		return fmt.Errorf("namesrv: cannot listen on %s: %w", s.cfg.ListenAddr, err)
	}
	s.started = true
	s.ln = ln
	s.startedAt.Store(s.cfg.Now().UnixNano())
	// A connection silent for BrokerExpiry is closed: a broker that silent expires anyway, and
	// clients reconnect when they need a route. The idle timer runs on the real clock (not
	// Config.Now), so it is at least minIdleTimeout: a goroutine of a loaded machine may well
	// stay silent for a few tens of milliseconds between two requests.
	s.rpc = rpc.NewServer(s.handle, rpc.ServerOptions{
		OnDisconnect:     s.onDisconnect,
		Logger:           s.log,
		IdleTimeout:      max(s.cfg.BrokerExpiry, minIdleTimeout),
		FrameReadTimeout: s.cfg.FrameReadTimeout,
		MaxConns:         s.cfg.MaxConnections,
	})
	s.wg.Add(2)
	go s.serve(ln)
	go s.scanLoop()
	s.log.Info("NameServer listening", "addr", ln.Addr().String(),
		"brokerExpiry", s.cfg.BrokerExpiry, "scanInterval", s.cfg.ScanInterval,
		"frameReadTimeout", s.cfg.FrameReadTimeout, "maxConnections", s.cfg.MaxConnections,
		"registrationPeriod", s.cfg.RegistrationPeriod)
	return nil
}

// Addr returns the address the server listens on (with the actual port when Config.ListenAddr
// asked for port 0), or "" before Start.
func (s *Server) Addr() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ln == nil {
		return ""
	}
	return s.ln.Addr().String()
}

// Close stops accepting, closes every connection, stops the expiry scanner and waits for all
// of the server's goroutines. It may be called more than once, and before Start; it always
// returns nil.
func (s *Server) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		s.wg.Wait()
		return nil
	}
	s.closed = true
	s.closing.Store(true)
	srv := s.rpc
	if s.started {
		close(s.stop)
	}
	s.mu.Unlock()
	if srv != nil {
		_ = srv.Close()
	}
	s.wg.Wait()
	s.rateLog.Flush(time.Now(), true)
	if srv != nil {
		s.log.Info("NameServer stopped")
	}
	return nil
}

func (s *Server) serve(ln net.Listener) {
	defer s.wg.Done()
	if err := s.rpc.Serve(ln); err != nil {
		s.log.Error("NameServer stopped accepting connections", "err", err)
	}
}

func (s *Server) scanLoop() {
	defer s.wg.Done()
	t := time.NewTicker(s.cfg.ScanInterval)
	defer t.Stop()
	// The counts of suppressed lines are logged about a second after their interval ends,
	// whatever the scan interval.
	flush := time.NewTicker(time.Second)
	defer flush.Stop()
	for {
		select {
		case <-s.stop:
			return
		case <-t.C:
			s.scanExpired()
		case now := <-flush.C:
			s.rateLog.Flush(now, false)
		}
	}
}

// scanExpired removes brokers silent for longer than Config.BrokerExpiry.
func (s *Server) scanExpired() {
	now := s.cfg.Now()
	for _, rm := range s.table.expire(now, s.cfg.BrokerExpiry) {
		s.log.Warn("broker expired: no registration in time", rmAttrs(rm,
			slog.Duration("silentFor", now.Sub(rm.lastUpdate)),
			slog.Duration("brokerExpiry", s.cfg.BrokerExpiry))...)
		s.forgotEpochs(rm.epochsForgotten, "")
	}
}

func (s *Server) onDisconnect(p *rpc.Peer) {
	level := slog.LevelInfo
	if s.closing.Load() {
		level = slog.LevelDebug
	}
	for _, rm := range s.table.removePeer(p) {
		s.log.Log(context.Background(), level, "broker removed: its connection closed", rmAttrs(rm, slog.String("remote", p.RemoteAddr()))...)
		s.forgotEpochs(rm.epochsForgotten, p.RemoteAddr())
	}
}

// forgotEpochs says, rate-limited, that n master epochs of groups with no member registered
// were forgotten (routeTable.forgetGoneLocked); remote is the peer whose request or close
// caused it ("" for the expiry scan).
func (s *Server) forgotEpochs(n int, remote string) {
	if n > 0 {
		s.warn.Warn(s.log, "too many broker groups without a registered member: forgetting the master epochs of those gone longest",
			"forgotten", n, "maxGoneGroups", maxGoneGroups, "remote", remote)
	}
}

func rmAttrs(rm removed, extra ...any) []any {
	return append([]any{
		"cluster", rm.cluster, "brokerName", rm.brokerName, "brokerId", rm.brokerID,
		"addr", rm.addr, "groupRemoved", rm.groupRemoved,
	}, extra...)
}

// Route returns a copy of the topic's route (queue data and broker groups sorted by group name,
// members by brokerId), and false when no broker group serves the topic.
func (s *Server) Route(topic string) (protocol.TopicRouteData, bool) { return s.table.route(topic) }

// ClusterInfo returns a copy of the cluster table, sorted as CodeGetBrokerClusterInfo answers it.
func (s *Server) ClusterInfo() protocol.ClusterInfo { return s.table.clusterInfo() }

// LiveBrokers returns every registered broker, sorted by address.
func (s *Server) LiveBrokers() []LiveBroker { return s.table.liveBrokers() }

// handle serves one request on the connection's goroutine.
func (s *Server) handle(req *rpc.Request) rpc.Reply {
	switch req.Code {
	case protocol.CodeRegisterBroker:
		return s.registerBroker(req)
	case protocol.CodeUnregisterBroker:
		return s.unregisterBroker(req)
	case protocol.CodeGetRouteInfoByTopic:
		return s.getRoute(req)
	case protocol.CodeGetBrokerClusterInfo:
		return s.getClusterInfo(req)
	case protocol.CodeDeleteTopicInNamesrv:
		return s.deleteTopic(req)
	}
	return rpc.Errorf(protocol.StatusRequestCodeNotSupported, "the NameServer does not serve %s", req.Code)
}

func malformed(what string, code protocol.RequestCode, err error) rpc.Reply {
	return rpc.Errorf(protocol.StatusRequestMalformed, "cannot decode %s %s: %v", code, what, err)
}

func validateBroker(h *protocol.BrokerHeader) error {
	switch {
	case h.ClusterName == "":
		return errors.New("empty cluster name")
	case h.BrokerName == "":
		return errors.New("empty broker name")
	case h.BrokerID < 0:
		return fmt.Errorf("negative brokerId %d", h.BrokerID)
	}
	if _, _, err := net.SplitHostPort(h.BrokerAddr); err != nil || h.BrokerAddr == "" {
		return fmt.Errorf("broker address %q is not host:port", h.BrokerAddr)
	}
	return nil
}

func (s *Server) registerBroker(req *rpc.Request) rpc.Reply {
	r := registration{peer: req.Peer}
	if err := r.hdr.ReadFrom(req.Header); err != nil {
		return malformed("header", req.Code, err)
	}
	if err := validateBroker(&r.hdr); err != nil {
		return malformed("header", req.Code, err)
	}
	var list protocol.TopicConfigList
	if err := list.ReadFrom(req.Body); err != nil {
		return malformed("body", req.Code, err)
	}
	for i := range list.Topics {
		tc := &list.Topics[i]
		if err := protocol.ValidateTopic([]byte(tc.Topic)); err != nil {
			return rpc.Errorf(protocol.StatusTopicInvalid, "broker %s registers topic %q: %v", r.hdr.BrokerAddr, tc.Topic, err)
		}
		if tc.ReadQueueNums < 0 || tc.WriteQueueNums < 0 || tc.Perm&^(protocol.PermRead|protocol.PermWrite|protocol.PermInherit) != 0 {
			return malformed("body", req.Code, fmt.Errorf("topic %q: read queues %d, write queues %d, perm %d",
				tc.Topic, tc.ReadQueueNums, tc.WriteQueueNums, tc.Perm))
		}
	}
	r.topics = list.Topics
	r.now = s.cfg.Now()
	res, err := s.table.register(&r)
	if err == nil {
		s.registered.Store(true)
	}
	if err != nil {
		s.warn.Warn(s.log, "broker registration rejected", "cluster", r.hdr.ClusterName, "brokerName", r.hdr.BrokerName,
			"brokerId", r.hdr.BrokerID, "addr", r.hdr.BrokerAddr, "remote", req.Peer.RemoteAddr(), "err", err)
		var stale *errStaleMaster
		if errors.As(err, &stale) {
			return rpc.Reply{Status: protocol.StatusNotMaster, Remark: err.Error(), MasterAddr: stale.current}
		}
		var late *errStaleRegistration
		if errors.As(err, &late) {
			return rpc.Errorf(protocol.StatusServiceNotAvailable, "%v", err)
		}
		if errors.Is(err, errTooManyBrokers) {
			return rpc.Errorf(protocol.StatusNoPermission, "%v", err)
		}
		return rpc.Errorf(protocol.StatusRequestMalformed, "%v", err)
	}
	s.forgotEpochs(res.epochsForgotten, req.Peer.RemoteAddr())
	h := &r.hdr
	attrs := []any{"cluster", h.ClusterName, "brokerName", h.BrokerName, "brokerId", h.BrokerID,
		"addr", h.BrokerAddr, "haAddr", h.HAServerAddr, "dataVersion", h.DataVersion,
		"topics", len(r.topics), "queueDataUpdated", res.queueDataUpdated, "remote", req.Peer.RemoteAddr()}
	if res.displaced != "" {
		s.warn.Warn(s.log, "broker replaces another address with the same brokerId", append(attrs, "displaced", res.displaced)...)
	}
	if res.isNew {
		s.log.Info("broker registered", attrs...)
	} else {
		s.log.Debug("broker heartbeat", attrs...)
	}
	return rpc.Reply{Header: &protocol.RegisterBrokerResponseHeader{MasterAddr: res.masterAddr, HAServerAddr: res.haServerAddr}}
}

func (s *Server) unregisterBroker(req *rpc.Request) rpc.Reply {
	var h protocol.BrokerHeader
	if err := h.ReadFrom(req.Header); err != nil {
		return malformed("header", req.Code, err)
	}
	if rm, ok := s.table.unregister(h.BrokerName, h.BrokerID, h.BrokerAddr); ok {
		s.log.Info("broker unregistered", rmAttrs(rm, slog.String("remote", req.Peer.RemoteAddr()))...)
		s.forgotEpochs(rm.epochsForgotten, req.Peer.RemoteAddr())
	}
	return rpc.Reply{}
}

func (s *Server) getRoute(req *rpc.Request) rpc.Reply {
	var h protocol.TopicHeader
	if err := h.ReadFrom(req.Header); err != nil {
		return malformed("header", req.Code, err)
	}
	rd, ok := s.table.route(h.Topic)
	if !ok {
		if why := s.notReady(); why != "" {
			return rpc.Errorf(protocol.StatusNamesrvNotReady, "no route for topic %q yet: %s", h.Topic, why)
		}
		return rpc.Errorf(protocol.StatusTopicNotExist, "no route for topic %q", h.Topic)
	}
	return rpc.Reply{Body: rd.AppendTo(nil)}
}

// deleteTopic serves CodeDeleteTopicInNamesrv: the topic leaves the route table (every broker
// group's queue data of it). A broker that registers it again brings it back, which is why
// its brokers delete it first.
func (s *Server) deleteTopic(req *rpc.Request) rpc.Reply {
	var h protocol.TopicHeader
	if err := h.ReadFrom(req.Header); err != nil {
		return malformed("header", req.Code, err)
	}
	if err := protocol.ValidateTopic([]byte(h.Topic)); err != nil {
		return rpc.Errorf(protocol.StatusTopicInvalid, "%v", err)
	}
	if groups := s.table.deleteTopic(h.Topic); len(groups) > 0 {
		s.log.Info("topic deleted from the route table", "topic", h.Topic, "brokerGroups", groups, "remote", req.Peer.RemoteAddr())
	}
	return rpc.Reply{}
}

func (s *Server) getClusterInfo(req *rpc.Request) rpc.Reply {
	if len(req.Header) != 0 {
		return malformed("header", req.Code, fmt.Errorf("%d bytes, want none", len(req.Header)))
	}
	if why := s.notReady(); why != "" {
		return rpc.Errorf(protocol.StatusNamesrvNotReady, "the cluster table may lack brokers: %s", why)
	}
	ci := s.table.clusterInfo()
	return rpc.Reply{Body: ci.AppendTo(nil)}
}

// notReady returns why the server cannot yet tell a topic or broker it has not heard of from
// one that does not exist ("" once it can): see readiness. The first request it finds ready
// logs so.
func (s *Server) notReady() string {
	now := s.cfg.Now()
	why := readiness(now.Sub(time.Unix(0, s.startedAt.Load())), s.cfg.RegistrationPeriod, s.registered.Load())
	if why == "" && !s.readyLogged.Swap(true) {
		s.log.Info("NameServer ready: up for a registration period with brokers registered; unknown topics now get TOPIC_NOT_EXIST",
			"registrationPeriod", s.cfg.RegistrationPeriod, "brokers", len(s.table.liveBrokers()))
	}
	return why
}

// readiness decides whether a NameServer up for uptime, whose brokers register every period,
// knows every live broker; registered says whether any broker has registered with it since
// it started. It returns "" when it does, else why not, for the NAMESRV_NOT_READY remark.
//
// Every live broker registers with every NameServer at least once a period, so a NameServer
// up for less than a period may simply not have heard yet from a broker that exists: a
// restarted one starts empty. A NameServer no broker has registered with after a period
// lacks brokers too (they do not list it in namesrvAddr, or cannot reach it): "no such
// topic" from it would be as wrong. RocketMQ 5's needWaitForService (waitSecondsForService
// after start) is the same idea, off by default there.
func readiness(uptime, period time.Duration, registered bool) string {
	switch {
	case uptime < period:
		return fmt.Sprintf("this NameServer started %v ago and brokers register every %v: ask another NameServer",
			max(uptime, 0).Round(time.Millisecond), period)
	case !registered:
		return fmt.Sprintf("no broker has registered with this NameServer in the %v since it started: ask another NameServer, or check the brokers' namesrvAddr",
			uptime.Round(time.Second))
	}
	return ""
}
