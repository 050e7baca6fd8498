package broker

import (
	"context"
	"sync"
	"time"

	"github.com/petrel-mq/petrel/protocol"
	"github.com/petrel-mq/petrel/protocol/rpc"
)

// registrar registers the broker with every NameServer (RocketMQ's registerBrokerAll): at
// start, every RegisterNameServerPeriod, and at once when kicked (the topic set or the role
// changed). Each registration carries the full topic set, which replaces what the NameServer
// knew.
//
// Each NameServer is served on its own goroutine (nsLink.serve), which holds the one
// connection to it: a NameServer expires the broker when that connection closes, and one that
// restarted knows no route until the broker registers again, so the broker registers on a
// connection as soon as it is made, and dials again as soon as the connection closes (the
// NameServer restarted, or the network failed). While a NameServer cannot be reached or
// refuses the registration, its goroutine tries again after a short backoff (registerRetry,
// doubling up to registerRetryMax or the period, if shorter); the other NameServers are not
// registered with again for it, and do not wait for it.
type registrar struct {
	b     *Broker
	links []*nsLink // one per NameServer of namesrvAddr, in its order
}

// nsLink is the broker's link to one NameServer.
type nsLink struct {
	addr string
	// kickc (capacity 1) asks the link's goroutine for a registration now.
	kickc chan struct{}

	mu   sync.Mutex // guards conn
	conn *rpc.Conn  // the connection registrations go on; nil when there is none
	// regMu serialises the link's registrations, from reading the topic table to the answer,
	// so that one that read the table before a topic's deletion never reaches the NameServer
	// after one that read it since (a NameServer serves a connection's requests in order).
	regMu sync.Mutex
}

// registerRetry is the first wait before another registration with a NameServer after one
// failed; it doubles up to registerRetryMax (or the period, if shorter). A NameServer that
// comes back is registered with at most registerRetryMax after it listens again.
const (
	registerRetry    = 100 * time.Millisecond
	registerRetryMax = time.Second
	// registerTimeout bounds one registration, the dial included.
	registerTimeout = 3 * time.Second
)

func newRegistrar(b *Broker) *registrar {
	r := &registrar{b: b}
	for _, addr := range b.cfg.NamesrvAddrs() {
		r.links = append(r.links, &nsLink{addr: addr, kickc: make(chan struct{}, 1)})
	}
	return r
}

// kick asks for a registration with every NameServer now; it never blocks.
func (r *registrar) kick() {
	for _, l := range r.links {
		select {
		case l.kickc <- struct{}{}:
		default:
		}
	}
}

// registerNow registers with every NameServer at once, in parallel, and returns once each
// answered or failed: an admin worker that changed the topic table calls it before it answers.
// A failure is left to the link's own retries (register dropped its connection).
func (r *registrar) registerNow() {
	if r.b.Addr() == "" {
		return
	}
	var wg sync.WaitGroup
	for _, l := range r.links {
		wg.Go(func() {
			if _, err := r.register(l); err != nil {
				r.b.regLog.Warn(r.b.log, "cannot register with NameServer; retrying", "namesrv", l.addr, "err", err)
			}
		})
	}
	wg.Wait()
}

// run serves every NameServer link until the broker stops.
func (r *registrar) run() {
	defer r.b.bg.Done()
	var wg sync.WaitGroup
	for _, l := range r.links {
		wg.Go(func() { r.serve(l) })
	}
	wg.Wait()
}

// serve registers with one NameServer until the broker stops: now, then each period, when
// kicked, as soon as its connection closes (on a new one), and after a backoff while a
// registration fails (nextRegistration).
func (r *registrar) serve(l *nsLink) {
	period := r.b.cfg.RegisterNameServerPeriod
	tick := time.NewTicker(period)
	defer tick.Stop()
	retry := time.NewTimer(time.Hour)
	retry.Stop()
	defer retry.Stop()
	failures := 0
	for {
		c, err := r.register(l)
		var lost <-chan struct{}
		if err != nil {
			r.b.regLog.Warn(r.b.log, "cannot register with NameServer; retrying", "namesrv", l.addr, "err", err)
			failures++
			retry.Reset(nextRegistration(failures, period))
		} else {
			failures = 0
			lost = c.Done()
		}
		select {
		case <-r.b.stop:
			return
		case <-tick.C:
		case <-l.kickc:
		case <-retry.C:
		case <-lost:
			// The NameServer may have restarted knowing nothing: a new connection, and a
			// registration on it, now.
			r.b.warn.Info(r.b.log, "NameServer connection closed; registering again", "namesrv", l.addr, "err", c.Err())
		}
		retry.Stop()
	}
}

