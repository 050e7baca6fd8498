package client

import (
	"cmp"
	"slices"
	"strconv"
	"time"

	"github.com/petrel-mq/petrel/protocol"
)

// MessageQueue names one queue: a queue id within a broker group's share of a topic.
type MessageQueue struct {
	// Topic is the topic's name.
	Topic string
	// BrokerName is the broker group (all its members hold the same queues).
	BrokerName string
	// QueueID is the queue's number within the group, from 0.
	QueueID int32
}

// String returns "topic@brokerName#queueId".
func (q MessageQueue) String() string {
	return q.Topic + "@" + q.BrokerName + "#" + strconv.Itoa(int(q.QueueID))
}

// topicRoute is an immutable snapshot of a topic's route with the queue lists derived from it.
type topicRoute struct {
	topic string
	data  protocol.TopicRouteData
	// groups maps brokerName to the group's members.
	groups map[string]*protocol.BrokerData
	// writeQueues lists, sorted by (brokerName, queueId), the queues of every group that has
	// write permission and a master.
	writeQueues []MessageQueue
	// readQueues lists, sorted the same way, the queues of every group with read permission
	// and at least one live member.
	readQueues []MessageQueue
	// masterless tells that a group with write permission has no master in the route: it is
	// failing over (the old master left the route before the new one registered), so the
	// producer refreshes the route soon instead of at the next periodic refresh.
	masterless bool
	// missing lists the groups an earlier route of the topic had and this one lacks (every
	// member down, or a NameServer that restarted and has not heard from them yet), with when
	// each was first missed; the producer refreshes the route every missingRefresh while one is
	// missing, for missingWatch at most, so a group coming back is used again within moments.
	missing map[string]time.Time
	fetched time.Time
}

// Refreshing a route that lost a group (topicRoute.missing).
const (
	missingRefresh = time.Second
	missingWatch   = 2 * time.Minute
)

// withMissing records in r the groups prev had (or missed) that r lacks; a group missed for
// longer than missingWatch is forgotten (it left for good). It returns r.
func (r *topicRoute) withMissing(prev *topicRoute) *topicRoute {
	if prev == nil {
		return r
	}
	note := func(g string, since time.Time) {
		if _, ok := r.groups[g]; ok || r.fetched.Sub(since) > missingWatch {
			return
		}
		if r.missing == nil {
			r.missing = map[string]time.Time{}
		}
		r.missing[g] = since
	}
	for g := range prev.groups {
		note(g, r.fetched)
	}
	for g, since := range prev.missing {
		note(g, since)
	}
	return r
}

func newTopicRoute(topic string, data protocol.TopicRouteData, now time.Time) *topicRoute {
	r := &topicRoute{topic: topic, data: data, groups: make(map[string]*protocol.BrokerData, len(data.BrokerDatas)), fetched: now}
	for i := range data.BrokerDatas {
		bd := &data.BrokerDatas[i]
		r.groups[bd.BrokerName] = bd
	}
	qds := slices.Clone(data.QueueDatas)
	slices.SortFunc(qds, func(a, b protocol.QueueData) int { return cmp.Compare(a.BrokerName, b.BrokerName) })
	for _, qd := range qds {
		bd := r.groups[qd.BrokerName]
		if bd == nil {
			continue
		}
		if qd.Perm&protocol.PermWrite != 0 && bd.MasterAddr() != "" {
			for id := int32(0); id < qd.WriteQueueNums; id++ {
				r.writeQueues = append(r.writeQueues, MessageQueue{Topic: topic, BrokerName: qd.BrokerName, QueueID: id})
			}
		} else if qd.Perm&protocol.PermWrite != 0 && qd.WriteQueueNums > 0 {
			r.masterless = true
		}
		if qd.Perm&protocol.PermRead != 0 && len(bd.Addrs) > 0 {
			for id := int32(0); id < qd.ReadQueueNums; id++ {
				r.readQueues = append(r.readQueues, MessageQueue{Topic: topic, BrokerName: qd.BrokerName, QueueID: id})
			}
		}
	}
	return r
}

// hasQueue reports whether q is one of the route's write queues (writeQueues is sorted by
// brokerName, then queue id).
func (r *topicRoute) hasQueue(q MessageQueue) bool {
	_, ok := slices.BinarySearchFunc(r.writeQueues, q, func(a, b MessageQueue) int {
		if c := cmp.Compare(a.BrokerName, b.BrokerName); c != 0 {
			return c
		}
		return cmp.Compare(a.QueueID, b.QueueID)
	})
	return ok
}

// masterAddr returns the address of the master of a broker group, or "".
func (r *topicRoute) masterAddr(brokerName string) string {
	if bd := r.groups[brokerName]; bd != nil {
		return bd.MasterAddr()
	}
	return ""
}

// pickBrokerAddr returns the address of member brokerID of the group, falling back to the master
// and then to any live member (the lowest id); ok is false when the group has no member. It is
// pickMember with every member usable.
func pickBrokerAddr(bd *protocol.BrokerData, brokerID int64) (addr string, id int64, ok bool) {
	addr, id, _, ok = pickMember(bd, brokerID, -1, nil)
	return addr, id, ok
}

