package testcluster

import (
	"context"
	"fmt"
	"net"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/petrel-mq/petrel/broker"
	"github.com/petrel-mq/petrel/internal/testutil"
	"github.com/petrel-mq/petrel/protocol"
	"github.com/petrel-mq/petrel/protocol/rpc"
)

func TestMain(m *testing.M) { testutil.VerifyTestMain(m) }

// send stores one batch of bodies in queue 0 of topic on the broker at addr.
func send(t *testing.T, addr, topic string, bodies ...string) {
	t.Helper()
	var bb protocol.BatchBuilder
	bb.Reset(topic, 0, 1, 0)
	for _, body := range bodies {
		bb.Add(&protocol.Message{Body: []byte(body), Timestamp: time.Now().UnixMilli()})
	}
	if err := call(addr, protocol.CodeSendMessage, nil, bb.Finish(), nil); err != nil {
		t.Fatalf("send to %s: %v", addr, err)
	}
}

// waitSameLog waits until every running member of g has the log of the master m, as far as
// its end.
func waitSameLog(t *testing.T, g *Group, m *Member) {
	t.Helper()
	end := m.Broker().Store().LogEndOffset()
	for _, s := range g.running() {
		testutil.Eventually(t, s.String()+" holding the master's log", func() bool {
			return s.Broker().Store().LogEndOffset() == end
		})
	}
}

// listed returns what every NameServer lists of group (address -> brokerId), and fails the
// test when two NameServers differ.
func listed(t *testing.T, c *Cluster, group string) map[string]int64 {
	t.Helper()
	var first map[string]int64
	for i, ns := range c.NameServers() {
		ids := memberIDs(ns.ClusterInfo(), group)
		if i > 0 && !mapsEqual(ids, first) {
			t.Fatalf("NameServer %d lists %v of %s, NameServer 0 %v", i, ids, group, first)
		}
		first = ids
	}
	return first
}

func mapsEqual(a, b map[string]int64) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || w != v {
			return false
		}
	}
	return true
}

// TestStaticGroups: two NameServers, a SYNC_MASTER with two slaves and a lone ASYNC_MASTER.
// Every member is registered with both when New returns, with the roles, ports and store the
// harness gives and the callback's edits; the slaves come in sync and replicate; a stopped
// slave is unregistered, and started again it returns at its address on its store and catches
// up.
func TestStaticGroups(t *testing.T) {
	var mu sync.Mutex
	var seen []string
	c := New(t, Options{NameServers: 2, Config: func(cfg *broker.Config) {
		mu.Lock()
		seen = append(seen, cfg.BrokerName+"/"+cfg.BrokerRole)
		mu.Unlock()
		cfg.FlushConsumerOffsetInterval = 123 * time.Millisecond
	}},
		GroupSpec{Name: "broker-a", Role: broker.RoleSyncMaster, Slaves: 2},
		GroupSpec{Name: "broker-b"})

	if want := []string{"broker-a/SYNC_MASTER", "broker-a/SLAVE", "broker-a/SLAVE", "broker-b/ASYNC_MASTER"}; !slices.Equal(seen, want) {
		t.Fatalf("the callback saw %q, want %q", seen, want)
	}
	if addrs := strings.Split(c.NamesrvAddr(), ";"); len(addrs) != 2 || addrs[0] == addrs[1] {
		t.Fatalf("NamesrvAddr %q, want two addresses", c.NamesrvAddr())
	}
	a, b := c.Group("broker-a"), c.Group("broker-b")
	if got := listed(t, c, "broker-a"); !mapsEqual(got, map[string]int64{a.Member(0).Addr(): 0, a.Member(1).Addr(): 1, a.Member(2).Addr(): 2}) {
		t.Fatalf("broker-a listed as %v", got)
	}
	if got := listed(t, c, "broker-b"); !mapsEqual(got, map[string]int64{b.Member(0).Addr(): 0}) {
		t.Fatalf("broker-b listed as %v", got)
	}
	for _, m := range append(a.Members(), b.Members()...) {
		cfg := m.Broker().Config()
		if m.Broker().Addr() != m.Addr() || cfg.FlushConsumerOffsetInterval != 123*time.Millisecond || cfg.NamesrvAddr != c.NamesrvAddr() ||
			cfg.MappedFileSizeCommitLog != SegmentSize || !strings.HasPrefix(m.HAAddr(), "127.0.0.1:") || m.HAAddr() == m.Addr() {
			t.Errorf("%s: address %s (broker %s), HA %s, config %+v", m, m.Addr(), m.Broker().Addr(), m.HAAddr(), cfg)
		}
	}

	master := a.WaitInSync()
	if master != a.Member(0) {
		t.Fatalf("the master of broker-a is %s", master)
	}
	c.CreateTopic("T", 2)
	send(t, master.Addr(), "T", "one", "two")
	send(t, b.WaitMaster().Addr(), "T", "elsewhere")
	waitSameLog(t, a, master)

	s := a.Member(2)
	storeDir := s.Config().StorePathRootDir
	s.Stop()
	if s.Running() {
		t.Fatal("a stopped member runs")
	}
	if _, ok := listed(t, c, "broker-a")[s.Addr()]; ok {
		t.Fatal("a stopped member is still listed")
	}
	send(t, master.Addr(), "T", "while slave 2 is away")
	s.Start()
	if got := s.Broker().Config().StorePathRootDir; got != storeDir || s.Broker().Addr() != s.Addr() {
		t.Fatalf("restarted at %s on %s, want %s on %s", s.Broker().Addr(), got, s.Addr(), storeDir)
	}
	if got := listed(t, c, "broker-a")[s.Addr()]; got != 2 {
		t.Fatalf("the restarted slave is listed as brokerId %d", got)
	}
	a.WaitInSync()
	waitSameLog(t, a, master)
	if s.Restarts() != 0 {
		t.Fatalf("%d restarts in place of a static slave", s.Restarts())
	}
}

