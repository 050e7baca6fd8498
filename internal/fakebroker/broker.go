package fakebroker

import (
	"net"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/petrel-mq/petrel/protocol"
	"github.com/petrel-mq/petrel/protocol/rpc"
)

// Broker is one member of a broker group: brokerId 0 is the master, the others slaves. It
// serves a connection's requests one at a time, in order, and answers each before it reads the
// next, except that a pull it holds (long polling) is answered later, as the real broker does:
// a request a control function holds, or a hung broker, delays every request behind it.
//
// As the real broker's, a slave refuses sends (NOT_MASTER naming its master), serves the queue
// offsets it has replicated (SetReplicatedUpTo) and answers PULL_NOT_HERE past them, and at its
// end while its link to the master is up (SetMasterLinked); it merges the offsets committed to
// it into the master's (the larger wins). Every member keeps its own consumer table (the
// clients that heartbeat it), as the real brokers do. ELECT_MASTER is not supported unless a
// control function answers it (a group with static roles).
//
// Its methods are safe for concurrent use.
type Broker struct {
	g  *Group
	id int64

	mu         sync.Mutex // guards addr, srv, up, hold, controls, masterAddr
	addr       string
	srv        *server
	up         bool
	hold       chan struct{} // not nil while the broker hangs
	controls   []*control
	masterAddr string // the master a slave's NOT_MASTER names

	suggest atomic.Int64 // SuggestBrokerID of the pull responses
	hasUpTo atomic.Int64 // queue offsets a slave holds (-1: everything)
	// unlinked tells a slave that its link to the master is down.
	unlinked atomic.Bool

	received, receivedSends      atomic.Int64
	sends, pulls, commits, beats atomic.Int64

	clientsMu sync.Mutex                   // guards clients
	clients   map[string]map[string]string // consumer group -> client id -> topic
}

func newBroker(g *Group, id int64) *Broker {
	b := &Broker{g: g, id: id, clients: map[string]map[string]string{}}
	b.hasUpTo.Store(-1)
	return b
}

// Addr returns the broker's address (host:port). It stays the same across Stop and Start.
func (b *Broker) Addr() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.addr
}

// ID returns the broker's brokerId.
func (b *Broker) ID() int64 { return b.id }

// Group returns the broker group the broker belongs to.
func (b *Broker) Group() *Group { return b.g }

// Name returns the broker's group name.
func (b *Broker) Name() string { return b.g.name }

// listenRetry bounds how long Start tries to listen again on the address of a stopped broker:
// the port may linger briefly after the close.
const listenRetry = time.Second

// Start makes the broker serve again at its address after Stop, with the same data. The first
// start (by AddGroup or AddMember) takes a free loopback port.
func (b *Broker) Start() {
	tb := b.g.c.tb
	tb.Helper()
	b.mu.Lock()
	addr := b.addr
	up := b.up
	b.mu.Unlock()
	if up {
		return
	}
	if addr == "" {
		addr = "127.0.0.1:0"
	}
	var ln net.Listener
	var err error
	for deadline := time.Now().Add(listenRetry); ; time.Sleep(10 * time.Millisecond) {
		if ln, err = net.Listen("tcp", addr); err == nil || time.Now().After(deadline) {
			break
		}
	}
	if err != nil {
		tb.Fatalf("fakebroker: broker %s/%d cannot listen on %s: %v", b.g.name, b.id, addr, err)
	}
	b.mu.Lock()
	b.srv, b.up, b.addr = serve(ln, b.handle, b.g.c.log), true, ln.Addr().String()
	b.mu.Unlock()
}

// Stop closes the broker's listener and connections, as a dead process: connections to it are
// refused and requests in flight get no answer. It waits for the requests being served, so a
// broker that hangs must be released first.
func (b *Broker) Stop() {
	b.mu.Lock()
	srv := b.srv
	b.srv, b.up = nil, false
	b.mu.Unlock()
	if srv != nil {
		srv.close()
	}
}

// Restart stops the broker and starts it again at the same address with the same data; its
// consumer table is kept (ForgetClients empties it).
func (b *Broker) Restart() {
	b.Stop()
	b.Start()
}

// Up reports whether the broker serves (started and not stopped).
func (b *Broker) Up() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.up
}

