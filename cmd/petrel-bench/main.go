// Command petrel-bench runs OpenMessaging Benchmark workloads and log replays against Petrel,
// an embedded cluster by default (a NameServer and a broker group of a SYNC_MASTER and two
// slaves), and verifies every message end to end. The summary counts what the master and each
// slave served and, with slaves, their replication lag and compression.
//
//	petrel-bench --payload-dir bench/testdata/loghub --verify
//	petrel-bench --workload bench/workloads/1-topic-16-partitions-1kb.yaml -n 127.0.0.1:9876 \
//	    --verify --duration 20s --json out.json
//	petrel-bench -n 127.0.0.1:9876 --consume-only --topic-id manual --read-broker-id 1
//
// Exit status: 0 when the run completed (and, with --verify or --consume-only, found nothing
// lost, duplicated, reordered, corrupted, phantom or inconsistent, and the final read checked
// every acknowledged message), 1 when verification failed or a consumer's offset moved
// backwards, 2 when the run could not be carried out. The first SIGINT or SIGTERM stops producing, drains and still prints the
// summary; a second one kills the process.
package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"runtime/pprof"
	"runtime/trace"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/petrel-mq/petrel/bench"
)

// Exit codes.
const (
	exitOK      = 0
	exitFailed  = 1 // verification found errors
	exitCantRun = 2 // bad flags, cluster unreachable, ...
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	go func() {
		<-ctx.Done()
		stop() // from now on a second signal kills the process
	}()
	code := execute(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// execute runs the command with args and returns the exit code.
func execute(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	code := exitOK
	cmd := newCommand(stdout, stderr, &code)
	cmd.SetArgs(args)
	if err := cmd.ExecuteContext(ctx); err != nil {
		fmt.Fprintf(stderr, "petrel-bench: %v\n", err)
		return exitCantRun
	}
	return code
}

// newCommand returns the root command. Progress and the summary go to stdout, logs to stderr;
// *code receives exitFailed when verification fails.
func newCommand(stdout, stderr io.Writer, code *int) *cobra.Command {
	cfg := bench.Config{Out: stdout}
	var (
		warmup      time.Duration
		rate        int
		backlogGB   int64
		segmentSize string
		logLevel    string
		cpuProfile  string
		execTrace   string
		slaves      int
		readBroker  int64
		haInterval  time.Duration
		linger      time.Duration
	)
	cmd := &cobra.Command{
		Use:   "petrel-bench",
		Short: "Benchmark and verify Petrel with OpenMessaging Benchmark workloads or log replays",
		Long: `petrel-bench produces and consumes messages on a Petrel cluster and reports throughput and
latency (HDR histograms) the way the OpenMessaging Benchmark does; --verify also checks that every
acknowledged message is consumed exactly once per subscription, intact and in queue order.

Without -n it starts an embedded NameServer and broker group on 127.0.0.1 with data in a temporary
directory: a SYNC_MASTER master and 2 slaves (--slaves 0: a lone master). Without --workload,
--payload-dir is replayed: one topic of 8 queues, one producer, one subscription, every line sent
once as fast as possible, then drained.

The summary counts the pulls and messages served by the master (brokerId 0) and by each slave and,
when the topics' broker groups have slaves, each slave's replication lag (bytes and ms, p50/p99/max,
sampled from the master's haStatus every --ha-sample-interval) and compression ratio.

--consume-only reads existing topics (--topic, or <prefix>-<topic-id>-<i>) of a running cluster
from their earliest offsets, with no producer, until every message below the queues' max offsets
at the start has arrived; it checks the body CRC of each bench message (messages without a bench
identity count as foreign), that every queue is contiguous (no gap, no offset twice) and that no
message was stored twice, and exits 1 on any problem. Having no producer record, it cannot tell an
acknowledged message missing altogether: its last line counts gaps, not lost messages. With --read-broker-id N the consumers read from member N of each group alone: a
consume-only run against one slave.`,
		Example: `  petrel-bench --payload-dir bench/testdata/loghub --verify
  petrel-bench --workload bench/workloads/1-topic-16-partitions-1kb.yaml -n 127.0.0.1:9876 --verify --duration 20s --json out.json
  petrel-bench -n 127.0.0.1:9876 --consume-only --topic petrel-bench-manual-0 --read-broker-id 1`,
		Args:          cobra.NoArgs,
		SilenceErrors: true,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cmd.SilenceUsage = true
			if cmd.Flags().Changed("producer-rate") {
				if rate < 0 {
					return fmt.Errorf("--producer-rate %d: must not be negative", rate)
				}
				cfg.SetProducerRate(rate)
			}
			if cmd.Flags().Changed("backlog-gb") {
				if backlogGB < 0 {
					return fmt.Errorf("--backlog-gb %d: must not be negative", backlogGB)
				}
				cfg.SetBacklogGB(backlogGB)
			}
			// A duration that is 0 would mean "unset" (a default) further on: given, it must be
			// positive. Only --warmup 0 (none) and --ha-sample-interval 0 (off) mean something.
			for _, d := range []struct {
				flag  string
				value time.Duration
				unset string
			}{
				{"duration", cfg.Duration, "the workload's testDurationMinutes"},
				{"progress-interval", cfg.ProgressInterval, bench.DefaultProgressInterval.String()},
				{"drain-timeout", cfg.DrainTimeout, bench.DefaultDrainTimeout.String()},
			} {
				if cmd.Flags().Changed(d.flag) && d.value <= 0 {
					return fmt.Errorf("--%s %v: must be positive (leave it out to use %s)", d.flag, d.value, d.unset)
				}
			}
			if warmup < 0 {
				return fmt.Errorf("--warmup %v: must not be negative (0: no warm-up)", warmup)
			}
			if cfg.JSONFile != "" {
				// Checked now, not after a run of many minutes.
				if err := checkJSONDir(cfg.JSONFile); err != nil {
					return err
				}
			}
			if cpuProfile != "" && cpuProfile == execTrace {
				return fmt.Errorf("--cpu-profile and --exec-trace name the same file %s", cpuProfile)
			}
			cfg.CPUProfile, cfg.ExecTrace = cpuProfile, execTrace
			if cmd.Flags().Changed("warmup") {
				cfg.Warmup = warmup
			} else {
				cfg.Warmup = -1
			}
			if cmd.Flags().Changed("slaves") {
				cfg.SetEmbeddedSlaves(slaves)
			}
			if cmd.Flags().Changed("read-broker-id") {
				if readBroker < 0 {
					return fmt.Errorf("--read-broker-id %d: must not be negative", readBroker)
				}
				cfg.SetReadBrokerID(readBroker)
			}
			if cfg.TraceEvery < 0 {
				return fmt.Errorf("--trace-every %d: must not be negative", cfg.TraceEvery)
			}
			switch {
			case linger < 0:
				return fmt.Errorf("--linger %v: must not be negative", linger)
			case linger == 0:
				cfg.Linger = bench.NoLinger
			default:
				cfg.Linger = linger
			}
			switch {
			case haInterval < 0:
				return fmt.Errorf("--ha-sample-interval %v: must not be negative", haInterval)
			case haInterval == 0:
				cfg.HASampleInterval = -1 // off
			default:
				cfg.HASampleInterval = haInterval
			}
			if segmentSize != "" {
				n, err := parseSize(segmentSize)
				if err != nil {
					return fmt.Errorf("--segment-size: %w", err)
				}
				cfg.SegmentSize = n
			}
			var level slog.Level
			if err := level.UnmarshalText([]byte(logLevel)); err != nil {
				return fmt.Errorf("--log-level %q: want debug, info, warn or error", logLevel)
			}
			cfg.Logger = slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: level}))
			if cfg.WorkloadFile == "" && cfg.PayloadDir == "" && !cfg.ConsumeOnly {
				cmd.SilenceUsage = false
				return fmt.Errorf("give --workload, --payload-dir or both")
			}
			if cpuProfile != "" {
				stop, err := startRecording("--cpu-profile", cpuProfile, pprof.StartCPUProfile, pprof.StopCPUProfile)
				if err != nil {
					return err
				}
				defer stop()
			}
			if execTrace != "" {
				stop, err := startRecording("--exec-trace", execTrace, trace.Start, trace.Stop)
				if err != nil {
					return err
				}
				defer stop()
			}
			res, err := bench.Run(cmd.Context(), cfg)
			if err != nil {
				return err
			}
			if !res.OK() {
				*code = exitFailed
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&cfg.WorkloadFile, "workload", "", "OpenMessaging Benchmark workload file (YAML)")
	f.StringVar(&cfg.PayloadDir, "payload-dir", "", "directory whose files' lines are message bodies (*.log, or every file but LICENSE/README/NOTICE); replayed once without --workload, cycled with one")
	f.DurationVar(&cfg.Duration, "duration", 0, "test length (positive), overriding the workload's testDurationMinutes (a replay or --consume-only: upper bound)")
	f.DurationVar(&warmup, "warmup", 0, "warm-up, excluded from results; 0: none (default: the workload's warmupDurationMinutes, at most a quarter of --duration; none for a replay)")
	f.IntVar(&rate, "producer-rate", 0, "override the workload's producerRate (msg/s over all producers; 0 = as fast as possible)")
	f.Int64Var(&backlogGB, "backlog-gb", 0, "override the workload's consumerBacklogSizeGB (GiB; 0 = no backlog)")
	f.IntVar(&cfg.Producers, "producers", 0, "override the workload's producersPerTopic (0: keep the workload's)")
	f.BoolVar(&cfg.SyncSend, "sync-send", false, "producers send one message at a time and wait for each acknowledgement (synchronous send latency)")
	f.BoolVar(&cfg.Verify, "verify", false, "check every message, as consumed and in a final read of every queue at the end (on each master, and on member --read-broker-id): lost, duplicated, reordered, corrupted, phantom, inconsistent; exit 1 if any")
	f.DurationVar(&cfg.ProgressInterval, "progress-interval", bench.DefaultProgressInterval, "period of progress lines and of the JSON time series (positive)")
	f.StringVar(&cfg.JSONFile, "json", "", "write the result as JSON (OMB TestResult fields plus Petrel's counts) to this file")
	f.StringVar(&cfg.Driver, "driver", bench.DriverPetrel, "system under test: petrel, or nats (NATS JetStream at --nats-url; see scripts/nats-server.sh)")
	f.StringVar(&cfg.NatsURL, "nats-url", bench.DefaultNatsURL, "--driver nats: the NATS server URL")
	f.IntVar(&cfg.NatsReplicas, "nats-replicas", 1, "--driver nats: replicas of each topic's stream (1..5; 3 needs a cluster)")
	f.StringVarP(&cfg.NameServers, "namesrv", "n", "", "NameServer addresses of a running cluster, ';'-separated (default: start an embedded cluster)")
	f.StringVar(&cfg.Cluster, "cluster", "", "with -n: create topics on this cluster name or broker address (default: every master)")
	f.BoolVar(&cfg.NoCreateTopic, "no-create-topic", false, "use existing topics <prefix>-<topic-id>-<i> instead of creating them")
	f.StringVar(&cfg.TopicPrefix, "topic-prefix", bench.DefaultTopicPrefix, "topic names are <prefix>-<id>-<i>")
	f.StringVar(&cfg.TopicID, "topic-id", "", "the <id> part of topic names (default: random per run)")
	f.BoolVar(&cfg.KeepData, "keep-data", false, "embedded cluster: keep the data directory")
	f.StringVar(&cfg.FlushDiskType, "flush", bench.DefaultFlushDiskType, "embedded cluster: ASYNC_FLUSH or SYNC_FLUSH")
	f.StringVar(&segmentSize, "segment-size", "", "embedded cluster: commit-log segment size, bytes or with a K/M/G suffix (default 128M)")
	f.DurationVar(&cfg.DrainTimeout, "drain-timeout", bench.DefaultDrainTimeout, "after the last send, wait at most this long (positive) for everything acknowledged to be consumed (--consume-only: give up after this long without a new message)")
	f.IntVar(&cfg.RetryUnknown, "retry-unknown", 0, "resend a message up to this many times after an unknown outcome (copies consumed per attempt count as duplicatedAfterRetry)")
	f.Uint64Var(&cfg.Seed, "seed", 0, "seed of random payloads and keys (default: random)")
	f.IntVar(&slaves, "slaves", bench.DefaultEmbeddedSlaves, fmt.Sprintf("embedded cluster: slaves of the broker group (0..%d; 0: a lone master)", bench.MaxEmbeddedSlaves))
	f.StringVar(&cfg.EmbeddedHACompression, "ha-compression", "", "embedded cluster: the codec of replication chunks, s2, zstd or none (default s2)")
	f.BoolVar(&cfg.EmbeddedWriteThroughMapping, "write-through-mapping", false, "embedded cluster: every broker with commitLogWriteThroughFile=false (every append copies into the commit log's mapping instead of a pwrite)")
	f.StringVar(&cfg.EmbeddedRole, "broker-role", "", "embedded cluster: the master's brokerRole, SYNC_MASTER or ASYNC_MASTER (default SYNC_MASTER with slaves, ASYNC_MASTER without)")
	f.Int64Var(&readBroker, "read-broker-id", -1, "consumers read from this member of each broker group only (0: the master, N: slave N), ignoring read suggestions (default: follow them); with --verify the final read checks member N too")
	f.BoolVar(&cfg.ConsumeOnly, "consume-only", false, "consume existing topics (--topic or --topic-id) of a running cluster from the earliest offset, no producers, and check every message up to the queues' max offsets at the start; exit 1 on any problem")
	f.StringSliceVar(&cfg.Topics, "topic", nil, "with --consume-only: the topics to consume (repeat or comma-separate; default <prefix>-<topic-id>-<i>)")
	f.IntVar(&cfg.TraceEvery, "trace-every", 0, "trace about 1 producer batch in N through client and brokers and print where the traced batches' publish and end-to-end latency and each slave's replication wait go, for all of them and those at or above the run's p99 and p99.9 (latencyBreakdown in the JSON); brokers must run on this machine; 0: off")
	f.DurationVar(&linger, "linger", bench.DefaultLinger, "Petrel driver: how long a producer's batch for a queue waits for more messages (client.WithLinger); 0: none, a batch goes as soon as the queue's previous one is answered")
	f.DurationVar(&haInterval, "ha-sample-interval", bench.DefaultHASampleInterval, "period of the replication-lag samples (each group master's haStatus) during the test and drain; 0: off")
	f.StringVar(&cpuProfile, "cpu-profile", "", "write a CPU profile of the whole run (load generator and embedded cluster) to this file, for go tool pprof")
	f.StringVar(&execTrace, "exec-trace", "", "write a Go execution trace of the whole run to this file, for go tool trace (e.g. -pprof=sched: where goroutines waited for a CPU)")
	f.StringVar(&logLevel, "log-level", "warn", "log level of the bench, client and embedded servers: debug, info, warn or error")
	cmd.AddCommand(newBaselineCommand(stdout), newChartCommand(stdout))
	cmd.SetOut(stdout)
	cmd.SetErr(stderr)
	return cmd
}

