package commitlog

import (
	"bufio"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"unsafe"
)

// TestAppendsMapNoPages: with WriteThroughFile, appends and replicated appends write the active
// segment through its file, so they map none of its pages. Pages written through the mapping are mapped writable
// and dirty, and writeback must write-protect each one (a TLB shootdown per page, an
// interrupt to every CPU the broker runs on); mapping them also made every fresh page a fault
// that read around it. Readers still read through the mapping: the test reads every batch
// back from it.
func TestAppendsMapNoPages(t *testing.T) {
	const batches, size = 4096, 1024
	cfg := func() Config {
		c := testConfig(t.TempDir())
		c.WriteThroughFile = true
		c.SegmentSize = 16 << 20 // the appends stay in the first segment
		return c
	}
	master := mustOpen(t, cfg())
	defer master.Close()
	slave := mustOpen(t, cfg())
	defer slave.Close()
	m := newModel()
	for i := 0; i < batches; i++ {
		payload := make([]byte, size) // the model keeps it
		payload[0] = byte(i)
		appendRec(t, master, m, "t", int32(i%4), 1, payload)
	}
	checkUnmapped(t, "master", master)
	replicate(t, master, slave, 256<<10) // reads the master's log through its mapping
	checkUnmapped(t, "slave", slave)
	sameLog(t, master, slave)
	sameQueues(t, master, slave, m)
}

// checkUnmapped fails the test when more than a few pages of s's active segment are mapped.
func checkUnmapped(t *testing.T, name string, s *Store) {
	t.Helper()
	rss, err := mappingRss(s.active.data)
	if err != nil {
		t.Fatal(err)
	}
	if rss > 256<<10 {
		t.Errorf("%s: %d KiB of the active segment are mapped after %d KiB of appends: the appends wrote through the mapping", name, rss>>10, s.end.Load()>>10)
	}
}

// mappingRss returns the resident bytes of this process's mapping of b (smaps Rss).
func mappingRss(b []byte) (int64, error) {
	f, err := os.Open("/proc/self/smaps")
	if err != nil {
		return 0, err
	}
	defer f.Close()
	start := fmt.Sprintf("%x-", uintptr(unsafe.Pointer(&b[0])))
	found := false
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		switch {
		case strings.HasPrefix(line, start):
			found = true
		case found && strings.HasPrefix(line, "Rss:"):
			kb, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimPrefix(line, "Rss:"), "kB")), 10, 64)
			return kb << 10, err
		}
	}
	return 0, fmt.Errorf("no mapping at %s in /proc/self/smaps (%v)", start, sc.Err())
}

// TestWriterFilesClosed: with WriteThroughFile only the active segment holds a file open for
// writing: rolls, a slave's log reset and Close leave no descriptor behind.
func TestWriterFilesClosed(t *testing.T) {
	before := openFiles(t)
	cfg := testConfig(t.TempDir())
	cfg.WriteThroughFile = true
	s := mustOpen(t, cfg)
	m := newModel()
	opened := openFiles(t)
	for i := 0; i < 256; i++ { // 256 KiB of batches: segments of 64 KiB roll every 60 or so
		appendRec(t, s, m, "t", 0, 1, make([]byte, 1024))
		if n := openFiles(t); n > opened+2 {
			t.Fatalf("after %d appends (%d segments): %d files open, %d after Open: a segment's writer was not closed at its roll", i+1, len(*s.segs.Load()), n, opened)
		}
	}
	if _, err := s.ResetTo(s.nextBase.Load(), false); err != nil { // the next segment boundary
		t.Fatal(err)
	}
	if n := openFiles(t); n > opened+2 {
		t.Fatalf("after a reset: %d files open, %d after Open", n, opened)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if n := openFiles(t); n != before {
		t.Fatalf("after Close: %d files open, %d before Open", n, before)
	}
}

// openFiles counts this process's open file descriptors (/proc/self/fd).
func openFiles(t *testing.T) int {
	t.Helper()
	fds, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	return len(fds) - 1 // ReadDir's own descriptor
}

// TestThroughMapping: a batch under smallWrite bytes within one page that an earlier write
// started is copied through the mapping; anything else is written through the file.
func TestThroughMapping(t *testing.T) {
	for _, tc := range []struct {
		rel, size int64
		want      bool
	}{
		{rel: 100, size: 100, want: true},
		{rel: pageSize + 1, size: smallWrite - 1, want: true},
		{rel: pageSize - 100, size: 100, want: true},  // ends on the page's last byte
		{rel: pageSize - 100, size: 101, want: false}, // reaches into a fresh page
		{rel: 0, size: 100, want: false},              // starts a fresh page
		{rel: 2 * pageSize, size: 100, want: false},   // starts a fresh page
		{rel: 100, size: smallWrite, want: false},     // not small
		{rel: 100, size: 64 << 10, want: false},       // large
		{rel: 3*pageSize + 7, size: 1, want: true},    // one byte
	} {
		if got := throughMapping(tc.rel, tc.size); got != tc.want {
			t.Errorf("throughMapping(%d, %d) = %v, want %v", tc.rel, tc.size, got, tc.want)
		}
	}
}
