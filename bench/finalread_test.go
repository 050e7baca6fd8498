package bench

import (
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/petrel-mq/petrel/internal/fakebroker"
	"github.com/petrel-mq/petrel/protocol"
	"github.com/petrel-mq/petrel/protocol/rpc"
)

// runFakeVerified is a short verified run of fakeWorkload against fb.
func runFakeVerified(t *testing.T, fb *fakeBench, tweak func(*Config)) (*Result, string) {
	t.Helper()
	cfg := Config{
		WorkloadFile: writeWorkload(t, fmt.Sprintf(fakeWorkload, 5000)),
		Duration:     200 * time.Millisecond,
		Warmup:       0,
		Verify:       true,
		DrainTimeout: time.Second,
	}
	if tweak != nil {
		tweak(&cfg)
	}
	return runFake(t, t.Context(), cfg, fb)
}

// finalReadTopicID names the topics of the tests that change them at the final read.
const finalReadTopicID = "fr"

// lacksLast makes slave answer the final read's pulls of one queue as a member whose queue ends
// at offset last: it lacks the messages from last on.
func (fb *fakeBench) lacksLast(slave *fakebroker.Broker, topic string, queueID int32, last int64) {
	slave.Control(protocol.CodePullMessage, func(req *rpc.Request) (rpc.Reply, fakebroker.Verdict) {
		var h protocol.PullRequestHeader
		if h.ReadFrom(req.Header) != nil || h.ConsumerGroup != "" || h.Topic != topic || h.QueueID != queueID {
			return rpc.Reply{}, fakebroker.Pass
		}
		if h.QueueOffset >= last {
			return rpc.Reply{Header: &protocol.PullResponseHeader{Result: protocol.PullNoNewMessage, NextQueueOffset: h.QueueOffset, MaxOffset: last}}, fakebroker.Answer
		}
		rep := slave.Serve(req)
		ph, ok := rep.Header.(*protocol.PullResponseHeader)
		if !ok || ph.Result != protocol.PullFound {
			return rep, fakebroker.Answer
		}
		msgs, err := fakebroker.DecodeBatches(rep.Body)
		if err != nil {
			return rpc.Errorf(protocol.StatusSystemError, "fake: %v", err), fakebroker.Answer
		}
		var body []byte
		for _, m := range msgs {
			if m.QueueOffset < last {
				b, err := fakebroker.EncodeMessage(topic, queueID, m)
				if err != nil {
					return rpc.Errorf(protocol.StatusSystemError, "fake: %v", err), fakebroker.Answer
				}
				body = append(body, b...)
			}
		}
		ph.MaxOffset, ph.NextQueueOffset = min(ph.MaxOffset, last), min(ph.NextQueueOffset, last)
		rep.Body = body
		return rep, fakebroker.Answer
	})
}

// notReplicated makes slave answer the final read's next n pulls (n < 0: every one) "not
// here", as a slave that has not replicated the offsets yet. It returns the count of those
// answers still to give.
func (fb *fakeBench) notReplicated(slave *fakebroker.Broker, n int64) *atomic.Int64 {
	left := new(atomic.Int64)
	left.Store(n)
	slave.Control(protocol.CodePullMessage, func(req *rpc.Request) (rpc.Reply, fakebroker.Verdict) {
		var h protocol.PullRequestHeader
		if h.ReadFrom(req.Header) != nil || h.ConsumerGroup != "" {
			return rpc.Reply{}, fakebroker.Pass
		}
		for {
			v := left.Load()
			if v == 0 {
				return rpc.Reply{}, fakebroker.Pass
			}
			if v < 0 || left.CompareAndSwap(v, v-1) {
				break
			}
		}
		return rpc.Reply{Header: &protocol.PullResponseHeader{Result: protocol.PullNotHere, NextQueueOffset: h.QueueOffset}}, fakebroker.Answer
	})
	return left
}

// lastLines returns the last n lines of a run's output.
func lastLines(out string, n int) []string {
	lines := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
	return lines[max(0, len(lines)-n):]
}

