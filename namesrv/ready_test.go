package namesrv

import (
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/petrel-mq/petrel/internal/testutil"
	"github.com/petrel-mq/petrel/protocol"
)

// TestReadiness: the rule of readiness, as a table.
func TestReadiness(t *testing.T) {
	const period = 30 * time.Second
	cases := []struct {
		name       string
		uptime     time.Duration
		period     time.Duration
		registered bool
		want       string // "" for ready, else a piece of the reason
	}{
		{"just started", 0, period, false, "started 0s ago"},
		{"just started, a broker registered", 0, period, true, "brokers register every 30s"},
		{"within the period, brokers registered", period - time.Millisecond, period, true, "started 29.999s ago"},
		{"one period up, brokers registered", period, period, true, ""},
		{"long up, brokers registered", time.Hour, period, true, ""},
		{"one period up, no broker ever", period, period, false, "no broker has registered"},
		{"long up, no broker ever", time.Hour, period, false, "in the 1h0m0s since it started"},
		{"the clock went back", -time.Second, period, true, "started 0s ago"},
		{"a short period", time.Millisecond, time.Nanosecond, true, ""},
	}
	for _, tc := range cases {
		got := readiness(tc.uptime, tc.period, tc.registered)
		switch {
		case tc.want == "" && got != "":
			t.Errorf("%s: not ready (%s), want ready", tc.name, got)
		case tc.want != "" && !strings.Contains(got, tc.want):
			t.Errorf("%s: %q, want a reason with %q", tc.name, got, tc.want)
		case tc.want != "" && !strings.Contains(got, "ask another NameServer"):
			t.Errorf("%s: %q does not say to ask another NameServer", tc.name, got)
		}
	}
}

// TestNotReadyAnswers: a NameServer in its first registration period answers NAMESRV_NOT_READY,
// never TOPIC_NOT_EXIST, for a topic it does not know, and for the cluster table; a topic a
// broker registered is served from the first registration on. Past the period, an unknown
// topic is TOPIC_NOT_EXIST and the table is served.
func TestNotReadyAnswers(t *testing.T) {
	clk := testutil.NewClock()
	s := startServer(t, func(c *Config) {
		c.Now = clk.Now
		c.RegistrationPeriod = 30 * time.Second
	})
	c := dial(t, s.Addr())
	notReady := func(what string, err error) {
		t.Helper()
		var pe *protocol.Error
		if !errors.As(err, &pe) || pe.Status != protocol.StatusNamesrvNotReady || !pe.Retriable() ||
			!strings.Contains(pe.Remark, "ask another NameServer") {
			t.Fatalf("%s: %v, want NAMESRV_NOT_READY saying to ask another NameServer", what, err)
		}
	}
	clusterInfo := func() error {
		resp, err := c.Call(callCtx(t), protocol.CodeGetBrokerClusterInfo, nil, nil)
		resp.Release()
		return err
	}

	_, err := getRoute(t, c, "TopicA")
	notReady("route before any registration", err)
	notReady("cluster table before any registration", clusterInfo())

	mustRegister(t, c, g1m, topics("TopicA"))
	clk.Advance(10 * time.Second)
	want := protocol.TopicRouteData{QueueDatas: []protocol.QueueData{wantQueue("g1")}, BrokerDatas: []protocol.BrokerData{brokerData(g1m, g1m)}}
	if got := mustRoute(t, c, "TopicA"); !reflect.DeepEqual(got, want) {
		t.Fatalf("route of a registered topic within the period:\n got %+v\nwant %+v", got, want)
	}
	_, err = getRoute(t, c, "NoSuchTopic")
	notReady("unknown topic within the period", err)
	notReady("cluster table within the period", clusterInfo())

	clk.Advance(20 * time.Second)
	if _, err := getRoute(t, c, "NoSuchTopic"); !errors.Is(err, protocol.StatusTopicNotExist) {
		t.Fatalf("unknown topic after the period: %v, want TOPIC_NOT_EXIST", err)
	}
	if ci := getClusterInfo(t, c); len(ci.Brokers) != 1 {
		t.Fatalf("cluster table after the period: %+v", ci)
	}
	// Ready stays ready: the broker leaving takes nothing back.
	unregister(t, c, g1m)
	if _, err := getRoute(t, c, "TopicA"); !errors.Is(err, protocol.StatusTopicNotExist) {
		t.Fatalf("route after the only broker left: %v, want TOPIC_NOT_EXIST", err)
	}
}

// TestNotReadyWithoutBrokers: past its registration period, a NameServer no broker has
// registered with still answers NAMESRV_NOT_READY: it knows nothing at all.
func TestNotReadyWithoutBrokers(t *testing.T) {
	clk := testutil.NewClock()
	s := startServer(t, func(c *Config) {
		c.Now = clk.Now
		c.RegistrationPeriod = time.Second
	})
	c := dial(t, s.Addr())
	clk.Advance(time.Minute)
	_, err := getRoute(t, c, "TopicA")
	if !errors.Is(err, protocol.StatusNamesrvNotReady) || !strings.Contains(err.Error(), "no broker has registered") {
		t.Fatalf("route from a NameServer no broker registered with: %v", err)
	}
	// A refused registration does not count.
	if _, err := register(t, c, broker{cluster: "c", name: "g", addr: "nohost"}, nil); err == nil {
		t.Fatal("a registration with a bad address was accepted")
	}
	if _, err := getRoute(t, c, "TopicA"); !errors.Is(err, protocol.StatusNamesrvNotReady) {
		t.Fatalf("route after a refused registration: %v", err)
	}
	mustRegister(t, c, g1m, nil)
	if _, err := getRoute(t, c, "TopicA"); !errors.Is(err, protocol.StatusTopicNotExist) {
		t.Fatalf("route after a registration: %v, want TOPIC_NOT_EXIST", err)
	}
}
