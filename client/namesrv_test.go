package client

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/petrel-mq/petrel/internal/fakebroker"
	"github.com/petrel-mq/petrel/protocol"
	"github.com/petrel-mq/petrel/protocol/rpc"
)

func TestClassifyNameServer(t *testing.T) {
	status := func(s protocol.Status) error {
		return fmt.Errorf("wrapped: %w", &protocol.Error{Status: s, Remark: "r"})
	}
	cases := []struct {
		name       string
		err        error
		emptyRoute bool
		gaveUp     bool
		want       nsOutcome
	}{
		{"answer", nil, false, false, nsOK},
		{"empty route", nil, true, false, nsNoRoute},
		{"not ready", status(protocol.StatusNamesrvNotReady), false, false, nsNotReady},
		{"no route", status(protocol.StatusTopicNotExist), false, false, nsNoRoute},
		{"connection refused", fmt.Errorf("%w: dial: refused", ErrBrokerUnavailable), false, false, nsUnavailable},
		{"connection closed", fmt.Errorf("request: %w", rpc.ErrClosed), false, false, nsUnavailable},
		{"timeout", context.DeadlineExceeded, false, false, nsUnavailable},
		{"busy", status(protocol.StatusSystemBusy), false, false, nsUnavailable},
		{"shutting down", status(protocol.StatusShuttingDown), false, false, nsUnavailable},
		{"malformed", status(protocol.StatusRequestMalformed), false, false, nsRefused},
		{"bad topic", status(protocol.StatusTopicInvalid), false, false, nsRefused},
		{"not supported", status(protocol.StatusRequestCodeNotSupported), false, false, nsRefused},
		{"caller gave up", context.Canceled, false, true, nsGaveUp},
		{"caller gave up during a not-ready answer", status(protocol.StatusNamesrvNotReady), false, true, nsGaveUp},
		{"client closed", ErrClientClosed, false, false, nsGaveUp},
	}
	for _, tc := range cases {
		if got := classifyNameServer(tc.err, tc.emptyRoute, tc.gaveUp); got != tc.want {
			t.Errorf("%s: %d, want %d", tc.name, got, tc.want)
		}
	}
}

func TestAfterNameServer(t *testing.T) {
	cases := []struct {
		o                 nsOutcome
		askNext, remember bool
	}{
		{nsOK, false, true},
		{nsRefused, false, true},
		{nsGaveUp, false, false},
		{nsNotReady, true, false},
		{nsNoRoute, true, false},
		{nsUnavailable, true, false},
	}
	for _, tc := range cases {
		if n, r := afterNameServer(tc.o); n != tc.askNext || r != tc.remember {
			t.Errorf("afterNameServer(%d) = %v, %v; want %v, %v", tc.o, n, r, tc.askNext, tc.remember)
		}
	}
}

func TestNameServerVerdict(t *testing.T) {
	cases := []struct {
		name        string
		outcomes    []nsOutcome
		idx         int
		unavailable bool
	}{
		{"all silent", []nsOutcome{nsUnavailable, nsUnavailable, nsUnavailable}, 0, true},
		{"all not ready", []nsOutcome{nsNotReady, nsNotReady}, 0, true},
		{"not ready and silent", []nsOutcome{nsUnavailable, nsNotReady, nsUnavailable}, 1, true},
		{"a ready one has no route", []nsOutcome{nsNotReady, nsNoRoute, nsUnavailable}, 1, false},
		{"all no route", []nsOutcome{nsNoRoute, nsNoRoute}, 0, false},
		{"refused after not ready", []nsOutcome{nsNotReady, nsRefused}, 1, false},
		{"gave up after silence", []nsOutcome{nsUnavailable, nsGaveUp}, 1, false},
		{"one refusal", []nsOutcome{nsRefused}, 0, false},
	}
	for _, tc := range cases {
		if idx, u := nameServerVerdict(tc.outcomes); idx != tc.idx || u != tc.unavailable {
			t.Errorf("%s: %d, %v; want %d, %v", tc.name, idx, u, tc.idx, tc.unavailable)
		}
	}
}

