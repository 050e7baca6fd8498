package namesrv

import (
	"cmp"
	"fmt"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/petrel-mq/petrel/protocol"
	"github.com/petrel-mq/petrel/protocol/rpc"
)

// queueData is one broker group's share of a topic.
type queueData struct {
	readQueueNums  int32
	writeQueueNums int32
	perm           int32
}

// brokerGroup is a broker group (RocketMQ BrokerData) with the reverse index of its topics.
type brokerGroup struct {
	cluster string
	name    string
	// addrs maps brokerId to the member's address; a group always has at least one member.
	addrs map[int64]string
	// topics is the set of topics that have queue data for this group (the reverse of
	// routeTable.topics, so a registration replaces a group's topics without a full scan).
	topics map[string]struct{}
}

// liveBroker is a registered broker (RocketMQ BrokerLiveInfo plus its group membership).
type liveBroker struct {
	cluster      string
	brokerName   string
	brokerID     int64
	haServerAddr string
	dataVersion  int64
	lastUpdate   time.Time
	// peer is the connection the broker last registered on.
	peer *rpc.Peer
}

// routeTable is RocketMQ's RouteInfoManager: the four tables and the lock over them.
//
// Concurrency: mu guards every field below it. Handlers and the scanner take it for as long as
// they copy in or out; nothing blocks (no I/O, no channel operation) while it is held. Methods
// ending in Locked require mu held for writing.
//
// Invariants (checked by checkInvariants in tests): a group exists iff it has a member; every
// member address of a group has a live entry naming that group and brokerId, and every live
// entry is a member of its group; clusters[c] holds exactly the groups whose cluster is c;
// topics[t][g] exists iff groups[g].topics holds t, and no topic maps to an empty set.
type routeTable struct {
	mu       sync.RWMutex
	topics   map[string]map[string]queueData // topic -> group name -> queue data
	groups   map[string]*brokerGroup         // group name -> group
	clusters map[string]map[string]struct{}  // cluster name -> group names
	live     map[string]*liveBroker          // broker address -> live info
	// masterEpochs is the newest master epoch registered per group name (kept when the group
	// goes: a deposed master must not come back as master). gone holds when each group that
	// went had its last registration: at most maxGoneGroups of those epochs are kept, the
	// longest gone forgotten first, so that registrations naming ever new groups leave a
	// bounded table.
	masterEpochs map[string]uint32
	gone         map[string]time.Time
	// perPeer counts the live brokers whose latest registration came on each connection: at
	// most maxBrokersPerConn, so that one connection naming ever new addresses cannot grow the
	// tables without bound before its entries expire or go with it.
	perPeer map[*rpc.Peer]int
}

// maxBrokersPerConn caps the brokers registered on one connection (a broker registers its own
// address on a connection of its own).
const maxBrokersPerConn = 64

// maxGoneGroups caps the master epochs kept of groups that have no member registered.
const maxGoneGroups = 1024

func newRouteTable() *routeTable {
	return &routeTable{
		topics:   make(map[string]map[string]queueData),
		groups:   make(map[string]*brokerGroup),
		clusters: make(map[string]map[string]struct{}),
		live:     make(map[string]*liveBroker),

		masterEpochs: make(map[string]uint32),
		gone:         make(map[string]time.Time),
		perPeer:      make(map[*rpc.Peer]int),
	}
}

// registration is a decoded, validated CodeRegisterBroker request.
type registration struct {
	hdr    protocol.BrokerHeader
	topics []protocol.TopicConfig
	peer   *rpc.Peer
	now    time.Time
}

// registerResult says what a registration did, for the reply and the log.
type registerResult struct {
	masterAddr   string
	haServerAddr string
	// isNew is true when the address was not registered (or was registered as another member).
	isNew bool
	// displaced is the address that held the same brokerId of the group before, if any.
	displaced string
	// queueDataUpdated is true when the registration replaced the group's queue data.
	queueDataUpdated bool
	// epochsForgotten counts the master epochs of gone groups forgotten (forgetGoneLocked) when
	// the registration moved an address out of its last group.
	epochsForgotten int
}

// errTooManyBrokers refuses a registration of a new address on a connection that registered
// maxBrokersPerConn brokers.
var errTooManyBrokers = fmt.Errorf("this connection registered %d brokers, the most one may: a broker registers its own address on a connection of its own", maxBrokersPerConn)

