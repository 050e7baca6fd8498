package broker

import (
	"github.com/petrel-mq/petrel/ha"
	"github.com/petrel-mq/petrel/protocol"
	"github.com/petrel-mq/petrel/protocol/rpc"
)

// The client port serves every request code as its entry of routes says: the handler, whether
// it runs on the event loop or on a worker goroutine, and which members serve it. dispatch
// decides through decide, a pure function of the code, the shutdown and the member's role,
// and carries the decision out in serve.

// servedBy says which members of a broker group serve a request code.
type servedBy uint8

const (
	// anyMember: master and slaves alike (the handler may still refuse, as a pull does for
	// what a slave does not hold).
	anyMember servedBy = iota
	// masterOnly: a member that is not the master answers NOT_MASTER with the master's address.
	masterOnly
	// masterNotHandingOver: as masterOnly, and a master handing its role to a slave
	// (electMaster) refuses too, so that the slave catching up ends up holding its whole log.
	masterNotHandingOver
)

// route is how the client port serves one request code. Exactly one of loop and reply is set
// for a code it serves; neither for the others.
type route struct {
	// loop serves the request on the event loop and writes its answer itself, at once or later
	// (a held pull, a send waiting for its flush or its replication). The frame is passed by
	// value so that it stays on the loop's stack; r is the role the request was admitted with.
	loop func(b *Broker, cs *connState, f protocol.Frame, r *role)
	// reply computes the answer, which serve writes: on the loop, or from a worker goroutine
	// when worker is set.
	reply func(b *Broker, req request) rpc.Reply
	// worker runs reply on a goroutine of its own, because it may wait (an fsync, cold pages,
	// a stop of the world, a Raft barrier) and an event loop must never block.
	worker bool
	// served says which members serve the code.
	served servedBy
	// toMaster ends the NOT_MASTER remark of a member that refuses the code: what to do on the
	// master instead.
	toMaster string
	// elsewhere names the server of a request code of the protocol that the client port does
	// not serve (a NameServer, a master's HA port). Such a code is answered
	// REQUEST_CODE_NOT_SUPPORTED, as an unknown one is.
	elsewhere string
}

// request is what a reply handler reads of a request.
type request struct {
	code protocol.RequestCode
	// cs is the client's connection (a consumer heartbeat records it).
	cs *connState
	// header and body are valid only during the call.
	header, body []byte
}

// malformed answers a request whose header or body does not decode.
func (req request) malformed(err error) rpc.Reply {
	return rpc.Errorf(protocol.StatusRequestMalformed, "cannot decode %s request: %v", req.code, err)
}

// routes is the client port's dispatch table, indexed by request code: a slice rather than a
// map, so that the send and pull of the data path cost one bounds check and one load. init
// fills it, since its handlers reach dispatch again (a send after its topic was created),
// which a variable's initializer may not.
var routes []route

func init() {
	routes = []route{
		protocol.CodeSendMessage: {
			loop:   func(b *Broker, cs *connState, f protocol.Frame, r *role) { b.handleSend(cs, &f, r) },
			served: masterNotHandingOver, toMaster: "send to the master",
		},
		protocol.CodePullMessage: {
			loop: func(b *Broker, cs *connState, f protocol.Frame, _ *role) { b.handlePull(cs, &f) },
		},

		// In-memory lookups and updates, answered on the loop.
		protocol.CodeQueryConsumerOffset:    {reply: (*Broker).replyConsumerOffset},
		protocol.CodeUpdateConsumerOffset:   {reply: (*Broker).replyConsumerOffset},
		protocol.CodeGetMaxOffset:           {reply: (*Broker).replyQueueOffset},
		protocol.CodeGetMinOffset:           {reply: (*Broker).replyQueueOffset},
		protocol.CodeGetTopicStatsInfo:      {reply: (*Broker).replyTopicStats},
		protocol.CodeGetAllTopicConfig:      {reply: (*Broker).replyTopicConfigs},
		protocol.CodeGetAllConsumerOffset:   {reply: (*Broker).replyConsumerOffsets},
		protocol.CodeMergeConsumerOffsets:   {reply: (*Broker).replyMergeConsumerOffsets},
		protocol.CodeHeartbeat:              {reply: (*Broker).replyHeartbeat},
		protocol.CodeUnregisterClient:       {reply: (*Broker).replyHeartbeat},
		protocol.CodeGetConsumerListByGroup: {reply: (*Broker).replyConsumerList},

		// Requests that may wait, answered from a worker goroutine.
		protocol.CodeUpdateAndCreateTopic: {
			// The update fsyncs the topic table. Topic configs reach a slave only through its sync
			// with the master (syncWithMaster), which writes the table directly, not through here.
			reply: (*Broker).replyUpdateTopic, worker: true,
			served: masterOnly, toMaster: "create or update topics on the master",
		},
		// A deletion appends its record, waits for it as a send does, and fsyncs the topic
		// table and the offsets; refused while a master hands over, as sends are.
		protocol.CodeDeleteTopicInBroker: {
			reply: (*Broker).replyDeleteTopic, worker: true,
			served: masterNotHandingOver, toMaster: "delete topics on the master",
		},
		// A group's deletion fsyncs the offsets; slaves hear of it from their offset sync.
		protocol.CodeDeleteSubscriptionGroup: {
			reply: (*Broker).replyDeleteGroup, worker: true,
			served: masterOnly, toMaster: "delete consumer groups on the master",
		},
		// Consume stats read the batches at the groups' offsets: old ones are cold pages.
		protocol.CodeGetConsumeStats: {reply: (*Broker).replyConsumeStats, worker: true},
		// Runtime info reads the memory statistics: a short stop of the world.
		protocol.CodeGetBrokerRuntimeInfo: {reply: (*Broker).replyRuntimeInfo, worker: true},
		// A checksum hashes the commit log over a range, cold pages included.
		protocol.CodeGetLogChecksum: {reply: (*Broker).replyLogChecksum, worker: true},
		// The replication status is read under the replication master's lock, which its
		// slaves' pulls contend for.
		protocol.CodeGetHAStatus: {reply: (*Broker).replyHAStatus, worker: true},
		// The send traces are copied out of the ring with an allocation per read.
		protocol.CodeGetSendTraces: {reply: (*Broker).replySendTraces, worker: true},
		// An election waits for the target to catch up and take over.
		protocol.CodeElectMaster: {reply: (*Broker).replyElectMaster, worker: true},
		// A read index waits for the leader's no-op to commit through a quorum.
		protocol.CodeRaftReadIndex: {reply: (*Broker).replyRaftReadIndex, worker: true},

		// Codes of the protocol served elsewhere.
		protocol.CodeRegisterBroker:       {elsewhere: "a NameServer"},
		protocol.CodeUnregisterBroker:     {elsewhere: "a NameServer"},
		protocol.CodeGetRouteInfoByTopic:  {elsewhere: "a NameServer"},
		protocol.CodeGetBrokerClusterInfo: {elsewhere: "a NameServer"},
		protocol.CodeDeleteTopicInNamesrv: {elsewhere: "a NameServer"},
		protocol.CodeHAPull:               {elsewhere: "the master's HA port"},
		protocol.CodeHALeave:              {elsewhere: "the master's HA port"},
	}
}

