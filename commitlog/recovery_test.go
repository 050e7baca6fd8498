package commitlog

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// crashAfter fills a store, abandons it (kill -9), lets damage change the files and returns the
// reopened store. The model is passed to damage so it can drop what is expected to be lost.
func crashAfter(t *testing.T, cfg Config, n int, damage func(m *model)) (*Store, *model) {
	t.Helper()
	s := mustOpen(t, cfg)
	m := newModel()
	fill(t, s, m, rand.New(rand.NewPCG(7, uint64(n))), n, 2500)
	s.abandon()
	damage(m)
	return mustOpen(t, cfg), m
}

func lastRec(m *model) rec { return m.all[len(m.all)-1] }

// checkZeroAfter checks that the bytes after the log end in its segment are zero.
func checkZeroAfter(t *testing.T, s *Store, dir string) {
	t.Helper()
	end := s.LogEndOffset()
	base := end / s.cfg.SegmentSize * s.cfg.SegmentSize
	if end == base && end > 0 && len(segmentFiles(t, dir)) > 0 && *s.segs.Load() != nil {
		base = (*s.segs.Load())[len(*s.segs.Load())-1].base
	}
	rest := readAt(t, segPath(dir, base), end-base, int(base+s.cfg.SegmentSize-end))
	if !allZero(rest) {
		t.Fatalf("non-zero bytes after the recovered end %d", end)
	}
}

// checkNoStaleSegments checks that every segment file after the active one is the
// pre-allocator's all-zero segment.
func checkNoStaleSegments(t *testing.T, s *Store, dir string) {
	t.Helper()
	segs := *s.segs.Load()
	active := segPath(dir, segs[len(segs)-1].base)
	for _, p := range segmentFiles(t, dir) {
		if p <= active {
			continue
		}
		b, err := os.ReadFile(p)
		if err != nil && !os.IsNotExist(err) {
			t.Fatal(err)
		}
		if !allZero(b) {
			t.Fatalf("stale segment %s left after the log end", p)
		}
	}
}

func TestRecoveryTornTail(t *testing.T) {
	for _, variant := range []string{"garbage", "partial batch", "corrupt last batch", "garbage/no-zero-range"} {
		t.Run(variant, func(t *testing.T) {
			if strings.HasSuffix(variant, "no-zero-range") {
				zeroRangeUnsupported = true
				defer func() { zeroRangeUnsupported = false }()
			}
			dir := t.TempDir()
			cfg := testConfig(dir)
			s, m := crashAfter(t, cfg, 300, func(m *model) {
				last := lastRec(m)
				end := last.phys + int64(last.size)
				base := end / cfg.SegmentSize * cfg.SegmentSize
				path := segPath(dir, base)
				switch {
				case strings.HasPrefix(variant, "garbage"):
					g := randPayload(rand.New(rand.NewPCG(1, 2)), 500, 500)
					g[0] = 0x7f
					writeAt(t, path, end-base, g[:min(len(g), int(base+cfg.SegmentSize-end))])
				case variant == "partial batch":
					b := makeBatch("orders", 0, 1, 0, bytes.Repeat([]byte{1}, 400))
					testStamp(b, end, m.maxOffset(qkey{"orders", 0}), 1, 0)
					writeAt(t, path, end-base, b[:min(len(b)/2, int(base+cfg.SegmentSize-end))])
				case variant == "corrupt last batch":
					lb := last.phys / cfg.SegmentSize * cfg.SegmentSize
					writeAt(t, segPath(dir, lb), last.phys-lb+int64(last.size)-1, []byte{^last.payload[len(last.payload)-1]})
					m.truncate(last.phys)
				}
			})
			defer func() { s.Close() }()
			verifyAll(t, s, m)
			if variant != "corrupt last batch" || lastRec(m).phys/cfg.SegmentSize == (s.LogEndOffset()-1)/cfg.SegmentSize {
				checkEnd(t, s, m)
			}
			checkZeroAfter(t, s, dir)
			// Appends continue; a clean reopen keeps everything.
			fill(t, s, m, rand.New(rand.NewPCG(9, 9)), 100, 2500)
			s.Close()
			s = mustOpen(t, cfg)
			verifyAll(t, s, m)
		})
	}
}

