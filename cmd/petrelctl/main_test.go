package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/petrel-mq/petrel/internal/testcluster"
	"github.com/petrel-mq/petrel/internal/testutil"
)

func TestMain(m *testing.M) { testutil.VerifyTestMain(m) }

// petrelctl runs one command line in-process with the given NAMESRV_ADDR.
func petrelctl(env string, args ...string) (code int, stdout, stderr string) {
	var out, errOut bytes.Buffer
	getenv := func(k string) string {
		if k == "NAMESRV_ADDR" {
			return env
		}
		return ""
	}
	code = run(context.Background(), args, &out, &errOut, getenv)
	return code, out.String(), errOut.String()
}

func TestErrors(t *testing.T) {
	t.Parallel()
	dead := testutil.FreeAddrs(t, 1)[0]
	cases := []struct {
		name   string
		env    string
		args   []string
		stderr string // a prefix of stderr
	}{
		{"no NameServer", "", []string{"topicRoute", "-t", "T"},
			"petrelctl: topicRoute: no NameServer address: use -n host:port[;host:port...] or set NAMESRV_ADDR\n"},
		{"no NameServer for a cluster", "", []string{"brokerStatus", "-c", "C"},
			"petrelctl: brokerStatus: no NameServer address: use -n host:port[;host:port...] or set NAMESRV_ADDR\n"},
		{"no NameServer for a cluster topic", "", []string{"updateTopic", "-c", "C", "-t", "T"},
			"petrelctl: updateTopic: no NameServer address: use -n host:port[;host:port...] or set NAMESRV_ADDR\n"},
		{"unreachable broker without a NameServer", "", []string{"brokerStatus", "-b", dead, "--timeout", "1s"},
			"petrelctl: brokerStatus: cannot get the runtime info of " + dead + ": client: broker unavailable: "},
		{"unreachable NameServer from -n", "", []string{"clusterList", "-n", dead, "--timeout", "1s"},
			"petrelctl: clusterList: cannot get the cluster info: client: no NameServer answered: "},
		{"unreachable NameServer from NAMESRV_ADDR", dead, []string{"topicStatus", "-t", "T"},
			`petrelctl: topicStatus: cannot get the route of topic "T": client: no NameServer answered: `},
		{"missing flag", dead, []string{"topicRoute"},
			"petrelctl: topicRoute: required flag(s) \"topic\" not set\n"},
		{"no target", dead, []string{"updateTopic", "-t", "T"},
			"petrelctl: updateTopic: at least one of the flags in the group [brokerAddr clusterName] is required\n"},
		{"two targets", dead, []string{"brokerStatus", "-b", dead, "-c", "C"},
			"petrelctl: brokerStatus: if any flags in the group [brokerAddr clusterName] are set none of the others can be; [brokerAddr clusterName] were all set\n"},
		{"bad perm", dead, []string{"updateTopic", "-b", dead, "-t", "T", "-p", "5"},
			"petrelctl: updateTopic: -p 5: the permission must be 2 (W), 4 (R) or 6 (RW)\n"},
		{"unknown flag", dead, []string{"topicRoute", "-x"},
			"petrelctl: topicRoute: unknown shorthand flag: 'x' in -x\n"},
		{"haStatus without a target", dead, []string{"haStatus"},
			"petrelctl: haStatus: at least one of the flags in the group [brokerAddr clusterName] is required\n"},
		{"haStatus of an unreachable broker", "", []string{"haStatus", "-b", dead, "--timeout", "1s"},
			"petrelctl: haStatus: cannot get the HA status of " + dead + ": client: broker unavailable: "},
		{"logChecksum without a broker", dead, []string{"logChecksum"},
			"petrelctl: logChecksum: required flag(s) \"brokerAddr\" not set\n"},
		{"logChecksum with a bad offset", "", []string{"logChecksum", "-b", dead, "--to", "-5"},
			"petrelctl: logChecksum: --from -1 --to -5: offsets are -1 (the log's min or end) or at least 0\n"},
		{"logChecksum of an unreachable broker", "", []string{"logChecksum", "-b", dead, "--timeout", "1s"},
			"petrelctl: logChecksum: cannot get the log checksum of " + dead + ": client: broker unavailable: "},
		{"electMaster without a broker name", dead, []string{"electMaster", "-i", "1"},
			"petrelctl: electMaster: required flag(s) \"brokerName\" not set\n"},
		{"electMaster without a brokerId", dead, []string{"electMaster", "-b", "broker-a"},
			"petrelctl: electMaster: required flag(s) \"brokerId\" not set\n"},
		{"electMaster with a negative brokerId", dead, []string{"electMaster", "-b", "broker-a", "-i", "-1"},
			"petrelctl: electMaster: -i -1: a brokerId is 0 or more\n"},
		{"electMaster without a NameServer", "", []string{"electMaster", "-b", "broker-a", "-i", "1"},
			"petrelctl: electMaster: no NameServer address: use -n host:port[;host:port...] or set NAMESRV_ADDR\n"},
		{"electMaster with an unreachable NameServer", "", []string{"electMaster", "-n", dead, "-b", "broker-a", "-i", "1", "--timeout", "1s"},
			"petrelctl: electMaster: cannot get the cluster info: client: no NameServer answered: "},
		{"unknown command", dead, []string{"dropTopic"},
			"petrelctl: unknown command \"dropTopic\" for \"petrelctl\"\n"},
		{"deleteTopic without a cluster", dead, []string{"deleteTopic", "-t", "T"},
			"petrelctl: deleteTopic: required flag(s) \"clusterName\" not set\n"},
		{"deleteSubGroup without a group", dead, []string{"deleteSubGroup", "-c", "C"},
			"petrelctl: deleteSubGroup: required flag(s) \"groupName\" not set\n"},
		{"topicList with both targets", dead, []string{"topicList", "-b", dead, "-c", "C"},
			"petrelctl: topicList: if any flags in the group [brokerAddr clusterName] are set none of the others can be; [brokerAddr clusterName] were all set\n"},
		{"topicList of an unreachable broker", "", []string{"topicList", "-b", dead, "--timeout", "1s"},
			"petrelctl: topicList: cannot get the topic configs of " + dead + ": client: broker unavailable: "},
		{"negative timeout", dead, []string{"clusterList", "--timeout", "-1s"},
			"petrelctl: clusterList: --timeout -1s: want a positive duration (leave --timeout out for the defaults: each request 5s, the wait for the NameServers 45s)\n"},
		{"empty broker address", "", []string{"topicList", "-b", ""},
			"petrelctl: topicList: -b (--brokerAddr) is empty: give a value, or leave the flag out\n"},
		{"empty cluster", dead, []string{"clusterList", "-c", " "},
			"petrelctl: clusterList: -c (--clusterName) is empty: give a value, or leave the flag out\n"},
		{"empty NameServer", "", []string{"topicRoute", "-n", "", "-t", "T"},
			"petrelctl: topicRoute: -n (--namesrvAddr) is empty: give a value, or leave the flag out\n"},
		{"empty topic", dead, []string{"deleteTopic", "-c", "C", "-t", ""},
			"petrelctl: deleteTopic: -t (--topic) is empty: give a value, or leave the flag out\n"},
	}
	for _, c := range cases {
		code, stdout, stderr := petrelctl(c.env, c.args...)
		if code != 1 || stdout != "" || !strings.HasPrefix(stderr, c.stderr) {
			t.Errorf("%s: exit %d, stdout %q, stderr %q; want exit 1, no stdout, stderr starting %q", c.name, code, stdout, stderr, c.stderr)
		}
		if strings.Count(stderr, "\n") != 1 {
			t.Errorf("%s: stderr is not one line: %q", c.name, stderr)
		}
	}
}

