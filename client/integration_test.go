package client

import (
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/petrel-mq/petrel/internal/testcluster"
	"github.com/petrel-mq/petrel/internal/testutil"
	"github.com/petrel-mq/petrel/protocol"
)

// Integration tests: a real NameServer and real brokers in-process on loopback
// (internal/testcluster), data under t.TempDir().

func TestIntegrationProduceConsume(t *testing.T) {
	rc := testcluster.New(t, testcluster.Options{}, testcluster.GroupSpec{Name: "broker-a"}, testcluster.GroupSpec{Name: "broker-b"})
	ba := rc.Group("broker-a").Member(0)
	c := newTestClient(t, rc.NamesrvAddr())
	admin := NewAdmin(c)
	ctx := testCtx(t, 60*time.Second)

	done, err := admin.CreateTopic(ctx, "DefaultCluster", protocol.TopicConfig{Topic: "IT", ReadQueueNums: 3, WriteQueueNums: 3})
	if err != nil || len(done) != 2 {
		t.Fatalf("CreateTopic: %+v %v", done, err)
	}
	if err := admin.WaitTopicRoute(ctx, "IT", 2); err != nil {
		t.Fatal(err)
	}

	p := newTestProducer(t, c)
	// Sync.
	for i := 0; i < 100; i++ {
		if _, err := p.SendSync(ctx, &Message{Topic: "IT", Keys: "k" + strconv.Itoa(i), Tags: "sync", Properties: map[string]string{"n": strconv.Itoa(i)}, Body: []byte(fmt.Sprintf("m%06d", i))}); err != nil {
			t.Fatalf("SendSync %d: %v", i, err)
		}
	}
	// Batch.
	batch := make([]Message, 50)
	for i := range batch {
		batch[i] = Message{Tags: "batch", Body: []byte(fmt.Sprintf("m%06d", 100+i))}
	}
	res, err := p.SendBatchSync(ctx, "IT", batch)
	if err != nil || res.Count != 50 {
		t.Fatalf("SendBatchSync: %+v %v", res, err)
	}
	// Async.
	produce(t, p, "IT", 150, 3150)
	// Oneway.
	for i := 3150; i < 3200; i++ {
		if err := p.SendOneway(ctx, &Message{Topic: "IT", Body: []byte(fmt.Sprintf("m%06d", i))}); err != nil {
			t.Fatal(err)
		}
	}

	col := newCollector(t)
	co := newTestConsumer(t, c, "ITG", "IT", WithPollTimeout(500*time.Millisecond))
	stop := runConsumer(t, co, col.handle)
	testutil.Eventually(t, "everything consumed", func() bool { return col.count() >= 3200 })
	time.Sleep(100 * time.Millisecond)
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	if col.count() != 3200 || len(col.body) != 3200 {
		t.Fatalf("%d deliveries, %d distinct", col.count(), len(col.body))
	}

	// Restart the consumer: it resumes at the committed offsets.
	produce(t, p, "IT", 3200, 3300)
	col2 := newCollector(t)
	co2 := newTestConsumer(t, c, "ITG", "IT", WithPollTimeout(500*time.Millisecond))
	if lag, err := co2.Lag(ctx); err != nil || lag != 100 {
		t.Fatalf("lag %d %v", lag, err)
	}
	stop2 := runConsumer(t, co2, col2.handle)
	testutil.Eventually(t, "the new messages", func() bool { return col2.count() >= 100 })
	time.Sleep(100 * time.Millisecond)
	if err := stop2(); err != nil {
		t.Fatal(err)
	}
	if col2.count() != 100 {
		t.Fatalf("resumed consumer got %d, want 100", col2.count())
	}

	// Admin views.
	ts, err := admin.TopicStats(ctx, "IT")
	if err != nil || len(ts) != 2 {
		t.Fatalf("TopicStats %+v %v", ts, err)
	}
	var total int64
	for _, bs := range ts {
		for _, q := range bs.Stats.Queues {
			total += q.MaxOffset - q.MinOffset
		}
	}
	if total != 3300 {
		t.Fatalf("TopicStats count %d", total)
	}
	cs, err := admin.ConsumeStats(ctx, "ITG", "IT")
	if err != nil {
		t.Fatal(err)
	}
	for _, bs := range cs {
		for _, q := range bs.Stats.Queues {
			if q.ConsumerOffset != q.BrokerOffset {
				t.Fatalf("consume stats %s %+v", bs.BrokerName, q)
			}
		}
	}
	if kv, err := admin.BrokerRuntimeInfo(ctx, ba.Addr()); err != nil || len(kv.Entries) == 0 {
		t.Fatalf("runtime info %+v %v", kv, err)
	}
	if _, err := admin.MaxOffset(ctx, ba.Addr(), "IT", 0); err != nil {
		t.Fatal(err)
	}
	if _, err := admin.MinOffset(ctx, ba.Addr(), "IT", 0); err != nil {
		t.Fatal(err)
	}
	if _, err := admin.QueryConsumerOffset(ctx, ba.Addr(), "NoSuchGroup", "IT", 0); !errors.Is(err, ErrQueryNotFound) {
		t.Fatalf("QueryConsumerOffset of an unknown group: %v", err)
	}
}

