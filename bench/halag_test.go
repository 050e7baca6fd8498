package bench

import (
	"bytes"
	"encoding/json"
	"fmt"
	"reflect"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/petrel-mq/petrel/client"
	"github.com/petrel-mq/petrel/protocol"
)

func TestLagSamplerReport(t *testing.T) {
	s := newLagSampler(nil, []groupInfo{{name: "broker-b", master: "b:0", slaves: 1}, {name: "broker-a", master: "a:0", slaves: 2}}, time.Millisecond)
	if s == nil || len(s.groups) != 2 {
		t.Fatalf("sampler %+v", s)
	}
	// 100 samples of broker-a: slave 1 lags 0..99 KiB and 0..99 ms; slave 2 is always caught up
	// and out of the in-sync set half the time. broker-b's slave has replicated nothing.
	for i := range int64(100) {
		s.add("broker-a", &protocol.HAStatus{Slaves: []protocol.SlaveStatus{
			{BrokerID: 2, Addr: "a:2", InSync: i%2 == 0, Connected: true, RawBytes: 1000 + 400*i, WireBytes: 1000 + 100*i},
			{BrokerID: 1, Addr: "a:1", LagBytes: i << 10, LagMs: i, InSync: true, Connected: i > 0, RawBytes: 1000 + 200*i, WireBytes: 1000 + 100*i},
		}})
	}
	s.add("broker-b", &protocol.HAStatus{Slaves: []protocol.SlaveStatus{{BrokerID: 1, Addr: "b:1", LagBytes: 5, RawBytes: 0, WireBytes: 0}}})
	got := s.report()
	if len(got) != 3 || got[0].BrokerName != "broker-a" || got[0].BrokerID != 1 || got[1].BrokerID != 2 || got[2].BrokerName != "broker-b" {
		t.Fatalf("order: %+v", got)
	}
	a1, a2, b1 := got[0], got[1], got[2]
	// HDR quantiles keep 3 significant digits.
	near := func(what string, v, want int64) {
		t.Helper()
		if v < want-want/500-1 || v > want+want/500+1 {
			t.Errorf("%s = %d, want about %d", what, v, want)
		}
	}
	near("slave 1 lag bytes p50", a1.LagBytes50pct, 49<<10)
	near("slave 1 lag bytes p99", a1.LagBytes99pct, 98<<10)
	near("slave 1 lag bytes max", a1.LagBytesMax, 99<<10)
	near("slave 1 lag ms p50", a1.LagMs50pct, 49)
	near("slave 1 lag ms max", a1.LagMsMax, 99)
	if a1.Samples != 100 || a1.InSyncSamples != 100 || a1.ConnectedSamples != 99 || a1.Addr != "a:1" {
		t.Errorf("slave 1 counts %+v", a1)
	}
	// The ratio is over the run: from the first sample's counters to the last's.
	if a1.RawBytes != 200*99 || a1.WireBytes != 100*99 || a1.CompressionRatio != 2 {
		t.Errorf("slave 1 compression %+v", a1)
	}
	if a2.CompressionRatio != 4 || a2.InSyncSamples != 50 || a2.LagBytesMax != 0 || a2.LagMs99pct != 0 {
		t.Errorf("slave 2 %+v", a2)
	}
	if b1.CompressionRatio != 0 || b1.RawBytes != 0 || b1.Samples != 1 || b1.LagBytesMax != 5 {
		t.Errorf("broker-b slave 1 %+v", b1)
	}
	// Values out of range are clamped, never lost.
	s.add("broker-b", &protocol.HAStatus{Slaves: []protocol.SlaveStatus{{BrokerID: 1, LagBytes: 1 << 50, LagMs: -3}}})
	if r := s.report()[2]; r.Samples != 2 || r.LagBytesMax < lagHighestBytes-lagHighestBytes/500 {
		t.Errorf("clamped sample: %+v", r)
	}
}

func TestLagSamplerNone(t *testing.T) {
	// A group the route lists without slaves is sampled all the same (a slave may register
	// later); while its master lists none, there is nothing to report.
	s := newLagSampler(nil, []groupInfo{{name: "a", master: "a:0"}}, time.Millisecond)
	if s == nil {
		t.Fatal("no sampler for a group with a master")
	}
	s.add("a", &protocol.HAStatus{})
	if r := s.report(); len(r) != 0 {
		t.Errorf("a master without slaves reported %+v", r)
	}
	if s := newLagSampler(nil, []groupInfo{{name: "a", slaves: 2}}, time.Millisecond); s != nil {
		t.Error("a sampler for a group without a master")
	}
	if s := newLagSampler(nil, []groupInfo{{name: "a", master: "a:0", slaves: 2}}, 0); s != nil {
		t.Error("a sampler with sampling off")
	}
}

// TestLagSamplerRun: nothing is sampled before start; sampling begins at once when started and
// takes a last sample when stopped.
// lagDriver starts a fake group "fake" with two slaves, lagging by 100 bytes per brokerId, and
// returns the bench's driver on it and the count of replication status requests its master got.
func lagDriver(t *testing.T) (*fakeBench, *hookedCluster, *atomic.Int64) {
	t.Helper()
	fb := newFakeBench(t, 2, map[string]int32{"t": 1})
	calls := new(atomic.Int64)
	fb.reportLag(fb.master(), 100, calls)
	cl, err := fb.driver(t.Context(), -1)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cl.close() })
	return fb, cl, calls
}

