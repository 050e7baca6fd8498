package main

import (
	"bufio"
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"
)

// The bars of the verdict.
const (
	// raftGapMedian and raftGapMax bound, per fault kind and target, the Raft group's send
	// gap (or its recovery after the heal, when the fault leaves no one to fail over to).
	raftGapMedian = time.Second
	raftGapMax    = 3 * time.Second
	// staticRecoveryMax bounds how long after the heal (the master's return) the static
	// group's sends may take to come back: one route refresh of the client
	// (client.DefaultRouteRefreshInterval, which the bench keeps).
	staticRecoveryMax = 30 * time.Second
	// windowLead is how long before a fault's injection a send break may start and still be
	// the fault's: the last acknowledgement before the break comes just before the fault.
	windowLead = time.Second
)

// benchResult is what the harness reads of petrel-bench's JSON result.
type benchResult struct {
	MessagesSent          int64           `json:"messagesSent"`
	MessagesAcked         int64           `json:"messagesAcked"`
	MessagesConsumed      int64           `json:"messagesConsumed"`
	Failed                int64           `json:"failed"`
	Unknown               int64           `json:"unknown"`
	Lost                  int64           `json:"lost"`
	Duplicated            int64           `json:"duplicated"`
	DuplicatedAfterRetry  int64           `json:"duplicatedAfterRetry"`
	Reordered             int64           `json:"reordered"`
	Corrupted             int64           `json:"corrupted"`
	Phantom               int64           `json:"phantom"`
	UnknownDelivered      int64           `json:"unknownDelivered"`
	Resent                int64           `json:"resent"`
	Verified              bool            `json:"verified"`
	Passed                bool            `json:"passed"`
	Drained               bool            `json:"drained"`
	Interrupted           bool            `json:"interrupted"`
	Problems              []string        `json:"problems"`
	Failovers             []failoverEvent `json:"failovers"`
	FailoversOmitted      int64           `json:"failoversOmitted"`
	TestSeconds           float64         `json:"testSeconds"`
	Topics                int             `json:"topics"`
	ProducersPerTopic     int             `json:"producersPerTopic"`
	ProducerRate          int             `json:"producerRate"`
	AggregatedPublishRate float64         `json:"aggregatedPublishRate"`
	// Counts a newer verifier adds (a final read of every queue): found anywhere in the JSON,
	// 0 when absent.
	Inconsistent    int64 `json:"-"`
	OffsetMovedBack int64 `json:"-"`
}

// failoverEvent is a bench.FailoverEvent as its JSON has it.
type failoverEvent struct {
	BrokerName  string `json:"brokerName"`
	Kind        string `json:"kind"`
	OldAddr     string `json:"oldAddr"`
	NewAddr     string `json:"newAddr"`
	LastUnixMs  int64  `json:"lastUnixMs"`
	FirstUnixMs int64  `json:"firstUnixMs"`
	GapMs       int64  `json:"gapMs"`
}

// readBench reads the bench's JSON result.
func readBench(path string) (*benchResult, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var r benchResult
	if err := json.Unmarshal(data, &r); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	var raw map[string]any
	if err := json.Unmarshal(data, &raw); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	r.Inconsistent, _ = findCount(raw, "inconsistent", 3)
	r.OffsetMovedBack, _ = findCount(raw, "offsetMovedBack", 3)
	return &r, nil
}

// findCount returns the number under key in m or in the objects nested in it, depth levels
// deep at most: the verifier's counts sit at the top of the result today, and may move into an
// object of their own.
func findCount(m map[string]any, key string, depth int) (int64, bool) {
	if v, ok := m[key].(float64); ok {
		return int64(v), true
	}
	if depth == 0 {
		return 0, false
	}
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		if sub, ok := m[k].(map[string]any); ok {
			if v, ok := findCount(sub, key, depth-1); ok {
				return v, true
			}
		}
	}
	return 0, false
}

// logCheck is one group's log comparison at the end.
type logCheck struct {
	g         *group
	master    *member
	from, to  int64
	sums      map[string]string // member name -> checksum
	ends      map[string]int64
	errs      []string
	identical bool
}

