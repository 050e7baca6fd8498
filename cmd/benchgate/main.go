// Command benchgate is the statistics half of the regression gate (scripts/bench-compare.sh,
// `make bench-compare BASE=<rev>`; see BENCHMARKS.md "Regression gate"). It has two subcommands:
//
//	benchgate omb [-name Publish] RUN.json...
//	    turns petrel-bench --json results (OpenMessaging Benchmark TestResult fields) into Go
//	    benchmark format, one line per run: publish rate (msg/s, from aggregatedPublishRate or
//	    the mean of the publishRate series) and p50/p99 publish latency (aggregatedPublishLatency*
//	    in ms, written in ns so that benchstat shows seconds). benchstat reads the output.
//
//	benchgate gate [-threshold 5] [-alpha 0.05] [-min-bytes 64] [-v] BASE.txt HEAD.txt
//	    compares every benchmark and unit found in both files the way benchstat does (median of
//	    each side, Mann-Whitney U test, golang.org/x/perf/benchmath) and exits 1 when HEAD is
//	    worse than BASE by more than -threshold percent with p < -alpha for any of them: slower
//	    (sec/op, latencies), less throughput (units ending in /s), more memory (B/op, allocs/op).
//	    A "Unit <unit> better=higher|lower" line in the input overrides the direction.
//	    Exit status: 0 no regression, 1 regression, 2 usage or input error.
//
// It lives in a module of its own so that golang.org/x/perf and its dependencies never enter
// Petrel's own build (they would raise versions of libraries the broker uses, and with them the
// numbers under test). Its go.mod also pins the benchstat command (`go tool benchstat`).
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"regexp"
	"sort"
	"strings"

	"golang.org/x/perf/benchfmt"
	"golang.org/x/perf/benchmath"
	"golang.org/x/perf/benchunit"
)

func main() {
	if len(os.Args) < 2 {
		usage()
	}
	var err error
	code := 0
	switch os.Args[1] {
	case "omb":
		err = ombCmd(os.Args[2:], os.Stdout)
	case "gate":
		code, err = gateCmd(os.Args[2:], os.Stdout)
	default:
		usage()
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "benchgate:", err)
		os.Exit(2)
	}
	os.Exit(code)
}

func usage() {
	fmt.Fprintln(os.Stderr, `usage:
  benchgate omb [-name Publish] RUN.json...
  benchgate gate [-threshold 5] [-alpha 0.05] [-min-bytes 64] [-v] BASE.txt HEAD.txt`)
	os.Exit(2)
}

// ombResult holds the TestResult fields that omb reads.
type ombResult struct {
	PublishRate                   []float64 `json:"publishRate"`
	AggregatedPublishRate         *float64  `json:"aggregatedPublishRate"`
	AggregatedPublishLatency50pct *float64  `json:"aggregatedPublishLatency50pct"`
	AggregatedPublishLatency99pct *float64  `json:"aggregatedPublishLatency99pct"`
}

var benchName = regexp.MustCompile(`^[A-Za-z0-9_/=.-]+$`)

func ombCmd(args []string, w io.Writer) error {
	fs := flag.NewFlagSet("omb", flag.ContinueOnError)
	name := fs.String("name", "Publish", "benchmark name (written as Benchmark<name>)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() == 0 {
		return fmt.Errorf("omb: no result files")
	}
	if !benchName.MatchString(*name) {
		return fmt.Errorf("omb: bad benchmark name %q", *name)
	}
	fmt.Fprintln(w, "Unit msg/s better=higher")
	fmt.Fprintln(w, "Unit p50-latency-ns better=lower")
	fmt.Fprintln(w, "Unit p99-latency-ns better=lower")
	for _, path := range fs.Args() {
		line, err := ombLine(path, *name)
		if err != nil {
			return err
		}
		fmt.Fprintln(w, line)
	}
	return nil
}

