package commitlog

import (
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"os"
	"path/filepath"
	"time"
)

// Checkpoint file layout (see doc.go). These constants are part of the on-disk format; do not
// change.
const (
	checkpointMagic   = 0x50434B50 // "PCKP"
	checkpointVersion = 1
	checkpointSize    = 40
	checkpointName    = "checkpoint"
	checkpointClean   = 1 // flags: written by Close after a complete flush
	// checkpointOrdered (flags) says the store was last opened by a version that keeps its
	// store timestamps in order and the history file's order start current (History); versions that do not
	// know the flag write their checkpoints without it before they append anything.
	checkpointOrdered = 2
)

type checkpoint struct {
	logDurable   int64 // the log is durable below this physical offset
	queueDurable int64 // every batch below this offset has a durable consume-queue entry
	clean        bool  // a clean shutdown: nothing was written after it
	ordered      bool  // checkpointOrdered
}

// writeCheckpoint replaces dir/checkpoint atomically: write a temporary file, fsync it, rename
// it over the old one and fsync the directory.
func writeCheckpoint(dir string, ck checkpoint, now time.Time) error {
	var b [checkpointSize]byte
	binary.BigEndian.PutUint32(b[0:], checkpointMagic)
	binary.BigEndian.PutUint32(b[4:], checkpointVersion)
	binary.BigEndian.PutUint64(b[8:], uint64(ck.logDurable))
	binary.BigEndian.PutUint64(b[16:], uint64(ck.queueDurable))
	binary.BigEndian.PutUint64(b[24:], uint64(now.UnixMilli()))
	var flags uint32
	if ck.clean {
		flags |= checkpointClean
	}
	if ck.ordered {
		flags |= checkpointOrdered
	}
	binary.BigEndian.PutUint32(b[32:], flags)
	binary.BigEndian.PutUint32(b[36:], crc32.Checksum(b[:36], castagnoli))
	return writeFileDurably(dir, checkpointName, b[:])
}

// writeFileDurably replaces dir/name with b atomically and durably: write name.tmp, fsync it,
// rename it over name and fsync dir. Callers serialise their writes of one name (the queue
// flusher for the checkpoint, histMu for the history file); a name.tmp a crash left is
// overwritten by the next write.
func writeFileDurably(dir, name string, b []byte) error {
	path := filepath.Join(dir, name)
	tmp := path + ".tmp"
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		return fmt.Errorf("cannot create %q: %w", tmp, err)
	}
	if _, err := f.Write(b); err != nil {
		_ = f.Close()
		return fmt.Errorf("cannot write %q (%d bytes): %w", tmp, len(b), err)
	}
	if err := f.Sync(); err != nil {
		_ = f.Close()
		return fmt.Errorf("cannot fsync %q: %w", tmp, err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("cannot close %q: %w", tmp, err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return fmt.Errorf("cannot rename %q: %w", tmp, err)
	}
	return fsyncDir(dir)
}

// readCheckpoint reads dir/checkpoint. It returns an error wrapping os.ErrNotExist when there is
// none and ErrCorrupt when it does not check out.
func readCheckpoint(dir string) (checkpoint, error) {
	path := filepath.Join(dir, checkpointName)
	b, err := readFileInto(path, nil)
	if err != nil {
		return checkpoint{}, fmt.Errorf("cannot read checkpoint %q: %w", path, err)
	}
	if len(b) != checkpointSize ||
		binary.BigEndian.Uint32(b[0:]) != checkpointMagic ||
		binary.BigEndian.Uint32(b[4:]) != checkpointVersion ||
		binary.BigEndian.Uint32(b[36:]) != crc32.Checksum(b[:36], castagnoli) {
		return checkpoint{}, fmt.Errorf("cannot read checkpoint %q (%d bytes): %w", path, len(b), ErrCorrupt)
	}
	ck := checkpoint{
		logDurable:   int64(binary.BigEndian.Uint64(b[8:])),
		queueDurable: int64(binary.BigEndian.Uint64(b[16:])),
		clean:        binary.BigEndian.Uint32(b[32:])&checkpointClean != 0,
		ordered:      binary.BigEndian.Uint32(b[32:])&checkpointOrdered != 0,
	}
	if ck.logDurable < 0 || ck.queueDurable < 0 {
		return checkpoint{}, fmt.Errorf("cannot read checkpoint %q: negative offset: %w", path, ErrCorrupt)
	}
	return ck, nil
}
