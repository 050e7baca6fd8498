package bench

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"math"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/petrel-mq/petrel/client"
	"github.com/petrel-mq/petrel/protocol"
)

// Stage attribution: the client traces about one batch in Config.TraceEvery
// (client.WithTraceEvery), the brokers record the same batches' stages (protocol.SendTrace), and
// the consumers report each pull's timing (client.WithPullObserver). The bench joins them by
// trace ID and by (topic, queue, queue offset), cuts each traced batch's publish and end-to-end
// latency into consecutive stages, and reports where the time of the slowest batches goes (at or
// above the run's p99 and p99.9) beside all traced batches. Stamps are Unix ns of one machine's
// wall clock: brokers must run on the bench's machine (in process or as processes).

// Publish stages, in the order a send passes them.
var publishStages = []string{
	"client batching",       // first message queued -> batch sealed (linger, batch fill)
	"client in-flight wait", // sealed -> taken by the queue's sender (the previous batch's answer)
	"client send",           // taken -> handed to the connection
	"network to broker",     // handed to the connection -> the broker's loop read it
	"broker queue",          // read -> send handler started
	"append",                // handler started -> Store.Append returned
	"flush wait",            // appended -> durable, when the flush finished last
	"replication wait",      // appended -> durable, when the replication finished last
	"answer",                // durable (or appended) -> answer written
	"network back",          // answer written -> read off the connection by the client
	"client completion",     // read -> result known, callbacks about to run
	"unattributed",          // stamps out of order (clock steps, torn records)
}

// End-to-end stages: the publish path up to the append, then the consumer's.
var endToEndStages = []string{
	"client batching", "client in-flight wait", "client send", "network to broker", "broker queue", "append",
	"consumer not polling",     // appended -> the pull that delivered it was sent (no pull waiting)
	"pull wake-up and network", // appended (or pull sent) -> the pull's answer read by the consumer
	"consumer handoff",         // answer read -> the handler started on the messages
	"unattributed",
}

// Replication stages of one slave, from the batch's append on the master to its durability.
var slaveStages = []string{
	"slave's next pull", // appended -> the pull that fetched it reached the master, when that came after the append (the slave still busy with an earlier answer, or its pull on the way)
	"held pull wake-up", // appended (or that pull's arrival) -> the master answered it with the batch's end (noticing, reading, compressing)
	"slave round trip",  // answered -> the slave's ack covering it reached the master (network, decompress, append, ack)
	"ack to durable",    // ack -> replicated, the master counting in-sync slaves (0 when another slave made it durable first)
	"unattributed",      // a stamp missing or out of order between two known ones
}

// StageShare is one stage's part of a set of traced batches' latency.
type StageShare struct {
	Stage  string  `json:"stage"`
	MeanMs float64 `json:"meanMs"`
	MaxMs  float64 `json:"maxMs"`
	// Share is the stage's part of the set's mean latency (0..1).
	Share float64 `json:"share"`
}

// StageSet is the stage breakdown of the traced batches at or above a latency threshold.
type StageSet struct {
	// Set names it: "all", "p99", "p99.9".
	Set string `json:"set"`
	// ThresholdMs is the run's latency at that percentile (from the full histogram); 0 for all.
	ThresholdMs float64 `json:"thresholdMs"`
	// Batches is how many traced batches the set holds; MeanMs their mean latency.
	Batches int          `json:"batches"`
	MeanMs  float64      `json:"meanMs"`
	Stages  []StageShare `json:"stages"`
}

// LatencyBreakdown is where the traced batches' publish and end-to-end latency goes.
type LatencyBreakdown struct {
	TraceEvery    int        `json:"traceEvery"`
	TracedBatches int        `json:"tracedBatches"` // client traces joined with a broker trace
	BrokerDropped uint64     `json:"brokerDropped"` // broker records overwritten before the bench read them
	Publish       []StageSet `json:"publish"`
	EndToEnd      []StageSet `json:"endToEnd"`
	// Slaves is each slave's part in the replication wait, by brokerId (slaves of one brokerId
	// in several broker groups are one element): from the batch's append to the slave's ack
	// and the batch's durability, cut into slaveStages, for all traced batches it acknowledged
	// and for those in the publish p99 and p99.9 sets.
	Slaves []SlaveBreakdown `json:"slaves"`
	// ExecTrace and CPUProfile name the Go execution trace and CPU profile recorded during the
	// run (petrel-bench --exec-trace, --cpu-profile): where a stage's time went inside the
	// process (waiting for a CPU, running what).
	ExecTrace  string `json:"execTrace,omitempty"`
	CPUProfile string `json:"cpuProfile,omitempty"`
}

