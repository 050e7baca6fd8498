package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"time"
)

// Defaults of Config.
const (
	DefaultProgressInterval = 5 * time.Second
	DefaultDrainTimeout     = 30 * time.Second
	DefaultTopicPrefix      = "petrel-bench"
	DefaultFlushDiskType    = "ASYNC_FLUSH"
	// DefaultEmbeddedSegmentSize is the embedded broker's commit-log segment size: smaller than
	// the broker's 1 GiB, whose preparation would dominate a short run's time and memory.
	DefaultEmbeddedSegmentSize = 128 << 20
	// ReplayQueues is the queue count of the topic of a replay (--payload-dir without a
	// workload), RocketMQ's default topic queue count.
	ReplayQueues = 8
	// DriverName is the driver reported in results.
	DriverName = "Petrel"
	// DriverNatsName is the driver reported in results of DriverNats runs.
	DriverNatsName = "NATS JetStream"
	// DriverPetrel and DriverNats are the values of Config.Driver.
	DriverPetrel = "petrel"
	DriverNats   = "nats"
	// DefaultNatsURL is the default Config.NatsURL.
	DefaultNatsURL = "nats://127.0.0.1:4222"
	// DefaultEmbeddedSlaves is the number of slaves of the embedded broker group.
	DefaultEmbeddedSlaves = 2
	// DefaultHASampleInterval is the period at which the masters' replication status is sampled
	// for the lag quantiles.
	DefaultHASampleInterval = 100 * time.Millisecond
	// DefaultLinger is the producers' linger time unless Config.Linger says otherwise.
	DefaultLinger = 2 * time.Millisecond
	// NoLinger as Config.Linger: the producers' batches do not wait for more messages.
	NoLinger time.Duration = -1
	// MaxEmbeddedSlaves bounds Config.EmbeddedSlaves.
	MaxEmbeddedSlaves = 8
)

