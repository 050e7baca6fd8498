package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/HdrHistogram/hdrhistogram-go"
	"golang.org/x/sys/unix"

	"github.com/petrel-mq/petrel/client"
	"github.com/petrel-mq/petrel/internal/ratelog"
)

// Phases of a run.
const (
	phaseWarmup = "warmup"
	phaseTest   = "test"
	phaseDrain  = "drain"
)

// retryEntry is a message to send again after an unknown outcome.
type retryEntry struct {
	seq     uint64
	attempt uint8
	body    int
	key     string
}

// prodState is one producer of the run. Its goroutine owns seq, rng, keyNext and the message
// buffers (the drain's resends run after it has exited); the retry list is filled by send
// callbacks.
type prodState struct {
	id    uint32 // Identity.Producer and the verifier's producer id
	topic string
	p     producer
	rng   *rand.Rand

	seq     uint64
	keyNext int
	// The message being sent, reused (see send).
	msg   client.Message
	props map[string]string
	idBuf []byte

	errStreak atomic.Int32 // failures since the last success

	mu       sync.Mutex // guards retries
	retries  []retryEntry
	nRetries atomic.Int32
}

func (ps *prodState) addRetry(e retryEntry) {
	ps.mu.Lock()
	ps.retries = append(ps.retries, e)
	ps.nRetries.Store(int32(len(ps.retries)))
	ps.mu.Unlock()
}

func (ps *prodState) takeRetries() []retryEntry {
	if ps.nRetries.Load() == 0 {
		return nil
	}
	ps.mu.Lock()
	r := ps.retries
	ps.retries = nil
	ps.nRetries.Store(0)
	ps.mu.Unlock()
	return r
}

// runner is one run in progress.
type runner struct {
	// tr is the cluster while it traces sends (startTracing), nil otherwise.
	tr    tracingCluster
	cfg   *Config
	plan  *plan
	out   io.Writer
	log   *slog.Logger
	cl    cluster
	runID uint64
	tag   string // random per run: consumer group suffix
	v     *Verifier
	sched *schedule
	keys  []string

	topics []string
	// groups[t][s] is the consumer group of subscription s on topic t. A Petrel group shares its
	// members' queues over the group as a whole (the brokers' member list does not tell topics
	// apart) and a client Consumer reads one topic, so each subscription has a group per topic.
	groups    [][]string
	producers []*prodState

	// Counters over the whole run.
	sent          atomic.Int64 // distinct messages accepted by the client
	sentBytes     atomic.Int64
	acked         atomic.Int64
	ackedBytes    atomic.Int64
	failed        atomic.Int64 // final definite failures
	unknown       atomic.Int64 // final unknown outcomes
	sendErrors    atomic.Int64 // failed attempts (error rate)
	consumed      atomic.Int64 // deliveries of this run's messages
	consumedBytes atomic.Int64
	foreign       atomic.Int64 // messages of other runs or not written by the bench (ignored)
	// queues is each topic's queue count as the cluster reports it (topicQueues); startMax
	// each queue's max offset then, below which the run's messages are not (the final read
	// starts there).
	queues   []int
	startMax map[QueueRef]int64
	// finalReadNote says why the run had no final read ("" when it had one).
	finalReadNote string

	pubLat, pubDelay, e2e *Recorder

	// sendTL and consTL follow, per broker group, the broker that acknowledges the sends and
	// the one that serves the consumers (failover.go); their times are offsets from clockBase.
	// sendStop is when the producers were told to stop (owned by the main goroutine).
	clockBase      time.Time
	sendTL, consTL *timeline
	sendStop       time.Time

	stopProducing chan struct{}
	paused        atomic.Bool
	resume        chan struct{}

	errLog ratelog.Limiter

	// lag samples the replication status (nil: not sampled); lagStart and lagStop start and
	// stop it, lagDone is closed when it has stopped. Owned by the main goroutine.
	lag                      *lagSampler
	lagStart, lagStop        chan struct{}
	lagDone                  chan struct{}
	lagStarting, lagStopping bool
	// cpu measures the CPU load of the measured part (the phases whose intervals make the
	// rates). Owned by the main goroutine.
	cpu cpuMeter
	// measuredFrom is when the warm-up ended: the latency histograms hold what was answered or
	// consumed from then on, and so does the stage breakdown.
	measuredFrom time.Time

	// Owned by the main goroutine.
	last                        tickCounts
	lastTick, start             time.Time
	phaseTicks                  int // ticks in the current phase
	res                         *Result
	totPubLat, totDelay, totE2E *hdrhistogram.Histogram
	testLen                     time.Duration
	testAcked, testAckedBytes   int64
	testCons, testConsBytes     int64
}

// tickCounts are the counters at a progress tick.
type tickCounts struct {
	acked, ackedBytes, errors, consumed, consumedBytes int64
}

// Run runs a benchmark as cfg says: it starts an embedded cluster unless cfg.NameServers is
// set, creates the topics, produces and consumes while printing progress to cfg.Out, drains,
// prints the summary and writes the JSON result. The returned error means the run could not be
// carried out; a run that completed returns its Result (check Result.OK for verification).
// When ctx ends the run stops producing, drains (up to cfg.DrainTimeout) and still reports. A nil
// ctx is refused before anything starts.
func Run(ctx context.Context, cfg Config) (*Result, error) {
	if ctx == nil {
		return nil, errors.New("bench: nil context")
	}
	if err := cfg.setDefaults(); err != nil {
		return nil, err
	}
	seed := cfg.Seed
	if seed == 0 {
		seed = rand.Uint64()
	}
	pl, err := makePlan(&cfg, seed)
	if err != nil {
		return nil, err
	}
	runID := rand.Uint64() | 1
	clockBase := time.Now()
	r := &runner{
		cfg:           &cfg,
		plan:          pl,
		out:           cfg.Out,
		log:           cfg.Logger,
		runID:         runID,
		tag:           strconv.FormatUint(runID>>32, 16),
		pubLat:        NewRecorder(),
		pubDelay:      NewRecorder(),
		e2e:           NewRecorder(),
		clockBase:     clockBase,
		sendTL:        newTimeline(sendPolicy, clockBase),
		consTL:        newTimeline(consumePolicy, clockBase),
		stopProducing: make(chan struct{}),
		resume:        make(chan struct{}),
		totPubLat:     newHistogram(),
		totDelay:      newHistogram(),
		totE2E:        newHistogram(),
		res:           newResult(),
	}
	if pl.w.KeyDistributor != NoKey {
		r.keys = makeKeys(seed)
	}
	return r.run(ctx, seed)
}