// TestNameServerNeverReady: a NameServer no broker registers with (a mistyped -n) is never
// ready: petrelctl says once that it waits and for how long at most, gives up at --timeout,
// and names the NameServer with what it answered.
func TestNameServerNeverReady(t *testing.T) {
	t.Parallel()
	nsAddr := testcluster.New(t, testcluster.Options{}).NamesrvAddr()
	// Only a guard: the command gives up after --timeout, long before.
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var out, errOut bytes.Buffer
	code := run(ctx, []string{"clusterList", "-n", nsAddr, "--timeout", "3s"}, &out, &errOut, func(string) string { return "" })
	lines := strings.Split(strings.TrimSuffix(errOut.String(), "\n"), "\n")
	if code != 1 || out.Len() != 0 || len(lines) != 2 {
		t.Fatalf("exit %d, stdout %q, stderr %q; want exit 1 and two lines on stderr", code, out.String(), errOut.String())
	}
	said := "NameServer " + nsAddr + " is not ready: NAMESRV_NOT_READY: the cluster table may lack brokers: no broker has registered with this NameServer"
	if !strings.HasPrefix(lines[0], "waiting up to 3s for the NameServers to be ready (--timeout sets how long): ") || !strings.Contains(lines[0], said) {
		t.Errorf("first line %q; want the wait, its bound and %q", lines[0], said)
	}
	if !strings.HasPrefix(lines[1], "petrelctl: clusterList: the NameServers were not ready after ") || !strings.Contains(lines[1], "is -n right?") || !strings.Contains(lines[1], said) {
		t.Errorf("last line %q; want the give-up and %q", lines[1], said)
	}
}