// pickMember chooses the member of a broker group to read from: how a consumer follows a pull
// response's SuggestBrokerID. In order of preference, among the members usable says are
// usable (nil: all) and other than avoidID (the member that just answered "not here"; -1 for
// none): member want, the master, the member with the lowest id; then avoidID itself when
// usable. When no member is usable, fallback is true and the choice ignores usable and
// avoidID: want, else the master, else the lowest id (the caller backs off when it fails
// again). ok is false only when the group has no member. It does no I/O.
func pickMember(bd *protocol.BrokerData, want, avoidID int64, usable func(addr string) bool) (addr string, id int64, fallback, ok bool) {
	if bd == nil || len(bd.Addrs) == 0 {
		return "", 0, false, false
	}
	ok = true
	good := func(a *protocol.BrokerAddr) bool { return usable == nil || usable(a.Addr) }
	// pass 0: usable members but avoidID; pass 1: avoidID if usable; pass 2: any member.
	for pass := 0; pass < 3; pass++ {
		var wanted, master, lowest *protocol.BrokerAddr
		for i := range bd.Addrs {
			a := &bd.Addrs[i]
			switch pass {
			case 0:
				if a.BrokerID == avoidID || !good(a) {
					continue
				}
			case 1:
				if a.BrokerID != avoidID || !good(a) {
					continue
				}
			}
			if a.BrokerID == want {
				wanted = a
			}
			if a.BrokerID == 0 {
				master = a
			}
			if lowest == nil || a.BrokerID < lowest.BrokerID {
				lowest = a
			}
		}
		pick := cmp.Or(wanted, master, lowest)
		if pick != nil {
			return pick.Addr, pick.BrokerID, pass == 2, ok
		}
	}
	panic("BUG: pickMember found no member in a non-empty group")
}

// memberAddr returns the address of member id of the group, if it is live (in the route).
func memberAddr(bd *protocol.BrokerData, id int64) (string, bool) {
	if bd == nil {
		return "", false
	}
	for _, a := range bd.Addrs {
		if a.BrokerID == id {
			return a.Addr, true
		}
	}
	return "", false
}

// membersInOrder returns the group's members in the order a request that any member may
// answer (an offset commit, a start-offset lookup) tries them: the master, then the slaves by
// id, those usable says are usable (nil: all) before the others.
func membersInOrder(bd *protocol.BrokerData, usable func(addr string) bool) []protocol.BrokerAddr {
	if bd == nil {
		return nil
	}
	out := slices.Clone(bd.Addrs)
	rank := func(a protocol.BrokerAddr) int {
		if usable == nil || usable(a.Addr) {
			return 0
		}
		return 1
	}
	slices.SortStableFunc(out, func(x, y protocol.BrokerAddr) int {
		return cmp.Or(cmp.Compare(rank(x), rank(y)), cmp.Compare(x.BrokerID, y.BrokerID))
	})
	return out
}

// shardIndex maps a sharding key to a queue index in [0, n): 32-bit FNV-1a over the key. The queue list
// is sorted deterministically, so a key keeps its queue while the route does not change.
func shardIndex(key string, n int) int {
	return int(protocol.TagHash(unsafeBytes(key)) % uint32(n))
}

// selectQueue picks the queue for an unkeyed send: among the eligible queues, the one at index
// start modulo their number, so that successive starts (a round-robin counter) spread evenly
// over them whichever queues are left out. Eligible are, in order of preference: the queues of
// groups other than avoid (the one that just failed) that the fault tracker says are available
// and that roomy accepts (an asynchronous queue holding less than its share of the producer's
// buffer); then those queues whatever roomy says; then any queue of a group other than avoid;
// then any queue. available and roomy nil accept everything. ok is false only when queues is
// empty. It allocates nothing.
func selectQueue(queues []MessageQueue, start uint32, avoid string, available func(brokerName string) bool, roomy func(MessageQueue) bool) (MessageQueue, bool) {
	if len(queues) == 0 {
		return MessageQueue{}, false
	}
	eligible := func(tier int, q *MessageQueue) bool {
		switch tier {
		case 0:
			return q.BrokerName != avoid && (available == nil || available(q.BrokerName)) && (roomy == nil || roomy(*q))
		case 1:
			return q.BrokerName != avoid && (available == nil || available(q.BrokerName))
		case 2:
			return q.BrokerName != avoid
		}
		return true
	}
	for tier := 0; tier < 4; tier++ {
		if tier == 1 && roomy == nil {
			continue // the same as tier 0
		}
		n := uint32(0)
		for i := range queues {
			if eligible(tier, &queues[i]) {
				n++
			}
		}
		if n == 0 {
			continue
		}
		k := start % n
		for i := range queues {
			if eligible(tier, &queues[i]) {
				if k == 0 {
					return queues[i], true
				}
				k--
			}
		}
	}
	panic("BUG: selectQueue found no queue in a non-empty list")
}
