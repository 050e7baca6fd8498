package broker

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/petrel-mq/petrel/ha"
	"github.com/petrel-mq/petrel/internal/faultproxy"
	"github.com/petrel-mq/petrel/internal/testutil"
	"github.com/petrel-mq/petrel/namesrv"
	"github.com/petrel-mq/petrel/protocol"
	"github.com/petrel-mq/petrel/protocol/rpc"
)

// TestEpochLogObserve: a slave records where each master epoch's data begins in its log from
// the epochs stamped in the replicated batches, durably, and only newer epochs.
func TestEpochLogObserve(t *testing.T) {
	path := filepath.Join(t.TempDir(), "epochs")
	l, err := openEpochLog(path)
	if err != nil {
		t.Fatal(err)
	}
	stamped := func(epoch uint32, phys int64) []byte {
		b := buildBatch("t", 0, "a", "b")
		protocol.StampBatch(b, phys, 0, 1, epoch)
		return b
	}
	// A chunk at offset 1000: two batches of epoch 1, then one of epoch 3.
	b1 := stamped(1, 1000)
	b2 := stamped(1, 1000+int64(len(b1)))
	b3 := stamped(3, 1000+int64(len(b1)+len(b2)))
	chunk := slices.Concat(b1, b2, b3)
	if err := l.observe(1000, 1000, chunk); err != nil {
		t.Fatal(err)
	}
	want := []ha.EpochStart{{Epoch: 1, StartOffset: 1000}, {Epoch: 3, StartOffset: 1000 + int64(len(b1)+len(b2))}}
	if got := l.list(); !slices.Equal(got, want) {
		t.Fatalf("epochs %v, want %v", got, want)
	}
	// Older epochs (a stale chunk) and a truncated tail change nothing.
	if err := l.observe(5000, 5000, append(stamped(2, 5000), 0, 0, 0)); err != nil {
		t.Fatal(err)
	}
	reopened, err := openEpochLog(path)
	if err != nil {
		t.Fatal(err)
	}
	if got := reopened.list(); !slices.Equal(got, want) || reopened.last.Load() != 3 {
		t.Fatalf("after reopening: %v (last %d), want %v", got, reopened.last.Load(), want)
	}
	// A cut at the second epoch's start drops it; epoch 3 is newer again afterwards.
	if err := reopened.truncateTo(want[1].StartOffset); err != nil {
		t.Fatal(err)
	}
	if got := reopened.list(); !slices.Equal(got, want[:1]) || reopened.last.Load() != 1 {
		t.Fatalf("after the cut: %v (last %d)", got, reopened.last.Load())
	}
}

