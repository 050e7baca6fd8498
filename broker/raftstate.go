package broker

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/petrel-mq/petrel/internal/fsutil"
)

// confirmedMark is a Raft member's durable knowledge of how much of its own log its group has
// confirmed (Kafka's high-watermark checkpoint): the highest confirmed offset it reached as
// master (ha.Master.ConfirmedOffset), or, as slave, the part of its log below the confirmed
// offset of the answers that acknowledged its pulls. Everything below it was held by the
// in-sync set when it was confirmed, so the member never cuts its log below it and is not
// electable while its log ends below it. The file holds one decimal offset; it is
// rewritten atomically (fsutil.WriteFileAtomic) at most once per confirmedPersistInterval and
// when the broker closes, so after a crash it may lag the last value by that much, which only
// makes the checks weaker, never wrong.
type confirmedMark struct {
	path string
	cur  atomic.Int64 // highest value known, -1 when none

	mu      sync.Mutex // guards written, writtenAt; held across the file write
	written int64
	at      time.Time
}

// confirmedPersistInterval is how often a raised confirmed mark is written to disk.
const confirmedPersistInterval = time.Second

// openConfirmedMark loads the mark at path (-1 when the file does not exist).
func openConfirmedMark(path string) (*confirmedMark, error) {
	c := &confirmedMark{path: path, written: -1}
	c.cur.Store(-1)
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return c, nil
	}
	if err != nil {
		return nil, fmt.Errorf("cannot read the confirmed mark: %w", err)
	}
	v, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
	if err != nil || v < -1 {
		return nil, fmt.Errorf("confirmed mark %s: bad offset %q", path, b)
	}
	c.cur.Store(v)
	c.written = v
	return c, nil
}

// get returns the highest confirmed offset known, -1 when none.
func (c *confirmedMark) get() int64 { return c.cur.Load() }

// raise records that the group confirmed its log up to off (a lower value changes nothing).
func (c *confirmedMark) raise(off int64) {
	for {
		cur := c.cur.Load()
		if off <= cur || c.cur.CompareAndSwap(cur, off) {
			return
		}
	}
}

// persist writes the mark when it rose since the last write and, unless force, the last write
// is at least confirmedPersistInterval old.
func (c *confirmedMark) persist(now time.Time, force bool) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	v := c.cur.Load()
	if v <= c.written || (!force && now.Sub(c.at) < confirmedPersistInterval) {
		return nil
	}
	if err := fsutil.WriteFileAtomic(c.path, []byte(strconv.FormatInt(v, 10)+"\n"), 0o644); err != nil {
		return fmt.Errorf("cannot write the confirmed mark: %w", err)
	}
	c.written, c.at = v, now
	return nil
}

// truncationLog is a Raft member's durable record of the cuts it made to its log: one line
// "epoch offset unixMillis" per cut, the group epoch it cut for and where. A second cut for the
// same epoch that does not go lower would be a loop (ha.PlanTruncation refuses it), so the
// newest entry is all the member needs; the file keeps every line for the operator.
type truncationLog struct {
	path string

	mu        sync.Mutex // guards lastEpoch, lastPoint and the file
	lastEpoch uint32
	lastPoint int64
}

// openTruncationLog loads the log at path (empty when the file does not exist).
func openTruncationLog(path string) (*truncationLog, error) {
	l := &truncationLog{path: path, lastPoint: -1}
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return l, nil
	}
	if err != nil {
		return nil, fmt.Errorf("cannot read the truncation log: %w", err)
	}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for line := 1; sc.Scan(); line++ {
		f := strings.Fields(sc.Text())
		if len(f) == 0 {
			continue
		}
		if len(f) != 3 {
			return nil, fmt.Errorf("truncation log %s line %d: want \"epoch offset unixMillis\", got %q", path, line, sc.Text())
		}
		e, err1 := strconv.ParseUint(f[0], 10, 32)
		off, err2 := strconv.ParseInt(f[1], 10, 64)
		if err1 != nil || err2 != nil {
			return nil, fmt.Errorf("truncation log %s line %d: want \"epoch offset unixMillis\", got %q", path, line, sc.Text())
		}
		l.lastEpoch, l.lastPoint = uint32(e), off
	}
	return l, nil
}

// last returns the group epoch of the newest cut and where it cut (0 and -1 when none).
func (l *truncationLog) last() (uint32, int64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.lastEpoch, l.lastPoint
}

// record appends a cut to offset for group epoch epoch, durably.
func (l *truncationLog) record(epoch uint32, offset int64, now time.Time) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	old, err := os.ReadFile(l.path)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("cannot read the truncation log: %w", err)
	}
	line := fmt.Sprintf("%d %d %d\n", epoch, offset, now.UnixMilli())
	if err := fsutil.WriteFileAtomic(l.path, append(old, line...), 0o644); err != nil {
		return fmt.Errorf("cannot write the truncation log: %w", err)
	}
	l.lastEpoch, l.lastPoint = epoch, offset
	return nil
}
