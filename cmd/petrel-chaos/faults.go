package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/petrel-mq/petrel/internal/netns"
)

// faultKind names a kind of fault (the keys of --mix).
type faultKind string

// The fault kinds. Each acts on one broker group (chosen at random) except the NameServer
// restarts, which act on the cluster.
const (
	// faultStop: SIGSTOP of the group's master, SIGCONT at the heal.
	faultStop faultKind = "stop"
	// faultPartitionMaster: the master cut from every other member of its group (it still
	// reaches the NameServer and the clients).
	faultPartitionMaster faultKind = "partition-master"
	// faultPartitionSlave: one slave cut from every other member of its group.
	faultPartitionSlave faultKind = "partition-slave"
	// faultPartitionBench: the load generator cut from the group's master.
	faultPartitionBench faultKind = "partition-bench"
	// faultIsolateMaster: the master cut from everyone: its group, the NameServer, the
	// clients and the harness.
	faultIsolateMaster faultKind = "isolate-master"
	// faultKillMaster: kill -9 of the master, started again at the heal.
	faultKillMaster faultKind = "kill-master"
	// faultKillSlave: kill -9 of one slave, started again at the heal.
	faultKillSlave faultKind = "kill-slave"
	// faultKillMasterSlave: kill -9 of the master and one slave together, both started again
	// at the heal.
	faultKillMasterSlave faultKind = "kill-master-slave"
	// faultElect: petrelctl electMaster to one slave, with every member up (never a forced
	// promotion: that loses what only the master held, by design). Nothing to hold or heal.
	faultElect faultKind = "elect"
	// faultNamesrvRestart: kill -9 of every NameServer, started again at the heal.
	faultNamesrvRestart faultKind = "namesrv-restart"
	// faultNsRestart: kill -9 of one NameServer, started again at once, knowing nothing; a
	// new client that asks it first must still find the topic's route and the cluster table
	// (the others know them) while it is not ready.
	faultNsRestart faultKind = "ns-restart"
	// faultDiskFull: one member's store (the master's two times in three) full to ENOSPC for
	// the hold.
	faultDiskFull faultKind = "disk-full"
	// faultTopicChange: a scratch topic of the group (not the bench's) created, its queue count
	// changed, or deleted (petrelctl updateTopic on the master, deleteTopic on the cluster);
	// at the end every member's topic table must hold what was acknowledged. Nothing to hold
	// or heal.
	faultTopicChange faultKind = "topic-change"
)

// allKinds lists the kinds in the order reports use.
var allKinds = []faultKind{
	faultStop, faultPartitionMaster, faultPartitionSlave, faultPartitionBench, faultIsolateMaster,
	faultKillMaster, faultKillSlave, faultKillMasterSlave, faultElect, faultNamesrvRestart, faultNsRestart, faultDiskFull,
	faultTopicChange,
}

// kindNames returns the kinds' names.
func kindNames() []string {
	out := make([]string, len(allKinds))
	for i, k := range allKinds {
		out[i] = string(k)
	}
	return out
}

// cycle is one fault of the run: what was chosen, what was done and when.
type cycle struct {
	n    int
	kind faultKind
	// g is the group acted on; nil for the NameServer restarts.
	g    *group
	hold time.Duration
	// master is the group's master when the fault came; targets the members acted on.
	master  *member
	targets []*member
	// what says what was done, for the log.
	what string
	// injected, healed and healthy: when the fault came, when it was healed (a killed process
	// started again), when the cluster was healthy again (zero if it never was).
	injected, healed, healthy time.Time
	// problems are what went wrong applying or healing it, or waiting for health.
	problems []string
	// mastersAfter are the groups' masters once healthy again.
	mastersAfter map[string]*member
	// flowing is, per group, when the bench's sends were seen reaching it again after the
	// recovery (zero: not within the flow timeout).
	flowing map[string]time.Time
	// killed are the processes to start again at the heal.
	killed []*proc
	// filled is the member whose store was filled.
	filled *member
}

