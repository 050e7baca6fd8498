package bench

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/petrel-mq/petrel/broker"
	"github.com/petrel-mq/petrel/internal/fakebroker"
	"github.com/petrel-mq/petrel/internal/testutil"
	"github.com/petrel-mq/petrel/namesrv"
	"github.com/petrel-mq/petrel/protocol"
	"github.com/petrel-mq/petrel/protocol/rpc"
)

func TestMain(m *testing.M) { testutil.VerifyTestMain(m) }

// syncBuffer collects a run's output; the test reads it after the run.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func testLogger(t *testing.T) *slog.Logger {
	return slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelWarn}))
}

// writeWorkload writes an OMB workload into a fresh OMB-like tree and returns its path.
func writeWorkload(t *testing.T, yaml string) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "workloads")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "w.yaml")
	write(t, path, yaml)
	return path
}

const fakeWorkload = `name: fake
topics: 2
partitionsPerTopic: 3
keyDistributor: KEY_ROUND_ROBIN
messageSize: 64
subscriptionsPerTopic: 2
consumerPerSubscription: 1
producersPerTopic: 2
producerRate: %d
testDurationMinutes: 1
`

// runFake runs cfg through the bench's Petrel driver on fb's fake cluster and returns the
// result and the output.
func runFake(t *testing.T, ctx context.Context, cfg Config, fb *fakeBench) (*Result, string) {
	t.Helper()
	var out syncBuffer
	cfg.Out = &out
	cfg.Logger = testLogger(t)
	readBrokerID := cfg.readBrokerID()
	cfg.newCluster = func(ctx context.Context) (cluster, error) {
		c, err := fb.driver(ctx, readBrokerID)
		if err != nil {
			return nil, err
		}
		return c, nil
	}
	if cfg.ProgressInterval == 0 {
		cfg.ProgressInterval = 100 * time.Millisecond
	}
	res, err := Run(ctx, cfg)
	if err != nil {
		t.Fatalf("Run: %v\n%s", err, out.String())
	}
	t.Logf("output:\n%s", out.String())
	return res, out.String()
}

func TestRunFakeClean(t *testing.T) {
	jsonPath := filepath.Join(t.TempDir(), "out.json")
	res, out := runFake(t, t.Context(), Config{
		WorkloadFile: writeWorkload(t, fmt.Sprintf(fakeWorkload, 4000)),
		Duration:     400 * time.Millisecond,
		Warmup:       100 * time.Millisecond,
		Verify:       true,
		JSONFile:     jsonPath,
		Seed:         1,
	}, newFakeBench(t, 0, nil))
	if !res.OK() || !res.Verified || !res.Drained || res.Interrupted {
		t.Fatalf("ok %v verified %v drained %v interrupted %v; problems %q", res.OK(), res.Verified, res.Drained, res.Interrupted, res.Problems)
	}
	// 4,000 msg/s for the warm-up and the test: 0.5 s in all, longer when the machine is busy
	// (the phases end when the run sees them end), and no faster.
	elapsed := res.WarmupSeconds + res.TestSeconds
	if res.MessagesSent < 1500 || float64(res.MessagesSent) > 1.25*4000*elapsed ||
		res.MessagesAcked != res.MessagesSent || res.MessagesConsumed != 2*res.MessagesAcked {
		t.Fatalf("sent %d in %v s, acked %d, consumed %d", res.MessagesSent, elapsed, res.MessagesAcked, res.MessagesConsumed)
	}
	if res.Failed+res.Unknown+res.Lost+res.Duplicated+res.Reordered+res.Corrupted+res.Phantom != 0 {
		t.Fatalf("errors in a clean run: %+v", res)
	}
	if n := len(res.PublishRate); n < 2 || float64(n) > res.TestSeconds/0.1+2 {
		t.Fatalf("%d test intervals of 100 ms in %v s", n, res.TestSeconds)
	}
	if res.WarmupSeconds < 0.1 || res.TestSeconds < 0.4 || res.AggregatedPublishRate < 2500 || res.AggregatedPublishRate > 5500 {
		t.Fatalf("warm-up %v s, test %v s, rate %v", res.WarmupSeconds, res.TestSeconds, res.AggregatedPublishRate)
	}
	if res.AggregatedPublishDelayLatencyMax == 0 && res.AggregatedPublishDelayLatency50pct == 0 && len(res.AggregatedPublishDelayLatencyQuantiles) == 0 {
		t.Fatal("no publish delay recorded at a fixed rate")
	}
	if res.Topics != 2 || res.Partitions != 3 || res.ConsumersPerTopic != 2 || len(res.TopicNames) != 2 || len(res.ConsumerGroups) != 4 { // a group per subscription and topic
		t.Fatalf("shape %+v", res)
	}
	for _, want := range []string{"warmup pub", "test   pub", "drain  pub", "final read: master queues=6 messages=" + fmt.Sprint(res.MessagesAcked) + "\n" + cleanVerdict} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q", want)
		}
	}
	data, err := os.ReadFile(jsonPath)
	if err != nil {
		t.Fatal(err)
	}
	var back Result
	if err := json.Unmarshal(data, &back); err != nil || back.MessagesSent != res.MessagesSent || back.Workload != "fake" || back.Driver != DriverName {
		t.Fatalf("JSON: %v; %+v", err, back)
	}
	// One broker throughout: no failover, and no line about it.
	if len(res.Failovers) != 0 || strings.Contains(out, "failover") {
		t.Fatalf("failovers in a clean run: %+v", res.Failovers)
	}
}

