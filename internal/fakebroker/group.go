package fakebroker

import (
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/petrel-mq/petrel/protocol"
)

// Group is a broker group: a master (brokerId 0) and slaves serving one store. Its methods
// read and change that store directly, as a test arranging or inspecting what the brokers hold.
// They are safe for concurrent use.
type Group struct {
	c    *Cluster
	name string
	data *store

	mu      sync.Mutex // guards members
	members []*Broker
}

// Name returns the group's broker name.
func (g *Group) Name() string { return g.name }

// Members returns the group's brokers in the order they were added: the master AddGroup
// started first, then its slaves by brokerId, then those AddMember added.
func (g *Group) Members() []*Broker {
	g.mu.Lock()
	defer g.mu.Unlock()
	return slices.Clone(g.members)
}

// Master returns the broker AddGroup started as the group's master.
func (g *Group) Master() *Broker { return g.Members()[0] }

// AddMember starts another broker of the group with brokerId id, serving the group's store at
// a new address: a master that moved, or one that took over. Registered, it is in the routes at
// once; otherwise it is left out until Cluster.SetRegistered registers it.
func (g *Group) AddMember(id int64, registered bool) *Broker {
	b := newBroker(g, id)
	if id != 0 {
		b.masterAddr = g.Master().Addr()
	}
	if !registered {
		g.c.setRegistered(b, false)
	}
	g.startMember(b)
	return b
}

// startMember starts b and adds it to the group.
func (g *Group) startMember(b *Broker) {
	b.Start()
	g.c.tb.Cleanup(b.Stop)
	g.mu.Lock()
	g.members = append(g.members, b)
	g.mu.Unlock()
}

// CreateTopic creates (or replaces) a topic with queues read and write queues on the group.
func (g *Group) CreateTopic(topic string, queues int32) {
	g.data.createTopic(protocol.TopicConfig{Topic: topic, ReadQueueNums: queues, WriteQueueNums: queues, Perm: protocol.PermReadWrite})
}

// Append stores batch (a finished batch of protocol.BatchBuilder, say) at the end of its queue,
// as a send to the master would, and returns the queue offset of its first message.
func (g *Group) Append(batch []byte) (int64, error) {
	rep := g.data.append(batch)
	if rep.Status != protocol.StatusSuccess {
		return 0, fmt.Errorf("fakebroker: %s: %s", rep.Status, rep.Remark)
	}
	return rep.Header.(*protocol.SendResponseHeader).QueueOffset, nil
}

// Batches returns copies of the batches stored in a queue, in stored order.
func (g *Group) Batches(topic string, queueID int32) [][]byte {
	s := g.data
	s.mu.Lock()
	defer s.mu.Unlock()
	q := s.queues[queueKey{topic, queueID}]
	if q == nil {
		return nil
	}
	out := make([][]byte, len(q.batches))
	for i, b := range q.batches {
		out[i] = slices.Clone(b)
	}
	return out
}

// StoredBatches returns the number of batches stored in all queues of the group.
func (g *Group) StoredBatches() int {
	s := g.data
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for _, q := range s.queues {
		n += len(q.batches)
	}
	return n
}

// MaxOffset returns the offset the next message of a queue gets (its message count).
func (g *Group) MaxOffset(topic string, queueID int32) int64 {
	_, hi := g.data.queueOffsets(topic, queueID)
	return hi
}

// CommittedOffset returns a consumer group's committed offset of a queue, if it has one.
func (g *Group) CommittedOffset(consumerGroup, topic string, queueID int32) (int64, bool) {
	s := g.data
	s.mu.Lock()
	defer s.mu.Unlock()
	off, ok := s.offsets[offsetKey{consumerGroup, queueKey{topic, queueID}}]
	return off, ok
}

// Corrupt flips the last byte of the stored batch holding a queue offset, so that its CRC no
// longer matches: every member serves the damaged batch. It fails the test when no batch holds
// the offset.
func (g *Group) Corrupt(topic string, queueID int32, offset int64) {
	s := g.data
	s.mu.Lock()
	defer s.mu.Unlock()
	if q := s.queues[queueKey{topic, queueID}]; q != nil {
		for _, b := range q.batches {
			if h, err := protocol.ReadBatchHeader(b); err == nil && h.BaseQueueOffset <= offset && offset < h.NextQueueOffset() {
				b[len(b)-1] ^= 0xff
				return
			}
		}
	}
	g.c.tb.Fatalf("fakebroker: group %s holds no batch with offset %d of %s#%d", g.name, offset, topic, queueID)
}

