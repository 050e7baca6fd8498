package broker

import (
	"os"
	"runtime"
	"sync"
)

// Why a broker raises GOMAXPROCS while it runs (by one per event loop, and one for the reactor
// that accepts connections).
//
// A gnet event loop waits for I/O in a blocking epoll_wait(2) system call. A goroutine in a
// system call keeps its P (one of the GOMAXPROCS slots that run Go code) until the call returns
// or the runtime's sysmon thread retakes the P, which happens on sysmon's next tick: 20 us
// after it last found work, up to 10 ms when it has been idle. With GOMAXPROCS equal to the
// CPU count and, by default, one loop per CPU, every P can sit in an idle loop's epoll_wait
// while other goroutines are runnable: the flusher, a woken long poll, the reply to a
// replication wait, and in a process that embeds the broker (petrel-bench, tests) the
// producers and consumers. They then wait for sysmon, which shows in the tail of every latency
// (BENCHMARKS.md has the numbers). A P parked in epoll_wait uses no CPU, so one extra
// P per event loop costs nothing while the loops are idle and lets the runtime run everything
// else on the CPUs meanwhile. The Go runtime itself avoids this by polling the network from
// the scheduler; gnet's loops are system calls the scheduler cannot see into.

// loopProcs counts the event loops of the brokers running in this process and the GOMAXPROCS
// found before the first of them started.
var loopProcs struct {
	mu       sync.Mutex
	base     int  // GOMAXPROCS before the first reservation
	fromEnv  bool // base came from the GOMAXPROCS environment variable
	reserved int  // event loops of running brokers
}

// reserveLoopProcs raises GOMAXPROCS by loops (one P per event loop) on top of the value found
// before the first broker of the process started; the returned function gives them back. Once
// every broker stopped, GOMAXPROCS is that value again: the GOMAXPROCS environment variable's,
// or else the runtime's default (runtime.SetDefaultGOMAXPROCS, which keeps following the CPU
// limit as Go does by default).
func reserveLoopProcs(loops int) (release func()) {
	loopProcs.mu.Lock()
	defer loopProcs.mu.Unlock()
	if loopProcs.reserved == 0 {
		loopProcs.base = runtime.GOMAXPROCS(0)
		loopProcs.fromEnv = os.Getenv("GOMAXPROCS") != ""
	}
	loopProcs.reserved += loops
	runtime.GOMAXPROCS(loopProcs.base + loopProcs.reserved)
	var once sync.Once
	return func() {
		once.Do(func() {
			loopProcs.mu.Lock()
			defer loopProcs.mu.Unlock()
			loopProcs.reserved -= loops
			if loopProcs.reserved == 0 && !loopProcs.fromEnv {
				runtime.SetDefaultGOMAXPROCS()
				return
			}
			runtime.GOMAXPROCS(loopProcs.base + loopProcs.reserved)
		})
	}
}

// eventLoops is the number of gnet event loops a broker runs that wait in epoll_wait: its
// numEventLoop (or gnet's default with multicore on, one per CPU) plus the reactor that accepts
// connections (gnet runs one when SO_REUSEPORT is off, as here).
func (c *Config) eventLoops() int {
	if c.NumEventLoop > 0 {
		return c.NumEventLoop + 1
	}
	return runtime.NumCPU() + 1
}
