package namesrv

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/petrel-mq/petrel/internal/testutil"
	"github.com/petrel-mq/petrel/protocol"
)

var (
	g1m = broker{cluster: "c1", name: "g1", id: 0, addr: "127.0.0.1:10911", ha: "127.0.0.1:10912", version: 1}
	g1s = broker{cluster: "c1", name: "g1", id: 1, addr: "127.0.0.1:10921", ha: "127.0.0.1:10922", version: 1}
	g2m = broker{cluster: "c1", name: "g2", id: 0, addr: "127.0.0.1:10931", ha: "127.0.0.1:10932", version: 1}
	g3m = broker{cluster: "c2", name: "g3", id: 0, addr: "127.0.0.1:10941", version: 1}
)

func brokerData(b broker, members ...broker) protocol.BrokerData {
	bd := protocol.BrokerData{Cluster: b.cluster, BrokerName: b.name}
	for _, m := range members {
		bd.Addrs = append(bd.Addrs, protocol.BrokerAddr{BrokerID: m.id, Addr: m.addr})
	}
	return bd
}

func wantQueue(name string) protocol.QueueData {
	return protocol.QueueData{BrokerName: name, ReadQueueNums: 8, WriteQueueNums: 8, Perm: protocol.PermReadWrite}
}

func TestRegisterRouteAndClusterInfo(t *testing.T) {
	s := startServer(t, nil)
	c := dial(t, s.Addr())

	rh := mustRegister(t, c, g1m, topics("TopicA", "TopicB"))
	if rh.MasterAddr != g1m.addr || rh.HAServerAddr != g1m.ha {
		t.Errorf("master registration answered %+v", rh)
	}
	// The slave's topic list does not change the group's queue data.
	rh = mustRegister(t, c, g1s, topics("TopicA", "SlaveOnly"))
	if rh.MasterAddr != g1m.addr || rh.HAServerAddr != g1m.ha {
		t.Errorf("slave registration answered %+v, want the master %s / %s", rh, g1m.addr, g1m.ha)
	}
	mustRegister(t, c, g2m, []protocol.TopicConfig{{Topic: "TopicA", ReadQueueNums: 4, WriteQueueNums: 2, Perm: protocol.PermRead}})
	mustRegister(t, c, g3m, topics("TopicC"))

	got := mustRoute(t, c, "TopicA")
	want := protocol.TopicRouteData{
		QueueDatas: []protocol.QueueData{
			wantQueue("g1"),
			{BrokerName: "g2", ReadQueueNums: 4, WriteQueueNums: 2, Perm: protocol.PermRead},
		},
		BrokerDatas: []protocol.BrokerData{brokerData(g1m, g1m, g1s), brokerData(g2m, g2m)},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("route TopicA:\n got %+v\nwant %+v", got, want)
	}
	if m := got.BrokerDatas[0].MasterAddr(); m != g1m.addr {
		t.Errorf("g1 master %q", m)
	}
	if local, ok := s.Route("TopicA"); !ok || !reflect.DeepEqual(local, want) {
		t.Errorf("Server.Route(TopicA) = %+v, %v", local, ok)
	}
	if _, err := getRoute(t, c, "SlaveOnly"); !errors.Is(err, protocol.StatusTopicNotExist) {
		t.Errorf("route of a topic only a slave lists: %v, want TOPIC_NOT_EXIST", err)
	}

	ci := getClusterInfo(t, c)
	wantCI := protocol.ClusterInfo{
		Brokers: []protocol.BrokerData{brokerData(g1m, g1m, g1s), brokerData(g2m, g2m), brokerData(g3m, g3m)},
		Clusters: []protocol.ClusterEntry{
			{Name: "c1", BrokerNames: []string{"g1", "g2"}},
			{Name: "c2", BrokerNames: []string{"g3"}},
		},
	}
	if !reflect.DeepEqual(ci, wantCI) {
		t.Errorf("cluster info:\n got %+v\nwant %+v", ci, wantCI)
	}
	if local := s.ClusterInfo(); !reflect.DeepEqual(local, wantCI) {
		t.Errorf("Server.ClusterInfo() = %+v", local)
	}

	live := s.LiveBrokers()
	if len(live) != 4 || live[0].Addr != g1m.addr || live[0].HAServerAddr != g1m.ha || live[0].DataVersion != 1 ||
		live[0].ClusterName != "c1" || live[0].BrokerName != "g1" || live[0].RemoteAddr == "" {
		t.Errorf("LiveBrokers() = %+v", live)
	}
}