// TestRaftGroup: three members elect a master that every NameServer names as brokerId 0; when
// it stops another takes over at a newer epoch, and the old one, started again, follows and
// comes back in sync.
func TestRaftGroup(t *testing.T) {
	c := New(t, Options{}, GroupSpec{Name: "broker-r", RaftMembers: 3})
	g := c.Group("broker-r")
	if !g.Raft() || len(g.Members()) != 3 {
		t.Fatalf("raft %v, %d members", g.Raft(), len(g.Members()))
	}
	for _, m := range g.Members() {
		cfg := m.Config()
		if !cfg.EnableRaftHA || cfg.RaftSelfID != fmt.Sprintf("b%d", m.ID()) || strings.Count(cfg.RaftPeers, ";") != 2 ||
			cfg.BrokerRole != broker.RoleSyncMaster || cfg.MinInSyncReplicas != RaftMinInSyncReplicas {
			t.Errorf("%s: config %+v", m, cfg)
		}
	}
	old := g.WaitInSync()
	st, err := old.HAStatus()
	if err != nil || !isMaster(st) {
		t.Fatalf("the master's HA status %+v, %v", st, err)
	}
	c.CreateTopic("R", 1)
	send(t, old.Addr(), "R", "before the failover")
	waitSameLog(t, g, old)

	old.Stop()
	// The new master takes sends once a slave is in its in-sync set (minInSyncReplicas 2).
	nm := g.WaitInSync()
	if nm == old {
		t.Fatal("the stopped member is still master")
	}
	if nst, err := nm.HAStatus(); err != nil || nst.Epoch <= st.Epoch {
		t.Fatalf("the new master's HA status %+v, %v; the old epoch %d", nst, err, st.Epoch)
	}
	send(t, nm.Addr(), "R", "after the failover")
	old.Start()
	if g.WaitInSync() != nm {
		t.Fatal("the master changed when the old one returned")
	}
	waitSameLog(t, g, nm)
}

