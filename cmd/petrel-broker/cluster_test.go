package main

// The cluster tests run real petrel-namesrv and petrel-broker processes on loopback — a master
// and its slaves, sometimes two broker groups — and kill, freeze and restart them for real
// (SIGKILL, SIGSTOP, SIGCONT) while a producer and a consumer of the Go client run, then check
// what replication promises: no acknowledged message lost, no send that failed claiming success,
// byte-identical logs on every member.

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/petrel-mq/petrel/client"
	"github.com/petrel-mq/petrel/internal/testutil"
	"github.com/petrel-mq/petrel/protocol"
)

func TestMain(m *testing.M) { testutil.VerifyTestMain(m) }

// binaries builds petrel-broker and petrel-namesrv once per test binary.
var binaries = sync.OnceValues(func() (string, error) {
	dir, err := os.MkdirTemp("", "petrel-cluster-bin")
	if err != nil {
		return "", err
	}
	for _, name := range []string{"petrel-broker", "petrel-namesrv"} {
		cmd := exec.Command("go", "build", "-o", filepath.Join(dir, name), "github.com/petrel-mq/petrel/cmd/"+name)
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		if out, err := cmd.CombinedOutput(); err != nil {
			return "", fmt.Errorf("cannot build %s: %v\n%s", name, err, out)
		}
	}
	return dir, nil
})

func binDir(t *testing.T) string {
	t.Helper()
	if testing.Short() {
		t.Skip("builds and kills real broker processes")
	}
	dir, err := binaries()
	if err != nil {
		t.Fatal(err)
	}
	return dir
}

// proc is one broker or NameServer process.
type proc struct {
	t    *testing.T
	name string
	args []string
	addr string
	ha   string // a broker's replication address
	cmd  *exec.Cmd
	done chan error
	log  *testutil.SyncBuffer // the process's output, shown when a test fails
}

