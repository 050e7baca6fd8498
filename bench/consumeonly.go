package bench

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/petrel-mq/petrel/client"
)

// A consume-only run (Config.ConsumeOnly) reads existing topics without producing: it takes
// every read queue's min and max offsets at the start, consumes from the earliest offset until
// every message in [min, max) has arrived, and checks what it can without a producer's record
// (consumeChecker). Against one slave alone (Config.ReadBrokerID) it shows that the slave holds
// every message the master does.

// maxCheckedSeq bounds the sequence numbers whose copies consumeChecker tracks (a bit each per
// producer and attempt); messages above it are not checked for being stored twice.
const maxCheckedSeq = 1 << 30

// maxCheckedQueueSpan bounds max - min of one queue of a consume-only run (a bit per offset).
const maxCheckedQueueSpan = 1 << 34

// coQueue is consumeChecker's view of one queue.
type coQueue struct {
	ref      QueueRef
	min, max int64
	// seen has bit i set once offset min+i was consumed.
	seen []uint64
	// distinct counts the offsets of [min, max) consumed; frontier is the highest offset
	// consumed + 1 (min before the first).
	distinct int64
	frontier int64
	// lastSeq is each client producer's last message in the queue (by ProducerID), lastBench
	// each bench producer's last first-attempt sequence number for messages without a client
	// producer id.
	lastSeq   map[int64]seqPos
	lastBench map[producerKey]uint64
}

// producerKey names one producer of one bench run.
type producerKey struct {
	run      uint64
	producer uint32
}

// attemptKey names one send attempt stream of one producer: the bitset of its sequence numbers
// consumed.
type attemptKey struct {
	producerKey
	attempt uint8
}

// consumeOnlyCounts is consumeChecker's account of a consume-only run.
type consumeOnlyCounts struct {
	// Expected is the sum over the queues of max - min at the start; Consumed counts every
	// delivery; Distinct the offsets of [min, max) delivered at least once.
	Expected, Consumed, Distinct int64
	// Outside counts deliveries outside [min, max) (stored after the start, or of a queue
	// that appeared since): identity and CRC are checked, contiguity is not.
	Outside int64
	// Foreign counts deliveries without a bench identity (not written by the bench): their
	// offsets count for contiguity, nothing else is checked.
	Foreign int64
	// Gaps: offsets of [min, max) never consumed. NB: without a producer's record a
	// consume-only run cannot tell an acknowledged message that is missing altogether.
	Gaps int64
	// Duplicated: a queue offset delivered twice, or one send attempt (run, producer,
	// sequence, attempt) found at two positions (stored twice).
	Duplicated int64
	// Reordered: an offset below one already consumed from its queue, or a producer's
	// sequence going backwards within a queue.
	Reordered int64
	// Corrupted: a bench message whose body's CRC32C differs from the one its identity
	// carries.
	Corrupted int64
}

// OK reports whether no offset was skipped, duplicated, reordered or corrupted.
func (c *consumeOnlyCounts) OK() bool {
	return c.Gaps == 0 && c.Duplicated == 0 && c.Reordered == 0 && c.Corrupted == 0
}

// consumeChecker checks a consume-only run: every message of the queues' [min, max) ranges
// consumed once, in offset order, each bench message's CRC matching its body (a message
// without a bench identity is foreign), and no send attempt stored twice. It keeps a bit per queue offset and per sequence number of
// each producer attempt, never a body.
//
// Concurrency: all methods are safe for concurrent use; one mutex guards everything.
type consumeChecker struct {
	mu       sync.Mutex
	queues   map[QueueRef]*coQueue
	order    []*coQueue // sorted by queue, for reports
	copies   map[attemptKey][]uint64
	c        consumeOnlyCounts
	seqSkip  bool // a sequence number above maxCheckedSeq was seen
	problems []string
	dropped  int
}

