package client

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/petrel-mq/petrel/internal/ratelog"
	"github.com/petrel-mq/petrel/protocol"
)

// minPollPause is the pause after an empty pull when the poll timeout is shorter, so a consumer
// without long polling does not spin.
const minPollPause = 10 * time.Millisecond

// Handler consumes the messages of one pull of one queue, in queue-offset order. It is never
// called concurrently for the same queue, but is for different queues. The messages and their
// byte fields are valid only until it returns (MessageExt.Clone keeps one). Returning nil
// accepts them: the queue's offset moves past them. Returning an error makes the consumer wait
// WithRetryDelay and call it again with the same messages (order is kept; nothing is skipped).
// ctx ends when Run stops.
type Handler func(ctx context.Context, msgs []MessageExt) error

// Consumer is a pull consumer of one topic for one consumer group. The consumers of a group
// share the topic's read queues (all broker groups) among themselves, RocketMQ style: each
// consumer pulls only the queues assigned to it, one goroutine per queue, with long polling,
// delivers to a Handler in queue order, and commits the group's offsets to the brokers. Its
// methods are safe for concurrent use.
//
// Group membership and rebalancing: a consumer has a ClientID unique to the instance. It
// heartbeats every broker of the topic (every address of the route) when Run starts and every
// WithHeartbeatInterval; a broker forgets a client that unregisters, whose connection closes,
// or that misses heartbeats for its channelExpiredTimeout. When Run starts, every
// WithRebalanceInterval and after each heartbeat round, the consumer asks one broker of the
// topic for the group's client list and takes its share of the read queues (sorted by broker
// name and queue id) with RocketMQ's AllocateMessageQueueAveragely: client i of n, in client-id
// order, gets a contiguous block, the first len%n clients one queue more (see Assignment). While
// the list is unavailable or does not hold the consumer yet, the current assignment is kept.
// A queue taken away is released: its puller stops, its handler call in progress ends, its
// offset is committed, and only then it is forgotten. A queue given is pulled from the group's
// committed offset.
//
// NB: the brokers keep one member list per group, whatever topic each member consumes, and a
// Consumer reads one topic. So all the consumers of a group must consume the same topic (use a
// group per topic): a group whose members read different topics shares each topic's queues
// among all of them, and the queues given to members of another topic are never consumed
// (RocketMQ's rule that the members of a group subscribe alike).
//
// Delivery is at least once. When the group changes, a queue's old owner keeps pulling it until
// its own next rebalance (up to one RebalanceInterval), and it commits the queue's offset before
// letting it go. So a consumer given a queue that, by the previous member list, belonged to a
// member still in the group waits 1.5 RebalanceIntervals (the handover delay) before its first
// pull, then starts at the offset the old owner committed; a queue whose owner left or died is
// pulled at once. A consumer that leaves cleanly (Close, or Run's end) commits and unregisters
// before the others take its queues, so that handover duplicates nothing. Messages can still
// reach the group twice when the old owner is slower than the delay (a long handler call, an
// unavailable member list, members with different intervals) or dies without committing: the
// new owner redelivers from the last committed offset, as RocketMQ does (which has no handover
// delay at all).
//
// Start position of a queue: the group's committed offset; when the group has none, the queue's
// min offset (ConsumeFromFirst, default) or max offset (ConsumeFromLast). A queue this consumer
// released and is given back (its broker group left the route while all its members were down,
// say) starts where this consumer left it when that is past the committed offset: queue offsets
// are assigned once, so what it handled there is not delivered again. Offsets are committed
// every WithCommitInterval, with pulls, on release and when Run returns; a committed offset
// never moves backwards, except that a pull answered OFFSET_MOVED by a master (the requested
// offset is outside the queue: truncated or replaced) continues at, and commits, the offset the
// broker gives, logged. Positions and commits carry the queue's incarnation, the life of the
// queue they belong to: a queue created again (its topic deleted and re-created, or its
// master's store lost) starts at offset 0 again, and when a master answers with another life
// than the position's, the consumer delivers nothing of that answer, logs "queue reborn"
// (counted in Stats.QueuesReborn) and consumes the new life from its first stored message; the
// brokers never apply a commit or committed offset of one life to another.
//
// Master and slaves: the consumer pulls each queue from the member of its broker group the last
// pull response suggested (SuggestBrokerID; the master first), falling back to the master, then
// to any live member, when that one is not in the route or fails; a member that failed is
// avoided for a short backoff. A slave that has not replicated the requested offset answers
// "not here" and the next pull goes to the member it suggests, the master; the position does
// not move (a slave's OFFSET_MOVED backwards is taken as "not here" too). When the group's
// master is dead the queues are read from its slaves, up to what they hold. The members' logs
// are byte-identical, so switching members never skips or repeats an offset. Commits go to the
// master when it is reachable, else to another live member, which merges them into the master's
// offsets; the commit piggybacked on a pull goes to the member that serves the pull. No member
// holds an offset beyond its queue's max offset (a slave that lags lowers a commit beyond what it
// replicated): a commit that rode with a pull counts as done only when the answer shows the member
// holds the offset pulled (found, or nothing new), else it is made again. WithReadBrokerID pins reads to one member instead. Stats.ServedBy counts what each member
// served.
//
// Every batch's CRC and structure are checked; a corrupt batch stops its queue with an error
// (see Progress and Stats) and is never delivered.
type Consumer struct {
	c        *Client
	group    string
	topic    string
	clientID string
	cfg      consumerConfig
	log      *slog.Logger

	mu     sync.Mutex // guards ran, closed, cancel, done, queues, running
	ran    bool
	closed bool
	cancel context.CancelFunc
	done   chan struct{} // closed when Run has returned (a new one after a Run that did not start)
	// queues holds the state of the assigned queues, and of released ones until their offsets
	// are committed; after Run, of the queues assigned when it ended.
	queues map[MessageQueue]*queueState
	// left holds, for each queue released and not assigned again since, the position this
	// consumer had reached (queueState.resumeAt).
	left map[MessageQueue]leftAt
	// running holds the puller of every assigned queue (stopped ones included): its keys are
	// the assignment.
	running map[MessageQueue]*puller

	delivered  atomic.Int64
	corrupt    atomic.Int64
	pullErrors atomic.Int64
	rebalances atomic.Int64
	// offsetMoved counts the OFFSET_MOVED answers followed, offsetMovedBack those that moved
	// the position to a lower offset; reborn the queues found created again.
	offsetMoved, offsetMovedBack atomic.Int64
	reborn                       atomic.Int64
	served                       servedCounts
}

