package bench

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"os"
	"strings"
	"time"

	"github.com/HdrHistogram/hdrhistogram-go"
)

// Result is the outcome of a run. Its JSON form is OMB's TestResult (same field names and
// units: latencies in ms, publish delay in µs, time series with one entry per progress interval
// of the test phase) followed by Petrel's own fields (message counts and verification).
type Result struct {
	Workload          string `json:"workload"`
	Driver            string `json:"driver"`
	MessageSize       int64  `json:"messageSize"`
	Topics            int    `json:"topics"`
	Partitions        int    `json:"partitions"` // the queue count of every topic; 0 when they differ (see Queues)
	ProducersPerTopic int    `json:"producersPerTopic"`
	ConsumersPerTopic int    `json:"consumersPerTopic"`

	PublishRate      []float64 `json:"publishRate"`
	PublishErrorRate []float64 `json:"publishErrorRate"`
	ConsumeRate      []float64 `json:"consumeRate"`
	Backlog          []int64   `json:"backlog"`

	PublishLatencyAvg     []float64 `json:"publishLatencyAvg"`
	PublishLatency50pct   []float64 `json:"publishLatency50pct"`
	PublishLatency75pct   []float64 `json:"publishLatency75pct"`
	PublishLatency95pct   []float64 `json:"publishLatency95pct"`
	PublishLatency99pct   []float64 `json:"publishLatency99pct"`
	PublishLatency999pct  []float64 `json:"publishLatency999pct"`
	PublishLatency9999pct []float64 `json:"publishLatency9999pct"`
	PublishLatencyMax     []float64 `json:"publishLatencyMax"`

	PublishDelayLatencyAvg     []float64 `json:"publishDelayLatencyAvg"`
	PublishDelayLatency50pct   []int64   `json:"publishDelayLatency50pct"`
	PublishDelayLatency75pct   []int64   `json:"publishDelayLatency75pct"`
	PublishDelayLatency95pct   []int64   `json:"publishDelayLatency95pct"`
	PublishDelayLatency99pct   []int64   `json:"publishDelayLatency99pct"`
	PublishDelayLatency999pct  []int64   `json:"publishDelayLatency999pct"`
	PublishDelayLatency9999pct []int64   `json:"publishDelayLatency9999pct"`
	PublishDelayLatencyMax     []int64   `json:"publishDelayLatencyMax"`

	AggregatedPublishLatencyAvg     float64 `json:"aggregatedPublishLatencyAvg"`
	AggregatedPublishLatency50pct   float64 `json:"aggregatedPublishLatency50pct"`
	AggregatedPublishLatency75pct   float64 `json:"aggregatedPublishLatency75pct"`
	AggregatedPublishLatency95pct   float64 `json:"aggregatedPublishLatency95pct"`
	AggregatedPublishLatency99pct   float64 `json:"aggregatedPublishLatency99pct"`
	AggregatedPublishLatency999pct  float64 `json:"aggregatedPublishLatency999pct"`
	AggregatedPublishLatency9999pct float64 `json:"aggregatedPublishLatency9999pct"`
	AggregatedPublishLatencyMax     float64 `json:"aggregatedPublishLatencyMax"`

	AggregatedPublishDelayLatencyAvg     float64 `json:"aggregatedPublishDelayLatencyAvg"`
	AggregatedPublishDelayLatency50pct   int64   `json:"aggregatedPublishDelayLatency50pct"`
	AggregatedPublishDelayLatency75pct   int64   `json:"aggregatedPublishDelayLatency75pct"`
	AggregatedPublishDelayLatency95pct   int64   `json:"aggregatedPublishDelayLatency95pct"`
	AggregatedPublishDelayLatency99pct   int64   `json:"aggregatedPublishDelayLatency99pct"`
	AggregatedPublishDelayLatency999pct  int64   `json:"aggregatedPublishDelayLatency999pct"`
	AggregatedPublishDelayLatency9999pct int64   `json:"aggregatedPublishDelayLatency9999pct"`
	AggregatedPublishDelayLatencyMax     int64   `json:"aggregatedPublishDelayLatencyMax"`

	AggregatedPublishLatencyQuantiles      Quantiles `json:"aggregatedPublishLatencyQuantiles"`
	AggregatedPublishDelayLatencyQuantiles Quantiles `json:"aggregatedPublishDelayLatencyQuantiles"`

	EndToEndLatencyAvg     []float64 `json:"endToEndLatencyAvg"`
	EndToEndLatency50pct   []float64 `json:"endToEndLatency50pct"`
	EndToEndLatency75pct   []float64 `json:"endToEndLatency75pct"`
	EndToEndLatency95pct   []float64 `json:"endToEndLatency95pct"`
	EndToEndLatency99pct   []float64 `json:"endToEndLatency99pct"`
	EndToEndLatency999pct  []float64 `json:"endToEndLatency999pct"`
	EndToEndLatency9999pct []float64 `json:"endToEndLatency9999pct"`
	EndToEndLatencyMax     []float64 `json:"endToEndLatencyMax"`

	AggregatedEndToEndLatencyQuantiles Quantiles `json:"aggregatedEndToEndLatencyQuantiles"`

	AggregatedEndToEndLatencyAvg     float64 `json:"aggregatedEndToEndLatencyAvg"`
	AggregatedEndToEndLatency50pct   float64 `json:"aggregatedEndToEndLatency50pct"`
	AggregatedEndToEndLatency75pct   float64 `json:"aggregatedEndToEndLatency75pct"`
	AggregatedEndToEndLatency95pct   float64 `json:"aggregatedEndToEndLatency95pct"`
	AggregatedEndToEndLatency99pct   float64 `json:"aggregatedEndToEndLatency99pct"`
	AggregatedEndToEndLatency999pct  float64 `json:"aggregatedEndToEndLatency999pct"`
	AggregatedEndToEndLatency9999pct float64 `json:"aggregatedEndToEndLatency9999pct"`
	AggregatedEndToEndLatencyMax     float64 `json:"aggregatedEndToEndLatencyMax"`

	// Petrel's fields. Message counts cover the whole run, warm-up included.

	// MessagesSent counts distinct messages handed to the client (resends not included).
	MessagesSent     int64 `json:"messagesSent"`
	MessagesAcked    int64 `json:"messagesAcked"`
	MessagesConsumed int64 `json:"messagesConsumed"`
	BytesSent        int64 `json:"bytesSent"`
	BytesConsumed    int64 `json:"bytesConsumed"`
	// Failed counts messages whose send failed definitely, Unknown those whose outcome is not
	// known (timeout, connection lost after the write).
	Failed  int64 `json:"failed"`
	Unknown int64 `json:"unknown"`
	// The verification counts are (message, subscription) pairs, plus (message, member) pairs
	// for what the final read found (see VerifyCounts); zero unless Verified. A consume-only run
	// has no producer record: it counts Gaps instead of Lost, and Phantom, UnknownDelivered and
	// the like stay 0.
	Lost                 int64 `json:"lost"`
	Gaps                 int64 `json:"gaps"`
	Duplicated           int64 `json:"duplicated"`
	DuplicatedAfterRetry int64 `json:"duplicatedAfterRetry"`
	Reordered            int64 `json:"reordered"`
	Corrupted            int64 `json:"corrupted"`
	Phantom              int64 `json:"phantom"`
	UnknownDelivered     int64 `json:"unknownDelivered"`
	Resent               int64 `json:"resent"`
	Foreign              int64 `json:"foreign"`
	// Inconsistent counts the queue offsets named for two different messages (see
	// VerifyCounts).
	Inconsistent int64 `json:"inconsistent"`
	// OffsetMoved counts the OFFSET_MOVED answers the consumers followed, OffsetMovedBack those
	// that moved a consumer's position backwards (the broker gave up offsets it had served):
	// any fails the run, verified or not.
	OffsetMoved     int64 `json:"offsetMoved"`
	OffsetMovedBack int64 `json:"offsetMovedBack"`
	// FinalRead is the final read's account of each member read (the master, then the slave
	// reads were pinned to): queues and messages read and the problems found; empty without
	// --verify. FinalReadNote says why a verified run had no final read (the NATS driver).
	FinalRead     []FinalReadMember `json:"finalRead"`
	FinalReadNote string            `json:"finalReadNote,omitempty"`
	// Verified says the run checked every message (--verify); Passed that the verification
	// found no error and had something to check: a run in which no message was acknowledged,
	// or whose final read could not check every acknowledged message, fails. Without --verify
	// Passed is true unless a consumer's offset moved backwards.
	Verified bool     `json:"verified"`
	Passed   bool     `json:"passed"`
	Problems []string `json:"problems,omitempty"`

	Mode                  string   `json:"mode"` // "replay" or "workload"
	PayloadSource         string   `json:"payloadSource"`
	SubscriptionsPerTopic int      `json:"subscriptionsPerTopic"`
	ProducerRate          int      `json:"producerRate"`
	TopicNames            []string `json:"topicNames"`
	ConsumerGroups        []string `json:"consumerGroups"`
	Cluster               string   `json:"cluster"` // "embedded" or the NameServer addresses
	StartTime             string   `json:"startTime"`
	WarmupSeconds         float64  `json:"warmupSeconds"`
	TestSeconds           float64  `json:"testSeconds"`
	// ProgressIntervalSeconds is the period of the time series (--progress-interval); the last
	// entry may cover less. OMB's period is a fixed 10 s and its results lack this field.
	ProgressIntervalSeconds float64 `json:"progressIntervalSeconds"`
	DrainSeconds            float64 `json:"drainSeconds"`
	// BacklogMessages is the backlog (messages acknowledged, not consumed, over all
	// subscriptions) when a backlog workload (consumerBacklogSizeGB) let its consumers start;
	// BacklogDrainSeconds is how long they took to bring it down to the workload's
	// backlogDrainRatio, while the producers went on at their rate, and BacklogDrainRate the
	// messages consumed per second meanwhile: the speed of consuming from a backlog (old data,
	// out of the page cache when the backlog is larger than memory). 0 without a backlog, or
	// when the test ended before the backlog was drained.
	BacklogMessages     int64   `json:"backlogMessages,omitempty"`
	BacklogDrainSeconds float64 `json:"backlogDrainSeconds,omitempty"`
	BacklogDrainRate    float64 `json:"backlogDrainRate,omitempty"`
	// Drained says every acknowledged message reached every subscription before the drain
	// timeout.
	Drained     bool `json:"drained"`
	Interrupted bool `json:"interrupted"`
	// Rates over the whole test phase (msg/s and MiB/s).
	AggregatedPublishRate float64 `json:"aggregatedPublishRate"`
	AggregatedPublishMBps float64 `json:"aggregatedPublishMBps"`
	AggregatedConsumeRate float64 `json:"aggregatedConsumeRate"`
	AggregatedConsumeMBps float64 `json:"aggregatedConsumeMBps"`

	// ServedBy counts, per member of the broker groups (brokerId 0 the master first, then the
	// slaves), the pulls it served the run's consumers, the messages in them and its "not
	// here" answers; empty when the cluster cannot tell.
	ServedBy []ServedBy `json:"servedBy"`
	// ReadBrokerID is the member consumers were pinned to (--read-broker-id), -1 when they
	// followed the brokers' read suggestions.
	ReadBrokerID int64 `json:"readBrokerId"`
	// Replication has one entry per slave of the topics' broker groups: lag quantiles and
	// compression, sampled every HASampleIntervalMs during the test and drain phases; empty
	// when the groups have no slaves.
	Replication []SlaveReplication `json:"replication"`
	// CPU is the machine's and the bench process's CPU use over the measured part of the run,
	// so that every latency has the load it was measured under beside it; nil off Linux or
	// when /proc cannot be read.
	CPU *CPULoad `json:"cpu,omitempty"`
	// LatencyBreakdown is where the traced batches' latency went (Config.TraceEvery), nil
	// without tracing.
	LatencyBreakdown   *LatencyBreakdown `json:"latencyBreakdown,omitempty"`
	HASampleIntervalMs int64             `json:"haSampleIntervalMs"`
	// HASampleErrors counts the replication status requests that failed.
	HASampleErrors int64 `json:"haSampleErrors"`
	// ExpectedMessages is, for a consume-only run, the messages the topics' queues held at the
	// start (the sum over the queues of max - min offset), all of which must be consumed.
	ExpectedMessages int64 `json:"expectedMessages"`
	// Queues is the queue count of all the run's topics together, as the cluster reported it
	// (every broker group's read queues).
	Queues int `json:"queues"`
	// ConsumedOutside counts, for a consume-only run, messages consumed outside the queues'
	// ranges at the start (stored since): checked for identity and CRC, not for contiguity.
	ConsumedOutside int64 `json:"consumedOutside"`
	// Failovers is the failover timeline, in time order: every break the run saw in a broker
	// group's service, for sends (the acknowledging broker changed, paused or never came back)
	// and for consumption (the serving broker changed after a gap, paused or never came back);
	// empty when there was none (see failover.go).
	Failovers []FailoverEvent `json:"failovers"`
	// FailoversOmitted counts the events left out of Failovers (at most 100 are kept per broker
	// group and kind).
	FailoversOmitted int64 `json:"failoversOmitted,omitempty"`
}

