package client

import (
	"cmp"
	"context"
	"log/slog"
	"net"
	"os"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/petrel-mq/petrel/protocol"
	"github.com/petrel-mq/petrel/protocol/rpc"
)

// This file holds a fake cluster speaking the real protocol over protocol/rpc.Server: brokers
// that store batches in memory (validating, stamping and serving them as the real broker does),
// and a NameServer that builds routes from the live fake brokers. Hooks inject failures.

// testLogger logs warnings to the test's output; PETREL_TEST_DEBUG=1 logs everything.
func testLogger(t testing.TB) *slog.Logger {
	level := slog.LevelWarn
	if os.Getenv("PETREL_TEST_DEBUG") != "" {
		level = slog.LevelDebug
	}
	return slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: level}))
}

type queueKey struct {
	topic string
	id    int32
}

type offsetKey struct {
	group string
	queueKey
}

// fakeStore is a broker group's data; master and slaves share it (perfect replication).
type fakeStore struct {
	mu      sync.Mutex
	topics  map[string]protocol.TopicConfig
	queues  map[queueKey]*fakeQueue
	offsets map[offsetKey]int64
	phys    int64
	notify  chan struct{} // closed and replaced on every append
}

type fakeQueue struct {
	batches [][]byte
	min     int64 // offset of the first stored message
	next    int64
}

func newFakeStore() *fakeStore {
	return &fakeStore{
		topics:  map[string]protocol.TopicConfig{},
		queues:  map[queueKey]*fakeQueue{},
		offsets: map[offsetKey]int64{},
		notify:  make(chan struct{}),
	}
}

type fakeBroker struct {
	t       testing.TB
	cluster string
	name    string
	id      int64
	store   *fakeStore
	addr    string

	mu  sync.Mutex // guards srv, up
	srv *rpc.Server
	up  bool

	// Hooks; nil means normal behaviour. A hook returning true answers with its reply.
	sendHook func(req *rpc.Request) (rpc.Reply, bool)
	pullHook func(h *protocol.PullRequestHeader) (rpc.Reply, bool)
	hookMu   sync.Mutex
	suggest  atomic.Int64 // SuggestBrokerID put in pull responses
	// electHook answers ELECT_MASTER (nil: REQUEST_CODE_NOT_SUPPORTED, as a group with static
	// roles); elects records every request received. Both guarded by hookMu.
	electHook func(h *protocol.ElectMasterRequest) rpc.Reply
	elects    []protocol.ElectMasterRequest

	// hold, when not nil, holds every request until it is closed: rpc.Server serves a
	// connection's requests one at a time, so the broker reads nothing more of a connection
	// after its first request, as a hung process (see hang). received counts the requests
	// that reached the handler, receivedSends the SEND_MESSAGE ones among them.
	hold          chan struct{} // guarded by hookMu
	received      atomic.Int64
	receivedSends atomic.Int64

	sends   atomic.Int64
	pulls   atomic.Int64
	commits atomic.Int64 // UPDATE_CONSUMER_OFFSET requests and pulls carrying a commit

	// Slave behaviour (id > 0), as the real broker's: hasUpTo, when >= 0, is the queue offset
	// up to which the slave has replicated every queue (it serves offsets below it only);
	// unlinked says its link to the master is down. A slave answers PULL_NOT_HERE for an offset
	// past what it holds, and for its end while linked (the master may have more); unlinked, it
	// long-polls at its end. It refuses sends with NOT_MASTER naming masterAddr, and keeps the
	// larger of a committed offset and the one it had.
	hasUpTo    atomic.Int64
	unlinked   atomic.Bool
	masterAddr string // guarded by hookMu (set after the broker starts serving)

	// members is the broker's consumer table: group -> client id -> topic. As the real broker's,
	// it is per broker (not shared with the group's other members); it has no expiry.
	membersMu sync.Mutex
	members   map[string]map[string]string
	// failMembers makes GET_CONSUMER_LIST_BY_GROUP answer SYSTEM_ERROR.
	failMembers atomic.Bool
	heartbeats  atomic.Int64
}

// forget drops every client of the broker's consumer table, as a restarted broker would.
func (b *fakeBroker) forget() {
	b.membersMu.Lock()
	clear(b.members)
	b.membersMu.Unlock()
}