// makeKeys returns OMB's key pool: keyPoolSize random 7-character alphanumeric keys.
func makeKeys(seed uint64) []string {
	const alphabet = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"
	rng := rand.New(rand.NewPCG(seed, 7))
	keys := make([]string, keyPoolSize)
	var b [7]byte
	for i := range keys {
		for j := range b {
			b[j] = alphabet[rng.IntN(len(alphabet))]
		}
		keys[i] = string(b[:])
	}
	return keys
}

func (r *runner) run(ctx context.Context, seed uint64) (*Result, error) {
	cfg, w := r.cfg, r.plan.w
	clusterDesc := cfg.NameServers
	var newCluster func(context.Context) (cluster, error)
	switch {
	case cfg.newCluster != nil:
		newCluster = cfg.newCluster
		clusterDesc = "test"
	case cfg.Driver == DriverNats:
		clusterDesc = fmt.Sprintf("NATS JetStream %s, R%d", cfg.NatsURL, cfg.NatsReplicas)
		newCluster = func(context.Context) (cluster, error) {
			return newNatsCluster(cfg.NatsURL, cfg.NatsReplicas, r.log)
		}
	case cfg.NameServers == "":
		if err := checkBacklogFits(w.ConsumerBacklogSizeGB*cfg.gigabyte, os.TempDir()); err != nil {
			return nil, err
		}
		emb, err := startEmbedded(cfg, r.log)
		if err != nil {
			return nil, err
		}
		defer func() {
			if cerr := emb.close(); cerr != nil {
				r.log.Error("cannot close the embedded cluster", "err", cerr)
			}
		}()
		clusterDesc = "embedded"
		keep := ""
		if cfg.KeepData {
			keep = " (kept)"
		}
		writePath := "commit log written through its files"
		if cfg.EmbeddedWriteThroughMapping {
			writePath = "commit log copied into its mappings (commitLogWriteThroughFile=false)"
		}
		fmt.Fprintf(r.out, "embedded cluster: NameServer %s, %s, %s, %s, data %s%s\n",
			emb.nameServers(), emb.describe(), cfg.FlushDiskType, writePath, emb.dir, keep)
		newCluster = func(ctx context.Context) (cluster, error) {
			return newPetrelCluster(ctx, emb.nameServers(), clusterOptions{
				target: emb.masterAddr(), waitTopicOn: emb.slaveAddrs(), readBrokerID: cfg.readBrokerID(), linger: cfg.Linger,
			}, r.log)
		}
	default:
		newCluster = func(ctx context.Context) (cluster, error) {
			return newPetrelCluster(ctx, cfg.NameServers, clusterOptions{target: cfg.Cluster, readBrokerID: cfg.readBrokerID(), linger: cfg.Linger}, r.log)
		}
	}
	cl, err := newCluster(ctx)
	if err != nil {
		return nil, err
	}
	r.cl = cl
	defer func() {
		if cerr := cl.close(); cerr != nil {
			r.log.Error("cannot close the client", "err", cerr)
		}
	}()

	id := cfg.TopicID
	if id == "" {
		id = r.tag
	}
	if len(cfg.Topics) > 0 {
		r.topics = append(r.topics, cfg.Topics...)
	} else {
		for i := range w.Topics {
			r.topics = append(r.topics, fmt.Sprintf("%s-%s-%d", cfg.TopicPrefix, id, i))
		}
	}
	for t := range r.topics {
		var gs []string
		for s := range w.SubscriptionsPerTopic {
			if len(r.topics) == 1 {
				gs = append(gs, fmt.Sprintf("sub-%d-%s", s, r.tag))
			} else {
				gs = append(gs, fmt.Sprintf("sub-%d-%s-t%d", s, r.tag, t))
			}
		}
		r.groups = append(r.groups, gs)
	}
	r.res.ReadBrokerID = cfg.readBrokerID()
	if cfg.ConsumeOnly {
		return r.consumeOnly(ctx, clusterDesc)
	}
	if !cfg.NoCreateTopic {
		if err := r.createTopics(ctx); err != nil {
			return nil, err
		}
	}
	r.queues = r.topicQueues(ctx)
	if err := r.checkReadMember(ctx); err != nil {
		return nil, err
	}
	r.startLagSampler(ctx)
	defer r.stopLagSampler()
	r.startTracing(ctx)
	if cfg.Verify {
		r.v = NewVerifier(r.runID, w.SubscriptionsPerTopic)
	}

	// Producers first (they only connect on the first send), then consumers.
	defer r.closeProducers()
	for t, topic := range r.topics {
		for i := range w.ProducersPerTopic {
			p, err := cl.newProducer()
			if err != nil {
				return nil, fmt.Errorf("cannot create producer: %w", err)
			}
			ps := &prodState{topic: topic, p: p, rng: rand.New(rand.NewPCG(seed, uint64(t*w.ProducersPerTopic+i)))}
			if r.v != nil {
				ps.id = r.v.AddProducer(topic)
			} else {
				ps.id = uint32(len(r.producers))
			}
			r.producers = append(r.producers, ps)
		}
	}

	consCtx, stopConsumers := context.WithCancel(context.WithoutCancel(ctx))
	var consWG sync.WaitGroup
	defer func() {
		stopConsumers()
		consWG.Wait()
	}()
	if w.ConsumerBacklogSizeGB > 0 {
		r.paused.Store(true)
	}
	for t, topic := range r.topics {
		for s, group := range r.groups[t] {
			for range r.plan.consumersPerSub {
				c, err := cl.newConsumer(group, topic)
				if err != nil {
					return nil, fmt.Errorf("cannot create consumer: %w", err)
				}
				consWG.Add(1)
				go func() {
					defer consWG.Done()
					r.consumeWith(consCtx, c, group, topic, r.handler(s))
				}()
			}
		}
	}
	r.printHeader(clusterDesc)
	r.measure(ctx)
	stopConsumers()
	consWG.Wait()
	if r.v != nil {
		r.finalReadNote = r.finalRead()
	}
	return r.finish(clusterDesc)
}

