package broker

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"maps"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/petrel-mq/petrel/client"
	"github.com/petrel-mq/petrel/internal/testutil"
	"github.com/petrel-mq/petrel/protocol"
	"github.com/petrel-mq/petrel/protocol/rpc"
)

// produceMix sends n batches of loghub lines (1 to 40 messages each) round-robin over the
// queues of the given topics and returns topic -> queue -> offset -> body.
func produceMix(t testing.TB, c *rpc.Conn, topics map[string]int32, n int) map[string]map[int32]map[int64]string {
	t.Helper()
	lines := loghubLines(t)
	want := map[string]map[int32]map[int64]string{}
	names := make([]string, 0, len(topics))
	for name := range topics {
		names = append(names, name)
		want[name] = map[int32]map[int64]string{}
	}
	line := 0
	for i := 0; i < n; i++ {
		topic := names[i%len(names)]
		q := int32(i/len(names)) % topics[topic]
		count := 1 + (i*7)%40
		batch := loghubBatch(t, topic, q, line, count)
		r, err := sendBatch(c, batch)
		if err != nil {
			t.Fatalf("send %d: %v", i, err)
		}
		if want[topic][q] == nil {
			want[topic][q] = map[int64]string{}
		}
		for k := 0; k < count; k++ {
			want[topic][q][r.QueueOffset+int64(k)] = lines[(line+k)%len(lines)]
		}
		line += count
	}
	return want
}

// TestReplicationByteIdentical: batches of realistic bodies sent to a master over several
// topics and queues (with segment rolls) reach both slaves byte for byte, with every codec: the
// log checksums agree, and every queue of every slave answers the same messages at the same
// queue offsets as the master. A consumer pinned to a slave reads everything from it.
func TestReplicationByteIdentical(t *testing.T) {
	for _, codec := range []string{"s2", "zstd", "none"} {
		t.Run(codec, func(t *testing.T) {
			hc := newHACluster(t, RoleAsyncMaster, 2, func(c *Config) { c.HACompression = codec })
			m := hc.b(0)
			mc := dial(t, m.Addr())
			topics := map[string]int32{"RepA": 4, "RepB": 2, "RepC": 1}
			for name, n := range topics {
				createTopic(t, mc, name, n)
			}
			want := produceMix(t, mc, topics, 240)
			if m.store.LogEndOffset() < 2*hc.cfg(0).MappedFileSizeCommitLog {
				t.Fatalf("log end %d: want a few segment rolls", m.store.LogEndOffset())
			}
			hc.waitCaughtUp(1, 2)
			_, admin := hc.newAdmin()
			assertIdentical(t, admin, m, hc.b(1), hc.b(2))

			for _, id := range []int64{1, 2} {
				sc := dial(t, hc.b(id).Addr())
				for name, n := range topics {
					hc.waitTopic(id, name)
					for q := int32(0); q < n; q++ {
						end := int64(len(want[name][q]))
						fromMaster := pullQueue(t, mc, name, q, end)
						fromSlave := pullQueue(t, sc, name, q, end)
						if !maps.Equal(fromMaster, want[name][q]) {
							t.Fatalf("master %s/%d: %d messages differ from what was sent", name, q, len(fromMaster))
						}
						if !maps.Equal(fromSlave, fromMaster) {
							t.Fatalf("slave %d %s/%d: %d messages, master %d; contents differ", id, name, q, len(fromSlave), len(fromMaster))
						}
					}
				}
			}

			st, err := admin.HAStatus(ctx5s(t), m.Addr())
			if err != nil {
				t.Fatal(err)
			}
			if len(st.Slaves) != 2 {
				t.Fatalf("master lists %d slaves: %+v", len(st.Slaves), st.Slaves)
			}
			for _, s := range st.Slaves {
				if !s.InSync || !s.Connected || s.AckedOffset != m.store.LogEndOffset() ||
					s.RawBytes <= m.store.LogEndOffset()/2 || s.RawBytes > m.store.LogEndOffset() { // segment padding is not sent
					t.Fatalf("slave status %+v, master end %d", s, m.store.LogEndOffset())
				}
				// Loghub lines compress well: a codec that compresses must have saved bytes.
				if compressed := s.WireBytes < s.RawBytes; compressed != (codec != "none") {
					t.Fatalf("codec %s: %d raw bytes sent as %d", codec, s.RawBytes, s.WireBytes)
				}
			}

			for _, id := range []int64{1, 2} {
				ss, err := admin.HAStatus(ctx5s(t), hc.b(id).Addr())
				if err != nil {
					t.Fatal(err)
				}
				if ss.Role != RoleSlave || ss.BrokerID != id || !ss.Connected || ss.MasterAddr != m.Addr() || ss.MasterHAAddr != hc.masterHAAddr() ||
					ss.LogEnd != m.store.LogEndOffset() || ss.MasterEnd != m.store.LogEndOffset() {
					t.Fatalf("slave %d status %+v; master %s (HA %s) ends at %d", id, ss, m.Addr(), hc.masterHAAddr(), m.store.LogEndOffset())
				}
			}

			if codec == "s2" {
				consumePinned(t, hc, "RepA", 1, want["RepA"])
			}
		})
	}
}

