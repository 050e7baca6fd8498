package broker

import (
	"sort"
	"sync"
	"time"

	"github.com/petrel-mq/petrel/protocol"
	"github.com/petrel-mq/petrel/protocol/rpc"
)

// consumerTable is the broker's view of live consumer clients per group (RocketMQ's
// ConsumerManager): clients heartbeat every broker of their topic, and consumers of one group
// read the sorted client list to share the queues among themselves. A client leaves when it
// unregisters, when its connection closes, or after ChannelExpiredTimeout without heartbeat.
// A connection registers at most maxConsumerClientsPerConn clients (group and client id
// pairs), so that heartbeats naming ever new ones leave a table bounded by the connections.
type consumerTable struct {
	mu     sync.Mutex // guards groups and perConn; a leaf
	groups map[string]map[string]*consumerClient
	// perConn counts the clients that last heartbeat on each connection.
	perConn map[*connState]int
}

// maxConsumerClientsPerConn caps the consumer clients one connection registers: a client
// process heartbeats one client id per consumer group it runs, on one connection per broker.
const maxConsumerClientsPerConn = 1024

type consumerClient struct {
	topic    string
	conn     *connState
	lastSeen time.Time
}

func newConsumerTable() *consumerTable {
	return &consumerTable{groups: map[string]map[string]*consumerClient{}, perConn: map[*connState]int{}}
}

// heartbeat records that the client is alive; it reports whether the client is new, and
// refused when it is new and its connection already registered maxConsumerClientsPerConn.
func (t *consumerTable) heartbeat(cs *connState, h *protocol.ConsumerHeartbeatHeader, now time.Time) (isNew, refused bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	c, ok := t.groups[h.ConsumerGroup][h.ClientID]
	if !ok {
		if t.perConn[cs] >= maxConsumerClientsPerConn {
			return false, true
		}
		g := t.groups[h.ConsumerGroup]
		if g == nil {
			g = map[string]*consumerClient{}
			t.groups[h.ConsumerGroup] = g
		}
		c = &consumerClient{}
		g[h.ClientID] = c
	}
	if c.conn != cs {
		t.uncountLocked(c.conn)
		t.perConn[cs]++
	}
	c.topic, c.conn, c.lastSeen = h.Topic, cs, now
	return !ok, false
}

// uncountLocked takes one client off cs's count (nil: a client not counted yet). Caller holds mu.
func (t *consumerTable) uncountLocked(cs *connState) {
	if cs == nil {
		return
	}
	if t.perConn[cs] <= 1 {
		delete(t.perConn, cs)
		return
	}
	t.perConn[cs]--
}

func (t *consumerTable) unregister(group, clientID string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if g := t.groups[group]; g != nil {
		if c := g[clientID]; c != nil {
			t.uncountLocked(c.conn)
		}
		delete(g, clientID)
		if len(g) == 0 {
			delete(t.groups, group)
		}
	}
}

// list returns the client ids of a group, sorted; with a topic, only the clients that
// subscribe to it (consumers share the queues of their own topic).
func (t *consumerTable) list(group, topic string) []string {
	t.mu.Lock()
	defer t.mu.Unlock()
	ids := make([]string, 0, len(t.groups[group]))
	for id, c := range t.groups[group] {
		if topic != "" && c.topic != topic {
			continue
		}
		ids = append(ids, id)
	}
	sort.Strings(ids)
	return ids
}

// remove drops the clients that heartbeat on cs (nil: none) or were last seen before deadline.
func (t *consumerTable) remove(cs *connState, deadline time.Time) (removed []string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for group, g := range t.groups {
		for id, c := range g {
			if (cs != nil && c.conn == cs) || c.lastSeen.Before(deadline) {
				t.uncountLocked(c.conn)
				delete(g, id)
				removed = append(removed, group+"/"+id)
			}
		}
		if len(g) == 0 {
			delete(t.groups, group)
		}
	}
	return removed
}

// replyHeartbeat serves CodeHeartbeat and CodeUnregisterClient.
func (b *Broker) replyHeartbeat(req request) rpc.Reply {
	var h protocol.ConsumerHeartbeatHeader
	if err := h.ReadFrom(req.header); err != nil {
		return req.malformed(err)
	}
	if err := protocol.ValidateGroup([]byte(h.ConsumerGroup)); err != nil || h.ClientID == "" {
		return rpc.Errorf(protocol.StatusRequestMalformed, "heartbeat needs a client id and a valid group: %v", err)
	}
	if req.code == protocol.CodeUnregisterClient {
		b.consumers.unregister(h.ConsumerGroup, h.ClientID)
		b.warn.Info(b.log, "consumer client unregistered", "group", h.ConsumerGroup, "client", h.ClientID, "remote", req.cs.remote)
		return rpc.Reply{}
	}
	isNew, refused := b.consumers.heartbeat(req.cs, &h, time.Now())
	if refused {
		b.warn.Warn(b.log, "refusing a consumer heartbeat: its connection registered too many consumer clients",
			"group", h.ConsumerGroup, "client", h.ClientID, "remote", req.cs.remote, "max", maxConsumerClientsPerConn)
		return rpc.Errorf(protocol.StatusNoPermission, "this connection registered %d consumer clients (group and client id pairs), the most one may", maxConsumerClientsPerConn)
	}
	if isNew {
		b.warn.Info(b.log, "consumer client registered", "group", h.ConsumerGroup, "client", h.ClientID, "topic", h.Topic, "remote", req.cs.remote)
	}
	return rpc.Reply{}
}

// replyConsumerList serves CodeGetConsumerListByGroup.
func (b *Broker) replyConsumerList(req request) rpc.Reply {
	var h protocol.GroupHeader
	if err := h.ReadFrom(req.header); err != nil {
		return req.malformed(err)
	}
	l := protocol.StringList{Items: b.consumers.list(h.ConsumerGroup, h.Topic)}
	return rpc.Reply{Body: l.AppendTo(nil)}
}
