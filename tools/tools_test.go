package tools

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/petrel-mq/petrel/broker"
	"github.com/petrel-mq/petrel/client"
	"github.com/petrel-mq/petrel/internal/testcluster"
	"github.com/petrel-mq/petrel/internal/testutil"
	"github.com/petrel-mq/petrel/protocol"
)

func TestUpdateTopicOnBroker(t *testing.T) {
	t.Parallel()
	tc := startCluster(t, "broker-a")
	addr := tc.addr("broker-a")
	var out bytes.Buffer
	err := UpdateTopic(ctx5s(t), &out, tc.admin, UpdateTopicOptions{Topic: "TopicA", BrokerAddr: addr, ReadQueueNums: 4, WriteQueueNums: 4, Perm: 6})
	if err != nil {
		t.Fatal(err)
	}
	want := "create topic to " + addr + " success.\n" +
		"TopicConfig [topicName=TopicA, readQueueNums=4, writeQueueNums=4, perm=RW-]\n"
	if out.String() != want {
		t.Fatalf("output:\n%s\nwant:\n%s", out.String(), want)
	}
	checkTopicConfig(t, tc, addr, protocol.TopicConfig{Topic: "TopicA", ReadQueueNums: 4, WriteQueueNums: 4, Perm: 6})

	// An update: fewer queues, read only.
	out.Reset()
	err = UpdateTopic(ctx5s(t), &out, tc.admin, UpdateTopicOptions{Topic: "TopicA", BrokerAddr: addr, ReadQueueNums: 2, WriteQueueNums: 1, Perm: 4})
	if err != nil {
		t.Fatal(err)
	}
	if got := lines(out.String()); len(got) != 2 || got[1] != "TopicConfig [topicName=TopicA, readQueueNums=2, writeQueueNums=1, perm=R--]" {
		t.Fatalf("output:\n%s", out.String())
	}
	checkTopicConfig(t, tc, addr, protocol.TopicConfig{Topic: "TopicA", ReadQueueNums: 2, WriteQueueNums: 1, Perm: 4})
}

func checkTopicConfig(t *testing.T, tc *testCluster, addr string, want protocol.TopicConfig) {
	t.Helper()
	l, err := tc.admin.AllTopicConfig(ctx5s(t), addr)
	if err != nil {
		t.Fatal(err)
	}
	i := slices.IndexFunc(l.Topics, func(c protocol.TopicConfig) bool { return c.Topic == want.Topic })
	if i < 0 || l.Topics[i] != want {
		t.Fatalf("topic configs on %s: %+v; want %+v among them", addr, l.Topics, want)
	}
}

func TestUpdateTopicOnCluster(t *testing.T) {
	t.Parallel()
	tc := startCluster(t, "broker-b", "broker-a")
	var out bytes.Buffer
	err := UpdateTopic(ctx5s(t), &out, tc.admin, UpdateTopicOptions{Topic: "TopicC", Cluster: "DefaultCluster", ReadQueueNums: 8, WriteQueueNums: 8, Perm: 6})
	if err != nil {
		t.Fatal(err)
	}
	want := []string{
		"create topic to " + tc.addr("broker-a") + " success.",
		"create topic to " + tc.addr("broker-b") + " success.",
		"TopicConfig [topicName=TopicC, readQueueNums=8, writeQueueNums=8, perm=RW-]",
	}
	if got := lines(out.String()); !slices.Equal(got, want) {
		t.Fatalf("output:\n%s\nwant:\n%s", out.String(), strings.Join(want, "\n"))
	}
	for _, name := range []string{"broker-a", "broker-b"} {
		checkTopicConfig(t, tc, tc.addr(name), protocol.TopicConfig{Topic: "TopicC", ReadQueueNums: 8, WriteQueueNums: 8, Perm: 6})
	}
	if err := tc.admin.WaitTopicRoute(ctx5s(t), "TopicC", 2); err != nil {
		t.Fatal(err)
	}
}