// errClusterMismatch reports a registration into a group that belongs to another cluster.
type errClusterMismatch struct{ group, have, want string }

func (e *errClusterMismatch) Error() string {
	return "broker group " + e.group + " belongs to cluster " + e.have + ", not " + e.want
}

// errStaleMaster refuses a master registration of an older epoch than the group's listed master.
type errStaleMaster struct {
	group, addr, current string
	epoch, currentEpoch  uint32
}

func (e *errStaleMaster) Error() string {
	return fmt.Sprintf("broker %s registers as master of %s in epoch %d, but %s is its master in epoch %d",
		e.addr, e.group, e.epoch, e.current, e.currentEpoch)
}

// errStaleRegistration refuses a slave registration of the group's listed master that is older
// than the master's own: it was sent before the broker became master.
type errStaleRegistration struct {
	group, addr         string
	brokerID            int64
	epoch, currentEpoch uint32
}

func (e *errStaleRegistration) Error() string {
	return fmt.Sprintf("broker %s registers as brokerId %d of %s in epoch %d, but it is the group's master in epoch %d: a late registration",
		e.addr, e.brokerID, e.group, e.epoch, e.currentEpoch)
}

// register applies a registration (see the package doc) and returns the group's master.
func (t *routeTable) register(r *registration) (registerResult, error) {
	h := &r.hdr
	t.mu.Lock()
	defer t.mu.Unlock()
	var res registerResult

	if cur := t.live[h.BrokerAddr]; r.peer != nil && (cur == nil || cur.peer != r.peer) && t.perPeer[r.peer] >= maxBrokersPerConn {
		return res, errTooManyBrokers
	}
	g := t.groups[h.BrokerName]
	if h.BrokerID == 0 {
		if cur := t.masterEpochs[h.BrokerName]; h.Epoch < cur && g != nil && g.addrs[0] != "" && g.addrs[0] != h.BrokerAddr {
			return res, &errStaleMaster{group: h.BrokerName, addr: h.BrokerAddr, epoch: h.Epoch, current: g.addrs[0], currentEpoch: cur}
		}
		t.masterEpochs[h.BrokerName] = max(t.masterEpochs[h.BrokerName], h.Epoch)
	} else if cur := t.masterEpochs[h.BrokerName]; h.Epoch < cur && g != nil && g.addrs[0] == h.BrokerAddr {
		// The group's master registering as a slave of an older epoch than its own: a late
		// registration sent before it became master (delayed on the network, say), which would
		// take the master out of the routes.
		return res, &errStaleRegistration{group: h.BrokerName, addr: h.BrokerAddr, brokerID: h.BrokerID, epoch: h.Epoch, currentEpoch: cur}
	}
	if g != nil && g.cluster != h.ClusterName {
		// Only the group itself could be moved, and its other members still say otherwise.
		if !(len(g.addrs) == 1 && g.addrs[h.BrokerID] == h.BrokerAddr) {
			return res, &errClusterMismatch{group: g.name, have: g.cluster, want: h.ClusterName}
		}
		t.removeGroupFromClusterLocked(g)
		g.cluster = h.ClusterName
		t.addGroupToClusterLocked(g)
	}

	// An address that was registered as another member (another group, or another brokerId of
	// this one, as when a slave becomes master) leaves that place first.
	lb := t.live[h.BrokerAddr]
	if lb != nil && (lb.brokerName != h.BrokerName || lb.brokerID != h.BrokerID) {
		t.removeLocked(h.BrokerAddr)
		lb = nil
		g = t.groups[h.BrokerName] // may have been removed with its last member
	}
	res.isNew = lb == nil

	if g == nil {
		g = &brokerGroup{
			cluster: h.ClusterName,
			name:    h.BrokerName,
			addrs:   make(map[int64]string),
			topics:  make(map[string]struct{}),
		}
		t.groups[g.name] = g
		t.addGroupToClusterLocked(g)
		delete(t.gone, g.name)
	}
	if old, ok := g.addrs[h.BrokerID]; ok && old != h.BrokerAddr {
		// Another address held this brokerId (a broker restarted on a new address, or two
		// brokers configured alike): the latest registration wins.
		res.displaced = old
		t.removeLocked(old)
		if t.groups[g.name] == nil { // it was the last member
			t.groups[g.name] = g
			t.addGroupToClusterLocked(g)
			delete(t.gone, g.name)
		}
	}
	g.addrs[h.BrokerID] = h.BrokerAddr

	if lb == nil {
		lb = &liveBroker{}
		t.live[h.BrokerAddr] = lb
	}
	if lb.peer != r.peer {
		t.unpeerLocked(lb.peer)
		if r.peer != nil {
			t.perPeer[r.peer]++
		}
	}
	*lb = liveBroker{
		cluster:      h.ClusterName,
		brokerName:   h.BrokerName,
		brokerID:     h.BrokerID,
		haServerAddr: h.HAServerAddr,
		dataVersion:  h.DataVersion,
		lastUpdate:   r.now,
		peer:         r.peer,
	}

	_, hasMaster := g.addrs[0]
	if h.BrokerID == 0 || (!hasMaster && len(g.topics) == 0) {
		t.replaceQueueDataLocked(g, r.topics)
		res.queueDataUpdated = true
	}

	if m, ok := g.addrs[0]; ok {
		res.masterAddr = m
		if ml := t.live[m]; ml != nil {
			res.haServerAddr = ml.haServerAddr
		}
	}
	res.epochsForgotten = t.forgetGoneLocked()
	return res, nil
}

