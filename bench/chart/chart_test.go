package chart

import (
	"bytes"
	"cmp"
	"encoding/xml"
	"image/png"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
)

const (
	ombFile    = "testdata/omb-kafka-1-topic-16-partitions-1kb.json"
	petrelFile = "testdata/petrel-1-topic-16-partitions-1kb.json"
)

var chartNames = []string{"publish-latency", "end-to-end-latency", "throughput"}

// checkPNG checks that path is a PNG of a plausible size.
func checkPNG(t *testing.T, path string) {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.HasPrefix(data, []byte("\x89PNG\r\n\x1a\n")) {
		t.Fatalf("%s: no PNG signature", path)
	}
	if len(data) < 10_000 {
		t.Errorf("%s: only %d bytes", path, len(data))
	}
	cfg, err := png.DecodeConfig(bytes.NewReader(data))
	if err != nil || cfg.Width < 600 || cfg.Height < 400 {
		t.Errorf("%s: %dx%d, %v", path, cfg.Width, cfg.Height, err)
	}
}

// checkSVG checks that path is an SVG document of a plausible size and returns its text.
func checkSVG(t *testing.T, path string) string {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if len(data) < 5_000 {
		t.Errorf("%s: only %d bytes", path, len(data))
	}
	d := xml.NewDecoder(bytes.NewReader(data))
	for {
		tok, err := d.Token()
		if err != nil {
			t.Fatalf("%s: no root element: %v", path, err)
		}
		if el, ok := tok.(xml.StartElement); ok {
			if el.Name.Local != "svg" || el.Name.Space != "http://www.w3.org/2000/svg" {
				t.Fatalf("%s: root element %v", path, el.Name)
			}
			break
		}
	}
	return string(data)
}

// TestWrite draws an OMB result and a petrel-bench result of the same workload: every chart
// in both formats, the lines labelled with the drivers, the workload as heading.
func TestWrite(t *testing.T) {
	out := filepath.Join(t.TempDir(), "charts")
	rep, err := Write([]string{ombFile, petrelFile}, Options{Out: out})
	if err != nil {
		t.Fatal(err)
	}
	var want []string
	for _, n := range chartNames {
		want = append(want, filepath.Join(out, n+".png"), filepath.Join(out, n+".svg"))
	}
	if !reflect.DeepEqual(rep.Files, want) || len(rep.Notes) != 0 {
		t.Fatalf("files %q notes %q; want files %q", rep.Files, rep.Notes, want)
	}
	for _, n := range chartNames {
		checkPNG(t, filepath.Join(out, n+".png"))
		svg := checkSVG(t, filepath.Join(out, n+".svg"))
		for _, s := range []string{">Kafka<", ">Petrel<", ">1-topic-16-partitions-1kb<"} {
			if !strings.Contains(svg, s) {
				t.Errorf("%s.svg lacks %s", n, s)
			}
		}
	}
	svg, _ := os.ReadFile(filepath.Join(out, "publish-latency.svg"))
	for _, s := range []string{">Publish latency quantiles<", ">Percentile<", ">Latency (ms)<", ">99%<", ">99.99%<"} {
		if !bytes.Contains(svg, []byte(s)) {
			t.Errorf("publish-latency.svg lacks %s", s)
		}
	}
	svg, _ = os.ReadFile(filepath.Join(out, "throughput.svg"))
	for _, s := range []string{">Publish rate<", ">Consume rate<", ">Time (s)<", ">Rate (msg/s)<"} {
		if !bytes.Contains(svg, []byte(s)) {
			t.Errorf("throughput.svg lacks %s", s)
		}
	}
}

// TestWriteDefaults: without --out the charts go next to the first input; one format, a
// title of one's own.
func TestWriteDefaults(t *testing.T) {
	dir := t.TempDir()
	var paths []string
	for _, src := range []string{petrelFile, petrelFile} {
		data, err := os.ReadFile(src)
		if err != nil {
			t.Fatal(err)
		}
		p := filepath.Join(dir, []string{"run-a.json", "run-b.json"}[len(paths)])
		if err := os.WriteFile(p, data, 0o644); err != nil {
			t.Fatal(err)
		}
		paths = append(paths, p)
	}
	rep, err := Write(paths, Options{Formats: []string{"SVG", ".svg"}, Title: "A vs B"})
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Files) != 3 {
		t.Fatalf("files %q", rep.Files)
	}
	for _, n := range chartNames {
		svg := checkSVG(t, filepath.Join(dir, n+".svg"))
		// Same workload and driver: the file names tell the lines apart.
		for _, s := range []string{">run-a<", ">run-b<", ">A vs B<"} {
			if !strings.Contains(svg, s) {
				t.Errorf("%s.svg lacks %s", n, s)
			}
		}
	}
	if _, err := os.Stat(filepath.Join(dir, "throughput.png")); !os.IsNotExist(err) {
		t.Errorf("a PNG was written with --format svg: %v", err)
	}
}

