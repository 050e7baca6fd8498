package client

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/petrel-mq/petrel/protocol"
	"github.com/petrel-mq/petrel/protocol/rpc"
)

// A broker group member whose pull or commit failed is avoided by consumers (other members of
// its group are chosen) for memberAvoidBase, doubling with each further failure up to
// memberAvoidMax; a success ends it. Short, so that a consumer returns to a master soon after it
// comes back.
const (
	memberAvoidBase = 500 * time.Millisecond
	memberAvoidMax  = 10 * time.Second
)

// minForcedRefreshGap keeps error-driven route refreshes of one topic at least this far apart,
// so a burst of failing sends asks the NameServer once.
const minForcedRefreshGap = 100 * time.Millisecond

// Client is the connection to a Petrel cluster shared by producers, consumers and Admin: the
// NameServer list, a route cache per topic, and one connection per broker address. All methods
// are safe for concurrent use.
//
// Routes are fetched on first use, refreshed every RouteRefreshInterval and, at most every
// 100 ms per topic, after a send or pull error, while the topic is in use: it is the topic of a
// running Consumer (from the start of Run to its end), or one an open Producer has found a route
// of (until the Producer is closed). A topic in use keeps its cached route, and keeps being
// refreshed, when its route disappears from the NameServers (the brokers may come back). A topic
// whose route was never found (a name no broker has, a send to a mistyped topic) leaves nothing
// behind, and one no longer in use is forgotten at the next periodic refresh.
//
// A connection that breaks is dialled again on next use, with a backoff after a failed dial, so
// the client survives a broker restart; a connection on which requests wait and nothing
// arrives, not even the answer to a liveness probe, is closed and replaced (WithLivenessProbe;
// with the probes off, one on which a request timed out by its own timeout with nothing
// received since); a broker that answers SHUTTING_DOWN is sent nothing for a backoff, so it can
// drain and stop. A connection is shared by every
// request to its address: a request whose caller's context ends is forgotten (its outcome is
// unknown to the caller, its late answer dropped) and never closes the connection or puts the
// broker in a backoff, so one impatient caller cannot fail the requests of the others.
type Client struct {
	cfg  clientConfig
	log  *slog.Logger
	pool *connPool
	now  func() time.Time

	nsFirst atomic.Uint32 // index of the NameServer to ask first: the last one that answered ready (callNameServer)

	pullFailLog failureLog // the consumers' pull failure warnings, per broker
	// members remembers broker addresses whose reads or commits failed recently: consumers
	// choose other members of the group while it lasts (see memberUsable).
	members *faultTracker

	routesMu sync.RWMutex // guards routes and routeSlot.users
	routes   map[string]*routeSlot
	// refreshKick (capacity 1) wakes refreshLoop to refresh the routes marked soon.
	refreshKick chan struct{}

	ctx    context.Context // ends at Close; background goroutines run under it
	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu     sync.Mutex // guards closed, users
	closed bool
	users  map[clientUser]struct{}
	// shut is closed, set with it, for readers that hold other locks (isClosed).
	shut atomic.Bool
}

// clientUser is a producer or consumer that Close must stop.
type clientUser interface {
	closeFromClient()
}

// routeSlot caches one topic's route. It stays in Client.routes while users is not 0, and
// otherwise only until the next periodic refresh (or, when no route of it was ever found, until
// the failed fetch returns).
type routeSlot struct {
	route atomic.Pointer[topicRoute]
	// users counts the holds on the topic (holdTopic); guarded by Client.routesMu.
	users int
	// soon asks refreshLoop to refresh the route at once; kicked is when it was last set (Unix
	// ns of Client.now), so that it is set at most every minForcedRefreshGap.
	soon   atomic.Bool
	kicked atomic.Int64

	mu          sync.Mutex // serialises fetches of the topic; guards lastAttempt
	lastAttempt time.Time
}