// OK reports whether the run passed verification (always true without --verify).
func (r *Result) OK() bool { return r.Passed }

// newResult returns a Result with every list non-nil, so the JSON has [] rather than null.
func newResult() *Result {
	return &Result{
		PublishRate: []float64{}, PublishErrorRate: []float64{}, ConsumeRate: []float64{}, Backlog: []int64{},
		PublishLatencyAvg: []float64{}, PublishLatency50pct: []float64{}, PublishLatency75pct: []float64{},
		PublishLatency95pct: []float64{}, PublishLatency99pct: []float64{}, PublishLatency999pct: []float64{},
		PublishLatency9999pct: []float64{}, PublishLatencyMax: []float64{},
		PublishDelayLatencyAvg: []float64{}, PublishDelayLatency50pct: []int64{}, PublishDelayLatency75pct: []int64{},
		PublishDelayLatency95pct: []int64{}, PublishDelayLatency99pct: []int64{}, PublishDelayLatency999pct: []int64{},
		PublishDelayLatency9999pct: []int64{}, PublishDelayLatencyMax: []int64{},
		EndToEndLatencyAvg: []float64{}, EndToEndLatency50pct: []float64{}, EndToEndLatency75pct: []float64{},
		EndToEndLatency95pct: []float64{}, EndToEndLatency99pct: []float64{}, EndToEndLatency999pct: []float64{},
		EndToEndLatency9999pct: []float64{}, EndToEndLatencyMax: []float64{},
		AggregatedPublishLatencyQuantiles: Quantiles{}, AggregatedPublishDelayLatencyQuantiles: Quantiles{},
		AggregatedEndToEndLatencyQuantiles: Quantiles{},
		TopicNames:                         []string{}, ConsumerGroups: []string{},
		ServedBy: []ServedBy{}, Replication: []SlaveReplication{}, ReadBrokerID: -1, Failovers: []FailoverEvent{},
		FinalRead: []FinalReadMember{},
	}
}