// TestRunFakeFinalReadFindsAnotherMessage: every message was consumed where it was
// acknowledged, but by the end the log holds another message at one of those offsets (it was
// truncated and the offset given out again). Only the final read can tell: lost and
// inconsistent, and the run fails.
func TestRunFakeFinalReadFindsAnotherMessage(t *testing.T) {
	fb := newFakeBench(t, 0, nil)
	var topic string
	var replaced, by fakebroker.StoredMessage
	fb.beforeFinalRead = func() {
		topic = "petrel-bench-" + finalReadTopicID + "-0"
		q1 := fb.g.Messages(topic, 1)
		fb.g.EditQueue(topic, 0, func(q0 []fakebroker.StoredMessage) []fakebroker.StoredMessage {
			if len(q0) < 10 || len(q1) == 0 {
				t.Errorf("queues too short to replace a message: %d and %d messages", len(q0), len(q1))
				return q0
			}
			replaced = q0[5]
			by = q1[0] // a message of the run acknowledged elsewhere
			by.QueueOffset = replaced.QueueOffset
			q0[5] = by
			return q0
		})
	}
	res, out := runFakeVerified(t, fb, func(c *Config) { c.TopicID = finalReadTopicID })
	if res.OK() || res.Lost != 1 || res.Inconsistent != 1 || res.Duplicated+res.Reordered+res.Corrupted+res.Phantom+res.OffsetMovedBack != 0 ||
		!res.Drained || res.MessagesConsumed != 2*res.MessagesAcked {
		t.Fatalf("%s inconsistent=%d; problems %q", countsOf(res), res.Inconsistent, res.Problems)
	}
	if len(res.FinalRead) != 1 || res.FinalRead[0].Lost != 1 || res.FinalRead[0].Inconsistent != 1 || res.FinalRead[0].Queues != 6 {
		t.Fatalf("final read %+v", res.FinalRead)
	}
	id, _ := ParseIdentity(replaced.Properties)
	byID, _ := ParseIdentity(by.Properties)
	want := fmt.Sprintf("lost (final read on the master): producer %d message %d acknowledged at %s@fake#0 offset 5; offset 5 holds producer %d message %d",
		id.Producer, id.Seq, topic, byID.Producer, byID.Seq)
	if !strings.Contains(strings.Join(res.Problems, "\n"), want) {
		t.Fatalf("problems %q lack %q", res.Problems, want)
	}
	last := lastLines(out, 2)
	if !strings.HasPrefix(last[0], "final read: master queues=6 messages=") ||
		last[1] != "lost=1 duplicated=0 reordered=0 corrupted=0 phantom=0 inconsistent=1 offsetMovedBack=0" {
		t.Fatalf("summary ends with %q", last)
	}
}

// TestRunFakeFinalReadOfASlave: with reads pinned to slave 1, the final read reads the slave
// too, to the master's max offset; a slave whose queue ends early loses what it lacks.
func TestRunFakeFinalReadOfASlave(t *testing.T) {
	fb := newFakeBench(t, 1, nil)
	fb.beforeFinalRead = func() {
		topic := "petrel-bench-" + finalReadTopicID + "-1"
		fb.lacksLast(fb.g.Members()[1], topic, 2, fb.g.MaxOffset(topic, 2)-1) // the slave lacks the last message of one queue
	}
	res, out := runFakeVerified(t, fb, func(c *Config) {
		c.TopicID = finalReadTopicID
		c.SetReadBrokerID(1)
	})
	if res.OK() || res.Lost != 1 || res.Inconsistent != 0 || !res.Drained {
		t.Fatalf("%s inconsistent=%d; problems %q", countsOf(res), res.Inconsistent, res.Problems)
	}
	if len(res.FinalRead) != 2 || res.FinalRead[0].BrokerID != 0 || res.FinalRead[0].Lost != 0 || res.FinalRead[1].BrokerID != 1 || res.FinalRead[1].Lost != 1 ||
		res.FinalRead[0].Queues != 6 || res.FinalRead[1].Queues != 6 || res.FinalRead[1].Messages != res.FinalRead[0].Messages-1 {
		t.Fatalf("final read %+v", res.FinalRead)
	}
	if !strings.Contains(strings.Join(res.Problems, "\n"), "lost (final read on slave 1): ") || !strings.Contains(strings.Join(res.Problems, "\n"), "the member's queue ends at offset") {
		t.Fatalf("problems %q", res.Problems)
	}
	want := fmt.Sprintf("final read: master queues=6 messages=%d; slave 1 queues=6 messages=%d", res.FinalRead[0].Messages, res.FinalRead[1].Messages)
	if last := lastLines(out, 2); last[0] != want {
		t.Fatalf("summary ends with %q, want %q", last, want)
	}
	if !strings.Contains(out, "final read of 6 queue(s) on master, slave 1 ...\n") || strings.Count(out, "\nfinal read:") != 1 {
		t.Fatal("no final read announcement")
	}
}

