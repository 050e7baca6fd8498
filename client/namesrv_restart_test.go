package client

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/petrel-mq/petrel/broker"
	"github.com/petrel-mq/petrel/internal/faultproxy"
	"github.com/petrel-mq/petrel/internal/testcluster"
	"github.com/petrel-mq/petrel/internal/testutil"
	"github.com/petrel-mq/petrel/namesrv"
)

// TestRestartedNameServer: three NameServers, one broker, topic N1. The second NameServer is
// stopped and a fresh one, knowing nothing, started in its place; the broker reaches it
// through a proxy that stays cut until the test has checked what fresh clients get, so the
// NameServer has heard from no broker yet (as after a kill -9, until the brokers notice).
//
//   - It answers NAMESRV_NOT_READY, not TOPIC_NOT_EXIST, for the topic and for the cluster
//     table, within its registration period.
//   - New clients given "ns2;ns1;ns3" send at once, three times five messages: they ask the
//     next NameServer.
//   - Once the proxy heals, the broker registers with it, which then routes N1 though its
//     registration period has not passed.
func TestRestartedNameServer(t *testing.T) {
	proxy, err := faultproxy.Start("127.0.0.1:1") // its target is set once the NameServers listen
	if err != nil {
		t.Fatal(err)
	}
	defer proxy.Close()
	var brokerNamesrvAddr string // the broker's namesrvAddr: NameServer 2 through the proxy
	rc := testcluster.New(t, testcluster.Options{NameServers: 3, Config: func(cfg *broker.Config) {
		cfg.NamesrvAddr = brokerNamesrvAddr
	}})
	nss := rc.NameServers()
	proxy.SetTarget(nss[1].Addr())
	brokerNamesrvAddr = nss[0].Addr() + ";" + proxy.Addr() + ";" + nss[2].Addr()
	rc.AddGroup(testcluster.GroupSpec{Name: "broker-a"})
	rc.CreateTopic("N1", 4)
	ctx := testCtx(t, 60*time.Second)

	proxy.Partition()
	ns2 := rc.RestartNameServer(1, func(cfg *namesrv.Config) { cfg.RegistrationPeriod = time.Hour })
	list := ns2.Addr() + ";" + nss[0].Addr() + ";" + nss[2].Addr()

	alone := NewAdmin(newTestClient(t, ns2.Addr()))
	if _, err := alone.TopicRoute(ctx, "N1"); !errors.Is(err, ErrNamesrvNotReady) || errors.Is(err, ErrTopicNotExist) {
		t.Fatalf("the restarted NameServer's route of N1: %v; want NAMESRV_NOT_READY", err)
	}
	if _, err := alone.ClusterInfo(ctx); !errors.Is(err, ErrNamesrvNotReady) {
		t.Fatalf("the restarted NameServer's cluster table: %v; want NAMESRV_NOT_READY", err)
	}

	for round := range 3 {
		c := newTestClient(t, list)
		p := newTestProducer(t, c)
		for i := range 5 {
			if _, err := p.SendSync(ctx, &Message{Topic: "N1", Body: fmt.Appendf(nil, "round %d message %d", round, i)}); err != nil {
				t.Fatalf("round %d, send %d with NameServers %q: %v", round, i, list, err)
			}
		}
		if _, err := NewAdmin(c).ClusterInfo(ctx); err != nil {
			t.Fatalf("round %d: cluster table with NameServers %q: %v", round, list, err)
		}
		if first := c.nsFirst.Load(); first == 0 {
			t.Fatalf("round %d: the NameServer that is not ready is asked first", round)
		}
	}

	proxy.Heal()
	testutil.Eventually(t, "the broker registered with the restarted NameServer", func() bool {
		_, ok := ns2.Route("N1")
		return ok
	})
	if r, err := alone.TopicRoute(ctx, "N1"); err != nil || len(r.QueueDatas) != 1 {
		t.Fatalf("the restarted NameServer's route of N1 once the broker registered: %+v, %v", r, err)
	}
	if _, err := alone.TopicRoute(ctx, "NoSuchTopic"); !errors.Is(err, ErrNamesrvNotReady) {
		t.Fatalf("the restarted NameServer's route of an unknown topic within its period: %v", err)
	}
}