// New returns a Client for the NameServers given by WithNameServers (required unless
// WithNoNameServer is given). It does no I/O: connections are made on first use, so New
// succeeds while the cluster is down. ctx is only checked for having ended. Errors: ctx's; one
// wrapping ErrInvalidArgument for a nil ctx; one wrapping ErrInvalidOption for a missing
// NameServer list or an option given a value outside its range (see ClientOption).
func New(ctx context.Context, opts ...ClientOption) (*Client, error) {
	if err := argContext(ctx, "New"); err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	cfg := defaultClientConfig()
	if err := apply(&cfg, &cfg.errs, "ClientOption", opts); err != nil {
		return nil, err
	}
	if len(cfg.nameServers) == 0 && !cfg.noNameServer {
		return nil, fmt.Errorf("%w: no NameServer address: use WithNameServers(\"host:port;...\"), or WithNoNameServer", ErrInvalidOption)
	}
	rctx, cancel := context.WithCancel(context.Background())
	c := &Client{
		cfg: cfg,
		log: cfg.logger,
		pool: newConnPool(rpc.Options{
			DialTimeout:  cfg.dialTimeout,
			MaxFrameSize: cfg.maxFrameSize,
			MaxInFlight:  cfg.maxInFlight,
		}, cfg.reconnectBackoff, cfg.maxReconnectBackoff, livenessConfig{silence: cfg.livenessInterval, probeTimeout: cfg.probeTimeout}, cfg.logger),
		now:         time.Now,
		members:     newFaultTracker(memberAvoidBase, memberAvoidMax),
		routes:      make(map[string]*routeSlot),
		refreshKick: make(chan struct{}, 1),
		ctx:         rctx,
		cancel:      cancel,
		users:       make(map[clientUser]struct{}),
	}
	c.wg.Add(1)
	go c.refreshLoop()
	return c, nil
}

// Close stops every producer and consumer made from the client (as their Close would, without
// waiting for buffered messages: their callbacks get ErrProducerClosed or ErrUnknownOutcome), stops
// the client's goroutines and closes its connections. Later calls fail with ErrClientClosed,
// and so does every method of its Producers, Consumers and Admins that does I/O (with an error
// that matches the Producer's or Consumer's own closed error too). It is idempotent and
// returns nil.
func (c *Client) Close() error {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return nil
	}
	c.closed = true
	c.shut.Store(true)
	users := make([]clientUser, 0, len(c.users))
	for u := range c.users {
		users = append(users, u)
	}
	c.users = nil
	c.mu.Unlock()
	for _, u := range users {
		u.closeFromClient()
	}
	c.cancel()
	c.wg.Wait()
	c.pool.close()
	return nil
}

// ClientStats are a Client's connection counters since New, over every broker and NameServer
// address.
type ClientStats struct {
	// Dials counts the connections established.
	Dials int64
	// DeadConnections counts the connections the client closed as dead: requests waited on
	// them and nothing arrived, not even the answer to a liveness probe (with the probes off: a
	// request timed out by its own timeout with nothing received since it was sent). The end of
	// a caller's context never closes a connection.
	DeadConnections int64
	// Abandoned counts the requests whose caller's context ended before the answer: each was
	// forgotten, its outcome unknown to the caller (ErrUnknownOutcome for a send).
	Abandoned int64
	// LateResponses counts the answers that arrived after their request was forgotten (its
	// caller gave up, or it timed out) and were dropped.
	LateResponses int64
	// Probes counts the liveness probes sent (see WithLivenessProbe).
	Probes int64
}

// Stats returns the client's connection counters. It does no I/O.
func (c *Client) Stats() ClientStats {
	p := c.pool
	return ClientStats{
		Dials:           p.dials.Load(),
		DeadConnections: p.deadConns.Load(),
		Abandoned:       p.abandoned.Load(),
		LateResponses:   p.lateResponses.Load(),
		Probes:          p.probesSent.Load(),
	}
}

// isClosed reports whether Close was called. It takes no lock, so that it may be called
// under any lock of the producers and consumers.
func (c *Client) isClosed() bool { return c.shut.Load() }

func (c *Client) addUser(u clientUser) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return ErrClientClosed
	}
	c.users[u] = struct{}{}
	return nil
}

func (c *Client) removeUser(u clientUser) {
	c.mu.Lock()
	delete(c.users, u)
	c.mu.Unlock()
}

// memberUsable reports whether reads and commits may go to the broker at addr: no pull or
// commit to it failed recently.
func (c *Client) memberUsable(addr string) bool {
	return c.members.empty() || c.members.available(addr, "", c.now())
}

// memberFailed records that a pull or commit to addr failed.
func (c *Client) memberFailed(addr string) {
	now := c.now()
	c.members.failed(addr, "", now, now, false)
}

// memberOK records that addr answered a pull or commit.
func (c *Client) memberOK(addr string) { c.members.succeeded(addr) }

// route returns the topic's route, from the cache or the NameServer.
func (c *Client) route(ctx context.Context, topic string) (*topicRoute, error) {
	c.routesMu.RLock()
	slot := c.routes[topic]
	c.routesMu.RUnlock()
	if slot != nil {
		if r := slot.route.Load(); r != nil {
			return r, nil
		}
	}
	if err := protocol.ValidateTopic(unsafeBytes(topic)); err != nil {
		return nil, err
	}
	return c.refreshRoute(ctx, topic, nil)
}