func TestIntegrationBrokerRestart(t *testing.T) {
	rc := testcluster.New(t, testcluster.Options{}, testcluster.GroupSpec{Name: "broker-a"})
	c := newTestClient(t, rc.NamesrvAddr())
	admin := NewAdmin(c)
	ctx := testCtx(t, 60*time.Second)
	if _, err := admin.CreateTopic(ctx, "DefaultCluster", protocol.TopicConfig{Topic: "RT", ReadQueueNums: 2, WriteQueueNums: 2}); err != nil {
		t.Fatal(err)
	}
	if err := admin.WaitTopicRoute(ctx, "RT", 1); err != nil {
		t.Fatal(err)
	}
	p := newTestProducer(t, c, WithSendTimeout(2*time.Second))

	// Produce continuously while the broker restarts; remember what was acknowledged.
	var acked sync.Map
	var nAcked, nFailed, nUnknown atomic.Int64
	var lastErrMu sync.Mutex
	var lastErr error
	stopProducing := make(chan struct{})
	producing := make(chan struct{})
	go func() {
		defer close(producing)
		for i := 0; ; i++ {
			select {
			case <-stopProducing:
				return
			default:
			}
			body := fmt.Sprintf("r%06d", i)
			_, err := p.SendSync(ctx, &Message{Topic: "RT", Body: []byte(body)})
			switch {
			case err == nil:
				acked.Store(body, true)
				nAcked.Add(1)
			case errors.Is(err, ErrUnknownOutcome):
				nUnknown.Add(1)
			default:
				nFailed.Add(1)
				time.Sleep(5 * time.Millisecond)
			}
			if err != nil {
				lastErrMu.Lock()
				lastErr = err
				lastErrMu.Unlock()
			}
		}
	}()
	defer func() {
		lastErrMu.Lock()
		t.Logf("DIAG acked %d failed %d unknown %d last error: %v", nAcked.Load(), nFailed.Load(), nUnknown.Load(), lastErr)
		lastErrMu.Unlock()
	}()
	testutil.Eventually(t, "acks before the restart", func() bool { return nAcked.Load() >= 200 })
	rc.Group("broker-a").Member(0).Stop()
	before := nAcked.Load()
	rc.Group("broker-a").Member(0).Start()
	testutil.Eventually(t, "acks after the restart", func() bool { return nAcked.Load() >= before+200 })
	close(stopProducing)
	<-producing
	t.Logf("acked %d, failed %d, unknown %d", nAcked.Load(), nFailed.Load(), nUnknown.Load())

	// Every acknowledged message is there after the restart.
	col := newCollector(t)
	co := newTestConsumer(t, c, "RTG", "RT", WithPollTimeout(500*time.Millisecond))
	stop := runConsumer(t, co, col.handle)
	testutil.Eventually(t, "every acknowledged message consumed", func() bool {
		missing := 0
		col.mu.Lock()
		acked.Range(func(k, _ any) bool {
			if col.body[k.(string)] == 0 {
				missing++
			}
			return true
		})
		col.mu.Unlock()
		return missing == 0
	})
	if err := stop(); err != nil {
		t.Fatal(err)
	}
}