// newConsumeChecker returns a checker of the queues in bounds.
func newConsumeChecker(bounds []queueBound) (*consumeChecker, error) {
	k := &consumeChecker{queues: map[QueueRef]*coQueue{}, copies: map[attemptKey][]uint64{}}
	for _, b := range bounds {
		span := b.max - b.min
		if span < 0 || span > maxCheckedQueueSpan {
			return nil, fmt.Errorf("queue %s: offsets [%d, %d) cannot be checked", b.q, b.min, b.max)
		}
		if _, dup := k.queues[b.q]; dup {
			return nil, fmt.Errorf("queue %s listed twice", b.q)
		}
		q := &coQueue{ref: b.q, min: b.min, max: b.max, frontier: b.min, seen: make([]uint64, (span+63)/64),
			lastSeq: map[int64]seqPos{}, lastBench: map[producerKey]uint64{}}
		k.queues[b.q] = q
		k.order = append(k.order, q)
		k.c.Expected += span
	}
	slices.SortFunc(k.order, func(a, b *coQueue) int { return compareQueues(a.ref, b.ref) })
	return k, nil
}

func compareQueues(a, b QueueRef) int {
	if c := strings.Compare(a.Topic, b.Topic); c != 0 {
		return c
	}
	if c := strings.Compare(a.Broker, b.Broker); c != 0 {
		return c
	}
	return cmp.Compare(a.QueueID, b.QueueID)
}

func (k *consumeChecker) problemLocked(format string, args ...any) {
	if len(k.problems) >= maxProblems {
		k.dropped++
		return
	}
	k.problems = append(k.problems, fmt.Sprintf(format, args...))
}

// consumed checks the deliveries of one handler call.
func (k *consumeChecker) consumed(ds []Delivery) {
	k.mu.Lock()
	defer k.mu.Unlock()
	for i := range ds {
		k.consumedLocked(&ds[i])
	}
}

func (k *consumeChecker) consumedLocked(d *Delivery) {
	k.c.Consumed++
	q := k.queues[d.Queue]
	if q == nil || d.Offset < q.min || d.Offset >= q.max {
		k.c.Outside++
	} else {
		i := d.Offset - q.min
		word, bit := &q.seen[i/64], uint64(1)<<(i%64)
		if *word&bit != 0 {
			k.c.Duplicated++
			k.problemLocked("duplicated: %s offset %d delivered again", d.Queue, d.Offset)
			return // the copy's identity was checked the first time
		}
		*word |= bit
		q.distinct++
		k.c.Distinct++
		if d.Offset < q.frontier {
			k.c.Reordered++
			k.problemLocked("reordered: %s offset %d after offset %d", d.Queue, d.Offset, q.frontier-1)
		}
		q.frontier = max(q.frontier, d.Offset+1)
	}
	if d.IDErr != nil {
		k.c.Foreign++ // not written by the bench; its batch passed the CRC check
		return
	}
	id := &d.ID
	if d.BodyCRC != id.CRC {
		k.c.Corrupted++
		k.problemLocked("corrupted: %s offset %d: body crc %08x, its identity says %08x (run %x producer %d message %d)",
			d.Queue, d.Offset, d.BodyCRC, id.CRC, id.Run, id.Producer, id.Seq)
		return
	}
	pk := producerKey{id.Run, id.Producer}
	if id.Seq >= maxCheckedSeq {
		k.seqSkip = true
	} else {
		ak := attemptKey{pk, id.Attempt}
		bits := k.copies[ak]
		w := int(id.Seq / 64)
		if w >= len(bits) {
			nb := make([]uint64, max(w+1, 2*len(bits)))
			copy(nb, bits)
			bits = nb
			k.copies[ak] = bits
		}
		bit := uint64(1) << (id.Seq % 64)
		if bits[w]&bit != 0 {
			k.c.Duplicated++
			k.problemLocked("duplicated: run %x producer %d message %d attempt %d stored again, at %s offset %d", id.Run, id.Producer, id.Seq, id.Attempt, d.Queue, d.Offset)
			return // a second copy is out of sequence by nature: counted once, as a duplicate
		}
		bits[w] |= bit
	}
	switch {
	case q == nil:
	case d.ProducerID != 0:
		// The client numbers what a producer sends to each queue: a batch retried on another
		// broker group after newer ones went to that group's queue comes after them, rightly.
		// Without a producer record every message is checked, resends (numbered when sent)
		// and unknown outcomes included.
		if last, ok := q.lastSeq[d.ProducerID]; ok && d.Sequence <= last.seq {
			k.c.Reordered++
			k.problemLocked("reordered: %s offset %d: run %x producer %d message %d (sequence %d in the queue) after message %d (sequence %d)",
				d.Queue, d.Offset, id.Run, id.Producer, id.Seq, d.Sequence, last.msg, last.seq)
		} else {
			q.lastSeq[d.ProducerID] = seqPos{d.Sequence, id.Seq}
		}
	case id.Attempt == 0:
		if last, ok := q.lastBench[pk]; ok && id.Seq < last {
			k.c.Reordered++
			k.problemLocked("reordered: %s offset %d: run %x producer %d message %d after message %d", d.Queue, d.Offset, id.Run, id.Producer, id.Seq, last)
		} else {
			q.lastBench[pk] = id.Seq
		}
	}
}

