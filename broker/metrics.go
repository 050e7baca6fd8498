package broker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/petrel-mq/petrel/internal/ratelog"
	"github.com/petrel-mq/petrel/protocol"
)

// Observability: with metricsPromExporterPort set, the broker serves an admin HTTP
// port with Prometheus metrics at /metrics and net/http/pprof under /debug/pprof/.
//
// Every broker has its own registry (several brokers may run in one process). Almost every
// metric is computed when scraped, by brokerCollector, from counters and state the broker keeps
// anyway: the data path pays nothing for them. The two histograms are the exception: the
// commit-log append of a send is timed on the event loop (two clock reads and an
// allocation-free Observe), and the flusher times its msyncs (commitlog.Config.OnFlush). With
// metrics off neither is timed.
//
// Names follow RocketMQ 5's metrics where RocketMQ has the metric (rocketmq_messages_in_total
// becomes petrel_messages_in_total, with the labels cluster, node_type and node_id), and
// Prometheus's conventions for units (seconds, bytes) and counters (_total). node_id is
// brokerName/brokerId with the configured brokerId, stable across role changes; node_type is
// the role played now (master or slave).

// metrics is a broker's Prometheus registry, its histograms and its admin HTTP server. Nil on a
// broker without metrics.
type metrics struct {
	reg           *prometheus.Registry
	appendLatency prometheus.Histogram
	flushLatency  prometheus.Histogram
	log           *slog.Logger
	guard         metricsGuard // the port's bounds and lines
	maxConns      int          // metricsMaxConnections

	addr atomic.Pointer[string] // the bound admin address, set once serving
	srv  *http.Server           // set by start, before any other goroutine uses it
	done chan struct{}          // closed when the server's goroutine returns
}

// Label names (RocketMQ 5's where it has them).
const (
	labelCluster       = "cluster"
	labelNodeType      = "node_type"
	labelNodeID        = "node_id"
	labelTopic         = "topic"
	labelConsumerGroup = "consumer_group"
	labelSlaveID       = "slave_id"
	labelRole          = "role"
)