// failureLogInterval is the least time between two warnings about one broker's failing pulls.
const failureLogInterval = 5 * time.Second

// failureLog rate-limits warnings per key (a broker). During an outage every puller of the
// broker's queues, in every consumer of the Client, fails on each retry; the first failure of a
// key is logged at once, later ones at most once per failureLogInterval, each line counting
// those left out since the last. It is safe for concurrent use.
type failureLog struct {
	mu   sync.Mutex // guards keys
	keys map[string]*failureLogKey
}

type failureLogKey struct {
	last     time.Time // when a line was last logged
	unlogged int       // failures since then not logged
}

// allow records a failure of key at now and reports whether to log it, with the count of the
// failures of key not logged since the last line.
func (l *failureLog) allow(key string, now time.Time) (ok bool, unlogged int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	k := l.keys[key]
	if k == nil {
		if l.keys == nil {
			l.keys = make(map[string]*failureLogKey)
		}
		k = &failureLogKey{}
		l.keys[key] = k
	} else if now.Sub(k.last) < failureLogInterval {
		k.unlogged++
		return false, 0
	}
	unlogged, k.unlogged, k.last = k.unlogged, 0, now
	return true, unlogged
}

// queueState is what the consumer knows of one assigned queue. A queue given again after a
// release gets a new state, read from the broker's committed offset.
type queueState struct {
	mq        MessageQueue
	offsets   *offsetTracker
	maxOffset atomic.Int64 // the queue's max offset at the last pull; -1 unknown
	err       atomic.Pointer[error]
	// resumeAt is where this consumer stopped when it last released the queue (-1: never): its
	// puller starts there when the group's committed offset is lower (the commit at the
	// release failed, or the broker lost it), so taking a queue back redelivers nothing this
	// consumer already handled; but not when the committed offset is of another life of the
	// queue than resumeInc, resumeAt's (the queue was created again meanwhile). Set before the
	// puller starts.
	resumeAt  int64
	resumeInc uint64
}

// leftAt is where this consumer stopped on a queue it released, and the incarnation of the
// queue that position belongs to.
type leftAt struct {
	off int64
	inc uint64
}

type puller struct {
	cancel context.CancelFunc
	done   chan struct{}
}

// NewConsumer returns a consumer of topic for group. Nothing happens until Run. Errors:
// ErrInvalidArgument for a nil c; ErrGroupInvalid or ErrTopicInvalid for an empty or malformed
// name; ErrInvalidOption for an option given a value outside its range (see ClientOption);
// ErrClientClosed.
func NewConsumer(c *Client, group, topic string, opts ...ConsumerOption) (*Consumer, error) {
	if c == nil {
		return nil, fmt.Errorf("%w: NewConsumer: nil Client", ErrInvalidArgument)
	}
	if err := protocol.ValidateGroup([]byte(group)); err != nil {
		return nil, err
	}
	if err := protocol.ValidateTopic([]byte(topic)); err != nil {
		return nil, err
	}
	cfg := defaultConsumerConfig()
	if err := apply(&cfg, &cfg.errs, "ConsumerOption", opts); err != nil {
		return nil, err
	}
	id := newClientID()
	co := &Consumer{
		c:        c,
		group:    group,
		topic:    topic,
		clientID: id,
		cfg:      cfg,
		log:      c.log.With("group", group, "topic", topic),
		done:     make(chan struct{}),
		queues:   make(map[MessageQueue]*queueState),
		running:  make(map[MessageQueue]*puller),
	}
	if err := c.addUser(co); err != nil {
		return nil, err
	}
	return co, nil
}

// Group returns the consumer group; Topic the topic.
func (co *Consumer) Group() string { return co.group }

// Topic returns the consumed topic.
func (co *Consumer) Topic() string { return co.topic }

// ClientID returns the id the consumer registers with the brokers under (host@pid@random),
// unique to this Consumer.
func (co *Consumer) ClientID() string { return co.clientID }

// Assignment returns the queues assigned to the consumer by its last rebalance, sorted by
// broker name and queue id: empty before the first rebalance and after Run has returned. It does
// no I/O.
func (co *Consumer) Assignment() []MessageQueue {
	co.mu.Lock()
	defer co.mu.Unlock()
	return co.assignmentLocked()
}

// assignmentLocked returns the keys of running, sorted. Lock should be held.
func (co *Consumer) assignmentLocked() []MessageQueue {
	out := make([]MessageQueue, 0, len(co.running))
	for mq := range co.running {
		out = append(out, mq)
	}
	slices.SortFunc(out, compareQueues)
	return out
}

