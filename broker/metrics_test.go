package broker

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"fmt"
	"io"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/petrel-mq/petrel/internal/testutil"
)

// scrape is one parsed /metrics answer (Prometheus text format): series by metric name.
type scrape map[string][]series

type series struct {
	labels map[string]string
	value  float64
}

var labelRE = regexp.MustCompile(`([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"`)

// httpGet fetches url without keeping connections alive (goleak checks the transport's
// goroutines too).
func httpGet(t testing.TB, url string) (*http.Response, []byte) {
	t.Helper()
	c := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}, Timeout: 20 * time.Second}
	resp, err := c.Get(url)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	return resp, body
}

// scrapeMetrics GETs /metrics of b and parses it.
func scrapeMetrics(t testing.TB, b *Broker) scrape {
	t.Helper()
	resp, body := httpGet(t, "http://"+b.MetricsAddr()+"/metrics")
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("/metrics: %s\n%s", resp.Status, body)
	}
	if ct := resp.Header.Get("Content-Type"); !strings.HasPrefix(ct, "text/plain") {
		t.Fatalf("/metrics content type %q", ct)
	}
	out := scrape{}
	sc := bufio.NewScanner(bytes.NewReader(body))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		v, err := strconv.ParseFloat(line[i+1:], 64)
		if i < 0 || err != nil {
			t.Fatalf("bad line %q", line)
		}
		name, s := line[:i], series{labels: map[string]string{}, value: v}
		if j := strings.IndexByte(name, '{'); j >= 0 {
			for _, m := range labelRE.FindAllStringSubmatch(name[j:], -1) {
				s.labels[m[1]] = m[2]
			}
			name = name[:j]
		}
		out[name] = append(out[name], s)
	}
	return out
}

// find returns the series of name whose labels include want (pairs of name, value).
func (s scrape) find(name string, want ...string) []series {
	var out []series
next:
	for _, ser := range s[name] {
		for i := 0; i+1 < len(want); i += 2 {
			if ser.labels[want[i]] != want[i+1] {
				continue next
			}
		}
		out = append(out, ser)
	}
	return out
}

// value returns the value of the one series of name with the labels; the test fails if there
// is not exactly one.
func (s scrape) value(t testing.TB, name string, labels ...string) float64 {
	t.Helper()
	got := s.find(name, labels...)
	if len(got) != 1 {
		t.Fatalf("%s%v: %d series, want 1 (all: %v)", name, labels, len(got), s[name])
	}
	return got[0].value
}