// fillUntilRoll appends until a batch lands at the start of a new segment and returns it.
func fillUntilRoll(t *testing.T, s *Store, m *model) rec {
	t.Helper()
	r := rand.New(rand.NewPCG(5, 5))
	fill(t, s, m, r, 50, 2500)
	for {
		rc := appendRec(t, s, m, "orders", int32(r.IntN(3)), 1, randPayload(r, 100, 2500))
		if rc.phys%s.cfg.SegmentSize == 0 {
			return rc
		}
	}
}

func TestRecoveryCrashDuringRoll(t *testing.T) {
	for _, variant := range []string{"next segment missing", "next segment empty", "next segment torn", "marker lost"} {
		t.Run(variant, func(t *testing.T) {
			dir := t.TempDir()
			cfg := testConfig(dir)
			s := mustOpen(t, cfg)
			m := newModel()
			rolled := fillUntilRoll(t, s, m)
			prev := m.all[len(m.all)-2]
			markerAt := prev.phys + int64(prev.size)
			s.abandon()
			next := segPath(dir, rolled.phys)
			wantEnd := rolled.phys
			switch variant {
			case "next segment missing":
				// The pre-allocated segment after it may exist too; a crash mid-roll leaves
				// the marker and no next segment.
				for _, p := range segmentFiles(t, dir) {
					if p >= next {
						os.Remove(p)
					}
				}
				wantEnd = markerAt
			case "next segment empty":
				writeAt(t, next, 0, make([]byte, rolled.size))
			case "next segment torn":
				writeAt(t, next, int64(rolled.size)/2, make([]byte, rolled.size-rolled.size/2))
			case "marker lost":
				writeAt(t, segPath(dir, prev.phys/cfg.SegmentSize*cfg.SegmentSize), markerAt%cfg.SegmentSize, make([]byte, markerSize))
				wantEnd = markerAt
			}
			m.truncate(rolled.phys)
			s = mustOpen(t, cfg)
			defer func() { s.Close() }()
			if s.LogEndOffset() != wantEnd {
				t.Fatalf("end %d, want %d", s.LogEndOffset(), wantEnd)
			}
			verifyAll(t, s, m)
			if wantEnd == markerAt {
				if got := readAt(t, segPath(dir, prev.phys/cfg.SegmentSize*cfg.SegmentSize), markerAt%cfg.SegmentSize, markerSize); !allZero(got) {
					t.Fatal("stale marker left")
				}
				checkNoStaleSegments(t, s, dir)
			}
			fill(t, s, m, rand.New(rand.NewPCG(8, 8)), 200, 2500)
			s.Close()
			s = mustOpen(t, cfg)
			verifyAll(t, s, m)
			checkEnd(t, s, m)
		})
	}
}

func queueFiles(t *testing.T, dir, topic string, qid int32) []string {
	t.Helper()
	qdir := filepath.Join(dir, "consumequeue", escapeTopic(topic), fmt.Sprint(qid))
	ents, err := os.ReadDir(qdir)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range ents {
		if _, ok := parseFileName(e.Name()); ok {
			out = append(out, filepath.Join(qdir, e.Name()))
		}
	}
	sort.Strings(out)
	return out
}

func TestRecoveryConsumeQueueDamage(t *testing.T) {
	garbage := bytes.Repeat([]byte{0xA5}, entrySize)
	for _, variant := range []string{"garbage in last file", "garbage in old file", "missing middle file",
		"short middle file", "zeroed entry", "missing last file and checkpoint", "all queues and checkpoint gone", "entry beyond end"} {
		t.Run(variant, func(t *testing.T) {
			dir := t.TempDir()
			cfg := testConfig(dir)
			s := mustOpen(t, cfg)
			m := newModel()
			fill(t, s, m, rand.New(rand.NewPCG(11, 11)), 1500, 500)
			if err := s.Close(); err != nil { // clean: the checkpoint says everything is durable
				t.Fatal(err)
			}
			files := queueFiles(t, dir, "orders", 1)
			if len(files) < 6 {
				t.Fatalf("only %d consume-queue files", len(files))
			}
			switch variant {
			case "garbage in last file":
				writeAt(t, files[len(files)-1], 2*entrySize, garbage)
			case "garbage in old file":
				// Old files get a quick check of their first and last entries.
				writeAt(t, files[1], 15*entrySize, garbage)
			case "missing middle file":
				os.Remove(files[2])
			case "short middle file":
				os.Truncate(files[2], 5*entrySize)
			case "zeroed entry":
				writeAt(t, files[len(files)-2], 3*entrySize, make([]byte, entrySize))
			case "missing last file and checkpoint":
				os.Remove(files[len(files)-1])
				os.Remove(filepath.Join(dir, checkpointName))
			case "all queues and checkpoint gone":
				os.RemoveAll(filepath.Join(dir, "consumequeue"))
				os.Remove(filepath.Join(dir, checkpointName))
			case "entry beyond end":
				// An entry pointing past the log end (its batch was lost) is dropped.
				last := files[len(files)-1]
				b := readAt(t, last, 0, int(16*entrySize))
				i := 0
				for i < 16 && !allZero(b[i*entrySize:(i+1)*entrySize]) {
					i++
				}
				if i == 16 {
					t.Skip("last file full")
				}
				e := make([]byte, entrySize)
				encodeEntry(e, s.LogEndOffset()+100, 100, m.maxOffset(qkey{"orders", 1}), 1, 0)
				writeAt(t, last, int64(i*entrySize), e)
			}
			s = mustOpen(t, cfg)
			defer s.Close()
			verifyAll(t, s, m)
			checkEnd(t, s, m)
			fill(t, s, m, rand.New(rand.NewPCG(12, 12)), 100, 500)
			verifyAll(t, s, m)
		})
	}
}

