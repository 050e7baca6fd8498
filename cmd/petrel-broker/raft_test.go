package main

// Raft-elected groups (issue 4): three petrel-broker processes with enableRaftHA, a NameServer,
// a producer and consumers of the Go client; masters are killed with SIGKILL, partitioned with
// a fault-injecting proxy, and replaced online with electMaster.

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/petrel-mq/petrel/client"
)

// raftGroup starts a NameServer and a Raft-elected group broker-r of three SYNC_MASTER members
// with minInSyncReplicas=2; extra lines go into every member's config.
func raftGroup(t *testing.T, extra ...string) (*cluster, []*proc) {
	t.Helper()
	c := newCluster(t)
	ports := freePorts(t, 3)
	var peers []string
	for i, p := range ports {
		peers = append(peers, fmt.Sprintf("b%d-127.0.0.1:%d", i+1, p))
	}
	var ms []*proc
	for i := range 3 {
		conf := append([]string{"enableRaftHA=true", fmt.Sprintf("raftSelfId=b%d", i+1), "raftPeers=" + strings.Join(peers, ";"),
			"minInSyncReplicas=2", "raftHeartbeatTimeout=300", "raftElectionTimeout=300"}, extra...)
		ms = append(ms, c.addBroker("broker-r", int64(i+1), "SYNC_MASTER", conf...))
	}
	return c, ms
}

// masterOf waits until exactly one running member says it is the master (brokerId 0) and every
// other running member follows it, and returns it.
func masterOf(t *testing.T, a *client.Admin, ms []*proc) *proc {
	t.Helper()
	var m *proc
	eventually(t, 20*time.Second, "one master that every member follows", func() bool {
		m = nil
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		var followers []string
		for _, p := range ms {
			if !p.running() {
				continue
			}
			st, err := a.HAStatus(ctx, p.addr)
			if err != nil {
				return false
			}
			if st.BrokerID == 0 {
				if m != nil {
					return false
				}
				m = p
			} else {
				followers = append(followers, st.MasterAddr)
			}
		}
		if m == nil {
			return false
		}
		for _, f := range followers {
			if f != m.addr {
				return false
			}
		}
		return true
	})
	return m
}

// inSync waits until the master counts n slaves in its in-sync set.
func inSync(t *testing.T, a *client.Admin, m *proc, n int) {
	t.Helper()
	eventually(t, 30*time.Second, fmt.Sprintf("%d in-sync slaves on %s", n, m.name), func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		st, err := a.HAStatus(ctx, m.addr)
		return err == nil && int(st.InSyncReplicas) == n+1
	})
}

// failoverRuns is how many kill-9 failovers TestRaftFailover measures (PETREL_FAILOVER_RUNS,
// default 2 to keep `make test` short; the closing note's numbers use 10).
func failoverRuns(t *testing.T) int {
	if v := os.Getenv("PETREL_FAILOVER_RUNS"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			t.Fatalf("PETREL_FAILOVER_RUNS=%q", v)
		}
		return n
	}
	return 2
}

// TestRaftFailover: acceptance 1, 2 and 4. Under a SendSync load, the master of a Raft group of
// three (SYNC_MASTER, minInSyncReplicas=2) is killed with SIGKILL; a new master takes over and
// the sends go on; the killed broker restarts, rejoins as a slave (cutting what the others
// never confirmed) and catches up. Repeated; at the end every acknowledged message is consumed,
// none that failed is, and the three logs are byte-identical. The failover time is from the
// kill to the first acknowledged send on the new master.
func TestRaftFailover(t *testing.T) {
	c, ms := raftGroup(t)
	cl := c.client()
	a := client.NewAdmin(cl)
	m := masterOf(t, a, ms)
	inSync(t, a, m, 2)
	const topic = "raft-failover"
	c.createTopic(cl, topic, 8, 1)
	p, err := client.NewProducer(cl, client.WithRetries(2))
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close(context.Background())
	s := newSent()
	ctx, cancel := context.WithCancel(context.Background())
	wg := load(ctx, t, p, topic, 4, s)
	stopLoad := func() { cancel(); wg.Wait() }
	defer stopLoad()

	var times []time.Duration
	for run := range failoverRuns(t) {
		time.Sleep(1500 * time.Millisecond)
		m = masterOf(t, a, ms)
		before, _, _ := s.counts()
		killedAt := time.Now()
		m.kill()
		var took time.Duration
		var newAddr string
		eventually(t, 15*time.Second, "an acknowledged send on a new master", func() bool {
			s.mu.Lock()
			defer s.mu.Unlock()
			for i := len(s.acks) - 1; i >= 0 && s.acks[i].at.After(killedAt); i-- {
				if s.acks[i].addr != m.addr {
					// the earliest such ack after the kill
					for j := i; j >= 0 && s.acks[j].at.After(killedAt); j-- {
						if s.acks[j].addr != m.addr {
							took, newAddr = s.acks[j].at.Sub(killedAt), s.acks[j].addr
						}
					}
					return true
				}
			}
			return false
		})
		times = append(times, took)
		if os.Getenv("PETREL_TEST_LOGS") != "" {
			s.mu.Lock()
			last := ""
			for _, f := range s.fails {
				if f.at.After(killedAt) && f.addr != last {
					t.Logf("  +%v %s", f.at.Sub(killedAt).Round(time.Millisecond), f.addr)
					last = f.addr
				}
			}
			s.mu.Unlock()
		}
		acked, failed, unknown := s.counts()
		t.Logf("run %d: killed master %s; first acknowledged send on %s %v after the kill (acked %d -> %d, failed %d, unknown %d)",
			run+1, m.addr, newAddr, took.Round(time.Millisecond), before, acked, failed, unknown)
		m.start() // rejoins as a slave
		nm := masterOf(t, a, ms)
		inSync(t, a, nm, 2)
	}
	stopLoad()
	sorted := slices.Clone(times)
	slices.Sort(sorted)
	t.Logf("failover times (kill -> first acknowledged send on the new master): %v; median %v, max %v",
		times, sorted[len(sorted)/2].Round(time.Millisecond), sorted[len(sorted)-1].Round(time.Millisecond))

	m = masterOf(t, a, ms)
	others := slices.DeleteFunc(slices.Clone(ms), func(p *proc) bool { return p == m })
	sameLogs(t, a, append([]*proc{m}, others...)...)

	got := newConsumed()
	_, stop := runConsumer(t, cl, "raft-failover-check", topic, got)
	acked, failed, unknown := s.counts()
	eventually(t, 60*time.Second, "every acknowledged message consumed", func() bool {
		n, _ := got.missing(s, "")
		return n == 0
	})
	stop()
	got.checkOrder(t)
	if n := got.phantoms(s); n != 0 {
		t.Fatalf("%d messages whose send failed were consumed", n)
	}
	t.Logf("lost=0: %d acknowledged messages consumed (failed %d, unknown %d); served by %v", acked, failed, unknown, got.servedBy())
}
