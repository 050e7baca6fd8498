//go:build linux

package commitlog

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"syscall"

	"github.com/edsrzf/mmap-go"
	"golang.org/x/sys/unix"
)

var pageSize = int64(os.Getpagesize())

// zeroRangeUnsupported forces zeroTail's fallback (tests exercise both paths).
var zeroRangeUnsupported bool

// msync is unix.Msync; tests replace it (before Open) to inject sync failures.
var msync = unix.Msync

// defaultPreallocate gives f its full size with fallocate(2) mode 0, so every block is allocated
// and a later write through the mapping cannot hit ENOSPC (which would be SIGBUS). Where the file
// system has no fallocate it writes zeros instead; it never creates a sparse file.
func defaultPreallocate(f *os.File, size int64) error {
	err := unix.Fallocate(int(f.Fd()), 0, 0, size)
	if errors.Is(err, unix.EOPNOTSUPP) || errors.Is(err, unix.ENOSYS) {
		return writeZeros(f, size)
	}
	return err
}

func writeZeros(f *os.File, size int64) error {
	buf := make([]byte, 1<<20)
	for off := int64(0); off < size; {
		n := min(int64(len(buf)), size-off)
		if _, err := f.WriteAt(buf[:n], off); err != nil {
			return err
		}
		off += n
	}
	return nil
}

// createMapped creates path (which must not exist: an existing file may be mapped, so it is
// never replaced), preallocates it to size bytes, optionally fsyncs it, and maps it read-write.
// On failure nothing is left behind. ENOSPC is reported wrapping ErrDiskFull.
func createMapped(path string, size int64, prealloc func(*os.File, int64) error, doSync bool) (mmap.MMap, error) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		return nil, fmt.Errorf("cannot create %q: %w", path, err)
	}
	fail := func(err error) (mmap.MMap, error) {
		_ = f.Close()
		_ = os.Remove(path)
		if errors.Is(err, syscall.ENOSPC) {
			return nil, fmt.Errorf("cannot preallocate %q (%d bytes): %w: %w", path, size, ErrDiskFull, err)
		}
		return nil, err
	}
	if err := prealloc(f, size); err != nil {
		return fail(fmt.Errorf("cannot preallocate %q (%d bytes): %w", path, size, err))
	}
	fi, err := f.Stat()
	if err != nil {
		return fail(fmt.Errorf("cannot stat %q: %w", path, err))
	}
	if fi.Size() != size {
		return fail(fmt.Errorf("cannot preallocate %q: size is %d bytes after preallocation, want %d", path, fi.Size(), size))
	}
	if doSync {
		if err := f.Sync(); err != nil {
			return fail(fmt.Errorf("cannot fsync %q: %w", path, err))
		}
	}
	m, err := mmap.MapRegion(f, int(size), mmap.RDWR, 0, 0)
	if err != nil {
		return fail(fmt.Errorf("cannot mmap %q (%d bytes): %w", path, size, err))
	}
	if err := f.Close(); err != nil {
		_ = m.Unmap()
		return fail(fmt.Errorf("cannot close %q: %w", path, err))
	}
	return m, nil
}

// mapExisting maps the whole of an existing file read-write. It maps at most Stat().Size()
// bytes, so no access can go past EOF. A zero-length file yields (nil, 0, nil).
func mapExisting(path string) (mmap.MMap, int64, os.FileInfo, error) {
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		return nil, 0, nil, fmt.Errorf("cannot open %q: %w", path, err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, 0, nil, fmt.Errorf("cannot stat %q: %w", path, err)
	}
	if fi.Size() == 0 {
		return nil, 0, fi, nil
	}
	m, err := mmap.MapRegion(f, int(fi.Size()), mmap.RDWR, 0, 0)
	if err != nil {
		return nil, 0, nil, fmt.Errorf("cannot mmap %q (%d bytes): %w", path, fi.Size(), err)
	}
	return m, fi.Size(), fi, nil
}

// msyncRange makes m[lo:hi] durable with msync(MS_SYNC) on the page-aligned sub-slice (the
// mapping itself starts on a page boundary). It does nothing when hi <= lo.
func msyncRange(m []byte, lo, hi int64) error {
	if hi <= lo {
		return nil
	}
	lo &^= pageSize - 1
	return msync(m[lo:hi], unix.MS_SYNC)
}

// fsyncDir makes creations, renames and removals in dir durable.
func fsyncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("cannot open directory %q: %w", dir, err)
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return fmt.Errorf("cannot fsync directory %q: %w", dir, err)
	}
	return nil
}

// zeroTail makes bytes [off, len(m)) of the mapped file path zero and, with doSync, durable. It
// uses fallocate(FALLOC_FL_ZERO_RANGE|FALLOC_FL_KEEP_SIZE) (metadata only: the blocks stay
// allocated, so later writes through the mapping cannot fail) and fsync; where that is
// unsupported it clears the non-zero chunks through the mapping and msyncs them. Without doSync
// the caller makes the change durable (syncfs).
func zeroTail(path string, m []byte, off int64, doSync bool) error {
	return zeroBytes(path, m, off, int64(len(m)), doSync)
}