// interval is one progress period's measurements.
type interval struct {
	elapsed     time.Duration // since the start of the run
	length      time.Duration
	phase       string
	sent        int64 // acknowledged sends in the period
	sentBytes   int64
	errors      int64 // failed or unknown sends in the period
	consumed    int64
	consBytes   int64
	backlog     int64
	pubLat      *hdrhistogram.Histogram
	pubDelay    *hdrhistogram.Histogram
	e2e         *hdrhistogram.Histogram
	rateLimited bool
}

func perSecond(n int64, d time.Duration) float64 {
	if d <= 0 {
		return 0
	}
	return float64(n) / d.Seconds()
}

func mbPerSecond(n int64, d time.Duration) float64 { return perSecond(n, d) / (1 << 20) }

// addInterval appends one test-phase interval to the time series.
func (r *Result) addInterval(iv *interval) {
	r.PublishRate = append(r.PublishRate, perSecond(iv.sent, iv.length))
	r.PublishErrorRate = append(r.PublishErrorRate, perSecond(iv.errors, iv.length))
	r.ConsumeRate = append(r.ConsumeRate, perSecond(iv.consumed, iv.length))
	r.Backlog = append(r.Backlog, iv.backlog)

	p := msStats(iv.pubLat)
	r.PublishLatencyAvg = append(r.PublishLatencyAvg, p.Avg)
	r.PublishLatency50pct = append(r.PublishLatency50pct, p.P50)
	r.PublishLatency75pct = append(r.PublishLatency75pct, p.P75)
	r.PublishLatency95pct = append(r.PublishLatency95pct, p.P95)
	r.PublishLatency99pct = append(r.PublishLatency99pct, p.P99)
	r.PublishLatency999pct = append(r.PublishLatency999pct, p.P999)
	r.PublishLatency9999pct = append(r.PublishLatency9999pct, p.P9999)
	r.PublishLatencyMax = append(r.PublishLatencyMax, p.Max)

	d := microsStats(iv.pubDelay)
	r.PublishDelayLatencyAvg = append(r.PublishDelayLatencyAvg, d.Avg)
	r.PublishDelayLatency50pct = append(r.PublishDelayLatency50pct, int64(d.P50))
	r.PublishDelayLatency75pct = append(r.PublishDelayLatency75pct, int64(d.P75))
	r.PublishDelayLatency95pct = append(r.PublishDelayLatency95pct, int64(d.P95))
	r.PublishDelayLatency99pct = append(r.PublishDelayLatency99pct, int64(d.P99))
	r.PublishDelayLatency999pct = append(r.PublishDelayLatency999pct, int64(d.P999))
	r.PublishDelayLatency9999pct = append(r.PublishDelayLatency9999pct, int64(d.P9999))
	r.PublishDelayLatencyMax = append(r.PublishDelayLatencyMax, int64(d.Max))

	e := msStats(iv.e2e)
	r.EndToEndLatencyAvg = append(r.EndToEndLatencyAvg, e.Avg)
	r.EndToEndLatency50pct = append(r.EndToEndLatency50pct, e.P50)
	r.EndToEndLatency75pct = append(r.EndToEndLatency75pct, e.P75)
	r.EndToEndLatency95pct = append(r.EndToEndLatency95pct, e.P95)
	r.EndToEndLatency99pct = append(r.EndToEndLatency99pct, e.P99)
	r.EndToEndLatency999pct = append(r.EndToEndLatency999pct, e.P999)
	r.EndToEndLatency9999pct = append(r.EndToEndLatency9999pct, e.P9999)
	r.EndToEndLatencyMax = append(r.EndToEndLatencyMax, e.Max)
}

