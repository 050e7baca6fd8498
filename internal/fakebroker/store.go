package fakebroker

import (
	"cmp"
	"slices"
	"sync"
	"time"

	"github.com/petrel-mq/petrel/protocol"
	"github.com/petrel-mq/petrel/protocol/rpc"
)

type queueKey struct {
	topic string
	id    int32
}

type offsetKey struct {
	group string
	queueKey
}

// store is a broker group's data. Every member serves the same store: replication is perfect
// and instant, and a slave lags only as far as Broker.SetReplicatedUpTo says.
type store struct {
	mu      sync.Mutex // guards every field below
	topics  map[string]protocol.TopicConfig
	queues  map[queueKey]*queue
	offsets map[offsetKey]int64
	phys    int64         // physical offset of the next batch
	notify  chan struct{} // closed and replaced on every append, waking held pulls
}

// queue is one queue's batches, as stored (stamped with their offsets).
type queue struct {
	batches [][]byte
	min     int64 // offset of the first stored message
	next    int64 // offset the next message gets
}

func newStore() *store {
	return &store{
		topics:  map[string]protocol.TopicConfig{},
		queues:  map[queueKey]*queue{},
		offsets: map[offsetKey]int64{},
		notify:  make(chan struct{}),
	}
}

// queueLocked returns the queue, created empty if it has none yet. Lock should be held.
func (s *store) queueLocked(k queueKey) *queue {
	q := s.queues[k]
	if q == nil {
		q = &queue{}
		s.queues[k] = q
	}
	return q
}

func (s *store) createTopic(tc protocol.TopicConfig) {
	s.mu.Lock()
	s.topics[tc.Topic] = tc
	s.mu.Unlock()
}

func (s *store) topic(name string) (protocol.TopicConfig, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	tc, ok := s.topics[name]
	return tc, ok
}