// parseSize parses a byte count with an optional binary suffix: 1048576, 64K, 128M, 1G (also
// KB/KiB and so on).
func parseSize(s string) (int64, error) {
	t := strings.ToUpper(strings.TrimSpace(s))
	t = strings.TrimSuffix(strings.TrimSuffix(t, "IB"), "B")
	mult := int64(1)
	if n := len(t); n > 0 {
		switch t[n-1] {
		case 'K':
			mult, t = 1<<10, t[:n-1]
		case 'M':
			mult, t = 1<<20, t[:n-1]
		case 'G':
			mult, t = 1<<30, t[:n-1]
		}
	}
	v, err := strconv.ParseInt(t, 10, 64)
	if err != nil || v <= 0 || v > (1<<62)/mult {
		return 0, fmt.Errorf("%q is not a positive size (bytes, or with a K/M/G suffix)", s)
	}
	return v * mult, nil
}

// startRecording starts writing a CPU profile or an execution trace (start, stop: the
// runtime's pair) to path; the returned function stops it and closes the file. flag names the
// option in errors.
func startRecording(flag, path string, start func(io.Writer) error, stop func()) (func(), error) {
	f, err := os.Create(path)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", flag, err)
	}
	if err := start(f); err != nil {
		_ = f.Close()
		return nil, fmt.Errorf("%s: %w", flag, err)
	}
	return func() {
		stop()
		_ = f.Close()
	}, nil
}

// checkJSONDir refuses a --json file whose directory does not exist, before a run that would
// only find out at its end.
func checkJSONDir(path string) error {
	if fi, err := os.Stat(filepath.Dir(path)); err != nil || !fi.IsDir() {
		return fmt.Errorf("--json %s: its directory does not exist", path)
	}
	return nil
}