// setAggregates fills the aggregated latency fields from the whole-run histograms (warm-up
// excluded).
func (r *Result) setAggregates(pubLat, pubDelay, e2e *hdrhistogram.Histogram) {
	p := msStats(pubLat)
	r.AggregatedPublishLatencyAvg = p.Avg
	r.AggregatedPublishLatency50pct = p.P50
	r.AggregatedPublishLatency75pct = p.P75
	r.AggregatedPublishLatency95pct = p.P95
	r.AggregatedPublishLatency99pct = p.P99
	r.AggregatedPublishLatency999pct = p.P999
	r.AggregatedPublishLatency9999pct = p.P9999
	r.AggregatedPublishLatencyMax = p.Max
	r.AggregatedPublishLatencyQuantiles = quantilesOf(pubLat, 1000)

	d := microsStats(pubDelay)
	r.AggregatedPublishDelayLatencyAvg = d.Avg
	r.AggregatedPublishDelayLatency50pct = int64(d.P50)
	r.AggregatedPublishDelayLatency75pct = int64(d.P75)
	r.AggregatedPublishDelayLatency95pct = int64(d.P95)
	r.AggregatedPublishDelayLatency99pct = int64(d.P99)
	r.AggregatedPublishDelayLatency999pct = int64(d.P999)
	r.AggregatedPublishDelayLatency9999pct = int64(d.P9999)
	r.AggregatedPublishDelayLatencyMax = int64(d.Max)
	r.AggregatedPublishDelayLatencyQuantiles = quantilesOf(pubDelay, 1)

	e := msStats(e2e)
	r.AggregatedEndToEndLatencyAvg = e.Avg
	r.AggregatedEndToEndLatency50pct = e.P50
	r.AggregatedEndToEndLatency75pct = e.P75
	r.AggregatedEndToEndLatency95pct = e.P95
	r.AggregatedEndToEndLatency99pct = e.P99
	r.AggregatedEndToEndLatency999pct = e.P999
	r.AggregatedEndToEndLatency9999pct = e.P9999
	r.AggregatedEndToEndLatencyMax = e.Max
	r.AggregatedEndToEndLatencyQuantiles = quantilesOf(e2e, 1000)
}