// nextRegistration returns how long a NameServer link waits before it registers again after
// failures (>= 1) registrations in a row failed: registerRetry, doubling with each further
// failure, at most registerRetryMax and at most the registration period.
func nextRegistration(failures int, period time.Duration) time.Duration {
	d := registerRetry
	for i := 1; i < failures && d < registerRetryMax; i++ {
		d *= 2
	}
	return min(d, registerRetryMax, period)
}

func (r *registrar) header() *protocol.BrokerHeader {
	return &protocol.BrokerHeader{
		ClusterName:  r.b.cfg.BrokerClusterName,
		BrokerName:   r.b.cfg.BrokerName,
		BrokerID:     r.b.registeredID(),
		BrokerAddr:   r.b.Addr(),
		HAServerAddr: r.b.haAdvertised(),
		DataVersion:  r.b.topics.version.Load(),
		Epoch:        r.b.role.Load().Epoch,
	}
}

// register registers with the link's NameServer on its connection, dialling one first when
// there is none (or it closed), and returns the connection. A failed registration drops the
// connection, so the next one starts on a new one.
func (r *registrar) register(l *nsLink) (*rpc.Conn, error) {
	l.regMu.Lock()
	defer l.regMu.Unlock()
	list := protocol.TopicConfigList{Topics: r.b.topics.list()}
	ctx, cancel := context.WithTimeout(context.Background(), registerTimeout)
	defer cancel()
	c, err := l.connect(ctx)
	if err != nil {
		return nil, err
	}
	var resp protocol.RegisterBrokerResponseHeader // the group's master, for a slave
	if err := c.CallDecode(ctx, protocol.CodeRegisterBroker, r.header(), list.AppendTo(nil), &resp, nil); err != nil {
		l.drop(c)
		return nil, err
	}
	r.b.learnMaster(resp.MasterAddr, resp.HAServerAddr)
	r.b.log.Debug("registered with NameServer", "namesrv", l.addr, "topics", len(list.Topics))
	return c, nil
}

// connect returns the link's open connection, or dials a new one.
func (l *nsLink) connect(ctx context.Context) (*rpc.Conn, error) {
	l.mu.Lock()
	c := l.conn
	l.mu.Unlock()
	if c != nil && c.Err() == nil {
		return c, nil
	}
	l.drop(c)
	c, err := rpc.Dial(ctx, l.addr, rpc.Options{})
	if err != nil {
		return nil, err
	}
	l.mu.Lock()
	l.conn = c
	l.mu.Unlock()
	return c, nil
}

// drop closes c and forgets it if it is the link's connection; c may be nil.
func (l *nsLink) drop(c *rpc.Conn) {
	if c == nil {
		return
	}
	l.mu.Lock()
	if l.conn == c {
		l.conn = nil
	}
	l.mu.Unlock()
	_ = c.Close()
}

// unregisterAll tells every NameServer the broker is leaving and closes the connections. It
// runs after the links' goroutines have ended.
func (r *registrar) unregisterAll() {
	h := r.header()
	var wg sync.WaitGroup
	for _, l := range r.links {
		wg.Go(func() {
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			defer cancel()
			c, err := l.connect(ctx)
			if err == nil {
				err = c.CallDecode(ctx, protocol.CodeUnregisterBroker, h, nil, nil, nil)
			}
			if err != nil {
				r.b.log.Warn("cannot unregister from NameServer", "namesrv", l.addr, "err", err)
			}
			l.drop(c)
		})
	}
	wg.Wait()
}