func TestReregistrationReplacesTopics(t *testing.T) {
	s := startServer(t, nil)
	c := dial(t, s.Addr())

	mustRegister(t, c, g1m, topics("TopicA", "TopicB"))
	mustRegister(t, c, g2m, topics("TopicA"))

	v2 := g1m
	v2.version = 2
	mustRegister(t, c, v2, topics("TopicB", "TopicC"))

	rd := mustRoute(t, c, "TopicA")
	want := protocol.TopicRouteData{
		QueueDatas:  []protocol.QueueData{wantQueue("g2")},
		BrokerDatas: []protocol.BrokerData{brokerData(g2m, g2m)},
	}
	if !reflect.DeepEqual(rd, want) {
		t.Errorf("TopicA after g1 dropped it:\n got %+v\nwant %+v", rd, want)
	}
	for _, topic := range []string{"TopicB", "TopicC"} {
		rd := mustRoute(t, c, topic)
		if len(rd.QueueDatas) != 1 || rd.QueueDatas[0].BrokerName != "g1" || len(rd.BrokerDatas) != 1 {
			t.Errorf("route %s = %+v", topic, rd)
		}
	}

	// g2 drops TopicA as well: the topic disappears.
	mustRegister(t, c, g2m, nil)
	if _, err := getRoute(t, c, "TopicA"); !errors.Is(err, protocol.StatusTopicNotExist) {
		t.Errorf("route of a topic no group serves: %v", err)
	}
	// Queue counts change with the latest registration.
	mustRegister(t, c, v2, []protocol.TopicConfig{{Topic: "TopicB", ReadQueueNums: 16, WriteQueueNums: 16, Perm: protocol.PermReadWrite}})
	rd = mustRoute(t, c, "TopicB")
	if rd.QueueDatas[0].ReadQueueNums != 16 {
		t.Errorf("TopicB queue data not updated: %+v", rd.QueueDatas)
	}
	if _, err := getRoute(t, c, "TopicC"); !errors.Is(err, protocol.StatusTopicNotExist) {
		t.Errorf("route of a dropped topic: %v", err)
	}
	for _, b := range s.LiveBrokers() {
		if b.Addr == g1m.addr && b.DataVersion != 2 {
			t.Errorf("data version of %s = %d, want 2", b.Addr, b.DataVersion)
		}
	}
}

func TestExpiryByScanner(t *testing.T) {
	clk := testutil.NewClock()
	s := startServer(t, func(c *Config) {
		c.Now = clk.Now
		c.ScanInterval = time.Millisecond
	})
	c := dial(t, s.Addr())
	mustRegister(t, c, g1m, topics("TopicA"))
	mustRegister(t, c, g1s, nil)

	clk.Advance(60 * time.Second)
	mustRegister(t, c, g1s, nil) // the slave's heartbeat; the master stays silent
	time.Sleep(20 * time.Millisecond)
	if n := len(s.LiveBrokers()); n != 2 {
		t.Fatalf("%d live brokers before expiry, want 2", n)
	}

	clk.Advance(60*time.Second + time.Millisecond) // master silent for 120.001 s, slave for 60.001 s
	testutil.Eventually(t, "the master expires", func() bool { return len(s.LiveBrokers()) == 1 })
	rd := mustRoute(t, c, "TopicA")
	want := protocol.TopicRouteData{
		QueueDatas:  []protocol.QueueData{wantQueue("g1")},
		BrokerDatas: []protocol.BrokerData{brokerData(g1m, g1s)},
	}
	if !reflect.DeepEqual(rd, want) {
		t.Errorf("route after the master expired:\n got %+v\nwant %+v", rd, want)
	}
	if m := rd.BrokerDatas[0].MasterAddr(); m != "" {
		t.Errorf("MasterAddr %q, want none", m)
	}

	clk.Advance(60 * time.Second)
	testutil.Eventually(t, "the slave expires", func() bool { return len(s.LiveBrokers()) == 0 })
	if _, err := getRoute(t, c, "TopicA"); !errors.Is(err, protocol.StatusTopicNotExist) {
		t.Errorf("route after every member expired: %v", err)
	}
	if ci := getClusterInfo(t, c); len(ci.Brokers) != 0 || len(ci.Clusters) != 0 {
		t.Errorf("cluster info after expiry: %+v", ci)
	}
}