// choice is one cycle's random draws, all taken whatever the kind, so that a seed gives the
// same kinds, groups and holds whatever the cluster does.
type choice struct {
	kind      faultKind
	group     int
	hold      time.Duration
	pick      uint64 // picks a slave
	diskSlave bool   // disk-full on a slave rather than the master
}

// chooser draws the run's faults from the seed.
type chooser struct {
	rng     *rand.Rand
	kinds   []faultKind
	weights []int
	total   int
	lo, hi  time.Duration
}

func newChooser(seed uint64, weights map[faultKind]int, lo, hi time.Duration) *chooser {
	c := &chooser{rng: rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15)), lo: lo, hi: hi}
	for _, k := range allKinds {
		if w := weights[k]; w > 0 {
			c.kinds = append(c.kinds, k)
			c.weights = append(c.weights, w)
			c.total += w
		}
	}
	return c
}

func (c *chooser) next(groups int) choice {
	var ch choice
	r := c.rng.IntN(c.total)
	for i, w := range c.weights {
		if r < w {
			ch.kind = c.kinds[i]
			break
		}
		r -= w
	}
	ch.group = c.rng.IntN(groups)
	ch.hold = c.lo
	if c.hi > c.lo {
		ch.hold += time.Duration(c.rng.Int64N(int64(c.hi - c.lo)))
	}
	ch.hold = ch.hold.Round(time.Millisecond)
	ch.pick = c.rng.Uint64()
	ch.diskSlave = c.rng.IntN(3) == 0
	return ch
}

// slaves returns the members of g other than master, in config order.
func slaves(g *group, master *member) []*member {
	var out []*member
	for _, m := range g.members {
		if m != master {
			out = append(out, m)
		}
	}
	return out
}

// inherent reports whether fault c leaves group g without service by design while it is held,
// so that no failover can be asked of it: then the bar measures how soon sends come back
// after the heal, not the whole gap. The load generator cut from a live master, a group that
// lost its quorum (or a static group its master), a master's full disk.
func (c *cycle) inherent(g *group) bool {
	if c.g != g {
		return false
	}
	switch c.kind {
	case faultPartitionBench, faultKillMasterSlave:
		return true
	case faultDiskFull:
		return c.filled == c.master
	case faultStop, faultPartitionMaster, faultIsolateMaster, faultKillMaster:
		return !g.raft // a static group has no one to fail over to
	}
	return false
}

