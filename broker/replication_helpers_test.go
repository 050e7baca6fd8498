package broker

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/petrel-mq/petrel/client"
	"github.com/petrel-mq/petrel/internal/testutil"
	"github.com/petrel-mq/petrel/namesrv"
	"github.com/petrel-mq/petrel/protocol"
	"github.com/petrel-mq/petrel/protocol/rpc"
)

// Replication tests run a NameServer and one broker group (a master and its slaves) in-process
// on loopback, each broker with its own store under t.TempDir(). Ports are picked by the kernel
// on the first start and kept, so a member restarts where the others expect it.

// haCluster is a NameServer and one broker group: brokerId 0 the master, > 0 slaves.
type haCluster struct {
	t    testing.TB
	ns   *namesrv.Server
	dir  string
	logs *testutil.SyncBuffer // every member's log lines (Info and above), printed when the test fails

	mu      sync.Mutex
	brokers map[int64]*Broker
	cfgs    map[int64]Config
}

// haTestConfig is a member's config with the short timeouts replication tests need.
func haTestConfig(dir, role string, id int64) Config {
	cfg := testConfig(dir)
	cfg.BrokerRole = role
	cfg.BrokerID = id
	cfg.MappedFileSizeCommitLog = 256 << 10 // several segment rolls per test
	cfg.SyncReplicationTimeout = 2 * time.Second
	cfg.HAInSyncMaxLagTime = 400 * time.Millisecond
	cfg.SlaveSyncInterval = 150 * time.Millisecond // leaves the master quiet moments to shut down (quiesce)
	cfg.RegisterNameServerPeriod = 200 * time.Millisecond
	cfg.FlushConsumerOffsetInterval = 50 * time.Millisecond
	cfg.ShutdownGracePeriod = time.Second
	return cfg
}

// newHACluster starts a NameServer, a master of masterRole and slaves 1..slaves. tweak, when not
// nil, adjusts every member's config before its first start (cfg.BrokerID tells which).
func newHACluster(t testing.TB, masterRole string, slaves int, tweak func(*Config)) *haCluster {
	t.Helper()
	hc := &haCluster{t: t, dir: t.TempDir(), logs: &testutil.SyncBuffer{}, brokers: map[int64]*Broker{}, cfgs: map[int64]Config{}}
	// Started before any broker, the NameServer has no registration period to wait out: it is
	// ready at the first registration.
	hc.ns = namesrv.New(namesrv.Config{ListenAddr: "127.0.0.1:0", RegistrationPeriod: time.Nanosecond, Logger: hc.logger("namesrv")})
	if err := hc.ns.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		hc.mu.Lock()
		bs := hc.brokers
		hc.brokers = map[int64]*Broker{}
		hc.mu.Unlock()
		var wg sync.WaitGroup // in parallel: stopping a broker's engine takes about half a second
		for _, b := range bs {
			wg.Add(1)
			go func() {
				defer wg.Done()
				_ = b.Close()
			}()
		}
		wg.Wait()
		_ = hc.ns.Close()
		if t.Failed() {
			t.Log("logs of the cluster:\n" + hc.logs.String())
		}
	})
	mcfg := haTestConfig(filepath.Join(hc.dir, "b0"), masterRole, 0)
	mcfg.NamesrvAddr = hc.ns.Addr()
	if tweak != nil {
		tweak(&mcfg)
	}
	hc.cfgs[0] = mcfg
	hc.start(0)
	for id := int64(1); id <= int64(slaves); id++ {
		hc.addSlave(id, tweak)
	}
	return hc
}

func (hc *haCluster) logger(name string) *slog.Logger {
	return slog.New(slog.NewTextHandler(hc.logs, &slog.HandlerOptions{Level: slog.LevelInfo})).With("member", name)
}

// addSlave configures and starts slave id, replicating from the master.
func (hc *haCluster) addSlave(id int64, tweak func(*Config)) *Broker {
	hc.t.Helper()
	cfg := haTestConfig(filepath.Join(hc.dir, "b"+strconv.FormatInt(id, 10)), RoleSlave, id)
	cfg.NamesrvAddr = hc.ns.Addr()
	cfg.HAMasterAddress = hc.masterHAAddr()
	if tweak != nil {
		tweak(&cfg)
	}
	hc.mu.Lock()
	hc.cfgs[id] = cfg
	hc.mu.Unlock()
	return hc.start(id)
}

// masterHAAddr returns the master's replication address (kept across its restarts).
func (hc *haCluster) masterHAAddr() string {
	hc.mu.Lock()
	defer hc.mu.Unlock()
	return net.JoinHostPort("127.0.0.1", strconv.Itoa(hc.cfgs[0].HAListenPort))
}