// TestRaftConfigValidation: the keys of a Raft-elected member are checked before it starts.
func TestRaftConfigValidation(t *testing.T) {
	base := func() Config {
		c := testConfig(t.TempDir())
		c.EnableRaftHA = true
		c.BrokerID = 2
		c.BrokerRole = RoleSyncMaster
		c.RaftSelfID = "b2"
		c.RaftPeers = "b1-127.0.0.1:40911; b2-127.0.0.1:40912;b3-127.0.0.1:40913"
		return c
	}
	if err := func() error { c := base(); return c.Validate() }(); err != nil {
		t.Fatalf("a good member config: %v", err)
	}
	cases := []struct {
		name, want string
		edit       func(*Config)
	}{
		{"slave role", "brokerRole SLAVE", func(c *Config) { c.BrokerRole = RoleSlave }},
		{"brokerId 0", "brokerId 0", func(c *Config) { c.BrokerID = 0 }},
		{"two members", "at least 3", func(c *Config) { c.RaftPeers = "b1-127.0.0.1:1;b2-127.0.0.1:2" }},
		{"self missing", "not one of raftPeers", func(c *Config) { c.RaftSelfID = "b9" }},
		{"bad item", "want id-host:port", func(c *Config) { c.RaftPeers = "b1:127.0.0.1:1;b2-127.0.0.1:2;b3-127.0.0.1:3" }},
		{"bad address", "raftPeers item", func(c *Config) { c.RaftPeers = "b1-localhost;b2-127.0.0.1:2;b3-127.0.0.1:3" }},
		{"repeated id", "appears twice", func(c *Config) { c.RaftPeers = "b2-127.0.0.1:1;b2-127.0.0.1:2;b3-127.0.0.1:3" }},
		{"tiny heartbeat", "raftHeartbeatTimeout", func(c *Config) { c.RaftHeartbeatTimeout = 1 }},
		{"minInSyncReplicas above the members", "more than the 3 members", func(c *Config) { c.MinInSyncReplicas = 4 }},
		{"same Raft address twice", "the same address", func(c *Config) { c.RaftPeers = "b1-127.0.0.1:1;b2-127.0.0.1:1;b3-127.0.0.1:3" }},
		{"port not a number", "not a number", func(c *Config) { c.RaftPeers = "b1-127.0.0.1:abc;b2-127.0.0.1:2;b3-127.0.0.1:3" }},
		{"Raft port is the listen port", "also its listenPort", func(c *Config) {
			c.ListenPort = 40912
			c.HAListenPort = 40999
		}},
	}
	for _, tc := range cases {
		c := base()
		tc.edit(&c)
		if err := c.Validate(); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: got %v, want an error with %q", tc.name, err, tc.want)
		}
	}
}

// raftMembers starts three in-process members of a Raft-elected group on loopback (no
// NameServer): SYNC_MASTER, minInSyncReplicas=2. tweaks adjust every member's config.
func raftMembers(t *testing.T, tweaks ...func(*Config)) []*Broker {
	t.Helper()
	var peers []string
	for i, addr := range testutil.FreeAddrs(t, 3) {
		peers = append(peers, fmt.Sprintf("b%d-%s", i+1, addr))
	}
	dir := t.TempDir()
	var bs []*Broker
	for i := range 3 {
		cfg := haTestConfig(filepath.Join(dir, fmt.Sprint(i+1)), RoleSyncMaster, int64(i+1))
		cfg.EnableRaftHA = true
		cfg.RaftSelfID = fmt.Sprintf("b%d", i+1)
		cfg.RaftPeers = strings.Join(peers, ";")
		cfg.MinInSyncReplicas = 2
		for _, tw := range tweaks {
			tw(&cfg)
		}
		bs = append(bs, startBroker(t, cfg))
	}
	return bs
}

// raftMaster waits until one member acts as master with both others counted in sync.
func raftMaster(t *testing.T, bs []*Broker) *Broker {
	t.Helper()
	var m *Broker
	testutil.EventuallyWithin(t, 15*time.Second, "a master with two in-sync slaves", func() bool {
		m = nil
		for _, b := range bs {
			if r := b.role.Load(); r.master != nil && r.State == ha.MemberMaster && r.master.InSyncCount() == len(bs)-1 {
				m = b
			}
		}
		return m != nil
	})
	return m
}

