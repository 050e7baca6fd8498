package bench

import (
	"cmp"
	"encoding/json"
	"fmt"
	"math"
	"slices"
	"strconv"
	"sync"

	"github.com/HdrHistogram/hdrhistogram-go"
)

// Histogram range: values are recorded in microseconds from 1 µs to 60 s with 3 significant
// digits, as OMB does. Larger values are clamped to the maximum, negative ones to 0.
const (
	histLowestMicros  = 1
	histHighestMicros = 60_000_000
	histSigFigs       = 3
)

func newHistogram() *hdrhistogram.Histogram {
	return hdrhistogram.New(histLowestMicros, histHighestMicros, histSigFigs)
}

// Recorder collects latency samples from many goroutines into an interval histogram that the
// reporter takes at every progress tick (the HdrHistogram Recorder pattern).
//
// Concurrency: Record and Interval are safe for concurrent use; mu guards cur.
type Recorder struct {
	mu    sync.Mutex
	cur   *hdrhistogram.Histogram
	spare *hdrhistogram.Histogram
}

// NewRecorder returns an empty recorder.
func NewRecorder() *Recorder {
	return &Recorder{cur: newHistogram(), spare: newHistogram()}
}

// Record adds one sample in microseconds.
func (r *Recorder) Record(micros int64) {
	micros = max(0, min(micros, histHighestMicros))
	r.mu.Lock()
	_ = r.cur.RecordValue(micros) // cannot fail: the value is in range
	r.mu.Unlock()
}

// Interval returns the samples recorded since the previous call and starts a new interval. The
// returned histogram belongs to the caller until it passes it to Recycle.
func (r *Recorder) Interval() *hdrhistogram.Histogram {
	r.mu.Lock()
	h := r.cur
	next := r.spare
	if next == nil {
		next = newHistogram()
	}
	r.spare = nil
	r.cur = next
	r.mu.Unlock()
	return h
}

// Recycle hands an interval histogram back for reuse.
func (r *Recorder) Recycle(h *hdrhistogram.Histogram) {
	h.Reset()
	r.mu.Lock()
	if r.spare == nil {
		r.spare = h
	}
	r.mu.Unlock()
}

// LatencyStats summarises a histogram as OMB reports it: mean, percentiles and maximum, in the
// unit of the report (see msStats and microsStats).
type LatencyStats struct {
	Count int64
	Avg   float64
	P50   float64
	P75   float64
	P95   float64
	P99   float64
	P999  float64
	P9999 float64
	Max   float64
}

// statsOf summarises h with every value divided by scale (1000 turns µs into ms).
func statsOf(h *hdrhistogram.Histogram, scale float64) LatencyStats {
	if h == nil || h.TotalCount() == 0 {
		return LatencyStats{}
	}
	return LatencyStats{
		Count: h.TotalCount(),
		Avg:   h.Mean() / scale,
		P50:   float64(h.ValueAtPercentile(50)) / scale,
		P75:   float64(h.ValueAtPercentile(75)) / scale,
		P95:   float64(h.ValueAtPercentile(95)) / scale,
		P99:   float64(h.ValueAtPercentile(99)) / scale,
		P999:  float64(h.ValueAtPercentile(99.9)) / scale,
		P9999: float64(h.ValueAtPercentile(99.99)) / scale,
		Max:   float64(h.Max()) / scale,
	}
}

// msStats summarises a histogram of microseconds in milliseconds.
func msStats(h *hdrhistogram.Histogram) LatencyStats { return statsOf(h, 1000) }

// microsStats summarises a histogram of microseconds in microseconds.
func microsStats(h *hdrhistogram.Histogram) LatencyStats { return statsOf(h, 1) }

// Quantile is one point of a latency distribution: the value at or below which Percentile
// percent of the samples fall.
type Quantile struct {
	Percentile float64
	Value      float64
}

// Quantiles is a latency distribution. It is written to JSON as OMB writes its
// Map<Double, Double>: an object whose keys are the percentiles formatted as Java doubles
// ("50.0", "99.90234375"), in ascending order.
type Quantiles []Quantile

// quantilesOf returns h's distribution as OMB computes aggregatedPublishLatencyQuantiles
// (HdrHistogram percentile iteration, 100 ticks per half distance), values divided by scale.
func quantilesOf(h *hdrhistogram.Histogram, scale float64) Quantiles {
	if h == nil || h.TotalCount() == 0 {
		return Quantiles{}
	}
	brackets := h.CumulativeDistributionWithTicks(100)
	q := make(Quantiles, 0, len(brackets))
	for _, b := range brackets {
		if n := len(q); n > 0 && q[n-1].Percentile == b.Quantile {
			q[n-1].Value = float64(b.ValueAt) / scale
			continue
		}
		q = append(q, Quantile{Percentile: b.Quantile, Value: float64(b.ValueAt) / scale})
	}
	return q
}

// MarshalJSON implements json.Marshaler.
func (q Quantiles) MarshalJSON() ([]byte, error) {
	b := make([]byte, 0, 16+len(q)*24)
	b = append(b, '{')
	for i, e := range q {
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, '"')
		b = appendJavaDouble(b, e.Percentile)
		b = append(b, '"', ':')
		b = appendJSONFloat(b, e.Value)
	}
	return append(b, '}'), nil
}

// UnmarshalJSON implements json.Unmarshaler, so results can be read back.
func (q *Quantiles) UnmarshalJSON(b []byte) error {
	var m map[string]float64
	if err := json.Unmarshal(b, &m); err != nil {
		return err
	}
	out := make(Quantiles, 0, len(m))
	for k, v := range m {
		p, err := strconv.ParseFloat(k, 64)
		if err != nil {
			return fmt.Errorf("quantile key %q: %w", k, err)
		}
		out = append(out, Quantile{Percentile: p, Value: v})
	}
	slices.SortFunc(out, func(a, b Quantile) int { return cmp.Compare(a.Percentile, b.Percentile) })
	*q = out
	return nil
}

// appendJSONFloat formats v as encoding/json does: no exponent between 1e-6 and 1e21, so the
// integral values of a Map<Double, Long> (publish delay in µs) stay integers at 1e6 and above.
func appendJSONFloat(b []byte, v float64) []byte {
	if a := math.Abs(v); a != 0 && (a < 1e-6 || a >= 1e21) {
		return strconv.AppendFloat(b, v, 'g', -1, 64)
	}
	return strconv.AppendFloat(b, v, 'f', -1, 64)
}

// appendJavaDouble formats v as Java's Double.toString does for the values percentiles take:
// the shortest representation, with ".0" for integers.
func appendJavaDouble(b []byte, v float64) []byte {
	start := len(b)
	b = strconv.AppendFloat(b, v, 'f', -1, 64)
	for _, c := range b[start:] {
		if c == '.' {
			return b
		}
	}
	return append(b, '.', '0')
}
