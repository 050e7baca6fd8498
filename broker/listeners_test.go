package broker

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/petrel-mq/petrel/ha"
	"github.com/petrel-mq/petrel/internal/testutil"
	"github.com/petrel-mq/petrel/protocol"
	"github.com/petrel-mq/petrel/protocol/rpc"
)

// The first bytes of what other protocols' clients send first, cut to what the tests need.
var (
	tlsClientHello = append([]byte{0x16, 0x03, 0x01, 0x00, 0xf8, 0x01, 0x00, 0x00, 0xf4, 0x03, 0x03}, make([]byte, 32)...)
	http1Request   = []byte("GET / HTTP/1.1\r\nHost: petrel\r\n\r\n")
	http2Preface   = []byte("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n")
)

// prefix12 is 12 bytes of a 16-byte frame prefix (a pull with a 40-byte header): the input of
// a slow sender that stops mid-header.
func prefix12() []byte {
	p := make([]byte, protocol.FramePrefixSize)
	binary.BigEndian.PutUint32(p, 12+40)
	binary.BigEndian.PutUint16(p[4:], uint16(protocol.CodeHAPull))
	p[7] = protocol.Version
	binary.BigEndian.PutUint32(p[8:], 1)
	return p[:12]
}

// rawConn dials addr and writes b (nothing when empty).
func rawConn(t *testing.T, addr string, b []byte) net.Conn {
	t.Helper()
	nc, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { nc.Close() })
	if len(b) > 0 {
		if _, err := nc.Write(b); err != nil {
			t.Fatal(err)
		}
	}
	return nc
}

// TestSlowSenderClosed: 30 bytes of a frame, then silence, on the client and the replication
// ports: each closes the connection once frameReadTimeout has passed since the first byte,
// and says why with the same facts (the bytes of the frame received, of how many, how long),
// while the slave replicates on.
func TestSlowSenderClosed(t *testing.T) {
	hc := newHACluster(t, RoleSyncMaster, 1, func(c *Config) {
		c.MinInSyncReplicas = 2
		c.FrameReadTimeout = 300 * time.Millisecond
	})
	m := hc.b(0)
	hc.waitInSync(1)
	frame := protocol.AppendFrame(nil, uint16(protocol.CodeHAPull), 0, 1, nil, make([]byte, 100))
	for _, port := range []struct{ name, addr, line string }{
		{"replication", hc.masterHAAddr(), "closing connection: request frame incomplete for the frame read timeout"},
		{"client", m.Addr(), "closing connection: no whole request within frameReadTimeout of connecting"},
	} {
		nc := rawConn(t, port.addr, frame[:30])
		testutil.WaitClosed(t, nc, port.name+" port")
		hc.logs.WaitForLine(t, port.line, "remote="+nc.LocalAddr().String(), "got=30", fmt.Sprintf("want=%d", len(frame)), "waited=", "frameReadTimeout=300ms")
	}
	c := dial(t, m.Addr())
	createTopic(t, c, "Slow", 1)
	send(t, c, "Slow", 0, "after the slow senders") // SYNC: the slave still counts
}

// startLogged starts a broker with cfg whose log lines the test reads.
func startLogged(t *testing.T, cfg Config) (*Broker, *testutil.SyncBuffer) {
	t.Helper()
	logs := &testutil.SyncBuffer{}
	b, err := New(cfg, slogTo(logs))
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	return b, logs
}