func TestHelp(t *testing.T) {
	t.Parallel()
	code, stdout, _ := petrelctl("", "-h")
	if code != 0 {
		t.Fatalf("exit %d", code)
	}
	for _, verb := range []string{"updateTopic", "deleteTopic", "deleteSubGroup", "topicRoute", "topicList", "topicStatus", "clusterList", "brokerStatus", "consumerProgress", "haStatus", "logChecksum", "electMaster"} {
		if !strings.Contains(stdout, verb) {
			t.Errorf("help lists no %s:\n%s", verb, stdout)
		}
	}
	// What --timeout bounds, and how long petrelctl waits without it.
	if !strings.Contains(stdout, timeoutHelp) || !strings.Contains(stdout, "waits for them, up to 45s") {
		t.Errorf("help does not say what --timeout bounds:\n%s", stdout)
	}
	_, stdout, _ = petrelctl("", "topicList", "-h")
	if !strings.Contains(stdout, "-b, --brokerAddr") || !strings.Contains(stdout, "a slave's") {
		t.Errorf("topicList's help has no -b for a broker's own topic table:\n%s", stdout)
	}
}

// TestTimeoutMustBePositive: every verb refuses a --timeout of zero or less, which would
// otherwise be taken for "not given" and bound the command by the defaults, before it connects
// to anything.
func TestTimeoutMustBePositive(t *testing.T) {
	t.Parallel()
	dead := testutil.FreeAddrs(t, 1)[0]
	verbs := map[string][]string{
		"updateTopic":      {"-b", dead, "-t", "T"},
		"deleteTopic":      {"-c", "C", "-t", "T"},
		"deleteSubGroup":   {"-c", "C", "-g", "G"},
		"topicRoute":       {"-t", "T"},
		"topicList":        nil,
		"topicStatus":      {"-t", "T"},
		"clusterList":      nil,
		"brokerStatus":     {"-b", dead},
		"consumerProgress": {"-g", "G"},
		"haStatus":         {"-b", dead},
		"logChecksum":      {"-b", dead},
		"electMaster":      {"-b", "broker-a", "-i", "1"},
	}
	for _, cmd := range newRootCommand(io.Discard, io.Discard, nil).Commands() {
		if _, ok := verbs[cmd.Name()]; !ok {
			t.Errorf("verb %s is not tested", cmd.Name())
		}
	}
	for verb, args := range verbs {
		for _, d := range []string{"0", "0s", "-1s"} {
			code, stdout, stderr := petrelctl(dead, append([]string{verb, "--timeout", d}, args...)...)
			shown := d
			if d == "0" {
				shown = "0s"
			}
			want := "petrelctl: " + verb + ": --timeout " + shown + ": want a positive duration (leave --timeout out for the defaults: each request 5s, the wait for the NameServers 45s)\n"
			if code != 1 || stdout != "" || stderr != want {
				t.Errorf("%s --timeout %s: exit %d, stdout %q, stderr %q; want exit 1 and %q", verb, d, code, stdout, stderr, want)
			}
		}
	}
}