func TestUpdateTopicRejects(t *testing.T) {
	t.Parallel()
	tc := startCluster(t, "broker-a")
	addr := tc.addr("broker-a")
	ok := UpdateTopicOptions{Topic: "T", ReadQueueNums: 8, WriteQueueNums: 8, Perm: 6}
	with := func(f func(*UpdateTopicOptions)) UpdateTopicOptions { o := ok; f(&o); return o }
	cases := []struct {
		name string
		o    UpdateTopicOptions
		want string
	}{
		{"no target", ok, "give -b BROKERADDR or -c CLUSTER"},
		{"both targets", with(func(o *UpdateTopicOptions) { o.BrokerAddr, o.Cluster = addr, "DefaultCluster" }), "not both"},
		{"perm", with(func(o *UpdateTopicOptions) { o.BrokerAddr, o.Perm = addr, 3 }), "-p 3"},
		{"read queues", with(func(o *UpdateTopicOptions) { o.BrokerAddr, o.ReadQueueNums = addr, 0 }), "queue counts must be positive"},
		{"topic name", with(func(o *UpdateTopicOptions) { o.BrokerAddr, o.Topic = addr, "bad topic" }), "topic"},
		{"address without port", with(func(o *UpdateTopicOptions) { o.BrokerAddr = "127.0.0.1" }), "want host:port"},
		{"cluster with colon", with(func(o *UpdateTopicOptions) { o.Cluster = "a:b" }), "use -b"},
		{"unknown cluster", with(func(o *UpdateTopicOptions) { o.Cluster = "NoSuchCluster" }), "NoSuchCluster"},
		{"dead broker", with(func(o *UpdateTopicOptions) { o.BrokerAddr = testutil.FreeAddrs(t, 1)[0] }), "cannot create topic"},
	}
	for _, c := range cases {
		checkRejected(t, c.name, c.want, func(w *bytes.Buffer) error { return UpdateTopic(ctx5s(t), w, tc.admin, c.o) })
	}
}

func TestTopicRoute(t *testing.T) {
	t.Parallel()
	tc := startCluster(t, "broker-b", "broker-a")
	tc.createTopic("RouteTopic", 4)
	var out bytes.Buffer
	if err := TopicRoute(ctx5s(t), &out, tc.admin, "RouteTopic"); err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(out.String(), "{\n\t\"brokerDatas\": [\n") || !strings.HasSuffix(out.String(), "}\n") {
		t.Fatalf("not indented JSON with brokerDatas first:\n%s", out.String())
	}
	var got routeJSON
	if err := json.Unmarshal(out.Bytes(), &got); err != nil {
		t.Fatalf("output is not JSON: %v\n%s", err, out.String())
	}
	want := routeJSON{
		BrokerDatas: []brokerDataJSON{
			{BrokerAddrs: map[int64]string{0: tc.addr("broker-a")}, BrokerName: "broker-a", Cluster: "DefaultCluster"},
			{BrokerAddrs: map[int64]string{0: tc.addr("broker-b")}, BrokerName: "broker-b", Cluster: "DefaultCluster"},
		},
		QueueDatas: []queueDataJSON{
			{BrokerName: "broker-a", Perm: 6, ReadQueueNums: 4, WriteQueueNums: 4},
			{BrokerName: "broker-b", Perm: 6, ReadQueueNums: 4, WriteQueueNums: 4},
		},
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("route:\n%+v\nwant:\n%+v", got, want)
	}
	if !strings.Contains(out.String(), `"brokerAddrs": {`+"\n\t\t\t\t\"0\": \""+tc.addr("broker-a")+`"`) {
		t.Fatalf("brokerAddrs not keyed by brokerId:\n%s", out.String())
	}
}

func TestTopicRouteUnknownTopic(t *testing.T) {
	t.Parallel()
	tc := startCluster(t, "broker-a")
	var out bytes.Buffer
	err := TopicRoute(ctx5s(t), &out, tc.admin, "NoSuchTopic")
	if !errors.Is(err, client.ErrTopicNotExist) || !strings.Contains(err.Error(), "TOPIC_NOT_EXIST") {
		t.Fatalf("err = %v; want TOPIC_NOT_EXIST", err)
	}
	if out.Len() != 0 {
		t.Fatalf("printed %q", out.String())
	}
}