// SlaveBreakdown is one slave's replication stages over the traced batches.
type SlaveBreakdown struct {
	BrokerID int64 `json:"brokerId"`
	// Unacked counts the traced batches the slave took part in but whose ack had not reached
	// the master when the broker's record was read (a slave slower than the in-sync slaves
	// that made the batch durable): left out of Sets, so it tells how many of the slave's
	// slowest batches the sets miss.
	Unacked int `json:"unacked"`
	// Sets are "all", "p99" and "p99.9": the batch's publish latency selects the tail sets,
	// whose MeanMs and stages are the slave's span.
	Sets []StageSet `json:"sets"`
}

// stagesOfPublish cuts a traced batch's publish latency (client Created -> Done, ns) into
// publishStages. Pure: consecutive boundaries, a stamp below the one before counts 0 for its stage
// and the difference goes to "unattributed", so the stages sum to the latency.
func stagesOfPublish(c *client.SendTraceClient, b *protocol.SendTrace) (total int64, d []int64) {
	st := b.Stamps
	durable := st[protocol.TraceAppended]
	waitStage := -1
	if f, r := st[protocol.TraceFlushed], st[protocol.TraceReplicated]; f != 0 || r != 0 {
		durable, waitStage = f, 6
		if r > f {
			durable, waitStage = r, 7
		}
	}
	bounds := []struct {
		at    int64
		stage int
	}{
		{c.Sealed, 0}, {c.Taken, 1}, {c.Written, 2}, {st[protocol.TraceRead], 3}, {st[protocol.TraceDispatched], 4},
		{st[protocol.TraceAppended], 5}, {durable, waitStage}, {st[protocol.TraceAnswered], 8}, {c.Received, 9}, {c.Done, 10},
	}
	d = make([]int64, len(publishStages))
	prev := c.Created
	for _, bd := range bounds {
		if bd.stage < 0 || bd.at == 0 {
			continue
		}
		if bd.at >= prev {
			d[bd.stage] += bd.at - prev
			prev = bd.at
		}
	}
	total = c.Done - c.Created
	d[len(d)-1] = total - sum(d)
	return total, d
}

// stagesOfEndToEnd cuts the end-to-end latency of a traced batch's first message (client Created
// -> the handler started on it, ns) into endToEndStages, given the pull that delivered it. Pure,
// as stagesOfPublish.
func stagesOfEndToEnd(c *client.SendTraceClient, b *protocol.SendTrace, p *pullRecord) (total int64, d []int64) {
	st := b.Stamps
	d = make([]int64, len(endToEndStages))
	prev := c.Created
	step := func(at int64, stage int) {
		if at != 0 && at >= prev {
			d[stage] += at - prev
			prev = at
		}
	}
	step(c.Sealed, 0)
	step(c.Taken, 1)
	step(c.Written, 2)
	step(st[protocol.TraceRead], 3)
	step(st[protocol.TraceDispatched], 4)
	step(st[protocol.TraceAppended], 5)
	step(p.sent, 6) // only when the pull was sent after the append
	step(p.received, 7)
	step(p.delivered, 8)
	total = p.delivered - c.Created
	d[len(d)-1] = total - sum(d)
	return total, d
}

// stagesOfSlave cuts slave sl's part in replicating batch b into slaveStages: from the batch's
// append on the master to the latest of the slave's stamps and the batch's durability (ns).
// Pure. A stage whose end stamp is missing (0) or below the stamp before it is not known: it
// counts 0, and the time up to the next stamp in order goes to "unattributed"; the stages sum
// to the span. ok is false when the span has no start or no end of the slave's: no append or
// no ack stamp.
func stagesOfSlave(b *protocol.SendTrace, sl *protocol.TraceSlave) (total int64, d []int64, ok bool) {
	app, repl := b.Stamps[protocol.TraceAppended], b.Stamps[protocol.TraceReplicated]
	if app == 0 || sl.Acked == 0 {
		return 0, nil, false
	}
	d = make([]int64, len(slaveStages))
	unattributed := len(d) - 1
	prev, lost := app, false
	if sl.Pulled > app { // a pull that arrived before the append was held: no wait for it
		d[0] = sl.Pulled - app
		prev = sl.Pulled
	}
	for i, at := range []int64{sl.Served, sl.Acked} {
		if at == 0 || at < prev {
			lost = true
			continue
		}
		d[cond(lost, unattributed, i+1)] += at - prev
		prev, lost = at, false
	}
	if repl > prev { // a replication before this slave's ack was another slave's doing: 0
		d[cond(lost, unattributed, 3)] += repl - prev
		prev = repl
	}
	return prev - app, d, true
}

