package namesrv

import (
	"context"
	"errors"
	"log/slog"
	"maps"
	"testing"
	"time"

	"github.com/petrel-mq/petrel/internal/testutil"
	"github.com/petrel-mq/petrel/protocol"
	"github.com/petrel-mq/petrel/protocol/rpc"
)

func TestMain(m *testing.M) { testutil.VerifyTestMain(m) }

func testLogger(t testing.TB) *slog.Logger {
	return slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelDebug}))
}

// startServer starts a NameServer on a free loopback port; edit adjusts the config first. The
// server is closed (and its tables checked) when the test ends. Its registration period is a
// nanosecond, so that it is ready (see readiness) from its first registration on: tests of
// readiness set their own.
func startServer(t testing.TB, edit func(*Config)) *Server {
	t.Helper()
	cfg := Config{ListenAddr: "127.0.0.1:0", Logger: testLogger(t), RegistrationPeriod: time.Nanosecond}
	if edit != nil {
		edit(&cfg)
	}
	s := New(cfg)
	if err := s.Start(); err != nil {
		t.Fatalf("Start: %v", err)
	}
	t.Cleanup(func() {
		checkInvariants(t, s.table)
		if err := s.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return s
}

func dial(t testing.TB, addr string) *rpc.Conn {
	t.Helper()
	c, err := rpc.Dial(context.Background(), addr, rpc.Options{})
	if err != nil {
		t.Fatalf("Dial: %v", err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

func callCtx(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// broker describes a broker registration for tests.
type broker struct {
	cluster, name string
	id            int64
	addr, ha      string
	version       int64
	epoch         uint32
}

func (b broker) header() *protocol.BrokerHeader {
	return &protocol.BrokerHeader{ClusterName: b.cluster, BrokerName: b.name, BrokerID: b.id,
		BrokerAddr: b.addr, HAServerAddr: b.ha, DataVersion: b.version, Epoch: b.epoch}
}

func topics(names ...string) []protocol.TopicConfig {
	out := make([]protocol.TopicConfig, len(names))
	for i, n := range names {
		out[i] = protocol.TopicConfig{Topic: n, ReadQueueNums: 8, WriteQueueNums: 8, Perm: protocol.PermReadWrite}
	}
	return out
}

func register(t testing.TB, c *rpc.Conn, b broker, tcs []protocol.TopicConfig) (protocol.RegisterBrokerResponseHeader, error) {
	t.Helper()
	list := protocol.TopicConfigList{Topics: tcs}
	var rh protocol.RegisterBrokerResponseHeader
	err := c.CallDecode(callCtx(t), protocol.CodeRegisterBroker, b.header(), list.AppendTo(nil), &rh, nil)
	return rh, err
}

func mustRegister(t testing.TB, c *rpc.Conn, b broker, tcs []protocol.TopicConfig) protocol.RegisterBrokerResponseHeader {
	t.Helper()
	rh, err := register(t, c, b, tcs)
	if err != nil {
		t.Fatalf("register %+v: %v", b, err)
	}
	return rh
}

func unregister(t testing.TB, c *rpc.Conn, b broker) {
	t.Helper()
	if err := c.CallDecode(callCtx(t), protocol.CodeUnregisterBroker, b.header(), nil, nil, nil); err != nil {
		t.Fatalf("unregister %+v: %v", b, err)
	}
}

func getRoute(t testing.TB, c *rpc.Conn, topic string) (protocol.TopicRouteData, error) {
	t.Helper()
	var rd protocol.TopicRouteData
	err := c.CallDecode(callCtx(t), protocol.CodeGetRouteInfoByTopic, &protocol.TopicHeader{Topic: topic}, nil, nil, &rd)
	return rd, err
}

func mustRoute(t testing.TB, c *rpc.Conn, topic string) protocol.TopicRouteData {
	t.Helper()
	rd, err := getRoute(t, c, topic)
	if err != nil {
		t.Fatalf("route %q: %v", topic, err)
	}
	return rd
}

// served calls for the cluster table on c and fails the test unless the NameServer answered
// it: with the table, or NAMESRV_NOT_READY from a server no broker has registered with.
func served(t testing.TB, c *rpc.Conn) {
	t.Helper()
	resp, err := c.Call(callCtx(t), protocol.CodeGetBrokerClusterInfo, nil, nil)
	if err != nil && !errors.Is(err, protocol.StatusNamesrvNotReady) {
		t.Fatal(err)
	}
	resp.Release()
}

func getClusterInfo(t testing.TB, c *rpc.Conn) protocol.ClusterInfo {
	t.Helper()
	var ci protocol.ClusterInfo
	if err := c.CallDecode(callCtx(t), protocol.CodeGetBrokerClusterInfo, nil, nil, nil, &ci); err != nil {
		t.Fatalf("cluster info: %v", err)
	}
	return ci
}

// rawHeader sends arbitrary bytes as a request header.
type rawHeader []byte

func (h rawHeader) AppendTo(dst []byte) []byte { return append(dst, h...) }
func (h rawHeader) ReadFrom([]byte) error      { return nil }

// checkInvariants verifies the invariants documented on routeTable.
func checkInvariants(t testing.TB, tb *routeTable) {
	t.Helper()
	tb.mu.RLock()
	defer tb.mu.RUnlock()
	for name, g := range tb.groups {
		if g.name != name {
			t.Errorf("group %q stored under %q", g.name, name)
		}
		if len(g.addrs) == 0 {
			t.Errorf("group %q has no member", name)
		}
		for id, addr := range g.addrs {
			lb := tb.live[addr]
			if lb == nil || lb.brokerName != name || lb.brokerID != id || lb.cluster != g.cluster {
				t.Errorf("member %d %s of group %q has live entry %+v", id, addr, name, lb)
			}
		}
		if _, ok := tb.clusters[g.cluster][name]; !ok {
			t.Errorf("group %q missing from cluster %q", name, g.cluster)
		}
		for topic := range g.topics {
			if _, ok := tb.topics[topic][name]; !ok {
				t.Errorf("group %q lists topic %q without queue data", name, topic)
			}
		}
	}
	byPeer := map[*rpc.Peer]int{}
	for _, lb := range tb.live {
		if lb.peer != nil {
			byPeer[lb.peer]++
		}
	}
	if !maps.Equal(byPeer, tb.perPeer) {
		t.Errorf("brokers counted per connection %v, live brokers per connection %v", tb.perPeer, byPeer)
	}
	if len(tb.gone) > maxGoneGroups {
		t.Errorf("%d gone groups' master epochs kept, at most %d allowed", len(tb.gone), maxGoneGroups)
	}
	for name := range tb.gone {
		if _, ok := tb.masterEpochs[name]; tb.groups[name] != nil || !ok {
			t.Errorf("gone group %q has a group (%v) or no master epoch (%v)", name, tb.groups[name] != nil, !ok)
		}
	}
	for name := range tb.masterEpochs {
		if _, ok := tb.gone[name]; tb.groups[name] == nil && !ok {
			t.Errorf("master epoch of group %q, neither live nor gone", name)
		}
	}
	for addr, lb := range tb.live {
		if g := tb.groups[lb.brokerName]; g == nil || g.addrs[lb.brokerID] != addr {
			t.Errorf("live broker %s (%s/%d) is not a member of its group", addr, lb.brokerName, lb.brokerID)
		}
	}
	for cluster, names := range tb.clusters {
		if len(names) == 0 {
			t.Errorf("cluster %q is empty", cluster)
		}
		for name := range names {
			if g := tb.groups[name]; g == nil || g.cluster != cluster {
				t.Errorf("cluster %q lists group %q of another cluster or none", cluster, name)
			}
		}
	}
	for topic, byGroup := range tb.topics {
		if len(byGroup) == 0 {
			t.Errorf("topic %q has no group", topic)
		}
		for name := range byGroup {
			g := tb.groups[name]
			if g == nil {
				t.Errorf("topic %q has queue data of missing group %q", topic, name)
				continue
			}
			if _, ok := g.topics[topic]; !ok {
				t.Errorf("topic %q has queue data of group %q, which does not list it", topic, name)
			}
		}
	}
}