// remaining returns the offsets of [min, max) not consumed yet, and whether the consumers are
// past every queue's max offset (so the missing ones will not come).
func (k *consumeChecker) remaining() (n int64, passed bool) {
	k.mu.Lock()
	defer k.mu.Unlock()
	passed = true
	for _, q := range k.order {
		if q.frontier < q.max {
			passed = false
		}
	}
	return k.c.Expected - k.c.Distinct, passed
}

// finish returns the final counts and up to maxProblems problem descriptions, the gaps of
// every queue included. Call it once the consumers have stopped.
func (k *consumeChecker) finish() (consumeOnlyCounts, []string) {
	k.mu.Lock()
	defer k.mu.Unlock()
	c := k.c
	c.Gaps = c.Expected - c.Distinct
	problems := slices.Clone(k.problems)
	dropped := k.dropped
	for _, q := range k.order {
		if q.distinct == q.max-q.min {
			continue
		}
		gaps, more := q.gaps(3)
		desc := fmt.Sprintf("gap: %s: %d of offsets [%d, %d) never consumed: %s", q.ref, q.max-q.min-q.distinct, q.min, q.max, strings.Join(gaps, ", "))
		if more {
			desc += ", ..."
		}
		if len(problems) < maxProblems {
			problems = append(problems, desc)
		} else {
			dropped++
		}
	}
	if dropped > 0 {
		problems = append(problems, fmt.Sprintf("... and %d more problem(s)", dropped))
	}
	return c, problems
}

// gaps returns up to n ranges of offsets never consumed ("a..b" or "a"), and whether there
// are more.
func (q *coQueue) gaps(n int) ([]string, bool) {
	var out []string
	span := q.max - q.min
	for i := int64(0); i < span; {
		if q.seen[i/64]&(1<<(i%64)) != 0 {
			i++
			continue
		}
		j := i
		for j+1 < span && q.seen[(j+1)/64]&(1<<((j+1)%64)) == 0 {
			j++
		}
		if len(out) == n {
			return out, true
		}
		if j == i {
			out = append(out, fmt.Sprintf("%d", q.min+i))
		} else {
			out = append(out, fmt.Sprintf("%d..%d", q.min+i, q.min+j))
		}
		i = j + 1
	}
	return out, false
}