// Run consumes until ctx ends or Close is called, then stops the pullers, commits the consumed
// offsets, unregisters from the brokers and returns nil (or the final commit's error). It
// heartbeats and rebalances as the Consumer doc says, which also follows route changes (queues
// added or removed) within a RebalanceInterval of the route refresh. Run runs once per Consumer.
//
// Before it consumes, Run fetches the topic's route, asking every NameServer in turn, as
// RocketMQ's consumers do at start. It returns at once, having consumed nothing:
//   - an error wrapping ErrInvalidArgument for a nil h or ctx;
//   - ctx's error (wrapped) when ctx has already ended;
//   - ErrConsumerClosed when the consumer is closed or Run was already called;
//   - an error wrapping ErrTopicNotExist when the NameServers know no route of the topic (no
//     broker has it: create it first, e.g. Admin.CreateTopic and Admin.WaitTopicRoute), or
//     wrapping the refusal when a NameServer refuses the request;
//   - an error matching ErrClientClosed (and ErrConsumerClosed) when the Client is closed.
//
// While no NameServer answers, or none is ready yet (ErrNameServerUnavailable), Run retries
// with a backoff up to WithRetryDelay; when ctx ends or Close is called first it returns ctx's
// error, or ErrConsumerClosed after Close, wrapped with the last failure. A Run that returned
// one of these errors other than ErrConsumerClosed leaves the Consumer as if Run had not been
// called: Run may be called again (once the topic exists, say). Whatever its outcome, a Run that
// returned leaves nothing running in the Client: its topic's route is refreshed only while Run
// runs (or while something else uses the topic), so a topic it never found is not asked for
// again.
func (co *Consumer) Run(ctx context.Context, h Handler) error {
	if h == nil {
		return fmt.Errorf("%w: Consumer.Run: nil Handler", ErrInvalidArgument)
	}
	if err := argContext(ctx, "Consumer.Run"); err != nil {
		return err
	}
	if co.c.isClosed() {
		return errConsumerClientClosed
	}
	if err := ctxEnded(ctx, "Consumer.Run"); err != nil {
		return err
	}
	co.mu.Lock()
	if co.ran || co.closed {
		co.mu.Unlock()
		return ErrConsumerClosed
	}
	co.ran = true
	ctx, cancel := context.WithCancel(ctx)
	co.cancel = cancel
	done := co.done
	co.mu.Unlock()
	defer cancel()
	// The topic is in use, its route refreshed, from here to the end of Run, and released before
	// done: once Close has returned, nothing of this Run is left in the client.
	co.c.holdTopic(co.topic, nil)

	if _, err := co.waitRoute(ctx); err != nil {
		co.c.releaseTopic(co.topic)
		co.mu.Lock()
		co.ran, co.cancel = false, nil
		if co.closed {
			err = fmt.Errorf("%w before the route of topic %q was known: %w", ErrConsumerClosed, co.topic, err)
		}
		// A Close waiting for this Run is released by done; a later Run waits on a new one.
		co.done = make(chan struct{})
		co.mu.Unlock()
		close(done)
		return err
	}
	defer func() {
		co.c.releaseTopic(co.topic)
		close(done)
	}()
	hb := newHeartbeater(co)
	rb := &rebalancer{co: co, h: h, hb: hb}
	rebalanceNow := make(chan struct{}, 1)
	var wg sync.WaitGroup
	wg.Go(func() { co.commitLoop(ctx) })
	wg.Go(func() { hb.loop(ctx, rebalanceNow) }) // beats at once, then asks for the first rebalance
	t := time.NewTicker(co.cfg.rebalanceInterval)
	for loop := true; loop; {
		select {
		case <-ctx.Done():
			loop = false
			continue
		case <-t.C:
		case <-rebalanceNow:
		}
		rb.rebalance(ctx)
	}
	t.Stop()
	co.mu.Lock()
	pullers := make([]*puller, 0, len(co.running))
	for _, p := range co.running {
		pullers = append(pullers, p)
	}
	co.mu.Unlock()
	for _, p := range pullers {
		<-p.done
	}
	wg.Wait()
	co.mu.Lock()
	clear(co.running)
	co.mu.Unlock()
	fctx, fcancel := context.WithTimeout(context.Background(), co.c.cfg.requestTimeout)
	defer fcancel()
	err := co.commit(fctx)
	// After the final commit, so the next owners of the queues start after what was consumed.
	hb.unregister()
	return err
}

// waitRoute fetches the topic's route. It retries, with a backoff up to the retry delay, while
// the failure may pass (no NameServer answers or is ready, a retriable status), and returns
// at once when the NameServers know no route of the topic (an error wrapping
// ErrTopicNotExist), refuse the request, or the client is closed. When ctx ends first it
// returns ctx's error wrapped with the last failure.
func (co *Consumer) waitRoute(ctx context.Context) (*topicRoute, error) {
	backoff := 50 * time.Millisecond
	var warned ratelog.Limiter
	var last error // the last failure not caused by ctx's end
	for {
		route, err := co.c.route(ctx, co.topic)
		if err == nil {
			return route, nil
		}
		if cerr := ctx.Err(); cerr != nil {
			if last == nil {
				last = err
			}
			return nil, fmt.Errorf("%w: the route of topic %q is not known yet (last error: %w)", cerr, co.topic, last)
		}
		last = err
		if !routeRetriable(err) {
			return nil, fmt.Errorf("client: consumer of topic %q for group %q: %w", co.topic, co.group, err)
		}
		warned.Warn(co.log, "no route for the topic yet; retrying", "err", err, "retry_in", backoff)
		if !sleepCtx(ctx, backoff) {
			return nil, fmt.Errorf("%w: the route of topic %q is not known yet (last error: %w)", ctx.Err(), co.topic, err)
		}
		backoff = min(2*backoff, co.cfg.retryDelay)
	}
}

// routeRetriable reports whether a failure to fetch a topic's route may pass by itself, so that
// Run waits: no NameServer answered or was ready, or one answered a retriable status. The
// NameServers knowing no route (TOPIC_NOT_EXIST), a refusal, the client closing or an invalid
// topic are final.
func routeRetriable(err error) bool {
	switch {
	case errors.Is(err, ErrClientClosed), errors.Is(err, ErrTopicNotExist), errors.Is(err, ErrTopicInvalid):
		return false
	case errors.Is(err, ErrNameServerUnavailable):
		return true
	}
	st, ok := StatusOf(err)
	return !ok || st.Retriable()
}

