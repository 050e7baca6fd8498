package main

import (
	"fmt"
	"io"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/petrel-mq/petrel/internal/netns"
)

// The binaries the harness runs, in --bin.
const (
	binNamesrv = "petrel-namesrv"
	binBroker  = "petrel-broker"
	binCtl     = "petrelctl"
	binBench   = "petrel-bench"
)

// spawner starts every child process from one OS thread that never ends. The children carry
// Pdeathsig (they are killed when the harness dies, so a crashed run leaves no broker running),
// and the kernel sends that signal when the thread that forked them ends, not the process: a
// fork from an arbitrary goroutine's thread could kill a broker when the runtime retires that
// thread (it does so for every goroutine that exits locked to its thread, as netns.Do's do).
type spawner struct {
	reqs chan spawnReq
}

type spawnReq struct {
	cmd  *exec.Cmd
	errc chan error
}

func newSpawner() *spawner {
	s := &spawner{reqs: make(chan spawnReq)}
	go func() {
		runtime.LockOSThread() // never unlocked: this thread lives as long as the process
		for r := range s.reqs {
			r.errc <- r.cmd.Start()
		}
	}()
	return s
}

// start starts cmd on the spawner's thread.
func (s *spawner) start(cmd *exec.Cmd) error {
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	// Its own process group: a terminal's SIGINT (make chaos, ^C) reaches the harness only,
	// which then stops everything in order.
	cmd.SysProcAttr.Setpgid = true
	cmd.SysProcAttr.Pdeathsig = syscall.SIGKILL
	errc := make(chan error, 1)
	s.reqs <- spawnReq{cmd: cmd, errc: errc}
	return <-errc
}

// proc is one long-running process of the cluster (a NameServer, a broker, the bench), run in
// its node's namespace, started again after every kill with the same log file.
type proc struct {
	name    string
	node    *node
	sp      *spawner
	logPath string
	// argv returns the binary and arguments of the next start (a broker's config may change
	// between starts).
	argv func() (string, []string, error)
	// stamp makes the output go through a writer that prefixes every line with the time it
	// arrived (the bench's progress lines carry none).
	stamp bool
	// onExit is called, off the process's lock, when the process ends without the harness
	// having killed or stopped it.
	onExit func(p *proc, err error)

	mu       sync.Mutex
	cmd      *exec.Cmd
	done     chan struct{}
	expected bool // the harness is ending the process: its exit is no surprise
	stopped  bool // SIGSTOPped
	exitErr  error
	starts   int
	lastExit time.Time
}

// start starts the process; it must not be running.
func (p *proc) start() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd != nil {
		return fmt.Errorf("%s is already running (pid %d)", p.name, p.cmd.Process.Pid)
	}
	bin, args, err := p.argv()
	if err != nil {
		return err
	}
	logf, err := os.OpenFile(p.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	p.starts++
	fmt.Fprintf(logf, "=== petrel-chaos %s: start #%d in %s: %s %s\n", clock(time.Now()), p.starts, p.node.ns, bin, strings.Join(args, " "))
	cmd := netns.Command(p.node.ns, bin, args...)
	var stamper *lineStamper
	if p.stamp {
		stamper = &lineStamper{w: logf}
		cmd.Stdout, cmd.Stderr = stamper, stamper
	} else {
		cmd.Stdout, cmd.Stderr = logf, logf
	}
	if err := p.sp.start(cmd); err != nil {
		_ = logf.Close()
		return fmt.Errorf("cannot start %s: %w", p.name, err)
	}
	done := make(chan struct{})
	p.cmd, p.done, p.expected, p.stopped, p.exitErr = cmd, done, false, false, nil
	go func() {
		err := cmd.Wait()
		if stamper != nil {
			stamper.flush()
		}
		p.mu.Lock()
		expected := p.expected
		p.cmd, p.exitErr, p.lastExit = nil, err, time.Now()
		p.mu.Unlock()
		fmt.Fprintf(logf, "=== petrel-chaos %s: exited: %v\n", clock(time.Now()), exitText(err))
		_ = logf.Close()
		close(done)
		if !expected && p.onExit != nil {
			p.onExit(p, err)
		}
	}()
	return nil
}

