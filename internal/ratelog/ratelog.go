// Package ratelog logs a recurring warning at most once per interval, counting the ones it
// skipped, so a failure that repeats thousands of times a second yields one line a second.
//
// A Limiter counts every line it is given as one kind; Reasons keeps a Limiter per message, so
// that a flood of one kind (a port scanner's probes) neither floods the log nor hides a line of
// another kind (a slave that diverged), and every line logged says how many lines of its own
// kind were suppressed since the previous one ("similar_not_logged").
//
// A count would wait for the next line of its kind, which may never come (the flood stopped).
// An owner with a periodic loop (a broker, a NameServer) therefore gives its components a
// logger made by its Pending: a limiter that suppresses a line logged through it joins the
// Pending, and the owner's loop logs the count on its own once the limiter's interval has
// passed (Pending.Flush).
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
	// Of the lines suppressed since last: the newest one's logger, level and message, for the
	// count a Pending logs; queued is set while the limiter is in a Pending.
	skipLog   *slog.Logger
	skipLevel slog.Level
	skipMsg   string
	queued    bool
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
		l.skipLog, l.skipLevel, l.skipMsg = log, level, msg
		var p *Pending
		if h, ok := log.Handler().(*pendingHandler); ok && !l.queued {
			p, l.queued = h.p, true
		}
		l.mu.Unlock()
		if p != nil {
			p.add(l)
		}
		return
	}
	skipped := l.skipped
	l.last, l.skipped, l.skipLog = now, 0, nil
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

// Pending holds the limiters of one owner that suppressed lines in their current interval, so
// that the owner's periodic loop logs how many once the interval has passed (Flush), rather
// than with the next line of their kind only. A limiter joins when it suppresses a line
// logged through a logger of Logger (or one made from it by With or WithGroup). The zero
// value is ready to use; it is safe for concurrent use.
type Pending struct {
	mu sync.Mutex // a leaf: a Limiter's mu is never taken under it
	ls []*Limiter
}

// Logger returns log with its handler wrapped so that the limiters that suppress its lines
// join p. The lines themselves are log's.
func (p *Pending) Logger(log *slog.Logger) *slog.Logger {
	return slog.New(&pendingHandler{Handler: log.Handler(), p: p})
}

func (p *Pending) add(l *Limiter) {
	p.mu.Lock()
	p.ls = append(p.ls, l)
	p.mu.Unlock()
}

// Flush logs, for each limiter of p whose interval has passed by now since its last line (each
// one, when all: the owner is closing), how many lines it suppressed since that line: one line
// "lines suppressed by the rate limit" at their level, through the logger of the newest of
// them, with their message (reason), the count (similar_not_logged) and the time since the
// last line logged (over). That line counts as the limiter's next: the count is not repeated,
// and the limiter's interval starts again. Limiters whose interval has not passed stay.
func (p *Pending) Flush(now time.Time, all bool) {
	p.mu.Lock()
	ls := p.ls
	p.ls = nil
	p.mu.Unlock()
	var keep []*Limiter
	for _, l := range ls {
		if l.flush(now, all) {
			keep = append(keep, l)
		}
	}
	if len(keep) > 0 {
		p.mu.Lock()
		p.ls = append(p.ls, keep...)
		p.mu.Unlock()
	}
}

// flush logs the count of l's suppressed lines when its interval has passed by now (or all),
// and reports whether l stays in its Pending (lines suppressed, interval not over).
func (l *Limiter) flush(now time.Time, all bool) bool {
	interval := l.Interval
	if interval <= 0 {
		interval = time.Second
	}
	l.mu.Lock()
	if l.skipped == 0 {
		l.queued = false
		l.mu.Unlock()
		return false
	}
	if !all && now.Sub(l.last) < interval {
		l.mu.Unlock()
		return true
	}
	n, log, level, msg, over := l.skipped, l.skipLog, l.skipLevel, l.skipMsg, now.Sub(l.last)
	l.last, l.skipped, l.skipLog, l.queued = now, 0, nil, false
	l.mu.Unlock()
	log.Log(context.Background(), level, "lines suppressed by the rate limit",
		"reason", msg, "similar_not_logged", n, "over", over.Round(time.Millisecond))
	return false
}

// pendingHandler is the handler of a Pending's logger: another handler's lines, and the
// Pending its limiters join.
type pendingHandler struct {
	slog.Handler
	p *Pending
}

func (h *pendingHandler) WithAttrs(attrs []slog.Attr) slog.Handler {
	return &pendingHandler{Handler: h.Handler.WithAttrs(attrs), p: h.p}
}

func (h *pendingHandler) WithGroup(name string) slog.Handler {
	return &pendingHandler{Handler: h.Handler.WithGroup(name), p: h.p}
}