// Hang makes the broker accept connections and answer nothing, as a stopped process or a
// partition that drops packets: the first request of each connection is read and held, and
// nothing more of that connection is read. release ends it (also called at the end of the
// test, before the broker stops): the broker then serves the requests it held.
func (b *Broker) Hang() (release func()) {
	ch := make(chan struct{})
	b.mu.Lock()
	b.hold = ch
	b.mu.Unlock()
	var once sync.Once
	release = func() {
		once.Do(func() {
			b.mu.Lock()
			if b.hold == ch {
				b.hold = nil
			}
			b.mu.Unlock()
			close(ch)
		})
	}
	b.g.c.tb.Cleanup(release)
	return release
}

// Control adds fn to the functions that look at the broker's requests of code (AnyCode: every
// request) before it serves them; they run in the order they were added, and the first that
// does not pass decides (see Verdict). remove takes fn away again.
func (b *Broker) Control(code protocol.RequestCode, fn ControlFunc) (remove func()) {
	c := &control{code: code, fn: fn}
	b.mu.Lock()
	b.controls = append(b.controls, c)
	b.mu.Unlock()
	return func() {
		b.mu.Lock()
		b.controls = slices.DeleteFunc(b.controls, func(x *control) bool { return x == c })
		b.mu.Unlock()
	}
}

// ControlPull is Control for PULL_MESSAGE requests, with their header decoded. A header that
// does not decode is served as usual (the broker answers it malformed).
func (b *Broker) ControlPull(fn func(h *protocol.PullRequestHeader) (rpc.Reply, Verdict)) (remove func()) {
	return b.Control(protocol.CodePullMessage, func(req *rpc.Request) (rpc.Reply, Verdict) {
		var h protocol.PullRequestHeader
		if err := h.ReadFrom(req.Header); err != nil {
			return rpc.Reply{}, Pass
		}
		return fn(&h)
	})
}

// SetSuggestBrokerID sets the member that the broker's pull responses tell consumers to pull
// from next (SuggestBrokerID; 0, the master, by default). A PULL_NOT_HERE answer always
// suggests the master.
func (b *Broker) SetSuggestBrokerID(id int64) { b.suggest.Store(id) }

// SetReplicatedUpTo makes a slave hold only the batches of every queue that end at or below
// queue offset upTo, as one that lags; -1 (the default) makes it hold everything.
func (b *Broker) SetReplicatedUpTo(upTo int64) { b.hasUpTo.Store(upTo) }

// SetMasterLinked tells a slave whether its link to the master is up (the default). Unlinked,
// it serves its end by long polling instead of sending consumers to the master.
func (b *Broker) SetMasterLinked(linked bool) { b.unlinked.Store(!linked) }

// Received counts the requests that reached the broker (a hung broker's included).
func (b *Broker) Received() int64 { return b.received.Load() }

// ReceivedSends counts the SEND_MESSAGE requests that reached the broker (a hung broker's
// included).
func (b *Broker) ReceivedSends() int64 { return b.receivedSends.Load() }

// Sends counts the SEND_MESSAGE requests the broker took up (whatever their answer).
func (b *Broker) Sends() int64 { return b.sends.Load() }

// Pulls counts the PULL_MESSAGE requests the broker took up (whatever their answer).
func (b *Broker) Pulls() int64 { return b.pulls.Load() }

// Commits counts the consumer offsets committed to the broker: UPDATE_CONSUMER_OFFSET requests
// and pulls carrying a commit that it served.
func (b *Broker) Commits() int64 { return b.commits.Load() }

// Heartbeats counts the consumer heartbeats the broker served.
func (b *Broker) Heartbeats() int64 { return b.beats.Load() }

