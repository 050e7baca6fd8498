package bench

import (
	"bytes"
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"
)

func TestRecorder(t *testing.T) {
	r := NewRecorder()
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 1000 {
				r.Record(int64(g*1000 + i + 1))
			}
		}()
	}
	wg.Wait()
	r.Record(-5)                     // clamped to 0
	r.Record(10 * histHighestMicros) // clamped to the maximum
	h := r.Interval()
	if h.TotalCount() != 4002 {
		t.Fatalf("count %d", h.TotalCount())
	}
	if h.Min() != 0 || !h.ValuesAreEquivalent(h.Max(), histHighestMicros) {
		t.Fatalf("min %d max %d", h.Min(), h.Max())
	}
	r.Recycle(h)
	if h2 := r.Interval(); h2.TotalCount() != 0 {
		t.Fatalf("a new interval has %d samples", h2.TotalCount())
	}
}

func TestStats(t *testing.T) {
	h := newHistogram()
	for v := int64(1); v <= 10000; v++ {
		_ = h.RecordValue(v * 10) // 10 µs .. 100 ms, uniform
	}
	s := msStats(h)
	near := func(got, want float64) bool { return math.Abs(got-want) <= want*0.002 }
	for name, c := range map[string][2]float64{
		"avg": {s.Avg, 50.005}, "p50": {s.P50, 50}, "p75": {s.P75, 75}, "p95": {s.P95, 95}, "p99": {s.P99, 99},
		"p99.9": {s.P999, 99.9}, "p99.99": {s.P9999, 99.99}, "max": {s.Max, 100},
	} {
		if !near(c[0], c[1]) {
			t.Errorf("%s = %v ms, want about %v", name, c[0], c[1])
		}
	}
	if s.Count != 10000 {
		t.Errorf("count %d", s.Count)
	}
	if u := microsStats(h); !near(u.P50, 50000) {
		t.Errorf("p50 %v µs", u.P50)
	}
	if (msStats(newHistogram()) != LatencyStats{}) || (msStats(nil) != LatencyStats{}) {
		t.Error("empty histogram: non-zero stats")
	}
}

func TestQuantilesJSON(t *testing.T) {
	if got, _ := json.Marshal(Quantiles{}); string(got) != "{}" {
		t.Fatalf("empty: %s", got)
	}
	q := Quantiles{{0, 0.1}, {50, 1.5}, {99.90234375, 20}, {100, 21.25}}
	got, err := json.Marshal(q)
	if err != nil {
		t.Fatal(err)
	}
	// Java's Double.toString keys, in ascending order as OMB's TreeMap writes them.
	want := `{"0.0":0.1,"50.0":1.5,"99.90234375":20,"100.0":21.25}`
	if string(got) != want {
		t.Fatalf("got  %s\nwant %s", got, want)
	}
	h := newHistogram()
	for v := int64(1); v <= 1000; v++ {
		_ = h.RecordValue(v)
	}
	qs := quantilesOf(h, 1000)
	if len(qs) < 100 || qs[0].Percentile != 0 || qs[len(qs)-1].Percentile != 100 || qs[len(qs)-1].Value != 1 {
		t.Fatalf("quantiles: %d, first %+v, last %+v", len(qs), qs[0], qs[len(qs)-1])
	}
	for i := 1; i < len(qs); i++ {
		if qs[i].Percentile <= qs[i-1].Percentile || qs[i].Value < qs[i-1].Value {
			t.Fatalf("not increasing at %d: %+v %+v", i, qs[i-1], qs[i])
		}
	}
}

// ombFields are the OMB TestResult fields a result must carry, with their JSON kinds.
var ombFields = map[string]string{
	"workload": "string", "driver": "string", "messageSize": "number", "topics": "number", "partitions": "number",
	"producersPerTopic": "number", "consumersPerTopic": "number",
	"publishRate": "array", "publishErrorRate": "array", "consumeRate": "array", "backlog": "array",
	"aggregatedPublishLatencyQuantiles": "object", "aggregatedPublishDelayLatencyQuantiles": "object",
	"aggregatedEndToEndLatencyQuantiles": "object",
	"messagesSent":                       "number", "messagesConsumed": "number", "failed": "number", "unknown": "number", "lost": "number",
	"duplicated": "number", "duplicatedAfterRetry": "number", "reordered": "number", "corrupted": "number", "phantom": "number",
}

