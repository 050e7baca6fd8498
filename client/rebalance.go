package client

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/petrel-mq/petrel/protocol"
	"github.com/petrel-mq/petrel/protocol/rpc"
)

// Consumer-group rebalancing, RocketMQ style (RebalanceImpl): the brokers only keep the list of
// live clients of each group; every consumer reads that list and computes its own share of the
// topic's read queues with the same deterministic function, so the members agree without
// talking to each other. See Consumer for the behaviour and the at-least-once caveat.

// unregisterTimeout bounds the best-effort UNREGISTER_CLIENT requests when Run returns.
const unregisterTimeout = time.Second

// newClientID returns a consumer instance id: host@pid@random, where host is the hostname
// (else a non-loopback IP, else "localhost") and random is 64 random bits in hex. As RocketMQ's
// clientId (clientIP@instanceName) it tells the members of a group apart in the broker's list;
// the random part makes two consumers of one process distinct.
func newClientID() string {
	host, err := os.Hostname()
	if err != nil || host == "" {
		host = localIP()
	}
	return host + "@" + strconv.Itoa(os.Getpid()) + "@" + fmt.Sprintf("%016x", rand.Uint64())
}

// localIP returns the first non-loopback IP address of the host, or "localhost".
func localIP() string {
	addrs, err := net.InterfaceAddrs()
	if err == nil {
		for _, a := range addrs {
			if ipn, ok := a.(*net.IPNet); ok && !ipn.IP.IsLoopback() {
				return ipn.IP.String()
			}
		}
	}
	return "localhost"
}

// allocateAveragely returns the queues client self gets among clients: the port of RocketMQ's
// AllocateMessageQueueAveragely (rocketmq-client,
// org/apache/rocketmq/client/consumer/rebalance/AllocateMessageQueueAveragely.java). With m
// queues and n clients, client i (its index in clients) gets a contiguous block of m/n queues,
// and the first m%n clients one more; with n > m the last n-m clients get nothing. Both lists
// must be sorted (queues by compareQueues, clients as strings) and the same for every member,
// which then get disjoint blocks covering queues. ok is false, and the result nil, when self is
// not in clients. The result is a new slice.
func allocateAveragely(queues []MessageQueue, clients []string, self string) (mine []MessageQueue, ok bool) {
	i := slices.Index(clients, self)
	if i < 0 {
		return nil, false
	}
	n, m := len(clients), len(queues)
	size, extra := m/n, m%n
	start := i*size + min(i, extra)
	if i < extra {
		size++
	}
	return slices.Clone(queues[start : start+size]), true
}

// diffAssignment returns the queues of next not in cur (added) and of cur not in next
// (removed). Both inputs must be sorted by compareQueues; so are the results.
func diffAssignment(cur, next []MessageQueue) (added, removed []MessageQueue) {
	i, j := 0, 0
	for i < len(cur) || j < len(next) {
		switch {
		case i == len(cur):
			added = append(added, next[j])
			j++
		case j == len(next):
			removed = append(removed, cur[i])
			i++
		default:
			switch c := compareQueues(cur[i], next[j]); {
			case c < 0:
				removed = append(removed, cur[i])
				i++
			case c > 0:
				added = append(added, next[j])
				j++
			default:
				i++
				j++
			}
		}
	}
	return added, removed
}

// heldByOthers returns the queues that, in the previous allocation (queues among the member
// list prev), belong to another client still in the current list cur: that client pulls them
// until its own next rebalance, so a new owner should give it time to release them. prev nil
// (no earlier list seen) stands for cur without self: the group as it was before self joined.
// The lists must be sorted.
func heldByOthers(queues []MessageQueue, prev, cur []string, self string) map[MessageQueue]bool {
	if prev == nil {
		prev = slices.DeleteFunc(slices.Clone(cur), func(id string) bool { return id == self })
	}
	held := map[MessageQueue]bool{}
	for _, id := range prev {
		if id == self {
			continue
		}
		if _, live := slices.BinarySearch(cur, id); !live {
			continue
		}
		share, _ := allocateAveragely(queues, prev, id)
		for _, mq := range share {
			held[mq] = true
		}
	}
	return held
}

// normalizeClientIDs sorts ids, drops duplicates and empty ids, in place.
func normalizeClientIDs(ids []string) []string {
	ids = slices.DeleteFunc(ids, func(s string) bool { return s == "" })
	slices.Sort(ids)
	return slices.Compact(ids)
}