// consumePinned consumes topic with a client consumer pinned to member id and checks that it
// delivers exactly want, all served by that member.
func consumePinned(t *testing.T, hc *haCluster, topic string, id int64, want map[int32]map[int64]string) {
	t.Helper()
	c, admin := hc.newAdmin()
	testutil.Eventually(t, "route of "+topic+" lists the slaves", func() bool {
		r, err := admin.TopicRoute(ctx5s(t), topic)
		return err == nil && len(r.BrokerDatas) == 1 && len(r.BrokerDatas[0].Addrs) == 3
	})
	total := 0
	for _, q := range want {
		total += len(q)
	}
	co, err := client.NewConsumer(c, "pinned-"+topic, topic, client.WithReadBrokerID(id),
		client.WithPollTimeout(200*time.Millisecond), client.WithRebalanceInterval(200*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	got, n, wrongMember := consumeQueues(t, co, total, id)
	if n != total {
		t.Fatalf("consumer pinned to member %d delivered %d of %d messages", id, n, total)
	}
	for q, msgs := range want {
		if !maps.Equal(got[q], msgs) {
			t.Fatalf("queue %d: consumed messages differ from those sent", q)
		}
	}
	served := co.Stats().ServedBy
	if wrongMember != 0 || served[id].Messages != int64(total) || len(served) != 1 {
		t.Fatalf("pinned to member %d: %d messages from other members; served by %+v", id, wrongMember, served)
	}
}

// ackChecker checks, after every acknowledged SYNC send, that each slave that was in the in-sync
// set both before the send and after its acknowledgement (so a member of the set the
// acknowledgement waited for) holds the whole batch.
type ackChecker struct {
	m       *Broker
	mu      sync.Mutex
	slaves  map[int64]*Broker // the slaves that may be checked (not closing)
	checked atomic.Int64
}

func newAckChecker(m *Broker, slaves map[int64]*Broker) *ackChecker {
	return &ackChecker{m: m, slaves: maps.Clone(slaves)}
}

// drop stops checking slave id (it is about to close).
func (a *ackChecker) drop(id int64) {
	a.mu.Lock()
	delete(a.slaves, id)
	a.mu.Unlock()
}

func (a *ackChecker) set(id int64, b *Broker) {
	a.mu.Lock()
	a.slaves[id] = b
	a.mu.Unlock()
}

// send sends batch on c and checks the acknowledgement.
func (a *ackChecker) send(c *rpc.Conn, batch []byte) error {
	before := inSync(a.m)
	r, err := sendBatch(c, batch)
	if err != nil {
		return err
	}
	end := r.PhysicalOffset + int64(len(batch))
	after := inSync(a.m)
	a.mu.Lock()
	defer a.mu.Unlock()
	for id, s := range a.slaves {
		if !before[id] || !after[id] {
			continue
		}
		a.checked.Add(1)
		if got := s.store.LogEndOffset(); got < end {
			return fmt.Errorf("send acknowledged up to %d while in-sync slave %d holds only %d", end, id, got)
		}
	}
	return nil
}

// TestSyncMasterAcksAfterReplication: a SYNC_MASTER with minInSyncReplicas=1 and two slaves
// acknowledges a send only once every in-sync slave holds it (its log end is at or past the
// batch's end right after the acknowledgement). Closing a slave while senders run, and closing
// the other while the master is idle (its pull held), fails no send. The first slave restarts on
// its store, catches up from its own end (no resync) and ends byte-identical.
func TestSyncMasterAcksAfterReplication(t *testing.T) {
	hc := newHACluster(t, RoleSyncMaster, 2, func(c *Config) { c.MinInSyncReplicas = 1 })
	m := hc.b(0)
	hc.waitInSync(1, 2)
	mc := dial(t, m.Addr())
	createTopic(t, mc, "Sync", 4)
	loghubLines(t) // loaded here, not in the senders
	ac := newAckChecker(m, map[int64]*Broker{1: hc.b(1), 2: hc.b(2)})

	const senders = 4
	conns := make([]*rpc.Conn, senders)
	for i := range conns {
		conns[i] = dial(t, m.Addr())
	}
	var sent atomic.Int64
	stop := make(chan struct{})
	errs := make(chan error, senders)
	var wg sync.WaitGroup
	for g := 0; g < senders; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				if err := ac.send(conns[g], loghubBatch(t, "Sync", int32(g), g*1000+i*5, 5)); err != nil {
					errs <- fmt.Errorf("sender %d send %d: %w", g, i, err)
					return
				}
				sent.Add(1)
			}
		}()
	}
	// Sends run before, while and after slave 2 closes.
	waitSent := func(n int64) {
		testutil.Eventually(t, fmt.Sprintf("%d sends", n), func() bool { return sent.Load() >= n || len(errs) > 0 })
	}
	waitSent(100)
	ac.drop(2)
	old2 := hc.b(2)
	hc.stop(2)
	slave2End := old2.store.LogEndOffset() // what it holds after a clean stop
	hc.waitInSync(1)
	waitSent(sent.Load() + 100)
	close(stop)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if ac.checked.Load() < 200 {
		t.Fatalf("only %d acknowledgements checked against a slave", ac.checked.Load())
	}

	// Slave 2 comes back on its own store and catches up from its own end.
	s2 := hc.start(2)
	if got := s2.store.LogEndOffset(); got < slave2End || s2.store.LogMinOffset() != 0 {
		t.Fatalf("restarted slave's log is [%d, %d); it held [0, %d) when it stopped", s2.store.LogMinOffset(), got, slave2End)
	}
	hc.waitCaughtUp(1, 2)
	hc.waitInSync(1, 2)
	if rs := s2.role.Load().slave.Status().Resyncs; rs != 0 {
		t.Fatalf("restarted slave resynced %d times instead of continuing from its end", rs)
	}
	ac.set(2, s2)
	for i := 0; i < 20; i++ {
		if err := ac.send(mc, loghubBatch(t, "Sync", int32(i%4), i, 3)); err != nil {
			t.Fatalf("send after the restart: %v", err)
		}
	}

	// The master idles, so the slaves' pulls are held; slave 1 closes; sends still succeed.
	hc.waitCaughtUp(1, 2)
	ac.drop(1)
	hc.stop(1)
	for i := 0; i < 20; i++ {
		if err := ac.send(mc, loghubBatch(t, "Sync", int32(i%4), i, 3)); err != nil {
			t.Fatalf("send after slave 1 closed: %v", err)
		}
	}
	hc.waitInSync(2)
	hc.waitCaughtUp(2)
	_, admin := hc.newAdmin()
	assertIdentical(t, admin, m, hc.b(2))
}

// TestSyncMasterMinInSyncTwo: with minInSyncReplicas=2 and one slave, sends succeed while the
// slave runs. Once it is closed, no send succeeds: each answers SLAVE_NOT_AVAILABLE or
// IN_SYNC_REPLICAS_NOT_ENOUGH without storing anything (the master's log end does not move),
// or FLUSH_SLAVE_TIMEOUT. The slave restarts on its store, catches up, rejoins the set, and
// sends succeed again; the logs are byte-identical.
func TestSyncMasterMinInSyncTwo(t *testing.T) {
	hc := newHACluster(t, RoleSyncMaster, 1, func(c *Config) { c.MinInSyncReplicas = 2 })
	m := hc.b(0)
	hc.waitInSync(1)
	mc := dial(t, m.Addr())
	createTopic(t, mc, "Min2", 2)
	ac := newAckChecker(m, map[int64]*Broker{1: hc.b(1)})
	for i := 0; i < 30; i++ {
		if err := ac.send(mc, loghubBatch(t, "Min2", int32(i%2), i, 4)); err != nil {
			t.Fatalf("send %d with the slave in sync: %v", i, err)
		}
	}
	if ac.checked.Load() != 30 {
		t.Fatalf("%d of 30 acknowledgements had the slave in sync", ac.checked.Load())
	}

	// refused sends one batch and checks that it did not succeed, and that a refusal said to
	// be before the append stored nothing.
	refused := func(i int) protocol.Status {
		t.Helper()
		before := m.store.LogEndOffset()
		_, err := sendBatch(mc, loghubBatch(t, "Min2", int32(i%2), i, 4))
		st := statusOf(err)
		switch st {
		case protocol.StatusSlaveNotAvailable, protocol.StatusInSyncReplicasNotEnough:
			if after := m.store.LogEndOffset(); after != before {
				t.Fatalf("send answered %v but the master's log moved from %d to %d", st, before, after)
			}
		case protocol.StatusFlushSlaveTimeout:
		default:
			t.Fatalf("send %d without an in-sync slave answered %v (status %v); want a refusal", i, err, st)
		}
		return st
	}
	ac.drop(1)
	slaveEnd := hc.b(1).store.LogEndOffset()
	hc.stop(1)
	seen := map[protocol.Status]int{}
	for i := 0; i < 5; i++ { // the slave is gone but may still be counted in the set
		seen[refused(i)]++
	}
	hc.waitInSync()
	for i := 0; i < 10; i++ {
		seen[refused(i)]++
	}
	if seen[protocol.StatusSlaveNotAvailable] == 0 {
		t.Fatalf("no SLAVE_NOT_AVAILABLE with the only slave closed: %v", seen)
	}

	s1 := hc.start(1)
	// It kept its log and continues from its own end (it may already have pulled the batches
	// stored with FLUSH_SLAVE_TIMEOUT meanwhile): no resync.
	if got := s1.store.LogEndOffset(); got < slaveEnd || s1.store.LogMinOffset() != 0 {
		t.Fatalf("restarted slave's log is [%d, %d), it had [0, %d) at its close", s1.store.LogMinOffset(), got, slaveEnd)
	}
	// Until the slave is back in the set, sends are refused (never acknowledged).
	for i := 0; !inSync(m)[1]; i++ {
		if _, err := sendBatch(mc, loghubBatch(t, "Min2", 0, i, 1)); err == nil {
			if !inSync(m)[1] {
				t.Fatal("send acknowledged while the slave is not in sync")
			}
			break
		}
		time.Sleep(5 * time.Millisecond)
	}
	hc.waitInSync(1)
	ac.set(1, s1)
	for i := 0; i < 30; i++ {
		if err := ac.send(mc, loghubBatch(t, "Min2", int32(i%2), i, 4)); err != nil {
			t.Fatalf("send %d after the slave returned: %v", i, err)
		}
	}
	if rs := s1.role.Load().slave.Status().Resyncs; rs != 0 {
		t.Fatalf("restarted slave resynced %d times", rs)
	}
	hc.waitCaughtUp(1)
	_, admin := hc.newAdmin()
	assertIdentical(t, admin, m, s1)
}