// routeOf returns the route of a code the client port serves, nil for any other code.
func routeOf(code protocol.RequestCode) *route {
	if int(code) >= len(routes) {
		return nil
	}
	rt := &routes[code]
	if rt.loop == nil && rt.reply == nil {
		return nil
	}
	return rt
}

// verdict is what the broker does with a request.
type verdict uint8

const (
	refuseShuttingDown verdict = iota + 1 // SHUTTING_DOWN: the broker is closing
	refuseNotSupported                    // REQUEST_CODE_NOT_SUPPORTED: not served on this port
	refuseNotMaster                       // NOT_MASTER, naming the master
	serveOnLoop                           // the route's handler, on the event loop
	serveOnWorker                         // the route's reply, on a worker goroutine
)

// member is what the dispatch rules read of a member's role.
type member struct {
	master      bool // it is the master of its group
	handingOver bool // a master handing its role to a slave (electMaster)
}

// memberOf returns what the dispatch rules read of r.
func memberOf(r *role) member {
	return member{master: r.master != nil, handingOver: r.State == ha.MemberHandingOver}
}

// decide returns the route of code (nil if the client port does not serve it) and what to do
// with a request of it: a broker that is stopping refuses every request, whatever its code.
func decide(code protocol.RequestCode, stopping bool, m member) (*route, verdict) {
	rt := routeOf(code)
	switch {
	case stopping:
		return rt, refuseShuttingDown
	case rt == nil:
		return nil, refuseNotSupported
	case rt.served == masterOnly && !m.master,
		rt.served == masterNotHandingOver && (!m.master || m.handingOver):
		return rt, refuseNotMaster
	case rt.worker:
		return rt, serveOnWorker
	}
	return rt, serveOnLoop
}

// dispatch serves one request on the event loop.
func (b *Broker) dispatch(cs *connState, f *protocol.Frame) {
	b.stats.requests.Add(1)
	r := b.role.Load()
	rt, v := decide(protocol.RequestCode(f.Code), b.stopping.Load(), memberOf(r))
	b.serve(cs, f, rt, v, r)
}

// serveAgain serves a request once more on the connection's event loop (a send whose topic
// was created meanwhile), deciding again since the role may have changed. It is neither
// counted nor refused for a shutdown: the broker accepted it before.
func (b *Broker) serveAgain(cs *connState, f *protocol.Frame) {
	r := b.role.Load()
	rt, v := decide(protocol.RequestCode(f.Code), false, memberOf(r))
	b.serve(cs, f, rt, v, r)
}

// serve carries out the verdict v on a request of route rt, admitted with role r. Loop.
func (b *Broker) serve(cs *connState, f *protocol.Frame, rt *route, v verdict, r *role) {
	code := protocol.RequestCode(f.Code)
	switch v {
	case refuseShuttingDown:
		b.replyError(cs, f, protocol.StatusShuttingDown, "broker is shutting down", "")
	case refuseNotSupported:
		b.replyError(cs, f, protocol.StatusRequestCodeNotSupported, "request code "+code.String()+" is not supported by the broker", "")
	case refuseNotMaster:
		rep := b.notMaster(r, rt.toMaster)
		b.reply(cs, f, &rep)
	case serveOnWorker:
		req := request{code: code, cs: cs, header: append([]byte(nil), f.Header...), body: append([]byte(nil), f.Body...)}
		id, oneway := f.RequestID, f.Flags.IsOneway()
		cs.inflight.Add(1)
		b.workers.Add(1)
		go func() {
			defer b.workers.Done()
			rep := rt.reply(b, req)
			if oneway {
				cs.inflight.Add(-1)
				return
			}
			b.asyncReply(cs, id, &rep)
		}()
	case serveOnLoop:
		if rt.loop != nil {
			rt.loop(b, cs, *f, r)
			return
		}
		rep := rt.reply(b, request{code: code, cs: cs, header: f.Header, body: f.Body})
		b.reply(cs, f, &rep)
	}
}
