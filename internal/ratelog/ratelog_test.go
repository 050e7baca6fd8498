package ratelog

import (
	"bytes"
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
