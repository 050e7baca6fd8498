package tools

import (
	"bytes"
	"context"
	"log/slog"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/petrel-mq/petrel/broker"
	"github.com/petrel-mq/petrel/client"
	"github.com/petrel-mq/petrel/internal/testutil"
	"github.com/petrel-mq/petrel/namesrv"
	"github.com/petrel-mq/petrel/protocol"
	"github.com/petrel-mq/petrel/protocol/rpc"
)

func TestMain(m *testing.M) { testutil.VerifyTestMain(m) }

// Tests run the commands against a real NameServer and real brokers, in-process on loopback,
// with data under t.TempDir().

type testWriter struct{ t testing.TB }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(string(bytes.TrimRight(p, "\n")))
	return len(p), nil
}

func testLogger(t testing.TB) *slog.Logger {
	return slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelWarn}))
}

// testCluster is a NameServer, brokers registered with it, and a client and Admin on it.
type testCluster struct {
	t       *testing.T
	ns      *namesrv.Server
	brokers map[string]*broker.Broker // by broker name
	client  *client.Client
	admin   *client.Admin
}

// startCluster starts a NameServer and one master per name, all in cluster DefaultCluster, and
// waits until the NameServer lists them.
func startCluster(t *testing.T, brokerNames ...string) *testCluster {
	t.Helper()
	// Made before the cleanups below, so it is removed after the brokers are closed.
	dir := t.TempDir()
	ns := namesrv.New(namesrv.Config{ListenAddr: "127.0.0.1:0", Logger: testLogger(t)})
	if err := ns.Start(); err != nil {
		t.Fatal(err)
	}
	tc := &testCluster{t: t, ns: ns, brokers: map[string]*broker.Broker{}}
	t.Cleanup(func() { _ = ns.Close() })
	for _, name := range brokerNames {
		cfg := broker.DefaultConfig()
		cfg.BrokerName = name
		cfg.ListenPort = 0
		cfg.BindAddress = "127.0.0.1"
		cfg.NamesrvAddr = ns.Addr()
		cfg.StorePathRootDir = filepath.Join(dir, name)
		cfg.MappedFileSizeCommitLog = 1 << 20
		cfg.MaxFrameSize = 512 << 10 // a frame must fit a segment
		cfg.MaxMessageSize = 256 << 10
		cfg.ConsumeQueueFileEntries = 1024
		cfg.RegisterNameServerPeriod = 200 * time.Millisecond
		cfg.ShutdownGracePeriod = 2 * time.Second
		cfg.NumEventLoop = 2
		b, err := broker.New(cfg, testLogger(t))
		if err != nil {
			t.Fatal(err)
		}
		if err := b.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = b.Close() })
		tc.brokers[name] = b
	}
	c, a, err := NewAdmin(context.Background(), ns.Addr(), 2*time.Second, testWriter{t})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	tc.client, tc.admin = c, a
	if len(brokerNames) > 0 {
		testutil.Eventually(t, "brokers registered", func() bool {
			ms, err := a.ClusterMasters(context.Background(), "DefaultCluster")
			return err == nil && len(ms) == len(brokerNames)
		})
	}
	return tc
}

func (tc *testCluster) addr(name string) string { return tc.brokers[name].Addr() }

// createTopic creates topic on every master with queues queues and waits for its route.
func (tc *testCluster) createTopic(topic string, queues int32) {
	tc.t.Helper()
	ctx := ctx5s(tc.t)
	cfg := protocol.TopicConfig{Topic: topic, ReadQueueNums: queues, WriteQueueNums: queues, Perm: protocol.PermReadWrite}
	if _, err := tc.admin.CreateTopic(ctx, "DefaultCluster", cfg); err != nil {
		tc.t.Fatal(err)
	}
	if err := tc.admin.WaitTopicRoute(ctx, topic, len(tc.brokers)); err != nil {
		tc.t.Fatal(err)
	}
}

// send sends one message per body through a producer and returns the results.
func (tc *testCluster) send(topic string, bodies ...string) []client.SendResult {
	tc.t.Helper()
	p, err := client.NewProducer(tc.client)
	if err != nil {
		tc.t.Fatal(err)
	}
	defer p.Close(context.Background())
	var out []client.SendResult
	for _, b := range bodies {
		r, err := p.SendSync(ctx5s(tc.t), &client.Message{Topic: topic, Body: []byte(b)})
		if err != nil {
			tc.t.Fatalf("send: %v", err)
		}
		out = append(out, r)
	}
	return out
}

// registerDeadBroker registers, on the NameServer, a broker group whose master address accepts
// no connection. The registration lasts until the test ends (the NameServer drops a broker
// whose registering connection closes).
func (tc *testCluster) registerDeadBroker(name string) string {
	tc.t.Helper()
	dead := testutil.FreeAddrs(tc.t, 1)[0]
	conn, err := rpc.Dial(context.Background(), tc.ns.Addr(), rpc.Options{})
	if err != nil {
		tc.t.Fatal(err)
	}
	tc.t.Cleanup(func() { _ = conn.Close() })
	h := protocol.BrokerHeader{ClusterName: "DefaultCluster", BrokerName: name, BrokerID: 0, BrokerAddr: dead, DataVersion: 1}
	var body protocol.TopicConfigList
	if err := conn.CallDecode(ctx5s(tc.t), protocol.CodeRegisterBroker, &h, body.AppendTo(nil), nil, nil); err != nil {
		tc.t.Fatal(err)
	}
	return dead
}

func ctx5s(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// lines splits output into lines, without the empty last one.
func lines(s string) []string {
	return strings.Split(strings.TrimSuffix(s, "\n"), "\n")
}

// cells splits a table row into its cells (runs of two or more spaces separate them; a cell
// may hold single spaces, as "#Broker Name").
func cells(row string) []string {
	var out []string
	for _, c := range strings.Split(strings.TrimRight(row, " "), "  ") {
		if c = strings.TrimSpace(c); c != "" {
			out = append(out, c)
		}
	}
	return out
}