// TestSlaveRefusesSends: a slave is read-only. A send to it is refused with NOT_MASTER naming the
// master's client address, and stores nothing. After an operator swaps the roles (the slave's
// store restarts as the master, the old master's as its slave, each on the other's port), a
// producer whose cached route still names the old master's address is refused by the slave
// there and follows the redirect: the message lands on the new master, which replicates it.
func TestSlaveRefusesSends(t *testing.T) {
	hc := newHACluster(t, RoleAsyncMaster, 1, nil)
	m, s := hc.b(0), hc.b(1)
	hc.waitMasterKnown(1)
	mc := dial(t, m.Addr())
	createTopic(t, mc, "RO", 2)
	hc.waitTopic(1, "RO")
	notMaster := func(slave, master *Broker) {
		t.Helper()
		sc := dial(t, slave.Addr())
		before := slave.store.LogEndOffset()
		_, err := sendBatch(sc, buildBatch("RO", 0, "to-a-slave"))
		var pe *protocol.Error
		if !errors.As(err, &pe) || pe.Status != protocol.StatusNotMaster || pe.MasterAddr != master.Addr() {
			t.Fatalf("send to the slave: %v; want NOT_MASTER naming %s", err, master.Addr())
		}
		if after := slave.store.LogEndOffset(); after != before {
			t.Fatalf("the refused send moved the slave's log from %d to %d", before, after)
		}
	}
	notMaster(s, m)

	c, _ := hc.newAdmin(client.WithRouteRefreshInterval(time.Hour))
	p, err := client.NewProducer(c, client.WithSendTimeout(10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close(context.Background())
	res, err := p.SendSync(ctx5s(t), &client.Message{Topic: "RO", Body: []byte("before the swap")})
	if err != nil || res.BrokerAddr != m.Addr() {
		t.Fatalf("send before the swap: %+v %v", res, err)
	}
	hc.waitCaughtUp(1)

	// The operator swaps the roles.
	hc.stop(1)
	hc.stop(0)
	hc.mu.Lock()
	oldMaster, oldSlave := hc.cfgs[0], hc.cfgs[1]
	newMaster, newSlave := oldSlave, oldMaster
	newMaster.BrokerRole, newMaster.BrokerID, newMaster.HAMasterAddress = RoleAsyncMaster, 0, ""
	newMaster.HAListenPort = testutil.FreePorts(t, 1)[0]
	newSlave.BrokerRole, newSlave.BrokerID, newSlave.HAListenPort = RoleSlave, 1, 0
	newSlave.HAMasterAddress = net.JoinHostPort("127.0.0.1", strconv.Itoa(newMaster.HAListenPort))
	hc.cfgs[0], hc.cfgs[1] = newMaster, newSlave
	hc.mu.Unlock()
	m = hc.start(0)
	s = hc.start(1)
	if m.Addr() != net.JoinHostPort("127.0.0.1", strconv.Itoa(oldSlave.ListenPort)) || s.Addr() != net.JoinHostPort("127.0.0.1", strconv.Itoa(oldMaster.ListenPort)) {
		t.Fatalf("swap: master %s, slave %s", m.Addr(), s.Addr())
	}
	hc.waitMasterKnown(1)
	notMaster(s, m)

	reqs := s.stats.requests.Load()
	res, err = p.SendSync(ctx5s(t), &client.Message{Topic: "RO", Body: []byte("after the swap")})
	if err != nil {
		t.Fatalf("send after the swap: %v", err)
	}
	if s.stats.requests.Load() == reqs {
		t.Fatal("the producer's stale route did not lead it to the slave first")
	}
	if res.BrokerAddr != m.Addr() {
		t.Fatalf("send after the swap stored by %s, the master is %s", res.BrokerAddr, m.Addr())
	}
	got := pull(t, dial(t, m.Addr()), "RO", res.QueueID, res.QueueOffset, 0)
	if len(got.bodies) == 0 || got.offs[0] != res.QueueOffset || got.bodies[0] != "after the swap" {
		t.Fatalf("new master's queue %d at %d: %v %v", res.QueueID, res.QueueOffset, got.offs, got.bodies)
	}
	hc.waitCaughtUp(1)
	if rs := s.role.Load().slave.Status().Resyncs; rs != 0 {
		t.Fatalf("the demoted master resynced %d times; its log was the new master's", rs)
	}
	_, admin := hc.newAdmin()
	assertIdentical(t, admin, m, s)
}

// TestReplicationLogsNameComponentOnce: the replication log lines of a master and of a slave
// carry their component (ha-master, ha-slave) once; ha adds it, the broker does not repeat it.
func TestReplicationLogsNameComponentOnce(t *testing.T) {
	hc := newHACluster(t, RoleAsyncMaster, 1, nil)
	hc.waitInSync(1)
	testutil.Eventually(t, "replication log lines of both roles", func() bool {
		return hc.logs.HasLine("slave connected", "component=ha-master") && hc.logs.HasLine("connected to the master", "component=ha-slave")
	})
	for _, line := range strings.Split(hc.logs.String(), "\n") {
		if n := strings.Count(line, "component="); n > 1 {
			t.Fatalf("log line names its component %d times: %s", n, line)
		}
	}
}

// TestSlaveRefusesTopicUpdates: a slave refuses to create or update a topic with NOT_MASTER
// naming its master's client address, and neither its topic table nor its topics.json changes;
// topic configs still reach it through its sync with the master, updates included.
func TestSlaveRefusesTopicUpdates(t *testing.T) {
	hc := newHACluster(t, RoleAsyncMaster, 1, nil)
	m, s := hc.b(0), hc.b(1)
	hc.waitMasterKnown(1)
	mc, sc := dial(t, m.Addr()), dial(t, s.Addr())
	createTopic(t, mc, "Cfg", 2)
	hc.waitTopic(1, "Cfg")
	persisted := func() string {
		t.Helper()
		data, err := os.ReadFile(s.topics.path)
		if err != nil {
			t.Fatal(err)
		}
		return string(data)
	}
	before := persisted()
	refused := func(cfg protocol.TopicConfig) {
		t.Helper()
		err := sc.CallDecode(ctx5s(t), protocol.CodeUpdateAndCreateTopic, &cfg, nil, nil, nil)
		var pe *protocol.Error
		if !errors.As(err, &pe) || pe.Status != protocol.StatusNotMaster || pe.MasterAddr != m.Addr() {
			t.Fatalf("topic update %s on the slave: %v; want NOT_MASTER naming %s", cfg.Topic, err, m.Addr())
		}
	}
	refused(protocol.TopicConfig{Topic: "Rogue", ReadQueueNums: 4, WriteQueueNums: 4, Perm: protocol.PermReadWrite})
	refused(protocol.TopicConfig{Topic: "Cfg", ReadQueueNums: 8, WriteQueueNums: 8, Perm: protocol.PermReadWrite})
	if s.topics.get([]byte("Rogue")) != nil {
		t.Fatal("the refused topic exists on the slave")
	}
	if got := s.topics.get([]byte("Cfg")).cfg.WriteQueueNums; got != 2 {
		t.Fatalf("the refused update changed the slave's topic: %d write queues", got)
	}
	if after := persisted(); after != before {
		t.Fatalf("the refused updates changed the slave's topics.json:\nbefore %s\nafter  %s", before, after)
	}

	// The master's update reaches the slave through the sync.
	upd := protocol.TopicConfig{Topic: "Cfg", ReadQueueNums: 6, WriteQueueNums: 6, Perm: protocol.PermReadWrite}
	if err := mc.CallDecode(ctx5s(t), protocol.CodeUpdateAndCreateTopic, &upd, nil, nil, nil); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, "slave has the master's topic update", func() bool {
		tp := s.topics.get([]byte("Cfg"))
		return tp != nil && tp.cfg == upd
	})
	reread, err := openTopicTable(filepath.Dir(s.topics.path))
	if err != nil {
		t.Fatal(err)
	}
	if tp := reread.get([]byte("Cfg")); tp == nil || tp.cfg != upd {
		t.Fatalf("the synced update is not in the slave's topics.json: %s", persisted())
	}
}

// TestPullSuggestions: every pull answer of a master and of its slaves carries the member to
// pull from next. The master sends a consumer reading far behind its log end to the in-sync
// slave holding the most (only in-sync ones), and keeps a caught-up one. A slave keeps a slow
// consumer while the master lives, sends a caught-up one back, and answers NOT_HERE for any
// offset it does not hold, never NO_NEW_MESSAGE or OFFSET_MOVED. With the master closed the
// slave serves all it holds and long-polls at its end, until replication brings more.
func TestPullSuggestions(t *testing.T) {
	const slow = 16 << 10
	hc := newHACluster(t, RoleAsyncMaster, 2, func(c *Config) { c.SlaveReadBehindBytes = slow })
	m := hc.b(0)
	mc := dial(t, m.Addr())
	createTopic(t, mc, "Sug", 2)
	for i := 0; i < 60; i++ { // queue 0: a backlog of ~100 KiB; queue 1 stays empty
		if _, err := sendBatch(mc, loghubBatch(t, "Sug", 0, i*10, 10)); err != nil {
			t.Fatal(err)
		}
	}
	const max0 = 600
	if m.store.LogEndOffset() < 4*slow {
		t.Fatalf("backlog of %d bytes is not far behind", m.store.LogEndOffset())
	}
	hc.waitCaughtUp(1, 2)
	hc.waitInSync(1, 2)
	hc.waitTopic(1, "Sug")
	hc.waitTopic(2, "Sug")
	want0 := pullQueue(t, mc, "Sug", 0, max0)

	expect := func(who string, h protocol.PullResponseHeader, result protocol.PullResult, next, suggest int64) {
		t.Helper()
		if h.Result != result || h.NextQueueOffset != next || h.SuggestBrokerID != suggest {
			t.Fatalf("%s: %v next %d suggest %d; want %v next %d suggest %d", who, h.Result, h.NextQueueOffset, h.SuggestBrokerID, result, next, suggest)
		}
	}
	// The master.
	expect("master, far behind", pullSome(t, mc, "Sug", 0, 0, 1, 0), protocol.PullFound, 10, 1)
	expect("master, near the end", pullSome(t, mc, "Sug", 0, max0-5, 100, 0), protocol.PullFound, max0, 0)
	expect("master, at the end", pullSome(t, mc, "Sug", 0, max0, 100, 0), protocol.PullNoNewMessage, max0, 0)
	expect("master, past the end", pullSome(t, mc, "Sug", 0, max0+5, 100, 0), protocol.PullOffsetMoved, 0, 1) // the min: life not known
	expect("master, past the end, of the queue's life", pullLife(t, mc, "Sug", 0, max0+5, m.store.QueueIncarnation([]byte("Sug"), 0)),
		protocol.PullOffsetMoved, max0, 0)
	expect("master, empty queue", pullSome(t, mc, "Sug", 1, 0, 100, 0), protocol.PullNoNewMessage, 0, 0)
	expect("master, past an empty queue", pullSome(t, mc, "Sug", 1, 3, 100, 0), protocol.PullOffsetMoved, 0, 0)

	// Slave 2, its master alive.
	sc := dial(t, hc.b(2).Addr())
	expect("slave, slow consumer", pullSome(t, sc, "Sug", 0, 0, 1, 0), protocol.PullFound, 10, 2)
	expect("slave, near the end", pullSome(t, sc, "Sug", 0, max0-5, 100, 0), protocol.PullFound, max0, 0)
	start := time.Now()
	expect("slave, at its end", pullSome(t, sc, "Sug", 0, max0, 100, 5000), protocol.PullNotHere, max0, 0)
	if d := time.Since(start); d > 4*time.Second {
		t.Fatalf("slave held a pull at its end for %v while its master is alive", d)
	}
	expect("slave, past its end", pullSome(t, sc, "Sug", 0, max0+5, 100, 0), protocol.PullNotHere, max0+5, 0)
	expect("slave, empty queue", pullSome(t, sc, "Sug", 1, 0, 100, 0), protocol.PullNotHere, 0, 0)
	expect("slave, past an empty queue", pullSome(t, sc, "Sug", 1, 3, 100, 0), protocol.PullNotHere, 3, 0)

	// Slave 1 leaves: the master suggests only the slave still in sync.
	hc.stop(1)
	hc.waitInSync(2)
	expect("master, far behind, slave 1 gone", pullSome(t, mc, "Sug", 0, 0, 1, 0), protocol.PullFound, 10, 2)

	// The master closes: slave 2 serves everything it holds and keeps slow consumers.
	hc.stop(0)
	s2 := hc.b(2)
	testutil.Eventually(t, "slave sees its master gone", func() bool { return !s2.role.Load().slave.Connected() })
	if got := pullQueue(t, sc, "Sug", 0, max0); !maps.Equal(got, want0) {
		t.Fatalf("slave without its master served %d messages, the master had %d; contents differ", len(got), len(want0))
	}
	expect("slave alone, slow consumer", pullSome(t, sc, "Sug", 0, 0, 1, 0), protocol.PullFound, 10, 2)
	expect("slave alone, past its end", pullSome(t, sc, "Sug", 0, max0+5, 100, 0), protocol.PullNotHere, max0+5, 0)
	// A queue the slave holds nothing of: it cannot know where the master's queue is, so it never
	// resets the consumer's offset.
	expect("slave alone, past an empty queue", pullSome(t, sc, "Sug", 1, 3, 100, 0), protocol.PullNotHere, 3, 0)
	start = time.Now()
	expect("slave alone, at its end", pullSome(t, sc, "Sug", 0, max0, 100, 300), protocol.PullNoNewMessage, max0, 0)
	if d := time.Since(start); d < 250*time.Millisecond {
		t.Fatalf("slave without its master answered a 300 ms long poll at its end after %v", d)
	}
	// A pull held at the slave's end is answered when replication brings the next message.
	type result struct {
		p   pulled
		err error
	}
	held := make(chan result, 1)
	go func() {
		p, err := pullE(sc, "Sug", 0, max0, 15000)
		held <- result{p, err}
	}()
	testutil.Eventually(t, "pull held on the slave", func() bool {
		tp := s2.topics.get([]byte("Sug"))
		return tp != nil && tp.waiters.n.Load() == 1
	})
	m = hc.start(0)
	send(t, dial(t, m.Addr()), "Sug", 0, "after the master returned")
	r := <-held
	p := r.p
	if r.err != nil || p.hdr.Result != protocol.PullFound || len(p.bodies) != 1 || p.bodies[0] != "after the master returned" || p.offs[0] != max0 {
		t.Fatalf("held pull on the slave: %+v %v %v %v", p.hdr, p.offs, p.bodies, r.err)
	}
}

// TestPullSuggestionsSlaveReadDisabled: with slaveReadEnable=false the master always suggests
// itself, even to a consumer far behind.
func TestPullSuggestionsSlaveReadDisabled(t *testing.T) {
	hc := newHACluster(t, RoleAsyncMaster, 1, func(c *Config) { c.SlaveReadBehindBytes = 4 << 10; c.SlaveReadEnable = false })
	m := hc.b(0)
	mc := dial(t, m.Addr())
	createTopic(t, mc, "NoSlaveRead", 1)
	for i := 0; i < 20; i++ {
		if _, err := sendBatch(mc, loghubBatch(t, "NoSlaveRead", 0, i*10, 10)); err != nil {
			t.Fatal(err)
		}
	}
	hc.waitCaughtUp(1)
	hc.waitInSync(1)
	if h := pullSome(t, mc, "NoSlaveRead", 0, 0, 1, 0); h.Result != protocol.PullFound || h.SuggestBrokerID != 0 {
		t.Fatalf("far-behind pull with slaveReadEnable=false: %v suggest %d", h.Result, h.SuggestBrokerID)
	}
}

// offsetWatch samples a consumer offset on every running member until stopped and records any
// that moved backwards.
type offsetWatch struct {
	hc           *haCluster
	group, topic []byte
	qid          int32
	stop         chan struct{}
	done         chan struct{}
	mu           sync.Mutex
	last         map[*Broker]int64
	backwards    []string
}

func watchOffsets(hc *haCluster, group, topic string, qid int32) *offsetWatch {
	w := &offsetWatch{hc: hc, group: []byte(group), topic: []byte(topic), qid: qid, stop: make(chan struct{}), done: make(chan struct{}),
		last: map[*Broker]int64{}}
	go func() {
		defer close(w.done)
		for {
			select {
			case <-w.stop:
				return
			case <-time.After(2 * time.Millisecond):
			}
			w.sample()
		}
	}()
	return w
}

func (w *offsetWatch) sample() {
	w.hc.mu.Lock()
	bs := maps.Clone(w.hc.brokers)
	w.hc.mu.Unlock()
	w.mu.Lock()
	defer w.mu.Unlock()
	for id, b := range bs {
		c, ok := b.offsets.get(w.group, w.topic, w.qid)
		if !ok {
			continue
		}
		off := c.off
		if prev, seen := w.last[b]; seen && off < prev {
			w.backwards = append(w.backwards, fmt.Sprintf("member %d: %d -> %d", id, prev, off))
		}
		w.last[b] = off
	}
}

// finish stops the watch and returns the backward moves seen.
func (w *offsetWatch) finish() []string {
	close(w.stop)
	<-w.done
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.backwards
}

// TestConfigAndOffsetSync: a slave configured without haMasterAddress learns its master from the
// NameServer and replicates; topic configs and consumer offsets reach it (slaveSyncInterval); an
// offset committed on the slave while the master is down reaches the master once it returns; a
// smaller commit never lowers an offset; and no member's offset ever moves backwards, across
// restarts included (each member's persisted offsets are reloaded).
func TestConfigAndOffsetSync(t *testing.T) {
	hc := newHACluster(t, RoleAsyncMaster, 1, func(c *Config) { c.HAMasterAddress = "" })
	m, s := hc.b(0), hc.b(1)
	hc.waitMasterKnown(1)
	testutil.Eventually(t, "slave learnt the master's replication address", func() bool { return s.role.Load().Master.HAAddr == hc.masterHAAddr() })
	mc, sc := dial(t, m.Addr()), dial(t, s.Addr())
	createTopic(t, mc, "Data", 1)
	send(t, mc, "Data", 0, "replicated through a NameServer-learnt address")
	hc.waitCaughtUp(1)
	cfg := protocol.TopicConfig{Topic: "Synced", ReadQueueNums: 3, WriteQueueNums: 5, Perm: protocol.PermReadWrite}
	if err := mc.CallDecode(ctx5s(t), protocol.CodeUpdateAndCreateTopic, &cfg, nil, nil, nil); err != nil {
		t.Fatal(err)
	}
	hc.waitTopic(1, "Synced")
	if got := s.topics.get([]byte("Synced")).cfg; got != cfg {
		t.Fatalf("slave's topic config %+v, master's %+v", got, cfg)
	}
	_, admin := hc.newAdmin()
	testutil.Eventually(t, "slave's route registration carries the topic", func() bool {
		tl, err := admin.AllTopicConfig(ctx5s(t), s.Addr())
		if err != nil {
			return false
		}
		for _, tc := range tl.Topics {
			if tc == cfg {
				return true
			}
		}
		return false
	})

	// Offsets are held up to their queue's max offset: queue 2 holds 100 messages.
	sendQueues(t, mc, "Synced", 3, 100)
	hc.waitCaughtUp(1)
	w := watchOffsets(hc, "grp", "Synced", 2)
	query := func(b *Broker) int64 {
		c, ok := b.offsets.get([]byte("grp"), []byte("Synced"), 2)
		if !ok {
			return -1
		}
		return c.off
	}
	commitOffset(t, mc, "grp", "Synced", 2, 40)
	testutil.Eventually(t, "slave has the master's commit", func() bool { return query(s) == 40 })
	commitOffset(t, mc, "grp", "Synced", 2, 30) // never backwards
	commitOffset(t, sc, "grp", "Synced", 2, 35)
	if query(m) != 40 || query(s) != 40 {
		t.Fatalf("smaller commits lowered the offset: master %d, slave %d", query(m), query(s))
	}

	// The master is down: a consumer commits on the slave; the master gets it when it returns.
	hc.stop(0)
	commitOffset(t, sc, "grp", "Synced", 2, 77)
	m = hc.start(0)
	if got := query(m); got < 40 { // 77 if the slave's sync came first
		t.Fatalf("restarted master has offset %d, it had 40", got)
	}
	testutil.Eventually(t, "returned master has the slave's larger commit", func() bool { return query(m) == 77 })
	// A topic created while the slave is down reaches it when it returns; its offset survives
	// the restart.
	hc.stop(1)
	cfg2 := protocol.TopicConfig{Topic: "Later", ReadQueueNums: 1, WriteQueueNums: 1, Perm: protocol.PermReadWrite}
	mc = dial(t, m.Addr())
	if err := mc.CallDecode(ctx5s(t), protocol.CodeUpdateAndCreateTopic, &cfg2, nil, nil, nil); err != nil {
		t.Fatal(err)
	}
	commitOffset(t, mc, "grp", "Synced", 2, 90)
	s = hc.start(1)
	if got := query(s); got < 77 { // 90 if its first sync came first
		t.Fatalf("restarted slave has offset %d, it had 77", got)
	}
	hc.waitTopic(1, "Later")
	testutil.Eventually(t, "returned slave has the master's larger commit", func() bool { return query(s) == 90 })
	if bw := w.finish(); len(bw) > 0 {
		t.Fatalf("offsets moved backwards: %v", bw)
	}
}

// assertQueuesMatch checks that every queue of the topics holds the same messages at the same
// offsets on the slave as on the master, over the offsets both hold.
func assertQueuesMatch(t *testing.T, m, s *Broker, topics map[string]int32) {
	t.Helper()
	mc, sc := dial(t, m.Addr()), dial(t, s.Addr())
	for name, n := range topics {
		for q := int32(0); q < n; q++ {
			maxOff := m.store.MaxOffset([]byte(name), q)
			if got := s.store.MaxOffset([]byte(name), q); got != maxOff {
				t.Fatalf("%s/%d: slave's max offset %d, master's %d", name, q, got, maxOff)
			}
			from := max(m.store.MinOffset([]byte(name), q), s.store.MinOffset([]byte(name), q))
			for off := from; off < maxOff; {
				pm, ps := pull(t, mc, name, q, off, 0), pull(t, sc, name, q, off, 0)
				if pm.hdr.Result != protocol.PullFound || ps.hdr.Result != protocol.PullFound ||
					fmt.Sprint(pm.offs, pm.bodies) != fmt.Sprint(ps.offs, ps.bodies) || pm.hdr.NextQueueOffset != ps.hdr.NextQueueOffset {
					t.Fatalf("%s/%d at %d: master %v (%d messages), slave %v (%d messages)", name, q, off, pm.hdr.Result, len(pm.offs), ps.hdr.Result, len(ps.offs))
				}
				off = pm.hdr.NextQueueOffset
			}
		}
	}
}

// TestResyncWipedSlave: a slave whose store was deleted comes back empty, asks from offset 0,
// which the master's retention removed, is told to resync from the master's min offset, and
// ends with the master's log from there byte for byte, its consume queues rebuilt.
func TestResyncWipedSlave(t *testing.T) {
	hc := newHACluster(t, RoleAsyncMaster, 1, func(c *Config) {
		if c.BrokerID == 0 {
			c.RetentionBytes = 512 << 10 // the master keeps about two 256 KiB segments
		}
	})
	m := hc.b(0)
	mc := dial(t, m.Addr())
	topics := map[string]int32{"Wipe": 3}
	createTopic(t, mc, "Wipe", 3)
	produceMix(t, mc, topics, 150)
	hc.waitCaughtUp(1)
	hc.stop(1)
	produceMix(t, mc, topics, 250)
	testutil.Eventually(t, "master's retention removes the oldest segments", func() bool {
		return m.store.LogMinOffset() > 0
	})
	if err := os.RemoveAll(hc.cfg(1).StorePathRootDir); err != nil {
		t.Fatal(err)
	}
	s := hc.start(1)
	hc.waitCaughtUp(1)
	// It starts where the master's log started when it resynced (retention may have moved the
	// master's start since).
	if sm, mm := s.store.LogMinOffset(), m.store.LogMinOffset(); sm == 0 || sm > mm {
		t.Fatalf("resynced slave's log starts at %d, the master's at %d", sm, mm)
	}
	if rs := s.role.Load().slave.Status().Resyncs; rs < 1 {
		t.Fatal("the wiped slave caught up without a resync")
	}
	_, admin := hc.newAdmin()
	assertIdentical(t, admin, m, s)
	hc.waitTopic(1, "Wipe")
	assertQueuesMatch(t, m, s, topics)
	hc.waitInSync(1)
}

// TestResyncSlaveAhead: a slave whose log is longer than its master's (its store is from an
// earlier, longer run of the group) is answered out of range, never acknowledges anything
// beyond the master's end, discards its log, copies the master's, and only then counts for a
// SYNC_MASTER with minInSyncReplicas=2: no send succeeds before it holds it.
func TestResyncSlaveAhead(t *testing.T) {
	hc := newHACluster(t, RoleSyncMaster, 1, nil)
	m := hc.b(0)
	mc := dial(t, m.Addr())
	createTopic(t, mc, "Ahead", 2)
	produceMix(t, mc, map[string]int32{"Ahead": 2}, 120)
	hc.waitCaughtUp(1)
	hc.stop(1)
	hc.stop(0)
	slaveEnd := m.store.LogEndOffset()

	// The master starts over with a short log and minInSyncReplicas=2.
	if err := os.RemoveAll(hc.cfg(0).StorePathRootDir); err != nil {
		t.Fatal(err)
	}
	m = hc.start(0)
	mc = dial(t, m.Addr())
	createTopic(t, mc, "Ahead", 2)
	produceMix(t, mc, map[string]int32{"Ahead": 2}, 5)
	hc.stop(0)
	hc.mu.Lock()
	c0 := hc.cfgs[0]
	c0.MinInSyncReplicas = 2
	hc.cfgs[0] = c0
	hc.mu.Unlock()
	m = hc.start(0)
	if m.store.LogEndOffset() >= slaveEnd/4 {
		t.Fatalf("master's new log (%d bytes) is not much shorter than the slave's (%d)", m.store.LogEndOffset(), slaveEnd)
	}

	// Senders run while the slave comes back; a watcher checks that the master never records
	// an acknowledgement past its own end.
	ac := newAckChecker(m, map[int64]*Broker{})
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var ok, refused atomic.Int64
	var mu sync.Mutex
	var failures []string
	fail := func(f string, args ...any) {
		mu.Lock()
		failures = append(failures, fmt.Sprintf(f, args...))
		mu.Unlock()
	}
	sender := dial(t, m.Addr())
	wg.Add(2)
	go func() {
		defer wg.Done()
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			err := ac.send(sender, loghubBatch(t, "Ahead", int32(i%2), i, 2))
			switch st := statusOf(err); {
			case err == nil:
				ok.Add(1)
			case st == protocol.StatusSlaveNotAvailable || st == protocol.StatusInSyncReplicasNotEnough || st == protocol.StatusFlushSlaveTimeout:
				refused.Add(1)
				time.Sleep(2 * time.Millisecond)
			default:
				fail("send: %v", err)
				return
			}
		}
	}()
	go func() {
		defer wg.Done()
		for {
			select {
			case <-stop:
				return
			case <-time.After(time.Millisecond):
			}
			end := m.store.LogEndOffset()
			for _, sl := range m.role.Load().master.Status().Slaves {
				if sl.AckedOffset > end {
					fail("slave %d acknowledged %d, past the master's end %d", sl.BrokerID, sl.AckedOffset, end)
				}
			}
		}
	}()
	testutil.Eventually(t, "refused sends without the slave", func() bool { return refused.Load() > 0 })
	if n := ok.Load(); n != 0 {
		t.Fatalf("%d sends acknowledged with minInSyncReplicas=2 and no slave", n)
	}
	hc.mu.Lock()
	c1 := hc.cfgs[1]
	hc.mu.Unlock()
	if c1.HAMasterAddress != hc.masterHAAddr() {
		t.Fatalf("master moved: %s -> %s", c1.HAMasterAddress, hc.masterHAAddr())
	}
	s := hc.start(1)
	ac.set(1, s) // from now on every success must be held by the slave
	if !hc.logs.HasLine("commitlog: recovered", "member=b1", fmt.Sprintf("endOffset=%d ", slaveEnd)) {
		t.Fatalf("the slave did not restart with its %d-byte log", slaveEnd)
	}
	testutil.Eventually(t, "slave resynced", func() bool {
		return s.role.Load().slave.Status().Resyncs >= 1 && hc.logs.HasLine("RESYNC: this slave's log is ahead of the master's", "member=b1")
	})
	hc.waitInSync(1)
	testutil.Eventually(t, "sends succeed with the slave back", func() bool { return ok.Load() >= 20 })
	close(stop)
	wg.Wait()
	if len(failures) > 0 {
		t.Fatal(failures)
	}
	hc.waitCaughtUp(1)
	_, admin := hc.newAdmin()
	assertIdentical(t, admin, m, s)
	hc.waitTopic(1, "Ahead")
	assertQueuesMatch(t, m, s, map[string]int32{"Ahead": 2})
}

