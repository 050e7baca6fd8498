package tools

import (
	"bytes"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

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
	var out bytes.Buffer
	if err := DeleteTopic(ctx5s(t), &out, tc.admin, "DefaultCluster", "Doomed"); err != nil {
		t.Fatal(err)
	}
	want := []string{
		"delete topic [Doomed] from broker [" + tc.addr("broker-a") + " (broker-a)] success.",
		"delete topic [Doomed] from broker [" + tc.addr("broker-b") + " (broker-b)] success.",
		"delete topic [Doomed] from cluster [DefaultCluster] success.",
		"delete topic [Doomed] from NameServer success.",
	}
	if got := lines(out.String()); !slices.Equal(got, want) {
		t.Fatalf("output:\n%s\nwant:\n%s", out.String(), strings.Join(want, "\n"))
	}
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
	// Deleting a topic that does not exist succeeds.
	out.Reset()
	if err := DeleteTopic(ctx5s(t), &out, tc.admin, "DefaultCluster", "NeverWas"); err != nil {
		t.Fatalf("deleting an unknown topic: %v", err)
	}
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
		var out bytes.Buffer
		if err := DeleteTopic(ctx5s(t), &out, tc.admin, c.cluster, c.topic); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v; want an error containing %q", c.name, err, c.want)
		}
		if out.Len() != 0 {
			t.Errorf("%s: printed %q", c.name, out.String())
		}
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
	var out bytes.Buffer
	if err := DeleteSubGroup(ctx5s(t), &out, tc.admin, "DefaultCluster", "Gone"); err != nil {
		t.Fatal(err)
	}
	want := []string{
		"delete subscription group [Gone] from broker [" + tc.addr("broker-a") + " (broker-a)] in cluster [DefaultCluster] success.",
		"delete subscription group [Gone] from broker [" + tc.addr("broker-b") + " (broker-b)] in cluster [DefaultCluster] success.",
	}
	if got := lines(out.String()); !slices.Equal(got, want) {
		t.Fatalf("output:\n%s\nwant:\n%s", out.String(), strings.Join(want, "\n"))
	}
	for _, name := range []string{"broker-a", "broker-b"} {
		if _, err := tc.admin.QueryConsumerOffset(ctx5s(t), tc.addr(name), "Gone", "SubTopic", 0); !errors.Is(err, client.ErrQueryNotFound) {
			t.Fatalf("%s: the deleted group's offset: %v, want ErrQueryNotFound", name, err)
		}
		if _, err := tc.admin.QueryConsumerOffset(ctx5s(t), tc.addr(name), "Kept", "SubTopic", 0); err != nil {
			t.Fatalf("%s: the other group's offset: %v", name, err)
		}
	}
	if err := DeleteSubGroup(ctx5s(t), &out, tc.admin, "DefaultCluster", "bad group"); err == nil {
		t.Fatal("a bad group name was accepted")
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
	cl, a, err := NewAdmin(ctx5s(t), c.NamesrvAddr(), 5*time.Second, testWriter{t})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cl.Close() })
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