// groupMembers returns the client ids registered for group, sorted.
func (b *fakeBroker) groupMembers(group string) []string {
	b.membersMu.Lock()
	defer b.membersMu.Unlock()
	var ids []string
	for id := range b.members[group] {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	return ids
}

func (b *fakeBroker) setSendHook(h func(req *rpc.Request) (rpc.Reply, bool)) {
	b.hookMu.Lock()
	b.sendHook = h
	b.hookMu.Unlock()
}

// hang makes the broker accept connections and answer nothing, as a stopped process or a
// partition that drops packets, until release (also called at the end of the test, before the
// broker stops): then it serves the requests it held.
func (b *fakeBroker) hang() (release func()) {
	ch := make(chan struct{})
	b.hookMu.Lock()
	b.hold = ch
	b.hookMu.Unlock()
	var once sync.Once
	release = func() {
		once.Do(func() {
			b.hookMu.Lock()
			b.hold = nil
			b.hookMu.Unlock()
			close(ch)
		})
	}
	b.t.Cleanup(release)
	return release
}

func (b *fakeBroker) setElectHook(h func(h *protocol.ElectMasterRequest) rpc.Reply) {
	b.hookMu.Lock()
	b.electHook = h
	b.hookMu.Unlock()
}

// electRequests returns the ELECT_MASTER requests the broker received.
func (b *fakeBroker) electRequests() []protocol.ElectMasterRequest {
	b.hookMu.Lock()
	defer b.hookMu.Unlock()
	return slices.Clone(b.elects)
}

func (b *fakeBroker) setPullHook(h func(h *protocol.PullRequestHeader) (rpc.Reply, bool)) {
	b.hookMu.Lock()
	b.pullHook = h
	b.hookMu.Unlock()
}

func startFakeBroker(t testing.TB, cluster, name string, id int64, store *fakeStore) *fakeBroker {
	b := &fakeBroker{t: t, cluster: cluster, name: name, id: id, store: store, members: map[string]map[string]string{}}
	b.hasUpTo.Store(-1)
	b.start("127.0.0.1:0")
	t.Cleanup(b.stop)
	return b
}

func (b *fakeBroker) start(addr string) {
	b.t.Helper()
	var ln net.Listener
	var err error
	for i := 0; i < 100; i++ { // the port of a restarted broker may linger briefly
		if ln, err = net.Listen("tcp", addr); err == nil {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	if err != nil {
		b.t.Fatalf("listen: %v", err)
	}
	srv := rpc.NewServer(b.handle, rpc.ServerOptions{Logger: testLogger(b.t)})
	b.mu.Lock()
	b.srv, b.up, b.addr = srv, true, ln.Addr().String()
	b.mu.Unlock()
	go func() { _ = srv.Serve(ln) }()
}

func (b *fakeBroker) stop() {
	b.mu.Lock()
	srv := b.srv
	b.up = false
	b.mu.Unlock()
	if srv != nil {
		_ = srv.Close()
	}
}

// restart stops the broker and starts it again on the same address with the same data.
func (b *fakeBroker) restart() {
	b.stop()
	b.start(b.addr)
}

func (b *fakeBroker) isUp() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.up
}

func (b *fakeBroker) createTopic(name string, queues int32) {
	b.store.mu.Lock()
	b.store.topics[name] = protocol.TopicConfig{Topic: name, ReadQueueNums: queues, WriteQueueNums: queues, Perm: protocol.PermReadWrite}
	b.store.mu.Unlock()
}

func (b *fakeBroker) handle(req *rpc.Request) rpc.Reply {
	s := b.store
	b.received.Add(1)
	if req.Code == protocol.CodeSendMessage {
		b.receivedSends.Add(1)
	}
	b.hookMu.Lock()
	hold := b.hold
	b.hookMu.Unlock()
	if hold != nil {
		<-hold
	}
	switch req.Code {
	case protocol.CodeSendMessage:
		b.sends.Add(1)
		b.hookMu.Lock()
		hook := b.sendHook
		b.hookMu.Unlock()
		if hook != nil {
			if rep, ok := hook(req); ok {
				return rep
			}
		}
		if b.id != 0 {
			b.hookMu.Lock()
			master := b.masterAddr
			b.hookMu.Unlock()
			return rpc.Reply{Status: protocol.StatusNotMaster, Remark: "fake slave", MasterAddr: master}
		}
		return s.append(req.Body)
	case protocol.CodePullMessage:
		b.pulls.Add(1)
		var h protocol.PullRequestHeader
		if err := h.ReadFrom(req.Header); err != nil {
			return rpc.Errorf(protocol.StatusRequestMalformed, "%v", err)
		}
		b.hookMu.Lock()
		hook := b.pullHook
		b.hookMu.Unlock()
		if hook != nil {
			if rep, ok := hook(&h); ok {
				return rep
			}
		}
		if h.CommitOffset >= 0 {
			b.commits.Add(1)
		}
		rep := s.pull(&h, b.id != 0, b.hasUpTo.Load(), !b.unlinked.Load())
		if ph, ok := rep.Header.(*protocol.PullResponseHeader); ok && ph.Result != protocol.PullNotHere {
			ph.SuggestBrokerID = b.suggest.Load()
		}
		return rep
	case protocol.CodeQueryConsumerOffset:
		var h protocol.ConsumerOffsetHeader
		if err := h.ReadFrom(req.Header); err != nil {
			return rpc.Errorf(protocol.StatusRequestMalformed, "%v", err)
		}
		s.mu.Lock()
		defer s.mu.Unlock()
		off, ok := s.offsets[offsetKey{h.ConsumerGroup, queueKey{h.Topic, h.QueueID}}]
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
		k := offsetKey{h.ConsumerGroup, queueKey{h.Topic, h.QueueID}}
		if cur, ok := s.offsets[k]; !ok || b.id == 0 || h.Offset > cur { // a slave merges: the larger wins
			s.offsets[k] = h.Offset
		}
		s.mu.Unlock()
		return rpc.Reply{}
	case protocol.CodeUpdateAndCreateTopic:
		var h protocol.TopicConfig
		if err := h.ReadFrom(req.Header); err != nil {
			return rpc.Errorf(protocol.StatusRequestMalformed, "%v", err)
		}
		s.mu.Lock()
		s.topics[h.Topic] = h
		s.mu.Unlock()
		return rpc.Reply{}
	case protocol.CodeGetMinOffset, protocol.CodeGetMaxOffset:
		var h protocol.QueueHeader
		if err := h.ReadFrom(req.Header); err != nil {
			return rpc.Errorf(protocol.StatusRequestMalformed, "%v", err)
		}
		s.mu.Lock()
		defer s.mu.Unlock()
		var off int64
		if q := s.queues[queueKey{h.Topic, h.QueueID}]; q != nil {
			off = q.next
			if req.Code == protocol.CodeGetMinOffset {
				off = q.min
			}
		}
		return rpc.Reply{Header: &protocol.OffsetHeader{Offset: off}}
	case protocol.CodeGetTopicStatsInfo:
		var h protocol.TopicHeader
		if err := h.ReadFrom(req.Header); err != nil {
			return rpc.Errorf(protocol.StatusRequestMalformed, "%v", err)
		}
		s.mu.Lock()
		defer s.mu.Unlock()
		tc, ok := s.topics[h.Topic]
		if !ok {
			return rpc.Errorf(protocol.StatusTopicNotExist, "no topic %s", h.Topic)
		}
		var st protocol.TopicStatsTable
		for id := int32(0); id < tc.WriteQueueNums; id++ {
			qs := protocol.QueueStats{QueueID: id}
			if q := s.queues[queueKey{h.Topic, id}]; q != nil {
				qs.MinOffset, qs.MaxOffset = q.min, q.next
			}
			st.Queues = append(st.Queues, qs)
		}
		return rpc.Reply{Body: st.AppendTo(nil)}
	case protocol.CodeGetConsumeStats:
		var h protocol.GroupHeader
		if err := h.ReadFrom(req.Header); err != nil {
			return rpc.Errorf(protocol.StatusRequestMalformed, "%v", err)
		}
		s.mu.Lock()
		defer s.mu.Unlock()
		var cs protocol.ConsumeStats
		for k, off := range s.offsets {
			if k.group != h.ConsumerGroup || (h.Topic != "" && k.topic != h.Topic) {
				continue
			}
			var max int64
			if q := s.queues[k.queueKey]; q != nil {
				max = q.next
			}
			cs.Queues = append(cs.Queues, protocol.ConsumeQueueStats{Topic: k.topic, QueueID: k.id, BrokerOffset: max, ConsumerOffset: off})
		}
		slices.SortFunc(cs.Queues, func(a, b protocol.ConsumeQueueStats) int {
			return cmp.Or(cmp.Compare(a.Topic, b.Topic), cmp.Compare(a.QueueID, b.QueueID))
		})
		return rpc.Reply{Body: cs.AppendTo(nil)}
	case protocol.CodeHeartbeat, protocol.CodeUnregisterClient:
		var h protocol.ConsumerHeartbeatHeader
		if err := h.ReadFrom(req.Header); err != nil || h.ClientID == "" {
			return rpc.Errorf(protocol.StatusRequestMalformed, "bad heartbeat: %v", err)
		}
		b.membersMu.Lock()
		defer b.membersMu.Unlock()
		g := b.members[h.ConsumerGroup]
		if req.Code == protocol.CodeHeartbeat {
			b.heartbeats.Add(1)
		}
		if req.Code == protocol.CodeUnregisterClient {
			delete(g, h.ClientID)
			return rpc.Reply{}
		}
		if g == nil {
			g = map[string]string{}
			b.members[h.ConsumerGroup] = g
		}
		g[h.ClientID] = h.Topic
		return rpc.Reply{}
	case protocol.CodeGetConsumerListByGroup:
		var h protocol.GroupHeader
		if err := h.ReadFrom(req.Header); err != nil {
			return rpc.Errorf(protocol.StatusRequestMalformed, "%v", err)
		}
		if b.failMembers.Load() {
			return rpc.Errorf(protocol.StatusSystemError, "fake: member list unavailable")
		}
		l := protocol.StringList{Items: b.groupMembers(h.ConsumerGroup)}
		return rpc.Reply{Body: l.AppendTo(nil)}
	case protocol.CodeElectMaster:
		var h protocol.ElectMasterRequest
		if err := h.ReadFrom(req.Header); err != nil {
			return rpc.Errorf(protocol.StatusRequestMalformed, "%v", err)
		}
		b.hookMu.Lock()
		b.elects = append(b.elects, h)
		hook := b.electHook
		b.hookMu.Unlock()
		if hook == nil {
			return rpc.Errorf(protocol.StatusRequestCodeNotSupported, "fake broker: static roles")
		}
		return hook(&h)
	case protocol.CodeGetBrokerRuntimeInfo:
		kv := protocol.KVTable{Entries: []protocol.KV{{Key: "brokerName", Value: b.name}, {Key: "sends", Value: strconv.FormatInt(b.sends.Load(), 10)}}}
		return rpc.Reply{Body: kv.AppendTo(nil)}
	case protocol.CodeGetAllTopicConfig:
		s.mu.Lock()
		defer s.mu.Unlock()
		var l protocol.TopicConfigList
		for _, tc := range s.topics {
			l.Topics = append(l.Topics, tc)
		}
		return rpc.Reply{Body: l.AppendTo(nil)}
	}
	return rpc.Errorf(protocol.StatusRequestCodeNotSupported, "fake broker: %s", req.Code)
}

func (s *fakeStore) append(body []byte) rpc.Reply {
	h, _, err := protocol.ValidateBatch(body, protocol.BatchLimits{})
	if err != nil {
		return rpc.Errorf(protocol.StatusMessageIllegal, "%v", err)
	}
	if h.Size != len(body) {
		return rpc.Errorf(protocol.StatusMessageIllegal, "trailing bytes")
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	tc, ok := s.topics[string(h.Topic)]
	if !ok {
		return rpc.Errorf(protocol.StatusTopicNotExist, "topic %s", h.Topic)
	}
	if h.QueueID >= tc.WriteQueueNums {
		return rpc.Errorf(protocol.StatusQueueNotExist, "queue %d", h.QueueID)
	}
	k := queueKey{string(h.Topic), h.QueueID}
	q := s.queues[k]
	if q == nil {
		q = &fakeQueue{}
		s.queues[k] = q
	}
	b := slices.Clone(body)
	now := time.Now().UnixMilli()
	protocol.StampBatch(b, s.phys, q.next, now, 0)
	rh := &protocol.SendResponseHeader{QueueID: h.QueueID, QueueOffset: q.next, Count: h.Count, PhysicalOffset: s.phys, StoreTimestamp: now}
	q.batches = append(q.batches, b)
	q.next += int64(h.Count)
	s.phys += int64(len(b))
	close(s.notify)
	s.notify = make(chan struct{})
	return rpc.Reply{Header: rh}
}

// maxFakePoll caps how long the fake holds a pull: rpc.Server serves one connection's requests
// in order, so a held pull delays the requests behind it.
const maxFakePoll = 20 * time.Millisecond

// pull answers a pull as a master, or as a slave (slave true) that holds the queue offsets
// below hasUpTo (-1: everything) and whose master link is up when linked.
func (s *fakeStore) pull(h *protocol.PullRequestHeader, slave bool, hasUpTo int64, linked bool) rpc.Reply {
	deadline := time.Now().Add(min(time.Duration(h.PollTimeoutMs)*time.Millisecond, maxFakePoll))
	for {
		s.mu.Lock()
		if h.CommitOffset >= 0 {
			k := offsetKey{h.ConsumerGroup, queueKey{h.Topic, h.QueueID}}
			if cur, ok := s.offsets[k]; !ok || !slave || h.CommitOffset > cur {
				s.offsets[k] = h.CommitOffset
			}
		}
		if _, ok := s.topics[h.Topic]; !ok {
			s.mu.Unlock()
			return rpc.Errorf(protocol.StatusTopicNotExist, "topic %s", h.Topic)
		}
		q := s.queues[queueKey{h.Topic, h.QueueID}]
		if q == nil {
			q = &fakeQueue{}
		}
		end := q.next
		if slave && hasUpTo >= 0 && hasUpTo < end {
			// A slave replicates whole batches: it holds up to the last batch ending by hasUpTo.
			end = q.min
			for _, b := range q.batches {
				if bh, _ := protocol.ReadBatchHeader(b); bh.NextQueueOffset() <= hasUpTo {
					end = bh.NextQueueOffset()
				}
			}
		}
		rh := &protocol.PullResponseHeader{MinOffset: q.min, MaxOffset: end, NextQueueOffset: h.QueueOffset}
		if slave && (h.QueueOffset > end || (h.QueueOffset == end && linked)) {
			s.mu.Unlock()
			rh.Result = protocol.PullNotHere
			return rpc.Reply{Header: rh}
		}
		if h.QueueOffset < q.min || h.QueueOffset > end {
			rh.Result = protocol.PullOffsetMoved
			rh.NextQueueOffset = min(max(h.QueueOffset, q.min), end)
			s.mu.Unlock()
			return rpc.Reply{Header: rh}
		}
		var body []byte
		var msgs int32
		for _, b := range q.batches {
			bh, err := protocol.ReadBatchHeader(b)
			if err != nil {
				panic(err)
			}
			if bh.NextQueueOffset() <= h.QueueOffset {
				continue
			}
			if bh.NextQueueOffset() > end {
				break // not replicated to this slave yet
			}
			if len(body) > 0 && (len(body)+len(b) > int(h.MaxBytes) || msgs >= h.MaxMessages) {
				break
			}
			body = append(body, b...)
			msgs += bh.Count
			rh.NextQueueOffset = bh.NextQueueOffset()
		}
		notify := s.notify
		s.mu.Unlock()
		if len(body) > 0 {
			rh.Result = protocol.PullFound
			return rpc.Reply{Header: rh, Body: body}
		}
		wait := time.Until(deadline)
		if wait <= 0 {
			rh.Result = protocol.PullNoNewMessage
			return rpc.Reply{Header: rh}
		}
		select {
		case <-notify:
		case <-time.After(wait):
		}
	}
}

// corrupt flips a byte of the body of the stored batch holding offset.
func (s *fakeStore) corrupt(topic string, queueID int32, offset int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	q := s.queues[queueKey{topic, queueID}]
	for _, b := range q.batches {
		h, _ := protocol.ReadBatchHeader(b)
		if h.BaseQueueOffset <= offset && offset < h.NextQueueOffset() {
			b[len(b)-1] ^= 0xff
			return
		}
	}
	panic("no such offset")
}

// fakeCluster is a fake NameServer over a set of fake brokers.
type fakeCluster struct {
	t       testing.TB
	mu      sync.Mutex
	brokers []*fakeBroker
	srv     *rpc.Server
	ln      net.Listener
	addr    string
	// hidden brokers are left out of routes (as if they had not registered).
	hidden map[*fakeBroker]bool
}

func newFakeCluster(t testing.TB) *fakeCluster {
	fc := &fakeCluster{t: t, hidden: map[*fakeBroker]bool{}}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	fc.addr, fc.ln = ln.Addr().String(), ln
	fc.srv = rpc.NewServer(fc.handle, rpc.ServerOptions{Logger: testLogger(t)})
	go func() { _ = fc.srv.Serve(ln) }()
	t.Cleanup(func() { _ = fc.srv.Close() })
	return fc
}

// addGroup starts a broker group (a master and slaves) with the topics given.
func (fc *fakeCluster) addGroup(name string, slaves int, topics map[string]int32) []*fakeBroker {
	store := newFakeStore()
	var out []*fakeBroker
	for id := int64(0); id <= int64(slaves); id++ {
		b := startFakeBroker(fc.t, "DefaultCluster", name, id, store)
		out = append(out, b)
	}
	for _, b := range out[1:] {
		b.hookMu.Lock() // b already serves
		b.masterAddr = out[0].addr
		b.hookMu.Unlock()
	}
	for topic, n := range topics {
		out[0].createTopic(topic, n)
	}
	fc.mu.Lock()
	fc.brokers = append(fc.brokers, out...)
	fc.mu.Unlock()
	return out
}

func (fc *fakeCluster) setHidden(b *fakeBroker, hidden bool) {
	fc.mu.Lock()
	fc.hidden[b] = hidden
	fc.mu.Unlock()
}

func (fc *fakeCluster) live() []*fakeBroker {
	fc.mu.Lock()
	defer fc.mu.Unlock()
	var out []*fakeBroker
	for _, b := range fc.brokers {
		if b.isUp() && !fc.hidden[b] {
			out = append(out, b)
		}
	}
	return out
}

func (fc *fakeCluster) handle(req *rpc.Request) rpc.Reply {
	switch req.Code {
	case protocol.CodeGetRouteInfoByTopic:
		var h protocol.TopicHeader
		if err := h.ReadFrom(req.Header); err != nil {
			return rpc.Errorf(protocol.StatusRequestMalformed, "%v", err)
		}
		var rd protocol.TopicRouteData
		groups := map[string]*protocol.BrokerData{}
		for _, b := range fc.live() {
			b.store.mu.Lock()
			tc, ok := b.store.topics[h.Topic]
			b.store.mu.Unlock()
			if !ok {
				continue
			}
			bd := groups[b.name]
			if bd == nil {
				bd = &protocol.BrokerData{Cluster: b.cluster, BrokerName: b.name}
				groups[b.name] = bd
				rd.QueueDatas = append(rd.QueueDatas, protocol.QueueData{BrokerName: b.name, ReadQueueNums: tc.ReadQueueNums, WriteQueueNums: tc.WriteQueueNums, Perm: tc.Perm})
			}
			bd.Addrs = append(bd.Addrs, protocol.BrokerAddr{BrokerID: b.id, Addr: b.addr})
		}
		if len(groups) == 0 {
			return rpc.Errorf(protocol.StatusTopicNotExist, "no route for %s", h.Topic)
		}
		for _, bd := range groups {
			slices.SortFunc(bd.Addrs, func(a, b protocol.BrokerAddr) int { return cmp.Compare(a.BrokerID, b.BrokerID) })
			rd.BrokerDatas = append(rd.BrokerDatas, *bd)
		}
		return rpc.Reply{Body: rd.AppendTo(nil)}
	case protocol.CodeGetBrokerClusterInfo:
		var ci protocol.ClusterInfo
		groups := map[string]*protocol.BrokerData{}
		var names []string
		for _, b := range fc.live() {
			bd := groups[b.name]
			if bd == nil {
				bd = &protocol.BrokerData{Cluster: b.cluster, BrokerName: b.name}
				groups[b.name] = bd
				names = append(names, b.name)
			}
			bd.Addrs = append(bd.Addrs, protocol.BrokerAddr{BrokerID: b.id, Addr: b.addr})
		}
		slices.Sort(names)
		for _, n := range names {
			ci.Brokers = append(ci.Brokers, *groups[n])
		}
		ci.Clusters = []protocol.ClusterEntry{{Name: "DefaultCluster", BrokerNames: names}}
		return rpc.Reply{Body: ci.AppendTo(nil)}
	}
	return rpc.Errorf(protocol.StatusRequestCodeNotSupported, "fake namesrv: %s", req.Code)
}

// newTestClient returns a client of fc closed at the end of the test.
func newTestClient(t testing.TB, nsAddrs string, opts ...ClientOption) *Client {
	t.Helper()
	opts = append([]ClientOption{WithNameServers(nsAddrs), WithLogger(testLogger(t)), WithReconnectBackoff(10*time.Millisecond, 100*time.Millisecond)}, opts...)
	c, err := New(context.Background(), opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

func testCtx(t testing.TB, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}