// compareLogs waits until every member holds the master's whole log and compares the members'
// checksums over the same range.
func (h *harness) compareLogs(masters map[string]*member) []logCheck {
	var out []logCheck
	for _, g := range h.groups {
		lc := logCheck{g: g, master: masters[g.name], sums: map[string]string{}, ends: map[string]int64{}}
		if lc.master == nil {
			lc.errs = append(lc.errs, "no master")
			out = append(out, lc)
			continue
		}
		deadline := time.Now().Add(60 * time.Second)
		for {
			s := h.poll()
			caught := true
			mst := s.ha[lc.master.name]
			lc.from = 0
			for _, m := range g.members {
				st := s.ha[m.name]
				if st == nil || mst == nil || st.LogEnd != mst.LogEnd {
					caught = false
				}
				if st != nil {
					lc.ends[m.name] = st.LogEnd
					lc.from = max(lc.from, st.LogMin)
				}
			}
			if mst != nil {
				lc.to = mst.LogEnd
			}
			if caught || time.Now().After(deadline) {
				if !caught {
					lc.errs = append(lc.errs, fmt.Sprintf("members did not reach the master's log end %d within 60s: ends %v", lc.to, lc.ends))
				}
				break
			}
			time.Sleep(250 * time.Millisecond)
		}
		lc.identical = len(lc.errs) == 0
		var first string
		for _, m := range g.members {
			resp, err := h.probe.call(probeReq{Op: "checksum", Addr: m.addr(), From: lc.from, To: lc.to}, 60*time.Second)
			switch {
			case err != nil:
				lc.errs = append(lc.errs, fmt.Sprintf("%s: %v", m.name, err))
			case resp.Err != "" || resp.Checksum == nil:
				lc.errs = append(lc.errs, fmt.Sprintf("%s: %s", m.name, resp.Err))
			default:
				lc.sums[m.name] = resp.Checksum.Checksum
			}
			if first == "" {
				first = lc.sums[m.name]
			}
			if lc.sums[m.name] == "" || lc.sums[m.name] != first {
				lc.identical = false
			}
		}
		out = append(out, lc)
	}
	return out
}

// truncation is a member cutting its log, as its own log tells.
type truncation struct {
	m      *member
	at     time.Time
	where  string // file:line
	logEnd int64
	to     int64
	// resync: a static slave set its log aside to copy the master's (no epochs to cut to).
	resync bool
	// deposed: the first cut of a member that had been master and was not yet back in sync
	// (see scanBrokerLog).
	deposed bool
	// restarted: the restart that carries the cut out followed (Raft members).
	restarted bool
	c         *cycle
}

// The broker log lines the analysis reads (slog text: time=... level=... msg="..." k=v ...).
var (
	logTimeRE     = regexp.MustCompile(`^time=(\S+) `)
	logEndRE      = regexp.MustCompile(` logEnd=(\d+)`)
	truncateToRE  = regexp.MustCompile(` truncateTo=(\d+)`)
	slaveEndRE    = regexp.MustCompile(` slaveEnd=(\d+)`)
	masterEndRE   = regexp.MustCompile(` masterEnd=(\d+)`)
	startedRoleRE = regexp.MustCompile(`msg="broker started".* role=(\S+)`)
)

const (
	msgTruncate = "this log holds what the master never confirmed: truncating it through a restart"
	msgResync   = "setting it aside and copying the master's"
)

// truncations reads every member's log for its cuts, following its role from line to line.
func (h *harness) truncations() ([]truncation, []string) {
	var out []truncation
	var errs []string
	for _, g := range h.groups {
		for _, m := range g.members {
			ts, err := scanBrokerLog(m, h.healthyAt)
			if err != nil {
				errs = append(errs, err.Error())
			}
			for i := range ts {
				ts[i].c = h.cycleAt(ts[i].at)
			}
			out = append(out, ts...)
		}
	}
	slices.SortFunc(out, func(a, b truncation) int { return a.at.Compare(b.at) })
	return out, errs
}

