package main

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func writeFile(t *testing.T, name, text string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// runs writes n result lines of BenchmarkX, value v(i) in unit.
func runs(n int, unit string, v func(i int) float64) string {
	var b strings.Builder
	b.WriteString("pkg: example.com/p\n")
	for i := range n {
		fmt.Fprintf(&b, "BenchmarkX-2 100 %g %s\n", v(i), unit)
	}
	return b.String()
}

func TestGate(t *testing.T) {
	jitter := func(base float64) func(int) float64 {
		return func(i int) float64 { return base * (1 + 0.01*float64(i%3)) }
	}
	cases := []struct {
		name       string
		base, head string
		want       int
	}{
		{"equal", runs(6, "ns/op", jitter(100)), runs(6, "ns/op", jitter(100)), 0},
		{"slower", runs(6, "ns/op", jitter(100)), runs(6, "ns/op", jitter(120)), 1},
		{"faster", runs(6, "ns/op", jitter(120)), runs(6, "ns/op", jitter(100)), 0},
		{"slower within threshold", runs(6, "ns/op", jitter(100)), runs(6, "ns/op", jitter(103)), 0},
		{"too few runs", runs(3, "ns/op", jitter(100)), runs(3, "ns/op", jitter(200)), 0},
		{"less throughput", runs(6, "msg/s", jitter(1000)), runs(6, "msg/s", jitter(800)), 1},
		{"more throughput", runs(6, "msg/s", jitter(800)), runs(6, "msg/s", jitter(1000)), 0},
		{"explicit better=lower", "Unit msg/s better=lower\n" + runs(6, "msg/s", jitter(800)), runs(6, "msg/s", jitter(1000)), 1},
		{"new allocation", runs(6, "allocs/op", func(int) float64 { return 0 }), runs(6, "allocs/op", func(int) float64 { return 1 }), 1},
		{"amortized bytes", runs(6, "B/op", func(int) float64 { return 0 }), runs(6, "B/op", func(int) float64 { return 1 }), 0},
		{"more bytes", runs(6, "B/op", func(int) float64 { return 1000 }), runs(6, "B/op", func(int) float64 { return 2000 }), 1},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var out bytes.Buffer
			got, err := gateCmd([]string{"-v", writeFile(t, "base.txt", tc.base), writeFile(t, "head.txt", tc.head)}, &out)
			if err != nil {
				t.Fatal(err)
			}
			if got != tc.want {
				t.Errorf("exit %d, want %d\n%s", got, tc.want, out.String())
			}
		})
	}
}

func TestOMB(t *testing.T) {
	a := writeFile(t, "a.json", `{"publishRate":[100,300],"aggregatedPublishLatency50pct":1.5,"aggregatedPublishLatency99pct":20}`)
	b := writeFile(t, "b.json", `{"publishRate":[1],"aggregatedPublishRate":250.25,"aggregatedPublishLatency50pct":2,"aggregatedPublishLatency99pct":30}`)
	var out bytes.Buffer
	if err := ombCmd([]string{"-name", "Publish/w", a, b}, &out); err != nil {
		t.Fatal(err)
	}
	want := "BenchmarkPublish/w 1 200.0 msg/s 1500000 p50-latency-ns 20000000 p99-latency-ns\n" +
		"BenchmarkPublish/w 1 250.2 msg/s 2000000 p50-latency-ns 30000000 p99-latency-ns\n"
	if got := out.String(); !strings.HasSuffix(got, want) {
		t.Errorf("got\n%s\nwant suffix\n%s", got, want)
	}
	// The output is what gate reads.
	f := writeFile(t, "omb.txt", out.String())
	s, err := readFile(f)
	if err != nil {
		t.Fatal(err)
	}
	if v := s.values[key{"", "Publish/w", "p99-latency-sec"}]; len(v) != 2 || v[0] != 0.02 {
		t.Errorf("p99 values %v", v)
	}
	if err := ombCmd([]string{writeFile(t, "bad.json", `{"publishRate":[1]}`)}, &out); err == nil {
		t.Error("no latency: want an error")
	}
}
