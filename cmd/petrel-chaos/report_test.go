package main

import (
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/petrel-mq/petrel/protocol"
)

// brokerLog writes lines as a broker's slog text log, the n-th line at base+n seconds, and
// returns a member whose process logs there.
func brokerLog(t *testing.T, raft bool, base time.Time, msgs ...string) *member {
	t.Helper()
	var b strings.Builder
	for i, msg := range msgs {
		if strings.HasPrefix(msg, "===") {
			b.WriteString(msg + "\n")
			continue
		}
		fmt.Fprintf(&b, "time=%s level=INFO %s broker=broker-a brokerId=1\n", base.Add(time.Duration(i)*time.Second).UTC().Format("2006-01-02T15:04:05.000Z07:00"), msg)
	}
	path := filepath.Join(t.TempDir(), "m.log")
	if err := os.WriteFile(path, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	return &member{name: "a1", g: &group{name: "broker-a", raft: raft}, proc: &proc{logPath: path}}
}

const (
	lineMaster   = `msg="acting as master" epoch=2`
	lineGiveUp   = `msg="master role given up" reason="no longer the Raft leader"`
	lineFollow   = `msg="following the master" master=a2 epoch=3`
	lineTruncate = `msg="this log holds what the master never confirmed: truncating it through a restart" logEnd=200 truncateTo=100`
	lineRestart  = `msg="restarting the broker in place"`
	lineStarted  = `msg="broker started" addr=10.213.0.11:10911 role=SYNC_MASTER`
)

func TestScanBrokerLogDeposed(t *testing.T) {
	base := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	at := func(sec int) time.Time { return base.Add(time.Duration(sec) * time.Second) }
	cases := []struct {
		name    string
		raft    bool
		lines   []string
		healthy []time.Time
		want    []bool // deposed, per truncation
	}{
		{"a master that gave its role up cuts once on its way back", true,
			[]string{lineStarted, lineMaster, lineGiveUp, lineFollow, lineTruncate, lineRestart, lineStarted, lineFollow}, nil, []bool{true}},
		{"a master killed and started again", true,
			[]string{lineStarted, lineMaster, "=== petrel-chaos 03:04:08.000: exited: signal: killed", lineStarted, lineTruncate, lineRestart}, nil, []bool{true}},
		{"a member that was never master", true,
			[]string{lineStarted, lineFollow, lineTruncate, lineRestart}, nil, []bool{false}},
		{"a truncation loop: only the first cut is the deposed master's", true,
			[]string{lineStarted, lineMaster, lineGiveUp, lineFollow, lineTruncate, lineRestart, lineStarted, lineFollow, lineTruncate, lineRestart},
			nil, []bool{true, false}},
		{"back in sync without a cut, then a cut much later", true,
			[]string{lineStarted, lineMaster, lineGiveUp, lineFollow, lineFollow, lineFollow, lineTruncate},
			[]time.Time{at(4)}, []bool{false}},
		{"master again, then deposed again", true,
			[]string{lineStarted, lineMaster, lineGiveUp, lineFollow, lineMaster, lineGiveUp, lineTruncate},
			[]time.Time{at(3)}, []bool{true}},
		{"a static slave's resync", false,
			[]string{`msg="broker started" role=SLAVE`, `msg="RESYNC: this slave's log is ahead of the master's or diverged from it; setting it aside and copying the master's" slaveEnd=300 masterEnd=250`},
			nil, []bool{false}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			m := brokerLog(t, c.raft, base, c.lines...)
			ts, err := scanBrokerLog(m, c.healthy)
			if err != nil {
				t.Fatal(err)
			}
			if len(ts) != len(c.want) {
				t.Fatalf("%d truncations, want %d: %+v", len(ts), len(c.want), ts)
			}
			for i, tr := range ts {
				if tr.deposed != c.want[i] {
					t.Errorf("truncation %d (%s): deposed %t, want %t", i, tr.where, tr.deposed, c.want[i])
				}
			}
			if c.raft && ts[0].logEnd != 200 || c.raft && ts[0].to != 100 {
				t.Errorf("logEnd %d truncateTo %d, want 200 and 100", ts[0].logEnd, ts[0].to)
			}
		})
	}
}

