package bench

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/petrel-mq/petrel/client"
	"github.com/petrel-mq/petrel/protocol"
)

// queueReader is what the final read needs of a cluster: petrelCluster and the tests' fake
// have it; the NATS driver does not (a stream cannot be read on one replica alone), and its
// runs have no final read.
type queueReader interface {
	// memberAddr returns the address of member brokerID (0: the master) of broker group group,
	// as the NameServers' route of topic lists it now; an error when it lists none.
	memberAddr(ctx context.Context, topic, group string, brokerID int64) (string, error)
	// pull reads queue q once at offset from the broker at addr, up to max messages
	// (client.Admin.Pull: a nil answer with an error when there was none).
	pull(ctx context.Context, addr string, q QueueRef, offset int64, max int32) (*client.PullAnswer, error)
}

var _ queueReader = (*petrelCluster)(nil)

// Settings of the final read.
const (
	finalReadBatch   = 1024 // messages per pull
	finalReadWorkers = 4    // queues read at once
	finalReadMaxWait = 200 * time.Millisecond
)

// finalRead reads every read queue of the run's topics on each group's master and, when
// reads are pinned to a slave (ReadBrokerID > 0), on that member of each group, from the
// queue's min offset (or the lowest offset this run can have used) to the master's max
// offset, and hands every message to the Verifier (see verify_final.go). A slave that has not
// replicated an offset yet, a member that does not answer, or a route that lists no such
// member is asked again until it answers or nothing has progressed for DrainTimeout; once the
// read of a member gave up on one queue, its queues not started yet are not waited for (a
// member replicates its whole log, not a queue at a time). It returns the reason when the
// cluster cannot be read this way ("" otherwise).
func (r *runner) finalRead() string {
	qr, ok := r.cl.(queueReader)
	if !ok {
		return "not done: the " + r.cfg.Driver + " driver cannot read the queues of one member"
	}
	members := []int64{0}
	if id := r.cfg.readBrokerID(); id > 0 {
		members = append(members, id)
	}
	ctx := context.Background()
	patience := r.cfg.DrainTimeout
	start := time.Now()
	var queues []QueueRef
	for _, topic := range r.topics {
		deadline := time.Now().Add(patience)
		for wait := 10 * time.Millisecond; ; wait = min(2*wait, finalReadMaxWait) {
			bs, err := r.cl.queueBounds(ctx, topic)
			if err == nil {
				for _, b := range bs {
					queues = append(queues, b.q)
				}
				break
			}
			if time.Now().After(deadline) {
				r.log.Warn("final read: cannot list the queues of a topic; its acknowledged messages are not checked", "topic", topic, "err", err)
				break
			}
			sleepCtx(ctx, wait)
		}
	}
	names := make([]string, len(members))
	for i, id := range members {
		names[i] = memberName(id)
	}
	// NB: "final read:" starts the summary's line only, for scripts to grep.
	fmt.Fprintf(r.out, "final read of %d queue(s) on %s ...\n", len(queues), strings.Join(names, ", "))

	st := &finalReadState{r: r, qr: qr, patience: patience, gaveUp: map[memberKey]error{}}
	jobs := make(chan QueueRef)
	var wg sync.WaitGroup
	for range min(finalReadWorkers, len(queues)) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for q := range jobs {
				target := int64(-1)
				for _, id := range members {
					end, bounded := st.readQueue(ctx, q, id, target)
					if id == 0 && bounded {
						target = end // the slaves must hold what the master does
					}
				}
			}
		}()
	}
	for _, q := range queues {
		jobs <- q
	}
	close(jobs)
	wg.Wait()
	fmt.Fprintf(r.out, "final read done in %.1fs\n", time.Since(start).Seconds())
	return ""
}

// memberKey names one member of one broker group.
type memberKey struct {
	group    string
	brokerID int64
}

// finalReadState is the final read shared by its workers.
type finalReadState struct {
	r        *runner
	qr       queueReader
	patience time.Duration

	mu sync.Mutex // guards gaveUp
	// gaveUp holds the members whose read of some queue gave up, with why.
	gaveUp map[memberKey]error
}

