package bench

import (
	"context"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/petrel-mq/petrel/client"
	"github.com/petrel-mq/petrel/internal/fakebroker"
	"github.com/petrel-mq/petrel/protocol"
	"github.com/petrel-mq/petrel/protocol/rpc"
)

// The tests of the run drive the bench's Petrel driver (petrelCluster, the real client) against
// internal/fakebroker: a NameServer and one broker group, "fake", answering the binary protocol
// on loopback. The fate of a send is decided at the group's master, batch by batch (fault);
// what the protocol cannot carry, a SendAsync refused at once or the counts of OFFSET_MOVED
// answers a consumer followed, the driver's test hooks (hookedCluster) make.

// fakeGroup is the name of the fake cluster's broker group.
const fakeGroup = "fake"

// fault is what happens to one batch sent to the fake group's master.
type fault int

const (
	faultNone           fault = iota
	faultFail                 // not stored; a definite error
	faultPhantom              // stored, but a definite error
	faultUnknownStored        // stored; the answer says unconfirmed (an unknown outcome)
	faultUnknownDropped       // not stored; the answer says unconfirmed (an unknown outcome)
	faultLose                 // acknowledged, never stored
	faultDuplicate            // stored twice
	faultCorrupt              // stored with a damaged body (and a valid CRC)
)

// fakeBench is a fake cluster with the broker group "fake" and the test hooks of the driver
// runs use on it.
type fakeBench struct {
	fc  *fakebroker.Cluster
	g   *fakebroker.Group
	log *slog.Logger

	finalRead sync.Once // runs beforeFinalRead

	mu sync.Mutex // guards every field below
	// fault decides the fate of each batch the master gets: n is its number among the batches
	// sent to the master (from 0), resend whether it holds a message sent again by the bench
	// (attempt > 0). nil: none.
	fault   func(n int, resend bool) fault
	batches int
	// refuse, when set, makes SendAsync of the n-th message (from 0, over the run's producers;
	// first attempts only) fail at once.
	refuse func(n int) bool
	asyncs int
	// beforeFinalRead, when set, runs once, at the final read's first request.
	beforeFinalRead func()
	// movedSet makes the driver report moved and movedBack as the consumers' OFFSET_MOVED
	// counts (cluster.offsetMoves).
	movedSet         bool
	moved, movedBack int64
	// bounds, when set, replaces the queue bounds of the topics it holds.
	bounds map[string][]queueBound
	// pulled is, for each queue and consumer group, the highest offset a pull of the group
	// asked for: everything below it was delivered to the group.
	pulled map[pulledKey]int64
}

// pulledKey is a consumer group's queue.
type pulledKey struct {
	topic   string
	queueID int32
	group   string
}

// fakeSubscriptions is the subscription count of fakeWorkload's topics.
const fakeSubscriptions = 2

// newFakeBench starts a fake cluster whose group "fake" has a master and slaves slaves and
// holds topics (name -> queue count).
func newFakeBench(t *testing.T, slaves int, topics map[string]int32) *fakeBench {
	t.Helper()
	fb := &fakeBench{fc: fakebroker.New(t), log: testLogger(t), pulled: map[pulledKey]int64{}}
	fb.g = fb.fc.AddGroup(fakeGroup, slaves, topics)
	fb.g.Master().Control(protocol.CodeSendMessage, fb.onSend)
	fb.g.Master().ControlPull(func(h *protocol.PullRequestHeader) (rpc.Reply, fakebroker.Verdict) {
		if h.ConsumerGroup != "" {
			k := pulledKey{h.Topic, h.QueueID, h.ConsumerGroup}
			fb.mu.Lock()
			fb.pulled[k] = max(fb.pulled[k], h.QueueOffset)
			fb.mu.Unlock()
		}
		return rpc.Reply{}, fakebroker.Pass
	})
	return fb
}

// waitConsumed waits until every subscription has pulled every queue it pulls to its end (at
// most 5 s).
func (fb *fakeBench) waitConsumed() {
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(time.Millisecond) {
		fb.mu.Lock()
		past := map[pulledKey]int{} // by queue (group "")
		for k, off := range fb.pulled {
			q := pulledKey{k.topic, k.queueID, ""}
			past[q] += 0
			if off >= fb.g.MaxOffset(k.topic, k.queueID) {
				past[q]++
			}
		}
		fb.mu.Unlock()
		done := len(past) > 0
		for _, n := range past {
			done = done && n >= fakeSubscriptions
		}
		if done {
			return
		}
	}
}

// storeDelivered stores req on the master, as the faults that store what the producer is not
// told of (a batch stored but not acknowledged, a second copy), and waits until the
// subscriptions of its topic have pulled past it (at most 5 s): what was stored in the run is
// delivered in the run, also at the end of a queue, where no acknowledged message follows it
// for the drain to wait for.
func (fb *fakeBench) storeDelivered(req *rpc.Request) {
	rep := fb.master().Serve(req)
	sh, ok := rep.Header.(*protocol.SendResponseHeader)
	if !ok {
		return
	}
	h, _ := protocol.ReadBatchHeader(req.Body)
	next := sh.QueueOffset + int64(sh.Count)
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(time.Millisecond) {
		fb.mu.Lock()
		past := 0
		for k, off := range fb.pulled {
			if k.topic == string(h.Topic) && k.queueID == h.QueueID && off >= next {
				past++
			}
		}
		fb.mu.Unlock()
		if past >= fakeSubscriptions {
			return
		}
	}
}

