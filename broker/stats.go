package broker

import (
	"sync"
	"sync/atomic"
	"time"
)

// statsWindow is the number of one-second samples rates are averaged over.
const statsWindow = 10

// stats counts what the broker served. Counters are updated on event loops with atomics; the
// housekeeping goroutine samples them every second for rates.
type stats struct {
	putMessages atomic.Int64
	putBytes    atomic.Int64
	putErrors   atomic.Int64
	getMessages atomic.Int64
	getBytes    atomic.Int64
	requests    atomic.Int64

	mu      sync.Mutex // guards the samples
	samples [statsWindow + 1]sample
	next    int
	filled  int
}

type sample struct {
	at       time.Time
	put, get int64
}

func (s *stats) sample() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.samples[s.next] = sample{at: time.Now(), put: s.putMessages.Load(), get: s.getMessages.Load()}
	s.next = (s.next + 1) % len(s.samples)
	if s.filled < len(s.samples) {
		s.filled++
	}
}

// lastPutRate returns the messages put per second over the last sample interval (about 1 s):
// the load signal of read suggestions, which must react within a second or two.
func (s *stats) lastPutRate() float64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.filled < 2 {
		return 0
	}
	newest := s.samples[(s.next-1+len(s.samples))%len(s.samples)]
	prev := s.samples[(s.next-2+len(s.samples))%len(s.samples)]
	secs := newest.at.Sub(prev.at).Seconds()
	if secs <= 0 {
		return 0
	}
	return float64(newest.put-prev.put) / secs
}

// rates returns messages put and got per second over the last statsWindow seconds.
func (s *stats) rates() (put, get float64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.filled < 2 {
		return 0, 0
	}
	newest := s.samples[(s.next-1+len(s.samples))%len(s.samples)]
	oldest := s.samples[(s.next-s.filled+len(s.samples))%len(s.samples)]
	secs := newest.at.Sub(oldest.at).Seconds()
	if secs <= 0 {
		return 0, 0
	}
	return float64(newest.put-oldest.put) / secs, float64(newest.get-oldest.get) / secs
}