// failOver makes the fake group fail over from its master to newer (a member started
// unregistered) at the at-th message sent (from 0): the batch holding it and every later one
// waits until the consumers have consumed what the old master holds and then pause has passed
// (nothing is stored meanwhile), then newer is the group's master in the routes, and the old
// master answers sends NOT_MASTER naming newer and pulls TOPIC_NOT_EXIST (so consumers look the
// route up again).
// The old master never serves what newer stored: it holds pulls for 20 ms at most, and the
// switch waits for those it holds to end.
func (fb *fakeBench) failOver(newer *fakebroker.Broker, at int, pause time.Duration) {
	const maxHold = 20 * time.Millisecond
	old := fb.master()
	var mu sync.Mutex
	var n int
	var resumeAt time.Time
	var switchOnce sync.Once
	var switched atomic.Bool
	gone := fakebroker.Refuse(protocol.StatusTopicNotExist, "not the master any more")
	old.Control(protocol.CodePullMessage, func(req *rpc.Request) (rpc.Reply, fakebroker.Verdict) {
		if switched.Load() {
			return gone(req)
		}
		var h protocol.PullRequestHeader
		if err := h.ReadFrom(req.Header); err == nil && h.PollTimeoutMs > int32(maxHold/time.Millisecond) {
			h.PollTimeoutMs = int32(maxHold / time.Millisecond)
			req.Header = h.AppendTo(nil)
		}
		return rpc.Reply{}, fakebroker.Pass
	})
	old.Control(protocol.CodeSendMessage, func(req *rpc.Request) (rpc.Reply, fakebroker.Verdict) {
		h, err := protocol.ReadBatchHeader(req.Body)
		if err != nil {
			return rpc.Reply{}, fakebroker.Pass
		}
		mu.Lock()
		first := n
		n += int(h.Count)
		if first+int(h.Count) <= at {
			mu.Unlock()
			return rpc.Reply{}, fakebroker.Pass
		}
		if resumeAt.IsZero() {
			fb.waitConsumed()
			resumeAt = time.Now().Add(pause)
		}
		wait := time.Until(resumeAt)
		mu.Unlock()
		time.Sleep(wait)
		switchOnce.Do(func() {
			switched.Store(true)
			time.Sleep(2 * maxHold) // the pulls the old master holds end
			fb.fc.SetRegistered(newer, true)
			fb.fc.SetRegistered(old, false)
		})
		return fakebroker.NotMaster(newer.Addr())(req)
	})
}

