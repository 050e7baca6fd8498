// Package chart draws the JSON results of petrel-bench (--json) and of the OpenMessaging
// Benchmark (the same TestResult fields) as PNG, SVG or PDF charts, one line per result:
//
//   - publish-latency: aggregatedPublishLatencyQuantiles, latency (ms) by percentile;
//   - end-to-end-latency: aggregatedEndToEndLatencyQuantiles, likewise;
//   - throughput: publishRate and consumeRate (msg/s) over time, side by side.
//
// The conventions are those of OMB's chart script (bin/create_charts.py): the percentile axis
// is a "nines" scale, x = log10(100 / (100 - p)), so 90%, 99%, 99.9%, ... are evenly spaced,
// with the quantiles above 99.999% left out; latency and rate axes are linear from 0; a time
// series has one point per progress interval.
package chart

import (
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"image/color"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/font"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/text"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
)

// Formats are the image formats Write accepts; DefaultFormats those it writes by default.
var (
	Formats        = []string{"png", "svg", "pdf"}
	DefaultFormats = []string{"png", "svg"}
)

// OMBInterval is the period of OMB's time series (its stats loop sleeps 10 s), assumed for a
// result that does not say.
const OMBInterval = 10.0

// MaxPercentile is the highest percentile drawn, as in OMB's chart script (100% would be at
// infinity on the nines scale).
const MaxPercentile = 99.999

// Options say where and how Write draws.
type Options struct {
	// Out is the directory of the charts, created if missing; "" means the directory of the
	// first input.
	Out string
	// Formats are the image formats, among Formats; empty means DefaultFormats.
	Formats []string
	// Title heads every chart; "" means the inputs' workload name when they share one.
	Title string
}

// Quantile is one point of a latency distribution: Value (ms) at Percentile.
type Quantile struct {
	Percentile float64
	Value      float64
}

// Result is what the charts use of one result file.
type Result struct {
	Path     string
	Workload string
	Driver   string
	// PublishRate and ConsumeRate have one entry (msg/s) per Interval seconds of the test.
	PublishRate []float64
	ConsumeRate []float64
	Interval    float64
	// The aggregated latency distributions, in ascending percentile order.
	PublishLatency  []Quantile
	EndToEndLatency []Quantile
}

// num is a JSON number read leniently: null and the strings "NaN", "Infinity" and the like
// (as Jackson may write them) give NaN or ±Inf, which the charts leave out.
type num float64

func (n *num) UnmarshalJSON(b []byte) error {
	s := string(b)
	if s == "null" {
		*n = num(math.NaN())
		return nil
	}
	if strings.HasPrefix(s, `"`) {
		if err := json.Unmarshal(b, &s); err != nil {
			return err
		}
	}
	v, err := strconv.ParseFloat(s, 64)
	if err != nil {
		return fmt.Errorf("%s is not a number", b)
	}
	*n = num(v)
	return nil
}

// file holds the fields the charts read; OMB's results have the first six, petrel-bench's
// all of them.
type file struct {
	Workload                           string         `json:"workload"`
	Driver                             string         `json:"driver"`
	PublishRate                        []num          `json:"publishRate"`
	ConsumeRate                        []num          `json:"consumeRate"`
	AggregatedPublishLatencyQuantiles  map[string]num `json:"aggregatedPublishLatencyQuantiles"`
	AggregatedEndToEndLatencyQuantiles map[string]num `json:"aggregatedEndToEndLatencyQuantiles"`
	ProgressIntervalSeconds            num            `json:"progressIntervalSeconds"`
	TestSeconds                        num            `json:"testSeconds"`
	DrainSeconds                       num            `json:"drainSeconds"`
	Mode                               string         `json:"mode"`
}

