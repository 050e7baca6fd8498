package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"
)

// startupTimeout bounds the first wait for a healthy cluster and for the topic's route.
const startupTimeout = 90 * time.Second

// harness is one run.
type harness struct {
	o      options
	out    io.Writer
	runDir string
	topo   *topology
	sp     *spawner
	probe  *prober

	namesrvs []*proc // in the order of namesrvNodes
	bench    *proc
	groups   []*group
	topic    string

	lastSnap    snapshot
	lastMasters map[string]*member
	// healthyAt are the times of the polls that found the cluster healthy.
	healthyAt []time.Time

	mu       sync.Mutex // guards what process exits report: problems, exits, filling
	problems []string
	exits    []procExit
	// filling is the member whose store is full now (its exit is then fail-stop, not a crash).
	filling *member
	outMu   sync.Mutex

	cycles  []*cycle
	samples []offsetSample
	// scratch is, per group, what the topic-change faults left its scratch topic as, as far as
	// acknowledged (runCycles only).
	scratch map[string]scratchTopic
	// topicDiffs are the members' topic tables that differ from scratch at the end (finish).
	topicDiffs []string
	started    time.Time
	benchFrom  time.Time
}

// procExit is a process's end the harness did not cause.
type procExit struct {
	at   time.Time
	name string
	err  string
	// onFullDisk says it ended while its own store was full.
	onFullDisk bool
}

// offsetSample is every queue's max offset of the run's topic, per group, at one moment: lost
// messages are placed in time by the first sample whose max passed their offset.
type offsetSample struct {
	at    time.Time
	label string
	max   map[string]map[int32]int64 // group -> queue -> max offset
}

// printf writes a line of the run's log to stdout.
func (h *harness) printf(format string, args ...any) {
	h.outMu.Lock()
	defer h.outMu.Unlock()
	fmt.Fprintf(h.out, format, args...)
}

// problem records what makes the run fail and prints it at once.
func (h *harness) problem(format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	h.mu.Lock()
	h.problems = append(h.problems, msg)
	h.mu.Unlock()
	h.printf("  PROBLEM %s: %s\n", clock(time.Now()), msg)
}

func (h *harness) bin(name string) string { return filepath.Join(h.o.binDir, name) }

// namesrvAddrOf returns NameServer i's address.
func (h *harness) namesrvAddrOf(i int) string {
	return fmt.Sprintf("%s:%d", h.topo.nodes[namesrvNodes[i]].addr, namesrvPort)
}

// nsAddr returns the namesrvAddr every broker and client is given: all the NameServers,
// ';'-separated.
func (h *harness) nsAddr() string {
	addrs := make([]string, len(namesrvNodes))
	for i := range namesrvNodes {
		addrs[i] = h.namesrvAddrOf(i)
	}
	return strings.Join(addrs, ";")
}

// procs returns every process of the cluster and the bench.
func (h *harness) procs() []*proc {
	ps := append([]*proc(nil), h.namesrvs...)
	for _, g := range h.groups {
		for _, m := range g.members {
			ps = append(ps, m.proc)
		}
	}
	if h.bench != nil {
		ps = append(ps, h.bench)
	}
	return ps
}

// dialTimeout dials from the harness's own namespace.
func dialTimeout(addr string, d time.Duration) (net.Conn, error) {
	return net.DialTimeout("tcp", addr, d)
}

