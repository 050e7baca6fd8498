package commitlog

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"

	"github.com/petrel-mq/petrel/internal/fsutil"
)

// deletionsName is the file that records, for each topic a deletion record deleted, the
// record's position in the log (see the package documentation, "History").
const deletionsName = "deletions"

// readDeletions loads the deletions file (nil when there is none). A file that does
// not parse is an error wrapping ErrCorrupt: guessing could index a deleted topic's batches
// again, or cut the log at its re-created queues.
func readDeletions(dir string) (map[string]int64, error) {
	path := filepath.Join(dir, deletionsName)
	data, err := readFileInto(path, nil)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("cannot read %q: %w", path, err)
	}
	out := map[string]int64{}
	sc := bufio.NewScanner(bytes.NewReader(data))
	for n := 1; sc.Scan(); n++ {
		name, off, ok := bytes.Cut(sc.Bytes(), []byte{' '})
		topic, err := unescapeTopic(string(name))
		d, err2 := strconv.ParseInt(string(off), 10, 64)
		if !ok || err != nil || err2 != nil || topic == "" || d < 0 {
			return nil, fmt.Errorf("cannot load %q: line %d is not \"<escaped topic> <offset>\" (remove the file if no topic was deleted): %w", path, n, ErrCorrupt)
		}
		out[topic] = d
	}
	return out, nil
}

// writeDeletions replaces the deletions file atomically (fsynced), or removes it when m is
// empty.
func writeDeletions(dir string, m map[string]int64) error {
	path := filepath.Join(dir, deletionsName)
	if len(m) == 0 {
		if err := os.Remove(path); err != nil {
			if errors.Is(err, os.ErrNotExist) {
				return nil
			}
			return fmt.Errorf("cannot remove %q: %w", path, err)
		}
		return fsyncDir(dir)
	}
	topics := make([]string, 0, len(m))
	for t := range m {
		topics = append(topics, t)
	}
	slices.Sort(topics)
	var b []byte
	for _, t := range topics {
		b = append(b, escapeTopic(t)...)
		b = append(b, ' ')
		b = strconv.AppendInt(b, m[t], 10)
		b = append(b, '\n')
	}
	if err := fsutil.WriteFileAtomic(path, b, 0o644); err != nil {
		return fmt.Errorf("cannot record the queue deletions: %w", err)
	}
	return nil
}

// finishDeletions brings the recorded deletions in line with the recovered log [logMin, end):
// one at or below logMin goes (none of the deleted queues' batches is left); one at or past
// end goes too, and its topic is returned in undone: its record is not in the log (cut, or lost
// with the tail in a crash), so the deletion did not happen in this log's history and the
// topic's batches must be indexed again. The file is rewritten when anything changed or dirty
// is set (a record the file lacked). Recovery only.
func (s *Store) finishDeletions(logMin, end int64, dirty bool) (undone map[string]bool, err error) {
	changed := dirty
	for t, d := range s.deleted {
		switch {
		case d <= logMin:
			delete(s.deleted, t)
			changed = true
		case d >= end:
			if undone == nil {
				undone = map[string]bool{}
			}
			undone[t] = true
			delete(s.deleted, t)
			changed = true
			s.logger.Warn("commitlog: a topic's deletion record is past the recovered log end; the deletion is undone and the topic's batches indexed again",
				"topic", t, "recordAt", d, "logEnd", end)
		}
	}
	if !changed {
		return undone, nil
	}
	return undone, writeDeletions(s.cfg.Dir, s.deleted)
}

// recordDeletionLocked records durably that topic was deleted at log position pos (the
// deletions file), leaving the recorded deletions as they were when the file cannot be
// written. Caller holds mu.
func (s *Store) recordDeletionLocked(topic string, pos int64) error {
	prev, had := s.deleted[topic]
	s.deleted[topic] = pos
	if err := writeDeletions(s.cfg.Dir, s.deleted); err != nil {
		if had {
			s.deleted[topic] = prev
		} else {
			delete(s.deleted, topic)
		}
		return err
	}
	return nil
}