// TestMetricsAndPprof: a broker with the admin port serves its traffic, consumer lag, role,
// storage and latency metrics with RocketMQ's labels, the Go and process collectors, and pprof;
// Close stops the server.
func TestMetricsAndPprof(t *testing.T) {
	cfg := testConfig(t.TempDir())
	cfg.metricsAnyPort = true
	b := startBroker(t, cfg)
	defer b.Close()
	if b.MetricsAddr() == "" {
		t.Fatal("no metrics address")
	}
	c := dial(t, b.Addr())
	createTopic(t, c, "mt", 2)
	batches := [][]byte{
		buildBatch("mt", 0, "a", "b", "c"),
		buildBatch("mt", 0, "d", "e"),
		buildBatch("mt", 1, "f", "g"),
	}
	var sentBytes int
	for _, batch := range batches {
		if _, err := sendBatch(c, batch); err != nil {
			t.Fatal(err)
		}
		sentBytes += len(batch)
	}
	if p := pull(t, c, "mt", 0, 0, 0); len(p.bodies) != 5 {
		t.Fatalf("pulled %d messages, want 5", len(p.bodies))
	}
	commitOffset(t, c, "g1", "mt", 0, 2) // 3 left in queue 0
	commitOffset(t, c, "g1", "mt", 1, 0) // 2 left in queue 1
	commitOffset(t, c, "g2", "mt", 0, 5) // caught up

	node := []string{"cluster", "DefaultCluster", "node_id", "broker-a/0"}
	traffic := append(node[:4:4], "node_type", "master")
	var s scrape
	// The ASYNC_FLUSH flusher runs every 500 ms: wait for one flush to be timed.
	testutil.Eventually(t, "a timed flush", func() bool {
		s = scrapeMetrics(t, b)
		return len(s.find("petrel_flush_latency_seconds_count")) == 1 && s.value(t, "petrel_flush_latency_seconds_count", node...) > 0
	})
	checks := []struct {
		name   string
		labels []string
		want   float64
	}{
		{"petrel_messages_in_total", append(traffic[:6:6], "topic", "mt"), 7},
		{"petrel_throughput_in_bytes_total", traffic, float64(sentBytes)},
		{"petrel_messages_out_total", traffic, 5},
		{"petrel_send_errors_total", traffic, 0},
		{"petrel_consumer_lag_messages", append(traffic[:6:6], "consumer_group", "g1", "topic", "mt"), 5},
		{"petrel_consumer_lag_messages", append(traffic[:6:6], "consumer_group", "g2", "topic", "mt"), 0},
		{"petrel_consumer_group_number", node, 2},
		{"petrel_topic_number", node, 1},
		{"petrel_broker_role", append(node[:4:4], "role", RoleAsyncMaster), 1},
		{"petrel_broker_role", append(node[:4:4], "role", RoleSyncMaster), 0},
		{"petrel_broker_role", append(node[:4:4], "role", RoleSlave), 0},
		{"petrel_append_latency_seconds_count", node, 3},
		{"petrel_storage_size_bytes", node, float64(b.store.LogEndOffset())},
		{"petrel_storage_recovery_cut", node, 0},
		{"petrel_storage_recovery_queues_back", node, 0},
		{"petrel_replication_in_sync_replicas", node, 1},
	}
	for _, ck := range checks {
		if got := s.value(t, ck.name, ck.labels...); got != ck.want {
			t.Errorf("%s%v = %v, want %v", ck.name, ck.labels, got, ck.want)
		}
	}
	if got := s.value(t, "petrel_throughput_out_bytes_total", traffic...); got <= 0 {
		t.Errorf("petrel_throughput_out_bytes_total = %v, want > 0", got)
	}
	if got := s.value(t, "petrel_requests_total", traffic...); got < 7 {
		t.Errorf("petrel_requests_total = %v, want >= 7 (3 sends, a pull, 3 commits)", got)
	}
	if sum := s.value(t, "petrel_append_latency_seconds_sum", node...); sum <= 0 || sum > 10 {
		t.Errorf("petrel_append_latency_seconds_sum = %v", sum)
	}
	if inf := s.value(t, "petrel_append_latency_seconds_bucket", append(node[:4:4], "le", "+Inf")...); inf != 3 {
		t.Errorf("append latency +Inf bucket %v, want 3", inf)
	}
	for _, name := range []string{"petrel_replication_lag_bytes", "petrel_replication_behind_master_bytes", "petrel_raft_term"} {
		if len(s[name]) != 0 {
			t.Errorf("%s on a master without slaves or Raft: %v", name, s[name])
		}
	}
	for _, name := range []string{"go_goroutines", "go_memstats_heap_alloc_bytes", "process_cpu_seconds_total", "process_resident_memory_bytes", "promhttp_metric_handler_requests_total"} {
		if len(s[name]) == 0 {
			t.Errorf("no %s", name)
		}
	}

	// pprof on the same port.
	base := "http://" + b.MetricsAddr()
	if resp, body := httpGet(t, base+"/debug/pprof/"); resp.StatusCode != http.StatusOK || !bytes.Contains(body, []byte("goroutine")) {
		t.Errorf("/debug/pprof/: %s\n%.300s", resp.Status, body)
	}
	if resp, body := httpGet(t, base+"/debug/pprof/goroutine?debug=1"); resp.StatusCode != http.StatusOK || !bytes.Contains(body, []byte("goroutine profile")) {
		t.Errorf("/debug/pprof/goroutine: %s\n%.300s", resp.Status, body)
	}
	if resp, _ := httpGet(t, base+"/debug/pprof/cmdline"); resp.StatusCode != http.StatusOK {
		t.Errorf("/debug/pprof/cmdline: %s", resp.Status)
	}
	resp, prof := httpGet(t, base+"/debug/pprof/profile?seconds=1")
	if resp.StatusCode != http.StatusOK || len(prof) < 2 || prof[0] != 0x1f || prof[1] != 0x8b {
		t.Fatalf("/debug/pprof/profile: %s, %d bytes, want a gzipped profile\n%.300s", resp.Status, len(prof), prof)
	}
	zr, err := gzip.NewReader(bytes.NewReader(prof))
	if err != nil {
		t.Fatal(err)
	}
	if raw, err := io.ReadAll(zr); err != nil || len(raw) == 0 {
		t.Fatalf("profile: %d bytes, %v", len(raw), err)
	}
	if resp, _ := httpGet(t, base+"/nosuch"); resp.StatusCode != http.StatusNotFound {
		t.Errorf("/nosuch: %s", resp.Status)
	}

	addr := b.MetricsAddr()
	c.Close()
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	hc := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}, Timeout: 2 * time.Second}
	if resp, err := hc.Get("http://" + addr + "/metrics"); err == nil {
		resp.Body.Close()
		t.Fatal("the admin port still answers after Close")
	}
}

