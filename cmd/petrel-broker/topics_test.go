package main

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"testing"
	"time"

	"github.com/petrel-mq/petrel/client"
	"github.com/petrel-mq/petrel/internal/testutil"
	"github.com/petrel-mq/petrel/protocol"
)

// topicsOf returns the topic table of the broker at addr, by name.
func topicsOf(t *testing.T, a *client.Admin, addr string) map[string]protocol.TopicConfig {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	l, err := a.AllTopicConfig(ctx, addr)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]protocol.TopicConfig{}
	for _, c := range l.Topics {
		out[c.Topic] = c
	}
	return out
}

// TestRaftTopicTableAcrossKill: acceptance 4 of "topic configs through Raft". In a Raft group of
// three processes, each topic change acknowledged (a topic created, its queue count changed, a
// topic deleted) is followed at once by kill -9 of the master: the new master, and the member
// that follows it, hold exactly the acknowledged table. The killed member, restarted, holds it
// too.
func TestRaftTopicTableAcrossKill(t *testing.T) {
	c, ms := raftGroup(t)
	cl := c.client()
	a := client.NewAdmin(cl)
	m := syncedMaster(t, a, ms)
	cfg := func(topic string, queues int32) protocol.TopicConfig {
		return protocol.TopicConfig{Topic: topic, ReadQueueNums: queues, WriteQueueNums: queues, Perm: protocol.PermReadWrite}
	}
	c.createTopic(cl, "Steady", 2, 1)
	want := map[string]protocol.TopicConfig{"Steady": cfg("Steady", 2)}
	changes := []struct {
		what string
		do   func(ctx context.Context) error
		then func()
	}{
		{"create Fresh with 4 queues", func(ctx context.Context) error {
			_, err := a.CreateTopic(ctx, "TestCluster", cfg("Fresh", 4))
			return err
		}, func() { want["Fresh"] = cfg("Fresh", 4) }},
		{"change Fresh to 8 queues", func(ctx context.Context) error {
			_, err := a.CreateTopic(ctx, "TestCluster", cfg("Fresh", 8))
			return err
		}, func() { want["Fresh"] = cfg("Fresh", 8) }},
		{"delete Fresh", func(ctx context.Context) error {
			_, _, err := a.DeleteTopic(ctx, "TestCluster", "Fresh")
			return err
		}, func() { delete(want, "Fresh") }},
		{"delete Steady", func(ctx context.Context) error {
			_, _, err := a.DeleteTopic(ctx, "TestCluster", "Steady")
			return err
		}, func() { delete(want, "Steady") }},
	}
	for _, ch := range changes {
		m = syncedMaster(t, a, ms)
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		err := ch.do(ctx)
		cancel()
		if err != nil {
			t.Fatalf("%s: %v", ch.what, err)
		}
		ch.then()
		m.kill() // at once: the acknowledgement is all the others had time to get
		nm := masterOf(t, a, ms)
		for _, p := range ms {
			if !p.running() {
				continue
			}
			got := topicsOf(t, a, p.addr)
			if fmt.Sprint(got) != fmt.Sprint(want) {
				t.Fatalf("%s, then kill -9 of the master %s: %s (master now %s) holds %v, want %v", ch.what, m.name, p.name, nm.name, got, want)
			}
		}
		m.start()
		testutil.EventuallyWithin(t, 20*time.Second, m.name+" restarted holds the acknowledged table", func() bool {
			return fmt.Sprint(topicsOf(t, a, m.addr)) == fmt.Sprint(want)
		})
		t.Logf("%s, then kill -9 of %s: the new master %s holds %v", ch.what, m.name, nm.name, slices.Sorted(maps.Keys(want)))
	}
}