var (
	nodeLabels    = []string{labelCluster, labelNodeID}
	trafficLabels = []string{labelCluster, labelNodeType, labelNodeID}

	descMessagesIn = prometheus.NewDesc("petrel_messages_in_total",
		"Messages stored in the topic's queues (the sum of their max offsets, so it carries on across restarts); exported by the master only, so that a sum over the cluster counts each message once.",
		append(trafficLabels[:3:3], labelTopic), nil)
	descThroughputIn = prometheus.NewDesc("petrel_throughput_in_bytes_total",
		"Bytes of message batches stored by sends since the broker started.", trafficLabels, nil)
	descMessagesOut = prometheus.NewDesc("petrel_messages_out_total",
		"Messages served by pulls since the broker started.", trafficLabels, nil)
	descThroughputOut = prometheus.NewDesc("petrel_throughput_out_bytes_total",
		"Bytes of message batches served by pulls since the broker started.", trafficLabels, nil)
	descSendErrors = prometheus.NewDesc("petrel_send_errors_total",
		"Sends refused or failed (not stored) since the broker started.", trafficLabels, nil)
	descRequests = prometheus.NewDesc("petrel_requests_total",
		"Requests received since the broker started.", trafficLabels, nil)
	descConsumerLag = prometheus.NewDesc("petrel_consumer_lag_messages",
		"Messages not yet consumed by the group: the topic's queue max offsets minus the group's committed offsets, summed over the queues it committed.",
		append(trafficLabels[:3:3], labelConsumerGroup, labelTopic), nil)
	descTopics = prometheus.NewDesc("petrel_topic_number",
		"Topics configured on the broker.", nodeLabels, nil)
	descGroups = prometheus.NewDesc("petrel_consumer_group_number",
		"Consumer groups with committed offsets on the broker.", nodeLabels, nil)
	descStorageSize = prometheus.NewDesc("petrel_storage_size_bytes",
		"Bytes of the commit log still held (its end offset minus its min offset).", nodeLabels, nil)
	descFlushBehind = prometheus.NewDesc("petrel_storage_flush_behind_bytes",
		"Bytes of the commit log appended but not yet flushed to disk.", nodeLabels, nil)
	descRecoveryCut = prometheus.NewDesc("petrel_storage_recovery_cut",
		"1 if opening the commit log at start cut its tail (a torn or damaged batch, one that does not continue the log's history, or a truncation), else 0.", nodeLabels, nil)
	descRecoveryQueuesBack = prometheus.NewDesc("petrel_storage_recovery_queues_back",
		"Queues whose max offset went below what their consume queue held before the start (the log was cut or lost its tail).", nodeLabels, nil)
	descRole = prometheus.NewDesc("petrel_broker_role",
		"1 for the role the broker plays now (SYNC_MASTER, ASYNC_MASTER or SLAVE), 0 for the others.",
		append(nodeLabels[:2:2], labelRole), nil)
	descEpoch = prometheus.NewDesc("petrel_epoch",
		"The broker group's epoch as this member knows it (it grows with every change of master).", nodeLabels, nil)
	descInSyncReplicas = prometheus.NewDesc("petrel_replication_in_sync_replicas",
		"Members in the in-sync set, the master included (master only).", nodeLabels, nil)
	descReplLagBytes = prometheus.NewDesc("petrel_replication_lag_bytes",
		"The master's log end minus the offset the slave last acknowledged (master only, per slave).",
		append(nodeLabels[:2:2], labelSlaveID), nil)
	descReplLagSeconds = prometheus.NewDesc("petrel_replication_lag_seconds",
		"Time since the slave last held everything the master had when it last read for it; 0 when caught up (master only, per slave).",
		append(nodeLabels[:2:2], labelSlaveID), nil)
	descReplInSync = prometheus.NewDesc("petrel_replication_in_sync",
		"1 if the slave is in the in-sync set, else 0 (master only, per slave).",
		append(nodeLabels[:2:2], labelSlaveID), nil)
	descReplConnected = prometheus.NewDesc("petrel_replication_connected",
		"1 if the slave pulled within the last few seconds, else 0 (master only, per slave).",
		append(nodeLabels[:2:2], labelSlaveID), nil)
	descBehindMaster = prometheus.NewDesc("petrel_replication_behind_master_bytes",
		"The master's log end as last heard minus this slave's log end (slave only).", nodeLabels, nil)
	descMasterConnected = prometheus.NewDesc("petrel_replication_master_connected",
		"1 if this slave's replication link to its master is up, else 0 (slave only).", nodeLabels, nil)
	descRaftTerm = prometheus.NewDesc("petrel_raft_term",
		"This member's current Raft term (enableRaftHA only).", nodeLabels, nil)
	descRaftLeader = prometheus.NewDesc("petrel_raft_leader",
		"1 if this member is the Raft leader, else 0 (enableRaftHA only).", nodeLabels, nil)

	allDescs = []*prometheus.Desc{
		descMessagesIn, descThroughputIn, descMessagesOut, descThroughputOut, descSendErrors, descRequests,
		descConsumerLag, descTopics, descGroups, descStorageSize, descFlushBehind, descRecoveryCut, descRecoveryQueuesBack, descRole, descEpoch,
		descInSyncReplicas, descReplLagBytes, descReplLagSeconds, descReplInSync, descReplConnected,
		descBehindMaster, descMasterConnected, descRaftTerm, descRaftLeader,
	}
)

// newMetrics builds the registry and histograms of a broker with metrics on (nil otherwise); the
// broker's collector is registered by register once the broker exists.
func newMetrics(cfg *Config, log *slog.Logger) *metrics {
	if cfg.metricsListenAddr() == "" {
		return nil
	}
	labels := prometheus.Labels{labelCluster: cfg.BrokerClusterName, labelNodeID: nodeID(cfg)}
	m := &metrics{
		reg:      prometheus.NewRegistry(),
		log:      log,
		guard:    newMetricsGuard(cfg, log),
		maxConns: cfg.MetricsMaxConnections,
		appendLatency: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:        "petrel_append_latency_seconds",
			Help:        "Time the commit-log append of a stored send took: the copy into the mapped log under the store mutex.",
			ConstLabels: labels,
			// 1 µs .. 1 s: an append normally takes microseconds; a page fault or a segment
			// roll waiting for its file takes longer.
			Buckets: []float64{1e-6, 2.5e-6, 5e-6, 1e-5, 2.5e-5, 5e-5, 1e-4, 2.5e-4, 5e-4, 1e-3, 2.5e-3, 5e-3, 0.01, 0.025, 0.05, 0.1, 0.25, 1},
		}),
		flushLatency: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:        "petrel_flush_latency_seconds",
			Help:        "Time one flush of the commit log took (the msyncs of its dirty range); under SYNC_FLUSH a send's acknowledgement waits for it.",
			ConstLabels: labels,
			Buckets:     []float64{1e-4, 2.5e-4, 5e-4, 1e-3, 2.5e-3, 5e-3, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10},
		}),
	}
	m.reg.MustRegister(
		m.appendLatency,
		m.flushLatency,
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
	)
	return m
}

// nodeID is the node_id label: brokerName/brokerId, with the configured brokerId.
func nodeID(cfg *Config) string {
	return cfg.BrokerName + "/" + strconv.FormatInt(cfg.BrokerID, 10)
}