// Clients returns the client ids of the consumer table's entries for group, sorted.
func (b *Broker) Clients(group string) []string {
	b.clientsMu.Lock()
	defer b.clientsMu.Unlock()
	var ids []string
	for id := range b.clients[group] {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	return ids
}

// ForgetClients empties the broker's consumer table, as a restarted broker's.
func (b *Broker) ForgetClients() {
	b.clientsMu.Lock()
	clear(b.clients)
	b.clientsMu.Unlock()
}

// handle is the broker's handler: it counts the request, waits while the broker hangs, runs the
// control functions and serves what they pass.
func (b *Broker) handle(req *rpc.Request) answer {
	b.received.Add(1)
	if req.Code == protocol.CodeSendMessage {
		b.receivedSends.Add(1)
	}
	b.mu.Lock()
	hold := b.hold
	b.mu.Unlock()
	if hold != nil {
		<-hold
	}
	switch req.Code {
	case protocol.CodeSendMessage:
		b.sends.Add(1)
	case protocol.CodePullMessage:
		b.pulls.Add(1)
	}
	b.mu.Lock()
	var fns []ControlFunc
	for _, c := range b.controls {
		if c.code == AnyCode || c.code == req.Code {
			fns = append(fns, c.fn)
		}
	}
	b.mu.Unlock()
	for _, fn := range fns {
		if rep, v := fn(req); v != Pass {
			return answer{rep: rep, v: v}
		}
	}
	if req.Code == protocol.CodePullMessage {
		rep, wait := b.startPull(req)
		return answer{rep: rep, v: Answer, later: wait}
	}
	return answer{rep: b.Serve(req), v: Answer}
}

// startPull serves a pull as startPull of the store does: at once, or (wait not nil) later.
func (b *Broker) startPull(req *rpc.Request) (rep rpc.Reply, wait func(stop <-chan struct{}) rpc.Reply) {
	var h protocol.PullRequestHeader
	if err := h.ReadFrom(req.Header); err != nil {
		return rpc.Errorf(protocol.StatusRequestMalformed, "%v", err), nil
	}
	if h.CommitOffset >= 0 {
		b.commits.Add(1)
	}
	suggest := func(rep rpc.Reply) rpc.Reply {
		if ph, ok := rep.Header.(*protocol.PullResponseHeader); ok && ph.Result != protocol.PullNotHere {
			ph.SuggestBrokerID = b.suggest.Load()
		}
		return rep
	}
	now, held := b.g.data.startPull(&h, member{slave: b.id != 0, hasUpTo: b.hasUpTo.Load(), linked: !b.unlinked.Load()})
	if held == nil {
		return suggest(now), nil
	}
	return rpc.Reply{}, func(stop <-chan struct{}) rpc.Reply { return suggest(held(stop)) }
}

// Serve serves req as the broker does when no control function intervenes. A control function
// calls it to act after the broker did (store a batch, then drop the connection or answer an
// error).
func (b *Broker) Serve(req *rpc.Request) rpc.Reply {
	s := b.g.data
	switch req.Code {
	case protocol.CodeSendMessage:
		if b.id != 0 {
			b.mu.Lock()
			master := b.masterAddr
			b.mu.Unlock()
			return rpc.Reply{Status: protocol.StatusNotMaster, Remark: "fakebroker: a slave", MasterAddr: master}
		}
		return s.append(req.Body)
	case protocol.CodePullMessage:
		rep, wait := b.startPull(req)
		if wait != nil {
			rep = wait(nil)
		}
		return rep
	case protocol.CodeQueryConsumerOffset:
		var h protocol.ConsumerOffsetHeader
		if err := h.ReadFrom(req.Header); err != nil {
			return rpc.Errorf(protocol.StatusRequestMalformed, "%v", err)
		}
		off, ok := b.g.CommittedOffset(h.ConsumerGroup, h.Topic, h.QueueID)
		if !ok {
			return rpc.Errorf(protocol.StatusQueryNotFound, "no offset")
		}
		return rpc.Reply{Header: &protocol.OffsetHeader{Offset: off}}
	case protocol.CodeUpdateConsumerOffset:
		var h protocol.ConsumerOffsetHeader
		if err := h.ReadFrom(req.Header); err != nil {
			return rpc.Errorf(protocol.StatusRequestMalformed, "%v", err)
		}
		b.commits.Add(1)
		s.mu.Lock()
		s.commitLocked(offsetKey{h.ConsumerGroup, queueKey{h.Topic, h.QueueID}}, h.Offset, b.id != 0)
		s.mu.Unlock()
		return rpc.Reply{}
	case protocol.CodeUpdateAndCreateTopic:
		var h protocol.TopicConfig
		if err := h.ReadFrom(req.Header); err != nil {
			return rpc.Errorf(protocol.StatusRequestMalformed, "%v", err)
		}
		s.createTopic(h)
		return rpc.Reply{}
	case protocol.CodeGetMinOffset, protocol.CodeGetMaxOffset:
		var h protocol.QueueHeader
		if err := h.ReadFrom(req.Header); err != nil {
			return rpc.Errorf(protocol.StatusRequestMalformed, "%v", err)
		}
		lo, hi := s.queueOffsets(h.Topic, h.QueueID)
		if req.Code == protocol.CodeGetMinOffset {
			return rpc.Reply{Header: &protocol.OffsetHeader{Offset: lo}}
		}
		return rpc.Reply{Header: &protocol.OffsetHeader{Offset: hi}}
	case protocol.CodeGetTopicStatsInfo:
		var h protocol.TopicHeader
		if err := h.ReadFrom(req.Header); err != nil {
			return rpc.Errorf(protocol.StatusRequestMalformed, "%v", err)
		}
		st, ok := s.topicStats(h.Topic)
		if !ok {
			return rpc.Errorf(protocol.StatusTopicNotExist, "no topic %s", h.Topic)
		}
		return rpc.Reply{Body: st.AppendTo(nil)}
	case protocol.CodeGetConsumeStats:
		var h protocol.GroupHeader
		if err := h.ReadFrom(req.Header); err != nil {
			return rpc.Errorf(protocol.StatusRequestMalformed, "%v", err)
		}
		cs := s.consumeStats(h.ConsumerGroup, h.Topic)
		return rpc.Reply{Body: cs.AppendTo(nil)}
	case protocol.CodeHeartbeat, protocol.CodeUnregisterClient:
		var h protocol.ConsumerHeartbeatHeader
		if err := h.ReadFrom(req.Header); err != nil || h.ClientID == "" {
			return rpc.Errorf(protocol.StatusRequestMalformed, "bad heartbeat: %v", err)
		}
		b.clientsMu.Lock()
		defer b.clientsMu.Unlock()
		g := b.clients[h.ConsumerGroup]
		if req.Code == protocol.CodeUnregisterClient {
			delete(g, h.ClientID)
			return rpc.Reply{}
		}
		b.beats.Add(1)
		if g == nil {
			g = map[string]string{}
			b.clients[h.ConsumerGroup] = g
		}
		g[h.ClientID] = h.Topic
		return rpc.Reply{}
	case protocol.CodeGetConsumerListByGroup:
		var h protocol.GroupHeader
		if err := h.ReadFrom(req.Header); err != nil {
			return rpc.Errorf(protocol.StatusRequestMalformed, "%v", err)
		}
		l := protocol.StringList{Items: b.Clients(h.ConsumerGroup)}
		return rpc.Reply{Body: l.AppendTo(nil)}
	case protocol.CodeGetBrokerRuntimeInfo:
		kv := protocol.KVTable{Entries: []protocol.KV{{Key: "brokerName", Value: b.g.name}, {Key: "sends", Value: strconv.FormatInt(b.sends.Load(), 10)}}}
		return rpc.Reply{Body: kv.AppendTo(nil)}
	case protocol.CodeGetAllTopicConfig:
		l := s.topicConfigs()
		return rpc.Reply{Body: l.AppendTo(nil)}
	case protocol.CodeGetHAStatus:
		st := b.haStatus()
		return rpc.Reply{Body: st.AppendTo(nil)}
	case protocol.CodeElectMaster:
		return rpc.Errorf(protocol.StatusRequestCodeNotSupported, "fakebroker: static roles")
	}
	return rpc.Errorf(protocol.StatusRequestCodeNotSupported, "fakebroker: %s", req.Code)
}

// haStatus describes the group's replication as perfect: a master lists every other member as
// a connected, in-sync slave without lag; a slave names its master and its link.
func (b *Broker) haStatus() protocol.HAStatus {
	if b.id != 0 {
		b.mu.Lock()
		master := b.masterAddr
		b.mu.Unlock()
		return protocol.HAStatus{Role: "SLAVE", BrokerID: b.id, MasterAddr: master, Connected: !b.unlinked.Load(), KnownConfirmed: -1, Electable: true}
	}
	st := protocol.HAStatus{Role: "ASYNC_MASTER", InSyncReplicas: 1, KnownConfirmed: -1, Electable: true}
	for _, m := range b.g.Members() {
		if m.id != 0 && m.Up() {
			st.Slaves = append(st.Slaves, protocol.SlaveStatus{BrokerID: m.id, Addr: m.Addr(), InSync: true, Connected: true})
			st.InSyncReplicas++
		}
	}
	return st
}
