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
	if last := lines[len(lines)-1]; last != "lost=0 duplicated=0 reordered=0 corrupted=0 phantom=0" {
		t.Fatalf("last line %q", last)
	}
	if !strings.Contains(b.String(), "PASS") {
		t.Fatalf("no PASS in\n%s", b.String())
	}
	res.setVerification(VerifyCounts{Reordered: 2}, []string{"reordered: here"})
	b.Reset()
	res.writeSummary(&b, summary{})
	if !strings.Contains(b.String(), "FAIL") || !strings.Contains(b.String(), "reordered: here") || !strings.HasSuffix(b.String(), "reordered=2 corrupted=0 phantom=0\n") {
		t.Fatalf("failing summary:\n%s", b.String())
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