var tpsRE = regexp.MustCompile(`^\d+\.\d\d$`)

func TestClusterList(t *testing.T) {
	t.Parallel()
	tc := startCluster(t, "broker-b", "broker-a")
	dead := tc.c.RegisterDead("broker-c", 0)
	var out bytes.Buffer
	err := ClusterList(ctx5s(t), &out, tc.admin, "")
	if err == nil || !strings.Contains(err.Error(), dead) {
		t.Fatalf("err = %v; want the dead broker's failure", err)
	}
	rows := lines(out.String())
	if len(rows) != 4 {
		t.Fatalf("want a header and 3 rows:\n%s", out.String())
	}
	header := []string{"#Cluster Name", "#Broker Name", "#BID", "#Addr", "#Version", "#InTPS(LOAD)", "#OutTPS(LOAD)", "#ACTIVATED"}
	if got := cells(rows[0]); !slices.Equal(got, header) {
		t.Fatalf("header %q, want %q", got, header)
	}
	for i, name := range []string{"broker-a", "broker-b"} {
		got := cells(rows[i+1])
		want := []string{"DefaultCluster", name, "0", tc.addr(name), broker.Version, got[5], got[6], "true"}
		if !slices.Equal(got, want) || !tpsRE.MatchString(got[5]) || !tpsRE.MatchString(got[6]) {
			t.Fatalf("row %q, want %q with rates like 0.00", got, want)
		}
	}
	want := []string{"DefaultCluster", "broker-c", "0", dead, "-", "-", "-", "-"}
	if got := cells(rows[3]); !slices.Equal(got, want) {
		t.Fatalf("row of the dead broker %q, want %q", got, want)
	}
	// Columns are aligned: every row has its #Addr cell where the header has it.
	col := strings.Index(rows[0], "#Addr")
	for _, r := range rows[1:] {
		if r[col-2:col] != "  " || r[col] == ' ' {
			t.Fatalf("misaligned table:\n%s", out.String())
		}
	}

	out.Reset()
	if err := ClusterList(ctx5s(t), &out, tc.admin, "OtherCluster"); err == nil || !strings.Contains(err.Error(), "OtherCluster") {
		t.Fatalf("unknown cluster: err = %v", err)
	}
}

func TestTopicStatus(t *testing.T) {
	t.Parallel()
	tc := startCluster(t, "broker-a")
	tc.createTopic("StatusTopic", 4)
	results := tc.send("StatusTopic", "m1", "m2", "m3")
	count := map[int32]int64{}
	last := map[int32]int64{}
	for _, r := range results {
		count[r.QueueID]++
		last[r.QueueID] = max(last[r.QueueID], r.StoreTimestamp)
	}
	var out bytes.Buffer
	if err := TopicStatus(ctx5s(t), &out, tc.admin, "StatusTopic"); err != nil {
		t.Fatal(err)
	}
	rows := lines(out.String())
	if len(rows) != 5 {
		t.Fatalf("want a header and 4 rows:\n%s", out.String())
	}
	header := []string{"#Broker Name", "#QID", "#Min Offset", "#Max Offset", "#Last Updated"}
	if got := cells(rows[0]); !slices.Equal(got, header) {
		t.Fatalf("header %q, want %q", got, header)
	}
	for q := int32(0); q < 4; q++ {
		want := []string{"broker-a", strconv.Itoa(int(q)), "0", strconv.FormatInt(count[q], 10)}
		if last[q] != 0 {
			want = append(want, time.UnixMilli(last[q]).Format("2006-01-02 15:04:05,000"))
		}
		if got := cells(rows[q+1]); !slices.Equal(got, want) {
			t.Errorf("row %d: %q, want %q", q, got, want)
		}
	}

	out.Reset()
	err := TopicStatus(ctx5s(t), &out, tc.admin, "NoSuchTopic")
	if !errors.Is(err, client.ErrTopicNotExist) || out.Len() != 0 {
		t.Fatalf("unknown topic: err = %v, printed %q", err, out.String())
	}
}

