package commitlog

import "time"

// maxStampAhead is how far ahead of the clock a batch is stamped to keep store timestamps in
// order when the clock is behind the log's newest one (a clock stepped back, a new master whose
// clock is behind its predecessor's). A clock further behind gets its own time stamped and the
// order restarts at that batch (restartOrderLocked): stamping the newest timestamp instead would
// freeze every later store timestamp until the clock caught up (retention by age, the store
// times consumers see).
const maxStampAhead = time.Second

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
// the history file, which only a clock stepped back (or a master that does not order its
// timestamps) causes.
func (s *Store) restartOrderLocked(pos int64) error {
	was := s.orderedFrom
	s.orderedFrom = pos
	s.historyChangedLocked()
	if err := s.writeHistoryLocked(); err != nil {
		s.orderedFrom = was
		return err
	}
	return nil
}
