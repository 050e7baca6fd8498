// Package fakebroker is an in-process Petrel cluster for the tests of code that talks to
// brokers (the client, petrelctl's tools, the bench), in the style of franz-go's kfake: a
// NameServer and broker groups that answer the binary protocol on real loopback sockets, keep
// their messages in memory, and let a test inject faults.
//
// The brokers validate every batch and stamp it as the real broker does, serve pulls with the
// real answers (found, no new message, offset moved, not here), keep consumer offsets and a
// consumer table, and create topics; the members of a group share one store, so replication is
// perfect unless a test makes a slave lag (Broker.SetReplicatedUpTo). The NameServer builds its
// routes from the brokers that are up and registered (Cluster.SetRegistered), so a stopped
// broker leaves the routes at once.
//
// Faults: Broker.Stop refuses connections, Broker.Hang accepts them and answers nothing, and
// control functions (Broker.Control) see every request before the broker serves it: they can
// delay it (Delay, Hold), refuse it with a status (Refuse), answer NOT_MASTER (NotMaster), drop
// its connection (DropConnection), or serve it and then lie about it (Broker.Serve).
//
// Everything a Cluster starts stops at the end of the test that made it.
package fakebroker

import (
	"cmp"
	"log/slog"
	"net"
	"os"
	"slices"
	"sync"
	"testing"

	"github.com/petrel-mq/petrel/protocol"
	"github.com/petrel-mq/petrel/protocol/rpc"
)

// ClusterName is the cluster every fake broker belongs to.
const ClusterName = "DefaultCluster"

// Cluster is a fake NameServer and the broker groups registered with it. Its methods are safe
// for concurrent use.
type Cluster struct {
	tb  testing.TB
	log *slog.Logger

	ns     *server
	nsAddr string

	mu           sync.Mutex // guards groups, unregistered, routeAsks
	groups       []*Group
	unregistered map[*Broker]bool
	routeAsks    map[string]int64 // route requests received, per topic
}

// Option configures a Cluster.
type Option func(*Cluster)

// WithLogger sets the logger of the NameServer's and the brokers' servers (connection errors).
// By default warnings go to the test's output, and everything when PETREL_TEST_DEBUG is set.
func WithLogger(l *slog.Logger) Option { return func(c *Cluster) { c.log = l } }

// New starts a fake NameServer on a free loopback port; AddGroup adds broker groups. It stops,
// with every broker, when the test ends.
func New(tb testing.TB, opts ...Option) *Cluster {
	tb.Helper()
	c := &Cluster{tb: tb, unregistered: map[*Broker]bool{}, routeAsks: map[string]int64{}}
	for _, o := range opts {
		o(c)
	}
	if c.log == nil {
		level := slog.LevelWarn
		if os.Getenv("PETREL_TEST_DEBUG") != "" {
			level = slog.LevelDebug
		}
		c.log = slog.New(slog.NewTextHandler(tb.Output(), &slog.HandlerOptions{Level: level}))
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatalf("fakebroker: %v", err)
	}
	c.nsAddr = ln.Addr().String()
	c.ns = serve(ln, func(req *rpc.Request) answer { return answer{rep: c.handle(req), v: Answer} }, c.log)
	tb.Cleanup(c.StopNameServer)
	return c
}

// Addr returns the NameServer's address, for a client's NameServer list.
func (c *Cluster) Addr() string { return c.nsAddr }

// StopNameServer closes the NameServer's listener and connections: its address refuses
// connections from then on.
func (c *Cluster) StopNameServer() { c.ns.close() }

// AddGroup starts a broker group: a master (brokerId 0) and slaves (brokerId 1..slaves), each on
// a free loopback port and registered, holding the given topics (name -> queue count).
func (c *Cluster) AddGroup(name string, slaves int, topics map[string]int32) *Group {
	c.tb.Helper()
	g := &Group{c: c, name: name, data: newStore()}
	for topic, n := range topics {
		g.CreateTopic(topic, n)
	}
	for id := int64(0); id <= int64(slaves); id++ {
		g.startMember(newBroker(g, id))
	}
	master := g.Master().Addr()
	for _, b := range g.Members()[1:] {
		b.mu.Lock()
		b.masterAddr = master
		b.mu.Unlock()
	}
	c.mu.Lock()
	c.groups = append(c.groups, g)
	c.mu.Unlock()
	return g
}

// RouteRequests returns how many times the NameServer was asked for the route of topic, found
// or not.
func (c *Cluster) RouteRequests(topic string) int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.routeAsks[topic]
}