// TestRunFakeFinalReadSlaveCatchingUp: a slave that answers "not here" (it has not replicated
// the offset yet) is asked again until it has; one that never catches up leaves its queues
// incomplete and its messages unchecked, which fails the run.
func TestRunFakeFinalReadSlaveCatchingUp(t *testing.T) {
	fb := newFakeBench(t, 1, nil)
	behind := fb.notReplicated(fb.g.Members()[1], 10)
	res, _ := runFakeVerified(t, fb, func(c *Config) { c.SetReadBrokerID(1) })
	if !res.OK() || len(res.FinalRead) != 2 || res.FinalRead[1].Queues != 6 || res.FinalRead[1].Messages != res.MessagesAcked || behind.Load() != 0 {
		t.Fatalf("%s; final read %+v; problems %q; %d answers still to give", countsOf(res), res.FinalRead, res.Problems, behind.Load())
	}

	fb = newFakeBench(t, 1, nil)
	fb.notReplicated(fb.g.Members()[1], -1)
	res, _ = runFakeVerified(t, fb, func(c *Config) {
		c.SetReadBrokerID(1)
		c.DrainTimeout = 100 * time.Millisecond
	})
	if res.OK() || res.Lost != 0 || len(res.FinalRead) != 2 || res.FinalRead[1].Incomplete != 6 || res.FinalRead[1].Unchecked != res.MessagesAcked ||
		!strings.Contains(res.Problems[0], "slave 1 had not replicated offset 0") {
		t.Fatalf("%s; final read %+v; problems %q", countsOf(res), res.FinalRead, res.Problems)
	}
}

// TestRunFakeFinalReadUnreachableSlave: a member the route does not list is not read: its
// acknowledged messages are unchecked, which fails the run, and its queues are not waited for
// one by one.
func TestRunFakeFinalReadUnreachableSlave(t *testing.T) {
	fb := newFakeBench(t, 3, nil)
	// Slave 3 serves the run's consumers, then leaves the route before the final read.
	fb.beforeFinalRead = func() { fb.fc.SetRegistered(fb.g.Members()[3], false) }
	res, _ := runFakeVerified(t, fb, func(c *Config) {
		c.SetReadBrokerID(3)
		c.DrainTimeout = 200 * time.Millisecond
	})
	if res.OK() || res.Lost != 0 || len(res.FinalRead) != 2 || res.FinalRead[1].Incomplete != 6 || res.FinalRead[1].Unchecked != res.MessagesAcked {
		t.Fatalf("%s; final read %+v; problems %q", countsOf(res), res.FinalRead, res.Problems)
	}
	if !strings.HasPrefix(res.Problems[0], fmt.Sprintf("final read on slave 3: %d acknowledged message(s) not checked: ", res.MessagesAcked)) ||
		!strings.Contains(res.Problems[0], "lists no member with brokerId 3 in broker group fake") {
		t.Fatalf("problems %q", res.Problems)
	}
}

// TestRunFakeOffsetMovedBack: a consumer's offset moved backwards fails the run, verified or
// not, and consume-only runs too.
func TestRunFakeOffsetMovedBack(t *testing.T) {
	fb := newFakeBench(t, 0, nil)
	fb.movedSet, fb.moved, fb.movedBack = true, 2, 1
	res, out := runFakeVerified(t, fb, nil)
	if res.OK() || res.OffsetMoved != 2 || res.OffsetMovedBack != 1 || res.Lost+res.Inconsistent != 0 {
		t.Fatalf("%s moved %d back %d; problems %q", countsOf(res), res.OffsetMoved, res.OffsetMovedBack, res.Problems)
	}
	if last := lastLines(out, 1)[0]; last != "lost=0 duplicated=0 reordered=0 corrupted=0 phantom=0 inconsistent=0 offsetMovedBack=1" ||
		!strings.Contains(out, "offsetMoved=2\n") || !strings.Contains(out, "problem           offset moved back: 1 OFFSET_MOVED answer(s)") {
		t.Fatalf("summary:\n%s", out)
	}

	res, out = runFakeVerified(t, fb, func(c *Config) { c.Verify = false })
	if res.OK() || res.OffsetMovedBack != 1 || !strings.Contains(out, "problem           offset moved back") {
		t.Fatalf("without --verify: ok %v back %d\n%s", res.OK(), res.OffsetMovedBack, out)
	}

	res, out = runFake(t, t.Context(), Config{ConsumeOnly: true, Topics: res.TopicNames[:1], DrainTimeout: time.Second}, fb)
	if res.OK() || res.Gaps != 0 || res.OffsetMovedBack != 1 || !strings.Contains(lastLines(out, 1)[0], "corrupted=0 offsetMovedBack=1 (consume-only") {
		t.Fatalf("consume-only: ok %v gaps %d back %d\n%s", res.OK(), res.Gaps, res.OffsetMovedBack, out)
	}
}
