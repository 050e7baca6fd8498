package broker

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/petrel-mq/petrel/protocol"
	"github.com/petrel-mq/petrel/protocol/rpc"
)

// registrar registers the broker with every NameServer at start, every
// RegisterNameServerPeriod, and at once when the topic set changes (RocketMQ's
// registerBrokerAll). Each registration carries the full topic set, which replaces what the
// NameServer knew. It owns one connection per NameServer; a NameServer expires the broker when
// that connection closes. When a connection closes (the NameServer restarted, or the network
// failed), or a registration fails, the registrar registers again after a short backoff
// (registerRetry, doubling up to the period) rather than at the next period: a restarted
// NameServer knows no route until every broker has registered again.
type registrar struct {
	b     *Broker
	kickc chan struct{}

	mu    sync.Mutex // guards conns
	conns map[string]*rpc.Conn
	// regMu serialises registrations, from reading the topic table to the last answer, so that
	// one that read the table before a topic's deletion never reaches a NameServer after one
	// that read it since (a NameServer serves a connection's requests in order).
	regMu sync.Mutex
	// watchers are the goroutines that kick a registration when a NameServer connection closes;
	// each ends with its connection or the broker's stop.
	watchers sync.WaitGroup
}

// registerRetry is the first wait before another registration after one failed or a
// NameServer connection closed; it doubles up to registerRetryMax (or the period, if shorter).
const (
	registerRetry    = 100 * time.Millisecond
	registerRetryMax = 2 * time.Second
)

func newRegistrar(b *Broker) *registrar {
	return &registrar{b: b, kickc: make(chan struct{}, 1), conns: map[string]*rpc.Conn{}}
}

// kick asks for a registration now; it never blocks.
func (r *registrar) kick() {
	select {
	case r.kickc <- struct{}{}:
	default:
	}
}

func (r *registrar) run() {
	defer r.b.bg.Done()
	addrs := r.b.cfg.NamesrvAddrs()
	if len(addrs) == 0 {
		return
	}
	defer r.watchers.Wait()
	t := time.NewTicker(r.b.cfg.RegisterNameServerPeriod)
	defer t.Stop()
	retry := time.NewTimer(time.Hour)
	retry.Stop()
	defer retry.Stop()
	backoff := registerRetry
	for {
		if r.registerAll() {
			backoff = registerRetry
		} else {
			retry.Reset(backoff)
			backoff = min(2*backoff, registerRetryMax, r.b.cfg.RegisterNameServerPeriod)
		}
		select {
		case <-r.b.stop:
			return
		case <-t.C:
		case <-r.kickc:
		case <-retry.C:
		}
	}
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

// registerNow registers with every NameServer and returns once each answered or failed (an
// admin worker that changed the topic table, before it answers).
func (r *registrar) registerNow() {
	if len(r.b.cfg.NamesrvAddrs()) > 0 && r.b.Addr() != "" {
		r.registerAll()
	}
}

// registerAll registers with every NameServer in parallel and reports whether every
// registration succeeded.
func (r *registrar) registerAll() bool {
	r.regMu.Lock()
	defer r.regMu.Unlock()
	list := protocol.TopicConfigList{Topics: r.b.topics.list()}
	body := list.AppendTo(nil)
	h := r.header()
	var wg sync.WaitGroup
	var failed atomic.Bool
	for _, addr := range r.b.cfg.NamesrvAddrs() {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
			defer cancel()
			var resp protocol.RegisterBrokerResponseHeader // the group's master, for a slave
			c, err := r.conn(ctx, addr)
			if err == nil {
				err = c.CallDecode(ctx, protocol.CodeRegisterBroker, h, body, &resp, nil)
			}
			if err != nil {
				r.b.regLog.Warn(r.b.log, "cannot register with NameServer; retrying", "namesrv", addr, "err", err)
				r.drop(addr, c)
				failed.Store(true)
				return
			}
			r.b.learnMaster(resp.MasterAddr, resp.HAServerAddr)
			r.b.log.Debug("registered with NameServer", "namesrv", addr, "topics", len(list.Topics))
		}()
	}
	wg.Wait()
	return !failed.Load()
}

func (r *registrar) conn(ctx context.Context, addr string) (*rpc.Conn, error) {
	r.mu.Lock()
	c := r.conns[addr]
	r.mu.Unlock()
	if c != nil && c.Err() == nil {
		return c, nil
	}
	if c != nil {
		r.drop(addr, c)
	}
	c, err := rpc.Dial(ctx, addr, rpc.Options{})
	if err != nil {
		return nil, err
	}
	r.mu.Lock()
	r.conns[addr] = c
	r.mu.Unlock()
	r.watchers.Add(1)
	go func() {
		defer r.watchers.Done()
		select {
		case <-c.Done():
			// NB: a connection drop closed (after a failed registration) is not in conns any
			// more: the retry backoff handles that, not a kick.
			r.mu.Lock()
			lost := r.conns[addr] == c
			r.mu.Unlock()
			if lost {
				r.kick() // the NameServer may have restarted knowing nothing: register again now
			}
		case <-r.b.stop:
		}
	}()
	return c, nil
}

func (r *registrar) drop(addr string, c *rpc.Conn) {
	if c == nil {
		return
	}
	r.mu.Lock()
	if r.conns[addr] == c {
		delete(r.conns, addr)
	}
	r.mu.Unlock()
	_ = c.Close()
}

// unregisterAll tells every NameServer the broker is leaving and closes the connections.
func (r *registrar) unregisterAll() {
	h := r.header()
	var wg sync.WaitGroup
	for _, addr := range r.b.cfg.NamesrvAddrs() {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			defer cancel()
			c, err := r.conn(ctx, addr)
			if err == nil {
				err = c.CallDecode(ctx, protocol.CodeUnregisterBroker, h, nil, nil, nil)
			}
			if err != nil {
				r.b.log.Warn("cannot unregister from NameServer", "namesrv", addr, "err", err)
			}
			r.drop(addr, c)
		}()
	}
	wg.Wait()
}
