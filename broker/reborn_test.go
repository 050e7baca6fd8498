package broker

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sort"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/petrel-mq/petrel/client"
	"github.com/petrel-mq/petrel/internal/testutil"
	"github.com/petrel-mq/petrel/protocol"
)

// rebornLoad is a producer sending to a topic without pause and a running consumer of it, both
// through the client, across whatever the test does to the topic's queues. A message counts as
// acknowledged in the phase the test was in when its send began (and still is when the
// acknowledgement came back).
type rebornLoad struct {
	t      *testing.T
	topic  string
	phase  atomic.Int32
	cancel context.CancelFunc
	wg     sync.WaitGroup
	co     *client.Consumer
	ran    chan error

	mu    sync.Mutex
	acked map[string]int32 // body -> phase
	got   map[string]bool
}

// startRebornLoad starts the producer and the consumer (of group g) on topic.
func startRebornLoad(t *testing.T, hc *haCluster, topic string) *rebornLoad {
	t.Helper()
	cl, _ := hc.newAdmin()
	l := &rebornLoad{t: t, topic: topic, acked: map[string]int32{}, got: map[string]bool{}, ran: make(chan error, 1)}
	ctx, cancel := context.WithCancel(context.Background())
	l.cancel = cancel
	prod, err := client.NewProducer(cl)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { prod.Close(context.Background()) })
	l.wg.Add(1)
	go func() {
		defer l.wg.Done()
		for i := 0; ctx.Err() == nil; i++ {
			body := fmt.Sprintf("%s-%d", topic, i)
			phase := l.phase.Load()
			sctx, scancel := context.WithTimeout(ctx, 2*time.Second)
			_, err := prod.SendSync(sctx, &client.Message{Topic: topic, Body: []byte(body)})
			scancel()
			if err != nil { // the topic or its master is away for a moment
				time.Sleep(10 * time.Millisecond)
				continue
			}
			if l.phase.Load() == phase {
				l.mu.Lock()
				l.acked[body] = phase
				l.mu.Unlock()
			}
		}
	}()
	l.co, err = client.NewConsumer(cl, "reborn-g", topic, client.WithPollTimeout(200*time.Millisecond),
		client.WithRebalanceInterval(200*time.Millisecond), client.WithCommitInterval(100*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	go func() {
		l.ran <- l.co.Run(ctx, func(_ context.Context, msgs []client.MessageExt) error {
			l.mu.Lock()
			defer l.mu.Unlock()
			for _, m := range msgs {
				l.got[string(m.Body)] = true
			}
			return nil
		})
	}()
	t.Cleanup(l.stop)
	return l
}

// stop ends the producer and the consumer.
func (l *rebornLoad) stop() {
	l.cancel()
	l.wg.Wait()
	select {
	case err := <-l.ran:
		if err != nil && !errors.Is(err, context.Canceled) {
			l.t.Errorf("consumer: %v", err)
		}
		l.ran <- nil
	case <-time.After(30 * time.Second):
		l.t.Error("the consumer did not stop")
	}
}

// acks returns how many messages were acknowledged in phase.
func (l *rebornLoad) acks(phase int32) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, p := range l.acked {
		if p == phase {
			n++
		}
	}
	return n
}

// missing returns the messages acknowledged in phase that the consumer has not delivered.
func (l *rebornLoad) missing(phase int32) []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []string
	for body, p := range l.acked {
		if p == phase && !l.got[body] {
			out = append(out, body)
		}
	}
	sort.Strings(out)
	return out
}

// waitDelivered waits until every message acknowledged in phase was delivered, failing with
// what was not.
func (l *rebornLoad) waitDelivered(phase int32, what string) {
	l.t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for len(l.missing(phase)) > 0 && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
	}
	if m := l.missing(phase); len(m) > 0 {
		l.t.Fatalf("%s: %d of the %d messages acknowledged were never delivered (first %q)", what, len(m), l.acks(phase), m[0])
	}
}

// TestRunningConsumerAcrossAWipedMaster: a static SYNC_MASTER loses its store (stopped, its
// data directory deleted, restarted) while a producer sends and a consumer keeps running with
// its position of the old log (about 300 a queue). The restarted master's queues start at 0
// again; every message acknowledged after the restart reaches the consumer, which notices
// that its queues were created again instead of applying its old position to them.
func TestRunningConsumerAcrossAWipedMaster(t *testing.T) {
	hc := newHACluster(t, RoleSyncMaster, 1, nil)
	mc := dial(t, hc.b(0).Addr())
	createTopic(t, mc, "Wiped", 2)
	hc.waitTopic(1, "Wiped")
	hc.waitInSync(1)
	l := startRebornLoad(t, hc, "Wiped")
	testutil.EventuallyWithin(t, 30*time.Second, "600 messages acknowledged and delivered", func() bool {
		return l.acks(0) >= 600 && len(l.missing(0)) == 0
	})

	hc.stop(0)
	if err := os.RemoveAll(hc.cfg(0).StorePathRootDir); err != nil {
		t.Fatal(err)
	}
	m := hc.start(0)
	createTopic(t, dial(t, m.Addr()), "Wiped", 2)
	l.phase.Store(1)
	testutil.EventuallyWithin(t, 30*time.Second, "400 messages acknowledged after the restart", func() bool { return l.acks(1) >= 400 })
	l.phase.Store(2) // what is sent from here on is not counted
	l.waitDelivered(1, "after the master lost its store")
}

// TestRunningConsumerAcrossTopicRecreation: a topic is deleted and created again, three times,
// under steady production and a running consumer (on a SYNC_MASTER and its slave). After each
// re-creation the consumer gets every message acknowledged to the new topic: its position in
// the deleted queues is not applied to the new ones.
func TestRunningConsumerAcrossTopicRecreation(t *testing.T) {
	hc := newHACluster(t, RoleSyncMaster, 1, func(c *Config) { c.MinInSyncReplicas = 2 })
	hc.waitInSync(1)
	m := hc.b(0)
	_, admin := hc.newAdmin()
	cluster := m.cfg.BrokerClusterName
	cfg := protocol.TopicConfig{Topic: "Again", ReadQueueNums: 2, WriteQueueNums: 2, Perm: protocol.PermReadWrite}
	if _, err := admin.CreateTopic(ctx5s(t), cluster, cfg); err != nil {
		t.Fatal(err)
	}
	if err := admin.WaitTopicRoute(ctx5s(t), "Again", 1); err != nil {
		t.Fatal(err)
	}
	l := startRebornLoad(t, hc, "Again")
	testutil.EventuallyWithin(t, 30*time.Second, "300 messages acknowledged and delivered", func() bool {
		return l.acks(0) >= 300 && len(l.missing(0)) == 0
	})
	for cycle := int32(1); cycle <= 3; cycle++ {
		l.phase.Store(-cycle) // the deletion and creation: not counted
		if _, _, err := admin.DeleteTopic(ctx5s(t), cluster, "Again"); err != nil {
			t.Fatalf("deletion %d: %v", cycle, err)
		}
		if _, err := admin.CreateTopic(ctx5s(t), cluster, cfg); err != nil {
			t.Fatalf("creation %d: %v", cycle, err)
		}
		l.phase.Store(cycle)
		testutil.EventuallyWithin(t, 30*time.Second, "200 messages acknowledged to the new topic", func() bool { return l.acks(cycle) >= 200 })
		l.phase.Store(100 + cycle) // sent while the check runs: not counted
		l.waitDelivered(cycle, fmt.Sprintf("after re-creation %d", cycle))
	}
}