// routeAddrs returns every broker address of the route (masters and slaves), masters first,
// each part in broker-name order: the order the group list is asked in.
func routeAddrs(r *topicRoute) []string {
	bds := slices.Clone(r.data.BrokerDatas)
	slices.SortFunc(bds, func(a, b protocol.BrokerData) int { return cmp.Compare(a.BrokerName, b.BrokerName) })
	var masters, others []string
	for _, bd := range bds {
		for _, a := range bd.Addrs {
			if a.Addr == "" {
				continue
			}
			if a.BrokerID == 0 {
				masters = append(masters, a.Addr)
			} else {
				others = append(others, a.Addr)
			}
		}
	}
	out := append(masters, others...)
	seen := make(map[string]bool, len(out))
	return slices.DeleteFunc(out, func(a string) bool {
		if seen[a] {
			return true
		}
		seen[a] = true
		return false
	})
}

// kick wakes the loop reading ch (capacity 1) without blocking.
func kick(ch chan struct{}) {
	select {
	case ch <- struct{}{}:
	default:
	}
}

// heartbeater registers a consumer with every broker of its topic (CodeHeartbeat) and removes it
// when Run ends (CodeUnregisterClient). Its fields are owned by the goroutine running loop;
// unregister runs after loop has returned.
type heartbeater struct {
	co   *Consumer
	kick chan struct{} // capacity 1: beat now (the rebalancer did not find us in the group)

	conns   map[string]*rpc.Conn // per address, the connection the last heartbeat succeeded on
	failing map[string]bool      // addresses whose last heartbeat failed (logged once)
	last    time.Time            // when the last full round was sent
}

func newHeartbeater(co *Consumer) *heartbeater {
	return &heartbeater{co: co, kick: make(chan struct{}, 1), conns: map[string]*rpc.Conn{}, failing: map[string]bool{}}
}

func (hb *heartbeater) header() *protocol.ConsumerHeartbeatHeader {
	return &protocol.ConsumerHeartbeatHeader{ClientID: hb.co.clientID, ConsumerGroup: hb.co.group, Topic: hb.co.topic}
}