func TestConsumerProgress(t *testing.T) {
	t.Parallel()
	tc := startCluster(t, "broker-a")
	addr := tc.addr("broker-a")
	tc.createTopic("ProgressTopic", 2)
	results := tc.send("ProgressTopic", "m1", "m2", "m3", "m4", "m5")
	maxOff := map[int32]int64{}
	stored := map[int32]map[int64]int64{} // queue -> offset -> store time
	for _, r := range results {
		maxOff[r.QueueID] = max(maxOff[r.QueueID], r.QueueOffset+1)
		if stored[r.QueueID] == nil {
			stored[r.QueueID] = map[int64]int64{}
		}
		stored[r.QueueID][r.QueueOffset] = r.StoreTimestamp
	}
	// Queue 0 consumed one message; queue 1 everything.
	commits := map[int32]int64{0: 1, 1: maxOff[1]}
	// #LastTime is, as mqadmin's, the store time of the last consumed message.
	last := map[int32]int64{0: stored[0][commits[0]-1], 1: stored[1][commits[1]-1]}
	for q, off := range commits {
		if err := tc.admin.UpdateConsumerOffset(ctx5s(t), addr, "GroupA", "ProgressTopic", q, off); err != nil {
			t.Fatal(err)
		}
	}
	for _, topic := range []string{"ProgressTopic", ""} {
		var out bytes.Buffer
		if err := ConsumerProgress(ctx5s(t), &out, tc.admin, "GroupA", topic); err != nil {
			t.Fatal(err)
		}
		rows := lines(out.String())
		if len(rows) != 7 {
			t.Fatalf("topic %q: want a header, 2 rows, 3 total lines and the clients:\n%s", topic, out.String())
		}
		header := []string{"#Topic", "#Broker Name", "#QID", "#Broker Offset", "#Consumer Offset", "#Client IP", "#Diff", "#LastTime"}
		if got := cells(rows[0]); !slices.Equal(got, header) {
			t.Fatalf("header %q, want %q", got, header)
		}
		var total int64
		for q := int32(0); q < 2; q++ {
			diff := maxOff[q] - commits[q]
			total += diff
			want := []string{"ProgressTopic", "broker-a", strconv.Itoa(int(q)), strconv.FormatInt(maxOff[q], 10),
				strconv.FormatInt(commits[q], 10), "N/A", strconv.FormatInt(diff, 10), time.UnixMilli(last[q]).Format("2006-01-02 15:04:05")}
			if got := cells(rows[q+1]); !slices.Equal(got, want) {
				t.Errorf("topic %q row %d: %q, want %q", topic, q, got, want)
			}
		}
		wantTail := []string{"", "Consume TPS: N/A", fmt.Sprintf("Diff Total: %d", total), "Clients: none"}
		if got := rows[3:]; !slices.Equal(got, wantTail) {
			t.Errorf("topic %q: tail %q, want %q", topic, got, wantTail)
		}
	}

	// A live member of the group is listed under the table.
	co, err := client.NewConsumer(tc.client, "GroupA", "ProgressTopic")
	if err != nil {
		t.Fatal(err)
	}
	runCtx, stopRun := context.WithCancel(context.Background())
	ran := make(chan error, 1)
	go func() { ran <- co.Run(runCtx, func(context.Context, []client.MessageExt) error { return nil }) }()
	defer func() {
		stopRun()
		<-ran
	}()
	want := "Clients: " + co.ClientID()
	deadline := time.Now().Add(10 * time.Second)
	for {
		var out bytes.Buffer
		err := ConsumerProgress(ctx5s(t), &out, tc.admin, "GroupA", "")
		rows := lines(out.String())
		if err == nil && len(rows) > 0 && rows[len(rows)-1] == want {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no %q line: err %v, output:\n%s", want, err, out.String())
		}
		time.Sleep(20 * time.Millisecond)
	}

	var out bytes.Buffer
	if err := ConsumerProgress(ctx5s(t), &out, tc.admin, "NoSuchGroup", ""); !errors.Is(err, ErrNoConsumeStats) || out.Len() != 0 {
		t.Fatalf("unknown group: err = %v, printed %q", err, out.String())
	}
	if err := ConsumerProgress(ctx5s(t), &out, tc.admin, "GroupA", "NoSuchTopic"); !errors.Is(err, client.ErrTopicNotExist) || out.Len() != 0 {
		t.Fatalf("unknown topic: err = %v, printed %q", err, out.String())
	}
}