// scanBrokerLog finds a member's truncations in its log and tells which were a returning
// deposed master's. A member is deposed from the moment it stops being master (it gives the
// role up, hands it over, or starts again after dying as master) until the cluster is next
// seen healthy (healthy, sorted: it then holds the master's log in sync) or it becomes master
// again. A deposed master may hold what the group never confirmed, and cuts it once on its
// way back: that first cut is expected. Any other cut (a member that was no master, or one cut
// again after the first, as in a truncation loop) is not.
func scanBrokerLog(m *member, healthy []time.Time) ([]truncation, error) {
	f, err := os.Open(m.proc.logPath)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var out []truncation
	master, deposed := false, false
	next := 0 // the next healthy time to apply
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 4<<20)
	for n := 1; sc.Scan(); n++ {
		line := sc.Text()
		if !strings.HasPrefix(line, "time=") {
			continue
		}
		var at time.Time
		if mm := logTimeRE.FindStringSubmatch(line); mm != nil {
			at, _ = time.Parse(time.RFC3339Nano, mm[1])
		}
		for next < len(healthy) && !healthy[next].After(at) {
			if !master {
				deposed = false
			}
			next++
		}
		lose := func() {
			if master {
				master, deposed = false, true
			}
		}
		switch {
		case strings.Contains(line, `msg="acting as master"`), strings.Contains(line, `msg="promoted to master by electMaster`):
			master, deposed = true, false
		case strings.Contains(line, `msg="master role given up"`), strings.Contains(line, `msg="master role handed over by electMaster`):
			lose()
		case strings.Contains(line, `msg="broker started"`):
			lose() // a process that starts is no master yet, whatever it was before it died
			if !m.g.raft {
				// A static broker's role is its config's (the elected file's after electMaster).
				if mm := startedRoleRE.FindStringSubmatch(line); mm != nil && mm[1] != roleSlave {
					master, deposed = true, false
				}
			}
		case strings.Contains(line, msgTruncate):
			t := truncation{m: m, at: at, where: fmt.Sprintf("%s:%d", m.proc.logPath, n), deposed: deposed}
			t.logEnd = atoiMatch(logEndRE, line)
			t.to = atoiMatch(truncateToRE, line)
			out = append(out, t)
			deposed = false
		case strings.Contains(line, msgResync):
			t := truncation{m: m, at: at, where: fmt.Sprintf("%s:%d", m.proc.logPath, n), deposed: deposed, resync: true}
			t.logEnd = atoiMatch(slaveEndRE, line)
			t.to = atoiMatch(masterEndRE, line)
			out = append(out, t)
			deposed = false
		case strings.Contains(line, `msg="restarting the broker in place"`):
			if len(out) > 0 {
				out[len(out)-1].restarted = true
			}
		}
	}
	return out, sc.Err()
}

func atoiMatch(re *regexp.Regexp, s string) int64 {
	mm := re.FindStringSubmatch(s)
	if mm == nil {
		return -1
	}
	v, _ := strconv.ParseInt(mm[1], 10, 64)
	return v
}

// cycleAt returns the cycle whose window (from its injection to the next one's) holds t.
func (h *harness) cycleAt(t time.Time) *cycle {
	var found *cycle
	for _, c := range h.cycles {
		if !t.Before(c.injected.Add(-windowLead)) {
			found = c
		}
	}
	return found
}

// gapStat is one group's send breaks in one cycle's window.
type gapStat struct {
	// gap is the longest break; recovery how long after the heal the last break ended.
	gap, recovery time.Duration
	events        int
	// open: a break that never ended (no acknowledgement from the group to the end of sending).
	open bool
	// carried: a break that started before the window was still on at its start (the group
	// was not being served when the fault came), so the fault's own effect is unmeasured;
	// carriedAt is when that break started.
	carried   bool
	carriedAt time.Time
}

// gapsOf measures group g's send breaks (the bench's failover events of kind "send") that
// started in [from, to), against heal time healed.
func gapsOf(res *benchResult, g *group, from, to, healed time.Time) gapStat {
	var s gapStat
	for _, e := range res.Failovers {
		if e.Kind != "send" || e.BrokerName != g.name {
			continue
		}
		last := time.UnixMilli(e.LastUnixMs)
		if last.Before(from) {
			end := time.UnixMilli(e.FirstUnixMs)
			if e.NewAddr == "" {
				end = last.Add(time.Duration(e.GapMs) * time.Millisecond)
			}
			if end.After(from) {
				s.carried, s.carriedAt = true, last
			}
			continue
		}
		if !last.Before(to) {
			continue
		}
		s.events++
		s.gap = max(s.gap, time.Duration(e.GapMs)*time.Millisecond)
		end := time.UnixMilli(e.FirstUnixMs)
		if e.NewAddr == "" {
			s.open = true
			end = last.Add(time.Duration(e.GapMs) * time.Millisecond)
		}
		s.recovery = max(s.recovery, end.Sub(healed))
	}
	return s
}

// cycleGaps holds every cycle's gaps per group.
type cycleGaps map[*cycle]map[string]gapStat

// measureGaps measures every cycle's send breaks for every group; sendStop is when the bench
// was told to stop.
func (h *harness) measureGaps(res *benchResult, sendStop time.Time) cycleGaps {
	out := cycleGaps{}
	for i, c := range h.cycles {
		to := sendStop
		if i+1 < len(h.cycles) {
			to = h.cycles[i+1].injected.Add(-windowLead)
		}
		healed := cmp.Or(c.healed, c.injected)
		out[c] = map[string]gapStat{}
		for _, g := range h.groups {
			out[c][g.name] = gapsOf(res, g, c.injected.Add(-windowLead), to, healed)
		}
	}
	return out
}

// barMetric is what the bar measures for group g in cycle c: the whole gap, or, when the fault
// leaves g no one to fail over to, its recovery after the heal.
func barMetric(c *cycle, g *group, s gapStat) time.Duration {
	if c.inherent(g) {
		return s.recovery
	}
	return s.gap
}