func TestRemovalOnConnectionClose(t *testing.T) {
	s := startServer(t, nil)
	query := dial(t, s.Addr())
	mc := dial(t, s.Addr())
	sc := dial(t, s.Addr())
	mustRegister(t, mc, g1m, topics("TopicA"))
	mustRegister(t, sc, g1s, nil)

	_ = mc.Close()
	testutil.Eventually(t, "the master is removed", func() bool { return len(s.LiveBrokers()) == 1 })
	rd := mustRoute(t, query, "TopicA")
	want := protocol.TopicRouteData{
		QueueDatas:  []protocol.QueueData{wantQueue("g1")},
		BrokerDatas: []protocol.BrokerData{brokerData(g1m, g1s)},
	}
	if !reflect.DeepEqual(rd, want) {
		t.Errorf("route after the master's connection closed:\n got %+v\nwant %+v", rd, want)
	}
	if rh := mustRegister(t, sc, g1s, nil); rh.MasterAddr != "" || rh.HAServerAddr != "" {
		t.Errorf("slave registration without a master answered %+v", rh)
	}

	// A broker that re-registered on a new connection survives the close of its old one.
	sc2 := dial(t, s.Addr())
	mustRegister(t, sc2, g1s, nil)
	_ = sc.Close()
	time.Sleep(20 * time.Millisecond)
	if n := len(s.LiveBrokers()); n != 1 {
		t.Fatalf("%d live brokers after closing a superseded connection, want 1", n)
	}

	_ = sc2.Close()
	testutil.Eventually(t, "the slave is removed", func() bool { return len(s.LiveBrokers()) == 0 })
	if _, err := getRoute(t, query, "TopicA"); !errors.Is(err, protocol.StatusTopicNotExist) {
		t.Errorf("route after the group's last connection closed: %v", err)
	}
}

func TestUnregisterMasterKeepsSlaveGroup(t *testing.T) {
	s := startServer(t, nil)
	c := dial(t, s.Addr())
	mustRegister(t, c, g1m, topics("TopicA"))
	mustRegister(t, c, g1s, topics("Ignored"))

	unregister(t, c, g1m)
	rd := mustRoute(t, c, "TopicA")
	if len(rd.BrokerDatas) != 1 || rd.BrokerDatas[0].MasterAddr() != "" ||
		!reflect.DeepEqual(rd.BrokerDatas[0], brokerData(g1m, g1s)) || !reflect.DeepEqual(rd.QueueDatas, []protocol.QueueData{wantQueue("g1")}) {
		t.Errorf("route after unregistering the master: %+v", rd)
	}
	// The slave's heartbeat does not replace the master's queue data.
	mustRegister(t, c, g1s, topics("Ignored"))
	if _, err := getRoute(t, c, "Ignored"); !errors.Is(err, protocol.StatusTopicNotExist) {
		t.Errorf("slave heartbeat changed queue data: %v", err)
	}

	// Unregistering an unknown broker, or a member under the wrong id, succeeds and changes nothing.
	unregister(t, c, g2m)
	wrong := g1s
	wrong.id = 7
	unregister(t, c, wrong)
	if n := len(s.LiveBrokers()); n != 1 {
		t.Errorf("%d live brokers, want 1", n)
	}

	// The master comes back.
	if rh := mustRegister(t, c, g1m, topics("TopicA")); rh.MasterAddr != g1m.addr {
		t.Errorf("master re-registration answered %+v", rh)
	}
	if rd := mustRoute(t, c, "TopicA"); !reflect.DeepEqual(rd.BrokerDatas, []protocol.BrokerData{brokerData(g1m, g1m, g1s)}) {
		t.Errorf("route after the master returned: %+v", rd)
	}
	unregister(t, c, g1s)
	unregister(t, c, g1m)
	if ci := s.ClusterInfo(); len(ci.Brokers) != 0 || len(ci.Clusters) != 0 {
		t.Errorf("cluster info after unregistering everything: %+v", ci)
	}
}

func TestSlavePromotedAndAddressChanges(t *testing.T) {
	s := startServer(t, nil)
	c := dial(t, s.Addr())
	mustRegister(t, c, g1m, topics("TopicA"))
	mustRegister(t, c, g1s, nil)
	unregister(t, c, g1m)

	// The slave's address registers as the master: it leaves brokerId 1.
	promoted := g1s
	promoted.id = 0
	if rh := mustRegister(t, c, promoted, topics("TopicA", "TopicB")); rh.MasterAddr != g1s.addr || rh.HAServerAddr != g1s.ha {
		t.Errorf("promoted master answered %+v", rh)
	}
	if rd := mustRoute(t, c, "TopicB"); !reflect.DeepEqual(rd.BrokerDatas, []protocol.BrokerData{brokerData(promoted, promoted)}) {
		t.Errorf("route after promotion: %+v", rd)
	}

	// The master restarts on a new address: the old address is gone at once.
	moved := promoted
	moved.addr = "127.0.0.1:20911"
	mustRegister(t, c, moved, topics("TopicA"))
	live := s.LiveBrokers()
	if len(live) != 1 || live[0].Addr != moved.addr {
		t.Errorf("live brokers after an address change: %+v", live)
	}
	if rd := mustRoute(t, c, "TopicA"); !reflect.DeepEqual(rd.BrokerDatas, []protocol.BrokerData{brokerData(moved, moved)}) {
		t.Errorf("route after an address change: %+v", rd)
	}

	// An address moves to another group.
	other := broker{cluster: "c1", name: "g9", id: 0, addr: moved.addr}
	mustRegister(t, c, other, topics("TopicZ"))
	if _, err := getRoute(t, c, "TopicA"); !errors.Is(err, protocol.StatusTopicNotExist) {
		t.Errorf("g1 should be gone with its only member: %v", err)
	}
	if ci := s.ClusterInfo(); len(ci.Brokers) != 1 || ci.Brokers[0].BrokerName != "g9" {
		t.Errorf("cluster info: %+v", ci)
	}
}

