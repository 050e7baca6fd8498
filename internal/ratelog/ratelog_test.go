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