// topicQueues returns the queue count of each of the run's topics as the cluster reports it
// (its read queues over every broker group): an existing topic (NoCreateTopic) may have any
// count. A topic whose count the cluster cannot tell counts the workload's partitionsPerTopic.
// It records every queue's max offset in startMax.
func (r *runner) topicQueues(ctx context.Context) []int {
	out := make([]int, len(r.topics))
	r.startMax = map[QueueRef]int64{}
	for i, topic := range r.topics {
		bs, err := r.cl.queueBounds(ctx, topic)
		if err != nil || len(bs) == 0 {
			r.log.Warn("cannot tell the queue count of a topic: reporting the workload's", "topic", topic, "partitionsPerTopic", r.plan.w.PartitionsPerTopic, "err", err)
			out[i] = r.plan.w.PartitionsPerTopic
			continue
		}
		out[i] = len(bs)
		for _, b := range bs {
			r.startMax[b.q] = b.max
		}
	}
	return out
}

// readMemberWait bounds how long a run waits, before it starts, for every broker group to list
// the member its consumers are pinned to (a slave registers shortly after its master); the wait
// is also at most the run's DrainTimeout.
const readMemberWait = 15 * time.Second

// memberLister is a cluster that can list the members the route of a topic names.
type memberLister interface {
	// members returns the brokerIds of every broker group of topic's route, as the NameServers
	// list them now.
	members(ctx context.Context, topic string) (map[string][]int64, error)
}

// checkReadMember refuses a run whose consumers are pinned (ReadBrokerID > 0) to a member some
// broker group of its topics does not have: they would consume nothing, and every acknowledged
// message would read as lost although the masters hold it.
func (r *runner) checkReadMember(ctx context.Context) error {
	id := r.cfg.readBrokerID()
	ml, ok := r.cl.(memberLister)
	if id <= 0 || !ok {
		return nil
	}
	deadline := time.Now().Add(min(readMemberWait, max(r.cfg.DrainTimeout, time.Second)))
	for _, topic := range r.topics {
		for {
			ms, err := ml.members(ctx, topic)
			missing := ""
			for _, g := range slices.Sorted(maps.Keys(ms)) {
				if !slices.Contains(ms[g], id) {
					missing = fmt.Sprintf("broker group %s has no member with brokerId %d (it lists %v)", g, id, ms[g])
					break
				}
			}
			if err == nil && missing == "" {
				break
			}
			if time.Now().After(deadline) {
				if err != nil {
					return fmt.Errorf("read-broker-id %d: cannot tell the members of %s: %w", id, topic, err)
				}
				return fmt.Errorf("read-broker-id %d: %s; pin consumers to a brokerId every group has (0: the master)", id, missing)
			}
			sleepCtx(ctx, 200*time.Millisecond)
			if ctx.Err() != nil {
				return ctx.Err()
			}
		}
	}
	return nil
}

// queueShape returns the queue count of every topic (0 when they differ) and the count over
// all topics.
func queueShape(perTopic []int) (each, total int) {
	for i, n := range perTopic {
		total += n
		switch {
		case i == 0:
			each = n
		case n != each:
			each = -1
		}
	}
	return max(each, 0), total
}

// shapeText describes topics and queues: "2 topic(s) x 8 queue(s)", or "2 topic(s), 12
// queue(s) in all" when the topics' queue counts differ (perTopic 0).
func shapeText(topics, perTopic, total int) string {
	if perTopic == 0 && total > 0 {
		return fmt.Sprintf("%d topic(s), %d queue(s) in all", topics, total)
	}
	return fmt.Sprintf("%d topic(s) x %d queue(s)", topics, perTopic)
}