// TestStaleMasterRefused: a deposed master (an older epoch) cannot displace the group's new master
// from the routes; once no master is listed, or with a newer epoch, a master registers.
func TestStaleMasterRefused(t *testing.T) {
	s := startServer(t, nil)
	c := dial(t, s.Addr())
	old := g1m
	old.epoch = 3
	mustRegister(t, c, old, topics("TopicA"))
	// Another member takes over in epoch 4.
	newer := broker{cluster: "c1", name: "g1", id: 0, addr: "127.0.0.1:20911", ha: "127.0.0.1:20912", epoch: 4}
	mustRegister(t, c, newer, topics("TopicA"))
	// The deposed master's late heartbeat as master is refused and changes nothing.
	if _, err := register(t, c, old, topics("TopicA")); !errors.Is(err, protocol.StatusNotMaster) || !strings.Contains(err.Error(), "epoch 3") {
		t.Fatalf("stale master registration: %v", err)
	}
	if rd := mustRoute(t, c, "TopicA"); !reflect.DeepEqual(rd.BrokerDatas, []protocol.BrokerData{brokerData(newer, newer)}) {
		t.Fatalf("route after a stale master's registration: %+v", rd)
	}
	// As a slave it registers; the next master registers with a newer epoch.
	slave := old
	slave.id = 2
	mustRegister(t, c, slave, nil)
	next := old
	next.epoch = 5
	mustRegister(t, c, next, topics("TopicA"))
	if rd := mustRoute(t, c, "TopicA"); rd.BrokerDatas[0].MasterAddr() != old.addr {
		t.Fatalf("route after the newer master: %+v", rd)
	}
	_ = s
}

func TestSlaveSeedsQueueDataWithoutMaster(t *testing.T) {
	s := startServer(t, nil)
	c := dial(t, s.Addr())
	// The NameServer starts while the master is down: the slave's topics make the route.
	mustRegister(t, c, g1s, topics("TopicA"))
	rd := mustRoute(t, c, "TopicA")
	if !reflect.DeepEqual(rd.BrokerDatas, []protocol.BrokerData{brokerData(g1s, g1s)}) {
		t.Errorf("route from a slave alone: %+v", rd)
	}
	// The master's list then defines the queue data.
	mustRegister(t, c, g1m, topics("TopicB"))
	if _, err := getRoute(t, c, "TopicA"); !errors.Is(err, protocol.StatusTopicNotExist) {
		t.Errorf("route of a topic the master does not list: %v", err)
	}
	mustRoute(t, c, "TopicB")
	_ = s
}

func TestClusterMismatchRejected(t *testing.T) {
	s := startServer(t, nil)
	c := dial(t, s.Addr())
	mustRegister(t, c, g1m, topics("TopicA"))
	mustRegister(t, c, g1s, nil)
	bad := g1s
	bad.cluster = "other"
	if _, err := register(t, c, bad, nil); !errors.Is(err, protocol.StatusRequestMalformed) {
		t.Errorf("registration into another cluster's group: %v", err)
	}
	// A group's only member may move the group to another cluster.
	unregister(t, c, g1s)
	moved := g1m
	moved.cluster = "c9"
	mustRegister(t, c, moved, topics("TopicA"))
	want := []protocol.ClusterEntry{{Name: "c9", BrokerNames: []string{"g1"}}}
	if ci := s.ClusterInfo(); !reflect.DeepEqual(ci.Clusters, want) {
		t.Errorf("clusters after moving g1: %+v", ci.Clusters)
	}
}

