// Package client is Petrel's client: a Producer, a pull Consumer and an Admin, sharing one
// Client (NameServer list, route cache, connection pool). It imports only protocol and
// protocol/rpc of Petrel.
//
// # Use
//
//	c, err := client.New(ctx, client.WithNameServers("127.0.0.1:9876"))
//	defer c.Close()
//
//	p, err := client.NewProducer(c)
//	res, err := p.SendSync(ctx, &client.Message{Topic: "orders", Body: body})
//	err = p.SendAsync(ctx, &client.Message{Topic: "orders", Body: body}, func(r client.SendResult, err error) { ... })
//	err = p.Close(ctx) // flushes
//
//	co, err := client.NewConsumer(c, "billing", "orders")
//	err = co.Run(ctx, func(ctx context.Context, msgs []client.MessageExt) error { ... })
//
// # Outcomes of a send
//
// A send ends in one of three ways, which the bench counts apart:
//   - success: a SendResult;
//   - a definite failure: the message is not stored. The error carries the broker's status
//     (errors.Is(err, client.ErrSystemBusy), StatusOf) or says the request was never written
//     (ErrBrokerUnavailable, a validation error, the context's error when ctx had ended before
//     the request was written, ...);
//   - an unknown outcome: errors.Is(err, client.ErrUnknownOutcome). The request was written and
//     no answer came (context ended, send timeout, connection lost), or the broker stored the
//     batch without confirming its flush or replication in time. The message may be stored;
//     it is never retried automatically.
//
// # Order
//
// A producer's messages keep, within a queue, the order in which they were sent to that queue.
// Each batch carries the producer's id and a base sequence counted per (producer, queue); the
// client assigns it in one step with queuing the batch's frame on the connection, and a
// connection's frames are written and stored in that order. So a producer's acknowledged
// messages appear in a queue in increasing sequence order, which a consumer can check with
// MessageExt's ProducerID and Sequence:
//   - asynchronous messages of one queue are stored in the order of their SendAsync calls;
//   - concurrent SendSync callers (and retries) sending to the same queue are ordered by the
//     sequence the client assigned as it wrote them, that is by the order in which they reached
//     the connection, not the order in which the calls began;
//   - every attempt takes a new sequence: a batch retried on its queue after a definite failure
//     is stored after the batches written meanwhile, with a higher sequence.
//
// Not promised: sends whose outcome is unknown are not ordered (a batch written on a connection
// that then failed may be stored after later batches written on a new connection, or never);
// nor is any order across queues, or for messages whose queue changed (retried on another
// group, keyed messages after the topic's queue count changed).
//
// # Tracing
//
// To see where the time of a slow send goes, a producer traces a sample of its batches
// (WithTraceEvery): a traced batch carries a protocol.TraceHeader, the producer stamps its own
// stages (created, sealed, taken by the queue's sender, written, answer received, done) and
// hands them to WithSendTraceObserver, and a broker that supports tracing records its stages
// of the same send, which Admin.SendTraces reads and protocol.SendTrace.ID matches to the
// client's SendTraceClient.ID. WithPullObserver times a consumer's pulls. Every stamp is
// time.Now().UnixNano(), so client and broker stamps compare between processes of one machine.
// Untraced batches and unobserved pulls cost nothing more: no header, no stamp, no allocation.
//
// # Design
//
// Client: routes are cached per topic as immutable snapshots (topicRoute: the route plus its
// write queues and read queues sorted by broker name and queue id) swapped atomically; the
// refresh goroutine renews those of the topics in use (holdTopic: a running Consumer holds its
// topic, an open Producer every topic it found a route of) every RouteRefreshInterval, forgets
// the others then, and keeps nothing of a topic whose first fetch failed, so a mistyped topic
// is not asked for forever; it renews routes at once (at most every 100 ms per topic) when a
// producer avoids a group in fault backoff or a route names a group without a master
// (refreshSoon; every second for two minutes when a group an earlier route had is missing),
// and send/pull errors renew one at most every 100 ms. A producer's
// fault detector (detect, RocketMQ's LatencyFaultTolerance detector) probes, every 200 ms, the
// masters of the groups in backoff because they could not be reached, dialling whatever the
// reconnect backoff, and ends a group's backoff when its master answers again. NameServers are
// tried in turn starting with the last that answered ready; one that is not ready
// (NAMESRV_NOT_READY: it restarted and has not heard from every broker yet), does not know
// the topic or does not answer sends the client to the next, and a request fails only when
// none knows better (callNameServer). A cached route is replaced by any route with queues in
// it, never by an empty one (replaceRoute). The connection pool (connPool) holds one rpc.Conn per address, dialled on
// first use and again after it closes; a failed dial starts a backoff during which requests
// fail at once, and so does a SHUTTING_DOWN answer (the stopping broker waits for its clients
// to go quiet).
//
// Liveness: a hung broker (a stopped process, a partition that drops packets) keeps its
// connections open and answers nothing; waiting for the request timeout would hold every
// request sent to it for seconds. The pool's watch goroutine (one per Client, stopped by Close)
// looks at each connection a few times per liveness interval: when requests are waiting
// (rpc.Conn.Waiting) and nothing has been received (rpc.Conn.LastReceive) for the interval, it
// sends a probe, GET_CONSUMER_LIST_BY_GROUP for a group nobody uses, which brokers answer on
// their event loop from memory; when nothing at all arrives within the probe timeout after it,
// it closes the connection (declareDead): the waiting requests end with rpc.ErrClosed, unknown
// outcomes, and the address gets the reconnect backoff. Requests a live broker holds on purpose
// (long polls, sends a SYNC_MASTER acknowledges after its slaves) keep their connection, since
// the probe is answered. After a stall of the watcher itself (the client process stopped or
// starved) silences are counted afresh, so the client does not blame brokers for its own pause.
// With the probes turned off, a request that times out by its own timeout with nothing received
// on its connection since it was sent closes the connection instead (requestTimedOut).
//
// A connection carries the requests of every caller, so one caller's impatience must not end
// the others' requests: a request whose caller's context ends (cancelled, or a deadline at or
// before the request's own timeout) is abandoned (callAbandoned): forgotten by the connection
// (rpc.Conn.Forget), its late answer dropped and counted (ClientStats.LateResponses), with no
// conclusion drawn: the connection stays, the producer records no fault and refreshes no
// route, and nothing is logged; nor does a dial its caller's deadline cut short start the
// address's reconnect backoff (dialFailed). Only a read or write error, the liveness check, or
// (probes off) requestTimedOut closes a connection. A caller whose ctx has ended before its
// request is written sends nothing at all, a definite failure: every entry point checks ctx
// first, and connPool.get, which every request passes before its first byte is written,
// refuses it even on an open connection.
//
// Producer: SendSync encodes one message into a pooled buffer (protocol.AppendBatchHeader and
// AppendMessage; the CRC is computed by protocol.FinishBatch) and sends it with a pooled
// pendingCall (rpc.Conn.CallAsync plus a reusable timer), so the path allocates almost nothing
// of its own. Each attempt stamps the batch with its queue id and the queue's next producer
// sequence, computes the CRC and queues the frame on the connection as one step under the
// queue's queueSeq.mu (startSend), so that on one connection frames of a queue are written, and
// stored, in sequence order (the order promise of the Producer doc); a frame the connection
// refuses gives its sequences back. SendAsync appends into a per-queue accumulator
// (asyncQueue); a goroutine per non-empty queue seals batches by size or linger, sends one batch
// at a time (per-queue order) under a per-broker-group in-flight limit, then runs the callbacks
// in order. A byte budget bounds what is buffered; an unkeyed message goes to a queue holding
// less than its share of the budget (budget over the producer's queues) when there is one,
// so the queues of a hung group, which stop draining, hold at most their share and SendAsync
// keeps feeding the other groups.
//
// Queue choice and faults (faultTracker, RocketMQ's MQFaultStrategy driven by failures): an
// unkeyed send goes round-robin over the eligible queues (selectQueue: the round-robin counter
// indexes the eligible set, so a retry away from a failed group spreads over the other groups'
// queues): not of the group that just failed, not of a group in fault backoff, and for
// SendAsync not over its share. A group's backoff starts at a failure event and doubles with
// each further event; failures of requests sent before the current event began (every request
// in flight when a master hangs or fails over) belong to it and change nothing. The backoff
// ends with a success, or at once when the group's master changes (the route names another
// master than the one that failed, or a NOT_MASTER answer points to one). A batch whose queue's
// group went into backoff after it was queued goes to another group at its first attempt.
//
// Consumer: a puller goroutine per assigned queue pulls with long polling, checks each batch
// (protocol.ValidateBatch), skips messages below the requested offset, calls the handler with
// views of the response, then advances the queue's offsetTracker; a committer goroutine commits
// offsets ahead of the committed ones. Each pull goes to the member of the queue's broker group
// that the previous response suggested (pickMember: the suggestion, else the master, else the
// lowest live slave, skipping members whose pulls or commits failed recently, which
// Client.members remembers for a short doubling backoff); a slave's PULL_NOT_HERE sends the
// next pull to the member it names without moving the offset, with a doubling wait whenever
// the pull goes back to a slave, so members lacking an offset are never polled in a loop.
// Commits try the group's members in membersInOrder order (master first) until one accepts;
// servedCounts counts pulls and messages per answering brokerId. Group membership (rebalance.go) is RocketMQ's
// client-side allocation: a heartbeater goroutine registers the consumer's ClientID with every
// broker of the topic (HEART_BEAT; again at once on a new broker or a re-dialled connection),
// and Run's goroutine, every RebalanceInterval and after each heartbeat round, reads the
// group's sorted client list (GET_CONSUMER_LIST_BY_GROUP), takes its block of the sorted read
// queues (allocateAveragely, RocketMQ's AllocateMessageQueueAveragely) and applies the
// difference (diffAssignment): released queues are stopped, committed, then forgotten; queues
// another live member held (heldByOthers) start after a handover delay. Run's end commits,
// then unregisters (UNREGISTER_CLIENT). The pure parts (allocation, diff, held queues) have
// table tests; the rest is driven by the heartbeater and Run's loop only.
//
// # Locks
//
// Lock order (A -> B: B may be taken while A is held):
//
//	Producer.mu (read) -> Producer.qMu, Producer.rrMu, faultTracker.mu, Client.routesMu
//	                      (SendAsync picks the queue under it: queueForMessage)
//	Producer.mu (read) -> asyncQueue.mu -> pendingCounter.mu
//	asyncQueue.mu -> sendTracer.mu (SendAsync draws whether a new batch is traced under the
//	                 queue's lock; sendTracer.mu guards the draw alone)
//	Producer.mu (read) -> Producer.detectMu (faulted starts the fault detector under both)
//	Producer.rrMu -> Client.routesMu (a producer's first use of a topic holds it on the client:
//	                 Producer.topic)
//	queueSeq.mu -> rpc Conn.mu (the frame is queued on the connection under the queue's
//	               sequence lock; nothing else is taken under it, and it is never held across
//	               a dial or a wait for an answer)
//	routeSlot.mu -> connPool.mu, poolConn.mu, rpc Conn.mu (a route fetch holds routeSlot.mu
//	                across the NameServer request, its dial included: the one client lock
//	                held across a network call; poolConn.mu is never held across a dial)
//	Client.routesMu, Client.mu, connPool.mu, poolConn.mu, faultTracker.mu, byteBudget.mu,
//	pendingCounter.mu, Consumer.mu, failureLog.mu, Producer.seqMu, Producer.detectMu,
//	servedCounts.mu, offsetTracker.mu, sendTracer.mu: leaves
//
// poolConn.live is owned by the pool's watch goroutine and needs no lock; the watcher takes
// connPool.mu (read) to list the slots, releases it, then takes rpc Conn.mu (Waiting, the
// probe's CallAsync) and poolConn.mu (declareDead) one at a time.
//
// No callback of the user runs under a lock of the client.
package client