// Close stops Run (if running) and waits until it has returned, with its final commit, or ctx
// ends. A consumer that never ran is just marked closed. Close is idempotent. A nil ctx is
// refused (ErrInvalidArgument) and closes nothing.
func (co *Consumer) Close(ctx context.Context) error {
	if err := argContext(ctx, "Consumer.Close"); err != nil {
		return err
	}
	co.mu.Lock()
	co.closed = true
	ran, cancel, done := co.ran, co.cancel, co.done
	co.mu.Unlock()
	defer co.c.removeUser(co)
	if !ran {
		return nil
	}
	if cancel != nil {
		cancel()
	}
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// closedErr returns nil while the consumer is open, else the error of a call on it:
// ErrConsumerClosed, or after its Client's Close an error matching ErrClientClosed too.
func (co *Consumer) closedErr() error {
	if co.c.isClosed() {
		return errConsumerClientClosed
	}
	co.mu.Lock()
	closed := co.closed
	co.mu.Unlock()
	if closed {
		return ErrConsumerClosed
	}
	return nil
}

func (co *Consumer) closeFromClient() {
	ctx, cancel := context.WithTimeout(context.Background(), co.c.cfg.requestTimeout)
	defer cancel()
	_ = co.Close(ctx)
}

// startPullerLocked starts the puller of qs's queue, pulling after delay, and records it in
// running. Lock should be held.
func (co *Consumer) startPullerLocked(ctx context.Context, qs *queueState, h Handler, delay time.Duration) {
	pctx, cancel := context.WithCancel(ctx)
	p := &puller{cancel: cancel, done: make(chan struct{})}
	co.running[qs.mq] = p
	go func() {
		defer close(p.done)
		defer cancel()
		if sleepCtx(pctx, delay) {
			co.pullLoop(pctx, qs, h)
		}
	}()
}

// pullLoop pulls one queue and delivers its messages until ctx ends or a corrupt batch stops it.
// Which member of the queue's broker group each pull goes to, and how long the loop waits after
// a failure or a "not here" answer, is decided by pickPull and pullState.after
// (pullchoice.go); the loop does the I/O. Every member of a group holds the same queue offsets,
// so the position carries over unchanged from one member to the next.
func (co *Consumer) pullLoop(ctx context.Context, qs *queueState, h Handler) {
	mq := qs.mq
	offset, _, _ := qs.offsets.position()
	st := newPullState(co.cfg.readBrokerID)
	// fail counts and logs a failure involving broker (an address, or the broker group's name
	// when no address is known) and waits before the retry; false means ctx ended.
	fail := func(what, broker string, err error) bool {
		if ctx.Err() != nil {
			return false
		}
		co.pullErrors.Add(1)
		st = st.failed(co.cfg.retryDelay)
		if ok, unlogged := co.c.pullFailLog.allow(broker, time.Now()); ok {
			args := []any{"broker", broker, "queue", mq.String(), "err", err, "retry_in", st.backoff}
			if unlogged > 0 {
				args = append(args, "similar_failures_not_logged", unlogged)
			}
			co.log.Warn(what, args...)
		}
		return sleepCtx(ctx, st.backoff)
	}
	for offset < 0 {
		off, committed, inc, err := co.startOffset(ctx, mq, true)
		if err == nil {
			if qs.resumeAt > off && !otherLife(qs.resumeInc, inc) {
				// Queue offsets are assigned once in a life: everything below resumeAt was
				// handled here.
				co.log.Info("resuming a queue taken back where this consumer left it, past the group's committed offset",
					"queue", mq.String(), "committed", off, "resumeAt", qs.resumeAt)
				off, committed = qs.resumeAt, false
				inc = max(inc, qs.resumeInc) // the one known, if only one is
			}
			qs.offsets.start(off, committed, inc)
			offset = off
			break
		}
		if !fail("cannot find the queue's start offset", mq.BrokerName, err) {
			return
		}
	}
	// settle carries out the reaction to a pull of the member at addr that failed; false means
	// ctx ended.
	settle := func(o pullOutcome, addr string, route *topicRoute, err error) bool {
		var r pullReaction
		st, r = st.after(o)
		if r.markFailed {
			co.c.memberFailed(addr)
		}
		if r.refreshRoute {
			_, _ = co.c.refreshRoute(ctx, co.topic, route)
		}
		return fail(r.failure, addr, err)
	}
	var cell *servedCell
	cellID := int64(-1)
	var msgs []MessageExt
	// recvAt receives when a pull's answer came off the connection, for the pull observer
	// only: without one nothing is stamped or allocated.
	var recvAt *int64
	if co.cfg.pullObserver != nil {
		recvAt = new(int64)
	}
	for ctx.Err() == nil {
		route, err := co.c.route(ctx, co.topic)
		if err != nil {
			if !fail("no route", mq.BrokerName, err) {
				return
			}
			continue
		}
		pick := pickPull(pullPickInput{state: st, group: route.groups[mq.BrokerName], usable: co.c.memberUsable, retryDelay: co.cfg.retryDelay})
		if !pick.ok {
			var r pullReaction
			st, r = st.after(pullOutcome{kind: pullNoMember, id: pick.id})
			_, rerr := co.c.refreshRoute(ctx, co.topic, route)
			err := fmt.Errorf("group %s", mq.BrokerName)
			if st.pinned {
				err = fmt.Errorf("group %s, brokerId %d", mq.BrokerName, pick.id)
			}
			if !fail(r.failure, mq.BrokerName, errors.Join(err, rerr)) {
				return
			}
			continue
		}
		addr, brokerID := pick.addr, pick.id
		if pick.wait > 0 && !sleepCtx(ctx, pick.wait) {
			return
		}
		// The position and the commit carry the incarnation of the queue they belong to, so
		// that neither is applied to another life of the queue.
		v, inc, commit := qs.offsets.toCommit()
		if !commit {
			_, _, inc = qs.offsets.position()
		}
		hdr := protocol.PullRequestHeader{
			ConsumerGroup:  co.group,
			Topic:          co.topic,
			QueueID:        mq.QueueID,
			QueueOffset:    offset,
			MaxMessages:    co.cfg.maxMessages,
			MaxBytes:       co.cfg.maxBytes,
			PollTimeoutMs:  int32(co.cfg.pollTimeout / time.Millisecond),
			CommitOffset:   -1,
			Incarnation:    inc,
			HasIncarnation: true,
		}
		// The commit rides with the pull to whichever member serves it: a slave merges the
		// offsets it receives into its master's (the larger wins).
		if commit {
			hdr.CommitOffset = v
		}
		conn, err := co.c.pool.get(ctx, addr)
		if err != nil {
			if ctx.Err() != nil || !settle(pullOutcome{kind: pullUnreachable, id: brokerID}, addr, route, err) {
				return
			}
			continue
		}
		now := time.Now()
		deadline := now.Add(co.cfg.pollTimeout + co.c.cfg.requestTimeout)
		var sent int64
		if recvAt != nil {
			sent = now.UnixNano()
		}
		resp, state, err := co.c.pool.startCallAt(conn, protocol.CodePullMessage, &hdr, nil, now, recvAt).wait(ctx, deadline)
		if state != callOK {
			if ctx.Err() != nil {
				return
			}
			o := pullOutcome{kind: pullLost, id: brokerID}
			var pe *protocol.Error
			if state == callRejected && errors.As(err, &pe) {
				o.kind, o.status = pullRefused, pe.Status
			}
			if !settle(o, addr, route, err) {
				return
			}
			continue
		}
		var rh protocol.PullResponseHeader
		o := pullOutcome{kind: pullAnswered, id: brokerID, offset: offset, known: inc}
		derr := rh.ReadFrom(resp.Header)
		if derr != nil {
			o.kind = pullGarbled
		} else {
			o.result, o.suggest, o.next, o.incarnation = rh.Result, rh.SuggestBrokerID, rh.NextQueueOffset, rh.Incarnation
		}
		var r pullReaction
		st, r = st.after(o)
		if r.markOK {
			co.c.memberOK(addr)
		}
		if hdr.CommitOffset >= 0 && r.commitHeld {
			qs.offsets.confirm(hdr.CommitOffset, hdr.Incarnation)
		}
		if r.learn {
			qs.offsets.learn(rh.Incarnation)
		}
		if r.reborn {
			// The master holds another life of the queue than the one the position belongs
			// to (the queue was created again: its topic deleted and re-created, or the
			// broker's store lost). Nothing of the old position applies: everything the new
			// life holds came after it, so the consumer starts at its first stored message,
			// and the answer's messages, if any, are not delivered.
			resp.Release()
			co.reborn.Add(1)
			co.log.Warn("queue reborn: the broker holds a new life of the queue; consuming it from its first stored message",
				"queue", mq.String(), "from", offset, "to", rh.MinOffset, "incarnation", fmt.Sprintf("%#x", inc),
				"newIncarnation", fmt.Sprintf("%#x", rh.Incarnation), "max", rh.MaxOffset, "broker", addr)
			offset = rh.MinOffset
			qs.offsets.reborn(offset, rh.Incarnation)
			qs.maxOffset.Store(rh.MaxOffset)
			continue
		}
		if derr != nil {
			resp.Release()
			if !fail(r.failure, addr, derr) {
				return
			}
			continue
		}
		if brokerID != cellID {
			cell, cellID = co.served.cell(brokerID), brokerID
		}
		if r.result != protocol.PullNotHere {
			qs.maxOffset.Store(rh.MaxOffset)
			cell.pulls.Add(1)
		}
		switch r.result {
		case protocol.PullFound:
			var next int64
			var cerr error
			msgs, next, cerr = co.decode(msgs[:0], resp.Body, mq, offset, addr, brokerID)
			progressed := next > offset
			if recvAt != nil && len(msgs) > 0 {
				co.cfg.pullObserver(PullTiming{Topic: mq.Topic, QueueID: mq.QueueID, From: msgs[0].QueueOffset, Next: next,
					Sent: sent, Received: *recvAt, BrokerID: brokerID})
			}
			ok := co.deliver(ctx, h, msgs, mq)
			if ok {
				cell.messages.Add(int64(len(msgs)))
			}
			clear(msgs) // drop the views of the response before releasing it
			resp.Release()
			if !ok {
				return
			}
			if progressed {
				offset = next
				qs.offsets.advance(offset)
			}
			if cerr != nil {
				co.corrupt.Add(1)
				err := fmt.Errorf("queue %s at offset %d from %s: %w", mq, offset, addr, cerr)
				qs.err.Store(&err)
				co.log.Error("corrupt batch; the queue stops", "queue", mq.String(), "offset", offset, "broker", addr, "err", cerr)
				return
			}
			if !progressed {
				if !fail("pull found nothing at or after the offset", addr, fmt.Errorf("offset %d", offset)) {
					return
				}
				continue
			}
		case protocol.PullNoNewMessage:
			resp.Release()
			if rh.NextQueueOffset > offset {
				offset = rh.NextQueueOffset
				qs.offsets.advance(offset)
			}
			if co.cfg.pollTimeout < minPollPause { // the broker did not hold the pull: pause
				if !sleepCtx(ctx, minPollPause) {
					return
				}
			}
		case protocol.PullOffsetMoved:
			resp.Release()
			co.offsetMoved.Add(1)
			back := rh.NextQueueOffset < offset
			if back {
				co.offsetMovedBack.Add(1)
			}
			co.log.Warn("offset moved", "queue", mq.String(), "from", offset, "to", rh.NextQueueOffset, "backwards", back, "min", rh.MinOffset, "max", rh.MaxOffset, "broker", addr)
			offset = rh.NextQueueOffset
			qs.offsets.reset(offset)
		case protocol.PullNotHere:
			resp.Release()
			cell.notHere.Add(1)
			if r.failure != "" && !fail(r.failure, addr, fmt.Errorf("offset %d", offset)) {
				return
			}
		default:
			resp.Release()
			if !fail(r.failure, addr, fmt.Errorf("result %d", rh.Result)) {
				return
			}
		}
	}
}

// decode appends the messages of body at or after offset to msgs and returns the offset after
// the last batch. It stops at the first batch that fails its checks, returning the messages of
// the batches before it and an error wrapping ErrCorruptBatch.
func (co *Consumer) decode(msgs []MessageExt, body []byte, mq MessageQueue, offset int64, addr string, brokerID int64) ([]MessageExt, int64, error) {
	return decodeBatches(msgs, body, mq, offset, addr, brokerID, co.c.cfg.maxFrameSize)
}

// decodeBatches is decode for a pull of queue mq (its topic included) answered by the broker at
// addr (brokerID), whose messages may be up to maxMessageSize bytes. The messages' byte fields
// are views of body.
func decodeBatches(msgs []MessageExt, body []byte, mq MessageQueue, offset int64, addr string, brokerID int64, maxMessageSize int) ([]MessageExt, int64, error) {
	next := offset
	lim := protocol.BatchLimits{MaxMessageSize: maxMessageSize}
	for len(body) > 0 {
		h, _, err := protocol.ValidateBatch(body, lim)
		if err != nil {
			return msgs, next, fmt.Errorf("%w: %w", ErrCorruptBatch, err)
		}
		if string(h.Topic) != mq.Topic || h.QueueID != mq.QueueID {
			return msgs, next, fmt.Errorf("%w: %w: batch of %s#%d in a pull of %s", ErrCorruptBatch, protocol.ErrBatchMalformed, h.Topic, h.QueueID, mq)
		}
		it := protocol.NewMessageIterator(body, h)
		for {
			m, ok := it.Next()
			if !ok {
				break
			}
			if m.QueueOffset < offset {
				continue // pulls return whole batches
			}
			msgs = append(msgs, MessageExt{
				Topic:          mq.Topic,
				BrokerName:     mq.BrokerName,
				QueueID:        mq.QueueID,
				QueueOffset:    m.QueueOffset,
				StoreTimestamp: h.StoreTimestamp,
				BornTimestamp:  m.Timestamp,
				ProducerID:     h.ProducerID,
				Sequence:       m.Sequence,
				Keys:           m.Keys,
				Tags:           m.Tags,
				Properties:     m.Properties,
				Body:           m.Body,
				BrokerAddr:     addr,
				BrokerID:       brokerID,
			})
		}
		next = max(next, h.NextQueueOffset())
		body = body[h.Size:]
	}
	return msgs, next, nil
}

// deliver calls the handler until it accepts msgs; false means ctx ended first.
func (co *Consumer) deliver(ctx context.Context, h Handler, msgs []MessageExt, mq MessageQueue) bool {
	if len(msgs) == 0 {
		return true
	}
	for {
		err := h(ctx, msgs)
		if err == nil {
			co.delivered.Add(int64(len(msgs)))
			return true
		}
		if ctx.Err() != nil {
			return false
		}
		co.log.Warn("handler failed; retrying the same messages", "queue", mq.String(), "offset", msgs[0].QueueOffset, "count", len(msgs), "err", err, "retry_in", co.cfg.retryDelay)
		if !sleepCtx(ctx, co.cfg.retryDelay) {
			return false
		}
	}
}

// startOffset returns where the group starts on mq: its committed offset (committed true), or
// the min or max offset per ConsumeFrom. It asks the pinned member (WithReadBrokerID), else the
// group's master, falling back to the other members when it does not answer.
func (co *Consumer) startOffset(ctx context.Context, mq MessageQueue, logIt bool) (int64, bool, uint64, error) {
	route, err := co.c.route(ctx, co.topic)
	if err != nil {
		return 0, false, 0, err
	}
	bd := route.groups[mq.BrokerName]
	var members []protocol.BrokerAddr
	if co.cfg.readBrokerID >= 0 {
		if addr, ok := memberAddr(bd, co.cfg.readBrokerID); ok {
			members = []protocol.BrokerAddr{{BrokerID: co.cfg.readBrokerID, Addr: addr}}
		}
	} else {
		members = membersInOrder(bd, co.c.memberUsable)
	}
	if len(members) == 0 {
		_, _ = co.c.refreshRoute(ctx, co.topic, route)
		if co.cfg.readBrokerID >= 0 {
			return 0, false, 0, fmt.Errorf("%w: broker group %s has no live member with brokerId %d", ErrNoQueue, mq.BrokerName, co.cfg.readBrokerID)
		}
		return 0, false, 0, fmt.Errorf("%w: broker group %s has no live member", ErrNoQueue, mq.BrokerName)
	}
	var errs []error
	for _, m := range members {
		off, committed, inc, err := co.startOffsetOn(ctx, m.Addr, mq, logIt)
		if err == nil {
			co.c.memberOK(m.Addr)
			return off, committed, inc, nil
		}
		if ctx.Err() != nil {
			return 0, false, 0, err
		}
		if _, answered := StatusOf(err); !answered {
			co.c.memberFailed(m.Addr)
		}
		errs = append(errs, err)
	}
	return 0, false, 0, errors.Join(errs...)
}

// startOffsetOn is startOffset asking the member at addr. The committed offset comes with the
// incarnation of the queue it belongs to (a broker translates one of an earlier life of the
// queue into the current life's min offset); the min or max offset with none (0), which the
// first pull's answer gives.
func (co *Consumer) startOffsetOn(ctx context.Context, addr string, mq MessageQueue, logIt bool) (int64, bool, uint64, error) {
	var oh protocol.OffsetHeader
	err := co.c.callAddr(ctx, addr, protocol.CodeQueryConsumerOffset,
		&protocol.ConsumerOffsetHeader{ConsumerGroup: co.group, Topic: co.topic, QueueID: mq.QueueID, HasIncarnation: true}, nil, &oh, nil)
	if err == nil && oh.Offset >= 0 {
		return oh.Offset, true, oh.Incarnation, nil
	}
	if err != nil && !errors.Is(err, protocol.StatusQueryNotFound) {
		return 0, false, 0, fmt.Errorf("cannot query the consumer offset of %s from %s: %w", mq, addr, err)
	}
	code := protocol.CodeGetMinOffset
	if co.cfg.consumeFrom == ConsumeFromLast {
		code = protocol.CodeGetMaxOffset
	}
	err = co.c.callAddr(ctx, addr, code, &protocol.QueueHeader{Topic: co.topic, QueueID: mq.QueueID}, nil, &oh, nil)
	if err != nil {
		return 0, false, 0, fmt.Errorf("cannot query the %s of %s from %s: %w", code, mq, addr, err)
	}
	if logIt {
		co.log.Info("no committed offset; starting from "+[]string{"the first", "the last"}[co.cfg.consumeFrom]+" offset", "queue", mq.String(), "offset", oh.Offset, "broker", addr)
	}
	return oh.Offset, false, 0, nil
}

// commitLoop commits consumed offsets every CommitInterval until ctx ends. Failures are logged
// at most once per failureLogInterval (the next commit retries them anyway).
func (co *Consumer) commitLoop(ctx context.Context) {
	t := time.NewTicker(co.cfg.commitInterval)
	defer t.Stop()
	var failLog failureLog
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		cctx, cancel := context.WithTimeout(ctx, co.c.cfg.requestTimeout)
		if err := co.commit(cctx); err != nil && ctx.Err() == nil {
			if ok, unlogged := failLog.allow("", time.Now()); ok {
				args := []any{"err", err}
				if unlogged > 0 {
					args = append(args, "similar_failures_not_logged", unlogged)
				}
				co.log.Warn("offset commit failed", args...)
			}
		}
		cancel()
	}
}