func TestTwoIndependentNameServers(t *testing.T) {
	s1 := startServer(t, nil)
	s2 := startServer(t, nil)
	c1 := dial(t, s1.Addr())
	c2 := dial(t, s2.Addr())

	mustRegister(t, c1, g1m, topics("TopicA"))
	// No broker has registered with the second: it cannot tell, and says so.
	if _, err := getRoute(t, c2, "TopicA"); !errors.Is(err, protocol.StatusNamesrvNotReady) {
		t.Errorf("second NameServer, which knows no broker: %v, want NAMESRV_NOT_READY", err)
	}
	mustRegister(t, c2, g1m, topics("TopicA"))
	unregister(t, c1, g1m)
	if _, err := getRoute(t, c1, "TopicA"); !errors.Is(err, protocol.StatusTopicNotExist) {
		t.Errorf("first NameServer after unregister: %v", err)
	}
	if rd := mustRoute(t, c2, "TopicA"); rd.BrokerDatas[0].MasterAddr() != g1m.addr {
		t.Errorf("second NameServer's route: %+v", rd)
	}
}

func TestMalformedRequests(t *testing.T) {
	s := startServer(t, nil)
	c := dial(t, s.Addr())
	ctx := callCtx(t)
	goodList := (&protocol.TopicConfigList{Topics: topics("TopicA")}).AppendTo(nil)

	cases := []struct {
		name   string
		code   protocol.RequestCode
		hdr    protocol.Header
		body   []byte
		status protocol.Status
	}{
		{"register garbage header", protocol.CodeRegisterBroker, rawHeader{0xff, 0xff, 1}, goodList, protocol.StatusRequestMalformed},
		{"register empty header", protocol.CodeRegisterBroker, nil, goodList, protocol.StatusRequestMalformed},
		{"register trailing bytes", protocol.CodeRegisterBroker, rawHeader(append(g1m.header().AppendTo(nil), 0)), goodList, protocol.StatusRequestMalformed},
		{"register garbage body", protocol.CodeRegisterBroker, g1m.header(), []byte{0, 0, 0, 9, 1}, protocol.StatusRequestMalformed},
		{"register huge count", protocol.CodeRegisterBroker, g1m.header(), []byte{0xff, 0xff, 0xff, 0xff}, protocol.StatusRequestMalformed},
		{"register empty broker name", protocol.CodeRegisterBroker, broker{cluster: "c", addr: "127.0.0.1:1"}.header(), goodList, protocol.StatusRequestMalformed},
		{"register empty cluster", protocol.CodeRegisterBroker, broker{name: "g", addr: "127.0.0.1:1"}.header(), goodList, protocol.StatusRequestMalformed},
		{"register bad address", protocol.CodeRegisterBroker, broker{cluster: "c", name: "g", addr: "nohost"}.header(), goodList, protocol.StatusRequestMalformed},
		{"register negative id", protocol.CodeRegisterBroker, broker{cluster: "c", name: "g", id: -1, addr: "127.0.0.1:1"}.header(), goodList, protocol.StatusRequestMalformed},
		{"register bad topic", protocol.CodeRegisterBroker, g1m.header(), (&protocol.TopicConfigList{Topics: topics("bad topic")}).AppendTo(nil), protocol.StatusTopicInvalid},
		{"register negative queues", protocol.CodeRegisterBroker, g1m.header(),
			(&protocol.TopicConfigList{Topics: []protocol.TopicConfig{{Topic: "T", ReadQueueNums: -1}}}).AppendTo(nil), protocol.StatusRequestMalformed},
		{"register bad perm", protocol.CodeRegisterBroker, g1m.header(),
			(&protocol.TopicConfigList{Topics: []protocol.TopicConfig{{Topic: "T", Perm: 64}}}).AppendTo(nil), protocol.StatusRequestMalformed},
		{"unregister garbage", protocol.CodeUnregisterBroker, rawHeader{0, 5, 'a'}, nil, protocol.StatusRequestMalformed},
		{"route garbage", protocol.CodeGetRouteInfoByTopic, rawHeader{0xff, 0xff}, nil, protocol.StatusRequestMalformed},
		{"route trailing", protocol.CodeGetRouteInfoByTopic, rawHeader{0, 1, 'T', 9}, nil, protocol.StatusRequestMalformed},
		{"cluster info with header", protocol.CodeGetBrokerClusterInfo, rawHeader{1}, nil, protocol.StatusRequestMalformed},
		{"code a NameServer does not serve", protocol.CodeSendMessage, nil, nil, protocol.StatusRequestCodeNotSupported},
	}
	for _, tc := range cases {
		resp, err := c.Call(ctx, tc.code, tc.hdr, tc.body)
		if err == nil {
			resp.Release()
			t.Errorf("%s: succeeded, want %s", tc.name, tc.status)
			continue
		}
		var pe *protocol.Error
		if !errors.As(err, &pe) || pe.Status != tc.status || pe.Remark == "" {
			t.Errorf("%s: %v, want %s with a remark", tc.name, err, tc.status)
		}
	}
	// The connection still serves, and nothing was registered.
	mustRegister(t, c, g1m, topics("TopicA"))
	if n := len(s.LiveBrokers()); n != 1 {
		t.Errorf("%d live brokers, want 1", n)
	}
}