// start starts member id with its config: on the ports of its previous run, if any, and its
// store directory as it was left.
func (hc *haCluster) start(id int64) *Broker {
	hc.t.Helper()
	hc.mu.Lock()
	cfg := hc.cfgs[id]
	hc.mu.Unlock()
	var b *Broker
	var err error
	for i := 0; i < 100; i++ { // a port freed a moment ago may still be busy
		if b, err = New(cfg, hc.logger("b"+strconv.FormatInt(id, 10))); err != nil {
			hc.t.Fatal(err)
		}
		if err = b.Start(); err == nil {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err != nil {
		hc.t.Fatal(err)
	}
	_, port, _ := net.SplitHostPort(b.Addr())
	cfg.ListenPort, _ = strconv.Atoi(port)
	if b.role.Load().master != nil {
		_, hp, _ := net.SplitHostPort(b.role.Load().master.Addr())
		cfg.HAListenPort, _ = strconv.Atoi(hp)
	}
	hc.mu.Lock()
	hc.brokers[id] = b
	hc.cfgs[id] = cfg
	hc.mu.Unlock()
	return b
}

// stop closes member id (gracefully: its store is flushed).
func (hc *haCluster) stop(id int64) {
	hc.t.Helper()
	hc.mu.Lock()
	b := hc.brokers[id]
	delete(hc.brokers, id)
	hc.mu.Unlock()
	if b == nil {
		hc.t.Fatalf("member %d is not running", id)
	}
	if err := b.Close(); err != nil {
		hc.t.Errorf("close member %d: %v", id, err)
	}
}

// b returns running member id.
func (hc *haCluster) b(id int64) *Broker {
	hc.mu.Lock()
	defer hc.mu.Unlock()
	b := hc.brokers[id]
	if b == nil {
		hc.t.Fatalf("member %d is not running", id)
	}
	return b
}

func (hc *haCluster) cfg(id int64) Config {
	hc.mu.Lock()
	defer hc.mu.Unlock()
	return hc.cfgs[id]
}

// inSync returns the in-sync flag of every slave the master knows.
func inSync(m *Broker) map[int64]bool {
	out := map[int64]bool{}
	for _, s := range m.role.Load().master.Status().Slaves {
		out[s.BrokerID] = s.InSync
	}
	return out
}

// waitInSync waits until the master counts exactly the given slaves as in sync.
func (hc *haCluster) waitInSync(ids ...int64) {
	hc.t.Helper()
	m := hc.b(0)
	testutil.Eventually(hc.t, fmt.Sprintf("in-sync set = %v", ids), func() bool {
		set := inSync(m)
		n := 0
		for _, v := range set {
			if v {
				n++
			}
		}
		if n != len(ids) {
			return false
		}
		for _, id := range ids {
			if !set[id] {
				return false
			}
		}
		return m.role.Load().master.InSyncCount() == len(ids)
	})
}

// waitCaughtUp waits until every given slave's log ends where the (idle) master's does, and the
// master knows it (the slave's next pull acknowledged that end).
func (hc *haCluster) waitCaughtUp(ids ...int64) {
	hc.t.Helper()
	m := hc.b(0)
	for _, id := range ids {
		s := hc.b(id)
		testutil.Eventually(hc.t, fmt.Sprintf("slave %d caught up", id), func() bool {
			end := m.store.LogEndOffset()
			if s.store.LogEndOffset() != end {
				return false
			}
			for _, sl := range m.role.Load().master.Status().Slaves {
				if sl.BrokerID == id {
					return sl.AckedOffset == end
				}
			}
			return false
		})
	}
}

// waitTopic waits until member id has the topic (a slave gets it from the master's config sync).
func (hc *haCluster) waitTopic(id int64, topic string) {
	hc.t.Helper()
	b := hc.b(id)
	testutil.Eventually(hc.t, fmt.Sprintf("topic %s on member %d", topic, id), func() bool {
		return b.topics.get([]byte(topic)) != nil
	})
}

// waitMasterKnown waits until slave id knows its master's client address (from the NameServer).
func (hc *haCluster) waitMasterKnown(id int64) {
	hc.t.Helper()
	s, m := hc.b(id), hc.b(0)
	testutil.Eventually(hc.t, fmt.Sprintf("slave %d knows its master", id), func() bool {
		return s.role.Load().Master.Addr == m.Addr()
	})
}

// newAdmin returns a client of the cluster's NameServer and its admin, closed with the test.
func (hc *haCluster) newAdmin(opts ...client.ClientOption) (*client.Client, *client.Admin) {
	hc.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	opts = append([]client.ClientOption{client.WithNameServers(hc.ns.Addr()), client.WithLogger(hc.logger("client")),
		client.WithRouteRefreshInterval(200 * time.Millisecond), client.WithReconnectBackoff(20*time.Millisecond, 200*time.Millisecond)}, opts...)
	c, err := client.New(ctx, opts...)
	if err != nil {
		hc.t.Fatal(err)
	}
	hc.t.Cleanup(func() { _ = c.Close() })
	return c, client.NewAdmin(c)
}

// checksums returns every given member's log checksum (LogChecksum admin request) over
// [from, to); to < 0 is the log end.
func checksums(t testing.TB, admin *client.Admin, from, to int64, bs ...*Broker) []protocol.LogChecksumResponse {
	t.Helper()
	var out []protocol.LogChecksumResponse
	for _, b := range bs {
		r, err := admin.LogChecksum(ctx5s(t), b.Addr(), from, to)
		if err != nil {
			t.Fatalf("LogChecksum %s: %v", b.Addr(), err)
		}
		out = append(out, *r)
	}
	return out
}

// assertIdentical checks that the members' logs are byte-identical over the range they share:
// the same bounds and the same checksum.
func assertIdentical(t testing.TB, admin *client.Admin, bs ...*Broker) {
	t.Helper()
	from := int64(0)
	for _, b := range bs {
		from = max(from, b.store.LogMinOffset())
	}
	sums := checksums(t, admin, from, -1, bs...)
	for i := 1; i < len(sums); i++ {
		if sums[i] != sums[0] {
			t.Fatalf("logs differ: %s has %+v, %s has %+v", bs[0].Addr(), sums[0], bs[i].Addr(), sums[i])
		}
	}
	if sums[0].To != bs[0].store.LogEndOffset() || sums[0].To <= sums[0].From {
		t.Fatalf("checksum covers [%d, %d), log ends at %d", sums[0].From, sums[0].To, bs[0].store.LogEndOffset())
	}
}

var loghubOnce = sync.OnceValues(func() ([]string, error) {
	dir := filepath.Join("..", "bench", "testdata", "loghub")
	files, err := filepath.Glob(filepath.Join(dir, "*.log"))
	if err != nil || len(files) == 0 {
		return nil, fmt.Errorf("no loghub files in %s: %v", dir, err)
	}
	var lines []string
	for _, name := range files {
		f, err := os.Open(name)
		if err != nil {
			return nil, err
		}
		sc := bufio.NewScanner(f)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			if l := strings.TrimSpace(sc.Text()); l != "" {
				lines = append(lines, l)
			}
		}
		f.Close()
		if err := sc.Err(); err != nil {
			return nil, err
		}
	}
	return lines, nil
})

// loghubLines returns the lines of the bench's loghub samples: realistic message bodies.
func loghubLines(t testing.TB) []string {
	t.Helper()
	lines, err := loghubOnce()
	if err != nil {
		t.Fatal(err)
	}
	return lines
}

// loghubBatch builds a batch of n loghub lines starting at line i (wrapping around).
func loghubBatch(t testing.TB, topic string, qid int32, i, n int) []byte {
	lines := loghubLines(t)
	bodies := make([]string, n)
	for k := range bodies {
		bodies[k] = lines[(i+k)%len(lines)]
	}
	return buildBatch(topic, qid, bodies...)
}

// sendBatch sends a prepared batch and returns the answer or the broker's refusal.
func sendBatch(c *rpc.Conn, batch []byte) (protocol.SendResponseHeader, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var resp protocol.SendResponseHeader
	err := c.CallDecode(ctx, protocol.CodeSendMessage, nil, batch, &resp, nil)
	return resp, err
}

// pullQueue pulls a whole queue from offset 0 to its end, pull by pull, and returns
// offset -> body. It fails the test on anything but FOUND before the end.
func pullQueue(t testing.TB, c *rpc.Conn, topic string, qid int32, end int64) map[int64]string {
	t.Helper()
	out := map[int64]string{}
	for off := int64(0); off < end; {
		p := pull(t, c, topic, qid, off, 0)
		if p.hdr.Result != protocol.PullFound {
			t.Fatalf("pull %s/%d at %d: %v (max %d)", topic, qid, off, p.hdr.Result, p.hdr.MaxOffset)
		}
		for i, o := range p.offs {
			if o >= off {
				out[o] = p.bodies[i]
			}
		}
		off = p.hdr.NextQueueOffset
	}
	return out
}

// pullSome sends one pull with explicit limits and returns its header (the body is checked and
// dropped).
func pullSome(t testing.TB, c *rpc.Conn, topic string, qid int32, off int64, maxMsgs int32, pollMs int32) protocol.PullResponseHeader {
	t.Helper()
	return pullRequest(t, c, protocol.PullRequestHeader{ConsumerGroup: "g", Topic: topic, QueueID: qid, QueueOffset: off, MaxMessages: maxMsgs,
		MaxBytes: 1 << 20, PollTimeoutMs: pollMs, CommitOffset: -1})
}

// pullLife is pullSome (at most 100 messages, no wait) of a client that knows the position to
// be of the queue's incarnation inc (0: it knows none).
func pullLife(t testing.TB, c *rpc.Conn, topic string, qid int32, off int64, inc uint64) protocol.PullResponseHeader {
	t.Helper()
	return pullRequest(t, c, protocol.PullRequestHeader{ConsumerGroup: "g", Topic: topic, QueueID: qid, QueueOffset: off, MaxMessages: 100,
		MaxBytes: 1 << 20, CommitOffset: -1, Incarnation: inc, HasIncarnation: true})
}

// pullRequest sends req and returns the answer's header, checking its body.
func pullRequest(t testing.TB, c *rpc.Conn, req protocol.PullRequestHeader) protocol.PullResponseHeader {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	resp, err := c.Call(ctx, protocol.CodePullMessage, &req, nil)
	if err != nil {
		t.Fatalf("pull: %v", err)
	}
	defer resp.Release()
	var h protocol.PullResponseHeader
	if err := h.ReadFrom(resp.Header); err != nil {
		t.Fatal(err)
	}
	if h.Result == protocol.PullFound {
		if _, _, err := protocol.ValidateBatch(resp.Body, protocol.BatchLimits{}); err != nil {
			t.Fatalf("pulled batch: %v", err)
		}
	} else if len(resp.Body) != 0 {
		t.Fatalf("%v answer with a %d-byte body", h.Result, len(resp.Body))
	}
	return h
}

// pullE is pull for goroutines other than the test's: it returns errors instead of failing.
func pullE(c *rpc.Conn, topic string, qid int32, off int64, pollMs int32) (pulled, error) {
	req := protocol.PullRequestHeader{ConsumerGroup: "g", Topic: topic, QueueID: qid, QueueOffset: off, MaxMessages: 1000, MaxBytes: 1 << 20, PollTimeoutMs: pollMs, CommitOffset: -1}
	ctx, cancel := context.WithTimeout(context.Background(), time.Duration(pollMs)*time.Millisecond+10*time.Second)
	defer cancel()
	resp, err := c.Call(ctx, protocol.CodePullMessage, &req, nil)
	if err != nil {
		return pulled{}, err
	}
	defer resp.Release()
	var p pulled
	if err := p.hdr.ReadFrom(resp.Header); err != nil {
		return p, err
	}
	for body := resp.Body; len(body) > 0; {
		h, _, err := protocol.ValidateBatch(body, protocol.BatchLimits{})
		if err != nil {
			return p, err
		}
		it := protocol.NewMessageIterator(body, h)
		for {
			m, ok := it.Next()
			if !ok {
				break
			}
			p.bodies = append(p.bodies, string(m.Body))
			p.offs = append(p.offs, m.QueueOffset)
		}
		body = body[h.Size:]
	}
	return p, nil
}

// statusOf returns the broker status of a refused request (0 for nil or another error).
func statusOf(err error) protocol.Status {
	var pe *protocol.Error
	if errors.As(err, &pe) {
		return pe.Status
	}
	return 0
}

// commitOffset commits a consumer offset on a member (UPDATE_CONSUMER_OFFSET).
func commitOffset(t testing.TB, c *rpc.Conn, group, topic string, qid int32, off int64) {
	t.Helper()
	h := protocol.ConsumerOffsetHeader{ConsumerGroup: group, Topic: topic, QueueID: qid, Offset: off}
	if err := c.CallDecode(ctx5s(t), protocol.CodeUpdateConsumerOffset, &h, nil, nil, nil); err != nil {
		t.Fatalf("commit %d: %v", off, err)
	}
}

// consumeQueues runs co until it has delivered total distinct (queue, queue offset) messages,
// or 30 s pass, and returns the bodies by queue and offset, the number delivered, and how many
// messages a member other than want served (want < 0: any member counts as right).
func consumeQueues(t *testing.T, co *client.Consumer, total int, want int64) (map[int32]map[int64]string, int, int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var mu sync.Mutex
	got := map[int32]map[int64]string{}
	n, wrongMember := 0, 0
	err := co.Run(ctx, func(_ context.Context, msgs []client.MessageExt) error {
		mu.Lock()
		defer mu.Unlock()
		for _, m := range msgs {
			if want >= 0 && m.BrokerID != want {
				wrongMember++
			}
			if got[m.QueueID] == nil {
				got[m.QueueID] = map[int64]string{}
			}
			if _, dup := got[m.QueueID][m.QueueOffset]; !dup {
				n++
			}
			got[m.QueueID][m.QueueOffset] = string(m.Body)
		}
		if n == total {
			cancel()
		}
		return nil
	})
	if err != nil {
		t.Fatalf("consumer: %v", err)
	}
	mu.Lock()
	defer mu.Unlock()
	return got, n, wrongMember
}