func (fb *fakeBench) master() *fakebroker.Broker { return fb.g.Master() }

// setFault sets the fate of the batches sent to the master from now on.
func (fb *fakeBench) setFault(f func(n int, resend bool) fault) {
	fb.mu.Lock()
	fb.fault = f
	fb.mu.Unlock()
}

// every applies f to every k-th batch, unless it holds a resend: resends always succeed.
func every(k int, f fault) func(n int, resend bool) fault {
	return func(n int, resend bool) fault {
		if n%k == k-1 && !resend {
			return f
		}
		return faultNone
	}
}

// refuseEvery makes every k-th SendAsync of a first attempt fail at once.
func refuseEvery(k int) func(fb *fakeBench) {
	return func(fb *fakeBench) {
		fb.mu.Lock()
		fb.refuse = func(n int) bool { return n%k == k-1 }
		fb.mu.Unlock()
	}
}

// swapOnce makes the master answer one consumer's pull, the first that finds two messages or
// more, with its first two messages swapped: each in a batch of its own at its own offset, the
// later one first, so that the consumer delivers them out of order. Until then each pull waits
// (up to 100 ms) for its queue to hold two messages past the offset pulled.
func (fb *fakeBench) swapOnce() {
	var done atomic.Bool
	master := fb.master()
	master.Control(protocol.CodePullMessage, func(req *rpc.Request) (rpc.Reply, fakebroker.Verdict) {
		var h protocol.PullRequestHeader
		if done.Load() || h.ReadFrom(req.Header) != nil || h.ConsumerGroup == "" {
			return rpc.Reply{}, fakebroker.Pass
		}
		for deadline := time.Now().Add(100 * time.Millisecond); fb.g.MaxOffset(h.Topic, h.QueueID) < h.QueueOffset+2 && time.Now().Before(deadline); {
			time.Sleep(time.Millisecond)
		}
		rep := master.Serve(req)
		if ph, ok := rep.Header.(*protocol.PullResponseHeader); !ok || ph.Result != protocol.PullFound {
			return rep, fakebroker.Answer
		}
		msgs, err := fakebroker.DecodeBatches(rep.Body)
		msgs = slices.DeleteFunc(msgs, func(m fakebroker.StoredMessage) bool { return m.QueueOffset < h.QueueOffset })
		if err != nil || len(msgs) < 2 || !done.CompareAndSwap(false, true) {
			return rep, fakebroker.Answer
		}
		msgs[0], msgs[1] = msgs[1], msgs[0]
		var body []byte
		for _, m := range msgs {
			b, err := fakebroker.EncodeMessage(h.Topic, h.QueueID, m)
			if err != nil {
				return rpc.Errorf(protocol.StatusSystemError, "fake: %v", err), fakebroker.Answer
			}
			body = append(body, b...)
		}
		rep.Body = body
		return rep, fakebroker.Answer
	})
}

// onSend is the master's control function: it carries out the fault of each batch.
func (fb *fakeBench) onSend(req *rpc.Request) (rpc.Reply, fakebroker.Verdict) {
	msgs, err := fakebroker.DecodeBatches(req.Body)
	if err != nil || len(msgs) == 0 {
		return rpc.Reply{}, fakebroker.Pass // the broker answers it malformed
	}
	resend := false
	for _, m := range msgs {
		if id, err := ParseIdentity(m.Properties); err == nil && id.Attempt > 0 {
			resend = true
		}
	}
	fb.mu.Lock()
	n := fb.batches
	fb.batches++
	f := faultNone
	if fb.fault != nil {
		f = fb.fault(n, resend)
	}
	fb.mu.Unlock()
	master := fb.master()
	switch f {
	case faultFail:
		return rpc.Errorf(protocol.StatusMessageIllegal, "refused by the fake"), fakebroker.Answer
	case faultPhantom:
		fb.storeDelivered(req)
		return rpc.Errorf(protocol.StatusMessageIllegal, "stored, then refused, by the fake"), fakebroker.Answer
	case faultUnknownStored:
		fb.storeDelivered(req)
		return rpc.Errorf(protocol.StatusFlushSlaveTimeout, "stored by the fake, not confirmed"), fakebroker.Answer
	case faultUnknownDropped:
		return rpc.Errorf(protocol.StatusFlushSlaveTimeout, "dropped by the fake"), fakebroker.Answer
	case faultLose:
		h, _ := protocol.ReadBatchHeader(req.Body)
		// A position nobody will fill with these messages.
		at := fb.g.MaxOffset(string(h.Topic), h.QueueID)
		return rpc.Reply{Header: &protocol.SendResponseHeader{QueueID: h.QueueID, QueueOffset: at, Count: h.Count, StoreTimestamp: time.Now().UnixMilli()}}, fakebroker.Answer
	case faultDuplicate:
		rep := master.Serve(req)
		fb.storeDelivered(req)
		return rep, fakebroker.Answer
	case faultCorrupt:
		b := slices.Clone(req.Body)
		b[len(b)-1] ^= 0xff // the last byte of the last message's body
		protocol.FinishBatch(b, 0)
		return master.Serve(&rpc.Request{Code: req.Code, Header: req.Header, Body: b}), fakebroker.Answer
	}
	return rpc.Reply{}, fakebroker.Pass
}

