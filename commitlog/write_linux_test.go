package commitlog

import (
	"bufio"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// TestAppendsMapNoPages: appends (of batches over smallWrite) and
// replicated appends write the active segment through its file, so they map none of its pages.
// Pages written through the mapping are mapped writable and dirty, and writeback must
// write-protect each one (a TLB shootdown per page, an interrupt to every CPU the broker runs
// on); mapping them also made every fresh page a fault that read around it. Readers still read through the mapping: the test reads every batch
// back from it.
func TestAppendsMapNoPages(t *testing.T) {
	const batches, size = 1024, 4096                         // over smallWrite: not copied into a populated mapping
	master := mustOpen(t, writeThroughFileConfig(t, 16<<20)) // the appends stay in the first segment
	defer master.Close()
	slave := mustOpen(t, writeThroughFileConfig(t, 16<<20))
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

// writeThroughFileConfig returns a test config whose appends write through the files (also
// when make test runs the package with PETREL_WRITE_THROUGH_MAPPING=1), with segments of
// segmentSize bytes (0: testConfig's).
func writeThroughFileConfig(t *testing.T, segmentSize int64) Config {
	c := testConfig(t.TempDir())
	c.WriteThroughMapping = false
	if segmentSize > 0 {
		c.SegmentSize = segmentSize
	}
	return c
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

// TestWriterFilesClosed: only the active segment holds a file open for
// writing: rolls, a slave's log reset and Close leave no descriptor behind.
func TestWriterFilesClosed(t *testing.T) {
	before := openFiles(t)
	s := mustOpen(t, writeThroughFileConfig(t, 0))
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

// TestSmallAppendsPopulateAhead: once the average write is under smallWrite the pre-allocator
// populates the page tables ahead of the log end and the appends copy into the mapping (a
// pwrite of a 100-byte batch costs several times the copy: the test counts the process's
// write system calls); once the batches grow again it stops, and the appends past what it
// populated write through the file.
// Every batch reads back, and a slave replicating the log in large chunks (written through its
// file) ends byte-identical.
func TestSmallAppendsPopulateAhead(t *testing.T) {
	master := mustOpen(t, writeThroughFileConfig(t, 32<<20)) // the appends stay in the first segment
	defer master.Close()
	m := newModel()
	payload := func(i, size int) []byte {
		p := make([]byte, size) // the model keeps it
		p[0], p[size-1] = byte(i), byte(i>>8)
		return p
	}
	for i := 0; i < 10000; i++ { // 100-byte batches: 1 MB
		appendRec(t, master, m, "t", int32(i%4), 1, payload(i, 100-tbHeader-1-12))
	}
	if master.populateUnsupported.Load() {
		t.Skip("the kernel has no MADV_POPULATE_WRITE (Linux 5.14)")
	}
	if !master.smallBatches.Load() {
		t.Fatalf("after 10000 batches of 100 bytes the average write is %d bytes, not small", master.batchAvg)
	}
	end := master.end.Load()
	waitFor(t, "the pre-allocator to populate ahead of the log end", func() bool {
		return master.prefaultedTo.Load() >= end+prefaultWindow/2
	})
	rss, err := mappingRss(master.active.data)
	if err != nil {
		t.Fatal(err)
	}
	if rss < end+prefaultWindow/2 {
		t.Fatalf("%d KiB of the active segment mapped after %d KiB of 100-byte appends: the pre-allocator did not populate ahead", rss>>10, end>>10)
	}
	writes := writeSyscalls(t)
	for i := 0; i < 1000; i++ { // 100 KB, within what is populated
		appendRec(t, master, m, "t", int32(i%4), 1, payload(i, 100-tbHeader-1-12))
	}
	if n := writeSyscalls(t) - writes; n > 100 {
		t.Errorf("1000 appends of 100 bytes into the populated mapping made %d write system calls", n)
	}
	populated := master.prefaultedTo.Load()
	for i := 0; master.end.Load() < populated+(4<<20); i++ { // 4 KiB batches past what was populated
		appendRec(t, master, m, "t", int32(i%4), 1, payload(i, 4096))
	}
	if master.smallBatches.Load() {
		t.Fatalf("after 4 KiB batches the average write is %d bytes, still small", master.batchAvg)
	}
	rss, err = mappingRss(master.active.data)
	if err != nil {
		t.Fatal(err)
	}
	// prefaultedTo read after the mapped size: a populate under way is counted once done; the
	// slack covers a 2 MiB folio mapped whole.
	if limit := master.prefaultedTo.Load() + (2 << 20); rss > limit {
		t.Errorf("%d KiB of the active segment mapped, %d KiB populated: the 4 KiB appends past it wrote through the mapping", rss>>10, limit>>10)
	}
	slave := mustOpen(t, writeThroughFileConfig(t, 32<<20))
	defer slave.Close()
	replicate(t, master, slave, 256<<10)
	if slave.smallBatches.Load() {
		t.Errorf("a slave replicating 256 KiB chunks: average write %d bytes, small", slave.batchAvg)
	}
	sameLog(t, master, slave)
	sameQueues(t, master, slave, m)
}

// writeSyscalls returns the write system calls this process has made (/proc/self/io syscw).
func writeSyscalls(t *testing.T) int64 {
	t.Helper()
	b, err := os.ReadFile("/proc/self/io")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "syscw: "); ok {
			n, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
			if err != nil {
				t.Fatal(err)
			}
			return n
		}
	}
	t.Fatal("no syscw in /proc/self/io")
	return 0
}

// waitFor polls cond until it holds, failing the test after 10 s.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

// TestNextBatchAvg: the moving average of write sizes (from Open's 4 * smallWrite) turns small
// within a few dozen small writes, not after one, and back after a few large ones; one large
// write among small ones counts for its pages.
func TestNextBatchAvg(t *testing.T) {
	run := func(avg int64, sizes ...int64) int64 {
		for _, n := range sizes {
			avg = nextBatchAvg(avg, n)
		}
		return avg
	}
	repeat := func(n int, size int64) []int64 {
		s := make([]int64, n)
		for i := range s {
			s[i] = size
		}
		return s
	}
	const start = 4 * smallWrite // Open's
	for _, tc := range []struct {
		name  string
		avg   int64
		sizes []int64
		small bool
	}{
		{"start", start, nil, false},
		{"one small write", start, repeat(1, 100), false},
		{"six 100-byte writes", start, repeat(6, 100), false},
		{"twenty 100-byte writes", start, repeat(20, 100), true},
		{"1 KiB writes", start, repeat(100, 1024), true},
		{"4 KiB writes", 100, repeat(100, 4096), false},
		{"100-byte writes after 64 KiB ones", 64 << 10, repeat(40, 100), true},
		{"too few 100-byte writes after 64 KiB ones", 64 << 10, repeat(10, 100), false},
		{"a 64 KiB write among 100-byte ones", 100, []int64{64 << 10}, false},
		{"writes just under smallWrite", 64 << 10, repeat(100, smallWrite-100), true},
		{"writes just over smallWrite", 100, repeat(100, smallWrite+100), false},
	} {
		if got := run(tc.avg, tc.sizes...) < smallWrite; got != tc.small {
			t.Errorf("%s: average %d, small %v, want %v", tc.name, run(tc.avg, tc.sizes...), got, tc.small)
		}
	}
}

// TestSmallAfter: writes turn small under smallWrite and stay small up to a quarter above it.
func TestSmallAfter(t *testing.T) {
	for _, tc := range []struct {
		small bool
		avg   int64
		want  bool
	}{
		{false, smallWrite - 1, true},
		{false, smallWrite, false},
		{false, smallWrite + smallWrite/8, false},
		{true, smallWrite, true},
		{true, smallWrite + smallWrite/8, true},
		{true, smallWrite + smallWrite/4 - 1, true},
		{true, smallWrite + smallWrite/4, false},
		{true, 64 << 10, false},
		{false, 100, true},
	} {
		if got := smallAfter(tc.small, tc.avg); got != tc.want {
			t.Errorf("smallAfter(%v, %d) = %v, want %v", tc.small, tc.avg, got, tc.want)
		}
	}
}

// TestScanAheadStopsAtLogEnd: recovery's scan-ahead populates the log it scans, not the
// unwritten rest of the last segment: after Open of a 6 MiB log in a 32 MiB segment, at most
// the log and the chunk holding its end are mapped, not the scan-ahead window past it.
func TestScanAheadStopsAtLogEnd(t *testing.T) {
	cfg := testConfig(t.TempDir())
	cfg.SegmentSize = 32 << 20
	cfg.DisablePrefault = true // nothing but the scan maps the segment
	s := mustOpen(t, cfg)
	m := newModel()
	for s.end.Load() < 6<<20 {
		appendRec(t, s, m, "t", 0, 1, make([]byte, 4000))
	}
	end := s.end.Load()
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s = mustOpen(t, cfg)
	defer s.Close()
	if got := s.end.Load(); got != end {
		t.Fatalf("recovered end %d, want %d", got, end)
	}
	rss, err := mappingRss(s.active.data)
	if err != nil {
		t.Fatal(err)
	}
	if limit := end + scanAheadChunk; rss > limit {
		t.Errorf("%d KiB of the segment mapped after recovering %d KiB: the scan-ahead populated past the log end", rss>>10, end>>10)
	}
	verifyAll(t, s, m)
}

// TestScanAheadPopulates: the scan-ahead populates the log ahead of a scan that has not moved,
// up to scanAheadWindow and not beyond the chunk that crosses it, and close stops it.
func TestScanAheadPopulates(t *testing.T) {
	cfg := testConfig(t.TempDir())
	cfg.SegmentSize = 32 << 20
	cfg.DisablePrefault = true
	s := mustOpen(t, cfg)
	defer s.Close()
	m := newModel()
	for s.end.Load() < 16<<20 {
		appendRec(t, s, m, "t", 0, 1, make([]byte, 4000))
	}
	seg := s.active
	// Drop the mapping's page tables (the pages stay in the page cache).
	if err := unix.Madvise(seg.data, unix.MADV_DONTNEED); err != nil {
		t.Fatal(err)
	}
	if rss, err := mappingRss(seg.data); err != nil || rss > 1<<20 {
		t.Fatalf("after MADV_DONTNEED %d KiB mapped (%v)", rss>>10, err)
	}
	a := startScanAhead([]*mappedFile{seg}, seg.base)
	waitFor(t, "the scan-ahead to populate its window", func() bool {
		rss, err := mappingRss(seg.data)
		return err == nil && rss >= scanAheadWindow
	})
	a.close()
	rss, err := mappingRss(seg.data)
	if err != nil {
		t.Fatal(err)
	}
	if limit := int64(scanAheadWindow + scanAheadChunk); rss > limit {
		t.Errorf("%d KiB mapped by a scan-ahead whose scan has not moved: more than its window", rss>>10)
	}
	verifyAll(t, s, m)
}