// setVerification copies the verifier's counts into the result.
func (r *Result) setVerification(c VerifyCounts, problems []string) {
	r.Verified = true
	r.Lost = c.Lost
	r.Duplicated = c.Duplicated
	r.DuplicatedAfterRetry = c.DuplicatedAfterRetry
	r.Reordered = c.Reordered
	r.Corrupted = c.Corrupted
	r.Phantom = c.Phantom
	r.UnknownDelivered = c.UnknownDelivered
	r.Resent = c.Resent
	r.Failed = c.Failed
	r.Unknown = c.Unknown
	r.Inconsistent = c.Inconsistent
	r.OffsetMoved = c.OffsetMoved
	r.OffsetMovedBack = c.OffsetMovedBack
	r.Problems = problems
	r.Passed = c.OK() && c.FinalReadUnchecked == 0
	if c.OffsetMovedBack > 0 {
		r.Problems = append(r.Problems, offsetMovedBackProblem(c.OffsetMovedBack))
	}
	if c.Acked == 0 {
		// Nothing lost out of nothing stored is no pass: the run verified nothing.
		r.Passed = false
		r.Problems = append([]string{fmt.Sprintf("no message was acknowledged (%d sent: %d failed, %d unknown): nothing could be verified",
			c.Sent-c.Abandoned, c.Failed, c.Unknown)}, r.Problems...)
	}
}