// run carries out one chaos run and reports whether it passed; an error means it could not be
// carried out (or was interrupted).
func run(ctx context.Context, o options, stdout, stderr io.Writer) (pass bool, err error) {
	if os.Geteuid() != 0 {
		return false, errors.New("needs root (network namespaces, iptables, tmpfs mounts)")
	}
	if err := removeStale(stdout); err != nil {
		fmt.Fprintf(stderr, "petrel-chaos: cleaning up after earlier runs: %v\n", err)
	}
	if o.seed == 0 {
		o.seed = rand.Uint64()>>1 | 1
	}
	h := &harness{o: o, out: stdout, started: time.Now()}
	prefix := fmt.Sprintf("%s%d-", namePrefix, os.Getpid())
	h.runDir = filepath.Join(o.baseDir, prefix+time.Now().Format("20060102-150405"))
	if err := os.MkdirAll(h.runDir, 0o755); err != nil {
		return false, err
	}
	h.topo = newTopology(prefix, o.subnet)
	h.printf("chaos: seed=%d cycles=%d segment=%s write-through-mapping=%v mix=%s hold=%v-%v rate=%d msg/s run directory %s\n",
		o.seed, o.cycles, formatSize(o.segment), o.writeThroughMapping, o.mix, o.holdMin, o.holdMax, o.rate, h.runDir)
	keepLogs := false
	defer func() {
		if terr := h.teardown(o.keep, keepLogs || o.keep); terr != nil {
			fmt.Fprintf(stderr, "petrel-chaos: teardown: %v\n", terr)
		}
	}()
	// An interrupted or failed run keeps its logs (not its stores), and says where.
	interrupted := func() error {
		keepLogs = true
		return fmt.Errorf("interrupted; logs kept in %s", h.runDir)
	}
	if err := h.setup(ctx); err != nil {
		if ctx.Err() != nil {
			return false, interrupted()
		}
		keepLogs = true
		return false, fmt.Errorf("%w; logs kept in %s", err, h.runDir)
	}
	h.runCycles(ctx)
	if ctx.Err() != nil {
		return false, interrupted()
	}
	v := h.finish(ctx)
	if ctx.Err() != nil {
		return false, interrupted()
	}
	keepLogs = !v.pass
	if keepLogs && !o.keep {
		h.printf("chaos: logs kept in %s (stores removed; --keep / KEEP=1 keeps them too)\n", h.runDir)
	}
	return v.pass, nil
}

// setup builds the topology, checks it, starts the cluster, creates the topic and starts the
// bench.
func (h *harness) setup(ctx context.Context) error {
	if err := h.topo.create(); err != nil {
		return fmt.Errorf("cannot build the namespaces: %w", err)
	}
	if err := h.checkBlocks(); err != nil {
		return err
	}
	h.printf("chaos: topology: bridge %s in %s; %s\n", bridgeDev, h.topo.bridgeNS, h.describeNodes())
	h.printf("chaos: self-test passed: a partition blocks TCP both ways and only between its two namespaces, an isolation blocks everyone, a heal restores both, and %s is unreachable from the harness's namespace\n", h.topo.subnet)
	h.sp = newSpawner()
	h.groups = buildGroups(h.topo, h.runDir, h.o.storeSize)
	for _, g := range h.groups {
		for _, m := range g.members {
			if err := m.store.mount(); err != nil {
				return err
			}
		}
	}
	for i, name := range namesrvNodes {
		p := &proc{
			name: name, node: h.topo.nodes[name], sp: h.sp, logPath: filepath.Join(h.runDir, name+".log"),
			argv: func() (string, []string, error) {
				return h.bin(binNamesrv), []string{"--listen", h.namesrvAddrOf(i), "--registration-period", registrationPeriod.String()}, nil
			},
			onExit: h.onExit,
		}
		h.namesrvs = append(h.namesrvs, p)
		if err := p.start(); err != nil {
			return err
		}
	}
	for _, g := range h.groups {
		for _, m := range g.members {
			m.proc = &proc{
				name: m.name, node: m.node, sp: h.sp, logPath: filepath.Join(h.runDir, m.name+".log"),
				argv: func() (string, []string, error) {
					conf, err := brokerConfig(m, h.nsAddr(), h.o.segment, h.o.writeThroughMapping)
					if err != nil {
						return "", nil, err
					}
					if err := os.WriteFile(m.confPath, []byte(conf), 0o644); err != nil {
						return "", nil, err
					}
					return h.bin(binBroker), []string{"-c", m.confPath}, nil
				},
				onExit: h.onExit,
			}
			if err := m.proc.start(); err != nil {
				return err
			}
		}
	}
	self, err := os.Executable()
	if err != nil {
		return err
	}
	h.probe = &prober{node: h.topo.nodes["ctl"], sp: h.sp, self: self, nsAddr: h.nsAddr(), logPath: filepath.Join(h.runDir, "probe.log")}
	masters, why := h.waitHealthy(ctx, startupTimeout)
	if why != "" {
		return fmt.Errorf("the cluster did not become healthy within %v: %s (logs in %s)", startupTimeout, why, h.runDir)
	}
	h.printf("chaos: cluster healthy: %s\n", describeMasters(masters))
	h.topic = fmt.Sprintf("petrel-bench-chaos%d-0", os.Getpid())
	q := fmt.Sprint(h.o.queues)
	if _, err := h.ctl(ctx, 30*time.Second, "updateTopic", "-n", h.nsAddr(), "-c", clusterName, "-t", h.topic, "-r", q, "-w", q); err != nil {
		return err
	}
	if err := h.waitRoute(ctx); err != nil {
		return err
	}
	h.bench = &proc{
		name: "bench", node: h.topo.nodes["bench"], sp: h.sp, logPath: filepath.Join(h.runDir, "bench.log"), stamp: true,
		argv: func() (string, []string, error) {
			return h.bin(binBench), []string{
				"-n", h.nsAddr(), "--workload", h.o.workload, "--payload-dir", h.o.payloadDir,
				"--no-create-topic", "--topic-id", strings.TrimSuffix(strings.TrimPrefix(h.topic, "petrel-bench-"), "-0"),
				"--producer-rate", fmt.Sprint(h.o.rate), "--duration", "240h", "--warmup", "0",
				"--verify", "--retry-unknown", fmt.Sprint(h.o.retryUnknown), "--drain-timeout", h.o.drainTimeout.String(),
				"--progress-interval", "5s", "--json", filepath.Join(h.runDir, "bench.json"), "--log-level", "warn",
			}, nil
		},
		onExit: h.onExit,
	}
	h.benchFrom = time.Now()
	if err := h.bench.start(); err != nil {
		return err
	}
	// A few seconds of load before the first fault, so that every queue has data and the
	// bench's failover timeline knows the groups' rhythm.
	if err := sleepCtx(ctx, 5*time.Second); err != nil {
		return err
	}
	if !h.bench.running() {
		return fmt.Errorf("petrel-bench ended at its start: see %s", h.bench.logPath)
	}
	h.sample("start")
	return nil
}