func TestUnknownTopic(t *testing.T) {
	s := startServer(t, nil)
	c := dial(t, s.Addr())
	mustRegister(t, c, g1m, topics("TopicA"))
	_, err := getRoute(t, c, "NoSuchTopic")
	var pe *protocol.Error
	if !errors.As(err, &pe) || pe.Status != protocol.StatusTopicNotExist {
		t.Fatalf("route of an unknown topic: %v, want TOPIC_NOT_EXIST", err)
	}
	if _, ok := s.Route("NoSuchTopic"); ok {
		t.Error("Server.Route found an unknown topic")
	}
}

func TestGarbageFrameClosesOnlyThatConnection(t *testing.T) {
	s := startServer(t, nil)
	c := dial(t, s.Addr())
	mustRegister(t, c, g1m, topics("TopicA"))

	for _, garbage := range [][]byte{
		[]byte("GET / HTTP/1.1\r\nHost: x\r\n\r\n"),                    // not a frame at all
		{0, 0, 0, 12, 0, 105, 0, 9, 0, 0, 0, 1, 0, 0, 0, 0},            // unknown frame version
		{0xff, 0xff, 0xff, 0xff, 0, 105, 0, 1, 0, 0, 0, 1, 0, 0, 0, 0}, // longer than the maximum
	} {
		nc, err := net.Dial("tcp", s.Addr())
		if err != nil {
			t.Fatal(err)
		}
		if _, err := nc.Write(garbage); err != nil {
			t.Fatal(err)
		}
		_ = nc.SetReadDeadline(time.Now().Add(10 * time.Second))
		n, err := nc.Read(make([]byte, 64))
		if err != io.EOF {
			t.Errorf("garbage %q: read %d bytes, %v; want the server to close the connection", garbage, n, err)
		}
		_ = nc.Close()
	}
	if rd := mustRoute(t, c, "TopicA"); rd.BrokerDatas[0].MasterAddr() != g1m.addr {
		t.Errorf("route after garbage on other connections: %+v", rd)
	}
	if n := len(s.LiveBrokers()); n != 1 {
		t.Errorf("%d live brokers, want 1", n)
	}
}

func TestStartAndClose(t *testing.T) {
	s := startServer(t, nil)
	if err := s.Start(); !errors.Is(err, ErrAlreadyStarted) {
		t.Errorf("second Start: %v", err)
	}

	busy := New(Config{ListenAddr: s.Addr(), Logger: testLogger(t)})
	if err := busy.Start(); err == nil {
		t.Error("Start on a busy address succeeded")
	}
	_ = busy.Close()

	bad := New(Config{ListenAddr: "127.0.0.1:0", BrokerExpiry: -time.Second, Logger: testLogger(t)})
	if err := bad.Start(); !errors.Is(err, ErrConfig) {
		t.Errorf("Start with a negative expiry: %v", err)
	}

	unstarted := New(Config{})
	if unstarted.Addr() != "" {
		t.Errorf("Addr before Start = %q", unstarted.Addr())
	}
	_ = unstarted.Close()
	if err := unstarted.Start(); !errors.Is(err, ErrServerClosed) {
		t.Errorf("Start after Close: %v", err)
	}

	// Close ends open connections; a broker's connection sees it.
	other := New(Config{ListenAddr: "127.0.0.1:0", Logger: testLogger(t)})
	if err := other.Start(); err != nil {
		t.Fatal(err)
	}
	c := dial(t, other.Addr())
	mustRegister(t, c, g1m, topics("TopicA"))
	_ = other.Close()
	_ = other.Close()
	select {
	case <-c.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("client connection still open after Close")
	}
}