// TestRunFakeFailover: the fake group fails over from its master to another broker in the
// middle of the test phase, no send stored for 300 ms. The run reports the switch of the
// acknowledging broker and of the serving one, with the gaps, in the result and the summary,
// and verifies.
func TestRunFakeFailover(t *testing.T) {
	fb := newFakeBench(t, 0, nil)
	oldAddr := fb.master().Addr()
	newer := fb.g.AddMember(0, false)
	fb.failOver(newer, 1000, 300*time.Millisecond)
	jsonPath := filepath.Join(t.TempDir(), "out.json")
	res, out := runFake(t, t.Context(), Config{
		WorkloadFile: writeWorkload(t, fmt.Sprintf(fakeWorkload, 4000)),
		Duration:     600 * time.Millisecond,
		Warmup:       100 * time.Millisecond,
		Verify:       true,
		JSONFile:     jsonPath,
		Seed:         1,
	}, fb)
	if !res.OK() || !res.Drained {
		t.Fatalf("%s; problems %q", countsOf(res), res.Problems)
	}
	if len(res.Failovers) != 2 {
		t.Fatalf("failovers %+v, want one of sends and one of consumption", res.Failovers)
	}
	for _, e := range res.Failovers {
		if e.BrokerName != fakeGroup || e.OldAddr != oldAddr || e.NewAddr != newer.Addr() {
			t.Errorf("event %+v", e)
		}
		// The senders' pause is all of the sends' gap; consumers drain what fake:0 stored
		// meanwhile, so theirs is a little shorter.
		if e.GapMs < 250 || e.GapMs > 2000 || e.FirstUnixMs-e.LastUnixMs < 250 || e.LastMessage.Topic == "" || e.FirstMessage.Topic == "" {
			t.Errorf("event %+v: gap", e)
		}
	}
	// One event of each kind, in the order sortFailovers gives: by the break's start, which for
	// the two kinds lies within a millisecond or two (the last consumption may precede the last
	// acknowledgement, whose answer is still on its way).
	a, b := res.Failovers[0], res.Failovers[1]
	if a.Kind == b.Kind || !slices.IsSortedFunc(res.Failovers, func(x, y FailoverEvent) int { return cmp.Compare(x.LastUnixMs, y.LastUnixMs) }) {
		t.Errorf("events %s at %d, %s at %d; want one send and one consume, by the break's start", a.Kind, a.LastUnixMs, b.Kind, b.LastUnixMs)
	}
	for _, want := range []string{"failover          fake send: " + oldAddr + " -> " + newer.Addr() + " gap ", "failover          fake consume: " + oldAddr + " -> " + newer.Addr() + " gap "} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q", want)
		}
	}
	data, err := os.ReadFile(jsonPath)
	if err != nil {
		t.Fatal(err)
	}
	var back Result
	if err := json.Unmarshal(data, &back); err != nil || !reflect.DeepEqual(back.Failovers, res.Failovers) {
		t.Fatalf("JSON: %v; failovers %+v", err, back.Failovers)
	}
}

// TestRunFakeForeignMessages: messages on the topics that the bench did not write (valid
// batches without a bench identity, or with a malformed one) are counted as foreign and do not
// fail the run; only this run's messages are verified.
func TestRunFakeForeignMessages(t *testing.T) {
	fb := newFakeBench(t, 0, nil)
	for _, topic := range []string{"petrel-bench-fo-0", "petrel-bench-fo-1"} {
		fb.g.CreateTopic(topic, 3)
		var bb protocol.BatchBuilder
		bb.Reset(topic, 0, 1, 0)
		bb.Add(&protocol.Message{Body: []byte("written by another application"), Timestamp: time.Now().UnixMilli()})
		bb.Add(&protocol.Message{Properties: protocol.AppendProperty(nil, "pbid", "not.an.identity"), Body: []byte("x"), Timestamp: time.Now().UnixMilli()})
		if _, err := fb.g.Append(bb.Finish()); err != nil {
			t.Fatal(err)
		}
	}
	res, out := runFake(t, t.Context(), Config{
		WorkloadFile: writeWorkload(t, fmt.Sprintf(fakeWorkload, 2000)),
		Duration:     200 * time.Millisecond,
		Warmup:       0,
		Verify:       true,
		TopicID:      "fo",
	}, fb)
	// 2 foreign messages per topic, each consumed by the topic's 2 subscriptions.
	if !res.OK() || res.Corrupted != 0 || res.Foreign != 8 || res.MessagesConsumed != 2*res.MessagesAcked {
		t.Fatalf("%s foreign=%d; problems %q", countsOf(res), res.Foreign, res.Problems)
	}
	if !strings.Contains(out, "PASS: ") || !strings.Contains(out, "foreign=8") {
		t.Errorf("the verification line does not show the foreign messages:\n%s", out)
	}

	// A consume-only run counts them as foreign too, and checks the queues' contiguity across
	// them.
	res, out = runFake(t, t.Context(), Config{ConsumeOnly: true, Topics: []string{"petrel-bench-fo-0"}}, fb)
	if !res.OK() || res.Corrupted != 0 || res.Foreign != 2 || res.Gaps != 0 || !strings.Contains(out, "2 foreign") {
		t.Fatalf("consume-only: %s foreign=%d gaps=%d; problems %q", countsOf(res), res.Foreign, res.Gaps, res.Problems)
	}
}