// commit sends the consumed offset of every queue ahead of its committed one to the queue's
// broker group, all in parallel, and waits for the answers.
func (co *Consumer) commit(ctx context.Context) error {
	co.mu.Lock()
	states := make([]*queueState, 0, len(co.queues))
	for _, qs := range co.queues {
		states = append(states, qs)
	}
	co.mu.Unlock()
	return co.commitQueues(ctx, states)
}

// commitQueues is commit for the queues of states. Each offset goes to its group's master when
// it is usable, else to another live member (a slave merges it into its master's offsets, the
// larger wins); a commit that fails is tried on the group's next member, all members in turn.
// Commits are idempotent and never lower an offset, so trying several members is safe.
func (co *Consumer) commitQueues(ctx context.Context, states []*queueState) error {
	type pending struct {
		qs      *queueState
		v       int64
		inc     uint64                // the incarnation v belongs to
		members []protocol.BrokerAddr // still to try, the next first
		call    *pendingCall
		addr    string
		errs    []error
	}
	if len(states) == 0 {
		return nil
	}
	route, err := co.c.route(ctx, co.topic)
	if err != nil {
		return err
	}
	var todo []*pending
	var errs []error
	for _, qs := range states {
		v, inc, ok := qs.offsets.toCommit()
		if !ok {
			continue
		}
		members := membersInOrder(route.groups[qs.mq.BrokerName], co.c.memberUsable)
		if len(members) == 0 {
			errs = append(errs, fmt.Errorf("cannot commit offset %d of %s: its broker group has no live member", v, qs.mq))
			continue
		}
		todo = append(todo, &pending{qs: qs, v: v, inc: inc, members: members})
	}
	for len(todo) > 0 {
		// Send to each queue's next member; a member that cannot be reached at once is
		// skipped for the next.
		var sent []*pending
		for _, p := range todo {
			for p.call == nil && len(p.members) > 0 {
				m := p.members[0]
				p.members = p.members[1:]
				conn, err := co.c.pool.get(ctx, m.Addr)
				if err != nil {
					if ctx.Err() == nil {
						co.c.memberFailed(m.Addr)
					}
					p.errs = append(p.errs, fmt.Errorf("%s: %w", m.Addr, err))
					continue
				}
				hdr := &protocol.ConsumerOffsetHeader{ConsumerGroup: co.group, Topic: co.topic, QueueID: p.qs.mq.QueueID, Offset: p.v,
					Incarnation: p.inc, HasIncarnation: true}
				p.addr = m.Addr
				p.call = co.c.pool.startCall(conn, protocol.CodeUpdateConsumerOffset, hdr, nil)
			}
			if p.call != nil {
				sent = append(sent, p)
			} else {
				errs = append(errs, fmt.Errorf("cannot commit offset %d of %s: %w", p.v, p.qs.mq, errors.Join(p.errs...)))
			}
		}
		todo = todo[:0]
		for _, p := range sent {
			resp, state, err := p.call.wait(ctx, time.Time{})
			p.call = nil
			if state == callOK {
				resp.Release()
				co.c.memberOK(p.addr)
				p.qs.offsets.confirm(p.v, p.inc)
				continue
			}
			p.errs = append(p.errs, fmt.Errorf("%s: %w", p.addr, err))
			if ctx.Err() != nil || len(p.members) == 0 {
				errs = append(errs, fmt.Errorf("cannot commit offset %d of %s: %w", p.v, p.qs.mq, errors.Join(p.errs...)))
				continue
			}
			if state == callUnknown || state == callNotSent {
				co.c.memberFailed(p.addr)
			}
			todo = append(todo, p)
		}
	}
	return errors.Join(errs...)
}

