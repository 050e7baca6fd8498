package broker

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/petrel-mq/petrel/client"
	"github.com/petrel-mq/petrel/internal/testutil"
	"github.com/petrel-mq/petrel/protocol"
)

// churnCycles is how many times TestDeleteTopicChurn deletes and re-creates its topic.
func churnCycles() int {
	if testing.Short() {
		return 50
	}
	return 200
}

// TestDeleteTopicChurn deletes topic T and creates it again, churnCycles times, with the
// operator's path (client.Admin.DeleteTopic: every master, then the NameServer; CreateTopic),
// on a SYNC_MASTER and its slave, while senders and long-polling pullers work on T and a
// producer and a consumer group on another topic U:
//
//   - every send of T is stored or refused TOPIC_NOT_EXIST, every pull of T answered or refused
//     TOPIC_NOT_EXIST: no other error, no crash;
//   - a pull started after a deletion never returns a message acknowledged before that
//     deletion began (it was in the deleted queues, whatever the new topic holds);
//   - U sees no error at all, and its consumer gets every message acknowledged on it;
//   - at the end the members' logs are byte-identical.
func TestDeleteTopicChurn(t *testing.T) {
	hc := newHACluster(t, RoleSyncMaster, 1, func(c *Config) { c.MinInSyncReplicas = 2 })
	hc.waitInSync(1)
	m := hc.b(0)
	cl, admin := hc.newAdmin()
	cluster := m.cfg.BrokerClusterName
	cfgOf := func(topic string) protocol.TopicConfig {
		return protocol.TopicConfig{Topic: topic, ReadQueueNums: 2, WriteQueueNums: 2, Perm: protocol.PermReadWrite}
	}
	for _, topic := range []string{"T", "U"} {
		if _, err := admin.CreateTopic(ctx5s(t), cluster, cfgOf(topic)); err != nil {
			t.Fatal(err)
		}
		if err := admin.WaitTopicRoute(ctx5s(t), topic, 1); err != nil {
			t.Fatal(err)
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var wg sync.WaitGroup
	fail := func(format string, args ...any) {
		t.Errorf(format, args...)
		cancel()
	}

	// T: what was acknowledged, in order, and where each deletion began.
	var (
		tmu        sync.Mutex
		ackSeq     = map[string]int{} // body -> the order of its acknowledgement
		acks       int
		deletedAt  []int // per deletion: acks counted when it began
		completed  atomic.Int32
		tSent      atomic.Int64
		tRefused   atomic.Int64
		tPulled    atomic.Int64
		tPullsGone atomic.Int64
	)
	for w := range 2 {
		c := dial(t, m.Addr())
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ctx.Err() == nil; i++ {
				body := fmt.Sprintf("t%d-%d", w, i)
				_, err := sendBatch(c, buildBatch("T", int32(i%2), body))
				switch {
				case err == nil:
					tmu.Lock()
					acks++
					ackSeq[body] = acks
					tmu.Unlock()
					tSent.Add(1)
				case statusOf(err) == protocol.StatusTopicNotExist:
					tRefused.Add(1)
				case ctx.Err() != nil:
				default:
					fail("send %s of T: %v; want success or TOPIC_NOT_EXIST", body, err)
					return
				}
			}
		}()
	}
	for q := range 2 {
		c := dial(t, m.Addr())
		wg.Add(1)
		go func() {
			defer wg.Done()
			off := int64(0)
			for ctx.Err() == nil {
				done := int(completed.Load())
				p, err := pullE(c, "T", int32(q), off, 200)
				switch {
				case err == nil:
				case statusOf(err) == protocol.StatusTopicNotExist:
					tPullsGone.Add(1)
					off = 0
					continue
				case ctx.Err() != nil:
					return
				default:
					fail("pull of T queue %d at %d: %v; want an answer or TOPIC_NOT_EXIST", q, off, err)
					return
				}
				switch p.hdr.Result {
				case protocol.PullFound, protocol.PullNoNewMessage, protocol.PullOffsetMoved:
				default:
					fail("pull of T queue %d at %d: %v", q, off, p.hdr.Result)
					return
				}
				tmu.Lock()
				for _, body := range p.bodies {
					if seq, ok := ackSeq[body]; ok && done > 0 && seq <= deletedAt[done-1] {
						tmu.Unlock()
						fail("pull of T queue %d started after deletion %d returned %s, acknowledged before it began", q, done, body)
						return
					}
				}
				tmu.Unlock()
				tPulled.Add(int64(len(p.bodies)))
				off = p.hdr.NextQueueOffset
			}
		}()
	}

	// U: a producer whose every send must succeed, and a consumer group that must get them all.
	prod, err := client.NewProducer(cl)
	if err != nil {
		t.Fatal(err)
	}
	defer prod.Close(context.Background())
	var umu sync.Mutex
	uAcked := map[string]bool{}
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := 0; ctx.Err() == nil; i++ {
			body := fmt.Sprintf("u-%d", i)
			if _, err := prod.SendSync(ctx, &client.Message{Topic: "U", Body: []byte(body)}); err != nil {
				if ctx.Err() == nil {
					fail("send %s of U: %v", body, err)
				}
				return
			}
			umu.Lock()
			uAcked[body] = true
			umu.Unlock()
		}
	}()
	co, err := client.NewConsumer(cl, "churn-u", "U", client.WithPollTimeout(200*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	uGot := map[string]bool{}
	cctx, ccancel := context.WithCancel(context.Background())
	defer ccancel()
	consumed := make(chan error, 1)
	go func() {
		consumed <- co.Run(cctx, func(_ context.Context, msgs []client.MessageExt) error {
			umu.Lock()
			defer umu.Unlock()
			for _, msg := range msgs {
				uGot[string(msg.Body)] = true
			}
			return nil
		})
	}()

	cycles := churnCycles()
	for i := 0; i < cycles && ctx.Err() == nil; i++ {
		tmu.Lock()
		deletedAt = append(deletedAt, acks)
		tmu.Unlock()
		if _, _, err := admin.DeleteTopic(ctx5s(t), cluster, "T"); err != nil {
			fail("deletion %d: %v", i+1, err)
			break
		}
		completed.Add(1)
		if _, err := admin.CreateTopic(ctx5s(t), cluster, cfgOf("T")); err != nil {
			fail("creation %d: %v", i+1, err)
			break
		}
	}
	cancel()
	wg.Wait()
	if t.Failed() {
		ccancel()
		<-consumed
		return
	}
	umu.Lock()
	want := len(uAcked)
	umu.Unlock()
	testutil.EventuallyWithin(t, 30*time.Second, "U's consumer to get every acknowledged message", func() bool {
		umu.Lock()
		defer umu.Unlock()
		for body := range uAcked {
			if !uGot[body] {
				return false
			}
		}
		return true
	})
	ccancel()
	if err := <-consumed; err != nil && !errors.Is(err, context.Canceled) {
		t.Fatalf("consumer of U: %v", err)
	}
	hc.waitCaughtUp(1)
	assertIdentical(t, admin, m, hc.b(1))
	t.Logf("%d cycles: T sends stored %d, refused %d; T pulls delivered %d, refused %d; U %d messages",
		cycles, tSent.Load(), tRefused.Load(), tPulled.Load(), tPullsGone.Load(), want)
	if tSent.Load() == 0 || want == 0 {
		t.Fatal("no traffic")
	}
}
