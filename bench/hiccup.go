package bench

import (
	"context"
	"errors"
	"fmt"
	"math"
	"runtime"
	"sync/atomic"
	"time"

	"github.com/HdrHistogram/hdrhistogram-go"
	"golang.org/x/sys/unix"
)

// The hiccup meter (the idea of jHiccup): a thread that asks to sleep for a fixed interval and
// records how much later than asked it woke. Nothing it does takes time but the sleep, so the
// lateness is the machine's alone: the hypervisor's steal, the run queue, interrupts. A broker's
// latency tail cannot be lower than that floor under the same load, so a latency run measured
// beside a hiccup meter tells the tail Petrel adds from the machine's.

// HiccupResult is the outcome of MeasureHiccup: the wake-up lateness of a thread that slept for
// Interval, over DurationSeconds of wall time. Lateness in ms.
type HiccupResult struct {
	// IntervalMs is the sleep asked for each time.
	IntervalMs float64 `json:"intervalMs"`
	// DurationSeconds is the wall time measured (shorter than asked when stopped early).
	DurationSeconds float64 `json:"durationSeconds"`
	// Samples is the number of wake-ups recorded.
	Samples int64 `json:"samples"`
	// P50Ms to P9999Ms are the lateness at those percentiles (P999Ms: p99.9), MaxMs the
	// largest, in ms.
	P50Ms   float64 `json:"p50Ms"`
	P90Ms   float64 `json:"p90Ms"`
	P99Ms   float64 `json:"p99Ms"`
	P999Ms  float64 `json:"p999Ms"`
	P9999Ms float64 `json:"p9999Ms"`
	MaxMs   float64 `json:"maxMs"`
}

// hiccupSummary summarises h, a histogram of lateness in µs, for a run of elapsed wall time at
// the given interval. Pure.
func hiccupSummary(h *hdrhistogram.Histogram, interval, elapsed time.Duration) HiccupResult {
	s := msStats(h)
	return HiccupResult{
		IntervalMs:      float64(interval) / float64(time.Millisecond),
		DurationSeconds: round3(elapsed.Seconds()),
		Samples:         s.Count,
		P50Ms:           s.P50,
		P90Ms:           float64(h.ValueAtPercentile(90)) / 1000,
		P99Ms:           s.P99,
		P999Ms:          s.P999,
		P9999Ms:         s.P9999,
		MaxMs:           s.Max,
	}
}

// String is the result as the baseline line the benchmark script prints:
// "hiccup: wake-up lateness over 10.0s at a 1ms interval: p50 58 us p99 1.9 ms p99.9 12.1 ms max
// 31.4 ms (9811 samples)".
func (r HiccupResult) String() string {
	interval := time.Duration(math.Round(r.IntervalMs * float64(time.Millisecond)))
	return fmt.Sprintf("hiccup: wake-up lateness over %.1fs at a %v interval: p50 %s p99 %s p99.9 %s max %s (%d samples)",
		r.DurationSeconds, interval, lateness(r.P50Ms), lateness(r.P99Ms), lateness(r.P999Ms), lateness(r.MaxMs), r.Samples)
}

// lateness formats ms as the hiccup line does: whole µs below 1 ms, where the meter's own
// resolution is, then ms with one decimal.
func lateness(ms float64) string {
	if ms < 1 {
		return fmt.Sprintf("%.0f us", ms*1000)
	}
	return fmt.Sprintf("%.1f ms", ms)
}

// hiccupMeter is the measuring loop's state, made before the loop so that a tick allocates
// nothing: the meter's own CPU use is one sleep per interval and two clock reads.
type hiccupMeter struct {
	interval time.Duration
	req      unix.Timespec // interval, as nanosleep takes it
	h        *hdrhistogram.Histogram
}

func newHiccupMeter(interval time.Duration) *hiccupMeter {
	return &hiccupMeter{interval: interval, req: unix.NsecToTimespec(int64(interval)), h: newHistogram()}
}

// tick sleeps for the interval and records how late it woke, in µs; it returns the time it
// woke. time.Now's monotonic reading is CLOCK_MONOTONIC, read through the vDSO: no system call
// besides the sleep. A signal that cuts the sleep short (EINTR) sleeps the rest, so a sample is
// never the lateness of a shorter sleep.
func (m *hiccupMeter) tick() time.Time {
	t0 := time.Now()
	req := m.req
	var left unix.Timespec
	for unix.Nanosleep(&req, &left) == unix.EINTR {
		req = left
	}
	t1 := time.Now()
	late := (t1.Sub(t0) - m.interval).Microseconds()
	_ = m.h.RecordValue(max(0, min(late, histHighestMicros))) // in range: cannot fail
	return t1
}

// MaxHiccupInterval is the longest interval MeasureHiccup takes: the meter notices the end of
// its duration or of its context only between sleeps, so an interval bounds how late it stops.
const MaxHiccupInterval = time.Second

// MeasureHiccup runs the hiccup meter for d, or until ctx is done, and summarises what it
// recorded. The loop runs on a thread of its own (a goroutine locked to it, which exits locked
// so the runtime ends the thread and the changed timer slack with it), with the thread's timer
// slack at 1 ns: Linux lets a normal thread's timers fire up to 50 µs late on purpose, to
// coalesce wake-ups, and that would be the meter's lateness, not the machine's. The caller
// decides GOMAXPROCS; with 1 (the baseline subcommand) the Go scheduler has nothing else to run
// when the thread wakes. It starts no sleep that would end after d, and notices ctx's end
// between sleeps. A nil ctx, an interval or duration that is not positive, an interval above
// MaxHiccupInterval or above d are refused; so is a run stopped before its first sample.
func MeasureHiccup(ctx context.Context, interval, d time.Duration) (HiccupResult, error) {
	if ctx == nil {
		return HiccupResult{}, errors.New("hiccup: nil context")
	}
	if err := checkHiccup(interval, d); err != nil {
		return HiccupResult{}, err
	}
	var stopped atomic.Bool
	defer context.AfterFunc(ctx, func() { stopped.Store(true) })()
	m := newHiccupMeter(interval)
	var elapsed time.Duration
	done := make(chan struct{})
	go func() {
		defer close(done)
		// Never unlocked: the thread ends with the goroutine. The slack is best effort: a
		// failure leaves the default.
		runtime.LockOSThread()
		_ = unix.Prctl(unix.PR_SET_TIMERSLACK, 1, 0, 0, 0)
		start := time.Now()
		end := start
		for !stopped.Load() && end.Sub(start)+interval <= d {
			end = m.tick()
		}
		elapsed = end.Sub(start)
	}()
	<-done
	if m.h.TotalCount() == 0 {
		return HiccupResult{}, errors.New("hiccup: stopped before the first sample")
	}
	return hiccupSummary(m.h, interval, elapsed), nil
}

// checkHiccup refuses an interval and duration MeasureHiccup cannot honour. Pure.
func checkHiccup(interval, d time.Duration) error {
	switch {
	case interval <= 0 || d <= 0:
		return fmt.Errorf("hiccup: interval %v and duration %v must be positive", interval, d)
	case interval > MaxHiccupInterval:
		return fmt.Errorf("hiccup: interval %v is longer than %v (the meter notices a stop only between sleeps)", interval, MaxHiccupInterval)
	case interval > d:
		return fmt.Errorf("hiccup: interval %v is longer than the duration %v: not one sleep fits", interval, d)
	}
	return nil
}

// WriteJSON writes the result to path, indented.
func (r HiccupResult) WriteJSON(path string) error { return writeJSON(path, r) }
