package client

import (
	"sync"
	"time"
)

// faultTracker remembers broker groups whose sends failed recently, as RocketMQ's
// MQFaultStrategy/LatencyFaultTolerance: a group is avoided for a backoff after a failure event;
// the backoff doubles with consecutive events up to a maximum, and a success forgets the group.
//
// An event is one failure of the group as seen from here, however many requests it fails: when
// a master hangs or fails over, every request in flight to it fails at about the same time, and
// counting each of them would push the backoff to its maximum after a single failover. So a
// failure of a request sent before the group's current backoff began belongs to the event that
// started it and changes nothing; only a request sent since (a later attempt that failed too)
// starts a new event.
//
// The tracker also remembers the master address that failed: a group whose master changed (the
// route names another one, or a NOT_MASTER answer pointed elsewhere) is available again at once,
// since the new master has not failed yet. Keys that are not groups (a consumer's member
// addresses) pass an empty master address.
//
// It takes the time as an argument and does no I/O. It is safe for concurrent use.
type faultTracker struct {
	base, max time.Duration

	mu    sync.RWMutex // guards items
	items map[string]*faultItem
}

type faultItem struct {
	events int       // consecutive failure events
	since  time.Time // when the current event began
	until  time.Time // when its backoff ends
	addr   string    // the master address that failed
	// probe: the event is a failure to reach the master (no answer, no connection), not a
	// refusal, so the group is available again as soon as its master answers (recovered).
	probe bool
}

// faultProbe is a group in backoff because its master could not be reached, and that master.
type faultProbe struct {
	group, addr string
}

// The backoff of a failure event that was a refusal (the master answered with a retriable error:
// a full disk, a busy broker) starts at refusedBackoffBase (or the tracker's base when that is
// shorter) and doubles up to maxRefusedBackoff: a master that answers is probed by the next send
// after the backoff, not by the fault detector, so the cap is how late a producer may notice that
// the cause went away. A refused batch is retried on another group, so a probe costs little.
const (
	refusedBackoffBase = 250 * time.Millisecond
	maxRefusedBackoff  = 500 * time.Millisecond
)

func newFaultTracker(base, max time.Duration) *faultTracker {
	return &faultTracker{base: base, max: max, items: make(map[string]*faultItem)}
}

// available reports whether the group may be chosen at now, when its master is masterAddr: it
// is not in a backoff, or its master is no longer the one that failed.
func (f *faultTracker) available(brokerName, masterAddr string, now time.Time) bool {
	f.mu.RLock()
	defer f.mu.RUnlock()
	it := f.items[brokerName]
	return it == nil || !now.Before(it.until) || it.addr != masterAddr
}

// empty reports whether no group is being avoided or remembered (the fast path skips the clock).
func (f *faultTracker) empty() bool {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return len(f.items) == 0
}

// failed records at now that a request sent at sentAt to the group's master addr failed, and
// returns how long the group is avoided from now; unreachable says the master could not be
// reached at all (no connection, no answer), rather than refused. A request sent before the
// current event began leaves it as it is; otherwise a new event starts, its backoff double the
// previous one's (up to the maximum, or maxRefusedBackoff for a refusal), or the base backoff
// (refusedBackoffBase for a refusal) when the failing master is not the one that failed before.
func (f *faultTracker) failed(brokerName, addr string, sentAt, now time.Time, unreachable bool) time.Duration {
	f.mu.Lock()
	defer f.mu.Unlock()
	it := f.items[brokerName]
	switch {
	case it == nil:
		it = &faultItem{}
		f.items[brokerName] = it
	case it.addr != addr:
		*it = faultItem{}
	case sentAt.Before(it.since):
		it.probe = it.probe || unreachable
		return max(it.until.Sub(now), 0)
	}
	it.events++
	it.probe = unreachable
	limit, d := f.max, f.base
	if !unreachable {
		// A refusal ends unseen: no probe can tell, only a send.
		limit, d = min(f.max, maxRefusedBackoff), min(f.base, refusedBackoffBase)
	}
	for i := 1; i < it.events && d < limit; i++ {
		d *= 2
	}
	d = min(d, limit)
	it.since, it.until, it.addr = now, now.Add(d), addr
	return d
}

// masterMoved records that the group's master is now addr (a NOT_MASTER answer named it): a
// backoff recorded for another master ends.
func (f *faultTracker) masterMoved(brokerName, addr string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if it := f.items[brokerName]; it != nil && it.addr != addr {
		delete(f.items, brokerName)
	}
}

// probes returns the groups in backoff at now because their master could not be reached.
func (f *faultTracker) probes(now time.Time) []faultProbe {
	f.mu.RLock()
	defer f.mu.RUnlock()
	var out []faultProbe
	for g, it := range f.items {
		if it.probe && now.Before(it.until) {
			out = append(out, faultProbe{group: g, addr: it.addr})
		}
	}
	return out
}

// recovered records that the group's master addr answers again: a backoff recorded because it
// could not be reached ends (one recorded for another master, or for a refusal, stays).
func (f *faultTracker) recovered(brokerName, addr string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if it := f.items[brokerName]; it != nil && it.addr == addr && it.probe {
		delete(f.items, brokerName)
	}
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
