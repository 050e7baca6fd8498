package tools

import (
	"bytes"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/petrel-mq/petrel/client"
	"github.com/petrel-mq/petrel/internal/testcluster"
	"github.com/petrel-mq/petrel/internal/testutil"
	"github.com/petrel-mq/petrel/protocol"
)

// TestDeleteTopic deletes a topic from a cluster of two groups: mqadmin's lines, the topic gone
// from both masters (its config, its queues, every group's offsets of it) and from the
// NameServer's routes, another topic untouched; created again, it starts empty.
func TestDeleteTopic(t *testing.T) {
	t.Parallel()
	tc := startCluster(t, "broker-b", "broker-a")
	tc.createTopic("Doomed", 2)
	tc.createTopic("Kept", 2)
	tc.send("Doomed", "d1", "d2", "d3", "d4")
	tc.send("Kept", "k1", "k2")
	for _, name := range []string{"broker-a", "broker-b"} {
		if err := tc.admin.UpdateConsumerOffset(ctx5s(t), tc.addr(name), "G", "Doomed", 0, 1); err != nil {
			t.Fatal(err)
		}
	}
	deleteTopic := func(topic string) func(w *bytes.Buffer) error {
		return func(w *bytes.Buffer) error { return DeleteTopic(ctx5s(t), w, tc.admin, "DefaultCluster", topic) }
	}
	checkPrinted(t, "deleteTopic", []string{
		"delete topic [Doomed] from broker [" + tc.addr("broker-a") + " (broker-a)] success.",
		"delete topic [Doomed] from broker [" + tc.addr("broker-b") + " (broker-b)] success.",
		"delete topic [Doomed] from cluster [DefaultCluster] success.",
		"delete topic [Doomed] from NameServer success.",
	}, deleteTopic("Doomed"))
	if _, err := tc.admin.TopicRoute(ctx5s(t), "Doomed"); !errors.Is(err, client.ErrTopicNotExist) {
		t.Fatalf("route after deleteTopic: %v, want ErrTopicNotExist", err)
	}
	for _, name := range []string{"broker-a", "broker-b"} {
		l, err := tc.admin.AllTopicConfig(ctx5s(t), tc.addr(name))
		if err != nil {
			t.Fatal(err)
		}
		if slices.ContainsFunc(l.Topics, func(c protocol.TopicConfig) bool { return c.Topic == "Doomed" }) {
			t.Fatalf("%s still has the topic: %+v", name, l.Topics)
		}
		if _, err := tc.admin.QueryConsumerOffset(ctx5s(t), tc.addr(name), "G", "Doomed", 0); err == nil {
			t.Fatalf("%s still answers an offset of the deleted topic", name)
		}
	}
	if err := tc.admin.WaitTopicRoute(ctx5s(t), "Kept", 2); err != nil {
		t.Fatal(err)
	}
	// Created again: empty, offsets from 0.
	tc.createTopic("Doomed", 2)
	for _, r := range tc.send("Doomed", "n1", "n2") {
		if r.QueueOffset != 0 {
			t.Fatalf("the re-created topic's message at offset %d", r.QueueOffset)
		}
	}
	// Deleting a topic that does not exist succeeds, and every master says it had none.
	checkPrinted(t, "deleting an unknown topic", []string{
		"topic [NeverWas] did not exist on broker [" + tc.addr("broker-a") + " (broker-a)] (nothing to delete).",
		"topic [NeverWas] did not exist on broker [" + tc.addr("broker-b") + " (broker-b)] (nothing to delete).",
		"topic [NeverWas] did not exist in cluster [DefaultCluster] (nothing to delete).",
		"delete topic [NeverWas] from NameServer success.",
	}, deleteTopic("NeverWas"))
	// A topic only one master holds: the other says it had none, the cluster line is mqadmin's.
	if _, err := tc.admin.CreateTopic(ctx5s(t), tc.addr("broker-b"), protocol.TopicConfig{Topic: "OnB", ReadQueueNums: 1, WriteQueueNums: 1}); err != nil {
		t.Fatal(err)
	}
	checkPrinted(t, "deleting a topic of one master", []string{
		"topic [OnB] did not exist on broker [" + tc.addr("broker-a") + " (broker-a)] (nothing to delete).",
		"delete topic [OnB] from broker [" + tc.addr("broker-b") + " (broker-b)] success.",
		"delete topic [OnB] from cluster [DefaultCluster] success.",
		"delete topic [OnB] from NameServer success.",
	}, deleteTopic("OnB"))
}