// SetRegistered puts a broker in the NameServer's routes (registered) or leaves it out, as one
// that has not registered yet or whose registration expired, whether or not it is up.
func (c *Cluster) SetRegistered(b *Broker, registered bool) { c.setRegistered(b, registered) }

func (c *Cluster) setRegistered(b *Broker, registered bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if registered {
		delete(c.unregistered, b)
	} else {
		c.unregistered[b] = true
	}
}

// live returns the brokers the NameServer lists: up and registered, by group in the order the
// groups were added.
func (c *Cluster) live() []*Broker {
	c.mu.Lock()
	groups := slices.Clone(c.groups)
	unregistered := make(map[*Broker]bool, len(c.unregistered))
	for b := range c.unregistered {
		unregistered[b] = true
	}
	c.mu.Unlock()
	var out []*Broker
	for _, g := range groups {
		for _, b := range g.Members() {
			if b.Up() && !unregistered[b] {
				out = append(out, b)
			}
		}
	}
	return out
}

// handle serves a request to the NameServer.
func (c *Cluster) handle(req *rpc.Request) rpc.Reply {
	switch req.Code {
	case protocol.CodeGetRouteInfoByTopic:
		var h protocol.TopicHeader
		if err := h.ReadFrom(req.Header); err != nil {
			return rpc.Errorf(protocol.StatusRequestMalformed, "%v", err)
		}
		c.mu.Lock()
		c.routeAsks[h.Topic]++
		c.mu.Unlock()
		rd, ok := c.route(h.Topic)
		if !ok {
			return rpc.Errorf(protocol.StatusTopicNotExist, "no route for %s", h.Topic)
		}
		return rpc.Reply{Body: rd.AppendTo(nil)}
	case protocol.CodeGetBrokerClusterInfo:
		ci := c.clusterInfo()
		return rpc.Reply{Body: ci.AppendTo(nil)}
	}
	return rpc.Errorf(protocol.StatusRequestCodeNotSupported, "fakebroker NameServer: %s", req.Code)
}

// route builds a topic's route from the live brokers of the groups holding the topic.
func (c *Cluster) route(topic string) (protocol.TopicRouteData, bool) {
	var rd protocol.TopicRouteData
	for _, lg := range c.liveGroups() {
		tc, ok := lg.g.data.topic(topic)
		if !ok {
			continue
		}
		rd.QueueDatas = append(rd.QueueDatas, protocol.QueueData{BrokerName: lg.g.name, ReadQueueNums: tc.ReadQueueNums, WriteQueueNums: tc.WriteQueueNums, Perm: tc.Perm})
		rd.BrokerDatas = append(rd.BrokerDatas, lg.bd)
	}
	return rd, len(rd.BrokerDatas) > 0
}

// clusterInfo lists the live brokers of every group, sorted by group name.
func (c *Cluster) clusterInfo() protocol.ClusterInfo {
	ci := protocol.ClusterInfo{Clusters: []protocol.ClusterEntry{{Name: ClusterName}}}
	lgs := c.liveGroups()
	slices.SortFunc(lgs, func(a, b liveGroup) int { return cmp.Compare(a.g.name, b.g.name) })
	for _, lg := range lgs {
		ci.Brokers = append(ci.Brokers, lg.bd)
		ci.Clusters[0].BrokerNames = append(ci.Clusters[0].BrokerNames, lg.g.name)
	}
	return ci
}

// liveGroup is a group with a live broker, and its live brokers as the NameServer lists them.
type liveGroup struct {
	g  *Group
	bd protocol.BrokerData
}

// liveGroups returns the groups with a live broker, in the order they were added, each with its
// live brokers sorted by brokerId.
func (c *Cluster) liveGroups() []liveGroup {
	var out []liveGroup
	for _, b := range c.live() {
		if len(out) == 0 || out[len(out)-1].g != b.g {
			out = append(out, liveGroup{g: b.g, bd: protocol.BrokerData{Cluster: ClusterName, BrokerName: b.g.name}})
		}
		bd := &out[len(out)-1].bd
		bd.Addrs = append(bd.Addrs, protocol.BrokerAddr{BrokerID: b.id, Addr: b.Addr()})
	}
	for i := range out {
		slices.SortStableFunc(out[i].bd.Addrs, func(a, b protocol.BrokerAddr) int { return cmp.Compare(a.BrokerID, b.BrokerID) })
	}
	return out
}
