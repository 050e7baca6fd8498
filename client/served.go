package client

import (
	"maps"
	"sync"
	"sync/atomic"
)

// ServedCount counts what one member of the broker groups (by brokerId: 0 the master, > 0 a
// slave) served a consumer.
type ServedCount struct {
	// Pulls counts the pull requests the member answered with messages, nothing new or a moved
	// offset.
	Pulls int64
	// Messages counts the messages of its answers that the handler accepted.
	Messages int64
	// NotHere counts its "not here" answers: the member (a slave) had not replicated the
	// requested offset and the pull went to another member.
	NotHere int64
}

// servedCounts holds a consumer's ServedCount per brokerId. Cells are made on first use and
// never removed; counting is lock-free once a puller holds its cell. Safe for concurrent use.
type servedCounts struct {
	mu    sync.RWMutex // guards cells
	cells map[int64]*servedCell
}

type servedCell struct {
	pulls, messages, notHere atomic.Int64
}

// cell returns the counters of brokerID.
func (s *servedCounts) cell(brokerID int64) *servedCell {
	s.mu.RLock()
	c := s.cells[brokerID]
	s.mu.RUnlock()
	if c != nil {
		return c
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if c = s.cells[brokerID]; c == nil {
		if s.cells == nil {
			s.cells = make(map[int64]*servedCell)
		}
		c = &servedCell{}
		s.cells[brokerID] = c
	}
	return c
}

// snapshot returns the counts by brokerId (a new map; empty, not nil, before any pull).
func (s *servedCounts) snapshot() map[int64]ServedCount {
	s.mu.RLock()
	cells := maps.Clone(s.cells)
	s.mu.RUnlock()
	out := make(map[int64]ServedCount, len(cells))
	for id, c := range cells {
		out[id] = ServedCount{Pulls: c.pulls.Load(), Messages: c.messages.Load(), NotHere: c.notHere.Load()}
	}
	return out
}