// apply injects the cycle's fault.
func (h *harness) apply(ctx context.Context, c *cycle, ch choice) error {
	var m *member
	if c.g != nil {
		m = c.master
		if m == nil {
			return fmt.Errorf("%s has no master to act on", c.g.name)
		}
	}
	pickSlave := func() *member {
		s := slaves(c.g, m)
		return s[ch.pick%uint64(len(s))]
	}
	switch c.kind {
	case faultStop:
		c.targets = []*member{m}
		c.what = fmt.Sprintf("SIGSTOP %s (pid %d)", m.name, m.proc.pid())
		m.proc.note("chaos: SIGSTOP (cycle %d)", c.n)
		return m.proc.signal(syscall.SIGSTOP, false)
	case faultPartitionMaster:
		others := slaves(c.g, m)
		c.targets = append([]*member{m}, others...)
		c.what = fmt.Sprintf("cut master %s from %s", m.name, names(others))
		var errs []error
		for _, o := range others {
			errs = append(errs, h.topo.cut(m.node, o.node))
		}
		return errors.Join(errs...)
	case faultPartitionSlave:
		s := pickSlave()
		others := slaves(c.g, s)
		c.targets = []*member{s}
		c.what = fmt.Sprintf("cut slave %s from %s", s.name, names(others))
		var errs []error
		for _, o := range others {
			errs = append(errs, h.topo.cut(s.node, o.node))
		}
		return errors.Join(errs...)
	case faultPartitionBench:
		c.targets = []*member{m}
		c.what = fmt.Sprintf("cut the bench from master %s", m.name)
		return h.topo.cut(h.topo.nodes["bench"], m.node)
	case faultIsolateMaster:
		c.targets = []*member{m}
		c.what = fmt.Sprintf("isolate master %s", m.name)
		return h.topo.isolate(m.node)
	case faultKillMaster, faultKillSlave, faultKillMasterSlave:
		switch c.kind {
		case faultKillMaster:
			c.targets = []*member{m}
		case faultKillSlave:
			c.targets = []*member{pickSlave()}
		default:
			c.targets = []*member{m, pickSlave()}
		}
		var parts []string
		for _, t := range c.targets {
			parts = append(parts, fmt.Sprintf("%s (pid %d)", t.name, t.proc.pid()))
			t.proc.note("chaos: kill -9 (cycle %d)", c.n)
		}
		c.what = "kill -9 " + strings.Join(parts, ", ")
		// Signals first, waits after: killed together means within microseconds.
		var errs []error
		for _, t := range c.targets {
			errs = append(errs, t.proc.signal(syscall.SIGKILL, true))
			c.killed = append(c.killed, t.proc)
		}
		for _, t := range c.targets {
			errs = append(errs, t.proc.waitExit(10*time.Second))
		}
		return errors.Join(errs...)
	case faultElect:
		s := pickSlave()
		c.targets = []*member{s}
		id := s.brokerID
		if st := h.lastSnap.ha[s.name]; st != nil && !c.g.raft {
			id = st.BrokerID // a static slave's brokerId may have changed with an earlier election
		}
		out, err := h.ctl(ctx, 20*time.Second, "electMaster", "-n", h.nsAddr(), "-b", c.g.name, "-i", strconv.FormatInt(id, 10))
		c.what = fmt.Sprintf("electMaster %s brokerId %d (%s): %s", c.g.name, id, s.name, strings.TrimSpace(out))
		for _, mm := range c.g.members {
			mm.proc.note("chaos: electMaster -b %s -i %d (cycle %d)", c.g.name, id, c.n)
		}
		return err
	case faultTopicChange:
		return h.changeTopic(ctx, c, m, ch.pick)
	case faultNamesrvRestart:
		var parts []string
		var errs []error
		for _, p := range h.namesrvs {
			parts = append(parts, fmt.Sprintf("%s (pid %d)", p.name, p.pid()))
			p.note("chaos: kill -9 (cycle %d)", c.n)
			errs = append(errs, p.signal(syscall.SIGKILL, true))
			c.killed = append(c.killed, p)
		}
		c.what = "kill -9 every NameServer: " + strings.Join(parts, ", ")
		for _, p := range h.namesrvs {
			errs = append(errs, p.waitExit(10*time.Second))
		}
		return errors.Join(errs...)
	case faultNsRestart:
		i := int(ch.pick % uint64(len(h.namesrvs)))
		p := h.namesrvs[i]
		c.what = fmt.Sprintf("kill -9 NameServer %s (pid %d) and start it again", p.name, p.pid())
		p.note("chaos: kill -9, then started again at once (cycle %d)", c.n)
		if err := p.kill9(); err != nil {
			return err
		}
		if err := p.start(); err != nil {
			return err
		}
		if err := h.freshClient(ctx, i); err != nil {
			return err
		}
		c.what += "; a new client asking it first found the route and the cluster table"
		return nil
	case faultDiskFull:
		t := m
		if ch.diskSlave {
			t = pickSlave()
		}
		c.targets, c.filled = []*member{t}, t
		h.mu.Lock()
		h.filling = t // before the fill: the broker may die of it at once
		h.mu.Unlock()
		t.proc.note("chaos: store full (cycle %d)", c.n)
		n, err := t.store.fill()
		c.what = fmt.Sprintf("fill %s's store (%s) to ENOSPC with %d bytes", t.name, roleOf(t, m), n)
		if d := h.untilRoll(t); d > c.hold {
			c.what += fmt.Sprintf(", held past the next segment roll (drawn %v)", c.hold)
			if d == maxDiskHold {
				c.what += fmt.Sprintf(" or for at most %v", maxDiskHold)
			}
			c.hold = d
		}
		return err
	}
	return fmt.Errorf("unknown fault kind %q", c.kind)
}