// createTopics creates the run's topics, a few at a time.
func (r *runner) createTopics(ctx context.Context) error {
	sem := make(chan struct{}, 8)
	errs := make([]error, len(r.topics))
	var wg sync.WaitGroup
	for i, topic := range r.topics {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			errs[i] = r.cl.createTopic(ctx, topic, r.plan.w.PartitionsPerTopic)
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}

func (r *runner) closeProducers() {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	for _, ps := range r.producers {
		if err := ps.p.Close(ctx); err != nil {
			r.log.Warn("producer did not close cleanly", "err", err)
		}
	}
}

func (r *runner) printHeader(clusterDesc string) {
	w, p := r.plan.w, r.plan.payloads
	rate := "as fast as possible"
	if w.ProducerRate > 0 {
		rate = fmt.Sprintf("%d msg/s", w.ProducerRate)
	}
	length := "until every line is sent"
	if r.plan.duration > 0 {
		length = r.plan.duration.String()
		if r.plan.mode == "replay" {
			length = "at most " + length
		}
	}
	perTopic, total := queueShape(r.queues)
	shape := shapeText(len(r.topics), perTopic, total)
	if perTopic != w.PartitionsPerTopic {
		shape += fmt.Sprintf(" (the workload's partitionsPerTopic is %d)", w.PartitionsPerTopic)
	}
	fmt.Fprintf(r.out, "workload %q (%s): %s, %d producer(s)/topic, %d subscription(s)/topic, rate %s, warm-up %v, test %s, verify %v\n",
		w.Name, r.plan.mode, shape, w.ProducersPerTopic, w.SubscriptionsPerTopic, rate, r.plan.warmup, length, r.cfg.Verify)
	fmt.Fprintf(r.out, "payload: %s (%d distinct bodies, %d bytes avg)\n", p.Source, len(p.Bodies), p.avgSize())
	if p.SkippedEmpty > 0 {
		fmt.Fprintf(r.out, "payload: skipped %d empty lines\n", p.SkippedEmpty)
	}
	fmt.Fprintf(r.out, "topics: %v; consumer groups: %v; cluster: %s\n", r.topics, slices.Concat(r.groups...), clusterDesc)
}

// measure runs the warm-up and test phases, then stops the producers and drains. It returns
// when the drain has ended.
func (r *runner) measure(ctx context.Context) {
	pl, w := r.plan, r.plan.w
	r.start = time.Now()
	r.lastTick = r.start
	if w.ProducerRate > 0 {
		r.sched = newSchedule(r.start, float64(w.ProducerRate))
	}
	sendCtx, cancelSends := context.WithCancel(context.WithoutCancel(ctx))
	defer cancelSends()
	var prodWG sync.WaitGroup
	producersDone := make(chan struct{})
	for _, ps := range r.producers {
		prodWG.Add(1)
		go func() {
			defer prodWG.Done()
			r.produce(sendCtx, ps)
		}()
	}
	go func() {
		prodWG.Wait()
		close(producersDone)
	}()

	interval := r.cfg.ProgressInterval
	progress := time.NewTicker(interval)
	defer progress.Stop()
	control := time.NewTicker(20 * time.Millisecond)
	defer control.Stop()

	phase, phaseStart := phaseTest, r.start
	if pl.warmup > 0 {
		phase = phaseWarmup
	} else {
		r.lagStarted()
		r.cpu.start()
		r.measuredFrom = phaseStart
	}
	// enter closes the current phase's last interval and starts the next phase ("" at the
	// end) with a full progress interval. A remainder too short to give meaningful rates (it
	// follows a regular tick of the phase closely) is carried into the next phase's first
	// interval instead.
	enter := func(next string) {
		if next == "" || r.phaseTicks == 0 || time.Since(r.lastTick) >= interval/20 {
			r.tick(phase)
		}
		phase, phaseStart = next, time.Now()
		r.phaseTicks = 0
		progress.Reset(interval)
		if next == phaseTest || next == phaseDrain {
			r.lagStarted() // a run interrupted in its warm-up samples its drain
			if r.measuredFrom.IsZero() {
				r.measuredFrom = phaseStart
			}
		}
		if next == phaseTest || next == phaseDrain && r.replayDrainIsTest() && !r.cpu.started() {
			r.cpu.start()
		}
	}

	backlogTarget := w.ConsumerBacklogSizeGB * r.cfg.gigabyte
	backlogBuilt := backlogTarget == 0
	backlogDrained := backlogTarget == 0
	var minBacklog int64
	var drainFrom time.Time // when the consumers started on the built backlog
	var drainConsumed int64 // messages consumed by then
	if backlogTarget > 0 {
		capacity := backlogTarget / int64(max(1, r.plan.payloads.avgSize()))
		minBacklog = max(1000, int64((1-w.BacklogDrainRatio)*float64(capacity)))
		fmt.Fprintf(r.out, "backlog: consumers wait until %d GB are backlogged\n", w.ConsumerBacklogSizeGB)
	}
loop:
	for {
		select {
		case <-ctx.Done():
			r.res.Interrupted = true
			fmt.Fprintf(r.out, "interrupted: stopping the producers and draining\n")
			break loop
		case <-producersDone:
			break loop
		case <-progress.C:
			r.tick(phase)
		case <-control.C:
			now := time.Now()
			if phase == phaseWarmup && now.Sub(r.start) >= pl.warmup {
				enter(phaseTest)
				now = phaseStart
			}
			if !backlogBuilt && r.backlog()*int64(r.plan.payloads.avgSize()) >= backlogTarget {
				backlogBuilt = true
				drainFrom, drainConsumed = now, r.consumed.Load()
				r.res.BacklogMessages = r.backlog()
				fmt.Fprintf(r.out, "backlog: %d GB built; consumers start draining\n", w.ConsumerBacklogSizeGB)
				r.paused.Store(false)
				close(r.resume)
			}
			if backlogBuilt && !backlogDrained && r.backlog() <= minBacklog {
				backlogDrained = true
				r.res.recordBacklogDrain(now.Sub(drainFrom), r.consumed.Load()-drainConsumed)
				fmt.Fprintf(r.out, "backlog: drained\n")
			}
			if phase == phaseTest && pl.duration > 0 && now.Sub(phaseStart) >= pl.duration {
				if backlogDrained {
					break loop
				}
				if now.Sub(phaseStart) >= pl.duration+r.cfg.DrainTimeout {
					// Consumers slower than the producers never drain it (or producers too
					// slow to build it): give up.
					what := cond(backlogBuilt, "not drained", "not built")
					fmt.Fprintf(r.out, "backlog: %s %v after the test duration (--drain-timeout); stopping\n", what, r.cfg.DrainTimeout)
					break loop
				}
			}
		}
	}
	now := time.Now()
	r.sendStop = now
	if !r.replayDrainIsTest() {
		r.res.CPU = r.cpu.stop()
	}
	if phase == phaseTest {
		r.res.WarmupSeconds = round3(phaseStart.Sub(r.start).Seconds())
		r.res.TestSeconds = round3(now.Sub(phaseStart).Seconds())
	} else {
		r.res.WarmupSeconds = round3(now.Sub(r.start).Seconds())
	}

	// Stop: producers leave their loops; a send in flight (a synchronous one waiting for its
	// acknowledgement) may finish for up to stopGrace, then the rest give up (SendAsync calls
	// waiting for buffer space), so the last send of each producer is not made unknown by the
	// stop itself. Then every producer flushes and resends what had an unknown outcome.
	close(r.stopProducing)
	select {
	case <-producersDone: // closed: it can be received again below
	case <-time.After(stopGrace):
	}
	cancelSends()
	<-producersDone
	if r.paused.Load() { // the backlog was never built: let the consumers drain
		r.paused.Store(false)
		close(r.resume)
	}
	enter(phaseDrain)
	drainStart := phaseStart
	drainCtx, cancelDrain := context.WithTimeout(context.Background(), r.cfg.DrainTimeout)
	defer cancelDrain()
	r.settle(drainCtx)
	r.res.Drained = true
drain:
	for !r.drained() {
		select {
		case <-drainCtx.Done():
			fmt.Fprintf(r.out, "drain: timed out after %v with %d message(s) not consumed\n", r.cfg.DrainTimeout, r.outstanding())
			r.res.Drained = false
			break drain
		case <-progress.C:
			r.tick(phase)
		case <-control.C:
		}
	}
	enter("")
	if r.replayDrainIsTest() {
		r.res.CPU = r.cpu.stop()
	}
	r.res.DrainSeconds = round3(time.Since(drainStart).Seconds())
	r.stopLagSampler()
}

// settle flushes every producer and resends what had an unknown outcome (RetryUnknown), until
// no resend is left or ctx ends.
func (r *runner) settle(ctx context.Context) {
	var wg sync.WaitGroup
	for _, ps := range r.producers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				if err := ps.p.Flush(ctx); err != nil {
					r.log.Warn("producer flush did not finish", "err", err)
				}
				retries := ps.takeRetries()
				if len(retries) == 0 || ctx.Err() != nil {
					for range retries {
						r.giveUpRetry()
					}
					return
				}
				for _, e := range retries {
					r.resend(ctx, ps, e)
				}
			}
		}()
	}
	wg.Wait()
}