// loop heartbeats every broker of the route at once, then every HeartbeatInterval or when
// kicked. In between, four times per RebalanceInterval, it heartbeats the brokers without a live
// registration: newly in the route, failed last time, or registered on a connection that has
// closed since (the broker forgot us with it; re-registering before the other members' next
// rebalance keeps them from taking our queues). A check with nothing due does no I/O. After a
// round with an answer it kicks rebalance. It returns when ctx ends.
func (hb *heartbeater) loop(ctx context.Context, rebalance chan struct{}) {
	co := hb.co
	check := time.NewTicker(max(min(co.cfg.rebalanceInterval/4, co.cfg.heartbeatInterval), 10*time.Millisecond))
	defer check.Stop()
	force := true
	for {
		if route, err := co.c.route(ctx, co.topic); err == nil {
			addrs := routeAddrs(route)
			hb.forgetGone(addrs)
			full := force || time.Since(hb.last) >= co.cfg.heartbeatInterval
			if !full {
				addrs = slices.DeleteFunc(addrs, func(a string) bool { return isOpen(hb.conns[a]) })
			} else {
				hb.last = time.Now()
			}
			if len(addrs) > 0 && hb.beat(ctx, addrs) {
				kick(rebalance)
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-check.C:
			force = false
		case <-hb.kick:
			force = true
		}
	}
}

// forgetGone drops the state of addresses no longer in the route.
func (hb *heartbeater) forgetGone(addrs []string) {
	for a := range hb.conns {
		if !slices.Contains(addrs, a) {
			delete(hb.conns, a)
		}
	}
	for a := range hb.failing {
		if !slices.Contains(addrs, a) {
			delete(hb.failing, a)
		}
	}
}

// beat sends a heartbeat to every address in parallel and waits for the answers; it reports
// whether any succeeded. A failure is logged once per address until it succeeds again.
func (hb *heartbeater) beat(ctx context.Context, addrs []string) bool {
	co := hb.co
	conns := make([]*rpc.Conn, len(addrs))
	errs := make([]error, len(addrs))
	var wg sync.WaitGroup
	for i, addr := range addrs {
		wg.Go(func() {
			conns[i], errs[i] = co.call(ctx, addr, protocol.CodeHeartbeat, hb.header(), co.c.cfg.requestTimeout)
		})
	}
	wg.Wait()
	if ctx.Err() != nil {
		return false
	}
	ok := false
	for i, addr := range addrs {
		if errs[i] != nil {
			delete(hb.conns, addr)
			if !hb.failing[addr] {
				hb.failing[addr] = true
				co.log.Warn("heartbeat failed; retrying", "broker", addr, "err", errs[i])
			}
			continue
		}
		ok = true
		if hb.failing[addr] {
			delete(hb.failing, addr)
			co.log.Info("heartbeat succeeds again", "broker", addr)
		}
		hb.conns[addr] = conns[i]
	}
	return ok
}

// unregister sends UNREGISTER_CLIENT to every broker registered with or in the route, best
// effort within unregisterTimeout. Run calls it after loop has returned and the final commit.
func (hb *heartbeater) unregister() {
	co := hb.co
	var addrs []string
	if route, err := co.c.route(context.Background(), co.topic); err == nil { // cached: no I/O
		addrs = routeAddrs(route)
	}
	for a := range hb.conns {
		if !slices.Contains(addrs, a) {
			addrs = append(addrs, a)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), min(unregisterTimeout, co.c.cfg.requestTimeout))
	defer cancel()
	var wg sync.WaitGroup
	for _, addr := range addrs {
		wg.Go(func() {
			if _, err := co.call(ctx, addr, protocol.CodeUnregisterClient, hb.header(), 0); err != nil {
				co.log.Debug("cannot unregister the consumer (its connection closing does it too)", "broker", addr, "err", err)
			}
		})
	}
	wg.Wait()
}

// call sends a request without body whose answer has no header or body to read, bounded by
// timeout (0: ctx alone), and returns the connection it went on.
func (co *Consumer) call(ctx context.Context, addr string, code protocol.RequestCode, h protocol.Header, timeout time.Duration) (*rpc.Conn, error) {
	var deadline time.Time
	dctx := ctx
	if timeout > 0 {
		deadline = time.Now().Add(timeout)
		var cancel context.CancelFunc
		dctx, cancel = context.WithDeadline(ctx, deadline)
		defer cancel()
	}
	conn, err := co.c.pool.get(dctx, addr)
	if err != nil {
		return nil, err
	}
	resp, state, err := co.c.pool.startCall(conn, code, h, nil).wait(ctx, deadline)
	if state != callOK {
		return nil, fmt.Errorf("%s to %s: %w", code, addr, err)
	}
	resp.Release()
	return conn, nil
}

// groupMembers returns the sorted client ids of the group, asked of the route's brokers in
// routeAddrs order until one answers with a list that holds this consumer. When none does, it
// returns the first list received (the caller sees itself missing), or the errors.
func (co *Consumer) groupMembers(ctx context.Context, route *topicRoute) ([]string, error) {
	var first []string
	var got bool
	var errs []error
	for _, addr := range routeAddrs(route) {
		var l protocol.StringList
		err := co.c.callAddr(ctx, addr, protocol.CodeGetConsumerListByGroup, &protocol.GroupHeader{ConsumerGroup: co.group, Topic: co.topic}, nil, nil, &l)
		if err != nil {
			if ctx.Err() != nil {
				return nil, err
			}
			errs = append(errs, fmt.Errorf("%s: %w", addr, err))
			continue
		}
		ids := normalizeClientIDs(l.Items)
		if _, found := slices.BinarySearch(ids, co.clientID); found {
			return ids, nil
		}
		if !got {
			first, got = ids, true
		}
	}
	if got {
		return first, nil
	}
	if len(errs) == 0 {
		return nil, fmt.Errorf("%w: the route of %s lists no broker", ErrNoQueue, co.topic)
	}
	return nil, fmt.Errorf("cannot get the members of group %s: %w", co.group, errors.Join(errs...))
}

// rebalancer is the state of Run's rebalancing, owned by Run's goroutine.
type rebalancer struct {
	co *Consumer
	h  Handler
	hb *heartbeater

	listFailing bool // the last group-list request failed (logged once)
	absent      bool // the last group list did not hold this consumer (logged once)
	// prev and prevQueues are the member list and the queues of the last allocation; nil
	// before the first.
	prev       []string
	prevQueues []MessageQueue
}

// rebalance computes the consumer's share of the topic's read queues from the group's member
// list and applies it. It keeps the current assignment when the list is unavailable, empty, or
// does not hold this consumer yet (then it asks for a heartbeat).
func (rb *rebalancer) rebalance(ctx context.Context) {
	co := rb.co
	route, err := co.c.route(ctx, co.topic)
	if err != nil {
		return // the pullers and the route refresh log route failures
	}
	ids, err := co.groupMembers(ctx, route)
	if err != nil {
		if ctx.Err() == nil && !rb.listFailing {
			co.log.Warn("cannot get the consumer group's members; keeping the current queues", "err", err)
		}
		rb.listFailing = ctx.Err() == nil
		return
	}
	rb.listFailing = false
	next, ok := allocateAveragely(route.readQueues, ids, co.clientID)
	if !ok {
		if !rb.absent {
			co.log.Info("this consumer is not in the group's member list yet; keeping the current queues", "client", co.clientID, "members", len(ids))
		}
		rb.absent = true
		kick(rb.hb.kick)
		return
	}
	rb.absent = false
	prevQueues := rb.prevQueues
	if rb.prev == nil {
		prevQueues = route.readQueues
	}
	co.applyAssignment(ctx, next, heldByOthers(prevQueues, rb.prev, ids, co.clientID), rb.h)
	rb.prev, rb.prevQueues = ids, route.readQueues
}

// applyAssignment makes next (sorted) the consumer's queues: it starts a puller, from the
// group's committed offset, for each new queue, and releases each queue no longer assigned:
// stops its puller, waits for its handler call to end, commits its offset, and forgets it. The
// puller of a new queue in held (another live member may still pull it) starts after the
// handover delay, 1.5 RebalanceIntervals, the time that member needs to see the change, release
// the queue and commit its offset. Run's goroutine calls it, one call at a time.
func (co *Consumer) applyAssignment(ctx context.Context, next []MessageQueue, held map[MessageQueue]bool, h Handler) {
	co.mu.Lock()
	cur := co.assignmentLocked()
	added, removed := diffAssignment(cur, next)
	if len(added) == 0 && len(removed) == 0 {
		co.mu.Unlock()
		return
	}
	gone := make([]*puller, 0, len(removed))
	released := make([]*queueState, 0, len(removed))
	for _, mq := range removed {
		p := co.running[mq]
		p.cancel()
		gone = append(gone, p)
		delete(co.running, mq)
		if qs := co.queues[mq]; qs != nil {
			released = append(released, qs)
		}
	}
	for _, mq := range added {
		// A fresh state: the position is read from the broker, where the previous owner
		// committed it (or where this consumer left the queue, when that is further).
		qs := &queueState{mq: mq, offsets: newOffsetTracker(), resumeAt: -1}
		if at, ok := co.left[mq]; ok {
			qs.resumeAt, qs.resumeInc = at.off, at.inc
			delete(co.left, mq)
		}
		qs.maxOffset.Store(-1)
		co.queues[mq] = qs
		var delay time.Duration
		if held[mq] {
			delay = co.handoverDelay()
		}
		co.startPullerLocked(ctx, qs, h, delay)
	}
	co.mu.Unlock()
	co.rebalances.Add(1)
	co.log.Info("rebalanced", "client", co.clientID, "queues", len(next), "added", queueNames(added), "removed", queueNames(removed))
	if len(removed) == 0 {
		return
	}
	for _, p := range gone { // outside mu: a handler being stopped may call Progress
		<-p.done
	}
	// Commit before letting go, so the next owner starts after what was processed here. The
	// commit outlives ctx: Run may be ending, and the final commit no longer covers these.
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), co.c.cfg.requestTimeout)
	err := co.commitQueues(cctx, released)
	cancel()
	if err != nil {
		co.log.Warn("cannot commit the offsets of released queues; their next owner may redeliver messages", "err", err)
	}
	co.mu.Lock()
	for _, qs := range released {
		if co.queues[qs.mq] == qs {
			delete(co.queues, qs.mq)
		}
		if at, _, inc := qs.offsets.position(); at >= 0 && co.running[qs.mq] == nil {
			if co.left == nil {
				co.left = map[MessageQueue]leftAt{}
			}
			co.left[qs.mq] = leftAt{off: at, inc: inc}
		}
	}
	co.mu.Unlock()
}

// handoverDelay is how long a queue taken from a live member waits before its first pull.
func (co *Consumer) handoverDelay() time.Duration { return co.cfg.rebalanceInterval * 3 / 2 }

func queueNames(qs []MessageQueue) []string {
	out := make([]string, len(qs))
	for i, q := range qs {
		out[i] = q.String()
	}
	return out
}