// onFlush is the store's flush hook (commitlog.Config.OnFlush). Nil-safe: a broker without
// metrics passes no hook.
func (m *metrics) onFlush() func(time.Duration, int64) {
	if m == nil {
		return nil
	}
	return func(d time.Duration, _ int64) { m.flushLatency.Observe(d.Seconds()) }
}

// register adds the broker's scrape-time collector.
func (m *metrics) register(b *Broker) {
	m.reg.MustRegister(&brokerCollector{b: b, cluster: b.cfg.BrokerClusterName, nodeID: nodeID(&b.cfg)})
}

// start listens on addr and serves /metrics and /debug/pprof/ on a goroutine that close stops.
func (m *metrics) start(addr string) error {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("cannot listen on %s (metricsPromExporterPort): %w", addr, err)
	}
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.InstrumentMetricHandler(m.reg, promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{
		ErrorLog: promLogger{m.log, &m.guard.warn},
		// A collector's error (say, two slaves with the same id) drops its metrics, not the scrape.
		ErrorHandling: promhttp.ContinueOnError,
		Registry:      m.reg,
	})))
	// net/http/pprof also registers these on http.DefaultServeMux when imported; nothing in
	// Petrel serves that mux.
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	mux.HandleFunc("/{$}", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		_, _ = fmt.Fprintln(w, "petrel broker admin: /metrics (Prometheus), /debug/pprof/ (Go profiles)")
	})
	m.srv = &http.Server{
		Handler:           mux,
		ReadHeaderTimeout: m.guard.headerTimeout,
		ReadTimeout:       m.guard.readTimeout,
		IdleTimeout:       metricsIdleTimeout,
		MaxHeaderBytes:    metricsMaxHeaderBytes,
		ErrorLog:          m.guard.errorLog(),
	}
	m.done = make(chan struct{})
	bound := ln.Addr().String()
	ln = m.guard.listener(ln, m.maxConns)
	m.addr.Store(&bound)
	go func() {
		defer close(m.done)
		if err := m.srv.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
			m.log.Error("admin HTTP server (metrics, pprof) stopped", "addr", bound, "err", err)
		}
	}()
	m.log.Info("metrics and pprof served", "addr", bound)
	return nil
}

// close stops the server: requests in progress get up to grace to finish, then their
// connections are closed. It waits for the server's goroutine. Nil-safe; a no-op before start.
func (m *metrics) close(grace time.Duration) {
	if m == nil || m.srv == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), grace)
	err := m.srv.Shutdown(ctx)
	cancel()
	if err != nil {
		_ = m.srv.Close()
	}
	<-m.done
}

// MetricsAddr returns the address (host:port) the admin HTTP server (metrics and pprof) listens
// on, "" when metricsPromExporterPort is 0 or before Start.
func (b *Broker) MetricsAddr() string {
	if b.metrics == nil {
		return ""
	}
	if p := b.metrics.addr.Load(); p != nil {
		return *p
	}
	return ""
}

// promLogger adapts the broker's logger to promhttp.Logger, rate-limited (a scraper can make
// every scrape fail the same way).
type promLogger struct {
	l    *slog.Logger
	warn *ratelog.Reasons
}

// Println logs one promhttp error as a warning.
func (p promLogger) Println(v ...any) {
	p.warn.Of("promhttp").Warn(p.l, "metrics: "+fmt.Sprint(v...), "component", "metrics")
}

// brokerCollector computes the broker's metrics when scraped. It takes no broker lock but the
// leaves its snapshots take (offsetTable.mu, topicTable's atomic pointer, ha.Master.mu), each
// released before the store is asked for offsets.
type brokerCollector struct {
	b       *Broker
	cluster string
	nodeID  string
}

// Describe implements prometheus.Collector.
func (c *brokerCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range allDescs {
		ch <- d
	}
}