// Load reads a result written by petrel-bench --json or by the OpenMessaging Benchmark.
func Load(path string) (*Result, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var f file
	if err := json.Unmarshal(data, &f); err != nil {
		return nil, fmt.Errorf("%s: not a JSON result: %w", path, err)
	}
	if f.PublishRate == nil && f.ConsumeRate == nil && f.AggregatedPublishLatencyQuantiles == nil && f.AggregatedEndToEndLatencyQuantiles == nil {
		return nil, fmt.Errorf("%s: neither a petrel-bench nor an OpenMessaging Benchmark result (no publishRate, consumeRate or aggregated latency quantiles)", path)
	}
	r := &Result{Path: path, Workload: f.Workload, Driver: f.Driver, PublishRate: floats(f.PublishRate), ConsumeRate: floats(f.ConsumeRate)}
	if r.PublishLatency, err = quantiles(f.AggregatedPublishLatencyQuantiles); err != nil {
		return nil, fmt.Errorf("%s: aggregatedPublishLatencyQuantiles: %w", path, err)
	}
	if r.EndToEndLatency, err = quantiles(f.AggregatedEndToEndLatencyQuantiles); err != nil {
		return nil, fmt.Errorf("%s: aggregatedEndToEndLatencyQuantiles: %w", path, err)
	}
	// The period of the time series: petrel-bench says it; an older petrel-bench result is
	// estimated from its test time (a replay's series covers the drain too); OMB's is 10 s.
	n := max(len(r.PublishRate), len(r.ConsumeRate))
	covered := float64(f.TestSeconds)
	if f.Mode == "replay" {
		covered += float64(f.DrainSeconds)
	}
	switch {
	case f.ProgressIntervalSeconds > 0 && !math.IsInf(float64(f.ProgressIntervalSeconds), 0):
		r.Interval = float64(f.ProgressIntervalSeconds)
	case covered > 0 && !math.IsInf(covered, 0) && n > 0:
		r.Interval = covered / float64(n)
	default:
		r.Interval = OMBInterval
	}
	return r, nil
}

func floats(ns []num) []float64 {
	out := make([]float64, len(ns))
	for i, v := range ns {
		out[i] = float64(v)
	}
	return out
}

func quantiles(m map[string]num) ([]Quantile, error) {
	out := make([]Quantile, 0, len(m))
	for k, v := range m {
		p, err := strconv.ParseFloat(k, 64)
		if err != nil || p < 0 || p > 100 {
			return nil, fmt.Errorf("key %q is not a percentile", k)
		}
		out = append(out, Quantile{Percentile: p, Value: float64(v)})
	}
	slices.SortFunc(out, func(a, b Quantile) int { return cmp.Compare(a.Percentile, b.Percentile) })
	return out, nil
}

// Nines maps a percentile to OMB's chart axis: log10(100 / (100 - p)); 90% is 1, 99% 2 and
// so on.
func Nines(p float64) float64 { return math.Log10(100 / (100 - p)) }

// Labels returns the legend entry of each result and the workload they share ("" if they
// differ): the driver names when the workload is common and the drivers differ, else
// "workload (driver)" when those differ, else the file names.
func Labels(rs []*Result) (labels []string, common string) {
	common = rs[0].Workload
	for _, r := range rs[1:] {
		if r.Workload != common {
			common = ""
		}
	}
	try := func(f func(*Result) string) []string {
		out := make([]string, len(rs))
		seen := map[string]bool{}
		for i, r := range rs {
			out[i] = f(r)
			if out[i] == "" || seen[out[i]] {
				return nil
			}
			seen[out[i]] = true
		}
		return out
	}
	candidates := []func(*Result) string{
		func(r *Result) string {
			if common == "" {
				return ""
			}
			return r.Driver
		},
		func(r *Result) string {
			switch {
			case r.Workload == "" || r.Driver == "":
				return r.Workload + r.Driver
			}
			return r.Workload + " (" + r.Driver + ")"
		},
		func(r *Result) string { return strings.TrimSuffix(filepath.Base(r.Path), ".json") },
		func(r *Result) string { return r.Path },
	}
	for _, c := range candidates {
		if l := try(c); l != nil {
			return l, common
		}
	}
	out := make([]string, len(rs)) // the same path twice
	for i, r := range rs {
		out[i] = fmt.Sprintf("%s #%d", r.Path, i+1)
	}
	return out, common
}