// offsetMovedBackProblem describes consumers' positions moved backwards n times.
func offsetMovedBackProblem(n int64) string {
	return fmt.Sprintf("offset moved back: %d OFFSET_MOVED answer(s) set a consumer's position below offsets it had consumed (the broker gave them up; see the consumers' \"offset moved\" warnings)", n)
}

// WriteJSON writes the result to path, indented.
func (r *Result) WriteJSON(path string) error { return writeJSON(path, r) }

// writeJSON writes v to path as indented JSON.
func writeJSON(path string, v any) error {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return fmt.Errorf("cannot encode result: %w", err)
	}
	b = append(b, '\n')
	if err := os.WriteFile(path, b, 0o644); err != nil {
		return fmt.Errorf("cannot write result: %w", err)
	}
	return nil
}

// fmtMs formats a latency in ms with 3 significant decimals.
func fmtMs(v float64) string {
	switch {
	case v == 0:
		return "0"
	case v < 10:
		return fmt.Sprintf("%.3f", v)
	case v < 1000:
		return fmt.Sprintf("%.1f", v)
	}
	return fmt.Sprintf("%.0f", v)
}

// progressLine formats one progress line.
func progressLine(iv *interval, failed, unknown int64) string {
	p := msStats(iv.pubLat)
	e := msStats(iv.e2e)
	var b strings.Builder
	fmt.Fprintf(&b, "[%6.1fs] %-6s pub %9.1f msg/s %7.2f MB/s | cons %9.1f msg/s %7.2f MB/s | backlog %d | pub lat ms p50 %s p99 %s max %s | e2e ms p50 %s p99 %s",
		iv.elapsed.Seconds(), iv.phase,
		perSecond(iv.sent, iv.length), mbPerSecond(iv.sentBytes, iv.length),
		perSecond(iv.consumed, iv.length), mbPerSecond(iv.consBytes, iv.length),
		iv.backlog, fmtMs(p.P50), fmtMs(p.P99), fmtMs(p.Max), fmtMs(e.P50), fmtMs(e.P99))
	if iv.rateLimited {
		d := microsStats(iv.pubDelay)
		fmt.Fprintf(&b, " | pub delay µs p50 %.0f p99 %.0f", d.P50, d.P99)
	}
	if failed > 0 || unknown > 0 {
		fmt.Fprintf(&b, " | failed %d unknown %d", failed, unknown)
	}
	return b.String()
}

func latencyLine(name, unit string, s LatencyStats, scale func(float64) string) string {
	return fmt.Sprintf("  %-17s %s avg %s p50 %s p75 %s p95 %s p99 %s p99.9 %s p99.99 %s max %s (%d samples)",
		name, unit, scale(s.Avg), scale(s.P50), scale(s.P75), scale(s.P95), scale(s.P99), scale(s.P999), scale(s.P9999), scale(s.Max), s.Count)
}

// summary holds what the human-readable summary shows beyond the Result.
type summary struct {
	pubLat, pubDelay, e2e LatencyStats
}