// TestClientPortGuard: on the client port, a connection that sends nothing, or another
// protocol's opening, is closed with one line that says so; a frame stalled after a whole one
// is closed as incomplete; a client that sends at once is served. (A broker per case: lines
// of one reason are rate-limited.)
func TestClientPortGuard(t *testing.T) {
	cfg := testConfig(t.TempDir())
	cfg.FrameReadTimeout = 300 * time.Millisecond
	for _, tc := range []struct {
		name  string
		bytes []byte
		line  string
	}{
		{"silent", nil, "closing connection: no whole request within frameReadTimeout of connecting"},
		{"TLS", tlsClientHello, "closing connection: looks like a TLS ClientHello; this port speaks Petrel's binary protocol"},
		{"TLS cut short", tlsClientHello[:6], "closing connection: looks like a TLS ClientHello; this port speaks Petrel's binary protocol"},
		{"HTTP/1.1", http1Request, "closing connection: looks like an HTTP/1.x request; this port speaks Petrel's binary protocol"},
		{"HTTP/2", http2Preface, "closing connection: looks like the HTTP/2 connection preface; this port speaks Petrel's binary protocol"},
	} {
		cfg.StorePathRootDir = t.TempDir()
		b, logs := startLogged(t, cfg)
		nc := rawConn(t, b.Addr(), tc.bytes)
		testutil.WaitClosed(t, nc, tc.name)
		logs.WaitForLine(t, tc.line, "remote="+nc.LocalAddr().String())
	}
	// A whole request, then 12 bytes of the next one's prefix.
	cfg.StorePathRootDir = t.TempDir()
	b, logs := startLogged(t, cfg)
	req := protocol.AppendFrame(nil, uint16(protocol.CodeGetAllTopicConfig), 0, 1, nil, nil)
	nc := rawConn(t, b.Addr(), append(req, prefix12()...))
	testutil.WaitClosed(t, nc, "stalled second frame")
	logs.WaitForLine(t, "closing connection: request frame incomplete for the frame read timeout", "remote="+nc.LocalAddr().String(), "got=12", "waited=")

	c := dial(t, b.Addr())
	createTopic(t, c, "G", 1)
	send(t, c, "G", 0, "served")
}

// TestClientPortFlood: a flood of connections that never complete a frame (part of a prefix,
// a TLS ClientHello cut short, nothing) never holds more than maxConnections, is closed, logs
// a few lines, leaves the heap where it was, and a real client is served throughout.
func TestClientPortFlood(t *testing.T) {
	const conns, maxConns = 1000, 100
	cfg := testConfig(t.TempDir())
	cfg.FrameReadTimeout = 300 * time.Millisecond
	cfg.MaxConnections = maxConns
	b, logs := startLogged(t, cfg)
	good := dial(t, b.Addr())
	createTopic(t, good, "F", 1)
	r := testutil.FloodUntilClosed(t, b.Addr(), conns, [][]byte{prefix12(), tlsClientHello[:6], nil},
		func() int { return int(b.conns.Load()) }, func() {
			testutil.Eventually(t, "only the real client left", func() bool { return b.conns.Load() == 1 })
			send(t, good, "F", 0, "served throughout")
		})
	r.Check(t, maxConns, 16<<20)
	if n := strings.Count(logs.String(), "\n"); n > 40 {
		t.Fatalf("%d log lines for %d junk connections:\n%s", n, conns, logs.String())
	}
}

// TestBogusPullsRateLimited: 400 bogus requests on the replication port in a few seconds
// (another group's pulls, pulls past the end, a slave's acknowledged offset going back, bad
// frames, HTTP) write a few warnings per reason, each reason's later lines counting what was
// suppressed, not one line each; the real slave replicates throughout.
func TestBogusPullsRateLimited(t *testing.T) {
	hc := newHACluster(t, RoleSyncMaster, 1, func(c *Config) { c.MinInSyncReplicas = 2 })
	m := hc.b(0)
	hc.waitInSync(1)
	mc := dial(t, m.Addr())
	createTopic(t, mc, "Bogus", 1)
	for i := 0; i < 5; i++ {
		send(t, mc, "Bogus", 0, "before")
	}
	haAddr, end := hc.masterHAAddr(), m.store.LogEndOffset()
	pull := func(rc *rpc.Conn, req protocol.HAPullRequest) {
		req.MaxBytes, req.WaitMs = 64<<10, 0
		if resp, err := rc.Call(ctx5s(t), protocol.CodeHAPull, &req, nil); err == nil {
			resp.Release()
		}
	}
	haConn := func() *rpc.Conn {
		rc, err := rpc.Dial(context.Background(), haAddr, rpc.Options{})
		if err != nil {
			t.Fatal(err)
		}
		return rc
	}
	bogus := []func(i int){
		func(i int) { // another group's pull
			rc := haConn()
			defer rc.Close()
			pull(rc, protocol.HAPullRequest{BrokerName: "broker-z", SlaveID: int64(100 + i)})
		},
		func(i int) { // past the end
			rc := haConn()
			defer rc.Close()
			pull(rc, protocol.HAPullRequest{BrokerName: "broker-a", SlaveID: int64(100 + i), Offset: end + 4096})
		},
		func(i int) { // an acknowledged offset that goes back
			rc := haConn()
			defer rc.Close()
			pull(rc, protocol.HAPullRequest{BrokerName: "broker-a", SlaveID: int64(100 + i), Offset: end})
			pull(rc, protocol.HAPullRequest{BrokerName: "broker-a", SlaveID: int64(100 + i), Offset: 0})
		},
		func(int) { testutil.WaitClosed(t, rawConn(t, haAddr, bytes.Repeat([]byte{0xfe}, 16)), "bad frame") },
		func(int) { testutil.WaitClosed(t, rawConn(t, haAddr, http1Request), "HTTP") },
	}
	const reasons, requests = 5, 400
	before := len(hc.logs.String())
	start := time.Now()
	for i := 0; i < requests; i++ {
		bogus[i%len(bogus)](i)
	}
	elapsed := time.Since(start)
	// One more of a kind once its interval is over carries the count of what was suppressed.
	testutil.Eventually(t, "a line that counts the suppressed ones", func() bool {
		bogus[0](requests)
		return strings.Contains(hc.logs.String()[before:], "similar_not_logged=")
	})
	var warns []string
	lines := 0
	for _, line := range strings.Split(hc.logs.String()[before:], "\n") {
		if !strings.Contains(line, "member=b0") {
			continue
		}
		lines++
		if strings.Contains(line, "level=WARN") || strings.Contains(line, "level=ERROR") {
			warns = append(warns, line)
		}
	}
	// Each reason logs at most once a second, plus the one that counted the rest.
	allowed := reasons*(int(elapsed/time.Second)+2) + 1
	t.Logf("%d bogus requests in %v: %d warnings (at most %d allowed), %d lines in all", requests, elapsed.Round(time.Millisecond), len(warns), allowed, lines)
	if len(warns) > allowed {
		t.Fatalf("%d warnings for %d bogus requests in %v, want at most %d:\n%s", len(warns), requests, elapsed, allowed, strings.Join(warns, "\n"))
	}
	send(t, mc, "Bogus", 0, "after") // SYNC: the real slave still counts
	hc.waitCaughtUp(1)
}