func sum(d []int64) int64 {
	var s int64
	for _, v := range d {
		s += v
	}
	return s
}

// pullRecord is one pull that delivered messages: its queue offsets [from, next) and when it
// was sent, its answer read and the handler started (Unix ns).
type pullRecord struct {
	from, next                int64
	sent, received, delivered int64
}

type queueKey struct {
	topic string
	queue int32
}

// maxTracedBatches and maxPulls bound what a run keeps (a long run keeps its first ones).
const (
	maxTracedBatches = 1 << 17
	maxPulls         = 1 << 20
	tracePoll        = time.Second
)

// tracer collects one run's traces. Its methods are safe for concurrent use; poll runs on the
// goroutine startPolling starts, which stop ends.
type tracer struct {
	every int

	mu      sync.Mutex
	sends   map[uint64]client.SendTraceClient // by trace ID
	brokers map[uint64]protocol.SendTrace
	pulls   map[queueKey][]pullRecord
	nPulls  int
	cursor  map[string]uint64 // per broker address: the next sequence to ask for
	dropped uint64

	stopOnce sync.Once
	cancel   context.CancelFunc
	wg       sync.WaitGroup
}

func newTracer(every int) *tracer {
	return &tracer{every: every, sends: map[uint64]client.SendTraceClient{}, brokers: map[uint64]protocol.SendTrace{},
		pulls: map[queueKey][]pullRecord{}, cursor: map[string]uint64{}}
}

// sent is the producers' client.WithSendTraceObserver.
func (t *tracer) sent(c client.SendTraceClient) {
	if c.Err != nil {
		return
	}
	t.mu.Lock()
	if len(t.sends) < maxTracedBatches {
		t.sends[c.ID] = c
	}
	t.mu.Unlock()
}

// pulled is the consumers' client.WithPullObserver.
func (t *tracer) pulled(p client.PullTiming) {
	t.mu.Lock()
	if t.nPulls < maxPulls {
		k := queueKey{p.Topic, p.QueueID}
		t.pulls[k] = append(t.pulls[k], pullRecord{from: p.From, next: p.Next, sent: p.Sent, received: p.Received})
		t.nPulls++
	}
	t.mu.Unlock()
}

// delivered records when the handler started on the pull of (topic, queue) that began at from.
func (t *tracer) delivered(topic string, queue int32, from, at int64) {
	t.mu.Lock()
	ps := t.pulls[queueKey{topic, queue}]
	for i := len(ps) - 1; i >= 0 && i >= len(ps)-8; i-- { // the pull is among the queue's last
		if ps[i].from == from && ps[i].delivered == 0 {
			ps[i].delivered = at
			break
		}
	}
	t.mu.Unlock()
}

// traceFetcher is what the tracer needs to read the brokers' rings (*client.Admin is one).
type traceFetcher interface {
	SendTraces(ctx context.Context, addr string, from uint64) (*protocol.SendTraceTable, error)
}

// probe reports whether the broker at addr records send traces, and where its ring's head is:
// the run reads from there, so that records of earlier runs are neither read nor counted as
// dropped. A broker of an older version would refuse traced sends and one with tracing off
// records none, so the bench traces only when every master records.
func probe(ctx context.Context, f traceFetcher, addr string) (head uint64, err error) {
	tab, err := f.SendTraces(ctx, addr, math.MaxUint64)
	switch {
	case errors.Is(err, protocol.StatusRequestCodeNotSupported):
		return 0, fmt.Errorf("broker %s does not record send traces (an older version): %w", addr, err)
	case errors.Is(err, protocol.StatusServiceNotAvailable):
		return 0, fmt.Errorf("broker %s records no send traces: %w", addr, err)
	case err != nil:
		return 0, err
	}
	return tab.Next, nil
}

// startAt makes the next read of the broker at addr ask from sequence number seq.
func (t *tracer) startAt(addr string, seq uint64) {
	t.mu.Lock()
	t.cursor[addr] = seq
	t.mu.Unlock()
}

// poll reads every broker's new records once.
func (t *tracer) poll(ctx context.Context, f traceFetcher, addrs []string) {
	for _, addr := range addrs {
		t.mu.Lock()
		from := t.cursor[addr]
		t.mu.Unlock()
		tab, err := f.SendTraces(ctx, addr, from)
		if err != nil {
			continue // the next poll asks again; what the ring lost counts in Dropped then
		}
		t.mu.Lock()
		t.cursor[addr] = tab.Next
		t.dropped += tab.Dropped
		for _, s := range tab.Traces {
			if len(t.brokers) < maxTracedBatches {
				t.brokers[s.ID] = s
			}
		}
		t.mu.Unlock()
	}
}