// TestConcurrentBrokers runs many brokers heartbeating, clients reading and connections closing
// at once, under -race, with the scanner expiring brokers on a moving clock.
func TestConcurrentBrokers(t *testing.T) {
	clk := testutil.NewClock()
	s := startServer(t, func(c *Config) {
		c.Now = clk.Now
		c.ScanInterval = time.Millisecond
		c.BrokerExpiry = 50 * time.Millisecond
		c.Logger = testLogger(t).With("test", "quiet")
	})
	const groups, rounds = 6, 40
	var wg sync.WaitGroup
	for g := range groups {
		for id := range 2 {
			wg.Go(func() {
				b := broker{cluster: fmt.Sprintf("c%d", g%2), name: fmt.Sprintf("g%d", g), id: int64(id),
					addr: fmt.Sprintf("127.0.0.1:%d", 30000+g*10+id)}
				c := dial(t, s.Addr())
				for r := range rounds {
					b.version = int64(r)
					if _, err := register(t, c, b, topics(fmt.Sprintf("T%d", r%3), "Shared")); err != nil {
						t.Errorf("register: %v", err)
						return
					}
					if r%10 == 9 { // reconnect: the old connection's close may remove the broker for a moment
						_ = c.Close()
						c = dial(t, s.Addr())
					}
				}
				if id == 0 && g%2 == 0 {
					unregister(t, c, b)
				}
			})
		}
	}
	wg.Go(func() {
		c := dial(t, s.Addr())
		for range rounds * 4 {
			// Before the clock first moves, the server is not ready (its registration period
			// is a nanosecond).
			if _, err := getRoute(t, c, "Shared"); err != nil && !errors.Is(err, protocol.StatusTopicNotExist) && !errors.Is(err, protocol.StatusNamesrvNotReady) {
				t.Errorf("route: %v", err)
			}
			if resp, err := c.Call(callCtx(t), protocol.CodeGetBrokerClusterInfo, nil, nil); err != nil && !errors.Is(err, protocol.StatusNamesrvNotReady) {
				t.Errorf("cluster info: %v", err)
			} else {
				resp.Release()
			}
			clk.Advance(time.Millisecond)
		}
	})
	wg.Wait()
	checkInvariants(t, s.table)
	clk.Advance(time.Second)
	testutil.Eventually(t, "every broker expires", func() bool { return len(s.LiveBrokers()) == 0 })
	if ci := s.ClusterInfo(); len(ci.Brokers) != 0 {
		t.Errorf("cluster info after expiry: %+v", ci)
	}
}

// TestLateSlaveRegistrationOfTheMasterRefused: a broker's registration as a slave, sent before
// it became its group's master and delivered late (retransmitted after a partition healed),
// must not take the master out of the routes; one of the master's own epoch (it gave its role
// up) is applied.
func TestLateSlaveRegistrationOfTheMasterRefused(t *testing.T) {
	s := startServer(t, nil)
	c := dial(t, s.Addr())
	master := g1m
	master.epoch = 27
	mustRegister(t, c, master, topics("TopicA"))
	late := master
	late.id, late.epoch = 3, 26
	if _, err := register(t, c, late, nil); !errors.Is(err, protocol.StatusServiceNotAvailable) || !strings.Contains(err.Error(), "late registration") {
		t.Fatalf("late slave registration of the master: %v", err)
	}
	if rd := mustRoute(t, c, "TopicA"); rd.BrokerDatas[0].MasterAddr() != master.addr {
		t.Fatalf("route after the late registration: %+v", rd)
	}
	demoted := master
	demoted.id = 3
	mustRegister(t, c, demoted, topics("TopicA"))
	if rd := mustRoute(t, c, "TopicA"); rd.BrokerDatas[0].MasterAddr() != "" {
		t.Fatalf("route after the master gave its role up: %+v", rd)
	}
	_ = s
}