// TestReplicationPortSlaveFlood: connections to the replication port that each name a new
// brokerId, pull once and go leave the master's slave table (haStatus) and its per-slave metric
// series bounded, with the group's own slave listed and counting throughout.
func TestReplicationPortSlaveFlood(t *testing.T) {
	hc := newHACluster(t, RoleSyncMaster, 1, func(c *Config) { c.MinInSyncReplicas = 2; c.metricsAnyPort = true })
	m := hc.b(0)
	hc.waitInSync(1)
	mc := dial(t, m.Addr())
	createTopic(t, mc, "Flood", 1)
	send(t, mc, "Flood", 0, "before")
	haAddr, end := hc.masterHAAddr(), m.store.LogEndOffset()
	const flood = 300
	for i := 0; i < flood; i++ {
		rc, err := rpc.Dial(context.Background(), haAddr, rpc.Options{})
		if err != nil {
			t.Fatal(err)
		}
		req := protocol.HAPullRequest{BrokerName: "broker-a", SlaveID: int64(1000 + i), Offset: end, MaxBytes: 64 << 10}
		if resp, err := rc.Call(ctx5s(t), protocol.CodeHAPull, &req, nil); err == nil {
			resp.Release()
		}
		rc.Close()
	}
	testutil.Eventually(t, "the flood's connections seen closed", func() bool { return connectedSlaves(m.haStatus()) == 1 })
	const bound = ha.DefaultMaxDisconnected + 1 // the kept records of strangers and the group's slave
	if st := m.haStatus(); len(st.Slaves) > bound {
		t.Fatalf("after %d slaves that pulled once and went haStatus lists %d slaves (#SlaveNum), want at most %d", flood, len(st.Slaves), bound)
	}
	sc := scrapeMetrics(t, m)
	for _, name := range []string{"petrel_replication_lag_bytes", "petrel_replication_lag_seconds", "petrel_replication_in_sync", "petrel_replication_connected"} {
		if n := len(sc[name]); n > bound {
			t.Errorf("%s: %d series after %d slaves that pulled once and went, want at most %d", name, n, flood, bound)
		}
	}
	if got := sc.value(t, "petrel_replication_in_sync", "slave_id", "1"); got != 1 {
		t.Fatalf("the group's slave is not in sync after the flood: %v", got)
	}
	if !strings.Contains(hc.logs.String(), "too many disconnected slaves") {
		t.Fatal("no line says the master forgets slaves past its cap")
	}
	send(t, mc, "Flood", 0, "after") // SYNC: the real slave still counts
}