func TestReplaceRoute(t *testing.T) {
	full := protocol.TopicRouteData{
		QueueDatas:  []protocol.QueueData{{BrokerName: "a", ReadQueueNums: 4, WriteQueueNums: 4, Perm: protocol.PermReadWrite}},
		BrokerDatas: []protocol.BrokerData{{Cluster: "c", BrokerName: "a", Addrs: []protocol.BrokerAddr{{BrokerID: 0, Addr: "127.0.0.1:1"}}}},
	}
	other := full
	other.QueueDatas = []protocol.QueueData{{BrokerName: "a", ReadQueueNums: 8, WriteQueueNums: 8, Perm: protocol.PermReadWrite}}
	noQueues := protocol.TopicRouteData{BrokerDatas: full.BrokerDatas}
	noGroups := protocol.TopicRouteData{QueueDatas: full.QueueDatas}
	cached := newTopicRoute("T", full, time.Now())
	cachedEmpty := newTopicRoute("T", protocol.TopicRouteData{}, time.Now())
	cases := []struct {
		name    string
		cached  *topicRoute
		fetched protocol.TopicRouteData
		want    bool
	}{
		{"first route", nil, full, true},
		{"a newer route", cached, other, true},
		{"the same route", cached, full, true},
		{"empty over a route", cached, protocol.TopicRouteData{}, false},
		{"no queues over a route", cached, noQueues, false},
		{"no groups over a route", cached, noGroups, false},
		{"empty, nothing cached", nil, protocol.TopicRouteData{}, true},
		{"empty over empty", cachedEmpty, noQueues, true},
		{"a route over empty", cachedEmpty, full, true},
	}
	for _, tc := range cases {
		if got := replaceRoute(tc.cached, &tc.fetched); got != tc.want {
			t.Errorf("%s: %v, want %v", tc.name, got, tc.want)
		}
	}
}

// TestNameServerWithoutTheTopicSkipped: the first NameServer does not know the topic (it
// answers TOPIC_NOT_EXIST: it lost its brokers); the client asks the next, which does, and
// sends. It keeps asking first the last one that answered ready.
func TestNameServerWithoutTheTopicSkipped(t *testing.T) {
	empty := fakebroker.New(t)
	full, _, _ := twoGroups(t, 1)
	c := newTestClient(t, empty.Addr()+";"+full.Addr())
	p := newTestProducer(t, c)
	ctx := testCtx(t, 10*time.Second)
	if _, err := p.SendSync(ctx, &Message{Topic: "T", Body: []byte("x")}); err != nil {
		t.Fatalf("send with the first NameServer lacking the topic: %v", err)
	}
	if c.nsFirst.Load() != 1 {
		t.Fatalf("the NameServer that answered is not asked first (nsFirst %d)", c.nsFirst.Load())
	}
	// A topic neither knows: TOPIC_NOT_EXIST, each NameServer's answer in the message.
	_, err := NewAdmin(c).TopicRoute(ctx, "Nowhere")
	if !errors.Is(err, ErrTopicNotExist) || errors.Is(err, ErrNameServerUnavailable) || !strings.Contains(err.Error(), "other NameServers") {
		t.Fatalf("route of a topic no NameServer knows: %v", err)
	}
	// The cached route survives a refresh that finds none: the first NameServer, asked
	// first now, and the second both lose the topic.
	c.nsFirst.Store(0)
	full.StopNameServer()
	c.routesMu.RLock()
	slot := c.routes["T"]
	c.routesMu.RUnlock()
	cur := slot.route.Load()
	slot.mu.Lock()
	slot.lastAttempt = time.Time{} // no minimum gap since the last fetch
	slot.mu.Unlock()
	r, err := c.refreshRoute(ctx, "T", cur)
	if !errors.Is(err, ErrTopicNotExist) || r != cur || slot.route.Load() != cur {
		t.Fatalf("refresh with no NameServer knowing the topic: %v; want the cached route kept and TOPIC_NOT_EXIST", err)
	}
}