// haPull sends one replication pull on c and returns the answer's header.
func haPull(t *testing.T, c *rpc.Conn, req protocol.HAPullRequest) (protocol.HAPullResponse, error) {
	t.Helper()
	resp, err := c.Call(ctx5s(t), protocol.CodeHAPull, &req, nil)
	if err != nil {
		return protocol.HAPullResponse{}, err
	}
	defer resp.Release()
	var h protocol.HAPullResponse
	if err := h.ReadFrom(resp.Header); err != nil {
		t.Fatal(err)
	}
	return h, nil
}

// TestHAPortBadInput: hostile or confused clients of the master's replication port (garbage
// bytes, a huge length prefix, another request code, another broker group's pull, a pull from
// inside a batch or past the end) get a closed connection with a logged reason or an explicit
// refusal, acknowledge nothing, and do not disturb the real slave: it stays connected and in
// sync, and SYNC sends needing it keep succeeding.
func TestHAPortBadInput(t *testing.T) {
	hc := newHACluster(t, RoleSyncMaster, 1, func(c *Config) { c.MinInSyncReplicas = 2 })
	m := hc.b(0)
	hc.waitInSync(1)
	mc := dial(t, m.Addr())
	createTopic(t, mc, "HABad", 1)
	ac := newAckChecker(m, map[int64]*Broker{1: hc.b(1)})
	sendSome := func(what string) {
		t.Helper()
		for i := 0; i < 10; i++ {
			if err := ac.send(mc, loghubBatch(t, "HABad", 0, i, 3)); err != nil {
				t.Fatalf("send %s: %v", what, err)
			}
		}
	}
	sendSome("before the bad input")
	haAddr := hc.masterHAAddr()

	prefix := func(length uint32, code uint16, id uint32) []byte {
		p := make([]byte, protocol.FramePrefixSize)
		binary.BigEndian.PutUint32(p[0:], length)
		binary.BigEndian.PutUint16(p[4:], code)
		p[7] = 1 // version
		binary.BigEndian.PutUint32(p[8:], id)
		return p
	}
	for _, tc := range []struct {
		name  string
		bytes []byte
		line  string // "": a line of the same reason was just logged, this one may be suppressed
	}{
		{"HTTP", []byte("GET / HTTP/1.1\r\nHost: petrel\r\n\r\n"), "closing connection: looks like an HTTP/1.x request"},
		{"huge length prefix", prefix(0x7ffffff0, uint16(protocol.CodeHAPull), 1), "closing connection: bad frame"},
		{"response flag", append(prefix(12, uint16(protocol.CodeHAPull), 1)[:6], 1, 1, 0, 0, 0, 1, 0, 0, 0, 0), ""},
	} {
		nc, err := net.Dial("tcp", haAddr)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := nc.Write(tc.bytes); err != nil {
			t.Fatal(err)
		}
		if !closedWithin(t, nc, 5*time.Second) {
			t.Fatalf("%s: the replication port kept the connection open", tc.name)
		}
		local := nc.LocalAddr().String()
		nc.Close()
		if tc.line != "" {
			testutil.Eventually(t, tc.name+": closed connection logged", func() bool {
				return hc.logs.HasLine(tc.line, "remote="+local, "reason=")
			})
		}
		sendSome("after " + tc.name)
	}

	// Well-formed requests that must not count as a slave's progress (a connection is bound to
	// the slave id of its first pull, so each gets its own).
	haConn := func() *rpc.Conn {
		rc, err := rpc.Dial(context.Background(), haAddr, rpc.Options{})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { rc.Close() })
		return rc
	}
	if _, err := haConn().Call(ctx5s(t), protocol.CodeSendMessage, nil, buildBatch("HABad", 0, "x")); statusOf(err) != protocol.StatusRequestCodeNotSupported {
		t.Fatalf("a send on the replication port: %v", err)
	}
	end := m.store.LogEndOffset()
	for _, tc := range []struct {
		name string
		req  protocol.HAPullRequest
		want uint8
	}{
		{"another group", protocol.HAPullRequest{BrokerName: "broker-z", SlaveID: 7, Offset: 0}, protocol.HAFenced},
		{"inside a batch", protocol.HAPullRequest{BrokerName: "broker-a", SlaveID: 8, Offset: 3}, protocol.HAOutOfRange},
		{"past the end", protocol.HAPullRequest{BrokerName: "broker-a", SlaveID: 9, Offset: end + 4096}, protocol.HAOutOfRange},
	} {
		rc := haConn()
		h, err := haPull(t, rc, tc.req)
		if err != nil || h.Result != tc.want {
			t.Fatalf("%s: %+v %v; want result %v", tc.name, h, err, tc.want)
		}
		rc.Close()
		for _, sl := range m.role.Load().master.Status().Slaves {
			if sl.BrokerID == tc.req.SlaveID && (sl.AckedOffset >= 0 || sl.InSync) {
				t.Fatalf("%s: the master counts the request as progress: %+v", tc.name, sl)
			}
		}
	}
	if !hc.logs.HasLine("fencing a replication pull", "broker=broker-z", "slave=7") {
		t.Fatal("the fenced pull was not logged")
	}

	// The real slave kept replicating throughout.
	sendSome("after the bad pulls")
	hc.waitCaughtUp(1)
	hc.waitInSync(1)
	_, admin := hc.newAdmin()
	assertIdentical(t, admin, m, hc.b(1))
}