// stopGrace is how long producers may finish the sends in flight when the test ends.
const stopGrace = 3 * time.Second

// backlog returns the messages acknowledged but not yet consumed, over all subscriptions.
func (r *runner) backlog() int64 {
	return max(0, r.acked.Load()*int64(r.plan.w.SubscriptionsPerTopic)-r.consumed.Load())
}

func (r *runner) outstanding() int64 {
	if r.v != nil {
		return r.v.Outstanding()
	}
	return r.backlog()
}

func (r *runner) drained() bool { return r.outstanding() == 0 }

// tick closes a progress interval: it prints the progress line and adds the interval to the
// time series (test phase) and to the aggregated histograms (test and drain phases).
func (r *runner) tick(phase string) {
	// NB: the time is read here, with the counters, not taken from the ticker: a tick
	// processed late would otherwise pair a stale time with fresh counts.
	now := time.Now()
	cur := tickCounts{
		acked: r.acked.Load(), ackedBytes: r.ackedBytes.Load(), errors: r.sendErrors.Load(),
		consumed: r.consumed.Load(), consumedBytes: r.consumedBytes.Load(),
	}
	iv := &interval{
		elapsed:     now.Sub(r.start),
		length:      now.Sub(r.lastTick),
		phase:       phase,
		sent:        cur.acked - r.last.acked,
		sentBytes:   cur.ackedBytes - r.last.ackedBytes,
		errors:      cur.errors - r.last.errors,
		consumed:    cur.consumed - r.last.consumed,
		consBytes:   cur.consumedBytes - r.last.consumedBytes,
		backlog:     r.backlog(),
		pubLat:      r.pubLat.Interval(),
		pubDelay:    r.pubDelay.Interval(),
		e2e:         r.e2e.Interval(),
		rateLimited: r.sched != nil,
	}
	r.last, r.lastTick = cur, now
	r.phaseTicks++
	fmt.Fprintln(r.out, progressLine(iv, r.failed.Load(), r.unknown.Load()))
	test := phase == phaseTest || (phase == phaseDrain && r.replayDrainIsTest())
	if test {
		r.res.addInterval(iv)
		r.testLen += iv.length
		r.testAcked += iv.sent
		r.testAckedBytes += iv.sentBytes
		r.testCons += iv.consumed
		r.testConsBytes += iv.consBytes
	}
	if phase != phaseWarmup {
		r.totPubLat.Merge(iv.pubLat)
		r.totDelay.Merge(iv.pubDelay)
		r.totE2E.Merge(iv.e2e)
	}
	r.pubLat.Recycle(iv.pubLat)
	r.pubDelay.Recycle(iv.pubDelay)
	r.e2e.Recycle(iv.e2e)
}

// replayDrainIsTest reports whether the drain belongs to the test: a replay's test is
// delivering every line.
func (r *runner) replayDrainIsTest() bool { return r.plan.mode == "replay" }

// errBackoffMax caps a producer's pause after consecutive failed sends.
const errBackoffMax = 50 * time.Millisecond

