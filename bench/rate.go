package bench

import (
	"sync/atomic"
	"time"
)

// schedule hands out the intended send times of a fixed rate shared by all producers, as OMB's
// UniformRateLimiter: the n-th send is due at start + n/rate, whenever it is asked for. A
// producer that falls behind keeps its due times, so the lateness of every send is measured
// (publish delay) instead of hidden: no coordinated omission.
//
// Concurrency: next is safe for concurrent use.
type schedule struct {
	start    time.Time
	interval float64 // nanoseconds between sends
	n        atomic.Int64
}

// newSchedule returns a schedule of rate sends per second starting at start; rate must be
// positive.
func newSchedule(start time.Time, rate float64) *schedule {
	return &schedule{start: start, interval: 1e9 / rate}
}

// next returns the due time of the next send.
func (s *schedule) next() time.Time {
	n := s.n.Add(1) - 1
	return s.start.Add(time.Duration(float64(n) * s.interval))
}

// earlySlack is how early a send may start. Go's timers wake a sleeping goroutine with about a
// millisecond of jitter, so sleeping until the exact due time would make most sends late by a
// fraction of a millisecond and report the bench's own jitter as publish delay. Instead a
// producer sleeps until earlySlack before the due time and sends then: sends run at most that
// much ahead of the schedule (the rate over any longer window is unchanged), and a send that
// starts after its due time was really held up.
const earlySlack = time.Millisecond

// waiter sleeps until due times; each producer owns one (it reuses its timer).
type waiter struct {
	t *time.Timer
}

// until waits until earlySlack before due, or for stop to close; it reports false when stop
// closed first.
func (w *waiter) until(due time.Time, stop <-chan struct{}) bool {
	d := time.Until(due) - earlySlack
	if d <= 0 {
		select {
		case <-stop:
			return false
		default:
			return true
		}
	}
	if w.t == nil {
		w.t = time.NewTimer(d)
	} else {
		w.t.Reset(d)
	}
	select {
	case <-w.t.C:
		return true
	case <-stop:
		w.t.Stop()
		return false
	}
}

// stop releases the timer.
func (w *waiter) stop() {
	if w.t != nil {
		w.t.Stop()
	}
}