// panel is one plot of a figure.
type panel struct {
	title, xLabel, yLabel string
	nines                 bool // the x axis is the percentile on the nines scale
	points                func(*Result) plotter.XYs
}

// figure is one chart file: panels side by side, sharing the legend.
type figure struct {
	name   string // file name without extension
	what   string // for notes
	panels []panel
}

var figures = []figure{
	{name: "publish-latency", what: "aggregatedPublishLatencyQuantiles", panels: []panel{{
		title: "Publish latency quantiles", xLabel: "Percentile", yLabel: "Latency (ms)", nines: true,
		points: func(r *Result) plotter.XYs { return quantilePoints(r.PublishLatency) },
	}}},
	{name: "end-to-end-latency", what: "aggregatedEndToEndLatencyQuantiles", panels: []panel{{
		title: "End-to-end latency quantiles", xLabel: "Percentile", yLabel: "Latency (ms)", nines: true,
		points: func(r *Result) plotter.XYs { return quantilePoints(r.EndToEndLatency) },
	}}},
	{name: "throughput", what: "publishRate or consumeRate", panels: []panel{
		{title: "Publish rate", xLabel: "Time (s)", yLabel: "Rate (msg/s)",
			points: func(r *Result) plotter.XYs { return timePoints(r.PublishRate, r.Interval) }},
		{title: "Consume rate", xLabel: "Time (s)", yLabel: "Rate (msg/s)",
			points: func(r *Result) plotter.XYs { return timePoints(r.ConsumeRate, r.Interval) }},
	}},
}

func finite(v float64) bool { return !math.IsNaN(v) && !math.IsInf(v, 0) }

func quantilePoints(qs []Quantile) plotter.XYs {
	var xy plotter.XYs
	for _, q := range qs {
		if q.Percentile <= MaxPercentile && finite(q.Value) {
			xy = append(xy, plotter.XY{X: Nines(q.Percentile), Y: q.Value})
		}
	}
	return xy
}

// timePoints places entry i at the end of its interval.
func timePoints(vs []float64, interval float64) plotter.XYs {
	var xy plotter.XYs
	for i, v := range vs {
		if finite(v) {
			xy = append(xy, plotter.XY{X: float64(i+1) * interval, Y: v})
		}
	}
	return xy
}

// Report lists what Write did.
type Report struct {
	Files []string // the charts written
	Notes []string // charts left out, for want of data
}

// Write draws the charts of the results at paths into opt.Out, one file per chart and format
// (publish-latency.png, end-to-end-latency.svg, throughput.png, ...), overwriting files of
// those names. A chart for which no result has data is left out, with a note.
func Write(paths []string, opt Options) (*Report, error) {
	if len(paths) == 0 {
		return nil, errors.New("no result file given")
	}
	formats, err := checkFormats(opt.Formats)
	if err != nil {
		return nil, err
	}
	rs := make([]*Result, len(paths))
	for i, p := range paths {
		if rs[i], err = Load(p); err != nil {
			return nil, err
		}
	}
	out := opt.Out
	if out == "" {
		out = filepath.Dir(paths[0])
	}
	if err := os.MkdirAll(out, 0o755); err != nil {
		return nil, err
	}
	labels, common := Labels(rs)
	title := opt.Title
	if title == "" {
		title = common
	}
	rep := &Report{}
	for _, fig := range figures {
		if !hasData(fig, rs) {
			rep.Notes = append(rep.Notes, fmt.Sprintf("%s: left out, no input has %s", fig.name, fig.what))
			continue
		}
		for _, format := range formats {
			path := filepath.Join(out, fig.name+"."+format)
			if err := draw1(path, format, title, fig, rs, labels); err != nil {
				return rep, err
			}
			rep.Files = append(rep.Files, path)
		}
	}
	return rep, nil
}