// TestHAPortStrayPullWithSlaveID: a pull with the real slave's id from another broker group (a
// misconfigured slave of that group pointing here) is fenced, and must not take over the real
// slave's record: once the stray connection closes, the real slave still counts as connected and
// in sync, and SYNC sends needing it succeed.
func TestHAPortStrayPullWithSlaveID(t *testing.T) {
	hc := newHACluster(t, RoleSyncMaster, 1, func(c *Config) { c.MinInSyncReplicas = 2 })
	m := hc.b(0)
	hc.waitInSync(1)
	mc := dial(t, m.Addr())
	createTopic(t, mc, "Stray", 1)
	send(t, mc, "Stray", 0, "one")
	nc, err := net.Dial("tcp", hc.masterHAAddr())
	if err != nil {
		t.Fatal(err)
	}
	req := protocol.HAPullRequest{BrokerName: "broker-z", SlaveID: 1, Offset: 0}
	if _, err := nc.Write(protocol.AppendFrame(nil, uint16(protocol.CodeHAPull), 0, 1, &req, nil)); err != nil {
		t.Fatal(err)
	}
	_ = nc.SetReadDeadline(time.Now().Add(5 * time.Second))
	buf := make([]byte, 4096)
	n, err := io.ReadAtLeast(nc, buf, protocol.FramePrefixSize)
	for err == nil {
		f, perr := protocol.ParseFrame(buf[:n], protocol.DefaultMaxFrameSize)
		if perr == nil {
			var h protocol.HAPullResponse
			if err := h.ReadFrom(f.Header); err != nil || h.Result != protocol.HAFenced {
				t.Fatalf("stray pull: status %d, %+v %v", f.Code, h, err)
			}
			break
		}
		var m2 int
		m2, err = nc.Read(buf[n:])
		n += m2
	}
	if err != nil {
		t.Fatalf("stray pull: %v", err)
	}
	local := nc.LocalAddr().String()
	nc.Close()
	testutil.Eventually(t, "the master saw the stray connection close", func() bool {
		return hc.logs.HasLine("fencing a replication pull", "broker=broker-z") &&
			(hc.logs.HasLine("slave disconnected", "remote="+local) || !hc.logs.HasLine("slave connected", "remote="+local))
	})
	for i := 0; i < 5; i++ {
		if _, err := sendBatch(mc, buildBatch("Stray", 0, "two")); err != nil {
			t.Fatalf("send after a stray pull with the slave's id: %v (slaves %+v)", err, m.role.Load().master.Status().Slaves)
		}
	}
	for _, sl := range m.role.Load().master.Status().Slaves {
		if sl.BrokerID == 1 && (!sl.Connected || !sl.InSync) {
			t.Fatalf("real slave after the stray pull: %+v", sl)
		}
	}
}

