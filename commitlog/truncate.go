package commitlog

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/petrel-mq/petrel/internal/fsutil"
)

// truncateName is the file that asks the next Open to cut the log (see PrepareTruncate).
const truncateName = "truncate"

// PrepareTruncate asks for the log to be cut at offset, a batch boundary between the log's min
// offset and its end: the store's owner then closes the store and opens it again, and Open cuts
// everything from offset on, log and consume queues alike (a slave or a returning old master
// truncates to the last epoch it shares with the new master before it pulls).
//
// The request is a small file, written and fsynced before PrepareTruncate returns, that Open
// honours with the crash recovery's own tail handling (the tail is zeroed, later segments are
// removed, consume-queue entries past the cut go) and deletes only after the new checkpoint is
// durable: a crash anywhere in between cuts again at the next Open, so the old tail can never
// come back and no queue offset is ever handed out twice. Errors: ErrBelowMin, ErrBeyondEnd,
// ErrNotBatchBoundary, or I/O.
func (s *Store) PrepareTruncate(offset int64) error {
	if err := s.ReadReplication(offset, 1, func(int64, []byte) error { return nil }); err != nil {
		return fmt.Errorf("cannot truncate the log at %d: %w", offset, err)
	}
	if err := fsutil.WriteFileAtomic(filepath.Join(s.cfg.Dir, truncateName), []byte(strconv.FormatInt(offset, 10)+"\n"), 0o644); err != nil {
		return fmt.Errorf("cannot write the truncation request: %w", err)
	}
	return nil
}

// readTruncateRequest returns the offset PrepareTruncate asked for; ok is false when there is
// none.
func readTruncateRequest(dir string) (offset int64, ok bool, err error) {
	b, err := os.ReadFile(filepath.Join(dir, truncateName))
	if errors.Is(err, os.ErrNotExist) {
		return 0, false, nil
	}
	if err != nil {
		return 0, false, err
	}
	offset, err = strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
	if err != nil || offset < 0 {
		return 0, false, fmt.Errorf("%w: truncation request %q", ErrCorrupt, b)
	}
	return offset, true, nil
}

// doneTruncateRequest removes the request once the cut is durable.
func doneTruncateRequest(dir string) error {
	if err := os.Remove(filepath.Join(dir, truncateName)); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	return fsyncDir(dir)
}