func init() {
	for _, prefix := range []string{"publishLatency", "publishDelayLatency", "endToEndLatency"} {
		agg := "aggregated" + strings.ToUpper(prefix[:1]) + prefix[1:]
		for _, suffix := range []string{"Avg", "50pct", "75pct", "95pct", "99pct", "999pct", "9999pct", "Max"} {
			ombFields[prefix+suffix] = "array"
			ombFields[agg+suffix] = "number"
		}
	}
}

func kindOf(v any) string {
	switch v.(type) {
	case string:
		return "string"
	case float64:
		return "number"
	case []any:
		return "array"
	case map[string]any:
		return "object"
	case bool:
		return "bool"
	}
	return "null"
}

func TestResultJSONShape(t *testing.T) {
	res := newResult()
	res.Workload, res.Driver = "w", DriverName
	pub, delay, e2e := newHistogram(), newHistogram(), newHistogram()
	for v := int64(1000); v < 3000; v++ {
		_ = pub.RecordValue(v)
		_ = delay.RecordValue(v / 10)
		_ = e2e.RecordValue(2 * v)
	}
	for range 3 {
		res.addInterval(&interval{length: 5 * time.Second, sent: 5000, consumed: 4000, backlog: 12, errors: 5, pubLat: pub, pubDelay: delay, e2e: e2e})
	}
	res.setAggregates(pub, delay, e2e)
	res.setVerification(VerifyCounts{Lost: 1}, []string{"lost: x"})

	path := filepath.Join(t.TempDir(), "out.json")
	if err := res.WriteJSON(path); err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(data, &m); err != nil {
		t.Fatal(err)
	}
	for field, kind := range ombFields {
		if got := kindOf(m[field]); got != kind {
			t.Errorf("%s: %s, want %s", field, got, kind)
		}
		if kind == "array" && len(m[field].([]any)) != 3 {
			t.Errorf("%s: %d entries, want 3", field, len(m[field].([]any)))
		}
	}
	if m["publishRate"].([]any)[0] != 1000.0 || m["consumeRate"].([]any)[0] != 800.0 || m["publishErrorRate"].([]any)[0] != 1.0 {
		t.Errorf("rates: %v %v %v", m["publishRate"], m["consumeRate"], m["publishErrorRate"])
	}
	// Units: publish latency in ms, publish delay in µs (integers), as OMB.
	if p50 := m["aggregatedPublishLatency50pct"].(float64); p50 < 1.9 || p50 > 2.1 {
		t.Errorf("aggregatedPublishLatency50pct %v ms, want about 2", p50)
	}
	if d50 := m["aggregatedPublishDelayLatency50pct"].(float64); d50 != math.Trunc(d50) || d50 < 190 || d50 > 210 {
		t.Errorf("aggregatedPublishDelayLatency50pct %v µs, want an integer about 200", d50)
	}
	if m["lost"] != 1.0 || m["passed"] != false || m["verified"] != true {
		t.Errorf("verification: lost %v passed %v verified %v", m["lost"], m["passed"], m["verified"])
	}
	// An empty result has [] and {}, never null.
	empty, _ := json.Marshal(newResult())
	if bytes.Contains(empty, []byte("null")) {
		t.Errorf("empty result has nulls: %s", empty)
	}
	// The JSON decodes back into an equal Result.
	var back Result
	if err := json.Unmarshal(data, &back); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(&back, res) {
		t.Errorf("round trip differs:\n got %+v\nwant %+v", back, *res)
	}
}

