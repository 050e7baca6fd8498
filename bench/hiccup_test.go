package bench

import (
	"context"
	"strings"
	"testing"
	"time"
)

func TestHiccupSummary(t *testing.T) {
	for _, tt := range []struct {
		name     string
		micros   []int64 // lateness samples
		interval time.Duration
		elapsed  time.Duration
		want     HiccupResult
		line     string
	}{
		{
			name:     "sub-millisecond tail",
			micros:   []int64{50, 50, 50, 60, 900},
			interval: time.Millisecond, elapsed: 5 * time.Millisecond,
			want: HiccupResult{IntervalMs: 1, DurationSeconds: 0.005, Samples: 5,
				P50Ms: 0.05, P90Ms: 0.9, P99Ms: 0.9, P999Ms: 0.9, P9999Ms: 0.9, MaxMs: 0.9},
			line: "hiccup: wake-up lateness over 0.0s at a 1ms interval: p50 50 us p99 900 us p99.9 900 us max 900 us (5 samples)",
		},
		{
			name:     "millisecond tail, 1000 samples",
			micros:   append(append(make([]int64, 980), repeat(1900, 19)...), 31400),
			interval: 500 * time.Microsecond, elapsed: 10 * time.Second,
			want: HiccupResult{IntervalMs: 0.5, DurationSeconds: 10, Samples: 1000,
				P50Ms: 0, P90Ms: 0, P99Ms: 1.9, P999Ms: 1.9, P9999Ms: 31.4, MaxMs: 31.4},
			line: "hiccup: wake-up lateness over 10.0s at a 500µs interval: p50 0 us p99 1.9 ms p99.9 1.9 ms max 31.4 ms (1000 samples)",
		},
		{
			name:     "ms with one decimal from 1 ms on",
			micros:   []int64{12_100},
			interval: 10 * time.Millisecond, elapsed: 20 * time.Millisecond,
			want: HiccupResult{IntervalMs: 10, DurationSeconds: 0.02, Samples: 1,
				P50Ms: 12.1, P90Ms: 12.1, P99Ms: 12.1, P999Ms: 12.1, P9999Ms: 12.1, MaxMs: 12.1},
			line: "hiccup: wake-up lateness over 0.0s at a 10ms interval: p50 12.1 ms p99 12.1 ms p99.9 12.1 ms max 12.1 ms (1 samples)",
		},
	} {
		t.Run(tt.name, func(t *testing.T) {
			h := newHistogram()
			for _, v := range tt.micros {
				if err := h.RecordValue(v); err != nil {
					t.Fatal(err)
				}
			}
			got := hiccupSummary(h, tt.interval, tt.elapsed)
			// The histogram keeps 3 significant digits: compare to within its resolution.
			near := func(a, b float64) bool { return a == b || (a > b*0.999 && a < b*1.001) }
			if got.IntervalMs != tt.want.IntervalMs || got.DurationSeconds != tt.want.DurationSeconds || got.Samples != tt.want.Samples ||
				!near(got.P50Ms, tt.want.P50Ms) || !near(got.P90Ms, tt.want.P90Ms) || !near(got.P99Ms, tt.want.P99Ms) ||
				!near(got.P999Ms, tt.want.P999Ms) || !near(got.P9999Ms, tt.want.P9999Ms) || !near(got.MaxMs, tt.want.MaxMs) {
				t.Errorf("summary %+v, want %+v", got, tt.want)
			}
			if s := got.String(); s != tt.line {
				t.Errorf("line\n%s\nwant\n%s", s, tt.line)
			}
		})
	}
}

func repeat(v int64, n int) []int64 {
	s := make([]int64, n)
	for i := range s {
		s[i] = v
	}
	return s
}

// TestMeasureHiccup runs the meter for real: it must record about one sample per interval, none
// of them negative. No timing is asserted: how late a thread wakes is the machine's business.
func TestMeasureHiccup(t *testing.T) {
	r, err := MeasureHiccup(context.Background(), time.Millisecond, 200*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	if r.Samples < 1 || r.IntervalMs != 1 || r.DurationSeconds <= 0 {
		t.Fatalf("implausible result %+v", r)
	}
	if r.P50Ms < 0 || r.P99Ms < r.P50Ms || r.P999Ms < r.P99Ms || r.MaxMs < r.P9999Ms {
		t.Fatalf("negative or unordered lateness %+v", r)
	}
}

// TestMeasureHiccupStopsOnContext: a run of an hour ends when its context is cancelled (a
// SIGINT in the subcommand), with what it has recorded.
func TestMeasureHiccupStopsOnContext(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(50*time.Millisecond, cancel)
	r, err := MeasureHiccup(ctx, time.Millisecond, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	if r.Samples < 1 || r.DurationSeconds >= 3600 {
		t.Fatalf("implausible result %+v", r)
	}
}

// TestHiccupTickAllocatesNothing: the meter's loop must not allocate, or the garbage collector
// would run in the process it measures.
func TestHiccupTickAllocatesNothing(t *testing.T) {
	m := newHiccupMeter(time.Microsecond)
	if n := testing.AllocsPerRun(100, func() { m.tick() }); n != 0 {
		t.Fatalf("%.1f allocations per tick", n)
	}
	if m.h.TotalCount() != 101 {
		t.Fatalf("%d samples after 101 ticks", m.h.TotalCount())
	}
}

// TestCheckHiccup: an interval longer than MaxHiccupInterval or than the duration is refused
// (the meter notices a stop only between sleeps, so such a run outlasts its duration and any
// signal), and no sleep starts that would end past the duration.
func TestCheckHiccup(t *testing.T) {
	for _, tc := range []struct {
		interval, d time.Duration
		want        string
	}{
		{time.Millisecond, 10 * time.Second, ""},
		{time.Second, time.Second, ""},
		{0, time.Second, "must be positive"},
		{time.Millisecond, -time.Second, "must be positive"},
		{time.Hour, 2 * time.Second, "longer than 1s"},
		{500 * time.Millisecond, 300 * time.Millisecond, "longer than the duration"},
	} {
		err := checkHiccup(tc.interval, tc.d)
		if (tc.want == "") != (err == nil) || err != nil && !strings.Contains(err.Error(), tc.want) {
			t.Errorf("checkHiccup(%v, %v) = %v, want %q", tc.interval, tc.d, err, tc.want)
		}
	}
	r, err := MeasureHiccup(context.Background(), 40*time.Millisecond, 100*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	if r.Samples < 1 || r.Samples > 2 {
		t.Fatalf("a 100 ms run at 40 ms: %d samples, want at most 2 (a third sleep would end past the duration)", r.Samples)
	}
}