// exitText describes a process's end as cmd.Wait reported it.
func exitText(err error) string {
	if err == nil {
		return "exit status 0"
	}
	return err.Error()
}

// pid returns the running process's pid, 0 when it is not running.
func (p *proc) pid() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd == nil {
		return 0
	}
	return p.cmd.Process.Pid
}

// running reports whether the process runs (stopped or not).
func (p *proc) running() bool { return p.pid() != 0 }

// isStopped reports whether the harness SIGSTOPped the process and has not resumed it.
func (p *proc) isStopped() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.cmd != nil && p.stopped
}

// note writes a line of the harness into the process's log, between its own lines.
func (p *proc) note(format string, args ...any) {
	f, err := os.OpenFile(p.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return
	}
	fmt.Fprintf(f, "=== petrel-chaos %s: %s\n", clock(time.Now()), fmt.Sprintf(format, args...))
	_ = f.Close()
}

// signal sends sig to the running process; expectExit marks the exit it may cause as the
// harness's doing.
func (p *proc) signal(sig syscall.Signal, expectExit bool) error {
	p.mu.Lock()
	if p.cmd == nil {
		p.mu.Unlock()
		return fmt.Errorf("%s is not running", p.name)
	}
	if expectExit {
		p.expected = true
	}
	switch sig {
	case syscall.SIGSTOP:
		p.stopped = true
	case syscall.SIGCONT:
		p.stopped = false
	}
	pid := p.cmd.Process.Pid
	p.mu.Unlock()
	if err := syscall.Kill(pid, sig); err != nil {
		return fmt.Errorf("kill -%d %s (pid %d): %w", sig, p.name, pid, err)
	}
	return nil
}

// waitExit waits up to timeout for the process to end.
func (p *proc) waitExit(timeout time.Duration) error {
	p.mu.Lock()
	done := p.done
	running := p.cmd != nil
	p.mu.Unlock()
	if !running || done == nil {
		return nil
	}
	select {
	case <-done:
		return nil
	case <-time.After(timeout):
		return fmt.Errorf("%s did not exit within %v", p.name, timeout)
	}
}

// kill9 kills the process with SIGKILL and waits for its end.
func (p *proc) kill9() error {
	if err := p.signal(syscall.SIGKILL, true); err != nil {
		return err
	}
	return p.waitExit(10 * time.Second)
}

// terminate ends the process gracefully: SIGCONT (a stopped process cannot handle SIGTERM),
// SIGTERM, and SIGKILL after grace.
func (p *proc) terminate(grace time.Duration) error {
	if !p.running() {
		return nil
	}
	_ = p.signal(syscall.SIGCONT, true)
	if err := p.signal(syscall.SIGTERM, true); err != nil {
		return nil // it ended meanwhile
	}
	if p.waitExit(grace) == nil {
		return nil
	}
	_ = p.signal(syscall.SIGKILL, true)
	if err := p.waitExit(10 * time.Second); err != nil {
		return err
	}
	return fmt.Errorf("%s ignored SIGTERM for %v: killed", p.name, grace)
}

// lineStamper prefixes every line written through it with the time of day it arrived.
type lineStamper struct {
	mu      sync.Mutex
	w       io.Writer
	partial []byte
}

// Write implements io.Writer.
func (s *lineStamper) Write(b []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := len(b)
	for len(b) > 0 {
		i := strings.IndexByte(string(b), '\n')
		if i < 0 {
			s.partial = append(s.partial, b...)
			break
		}
		line := append(s.partial, b[:i]...)
		s.partial = nil
		if _, err := fmt.Fprintf(s.w, "%s | %s\n", clock(time.Now()), line); err != nil {
			return n, err
		}
		b = b[i+1:]
	}
	return n, nil
}

// flush writes a last line that had no newline.
func (s *lineStamper) flush() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.partial) > 0 {
		fmt.Fprintf(s.w, "%s | %s\n", clock(time.Now()), s.partial)
		s.partial = nil
	}
}

// clock formats t as the time of day to the millisecond, as every line of the run shows it.
func clock(t time.Time) string { return t.Format("15:04:05.000") }