func ombLine(path, name string) (string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return "", err
	}
	var r ombResult
	if err := json.Unmarshal(b, &r); err != nil {
		return "", fmt.Errorf("%s: %v", path, err)
	}
	var rate float64
	switch {
	case r.AggregatedPublishRate != nil:
		rate = *r.AggregatedPublishRate
	case len(r.PublishRate) > 0:
		for _, v := range r.PublishRate {
			rate += v
		}
		rate /= float64(len(r.PublishRate))
	default:
		return "", fmt.Errorf("%s: no publishRate", path)
	}
	if r.AggregatedPublishLatency50pct == nil || r.AggregatedPublishLatency99pct == nil {
		return "", fmt.Errorf("%s: no aggregatedPublishLatency50pct/99pct", path)
	}
	return fmt.Sprintf("Benchmark%s 1 %.1f msg/s %.0f p50-latency-ns %.0f p99-latency-ns",
		name, rate, *r.AggregatedPublishLatency50pct*1e6, *r.AggregatedPublishLatency99pct*1e6), nil
}

// key names one series of measurements: a benchmark of a package in one unit.
type key struct{ pkg, name, unit string }

type samples struct {
	values map[key][]float64
	units  benchfmt.UnitMetadataMap
}

func readFile(path string) (*samples, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	s := &samples{values: map[key][]float64{}}
	r := benchfmt.NewReader(f, path)
	for r.Scan() {
		switch rec := r.Result().(type) {
		case *benchfmt.Result:
			pkg := rec.GetConfig("pkg")
			for _, v := range rec.Values {
				k := key{pkg, rec.Name.String(), v.Unit}
				s.values[k] = append(s.values[k], v.Value)
			}
		case *benchfmt.SyntaxError:
			return nil, rec
		}
	}
	if err := r.Err(); err != nil {
		return nil, err
	}
	s.units = r.Units()
	return s, nil
}

// better is +1 when higher values are better, -1 when lower ones are.
func better(unit string, metas ...benchfmt.UnitMetadataMap) int {
	for _, m := range metas {
		if m.Get(unit, "better") != nil {
			return m.GetBetter(unit)
		}
	}
	if b := benchfmt.UnitMetadataMap(nil).GetBetter(unit); b != 0 {
		return b
	}
	if strings.HasSuffix(unit, "/s") {
		return 1
	}
	return -1
}

type row struct {
	key
	base, head float64 // medians
	delta      float64 // percent, head against base
	cmp        benchmath.Comparison
	verdict    string // "REGRESSION", "improved", "ok" (within the threshold) or "~" (not significant)
}

type gateConfig struct {
	threshold, alpha, minBytes float64
}

func compare(base, head *samples, c gateConfig) (rows []row, onlyOne []key) {
	thr := &benchmath.Thresholds{CompareAlpha: c.alpha}
	for k, bv := range base.values {
		hv, ok := head.values[k]
		if !ok {
			onlyOne = append(onlyOne, k)
			continue
		}
		bs := benchmath.NewSample(append([]float64(nil), bv...), thr)
		hs := benchmath.NewSample(append([]float64(nil), hv...), thr)
		r := row{key: k,
			base: benchmath.AssumeNothing.Summary(bs, 0.95).Center,
			head: benchmath.AssumeNothing.Summary(hs, 0.95).Center,
			cmp:  benchmath.AssumeNothing.Compare(bs, hs),
		}
		switch {
		case r.base == r.head:
			r.delta = 0
		case r.base == 0:
			r.delta = math.Inf(1)
			if r.head < 0 {
				r.delta = math.Inf(-1)
			}
		default:
			r.delta = (r.head - r.base) / math.Abs(r.base) * 100
		}
		worse := -r.delta * float64(better(k.unit, base.units, head.units)) // > 0: head is worse
		significant := r.cmp.P < c.alpha
		if k.unit == "B/op" && math.Abs(r.head-r.base) < c.minBytes {
			significant = false
		}
		switch {
		case !significant:
			r.verdict = "~"
		case worse > c.threshold:
			r.verdict = "REGRESSION"
		case worse < -c.threshold:
			r.verdict = "improved"
		default:
			r.verdict = "ok"
		}
		rows = append(rows, r)
	}
	for k := range head.values {
		if _, ok := base.values[k]; !ok {
			onlyOne = append(onlyOne, k)
		}
	}
	sort.Slice(rows, func(i, j int) bool { return rows[i].key.less(rows[j].key) })
	sort.Slice(onlyOne, func(i, j int) bool { return onlyOne[i].less(onlyOne[j]) })
	return rows, onlyOne
}