// readQueue reads q on member brokerID up to target (-1: the member's max offset when the read
// starts) and reports it to the Verifier. It returns where the read ended and whether the
// member answered at all (bounded: its offsets were known).
func (st *finalReadState) readQueue(ctx context.Context, q QueueRef, brokerID int64, target int64) (end int64, bounded bool) {
	r := st.r
	fr := r.v.StartFinalRead(brokerID, q)
	key := memberKey{q.Broker, brokerID}
	st.mu.Lock()
	err, gaveUp := st.gaveUp[key]
	st.mu.Unlock()
	if gaveUp {
		fr.Done(0, fmt.Errorf("the read of another queue of %s of %s gave up: %w", memberName(brokerID), q.Broker, err))
		return 0, false
	}
	from := int64(0)
	if v, ok := r.startMax[q]; ok {
		from = v
	}
	if low, ok := r.v.LowestOffset(q); ok && low < from {
		from = low
	}
	off := from
	read := false // some message was read
	progress := time.Now()
	var wait time.Duration
	var lastErr error
	// again waits before another try after err and reports whether to try, false once nothing
	// has progressed for patience.
	again := func(err error) bool {
		lastErr = err
		if time.Since(progress) >= st.patience {
			return false
		}
		wait = min(max(2*wait, 10*time.Millisecond), finalReadMaxWait)
		return sleepCtx(ctx, wait)
	}
	var addr string
	ds := make([]Delivery, 0, finalReadBatch)
read:
	for {
		if bounded && off >= target {
			fr.Done(target, nil)
			return target, true
		}
		if addr == "" {
			a, err := st.qr.memberAddr(ctx, q.Topic, q.Broker, brokerID)
			if err != nil {
				if !again(err) {
					break read
				}
				continue
			}
			addr = a
		}
		ans, err := st.qr.pull(ctx, addr, q, off, finalReadBatch)
		if ans == nil {
			addr = "" // the member may have moved
			if !again(err) {
				break read
			}
			continue
		}
		if !bounded {
			bounded = true
			fr.Bounds(ans.MinOffset, from)
			if target < 0 {
				target = ans.MaxOffset
			}
		}
		switch ans.Result {
		case protocol.PullFound:
			ds = ds[:0]
			for i := range ans.Messages {
				if m := &ans.Messages[i]; m.QueueOffset < target {
					ds = append(ds, deliveryOf(m))
				}
			}
			fr.Read(ds)
			read = read || len(ds) > 0
			if err != nil {
				fr.Rejected(ans.NextOffset, err)
				fr.Done(ans.NextOffset, err)
				return ans.NextOffset, true
			}
			if ans.NextOffset <= off {
				if !again(fmt.Errorf("%s found nothing at or after offset %d", addr, off)) {
					break read
				}
				continue
			}
			off, progress, wait = ans.NextOffset, time.Now(), 0
		case protocol.PullNoNewMessage:
			// The member holds nothing at off: its queue ends there (a master, or a slave cut
			// off from its master: a linked slave says "not here" instead).
			fr.Done(off, nil)
			return off, true
		case protocol.PullOffsetMoved:
			if ans.NextOffset > off { // below the member's min offset: deleted
				off, progress, wait = ans.NextOffset, time.Now(), 0
				continue
			}
			// At or past the end of the member's queue.
			end := off
			if !read {
				end = max(ans.NextOffset, ans.MinOffset)
			}
			fr.Done(end, nil)
			return end, true
		case protocol.PullNotHere:
			if off >= target { // a linked slave at its end, which is the master's
				fr.Done(target, nil)
				return target, true
			}
			// A slave that has not replicated off yet: wait for replication.
			if !again(fmt.Errorf("%s had not replicated offset %d (its max offset %d, the master's %d)", memberName(brokerID), off, ans.MaxOffset, target)) {
				break read
			}
		default:
			if !again(fmt.Errorf("unknown pull result %d", ans.Result)) {
				break read
			}
		}
	}
	err = fmt.Errorf("no progress for %v: %w", st.patience, lastErr)
	if lastErr == nil {
		err = errors.New("stopped")
	}
	st.mu.Lock()
	st.gaveUp[key] = err
	st.mu.Unlock()
	fr.Done(off, err)
	return off, bounded
}

// deliveryOf reduces a message pulled by the final read to what the Verifier checks.
func deliveryOf(m *client.MessageExt) Delivery {
	id, err := ParseIdentity(m.Properties)
	return deliveryWith(m, id, err)
}

// deliveryWith is deliveryOf for a message whose identity is already parsed (idErr: why it
// could not be).
func deliveryWith(m *client.MessageExt, id Identity, idErr error) Delivery {
	return Delivery{
		Queue:      QueueRef{Topic: m.Topic, Broker: m.BrokerName, QueueID: m.QueueID},
		Offset:     m.QueueOffset,
		ID:         id,
		IDErr:      idErr,
		BodyCRC:    bodyCRC(m.Body),
		BodySize:   len(m.Body),
		ProducerID: m.ProducerID,
		Sequence:   m.Sequence,
	}
}