// zeroRange is zeroTail for bytes [off, hi) without the fsync.
func zeroRange(path string, m []byte, off, hi int64) error {
	return zeroBytes(path, m, off, hi, false)
}

func zeroBytes(path string, m []byte, off, hi int64, doSync bool) error {
	n := hi - off
	if n <= 0 {
		return nil
	}
	if !zeroRangeUnsupported {
		f, err := os.OpenFile(path, os.O_RDWR, 0)
		if err != nil {
			return fmt.Errorf("cannot open %q: %w", path, err)
		}
		err = unix.Fallocate(int(f.Fd()), unix.FALLOC_FL_ZERO_RANGE|unix.FALLOC_FL_KEEP_SIZE, off, n)
		if err == nil {
			if doSync {
				err = f.Sync()
			}
			_ = f.Close()
			if err != nil {
				return fmt.Errorf("cannot fsync %q: %w", path, err)
			}
			return nil
		}
		_ = f.Close()
		if !errors.Is(err, unix.EOPNOTSUPP) && !errors.Is(err, unix.ENOSYS) && !errors.Is(err, unix.EINVAL) {
			return fmt.Errorf("cannot zero %q from offset %d (%d bytes): %w", path, off, n, err)
		}
	}
	lo, hi, err := clearNonZero(m[:hi], off)
	if err != nil {
		return err
	}
	if err := msyncRange(m, lo, hi); err != nil {
		return fmt.Errorf("cannot msync %q [%d, %d): %w", path, lo, hi, err)
	}
	return nil
}

// clearNonZero zeroes every non-zero 4 KiB chunk of m[off:] and returns the dirtied range.
func clearNonZero(m []byte, off int64) (lo, hi int64, err error) {
	lo, hi = -1, -1
	const chunk = 4096
	for p := off; p < int64(len(m)); {
		e := min((p/chunk+1)*chunk, int64(len(m)))
		if !allZero(m[p:e]) {
			clear(m[p:e])
			if lo < 0 {
				lo = p
			}
			hi = e
		}
		p = e
	}
	if lo < 0 {
		return 0, 0, nil
	}
	return lo, hi, nil
}

func allZero(b []byte) bool {
	for len(b) >= 8 {
		if b[0]|b[1]|b[2]|b[3]|b[4]|b[5]|b[6]|b[7] != 0 {
			return false
		}
		b = b[8:]
	}
	for _, c := range b {
		if c != 0 {
			return false
		}
	}
	return true
}

// errPopulateUnsupported is prefault's error on a kernel without MADV_POPULATE_WRITE.
var errPopulateUnsupported = errors.New("MADV_POPULATE_WRITE is not supported (Linux 5.14+)")

// prefault populates the page tables of m for writing (MADV_POPULATE_WRITE, Linux 5.14+), so
// later writes do not fault. On older kernels (EINVAL) it returns errPopulateUnsupported.
func prefault(m []byte) error {
	if len(m) == 0 {
		return nil
	}
	err := unix.Madvise(m, unix.MADV_POPULATE_WRITE)
	if errors.Is(err, unix.EINVAL) {
		return errPopulateUnsupported
	}
	return err
}

// willNeed reads the pages of m's file range into the page cache without mapping them
// (MADV_WILLNEED on a file mapping: the file's readahead of exactly that range; a hole reads as
// zeros).
func willNeed(m []byte) error {
	if len(m) == 0 {
		return nil
	}
	return unix.Madvise(m, unix.MADV_WILLNEED)
}

// populateRead populates the page tables of m for reading (MADV_POPULATE_READ, Linux 5.14+):
// pages not in the page cache are read in. Older kernels (EINVAL) are ignored.
func populateRead(m []byte) error {
	if len(m) == 0 {
		return nil
	}
	if err := unix.Madvise(m, unix.MADV_POPULATE_READ); err != nil && !errors.Is(err, unix.EINVAL) {
		return err
	}
	return nil
}

// syncFS commits everything written to the file system holding path (syncfs(2)).
func syncFS(path string) error {
	f, err := os.Open(path)
	if err != nil {
		return fmt.Errorf("cannot open %q: %w", path, err)
	}
	defer f.Close()
	if err := unix.Syncfs(int(f.Fd())); err != nil {
		return fmt.Errorf("cannot syncfs %q: %w", path, err)
	}
	return nil
}

// lockDir takes an exclusive flock on dir/LOCK; the returned file holds it until closed.
func lockDir(dir string) (*os.File, error) {
	path := filepath.Join(dir, "LOCK")
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, fmt.Errorf("cannot open lock file %q: %w", path, err)
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		_ = f.Close()
		if errors.Is(err, unix.EWOULDBLOCK) {
			return nil, fmt.Errorf("cannot lock %q: %w", path, ErrLocked)
		}
		return nil, fmt.Errorf("cannot lock %q: %w", path, err)
	}
	return f, nil
}