func (a key) less(b key) bool {
	if a.pkg != b.pkg {
		return a.pkg < b.pkg
	}
	if a.name != b.name {
		return a.name < b.name
	}
	return a.unit < b.unit
}

func gateCmd(args []string, w io.Writer) (int, error) {
	fs := flag.NewFlagSet("gate", flag.ContinueOnError)
	var c gateConfig
	fs.Float64Var(&c.threshold, "threshold", 5, "percent by which HEAD may be worse than BASE before it counts")
	fs.Float64Var(&c.alpha, "alpha", 0.05, "significance level of the Mann-Whitney U test")
	fs.Float64Var(&c.minBytes, "min-bytes", 64, "B/op differences smaller than this are ignored (amortized growth)")
	verbose := fs.Bool("v", false, "print every comparison, not only the ones beyond the threshold")
	if err := fs.Parse(args); err != nil {
		return 2, err
	}
	if fs.NArg() != 2 {
		return 2, fmt.Errorf("gate: want BASE.txt HEAD.txt")
	}
	base, err := readFile(fs.Arg(0))
	if err != nil {
		return 2, err
	}
	head, err := readFile(fs.Arg(1))
	if err != nil {
		return 2, err
	}
	rows, onlyOne := compare(base, head, c)
	if len(rows) == 0 {
		return 2, fmt.Errorf("gate: no benchmark in both %s and %s", fs.Arg(0), fs.Arg(1))
	}
	fmt.Fprintf(w, "gate: HEAD worse than BASE by more than %g%% with p < %g (Mann-Whitney U test of the medians) fails\n", c.threshold, c.alpha)
	regressions, improvements, weak := 0, 0, 0
	for _, r := range rows {
		switch r.verdict {
		case "REGRESSION":
			regressions++
		case "improved":
			improvements++
		}
		for _, w := range r.cmp.Warnings {
			if strings.Contains(w.Error(), "samples to detect") { // benchmath: n too small for alpha
				weak++
				break
			}
		}
		if (r.verdict == "ok" || r.verdict == "~") && !*verbose {
			continue
		}
		name := r.name
		if r.pkg != "" {
			name = shortPkg(r.pkg) + "." + name
		}
		cls := benchunit.ClassOf(r.unit)
		fmt.Fprintf(w, "  %-10s %-46s %-16s %8s -> %-8s %+7.1f%%  p=%.3f n=%d+%d\n",
			r.verdict, name, r.unit, benchunit.Scale(r.base, cls), benchunit.Scale(r.head, cls),
			r.delta, r.cmp.P, r.cmp.N1, r.cmp.N2)
	}
	for _, k := range onlyOne {
		fmt.Fprintf(w, "  %-10s %s %s (in one side only, not compared)\n", "skipped", k.name, k.unit)
	}
	if weak > 0 {
		fmt.Fprintf(w, "  warning: %d comparison(s) have too few runs to ever reach p < %g (raise RUNS)\n", weak, c.alpha)
	}
	fmt.Fprintf(w, "  %d comparison(s): %d regression(s), %d improvement(s), %d within %g%% or not significant (p >= alpha)\n",
		len(rows), regressions, improvements, len(rows)-regressions-improvements, c.threshold)
	if regressions > 0 {
		fmt.Fprintln(w, "gate: FAIL")
		return 1, nil
	}
	fmt.Fprintln(w, "gate: PASS")
	return 0, nil
}

func shortPkg(pkg string) string {
	if i := strings.LastIndexByte(pkg, '/'); i >= 0 {
		return pkg[i+1:]
	}
	return pkg
}