// TestRunFakeExistingTopicShape: a run on existing topics (--no-create-topic) reports the queue
// count the cluster has, not the workload's partitionsPerTopic, and so does a consume-only run;
// topics of different queue counts are reported by their total.
func TestRunFakeExistingTopicShape(t *testing.T) {
	fb := newFakeBench(t, 0, map[string]int32{"petrel-bench-ex-0": 5, "petrel-bench-ex-1": 5})
	res, out := runFake(t, t.Context(), Config{
		WorkloadFile:  writeWorkload(t, fmt.Sprintf(fakeWorkload, 2000)), // partitionsPerTopic: 3
		Duration:      100 * time.Millisecond,
		Warmup:        0,
		Verify:        true,
		TopicID:       "ex",
		NoCreateTopic: true,
		NameServers:   fb.fc.Addr(),
	}, fb)
	if !res.OK() || res.Topics != 2 || res.Partitions != 5 || res.Queues != 10 {
		t.Fatalf("%s; topics %d partitions %d queues %d", countsOf(res), res.Topics, res.Partitions, res.Queues)
	}
	for _, want := range []string{"2 topic(s) x 5 queue(s) (the workload's partitionsPerTopic is 3)", "shape             2 topic(s) x 5 queue(s),"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q", want)
		}
	}

	fb.g.CreateTopic("petrel-bench-ex-1", 2)
	res, out = runFake(t, t.Context(), Config{ConsumeOnly: true, TopicID: "ex", WorkloadFile: writeWorkload(t, fmt.Sprintf(fakeWorkload, 1))}, fb)
	if res.Topics != 2 || res.Partitions != 0 || res.Queues != 7 || !strings.Contains(out, "shape             2 topic(s), 7 queue(s) in all,") {
		t.Errorf("consume-only over 5 + 2 queues: topics %d partitions %d queues %d", res.Topics, res.Partitions, res.Queues)
	}
	res, out = runFake(t, t.Context(), Config{ConsumeOnly: true, Topics: []string{"petrel-bench-ex-0"}}, fb)
	if res.Partitions != 5 || res.Queues != 5 || !strings.Contains(out, "shape             1 topic(s) x 5 queue(s),") {
		t.Errorf("consume-only over 5 queues: partitions %d queues %d", res.Partitions, res.Queues)
	}
}

func TestRunFakeFaults(t *testing.T) {
	tests := []struct {
		name         string
		fault        func(n int, resend bool) fault
		retryUnknown int
		// setup sets the faults the fake broker cannot make (nil: none).
		setup func(fb *fakeBench)
		ok    bool
		check func(r *Result) error
	}{
		{"definite failures", every(10, faultFail), 0, nil, true, func(r *Result) error {
			return want(r.Failed > 0 && r.MessagesAcked+r.Failed == r.MessagesSent && r.Unknown == 0, "failed")
		}},
		{"refused sends", nil, 0, refuseEvery(50), true, func(r *Result) error {
			return want(r.Failed > 0 && r.MessagesAcked+r.Failed == r.MessagesSent, "failed")
		}},
		{"phantom", every(10, faultPhantom), 0, nil, false, func(r *Result) error {
			return want(r.Phantom == 3*r.Failed && r.Phantom > 0 && r.FinalRead[0].Phantom == r.Failed, "phantom = (2 subscriptions + the final read) x failed")
		}},
		{"unknown, stored", every(10, faultUnknownStored), 0, nil, true, func(r *Result) error {
			return want(r.Unknown > 0 && r.UnknownDelivered == 2*r.Unknown, "unknownDelivered = 2 x unknown")
		}},
		{"unknown, not stored", every(10, faultUnknownDropped), 0, nil, true, func(r *Result) error {
			return want(r.Unknown > 0 && r.UnknownDelivered == 0 && r.Lost == 0, "unknown, not lost")
		}},
		{"unknown, stored, retried", every(10, faultUnknownStored), 1, nil, true, func(r *Result) error {
			return want(r.Resent > 0 && r.DuplicatedAfterRetry == 2*r.Resent && r.Unknown == 0 && r.MessagesAcked == r.MessagesSent, "duplicatedAfterRetry = 2 x resent")
		}},
		{"unknown, not stored, retried", every(10, faultUnknownDropped), 2, nil, true, func(r *Result) error {
			return want(r.Resent > 0 && r.DuplicatedAfterRetry == 0 && r.Unknown == 0 && r.MessagesAcked == r.MessagesSent, "every message acknowledged once")
		}},
		{"lost", every(10, faultLose), 0, nil, false, func(r *Result) error {
			return want(r.Lost > 0 && !r.Drained, "lost and not drained")
		}},
		{"duplicated", every(10, faultDuplicate), 0, nil, false, func(r *Result) error {
			return want(r.Duplicated > 0 && r.Lost == 0, "duplicated")
		}},
		{"corrupted", every(10, faultCorrupt), 0, nil, false, func(r *Result) error {
			return want(r.Corrupted > 0 && r.Lost == 0, "corrupted")
		}},
		{"reordered", nil, 0, (*fakeBench).swapOnce, false, func(r *Result) error {
			return want(r.Reordered > 0, "reordered")
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			fb := newFakeBench(t, 0, nil)
			fb.setFault(tt.fault)
			if tt.setup != nil {
				tt.setup(fb)
			}
			res, _ := runFake(t, t.Context(), Config{
				WorkloadFile: writeWorkload(t, fmt.Sprintf(fakeWorkload, 5000)),
				Duration:     200 * time.Millisecond,
				Warmup:       0,
				Verify:       true,
				RetryUnknown: tt.retryUnknown,
				DrainTimeout: 300 * time.Millisecond,
			}, fb)
			if res.OK() != tt.ok {
				t.Errorf("OK() = %v, want %v; problems %q", res.OK(), tt.ok, res.Problems)
			}
			if err := tt.check(res); err != nil {
				t.Errorf("%v: %+v", err, countsOf(res))
			}
		})
	}
}

