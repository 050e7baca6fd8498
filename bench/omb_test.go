package bench

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// ombTestResult lists the fields of OMB's TestResult (benchmark-framework, TestResult.java),
// which its tools read back with Jackson, with their Java types.
func ombTestResult() map[string]string {
	f := map[string]string{
		"workload": "String", "driver": "String", "messageSize": "long", "topics": "int", "partitions": "int",
		"producersPerTopic": "int", "consumersPerTopic": "int",
		"publishRate": "List<Double>", "publishErrorRate": "List<Double>", "consumeRate": "List<Double>", "backlog": "List<Long>",
		"aggregatedPublishLatencyQuantiles":      "Map<Double, Double>",
		"aggregatedPublishDelayLatencyQuantiles": "Map<Double, Long>",
		"aggregatedEndToEndLatencyQuantiles":     "Map<Double, Double>",
	}
	for _, s := range []string{"Avg", "50pct", "75pct", "95pct", "99pct", "999pct", "9999pct", "Max"} {
		f["publishLatency"+s] = "List<Double>"
		f["endToEndLatency"+s] = "List<Double>"
		f["aggregatedPublishLatency"+s] = "double"
		f["aggregatedEndToEndLatency"+s] = "double"
		// Publish delay is in µs, as integers but for the average.
		if s == "Avg" {
			f["publishDelayLatency"+s] = "List<Double>"
			f["aggregatedPublishDelayLatency"+s] = "double"
		} else {
			f["publishDelayLatency"+s] = "List<Long>"
			f["aggregatedPublishDelayLatency"+s] = "long"
		}
	}
	return f
}

// jsonKindErr says how v (decoded with UseNumber) differs from what Jackson reads as javaType.
func jsonKindErr(v any, javaType string) error {
	number := func(v any, integral bool) error {
		n, ok := v.(json.Number)
		if !ok {
			return fmt.Errorf("%T %v, want a number", v, v)
		}
		if _, err := n.Float64(); err != nil {
			return err
		}
		if integral && strings.ContainsAny(n.String(), ".eE") {
			return fmt.Errorf("%s, want an integer", n)
		}
		return nil
	}
	switch javaType {
	case "String":
		if _, ok := v.(string); !ok {
			return fmt.Errorf("%T %v, want a string", v, v)
		}
	case "int", "long":
		return number(v, true)
	case "double":
		return number(v, false)
	case "List<Double>", "List<Long>":
		a, ok := v.([]any)
		if !ok {
			return fmt.Errorf("%T, want an array", v)
		}
		if len(a) == 0 {
			return fmt.Errorf("empty array")
		}
		for i, e := range a {
			if err := number(e, javaType == "List<Long>"); err != nil {
				return fmt.Errorf("[%d]: %w", i, err)
			}
		}
	case "Map<Double, Double>", "Map<Double, Long>":
		m, ok := v.(map[string]any)
		if !ok {
			return fmt.Errorf("%T, want an object", v)
		}
		if len(m) == 0 {
			return fmt.Errorf("empty object")
		}
		for k, e := range m {
			// Jackson writes Double keys with Double.toString: "50.0", "99.90234375".
			if p, err := strconv.ParseFloat(k, 64); err != nil || p < 0 || p > 100 || !strings.Contains(k, ".") {
				return fmt.Errorf("key %q, want a percentile as Java writes a double", k)
			}
			if err := number(e, javaType == "Map<Double, Long>"); err != nil {
				return fmt.Errorf("[%q]: %w", k, err)
			}
		}
	default:
		return fmt.Errorf("unknown Java type %s", javaType)
	}
	return nil
}

// TestJSONCarriesOMBTestResult: the JSON a (fake) run writes has every field of OMB's
// TestResult with the JSON kind Jackson reads into its Java type, so OMB's tools and chart
// script read it as one of their own; every time series has one entry per test interval.
func TestJSONCarriesOMBTestResult(t *testing.T) {
	jsonPath := filepath.Join(t.TempDir(), "out.json")
	runFake(t, t.Context(), Config{
		WorkloadFile: writeWorkload(t, fmt.Sprintf(fakeWorkload, 4000)), // a fixed rate: publish delay is measured
		Duration:     400 * time.Millisecond,
		Warmup:       100 * time.Millisecond,
		JSONFile:     jsonPath,
		Seed:         1,
	}, newFakeBench(t, 0, nil))
	data, err := os.ReadFile(jsonPath)
	if err != nil {
		t.Fatal(err)
	}
	d := json.NewDecoder(bytes.NewReader(data))
	d.UseNumber()
	var m map[string]any
	if err := d.Decode(&m); err != nil {
		t.Fatal(err)
	}
	intervals := -1
	for field, javaType := range ombTestResult() {
		v, ok := m[field]
		if !ok {
			t.Errorf("%s: missing", field)
			continue
		}
		if err := jsonKindErr(v, javaType); err != nil {
			t.Errorf("%s (%s): %v", field, javaType, err)
			continue
		}
		if a, ok := v.([]any); ok {
			if intervals == -1 {
				intervals = len(a)
			}
			if len(a) != intervals {
				t.Errorf("%s: %d entries, other series %d", field, len(a), intervals)
			}
		}
	}
	if m["workload"] != "fake" || m["driver"] != DriverName || m["partitions"] != json.Number("3") {
		t.Errorf("workload %v driver %v partitions %v", m["workload"], m["driver"], m["partitions"])
	}
	if n, _ := m["progressIntervalSeconds"].(json.Number); n.String() != "0.1" {
		t.Errorf("progressIntervalSeconds %v, want 0.1", m["progressIntervalSeconds"])
	}
}

// TestQuantilesJSONIntegers: integral quantile values (publish delay, a Map<Double, Long> in
// OMB) are written as integers at any size, never in exponent form.
func TestQuantilesJSONIntegers(t *testing.T) {
	got, err := json.Marshal(Quantiles{{50, 999}, {99, 1234567}, {100, 60_000_000}})
	if err != nil {
		t.Fatal(err)
	}
	if want := `{"50.0":999,"99.0":1234567,"100.0":60000000}`; string(got) != want {
		t.Fatalf("got  %s\nwant %s", got, want)
	}
	got, _ = json.Marshal(Quantiles{{50, 0.001}, {99, 59999.5}})
	if want := `{"50.0":0.001,"99.0":59999.5}`; string(got) != want {
		t.Fatalf("got  %s\nwant %s", got, want)
	}
}
