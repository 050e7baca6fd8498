package commitlog

import (
	"sync"
	"testing"
	"time"
)

// TestOnFlush: the hook reports each successful flush with the bytes it made durable, on the
// flusher (group commit under SyncFlush) and for the final flush of Close.
func TestOnFlush(t *testing.T) {
	var mu sync.Mutex
	var calls int
	var total int64
	cfg := testConfig(t.TempDir())
	cfg.FlushMode = SyncFlush
	cfg.OnFlush = func(d time.Duration, bytes int64) {
		mu.Lock()
		defer mu.Unlock()
		if d < 0 || bytes <= 0 {
			t.Errorf("OnFlush(%v, %d)", d, bytes)
		}
		calls++
		total += bytes
	}
	s := mustOpen(t, cfg)
	topic := []byte("onflush")
	batch := makeBatch("onflush", 0, 1, 0, make([]byte, 100))
	res, err := s.Append(topic, 0, batch, 1, 0, 0, testStamp)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	s.WaitFlushed(res.EndOffset, func(err error) { done <- err })
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	if calls < 1 || total != res.EndOffset {
		t.Errorf("after a group commit: %d calls, %d bytes; want >= 1 call covering %d bytes", calls, total, res.EndOffset)
	}
	mu.Unlock()
	if _, err := s.Append(topic, 0, batch, 1, 0, 0, testStamp); err != nil {
		t.Fatal(err)
	}
	end := s.LogEndOffset()
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	if total != end {
		t.Errorf("after Close: OnFlush reported %d bytes in %d calls, want the log end %d", total, calls, end)
	}
}