// freshClient checks what a client started now gets with NameServer i, just restarted, first
// in its list: once i listens again, the topic's route and the cluster table, from the
// NameServers that know them (i is not ready yet, and says so rather than "no such topic").
func (h *harness) freshClient(ctx context.Context, i int) error {
	ctl := h.topo.nodes["ctl"]
	addr := h.namesrvAddrOf(i)
	deadline := time.Now().Add(10 * time.Second)
	for {
		c, err := netns.Dial(ctl.ns, addr, time.Second)
		if err == nil {
			_ = c.Close()
			break
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the restarted NameServer %s does not listen: %w", namesrvNodes[i], err)
		}
		if err := sleepCtx(ctx, 20*time.Millisecond); err != nil {
			return err
		}
	}
	list := []string{addr}
	for j := range namesrvNodes {
		if j != i {
			list = append(list, h.namesrvAddrOf(j))
		}
	}
	ns := strings.Join(list, ";")
	if _, err := h.ctl(ctx, 20*time.Second, "topicRoute", "-n", ns, "-t", h.topic); err != nil {
		return fmt.Errorf("a new client with NameServers %s: %w", ns, err)
	}
	if _, err := h.ctl(ctx, 20*time.Second, "clusterList", "-n", ns); err != nil {
		return fmt.Errorf("a new client with NameServers %s: %w", ns, err)
	}
	return nil
}

// maxDiskHold bounds how far a full disk's hold is stretched to reach a segment roll.
const maxDiskHold = 20 * time.Second

// untilRoll estimates how long member t's log takes to reach its next segment boundary at the
// rate its log grew so far, plus a second: a full disk bites a broker's appends only at the
// roll (the current segment is allocated already), so a shorter hold would test only its
// small files. At most maxDiskHold; 0 when unknown.
func (h *harness) untilRoll(t *member) time.Duration {
	st := h.lastSnap.ha[t.name]
	elapsed := time.Since(h.benchFrom).Seconds()
	if st == nil || st.LogEnd <= 0 || elapsed <= 0 {
		return 0
	}
	bps := float64(st.LogEnd) / elapsed
	left := h.o.segment - st.LogEnd%h.o.segment
	d := time.Duration(float64(left)/bps*float64(time.Second)) + time.Second
	return min(d, maxDiskHold).Round(time.Millisecond)
}

// heal undoes the cycle's fault. Partitions are healed for the whole run (one fault at a time,
// so nothing else is cut), and every process is resumed and running afterwards whatever the
// fault was (healRest).
func (h *harness) heal(c *cycle) error {
	var errs []error
	switch c.kind {
	case faultStop:
		for _, t := range c.targets {
			t.proc.note("chaos: SIGCONT (cycle %d)", c.n)
			errs = append(errs, t.proc.signal(syscall.SIGCONT, false))
		}
	case faultDiskFull:
		errs = append(errs, c.filled.store.unfill())
		c.filled.proc.note("chaos: store no longer full (cycle %d)", c.n)
	}
	errs = append(errs, h.topo.healAll())
	for _, p := range c.killed {
		if !p.running() {
			errs = append(errs, p.start())
		}
	}
	errs = append(errs, h.healRest())
	return errors.Join(errs...)
}

// healRest resumes every stopped process and starts every process that is not running (one
// that died unexpectedly was reported when it did).
func (h *harness) healRest() error {
	var errs []error
	for _, p := range h.procs() {
		if p.isStopped() {
			errs = append(errs, p.signal(syscall.SIGCONT, false))
		}
		if !p.running() && p != h.bench {
			p.note("chaos: started again by the harness (it was not running)")
			errs = append(errs, p.start())
		}
	}
	return errors.Join(errs...)
}

// roleOf returns "master" or "slave": t's role when m was master.
func roleOf(t, m *member) string {
	if t == m {
		return "master"
	}
	return "slave"
}

// names lists members' names.
func names(ms []*member) string {
	out := make([]string, len(ms))
	for i, m := range ms {
		out[i] = m.name
	}
	return strings.Join(out, "+")
}