// driver returns the bench's Petrel driver on the fake cluster, with fb's hooks.
func (fb *fakeBench) driver(ctx context.Context, readBrokerID int64) (*hookedCluster, error) {
	pc, err := newPetrelCluster(ctx, fb.fc.Addr(), clusterOptions{readBrokerID: readBrokerID}, fb.log)
	if err != nil {
		return nil, err
	}
	return &hookedCluster{petrelCluster: pc, fb: fb}, nil
}

// hookedCluster is the Petrel driver with the hooks of a fakeBench.
type hookedCluster struct {
	*petrelCluster
	fb *fakeBench
}

func (c *hookedCluster) newProducer() (producer, error) {
	p, err := c.petrelCluster.newProducer()
	if err != nil {
		return nil, err
	}
	return refusingProducer{producer: p, fb: c.fb}, nil
}

func (c *hookedCluster) offsetMoves() (moved, back int64) {
	c.fb.mu.Lock()
	set, moved, back := c.fb.movedSet, c.fb.moved, c.fb.movedBack
	c.fb.mu.Unlock()
	if set {
		return moved, back
	}
	return c.petrelCluster.offsetMoves()
}

func (c *hookedCluster) queueBounds(ctx context.Context, topic string) ([]queueBound, error) {
	c.fb.mu.Lock()
	b, ok := c.fb.bounds[topic]
	c.fb.mu.Unlock()
	if ok {
		return b, nil
	}
	return c.petrelCluster.queueBounds(ctx, topic)
}

// finalReadStarts runs beforeFinalRead once, the final read's other requests waiting for it
// to return.
func (c *hookedCluster) finalReadStarts() {
	c.fb.finalRead.Do(func() {
		c.fb.mu.Lock()
		f := c.fb.beforeFinalRead
		c.fb.mu.Unlock()
		if f != nil {
			f()
		}
	})
}

func (c *hookedCluster) memberAddr(ctx context.Context, topic, group string, brokerID int64) (string, error) {
	c.finalReadStarts()
	return c.petrelCluster.memberAddr(ctx, topic, group, brokerID)
}

func (c *hookedCluster) pull(ctx context.Context, addr string, q QueueRef, offset int64, n int32) (*client.PullAnswer, error) {
	c.finalReadStarts()
	return c.petrelCluster.pull(ctx, addr, q, offset, n)
}

// refusingProducer fails the SendAsync calls its fakeBench's refuse picks, before the client
// sees them.
type refusingProducer struct {
	producer
	fb *fakeBench
}

func (p refusingProducer) SendAsync(ctx context.Context, m *client.Message, cb func(client.SendResult, error)) error {
	var props []byte
	for _, k := range slices.Sorted(maps.Keys(m.Properties)) {
		props = protocol.AppendProperty(props, k, m.Properties[k])
	}
	if id, err := ParseIdentity(props); err == nil && id.Attempt == 0 {
		p.fb.mu.Lock()
		n := p.fb.asyncs
		p.fb.asyncs++
		refuse := p.fb.refuse != nil && p.fb.refuse(n)
		p.fb.mu.Unlock()
		if refuse {
			return fmt.Errorf("%w: refused by the test", client.ErrNoQueue)
		}
	}
	return p.producer.SendAsync(ctx, m, cb)
}

// reportLag makes b answer GET_HA_STATUS as a master whose slaves (the group's other members)
// lag: slave i by i*lagBytes bytes and i ms, having been sent 3 raw bytes per wire byte. calls
// counts the requests answered.
func (fb *fakeBench) reportLag(b *fakebroker.Broker, lagBytes int64, calls *atomic.Int64) {
	b.Control(protocol.CodeGetHAStatus, func(*rpc.Request) (rpc.Reply, fakebroker.Verdict) {
		n := calls.Add(1)
		st := protocol.HAStatus{Role: "SYNC_MASTER", KnownConfirmed: -1}
		for _, s := range fb.g.Members() {
			if i := s.ID(); i > 0 {
				st.Slaves = append(st.Slaves, protocol.SlaveStatus{BrokerID: i, Addr: s.Addr(), LagBytes: i * lagBytes, LagMs: i,
					InSync: true, Connected: true, RawBytes: n * 300, WireBytes: n * 100})
			}
		}
		return rpc.Reply{Body: st.AppendTo(nil)}, fakebroker.Answer
	})
}