// produce is a producer's loop: it sends until the run stops it or, for a replay, until every
// body is sent.
func (r *runner) produce(ctx context.Context, ps *prodState) {
	var wt waiter
	defer wt.stop()
	pl := r.plan.payloads
	n := uint64(len(pl.Bodies))
	for {
		select {
		case <-r.stopProducing:
			return
		default:
		}
		for _, e := range ps.takeRetries() {
			r.resend(ctx, ps, e)
		}
		if pl.Replay && ps.seq >= n {
			return
		}
		if k := ps.errStreak.Load(); k > 0 {
			// The cluster is failing (a broker restarting?): slow down instead of spinning
			// through messages that fail at once, but by at most errBackoffMax, so that the
			// failover timeline measures the cluster, not this pause.
			d := min(time.Duration(k)*5*time.Millisecond, errBackoffMax)
			if !wt.until(time.Now().Add(d), r.stopProducing) {
				return
			}
		}
		var due time.Time
		if r.sched != nil {
			due = r.sched.next()
			if !wt.until(due, r.stopProducing) {
				return
			}
		}
		seq := ps.seq
		ps.seq++
		var body int
		switch {
		case pl.Replay:
			body = int(seq)
		case pl.Random:
			body = ps.rng.IntN(len(pl.Bodies))
		default:
			body = int((seq + uint64(ps.id)) % n)
		}
		var key string
		switch r.plan.w.KeyDistributor {
		case KeyRoundRobin:
			key = r.keys[ps.keyNext]
			ps.keyNext = (ps.keyNext + 1) % len(r.keys)
		case RandomNano:
			key = r.keys[ps.rng.IntN(len(r.keys))]
		}
		if r.v != nil {
			r.v.Sent(ps.id, seq, pl.CRCs[body], len(pl.Bodies[body]))
		}
		r.send(ctx, ps, retryEntry{seq: seq, attempt: 0, body: body, key: key}, due)
	}
}

// resend sends a message again after an unknown outcome.
func (r *runner) resend(ctx context.Context, ps *prodState, e retryEntry) {
	if r.v != nil {
		a, ok := r.v.Resend(ps.id, e.seq)
		if !ok {
			r.unknown.Add(1)
			return
		}
		e.attempt = a
	}
	r.send(ctx, ps, e, time.Time{})
}

// giveUpRetry accounts for a resend that will not happen: the message's outcome stays unknown.
func (r *runner) giveUpRetry() { r.unknown.Add(1) }

// send hands one attempt of a message to the client. due is its scheduled time at a fixed
// rate (zero otherwise).
func (r *runner) send(ctx context.Context, ps *prodState, e retryEntry, due time.Time) {
	pl := r.plan.payloads
	body := pl.Bodies[e.body]
	now := time.Now()
	id := Identity{Run: r.runID, Producer: ps.id, Seq: e.seq, Attempt: e.attempt, CRC: pl.CRCs[e.body], SentMicros: now.UnixMicro()}
	// NB: the message, its property map and the identity's bytes are the producer's and are
	// reused by its next send: SendAsync copies the message before it returns, so the value
	// may alias idBuf.
	ps.idBuf = id.appendValue(ps.idBuf[:0])
	if ps.props == nil {
		ps.props = make(map[string]string, 1)
	}
	ps.props[identityProperty] = unsafe.String(unsafe.SliceData(ps.idBuf), len(ps.idBuf))
	ps.msg = client.Message{Topic: ps.topic, Body: body, Properties: ps.props, ShardingKey: e.key, Keys: e.key}
	if !due.IsZero() {
		r.pubDelay.Record(now.Sub(due).Microseconds())
	}
	size := int64(len(body))
	if r.cfg.SyncSend {
		// One at a time: the callback path runs inline once the acknowledgement is in.
		if e.attempt == 0 {
			r.sent.Add(1)
			r.sentBytes.Add(size)
		}
		res, err := ps.p.SendSync(ctx, &ps.msg)
		if err != nil && (ctx.Err() != nil || errors.Is(err, client.ErrProducerClosed)) && !errors.Is(err, client.ErrUnknownOutcome) {
			if r.v != nil {
				r.v.Abandoned(ps.id, e.seq)
			}
			r.sent.Add(-1)
			r.sentBytes.Add(-size)
			return
		}
		r.onSendResult(ps, e, size, now, res, err)
		return
	}
	err := ps.p.SendAsync(ctx, &ps.msg, func(res client.SendResult, err error) {
		r.onSendResult(ps, e, size, now, res, err)
	})
	if err == nil {
		if e.attempt == 0 {
			r.sent.Add(1)
			r.sentBytes.Add(size)
		}
		return
	}
	if ctx.Err() != nil || errors.Is(err, client.ErrProducerClosed) {
		// Stopped before the client took it: never sent.
		if r.v != nil {
			r.v.Abandoned(ps.id, e.seq)
		}
		if e.attempt > 0 {
			r.unknown.Add(1)
		}
		return
	}
	r.sendErrors.Add(1)
	ps.errStreak.Add(1)
	r.errLog.Warn(r.log, "send refused", "topic", ps.topic, "err", err)
	if r.v != nil {
		r.v.Failed(ps.id, e.seq, e.attempt, false)
	}
	if e.attempt > 0 {
		r.unknown.Add(1) // an earlier attempt's outcome is unknown
	} else {
		r.sent.Add(1) // it counts as sent, and failed
		r.sentBytes.Add(size)
		r.failed.Add(1)
	}
}

// onSendResult runs on the client's callback goroutine for every send attempt.
func (r *runner) onSendResult(ps *prodState, e retryEntry, size int64, start time.Time, res client.SendResult, err error) {
	if err == nil {
		// One read of the monotonic clock for the latency and the timeline.
		now := time.Since(r.clockBase)
		r.pubLat.Record((now - start.Sub(r.clockBase)).Microseconds())
		r.acked.Add(1)
		r.ackedBytes.Add(size)
		ps.errStreak.Store(0)
		pos := MessagePos{Topic: ps.topic, QueueID: res.QueueID, QueueOffset: res.QueueOffset}
		r.sendTL.observe(res.BrokerName, res.BrokerAddr, now, pos, pos)
		if r.v != nil {
			r.v.Acked(ps.id, e.seq, e.attempt, QueueRef{Topic: ps.topic, Broker: res.BrokerName, QueueID: res.QueueID}, res.QueueOffset)
		}
		return
	}
	unknown := errors.Is(err, client.ErrUnknownOutcome)
	r.sendErrors.Add(1)
	ps.errStreak.Add(1)
	r.errLog.Warn(r.log, "send failed", "topic", ps.topic, "unknownOutcome", unknown, "err", err)
	if r.v != nil {
		r.v.Failed(ps.id, e.seq, e.attempt, unknown)
	}
	if unknown && int(e.attempt) < r.cfg.RetryUnknown {
		ps.addRetry(retryEntry{seq: e.seq, attempt: e.attempt + 1, body: e.body, key: e.key})
		return
	}
	if unknown || e.attempt > 0 {
		r.unknown.Add(1)
	} else {
		r.failed.Add(1)
	}
}