// TestOldQueueFileGarbage: garbage inside an old consume-queue file (which recovery only
// quick-checks) is reported by Read as corrupt, never served as data.
func TestOldQueueFileGarbage(t *testing.T) {
	dir := t.TempDir()
	cfg := testConfig(dir)
	s := mustOpen(t, cfg)
	m := newModel()
	for range 100 {
		appendRec(t, s, m, "a", 0, 1, make([]byte, 10))
	}
	s.Close()
	writeAt(t, queueFiles(t, dir, "a", 0)[1], 5*entrySize, bytes.Repeat([]byte{0x5A}, entrySize))
	s = mustOpen(t, cfg)
	defer s.Close()
	var rr ReadResult
	if err := s.Read([]byte("a"), 0, 16+5, 1, 0, &rr); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("Read: %v %v", rr.Status, err)
	}
	if err := s.Read([]byte("a"), 0, 40, 1, 0, &rr); err != nil || rr.Status != Found {
		t.Fatalf("Read: %v %v", rr.Status, err)
	}
	rr.Release()
}

func TestRecoveryCheckpoint(t *testing.T) {
	for _, variant := range []string{"missing", "corrupt", "beyond log", "stale"} {
		t.Run(variant, func(t *testing.T) {
			dir := t.TempDir()
			cfg := testConfig(dir)
			var stale []byte
			s, m := crashAfter(t, cfg, 800, func(m *model) {})
			stale, _ = os.ReadFile(filepath.Join(dir, checkpointName))
			fill(t, s, m, rand.New(rand.NewPCG(13, 13)), 400, 2500)
			s.abandon()
			ck := filepath.Join(dir, checkpointName)
			switch variant {
			case "missing":
				os.Remove(ck)
			case "corrupt":
				writeAt(t, ck, 10, []byte{0xff})
			case "beyond log":
				writeCheckpoint(dir, checkpoint{logDurable: 1 << 40, queueDurable: 1 << 40}, time.Now())
			case "stale":
				os.WriteFile(ck, stale, 0o644)
			}
			s = mustOpen(t, cfg)
			defer s.Close()
			verifyAll(t, s, m)
			checkEnd(t, s, m)
		})
	}
}