// TestMetricsOff: without metricsPromExporterPort the broker serves no admin port.
func TestMetricsOff(t *testing.T) {
	b := startBroker(t, testConfig(t.TempDir()))
	defer b.Close()
	if b.metrics != nil || b.MetricsAddr() != "" {
		t.Fatalf("metrics on by default: %q", b.MetricsAddr())
	}
}

// TestMetricsReplication: a master reports each slave's lag, in-sync and connected state; a
// slave reports its role and its lag behind the master, and no messages_in (the master counts
// them); a stopped slave shows as disconnected, out of sync and lagging by what was sent since.
func TestMetricsReplication(t *testing.T) {
	hc := newHACluster(t, RoleAsyncMaster, 1, func(c *Config) { c.metricsAnyPort = true })
	m, sl := hc.b(0), hc.b(1)
	c := dial(t, m.Addr())
	createTopic(t, c, "rt", 1)
	for i := range 10 {
		send(t, c, "rt", 0, fmt.Sprint("m", i))
	}
	hc.waitInSync(1)
	hc.waitCaughtUp(1)

	mNode := []string{"node_id", "broker-a/0"}
	slave1 := append(mNode[:2:2], "slave_id", "1")
	s := scrapeMetrics(t, m)
	for _, ck := range []struct {
		name   string
		labels []string
		want   float64
	}{
		{"petrel_replication_lag_bytes", slave1, 0},
		{"petrel_replication_lag_seconds", slave1, 0},
		{"petrel_replication_in_sync", slave1, 1},
		{"petrel_replication_connected", slave1, 1},
		{"petrel_replication_in_sync_replicas", mNode, 2},
		{"petrel_broker_role", append(mNode[:2:2], "role", RoleAsyncMaster), 1},
		{"petrel_messages_in_total", append(mNode[:2:2], "topic", "rt", "node_type", "master"), 10},
	} {
		if got := s.value(t, ck.name, ck.labels...); got != ck.want {
			t.Errorf("master: %s%v = %v, want %v", ck.name, ck.labels, got, ck.want)
		}
	}

	sNode := []string{"node_id", "broker-a/1"}
	testutil.Eventually(t, "the slave hears the master's log end", func() bool {
		s = scrapeMetrics(t, sl)
		return len(s.find("petrel_replication_behind_master_bytes", sNode...)) == 1 &&
			s.value(t, "petrel_replication_behind_master_bytes", sNode...) == 0
	})
	if got := s.value(t, "petrel_replication_master_connected", sNode...); got != 1 {
		t.Errorf("slave: master_connected %v", got)
	}
	if got := s.value(t, "petrel_broker_role", append(sNode[:2:2], "role", RoleSlave)...); got != 1 {
		t.Errorf("slave: role SLAVE %v", got)
	}
	if got := s.value(t, "petrel_storage_size_bytes", sNode...); got != float64(m.store.LogEndOffset()) {
		t.Errorf("slave: storage size %v, want the master's log end %d", got, m.store.LogEndOffset())
	}
	if len(s["petrel_messages_in_total"]) != 0 || len(s["petrel_replication_lag_bytes"]) != 0 {
		t.Errorf("slave exports master metrics: %v %v", s["petrel_messages_in_total"], s["petrel_replication_lag_bytes"])
	}
	if got := s.value(t, "petrel_messages_out_total", append(sNode[:2:2], "node_type", "slave")...); got != 0 {
		t.Errorf("slave: messages_out %v", got)
	}

	// A stopped slave: disconnected, out of sync, and lagging by the bytes sent since.
	caughtUp := m.store.LogEndOffset()
	hc.stop(1)
	for i := range 5 {
		send(t, c, "rt", 0, fmt.Sprint("late", i))
	}
	lag := float64(m.store.LogEndOffset() - caughtUp)
	testutil.Eventually(t, "the master sees the slave gone", func() bool {
		s = scrapeMetrics(t, m)
		return s.value(t, "petrel_replication_connected", slave1...) == 0 &&
			s.value(t, "petrel_replication_in_sync", slave1...) == 0 &&
			s.value(t, "petrel_replication_lag_seconds", slave1...) > 0
	})
	if got := s.value(t, "petrel_replication_lag_bytes", slave1...); got != lag {
		t.Errorf("lag of the stopped slave %v bytes, want %v", got, lag)
	}
	if got := s.value(t, "petrel_replication_in_sync_replicas", mNode...); got != 1 {
		t.Errorf("in-sync replicas %v, want 1", got)
	}
}