func (p *proc) start() {
	p.t.Helper()
	p.cmd = exec.Command(p.args[0], p.args[1:]...)
	p.cmd.Stdout = p.log
	p.cmd.Stderr = p.log
	if err := p.cmd.Start(); err != nil {
		p.t.Fatal(err)
	}
	done := make(chan error, 1)
	p.done = done
	go func() { done <- p.cmd.Wait() }()
	deadline := time.Now().Add(20 * time.Second)
	for {
		c, err := net.DialTimeout("tcp", p.addr, 200*time.Millisecond)
		if err == nil {
			c.Close()
			return
		}
		select {
		case err := <-done:
			p.done = nil
			p.t.Fatalf("%s exited during start: %v\n%s", p.name, err, p.log)
		default:
		}
		if time.Now().After(deadline) {
			p.t.Fatalf("%s did not listen on %s: %v", p.name, p.addr, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// allStopped reports whether every thread of process pid is in the stopped state (T).
func allStopped(pid int) bool {
	tasks, err := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/stat", pid))
	if err != nil || len(tasks) == 0 {
		return false
	}
	for _, f := range tasks {
		b, err := os.ReadFile(f)
		if err != nil {
			return false
		}
		i := bytes.LastIndexByte(b, ')')
		if i < 0 || i+2 >= len(b) || b[i+2] != 'T' {
			return false
		}
	}
	return true
}

func (p *proc) running() bool { return p.done != nil }

func (p *proc) signal(sig syscall.Signal) {
	p.t.Helper()
	if err := p.cmd.Process.Signal(sig); err != nil {
		p.t.Fatalf("%s: signal %v: %v", p.name, sig, err)
	}
	if sig == syscall.SIGSTOP {
		// kill(2) returns before every thread has stopped: wait for the stopped state, or a
		// thread still running could serve one more request.
		testutil.EventuallyWithin(p.t, 5*time.Second, p.name+" to stop after SIGSTOP", func() bool { return allStopped(p.cmd.Process.Pid) })
	}
}

// kill kills the process with SIGKILL and waits for it.
func (p *proc) kill() {
	if p.done == nil {
		return
	}
	_ = p.cmd.Process.Signal(syscall.SIGCONT)
	_ = p.cmd.Process.Signal(syscall.SIGKILL)
	<-p.done
	p.done = nil
}

// cluster is a NameServer and brokers started by a test; its cleanup kills what still runs
// and prints the logs of a failed test.
type cluster struct {
	t       *testing.T
	bin     string
	dir     string
	nsAddr  string
	procs   []*proc
	brokers map[string]*proc // "broker-a/0" -> process
}

func newCluster(t *testing.T) *cluster {
	bin := binDir(t)
	c := &cluster{t: t, bin: bin, dir: t.TempDir(), brokers: map[string]*proc{}}
	port := testutil.FreePorts(t, 1)[0]
	c.nsAddr = fmt.Sprintf("127.0.0.1:%d", port)
	ns := &proc{t: t, name: "namesrv", addr: c.nsAddr, log: &testutil.SyncBuffer{},
		args: []string{filepath.Join(bin, "petrel-namesrv"), "--listen", c.nsAddr, "--broker-expiry", "3s", "--scan-interval", "500ms",
			"--registration-period", "1s"}} // the brokers' registerNameServerPeriod
	c.procs = append(c.procs, ns)
	t.Cleanup(func() {
		for _, p := range c.procs {
			p.kill()
		}
		if t.Failed() || os.Getenv("PETREL_TEST_LOGS") != "" {
			for _, p := range c.procs {
				t.Logf("---- log of %s ----\n%s", p.name, tail(p.log.String(), 60))
			}
		}
	})
	ns.start()
	return c
}

// tail returns the last n lines of s.
func tail(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// addBroker writes the config of one broker and starts it. role is SYNC_MASTER, ASYNC_MASTER or
// SLAVE; extra lines are appended to the config.
func (c *cluster) addBroker(name string, id int64, role string, extra ...string) *proc {
	c.t.Helper()
	ports := testutil.FreePorts(c.t, 2)
	key := fmt.Sprintf("%s/%d", name, id)
	dir := filepath.Join(c.dir, name+"-"+fmt.Sprint(id))
	if err := os.MkdirAll(dir, 0o755); err != nil {
		c.t.Fatal(err)
	}
	conf := fmt.Sprintf(`brokerClusterName=TestCluster
brokerName=%s
brokerId=%d
brokerRole=%s
namesrvAddr=%s
listenPort=%d
haListenPort=%d
bindAddress=127.0.0.1
storePathRootDir=%s
registerNameServerPeriod=1000
slaveSyncInterval=200
haInSyncMaxLagTime=500
syncReplicationTimeout=1500
mappedFileSizeCommitLog=4194304
%s
`, name, id, role, c.nsAddr, ports[0], ports[1], filepath.Join(dir, "store"), strings.Join(extra, "\n"))
	path := filepath.Join(dir, "broker.conf")
	if err := os.WriteFile(path, []byte(conf), 0o644); err != nil {
		c.t.Fatal(err)
	}
	p := &proc{t: c.t, name: key, addr: fmt.Sprintf("127.0.0.1:%d", ports[0]), ha: fmt.Sprintf("127.0.0.1:%d", ports[1]), log: &testutil.SyncBuffer{},
		args: []string{filepath.Join(c.bin, "petrel-broker"), "-c", path, "--log-level", "info"}}
	c.procs = append(c.procs, p)
	c.brokers[key] = p
	p.start()
	return p
}

func (c *cluster) client(opts ...client.ClientOption) *client.Client {
	c.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	quiet := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	cl, err := client.New(ctx, append([]client.ClientOption{client.WithNameServers(c.nsAddr), client.WithLogger(quiet),
		client.WithRouteRefreshInterval(time.Second), client.WithRequestTimeout(3 * time.Second)}, opts...)...)
	if err != nil {
		c.t.Fatal(err)
	}
	c.t.Cleanup(func() { _ = cl.Close() })
	return cl
}

// createTopic creates topic on every group of the cluster and waits for its route.
func (c *cluster) createTopic(cl *client.Client, topic string, queues int32, groups int) {
	c.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	a := client.NewAdmin(cl)
	for {
		targets, err := a.CreateTopic(ctx, "TestCluster", protocol.TopicConfig{Topic: topic, ReadQueueNums: queues, WriteQueueNums: queues, Perm: protocol.PermRead | protocol.PermWrite})
		if err == nil && len(targets) == groups {
			break
		}
		if ctx.Err() != nil {
			c.t.Fatalf("cannot create %s on %d groups: %v (%d)", topic, groups, err, len(targets))
		}
		time.Sleep(100 * time.Millisecond)
	}
	if err := a.WaitTopicRoute(ctx, topic, groups); err != nil {
		c.t.Fatal(err)
	}
}

// bodies are loghub lines: real log messages as message bodies.
var bodies = sync.OnceValue(func() [][]byte {
	var out [][]byte
	for _, f := range []string{"HDFS_2k.log", "Zookeeper_2k.log", "OpenStack_2k.log"} {
		b, err := os.ReadFile(filepath.Join("..", "..", "bench", "testdata", "loghub", f))
		if err != nil {
			panic(err)
		}
		sc := bufio.NewScanner(bytes.NewReader(b))
		for sc.Scan() {
			if len(sc.Bytes()) > 0 {
				out = append(out, bytes.Clone(sc.Bytes()))
			}
		}
	}
	return out
})

// sent records the outcome of every send of a load.
type sent struct {
	mu      sync.Mutex
	acked   map[string]client.SendResult // body -> where it was stored
	failed  map[string]error             // definite failures
	unknown map[string]error             // unknown outcomes
	n       atomic.Int64
	acks    []ackEvent // every acknowledgement in order
	fails   []ackEvent // every failure in order (addr: the error)
}

// ackEvent is one acknowledged send: when, and which broker answered.
type ackEvent struct {
	at   time.Time
	addr string
}

func newSent() *sent {
	return &sent{acked: map[string]client.SendResult{}, failed: map[string]error{}, unknown: map[string]error{}}
}

func (s *sent) counts() (acked, failed, unknown int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.acked), len(s.failed), len(s.unknown)
}

// load sends unique messages (a loghub line with a sequence number) with SendSync, one at a
// time per worker, until ctx ends.
func load(ctx context.Context, t *testing.T, p *client.Producer, topic string, workers int, s *sent) *sync.WaitGroup {
	var wg sync.WaitGroup
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			lines := bodies()
			for i := 0; ctx.Err() == nil; i++ {
				seq := s.n.Add(1)
				body := fmt.Sprintf("%d/%d %s", w, seq, lines[int(seq)%len(lines)])
				sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				res, err := p.SendSync(sctx, &client.Message{Topic: topic, Body: []byte(body)})
				cancel()
				s.mu.Lock()
				switch {
				case err == nil:
					s.acked[body] = res
					s.acks = append(s.acks, ackEvent{at: time.Now(), addr: res.BrokerAddr})
				case errors.Is(err, client.ErrUnknownOutcome):
					s.unknown[body] = err
				default:
					s.failed[body] = err
					s.fails = append(s.fails, ackEvent{at: time.Now(), addr: err.Error()})
				}
				s.mu.Unlock()
				if err != nil {
					time.Sleep(5 * time.Millisecond)
				}
			}
		}()
	}
	return &wg
}

// consumed records what a consumer received: body -> count, messages per serving brokerId,
// and per queue the offsets in delivery order (for duplicates and reordering).
type consumed struct {
	mu         sync.Mutex
	bodies     map[string]int
	by         map[int64]int // brokerId -> messages
	last       map[string]int64
	duplicated int // a queue offset delivered twice
	reordered  int // a queue offset delivered after a later one
	gaps       int // a queue offset skipped
}

func newConsumed() *consumed {
	return &consumed{bodies: map[string]int{}, by: map[int64]int{}, last: map[string]int64{}}
}

func (c *consumed) handler(_ context.Context, msgs []client.MessageExt) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	for i := range msgs {
		m := &msgs[i]
		c.bodies[string(m.Body)]++
		c.by[m.BrokerID]++
		q := fmt.Sprintf("%s#%d", m.BrokerName, m.QueueID)
		last, seen := c.last[q]
		switch {
		case !seen || m.QueueOffset == last+1:
		case m.QueueOffset == last:
			c.duplicated++
		case m.QueueOffset < last:
			c.reordered++
		default:
			c.gaps++
		}
		c.last[q] = max(last, m.QueueOffset)
		if !seen {
			c.last[q] = m.QueueOffset
		}
	}
	return nil
}

// checkOrder fails the test on a duplicated, reordered or skipped queue offset.
func (c *consumed) checkOrder(t *testing.T) {
	t.Helper()
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.duplicated+c.reordered+c.gaps != 0 {
		t.Fatalf("duplicated=%d reordered=%d gaps=%d", c.duplicated, c.reordered, c.gaps)
	}
}

// servedBy returns a copy of the messages per serving brokerId.
func (c *consumed) servedBy() map[int64]int {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make(map[int64]int, len(c.by))
	for k, v := range c.by {
		out[k] = v
	}
	return out
}

// missing returns how many acknowledged bodies (of brokerName, or all when "") were not
// consumed, and one of them.
func (c *consumed) missing(s *sent, brokerName string) (n int, example string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	c.mu.Lock()
	defer c.mu.Unlock()
	for body, res := range s.acked {
		if brokerName != "" && res.BrokerName != brokerName {
			continue
		}
		if c.bodies[body] == 0 {
			n++
			example = body
		}
	}
	return n, example
}

// phantoms returns how many consumed bodies were never acknowledged but definitely failed.
func (c *consumed) phantoms(s *sent) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	c.mu.Lock()
	defer c.mu.Unlock()
	n := 0
	for body := range s.failed {
		if c.bodies[body] > 0 {
			n++
		}
	}
	return n
}

