package bench

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/petrel-mq/petrel/client"
)

// runFakeVerified is a short verified run of fakeWorkload against fc.
func runFakeVerified(t *testing.T, fc *fakeCluster, tweak func(*Config)) (*Result, string) {
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
	return runFake(t, t.Context(), cfg, fc)
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
	fc := newFakeCluster(nil)
	var topic string
	var replaced, by client.MessageExt
	fc.beforeFinalRead = func(c *fakeCluster) {
		for name := range c.queues {
			if topic == "" || name < topic {
				topic = name
			}
		}
		if len(c.queues[topic]) < 2 || len(c.queues[topic][0]) < 10 || len(c.queues[topic][1]) == 0 {
			t.Errorf("queues too short to replace a message: %d", len(c.queues[topic]))
			return
		}
		q0 := c.queues[topic][0]
		replaced = q0[5]
		by = c.queues[topic][1][0] // a message of the run acknowledged elsewhere
		by.QueueID, by.QueueOffset = replaced.QueueID, replaced.QueueOffset
		q0[5] = by
	}
	res, out := runFakeVerified(t, fc, nil)
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
	fc := newFakeCluster(nil)
	fc.slaves = 1
	fc.beforeFinalRead = func(c *fakeCluster) {
		c.slaveQueues = map[string][][]client.MessageExt{}
		for topic, qs := range c.queues {
			cp := make([][]client.MessageExt, len(qs))
			copy(cp, qs)
			c.slaveQueues[topic] = cp
		}
		for topic, qs := range c.slaveQueues {
			if strings.HasSuffix(topic, "-1") && len(qs[2]) > 0 {
				qs[2] = qs[2][:len(qs[2])-1] // the slave lacks the last message of one queue
			}
		}
	}
	res, out := runFakeVerified(t, fc, func(c *Config) { c.SetReadBrokerID(1) })
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
	fc := newFakeCluster(nil)
	fc.slaves = 1
	fc.beforeFinalRead = func(c *fakeCluster) { c.slaveBehind = 10 }
	res, _ := runFakeVerified(t, fc, func(c *Config) { c.SetReadBrokerID(1) })
	if !res.OK() || len(res.FinalRead) != 2 || res.FinalRead[1].Queues != 6 || res.FinalRead[1].Messages != res.MessagesAcked || fc.slaveBehind != 0 {
		t.Fatalf("%s; final read %+v; problems %q", countsOf(res), res.FinalRead, res.Problems)
	}

	fc = newFakeCluster(nil)
	fc.slaves = 1
	fc.beforeFinalRead = func(c *fakeCluster) { c.slaveBehind = -1 }
	res, _ = runFakeVerified(t, fc, func(c *Config) {
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
	fc := newFakeCluster(nil)
	res, _ := runFakeVerified(t, fc, func(c *Config) {
		c.SetReadBrokerID(3)
		c.DrainTimeout = 200 * time.Millisecond
	})
	if res.OK() || res.Lost != 0 || len(res.FinalRead) != 2 || res.FinalRead[1].Incomplete != 6 || res.FinalRead[1].Unchecked != res.MessagesAcked {
		t.Fatalf("%s; final read %+v; problems %q", countsOf(res), res.FinalRead, res.Problems)
	}
	if !strings.HasPrefix(res.Problems[0], fmt.Sprintf("final read on slave 3: %d acknowledged message(s) not checked: ", res.MessagesAcked)) ||
		!strings.Contains(res.Problems[0], "broker group fake has no member 3") {
		t.Fatalf("problems %q", res.Problems)
	}
}

// TestRunFakeOffsetMovedBack: a consumer's offset moved backwards fails the run, verified or
// not, and consume-only runs too.
func TestRunFakeOffsetMovedBack(t *testing.T) {
	fc := newFakeCluster(nil)
	fc.moved, fc.movedBack = 2, 1
	res, out := runFakeVerified(t, fc, nil)
	if res.OK() || res.OffsetMoved != 2 || res.OffsetMovedBack != 1 || res.Lost+res.Inconsistent != 0 {
		t.Fatalf("%s moved %d back %d; problems %q", countsOf(res), res.OffsetMoved, res.OffsetMovedBack, res.Problems)
	}
	if last := lastLines(out, 1)[0]; last != "lost=0 duplicated=0 reordered=0 corrupted=0 phantom=0 inconsistent=0 offsetMovedBack=1" ||
		!strings.Contains(out, "offsetMoved=2\n") || !strings.Contains(out, "problem           offset moved back: 1 OFFSET_MOVED answer(s)") {
		t.Fatalf("summary:\n%s", out)
	}

	res, out = runFakeVerified(t, fc, func(c *Config) { c.Verify = false })
	if res.OK() || res.OffsetMovedBack != 1 || !strings.Contains(out, "problem           offset moved back") {
		t.Fatalf("without --verify: ok %v back %d\n%s", res.OK(), res.OffsetMovedBack, out)
	}

	res, out = runFake(t, t.Context(), Config{ConsumeOnly: true, Topics: res.TopicNames[:1], DrainTimeout: time.Second}, fc)
	if res.OK() || res.Gaps != 0 || res.OffsetMovedBack != 1 || !strings.Contains(lastLines(out, 1)[0], "corrupted=0 offsetMovedBack=1 (consume-only") {
		t.Fatalf("consume-only: ok %v gaps %d back %d\n%s", res.OK(), res.Gaps, res.OffsetMovedBack, out)
	}
}
