// Package ratelog logs a recurring warning at most once per interval, counting the ones it
// skipped, so a failure that repeats thousands of times a second yields one line a second.
//
// A Limiter counts every line it is given as one kind; Reasons keeps a Limiter per message, so
// that a flood of one kind (a port scanner's probes) neither floods the log nor hides a line of
// another kind (a slave that diverged), and every line logged says how many lines of its own
// kind were suppressed since the previous one ("similar_not_logged").
package ratelog

import (
	"context"
	"log/slog"
	"sync"
	"time"
)

// Limiter lets one warning through per Interval (default 1 s). The zero value is ready to use;
// it is safe for concurrent use.
type Limiter struct {
	// Interval is the minimum time between two logged lines.
	Interval time.Duration

	mu      sync.Mutex // a leaf
	last    time.Time
	skipped int
}

// Warn logs msg at Warn level unless a line was logged less than Interval ago; a logged line
// carries "similar_not_logged" with the number skipped since the previous one.
func (l *Limiter) Warn(log *slog.Logger, msg string, args ...any) {
	l.log(log, slog.LevelWarn, msg, args)
}

// Error is Warn at Error level (an alert that repeats while its cause lasts).
func (l *Limiter) Error(log *slog.Logger, msg string, args ...any) {
	l.log(log, slog.LevelError, msg, args)
}

// Info is Warn at Info level (a routine event a remote peer can repeat at will: a connection
// that idled out).
func (l *Limiter) Info(log *slog.Logger, msg string, args ...any) {
	l.log(log, slog.LevelInfo, msg, args)
}

func (l *Limiter) log(log *slog.Logger, level slog.Level, msg string, args []any) {
	if !log.Enabled(context.Background(), level) {
		return
	}
	interval := l.Interval
	if interval <= 0 {
		interval = time.Second
	}
	l.mu.Lock()
	now := time.Now()
	if !l.last.IsZero() && now.Sub(l.last) < interval {
		l.skipped++
		l.mu.Unlock()
		return
	}
	skipped := l.skipped
	l.last, l.skipped = now, 0
	l.mu.Unlock()
	if skipped > 0 {
		args = append(args, "similar_not_logged", skipped)
	}
	log.Log(context.Background(), level, msg, args...)
}

// MaxReasons is how many distinct messages a Reasons keeps a Limiter of its own for; the
// messages past it share one, so that messages built from a peer's input cannot grow it
// without bound.
const MaxReasons = 256

// Reasons rate-limits lines per reason: each distinct message has its own Limiter, with
// Interval (default 1 s). Messages should be constant strings (the reason), the details going
// into the attributes. The zero value is ready to use; it is safe for concurrent use.
type Reasons struct {
	// Interval is the minimum time between two logged lines of one message.
	Interval time.Duration

	mu     sync.Mutex // a leaf: a Limiter is taken after it is released
	byMsg  map[string]*Limiter
	others *Limiter // the messages past MaxReasons
}

// Warn logs msg at Warn level unless a line with the same message was logged less than
// Interval ago (Limiter.Warn).
func (r *Reasons) Warn(log *slog.Logger, msg string, args ...any) {
	r.Of(msg).log(log, slog.LevelWarn, msg, args)
}

// Error is Warn at Error level.
func (r *Reasons) Error(log *slog.Logger, msg string, args ...any) {
	r.Of(msg).log(log, slog.LevelError, msg, args)
}

// Info is Warn at Info level.
func (r *Reasons) Info(log *slog.Logger, msg string, args ...any) {
	r.Of(msg).log(log, slog.LevelInfo, msg, args)
}

// Of returns the Limiter of a reason, made on first use: for lines whose message is built
// from details (a library's formatted line), limited by the constant it was built from.
func (r *Reasons) Of(reason string) *Limiter {
	r.mu.Lock()
	defer r.mu.Unlock()
	if l := r.byMsg[reason]; l != nil {
		return l
	}
	if r.byMsg == nil {
		r.byMsg = make(map[string]*Limiter)
		r.others = &Limiter{Interval: r.Interval}
	}
	if len(r.byMsg) >= MaxReasons {
		return r.others
	}
	l := &Limiter{Interval: r.Interval}
	r.byMsg[reason] = l
	return l
}