func TestLagSamplerRun(t *testing.T) {
	fb, cl, calls := lagDriver(t)
	group := []groupInfo{{name: fakeGroup, master: fb.master().Addr(), slaves: 2}}
	s := newLagSampler(cl, group, time.Hour)
	start, stop, done := make(chan struct{}), make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		s.run(start, stop)
	}()
	time.Sleep(20 * time.Millisecond)
	if n := calls.Load(); n != 0 {
		t.Fatalf("%d samples before start", n)
	}
	close(start)
	for calls.Load() != 1 {
		time.Sleep(time.Millisecond)
	}
	close(stop)
	<-done
	r := s.report()
	if len(r) != 2 || r[0].Samples != 2 || r[1].LagBytesMax != 200 || r[0].CompressionRatio != 3 || s.samples != 2 {
		t.Fatalf("report %+v, %d rounds", r, s.samples)
	}
	// Stopped before it started: no sample at all.
	s = newLagSampler(cl, group, time.Millisecond)
	stop = make(chan struct{})
	close(stop)
	s.run(make(chan struct{}), stop)
	if s.samples != 0 {
		t.Fatalf("%d samples", s.samples)
	}
}

// TestLagSamplerFollowsNewMaster: after a failover the old master's address fails; the sampler
// looks the group's master up again and samples the new one.
func TestLagSamplerFollowsNewMaster(t *testing.T) {
	fb, cl, calls := lagDriver(t)
	old := fb.master()
	group := []groupInfo{{name: fakeGroup, master: old.Addr(), slaves: 2}}
	s := newLagSampler(cl, group, time.Millisecond)
	s.topics = []string{"t"}
	s.sample()
	// The master dies and another member takes over.
	old.Stop()
	newer := fb.g.AddMember(0, true)
	fb.reportLag(newer, 100, calls)
	s.sample() // fails on the old master, then finds the new one
	if s.groups[0].master != newer.Addr() || s.errors != 1 {
		t.Fatalf("master %q after a failover (the new one: %s), %d errors", s.groups[0].master, newer.Addr(), s.errors)
	}
	s.sample()
	if r := s.report(); len(r) != 2 || r[0].Samples != 2 {
		t.Fatalf("report after the failover: %+v", r)
	}
	// Without topics (consume-only runs) nothing is looked up again.
	s2 := newLagSampler(cl, group, time.Millisecond)
	s2.sample()
	if s2.groups[0].master != old.Addr() {
		t.Fatalf("looked up without topics: %q", s2.groups[0].master)
	}
}

func TestServedByList(t *testing.T) {
	if got := servedByList(nil); len(got) != 0 {
		t.Errorf("nil: %+v", got)
	}
	got := servedByList(map[int64]client.ServedCount{2: {Pulls: 3, Messages: 30}, 1: {Pulls: 1, NotHere: 4}})
	want := []ServedBy{{BrokerID: 0}, {BrokerID: 1, Pulls: 1, NotHere: 4}, {BrokerID: 2, Pulls: 3, Messages: 30}}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("got %+v, want %+v", got, want)
	}
	got = servedByList(map[int64]client.ServedCount{0: {Pulls: 7, Messages: 70}})
	if len(got) != 1 || got[0].Pulls != 7 || got[0].Messages != 70 {
		t.Errorf("master only: %+v", got)
	}
}

// TestReplicationSummary checks the summary lines and the JSON fields of the served-by counts
// and the replication lag.
// TestLagSamplerMasterRestart: when the master restarts during a run its byte counters start
// again from 0. The compression is then over what the slave received before the restart plus
// what it received since, never a ratio of the few bytes since the restart alone; with nothing
// known at all it is "-".
func TestLagSamplerMasterRestart(t *testing.T) {
	s := newLagSampler(nil, []groupInfo{{name: "broker-a", master: "a:0", slaves: 2}}, time.Millisecond)
	sample := func(raw1, wire1, raw2, wire2 int64) {
		s.add("broker-a", &protocol.HAStatus{Slaves: []protocol.SlaveStatus{
			{BrokerID: 1, Addr: "a:1", Connected: true, RawBytes: raw1, WireBytes: wire1},
			{BrokerID: 2, Addr: "a:2", Connected: true, RawBytes: raw2, WireBytes: wire2},
		}})
	}
	// Slave 1 gets 4 MB -> 1 MB before the restart, then 314 B -> 100 B since. Slave 2 had
	// replicated everything before the run and gets nothing since the restart.
	for i := range int64(5) {
		sample(1000+i<<20, 1000+i<<18, 5000, 2000)
	}
	sample(314, 100, 0, 0) // the master restarted
	got := s.report()
	s1, s2 := got[0], got[1]
	if s1.RawBytes != 4<<20+314 || s1.WireBytes != 1<<20+100 || s1.CounterResets != 1 || s1.CompressionRatio != round3(float64(4<<20+314)/float64(1<<20+100)) {
		t.Errorf("slave 1 across the restart: %+v", s1)
	}
	if s2.CompressionRatio != 0 || s2.RawBytes != 0 || s2.WireBytes != 0 || s2.CounterResets != 1 {
		t.Errorf("slave 2, nothing replicated but a restart: %+v", s2)
	}
	res := newResult()
	res.Replication = got
	var b bytes.Buffer
	res.writeSummary(&b, summary{})
	for _, want := range []string{
		"in sync 0/6 | compression 4.00x (4.0 MB -> 1.0 MB) across 1 master restart(s)\n",
		"in sync 0/6 | compression - across 1 master restart(s)\n",
	} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("summary lacks %q:\n%s", want, b.String())
		}
	}
}

