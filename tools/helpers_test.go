package tools

import (
	"bytes"
	"context"
	"slices"
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
	tc.client, tc.admin = newAdmin(t, tc.c.NamesrvAddr())
	return tc
}

// newAdmin returns a Client on the ';'-separated NameServers ("": none) and an Admin on it,
// closed when the test ends; the client logs into the test's log.
func newAdmin(t *testing.T, nameServers string) (*client.Client, *client.Admin) {
	t.Helper()
	c, a, err := NewAdmin(context.Background(), nameServers, 5*time.Second, testWriter{t})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c, a
}

// checkPrinted checks that a command run by run succeeded and printed the lines want; what
// says which command it was.
func checkPrinted(t *testing.T, what string, want []string, run func(w *bytes.Buffer) error) {
	t.Helper()
	var out bytes.Buffer
	if err := run(&out); err != nil {
		t.Fatalf("%s: %v", what, err)
	}
	if got := lines(out.String()); !slices.Equal(got, want) {
		t.Fatalf("%s printed:\n%s\nwant:\n%s", what, out.String(), strings.Join(want, "\n"))
	}
}

// checkRejected checks that a command run by run failed with an error containing want and
// printed nothing; name says which case it was.
func checkRejected(t *testing.T, name, want string, run func(w *bytes.Buffer) error) {
	t.Helper()
	var out bytes.Buffer
	if err := run(&out); err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("%s: err = %v; want one containing %q", name, err, want)
	}
	if out.Len() != 0 {
		t.Errorf("%s: printed %q", name, out.String())
	}
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