// cleanVerdict is the last line of a clean verified run's summary.
const cleanVerdict = "lost=0 duplicated=0 reordered=0 corrupted=0 phantom=0 inconsistent=0 offsetMovedBack=0\n"

func want(cond bool, what string) error {
	if !cond {
		return fmt.Errorf("want %s", what)
	}
	return nil
}

func countsOf(r *Result) string {
	return fmt.Sprintf("sent=%d acked=%d consumed=%d failed=%d unknown=%d lost=%d duplicated=%d dupAfterRetry=%d reordered=%d corrupted=%d phantom=%d unknownDelivered=%d resent=%d drained=%v",
		r.MessagesSent, r.MessagesAcked, r.MessagesConsumed, r.Failed, r.Unknown, r.Lost, r.Duplicated, r.DuplicatedAfterRetry, r.Reordered, r.Corrupted, r.Phantom, r.UnknownDelivered, r.Resent, r.Drained)
}

func TestRunFakeWithoutVerify(t *testing.T) {
	fb := newFakeBench(t, 0, nil)
	fb.setFault(every(2, faultFail)) // a run at full speed sends a few large batches
	res, out := runFake(t, t.Context(), Config{
		WorkloadFile: writeWorkload(t, fmt.Sprintf(fakeWorkload, 0)),
		Duration:     200 * time.Millisecond,
		Warmup:       -1, // the workload's 1 minute, capped at a quarter of the duration
	}, fb)
	if res.Verified || !res.OK() || res.Failed == 0 || res.MessagesAcked+res.Failed != res.MessagesSent || res.MessagesConsumed != 2*res.MessagesAcked {
		t.Fatalf("%s", countsOf(res))
	}
	if res.WarmupSeconds < 0.05 || res.WarmupSeconds > 0.5 { // 50 ms, give or take a busy scheduler
		t.Fatalf("warm-up %v s, want 50 ms", res.WarmupSeconds)
	}
	if !strings.Contains(out, "verification      off") {
		t.Fatal("summary does not say verification is off")
	}
}

func TestRunFakeReplay(t *testing.T) {
	dir := t.TempDir()
	var lines []string
	for f := range 3 {
		var b strings.Builder
		for i := range 1000 {
			fmt.Fprintf(&b, "file %d line %d\r\n", f, i)
			lines = append(lines, fmt.Sprintf("file %d line %d", f, i))
		}
		write(t, filepath.Join(dir, fmt.Sprintf("%d.log", f)), b.String())
	}
	write(t, filepath.Join(dir, "LICENSE"), "not a payload\n")
	fb := newFakeBench(t, 0, nil)
	res, _ := runFake(t, t.Context(), Config{PayloadDir: dir, Verify: true}, fb)
	if !res.OK() || res.Mode != "replay" || res.MessagesSent != 3000 || res.MessagesConsumed != 3000 || res.Partitions != ReplayQueues {
		t.Fatalf("%s mode %s", countsOf(res), res.Mode)
	}
	if len(res.PublishRate) == 0 || res.AggregatedPublishRate == 0 {
		t.Fatal("a replay has no time series")
	}
	// Every line was sent once, in order: the n-th message the producer sent holds line n, and
	// each queue holds its lines in file order.
	got := make([]string, len(lines))
	for q := range int32(ReplayQueues) {
		last := -1
		for _, m := range fb.g.Messages(res.TopicNames[0], q) {
			id, err := ParseIdentity(m.Properties)
			if err != nil || id.Seq >= uint64(len(lines)) || got[id.Seq] != "" || int(id.Seq) < last {
				t.Fatalf("queue %d: message %+v at offset %d (%v) sent twice, out of order or unknown", q, id, m.QueueOffset, err)
			}
			got[id.Seq], last = string(m.Body), int(id.Seq)
		}
	}
	if strings.Join(got, "\n") != strings.Join(lines, "\n") {
		t.Fatal("the lines were not sent once each in file order")
	}
}