func TestSummaryLastLine(t *testing.T) {
	res := newResult()
	res.setVerification(VerifyCounts{Sent: 1, Acked: 1, Delivered: 1}, nil)
	res.Drained = true
	var b bytes.Buffer
	res.writeSummary(&b, summary{})
	lines := strings.Split(strings.TrimSpace(b.String()), "\n")
	if last := lines[len(lines)-1]; last != "lost=0 duplicated=0 reordered=0 corrupted=0 phantom=0 inconsistent=0 offsetMovedBack=0" {
		t.Fatalf("last line %q", last)
	}
	if before := lines[len(lines)-2]; before != "final read: no queue read" {
		t.Fatalf("line before the last %q", before)
	}
	if !strings.Contains(b.String(), "PASS") {
		t.Fatalf("no PASS in\n%s", b.String())
	}
	res.setVerification(VerifyCounts{Reordered: 2}, []string{"reordered: here"})
	b.Reset()
	res.writeSummary(&b, summary{})
	if !strings.Contains(b.String(), "FAIL") || !strings.Contains(b.String(), "reordered: here") || !strings.HasSuffix(b.String(), "reordered=2 corrupted=0 phantom=0 inconsistent=0 offsetMovedBack=0\n") {
		t.Fatalf("failing summary:\n%s", b.String())
	}
	res.setVerification(VerifyCounts{Sent: 3, Acked: 3, Inconsistent: 1, OffsetMoved: 2, OffsetMovedBack: 1}, nil)
	res.FinalRead = []FinalReadMember{{BrokerID: 0, Queues: 4, Messages: 30}, {BrokerID: 1, Queues: 3, Incomplete: 1, Messages: 20, Unchecked: 2}}
	b.Reset()
	res.writeSummary(&b, summary{})
	lines = strings.Split(strings.TrimSpace(b.String()), "\n")
	if res.OK() || !strings.Contains(b.String(), "offsetMoved=2\n") || !strings.Contains(b.String(), "offset moved back: 1 OFFSET_MOVED answer(s)") ||
		lines[len(lines)-2] != "final read: master queues=4 messages=30; slave 1 queues=3 messages=20 incomplete=1 unchecked=2" ||
		lines[len(lines)-1] != "lost=0 duplicated=0 reordered=0 corrupted=0 phantom=0 inconsistent=1 offsetMovedBack=1" {
		t.Fatalf("inconsistent, moved back, final read of two members:\n%s", b.String())
	}
}

// TestNothingAckedFails: a verified run in which no message was acknowledged has verified
// nothing; it fails with a problem that says so.
func TestNothingAckedFails(t *testing.T) {
	res := newResult()
	res.setVerification(VerifyCounts{Sent: 27, Failed: 27}, nil)
	res.Drained = true
	if res.OK() {
		t.Fatal("a run with nothing acknowledged passed")
	}
	want := "no message was acknowledged (27 sent: 27 failed, 0 unknown): nothing could be verified"
	if len(res.Problems) != 1 || res.Problems[0] != want {
		t.Fatalf("problems %q, want [%q]", res.Problems, want)
	}
	var b bytes.Buffer
	res.writeSummary(&b, summary{})
	if !strings.Contains(b.String(), "problem           "+want) || !strings.Contains(b.String(), "verification      FAIL") {
		t.Fatalf("summary:\n%s", b.String())
	}
}

