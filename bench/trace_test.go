package bench

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/petrel-mq/petrel/client"
	"github.com/petrel-mq/petrel/protocol"
)

func stamps(read, disp, app, flushed, repl, ans int64) [protocol.TraceStamps]int64 {
	return [protocol.TraceStamps]int64{read, disp, app, flushed, repl, ans}
}

func TestStagesOfPublish(t *testing.T) {
	c := client.SendTraceClient{Created: 100, Sealed: 110, Taken: 150, Written: 151, Received: 400, Done: 401}
	for _, tc := range []struct {
		name string
		b    protocol.SendTrace
		want map[string]int64
	}{
		{"async master", protocol.SendTrace{Stamps: stamps(160, 170, 180, 0, 0, 190)},
			map[string]int64{"client batching": 10, "client in-flight wait": 40, "client send": 1, "network to broker": 9, "broker queue": 10,
				"append": 10, "answer": 10, "network back": 210, "client completion": 1}},
		{"replication bounds the wait", protocol.SendTrace{Stamps: stamps(160, 170, 180, 200, 300, 310)},
			map[string]int64{"client batching": 10, "client in-flight wait": 40, "client send": 1, "network to broker": 9, "broker queue": 10,
				"append": 10, "replication wait": 120, "answer": 10, "network back": 90, "client completion": 1}},
		{"flush bounds the wait", protocol.SendTrace{Stamps: stamps(160, 170, 180, 300, 200, 310)},
			map[string]int64{"client batching": 10, "client in-flight wait": 40, "client send": 1, "network to broker": 9, "broker queue": 10,
				"append": 10, "flush wait": 120, "answer": 10, "network back": 90, "client completion": 1}},
		{"a broker clock behind: stamps below the client's go to unattributed", protocol.SendTrace{Stamps: stamps(140, 141, 142, 0, 0, 143)},
			map[string]int64{"client batching": 10, "client in-flight wait": 40, "client send": 1, "network back": 249, "client completion": 1}},
	} {
		total, d := stagesOfPublish(&c, &tc.b)
		if total != 301 || sum(d) != total {
			t.Errorf("%s: total %d, stages sum %d; want 301 both", tc.name, total, sum(d))
		}
		var attributed int64
		for i, name := range publishStages {
			if name == "unattributed" {
				continue
			}
			attributed += d[i]
			if d[i] != tc.want[name] {
				t.Errorf("%s: %s = %d, want %d", tc.name, name, d[i], tc.want[name])
			}
		}
		if un := d[len(d)-1]; un != total-attributed {
			t.Errorf("%s: unattributed %d, want %d", tc.name, un, total-attributed)
		}
	}
}

func TestStagesOfEndToEnd(t *testing.T) {
	c := client.SendTraceClient{Created: 100, Sealed: 110, Taken: 110, Written: 111, Received: 400, Done: 401}
	b := protocol.SendTrace{Stamps: stamps(120, 121, 130, 0, 0, 140)}
	// A pull waiting before the append: its wake-up and answer.
	_, d := stagesOfEndToEnd(&c, &b, &pullRecord{sent: 50, received: 170, delivered: 175})
	if d[6] != 0 || d[7] != 40 || d[8] != 5 || sum(d) != 75 {
		t.Fatalf("held pull: %v", d)
	}
	// No pull waiting: the consumer was busy until 200.
	_, d = stagesOfEndToEnd(&c, &b, &pullRecord{sent: 200, received: 230, delivered: 260})
	if d[6] != 70 || d[7] != 30 || d[8] != 30 || sum(d) != 160 {
		t.Fatalf("consumer not polling: %v", d)
	}
}

func TestPullOf(t *testing.T) {
	tr := newTracer(1)
	for _, p := range []client.PullTiming{{Topic: "T", QueueID: 1, From: 0, Next: 10}, {Topic: "T", QueueID: 1, From: 10, Next: 12}, {Topic: "T", QueueID: 2, From: 0, Next: 5}} {
		tr.pulled(p)
	}
	tr.delivered("T", 1, 10, 99)
	for _, tc := range []struct {
		q        int32
		off      int64
		from     int64
		found    bool
		delivery int64
	}{{1, 0, 0, true, 0}, {1, 9, 0, true, 0}, {1, 11, 10, true, 99}, {1, 12, 0, false, 0}, {2, 4, 0, true, 0}, {3, 0, 0, false, 0}} {
		p := tr.pullOf("T", tc.q, tc.off)
		if (p != nil) != tc.found || p != nil && (p.from != tc.from || p.delivered != tc.delivery) {
			t.Errorf("pullOf(T, %d, %d) = %+v, want found %v from %d", tc.q, tc.off, p, tc.found, tc.from)
		}
	}
}