// startPolling polls addrs every tracePoll until stop.
func (t *tracer) startPolling(f traceFetcher, addrs []string) {
	ctx, cancel := context.WithCancel(context.Background())
	t.cancel = cancel
	t.wg.Add(1)
	go func() {
		defer t.wg.Done()
		tk := time.NewTicker(tracePoll)
		defer tk.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-tk.C:
				t.poll(ctx, f, addrs)
			}
		}
	}()
}

// stop ends the polling goroutine (idempotent).
func (t *tracer) stop() {
	t.stopOnce.Do(func() {
		if t.cancel != nil {
			t.cancel()
		}
		t.wg.Wait()
	})
}

// breakdown joins what was collected and cuts it into stages; thresholds are the run's publish
// and end-to-end latencies at p99 and p99.9 (ms). A batch answered before from (Unix ns: the end
// of the warm-up) is left out, as the run's latency histograms leave it out; end to end, one
// delivered before it.
func (t *tracer) breakdown(from int64, pub99, pub999, e2e99, e2e999 float64) *LatencyBreakdown {
	t.mu.Lock()
	defer t.mu.Unlock()
	out := &LatencyBreakdown{TraceEvery: t.every, BrokerDropped: t.dropped}
	for _, ps := range t.pulls { // several groups' pulls of one queue interleave
		slices.SortStableFunc(ps, func(a, b pullRecord) int { return cmp.Compare(a.from, b.from) })
	}
	var pubs, e2es []stagedBatch
	slaves := slaveBatches{}
	for id, c := range t.sends {
		b, ok := t.brokers[id]
		if !ok || c.Done < from {
			continue // a warm-up batch: the run's latencies leave it out too
		}
		out.TracedBatches++
		pubTotal, d := stagesOfPublish(&c, &b)
		pubs = append(pubs, stagedBatch{pubTotal, d, pubTotal})
		if p := t.pullOf(b.Topic, b.QueueID, b.BaseQueueOffset); p != nil && p.delivered >= max(from, 1) {
			total, d := stagesOfEndToEnd(&c, &b, p)
			e2es = append(e2es, stagedBatch{total, d, total})
		}
		slaves.add(&b, pubTotal)
	}
	out.Publish = stageSets(pubs, publishStages, pub99, pub999)
	out.EndToEnd = stageSets(e2es, endToEndStages, e2e99, e2e999)
	out.Slaves = slaves.breakdown(pub99, pub999)
	return out
}

// slaveBatches gathers, per slave brokerId, its stages of the traced batches.
type slaveBatches map[int64]*slaveStaged

type slaveStaged struct {
	batches []stagedBatch
	unacked int
}

// add cuts every slave's part of batch b, whose publish latency was pub (ns).
func (m slaveBatches) add(b *protocol.SendTrace, pub int64) {
	for i := range b.Slaves {
		sl := &b.Slaves[i]
		s := m[sl.BrokerID]
		if s == nil {
			s = &slaveStaged{}
			m[sl.BrokerID] = s
		}
		if total, d, ok := stagesOfSlave(b, sl); ok {
			s.batches = append(s.batches, stagedBatch{total, d, pub})
		} else {
			s.unacked++
		}
	}
}

// breakdown returns the slaves' stage sets in brokerId order (empty when no batch had a
// slave: a lone master, or an older broker).
func (m slaveBatches) breakdown(pub99, pub999 float64) []SlaveBreakdown {
	out := []SlaveBreakdown{}
	for _, id := range slices.Sorted(maps.Keys(m)) {
		s := m[id]
		sets := stageSets(s.batches, slaveStages, pub99, pub999)
		if sets == nil {
			sets = []StageSet{}
		}
		out = append(out, SlaveBreakdown{BrokerID: id, Unacked: s.unacked, Sets: sets})
	}
	return out
}

// pullOf returns the pull that delivered queue offset off of (topic, queue). Caller holds mu.
func (t *tracer) pullOf(topic string, queue int32, off int64) *pullRecord {
	ps := t.pulls[queueKey{topic, queue}]
	i, _ := slices.BinarySearchFunc(ps, off, func(p pullRecord, off int64) int {
		switch {
		case p.next <= off:
			return -1
		case p.from > off:
			return 1
		}
		return 0
	})
	if i < len(ps) && ps[i].from <= off && off < ps[i].next {
		return &ps[i]
	}
	return nil
}

