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
	fetched    time.Time
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
		}
		if qd.Perm&protocol.PermRead != 0 && len(bd.Addrs) > 0 {
			for id := int32(0); id < qd.ReadQueueNums; id++ {
				r.readQueues = append(r.readQueues, MessageQueue{Topic: topic, BrokerName: qd.BrokerName, QueueID: id})
			}
		}
	}
	return r
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
// how a consumer follows a pull response's SuggestBrokerID.
func pickBrokerAddr(bd *protocol.BrokerData, brokerID int64) (addr string, id int64, ok bool) {
	if bd == nil || len(bd.Addrs) == 0 {
		return "", 0, false
	}
	var master, lowest *protocol.BrokerAddr
	for i := range bd.Addrs {
		a := &bd.Addrs[i]
		if a.BrokerID == brokerID {
			return a.Addr, a.BrokerID, true
		}
		if a.BrokerID == 0 {
			master = a
		}
		if lowest == nil || a.BrokerID < lowest.BrokerID {
			lowest = a
		}
	}
	if master != nil {
		return master.Addr, 0, true
	}
	return lowest.Addr, lowest.BrokerID, true
}

// shardIndex maps a sharding key to a queue index in [0, n): 32-bit FNV-1a over the key. The queue list
// is sorted deterministically, so a key keeps its queue while the route does not change.
func shardIndex(key string, n int) int {
	return int(protocol.TagHash(unsafeBytes(key)) % uint32(n))
}

// selectQueue picks the queue for an unkeyed send: round-robin from start over queues, skipping
// groups the fault tracker says to avoid and the group avoid (the one that just failed). When
// every group is to be avoided it falls back to a group other than avoid, then to any queue. ok
// is false only when queues is empty.
func selectQueue(queues []MessageQueue, start uint32, avoid string, available func(brokerName string) bool) (MessageQueue, bool) {
	n := uint32(len(queues))
	if n == 0 {
		return MessageQueue{}, false
	}
	for i := uint32(0); i < n; i++ {
		q := queues[(start+i)%n]
		if q.BrokerName != avoid && (available == nil || available(q.BrokerName)) {
			return q, true
		}
	}
	for i := uint32(0); i < n; i++ {
		q := queues[(start+i)%n]
		if q.BrokerName != avoid {
			return q, true
		}
	}
	return queues[start%n], true
}