// TestMetricsRaft: members of a Raft-elected group report their term, one leader, the epoch and
// the master's role.
func TestMetricsRaft(t *testing.T) {
	bs := raftMembers(t, func(c *Config) { c.metricsAnyPort = true })
	defer func() {
		for _, b := range bs {
			_ = b.Close()
		}
	}()
	m := raftMaster(t, bs)
	testutil.Eventually(t, "one Raft leader among the members' metrics", func() bool {
		leaders := 0.0
		for _, b := range bs {
			s := scrapeMetrics(t, b)
			node := []string{"node_id", nodeID(&b.cfg)}
			if s.value(t, "petrel_raft_term", node...) < 1 {
				return false
			}
			leaders += s.value(t, "petrel_raft_leader", node...)
		}
		return leaders == 1
	})
	s := scrapeMetrics(t, m)
	node := []string{"node_id", nodeID(&m.cfg)}
	if got := s.value(t, "petrel_broker_role", append(node[:2:2], "role", RoleSyncMaster)...); got != 1 {
		t.Errorf("master: role SYNC_MASTER %v", got)
	}
	if got := s.value(t, "petrel_epoch", node...); got < 1 || got != float64(m.role.Load().Epoch) {
		t.Errorf("master: epoch %v, want %d (>= 1)", got, m.role.Load().Epoch)
	}
	if got := s.value(t, "petrel_replication_in_sync_replicas", node...); got != 3 {
		t.Errorf("master: in-sync replicas %v, want 3", got)
	}
	for _, b := range bs {
		if b == m {
			continue
		}
		s := scrapeMetrics(t, b)
		node := []string{"node_id", nodeID(&b.cfg)}
		if got := s.value(t, "petrel_broker_role", append(node[:2:2], "role", RoleSlave)...); got != 1 {
			t.Errorf("member %s: role SLAVE %v", b.cfg.RaftSelfID, got)
		}
	}
}

// TestMetricsPortValidation: the admin port is in range and differs from the broker's other
// ports.
func TestMetricsPortValidation(t *testing.T) {
	for _, tc := range []struct {
		edit func(*Config)
		want string
	}{
		{func(c *Config) { c.MetricsPromExporterPort = -1 }, "out of range"},
		{func(c *Config) { c.MetricsPromExporterPort = 65536 }, "out of range"},
		{func(c *Config) { c.MetricsPromExporterPort = c.ListenPort }, "listenPort"},
		{func(c *Config) { c.MetricsPromExporterPort = c.ListenPort + 1 }, "haListenPort"},
		{func(c *Config) { c.HAListenPort = 20000; c.MetricsPromExporterPort = 20000 }, "haListenPort"},
		{func(c *Config) {
			c.EnableRaftHA, c.BrokerRole, c.BrokerID = true, RoleSyncMaster, 1
			c.RaftSelfID, c.RaftPeers = "b1", "b1-127.0.0.1:10913;b2-127.0.0.1:10923;b3-127.0.0.1:10933"
			c.MetricsPromExporterPort = 10913
		}, "Raft port"},
		{func(c *Config) { c.MetricsPromExporterPort = 5557 }, ""},
		{func(c *Config) { c.MetricsPromExporterPort = 0 }, ""},
	} {
		cfg := DefaultConfig()
		tc.edit(&cfg)
		err := cfg.Validate()
		if tc.want == "" && err != nil || tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)) {
			t.Errorf("metricsPromExporterPort %d: got %v, want %q", cfg.MetricsPromExporterPort, err, tc.want)
		}
	}
	cfg := DefaultConfig()
	if err := cfg.Set("metricsPromExporterPort", "5557"); err != nil || cfg.MetricsPromExporterPort != 5557 || KeyHelp("metricsPromExporterPort") == "" {
		t.Fatalf("Set: %v, %d", err, cfg.MetricsPromExporterPort)
	}
}

// TestMetricsObserveAllocs guards the data path: timing an append and a flush allocates nothing.
func TestMetricsObserveAllocs(t *testing.T) {
	cfg := testConfig(t.TempDir())
	cfg.metricsAnyPort = true
	m := newMetrics(&cfg, testLogger(t))
	flush := m.onFlush()
	if a := testing.AllocsPerRun(1000, func() {
		start := time.Now()
		m.appendLatency.Observe(time.Since(start).Seconds())
		flush(time.Since(start), 4096)
	}); a != 0 {
		t.Fatalf("%v allocs per observation", a)
	}
	if newMetrics(&Config{}, testLogger(t)) != nil {
		t.Fatal("metrics built with metricsPromExporterPort 0")
	}
}