func TestBrokerStatus(t *testing.T) {
	t.Parallel()
	tc := startCluster(t, "broker-b", "broker-a")
	addrA := tc.addr("broker-a")
	var out bytes.Buffer
	if err := BrokerStatus(ctx5s(t), &out, tc.admin, addrA, ""); err != nil {
		t.Fatal(err)
	}
	rows := lines(out.String())
	var keys []string
	for _, r := range rows {
		k, v, ok := strings.Cut(r, ": ")
		if !ok || len(k) < 32 {
			t.Fatalf("line %q is not %%-32s: %%s", r)
		}
		keys = append(keys, strings.TrimRight(k, " "))
		_ = v
	}
	if !slices.IsSorted(keys) {
		t.Fatalf("keys not sorted: %q", keys)
	}
	for _, want := range []string{
		fmt.Sprintf("%-32s: %s", "brokerVersionDesc", broker.Version),
		fmt.Sprintf("%-32s: %s", "brokerAddr", addrA),
		fmt.Sprintf("%-32s: %s", "brokerName", "broker-a"),
	} {
		if !slices.Contains(rows, want) {
			t.Errorf("no line %q in:\n%s", want, out.String())
		}
	}

	// Without a NameServer: -b still works, -c needs the cluster table.
	_, direct := newAdmin(t, "")
	var direct1 bytes.Buffer
	if err := BrokerStatus(ctx5s(t), &direct1, direct, addrA, ""); err != nil || !strings.Contains(direct1.String(), "brokerName") {
		t.Fatalf("brokerStatus -b without a NameServer: %v\n%s", err, direct1.String())
	}
	if err := BrokerStatus(ctx5s(t), &direct1, direct, "", "DefaultCluster"); !errors.Is(err, client.ErrNameServerUnavailable) {
		t.Fatalf("brokerStatus -c without a NameServer: %v", err)
	}

	// The cluster: every broker, each line prefixed with its address, broker-a first.
	out.Reset()
	if err := BrokerStatus(ctx5s(t), &out, tc.admin, "", "DefaultCluster"); err != nil {
		t.Fatal(err)
	}
	rows = lines(out.String())
	seen := map[string]int{}
	order := []string{}
	for _, r := range rows {
		addr := strings.TrimRight(r[:24], " ")
		if r[24] != ' ' {
			t.Fatalf("line %q is not %%-24s %%-32s: %%s", r)
		}
		if seen[addr] == 0 {
			order = append(order, addr)
		}
		seen[addr]++
	}
	if want := []string{addrA, tc.addr("broker-b")}; !slices.Equal(order, want) {
		t.Fatalf("brokers %q, want %q", order, want)
	}
	if want := fmt.Sprintf("%-24s %-32s: %s", addrA, "brokerName", "broker-a"); !slices.Contains(rows, want) {
		t.Fatalf("no line %q in:\n%s", want, out.String())
	}

	for _, c := range []struct{ addr, cluster, want string }{
		{"", "", "give -b"},
		{addrA, "DefaultCluster", "not both"},
		{"", "NoSuchCluster", "NoSuchCluster"},
		{testutil.FreeAddrs(t, 1)[0], "", "cannot get the runtime info"},
	} {
		out.Reset()
		err := BrokerStatus(ctx5s(t), &out, tc.admin, c.addr, c.cluster)
		if err == nil || !strings.Contains(err.Error(), c.want) || out.Len() != 0 {
			t.Errorf("-b %q -c %q: err = %v, printed %q; want an error containing %q", c.addr, c.cluster, err, out.String(), c.want)
		}
	}
}