// gapRow is a line of the per-fault table: one fault kind on one target, seen from one group.
type gapRow struct {
	kind   faultKind
	target string
	n      int
	// unmeasured counts the cycles in which the group was already without service when the
	// fault came (gapStat.carried): left out of the figures.
	unmeasured int
	gaps       []time.Duration
	recs       []time.Duration
	metrics    []time.Duration
	// inherent: the fault leaves the group no one to fail over to (the bar is its recovery).
	inherent bool
	fail     string
}

// median returns the median of ds (the upper one of an even count), 0 for none.
func median(ds []time.Duration) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[len(s)/2]
}

func maxOf(ds []time.Duration) time.Duration {
	var m time.Duration
	for _, d := range ds {
		m = max(m, d)
	}
	return m
}

// gapTable builds group g's rows and judges them against its bar.
func (h *harness) gapTable(gaps cycleGaps, g *group) []*gapRow {
	rows := map[string]*gapRow{}
	var order []*gapRow
	for _, c := range h.cycles {
		if c.healthy.IsZero() {
			continue // the run stopped there: its gaps run into the end phase
		}
		key := string(c.kind) + "|" + groupName(c.g)
		r := rows[key]
		if r == nil {
			r = &gapRow{kind: c.kind, target: groupName(c.g)}
			rows[key] = r
			order = append(order, r)
		}
		s := gaps[c][g.name]
		r.n++
		if s.carried {
			r.unmeasured++
			continue
		}
		r.gaps = append(r.gaps, s.gap)
		r.recs = append(r.recs, s.recovery)
		r.metrics = append(r.metrics, barMetric(c, g, s))
		r.inherent = r.inherent || c.inherent(g)
	}
	slices.SortFunc(order, func(a, b *gapRow) int {
		return cmp.Or(cmp.Compare(firstIndex(a.kind), firstIndex(b.kind)), strings.Compare(a.target, b.target))
	})
	for _, r := range order {
		what := "gap"
		if r.inherent {
			what = "recovery after the heal"
		}
		switch {
		case g.raft && len(r.metrics) >= h.o.medianMin && median(r.metrics) > raftGapMedian:
			r.fail = fmt.Sprintf("median %s %s > %s", what, fmtDur(median(r.metrics)), fmtDur(raftGapMedian))
		case g.raft && maxOf(r.metrics) > raftGapMax:
			r.fail = fmt.Sprintf("max %s %s > %s", what, fmtDur(maxOf(r.metrics)), fmtDur(raftGapMax))
		case !g.raft && maxOf(r.recs) > staticRecoveryMax:
			r.fail = fmt.Sprintf("max recovery after the heal %s > %s (one route refresh)", fmtDur(maxOf(r.recs)), fmtDur(staticRecoveryMax))
		}
	}
	return order
}

// fmtDur renders a duration for the tables: 0, 420ms, 1.9s, 35s.
func fmtDur(d time.Duration) string {
	switch {
	case d <= 0:
		return "0"
	case d < time.Second:
		return fmt.Sprintf("%dms", d.Milliseconds())
	case d < 10*time.Second:
		return fmt.Sprintf("%.2fs", d.Seconds())
	}
	return fmt.Sprintf("%.0fs", d.Seconds())
}

// lostRE parses the verifier's lost-message lines.
var lostRE = regexp.MustCompile(`acknowledged at (\S+)@(\S+)#(\d+) offset (\d+)`)

// placeLost tells between which samples of the queue's max offset a lost message's offset was
// first passed: when it was stored and acknowledged.
func (h *harness) placeLost(problem string) string {
	mm := lostRE.FindStringSubmatch(problem)
	if mm == nil {
		return ""
	}
	grp := mm[2]
	q, _ := strconv.ParseInt(mm[3], 10, 32)
	off, _ := strconv.ParseInt(mm[4], 10, 64)
	prev := ""
	for _, s := range h.samples {
		qs, ok := s.max[grp]
		if !ok {
			continue
		}
		if max, ok := qs[int32(q)]; ok && max > off {
			if prev == "" {
				prev = "the start"
			}
			where := fmt.Sprintf("stored between %s and %s (%s)", prev, s.label, clock(s.at))
			if c := h.cycleAt(s.at.Add(-time.Millisecond)); c != nil && strings.HasPrefix(s.label, "cycle") {
				where += fmt.Sprintf("; cycle %d was %s on %s: %s", c.n, c.kind, groupName(c.g), c.what)
			}
			return where
		}
		prev = fmt.Sprintf("%s (%s)", s.label, clock(s.at))
	}
	return "stored after the last sample"
}