// consumeWith runs one consumer with handler h until ctx ends, making a new one if Run fails.
func (r *runner) consumeWith(ctx context.Context, c consumer, group, topic string, h client.Handler) {
	if r.paused.Load() {
		// A backlog is being built: the consumer starts once it is (from the first offset).
		// Running it with a handler that blocks instead would hold deliveries in the client
		// (JetStream then misses heartbeats and gives up its pulls).
		select {
		case <-r.resume:
		case <-ctx.Done():
			return
		}
	}
	for {
		err := c.Run(ctx, h)
		if ctx.Err() != nil {
			return
		}
		r.log.Warn("consumer stopped; restarting it", "group", group, "topic", topic, "err", err)
		if !sleepCtx(ctx, time.Second) {
			return
		}
		nc, nerr := r.cl.newConsumer(group, topic)
		if nerr != nil {
			r.log.Error("cannot create consumer", "group", group, "topic", topic, "err", nerr)
			continue
		}
		c = nc
	}
}

// handler returns the message handler of a consumer of subscription sub.
func (r *runner) handler(sub int) client.Handler {
	var pool sync.Pool // of *[]Delivery
	return func(ctx context.Context, msgs []client.MessageExt) error {
		tnow := time.Now()
		now := tnow.UnixMicro()
		var ds *[]Delivery
		if r.v != nil {
			if x, ok := pool.Get().(*[]Delivery); ok {
				ds = x
			} else {
				ds = new([]Delivery)
			}
			*ds = (*ds)[:0]
		}
		var n, bytes int64
		first, last := -1, -1 // the run's first and last messages in msgs
		for i := range msgs {
			m := &msgs[i]
			id, err := ParseIdentity(m.Properties)
			if err != nil || id.Run != r.runID {
				// Another run's message on a reused topic, or one the bench did not write (no
				// identity; its batch passed the CRC check, so it is not corrupted).
				r.foreign.Add(1)
				continue
			}
			if first < 0 {
				first = i
			}
			last = i
			r.e2e.Record(now - id.SentMicros)
			n++
			bytes += int64(len(m.Body))
			if ds != nil {
				*ds = append(*ds, deliveryWith(m, id, nil))
			}
		}
		if ds != nil {
			r.v.Consumed(sub, *ds)
			pool.Put(ds)
		}
		if first >= 0 && r.tr != nil {
			r.tr.traceDelivered(msgs[first].Topic, msgs[first].QueueID, msgs[first].QueueOffset, tnow.UnixNano())
		}
		if first >= 0 {
			// One handler call is one pull: one broker served every message.
			r.consTL.observe(msgs[first].BrokerName, msgs[first].BrokerAddr, tnow.Sub(r.clockBase), posOf(&msgs[first]), posOf(&msgs[last]))
		}
		r.consumed.Add(n)
		r.consumedBytes.Add(bytes)
		return nil
	}
}

// posOf returns the position of a consumed message.
func posOf(m *client.MessageExt) MessagePos {
	return MessagePos{Topic: m.Topic, QueueID: m.QueueID, QueueOffset: m.QueueOffset}
}