// QueueProgress is a consumer's position on one queue.
type QueueProgress struct {
	Queue MessageQueue
	// Consumed is the next offset to deliver (-1 before the start offset is known).
	Consumed int64
	// Committed is the last offset the broker confirmed as committed (-1 if none).
	Committed int64
	// MaxOffset is the queue's max offset seen at the last pull (-1 before the first).
	MaxOffset int64
	// Err is why the queue stopped (it wraps ErrCorruptBatch), or nil.
	Err error
}

// Progress returns the position on every queue assigned to the consumer (during a rebalance,
// also on the queues being released; after Run, on those assigned when it ended), sorted by
// queue. It does no I/O.
func (co *Consumer) Progress() []QueueProgress {
	co.mu.Lock()
	out := make([]QueueProgress, 0, len(co.queues))
	for _, qs := range co.queues {
		consumed, committed, _ := qs.offsets.position()
		qp := QueueProgress{
			Queue:     qs.mq,
			Consumed:  consumed,
			Committed: committed,
			MaxOffset: qs.maxOffset.Load(),
		}
		if e := qs.err.Load(); e != nil {
			qp.Err = *e
		}
		out = append(out, qp)
	}
	co.mu.Unlock()
	slices.SortFunc(out, func(a, b QueueProgress) int { return compareQueues(a.Queue, b.Queue) })
	return out
}