func TestReplicationSummary(t *testing.T) {
	res := newResult()
	res.ServedBy = []ServedBy{{BrokerID: 0, Pulls: 10, Messages: 100}, {BrokerID: 1, Pulls: 5, Messages: 50, NotHere: 2}}
	res.ReadBrokerID = 1
	res.Replication = []SlaveReplication{{BrokerName: "broker-a", BrokerID: 1, Addr: "h:1", Samples: 4, InSyncSamples: 3,
		LagBytes50pct: 10, LagBytes99pct: 20, LagBytesMax: 30, LagMs50pct: 1, LagMs99pct: 2, LagMsMax: 3,
		RawBytes: 3 << 20, WireBytes: 1 << 20, CompressionRatio: 3}}
	res.HASampleIntervalMs = 100
	var b bytes.Buffer
	res.writeSummary(&b, summary{})
	for _, want := range []string{
		"served by         master pulls=10 msgs=100 notHere=0 | slave 1 pulls=5 msgs=50 notHere=2 (reads pinned to slave 1)\n",
		"replication       broker-a slave 1 h:1: lag bytes p50 10 p99 20 max 30 | lag ms p50 1 p99 2 max 3 | in sync 3/4 | compression 3.00x (3.0 MB -> 1.0 MB)\n",
		"sampled every 100 ms",
	} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("summary lacks %q:\n%s", want, b.String())
		}
	}
	data, err := json.Marshal(res)
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(data, &m); err != nil {
		t.Fatal(err)
	}
	sb := m["servedBy"].([]any)
	if len(sb) != 2 || sb[1].(map[string]any)["notHere"] != 2.0 || m["readBrokerId"] != 1.0 {
		t.Errorf("servedBy %v readBrokerId %v", m["servedBy"], m["readBrokerId"])
	}
	rep := m["replication"].([]any)[0].(map[string]any)
	for _, k := range []string{"brokerName", "brokerId", "addr", "samples", "inSyncSamples", "connectedSamples", "lagBytes50pct", "lagBytes99pct",
		"lagBytesMax", "lagMs50pct", "lagMs99pct", "lagMsMax", "rawBytes", "wireBytes", "compressionRatio"} {
		if _, ok := rep[k]; !ok {
			t.Errorf("replication entry lacks %s: %v", k, rep)
		}
	}
	// Without slaves and served-by counts the summary has neither line.
	b.Reset()
	newResult().writeSummary(&b, summary{})
	if strings.Contains(b.String(), "served by") || strings.Contains(b.String(), "replication") {
		t.Errorf("empty result's summary:\n%s", b.String())
	}
}

// TestRunFakeReplication: a run against a cluster whose group has slaves samples their lag
// during the test and drain and reports it with the served-by counts, not during the warm-up.
func TestRunFakeReplication(t *testing.T) {
	fb := newFakeBench(t, 2, nil)
	fb.reportLag(fb.master(), 1000, new(atomic.Int64))
	res, out := runFake(t, t.Context(), Config{
		WorkloadFile:     writeWorkload(t, fmt.Sprintf(fakeWorkload, 2000)),
		Duration:         300 * time.Millisecond,
		Warmup:           200 * time.Millisecond,
		HASampleInterval: 20 * time.Millisecond,
		Verify:           true,
	}, fb)
	if !res.OK() || len(res.Replication) != 2 || len(res.ServedBy) != 1 {
		t.Fatalf("ok %v replication %+v served %+v", res.OK(), res.Replication, res.ServedBy)
	}
	if sb := res.ServedBy[0]; sb.BrokerID != 0 || sb.Messages != res.MessagesConsumed || sb.Pulls == 0 {
		t.Errorf("served by %+v, consumed %d", sb, res.MessagesConsumed)
	}
	// About 300 ms / 20 ms samples in the test, a few more in the drain, none in the warm-up.
	r := res.Replication[1]
	if r.Samples < 5 || r.Samples > 40 || r.LagBytesMax != 2000 || r.LagMsMax != 2 || r.CompressionRatio != 3 || res.HASampleIntervalMs != 20 {
		t.Errorf("slave 2 %+v", r)
	}
	if !strings.Contains(out, "replication       fake slave 2 "+fb.g.Members()[2].Addr()+": lag bytes p50 2000") || !strings.Contains(out, "served by         master pulls=") {
		t.Errorf("output lacks the replication lines")
	}
}