// ctl runs petrelctl with args in the control namespace and returns its output.
func (h *harness) ctl(ctx context.Context, timeout time.Duration, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	full := append([]string{"netns", "exec", h.topo.nodes["ctl"].ns, h.bin(binCtl), "--timeout", "15s"}, args...)
	cmd := exec.CommandContext(ctx, "ip", full...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("petrelctl %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return string(out), nil
}

// checkBlocks is the plumbing's self-test, run before any process starts: a partition between
// two namespaces blocks TCP both ways and nothing else, an isolation blocks everyone, a heal
// restores both, and the harness's own namespace cannot reach the run's listeners. Each
// listener sends a token of the run, so that reaching it is told from reaching something else
// at that address (outside the namespaces a proxy may accept any connection).
func (h *harness) checkBlocks() error {
	const port = 10999
	token := fmt.Sprintf("petrel-chaos %d %d\n", os.Getpid(), time.Now().UnixNano())
	n1, n2, n3, ctl := h.topo.nodes["a1"], h.topo.nodes["a2"], h.topo.nodes["a3"], h.topo.nodes["ctl"]
	addr := func(n *node) string { return fmt.Sprintf("%s:%d", n.addr, port) }
	for _, n := range []*node{n1, n2} {
		l, err := netns.Listen(n.ns, addr(n))
		if err != nil {
			return fmt.Errorf("self-test: listen in %s: %w", n.ns, err)
		}
		defer l.Close()
		go func() {
			for {
				c, err := l.Accept()
				if err != nil {
					return
				}
				_, _ = io.WriteString(c, token)
				_ = c.Close()
			}
		}()
	}
	// reached dials addr with dial and reports whether the run's listener answered.
	reached := func(dial func() (net.Conn, error)) (bool, error) {
		c, err := dial()
		if err != nil {
			return false, err
		}
		defer c.Close()
		_ = c.SetReadDeadline(time.Now().Add(3 * time.Second))
		buf := make([]byte, len(token))
		if _, err := io.ReadFull(c, buf); err != nil {
			return false, err
		}
		return string(buf) == token, nil
	}
	expect := func(from, to *node, want bool, when string) error {
		// A blocked dial waits out its timeout; one that must pass gets longer, so that a
		// loaded machine does not fail the self-test.
		timeout := 400 * time.Millisecond
		if want {
			timeout = 3 * time.Second
		}
		ok, err := reached(func() (net.Conn, error) { return netns.Dial(from.ns, addr(to), timeout) })
		switch {
		case want && !ok:
			return fmt.Errorf("self-test (%s): %s cannot reach %s: %v", when, from.name, to.name, err)
		case !want && ok:
			return fmt.Errorf("self-test (%s): %s still reaches %s", when, from.name, to.name)
		}
		return nil
	}
	steps := []func() error{
		func() error { return expect(n2, n1, true, "before any rule") },
		func() error { return expect(n1, n2, true, "before any rule") },
		func() error { return h.topo.cut(n1, n2) },
		func() error { return expect(n2, n1, false, "a1 cut from a2") },
		func() error { return expect(n1, n2, false, "a1 cut from a2") },
		func() error { return expect(n3, n1, true, "a1 cut from a2 only") },
		func() error { return h.topo.healAll() },
		func() error { return expect(n2, n1, true, "healed") },
		func() error { return h.topo.isolate(n1) },
		func() error { return expect(ctl, n1, false, "a1 isolated") },
		func() error { return expect(n1, n2, false, "a1 isolated") },
		func() error { return expect(ctl, n2, true, "a1 isolated, not a2") },
		func() error { return h.topo.healAll() },
		func() error { return expect(ctl, n1, true, "healed") },
	}
	for _, s := range steps {
		if err := s(); err != nil {
			return err
		}
	}
	// The subnet must exist only inside the run's namespaces: from the harness's own
	// namespace the listener must not be reached.
	if ok, _ := reached(func() (net.Conn, error) { return dialTimeout(addr(n1), 400*time.Millisecond) }); ok {
		return fmt.Errorf("self-test: the harness's namespace reaches %s: the subnet %s is not private here; pick another with --subnet", addr(n1), h.topo.subnet)
	}
	return nil
}

// firstIndex returns the index of kind in allKinds, for ordering tables.
func firstIndex(k faultKind) int { return slices.Index(allKinds, k) }
