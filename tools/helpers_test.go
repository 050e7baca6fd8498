package tools

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"github.com/petrel-mq/petrel/client"
	"github.com/petrel-mq/petrel/internal/testcluster"
	"github.com/petrel-mq/petrel/internal/testutil"
	"github.com/petrel-mq/petrel/protocol"
)

func TestMain(m *testing.M) { testutil.VerifyTestMain(m) }

// Tests run the commands against a real NameServer and real brokers, in-process on loopback
// (internal/testcluster), with data under t.TempDir().

// testWriter writes what a command prints into the test's log, a line at a time.
type testWriter struct{ t testing.TB }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(string(bytes.TrimRight(p, "\n")))
	return len(p), nil
}

// testCluster is a NameServer, broker groups of one master each registered with it, and a
// client and Admin on it.
type testCluster struct {
	t      *testing.T
	c      *testcluster.Cluster
	client *client.Client
	admin  *client.Admin
}

// startCluster starts a NameServer and one master per name, all in cluster DefaultCluster,
// registered with the NameServer.
func startCluster(t *testing.T, brokerNames ...string) *testCluster {
	t.Helper()
	var groups []testcluster.GroupSpec
	for _, name := range brokerNames {
		groups = append(groups, testcluster.GroupSpec{Name: name})
	}
	tc := &testCluster{t: t, c: testcluster.New(t, testcluster.Options{}, groups...)}
	c, a, err := NewAdmin(context.Background(), tc.c.NamesrvAddr(), 2*time.Second, testWriter{t})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	tc.client, tc.admin = c, a
	return tc
}

func (tc *testCluster) addr(name string) string { return tc.c.Group(name).Member(0).Addr() }

// createTopic creates topic on every master with queues queues and waits for its route.
func (tc *testCluster) createTopic(topic string, queues int32) {
	tc.t.Helper()
	ctx := ctx5s(tc.t)
	cfg := protocol.TopicConfig{Topic: topic, ReadQueueNums: queues, WriteQueueNums: queues, Perm: protocol.PermReadWrite}
	if _, err := tc.admin.CreateTopic(ctx, "DefaultCluster", cfg); err != nil {
		tc.t.Fatal(err)
	}
	if err := tc.admin.WaitTopicRoute(ctx, topic, len(tc.c.Groups())); err != nil {
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