// TestRecoveryCrashMidTruncation: recovery found a torn batch, zeroed part of the tail and died
// before deleting later segments. Recovery again gives the same state, and the old tail (valid
// batches after the torn one) never comes back.
func TestRecoveryCrashMidTruncation(t *testing.T) {
	dir := t.TempDir()
	cfg := testConfig(dir)
	s := mustOpen(t, cfg)
	m := newModel()
	fill(t, s, m, rand.New(rand.NewPCG(17, 17)), 600, 2500)
	s.abandon()
	// Tear a batch two segments before the end: everything after it is a stale tail.
	segs := segmentFiles(t, dir)
	cut := int64(len(segs)-3) * cfg.SegmentSize
	i := sort.Search(len(m.all), func(i int) bool { return m.all[i].phys >= cut+cfg.SegmentSize/2 })
	torn := m.all[i]
	tornBase := torn.phys / cfg.SegmentSize * cfg.SegmentSize
	writeAt(t, segPath(dir, tornBase), torn.phys-tornBase+int64(torn.size)-1, []byte{^torn.payload[len(torn.payload)-1]})
	// Half-done truncation: part of the tail zeroed (not reaching the torn batch's start),
	// later segments still there.
	half := (tornBase + cfg.SegmentSize - torn.phys) / 2
	writeAt(t, segPath(dir, tornBase), torn.phys-tornBase+half, make([]byte, cfg.SegmentSize-(torn.phys-tornBase+half)))
	m.truncate(torn.phys)
	for round := range 2 {
		s = mustOpen(t, cfg)
		if s.LogEndOffset() != torn.phys {
			t.Fatalf("round %d: end %d, want %d", round, s.LogEndOffset(), torn.phys)
		}
		verifyAll(t, s, m)
		checkZeroAfter(t, s, dir)
		checkNoStaleSegments(t, s, dir)
		s.abandon()
	}
	s = mustOpen(t, cfg)
	fill(t, s, m, rand.New(rand.NewPCG(19, 19)), 300, 2500)
	s.abandon()
	s = mustOpen(t, cfg)
	defer s.Close()
	verifyAll(t, s, m)
	checkEnd(t, s, m)
}

// TestRecoveryQueuesAheadOfLog: the checkpoint says the consume queues are durable further than
// the log turns out to be (the log lost its tail); entries pointing past the new end go.
func TestRecoveryQueuesAheadOfLog(t *testing.T) {
	dir := t.TempDir()
	cfg := testConfig(dir)
	s := mustOpen(t, cfg)
	m := newModel()
	fill(t, s, m, rand.New(rand.NewPCG(23, 23)), 400, 2000)
	end := s.LogEndOffset()
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	// The log is only durable from the start of its last segment; a batch there is torn.
	lastSeg := (end - 1) / cfg.SegmentSize * cfg.SegmentSize
	i := sort.Search(len(m.all), func(i int) bool { return m.all[i].phys > lastSeg })
	torn := m.all[i+(len(m.all)-i)/2]
	writeAt(t, segPath(dir, lastSeg), torn.phys-lastSeg+8, []byte{0xFF, 0xFF})
	if err := writeCheckpoint(dir, checkpoint{logDurable: lastSeg, queueDurable: end}, time.Now()); err != nil {
		t.Fatal(err)
	}
	m.truncate(torn.phys)
	s = mustOpen(t, cfg)
	defer s.Close()
	verifyAll(t, s, m)
	checkEnd(t, s, m)
}

// TestRecoveryFallbackZeroing truncates a torn tail without FALLOC_FL_ZERO_RANGE.
func TestRecoveryFallbackZeroing(t *testing.T) {
	zeroRangeUnsupported = true
	defer func() { zeroRangeUnsupported = false }()
	dir := t.TempDir()
	cfg := testConfig(dir)
	s, m := crashAfter(t, cfg, 200, func(m *model) {
		last := lastRec(m)
		lb := last.phys / cfg.SegmentSize * cfg.SegmentSize
		writeAt(t, segPath(dir, lb), last.phys-lb+int64(last.size)-1, []byte{^last.payload[len(last.payload)-1]})
		m.truncate(last.phys)
	})
	defer s.Close()
	verifyAll(t, s, m)
}

// ---- kill -9 of a real process ----

const childEnv = "PETREL_COMMITLOG_CHILD_DIR"

func childConfig(dir string) Config {
	cfg := testConfig(dir)
	cfg.FlushMode = SyncFlush
	cfg.QueueFileEntries = 64
	cfg.QueueFlushInterval = 20 * time.Millisecond
	cfg.Logger = quietLogger()
	return cfg
}

func childBatch(qid int32, base int64) ([]byte, int32) {
	n := 20 + int((base*37+int64(qid)*11)%3000)
	p := make([]byte, n)
	for i := range p {
		p[i] = byte(base + int64(i) + int64(qid))
	}
	return p, int32(1 + base%3)
}