// refreshRoute fetches the topic's route unless it changed since stale was read (another caller
// refreshed it), was fetched less than minForcedRefreshGap ago, or is being fetched by another
// caller (then the cached route is returned at once). On failure the cached route, if any, is
// returned with the error; when there is none, the topic is not kept unless it is held.
func (c *Client) refreshRoute(ctx context.Context, topic string, stale *topicRoute) (*topicRoute, error) {
	c.routesMu.Lock()
	slot := c.routes[topic]
	if slot == nil {
		slot = &routeSlot{}
		c.routes[topic] = slot
	}
	c.routesMu.Unlock()
	r, err := c.fetchRoute(ctx, slot, topic, stale)
	if r == nil {
		// Never found: nothing refreshes a topic nobody holds, nor logs its failures.
		c.routesMu.Lock()
		if c.routes[topic] == slot && slot.users == 0 && slot.route.Load() == nil {
			delete(c.routes, topic)
		}
		c.routesMu.Unlock()
	}
	return r, err
}

// fetchRoute is refreshRoute on the topic's slot.
func (c *Client) fetchRoute(ctx context.Context, slot *routeSlot, topic string, stale *topicRoute) (*topicRoute, error) {
	if !slot.mu.TryLock() {
		// Another caller is fetching: use the cached route rather than wait on its request.
		if cur := slot.route.Load(); cur != nil {
			return cur, nil
		}
		slot.mu.Lock()
	}
	defer slot.mu.Unlock()
	cur := slot.route.Load()
	if cur != nil && (cur != stale || c.now().Sub(slot.lastAttempt) < minForcedRefreshGap) {
		return cur, nil
	}
	slot.lastAttempt = c.now()
	var data protocol.TopicRouteData
	err := c.callNameServer(ctx, protocol.CodeGetRouteInfoByTopic, &protocol.TopicHeader{Topic: topic}, nil, &data)
	if err != nil {
		err = fmt.Errorf("cannot get the route of topic %q: %w", topic, err)
		if cur != nil {
			return cur, err
		}
		return nil, err
	}
	if !replaceRoute(cur, &data) {
		return cur, nil
	}
	r := newTopicRoute(topic, data, c.now()).withMissing(cur)
	slot.route.Store(r)
	return r, nil
}

// refreshedRoute is refreshRoute for callers that already hold a route: it returns the newest
// route known, stale itself when nothing better is available.
func (c *Client) refreshedRoute(ctx context.Context, topic string, stale *topicRoute) *topicRoute {
	if r, _ := c.refreshRoute(ctx, topic, stale); r != nil {
		return r
	}
	return stale
}

// holdTopic records a use of topic that keeps its route cached and refreshed until the matching
// releaseTopic: a running Consumer holds its topic, an open Producer every topic it found a route
// of. r, when not nil, is the route the caller found: it is cached when the topic has none (the
// periodic refresh may have forgotten the unheld topic since the caller fetched it).
func (c *Client) holdTopic(topic string, r *topicRoute) {
	c.routesMu.Lock()
	slot := c.routes[topic]
	if slot == nil {
		slot = &routeSlot{}
		c.routes[topic] = slot
	}
	slot.users++
	c.routesMu.Unlock()
	if r != nil {
		slot.route.CompareAndSwap(nil, r)
	}
}

// releaseTopic ends a hold of holdTopic; the last one forgets the topic's route, which is then
// refreshed no more.
func (c *Client) releaseTopic(topic string) {
	c.routesMu.Lock()
	defer c.routesMu.Unlock()
	slot := c.routes[topic]
	if slot == nil || slot.users == 0 {
		panic("BUG: client: releaseTopic of a topic not held: " + topic)
	}
	if slot.users--; slot.users == 0 {
		delete(c.routes, topic)
	}
}

// storeRoute replaces the cached route of a topic the client already uses with data, fetched by
// someone else (Admin.TopicRoute).
func (c *Client) storeRoute(topic string, data protocol.TopicRouteData) {
	c.routesMu.RLock()
	slot := c.routes[topic]
	c.routesMu.RUnlock()
	if slot == nil {
		return
	}
	data = cloneRouteData(data) // the caller keeps the original
	slot.mu.Lock()
	if cur := slot.route.Load(); replaceRoute(cur, &data) {
		slot.route.Store(newTopicRoute(topic, data, c.now()).withMissing(cur))
	}
	slot.mu.Unlock()
}

