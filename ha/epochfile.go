package ha

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"

	"github.com/petrel-mq/petrel/internal/fsutil"
)

// EpochFile is a member's durable list of epoch starts (Kafka's leader-epoch-checkpoint file):
// which epoch's master wrote each part of its log, so that TruncationPoint can find the last
// epoch it shares with a new master. One "epoch startOffset" line per epoch, ascending; every
// change rewrites the file with fsutil.WriteFileAtomic, so a crash leaves the old list or the
// new one, never a mix.
type EpochFile struct {
	path   string
	epochs []EpochStart
}

// OpenEpochFile loads the list at path (empty when the file does not exist yet).
func OpenEpochFile(path string) (*EpochFile, error) {
	f := &EpochFile{path: path}
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return f, nil
	}
	if err != nil {
		return nil, fmt.Errorf("cannot read the epoch file: %w", err)
	}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for line := 1; sc.Scan(); line++ {
		fields := strings.Fields(sc.Text())
		if len(fields) == 0 {
			continue
		}
		if len(fields) != 2 {
			return nil, fmt.Errorf("epoch file %s line %d: want \"epoch startOffset\"", path, line)
		}
		e, err1 := strconv.ParseUint(fields[0], 10, 32)
		off, err2 := strconv.ParseInt(fields[1], 10, 64)
		if err1 != nil || err2 != nil || off < 0 {
			return nil, fmt.Errorf("epoch file %s line %d: bad numbers %q", path, line, sc.Text())
		}
		es := EpochStart{Epoch: uint32(e), StartOffset: off}
		if n := len(f.epochs); n > 0 && (es.Epoch <= f.epochs[n-1].Epoch || es.StartOffset < f.epochs[n-1].StartOffset) {
			return nil, fmt.Errorf("epoch file %s line %d: %v does not follow %v", path, line, es, f.epochs[n-1])
		}
		f.epochs = append(f.epochs, es)
	}
	return f, nil
}

// Epochs returns a copy of the list.
func (f *EpochFile) Epochs() []EpochStart { return append([]EpochStart(nil), f.epochs...) }

// Last returns the newest epoch start (ok false when the list is empty).
func (f *EpochFile) Last() (EpochStart, bool) {
	if len(f.epochs) == 0 {
		return EpochStart{}, false
	}
	return f.epochs[len(f.epochs)-1], true
}

// Append records a new epoch; it must be newer than the last and start no earlier. A repeat of
// the last entry is a no-op (a member learning its current epoch again).
func (f *EpochFile) Append(e EpochStart) error {
	if last, ok := f.Last(); ok {
		if e == last {
			return nil
		}
		if e.Epoch <= last.Epoch || e.StartOffset < last.StartOffset {
			return fmt.Errorf("epoch %v does not follow %v", e, last)
		}
	}
	return f.write(append(f.Epochs(), e))
}

// TruncateTo drops the epochs that start at or after offset, where the log was cut: their data
// is gone (Kafka's LeaderEpochFileCache.truncateFromEnd).
func (f *EpochFile) TruncateTo(offset int64) error {
	keep := f.Epochs()
	for len(keep) > 0 && keep[len(keep)-1].StartOffset >= offset {
		keep = keep[:len(keep)-1]
	}
	if len(keep) == len(f.epochs) {
		return nil
	}
	return f.write(keep)
}

func (f *EpochFile) write(epochs []EpochStart) error {
	var b bytes.Buffer
	for _, e := range epochs {
		fmt.Fprintf(&b, "%d %d\n", e.Epoch, e.StartOffset)
	}
	if err := fsutil.WriteFileAtomic(f.path, b.Bytes(), 0o644); err != nil {
		return fmt.Errorf("cannot write the epoch file: %w", err)
	}
	f.epochs = epochs
	return nil
}