// childMain appends forever with SYNC_FLUSH and prints "queue base" for every acknowledged
// batch, until it is killed.
func childMain(dir string) {
	s, err := Open(childConfig(dir))
	if err != nil {
		fmt.Fprintln(os.Stderr, "open:", err)
		os.Exit(3)
	}
	var mu sync.Mutex
	var wg sync.WaitGroup
	for q := range int32(4) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			done := make(chan error, 1)
			for {
				base := s.MaxOffset([]byte("kill"), q)
				p, count := childBatch(q, base)
				res, err := s.Append([]byte("kill"), q, makeBatch("kill", q, count, 0, p), count, 0, 0, testStamp)
				if err != nil {
					fmt.Fprintln(os.Stderr, "append:", err)
					os.Exit(4)
				}
				s.WaitFlushed(res.EndOffset, func(err error) { done <- err })
				if err := <-done; err != nil {
					os.Exit(5)
				}
				mu.Lock()
				fmt.Fprintf(os.Stdout, "%d %d\n", q, res.BaseQueueOffset)
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
}

func TestKill9(t *testing.T) {
	if testing.Short() {
		t.Skip("spawns processes")
	}
	dir := t.TempDir()
	acked := map[int32]int64{}
	r := rand.New(rand.NewPCG(21, 21))
	// Random kills, and kills inside a segment roll (before and after the marker) through the
	// failpoints the roll passes.
	failpoints := []string{"", "commitlog-roll=3", "", "commitlog-roll-marker=2", "", "commitlog-roll=1", "commitlog-roll-marker=4"}
	for round, fp := range failpoints {
		cmd := exec.Command(os.Args[0], "-test.run=^$")
		cmd.Env = append(os.Environ(), childEnv+"="+dir)
		if fp != "" {
			cmd.Env = append(cmd.Env, "PETREL_FAILPOINTS="+fp)
		}
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		out, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		lines := make(chan string, 1024)
		go func() {
			sc := bufio.NewScanner(out)
			for sc.Scan() {
				lines <- sc.Text()
			}
			close(lines)
		}()
		// Let it run until it has acknowledged some batches, then kill it at a random moment.
		n := 0
		deadline := time.After(20 * time.Second)
		want := 200 + r.IntN(800)
		if fp != "" {
			want = math.MaxInt // until the failpoint kills it
		}
	wait:
		for n < want {
			select {
			case l, ok := <-lines:
				if !ok {
					break wait
				}
				n++
				var q int32
				var base int64
				if _, err := fmt.Sscanf(l, "%d %d", &q, &base); err == nil {
					_, c := childBatch(q, base)
					acked[q] = max(acked[q], base+int64(c))
				}
			case <-deadline:
				break wait
			}
		}
		time.Sleep(time.Duration(r.IntN(3000)) * time.Microsecond)
		if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		for l := range lines {
			var q int32
			var base int64
			if _, err := fmt.Sscanf(l, "%d %d", &q, &base); err == nil {
				_, c := childBatch(q, base)
				acked[q] = max(acked[q], base+int64(c))
			}
		}
		_ = cmd.Wait()
		if ws := cmd.ProcessState.Sys().(syscall.WaitStatus); !ws.Signaled() || ws.Signal() != syscall.SIGKILL {
			t.Fatalf("round %d (%q): child ended with %v; stderr: %s", round, fp, cmd.ProcessState, stderr.String())
		}
		if fp == "" && n < want {
			t.Fatalf("round %d: child acknowledged only %d batches; stderr: %s", round, n, stderr.String())
		}
		s := mustOpen(t, childConfig(dir))
		for q := range int32(4) {
			maxOff := s.MaxOffset([]byte("kill"), q)
			if maxOff < acked[q] {
				t.Fatalf("round %d: queue %d max offset %d < acknowledged %d", round, q, maxOff, acked[q])
			}
			var rr ReadResult
			off := int64(0)
			for off < maxOff {
				if err := s.Read([]byte("kill"), q, off, 100, 0, &rr); err != nil || rr.Status != Found {
					t.Fatalf("round %d: queue %d read %d: %v %v", round, q, off, rr.Status, err)
				}
				for _, sl := range rr.Slices {
					for _, b := range splitBatches(t, sl.B) {
						info, err := testParser(b, int64(binary.BigEndian.Uint64(b[8:])))
						p, c := childBatch(q, off)
						if err != nil || info.BaseQueueOffset != off || info.Count != c || !bytes.Equal(payloadOf(b), p) {
							t.Fatalf("round %d: queue %d offset %d: bad batch (%v)", round, q, off, err)
						}
						off += int64(c)
					}
				}
				rr.Release()
			}
		}
		t.Logf("round %d (%q): killed after %d acks; log end %d, %d segments", round, fp, n, s.LogEndOffset(), len(*s.segs.Load()))
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
	}
}