// append validates a batch as the broker does and stores it at the end of its queue.
func (s *store) append(body []byte) rpc.Reply {
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
	if h.QueueID < 0 || h.QueueID >= tc.WriteQueueNums {
		return rpc.Errorf(protocol.StatusQueueNotExist, "queue %d", h.QueueID)
	}
	q := s.queueLocked(queueKey{string(h.Topic), h.QueueID})
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

// commitLocked records a consumer group's offset. A slave merges it into the master's (the
// larger wins), as the real broker's offset sync does; a master takes it as it is. Lock should
// be held.
func (s *store) commitLocked(k offsetKey, offset int64, slave bool) {
	if cur, ok := s.offsets[k]; !ok || !slave || offset > cur {
		s.offsets[k] = offset
	}
}

// member is how one broker of the group serves a pull: as the master, or as a slave holding the
// queue offsets below hasUpTo (-1: everything) whose link to the master is up when linked.
type member struct {
	slave   bool
	hasUpTo int64
	linked  bool
}

// startPull commits the offset a pull carries and answers it if it can at once. Otherwise wait
// is not nil: it holds the pull, as the real broker's long polling does, until a batch is
// appended, the pull's poll timeout passes or stop is closed, and answers it.
func (s *store) startPull(h *protocol.PullRequestHeader, m member) (rep rpc.Reply, wait func(stop <-chan struct{}) rpc.Reply) {
	deadline := time.Now().Add(time.Duration(h.PollTimeoutMs) * time.Millisecond)
	if h.CommitOffset >= 0 {
		s.mu.Lock()
		s.commitLocked(offsetKey{h.ConsumerGroup, queueKey{h.Topic, h.QueueID}}, h.CommitOffset, m.slave)
		s.mu.Unlock()
	}
	rep, notify := s.tryPull(h, m)
	if notify == nil || !time.Now().Before(deadline) {
		return rep, nil
	}
	return rpc.Reply{}, func(stop <-chan struct{}) rpc.Reply {
		for {
			t := time.NewTimer(time.Until(deadline))
			select {
			case <-notify:
			case <-t.C:
			case <-stop:
			}
			t.Stop()
			rep, notify = s.tryPull(h, m)
			if notify == nil || !time.Now().Before(deadline) {
				return rep
			}
			select {
			case <-stop:
				return rep
			default:
			}
		}
	}
}

// tryPull answers a pull as m with what the queue holds now. notify is not nil when it found
// nothing new (rep then says so): it is closed at the next append.
func (s *store) tryPull(h *protocol.PullRequestHeader, m member) (rep rpc.Reply, notify <-chan struct{}) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.topics[h.Topic]; !ok {
		return rpc.Errorf(protocol.StatusTopicNotExist, "topic %s", h.Topic), nil
	}
	q := s.queues[queueKey{h.Topic, h.QueueID}]
	if q == nil {
		q = &queue{}
	}
	end := q.next
	if m.slave && m.hasUpTo >= 0 && m.hasUpTo < end {
		// A slave replicates whole batches: it holds up to the last batch ending by hasUpTo.
		end = q.min
		for _, b := range q.batches {
			if bh, _ := protocol.ReadBatchHeader(b); bh.NextQueueOffset() <= m.hasUpTo {
				end = bh.NextQueueOffset()
			}
		}
	}
	rh := &protocol.PullResponseHeader{MinOffset: q.min, MaxOffset: end, NextQueueOffset: h.QueueOffset}
	// A slave never moves a consumer's offset: past what it holds, or at its end while the
	// master may hold more, it sends the consumer to the master.
	if m.slave && (h.QueueOffset > end || (h.QueueOffset == end && m.linked)) {
		rh.Result = protocol.PullNotHere
		return rpc.Reply{Header: rh}, nil
	}
	if h.QueueOffset < q.min || h.QueueOffset > end {
		rh.Result = protocol.PullOffsetMoved
		rh.NextQueueOffset = min(max(h.QueueOffset, q.min), end)
		return rpc.Reply{Header: rh}, nil
	}
	var body []byte
	var msgs int32
	for _, b := range q.batches {
		bh, err := protocol.ReadBatchHeader(b)
		if err != nil {
			panic(err) // stored batches were validated
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
	if len(body) > 0 {
		rh.Result = protocol.PullFound
		return rpc.Reply{Header: rh, Body: body}, nil
	}
	rh.Result = protocol.PullNoNewMessage
	return rpc.Reply{Header: rh}, s.notify
}

// queueOffsets returns the min and max offsets of a queue (0, 0 for one that holds nothing).
func (s *store) queueOffsets(topic string, queueID int32) (minOffset, maxOffset int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if q := s.queues[queueKey{topic, queueID}]; q != nil {
		return q.min, q.next
	}
	return 0, 0
}

func (s *store) topicStats(topic string) (protocol.TopicStatsTable, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	tc, ok := s.topics[topic]
	if !ok {
		return protocol.TopicStatsTable{}, false
	}
	var st protocol.TopicStatsTable
	for id := int32(0); id < tc.WriteQueueNums; id++ {
		qs := protocol.QueueStats{QueueID: id}
		if q := s.queues[queueKey{topic, id}]; q != nil {
			qs.MinOffset, qs.MaxOffset = q.min, q.next
		}
		st.Queues = append(st.Queues, qs)
	}
	return st, true
}

func (s *store) consumeStats(group, topic string) protocol.ConsumeStats {
	s.mu.Lock()
	defer s.mu.Unlock()
	var cs protocol.ConsumeStats
	for k, off := range s.offsets {
		if k.group != group || (topic != "" && k.topic != topic) {
			continue
		}
		var maxOffset int64
		if q := s.queues[k.queueKey]; q != nil {
			maxOffset = q.next
		}
		cs.Queues = append(cs.Queues, protocol.ConsumeQueueStats{Topic: k.topic, QueueID: k.id, BrokerOffset: maxOffset, ConsumerOffset: off})
	}
	slices.SortFunc(cs.Queues, func(a, b protocol.ConsumeQueueStats) int {
		return cmp.Or(cmp.Compare(a.Topic, b.Topic), cmp.Compare(a.QueueID, b.QueueID))
	})
	return cs
}

func (s *store) topicConfigs() protocol.TopicConfigList {
	s.mu.Lock()
	defer s.mu.Unlock()
	var l protocol.TopicConfigList
	for _, tc := range s.topics {
		l.Topics = append(l.Topics, tc)
	}
	slices.SortFunc(l.Topics, func(a, b protocol.TopicConfig) int { return cmp.Compare(a.Topic, b.Topic) })
	return l
}