// writeSummary prints the final human-readable summary. Its last line holds the verification
// counts, "lost=0 duplicated=0 reordered=0 corrupted=0 phantom=0 inconsistent=0
// offsetMovedBack=0" on a clean run, after the final read's line (finalReadLine); for a
// consume-only run, which has no producer record, "gaps=0 duplicated=0 reordered=0 corrupted=0
// offsetMovedBack=0" followed by what it could not check (consumeOnlyVerdictNote).
func (r *Result) writeSummary(w io.Writer, s summary) {
	consumeOnly := r.Mode == "consume-only"
	fmt.Fprintf(w, "\n==== petrel-bench summary ====\n")
	fmt.Fprintf(w, "  workload          %s (%s, driver %s, cluster %s)\n", r.Workload, r.Mode, r.Driver, r.Cluster)
	fmt.Fprintf(w, "  shape             %s, %d producer(s)/topic, %d subscription(s)/topic x %d consumer(s)\n",
		shapeText(r.Topics, r.Partitions, r.Queues), r.ProducersPerTopic, r.SubscriptionsPerTopic, divOr(r.ConsumersPerTopic, r.SubscriptionsPerTopic))
	if consumeOnly {
		fmt.Fprintf(w, "  payload           %d bytes avg\n", r.MessageSize)
	} else {
		rate := "as fast as possible"
		if r.ProducerRate > 0 {
			rate = fmt.Sprintf("%d msg/s", r.ProducerRate)
		}
		fmt.Fprintf(w, "  payload           %s, %d bytes avg, rate %s\n", r.PayloadSource, r.MessageSize, rate)
	}
	fmt.Fprintf(w, "  topics            %s\n", strings.Join(r.TopicNames, " "))
	if len(r.ConsumerGroups) > 0 {
		fmt.Fprintf(w, "  consumer groups   %s\n", strings.Join(r.ConsumerGroups, " "))
	}
	if consumeOnly {
		fmt.Fprintf(w, "  time              %.1fs%s\n", r.TestSeconds, cond(r.Interrupted, " (interrupted)", ""))
	} else {
		fmt.Fprintf(w, "  time              warm-up %.1fs, test %.1fs, drain %.1fs%s\n", r.WarmupSeconds, r.TestSeconds, r.DrainSeconds, cond(r.Interrupted, " (interrupted)", ""))
	}
	if !consumeOnly {
		fmt.Fprintf(w, "  publish rate      %.1f msg/s, %.2f MB/s\n", r.AggregatedPublishRate, r.AggregatedPublishMBps)
	}
	fmt.Fprintf(w, "  consume rate      %.1f msg/s, %.2f MB/s\n", r.AggregatedConsumeRate, r.AggregatedConsumeMBps)
	if !consumeOnly {
		fmt.Fprintln(w, latencyLine("publish latency", "ms", s.pubLat, fmtMs))
		if r.ProducerRate > 0 {
			fmt.Fprintln(w, latencyLine("publish delay", "µs", s.pubDelay, func(v float64) string { return fmt.Sprintf("%.0f", v) }))
		}
		fmt.Fprintln(w, latencyLine("end-to-end", "ms", s.e2e, fmtMs))
	}
	if line := cpuLine(r.CPU); line != "" {
		fmt.Fprintln(w, line)
	}
	if r.Mode == "consume-only" {
		fmt.Fprintf(w, "  messages          expected=%d consumed=%d (%.1f MB consumed)\n",
			r.ExpectedMessages, r.MessagesConsumed, float64(r.BytesConsumed)/(1<<20))
	} else {
		fmt.Fprintf(w, "  messages          sent=%d acked=%d failed=%d unknown=%d consumed=%d (%.1f MB sent, %.1f MB consumed)\n",
			r.MessagesSent, r.MessagesAcked, r.Failed, r.Unknown, r.MessagesConsumed, float64(r.BytesSent)/(1<<20), float64(r.BytesConsumed)/(1<<20))
	}
	if r.BacklogMessages > 0 {
		if r.BacklogDrainSeconds > 0 {
			fmt.Fprintf(w, "  backlog drain     %d messages backlogged; drained in %.1fs at %.1f msg/s consumed (producers going on)\n",
				r.BacklogMessages, r.BacklogDrainSeconds, r.BacklogDrainRate)
		} else {
			fmt.Fprintf(w, "  backlog drain     %d messages backlogged; not drained before the test ended\n", r.BacklogMessages)
		}
	}
	r.writeReplication(w)
	r.writeFailovers(w)
	if !r.Verified {
		fmt.Fprintf(w, "  verification      off (use --verify)\n")
		for _, p := range r.Problems {
			fmt.Fprintf(w, "  problem           %s\n", p)
		}
		return
	}
	switch {
	case consumeOnly && !r.Drained:
		fmt.Fprintf(w, "  consume-only      incomplete: not every message of the queues' ranges was consumed\n")
	case !r.Drained:
		fmt.Fprintf(w, "  drain             timed out: not everything acknowledged was consumed\n")
	}
	for _, p := range r.Problems {
		fmt.Fprintf(w, "  problem           %s\n", p)
	}
	if consumeOnly {
		fmt.Fprintf(w, "  verification      %s: %d of %d expected consumed; %d outside the start's ranges (not checked for contiguity); %d foreign (no bench identity, not checked)\n",
			cond(r.Passed, "PASS", "FAIL"), r.ExpectedMessages-r.Gaps, r.ExpectedMessages, r.ConsumedOutside, r.Foreign)
		fmt.Fprintf(w, "gaps=%d duplicated=%d reordered=%d corrupted=%d offsetMovedBack=%d %s\n", r.Gaps, r.Duplicated, r.Reordered, r.Corrupted, r.OffsetMovedBack, consumeOnlyVerdictNote)
		return
	}
	fmt.Fprintf(w, "  verification      %s: unknownDelivered=%d duplicatedAfterRetry=%d resent=%d foreign=%d offsetMoved=%d\n",
		cond(r.Passed, "PASS", "FAIL"), r.UnknownDelivered, r.DuplicatedAfterRetry, r.Resent, r.Foreign, r.OffsetMoved)
	fmt.Fprintln(w, r.finalReadLine())
	fmt.Fprintf(w, "lost=%d duplicated=%d reordered=%d corrupted=%d phantom=%d inconsistent=%d offsetMovedBack=%d\n",
		r.Lost, r.Duplicated, r.Reordered, r.Corrupted, r.Phantom, r.Inconsistent, r.OffsetMovedBack)
}