// TestRunFakeBacklog runs OMB's backlog mode: consumers wait until the backlog is built, then
// drain it while producers go on; the test ends only once it is drained.
func TestRunFakeBacklog(t *testing.T) {
	wl := strings.Replace(fmt.Sprintf(fakeWorkload, 20000), "testDurationMinutes: 1\n", "testDurationMinutes: 1\nconsumerBacklogSizeGB: 256\n", 1)
	res, out := runFake(t, t.Context(), Config{
		WorkloadFile: writeWorkload(t, wl),
		Duration:     100 * time.Millisecond, // shorter than building the backlog takes
		Warmup:       0,
		Verify:       true,
		gigabyte:     1 << 10, // 256 KiB of 64-byte messages: 4,096 backlogged deliveries
	}, newFakeBench(t, 0, nil))
	if !res.OK() || !res.Drained || res.MessagesConsumed != 2*res.MessagesAcked {
		t.Fatalf("%s", countsOf(res))
	}
	if res.MessagesAcked < 2048 || res.TestSeconds < 0.1 {
		t.Fatalf("the test ended before the backlog was built: %s, test %v s", countsOf(res), res.TestSeconds)
	}
	built, drained := strings.Index(out, "backlog: 256 GB built"), strings.Index(out, "backlog: drained")
	if built < 0 || drained < built {
		t.Fatalf("backlog phases missing or out of order:\n%s", out)
	}
	// Nothing was consumed before the backlog was built.
	if first := strings.Index(out, "test   pub"); first >= 0 && first < built && !strings.Contains(out[first:built], "cons       0.0 msg/s") {
		t.Fatalf("consumers ran while the backlog was being built:\n%s", out)
	}
	// The drain is measured: at least the backlog's drained part (down to the workload's
	// backlogDrainRatio, OMB's default 1.0: all of it) was consumed in the drain time.
	if res.BacklogMessages < 4096 || res.BacklogDrainSeconds <= 0 ||
		res.BacklogDrainRate*res.BacklogDrainSeconds < float64(res.BacklogMessages)-1000 {
		t.Fatalf("backlog drain not measured: %d messages, %v s at %v msg/s", res.BacklogMessages, res.BacklogDrainSeconds, res.BacklogDrainRate)
	}
	if !strings.Contains(out, "backlog drain     ") {
		t.Fatalf("no backlog drain line in the summary:\n%s", out)
	}
}

// TestRunFakeSyncSendStop: the end of the test lets each synchronous send in flight finish
// instead of cancelling it, so the stop itself leaves no unknown outcome.
func TestRunFakeSyncSendStop(t *testing.T) {
	fb := newFakeBench(t, 0, nil)
	fb.master().Control(protocol.CodeSendMessage, fakebroker.Delay(5*time.Millisecond))
	res, out := runFake(t, t.Context(), Config{
		WorkloadFile: writeWorkload(t, fmt.Sprintf(fakeWorkload, 0)),
		Duration:     300 * time.Millisecond,
		Warmup:       0,
		SyncSend:     true,
		Verify:       true,
	}, fb)
	if !res.OK() || res.MessagesAcked == 0 || res.Unknown != 0 || res.MessagesSent != res.MessagesAcked {
		t.Fatalf("%s\n%s", countsOf(res), out)
	}
}

func TestRunFakeInterrupted(t *testing.T) {
	ctx, cancel := context.WithCancel(t.Context())
	time.AfterFunc(300*time.Millisecond, cancel)
	start := time.Now()
	res, out := runFake(t, ctx, Config{
		WorkloadFile: writeWorkload(t, fmt.Sprintf(fakeWorkload, 2000)),
		Duration:     time.Hour,
		Warmup:       0,
		Verify:       true,
	}, newFakeBench(t, 0, nil))
	if d := time.Since(start); d > 5*time.Second {
		t.Fatalf("an interrupted run took %v", d)
	}
	if !res.Interrupted || !res.OK() || !res.Drained || res.MessagesSent == 0 {
		t.Fatalf("interrupted %v ok %v drained %v: %s", res.Interrupted, res.OK(), res.Drained, countsOf(res))
	}
	if !strings.Contains(out, "interrupted") || !strings.Contains(out, "lost=0") {
		t.Fatalf("output:\n%s", out)
	}
}