// Collect implements prometheus.Collector.
func (c *brokerCollector) Collect(ch chan<- prometheus.Metric) {
	b := c.b
	r := b.role.Load()
	nodeType := "slave"
	if r.master != nil {
		nodeType = "master"
	}
	emit := func(d *prometheus.Desc, t prometheus.ValueType, v float64, lv ...string) {
		ch <- prometheus.MustNewConstMetric(d, t, v, lv...)
	}
	traffic := func(d *prometheus.Desc, v int64) {
		emit(d, prometheus.CounterValue, float64(v), c.cluster, nodeType, c.nodeID)
	}
	node := func(d *prometheus.Desc, v float64) {
		emit(d, prometheus.GaugeValue, v, c.cluster, c.nodeID)
	}

	// Traffic.
	traffic(descThroughputIn, b.stats.putBytes.Load())
	traffic(descMessagesOut, b.stats.getMessages.Load())
	traffic(descThroughputOut, b.stats.getBytes.Load())
	traffic(descSendErrors, b.stats.putErrors.Load())
	traffic(descRequests, b.stats.requests.Load())
	topics := b.topics.list()
	if r.master != nil {
		for _, t := range c.topicMessages(topics) {
			emit(descMessagesIn, prometheus.CounterValue, float64(t.n), c.cluster, nodeType, c.nodeID, t.topic)
		}
	}
	for _, l := range c.consumerLags() {
		emit(descConsumerLag, prometheus.GaugeValue, float64(l.lag), c.cluster, nodeType, c.nodeID, l.group, l.topic)
	}
	node(descTopics, float64(len(topics)))
	node(descGroups, float64(b.offsets.groupCount()))

	// Storage.
	end := b.store.LogEndOffset()
	node(descStorageSize, float64(max(end-b.store.LogMinOffset(), 0)))
	node(descFlushBehind, float64(max(end-b.store.FlushedOffset(), 0)))
	rec := b.store.Recovery()
	node(descRecoveryCut, b2f(rec.Cut))
	node(descRecoveryQueuesBack, float64(rec.QueuesBack))

	// Role and replication.
	st := b.haStatus()
	for _, name := range []string{RoleSyncMaster, RoleAsyncMaster, RoleSlave} {
		v := 0.0
		if st.Role == name {
			v = 1
		}
		emit(descRole, prometheus.GaugeValue, v, c.cluster, c.nodeID, name)
	}
	node(descEpoch, float64(max(st.Epoch, r.Epoch)))
	switch {
	case r.master != nil:
		node(descInSyncReplicas, float64(st.InSyncReplicas))
		seen := make(map[int64]bool, len(st.Slaves))
		for _, sl := range st.Slaves {
			if seen[sl.BrokerID] {
				continue // a slave reconnecting may be listed twice for a moment
			}
			seen[sl.BrokerID] = true
			id := strconv.FormatInt(sl.BrokerID, 10)
			emit(descReplLagBytes, prometheus.GaugeValue, float64(max(sl.LagBytes, 0)), c.cluster, c.nodeID, id)
			emit(descReplLagSeconds, prometheus.GaugeValue, float64(max(sl.LagMs, 0))/1000, c.cluster, c.nodeID, id)
			emit(descReplInSync, prometheus.GaugeValue, b2f(sl.InSync), c.cluster, c.nodeID, id)
			emit(descReplConnected, prometheus.GaugeValue, b2f(sl.Connected), c.cluster, c.nodeID, id)
		}
	case r.slave != nil:
		node(descBehindMaster, float64(max(st.MasterEnd-st.LogEnd, 0)))
		node(descMasterConnected, b2f(st.Connected))
	}
	if b.raft != nil && b.raft.node != nil {
		node(descRaftTerm, float64(b.raft.node.Term()))
		node(descRaftLeader, b2f(b.raft.node.IsLeader()))
	}
}

type topicCount struct {
	topic string
	n     int64
}

// topicMessages returns, per topic, the sum of its queues' max offsets: every configured topic
// (0 before its first message) and every topic the store has queues of.
func (c *brokerCollector) topicMessages(topics []protocol.TopicConfig) []topicCount {
	idx := make(map[string]int, len(topics))
	out := make([]topicCount, 0, len(topics))
	for _, t := range topics {
		idx[t.Topic] = len(out)
		out = append(out, topicCount{topic: t.Topic})
	}
	var key []byte
	for _, q := range c.b.store.Queues() {
		i, ok := idx[q.Topic]
		if !ok {
			i = len(out)
			idx[q.Topic] = i
			out = append(out, topicCount{topic: q.Topic})
		}
		key = append(key[:0], q.Topic...)
		out[i].n += c.b.store.MaxOffset(key, q.QueueID)
	}
	return out
}

type groupLag struct {
	group, topic string
	lag          int64
}

// consumerLags returns, per (consumer group, topic) with committed offsets, the messages past
// the committed offsets of its queues.
func (c *brokerCollector) consumerLags() []groupLag {
	var out []groupLag
	var key []byte
	for _, o := range c.b.offsets.table().Offsets { // sorted by group, topic, queue
		if n := len(out); n == 0 || out[n-1].group != o.ConsumerGroup || out[n-1].topic != o.Topic {
			out = append(out, groupLag{group: o.ConsumerGroup, topic: o.Topic})
		}
		key = append(key[:0], o.Topic...)
		pos := o.Offset
		if otherLife(o.Incarnation, c.b.store.QueueIncarnation(key, o.QueueID)) { // the queue was created again
			pos = c.b.store.MinOffset(key, o.QueueID)
		}
		out[len(out)-1].lag += max(c.b.store.MaxOffset(key, o.QueueID)-pos, 0)
	}
	return out
}

func b2f(v bool) float64 {
	if v {
		return 1
	}
	return 0
}