// TestDeleteTopic: DELETE_TOPIC_IN_NAMESRV removes the topic from every group; a master that
// registers without it keeps it gone, one that still lists it brings it back, and a slave's
// registration does not; deleting an unknown topic succeeds.
func TestDeleteTopic(t *testing.T) {
	s := startServer(t, nil)
	c := dial(t, s.Addr())
	mustRegister(t, c, g1m, topics("Gone", "Kept"))
	mustRegister(t, c, g1s, topics("Gone", "Kept"))
	mustRegister(t, c, g2m, topics("Gone"))
	del := func(topic string) error {
		return c.CallDecode(callCtx(t), protocol.CodeDeleteTopicInNamesrv, &protocol.TopicHeader{Topic: topic}, nil, nil, nil)
	}
	if err := del("Gone"); err != nil {
		t.Fatal(err)
	}
	checkInvariants(t, s.table)
	if _, err := getRoute(t, c, "Gone"); !errors.Is(err, protocol.StatusTopicNotExist) {
		t.Fatalf("route of a deleted topic: %v, want TOPIC_NOT_EXIST", err)
	}
	if rd := mustRoute(t, c, "Kept"); len(rd.QueueDatas) != 1 {
		t.Fatalf("route of Kept = %+v", rd)
	}
	mustRegister(t, c, g1m, topics("Kept")) // the broker deleted it first
	mustRegister(t, c, g1s, topics("Gone", "Kept"))
	if _, err := getRoute(t, c, "Gone"); !errors.Is(err, protocol.StatusTopicNotExist) {
		t.Fatalf("after registrations without it (a slave's still listing it): %v, want TOPIC_NOT_EXIST", err)
	}
	mustRegister(t, c, g2m, topics("Gone")) // a broker still holding it
	if rd := mustRoute(t, c, "Gone"); len(rd.QueueDatas) != 1 || rd.QueueDatas[0].BrokerName != "g2" {
		t.Fatalf("a master still listing the topic: route %+v, want g2's", rd)
	}
	if err := del("NeverWas"); err != nil {
		t.Fatalf("deleting an unknown topic: %v", err)
	}
	if err := c.CallDecode(callCtx(t), protocol.CodeDeleteTopicInNamesrv, &protocol.TopicHeader{Topic: "bad topic"}, nil, nil, nil); !errors.Is(err, protocol.StatusTopicInvalid) {
		t.Fatalf("an invalid topic name: %v, want TOPIC_INVALID", err)
	}
	checkInvariants(t, s.table)
}

// TestGoneGroupsBounded: registrations that name ever new broker groups (one address moving
// from group to group, each left without a member) leave a bounded table: at most
// maxGoneGroups master epochs of gone groups are kept, the longest gone forgotten first with a
// line that says so, while a live group's epoch stays and still refuses a stale master.
func TestGoneGroupsBounded(t *testing.T) {
	var logs testutil.SyncBuffer
	s := startServer(t, func(c *Config) { c.Logger = slog.New(slog.NewTextHandler(&logs, nil)) })
	c := dial(t, s.Addr())
	live := broker{cluster: "c", name: "live", id: 0, addr: "10.0.0.1:10911", epoch: 7}
	mustRegister(t, c, live, nil)
	const flood = maxGoneGroups + 500
	for i := range flood {
		mustRegister(t, c, broker{cluster: "c", name: fmt.Sprintf("flood-%d", i), id: 0, addr: "10.0.0.2:10911", epoch: 1}, nil)
	}
	s.table.mu.RLock()
	epochs := len(s.table.masterEpochs)
	s.table.mu.RUnlock()
	// The live group, the flood's last group (its address is still registered) and the gone.
	if want := maxGoneGroups + 2; epochs > want {
		t.Fatalf("%d master epochs kept after %d groups came and went, want at most %d", epochs, flood, want)
	}
	if !strings.Contains(logs.String(), "forgetting the master epochs of those gone longest") {
		t.Fatal("no line says gone groups' master epochs are forgotten")
	}
	if _, err := register(t, c, broker{cluster: "c", name: "live", id: 0, addr: "10.0.0.3:10911", epoch: 6}, nil); err == nil {
		t.Fatal("a master of an older epoch than the live group's was accepted")
	}
}

// TestBrokersPerConnectionBounded: registrations on one connection that each name a new broker
// address are refused past maxBrokersPerConn, so that the tables stay bounded before the
// entries expire; another connection registers as usual, and the connection's brokers go when
// it closes.
func TestBrokersPerConnectionBounded(t *testing.T) {
	s := startServer(t, nil)
	flood, other := dial(t, s.Addr()), dial(t, s.Addr())
	const extra = 36
	refused := 0
	for i := range maxBrokersPerConn + extra {
		b := broker{cluster: "c", name: fmt.Sprintf("flood-%d", i), id: 0, addr: fmt.Sprintf("10.0.%d.%d:10911", i/256, i%256)}
		if _, err := register(t, flood, b, nil); err != nil {
			if !errors.Is(err, protocol.StatusNoPermission) {
				t.Fatalf("registration %d: %v", i, err)
			}
			refused++
		}
	}
	if refused != extra || len(s.LiveBrokers()) != maxBrokersPerConn {
		t.Fatalf("%d of %d registrations of new addresses on one connection refused, %d live; want %d refused, %d live",
			refused, maxBrokersPerConn+extra, len(s.LiveBrokers()), extra, maxBrokersPerConn)
	}
	mustRegister(t, flood, broker{cluster: "c", name: "flood-0", id: 0, addr: "10.0.0.0:10911"}, nil) // a registered one goes on
	mustRegister(t, other, g1m, nil)
	_ = flood.Close()
	testutil.Eventually(t, "the flood's brokers gone with its connection", func() bool { return len(s.LiveBrokers()) == 1 })
}
