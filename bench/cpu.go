package bench

import (
	"bytes"
	"errors"
	"fmt"
	"math"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// CPU load of a run: a latency measured on a saturated machine says more about the machine
// than about the broker, so every result carries the machine's CPU use over its measured part
// beside its latencies. The machine's share comes from /proc/stat, the bench process's own
// (with an embedded cluster, brokers included) from getrusage, the run queue from
// /proc/loadavg; off Linux, or when /proc cannot be read, the result has none.

// CPULoad is the CPU use over the measured part of a run, the part its rates cover: from the
// end of the warm-up to the end of the test phase (a replay's drain included; a consume-only
// run's whole consumption).
type CPULoad struct {
	// Seconds is the wall time measured.
	Seconds float64 `json:"seconds"`
	// MachineBusyPct is the machine's busy time (user, nice, system, irq, softirq, steal)
	// over all its cores, as a percent of Cores cores' time.
	MachineBusyPct float64 `json:"machineBusyPct"`
	// StealPct is the part of MachineBusyPct the hypervisor gave to other guests while this
	// machine's CPUs had work (steal time): on a shared virtual machine, CPU the run wanted
	// and did not get.
	StealPct float64 `json:"stealPct"`
	// Cores is the number of CPUs /proc/stat lists.
	Cores int `json:"cores"`
	// ProcessCores is the bench process's user and system CPU time over the wall time, in
	// cores (an embedded cluster's brokers run in it).
	ProcessCores float64 `json:"processCores"`
	// LoadAvg1 is the 1-minute load average at the end: the run queue, runnable threads
	// beyond Cores waited for a CPU.
	LoadAvg1 float64 `json:"loadAvg1"`
}

// cpuTimes is the aggregate "cpu" line of /proc/stat (clock ticks) and the per-CPU line count.
type cpuTimes struct {
	busy, total, steal uint64
	cores              int
}

// parseProcStat reads /proc/stat's aggregate line: busy is user+nice+system+irq+softirq+steal,
// total that plus idle and iowait (guest time is already in user and nice). Pure. Fields a
// kernel does not have (irq... before 2.6) count 0.
func parseProcStat(data []byte) (cpuTimes, error) {
	var t cpuTimes
	found := false
	for line := range bytes.Lines(data) {
		f := strings.Fields(string(line))
		if len(f) == 0 || !strings.HasPrefix(f[0], "cpu") {
			continue
		}
		if f[0] != "cpu" {
			if _, err := strconv.Atoi(f[0][3:]); err == nil {
				t.cores++
			}
			continue
		}
		if len(f) < 5 {
			return cpuTimes{}, fmt.Errorf("/proc/stat: %d fields in the cpu line, want at least 4 times", len(f))
		}
		var v [8]uint64 // user nice system idle iowait irq softirq steal
		for i := range v {
			if i+1 >= len(f) {
				break
			}
			n, err := strconv.ParseUint(f[i+1], 10, 64)
			if err != nil {
				return cpuTimes{}, fmt.Errorf("/proc/stat: cpu line: %w", err)
			}
			v[i] = n
		}
		t.busy = v[0] + v[1] + v[2] + v[5] + v[6] + v[7]
		t.total = t.busy + v[3] + v[4]
		t.steal = v[7]
		found = true
	}
	if !found {
		return cpuTimes{}, errors.New("/proc/stat: no cpu line")
	}
	return t, nil
}

// parseLoadAvg reads the 1-minute load average of /proc/loadavg ("2.31 1.80 1.02 3/412 9876").
// Pure.
func parseLoadAvg(data []byte) (float64, error) {
	f := strings.Fields(string(data))
	if len(f) == 0 {
		return 0, errors.New("/proc/loadavg: empty")
	}
	v, err := strconv.ParseFloat(f[0], 64)
	if err != nil {
		return 0, fmt.Errorf("/proc/loadavg: %w", err)
	}
	return v, nil
}

// cpuSample is what the machine and the process had used at one instant; ok is false when
// /proc/stat or getrusage could not be read.
type cpuSample struct {
	ok      bool
	at      time.Time
	machine cpuTimes
	process time.Duration // user + system CPU time of the process
}

// takeCPUSample reads /proc/stat and the process's rusage now.
func takeCPUSample() cpuSample {
	data, err := os.ReadFile("/proc/stat")
	if err != nil {
		return cpuSample{}
	}
	m, err := parseProcStat(data)
	if err != nil {
		return cpuSample{}
	}
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return cpuSample{}
	}
	cpu := time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
	return cpuSample{ok: true, at: time.Now(), machine: m, process: cpu}
}

// cpuLoadBetween is the load from sample a to sample b, with the load average at b; nil when a
// sample is missing or the interval is empty. Pure.
func cpuLoadBetween(a, b cpuSample, loadAvg1 float64) *CPULoad {
	wall := b.at.Sub(a.at)
	if !a.ok || !b.ok || wall <= 0 || b.machine.total <= a.machine.total || b.machine.busy < a.machine.busy {
		return nil
	}
	all := float64(b.machine.total - a.machine.total)
	busy := float64(b.machine.busy-a.machine.busy) / all
	steal := float64(b.machine.steal-min(a.machine.steal, b.machine.steal)) / all
	return &CPULoad{
		Seconds:        round3(wall.Seconds()),
		MachineBusyPct: math.Round(1000*busy) / 10,
		StealPct:       math.Round(1000*steal) / 10,
		Cores:          b.machine.cores,
		ProcessCores:   round3(float64(b.process-a.process) / float64(wall)),
		LoadAvg1:       loadAvg1,
	}
}

// cpuMeter measures the CPU load of a run's measured part: start at its beginning, stop at its
// end. Owned by the main goroutine.
type cpuMeter struct {
	from cpuSample
}

func (m *cpuMeter) start() { m.from = takeCPUSample() }

// started reports whether start was called (and /proc could be read) since the last stop.
func (m *cpuMeter) started() bool { return m.from.ok }

// stop returns the load since start, nil when it was not started or /proc cannot be read.
func (m *cpuMeter) stop() *CPULoad {
	if !m.from.ok {
		return nil
	}
	to := takeCPUSample()
	data, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return nil
	}
	la, err := parseLoadAvg(data)
	if err != nil {
		return nil
	}
	from := m.from
	m.from = cpuSample{}
	return cpuLoadBetween(from, to, la)
}

// cpuLine is the summary's CPU line, "" without a measurement.
func cpuLine(c *CPULoad) string {
	if c == nil {
		return ""
	}
	return fmt.Sprintf("  %-17s machine %.0f%% busy of %d cores (steal %.0f%%), petrel-bench %.2f cores, load average %.1f", "cpu", c.MachineBusyPct, c.Cores, c.StealPct, c.ProcessCores, c.LoadAvg1)
}