// TestDeleteTopicRejects checks deleteTopic's arguments and reports a master that fails: the
// NameServer is left alone then.
func TestDeleteTopicRejects(t *testing.T) {
	t.Parallel()
	tc := startCluster(t, "broker-a")
	for _, c := range []struct{ name, cluster, topic, want string }{
		{"no cluster", "", "T", "-c"},
		{"an address for a cluster", "127.0.0.1:9876", "T", "cluster name"},
		{"bad topic", "DefaultCluster", "bad topic", "topic"},
		{"unknown cluster", "NoSuchCluster", "T", "NoSuchCluster"},
	} {
		checkRejected(t, c.name, c.want, func(w *bytes.Buffer) error { return DeleteTopic(ctx5s(t), w, tc.admin, c.cluster, c.topic) })
	}
}

// TestDeleteSubGroup removes a group's offsets from every master of the cluster, leaving other
// groups alone.
func TestDeleteSubGroup(t *testing.T) {
	t.Parallel()
	tc := startCluster(t, "broker-a", "broker-b")
	tc.createTopic("SubTopic", 1)
	tc.send("SubTopic", "m1", "m2")
	for _, name := range []string{"broker-a", "broker-b"} {
		for _, g := range []string{"Gone", "Kept"} {
			if err := tc.admin.UpdateConsumerOffset(ctx5s(t), tc.addr(name), g, "SubTopic", 0, 0); err != nil {
				t.Fatal(err)
			}
		}
	}
	deleteGroup := func(group string) func(w *bytes.Buffer) error {
		return func(w *bytes.Buffer) error { return DeleteSubGroup(ctx5s(t), w, tc.admin, "DefaultCluster", group) }
	}
	checkPrinted(t, "deleteSubGroup", []string{
		"delete subscription group [Gone] from broker [" + tc.addr("broker-a") + " (broker-a)] in cluster [DefaultCluster] success.",
		"delete subscription group [Gone] from broker [" + tc.addr("broker-b") + " (broker-b)] in cluster [DefaultCluster] success.",
	}, deleteGroup("Gone"))
	for _, name := range []string{"broker-a", "broker-b"} {
		if _, err := tc.admin.QueryConsumerOffset(ctx5s(t), tc.addr(name), "Gone", "SubTopic", 0); !errors.Is(err, client.ErrQueryNotFound) {
			t.Fatalf("%s: the deleted group's offset: %v, want ErrQueryNotFound", name, err)
		}
		if _, err := tc.admin.QueryConsumerOffset(ctx5s(t), tc.addr(name), "Kept", "SubTopic", 0); err != nil {
			t.Fatalf("%s: the other group's offset: %v", name, err)
		}
	}
	checkRejected(t, "a bad group name", "group", deleteGroup("bad group"))
	// Deleting it again, or a group never seen, succeeds; every master says it had no offset.
	for _, g := range []string{"Gone", "NeverWas"} {
		checkPrinted(t, "deleting group "+g+" again", []string{
			"subscription group [" + g + "] did not exist on broker [" + tc.addr("broker-a") + " (broker-a)] in cluster [DefaultCluster]: no offset committed there (nothing to delete).",
			"subscription group [" + g + "] did not exist on broker [" + tc.addr("broker-b") + " (broker-b)] in cluster [DefaultCluster]: no offset committed there (nothing to delete).",
		}, deleteGroup(g))
	}
}

// TestDeleteWithoutMaster: a broker group of the cluster with members but no master (a Raft
// group without a quorum elects none) is named, with its members, by every command that acts
// on the cluster's masters; deleteTopic then leaves the NameServers alone, since the group
// still holds the topic.
func TestDeleteWithoutMaster(t *testing.T) {
	t.Parallel()
	tc := startCluster(t, "broker-a")
	tc.createTopic("Doomed", 1)
	tc.c.RegisterDead("broker-x", 2)
	const want = `client: no master right now in cluster "DefaultCluster" (broker group broker-x: no member is master, live brokerIds 2; a Raft group without a quorum elects none`
	var out bytes.Buffer
	err := DeleteTopic(ctx5s(t), &out, tc.admin, "DefaultCluster", "Doomed")
	if !errors.Is(err, client.ErrNoMaster) || !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), "not deleted from the NameServers") {
		t.Fatalf("deleteTopic: %v; want one containing %q", err, want)
	}
	if got := lines(out.String()); !slices.Equal(got, []string{"delete topic [Doomed] from broker [" + tc.addr("broker-a") + " (broker-a)] success."}) {
		t.Fatalf("deleteTopic printed:\n%s", out.String())
	}
	out.Reset()
	if err := DeleteSubGroup(ctx5s(t), &out, tc.admin, "DefaultCluster", "G"); !errors.Is(err, client.ErrNoMaster) || !strings.Contains(err.Error(), want) || !strings.Contains(out.String(), tc.addr("broker-a")) {
		t.Fatalf("deleteSubGroup: %v, printed %q; want an error containing %q", err, out.String(), want)
	}
	out.Reset()
	err = UpdateTopic(ctx5s(t), &out, tc.admin, UpdateTopicOptions{Topic: "New", Cluster: "DefaultCluster", ReadQueueNums: 1, WriteQueueNums: 1, Perm: 6})
	if !errors.Is(err, client.ErrNoMaster) || !strings.Contains(err.Error(), want) || !strings.Contains(out.String(), "create topic to "+tc.addr("broker-a")+" success.") {
		t.Fatalf("updateTopic: %v, printed %q; want an error containing %q", err, out.String(), want)
	}
}