// replaceQueueDataLocked makes topics the group's queue data: topics not listed leave the group,
// and a topic left without any group disappears.
func (t *routeTable) replaceQueueDataLocked(g *brokerGroup, topics []protocol.TopicConfig) {
	keep := make(map[string]struct{}, len(topics))
	for i := range topics {
		tc := &topics[i]
		keep[tc.Topic] = struct{}{}
		byGroup := t.topics[tc.Topic]
		if byGroup == nil {
			byGroup = make(map[string]queueData, 1)
			t.topics[tc.Topic] = byGroup
		}
		byGroup[g.name] = queueData{readQueueNums: tc.ReadQueueNums, writeQueueNums: tc.WriteQueueNums, perm: tc.Perm}
		g.topics[tc.Topic] = struct{}{}
	}
	for topic := range g.topics {
		if _, ok := keep[topic]; !ok {
			t.removeTopicOfGroupLocked(g, topic)
		}
	}
}

func (t *routeTable) removeTopicOfGroupLocked(g *brokerGroup, topic string) {
	delete(g.topics, topic)
	if byGroup := t.topics[topic]; byGroup != nil {
		delete(byGroup, g.name)
		if len(byGroup) == 0 {
			delete(t.topics, topic)
		}
	}
}

func (t *routeTable) addGroupToClusterLocked(g *brokerGroup) {
	names := t.clusters[g.cluster]
	if names == nil {
		names = make(map[string]struct{}, 1)
		t.clusters[g.cluster] = names
	}
	names[g.name] = struct{}{}
}

func (t *routeTable) removeGroupFromClusterLocked(g *brokerGroup) {
	if names := t.clusters[g.cluster]; names != nil {
		delete(names, g.name)
		if len(names) == 0 {
			delete(t.clusters, g.cluster)
		}
	}
}

// removed describes a broker taken out of the tables, for the log.
type removed struct {
	addr         string
	cluster      string
	brokerName   string
	brokerID     int64
	lastUpdate   time.Time
	groupRemoved bool
	// epochsForgotten is how many master epochs of gone groups the removal that this broker was
	// the last of forgot to keep at most maxGoneGroups (forgetGoneLocked).
	epochsForgotten int
}

// removeLocked takes the broker at addr out of the tables: its live entry, its membership and,
// with the group's last member, the group, its cluster entry and its queue data. A master
// leaving a group that keeps slaves leaves the queue data in place.
func (t *routeTable) removeLocked(addr string) (removed, bool) {
	lb := t.live[addr]
	if lb == nil {
		return removed{}, false
	}
	delete(t.live, addr)
	t.unpeerLocked(lb.peer)
	rm := removed{addr: addr, cluster: lb.cluster, brokerName: lb.brokerName, brokerID: lb.brokerID, lastUpdate: lb.lastUpdate}
	g := t.groups[lb.brokerName]
	if g == nil || g.addrs[lb.brokerID] != addr {
		panic("BUG: namesrv: live broker " + addr + " is not a member of its group")
	}
	delete(g.addrs, lb.brokerID)
	if len(g.addrs) == 0 {
		for topic := range g.topics {
			t.removeTopicOfGroupLocked(g, topic)
		}
		delete(t.groups, g.name)
		t.removeGroupFromClusterLocked(g)
		rm.groupRemoved = true
		if _, ok := t.masterEpochs[g.name]; ok {
			t.gone[g.name] = lb.lastUpdate
		}
	}
	return rm, true
}