// seqRE finds the producer and sequence number in a verifier problem line.
var seqRE = regexp.MustCompile(`producer (\d+) message (\d+)`)

// progressRE parses the elapsed time of a bench progress line ("[  15.0s] test ...").
var progressRE = regexp.MustCompile(`^\[\s*([0-9.]+)s\] `)

// benchStart returns when the bench's producers started, from the first progress line of its
// stamped log (its elapsed time subtracted from the time the line arrived).
func benchStart(path string) (time.Time, bool) {
	f, err := os.Open(path)
	if err != nil {
		return time.Time{}, false
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 4<<20)
	for sc.Scan() {
		stamp, text, ok := strings.Cut(sc.Text(), " | ")
		if !ok {
			continue
		}
		mm := progressRE.FindStringSubmatch(text)
		if mm == nil {
			continue
		}
		at, err := time.ParseInLocation("15:04:05.000", stamp, time.Local)
		secs, err2 := strconv.ParseFloat(mm[1], 64)
		if err != nil || err2 != nil {
			continue
		}
		now := time.Now()
		at = time.Date(now.Year(), now.Month(), now.Day(), at.Hour(), at.Minute(), at.Second(), at.Nanosecond(), time.Local)
		if at.After(now) {
			at = at.AddDate(0, 0, -1) // the run crossed midnight
		}
		return at.Add(-time.Duration(secs * float64(time.Second))), true
	}
	return time.Time{}, false
}

// placeSeq tells when a message named in a verifier problem was due to be sent: the bench's
// producers share one schedule, message seq of a producer being due about
// start + seq*producers/rate (the send may start later when the producer was held up).
func (h *harness) placeSeq(problem string, res *benchResult, start time.Time) string {
	mm := seqRE.FindStringSubmatch(problem)
	if mm == nil || start.IsZero() || res.ProducerRate <= 0 {
		return ""
	}
	seq, _ := strconv.ParseInt(mm[2], 10, 64)
	producers := max(1, res.Topics*res.ProducersPerTopic)
	due := start.Add(time.Duration(float64(seq) * float64(producers) / float64(res.ProducerRate) * float64(time.Second)))
	where := fmt.Sprintf("due to be sent %s", clock(due))
	if c := h.cycleAt(due); c != nil {
		where += fmt.Sprintf(", in the window of cycle %d (%s %s at %s: %s)", c.n, c.kind, groupName(c.g), clock(c.injected), c.what)
	} else {
		where += ", before the first fault"
	}
	return where
}

// offsetsBack returns, per cycle, the queues of each group whose max offset went back between
// the samples at its injection and at its recovery: messages the group's new master does not
// hold (acknowledged or not).
func (h *harness) offsetsBack() map[int]string {
	out := map[int]string{}
	var prev *offsetSample
	for i := range h.samples {
		s := &h.samples[i]
		if prev != nil {
			var parts []string
			for _, g := range h.groups {
				var back, queues int64
				for q, m := range s.max[g.name] {
					if p, ok := prev.max[g.name][q]; ok && m < p {
						back += p - m
						queues++
					}
				}
				if back > 0 {
					parts = append(parts, fmt.Sprintf("%s queue max offsets went back by %d message(s) over %d queue(s)", g.name, back, queues))
				}
			}
			if len(parts) > 0 {
				if c := h.cycleAt(s.at.Add(-time.Millisecond)); c != nil {
					out[c.n] += strings.Join(parts, "; ")
				}
			}
		}
		prev = s
	}
	return out
}

// verdict is the run's outcome.
type verdict struct {
	pass bool
	line string
}

// finish heals, stops the bench, compares the logs, reads the truncations and gaps, prints the
// tables and returns the verdict.
func (h *harness) finish(ctx context.Context) verdict {
	h.printf("chaos: %d cycle(s) done; healing everything and waiting for a healthy cluster\n", len(h.cycles))
	if err := h.topo.healAll(); err != nil {
		h.problem("final heal: %v", err)
	}
	if err := h.healRest(); err != nil {
		h.problem("final heal: %v", err)
	}
	masters, why := h.waitHealthy(ctx, h.o.healthTimeout)
	if why != "" {
		h.problem("the cluster was not healthy %v after the final heal: %s", h.o.healthTimeout, why)
		masters = h.lastMasters
	} else {
		h.printf("chaos: cluster healthy: %s\n", describeMasters(masters))
	}
	h.sample("the end")
	h.topicDiffs = h.checkTopicTables(ctx, topicTablesTimeout)
	// The bench ends its test phase on SIGINT, drains and writes its result.
	sendStop := time.Now()
	res := h.stopBench()
	logs := h.compareLogs(masters)
	truncs, terrs := h.truncations()
	for _, e := range terrs {
		h.problem("cannot read a broker log: %s", e)
	}
	var gaps cycleGaps
	if res != nil {
		gaps = h.measureGaps(res, sendStop)
	}
	return h.report(res, logs, truncs, gaps)
}