// finalReadLine is the summary's line before the last: per member read, the queues read
// completely and the messages read ("final read: master queues=16 messages=16000; slave 1
// queues=16 messages=16000"), with the queues whose read was incomplete and the acknowledged
// messages left unchecked when there are any; or why there was no final read.
func (r *Result) finalReadLine() string {
	if r.FinalReadNote != "" {
		return "final read: " + r.FinalReadNote
	}
	if len(r.FinalRead) == 0 {
		return "final read: no queue read"
	}
	var b strings.Builder
	b.WriteString("final read:")
	for i, m := range r.FinalRead {
		if i > 0 {
			b.WriteString(";")
		}
		fmt.Fprintf(&b, " %s queues=%d messages=%d", memberName(m.BrokerID), m.Queues, m.Messages)
		if m.Incomplete > 0 || m.Unchecked > 0 {
			fmt.Fprintf(&b, " incomplete=%d unchecked=%d", m.Incomplete, m.Unchecked)
		}
	}
	return b.String()
}

// consumeOnlyVerdictNote ends the last line of a consume-only summary: what such a run cannot
// check.
const consumeOnlyVerdictNote = "(consume-only: no producer record, acknowledged-but-missing messages are not detectable)"

// writeReplication prints the served-by counts and the replication lag of every slave.
func (r *Result) writeReplication(w io.Writer) {
	if len(r.ServedBy) > 0 {
		var b strings.Builder
		for i, s := range r.ServedBy {
			if i > 0 {
				b.WriteString(" | ")
			}
			fmt.Fprintf(&b, "%s pulls=%d msgs=%d notHere=%d", memberName(s.BrokerID), s.Pulls, s.Messages, s.NotHere)
		}
		if r.ReadBrokerID >= 0 {
			fmt.Fprintf(&b, " (reads pinned to %s)", memberName(r.ReadBrokerID))
		}
		fmt.Fprintf(w, "  served by         %s\n", b.String())
	}
	for _, s := range r.Replication {
		compression := "-"
		if s.CompressionRatio > 0 {
			compression = fmt.Sprintf("%.2fx (%.1f MB -> %.1f MB)", s.CompressionRatio, float64(s.RawBytes)/(1<<20), float64(s.WireBytes)/(1<<20))
		}
		if s.CounterResets > 0 {
			compression += fmt.Sprintf(" across %d master restart(s)", s.CounterResets)
		}
		fmt.Fprintf(w, "  replication       %s slave %d %s: lag bytes p50 %d p99 %d max %d | lag ms p50 %d p99 %d max %d | in sync %d/%d | compression %s\n",
			s.BrokerName, s.BrokerID, s.Addr, s.LagBytes50pct, s.LagBytes99pct, s.LagBytesMax, s.LagMs50pct, s.LagMs99pct, s.LagMsMax,
			s.InSyncSamples, s.Samples, compression)
	}
	if len(r.Replication) > 0 || r.HASampleErrors > 0 {
		fmt.Fprintf(w, "  replication       sampled every %d ms over the test and drain phases; %d failed sample(s)\n", r.HASampleIntervalMs, r.HASampleErrors)
	}
}

func divOr(a, b int) int {
	if b == 0 {
		return 0
	}
	return a / b
}

func cond[T any](c bool, a, b T) T {
	if c {
		return a
	}
	return b
}

// recordBacklogDrain records that consumed messages were consumed in d while the backlog
// drained.
func (r *Result) recordBacklogDrain(d time.Duration, consumed int64) {
	if d <= 0 {
		return
	}
	r.BacklogDrainSeconds = round3(d.Seconds())
	r.BacklogDrainRate = round3(float64(consumed) / d.Seconds())
}

// round3 rounds to 3 decimals (for durations in the JSON).
func round3(v float64) float64 { return math.Round(v*1000) / 1000 }
