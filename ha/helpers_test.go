package ha

import (
	"bufio"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/petrel-mq/petrel/internal/testutil"
)

func TestMain(m *testing.M) { testutil.VerifyTestMain(m) }

// testLogger logs to the test's output when -v, and nowhere otherwise.
func testLogger(t testing.TB) *slog.Logger {
	if !testing.Verbose() {
		return slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	return slog.New(slog.NewTextHandler(tWriter{t}, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

type tWriter struct{ t testing.TB }

func (w tWriter) Write(p []byte) (int, error) {
	w.t.Log(string(p[:len(p)-1]))
	return len(p), nil
}

// loghubLines returns the lines of the loghub samples in bench/testdata (realistic payloads).
var loghubLines = sync.OnceValue(func() [][]byte {
	files, _ := filepath.Glob("../bench/testdata/loghub/*.log")
	var lines [][]byte
	for _, f := range files {
		fh, err := os.Open(f)
		if err != nil {
			continue
		}
		sc := bufio.NewScanner(fh)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			lines = append(lines, append([]byte(nil), sc.Bytes()...))
		}
		fh.Close()
	}
	if len(lines) == 0 {
		lines = append(lines, []byte("081109 203615 148 INFO dfs.DataNode$PacketResponder: PacketResponder 1 for block blk_38865049064139660 terminating"))
	}
	return lines
})

// payload returns a batch payload of about n bytes of log lines, starting at line i.
func payload(i, n int) []byte {
	lines := loghubLines()
	var b []byte
	for len(b) < n {
		b = append(b, lines[i%len(lines)]...)
		b = append(b, '\n')
		i++
	}
	return b[:n]
}

// fill appends count batches of about size bytes to l and returns the end.
func fill(l *memLog, first, count, size int) int64 {
	for i := 0; i < count; i++ {
		l.Append(payload(first+i*7, size))
	}
	return l.LogEndOffset()
}

// eventually fails the test unless cond holds within d (testutil.EventuallyWithin).
func eventually(t testing.TB, d time.Duration, what string, cond func() bool) {
	t.Helper()
	testutil.EventuallyWithin(t, d, what, cond)
}

// countingLog counts ReadReplication calls of a MasterLog.
type countingLog struct {
	MasterLog
	reads atomic.Int64
}

func (c *countingLog) ReadReplication(from int64, maxBytes int, fn func(int64, []byte) error) error {
	c.reads.Add(1)
	return c.MasterLog.ReadReplication(from, maxBytes, fn)
}

type pair struct {
	m    *Master
	s    *Slave
	mlog *memLog
	slog *memLog
}

// startPair starts a Master over mlog and a Slave over slog replicating from it; both are
// closed at the end of the test. mc and sc are completed with the logs, addresses and names.
func startPair(t *testing.T, mlog, slog *memLog, mc MasterConfig, sc SlaveConfig) *pair {
	t.Helper()
	m := startMaster(t, mlog, mc)
	s := startSlave(t, slog, m.Addr(), sc)
	return &pair{m: m, s: s, mlog: mlog, slog: slog}
}

func startMaster(t *testing.T, mlog MasterLog, mc MasterConfig) *Master {
	t.Helper()
	mc.BrokerName = "broker-a"
	if mc.Log == nil {
		mc.Log = mlog
	}
	mc.ListenAddr = "127.0.0.1:0"
	if mc.Logger == nil {
		mc.Logger = testLogger(t)
	}
	m := NewMaster(mc)
	if err := m.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = m.Close() })
	return m
}

func startSlave(t *testing.T, slog *memLog, addr string, sc SlaveConfig) *Slave {
	t.Helper()
	if sc.BrokerName == "" {
		sc.BrokerName = "broker-a"
	}
	if sc.SlaveID == 0 {
		sc.SlaveID = 1
	}
	sc.SlaveAddr = func() string { return "127.0.0.1:1" }
	sc.Log = slog
	if sc.MasterHAAddr == nil {
		sc.MasterHAAddr = func() string { return addr }
	}
	if sc.Logger == nil {
		sc.Logger = testLogger(t)
	}
	if sc.Backoff == 0 {
		sc.Backoff = 10 * time.Millisecond
	}
	s := NewSlave(sc)
	if err := s.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

// waitEqual waits until the slave's log equals the master's from the master's min.
func (p *pair) waitEqual(t *testing.T, d time.Duration) {
	t.Helper()
	deadline := time.Now().Add(d)
	for {
		err := p.mlog.equalFrom(p.slog, p.mlog.LogMinOffset())
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("logs not equal after %v: %v", d, err)
		}
		time.Sleep(2 * time.Millisecond)
	}
}