// TestFailoverSummary: the summary lists one "failover" line per event, in the result's
// order, and nothing without events; the JSON holds the events with their units in the names.
func TestFailoverSummary(t *testing.T) {
	res := newResult()
	var b bytes.Buffer
	res.writeSummary(&b, summary{})
	if strings.Contains(b.String(), "failover") {
		t.Fatalf("a run without failover:\n%s", b.String())
	}

	at := func(clock string) int64 {
		tm, err := time.ParseInLocation("2006-01-02 15:04:05.000", "2026-01-02 "+clock, time.Local)
		if err != nil {
			t.Fatal(err)
		}
		return tm.UnixMilli()
	}
	pos := func(off int64) MessagePos { return MessagePos{Topic: "bench-1-0", QueueID: 3, QueueOffset: off} }
	res.Failovers = []FailoverEvent{
		{BrokerName: "broker-a", Kind: FailoverConsume, OldAddr: "127.0.0.1:10911", NewAddr: "127.0.0.1:10921",
			LastUnixMs: at("12:00:01.100"), FirstUnixMs: at("12:00:01.160"), GapMs: 60, LastMessage: pos(41), FirstMessage: pos(42)},
		{BrokerName: "broker-a", Kind: FailoverSend, OldAddr: "127.0.0.1:10911", NewAddr: "127.0.0.1:10921",
			LastUnixMs: at("12:00:01.123"), FirstUnixMs: at("12:00:01.935"), GapMs: 812, LastMessage: pos(57), FirstMessage: pos(58)},
		{BrokerName: "broker-a", Kind: FailoverConsume, OldAddr: "127.0.0.1:10921", NewAddr: "127.0.0.1:10921",
			LastUnixMs: at("12:00:01.400"), FirstUnixMs: at("12:00:02.000"), GapMs: 600, LastMessage: pos(57), FirstMessage: pos(58)},
		{BrokerName: "broker-b", Kind: FailoverSend, OldAddr: "127.0.0.1:10931", LastUnixMs: at("12:00:03.000"), GapMs: 20345, LastMessage: pos(9)},
		{BrokerName: "broker-b", Kind: FailoverConsume, OldAddr: "127.0.0.1:10931", LastUnixMs: at("12:00:03.001"), GapMs: 21000, LastMessage: pos(9)},
	}
	res.FailoversOmitted = 3
	b.Reset()
	res.writeSummary(&b, summary{})
	var got []string
	for line := range strings.Lines(b.String()) {
		if strings.HasPrefix(line, "  failover") {
			got = append(got, line)
		}
	}
	want := []string{
		"  failover          broker-a consume: 127.0.0.1:10911 -> 127.0.0.1:10921 gap 60 ms (last consumed 12:00:01.100 bench-1-0#3@41, first consumed 12:00:01.160 bench-1-0#3@42)\n",
		"  failover          broker-a send: 127.0.0.1:10911 -> 127.0.0.1:10921 gap 812 ms (last ack 12:00:01.123, first ack 12:00:01.935)\n",
		"  failover          broker-a consume: 127.0.0.1:10921 -> 127.0.0.1:10921 (same address) gap 600 ms (last consumed 12:00:01.400 bench-1-0#3@57, first consumed 12:00:02.000 bench-1-0#3@58)\n",
		"  failover          broker-b send: 127.0.0.1:10931 -> none, no ack for 20345 ms to the end of sending (last ack 12:00:03.000)\n",
		"  failover          broker-b consume: 127.0.0.1:10931 -> none, nothing consumed for 21000 ms to the end of the run though sends went on (last consumed 12:00:03.001 bench-1-0#3@9)\n",
		"  failover          3 more event(s) not listed (at most 100 per broker group and kind)\n",
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("failover lines:\n%s\nwant:\n%s", strings.Join(got, ""), strings.Join(want, ""))
	}

	path := filepath.Join(t.TempDir(), "out.json")
	if err := res.WriteJSON(path); err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var m struct {
		Failovers        []map[string]any `json:"failovers"`
		FailoversOmitted int64            `json:"failoversOmitted"`
	}
	if err := json.Unmarshal(data, &m); err != nil {
		t.Fatal(err)
	}
	if len(m.Failovers) != 5 || m.FailoversOmitted != 3 {
		t.Fatalf("JSON: %d failovers, %d omitted", len(m.Failovers), m.FailoversOmitted)
	}
	send := m.Failovers[1]
	for k, v := range map[string]any{
		"brokerName": "broker-a", "kind": "send", "oldAddr": "127.0.0.1:10911", "newAddr": "127.0.0.1:10921",
		"lastUnixMs": float64(at("12:00:01.123")), "firstUnixMs": float64(at("12:00:01.935")), "gapMs": 812.0,
		"lastMessage":  map[string]any{"topic": "bench-1-0", "queueId": 3.0, "queueOffset": 57.0},
		"firstMessage": map[string]any{"topic": "bench-1-0", "queueId": 3.0, "queueOffset": 58.0},
	} {
		if !reflect.DeepEqual(send[k], v) {
			t.Errorf("JSON send event: %s = %v, want %v", k, send[k], v)
		}
	}
	if gone := m.Failovers[3]; gone["newAddr"] != "" || gone["firstUnixMs"] != 0.0 || gone["firstMessage"] != nil || gone["gapMs"] != 20345.0 {
		t.Errorf("JSON event of a group that never came back: %v", gone)
	}
	if len(send) != 9 {
		t.Errorf("JSON send event has %d fields: %v", len(send), send)
	}
}