// TestClusterWithoutMaster: a cluster whose only group has no master fails every command that
// acts on its masters with that reason, not with an empty route's.
func TestClusterWithoutMaster(t *testing.T) {
	t.Parallel()
	c := testcluster.New(t, testcluster.Options{})
	c.RegisterDead("broker-r", 1)
	_, a := newAdmin(t, c.NamesrvAddr())
	const want = `client: no master right now in cluster "DefaultCluster" (broker group broker-r: no member is master, live brokerIds 1; a Raft group without a quorum elects none`
	cmds := clusterCommands(a, "DefaultCluster")
	for _, name := range []string{"updateTopic", "deleteTopic", "deleteSubGroup", "topicList"} {
		checkRejected(t, name, want, cmds[name])
	}
}

// TestTopicChangesInRaftGroup: in a Raft-elected group the master holds a topic change as soon
// as updateTopic or deleteTopic was acknowledged and every member soon after (the changes are
// committed through Raft before the answer), and after the master is stopped the new master
// holds the same table.
func TestTopicChangesInRaftGroup(t *testing.T) {
	t.Parallel()
	c := testcluster.New(t, testcluster.Options{}, testcluster.GroupSpec{Name: "broker-r", RaftMembers: 3})
	g := c.Group("broker-r")
	g.WaitInSync()
	_, a := newAdmin(t, c.NamesrvAddr())
	tables := func() map[string]string {
		out := map[string]string{}
		for _, m := range g.Members() {
			if !m.Running() {
				continue
			}
			l, err := a.AllTopicConfig(ctx5s(t), m.Addr())
			if err != nil {
				t.Fatal(err)
			}
			out[m.String()] = fmt.Sprint(l.Topics)
		}
		return out
	}
	// The master holds an acknowledged change at once; the other members once they apply the
	// committed entry (their next Raft heartbeat).
	same := func(what string, want []protocol.TopicConfig) {
		t.Helper()
		m := g.WaitMaster()
		if got := tables()[m.String()]; got != fmt.Sprint(want) {
			t.Fatalf("%s: the master %s holds %s, want %v", what, m, got, want)
		}
		testutil.Eventually(t, what+": every member holding "+fmt.Sprint(want), func() bool {
			for _, got := range tables() {
				if got != fmt.Sprint(want) {
					return false
				}
			}
			return true
		})
	}
	cfg := func(q int32) protocol.TopicConfig {
		return protocol.TopicConfig{Topic: "RaftTopic", ReadQueueNums: q, WriteQueueNums: q, Perm: protocol.PermReadWrite}
	}
	var out bytes.Buffer
	if err := UpdateTopic(ctx5s(t), &out, a, UpdateTopicOptions{Cluster: "DefaultCluster", Topic: "RaftTopic", ReadQueueNums: 4, WriteQueueNums: 4, Perm: 6}); err != nil {
		t.Fatal(err)
	}
	same("created", []protocol.TopicConfig{cfg(4)})
	if err := UpdateTopic(ctx5s(t), &out, a, UpdateTopicOptions{Cluster: "DefaultCluster", Topic: "RaftTopic", ReadQueueNums: 2, WriteQueueNums: 2, Perm: 6}); err != nil {
		t.Fatal(err)
	}
	same("changed", []protocol.TopicConfig{cfg(2)})
	old := g.WaitMaster()
	old.Stop()
	g.WaitMaster()
	same("the master stopped", []protocol.TopicConfig{cfg(2)})
	old.Start()
	g.WaitInSync()
	if err := DeleteTopic(ctx5s(t), &out, a, "DefaultCluster", "RaftTopic"); err != nil {
		t.Fatal(err)
	}
	same("deleted", nil)
}