// TestRegisterDead: a member registered at a dead address is listed by every NameServer under
// its brokerId, and nothing answers there.
func TestRegisterDead(t *testing.T) {
	c := New(t, Options{NameServers: 2})
	addr := c.RegisterDead("broker-x", 3)
	if got := listed(t, c, "broker-x"); !mapsEqual(got, map[string]int64{addr: 3}) {
		t.Fatalf("broker-x listed as %v", got)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	if conn, err := rpc.Dial(ctx, addr, rpc.Options{}); err == nil {
		conn.Close()
		t.Fatalf("%s accepted a connection", addr)
	}
	if _, _, err := net.SplitHostPort(addr); err != nil || !strings.HasPrefix(addr, "127.0.0.1:") {
		t.Fatalf("dead address %q", addr)
	}
}

func TestMemberIDsAndMasterAddr(t *testing.T) {
	ci := protocol.ClusterInfo{Brokers: []protocol.BrokerData{
		{BrokerName: "a", Addrs: []protocol.BrokerAddr{{BrokerID: 0, Addr: "h:1"}, {BrokerID: 2, Addr: "h:3"}}},
		{BrokerName: "b", Addrs: []protocol.BrokerAddr{{BrokerID: 1, Addr: "h:5"}}},
	}}
	for _, tt := range []struct {
		group  string
		ids    map[string]int64
		master string
	}{
		{"a", map[string]int64{"h:1": 0, "h:3": 2}, "h:1"},
		{"b", map[string]int64{"h:5": 1}, ""},
		{"c", map[string]int64{}, ""},
	} {
		if got := memberIDs(ci, tt.group); !mapsEqual(got, tt.ids) {
			t.Errorf("memberIDs(%s) = %v, want %v", tt.group, got, tt.ids)
		}
		if got := masterAddr(ci, tt.group); got != tt.master {
			t.Errorf("masterAddr(%s) = %q, want %q", tt.group, got, tt.master)
		}
	}
}

func TestRoutesTo(t *testing.T) {
	withMaster := []protocol.BrokerData{{BrokerName: "a", Addrs: []protocol.BrokerAddr{{BrokerID: 0, Addr: "h:1"}}}}
	noMaster := []protocol.BrokerData{{BrokerName: "a", Addrs: []protocol.BrokerAddr{{BrokerID: 1, Addr: "h:2"}}}}
	queues := func(w int32, perm int32) []protocol.QueueData {
		return []protocol.QueueData{{BrokerName: "a", ReadQueueNums: 4, WriteQueueNums: w, Perm: perm}}
	}
	for _, tt := range []struct {
		name  string
		route protocol.TopicRouteData
		want  bool
	}{
		{"writable with a master", protocol.TopicRouteData{QueueDatas: queues(4, protocol.PermReadWrite), BrokerDatas: withMaster}, true},
		{"no master", protocol.TopicRouteData{QueueDatas: queues(4, protocol.PermReadWrite), BrokerDatas: noMaster}, false},
		{"read only", protocol.TopicRouteData{QueueDatas: queues(4, protocol.PermRead), BrokerDatas: withMaster}, false},
		{"no write queues", protocol.TopicRouteData{QueueDatas: queues(0, protocol.PermReadWrite), BrokerDatas: withMaster}, false},
		{"another group's queues", protocol.TopicRouteData{QueueDatas: []protocol.QueueData{{BrokerName: "b", WriteQueueNums: 4, Perm: protocol.PermReadWrite}}, BrokerDatas: withMaster}, false},
	} {
		if got := routesTo(tt.route, "a"); got != tt.want {
			t.Errorf("%s: routesTo = %v, want %v", tt.name, got, tt.want)
		}
	}
}

func TestIsMasterAndInSyncSlaves(t *testing.T) {
	for _, tt := range []struct {
		name   string
		st     protocol.HAStatus
		master bool
		inSync int
	}{
		{"static master", protocol.HAStatus{Role: broker.RoleSyncMaster, BrokerID: 0, Slaves: []protocol.SlaveStatus{
			{BrokerID: 1, Connected: true, InSync: true}, {BrokerID: 2, Connected: true}, {BrokerID: 3, InSync: true}}}, true, 1},
		{"slave", protocol.HAStatus{Role: broker.RoleSlave, BrokerID: 1}, false, 0},
		{"member between roles", protocol.HAStatus{Role: broker.RoleSlave, BrokerID: 0}, false, 0},
		{"Raft member not registered as master", protocol.HAStatus{Role: broker.RoleSyncMaster, BrokerID: 2}, false, 0},
	} {
		if got := isMaster(tt.st); got != tt.master {
			t.Errorf("%s: isMaster = %v, want %v", tt.name, got, tt.master)
		}
		if got := inSyncSlaves(tt.st); got != tt.inSync {
			t.Errorf("%s: inSyncSlaves = %d, want %d", tt.name, got, tt.inSync)
		}
	}
}