// TestWriteWithoutLatencies: a result with rates only gets its throughput chart; the others
// are left out with a note.
func TestWriteWithoutLatencies(t *testing.T) {
	dir := t.TempDir()
	in := filepath.Join(dir, "rates.json")
	if err := os.WriteFile(in, []byte(`{"workload":"w","driver":"d","publishRate":[1,2,3],"consumeRate":[1,2,"NaN"]}`), 0o644); err != nil {
		t.Fatal(err)
	}
	rep, err := Write([]string{in}, Options{Formats: []string{"png"}})
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(rep.Files, []string{filepath.Join(dir, "throughput.png")}) || len(rep.Notes) != 2 {
		t.Fatalf("files %q notes %q", rep.Files, rep.Notes)
	}
	checkPNG(t, rep.Files[0])
	// Next to a result with latencies, it is a legend entry without a line.
	rep, err = Write([]string{in, ombFile}, Options{Formats: []string{"svg"}})
	if err != nil || len(rep.Files) != 3 {
		t.Fatalf("files %q, %v", rep.Files, err)
	}
	svg := checkSVG(t, filepath.Join(dir, "publish-latency.svg"))
	if !strings.Contains(svg, ">w (d) (no data)<") || !strings.Contains(svg, ">1-topic-16-partitions-1kb (Kafka)<") {
		t.Errorf("publish-latency.svg lacks the legend entries")
	}
	if svg := checkSVG(t, filepath.Join(dir, "throughput.svg")); strings.Contains(svg, "no data") {
		t.Errorf("throughput.svg: a result with rates marked as having no data")
	}
}

func TestWriteErrors(t *testing.T) {
	dir := t.TempDir()
	write := func(name, content string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	for _, tt := range []struct {
		paths   []string
		formats []string
		want    string
	}{
		{nil, nil, "no result file"},
		{[]string{ombFile}, []string{"gif"}, `format "gif"`},
		{[]string{ombFile}, []string{""}, "no format given"},
		{[]string{filepath.Join(dir, "missing.json")}, nil, "no such file"},
		{[]string{write("text.json", "hello")}, nil, "not a JSON result"},
		{[]string{write("array.json", "[1, 2]")}, nil, "not a JSON result"},
		{[]string{write("other.json", `{"name": "x"}`)}, nil, "neither a petrel-bench nor an OpenMessaging Benchmark result"},
		{[]string{write("key.json", `{"aggregatedPublishLatencyQuantiles": {"p50": 1}}`)}, nil, `key "p50" is not a percentile`},
		{[]string{write("value.json", `{"publishRate": ["fast"]}`)}, nil, "is not a number"},
	} {
		_, err := Write(tt.paths, Options{Out: dir, Formats: tt.formats})
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%q %q: error %v, want %q", tt.paths, tt.formats, err, tt.want)
		}
	}
}