// runConsumer runs a consumer of group on topic until the returned stop is called.
func runConsumer(t *testing.T, cl *client.Client, group, topic string, got *consumed, opts ...client.ConsumerOption) (*client.Consumer, func()) {
	t.Helper()
	co, err := client.NewConsumer(cl, group, topic, append([]client.ConsumerOption{
		client.WithConsumeFrom(client.ConsumeFromFirst), client.WithCommitInterval(200 * time.Millisecond),
		client.WithPollTimeout(time.Second), client.WithRebalanceInterval(time.Second)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- co.Run(ctx, got.handler) }()
	var once sync.Once
	stop := func() {
		once.Do(func() {
			cancel()
			if err := <-done; err != nil && !errors.Is(err, context.Canceled) {
				t.Errorf("consumer: %v", err)
			}
			cctx, ccancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer ccancel()
			_ = co.Close(cctx)
		})
	}
	t.Cleanup(stop)
	return co, stop
}

// sameLogs waits until every broker of ps has the log end of the first (the master) and
// checks that their checksums up to it are equal; it returns the end.
func sameLogs(t *testing.T, a *client.Admin, ps ...*proc) int64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var end int64
	testutil.EventuallyWithin(t, 20*time.Second, "slaves to reach the master's log end", func() bool {
		st, err := a.HAStatus(ctx, ps[0].addr)
		if err != nil {
			return false
		}
		end = st.LogEnd
		for _, p := range ps[1:] {
			s, err := a.HAStatus(ctx, p.addr)
			if err != nil || s.LogEnd != end {
				return false
			}
		}
		return true
	})
	var want string
	for i, p := range ps {
		r, err := a.LogChecksum(ctx, p.addr, 0, end)
		if err != nil {
			t.Fatalf("logChecksum %s: %v", p.name, err)
		}
		if r.To != end {
			t.Fatalf("logChecksum %s checked up to %d, want %d", p.name, r.To, end)
		}
		if i == 0 {
			want = r.Checksum
		} else if r.Checksum != want {
			t.Fatalf("log of %s differs from the master's up to %d: %s vs %s", p.name, end, r.Checksum, want)
		}
		t.Logf("logChecksum %s %d %s", p.addr, r.To, r.Checksum)
	}
	return end
}

// TestClusterSlaveKilled: acceptance 3, first half. A SYNC_MASTER with minInSyncReplicas=1 and
// two slaves keeps acknowledging every send while a slave is killed with SIGKILL; the slave
// restarts, catches up from its own end, and its log is byte-identical to the master's; a
// consumer pinned to that slave alone reads every acknowledged message.
func TestClusterSlaveKilled(t *testing.T) {
	c := newCluster(t)
	m := c.addBroker("broker-a", 0, "SYNC_MASTER", "minInSyncReplicas=1")
	s1 := c.addBroker("broker-a", 1, "SLAVE", "haMasterAddress="+m.ha)
	s2 := c.addBroker("broker-a", 2, "SLAVE") // learns its master from the NameServer
	cl := c.client()
	c.createTopic(cl, "slave-kill", 4, 1)
	p, err := client.NewProducer(cl)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close(context.Background())

	s := newSent()
	ctx, cancel := context.WithCancel(context.Background())
	wg := load(ctx, t, p, "slave-kill", 4, s)
	time.Sleep(time.Second)
	s1.kill()
	killedAt, _, _ := s.counts()
	time.Sleep(time.Second)
	s1.start()
	time.Sleep(time.Second)
	cancel()
	wg.Wait()
	acked, failed, unknown := s.counts()
	t.Logf("sent: acked=%d failed=%d unknown=%d (acked %d before the kill)", acked, failed, unknown, killedAt)
	if failed != 0 || unknown != 0 {
		t.Fatalf("sends failed while a slave died (minInSyncReplicas=1): failed=%d unknown=%d", failed, unknown)
	}
	if acked < 100 || acked-killedAt < 10 {
		t.Fatalf("too few sends acknowledged: %d (%d after the kill)", acked, acked-killedAt)
	}
	a := client.NewAdmin(cl)
	sameLogs(t, a, m, s1, s2)

	// A consume-only read from the restarted slave alone returns every message.
	got := newConsumed()
	_, stop := runConsumer(t, cl, "slave-only", "slave-kill", got, client.WithReadBrokerID(1))
	testutil.EventuallyWithin(t, 20*time.Second, "every acknowledged message from slave 1", func() bool {
		n, _ := got.missing(s, "")
		return n == 0
	})
	stop()
	if by := got.servedBy(); by[0] != 0 || by[1] == 0 {
		t.Fatalf("a consumer pinned to slave 1 was served by %v", by)
	}
}

// TestClusterFrozenSlave: acceptance 3, second half. With minInSyncReplicas=2 and its only
// slave frozen (SIGSTOP), a SYNC_MASTER answers not-available or timeout, never success; after
// SIGCONT sends succeed again.
func TestClusterFrozenSlave(t *testing.T) {
	c := newCluster(t)
	m := c.addBroker("broker-a", 0, "SYNC_MASTER", "minInSyncReplicas=2")
	sl := c.addBroker("broker-a", 1, "SLAVE", "haMasterAddress="+m.ha)
	cl := c.client()
	c.createTopic(cl, "frozen", 2, 1)
	p, err := client.NewProducer(cl)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close(context.Background())
	send := func(i int) error {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_, err := p.SendSync(ctx, &client.Message{Topic: "frozen", Body: []byte(fmt.Sprintf("frozen-%d", i))})
		return err
	}
	a := client.NewAdmin(cl)
	testutil.EventuallyWithin(t, 10*time.Second, "the slave to join the in-sync set", func() bool {
		st, err := a.HAStatus(context.Background(), m.addr)
		return err == nil && st.InSyncReplicas == 2
	})
	for i := range 20 {
		if err := send(i); err != nil {
			t.Fatalf("send %d with the slave in sync: %v", i, err)
		}
	}

	sl.signal(syscall.SIGSTOP)
	statuses := map[string]int{}
	deadline := time.Now().Add(3 * time.Second)
	for i := 100; time.Now().Before(deadline); i++ {
		err := send(i)
		if err == nil {
			t.Fatalf("send %d succeeded with the only slave frozen and minInSyncReplicas=2", i)
		}
		st, _ := client.StatusOf(err)
		switch st {
		case protocol.StatusSlaveNotAvailable, protocol.StatusInSyncReplicasNotEnough, protocol.StatusFlushSlaveTimeout:
			statuses[st.String()]++
		default:
			t.Fatalf("send %d with the slave frozen: unexpected error %v", i, err)
		}
	}
	t.Logf("answers with the slave frozen: %v", statuses)
	if statuses[protocol.StatusSlaveNotAvailable.String()]+statuses[protocol.StatusInSyncReplicasNotEnough.String()] == 0 {
		t.Fatalf("the frozen slave never left the in-sync set: %v", statuses)
	}

	sl.signal(syscall.SIGCONT)
	testutil.EventuallyWithin(t, 15*time.Second, "sends to succeed after SIGCONT", func() bool { return send(1000) == nil })
	for i := range 20 {
		if err := send(2000 + i); err != nil {
			t.Fatalf("send %d after the slave came back: %v", i, err)
		}
	}
	sameLogs(t, a, m, sl)
}

// TestClusterMasterKilled: acceptance 4. Two broker groups; group a is a SYNC_MASTER with a
// slave. The master of group a is killed with SIGKILL during the load: producers go on with
// group b within a route refresh, the consumer reads every message of group a from its slave
// and commits there, and after the master returns nothing acknowledged is lost and no
// committed offset went backwards.
func TestClusterMasterKilled(t *testing.T) {
	c := newCluster(t)
	ma := c.addBroker("broker-a", 0, "SYNC_MASTER", "minInSyncReplicas=1")
	sa := c.addBroker("broker-a", 1, "SLAVE", "haMasterAddress="+ma.ha)
	mb := c.addBroker("broker-b", 0, "ASYNC_MASTER")
	cl := c.client()
	c.createTopic(cl, "master-kill", 4, 2)
	p, err := client.NewProducer(cl)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close(context.Background())
	a := client.NewAdmin(cl)
	testutil.EventuallyWithin(t, 10*time.Second, "the slave to join the in-sync set", func() bool {
		st, err := a.HAStatus(context.Background(), ma.addr)
		return err == nil && st.InSyncReplicas == 2
	})

	// across runs through the kill; the second group starts after it, from the first offset.
	across := newConsumed()
	_, stopAcross := runConsumer(t, cl, "across-the-kill", "master-kill", across)
	s := newSent()
	ctx, cancel := context.WithCancel(context.Background())
	wg := load(ctx, t, p, "master-kill", 2, s)
	time.Sleep(time.Second)

	ma.kill()
	ackedAtKill, _, _ := s.counts()
	// Within a route refresh (1 s) plus the fault backoff the producer sends to group b only.
	time.Sleep(2 * time.Second)
	before, failedBefore, unknownBefore := s.counts()
	time.Sleep(2 * time.Second)
	after, failedAfter, unknownAfter := s.counts()
	t.Logf("after the kill: acked %d -> %d -> %d; failed %d -> %d; unknown %d -> %d",
		ackedAtKill, before, after, failedBefore, failedAfter, unknownBefore, unknownAfter)
	if after-before < 50 {
		t.Fatalf("producers did not go on with group b: %d acknowledged in 2 s", after-before)
	}
	if failedAfter != failedBefore || unknownAfter != unknownBefore {
		t.Fatalf("sends still failing 2 s after the master died: failed %d -> %d, unknown %d -> %d",
			failedBefore, failedAfter, unknownBefore, unknownAfter)
	}

	// A consumer started now reads every acknowledged message of group a from the slave
	// (SYNC_MASTER: the slave holds every one) and commits its offsets there.
	got := newConsumed()
	co, stopConsumer := runConsumer(t, cl, "master-kill-group", "master-kill", got)
	testutil.EventuallyWithin(t, 20*time.Second, "every acknowledged message of broker-a, from its slave", func() bool {
		n, _ := got.missing(s, "broker-a")
		return n == 0
	})
	by := got.servedBy()
	fromSlave := by[1]
	t.Logf("served by brokerId: %v; consumer stats: %+v", by, co.Stats().ServedBy)
	if fromSlave == 0 {
		t.Fatal("no message of broker-a came from its slave")
	}
	slaveOffsets := map[int32]int64{}
	testutil.EventuallyWithin(t, 10*time.Second, "offsets committed on the slave", func() bool {
		for _, q := range co.Progress() {
			if q.Queue.BrokerName != "broker-a" || q.Consumed <= 0 {
				continue
			}
			off, err := a.QueryConsumerOffset(context.Background(), sa.addr, "master-kill-group", "master-kill", q.Queue.QueueID)
			if err != nil || off < q.Consumed {
				return false
			}
			slaveOffsets[q.Queue.QueueID] = off
		}
		return len(slaveOffsets) > 0
	})

	cancel()
	wg.Wait()
	ma.start()
	// Sends reach group a again.
	s2 := newSent()
	ctx2, cancel2 := context.WithCancel(context.Background())
	wg2 := load(ctx2, t, p, "master-kill", 2, s2)
	testutil.EventuallyWithin(t, 15*time.Second, "sends acknowledged by broker-a after its master returned", func() bool {
		s2.mu.Lock()
		defer s2.mu.Unlock()
		for _, res := range s2.acked {
			if res.BrokerName == "broker-a" {
				return true
			}
		}
		return false
	})
	cancel2()
	wg2.Wait()

	// No committed offset went backwards on the returned master.
	testutil.EventuallyWithin(t, 10*time.Second, "the master to hold the offsets committed on the slave", func() bool {
		for q, want := range slaveOffsets {
			off, err := a.QueryConsumerOffset(context.Background(), ma.addr, "master-kill-group", "master-kill", q)
			if err != nil || off < want {
				return false
			}
		}
		return true
	})
	// Every acknowledged message, before and after, is consumed by both groups; nothing that
	// failed is.
	for _, g := range []*consumed{got, across} {
		testutil.EventuallyWithin(t, 30*time.Second, "every acknowledged message", func() bool {
			n1, _ := g.missing(s, "")
			n2, _ := g.missing(s2, "")
			return n1 == 0 && n2 == 0
		})
	}
	stopConsumer()
	stopAcross()
	if n := got.phantoms(s) + got.phantoms(s2) + across.phantoms(s) + across.phantoms(s2); n != 0 {
		t.Fatalf("%d messages whose send failed were consumed", n)
	}
	acked1, failed1, unknown1 := s.counts()
	acked2, failed2, unknown2 := s2.counts()
	t.Logf("lost=0: %d + %d acknowledged messages consumed (failed %d+%d, unknown %d+%d); %d served by the slave",
		acked1, acked2, failed1, failed2, unknown1, unknown2, fromSlave)
	sameLogs(t, a, ma, sa)
	_ = mb
}

// backlog sends n messages of about 1 KiB (loghub lines) to topic in batches and returns them.
func backlog(t *testing.T, p *client.Producer, topic string, n int) *sent {
	t.Helper()
	s := newSent()
	lines := bodies()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	for i := 0; i < n; i += 64 {
		msgs := make([]client.Message, 0, 64)
		for j := i; j < min(i+64, n); j++ {
			body := fmt.Sprintf("backlog-%d ", j)
			for len(body) < 1000 {
				body += string(lines[(j+len(body))%len(lines)]) + " "
			}
			msgs = append(msgs, client.Message{Topic: topic, Body: []byte(body)})
		}
		res, err := p.SendBatchSync(ctx, topic, msgs)
		if err != nil {
			t.Fatalf("backlog batch %d: %v", i, err)
		}
		for _, m := range msgs {
			s.acked[string(m.Body)] = res
		}
	}
	return s
}

// readGroup is a master with two slaves for the read-suggestion tests: a consumer more than
// 1 MiB behind the log end reads old data.
func readGroup(t *testing.T, extra ...string) (c *cluster, m, s1, s2 *proc, cl *client.Client, p *client.Producer) {
	c = newCluster(t)
	opts := append([]string{"slaveReadBehindBytes=1048576"}, extra...)
	m = c.addBroker("broker-a", 0, "ASYNC_MASTER", opts...)
	s1 = c.addBroker("broker-a", 1, "SLAVE", append([]string{"haMasterAddress=" + m.ha}, opts...)...)
	s2 = c.addBroker("broker-a", 2, "SLAVE", append([]string{"haMasterAddress=" + m.ha}, opts...)...)
	cl = c.client()
	c.createTopic(cl, "reads", 4, 1)
	var err error
	p, err = client.NewProducer(cl)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Close(context.Background()) })
	a := client.NewAdmin(cl)
	testutil.EventuallyWithin(t, 10*time.Second, "both slaves in sync", func() bool {
		st, err := a.HAStatus(context.Background(), m.addr)
		return err == nil && st.InSyncReplicas == 3
	})
	return c, m, s1, s2, cl, p
}

