package testutil

import (
	"fmt"
	"net"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

func TestMain(m *testing.M) { VerifyTestMain(m) }

// fakeTB records a helper's failure instead of ending the test.
type fakeTB struct {
	failed bool
	msg    string
}

func (f *fakeTB) Helper() {}

func (f *fakeTB) Fatalf(format string, args ...any) {
	f.failed = true
	f.msg = fmt.Sprintf(format, args...)
}

func TestEventuallyReturnsOnceCondHolds(t *testing.T) {
	calls := 0
	Eventually(t, "the third call", func() bool {
		calls++
		return calls == 3
	})
	if calls != 3 {
		t.Fatalf("cond called %d times after it held at the third call", calls)
	}
}

func TestEventuallyWithinFailsNamingTheCondition(t *testing.T) {
	var f fakeTB
	calls := 0
	EventuallyWithin(&f, 20*time.Millisecond, "the impossible", func() bool { calls++; return false })
	if !f.failed || f.msg != "timed out after 20ms waiting for the impossible" {
		t.Fatalf("failed=%v msg=%q", f.failed, f.msg)
	}
	if calls < 2 {
		t.Fatalf("cond called %d times: not polled", calls)
	}
}

func TestPollInterval(t *testing.T) {
	for _, tc := range []struct{ waited, want time.Duration }{
		{0, time.Millisecond},
		{10 * time.Millisecond, time.Millisecond},
		{100 * time.Millisecond, 5 * time.Millisecond},
		{time.Second, 50 * time.Millisecond},
		{time.Minute, 50 * time.Millisecond},
	} {
		if got := pollInterval(tc.waited); got != tc.want {
			t.Errorf("pollInterval(%v) = %v, want %v", tc.waited, got, tc.want)
		}
	}
}

func TestSyncBufferConcurrentWrites(t *testing.T) {
	var b SyncBuffer
	var wg sync.WaitGroup
	for w := range 4 {
		wg.Go(func() {
			for i := range 100 {
				fmt.Fprintf(&b, "writer=%d line=%d\n", w, i)
			}
		})
	}
	wg.Wait()
	if n := b.Count("\n"); n != 400 {
		t.Fatalf("%d lines, want 400", n)
	}
	if n := b.Count("writer=2 "); n != 100 {
		t.Fatalf("%d lines of writer 2, want 100", n)
	}
	for w := range 4 {
		if !b.HasLine(fmt.Sprintf("writer=%d", w), "line=99") {
			t.Fatalf("writer %d's last line is missing:\n%s", w, b.String())
		}
	}
}

func TestLineWith(t *testing.T) {
	text := "level=WARN msg=\"slave connected\" member=b1\nlevel=INFO msg=recovered endOffset=42\nlast line without newline"
	for _, tc := range []struct {
		parts []string
		want  string // "" for no line
	}{
		{[]string{"slave connected", "member=b1"}, `level=WARN msg="slave connected" member=b1`},
		{[]string{"member=b1", "slave connected"}, `level=WARN msg="slave connected" member=b1`}, // any order
		{[]string{"slave connected", "endOffset=42"}, ""},                                        // on two lines, not one
		{[]string{"recovered"}, "level=INFO msg=recovered endOffset=42"},
		{[]string{"without newline"}, "last line without newline"},
		{[]string{"absent"}, ""},
		{nil, `level=WARN msg="slave connected" member=b1`}, // no parts: the first line
	} {
		got, ok := lineWith(text, tc.parts)
		if ok != (tc.want != "") || got != tc.want {
			t.Errorf("lineWith(%q) = %q, %v; want %q", tc.parts, got, ok, tc.want)
		}
	}
	if _, ok := lineWith("", nil); ok {
		t.Error("a line found in empty text")
	}
}

func TestWaitForLine(t *testing.T) {
	var b SyncBuffer
	b.Write([]byte("starting\n"))
	done := make(chan struct{})
	go func() {
		defer close(done)
		time.Sleep(10 * time.Millisecond)
		b.Write([]byte("level=INFO msg=ready port=7\n"))
	}()
	if got := b.WaitForLine(t, "port=7", "ready"); got != "level=INFO msg=ready port=7" {
		t.Fatalf("WaitForLine returned %q", got)
	}
	<-done
}

func TestFreePorts(t *testing.T) {
	ports := FreePorts(t, 20)
	if len(ports) != 20 {
		t.Fatalf("%d ports, want 20", len(ports))
	}
	hi := ephemeralStart()
	seen := map[int]bool{}
	for _, p := range ports {
		if seen[p] {
			t.Fatalf("port %d returned twice in %v", p, ports)
		}
		seen[p] = true
		if p < lowestPort || p >= hi {
			t.Fatalf("port %d outside [%d, %d)", p, lowestPort, hi)
		}
		// Nothing holds it: a server can listen on it.
		ln, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(p)))
		if err != nil {
			t.Fatalf("port %d: %v", p, err)
		}
		_ = ln.Close()
	}
	addrs := FreeAddrs(t, 2)
	if len(addrs) != 2 || !strings.HasPrefix(addrs[0], "127.0.0.1:") || addrs[0] == addrs[1] {
		t.Fatalf("FreeAddrs: %q", addrs)
	}
}

func TestParsePortRange(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want int
		ok   bool
	}{
		{"32768\t60999\n", 32768, true},
		{"49152 65535", 49152, true},
		{"", 0, false},
		{"32768", 0, false},
		{"x 60999", 0, false},
		{"0 60999", 0, false},
		{"70000 70001", 0, false},
	} {
		got, ok := parsePortRange(tc.in)
		if got != tc.want || ok != tc.ok {
			t.Errorf("parsePortRange(%q) = %d, %v; want %d, %v", tc.in, got, ok, tc.want, tc.ok)
		}
	}
}