func checkFormats(fs []string) ([]string, error) {
	if len(fs) == 0 {
		return DefaultFormats, nil
	}
	var out []string
	for _, f := range fs {
		f = strings.ToLower(strings.TrimPrefix(strings.TrimSpace(f), "."))
		if f == "" {
			continue
		}
		if !slices.Contains(Formats, f) {
			return nil, fmt.Errorf("format %q: want %s", f, strings.Join(Formats, ", "))
		}
		if !slices.Contains(out, f) {
			out = append(out, f)
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("no format given: want %s", strings.Join(Formats, ", "))
	}
	return out, nil
}

func hasData(fig figure, rs []*Result) bool {
	for _, p := range fig.panels {
		for _, r := range rs {
			if len(p.points(r)) > 0 {
				return true
			}
		}
	}
	return false
}

// Figure geometry.
var (
	panelWidth  = 7 * vg.Inch
	panelHeight = 4.5 * vg.Inch
	margin      = 0.15 * vg.Inch
	titleSize   = vg.Points(15)
)

// maxMarked is the longest time series whose points are marked.
const maxMarked = 60

// lineStyle is result i's line: a color of its own, dashed once the colors repeat.
func lineStyle(i int) draw.LineStyle {
	n := len(plotutil.DarkColors)
	return draw.LineStyle{Color: plotutil.DarkColors[i%n], Width: vg.Points(1.5), Dashes: plotutil.Dashes(i / n)}
}

// draw1 writes one figure in one format to path.
func draw1(path, format, title string, fig figure, rs []*Result, labels []string) error {
	legend := plot.NewLegend()
	legend.Top, legend.Left = true, true
	legend.ThumbnailWidth = vg.Points(30)
	legend.Padding = vg.Points(3)
	for i, l := range labels {
		if !hasData(fig, rs[i:i+1]) {
			l += " (no data)"
		}
		legend.Add(l, &plotter.Line{LineStyle: lineStyle(i)})
	}
	width := panelWidth * vg.Length(len(fig.panels))
	legendH := legend.Rectangle(draw.Canvas{}).Size().Y + 2*margin
	titleH := vg.Length(0)
	if title != "" {
		titleH = titleSize * 2
	}
	height := panelHeight + legendH + titleH

	c, err := draw.NewFormattedCanvas(width, height, format)
	if err != nil {
		return err
	}
	dc := draw.New(c)
	dc.FillPolygon(color.White, []vg.Point{{X: 0, Y: 0}, {X: 0, Y: height}, {X: width, Y: height}, {X: width, Y: 0}})
	if title != "" {
		sty := text.Style{
			Color: color.Black, Font: font.From(plot.DefaultFont, titleSize), XAlign: draw.XCenter, YAlign: draw.YTop,
			Handler: plot.DefaultTextHandler,
		}
		dc.FillText(sty, vg.Point{X: width / 2, Y: height - margin}, title)
	}

	plots := make([]*plot.Plot, len(fig.panels))
	for j, pn := range fig.panels {
		p, err := newPlot(pn, rs)
		if err != nil {
			return fmt.Errorf("%s: %w", fig.name, err)
		}
		plots[j] = p
	}
	// Side by side panels share their scales.
	for _, p := range plots[1:] {
		plots[0].X.Max, plots[0].Y.Max = max(plots[0].X.Max, p.X.Max), max(plots[0].Y.Max, p.Y.Max)
	}
	for _, p := range plots[1:] {
		p.X.Max, p.Y.Max = plots[0].X.Max, plots[0].Y.Max
	}
	tiles := draw.Tiles{Rows: 1, Cols: len(plots), PadX: 0.4 * vg.Inch, PadLeft: margin, PadRight: margin, PadTop: margin}
	area := draw.Crop(dc, 0, 0, legendH, -titleH)
	for j, cv := range plot.Align([][]*plot.Plot{plots}, tiles, area)[0] {
		plots[j].Draw(cv)
	}
	legendArea := draw.Canvas{Canvas: dc.Canvas, Rectangle: vg.Rectangle{
		Min: vg.Point{X: margin * 4, Y: margin},
		Max: vg.Point{X: width - margin, Y: legendH - margin},
	}}
	legend.Draw(legendArea)

	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if _, err := c.WriteTo(f); err != nil {
		f.Close()
		return fmt.Errorf("%s: %w", path, err)
	}
	return f.Close()
}

// newPlot returns one panel with a line per result that has data for it.
func newPlot(pn panel, rs []*Result) (*plot.Plot, error) {
	p := plot.New()
	p.Title.Text = pn.title
	p.X.Label.Text = pn.xLabel
	p.Y.Label.Text = pn.yLabel
	p.Add(plotter.NewGrid())
	maxX, maxY := 0.0, 0.0
	for i, r := range rs {
		xy := pn.points(r)
		if len(xy) == 0 {
			continue
		}
		l, err := plotter.NewLine(xy)
		if err != nil {
			return nil, err
		}
		l.LineStyle = lineStyle(i)
		p.Add(l)
		if !pn.nines && len(xy) <= maxMarked {
			// A short time series shows its points, as OMB's charts do.
			sc, err := plotter.NewScatter(xy)
			if err != nil {
				return nil, err
			}
			sc.GlyphStyle = draw.GlyphStyle{Color: l.LineStyle.Color, Radius: vg.Points(2), Shape: draw.CircleGlyph{}}
			p.Add(sc)
		}
		for _, pt := range xy {
			maxX, maxY = max(maxX, pt.X), max(maxY, pt.Y)
		}
	}
	p.X.Min, p.Y.Min = 0, 0
	p.Y.Max = max(maxY*1.1, 1e-3)
	p.Y.Tick.Marker = numTicks{}
	if pn.nines {
		p.X.Max = max(1, math.Ceil(maxX-1e-9))
		p.X.Tick.Marker = ninesTicks{}
	} else {
		p.X.Max = max(maxX, 1)
		p.X.Tick.Marker = numTicks{}
	}
	return p, nil
}

// ninesTicks marks the percentile axis: 50%, 90%, 99%, 99.9%, ... with minor marks at 75%,
// 95% and 99.5%.
type ninesTicks struct{}

func (ninesTicks) Ticks(lo, hi float64) []plot.Tick {
	var ts []plot.Tick
	add := func(x float64, label string) {
		if x >= lo-1e-9 && x <= hi+1e-9 {
			ts = append(ts, plot.Tick{Value: x, Label: label})
		}
	}
	add(0, "0%")
	add(Nines(50), "50%")
	add(Nines(75), "")
	add(Nines(95), "")
	add(Nines(99.5), "")
	for n := 1; n <= 9; n++ { // 90%, 99%, 99.9%, ...
		add(float64(n), strconv.FormatFloat(100-math.Pow(10, float64(2-n)), 'f', max(0, n-2), 64)+"%")
	}
	slices.SortFunc(ts, func(a, b plot.Tick) int { return cmp.Compare(a.Value, b.Value) })
	return ts
}

// numTicks are gonum's default marks labelled for people: 1500, 25k, 1.2M.
type numTicks struct{}

func (numTicks) Ticks(lo, hi float64) []plot.Tick {
	ts := plot.DefaultTicks{}.Ticks(lo, hi)
	for i := range ts {
		if ts[i].Label != "" {
			ts[i].Label = human(ts[i].Value)
		}
	}
	return ts
}

// human formats v with at most 4 significant digits, in k or M from 10,000 up.
func human(v float64) string {
	suffix := ""
	switch a := math.Abs(v); {
	case a >= 1e7:
		v, suffix = v/1e6, "M"
	case a >= 1e4:
		v, suffix = v/1e3, "k"
	}
	r, _ := strconv.ParseFloat(strconv.FormatFloat(v, 'g', 4, 64), 64)
	return strconv.FormatFloat(r, 'f', -1, 64) + suffix
}