type stagedBatch struct {
	total int64
	d     []int64
	// by is the latency that puts the batch in the tail sets (ns): total, or for a slave's
	// stages the batch's publish latency.
	by int64
}

// stageSets summarises all batches, and those at or above each threshold (ms). Pure.
func stageSets(bs []stagedBatch, names []string, p99, p999 float64) []StageSet {
	if len(bs) == 0 {
		return nil
	}
	sets := []StageSet{summarise("all", 0, bs, names)}
	for _, th := range []struct {
		name string
		ms   float64
	}{{"p99", p99}, {"p99.9", p999}} {
		var tail []stagedBatch
		for _, b := range bs {
			if float64(b.by)/1e6 >= th.ms {
				tail = append(tail, b)
			}
		}
		if len(tail) > 0 {
			sets = append(sets, summarise(th.name, th.ms, tail, names))
		}
	}
	return sets
}

func summarise(name string, th float64, bs []stagedBatch, names []string) StageSet {
	s := StageSet{Set: name, ThresholdMs: th, Batches: len(bs), Stages: make([]StageShare, len(names))}
	var total float64
	for _, b := range bs {
		total += float64(b.total)
	}
	for i, n := range names {
		var sum, mx float64
		for _, b := range bs {
			v := float64(b.d[i])
			sum += v
			mx = max(mx, v)
		}
		s.Stages[i] = StageShare{Stage: n, MeanMs: sum / float64(len(bs)) / 1e6, MaxMs: mx / 1e6}
		if total != 0 {
			s.Stages[i].Share = sum / total
		}
	}
	s.MeanMs = total / float64(len(bs)) / 1e6
	return s
}

// writeBreakdown prints the breakdown: per set, the stages that take at least 1% of its mean;
// then the profiles recorded meanwhile, with the commands that read them.
func writeBreakdown(w io.Writer, b *LatencyBreakdown) {
	if b == nil {
		return
	}
	fmt.Fprintf(w, "stage breakdown: %d traced batches (about 1 in %d), %d broker records dropped; a batch's latency is its first message's, stages under 1%% of a set's mean are left out (the JSON has them all)\n",
		b.TracedBatches, b.TraceEvery, b.BrokerDropped)
	for _, part := range []struct {
		name string
		sets []StageSet
	}{{"publish", b.Publish}, {"end to end", b.EndToEnd}} {
		for _, s := range part.sets {
			writeStageSet(w, part.name, &s)
		}
	}
	for _, sl := range b.Slaves {
		name := fmt.Sprintf("replication slave %d", sl.BrokerID)
		for _, s := range sl.Sets {
			writeStageSet(w, name, &s)
		}
		if sl.Unacked > 0 {
			fmt.Fprintf(w, "  %s: %d traced batches without its ack when the broker's record was read (left out)\n", name, sl.Unacked)
		}
	}
	if line := profilesLine(b.ExecTrace, b.CPUProfile); line != "" {
		fmt.Fprintln(w, line)
	}
}

// writeStageSet prints one set's line: "  publish p99 (>= 27.60 ms, 3 batches, mean 24.10 ms):
// append 20.30 ms (84%); answer 3.10 ms (13%)".
func writeStageSet(w io.Writer, part string, s *StageSet) {
	fmt.Fprintf(w, "  %s %s (>= %.2f ms, %d batches, mean %.2f ms):", part, s.Set, s.ThresholdMs, s.Batches, s.MeanMs)
	sep := " "
	for _, st := range s.Stages {
		if st.Share >= 0.01 {
			fmt.Fprintf(w, "%s%s %.2f ms (%.0f%%)", sep, st.Stage, st.MeanMs, 100*st.Share)
			sep = "; "
		}
	}
	fmt.Fprintln(w)
}

// profilesLine names the execution trace and CPU profile of the run and how to read them, ""
// when neither was recorded.
func profilesLine(execTrace, cpuProfile string) string {
	var parts []string
	if execTrace != "" {
		parts = append(parts, fmt.Sprintf("execution trace %s (scheduling waits: go tool trace -pprof=sched %s > sched.pprof && go tool pprof -top sched.pprof)", execTrace, execTrace))
	}
	if cpuProfile != "" {
		parts = append(parts, fmt.Sprintf("CPU profile %s (go tool pprof %s)", cpuProfile, cpuProfile))
	}
	if len(parts) == 0 {
		return ""
	}
	return "  profiles: " + strings.Join(parts, "; ")
}

// absPath is path made absolute, so that the summary's commands work from any directory; path
// itself when that fails.
func absPath(path string) string {
	if path == "" {
		return ""
	}
	if a, err := filepath.Abs(path); err == nil {
		return a
	}
	return path
}
