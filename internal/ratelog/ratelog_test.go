package ratelog

import (
	"bytes"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"
)

func TestLimiter(t *testing.T) {
	var buf bytes.Buffer
	log := slog.New(slog.NewTextHandler(&buf, nil))
	l := Limiter{Interval: 50 * time.Millisecond}
	for i := 0; i < 100; i++ {
		l.Warn(log, "send failed", "i", i)
	}
	if n := strings.Count(buf.String(), "send failed"); n != 1 {
		t.Fatalf("%d lines logged in one interval:\n%s", n, buf.String())
	}
	time.Sleep(60 * time.Millisecond)
	l.Warn(log, "send failed", "i", 100)
	if !strings.Contains(buf.String(), "similar_not_logged=99") {
		t.Fatalf("skipped count missing:\n%s", buf.String())
	}
}

// TestLimiterDisabledLevel: a line below the handler's level is neither logged nor counted, so
// the next line that is logged does not claim lines nobody would have seen.
func TestLimiterDisabledLevel(t *testing.T) {
	var buf bytes.Buffer
	log := slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelWarn}))
	var l Limiter
	l.Info(log, "connection idle")
	l.Warn(log, "connection idle")
	if got := buf.String(); strings.Count(got, "connection idle") != 1 || strings.Contains(got, "similar_not_logged") {
		t.Fatalf("got:\n%s", got)
	}
}

// TestReasons: every message has its own limit and its own count of suppressed lines, so a
// flood of one reason hides no line of another.
func TestReasons(t *testing.T) {
	var buf bytes.Buffer
	log := slog.New(slog.NewTextHandler(&buf, nil))
	r := Reasons{Interval: 50 * time.Millisecond}
	for i := 0; i < 100; i++ {
		r.Warn(log, "bad frame", "i", i)
		if i%10 == 0 {
			r.Error(log, "probe", "i", i)
		}
	}
	out := buf.String()
	if strings.Count(out, "bad frame") != 1 || strings.Count(out, "probe") != 1 {
		t.Fatalf("want one line per reason:\n%s", out)
	}
	time.Sleep(60 * time.Millisecond)
	r.Warn(log, "bad frame")
	r.Error(log, "probe")
	out = buf.String()
	if !strings.Contains(out, `msg="bad frame" similar_not_logged=99`) || !strings.Contains(out, "msg=probe similar_not_logged=9") {
		t.Fatalf("counts per reason missing:\n%s", out)
	}
}

// TestReasonsBounded: messages past MaxReasons share one limiter rather than growing the set.
func TestReasonsBounded(t *testing.T) {
	var buf bytes.Buffer
	log := slog.New(slog.NewTextHandler(&buf, nil))
	r := Reasons{Interval: time.Hour}
	for i := 0; i < MaxReasons+100; i++ {
		r.Warn(log, fmt.Sprintf("reason %d", i))
	}
	if len(r.byMsg) != MaxReasons {
		t.Fatalf("%d limiters kept, want %d", len(r.byMsg), MaxReasons)
	}
	if n := strings.Count(buf.String(), "\n"); n != MaxReasons+1 {
		t.Fatalf("%d lines, want one per kept reason and one for the rest", n)
	}
}

// TestReasonsOf: Of names a reason apart from the message, so formatted lines of one kind
// share its limit.
func TestReasonsOf(t *testing.T) {
	var buf bytes.Buffer
	log := slog.New(slog.NewTextHandler(&buf, nil))
	var r Reasons
	if r.Of("accept failed: %v") != r.Of("accept failed: %v") {
		t.Fatal("two limiters for one reason")
	}
	for i := 0; i < 10; i++ {
		r.Of("accept failed: %v").Warn(log, fmt.Sprintf("accept failed: error %d", i))
	}
	if n := strings.Count(buf.String(), "accept failed"); n != 1 {
		t.Fatalf("%d lines:\n%s", n, buf.String())
	}
}

// TestPendingFlush: the count of a reason's suppressed lines is logged on its own once the
// limiter's interval has passed, with no later line of that reason, at the lines' level and
// through their logger; never twice, never before the interval (unless all), and not for
// limiters whose logger is not the Pending's.
func TestPendingFlush(t *testing.T) {
	var buf bytes.Buffer
	var p Pending
	log := p.Logger(slog.New(slog.NewTextHandler(&buf, nil))).With("component", "test")
	other := slog.New(slog.NewTextHandler(&buf, nil))
	r := Reasons{Interval: time.Hour}
	for i := 0; i < 5; i++ {
		r.Warn(log, "bad frame", "i", i)
		r.Info(log, "idle", "i", i)
		r.Warn(other, "elsewhere", "i", i)
	}
	const summary = "lines suppressed by the rate limit"
	p.Flush(time.Now(), false)
	if strings.Contains(buf.String(), summary) {
		t.Fatalf("counts logged before the interval passed:\n%s", buf.String())
	}
	p.Flush(time.Now().Add(2*time.Hour), false)
	out := buf.String()
	for _, want := range []string{
		`level=WARN msg="lines suppressed by the rate limit" component=test reason="bad frame" similar_not_logged=4 over=`,
		`level=INFO msg="lines suppressed by the rate limit" component=test reason=idle similar_not_logged=4 over=`,
	} {
		if !strings.Contains(out, want) {
			t.Fatalf("no line %q:\n%s", want, out)
		}
	}
	if strings.Count(out, summary) != 2 {
		t.Fatalf("want two counts (not one for the logger outside the Pending):\n%s", out)
	}
	p.Flush(time.Now().Add(4*time.Hour), true)
	if strings.Count(buf.String(), summary) != 2 {
		t.Fatalf("a count logged twice:\n%s", buf.String())
	}
	// The count line opened a new interval: the next line is suppressed and counted anew, and
	// a closing owner logs it at once.
	r.Warn(log, "bad frame")
	p.Flush(time.Now(), true)
	if !strings.Contains(buf.String(), `reason="bad frame" similar_not_logged=1`) {
		t.Fatalf("the count after the summary:\n%s", buf.String())
	}
	if len(p.ls) != 0 {
		t.Fatalf("%d limiters left in the Pending", len(p.ls))
	}
}
