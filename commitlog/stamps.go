package commitlog

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/petrel-mq/petrel/internal/fsutil"
)

// orderedName is the file that holds the log position from which store timestamps never go
// down along the log (package documentation, "History"), as "<offset>\n". Only a checkpoint
// with checkpointOrdered vouches for it: a version that does not keep it writes checkpoints
// without the flag, and its batches may follow the position out of order.
const orderedName = "ordered"

// maxStampAhead is how far ahead of the clock a batch is stamped to keep store timestamps in
// order when the clock is behind the log's newest one (a clock stepped back, a new master whose
// clock is behind its predecessor's). A clock further behind gets its own time stamped and the
// order restarts at that batch (restartOrderLocked): stamping the newest timestamp instead would
// freeze every later store timestamp until the clock caught up (retention by age, the store
// times consumers see).
const maxStampAhead = time.Second

// readOrdered reads the ordered file; ok is false when there is none or it does not parse
// (then no position is known to start ordered timestamps, which only weakens recovery's checks).
func readOrdered(dir string) (from int64, ok bool, err error) {
	b, err := os.ReadFile(filepath.Join(dir, orderedName))
	if errors.Is(err, os.ErrNotExist) {
		return 0, false, nil
	}
	if err != nil {
		return 0, false, fmt.Errorf("cannot read %q: %w", filepath.Join(dir, orderedName), err)
	}
	from, err = strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
	if err != nil || from < 0 {
		return 0, false, nil
	}
	return from, true, nil
}

// writeOrdered replaces the ordered file atomically (fsynced).
func writeOrdered(dir string, from int64) error {
	if err := fsutil.WriteFileAtomic(filepath.Join(dir, orderedName), []byte(strconv.FormatInt(from, 10)+"\n"), 0o644); err != nil {
		return fmt.Errorf("cannot record where the log's store timestamps are in order: %w", err)
	}
	return nil
}

// storeTimeLocked returns the store timestamp of the batch Append or DeleteTopic writes at pos:
// the clock's time, but not below atLeast (the log's newest store timestamp; one more for a
// deletion record, which is stamped after every batch before it) while the log's newest batch
// is in the ordered part of the log. A clock more than maxStampAhead behind atLeast gets its own
// time, and the order restarts at pos, recorded durably before the batch is written. Caller
// holds mu.
func (s *Store) storeTimeLocked(pos, atLeast int64) (int64, error) {
	ts := s.cfg.Now().UnixMilli()
	if !s.lastOrdered || ts >= atLeast {
		return ts, nil
	}
	if atLeast-ts <= maxStampAhead.Milliseconds() {
		return atLeast, nil
	}
	if err := s.restartOrderLocked(pos); err != nil {
		return 0, err
	}
	s.logger.Warn("commitlog: the clock is behind the log's newest store timestamp; stamping the clock's time, so store timestamps go back here",
		"at", pos, "storeTimestamp", ts, "newest", atLeast-1, "behindMs", atLeast-ts)
	return ts, nil
}

// restartOrderLocked records durably that the log's store timestamps are in order from pos on
// (the batch at pos need not follow the one before it). Caller holds mu; it writes and fsyncs
// the ordered file, which only a clock stepped back (or a master that does not order its
// timestamps) causes.
func (s *Store) restartOrderLocked(pos int64) error {
	if err := writeOrdered(s.cfg.Dir, pos); err != nil {
		return err
	}
	s.orderedFrom = pos
	return nil
}