// TestCommands runs every verb through the command line against a real NameServer and broker.
func TestCommands(t *testing.T) {
	t.Parallel()
	c := testcluster.New(t, testcluster.Options{}, testcluster.GroupSpec{Name: "broker-a"})
	addr, nsAddr := c.Group("broker-a").Member(0).Addr(), c.NamesrvAddr()

	mustRun := func(args ...string) string {
		t.Helper()
		code, stdout, stderr := petrelctl("", append(args, "-n", nsAddr)...)
		if code != 0 {
			t.Fatalf("%s: exit %d, stderr %q", strings.Join(args, " "), code, stderr)
		}
		return stdout
	}
	// The broker is registered once the cluster has started.
	if out := mustRun("clusterList"); !strings.Contains(out, addr) {
		t.Fatalf("clusterList printed %q, without the broker %s", out, addr)
	}

	out := mustRun("updateTopic", "-b", addr, "-t", "CliTopic", "-r", "2", "-w", "2")
	want := "create topic to " + addr + " success.\nTopicConfig [topicName=CliTopic, readQueueNums=2, writeQueueNums=2, perm=RW-]\n"
	if out != want {
		t.Fatalf("updateTopic printed %q, want %q", out, want)
	}
	// The broker announces the topic at its next registration.
	testutil.Eventually(t, "a route of the topic", func() bool {
		code, stdout, _ := petrelctl(nsAddr, "topicRoute", "-t", "CliTopic")
		if code != 0 {
			return false
		}
		var route struct {
			QueueDatas []struct{ BrokerName string } `json:"queueDatas"`
		}
		if err := json.Unmarshal([]byte(stdout), &route); err != nil || len(route.QueueDatas) != 1 {
			t.Fatalf("topicRoute printed %q (%v)", stdout, err)
		}
		return true
	})
	if out := mustRun("topicStatus", "-t", "CliTopic"); !strings.HasPrefix(out, "#Broker Name") || strings.Count(out, "\n") != 3 {
		t.Errorf("topicStatus printed %q", out)
	}
	if out := mustRun("topicList"); !strings.Contains(out, "CliTopic\n") {
		t.Errorf("topicList printed %q", out)
	}
	if out := mustRun("brokerStatus", "-b", addr); !strings.Contains(out, "brokerAddr                      : "+addr+"\n") {
		t.Errorf("brokerStatus printed %q", out)
	}
	if out := mustRun("brokerStatus", "-c", "DefaultCluster"); !strings.HasPrefix(out, addr) {
		t.Errorf("brokerStatus -c printed %q", out)
	}
	// A broker address is all -b needs: no -n, no NAMESRV_ADDR.
	if code, stdout, stderr := petrelctl("", "brokerStatus", "-b", addr); code != 0 || !strings.Contains(stdout, "brokerAddr                      : "+addr+"\n") {
		t.Errorf("brokerStatus -b without a NameServer: exit %d, stdout %q, stderr %q", code, stdout, stderr)
	}
	if code, stdout, stderr := petrelctl("", "updateTopic", "-b", addr, "-t", "CliTopic2", "-r", "1", "-w", "1"); code != 0 || !strings.HasPrefix(stdout, "create topic to "+addr+" success.\n") {
		t.Errorf("updateTopic -b without a NameServer: exit %d, stdout %q, stderr %q", code, stdout, stderr)
	}

	// deleteTopic on the cluster, then the NameServer: the route goes.
	if out, want := mustRun("deleteTopic", "-c", "DefaultCluster", "-t", "CliTopic2"), "delete topic [CliTopic2] from broker ["+addr+" (broker-a)] success.\n"+
		"delete topic [CliTopic2] from cluster [DefaultCluster] success.\ndelete topic [CliTopic2] from NameServer success.\n"; out != want {
		t.Errorf("deleteTopic printed %q, want %q", out, want)
	}
	if code, _, stderr := petrelctl(nsAddr, "topicRoute", "-t", "CliTopic2"); code != 1 || !strings.Contains(stderr, "TOPIC_NOT_EXIST") {
		t.Errorf("topicRoute of a deleted topic: exit %d, stderr %q", code, stderr)
	}
	// Deleting what does not exist succeeds, saying there was nothing to delete.
	if out, want := mustRun("deleteSubGroup", "-c", "DefaultCluster", "-g", "NoSuchGroup"), "subscription group [NoSuchGroup] did not exist on broker ["+addr+" (broker-a)] in cluster [DefaultCluster]: no offset committed there (nothing to delete).\n"; out != want {
		t.Errorf("deleteSubGroup printed %q, want %q", out, want)
	}
	if out, want := mustRun("deleteTopic", "-c", "DefaultCluster", "-t", "CliTopic2"), "topic [CliTopic2] did not exist on broker ["+addr+" (broker-a)] (nothing to delete).\n"+
		"topic [CliTopic2] did not exist in cluster [DefaultCluster] (nothing to delete).\ndelete topic [CliTopic2] from NameServer success.\n"; out != want {
		t.Errorf("deleteTopic of a deleted topic printed %q, want %q", out, want)
	}
	// A cluster the NameServer does not know, for every verb taking -c.
	for _, args := range [][]string{
		{"deleteTopic", "-t", "CliTopic"}, {"deleteSubGroup", "-g", "G"}, {"updateTopic", "-t", "CliTopic"},
		{"topicList"}, {"clusterList"}, {"brokerStatus"}, {"haStatus"},
	} {
		code, stdout, stderr := petrelctl(nsAddr, append(args, "-c", "NoSuchCluster")...)
		wantErr := "petrelctl: " + args[0] + ": client: unknown cluster: cluster \"NoSuchCluster\" is not known to the NameServers (known: DefaultCluster)\n"
		if code != 1 || stdout != "" || stderr != wantErr {
			t.Errorf("%s -c NoSuchCluster: exit %d, stdout %q, stderr %q; want %q", args[0], code, stdout, stderr, wantErr)
		}
	}
	// An interrupted petrelctl (its context ended before it acted) changes nothing.
	ended, cancel := context.WithCancel(context.Background())
	cancel()
	var out2, errOut2 bytes.Buffer
	if code := run(ended, []string{"updateTopic", "-b", addr, "-t", "CliEnded"}, &out2, &errOut2, func(string) string { return "" }); code != 1 || out2.Len() > 0 || !strings.Contains(errOut2.String(), "context canceled") {
		t.Errorf("updateTopic with its context ended: exit %d, stdout %q, stderr %q", code, out2.String(), errOut2.String())
	}
	// A broker's own topic table, with no NameServer.
	if code, stdout, stderr := petrelctl("", "topicList", "-b", addr); code != 0 || !strings.HasPrefix(stdout, "#Topic") || !strings.Contains(stdout, "\nCliTopic ") || strings.Contains(stdout, "CliEnded") {
		t.Errorf("topicList -b: exit %d, stdout %q, stderr %q", code, stdout, stderr)
	}

	// A master without slaves.
	if out := mustRun("haStatus", "-b", addr); !strings.HasPrefix(out, "#Role             ASYNC_MASTER\n") || !strings.Contains(out, "#SlaveNum         0\n") {
		t.Errorf("haStatus printed %q", out)
	}
	if out := mustRun("haStatus", "-c", "DefaultCluster"); !strings.HasPrefix(out, "== "+addr+" (broker-a, brokerId 0) ==\n#Role") {
		t.Errorf("haStatus -c printed %q", out)
	}
	// One line: address, offset checked up to, SHA-256 in hex; the same for the same range.
	sum := mustRun("logChecksum", "-b", addr)
	if f := strings.Fields(sum); len(f) != 3 || f[0] != addr || len(f[2]) != 64 || strings.Count(sum, "\n") != 1 {
		t.Errorf("logChecksum printed %q", sum)
	} else if again := mustRun("logChecksum", "-b", addr, "--to", f[1]); again != sum {
		t.Errorf("logChecksum --to %s printed %q, then %q", f[1], sum, again)
	}

	// electMaster of a group the NameServer does not know.
	code, stdout, stderr := petrelctl(nsAddr, "electMaster", "-b", "broker-x", "-i", "1")
	if wantErr := "petrelctl: electMaster: client: unknown broker: the cluster table has no broker group \"broker-x\"\n"; code != 1 || stdout != "" || stderr != wantErr {
		t.Errorf("electMaster of an unknown group: exit %d, stdout %q, stderr %q; want %q", code, stdout, stderr, wantErr)
	}

	code, stdout, stderr = petrelctl(nsAddr, "topicRoute", "-t", "NoSuchTopic")
	if wantErr := "petrelctl: topicRoute: cannot get the route of topic \"NoSuchTopic\": TOPIC_NOT_EXIST: "; code != 1 || stdout != "" || !strings.HasPrefix(stderr, wantErr) {
		t.Errorf("unknown topic: exit %d, stdout %q, stderr %q; want stderr starting %q", code, stdout, stderr, wantErr)
	}
	code, stdout, stderr = petrelctl(nsAddr, "consumerProgress", "-g", "NoSuchGroup")
	if wantErr := "petrelctl: consumerProgress: no consume stats: the group has committed no offset: group \"NoSuchGroup\"\n"; code != 1 || stdout != "" || stderr != wantErr {
		t.Errorf("unknown group: exit %d, stdout %q, stderr %q; want %q", code, stdout, stderr, wantErr)
	}
}
