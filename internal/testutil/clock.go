package testutil

import (
	"sync"
	"time"
)

// Clock is a clock a test moves by hand, for the Now fields of configs (ha.MasterConfig.Now,
// namesrv's Config.Now, ...). It starts at a fixed instant, so the times a test prints are the
// same on every run. Safe for concurrent use.
type Clock struct {
	mu  sync.Mutex // guards now
	now time.Time
}

// NewClock returns a clock at 2025-06-01 12:00 UTC.
func NewClock() *Clock {
	return &Clock{now: time.Date(2025, 6, 1, 12, 0, 0, 0, time.UTC)}
}

// Now returns the clock's time.
func (c *Clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// Advance moves the clock forward by d.
func (c *Clock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}