// unpeerLocked takes one broker off peer's count (nil: none counted). Caller holds mu for
// writing.
func (t *routeTable) unpeerLocked(peer *rpc.Peer) {
	if peer == nil {
		return
	}
	if t.perPeer[peer] <= 1 {
		delete(t.perPeer, peer)
		return
	}
	t.perPeer[peer]--
}

// forgetGoneLocked forgets the master epochs of the groups gone longest while more than
// maxGoneGroups are kept, and returns how many it forgot. Caller holds mu for writing.
func (t *routeTable) forgetGoneLocked() int {
	n := len(t.gone) - maxGoneGroups
	if n <= 0 {
		return 0
	}
	names := slices.Collect(maps.Keys(t.gone))
	slices.SortFunc(names, func(a, b string) int {
		if c := t.gone[a].Compare(t.gone[b]); c != 0 {
			return c
		}
		return cmp.Compare(a, b)
	})
	for _, name := range names[:n] {
		delete(t.gone, name)
		delete(t.masterEpochs, name)
	}
	return n
}

// unregister removes the broker at addr if it is registered as brokerID of group brokerName.
func (t *routeTable) unregister(brokerName string, brokerID int64, addr string) (removed, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	lb := t.live[addr]
	if lb == nil || lb.brokerName != brokerName || lb.brokerID != brokerID {
		return removed{}, false
	}
	rm, ok := t.removeLocked(addr)
	rm.epochsForgotten = t.forgetGoneLocked()
	return rm, ok
}

// forgetGoneOf bounds the gone groups after the removals out and puts the count of master
// epochs forgotten on the last of them. Caller holds mu for writing.
func (t *routeTable) forgetGoneOf(out []removed) []removed {
	if n := t.forgetGoneLocked(); n > 0 && len(out) > 0 {
		out[len(out)-1].epochsForgotten = n
	}
	return out
}

// removePeer removes every broker whose latest registration came on peer.
func (t *routeTable) removePeer(peer *rpc.Peer) []removed {
	t.mu.Lock()
	defer t.mu.Unlock()
	var out []removed
	for addr, lb := range t.live {
		if lb.peer == peer {
			if rm, ok := t.removeLocked(addr); ok {
				out = append(out, rm)
			}
		}
	}
	return t.forgetGoneOf(out)
}