func TestConfigErrors(t *testing.T) {
	for name, tt := range map[string]struct {
		cfg  Config
		want string
	}{
		"nothing to run":      {Config{}, "nothing to run"},
		"bad flush":           {Config{PayloadDir: "testdata/loghub", FlushDiskType: "SOMETIMES"}, "flush type"},
		"no-create needs id":  {Config{PayloadDir: "testdata/loghub", NoCreateTopic: true, NameServers: "x:1"}, "topic id"},
		"no-create needs -n":  {Config{PayloadDir: "testdata/loghub", NoCreateTopic: true, TopicID: "x"}, "running cluster"},
		"retry-unknown range": {Config{PayloadDir: "testdata/loghub", RetryUnknown: 9}, "retry-unknown"},
		"missing workload":    {Config{WorkloadFile: "workloads/none.yaml"}, "cannot read workload"},
		"missing payload dir": {Config{PayloadDir: "testdata/none"}, "cannot read payload directory"},
		"empty workload file": {Config{WorkloadFile: "/dev/null"}, "empty workload"},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := Run(t.Context(), tt.cfg)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("err = %v, want %q", err, tt.want)
			}
		})
	}
}

// TestEmbeddedLoghubReplay is `make run`: every loghub line through an embedded NameServer and
// broker, verified.
func TestEmbeddedLoghubReplay(t *testing.T) {
	var out syncBuffer
	res, err := Run(t.Context(), Config{
		PayloadDir: "testdata/loghub",
		Verify:     true,
		Out:        &out,
		Logger:     testLogger(t),
	})
	t.Logf("output:\n%s", out.String())
	if err != nil {
		t.Fatal(err)
	}
	if !res.OK() || !res.Drained || res.MessagesSent != 16000 || res.MessagesAcked != 16000 || res.MessagesConsumed != 16000 ||
		res.Lost+res.Duplicated+res.Reordered+res.Corrupted+res.Phantom+res.Failed+res.Unknown != 0 {
		t.Fatalf("%s; problems %q", countsOf(res), res.Problems)
	}
	if !strings.HasSuffix(out.String(), cleanVerdict) {
		t.Fatal("the summary does not end with the clean verification line")
	}
	if !strings.Contains(out.String(), "commit log written through its files") {
		t.Fatal("the embedded cluster's line does not say the commit log is written through its files (the default)")
	}
	assertDataDirRemoved(t, out.String())
}

// TestEmbeddedWorkload runs an OMB workload file unchanged (rate 50,000 msg/s, 16 queues, 100 B
// payload) for 2 s against the embedded cluster, verified, with a JSON result.
func TestEmbeddedWorkload(t *testing.T) {
	var out syncBuffer
	jsonPath := filepath.Join(t.TempDir(), "out.json")
	res, err := Run(t.Context(), Config{
		WorkloadFile:     "workloads/1-topic-16-partition-100b.yaml",
		Duration:         2 * time.Second,
		Warmup:           0,
		ProgressInterval: 500 * time.Millisecond,
		Verify:           true,
		JSONFile:         jsonPath,
		FlushDiskType:    "SYNC_FLUSH",
		SegmentSize:      64 << 20,
		// Every append copied into the mappings; TestEmbeddedLoghubReplay writes through the
		// files (the default).
		EmbeddedWriteThroughMapping: true,
		Out:                         &out,
		Logger:                      testLogger(t),
	})
	t.Logf("output:\n%s", out.String())
	if err != nil {
		t.Fatal(err)
	}
	if !res.OK() || !res.Drained || res.MessagesSent == 0 || res.MessagesAcked != res.MessagesSent || res.MessagesConsumed != res.MessagesAcked ||
		res.Lost+res.Duplicated+res.Reordered+res.Corrupted+res.Phantom+res.Failed+res.Unknown != 0 {
		t.Fatalf("%s; problems %q", countsOf(res), res.Problems)
	}
	if res.Partitions != 16 || res.MessageSize != 100 || len(res.PublishRate) < 3 || res.AggregatedPublishLatency50pct <= 0 || res.AggregatedEndToEndLatency50pct <= 0 {
		t.Fatalf("result %+v", res)
	}
	if !strings.Contains(out.String(), "commit log copied into its mappings") {
		t.Fatal("the embedded cluster's line does not say the commit log is copied into its mappings")
	}
	var m map[string]any
	data, err := os.ReadFile(jsonPath)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(data, &m); err != nil {
		t.Fatal(err)
	}
	for field, kind := range ombFields {
		if kindOf(m[field]) != kind {
			t.Errorf("JSON field %s: %s, want %s", field, kindOf(m[field]), kind)
		}
	}
	assertDataDirRemoved(t, out.String())
}