// consumeOnly runs a consume-only run once the cluster and the topic names are set up.
func (r *runner) consumeOnly(ctx context.Context, clusterDesc string) (*Result, error) {
	var bounds []queueBound
	for _, topic := range r.topics {
		b, err := r.cl.queueBounds(ctx, topic)
		if err != nil {
			return nil, err
		}
		bounds = append(bounds, b...)
		r.queues = append(r.queues, len(b))
	}
	chk, err := newConsumeChecker(bounds)
	if err != nil {
		return nil, err
	}
	r.startLagSampler(ctx)
	defer r.stopLagSampler()

	consCtx, stopConsumers := context.WithCancel(context.WithoutCancel(ctx))
	var consWG sync.WaitGroup
	defer func() {
		stopConsumers()
		consWG.Wait()
	}()
	for t, topic := range r.topics {
		group := r.groups[t][0]
		for range r.plan.consumersPerSub {
			c, err := r.cl.newConsumer(group, topic)
			if err != nil {
				return nil, fmt.Errorf("cannot create consumer: %w", err)
			}
			consWG.Add(1)
			go func() {
				defer consWG.Done()
				r.consumeWith(consCtx, c, group, topic, r.consumeOnlyHandler(chk))
			}()
		}
	}
	pinned := "following the brokers' read suggestions"
	if id := r.cfg.readBrokerID(); id >= 0 {
		pinned = "reads pinned to " + memberName(id)
	}
	fmt.Fprintf(r.out, "consume-only: topics %v, %d queue(s) holding %d message(s) at the start; consumer groups %v, %d consumer(s)/topic, %s; cluster: %s\n",
		r.topics, len(bounds), chk.c.Expected, slices.Concat(r.groups...), r.plan.consumersPerSub, pinned, clusterDesc)

	r.waitConsumeOnly(ctx, chk)
	stopConsumers()
	consWG.Wait()
	r.stopLagSampler()
	return r.finishConsumeOnly(chk, clusterDesc)
}

// waitConsumeOnly prints progress until every expected message has arrived, the consumers are
// past every queue's max offset, nothing new arrived for DrainTimeout, Duration passed, or ctx
// ends.
func (r *runner) waitConsumeOnly(ctx context.Context, chk *consumeChecker) {
	r.start = time.Now()
	r.lastTick = r.start
	r.lagStarted()
	progress := time.NewTicker(r.cfg.ProgressInterval)
	defer progress.Stop()
	control := time.NewTicker(20 * time.Millisecond)
	defer control.Stop()
	lastRemaining, lastChange := int64(-1), r.start
	r.cpu.start()
	defer func() {
		r.res.TestSeconds = round3(time.Since(r.start).Seconds())
		r.res.CPU = r.cpu.stop()
	}()
	for {
		rem, passed := chk.remaining()
		now := time.Now()
		if rem != lastRemaining {
			lastRemaining, lastChange = rem, now
		}
		switch {
		case rem == 0 || passed:
			r.res.Drained = rem == 0
			r.consumeOnlyTick(rem)
			return
		case now.Sub(lastChange) >= r.cfg.DrainTimeout:
			fmt.Fprintf(r.out, "consume-only: nothing new for %v with %d message(s) missing; giving up\n", r.cfg.DrainTimeout, rem)
			r.consumeOnlyTick(rem)
			return
		case r.plan.duration > 0 && now.Sub(r.start) >= r.plan.duration:
			fmt.Fprintf(r.out, "consume-only: stopped after %v with %d message(s) missing\n", r.plan.duration, rem)
			r.consumeOnlyTick(rem)
			return
		}
		select {
		case <-ctx.Done():
			r.res.Interrupted = true
			fmt.Fprintf(r.out, "interrupted: %d message(s) missing\n", rem)
			r.consumeOnlyTick(rem)
			return
		case <-progress.C:
			r.consumeOnlyTick(rem)
		case <-control.C:
		}
	}
}

// consumeOnlyTick prints a progress line of a consume-only run and adds the interval to the
// consume-rate time series.
func (r *runner) consumeOnlyTick(remaining int64) {
	now := time.Now()
	cur := tickCounts{consumed: r.consumed.Load(), consumedBytes: r.consumedBytes.Load()}
	length := now.Sub(r.lastTick)
	n, bytes := cur.consumed-r.last.consumed, cur.consumedBytes-r.last.consumedBytes
	r.last, r.lastTick = cur, now
	r.res.ConsumeRate = append(r.res.ConsumeRate, perSecond(n, length))
	r.res.Backlog = append(r.res.Backlog, remaining)
	r.testLen += length
	r.testCons += n
	r.testConsBytes += bytes
	fmt.Fprintf(r.out, "[%6.1fs] consume cons %9.1f msg/s %7.2f MB/s | remaining %d\n",
		now.Sub(r.start).Seconds(), perSecond(n, length), mbPerSecond(bytes, length), remaining)
}