// stopBench ends the bench's test phase and waits for its result.
func (h *harness) stopBench() *benchResult {
	path := filepath.Join(h.runDir, "bench.json")
	if h.bench.running() {
		h.printf("chaos: stopping the bench (SIGINT: it drains, up to %v, and reports)\n", h.o.drainTimeout)
		_ = h.bench.signal(syscall.SIGINT, true)
		if err := h.bench.waitExit(h.o.drainTimeout + 90*time.Second); err != nil {
			h.problem("the bench did not end after SIGINT: %v; killed", err)
			_ = h.bench.kill9()
		}
	}
	res, err := readBench(path)
	if err != nil {
		h.problem("no bench result: %v (see %s)", err, h.bench.logPath)
		return nil
	}
	return res
}

// report prints the tables and returns the verdict.
func (h *harness) report(res *benchResult, logs []logCheck, truncs []truncation, gaps cycleGaps) verdict {
	var reasons []string
	h.printf("\n== bench\n")
	if res != nil {
		h.printf("sent=%d acked=%d consumed=%d failed=%d unknown=%d resent=%d duplicatedAfterRetry=%d unknownDelivered=%d drained=%t passed=%t publish %.0f msg/s over %.0fs\n",
			res.MessagesSent, res.MessagesAcked, res.MessagesConsumed, res.Failed, res.Unknown, res.Resent,
			res.DuplicatedAfterRetry, res.UnknownDelivered, res.Drained, res.Passed, res.AggregatedPublishRate, res.TestSeconds)
		var start time.Time
		if h.bench != nil {
			start, _ = benchStart(h.bench.logPath)
		}
		for _, p := range res.Problems {
			line := "  " + p
			if w := h.placeSeq(p, res, start); w != "" {
				line += "\n      -> " + w
			}
			if strings.HasPrefix(p, "lost:") {
				if w := h.placeLost(p); w != "" {
					line += "\n      -> " + w
				}
			}
			h.printf("%s\n", line)
		}
		counts := []struct {
			name string
			n    int64
		}{{"lost", res.Lost}, {"inconsistent", res.Inconsistent}, {"duplicated", res.Duplicated}, {"reordered", res.Reordered},
			{"corrupted", res.Corrupted}, {"phantom", res.Phantom}, {"offsetMovedBack", res.OffsetMovedBack}}
		for _, c := range counts {
			if c.n > 0 {
				reasons = append(reasons, fmt.Sprintf("%s=%d", c.name, c.n))
			}
		}
		if !res.Passed && len(reasons) == 0 {
			reasons = append(reasons, "the bench's verification did not pass")
		}
		if !res.Drained {
			reasons = append(reasons, "the bench did not drain")
		}
		if res.FailoversOmitted > 0 {
			// The bench keeps 100 events per group and kind: a group with 100 send events may
			// have had more, whose gaps nobody measured.
			sends := map[string]int{}
			for _, e := range res.Failovers {
				if e.Kind == "send" {
					sends[e.BrokerName]++
				}
			}
			for _, g := range h.groups {
				if sends[g.name] >= 100 {
					reasons = append(reasons, fmt.Sprintf("the bench listed only the first 100 send breaks of %s: later gaps unmeasured", g.name))
				}
			}
		}
	} else {
		reasons = append(reasons, "no bench result")
	}

	h.printf("\n== logs (checksum of every member over the same range)\n")
	logsWord := "identical"
	for _, lc := range logs {
		var parts []string
		for _, m := range lc.g.members {
			sum := lc.sums[m.name]
			if len(sum) > 12 {
				sum = sum[:12]
			}
			parts = append(parts, fmt.Sprintf("%s=%s(end %d)", m.name, cmp.Or(sum, "-"), lc.ends[m.name]))
		}
		state := "identical"
		if !lc.identical {
			state, logsWord = "DIFFER", "DIFFER"
			reasons = append(reasons, lc.g.name+" logs differ")
		}
		h.printf("%s [%d, %d) %s: %s\n", lc.g.name, lc.from, lc.to, state, strings.Join(parts, " "))
		for _, e := range lc.errs {
			h.printf("  %s\n", e)
		}
	}

	h.printf("\n== truncations\n")
	notDeposed := 0
	perCycle := map[string]int{}
	last := map[string]time.Time{}
	for _, t := range truncs {
		if !t.deposed {
			notDeposed++
		}
		key := t.m.name + " before the first cycle"
		if t.c != nil {
			key = fmt.Sprintf("%s in cycle %d", t.m.name, t.c.n)
		}
		perCycle[key]++
		last[key] = t.at
	}
	shown := map[string]int{}
	for _, t := range truncs {
		key := t.m.name + " before the first cycle"
		cyc := "before the first cycle"
		if t.c != nil {
			key = fmt.Sprintf("%s in cycle %d", t.m.name, t.c.n)
			cyc = fmt.Sprintf("cycle %d (%s %s)", t.c.n, t.c.kind, groupName(t.c.g))
		}
		// A loop cuts hundreds of times: the first few and a count tell it.
		const showPerCycle = 3
		if shown[key]++; shown[key] > showPerCycle {
			if shown[key] == perCycle[key] {
				h.printf("  ... and %d more cuts by %s, the last at %s (a truncation loop)\n", perCycle[key]-showPerCycle, key, clock(last[key]))
			}
			continue
		}
		by := "by a returning deposed master"
		if !t.deposed {
			by = "NOT by a deposed master"
		}
		what := fmt.Sprintf("logEnd=%d truncateTo=%d", t.logEnd, t.to)
		if t.resync {
			what = fmt.Sprintf("RESYNC: log set aside, slaveEnd=%d masterEnd=%d", t.logEnd, t.to)
		} else if !t.restarted {
			what += " (no restart followed)"
		}
		h.printf("%s %s %s %s, %s; %s\n", clock(t.at), t.m.label(), what, by, cyc, t.where)
	}
	if len(truncs) == 0 {
		h.printf("none\n")
	}
	for _, g := range h.groups {
		var parts []string
		for _, m := range g.members {
			n, dep := 0, 0
			for _, t := range truncs {
				if t.m == m {
					n++
					if t.deposed {
						dep++
					}
				}
			}
			parts = append(parts, fmt.Sprintf("%s %d (%d by a deposed master)", m.name, n, dep))
		}
		h.printf("%s per member: %s\n", g.name, strings.Join(parts, ", "))
	}
	truncWord := fmt.Sprintf("%d(all by deposed masters)", len(truncs))
	if notDeposed > 0 {
		truncWord = fmt.Sprintf("%d(%d not by a deposed master)", len(truncs), notDeposed)
		reasons = append(reasons, fmt.Sprintf("%d truncation(s) not by a returning deposed master", notDeposed))
	}
	for k, n := range perCycle {
		if n > 2 {
			reasons = append(reasons, fmt.Sprintf("truncation loop: %s truncated %d times", k, n))
		}
	}
	if len(truncs) == 0 {
		truncWord = "0"
	}

	var raftMetrics []time.Duration
	staticMax := time.Duration(0)
	if gaps != nil {
		back := h.offsetsBack()
		h.printf("\n== cycles (per group: the longest send gap / its recovery after the heal, from the bench's failover events / when the harness saw sends reach the group again, from the heal)\n")
		tw := tabwriter.NewWriter(h.out, 0, 0, 2, ' ', 0)
		fmt.Fprintf(tw, "cycle\tkind\ttarget\tinjected\thold\thealthy after\t%s gap/recovery/back\t%s gap/recovery/back\tmasters after\tnotes\n", raftGroupName, staticGroupName)
		for _, c := range h.cycles {
			cells := []string{strconv.Itoa(c.n), string(c.kind), groupName(c.g), clock(c.injected), fmtDur(c.hold)}
			if c.healthy.IsZero() {
				cells = append(cells, "never")
			} else {
				cells = append(cells, fmtDur(c.healthy.Sub(c.healed)))
			}
			for _, g := range h.groups {
				s := gaps[c][g.name]
				cell := fmt.Sprintf("%s/%s", fmtDur(s.gap), fmtDur(s.recovery))
				if s.open {
					cell += "(never back)"
				}
				if s.carried {
					cell = "unmeasured: no service since " + clock(s.carriedAt)
					if cc := h.cycleAt(s.carriedAt); cc != nil {
						cell += fmt.Sprintf(" (cycle %d)", cc.n)
					}
				}
				if t := c.flowing[g.name]; !t.IsZero() {
					cell += "/" + fmtDur(t.Sub(c.healed))
				} else if !c.healthy.IsZero() {
					cell += "/never"
				}
				if c.inherent(g) {
					cell += "*"
				}
				cells = append(cells, cell)
				if g.raft && c.g == g && !c.healthy.IsZero() && !s.carried {
					raftMetrics = append(raftMetrics, barMetric(c, g, s))
				}
				if !g.raft && !c.healthy.IsZero() && !s.carried {
					staticMax = max(staticMax, s.recovery)
				}
			}
			cells = append(cells, strings.TrimPrefix(describeMasters(c.mastersAfter), "masters "))
			notes := append(slices.Clone(c.problems), back[c.n])
			cells = append(cells, strings.Join(slices.DeleteFunc(notes, func(s string) bool { return s == "" }), "; "))
			fmt.Fprintln(tw, strings.Join(cells, "\t"))
		}
		_ = tw.Flush()
		h.printf("(* the fault leaves that group no one to fail over to: its bar is the recovery after the heal)\n")
		for _, g := range h.groups {
			bar := fmt.Sprintf("median <= %s and max <= %s of the gap (of the recovery after the heal where marked *)", fmtDur(raftGapMedian), fmtDur(raftGapMax))
			if !g.raft {
				bar = fmt.Sprintf("sends back within %s (one route refresh) of the heal", fmtDur(staticRecoveryMax))
			}
			h.printf("\n== send gaps of %s per fault (bar: %s)\n", g.name, bar)
			tw := tabwriter.NewWriter(h.out, 0, 0, 2, ' ', 0)
			fmt.Fprintln(tw, "kind\ttarget\tn\tgap median\tgap max\trecovery median\trecovery max\tbar")
			for _, r := range h.gapTable(gaps, g) {
				verdict := "ok"
				if len(r.metrics) == 0 {
					verdict = "unmeasured"
				}
				if r.fail != "" {
					verdict = "FAIL: " + r.fail
					reasons = append(reasons, fmt.Sprintf("%s %s on %s: %s", g.name, r.kind, r.target, r.fail))
				}
				mark := ""
				if r.inherent {
					mark = "*"
				}
				n := strconv.Itoa(r.n)
				if r.unmeasured > 0 {
					n += fmt.Sprintf(" (%d unmeasured)", r.unmeasured)
				}
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", r.kind, r.target, n, fmtDur(median(r.gaps)), fmtDur(maxOf(r.gaps)),
					fmtDur(median(r.recs)), fmtDur(maxOf(r.recs))+mark, verdict)
			}
			_ = tw.Flush()
		}
	}

	h.mu.Lock()
	problems := slices.Clone(h.problems)
	exits := slices.Clone(h.exits)
	h.mu.Unlock()
	if len(exits) > 0 {
		h.printf("\n== processes that ended without the harness ending them\n")
		for _, e := range exits {
			why := ""
			if e.onFullDisk {
				why = " (its store was full: fail-stop)"
			}
			h.printf("  %s %s: %s%s\n", clock(e.at), e.name, e.err, why)
		}
	}
	if len(h.scratch) > 0 {
		h.printf("\n== topic tables (the scratch topics the topic-change faults left: %s)\n", h.describeScratch())
		for _, d := range h.topicDiffs {
			h.printf("  %s\n", d)
		}
		if len(h.topicDiffs) == 0 {
			h.printf("  every member holds what was acknowledged\n")
		} else {
			reasons = append(reasons, fmt.Sprintf("%d topic table(s) differ from the acknowledged changes", len(h.topicDiffs)))
		}
	}
	if len(problems) > 0 {
		h.printf("\n== problems during the run\n")
		for _, p := range problems {
			h.printf("  %s\n", p)
		}
		reasons = append(reasons, fmt.Sprintf("%d problem(s) during the run (see above)", len(problems)))
	}

	var counts []string
	if res != nil {
		counts = []string{
			fmt.Sprintf("lost=%d", res.Lost), fmt.Sprintf("inconsistent=%d", res.Inconsistent), fmt.Sprintf("duplicated=%d", res.Duplicated),
			fmt.Sprintf("reordered=%d", res.Reordered), fmt.Sprintf("corrupted=%d", res.Corrupted), fmt.Sprintf("phantom=%d", res.Phantom),
			fmt.Sprintf("offsetMovedBack=%d", res.OffsetMovedBack),
		}
	} else {
		counts = []string{"bench=no-result"}
	}
	done := 0
	for _, c := range h.cycles {
		if !c.healthy.IsZero() {
			done++
		}
	}
	word := "PASS"
	if len(reasons) > 0 {
		word = "FAIL"
	}
	line := fmt.Sprintf("chaos: %s seed=%d cycles=%d segment=%s mix=%s %s logs=%s truncations=%s raft-gap-median=%s raft-gap-max=%s static-recovery-max=%s",
		word, h.o.seed, done, formatSize(h.o.segment), h.o.mix, strings.Join(counts, " "), logsWord, truncWord,
		fmtDur(median(raftMetrics)), fmtDur(maxOf(raftMetrics)), fmtDur(staticMax))
	if len(reasons) > 0 {
		line += " (" + strings.Join(reasons, "; ") + ")"
	}
	h.printf("\n%s\n", line)
	return verdict{pass: len(reasons) == 0, line: line}
}