// TestConsumeFromSlavesWhenMasterDown: with the master closed, a consumer of a new group reads
// every message from the slaves (the route keeps the group's queues; pulls follow the slaves'
// suggestions), and the offsets it commits to a slave reach the master when it returns.
func TestConsumeFromSlavesWhenMasterDown(t *testing.T) {
	hc := newHACluster(t, RoleAsyncMaster, 2, nil)
	m := hc.b(0)
	mc := dial(t, m.Addr())
	topics := map[string]int32{"Orphan": 3}
	createTopic(t, mc, "Orphan", 3)
	want := produceMix(t, mc, topics, 60)["Orphan"]
	hc.waitCaughtUp(1, 2)
	hc.waitTopic(1, "Orphan")
	hc.waitTopic(2, "Orphan")
	hc.stop(0)

	c, admin := hc.newAdmin()
	testutil.Eventually(t, "route without the master still has the queues", func() bool {
		r, err := admin.TopicRoute(ctx5s(t), "Orphan")
		return err == nil && len(r.QueueDatas) == 1 && len(r.BrokerDatas) == 1 && r.BrokerDatas[0].MasterAddr() == "" && len(r.BrokerDatas[0].Addrs) == 2
	})
	total := 0
	for _, q := range want {
		total += len(q)
	}
	co, err := client.NewConsumer(c, "orphans", "Orphan", client.WithPollTimeout(200*time.Millisecond),
		client.WithRebalanceInterval(200*time.Millisecond), client.WithCommitInterval(50*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	got, _, _ := consumeQueues(t, co, total, -1)
	for q, msgs := range want {
		if !maps.Equal(got[q], msgs) {
			t.Fatalf("queue %d: consumed %d messages, %d sent; contents differ", q, len(got[q]), len(msgs))
		}
	}
	served := co.Stats().ServedBy
	if served[0].Pulls != 0 || served[1].Messages+served[2].Messages != int64(total) {
		t.Fatalf("served by %+v with the master down", served)
	}

	// The consumer committed its offsets to a slave; the master gets them when it returns.
	m = hc.start(0)
	for q, msgs := range want {
		testutil.Eventually(t, fmt.Sprintf("master has queue %d's committed offset", q), func() bool {
			c, ok := m.offsets.get([]byte("orphans"), []byte("Orphan"), q)
			return ok && c.off == int64(len(msgs))
		})
	}
}

// TestSyncMasterSlaveDeathDefaultTimeouts: with the default haInSyncMaxLagTime and
// syncReplicationTimeout (1 s and 2 s) and minInSyncReplicas=1, sends right after a slave dies must
// still succeed (acceptance: "kill -9 a slave during a SYNC_MASTER run: no failed sends").
func TestSyncMasterSlaveDeathDefaultTimeouts(t *testing.T) {
	hc := newHACluster(t, RoleSyncMaster, 2, func(c *Config) {
		d := DefaultConfig()
		c.MinInSyncReplicas = 1
		c.HAInSyncMaxLagTime, c.SyncReplicationTimeout = d.HAInSyncMaxLagTime, d.SyncReplicationTimeout
	})
	m := hc.b(0)
	hc.waitInSync(1, 2)
	mc := dial(t, m.Addr())
	createTopic(t, mc, "Death", 1)
	send(t, mc, "Death", 0, "before")
	hc.waitCaughtUp(1, 2)
	hc.stop(2)
	for i := 0; i < 3; i++ {
		if _, err := sendBatch(mc, buildBatch("Death", 0, "after")); err != nil {
			t.Fatalf("send %d after a slave died: %v", i, err)
		}
	}
}

// TestBrokerStatusShowsReplication: brokerStatus (the runtime info) lists each slave of a master
// with its acknowledged offset, lag, in-sync flag and compression, and a slave's view of its
// master.
func TestBrokerStatusShowsReplication(t *testing.T) {
	hc := newHACluster(t, RoleSyncMaster, 1, nil)
	hc.waitInSync(1)
	_, admin := hc.newAdmin()
	kv := func(id int64) map[string]string {
		t.Helper()
		tbl, err := admin.BrokerRuntimeInfo(ctx5s(t), hc.b(id).Addr())
		if err != nil {
			t.Fatal(err)
		}
		m := map[string]string{}
		for _, e := range tbl.Entries {
			m[e.Key] = e.Value
		}
		return m
	}
	m := kv(0)
	if m["haInSyncReplicas"] != "2" || !strings.Contains(m["haSlave1"], "inSync=true") || !strings.Contains(m["haSlave1"], "addr="+hc.b(1).Addr()) {
		t.Fatalf("master's runtime info: haInSyncReplicas=%q haSlave1=%q", m["haInSyncReplicas"], m["haSlave1"])
	}
	// The slave learns the master's client address from its first answer (which a held pull
	// may delay by up to half the in-sync lag time) or from the NameServer.
	testutil.Eventually(t, "the slave's runtime info names its master", func() bool {
		s := kv(1)
		return s["haMasterConnected"] == "true" && s["masterAddr"] == hc.b(0).Addr()
	})
}