func compareQueues(a, b MessageQueue) int {
	switch {
	case a.BrokerName < b.BrokerName:
		return -1
	case a.BrokerName > b.BrokerName:
		return 1
	}
	return int(a.QueueID) - int(b.QueueID)
}

// ConsumerStats are a consumer's counters since it was made.
type ConsumerStats struct {
	// Delivered counts messages the handler accepted.
	Delivered int64
	// CorruptBatches counts batches that failed their CRC or structure check (each stopped its
	// queue).
	CorruptBatches int64
	// PullErrors counts failed pulls and start-offset lookups (each retried).
	PullErrors int64
	// Rebalances counts the rebalances that changed the consumer's assignment, the first one
	// included.
	Rebalances int64
	// ServedBy counts, per brokerId of the member that answered (0: a master, > 0: a slave),
	// the pulls it served and the messages delivered from them, over every broker group.
	ServedBy map[int64]ServedCount
	// OffsetMoved counts the OFFSET_MOVED answers the consumer followed: its position was
	// outside the queue's offsets on the broker (retention, or a log truncated or replaced), and
	// it went on at the offset the broker gave (logged as "offset moved").
	OffsetMoved int64
	// OffsetMovedBack counts those of OffsetMoved that set the position to a lower offset than
	// the consumer's: the broker no longer holds offsets the consumer had moved past (its log was
	// truncated or replaced), so the offsets from the new position up to the old one are read
	// again, holding other messages or the same ones. A slave's backwards OFFSET_MOVED is taken
	// as "not here" instead (ServedCount.NotHere) and not counted.
	OffsetMovedBack int64
	// QueuesReborn counts the times a queue's master answered with another life of the queue
	// than the one the consumer's position belonged to (the queue was created again: its topic
	// deleted and re-created, or the broker's store lost; logged as "queue reborn"): the
	// consumer went on at the new life's first stored message, delivering nothing of the
	// answer. Not counted in OffsetMoved.
	QueuesReborn int64
}

