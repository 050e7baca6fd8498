package bench

import (
	"sync"
	"testing"
	"time"
)

func TestScheduleDueTimes(t *testing.T) {
	start := time.Unix(1000, 0)
	s := newSchedule(start, 3) // every 333.33 ms
	want := []time.Duration{0, 333333333, 666666666, time.Second, 1333333333}
	for i, w := range want {
		if got := s.next().Sub(start); got != w {
			t.Errorf("send %d due at %v, want %v", i, got, w)
		}
	}
}

// TestScheduleShared checks that producers sharing a schedule get every slot exactly once.
func TestScheduleShared(t *testing.T) {
	s := newSchedule(time.Unix(0, 0), 1e6) // 1 µs apart
	const goroutines, each = 4, 1000
	seen := make([]bool, goroutines*each)
	var mu sync.Mutex
	var wg sync.WaitGroup
	for range goroutines {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range each {
				us := s.next().Sub(time.Unix(0, 0)).Microseconds()
				mu.Lock()
				if seen[us] {
					t.Errorf("slot %d twice", us)
				}
				seen[us] = true
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	for i, ok := range seen {
		if !ok {
			t.Fatalf("slot %d never handed out", i)
		}
	}
}

func TestWaiter(t *testing.T) {
	var w waiter
	defer w.stop()
	stop := make(chan struct{})
	// Due now or within the slack: no sleep.
	t0 := time.Now()
	if !w.until(t0.Add(earlySlack/2), stop) || !w.until(t0.Add(-time.Hour), stop) {
		t.Fatal("until returned false without a stop")
	}
	if d := time.Since(t0); d > 20*time.Millisecond {
		t.Fatalf("waited %v for due times already reached", d)
	}
	// A future due time is waited for, up to earlySlack before it.
	t0 = time.Now()
	if !w.until(t0.Add(20*time.Millisecond), stop) {
		t.Fatal("until returned false without a stop")
	}
	if d := time.Since(t0); d < 20*time.Millisecond-earlySlack {
		t.Fatalf("returned after %v, more than %v before the due time", d, earlySlack)
	}
	// A stop ends the wait at once, and is seen without waiting too.
	go func() {
		time.Sleep(10 * time.Millisecond)
		close(stop)
	}()
	t0 = time.Now()
	if w.until(t0.Add(time.Hour), stop) {
		t.Fatal("until returned true after stop")
	}
	if w.until(time.Now(), stop) {
		t.Fatal("until returned true for a due time reached after stop")
	}
}

// TestScheduleRate runs a producer loop at 5,000 sends/s for 200 ms: about 1,000 sends.
func TestScheduleRate(t *testing.T) {
	s := newSchedule(time.Now(), 5000)
	var w waiter
	defer w.stop()
	stop := make(chan struct{})
	deadline := time.Now().Add(200 * time.Millisecond)
	n := 0
	for {
		due := s.next()
		if due.After(deadline) {
			break
		}
		w.until(due, stop)
		n++
	}
	if n < 990 || n > 1010 {
		t.Fatalf("%d sends in 200 ms at 5,000/s", n)
	}
	if late := time.Since(deadline); late > 100*time.Millisecond {
		t.Fatalf("finished %v after the last due time", late)
	}
}