// Config configures a run. Zero values take the defaults noted.
type Config struct {
	// WorkloadFile is an OMB workload file. Without it, PayloadDir is replayed: one topic of
	// ReplayQueues queues, one producer, one subscription, as fast as possible, every line once.
	WorkloadFile string
	// PayloadDir holds files whose lines are message bodies (see LoadPayloadDir). With a
	// workload the bodies are cycled; without one they are replayed once.
	PayloadDir string
	// Duration overrides the test length (testDurationMinutes); for a replay it is an upper
	// bound (0: until every line is sent), for a consume-only run too (0: until every message
	// has arrived).
	Duration time.Duration
	// Warmup overrides the warm-up (warmupDurationMinutes, OMB default 1 minute; capped at a
	// quarter of Duration when Duration is set; none for a replay). Negative means unset.
	Warmup time.Duration
	// Verify checks every message end to end (see Verifier).
	Verify bool
	// ProducerRate overrides the workload's producerRate (msg/s over all producers; 0 = as fast
	// as possible). Negative means unset.
	ProducerRate int
	// BacklogGB overrides the workload's consumerBacklogSizeGB (negative: unset).
	BacklogGB int64
	// Producers overrides the workload's producersPerTopic (0: unset).
	Producers int
	// SyncSend makes every producer send one message at a time and wait for its
	// acknowledgement (SendSync), to measure synchronous send latency; otherwise producers batch
	// asynchronously (SendAsync).
	SyncSend bool
	// ProgressInterval is the period of progress lines and of the result's time series
	// (default 5 s).
	ProgressInterval time.Duration
	// JSONFile, when set, receives the Result as JSON.
	JSONFile string
	// NameServers targets a running cluster (';'-separated); empty starts an embedded one.
	NameServers string
	// Cluster is where topics are created on a running cluster: a cluster name, a broker
	// address, or "" for every master the NameServer knows.
	Cluster string
	// NoCreateTopic uses existing topics (name them with TopicID).
	NoCreateTopic bool
	// TopicPrefix starts topic names: <prefix>-<id>-<i> (default "petrel-bench").
	TopicPrefix string
	// TopicID is the <id> of topic names (default: random per run).
	TopicID string
	// KeepData keeps the embedded cluster's data directory.
	KeepData bool
	// FlushDiskType is the embedded broker's flush mode, ASYNC_FLUSH (default) or SYNC_FLUSH.
	FlushDiskType string
	// SegmentSize is the embedded broker's commit-log segment size (bytes; default
	// DefaultEmbeddedSegmentSize).
	SegmentSize int64
	// EmbeddedSlaves is the number of slaves of the embedded broker group (default
	// DefaultEmbeddedSlaves; see SetEmbeddedSlaves for 0: a lone master).
	EmbeddedSlaves int
	// EmbeddedHACompression is the embedded master's haCompression: s2 (default), zstd or none.
	EmbeddedHACompression string
	// EmbeddedRole is the embedded master's brokerRole: SYNC_MASTER (default with slaves) or
	// ASYNC_MASTER (default without).
	EmbeddedRole string
	// EmbeddedWriteThroughMapping sets every embedded broker's commitLogWriteThroughFile=false:
	// every append copies into the active commit-log segment's mapping instead of being
	// written with pwrite (broker.Config.CommitLogWriteThroughFile).
	EmbeddedWriteThroughMapping bool
	// ReadBrokerID pins every consumer's reads to member ReadBrokerID of each broker group (0:
	// the master, > 0: a slave; client.WithReadBrokerID). Set it with SetReadBrokerID; by
	// default consumers follow the brokers' read suggestions.
	ReadBrokerID int64
	// ConsumeOnly consumes existing topics (Topics, or <prefix>-<TopicID>-<i>) from their
	// earliest offsets, without producers, until every message below the queues' max offsets
	// at the start has arrived, and checks what it can without a producer record: bench
	// identity and body CRC, per-queue contiguity (no gap, no duplicated queue offset), no
	// message stored twice, and the total count (see consumeChecker). It needs a running
	// cluster (NameServers).
	ConsumeOnly bool
	// Topics names the existing topics of a ConsumeOnly run (default: <prefix>-<TopicID>-<i>
	// for the workload's topic count, or 1).
	Topics []string
	// HASampleInterval is the period at which every group master's replication status is
	// sampled during the test and drain phases, for the lag of the slaves it lists (default
	// DefaultHASampleInterval; negative: never).
	HASampleInterval time.Duration
	// Linger is the producers' linger time (client.WithLinger): how long a queue's open batch
	// waits for more messages; 0 means DefaultLinger, NoLinger none (a batch goes as soon as
	// the queue's previous one is answered: batches as large as what arrived meanwhile).
	Linger time.Duration
	// TraceEvery traces about one producer batch in TraceEvery (client.WithTraceEvery) and
	// prints where the traced batches' latency goes (Result.LatencyBreakdown); 0: no tracing.
	// Petrel driver only; a run against brokers that do not record send traces goes on untraced,
	// with a line.
	TraceEvery int
	// ExecTrace and CPUProfile name the Go execution trace and CPU profile the caller records
	// during the run (petrel-bench --exec-trace, --cpu-profile; "": none): the stage breakdown
	// names them, with the commands that read them. The run itself records nothing.
	ExecTrace, CPUProfile string
	// DrainTimeout bounds the wait, after the last send, for everything acknowledged to be
	// consumed (default 30 s); a consume-only run gives up after this long without a new
	// message.
	DrainTimeout time.Duration
	// RetryUnknown resends a message up to this many times after an unknown outcome (default
	// 0). A copy consumed per attempt is counted as duplicatedAfterRetry.
	RetryUnknown int
	// Driver is the system under test: DriverPetrel (default) or DriverNats (a running
	// nats-server at NatsURL; see nats.go for the mapping).
	Driver string
	// NatsURL is the NATS server URL of DriverNats (default DefaultNatsURL).
	NatsURL string
	// NatsReplicas is the replica count of the NATS streams (default 1).
	NatsReplicas int
	// Seed makes payloads and keys reproducible (0: random).
	Seed uint64
	// Out receives progress lines and the summary (default io.Discard).
	Out io.Writer
	// Logger receives the logs of the bench, the client and the embedded servers (default
	// slog.Default()).
	Logger *slog.Logger

	// backlogSet tells a BacklogGB of 0 (no backlog) from unset.
	backlogSet bool
	// producerRateSet tells a ProducerRate of 0 (as fast as possible) from unset.
	producerRateSet bool
	// slavesSet tells an EmbeddedSlaves of 0 (no slaves) from unset.
	slavesSet bool
	// readBrokerIDSet tells a ReadBrokerID of 0 (the master) from unset.
	readBrokerIDSet bool

	// newCluster replaces the Petrel client in tests.
	newCluster func(ctx context.Context) (cluster, error)
	// gigabyte is the unit of consumerBacklogSizeGB (tests shrink it; default 1 GiB).
	gigabyte int64
}