func TestGapsOf(t *testing.T) {
	base := time.Date(2026, 1, 2, 3, 4, 0, 0, time.UTC)
	ms := func(sec float64) int64 { return base.Add(time.Duration(sec * float64(time.Second))).UnixMilli() }
	g := &group{name: "broker-a"}
	res := &benchResult{Failovers: []failoverEvent{
		{BrokerName: "broker-a", Kind: "send", NewAddr: "x", LastUnixMs: ms(10), FirstUnixMs: ms(12.5), GapMs: 2500},
		{BrokerName: "broker-a", Kind: "consume", NewAddr: "x", LastUnixMs: ms(10), FirstUnixMs: ms(19), GapMs: 9000},
		{BrokerName: "broker-b", Kind: "send", NewAddr: "x", LastUnixMs: ms(10), FirstUnixMs: ms(19), GapMs: 9000},
		{BrokerName: "broker-a", Kind: "send", NewAddr: "", LastUnixMs: ms(30), GapMs: 15000},
	}}
	at := func(sec float64) time.Time { return base.Add(time.Duration(sec * float64(time.Second))) }
	// The fault at 10 s, healed at 11 s: a 2.5 s gap ending 1.5 s after the heal.
	s := gapsOf(res, g, at(9), at(20), at(11))
	if s.gap != 2500*time.Millisecond || s.recovery != 1500*time.Millisecond || s.events != 1 || s.open || s.carried {
		t.Errorf("window 9-20: %+v", s)
	}
	// A window inside that break: the group was not served when its fault came.
	s = gapsOf(res, g, at(11), at(20), at(12))
	if !s.carried || s.events != 0 {
		t.Errorf("window 11-20: %+v, want carried", s)
	}
	// A break that never ended.
	s = gapsOf(res, g, at(29), at(50), at(31))
	if !s.open || s.gap != 15*time.Second || s.recovery != 14*time.Second {
		t.Errorf("window 29-50: %+v, want open, 15s gap, 14s recovery", s)
	}
	// Nothing in the window.
	if s = gapsOf(res, g, at(20), at(29), at(21)); s != (gapStat{}) {
		t.Errorf("window 20-29: %+v, want nothing", s)
	}
}

func TestFindCount(t *testing.T) {
	m := map[string]any{"lost": 2.0, "verify": map[string]any{"inconsistent": 3.0, "deeper": map[string]any{"offsetMovedBack": 4.0}}}
	for key, want := range map[string]int64{"lost": 2, "inconsistent": 3, "offsetMovedBack": 4, "absent": 0} {
		if got, _ := findCount(m, key, 3); got != want {
			t.Errorf("%s = %d, want %d", key, got, want)
		}
	}
}

func TestChooserFollowsTheSeed(t *testing.T) {
	w, err := parseMix("stop-partition-heavy")
	if err != nil {
		t.Fatal(err)
	}
	a := newChooser(7, w, time.Second, 6*time.Second)
	b := newChooser(7, w, time.Second, 6*time.Second)
	seen := map[faultKind]bool{}
	for range 500 {
		x, y := a.next(2), b.next(2)
		if x != y {
			t.Fatalf("same seed, different faults: %+v and %+v", x, y)
		}
		if x.hold < time.Second || x.hold > 6*time.Second {
			t.Errorf("hold %v outside 1s-6s", x.hold)
		}
		seen[x.kind] = true
	}
	for _, k := range allKinds {
		if !seen[k] {
			t.Errorf("no %s in 500 draws of the default mix", k)
		}
	}
	if _, err := parseMix("stop=2,nonsense=1"); err == nil {
		t.Error("an unknown kind was accepted")
	}
	if w, err := parseMix("stop=2,elect=1"); err != nil || w[faultStop] != 2 || w[faultElect] != 1 {
		t.Errorf("parseMix(stop=2,elect=1) = %v, %v", w, err)
	}
}

