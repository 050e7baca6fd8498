package bench

import (
	"bytes"
	"encoding/json"
	"slices"
	"strings"
	"testing"
	"time"
)

// A /proc/stat of a 2-core machine (kernel 6.x: ten times per line).
const procStat2 = `cpu  46057 1430 16658 27609 1519 0 661 4400 0 0
cpu0 22863 711 8103 14863 254 0 255 2042 0 0
cpu1 23193 719 8555 12746 1265 0 405 2358 0 0
intr 2999931 0 0 0 0 0 0 0 0 0 0 0
ctxt 2363050
btime 1796345899
processes 12813
procs_running 3
procs_blocked 0
softirq 1439524 1 299839 2 77146 0 0 57866 541512 0 463158
`

func TestParseProcStat(t *testing.T) {
	for _, tc := range []struct {
		name, in           string
		busy, total, cores uint64
		steal              uint64
		err                bool
	}{
		// busy = user+nice+system+irq+softirq+steal; total adds idle and iowait; guest is in user.
		{"2 cores", procStat2, 46057 + 1430 + 16658 + 0 + 661 + 4400, 46057 + 1430 + 16658 + 0 + 661 + 4400 + 27609 + 1519, 2, 4400, false},
		{"4 cores, guest time", "cpu  100 0 50 800 10 5 5 0 30 0\ncpu0 25 0 12 200 2 1 1 0 8 0\ncpu1 25 0 13 200 3 1 1 0 7 0\ncpu2 25 0 12 200 2 1 2 0 8 0\ncpu3 25 0 13 200 3 2 1 0 7 0\nintr 5\n",
			160, 970, 4, 0, false},
		{"an old kernel without steal", "cpu  10 1 5 80 4 0 0\ncpu0 10 1 5 80 4 0 0\n", 16, 100, 1, 0, false},
		{"steal", "cpu  10 1 5 80 4 0 0 7 0 0\ncpu0 10 1 5 80 4 0 0 7 0 0\n", 23, 107, 1, 7, false},
		{"no cpu line", "intr 5\nctxt 7\n", 0, 0, 0, 0, true},
		{"a cpu line too short", "cpu  1 2 3\n", 0, 0, 0, 0, true},
		{"a cpu line not numbers", "cpu  1 2 x 4 5 6 7 8 0 0\n", 0, 0, 0, 0, true},
	} {
		got, err := parseProcStat([]byte(tc.in))
		if (err != nil) != tc.err {
			t.Errorf("%s: err %v, want error %v", tc.name, err, tc.err)
			continue
		}
		if !tc.err && (got.busy != tc.busy || got.total != tc.total || got.cores != int(tc.cores) || got.steal != tc.steal) {
			t.Errorf("%s: %+v, want busy %d total %d cores %d", tc.name, got, tc.busy, tc.total, tc.cores)
		}
	}
}

func TestParseLoadAvg(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want float64
		err  bool
	}{
		{"5.21 4.52 2.16 2/126 12813\n", 5.21, false},
		{"0.00 0.01 0.05 1/80 1\n", 0, false},
		{"", 0, true},
		{"high 1 1 1/1 1\n", 0, true},
	} {
		got, err := parseLoadAvg([]byte(tc.in))
		if (err != nil) != tc.err || got != tc.want {
			t.Errorf("parseLoadAvg(%q) = %v, %v; want %v, error %v", tc.in, got, err, tc.want, tc.err)
		}
	}
}

func TestCPULoadBetween(t *testing.T) {
	t0 := time.Unix(1000, 0)
	a := cpuSample{ok: true, at: t0, machine: cpuTimes{busy: 1000, total: 4000, steal: 100, cores: 2}, process: 3 * time.Second}
	b := cpuSample{ok: true, at: t0.Add(10 * time.Second), machine: cpuTimes{busy: 2560, total: 6000, steal: 500, cores: 2}, process: 15100 * time.Millisecond}
	got := cpuLoadBetween(a, b, 2.3)
	want := CPULoad{Seconds: 10, MachineBusyPct: 78, StealPct: 20, Cores: 2, ProcessCores: 1.21, LoadAvg1: 2.3}
	if got == nil || *got != want {
		t.Fatalf("load %+v, want %+v", got, want)
	}
	if line := cpuLine(got); line != "  cpu               machine 78% busy of 2 cores (steal 20%), petrel-bench 1.21 cores, load average 2.3" {
		t.Fatalf("line %q", line)
	}
	for _, tc := range []struct {
		name string
		a, b cpuSample
	}{
		{"no start", cpuSample{}, b},
		{"no end", a, cpuSample{}},
		{"no time passed", a, a},
		{"counters went back", b, cpuSample{ok: true, at: b.at.Add(time.Second), machine: a.machine}},
	} {
		if l := cpuLoadBetween(tc.a, tc.b, 1); l != nil {
			t.Errorf("%s: %+v, want none", tc.name, l)
		}
	}
	if cpuLine(nil) != "" {
		t.Error("a line without a measurement")
	}
	var m cpuMeter
	if m.started() || m.stop() != nil {
		t.Error("a meter never started measured something")
	}
}

// TestSummaryCPU: the CPU line follows the latencies, and the JSON has a cpu object only when
// it was measured.
func TestSummaryCPU(t *testing.T) {
	res := newResult()
	var b bytes.Buffer
	res.writeSummary(&b, summary{})
	if strings.Contains(b.String(), "  cpu") {
		t.Fatalf("a cpu line without a measurement:\n%s", b.String())
	}
	if j, _ := json.Marshal(res); bytes.Contains(j, []byte(`"cpu"`)) {
		t.Fatal("a cpu object without a measurement")
	}
	res.CPU = &CPULoad{Seconds: 5, MachineBusyPct: 78.4, StealPct: 20.2, Cores: 2, ProcessCores: 1.214, LoadAvg1: 2.31}
	b.Reset()
	res.writeSummary(&b, summary{})
	lines := strings.Split(b.String(), "\n")
	i := slices.IndexFunc(lines, func(l string) bool { return strings.HasPrefix(l, "  cpu ") })
	if i < 0 || lines[i] != "  cpu               machine 78% busy of 2 cores (steal 20%), petrel-bench 1.21 cores, load average 2.3" ||
		!strings.HasPrefix(lines[i-1], "  end-to-end ") || !strings.HasPrefix(lines[i+1], "  messages ") {
		t.Fatalf("summary:\n%s", b.String())
	}
	j, _ := json.Marshal(res)
	if !bytes.Contains(j, []byte(`"cpu":{"seconds":5,"machineBusyPct":78.4,"stealPct":20.2,"cores":2,"processCores":1.214,"loadAvg1":2.31}`)) {
		t.Fatalf("json %s", j)
	}
}

// TestTakeCPUSample: on a machine with /proc, a sample reads the machine's counters and starts
// a meter.
func TestTakeCPUSample(t *testing.T) {
	s := takeCPUSample()
	if !s.ok {
		t.Skip("no /proc/stat here")
	}
	if s.machine.cores < 1 || s.machine.total == 0 || s.machine.busy > s.machine.total || s.process <= 0 {
		t.Fatalf("sample %+v", s)
	}
	var m cpuMeter
	m.start()
	if !m.started() {
		t.Fatal("not started")
	}
}