func TestTopicList(t *testing.T) {
	t.Parallel()
	tc := startCluster(t, "broker-a", "broker-b")
	tc.createTopic("ListTopic1", 2)
	if _, err := tc.admin.CreateTopic(ctx5s(t), tc.addr("broker-b"), protocol.TopicConfig{Topic: "ListTopic0", ReadQueueNums: 1, WriteQueueNums: 1}); err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	if err := TopicList(ctx5s(t), &out, tc.admin, "", ""); err != nil {
		t.Fatal(err)
	}
	got := lines(out.String())
	if !slices.IsSorted(got) || len(slices.Compact(slices.Clone(got))) != len(got) {
		t.Fatalf("not sorted and unique:\n%s", out.String())
	}
	if !slices.Contains(got, "ListTopic0") || !slices.Contains(got, "ListTopic1") {
		t.Fatalf("missing topics:\n%s", out.String())
	}
	checkRejected(t, "both -b and -c", "not both", func(w *bytes.Buffer) error {
		return TopicList(ctx5s(t), w, tc.admin, tc.addr("broker-a"), "DefaultCluster")
	})
	checkRejected(t, "-b without a port", "127.0.0.1", func(w *bytes.Buffer) error { return TopicList(ctx5s(t), w, tc.admin, "127.0.0.1", "") })
}

// TestTopicListOfBroker: topicList -b prints a broker's own topic table, a slave's too (which
// topicList without -b, reading the masters, never shows), with no NameServer needed.
func TestTopicListOfBroker(t *testing.T) {
	t.Parallel()
	c := testcluster.New(t, testcluster.Options{}, testcluster.GroupSpec{Name: "broker-a", Slaves: 1})
	c.CreateTopic("SlaveTopic", 3, "broker-a")
	slave := c.Group("broker-a").Member(1).Addr()
	_, direct := newAdmin(t, "")
	want := []string{"SlaveTopic", "3", "3", "RW-"}
	var out bytes.Buffer
	testutil.Eventually(t, "the slave's topic table to list SlaveTopic", func() bool {
		out.Reset()
		if err := TopicList(ctx5s(t), &out, direct, slave, ""); err != nil {
			t.Fatal(err)
		}
		return slices.ContainsFunc(lines(out.String()), func(r string) bool { return slices.Equal(cells(r), want) })
	})
	rows := lines(out.String())
	if got := cells(rows[0]); !slices.Equal(got, []string{"#Topic", "#ReadQueueNums", "#WriteQueueNums", "#Perm"}) {
		t.Fatalf("header %q:\n%s", got, out.String())
	}
	var topics []string
	for _, r := range rows[1:] {
		topics = append(topics, cells(r)[0])
	}
	if !slices.IsSorted(topics) {
		t.Fatalf("not sorted by topic:\n%s", out.String())
	}
}

// TestUnknownCluster: every command taking -c says that the NameServers do not know the
// cluster, and which clusters they know, before it acts.
func TestUnknownCluster(t *testing.T) {
	t.Parallel()
	tc := startCluster(t, "broker-a")
	const want = `cluster "NoSuchCluster" is not known to the NameServers (known: DefaultCluster)`
	for name, run := range clusterCommands(tc.admin, "NoSuchCluster") {
		checkRejected(t, name, want, run)
	}
	if l, err := tc.admin.AllTopicConfig(ctx5s(t), tc.addr("broker-a")); err != nil || slices.ContainsFunc(l.Topics, func(c protocol.TopicConfig) bool { return c.Topic == "T" }) {
		t.Fatalf("updateTopic on an unknown cluster created the topic: %v %+v", err, l)
	}
}

