package client

import (
	"sync"
	"time"
)

// faultTracker remembers broker groups whose sends failed recently, as RocketMQ's
// MQFaultStrategy/LatencyFaultTolerance: a group is avoided for a backoff after a failure; the
// backoff doubles with consecutive failures up to a maximum and a success forgets the group. It
// takes the time as an argument and does no I/O. It is safe for concurrent use.
type faultTracker struct {
	base, max time.Duration

	mu    sync.RWMutex // guards items
	items map[string]*faultItem
}

type faultItem struct {
	failures int
	until    time.Time
}

func newFaultTracker(base, max time.Duration) *faultTracker {
	return &faultTracker{base: base, max: max, items: make(map[string]*faultItem)}
}

// available reports whether the group may be chosen at now.
func (f *faultTracker) available(brokerName string, now time.Time) bool {
	f.mu.RLock()
	defer f.mu.RUnlock()
	it := f.items[brokerName]
	return it == nil || !now.Before(it.until)
}

// empty reports whether no group is being avoided or remembered (the fast path skips the clock).
func (f *faultTracker) empty() bool {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return len(f.items) == 0
}

// failed records a failed send to the group at now and returns how long it is avoided.
func (f *faultTracker) failed(brokerName string, now time.Time) time.Duration {
	f.mu.Lock()
	defer f.mu.Unlock()
	it := f.items[brokerName]
	if it == nil {
		it = &faultItem{}
		f.items[brokerName] = it
	}
	it.failures++
	d := f.base
	for i := 1; i < it.failures && d < f.max; i++ {
		d *= 2
	}
	d = min(d, f.max)
	it.until = now.Add(d)
	return d
}

// succeeded forgets the group's failures.
func (f *faultTracker) succeeded(brokerName string) {
	f.mu.RLock()
	_, ok := f.items[brokerName]
	f.mu.RUnlock()
	if !ok {
		return
	}
	f.mu.Lock()
	delete(f.items, brokerName)
	f.mu.Unlock()
}