func TestStageSetsAndSummary(t *testing.T) {
	var bs []stagedBatch
	for i := range 100 { // 1..100 ms, all in "append" but the slowest, whose time is network
		d := make([]int64, len(publishStages))
		total := int64(i+1) * 1e6
		if i == 99 {
			d[9] = total
		} else {
			d[5] = total
		}
		bs = append(bs, stagedBatch{total, d})
	}
	sets := stageSets(bs, publishStages, 99.5, 100)
	if len(sets) != 3 || sets[0].Batches != 100 || sets[1].Batches != 1 || sets[2].Batches != 1 {
		t.Fatalf("sets %+v", sets)
	}
	if sets[1].Stages[9].Share != 1 || sets[1].Stages[5].Share != 0 || sets[0].MeanMs != 50.5 {
		t.Fatalf("tail set %+v, all %+v", sets[1], sets[0])
	}
	var out bytes.Buffer
	writeBreakdown(&out, &LatencyBreakdown{TraceEvery: 8, TracedBatches: 100, Publish: sets})
	if s := out.String(); !strings.Contains(s, "publish p99 (>= 99.50 ms, 1 batches, mean 100.00 ms): network back 100.00 ms (100%);") {
		t.Fatalf("summary:\n%s", s)
	}
	if stageSets(nil, publishStages, 1, 2) != nil {
		t.Fatal("sets of no batches")
	}
}

// fakeTraces serves a fixed ring's records from a sequence number on.
type fakeTraces struct {
	recs []protocol.SendTrace
	asks []uint64
}

func (f *fakeTraces) SendTraces(_ context.Context, _ string, from uint64) (*protocol.SendTraceTable, error) {
	f.asks = append(f.asks, from)
	if from >= uint64(len(f.recs)) {
		return &protocol.SendTraceTable{Next: from}, nil
	}
	return &protocol.SendTraceTable{Next: uint64(len(f.recs)), Traces: f.recs[from:]}, nil
}

// TestTracerJoins: client traces, broker records and pulls join by ID and queue offset; a client
// trace without a broker record, and a batch no pull delivered, are left out of the sets they
// cannot be cut for.
func TestTracerJoins(t *testing.T) {
	tr := newTracer(4)
	f := &fakeTraces{}
	for i := range 10 {
		id := uint64(i + 1)
		base := int64(i * 10)
		tr.sent(client.SendTraceClient{ID: id, Topic: "T", QueueID: 0, BaseQueueOffset: base, Count: 10,
			Created: 1000, Sealed: 1010, Taken: 1010, Written: 1011, Received: 1100 + int64(i)*1000, Done: 1101 + int64(i)*1000})
		if i < 9 { // the last one's record is not in the ring
			f.recs = append(f.recs, protocol.SendTrace{ID: id, Topic: "T", BaseQueueOffset: base, Count: 10, Stamps: stamps(1020, 1021, 1030, 0, 0, 1040)})
		}
		if i < 8 { // nor did a pull deliver the 9th
			tr.pulled(client.PullTiming{Topic: "T", From: base, Next: base + 10, Sent: 500, Received: 1200})
			tr.delivered("T", 0, base, 1300)
		}
	}
	tr.sent(client.SendTraceClient{ID: 99, Err: errors.New("failed")}) // failed sends are not kept
	tr.poll(context.Background(), f, []string{"a"})
	tr.poll(context.Background(), f, []string{"a"})
	if len(f.asks) != 2 || f.asks[1] != 9 {
		t.Fatalf("asked from %v, want [0 9]", f.asks)
	}
	b := tr.breakdown(0.005, 0.009, 1, 2)
	if b.TracedBatches != 9 || b.Publish[0].Batches != 9 || b.EndToEnd[0].Batches != 8 {
		t.Fatalf("breakdown %+v", b)
	}
	// The publish tail is the network back (answers read late); end to end it is the wake-up.
	if p99 := b.Publish[1]; p99.Set != "p99" || p99.Stages[9].Share < 0.9 {
		t.Fatalf("publish p99 %+v", p99)
	}
	if all := b.EndToEnd[0]; all.Stages[7].MeanMs != 170.0/1e6 || all.Stages[8].MeanMs != 100.0/1e6 {
		t.Fatalf("end to end %+v", all)
	}
	tr.stop() // never started: nothing to stop
}