// TestClusterReadSuggestionBacklog: acceptance 2a. A consumer starting from offset 0 behind a
// 30 MiB backlog (old data: more than slaveReadBehindBytes behind the end) is served mostly by
// the slaves, and gets every message once, in order.
func TestClusterReadSuggestionBacklog(t *testing.T) {
	_, m, s1, s2, cl, p := readGroup(t)
	s := backlog(t, p, "reads", 30_000)
	sameLogs(t, client.NewAdmin(cl), m, s1, s2)
	got := newConsumed()
	_, stop := runConsumer(t, cl, "backlog-reader", "reads", got)
	testutil.EventuallyWithin(t, 30*time.Second, "the whole backlog", func() bool { n, _ := got.missing(s, ""); return n == 0 })
	stop()
	got.checkOrder(t)
	by := got.servedBy()
	t.Logf("served by brokerId: %v", by)
	if by[1]+by[2] <= 2*by[0] {
		t.Fatalf("a consumer behind a backlog was not served mostly by slaves: %v", by)
	}
}

// TestClusterReadSuggestionFrozenSlave: acceptance 2b. With slave 1 frozen (SIGSTOP) and out of
// the in-sync set, a backlog consumer is served by the master and slave 2 only.
func TestClusterReadSuggestionFrozenSlave(t *testing.T) {
	_, m, s1, s2, cl, p := readGroup(t)
	s := backlog(t, p, "reads", 30_000)
	sameLogs(t, client.NewAdmin(cl), m, s1, s2)
	s1.signal(syscall.SIGSTOP)
	a := client.NewAdmin(cl)
	testutil.EventuallyWithin(t, 10*time.Second, "the frozen slave to leave the in-sync set", func() bool {
		st, err := a.HAStatus(context.Background(), m.addr)
		return err == nil && st.InSyncReplicas == 2
	})
	got := newConsumed()
	_, stop := runConsumer(t, cl, "frozen-reader", "reads", got)
	testutil.EventuallyWithin(t, 30*time.Second, "the whole backlog", func() bool { n, _ := got.missing(s, ""); return n == 0 })
	stop()
	s1.signal(syscall.SIGCONT)
	got.checkOrder(t)
	by := got.servedBy()
	t.Logf("served by brokerId with slave 1 frozen: %v", by)
	if by[1] != 0 || by[2] == 0 {
		t.Fatalf("the frozen slave served messages, or the live one none: %v", by)
	}
}