// TestRaftGroupInProcess: three in-process members elect a master that registers as brokerId 0
// and accepts SYNC sends; the others refuse sends naming it; consumers on a slave read only what
// every in-sync member holds; when the master closes, another takes over at a new epoch with
// every acknowledged message; electMaster moves the role back; every goroutine stops (goleak in
// TestMain).
func TestRaftGroupInProcess(t *testing.T) {
	bs := raftMembers(t)
	defer func() {
		for _, b := range bs {
			_ = b.Close()
		}
	}()
	m := raftMaster(t, bs)
	if m.registeredID() != 0 || m.haStatus().BrokerID != 0 {
		t.Fatalf("the master registers as brokerId %d", m.registeredID())
	}
	c := dial(t, m.Addr())
	createTopic(t, c, "raft", 2)
	var acked []string
	for i := range 50 {
		body := fmt.Sprintf("m%d", i)
		send(t, c, "raft", int32(i%2), body)
		acked = append(acked, body)
	}
	c.Close()
	for _, b := range bs {
		if b == m {
			continue
		}
		sc := dial(t, b.Addr())
		_, err := sc.Call(ctx5s(t), protocol.CodeSendMessage, nil, buildBatch("raft", 0, "x"))
		sc.Close()
		var pe *protocol.Error
		if !errors.As(err, &pe) || pe.Status != protocol.StatusNotMaster || pe.MasterAddr != m.Addr() {
			t.Fatalf("send to a slave: %v, want NOT_MASTER naming %s", err, m.Addr())
		}
	}
	oldEpoch := m.role.Load().Epoch

	// The master goes away; another member takes over at a newer epoch with every message.
	_ = m.Close()
	rest := slices.DeleteFunc(slices.Clone(bs), func(b *Broker) bool { return b == m })
	var nm *Broker
	testutil.EventuallyWithin(t, 15*time.Second, "a new master", func() bool {
		for _, b := range rest {
			if r := b.role.Load(); r.master != nil {
				nm = b
				return true
			}
		}
		return false
	})
	if e := nm.role.Load().Epoch; e <= oldEpoch {
		t.Fatalf("new master's epoch %d, old %d", e, oldEpoch)
	}
	c = dial(t, nm.Addr())
	defer c.Close()
	slices.Sort(acked)
	// Served once every in-sync member holds them (the high watermark).
	var got []string
	testutil.EventuallyWithin(t, 10*time.Second, "the acknowledged messages readable on the new master", func() bool {
		got = got[:0]
		for q := int32(0); q < 2; q++ {
			got = append(got, pull(t, c, "raft", q, 0, 0).bodies...)
		}
		slices.Sort(got)
		return slices.Equal(got, acked)
	})
	// The old member returns and follows; electMaster hands the role to it once it is in sync.
	idx := slices.Index(bs, m)
	bs[idx] = startBroker(t, m.Config())
	raftMaster(t, bs)
	h := protocol.ElectMasterRequest{BrokerName: nm.cfg.BrokerName, BrokerID: bs[idx].cfg.BrokerID}
	var rep rpc.Reply
	testutil.EventuallyWithin(t, 10*time.Second, "electMaster to succeed", func() bool {
		// SERVICE_NOT_AVAILABLE until the returned member is in the committed in-sync set.
		rep = nm.electMaster(h)
		if rep.Status != protocol.StatusSuccess && rep.Status != protocol.StatusServiceNotAvailable {
			t.Fatalf("electMaster: %v %s", rep.Status, rep.Remark)
		}
		return rep.Status == protocol.StatusSuccess
	})
	if r := rep.Header.(*protocol.ElectMasterResponse); r.MasterAddr != bs[idx].Addr() {
		t.Fatalf("electMaster made %s master, want %s", r.MasterAddr, bs[idx].Addr())
	}
	if got := raftMaster(t, bs); got != bs[idx] {
		t.Fatalf("master is %s after electMaster", got.Addr())
	}
}