// TestLoad: the fields the charts read, the period of the time series and lenient numbers.
func TestLoad(t *testing.T) {
	omb, err := Load(ombFile)
	if err != nil {
		t.Fatal(err)
	}
	if omb.Workload != "1-topic-16-partitions-1kb" || omb.Driver != "Kafka" || omb.Interval != OMBInterval ||
		len(omb.PublishRate) != 6 || len(omb.ConsumeRate) != 6 || len(omb.PublishLatency) < 50 || len(omb.EndToEndLatency) < 50 {
		t.Fatalf("OMB result: %+v", omb)
	}
	if q := omb.PublishLatency; q[0].Percentile != 0 || q[len(q)-1].Percentile != 100 ||
		!slices.IsSortedFunc(q, func(a, b Quantile) int { return cmp.Compare(a.Percentile, b.Percentile) }) {
		t.Fatalf("quantiles not in percentile order: %v", q)
	}
	pt, err := Load(petrelFile)
	if err != nil {
		t.Fatal(err)
	}
	if pt.Driver != "Petrel" || pt.Interval != 5 || len(pt.PublishRate) != 12 {
		t.Fatalf("petrel result: %+v", pt)
	}

	dir := t.TempDir()
	for _, tt := range []struct {
		json     string
		interval float64
	}{
		// An older petrel-bench result: the period from the test time.
		{`{"publishRate":[1,2,3,4],"testSeconds":20,"drainSeconds":3,"mode":"workload"}`, 5},
		// A replay's series covers its drain too.
		{`{"publishRate":[1,2,3,4],"testSeconds":2,"drainSeconds":2,"mode":"replay"}`, 1},
		{`{"publishRate":[1,2],"progressIntervalSeconds":0.5,"testSeconds":20}`, 0.5},
		{`{"publishRate":[1,2]}`, OMBInterval},
	} {
		p := filepath.Join(dir, "r.json")
		if err := os.WriteFile(p, []byte(tt.json), 0o644); err != nil {
			t.Fatal(err)
		}
		r, err := Load(p)
		if err != nil || r.Interval != tt.interval {
			t.Errorf("%s: interval %v, %v; want %v", tt.json, r.Interval, err, tt.interval)
		}
	}

	p := filepath.Join(dir, "lenient.json")
	if err := os.WriteFile(p, []byte(`{"publishRate":[1,null,"NaN","-Infinity",5],
		"aggregatedEndToEndLatencyQuantiles":{"100.0":9,"99.999":8,"99.0":"NaN","50.0":1,"0.0":0.5}}`), 0o644); err != nil {
		t.Fatal(err)
	}
	r, err := Load(p)
	if err != nil {
		t.Fatal(err)
	}
	if got := timePoints(r.PublishRate, 2); len(got) != 2 || got[0].X != 2 || got[1].X != 10 || got[1].Y != 5 {
		t.Errorf("time points %v: want the finite ones, each at the end of its interval", got)
	}
	// 100% is left out (infinite on the nines scale), and so is NaN; 99.999% stays.
	got := quantilePoints(r.EndToEndLatency)
	want := []float64{0, Nines(50), Nines(99.999)}
	if len(got) != 3 || got[0].X != want[0] || got[1].X != want[1] || math.Abs(got[2].X-5) > 1e-9 || got[2].Y != 8 {
		t.Errorf("quantile points %v", got)
	}
}

func TestNines(t *testing.T) {
	for p, x := range map[float64]float64{0: 0, 90: 1, 99: 2, 99.9: 3, 99.99: 4, 99.999: 5} {
		if got := Nines(p); math.Abs(got-x) > 1e-9 {
			t.Errorf("Nines(%v) = %v, want %v", p, got, x)
		}
	}
	var labels []string
	last := -1.0
	for _, tk := range (ninesTicks{}).Ticks(0, 5) {
		if tk.Value <= last {
			t.Fatalf("ticks not increasing at %v", tk)
		}
		last = tk.Value
		if tk.Label != "" {
			labels = append(labels, tk.Label)
		}
	}
	if want := []string{"0%", "50%", "90%", "99%", "99.9%", "99.99%", "99.999%"}; !reflect.DeepEqual(labels, want) {
		t.Errorf("labels %q, want %q", labels, want)
	}
	// An axis up to 99% has no mark past it.
	if ts := (ninesTicks{}).Ticks(0, 2); len(ts) != 6 || ts[len(ts)-1].Label != "99%" {
		t.Errorf("ticks up to 99%%: %v", ts)
	}
}

func TestHuman(t *testing.T) {
	for v, want := range map[float64]string{0: "0", 0.25: "0.25", 1500: "1500", 25000: "25k", 300000: "300k", 1.25e7: "12.5M", 0.1 + 0.2: "0.3"} {
		if got := human(v); got != want {
			t.Errorf("human(%v) = %q, want %q", v, got, want)
		}
	}
}

func TestLabels(t *testing.T) {
	r := func(path, workload, driver string) *Result {
		return &Result{Path: path, Workload: workload, Driver: driver}
	}
	for _, tt := range []struct {
		rs     []*Result
		want   []string
		common string
	}{
		{[]*Result{r("a.json", "w", "Kafka"), r("b.json", "w", "Petrel")}, []string{"Kafka", "Petrel"}, "w"},
		{[]*Result{r("a.json", "w1", "Petrel"), r("b.json", "w2", "Petrel")}, []string{"w1 (Petrel)", "w2 (Petrel)"}, ""},
		{[]*Result{r("x/a.json", "w", "Petrel"), r("x/b.json", "w", "Petrel")}, []string{"a", "b"}, "w"},
		{[]*Result{r("x/a.json", "w", "Petrel"), r("y/a.json", "w", "Petrel")}, []string{"x/a.json", "y/a.json"}, "w"},
		{[]*Result{r("a.json", "w", "Petrel"), r("a.json", "w", "Petrel")}, []string{"a.json #1", "a.json #2"}, "w"},
		{[]*Result{r("a.json", "", "Petrel")}, []string{"Petrel"}, ""},
		{[]*Result{r("a.json", "", "")}, []string{"a"}, ""},
	} {
		got, common := Labels(tt.rs)
		if !reflect.DeepEqual(got, tt.want) || common != tt.common {
			t.Errorf("Labels: %q %q, want %q %q", got, common, tt.want, tt.common)
		}
	}
}