// consumeOnlyHandler returns the handler of a consume-only consumer: every message goes to chk.
func (r *runner) consumeOnlyHandler(chk *consumeChecker) client.Handler {
	var pool sync.Pool // of *[]Delivery
	return func(ctx context.Context, msgs []client.MessageExt) error {
		ds, _ := pool.Get().(*[]Delivery)
		if ds == nil {
			ds = new([]Delivery)
		}
		*ds = (*ds)[:0]
		var bytes int64
		for i := range msgs {
			bytes += int64(len(msgs[i].Body))
			*ds = append(*ds, deliveryOf(&msgs[i]))
		}
		chk.consumed(*ds)
		pool.Put(ds)
		if len(msgs) > 0 {
			// One handler call is one pull: one broker served every message.
			r.consTL.observe(msgs[0].BrokerName, msgs[0].BrokerAddr, time.Since(r.clockBase), posOf(&msgs[0]), posOf(&msgs[len(msgs)-1]))
		}
		r.consumed.Add(int64(len(msgs)))
		r.consumedBytes.Add(bytes)
		return nil
	}
}

// finishConsumeOnly builds the result of a consume-only run, prints the summary and writes the
// JSON file.
func (r *runner) finishConsumeOnly(chk *consumeChecker, clusterDesc string) (*Result, error) {
	res := r.res
	c, problems := chk.finish()
	if cb := r.cl.corruptBatches(); cb > 0 {
		c.Corrupted += cb
		problems = append(problems, fmt.Sprintf("corrupted: consumers rejected %d batch(es) failing their CRC or structure check", cb))
	}
	if chk.seqSkip {
		problems = append(problems, fmt.Sprintf("note: messages with sequence numbers above %d were not checked for being stored twice", maxCheckedSeq))
	}
	res.Workload = r.plan.w.Name
	res.Driver = DriverName
	res.Mode = r.plan.mode
	res.Topics = len(r.topics)
	res.Partitions, res.Queues = queueShape(r.queues)
	res.SubscriptionsPerTopic = 1
	res.ConsumersPerTopic = r.plan.consumersPerSub
	res.TopicNames = append(res.TopicNames, r.topics...)
	res.ConsumerGroups = append(res.ConsumerGroups, slices.Concat(r.groups...)...)
	res.Cluster = clusterDesc
	res.StartTime = r.start.UTC().Format(time.RFC3339)
	res.ProgressIntervalSeconds = r.cfg.ProgressInterval.Seconds()
	res.MessagesConsumed = r.consumed.Load()
	res.BytesConsumed = r.consumedBytes.Load()
	if res.MessagesConsumed > 0 {
		res.MessageSize = res.BytesConsumed / res.MessagesConsumed
	}
	if r.testLen > 0 {
		res.AggregatedConsumeRate = perSecond(r.testCons, r.testLen)
		res.AggregatedConsumeMBps = mbPerSecond(r.testConsBytes, r.testLen)
	}
	res.ExpectedMessages = c.Expected
	res.ConsumedOutside = c.Outside
	res.Verified = true
	res.Gaps, res.Duplicated, res.Reordered, res.Corrupted, res.Foreign = c.Gaps, c.Duplicated, c.Reordered, c.Corrupted, c.Foreign
	res.OffsetMoved, res.OffsetMovedBack = r.cl.offsetMoves()
	if res.OffsetMovedBack > 0 {
		problems = append(problems, offsetMovedBackProblem(res.OffsetMovedBack))
	}
	res.Problems = problems
	res.Passed = c.OK() && res.OffsetMovedBack == 0
	if c.Expected == 0 {
		res.Passed = false
		res.Problems = append([]string{"the topics' queues hold no message: nothing could be verified"}, res.Problems...)
	}
	r.setReplication()
	res.Failovers, res.FailoversOmitted = failoverEvents(nil, r.consTL, time.Time{}, time.Now())
	var jsonErr error
	if r.cfg.JSONFile != "" {
		if jsonErr = res.WriteJSON(r.cfg.JSONFile); jsonErr == nil {
			fmt.Fprintf(r.out, "result written to %s\n", r.cfg.JSONFile)
		}
	}
	res.writeSummary(r.out, summary{})
	return res, jsonErr
}