// Stats returns the consumer's counters.
func (co *Consumer) Stats() ConsumerStats {
	return ConsumerStats{
		Delivered:       co.delivered.Load(),
		CorruptBatches:  co.corrupt.Load(),
		PullErrors:      co.pullErrors.Load(),
		Rebalances:      co.rebalances.Load(),
		ServedBy:        co.served.snapshot(),
		OffsetMoved:     co.offsetMoved.Load(),
		OffsetMovedBack: co.offsetMovedBack.Load(),
		QueuesReborn:    co.reborn.Load(),
	}
}

// Lag returns how many messages of the topic the group has yet to consume: the sum over every
// read queue of the queue's max offset (asked from its master now) minus the consumer's
// position (its consumed offset when this consumer pulls the queue, otherwise the group's
// committed offset, or the start position ConsumeFrom gives when there is none). On a closed
// consumer it returns ErrConsumerClosed (after the Client's Close, an error matching
// ErrClientClosed too), and given a ctx that has already ended, ctx's error (wrapped), asking
// nothing.
func (co *Consumer) Lag(ctx context.Context) (int64, error) {
	if err := argContext(ctx, "Consumer.Lag"); err != nil {
		return 0, err
	}
	if err := co.closedErr(); err != nil {
		return 0, err
	}
	if err := ctxEnded(ctx, "Consumer.Lag"); err != nil {
		return 0, err
	}
	route, err := co.c.route(ctx, co.topic)
	if err != nil {
		return 0, err
	}
	var lag int64
	for _, mq := range route.readQueues {
		addr, _, ok := pickBrokerAddr(route.groups[mq.BrokerName], 0)
		if !ok {
			return 0, fmt.Errorf("%w: broker group %s has no live member", ErrNoQueue, mq.BrokerName)
		}
		var oh protocol.OffsetHeader
		if err := co.c.callAddr(ctx, addr, protocol.CodeGetMaxOffset, &protocol.QueueHeader{Topic: co.topic, QueueID: mq.QueueID}, nil, &oh, nil); err != nil {
			return 0, fmt.Errorf("cannot get the max offset of %s: %w", mq, err)
		}
		maxOff := oh.Offset
		co.mu.Lock()
		qs := co.queues[mq]
		co.mu.Unlock()
		pos := int64(-1)
		if qs != nil {
			pos, _, _ = qs.offsets.position()
		}
		if pos < 0 {
			if pos, _, _, err = co.startOffset(ctx, mq, false); err != nil {
				return 0, err
			}
		}
		lag += max(0, maxOff-pos)
	}
	return lag, nil
}