func TestParseSizeAndRange(t *testing.T) {
	for in, want := range map[string]int64{"1MiB": 1 << 20, "16MiB": 16 << 20, "64K": 64 << 10, "1048576": 1 << 20, "4G": 4 << 30} {
		if got, err := parseSize(in); err != nil || got != want {
			t.Errorf("parseSize(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
	for n, want := range map[int64]string{1 << 20: "1MiB", 16 << 20: "16MiB", 64 << 10: "64KiB", 4 << 30: "4GiB", 1000: "1000"} {
		if got := formatSize(n); got != want {
			t.Errorf("formatSize(%d) = %q, want %q", n, got, want)
		}
	}
	if lo, hi, err := parseRange("1s-6s"); err != nil || lo != time.Second || hi != 6*time.Second {
		t.Errorf("parseRange(1s-6s) = %v %v %v", lo, hi, err)
	}
	if _, _, err := parseRange("6s-1s"); err == nil {
		t.Error("parseRange(6s-1s) accepted")
	}
}

// testHarness returns a harness with the run's two groups whose members log to empty files,
// and one healthy cycle per fault given.
func testHarness(t *testing.T, out *strings.Builder, base time.Time, kinds ...faultKind) *harness {
	t.Helper()
	topo := newTopology("test-", mustPrefix("10.213.0.0/24"))
	h := &harness{o: defaultOptions(), out: out, topo: topo}
	h.o.seed, h.o.segment = 1, 1<<20
	h.groups = buildGroups(topo, t.TempDir(), 1<<30)
	for _, g := range h.groups {
		for _, m := range g.members {
			m.proc = &proc{name: m.name, logPath: filepath.Join(t.TempDir(), m.name+".log")}
			if err := os.WriteFile(m.proc.logPath, nil, 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
	for i, k := range kinds {
		inj := base.Add(time.Duration(i*10) * time.Second)
		c := &cycle{n: i + 1, kind: k, g: h.groups[0], master: h.groups[0].members[0], hold: 2 * time.Second,
			injected: inj, healed: inj.Add(2 * time.Second), healthy: inj.Add(3 * time.Second)}
		h.cycles = append(h.cycles, c)
	}
	return h
}

func mustPrefix(s string) netip.Prefix { return netip.MustParsePrefix(s) }

func TestReportVerdict(t *testing.T) {
	base := time.Date(2026, 1, 2, 3, 4, 0, 0, time.UTC)
	ms := func(sec float64) int64 { return base.Add(time.Duration(sec * float64(time.Second))).UnixMilli() }
	identical := func(h *harness) []logCheck {
		var out []logCheck
		for _, g := range h.groups {
			lc := logCheck{g: g, identical: true, sums: map[string]string{}, ends: map[string]int64{}}
			for _, m := range g.members {
				lc.sums[m.name] = "abc"
			}
			out = append(out, lc)
		}
		return out
	}
	// A failover of broker-a's master with a 400 ms gap: a PASS.
	var out strings.Builder
	h := testHarness(t, &out, base, faultKillMaster)
	res := &benchResult{Passed: true, Drained: true, Failovers: []failoverEvent{
		{BrokerName: "broker-a", Kind: "send", OldAddr: "a", NewAddr: "b", LastUnixMs: ms(0.01), FirstUnixMs: ms(0.41), GapMs: 400},
	}}
	v := h.report(res, identical(h), nil, h.measureGaps(res, base.Add(time.Minute)))
	if !v.pass || !strings.Contains(v.line, "chaos: PASS") || !strings.Contains(v.line, "raft-gap-median=400ms") ||
		!strings.Contains(v.line, "lost=0 inconsistent=0") || !strings.Contains(v.line, "logs=identical truncations=0") {
		t.Errorf("want a PASS with a 400ms gap, got %q\n%s", v.line, out.String())
	}

	// The same with a 3.5 s gap, a lost message, an inconsistent count and a non-deposed cut:
	// a FAIL naming each.
	out.Reset()
	h = testHarness(t, &out, base, faultKillMaster)
	res = &benchResult{Passed: false, Drained: true, Lost: 1, Inconsistent: 2, Failovers: []failoverEvent{
		{BrokerName: "broker-a", Kind: "send", OldAddr: "a", NewAddr: "b", LastUnixMs: ms(0.01), FirstUnixMs: ms(3.51), GapMs: 3500},
	}}
	cut := truncation{m: h.groups[0].members[1], at: base.Add(4 * time.Second), c: h.cycles[0], restarted: true}
	v = h.report(res, identical(h), []truncation{cut}, h.measureGaps(res, base.Add(time.Minute)))
	for _, want := range []string{"chaos: FAIL", "lost=1", "inconsistent=2", "truncations=1(1 not by a deposed master)",
		"broker-a kill-master on broker-a: median gap 3.50s > 1.00s"} {
		if !strings.Contains(v.line, want) {
			t.Errorf("verdict lacks %q: %q", want, v.line)
		}
	}
	if v.pass {
		t.Error("a FAIL run passed")
	}
}

// TestTopicChanges: the topic-change fault's decisions and checks as tables.
func TestTopicChanges(t *testing.T) {
	for _, c := range []struct {
		name string
		cur  scratchTopic
		pick uint64
		want topicChange
	}{
		{"absent: created", scratchTopic{known: true}, 3, topicChange{queues: 4}},
		{"unknown: created", scratchTopic{}, 7, topicChange{queues: 8}},
		{"exists: deleted one time in three", scratchTopic{known: true, exists: true, queues: 2}, 0, topicChange{delete: true}},
		{"exists: queue count changed", scratchTopic{known: true, exists: true, queues: 2}, 8 + 4, topicChange{queues: 5}},
		{"exists: never the same count", scratchTopic{known: true, exists: true, queues: 5}, 8 + 4, topicChange{queues: 6}},
		{"exists with 8: wraps to 1", scratchTopic{known: true, exists: true, queues: 8}, 8 + 7, topicChange{queues: 1}},
	} {
		if got := nextTopicChange(c.cur, c.pick); got != c.want {
			t.Errorf("%s: %+v, want %+v", c.name, got, c.want)
		}
	}
	tc := func(q int32) protocol.TopicConfig {
		return protocol.TopicConfig{Topic: "s", ReadQueueNums: q, WriteQueueNums: q, Perm: protocol.PermReadWrite}
	}
	other := protocol.TopicConfig{Topic: "other", ReadQueueNums: 1, WriteQueueNums: 1}
	for _, c := range []struct {
		name  string
		want  scratchTopic
		table []protocol.TopicConfig
		ok    bool
	}{
		{"created and held", scratchTopic{known: true, exists: true, queues: 4}, []protocol.TopicConfig{other, tc(4)}, true},
		{"created, missing", scratchTopic{known: true, exists: true, queues: 4}, []protocol.TopicConfig{other}, false},
		{"changed, old count", scratchTopic{known: true, exists: true, queues: 4}, []protocol.TopicConfig{tc(2)}, false},
		{"deleted, gone", scratchTopic{known: true}, []protocol.TopicConfig{other}, true},
		{"deleted, still held", scratchTopic{known: true}, []protocol.TopicConfig{tc(4)}, false},
		{"unknown: anything goes", scratchTopic{}, []protocol.TopicConfig{tc(3)}, true},
	} {
		if v := tableVerdict("s", c.want, c.table); (v == "") != c.ok {
			t.Errorf("%s: verdict %q, want ok=%v", c.name, v, c.ok)
		}
	}
}
