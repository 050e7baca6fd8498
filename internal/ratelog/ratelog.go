// Package ratelog logs a recurring warning at most once per interval, counting the ones it
// skipped, so a failure that repeats thousands of times a second yields one line a second.
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

func (l *Limiter) log(log *slog.Logger, level slog.Level, msg string, args []any) {
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