// TestElectedRoleGuardsRestart: after electMaster changed a static broker's role, a restart with
// a config that contradicts it is refused with a message that says what to change; a matching
// config starts in the recorded epoch.
func TestElectedRoleGuardsRestart(t *testing.T) {
	dir := t.TempDir()
	cfg := testConfig(dir)
	b := &Broker{cfg: cfg, log: testLogger(t)}
	b.recordElected(electedRole{BrokerID: 1, Role: RoleSlave, Epoch: 3})
	// The old master restarted with its old config (brokerId 0, a master).
	if _, err := New(cfg, testLogger(t)); err == nil || !strings.Contains(err.Error(), "electMaster made this broker brokerId 1, SLAVE, in epoch 3") {
		t.Fatalf("stale config: %v", err)
	}
	// Its config updated to follow the new master.
	cfg.BrokerID, cfg.BrokerRole = 1, RoleSlave
	nb, err := New(cfg, testLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	if e := nb.elected; e != 3 { // the epoch its role starts in (startHA)
		t.Fatalf("epoch %d, want 3", e)
	}
	if err := nb.store.Close(); err != nil {
		t.Fatal(err)
	}
	// A damaged file is an error, not a silent default.
	if err := os.WriteFile(filepath.Join(dir, electedName), []byte("brokerId=x\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := New(cfg, testLogger(t)); err == nil {
		t.Fatal("a damaged elected file was accepted")
	}
}

// TestRaftTopicTableUpgrade: members whose stores hold topic tables but whose Raft log holds
// none (stores from before topic configs went through Raft) keep their own tables until the
// first master commits its table through Raft; then every member holds exactly the master's
// table, and topic changes go through Raft.
func TestRaftTopicTableUpgrade(t *testing.T) {
	tables := map[int64][]string{1: {"A", "B"}, 2: {"A"}, 3: {"A", "C"}}
	bs := raftMembers(t, func(c *Config) {
		var file topicFile
		for _, name := range tables[c.BrokerID] {
			file.Topics = append(file.Topics, protocol.TopicConfig{Topic: name, ReadQueueNums: 2, WriteQueueNums: 2, Perm: protocol.PermReadWrite})
		}
		data, err := json.Marshal(&file)
		if err != nil {
			t.Fatal(err)
		}
		dir := filepath.Join(c.StorePathRootDir, "config")
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, "topics.json"), data, 0o644); err != nil {
			t.Fatal(err)
		}
	})
	defer func() {
		for _, b := range bs {
			_ = b.Close()
		}
	}()
	m := raftMaster(t, bs)
	want := fmt.Sprint(tables[m.cfg.BrokerID])
	names := func(b *Broker) string {
		var out []string
		for _, c := range b.topics.list() {
			out = append(out, c.Topic)
		}
		return fmt.Sprint(out)
	}
	testutil.Eventually(t, "every member holding the first master's table "+want, func() bool {
		for _, b := range bs {
			if !b.raft.topicsKnown() || names(b) != want {
				return false
			}
		}
		return true
	})
	c := dial(t, m.Addr())
	createTopic(t, c, "D", 1)
	testutil.Eventually(t, "every member holding the new topic", func() bool {
		for _, b := range bs {
			if b.topics.get([]byte("D")) == nil {
				return false
			}
		}
		return true
	})
}

// TestRaftNoQuorumNamesNoMaster: a member of a Raft-elected group left without a quorum (the
// master alone, or a slave alone) refuses a send NOT_MASTER naming no master (not itself, not
// a master that is gone), with a remark that says the group has no master now, and registers
// with the NameServer under its own brokerId, never as master brokerId 0.
func TestRaftNoQuorumNamesNoMaster(t *testing.T) {
	for _, tc := range []struct {
		name string
		keep func(bs []*Broker, m *Broker) *Broker // the member that stays up
	}{
		{"master alone", func(bs []*Broker, m *Broker) *Broker { return m }},
		{"slave alone", func(bs []*Broker, m *Broker) *Broker {
			return bs[slices.IndexFunc(bs, func(b *Broker) bool { return b != m })]
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ns := namesrv.New(namesrv.Config{ListenAddr: "127.0.0.1:0", RegistrationPeriod: time.Nanosecond, Logger: testLogger(t)})
			if err := ns.Start(); err != nil {
				t.Fatal(err)
			}
			defer ns.Close()
			bs := raftMembers(t, func(c *Config) { c.NamesrvAddr = ns.Addr() })
			defer func() {
				for _, b := range bs {
					_ = b.Close()
				}
			}()
			m := raftMaster(t, bs)
			s := tc.keep(bs, m)
			for _, b := range bs {
				if b != s {
					_ = b.Close()
				}
			}
			testutil.EventuallyWithin(t, 15*time.Second, "the survivor to know it has no master", func() bool {
				r := s.role.Load()
				return r.master == nil && r.NoMaster == ha.NoMasterNoLeader
			})
			c := dial(t, s.Addr())
			_, err := c.Call(ctx5s(t), protocol.CodeSendMessage, nil, buildBatch("raft", 0, "x"))
			var pe *protocol.Error
			if !errors.As(err, &pe) || pe.Status != protocol.StatusNotMaster {
				t.Fatalf("send to the survivor: %v, want NOT_MASTER", err)
			}
			if pe.MasterAddr != "" || !strings.Contains(pe.Remark, "no master now") || !strings.Contains(pe.Remark, "no quorum") {
				t.Fatalf("NOT_MASTER names master %q (survivor %s, old master %s), remark %q; want none and a remark saying there is no quorum",
					pe.MasterAddr, s.Addr(), m.Addr(), pe.Remark)
			}
			rep := s.electMaster(protocol.ElectMasterRequest{BrokerName: s.cfg.BrokerName, BrokerID: s.cfg.BrokerID})
			if rep.MasterAddr != "" {
				t.Fatalf("electMaster on the survivor names master %q: %v %s", rep.MasterAddr, rep.Status, rep.Remark)
			}
			testutil.EventuallyWithin(t, 10*time.Second, "the survivor registered under its own brokerId", func() bool {
				lbs := ns.LiveBrokers()
				return len(lbs) == 1 && lbs[0].Addr == s.Addr() && lbs[0].BrokerID == s.cfg.BrokerID
			})
			if id := s.registeredID(); id != s.cfg.BrokerID {
				t.Fatalf("the survivor registers as brokerId %d", id)
			}
		})
	}
}