// TestClusterReadSuggestionLoadedMaster: acceptance 2c. A caught-up consumer reads from the
// master while it is idle; once producers push the master over slaveReadLoadMsgsPerSec, reads
// shift to the in-sync slaves. Every message arrives once, in order.
func TestClusterReadSuggestionLoadedMaster(t *testing.T) {
	_, _, _, _, cl, p := readGroup(t, "slaveReadLoadMsgsPerSec=2000")
	got := newConsumed()
	_, stop := runConsumer(t, cl, "tail-reader", "reads", got)
	// Idle master: a trickle of messages, read from the master.
	quiet := newSent()
	for i := range 50 {
		res, err := p.SendSync(context.Background(), &client.Message{Topic: "reads", Body: []byte(fmt.Sprintf("quiet-%d", i))})
		if err != nil {
			t.Fatal(err)
		}
		quiet.acked[fmt.Sprintf("quiet-%d", i)] = res
		time.Sleep(10 * time.Millisecond)
	}
	testutil.EventuallyWithin(t, 10*time.Second, "the quiet messages", func() bool { n, _ := got.missing(quiet, ""); return n == 0 })
	idle := got.servedBy()
	t.Logf("idle master, served by: %v", idle)
	if idle[0] < 40 {
		t.Fatalf("an idle master did not serve a caught-up consumer: %v", idle)
	}
	// Loaded master: after a second or two (the master measures its put rate every second)
	// reads move to the slaves; count what is served from then on.
	s := newSent()
	ctx, cancel := context.WithCancel(context.Background())
	wg := load(ctx, t, p, "reads", 8, s)
	time.Sleep(2500 * time.Millisecond)
	start := got.servedBy()
	time.Sleep(3 * time.Second)
	end := got.servedBy()
	cancel()
	wg.Wait()
	testutil.EventuallyWithin(t, 20*time.Second, "every loaded message", func() bool { n, _ := got.missing(s, ""); return n == 0 })
	stop()
	got.checkOrder(t)
	loaded := map[int64]int{0: end[0] - start[0], 1: end[1] - start[1], 2: end[2] - start[2]}
	acked, _, _ := s.counts()
	t.Logf("loaded master (%d msgs in 5.5 s), served by in its last 3 s: %v (all: %v)", acked, loaded, got.servedBy())
	// Idle, the slaves served nothing; loaded, they serve a large share. Not all: a consumer
	// reading a batch no slave holds yet stays on the master (a slave is suggested only for what
	// it has, or at the very end of the log).
	if slaves := loaded[1] + loaded[2]; slaves*10 < (slaves+loaded[0])*3 {
		t.Fatalf("reads did not shift to slaves under load (less than 30%%): %v", loaded)
	}
}