// waitRoute waits until the topic's queues are on both groups.
func (h *harness) waitRoute(ctx context.Context) error {
	deadline := time.Now().Add(startupTimeout)
	for {
		resp, err := h.probe.call(probeReq{Op: "topicStats", Topic: h.topic}, 3*time.Second)
		if err == nil && resp.Err == "" && len(resp.TopicStats) == len(h.groups) {
			return nil
		}
		if time.Now().After(deadline) {
			why := ""
			if err != nil {
				why = err.Error()
			} else {
				why = fmt.Sprintf("%s (%d groups)", resp.Err, len(resp.TopicStats))
			}
			return fmt.Errorf("topic %s is not on every group after %v: %s", h.topic, startupTimeout, why)
		}
		if err := sleepCtx(ctx, 250*time.Millisecond); err != nil {
			return err
		}
	}
}

// sample records the topic's queue max offsets (best effort: a group whose master does not
// answer is missing from it).
func (h *harness) sample(label string) {
	resp, err := h.probe.call(probeReq{Op: "topicStats", Topic: h.topic}, 2*time.Second)
	if err != nil {
		return
	}
	s := offsetSample{at: time.Now(), label: label, max: map[string]map[int32]int64{}}
	for _, bs := range resp.TopicStats {
		q := map[int32]int64{}
		for _, qs := range bs.Stats.Queues {
			q[qs.QueueID] = qs.MaxOffset
		}
		s.max[bs.BrokerName] = q
	}
	h.samples = append(h.samples, s)
}

// onExit records a process's end that the harness did not cause.
func (h *harness) onExit(p *proc, err error) {
	h.mu.Lock()
	full := h.filling != nil && h.filling.proc == p
	h.exits = append(h.exits, procExit{at: time.Now(), name: p.name, err: exitText(err), onFullDisk: full})
	h.mu.Unlock()
	if p == h.bench {
		h.printf("  %s bench exited on its own: %s\n", clock(time.Now()), exitText(err))
		return
	}
	if full {
		h.printf("  %s %s exited while its store was full (fail-stop): %s; it is started again at the heal\n", clock(time.Now()), p.name, exitText(err))
		return
	}
	h.problem("%s exited unexpectedly: %s (see %s); it is started again at the heal", p.name, exitText(err), p.logPath)
}