// connectedSlaves counts the slaves of st with a replication connection open.
func connectedSlaves(st protocol.HAStatus) int {
	n := 0
	for _, s := range st.Slaves {
		if s.Connected {
			n++
		}
	}
	return n
}

// TestMetricsPortGuard: the admin HTTP port closes a request left incomplete, a connection
// that sends nothing, a TLS client and an HTTP/2 client, with a line each, caps its connections, and serves
// scrapes throughout.
func TestMetricsPortGuard(t *testing.T) {
	cfg := testConfig(t.TempDir())
	cfg.metricsAnyPort = true
	cfg.FrameReadTimeout = 300 * time.Millisecond
	cfg.MetricsMaxConnections = 4
	b, logs := startLogged(t, cfg)
	addr := b.MetricsAddr()
	for _, tc := range []struct {
		name  string
		bytes []byte
		line  string
	}{
		{"header cut short", []byte("GET /metrics HTTP/1.1\r\nHost: x\r\n"), "closing metrics connection: request incomplete within its read timeout"},
		{"silent", nil, "closing metrics connection: no request within the read header timeout of connecting"},
		{"TLS", tlsClientHello, "closing connection: looks like a TLS ClientHello; this port speaks plain HTTP (metrics, pprof)"},
		{"HTTP/2", http2Preface, "closing connection: looks like the HTTP/2 connection preface; this port speaks HTTP/1.1 (metrics, pprof)"},
	} {
		nc := rawConn(t, addr, tc.bytes)
		testutil.WaitClosed(t, nc, tc.name)
		parts := []string{tc.line, "remote=" + nc.LocalAddr().String()}
		if tc.name == "header cut short" {
			parts = append(parts, fmt.Sprintf("got=%d", len(tc.bytes)), "waited=")
		}
		logs.WaitForLine(t, parts...)
	}
	var held []net.Conn
	for i := 0; i < 4; i++ {
		held = append(held, rawConn(t, addr, nil))
	}
	refused := rawConn(t, addr, nil)
	testutil.WaitClosed(t, refused, "past the cap")
	logs.WaitForLine(t, "refusing metrics connection: metricsMaxConnections reached", "metricsMaxConnections=4")
	for _, nc := range held {
		testutil.WaitClosed(t, nc, "silent")
	}
	client := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
	resp, err := client.Get("http://" + addr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("scrape: %s", resp.Status)
	}
}

// TestAdmitConnNeverShowsMoreThanTheCap: event loops admitting and closing connections at once
// never make the count show more than the cap, which the flood test's sampler relies on.
func TestAdmitConnNeverShowsMoreThanTheCap(t *testing.T) {
	const loops, tries, max = 4, 20000, 3
	var conns atomic.Int64
	var over atomic.Int64
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			select {
			case <-done:
				return
			default:
			}
			if n := conns.Load(); n > max {
				over.Store(n)
			}
		}
	}()
	for range max - 1 { // held open; the loops compete for the last place
		if !admitConn(&conns, max) {
			t.Fatal("a connection below the cap was refused")
		}
	}
	var admitted atomic.Int64
	var loopsWG sync.WaitGroup
	for range loops {
		loopsWG.Add(1)
		go func() {
			defer loopsWG.Done()
			for range tries {
				if admitConn(&conns, max) {
					admitted.Add(1)
					conns.Add(-1)
				}
			}
		}()
	}
	loopsWG.Wait()
	close(done)
	wg.Wait()
	if n := over.Load(); n != 0 {
		t.Fatalf("the count showed %d connections, cap %d", n, max)
	}
	if admitted.Load() == 0 || conns.Load() != max-1 {
		t.Fatalf("admitted %d, count left at %d", admitted.Load(), conns.Load())
	}
}

// TestSuppressedCountLogged: three bad frames on the client port in a moment give one line of
// that reason, and the broker's housekeeping logs the count of the two suppressed on its own
// once the rate limit's interval ends, with no later bad frame.
func TestSuppressedCountLogged(t *testing.T) {
	b, logs := startLogged(t, testConfig(t.TempDir()))
	junk := make([]byte, protocol.FramePrefixSize)
	binary.BigEndian.PutUint32(junk, 0xffffff00) // far above the largest frame
	for range 3 {
		nc := rawConn(t, b.Addr(), junk)
		testutil.WaitClosed(t, nc, "a bad frame's connection")
	}
	logs.WaitForLine(t, "level=WARN", "lines suppressed by the rate limit", `reason="closing connection: bad frame"`, "similar_not_logged=2")
}