// TestIntegrationManySmallBatches pulls queues made of single-message batches, interleaved in
// the commit log, with the default MaxMessages (1024): one pull response is then 1024 slices
// plus the header, 1025 iovecs.
//
// The broker splits such a response into writevs of at most 512 buffers (Linux IOV_MAX is
// 1024).
func TestIntegrationManySmallBatches(t *testing.T) {
	rc := testcluster.New(t, testcluster.Options{}, testcluster.GroupSpec{Name: "broker-a"})
	c := newTestClient(t, rc.NamesrvAddr())
	admin := NewAdmin(c)
	ctx := testCtx(t, 60*time.Second)
	if _, err := admin.CreateTopic(ctx, "DefaultCluster", protocol.TopicConfig{Topic: "Small", ReadQueueNums: 4, WriteQueueNums: 4}); err != nil {
		t.Fatal(err)
	}
	if err := admin.WaitTopicRoute(ctx, "Small", 1); err != nil {
		t.Fatal(err)
	}
	p := newTestProducer(t, c)
	// Round-robin over 4 queues: a queue's batches are not adjacent in the commit log, so the
	// broker cannot merge their slices.
	const n = 6000
	for i := 0; i < n; i++ {
		if _, err := p.SendSync(ctx, &Message{Topic: "Small", Body: []byte(fmt.Sprintf("s%06d", i))}); err != nil {
			t.Fatal(err)
		}
	}
	col := newCollector(t)
	co := newTestConsumer(t, c, "SmallG", "Small")
	stop := runConsumer(t, co, col.handle)
	testutil.Eventually(t, "every single-message batch consumed", func() bool { return col.count() >= n })
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	if st := co.Stats(); st.PullErrors != 0 {
		t.Fatalf("%d pull errors", st.PullErrors)
	}
}

// TestIntegrationLivenessKeepsLongPolls: a real broker holding a consumer's long-polling pulls
// answers the liveness probes on its event loop, so the connection, on which nothing else
// arrives, is kept through many probe rounds; a message produced then reaches the consumer over
// it.
func TestIntegrationLivenessKeepsLongPolls(t *testing.T) {
	rc := testcluster.New(t, testcluster.Options{}, testcluster.GroupSpec{Name: "broker-a"})
	b := rc.Group("broker-a").Member(0)
	var logs testutil.SyncBuffer
	c := newTestClient(t, rc.NamesrvAddr(), WithLivenessProbe(20*time.Millisecond, 500*time.Millisecond),
		WithLogger(slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelWarn}))))
	admin := NewAdmin(c)
	ctx := testCtx(t, 60*time.Second)
	if _, err := admin.CreateTopic(ctx, "DefaultCluster", protocol.TopicConfig{Topic: "LP", ReadQueueNums: 1, WriteQueueNums: 1}); err != nil {
		t.Fatal(err)
	}
	// Consumer.Run fails at once on a topic the NameServer has no route of yet.
	if err := admin.WaitTopicRoute(ctx, "LP", 1); err != nil {
		t.Fatal(err)
	}
	col := newCollector(t)
	stop := runConsumer(t, newTestConsumer(t, c, "G", "LP", WithPollTimeout(30*time.Second)), col.handle)
	defer func() { _ = stop() }()
	testutil.Eventually(t, "a pull held by the broker", func() bool {
		conn := connTo(c, b.Addr())
		return conn != nil && conn.Waiting() > 0
	})
	conn := connTo(c, b.Addr())
	probes := c.pool.probesSent.Load()
	testutil.Eventually(t, "20 probe rounds", func() bool { return c.pool.probesSent.Load() >= probes+20 })
	if connTo(c, b.Addr()) != conn || logs.Count(deadWarning) != 0 {
		t.Fatalf("the connection holding the long poll was replaced:\n%s", logs.String())
	}
	p := newTestProducer(t, c)
	produceSync(t, p, "LP", 0, 1)
	testutil.Eventually(t, "the message consumed", func() bool { return col.count() == 1 })
	if connTo(c, b.Addr()) != conn {
		t.Fatal("the connection was replaced")
	}
}