// runCycles injects the faults.
func (h *harness) runCycles(ctx context.Context) {
	ch := newChooser(h.o.seed, h.o.weights, h.o.holdMin, h.o.holdMax)
	h.printf("chaos: %d cycles, mix %s\n", h.o.cycles, formatWeights(h.o.weights))
	for n := 1; n <= h.o.cycles; n++ {
		if ctx.Err() != nil {
			return
		}
		if h.o.budget > 0 && time.Since(h.started) > h.o.budget {
			h.problem("the time budget of %v was used up after %d of %d cycles", h.o.budget, n-1, h.o.cycles)
			return
		}
		if !h.bench.running() {
			h.problem("the bench ended before cycle %d (see %s)", n, h.bench.logPath)
			return
		}
		choice := ch.next(len(h.groups))
		c := &cycle{n: n, kind: choice.kind, hold: choice.hold}
		if c.kind != faultNamesrvRestart && c.kind != faultNsRestart {
			c.g = h.groups[choice.group]
			c.master = h.lastMasters[c.g.name]
		}
		if c.kind == faultElect || c.kind == faultTopicChange {
			c.hold = 0
		}
		h.cycles = append(h.cycles, c)
		h.sample(fmt.Sprintf("cycle %d injected", n))
		c.injected = time.Now()
		err := h.apply(ctx, c, choice)
		h.printf("cycle %3d/%d %s %-17s %-8s %s, hold %v\n", n, h.o.cycles, clock(c.injected), c.kind, groupName(c.g), c.what, c.hold)
		if err != nil {
			c.problems = append(c.problems, err.Error())
			h.problem("cycle %d %s: %v", n, c.kind, err)
		}
		if err := sleepCtx(ctx, c.hold); err != nil {
			_ = h.heal(c)
			return
		}
		c.healed = time.Now()
		if err := h.heal(c); err != nil {
			c.problems = append(c.problems, err.Error())
			h.problem("cycle %d %s: heal: %v", n, c.kind, err)
		}
		h.mu.Lock()
		h.filling = nil
		h.mu.Unlock()
		masters, why := h.waitHealthy(ctx, h.o.healthTimeout)
		if ctx.Err() != nil {
			return
		}
		if why != "" {
			c.problems = append(c.problems, "not healthy: "+why)
			h.problem("cycle %d %s %s: the cluster was not healthy %v after the heal: %s", n, c.kind, groupName(c.g), h.o.healthTimeout, why)
			h.printf("chaos: no more faults: the cluster did not recover from cycle %d\n", n)
			return
		}
		c.healthy, c.mastersAfter = time.Now(), masters
		h.sample(fmt.Sprintf("cycle %d healthy", n))
		c.flowing = h.waitFlowing(ctx, h.o.flowTimeout)
		h.printf("          %s healed, healthy %v later: %s; %s\n", clock(c.healed), c.healthy.Sub(c.healed).Round(time.Millisecond),
			describeMasters(masters), h.describeFlow(c))
		for _, g := range h.groups {
			if c.flowing[g.name].IsZero() {
				c.problems = append(c.problems, fmt.Sprintf("sends to %s not back %v after the recovery", g.name, h.o.flowTimeout))
			}
		}
		if err := sleepCtx(ctx, h.o.settle); err != nil {
			return
		}
	}
}

// sendTotals returns, per group, the sum of the topic's queue max offsets on its master.
func (h *harness) sendTotals() map[string]int64 {
	resp, err := h.probe.call(probeReq{Op: "topicStats", Topic: h.topic}, 2*time.Second)
	if err != nil {
		return nil
	}
	out := map[string]int64{}
	for _, bs := range resp.TopicStats {
		var sum int64
		for _, q := range bs.Stats.Queues {
			sum += q.MaxOffset
		}
		out[bs.BrokerName] = sum
	}
	return out
}