func (c *Config) setDefaults() error {
	if err := c.setNatsDefaults(); err != nil {
		return err
	}
	if c.ProgressInterval <= 0 {
		c.ProgressInterval = DefaultProgressInterval
	}
	if c.DrainTimeout <= 0 {
		c.DrainTimeout = DefaultDrainTimeout
	}
	if c.TopicPrefix == "" {
		c.TopicPrefix = DefaultTopicPrefix
	}
	if c.FlushDiskType == "" {
		c.FlushDiskType = DefaultFlushDiskType
	}
	if c.Out == nil {
		c.Out = io.Discard
	}
	if c.SegmentSize <= 0 {
		c.SegmentSize = DefaultEmbeddedSegmentSize
	}
	if !c.slavesSet && c.EmbeddedSlaves == 0 {
		c.EmbeddedSlaves = DefaultEmbeddedSlaves
	}
	if c.EmbeddedRole == "" {
		c.EmbeddedRole = "ASYNC_MASTER"
		if c.EmbeddedSlaves > 0 {
			c.EmbeddedRole = "SYNC_MASTER"
		}
	}
	if c.HASampleInterval == 0 {
		c.HASampleInterval = DefaultHASampleInterval
	}
	if c.gigabyte == 0 {
		c.gigabyte = 1 << 30
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	switch {
	case c.FlushDiskType != "ASYNC_FLUSH" && c.FlushDiskType != "SYNC_FLUSH":
		return fmt.Errorf("flush type %q: want ASYNC_FLUSH or SYNC_FLUSH", c.FlushDiskType)
	case c.RetryUnknown < 0 || c.RetryUnknown >= maxAttempts:
		return fmt.Errorf("retry-unknown %d: want 0..%d", c.RetryUnknown, maxAttempts-1)
	case c.Producers < 0:
		return fmt.Errorf("producers %d: must not be negative", c.Producers)
	case c.Duration < 0:
		return fmt.Errorf("duration %v: must not be negative", c.Duration)
	case c.NoCreateTopic && c.TopicID == "":
		return errors.New("no-create-topic needs a topic id naming the existing topics")
	case c.NoCreateTopic && c.NameServers == "":
		return errors.New("no-create-topic needs a running cluster (name servers)")
	case c.EmbeddedSlaves < 0 || c.EmbeddedSlaves > MaxEmbeddedSlaves:
		return fmt.Errorf("slaves %d: want 0..%d", c.EmbeddedSlaves, MaxEmbeddedSlaves)
	case c.EmbeddedHACompression != "" && c.EmbeddedHACompression != "s2" && c.EmbeddedHACompression != "zstd" && c.EmbeddedHACompression != "none":
		return fmt.Errorf("ha compression %q: want s2, zstd or none", c.EmbeddedHACompression)
	case c.EmbeddedRole != "SYNC_MASTER" && c.EmbeddedRole != "ASYNC_MASTER":
		return fmt.Errorf("broker role %q: want SYNC_MASTER or ASYNC_MASTER", c.EmbeddedRole)
	case c.readBrokerIDSet && c.ReadBrokerID < 0:
		return fmt.Errorf("read-broker-id %d: must not be negative", c.ReadBrokerID)
	case c.ConsumeOnly && c.NameServers == "" && c.newCluster == nil:
		return errors.New("consume-only needs a running cluster (name servers) holding the topics")
	case c.ConsumeOnly && len(c.Topics) == 0 && c.TopicID == "":
		return errors.New("consume-only needs the topics: give their names or a topic id")
	case !c.ConsumeOnly && len(c.Topics) > 0:
		return errors.New("topic names are for consume-only runs (otherwise use a topic id)")
	}
	return nil
}

// plan is what a run does, resolved from the config.
type plan struct {
	w        *Workload
	payloads *Payloads
	mode     string // "replay", "workload" or "consume-only"
	duration time.Duration
	warmup   time.Duration
	// consumersPerSub is the consumers run per subscription.
	consumersPerSub int
}

func makePlan(cfg *Config, seed uint64) (*plan, error) {
	p := &plan{}
	if cfg.WorkloadFile != "" {
		w, err := LoadWorkload(cfg.WorkloadFile)
		if err != nil {
			return nil, err
		}
		p.w = w
	}
	if cfg.ConsumeOnly {
		return consumeOnlyPlan(cfg, p)
	}
	if cfg.PayloadDir != "" {
		pl, err := LoadPayloadDir(cfg.PayloadDir)
		if err != nil {
			return nil, err
		}
		p.payloads = pl
	}
	switch {
	case p.w == nil && p.payloads == nil:
		return nil, errors.New("nothing to run: give a workload file, a payload directory or both")
	case p.w == nil:
		p.mode = "replay"
		p.w = &Workload{
			Name:                    fmt.Sprintf("replay of %s (%d lines)", cfg.PayloadDir, len(p.payloads.Bodies)),
			Topics:                  1,
			PartitionsPerTopic:      ReplayQueues,
			KeyDistributor:          NoKey,
			MessageSize:             p.payloads.avgSize(),
			SubscriptionsPerTopic:   1,
			ConsumerPerSubscription: 1,
			ProducersPerTopic:       1,
			BacklogDrainRatio:       1,
		}
		p.duration = cfg.Duration
		p.warmup = max(cfg.Warmup, 0)
	default:
		p.mode = "workload"
		if p.payloads == nil {
			pl, err := WorkloadPayloads(p.w, seed)
			if err != nil {
				return nil, err
			}
			p.payloads = pl
		} else {
			p.payloads.Replay = false // the workload's duration rules; the lines are cycled
		}
		p.duration = time.Duration(p.w.TestDurationMinutes) * time.Minute
		if cfg.Duration > 0 {
			p.duration = cfg.Duration
		}
		if p.duration <= 0 {
			return nil, errors.New("the workload has no testDurationMinutes: give a duration")
		}
		p.warmup = time.Duration(p.w.WarmupDurationMinutes) * time.Minute
		if cfg.Duration > 0 {
			p.warmup = min(p.warmup, cfg.Duration/4)
		}
		if cfg.Warmup >= 0 {
			p.warmup = cfg.Warmup
		}
	}
	if cfg.ProducerRate >= 0 && cfg.producerRateSet {
		p.w.ProducerRate = cfg.ProducerRate
	}
	if cfg.Producers > 0 {
		p.w.ProducersPerTopic = cfg.Producers
	}
	if cfg.BacklogGB >= 0 && cfg.backlogSet {
		p.w.ConsumerBacklogSizeGB = cfg.BacklogGB
	}
	if cfg.Verify && p.w.SubscriptionsPerTopic < 1 {
		return nil, errors.New("verify needs at least one subscription per topic")
	}
	// The consumers of one subscription form a group and share the topic's queues (client-side
	// rebalancing, as RocketMQ's AllocateMessageQueueAveragely).
	p.consumersPerSub = p.w.ConsumerPerSubscription
	return p, nil
}

// consumeOnlyPlan completes p (which holds the workload, if any) for a consume-only run: the
// workload gives the topic count and the consumers per topic; there are no producers and one
// subscription.
func consumeOnlyPlan(cfg *Config, p *plan) (*plan, error) {
	p.mode = "consume-only"
	topics := max(1, len(cfg.Topics))
	consumers := 1
	name := "consume-only"
	if p.w != nil {
		if len(cfg.Topics) == 0 {
			topics = p.w.Topics
		}
		consumers = max(1, p.w.ConsumerPerSubscription)
		name = p.w.Name
	}
	p.w = &Workload{
		Name:                    name,
		Topics:                  topics,
		KeyDistributor:          NoKey,
		SubscriptionsPerTopic:   1,
		ConsumerPerSubscription: consumers,
		BacklogDrainRatio:       1,
	}
	p.payloads = &Payloads{}
	p.duration = cfg.Duration
	p.consumersPerSub = consumers
	return p, nil
}

// SetProducerRate overrides the workload's producerRate (msg/s; 0 = as fast as possible).
func (c *Config) SetProducerRate(rate int) {
	c.ProducerRate = rate
	c.producerRateSet = true
}

// SetEmbeddedSlaves sets the number of slaves of the embedded broker group (0: a lone master).
func (c *Config) SetEmbeddedSlaves(n int) {
	c.EmbeddedSlaves = n
	c.slavesSet = true
}

// SetReadBrokerID pins consumers' reads to member id of each broker group (0: the master, > 0:
// a slave).
func (c *Config) SetReadBrokerID(id int64) {
	c.ReadBrokerID = id
	c.readBrokerIDSet = true
}

// readBrokerID returns the member consumers are pinned to, or -1 when they are not.
func (c *Config) readBrokerID() int64 {
	if !c.readBrokerIDSet {
		return -1
	}
	return c.ReadBrokerID
}

// SetBacklogGB overrides the workload's consumerBacklogSizeGB (GiB; 0 = no backlog).
func (c *Config) SetBacklogGB(gb int64) {
	c.BacklogGB = gb
	c.backlogSet = true
}