// expire removes every broker whose last registration is older than now-expiry.
func (t *routeTable) expire(now time.Time, expiry time.Duration) []removed {
	deadline := now.Add(-expiry)
	t.mu.RLock()
	found := false
	for _, lb := range t.live {
		if lb.lastUpdate.Before(deadline) {
			found = true
			break
		}
	}
	t.mu.RUnlock()
	if !found {
		return nil
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	var out []removed
	for addr, lb := range t.live {
		if lb.lastUpdate.Before(deadline) {
			if rm, ok := t.removeLocked(addr); ok {
				out = append(out, rm)
			}
		}
	}
	return t.forgetGoneOf(out)
}

// deleteTopic removes the topic's queue data of every group and returns the groups that had
// it, sorted (none: the table did not know the topic).
func (t *routeTable) deleteTopic(topic string) []string {
	t.mu.Lock()
	defer t.mu.Unlock()
	names := slices.Sorted(maps.Keys(t.topics[topic]))
	for _, name := range names {
		t.removeTopicOfGroupLocked(t.groups[name], topic)
	}
	return names
}

// route returns a copy of the topic's route, queue data and groups sorted by group name and
// members by brokerId; ok is false when no group serves the topic.
func (t *routeTable) route(topic string) (rd protocol.TopicRouteData, ok bool) {
	t.mu.RLock()
	defer t.mu.RUnlock()
	byGroup := t.topics[topic]
	if len(byGroup) == 0 {
		return rd, false
	}
	rd.QueueDatas = make([]protocol.QueueData, 0, len(byGroup))
	rd.BrokerDatas = make([]protocol.BrokerData, 0, len(byGroup))
	for name, q := range byGroup {
		rd.QueueDatas = append(rd.QueueDatas, protocol.QueueData{
			BrokerName:     name,
			ReadQueueNums:  q.readQueueNums,
			WriteQueueNums: q.writeQueueNums,
			Perm:           q.perm,
		})
		if g := t.groups[name]; g != nil {
			rd.BrokerDatas = append(rd.BrokerDatas, g.brokerData())
		}
	}
	slices.SortFunc(rd.QueueDatas, func(a, b protocol.QueueData) int { return cmp.Compare(a.BrokerName, b.BrokerName) })
	slices.SortFunc(rd.BrokerDatas, func(a, b protocol.BrokerData) int { return cmp.Compare(a.BrokerName, b.BrokerName) })
	return rd, true
}

// brokerData copies the group, members sorted by brokerId.
func (g *brokerGroup) brokerData() protocol.BrokerData {
	bd := protocol.BrokerData{Cluster: g.cluster, BrokerName: g.name, Addrs: make([]protocol.BrokerAddr, 0, len(g.addrs))}
	for id, addr := range g.addrs {
		bd.Addrs = append(bd.Addrs, protocol.BrokerAddr{BrokerID: id, Addr: addr})
	}
	slices.SortFunc(bd.Addrs, func(a, b protocol.BrokerAddr) int { return cmp.Compare(a.BrokerID, b.BrokerID) })
	return bd
}

// clusterInfo returns a copy of the cluster table: groups sorted by name, clusters sorted by
// name, each cluster's group names sorted.
func (t *routeTable) clusterInfo() protocol.ClusterInfo {
	t.mu.RLock()
	defer t.mu.RUnlock()
	ci := protocol.ClusterInfo{
		Brokers:  make([]protocol.BrokerData, 0, len(t.groups)),
		Clusters: make([]protocol.ClusterEntry, 0, len(t.clusters)),
	}
	for _, g := range t.groups {
		ci.Brokers = append(ci.Brokers, g.brokerData())
	}
	for name, groups := range t.clusters {
		ci.Clusters = append(ci.Clusters, protocol.ClusterEntry{Name: name, BrokerNames: slices.Sorted(maps.Keys(groups))})
	}
	slices.SortFunc(ci.Brokers, func(a, b protocol.BrokerData) int { return cmp.Compare(a.BrokerName, b.BrokerName) })
	slices.SortFunc(ci.Clusters, func(a, b protocol.ClusterEntry) int { return cmp.Compare(a.Name, b.Name) })
	return ci
}

// LiveBroker is a registered broker as the NameServer sees it (RocketMQ's BrokerLiveInfo).
type LiveBroker struct {
	// Addr is the broker's client address (host:port).
	Addr        string
	ClusterName string
	BrokerName  string
	// BrokerID is 0 for a master, > 0 for a slave.
	BrokerID int64
	// HAServerAddr is the broker's replication address, "" if none.
	HAServerAddr string
	// DataVersion is the data version of the broker's latest registration (display only).
	DataVersion int64
	// LastUpdate is when the broker last registered, by Config.Now.
	LastUpdate time.Time
	// RemoteAddr is the remote address of the connection it last registered on.
	RemoteAddr string
}

// liveBrokers returns a copy of the live table sorted by address.
func (t *routeTable) liveBrokers() []LiveBroker {
	t.mu.RLock()
	defer t.mu.RUnlock()
	out := make([]LiveBroker, 0, len(t.live))
	for addr, lb := range t.live {
		b := LiveBroker{
			Addr:         addr,
			ClusterName:  lb.cluster,
			BrokerName:   lb.brokerName,
			BrokerID:     lb.brokerID,
			HAServerAddr: lb.haServerAddr,
			DataVersion:  lb.dataVersion,
			LastUpdate:   lb.lastUpdate,
		}
		if lb.peer != nil {
			b.RemoteAddr = lb.peer.RemoteAddr()
		}
		out = append(out, b)
	}
	slices.SortFunc(out, func(a, b LiveBroker) int { return cmp.Compare(a.Addr, b.Addr) })
	return out
}