// waitFlowing waits, up to timeout, until the bench's sends reach every group again: the
// group's queue max offsets grow past what they were when the wait began. It returns when each
// group was seen growing (zero for a group that was not). The cluster's health is the brokers'
// view; this is the load's, and without it the next fault could come while a producer still
// stays away from a group, hiding that fault's own effect.
func (h *harness) waitFlowing(ctx context.Context, timeout time.Duration) map[string]time.Time {
	seen := map[string]time.Time{}
	base := h.sendTotals()
	deadline := time.Now().Add(timeout)
	for len(seen) < len(h.groups) && time.Now().Before(deadline) {
		if sleepCtx(ctx, pollInterval) != nil {
			break
		}
		now := h.sendTotals()
		for _, g := range h.groups {
			b, okb := base[g.name]
			v, okv := now[g.name]
			switch {
			case !seen[g.name].IsZero():
			case !okb && okv:
				base[g.name] = v // its master did not answer the first time
			case okb && okv && v > b:
				seen[g.name] = time.Now()
			}
		}
	}
	return seen
}

// describeFlow says when the sends reached each group again, from the heal.
func (h *harness) describeFlow(c *cycle) string {
	var parts []string
	for _, g := range h.groups {
		if t := c.flowing[g.name]; !t.IsZero() {
			parts = append(parts, fmt.Sprintf("%s %v", g.name, t.Sub(c.healed).Round(time.Millisecond)))
		} else {
			parts = append(parts, fmt.Sprintf("%s NOT within %v", g.name, h.o.flowTimeout))
		}
	}
	return "sends flow to " + strings.Join(parts, ", ") + " after the heal"
}

// groupName returns the group's name, "cluster" for nil.
func groupName(g *group) string {
	if g == nil {
		return "cluster"
	}
	return g.name
}

// describeMasters lists the masters: "broker-a=a2 broker-b=b1".
func describeMasters(ms map[string]*member) string {
	var parts []string
	for _, g := range []string{raftGroupName, staticGroupName} {
		if m := ms[g]; m != nil {
			parts = append(parts, g+"="+m.name)
		}
	}
	return "masters " + strings.Join(parts, " ")
}

// describeNodes lists every node's namespace and address.
func (h *harness) describeNodes() string {
	var parts []string
	for _, nh := range nodeHosts {
		n := h.topo.nodes[nh.name]
		parts = append(parts, fmt.Sprintf("%s=%s", n.name, n.addr))
	}
	return fmt.Sprintf("namespaces %s<name>: %s", h.topo.prefix, strings.Join(parts, " "))
}

// sleepCtx sleeps for d or until ctx ends.
func sleepCtx(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// teardown stops every process, unmounts the stores (copied into the run directory first when
// keepStores), deletes the namespaces and removes the run directory unless keepLogs.
func (h *harness) teardown(keepStores, keepLogs bool) error {
	var errs []error
	if h.bench != nil && h.bench.running() {
		_ = h.bench.signal(syscall.SIGKILL, true)
		_ = h.bench.waitExit(10 * time.Second)
	}
	var wg sync.WaitGroup
	var emu sync.Mutex
	for _, g := range h.groups {
		for _, m := range g.members {
			if m.proc == nil {
				continue
			}
			wg.Go(func() {
				if err := m.proc.terminate(15 * time.Second); err != nil {
					emu.Lock()
					errs = append(errs, err)
					emu.Unlock()
				}
			})
		}
	}
	wg.Wait()
	for _, p := range h.namesrvs {
		errs = append(errs, p.terminate(5*time.Second))
	}
	if h.probe != nil {
		h.probe.close()
	}
	for _, g := range h.groups {
		for _, m := range g.members {
			errs = append(errs, m.store.unmount(keepStores))
		}
	}
	if h.topo != nil {
		errs = append(errs, h.topo.destroy())
	}
	switch {
	case keepLogs && !keepStores:
		errs = append(errs, os.RemoveAll(filepath.Join(h.runDir, "store")))
	case !keepLogs:
		errs = append(errs, os.RemoveAll(h.runDir))
	}
	return errors.Join(errs...)
}