// StoredMessage is one message of a queue, as Messages returns it and EditQueue stores it.
type StoredMessage struct {
	// QueueOffset is the message's offset in its queue.
	QueueOffset int64
	// ProducerID and Sequence are the producer's id and the message's sequence in its queue.
	ProducerID int64
	Sequence   int32
	// BornTimestamp is when the producer made the message (ms since the Unix epoch).
	BornTimestamp int64
	// Keys, Tags, Properties (encoded as protocol.AppendProperty does) and Body are the
	// message's fields.
	Keys       []byte
	Tags       []byte
	Properties []byte
	Body       []byte
}

// Messages returns copies of the messages stored in a queue, in offset order.
func (g *Group) Messages(topic string, queueID int32) []StoredMessage {
	var out []StoredMessage
	for _, b := range g.Batches(topic, queueID) {
		ms, err := DecodeBatches(b)
		if err != nil {
			g.c.tb.Fatalf("fakebroker: a stored batch of %s#%d: %v", topic, queueID, err)
		}
		out = append(out, ms...)
	}
	return out
}

// EditQueue replaces the messages of a queue with what edit returns for them (Messages' copies,
// which edit may change), as a log that went wrong after the fact: a message missing (a gap in
// the offsets), stored again at a later offset, damaged, or replaced by another. Each message
// is stored again as a batch of its own at its QueueOffset (EncodeMessage); the offsets must
// increase. The queue's max offset becomes the one after the last message. Consumers that
// already read the queue are not told.
func (g *Group) EditQueue(topic string, queueID int32, edit func(msgs []StoredMessage) []StoredMessage) {
	msgs := edit(g.Messages(topic, queueID))
	batches := make([][]byte, 0, len(msgs))
	for i, m := range msgs {
		if i > 0 && m.QueueOffset <= msgs[i-1].QueueOffset {
			g.c.tb.Fatalf("fakebroker: EditQueue of %s#%d: offset %d after %d", topic, queueID, m.QueueOffset, msgs[i-1].QueueOffset)
		}
		b, err := EncodeMessage(topic, queueID, m)
		if err != nil {
			g.c.tb.Fatalf("fakebroker: EditQueue of %s#%d: %v", topic, queueID, err)
		}
		batches = append(batches, b)
	}
	s := g.data
	s.mu.Lock()
	defer s.mu.Unlock()
	q := s.queueLocked(queueKey{topic, queueID})
	now := time.Now().UnixMilli()
	for i, b := range batches {
		protocol.StampBatch(b, s.phys, msgs[i].QueueOffset, now, 0)
		s.phys += int64(len(b))
	}
	q.batches = batches
	if len(msgs) > 0 {
		q.min, q.next = msgs[0].QueueOffset, msgs[len(msgs)-1].QueueOffset+1
	} else {
		q.next = q.min
	}
	close(s.notify)
	s.notify = make(chan struct{})
}

// DecodeBatches returns the messages of the batches of body (a stored batch, or the body of a
// pull answer), each batch checked as a consumer checks it.
func DecodeBatches(body []byte) ([]StoredMessage, error) {
	var out []StoredMessage
	for len(body) > 0 {
		h, _, err := protocol.ValidateBatch(body, protocol.BatchLimits{})
		if err != nil {
			return out, err
		}
		it := protocol.NewMessageIterator(body, h)
		for m, ok := it.Next(); ok; m, ok = it.Next() {
			out = append(out, StoredMessage{QueueOffset: m.QueueOffset, ProducerID: h.ProducerID, Sequence: m.Sequence, BornTimestamp: m.Timestamp,
				Keys: m.Keys, Tags: m.Tags, Properties: m.Properties, Body: m.Body})
		}
		body = body[h.Size:]
	}
	return out, nil
}

// EncodeMessage returns a batch of queue queueID of topic holding m alone, with m's producer id
// and sequence, stamped with m's queue offset: what a broker stores for it, or serves in a pull
// answer.
func EncodeMessage(topic string, queueID int32, m StoredMessage) ([]byte, error) {
	b := protocol.AppendBatchHeader(nil, topic, queueID, m.ProducerID, m.Sequence)
	pm := protocol.Message{Keys: m.Keys, Tags: m.Tags, Properties: m.Properties, Body: m.Body, Timestamp: m.BornTimestamp}
	if err := protocol.CheckMessage(b, 0, &pm); err != nil {
		return nil, err
	}
	b = protocol.FinishBatch(protocol.AppendMessage(b, 0, &pm), 0)
	protocol.StampBatch(b, 0, m.QueueOffset, time.Now().UnixMilli(), 0)
	return b, nil
}
