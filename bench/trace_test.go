package bench

import (
	"bytes"
	"context"
	"errors"
	"math"
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
		bs = append(bs, stagedBatch{total, d, total})
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
	if s := out.String(); !strings.Contains(s, "publish p99 (>= 99.50 ms, 1 batches, mean 100.00 ms): network back 100.00 ms (100%)\n") {
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
	err  error // every answer's, when set
}

func (f *fakeTraces) SendTraces(_ context.Context, _ string, from uint64) (*protocol.SendTraceTable, error) {
	f.asks = append(f.asks, from)
	if f.err != nil {
		return nil, f.err
	}
	if from >= uint64(len(f.recs)) { // as a broker: a reader ahead of the ring is told its head
		return &protocol.SendTraceTable{Next: uint64(len(f.recs))}, nil
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
	b := tr.breakdown(0, 0.005, 0.009, 1, 2)
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
	// From the end of the warm-up on: batches answered before it (Done 1101+i*1000) and pulls
	// delivered before it are left out, as the run's histograms leave them out.
	late := tr.breakdown(5000, 0.005, 0.009, 1, 2)
	if late.TracedBatches != 5 || late.Publish[0].Batches != 5 || len(late.EndToEnd) != 0 {
		t.Fatalf("breakdown from 5000: %+v", late)
	}
	tr.stop() // never started: nothing to stop
}

func TestStagesOfSlave(t *testing.T) {
	// Appended at 100 on the master; stages are the slave's next pull, held pull wake-up, slave
	// round trip, ack to durable, unattributed.
	for _, tc := range []struct {
		name       string
		repl       int64
		sl         protocol.TraceSlave
		ok         bool
		total      int64
		dp         int64 // the slave's next pull
		d0, d1, d2 int64
		un         int64
	}{
		{"the in-sync slave that made it durable", 150, protocol.TraceSlave{Served: 120, Acked: 140}, true, 50, 0, 20, 20, 10, 0},
		{"another slave made it durable first", 130, protocol.TraceSlave{Served: 120, Acked: 140}, true, 40, 0, 20, 20, 0, 0},
		{"an async master: nothing waits for the slave", 0, protocol.TraceSlave{Served: 120, Acked: 140}, true, 40, 0, 20, 20, 0, 0},
		{"served before the record was claimed: no serve stamp", 150, protocol.TraceSlave{Acked: 140}, true, 50, 0, 0, 0, 10, 40},
		{"the ack had not come back when the record was read", 150, protocol.TraceSlave{Served: 120}, false, 0, 0, 0, 0, 0, 0},
		{"a serve stamp before the append (clock step)", 150, protocol.TraceSlave{Served: 90, Acked: 140}, true, 50, 0, 0, 0, 10, 40},
		{"an ack stamp before the serve stamp", 150, protocol.TraceSlave{Served: 120, Acked: 110}, true, 50, 0, 20, 0, 0, 30},
		{"the slave still busy: its pull arrived after the append", 150, protocol.TraceSlave{Pulled: 110, Served: 120, Acked: 140}, true, 50, 10, 10, 20, 10, 0},
		{"a held pull, woken by the append", 150, protocol.TraceSlave{Pulled: 95, Served: 120, Acked: 140}, true, 50, 0, 20, 20, 10, 0},
		{"an ack stamp before everything, no durability after the serve", 115, protocol.TraceSlave{Served: 120, Acked: 90}, true, 20, 0, 20, 0, 0, 0},
	} {
		b := protocol.SendTrace{Stamps: stamps(80, 90, 100, 0, tc.repl, 160), Slaves: []protocol.TraceSlave{tc.sl}}
		total, d, ok := stagesOfSlave(&b, &b.Slaves[0])
		if ok != tc.ok {
			t.Errorf("%s: ok %v, want %v", tc.name, ok, tc.ok)
			continue
		}
		if !ok {
			continue
		}
		if total != tc.total || sum(d) != total || d[0] != tc.dp || d[1] != tc.d0 || d[2] != tc.d1 || d[3] != tc.d2 || d[4] != tc.un {
			t.Errorf("%s: total %d stages %v, want %d [%d %d %d %d %d]", tc.name, total, d, tc.total, tc.dp, tc.d0, tc.d1, tc.d2, tc.un)
		}
	}
	if _, _, ok := stagesOfSlave(&protocol.SendTrace{}, &protocol.TraceSlave{Served: 1, Acked: 2}); ok {
		t.Error("a batch without an append stamp was cut")
	}
}

// TestSlaveBreakdown: each slave's stages over the traced batches, in brokerId order; a slave
// missing from some batches counts only those it was in, an unacknowledged batch is counted
// apart, and the publish latency (not the slave's span) selects the tail sets.
func TestSlaveBreakdown(t *testing.T) {
	tr := newTracer(1)
	f := &fakeTraces{}
	for i := range 100 {
		id := uint64(i + 1)
		pub := int64(i+1) * 1e6 // publish latency 1..100 ms
		tr.sent(client.SendTraceClient{ID: id, Topic: "T", BaseQueueOffset: int64(i), Count: 1, Created: 1e9, Done: 1e9 + pub})
		app := int64(1e9 + 1e5)
		// Slave 2 wakes up in 1 ms and answers in 1 ms; slave 1 is in every other batch, wakes up
		// late in the slowest (the tail's cause), and its ack is missing from one.
		slaves := []protocol.TraceSlave{{BrokerID: 2, Served: app + 1e6, Acked: app + 2e6}}
		if i%2 == 1 {
			wake := int64(1e6)
			if i == 99 {
				wake = 50e6
			}
			acked := app + wake + 1e6
			if i == 1 {
				acked = 0
			}
			slaves = append(slaves, protocol.TraceSlave{BrokerID: 1, Served: app + wake, Acked: acked})
		}
		f.recs = append(f.recs, protocol.SendTrace{ID: id, Topic: "T", BaseQueueOffset: int64(i), Count: 1,
			Stamps: stamps(app-2, app-1, app, 0, app+2e6, app+3e6), Slaves: slaves})
	}
	tr.poll(context.Background(), f, []string{"a"})
	b := tr.breakdown(0, 99.5, 100, 1, 2)
	if len(b.Slaves) != 2 || b.Slaves[0].BrokerID != 1 || b.Slaves[1].BrokerID != 2 {
		t.Fatalf("slaves %+v", b.Slaves)
	}
	s1, s2 := b.Slaves[0], b.Slaves[1]
	if s1.Unacked != 1 || s2.Unacked != 0 {
		t.Fatalf("unacked: slave 1 %d, slave 2 %d; want 1, 0", s1.Unacked, s2.Unacked)
	}
	if len(s1.Sets) != 3 || s1.Sets[0].Batches != 49 || s1.Sets[1].Batches != 1 || s1.Sets[1].ThresholdMs != 99.5 || s1.Sets[2].Set != "p99.9" {
		t.Fatalf("slave 1 sets %+v", s1.Sets)
	}
	if p99 := s1.Sets[1]; p99.MeanMs != 51 || p99.Stages[0].MeanMs != 0 || p99.Stages[1].MeanMs != 50 || p99.Stages[2].MeanMs != 1 || p99.Stages[3].MeanMs != 0 {
		t.Fatalf("slave 1 p99 %+v", p99)
	}
	if len(s2.Sets) != 3 || s2.Sets[0].Batches != 100 || s2.Sets[0].MeanMs != 2 || s2.Sets[0].Stages[1].Share != 0.5 {
		t.Fatalf("slave 2 sets %+v", s2.Sets)
	}
	var out bytes.Buffer
	writeBreakdown(&out, b)
	for _, want := range []string{
		"  replication slave 1 p99 (>= 99.50 ms, 1 batches, mean 51.00 ms): held pull wake-up 50.00 ms (98%); slave round trip 1.00 ms (2%)\n",
		"  replication slave 1: 1 traced batches without its ack when the broker's record was read (left out)\n",
		"  replication slave 2 all (>= 0.00 ms, 100 batches, mean 2.00 ms): held pull wake-up 1.00 ms (50%); slave round trip 1.00 ms (50%)\n",
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("summary lacks %q:\n%s", want, out.String())
		}
	}
	if strings.Contains(out.String(), "slave 2: ") || strings.Contains(out.String(), "profiles") {
		t.Errorf("summary has a line it should not:\n%s", out.String())
	}
}

// TestSlaveBreakdownLoneMaster: no slave in any record gives an empty list, not a null.
func TestSlaveBreakdownLoneMaster(t *testing.T) {
	tr := newTracer(1)
	tr.sent(client.SendTraceClient{ID: 1, Created: 1, Done: 10})
	tr.poll(context.Background(), &fakeTraces{recs: []protocol.SendTrace{{ID: 1, Stamps: stamps(2, 3, 4, 0, 0, 5)}}}, []string{"a"})
	if b := tr.breakdown(0, 1, 2, 1, 2); b.Slaves == nil || len(b.Slaves) != 0 {
		t.Fatalf("slaves %#v", b.Slaves)
	}
}

func TestProfilesLine(t *testing.T) {
	for _, tc := range []struct{ exec, cpu, want string }{
		{"", "", ""},
		{"/d/x.trace", "", "  profiles: execution trace /d/x.trace (scheduling waits: go tool trace -pprof=sched /d/x.trace > sched.pprof && go tool pprof -top sched.pprof)"},
		{"", "/d/cpu.pprof", "  profiles: CPU profile /d/cpu.pprof (go tool pprof /d/cpu.pprof)"},
		{"/d/x.trace", "/d/cpu.pprof", "  profiles: execution trace /d/x.trace (scheduling waits: go tool trace -pprof=sched /d/x.trace > sched.pprof && go tool pprof -top sched.pprof); CPU profile /d/cpu.pprof (go tool pprof /d/cpu.pprof)"},
	} {
		if got := profilesLine(tc.exec, tc.cpu); got != tc.want {
			t.Errorf("profilesLine(%q, %q) = %q, want %q", tc.exec, tc.cpu, got, tc.want)
		}
	}
	var out bytes.Buffer
	writeBreakdown(&out, &LatencyBreakdown{TraceEvery: 4, ExecTrace: "/d/x.trace", CPUProfile: "/d/cpu.pprof"})
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	if last := lines[len(lines)-1]; last != profilesLine("/d/x.trace", "/d/cpu.pprof") {
		t.Fatalf("breakdown's last line %q", last)
	}
	if a := absPath("x.trace"); !strings.HasPrefix(a, "/") || !strings.HasSuffix(a, "/x.trace") || absPath("") != "" {
		t.Fatalf("absPath(x.trace) = %q", a)
	}
}

// TestProbe: the run reads a ring from its head, so records of earlier runs are neither joined
// nor counted as dropped; a broker with tracing off or of an older version is named as such.
func TestProbe(t *testing.T) {
	ctx := context.Background()
	f := &fakeTraces{}
	for i := range 5000 { // an earlier run's records, more than a ring holds
		f.recs = append(f.recs, protocol.SendTrace{ID: uint64(i + 1), Topic: "T"})
	}
	head, err := probe(ctx, f, "a")
	if err != nil || head != 5000 || f.asks[0] != math.MaxUint64 {
		t.Fatalf("probe: head %d, %v, asked %v; want 5000 from MaxUint64", head, err, f.asks)
	}
	tr := newTracer(1)
	tr.startAt("a", head)
	f.recs = append(f.recs, protocol.SendTrace{ID: 9001, Topic: "T"})
	tr.poll(ctx, f, []string{"a"})
	if len(tr.brokers) != 1 || tr.dropped != 0 || f.asks[1] != 5000 {
		t.Fatalf("after the probe: %d records, %d dropped, asked %v; want the new one alone", len(tr.brokers), tr.dropped, f.asks)
	}
	for _, tc := range []struct {
		status protocol.Status
		want   string
	}{
		{protocol.StatusServiceNotAvailable, "broker b records no send traces"},
		{protocol.StatusRequestCodeNotSupported, "broker b does not record send traces (an older version)"},
	} {
		_, err := probe(ctx, &fakeTraces{err: &protocol.Error{Status: tc.status, Remark: "why"}}, "b")
		if err == nil || !strings.Contains(err.Error(), tc.want) || !errors.Is(err, tc.status) {
			t.Errorf("%v: probe %v, want %q", tc.status, err, tc.want)
		}
	}
}