var dataDirRE = regexp.MustCompile(`embedded cluster: .*, data (\S+)\n`)

// assertDataDirRemoved checks that the embedded cluster named in a run's output removed its
// data directory.
func assertDataDirRemoved(t *testing.T, out string) {
	t.Helper()
	m := dataDirRE.FindStringSubmatch(out)
	if m == nil {
		t.Fatal("the output does not name the embedded cluster's data directory")
	}
	if _, err := os.Stat(m[1]); !os.IsNotExist(err) {
		t.Errorf("data directory %s left behind (%v)", m[1], err)
	}
}

// TestBrokerRestart restarts the broker (same port, same data) in the middle of a verified
// run against a "running cluster": the bench must ride it out, counting failed or unknown
// sends, and lose nothing that was acknowledged.
func TestBrokerRestart(t *testing.T) {
	log := testLogger(t)
	ns := namesrv.New(namesrv.Config{ListenAddr: "127.0.0.1:0", RegistrationPeriod: time.Nanosecond, Logger: log})
	if err := ns.Start(); err != nil {
		t.Fatal(err)
	}
	defer ns.Close()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	bc := broker.DefaultConfig()
	bc.NamesrvAddr = ns.Addr()
	bc.BindAddress = "127.0.0.1"
	bc.ListenPort = port
	bc.StorePathRootDir = t.TempDir()
	bc.MappedFileSizeCommitLog = 64 << 20
	start := func() *broker.Broker {
		t.Helper()
		b, err := broker.New(bc, log)
		if err != nil {
			t.Fatal(err)
		}
		if err := b.Start(); err != nil {
			t.Fatal(err)
		}
		return b
	}
	b := start()
	defer func() { b.Close() }()

	var out syncBuffer
	type outcome struct {
		res *Result
		err error
	}
	done := make(chan outcome, 1)
	go func() {
		res, err := Run(t.Context(), Config{
			WorkloadFile:     writeWorkload(t, strings.Replace(fmt.Sprintf(fakeWorkload, 5000), "keyDistributor: KEY_ROUND_ROBIN\n", "", 1)),
			NameServers:      ns.Addr(),
			Duration:         6 * time.Second,
			Warmup:           0,
			ProgressInterval: time.Second,
			Verify:           true,
			Out:              &out,
			Logger:           log,
		})
		done <- outcome{res, err}
	}()
	time.Sleep(2 * time.Second)
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(500 * time.Millisecond)
	b = start()
	o := <-done
	t.Logf("output:\n%s", out.String())
	if o.err != nil {
		t.Fatal(o.err)
	}
	res := o.res
	if !res.OK() || !res.Drained || res.Lost+res.Duplicated+res.Reordered+res.Corrupted+res.Phantom != 0 {
		t.Fatalf("%s; problems %q", countsOf(res), res.Problems)
	}
	// Sends went on after the restart: about 6 s x 5,000 msg/s in all, less the outage.
	if res.MessagesAcked < 15000 || res.MessagesSent != res.MessagesAcked+res.Failed+res.Unknown {
		t.Fatalf("%s", countsOf(res))
	}
	t.Logf("through the restart: %s", countsOf(res))
	// The timeline shows the outage, the broker back at its address, for sends and for
	// consumption: the broker was down at least 500 ms.
	kinds := map[string]bool{}
	for _, e := range res.Failovers {
		t.Logf("failover: %s", e.text())
		if e.OldAddr == "" || e.NewAddr != e.OldAddr {
			t.Errorf("event %+v: want the same broker before and after", e)
		}
		if e.GapMs >= 500 {
			kinds[e.Kind] = true
		}
	}
	if !kinds[FailoverSend] || !kinds[FailoverConsume] {
		t.Errorf("failovers %+v: want a gap of at least 500 ms in sends and in consumption", res.Failovers)
	}
	if !strings.Contains(out.String(), "  failover          ") {
		t.Error("the summary has no failover line")
	}
}

func TestCheckBacklogFits(t *testing.T) {
	if err := checkBacklogFits(0, t.TempDir()); err != nil {
		t.Fatal(err)
	}
	if err := checkBacklogFits(1<<20, t.TempDir()); err != nil {
		t.Fatalf("1 MiB backlog refused: %v", err)
	}
	if err := checkBacklogFits(1<<60, t.TempDir()); err == nil || !strings.Contains(err.Error(), "--backlog-gb") {
		t.Fatalf("an exabyte backlog: %v", err)
	}
}
