package main

import (
	"bytes"
	"encoding/xml"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

const ombResult = "../../bench/chart/testdata/omb-kafka-1-topic-16-partitions-1kb.json"

// TestChart runs a short replay against the embedded cluster with --json, then charts its
// result next to an OpenMessaging Benchmark result.
func TestChart(t *testing.T) {
	payload := t.TempDir()
	var b strings.Builder
	for i := range 300 {
		fmt.Fprintf(&b, "line %d\n", i)
	}
	if err := os.WriteFile(filepath.Join(payload, "a.log"), []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	jsonPath := filepath.Join(dir, "petrel.json")
	code, stdout, stderr := run(t.Context(), "--payload-dir", payload, "--json", jsonPath, "--segment-size", "16M",
		"--slaves", "0", "--progress-interval", "100ms")
	if code != exitOK {
		t.Fatalf("bench: exit %d\nstdout:\n%s\nstderr:\n%s", code, stdout, stderr)
	}

	out := filepath.Join(dir, "charts")
	code, stdout, stderr = run(t.Context(), "chart", "--out", out, "--title", "replay vs OMB", jsonPath, ombResult)
	if code != exitOK {
		t.Fatalf("chart: exit %d\nstdout:\n%s\nstderr:\n%s", code, stdout, stderr)
	}
	for _, name := range []string{"publish-latency", "end-to-end-latency", "throughput"} {
		png := filepath.Join(out, name+".png")
		svg := filepath.Join(out, name+".svg")
		if !strings.Contains(stdout, "wrote "+png+"\n") || !strings.Contains(stdout, "wrote "+svg+"\n") {
			t.Errorf("stdout lacks %s.{png,svg}:\n%s", name, stdout)
		}
		data, err := os.ReadFile(png)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.HasPrefix(data, []byte("\x89PNG\r\n\x1a\n")) || len(data) < 10_000 {
			t.Errorf("%s: %d bytes, starting %q", png, len(data), data[:min(8, len(data))])
		}
		data, err = os.ReadFile(svg)
		if err != nil {
			t.Fatal(err)
		}
		var root struct{ XMLName xml.Name }
		if err := xml.Unmarshal(data, &root); err != nil || root.XMLName.Local != "svg" || len(data) < 5_000 {
			t.Errorf("%s: root %v, %d bytes, %v", svg, root.XMLName, len(data), err)
		}
		for _, s := range []string{">replay vs OMB<", ">1-topic-16-partitions-1kb (Kafka)<", " (Petrel)<"} {
			if !bytes.Contains(data, []byte(s)) {
				t.Errorf("%s lacks %s", svg, s)
			}
		}
	}
}

func TestChartUsage(t *testing.T) {
	for _, tt := range []struct {
		args []string
		want string
	}{
		{[]string{"chart"}, "requires at least 1 arg"},
		{[]string{"chart", "--format", "gif", ombResult}, `format "gif"`},
		{[]string{"chart", filepath.Join(t.TempDir(), "none.json")}, "no such file"},
	} {
		code, _, stderr := run(t.Context(), tt.args...)
		if code != exitCantRun || !strings.Contains(stderr, tt.want) {
			t.Errorf("%q: exit %d, stderr %q; want %d and %q", tt.args, code, stderr, exitCantRun, tt.want)
		}
	}
	code, stdout, _ := run(t.Context(), "chart", "--help")
	for _, s := range []string{"--out", "--format", "--title", "nines"} {
		if code != exitOK || !strings.Contains(stdout, s) {
			t.Errorf("chart --help: exit %d, lacks %s", code, s)
		}
	}
}