// clusterCommands returns every command that takes -c, run on cluster: updateTopic (of topic
// T), deleteTopic, deleteSubGroup, topicList, clusterList, brokerStatus, haStatus.
func clusterCommands(a *client.Admin, cluster string) map[string]func(*bytes.Buffer) error {
	ctx := context.Background()
	return map[string]func(*bytes.Buffer) error{
		"updateTopic": func(w *bytes.Buffer) error {
			return UpdateTopic(ctx, w, a, UpdateTopicOptions{Topic: "T", Cluster: cluster, ReadQueueNums: 1, WriteQueueNums: 1, Perm: 6})
		},
		"deleteTopic":    func(w *bytes.Buffer) error { return DeleteTopic(ctx, w, a, cluster, "T") },
		"deleteSubGroup": func(w *bytes.Buffer) error { return DeleteSubGroup(ctx, w, a, cluster, "G") },
		"topicList":      func(w *bytes.Buffer) error { return TopicList(ctx, w, a, "", cluster) },
		"clusterList":    func(w *bytes.Buffer) error { return ClusterList(ctx, w, a, cluster) },
		"brokerStatus":   func(w *bytes.Buffer) error { return BrokerStatus(ctx, w, a, "", cluster) },
		"haStatus":       func(w *bytes.Buffer) error { return HAStatus(ctx, w, a, "", cluster) },
	}
}

// TestNameServerUnreachable runs every command against an address nothing listens on: each
// fails with ErrNameServerUnavailable and prints nothing.
func TestNameServerUnreachable(t *testing.T) {
	t.Parallel()
	_, a := newAdmin(t, testutil.FreeAddrs(t, 1)[0])
	ctx := ctx5s(t)
	cmds := map[string]func(*bytes.Buffer) error{
		"updateTopic": func(w *bytes.Buffer) error {
			return UpdateTopic(ctx, w, a, UpdateTopicOptions{Topic: "T", Cluster: "DefaultCluster", ReadQueueNums: 1, WriteQueueNums: 1, Perm: 6})
		},
		"topicRoute":       func(w *bytes.Buffer) error { return TopicRoute(ctx, w, a, "T") },
		"topicStatus":      func(w *bytes.Buffer) error { return TopicStatus(ctx, w, a, "T") },
		"topicList":        func(w *bytes.Buffer) error { return TopicList(ctx, w, a, "", "") },
		"clusterList":      func(w *bytes.Buffer) error { return ClusterList(ctx, w, a, "") },
		"brokerStatus":     func(w *bytes.Buffer) error { return BrokerStatus(ctx, w, a, "", "DefaultCluster") },
		"consumerProgress": func(w *bytes.Buffer) error { return ConsumerProgress(ctx, w, a, "G", "") },
	}
	for name, run := range cmds {
		var out bytes.Buffer
		err := run(&out)
		if !errors.Is(err, client.ErrNameServerUnavailable) {
			t.Errorf("%s: err = %v; want ErrNameServerUnavailable", name, err)
		}
		if out.Len() != 0 {
			t.Errorf("%s: printed %q", name, out.String())
		}
	}
}

func TestNameServers(t *testing.T) {
	t.Parallel()
	env := func(v string) func(string) string {
		return func(k string) string {
			if k == EnvNameServer {
				return v
			}
			return ""
		}
	}
	for _, c := range []struct {
		flag, env, want string
		err             bool
	}{
		{"a:1;b:2", "c:3", "a:1;b:2", false},
		{"", " c:3 ", "c:3", false},
		{"", "", "", true},
		{" ; ", "", "", true},
	} {
		got, err := NameServers(c.flag, env(c.env))
		if got != c.want || (err != nil) != c.err {
			t.Errorf("NameServers(%q) with %s=%q = %q, %v", c.flag, EnvNameServer, c.env, got, err)
		}
		if err != nil && !errors.Is(err, ErrNoNameServer) {
			t.Errorf("err = %v; want ErrNoNameServer", err)
		}
	}
}

func TestPermString(t *testing.T) {
	t.Parallel()
	for perm, want := range map[int32]string{0: "---", 2: "-W-", 4: "R--", 6: "RW-", 7: "RWX"} {
		if got := permString(perm); got != want {
			t.Errorf("permString(%d) = %q, want %q", perm, got, want)
		}
	}
}