// finish builds the result, prints the summary and writes the JSON file.
func (r *runner) finish(clusterDesc string) (*Result, error) {
	res, w, pl := r.res, r.plan.w, r.plan.payloads
	res.Workload = w.Name
	res.Driver = DriverName
	if r.cfg.Driver == DriverNats {
		res.Driver = DriverNatsName
	}
	res.MessageSize = int64(pl.avgSize())
	res.Topics = len(r.topics)
	res.Partitions, res.Queues = queueShape(r.queues)
	res.ProducersPerTopic = w.ProducersPerTopic
	res.SubscriptionsPerTopic = w.SubscriptionsPerTopic
	res.ConsumersPerTopic = w.SubscriptionsPerTopic * r.plan.consumersPerSub
	res.ProducerRate = w.ProducerRate
	res.Mode = r.plan.mode
	res.PayloadSource = pl.Source
	res.TopicNames = append(res.TopicNames, r.topics...)
	res.ConsumerGroups = append(res.ConsumerGroups, slices.Concat(r.groups...)...)
	res.Cluster = clusterDesc
	res.StartTime = r.start.UTC().Format(time.RFC3339)
	res.ProgressIntervalSeconds = r.cfg.ProgressInterval.Seconds()
	res.setAggregates(r.totPubLat, r.totDelay, r.totE2E)
	if r.testLen > 0 {
		res.AggregatedPublishRate = perSecond(r.testAcked, r.testLen)
		res.AggregatedPublishMBps = mbPerSecond(r.testAckedBytes, r.testLen)
		res.AggregatedConsumeRate = perSecond(r.testCons, r.testLen)
		res.AggregatedConsumeMBps = mbPerSecond(r.testConsBytes, r.testLen)
	}
	res.MessagesSent = r.sent.Load()
	res.BytesSent = r.sentBytes.Load()
	res.MessagesAcked = r.acked.Load()
	res.MessagesConsumed = r.consumed.Load()
	res.BytesConsumed = r.consumedBytes.Load()
	res.Failed = r.failed.Load()
	res.Unknown = r.unknown.Load()
	res.Foreign = r.foreign.Load()
	res.Passed = true
	r.setReplication()
	res.Failovers, res.FailoversOmitted = failoverEvents(r.sendTL, r.consTL, r.sendStop, time.Now())
	res.OffsetMoved, res.OffsetMovedBack = r.cl.offsetMoves()
	if r.v != nil {
		c, problems := r.v.Finish()
		if cb := r.cl.corruptBatches(); cb > 0 {
			c.Corrupted += cb
			problems = append(problems, fmt.Sprintf("corrupted: consumers rejected %d batch(es) failing their CRC or structure check", cb))
		}
		c.OffsetMoved, c.OffsetMovedBack = res.OffsetMoved, res.OffsetMovedBack
		res.setVerification(c, problems)
		res.MessagesSent = c.Sent - c.Abandoned
		res.FinalRead = r.v.FinalRead()
		res.FinalReadNote = r.finalReadNote
	} else if res.OffsetMovedBack > 0 {
		res.Passed = false
		res.Problems = append(res.Problems, offsetMovedBackProblem(res.OffsetMovedBack))
	}
	if r.tr != nil {
		pub, e2e := msStats(r.totPubLat), msStats(r.totE2E)
		res.LatencyBreakdown = r.tr.traceBreakdown(r.measuredFrom.UnixNano(), pub.P99, pub.P999, e2e.P99, e2e.P999)
		if res.LatencyBreakdown != nil {
			res.LatencyBreakdown.ExecTrace, res.LatencyBreakdown.CPUProfile = absPath(r.cfg.ExecTrace), absPath(r.cfg.CPUProfile)
		}
	}
	var jsonErr error
	if r.cfg.JSONFile != "" {
		if jsonErr = res.WriteJSON(r.cfg.JSONFile); jsonErr == nil {
			fmt.Fprintf(r.out, "result written to %s\n", r.cfg.JSONFile)
		}
	}
	res.writeSummary(r.out, summary{pubLat: msStats(r.totPubLat), pubDelay: microsStats(r.totDelay), e2e: msStats(r.totE2E)})
	writeBreakdown(r.out, res.LatencyBreakdown)
	return res, jsonErr
}

// tracingCluster is a cluster that can trace sends (the Petrel driver).
type tracingCluster interface {
	startTracing(ctx context.Context, every int, groups []groupInfo) error
	traceBreakdown(from int64, pub99, pub999, e2e99, e2e999 float64) *LatencyBreakdown
	traceDelivered(topic string, queue int32, from int64, at int64)
}

// startTracing turns send tracing on when Config.TraceEvery asks for it and every master of the
// topics' groups records send traces; otherwise the run goes on untraced, with a line.
func (r *runner) startTracing(ctx context.Context) {
	tc, ok := r.cl.(tracingCluster)
	if r.cfg.TraceEvery <= 0 || !ok {
		return
	}
	groups, err := r.cl.groups(ctx, r.topics)
	if err == nil {
		err = tc.startTracing(ctx, r.cfg.TraceEvery, groups)
	}
	if err != nil {
		fmt.Fprintf(r.out, "stage breakdown: off (%v)\n", err)
		return
	}
	r.tr = tc
}

// startLagSampler starts sampling the replication status of the masters of the topics'
// groups (see newLagSampler); the sampling itself begins with lagStarted. It does nothing when
// sampling is off or no group has a master.
func (r *runner) startLagSampler(ctx context.Context) {
	if r.cfg.HASampleInterval <= 0 {
		return
	}
	groups, err := r.cl.groups(ctx, r.topics)
	if err != nil {
		r.log.Warn("cannot find the topics' broker groups: replication lag not sampled", "err", err)
		return
	}
	r.lag = newLagSampler(r.cl, groups, r.cfg.HASampleInterval)
	if r.lag == nil {
		return
	}
	r.lag.topics = r.topics
	r.lagStart, r.lagStop, r.lagDone = make(chan struct{}), make(chan struct{}), make(chan struct{})
	go func() {
		defer close(r.lagDone)
		r.lag.run(r.lagStart, r.lagStop)
	}()
}

// lagStarted starts the sampling (once the warm-up is over); later calls do nothing.
func (r *runner) lagStarted() {
	if r.lag != nil && !r.lagStarting {
		r.lagStarting = true
		close(r.lagStart)
	}
}

// stopLagSampler takes the last sample and stops the sampler; later calls do nothing.
func (r *runner) stopLagSampler() {
	if r.lag != nil && !r.lagStopping {
		r.lagStopping = true
		close(r.lagStop)
		<-r.lagDone
	}
}

// setReplication copies the served-by counts and the replication lag into the result.
func (r *runner) setReplication() {
	r.res.ServedBy = servedByList(r.cl.servedBy())
	if r.lag == nil {
		return
	}
	r.res.Replication = r.lag.report()
	r.res.HASampleIntervalMs = r.cfg.HASampleInterval.Milliseconds()
	r.lag.mu.Lock()
	r.res.HASampleErrors = r.lag.errors
	r.lag.mu.Unlock()
}

// checkBacklogFits refuses a backlog the embedded broker's disk cannot hold (more than 80% of
// the free space of dir, bytes), rather than filling the disk before the test starts.
func checkBacklogFits(backlog int64, dir string) error {
	if backlog <= 0 {
		return nil
	}
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil {
		return nil // unknown: let the run find out
	}
	free := int64(st.Bavail) * st.Bsize
	if backlog > free/10*8 {
		return fmt.Errorf("the workload's consumerBacklogSizeGB needs %.1f GiB of commit log, but %s has %.1f GiB free: lower it with --backlog-gb", float64(backlog)/(1<<30), dir, float64(free)/(1<<30))
	}
	return nil
}
