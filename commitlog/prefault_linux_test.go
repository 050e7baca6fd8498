package commitlog

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"unsafe"

	"golang.org/x/sys/unix"
)

// TestPrefaultReadsNothingAround: prefault brings the pages it is given into the page cache and
// none after them; the range stays without read-around while its file is written and gets its
// read-ahead back once the file is full (readAheadBack). A write fault of a mapping
// reads around the faulting page (the disk's read_ahead_kb, 8 MiB on some machines); on a fresh,
// fallocated segment that is megabytes zeroed in one fault, which a kernel without preemption
// does not interrupt: the pre-allocators of a master and its slaves took both CPUs of a small
// machine for 15-25 ms at a time.
func TestPrefaultReadsNothingAround(t *testing.T) {
	const size, want = 32 << 20, 1 << 20
	pages := int(want / pageSize)
	dir := t.TempDir()
	probe, err := createMapped(filepath.Join(dir, "probe"), pageSize, defaultPreallocate, false)
	if err != nil {
		t.Fatal(err)
	}
	err = unix.Madvise(probe, unix.MADV_POPULATE_WRITE)
	_ = probe.Unmap()
	if err == unix.EINVAL {
		t.Skip("no MADV_POPULATE_WRITE on this kernel")
	}
	m, err := createMapped(filepath.Join(dir, "segment"), size, defaultPreallocate, false)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Unmap()
	if err := prefault(m[:want]); err != nil {
		t.Fatal(err)
	}
	vec := make([]byte, size/pageSize)
	if _, _, errno := unix.Syscall(unix.SYS_MINCORE, uintptr(unsafe.Pointer(&m[0])), uintptr(len(m)), uintptr(unsafe.Pointer(&vec[0]))); errno != 0 {
		t.Fatalf("mincore: %v", errno)
	}
	in, beyond := 0, 0
	for i, v := range vec {
		if v&1 == 0 {
			continue
		}
		if i < pages {
			in++
		} else {
			beyond++
		}
	}
	if in != pages || beyond != 0 {
		t.Fatalf("after prefaulting %d pages: %d of them resident and %d pages after them (read around)", pages, in, beyond)
	}
	// While the file is written its prefaulted part stays without read-around; once it is full
	// (no longer the last of its list), readAheadBack gives it its read-ahead back.
	if flags := mustVMFlags(t, m); !strings.Contains(" "+flags+" ", " rr ") {
		t.Fatalf("the prefaulted range of a file being written reads around again (VmFlags %s)", flags)
	}
	f := (&Store{}).newMappedFile("segment", 0, m)
	f.ahead.Store(true) // as prefaultAhead marks the file it prefaults
	readAheadBack([]*mappedFile{f})
	if flags := mustVMFlags(t, m); !strings.Contains(" "+flags+" ", " rr ") {
		t.Fatalf("the last file of its list lost its prefault advice (VmFlags %s)", flags)
	}
	readAheadBack([]*mappedFile{f, nil})
	if flags := mustVMFlags(t, m); strings.Contains(" "+flags+" ", " rr ") || f.ahead.Load() {
		t.Fatalf("a full file is left without read-ahead (VmFlags %s)", flags)
	}
}

func mustVMFlags(t *testing.T, m []byte) string {
	t.Helper()
	flags, err := vmFlags(uintptr(unsafe.Pointer(&m[0])))
	if err != nil {
		t.Fatal(err)
	}
	return flags
}

// vmFlags returns the VmFlags line of this process's mapping that starts at addr (smaps).
func vmFlags(addr uintptr) (string, error) {
	f, err := os.Open("/proc/self/smaps")
	if err != nil {
		return "", err
	}
	defer f.Close()
	start := fmt.Sprintf("%x-", addr)
	found := false
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		switch {
		case strings.HasPrefix(line, start):
			found = true
		case found && strings.HasPrefix(line, "VmFlags:"):
			return strings.TrimSpace(strings.TrimPrefix(line, "VmFlags:")), nil
		}
	}
	return "", fmt.Errorf("no mapping at %x in /proc/self/smaps (%v)", addr, sc.Err())
}