// refreshSoon asks for the topic's route to be refreshed in the background, at most every
// minForcedRefreshGap: a producer avoiding a group in fault backoff learns of its new master
// from the route, and should not wait for the periodic refresh. It does not block.
func (c *Client) refreshSoon(topic string) {
	c.routesMu.RLock()
	slot := c.routes[topic]
	c.routesMu.RUnlock()
	if slot == nil {
		return
	}
	now := c.now().UnixNano()
	if k := slot.kicked.Load(); now-k < int64(minForcedRefreshGap) || !slot.kicked.CompareAndSwap(k, now) {
		return
	}
	slot.soon.Store(true)
	select {
	case c.refreshKick <- struct{}{}:
	default:
	}
}

// refreshLoop refreshes the route of every topic in use (held) each RouteRefreshInterval, and the
// routes marked by refreshSoon when kicked, until Close. A cached topic no longer held is
// forgotten at the periodic round instead; one whose first fetch is under way is left to the
// caller fetching it (a Consumer's Run retries by itself).
func (c *Client) refreshLoop() {
	defer c.wg.Done()
	t := time.NewTicker(c.cfg.routeRefresh)
	defer t.Stop()
	for {
		all := false
		select {
		case <-c.ctx.Done():
			return
		case <-t.C:
			all = true
		case <-c.refreshKick:
		}
		c.routesMu.Lock()
		topics := make([]string, 0, len(c.routes))
		slots := make([]*routeSlot, 0, len(c.routes))
		for topic, s := range c.routes {
			soon := s.soon.Swap(false)
			switch {
			case s.route.Load() == nil:
			case s.users == 0:
				if all {
					delete(c.routes, topic)
				}
			case soon || all:
				topics = append(topics, topic)
				slots = append(slots, s)
			}
		}
		c.routesMu.Unlock()
		for i, topic := range topics {
			ctx, cancel := context.WithTimeout(c.ctx, c.cfg.requestTimeout)
			_, err := c.refreshRoute(ctx, topic, slots[i].route.Load())
			cancel()
			if err != nil && c.ctx.Err() == nil {
				c.log.Warn("route refresh failed", "topic", topic, "err", err)
			}
		}
	}
}

// callAddr sends a request to addr and decodes the success response (either target may be
// nil). The call, dial included, is bounded by the request timeout, or by ctx's deadline when
// it is earlier: a long ctx never lifts the per-request timeout. A non-success answer is
// returned as the *protocol.Error. The end of ctx is the caller giving up, which leaves the
// shared connection alone; only the request timeout counts as the request timing out (see
// pendingCall.wait).
func (c *Client) callAddr(ctx context.Context, addr string, code protocol.RequestCode, h protocol.Header, body []byte, respHdr, respBody interface{ ReadFrom([]byte) error }) error {
	deadline := time.Now().Add(c.cfg.requestTimeout)
	dctx, cancel := context.WithDeadline(ctx, deadline)
	defer cancel()
	conn, err := c.pool.get(dctx, addr)
	if err != nil {
		return err
	}
	resp, state, err := c.pool.startCall(conn, code, h, body).wait(ctx, deadline)
	switch state {
	case callOK:
	case callRejected:
		return err
	default:
		return fmt.Errorf("request %s: %w", code, err)
	}
	defer resp.Release()
	if respHdr != nil {
		if err := respHdr.ReadFrom(resp.Header); err != nil {
			return fmt.Errorf("cannot decode %s response header from %s: %w", code, addr, err)
		}
	}
	if respBody != nil {
		if err := respBody.ReadFrom(resp.Body); err != nil {
			return fmt.Errorf("cannot decode %s response body from %s: %w", code, addr, err)
		}
	}
	return nil
}

// clusterInfo asks a NameServer for the cluster table.
func (c *Client) clusterInfo(ctx context.Context) (*protocol.ClusterInfo, error) {
	var ci protocol.ClusterInfo
	if err := c.callNameServer(ctx, protocol.CodeGetBrokerClusterInfo, nil, nil, &ci); err != nil {
		return nil, fmt.Errorf("cannot get the cluster info: %w", err)
	}
	return &ci, nil
}

func cloneRouteData(d protocol.TopicRouteData) protocol.TopicRouteData {
	out := protocol.TopicRouteData{QueueDatas: slices.Clone(d.QueueDatas), BrokerDatas: slices.Clone(d.BrokerDatas)}
	for i := range out.BrokerDatas {
		out.BrokerDatas[i].Addrs = slices.Clone(out.BrokerDatas[i].Addrs)
	}
	return out
}