// TestRaftSlaveCutOffIsBetween: a slave whose Raft links to both other members are cut (the
// connections stay open and carry nothing, as in a partition) while its replication link to the
// master still works loses its Raft leader: it can no longer know whether the master it follows
// holds the role, so it stops following it and reports state between naming no master
// (haStatus, brokerStatus), as the README says; once the links heal it follows the master
// again.
func TestRaftSlaveCutOffIsBetween(t *testing.T) {
	real := testutil.FreeAddrs(t, 3)
	mesh, err := faultproxy.StartMesh(real) // each member's Raft traffic to the others
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = mesh.Close() })
	dir := t.TempDir()
	var bs []*Broker
	for i := range 3 {
		var peers []string
		for j := range 3 {
			peers = append(peers, fmt.Sprintf("b%d-%s", j+1, mesh.Addr(i, j)))
		}
		cfg := haTestConfig(filepath.Join(dir, fmt.Sprint(i+1)), RoleSyncMaster, int64(i+1))
		cfg.EnableRaftHA = true
		cfg.RaftSelfID = fmt.Sprintf("b%d", i+1)
		cfg.RaftPeers = strings.Join(peers, ";")
		cfg.MinInSyncReplicas = 2
		bs = append(bs, startBroker(t, cfg))
	}
	defer func() {
		for _, b := range bs {
			_ = b.Close()
		}
	}()
	m := raftMaster(t, bs)
	k := slices.IndexFunc(bs, func(b *Broker) bool { return b != m })
	s := bs[k]
	for _, p := range mesh.Of(k) {
		p.Blackhole()
	}
	testutil.EventuallyWithin(t, 15*time.Second, "the cut-off slave to report between, naming no master", func() bool {
		st := s.haStatus()
		return st.State == "between" && st.MasterAddr == "" && st.MasterHAAddr == "" && s.role.Load().slave == nil
	})
	if kv := s.runtimeInfo(); kv.Get("masterAddr") != "" {
		t.Fatalf("brokerStatus of the cut-off slave names master %s", kv.Get("masterAddr"))
	}
	if r := m.role.Load(); r.master == nil {
		t.Fatal("the master, which kept its quorum, gave its role up")
	}
	mesh.HealAll()
	testutil.EventuallyWithin(t, 15*time.Second, "the slave to follow the master again", func() bool {
		st := s.haStatus()
		return st.State == "slave" && st.MasterAddr == m.Addr()
	})
}
