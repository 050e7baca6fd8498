package main

import (
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"
)

// options is a run's configuration, from the flags.
type options struct {
	cycles  int
	seed    uint64
	segment int64
	// writeThroughMapping sets every broker's commitLogWriteThroughFile=false.
	writeThroughMapping bool
	mix                 string
	weights             map[faultKind]int
	holdMin             time.Duration
	holdMax             time.Duration
	settle              time.Duration
	// medianMin is the least number of measured faults of one kind whose median is held to the
	// Raft group's median bar (the max bar holds always): a short run has one or two of a kind,
	// and one slow failover is not a median.
	medianMin     int
	healthTimeout time.Duration
	flowTimeout   time.Duration
	budget        time.Duration
	rate          int
	queues        int
	retryUnknown  int
	drainTimeout  time.Duration
	binDir        string
	repoDir       string
	workload      string
	payloadDir    string
	baseDir       string
	storeSize     int64
	subnet        netip.Prefix
	keep          bool
	verbose       bool
}

func defaultOptions() options {
	return options{
		cycles:        100,
		mix:           "stop-partition-heavy",
		settle:        time.Second,
		medianMin:     1,
		healthTimeout: 60 * time.Second,
		flowTimeout:   40 * time.Second,
		rate:          5000,
		queues:        8,
		retryUnknown:  3,
		drainTimeout:  120 * time.Second,
		binDir:        "bin",
		repoDir:       ".",
		workload:      "bench/workloads/1-topic-16-partitions-1kb.yaml",
		payloadDir:    "bench/testdata/loghub",
	}
}

// check validates what the flag parsers could not and makes the paths absolute (the processes
// run with other working directories in mind).
func (o *options) check() error {
	switch {
	case o.cycles < 0:
		return fmt.Errorf("--cycles %d: must not be negative", o.cycles)
	case o.rate <= 0:
		return fmt.Errorf("--rate %d: must be positive", o.rate)
	case o.queues <= 0:
		return fmt.Errorf("--queues %d: must be positive", o.queues)
	case o.healthTimeout <= 0:
		return fmt.Errorf("--health-timeout %v: must be positive", o.healthTimeout)
	case o.settle < 0 || o.budget < 0 || o.drainTimeout <= 0 || o.flowTimeout < 0:
		return errors.New("--settle, --budget and --flow-timeout must not be negative, --drain-timeout must be positive")
	case o.storeSize < 64<<20:
		return fmt.Errorf("--store-size %d: at least 64MiB", o.storeSize)
	case o.segment < 64<<10:
		return fmt.Errorf("--segment %d: at least 64KiB", o.segment)
	}
	for _, p := range []*string{&o.binDir, &o.repoDir, &o.baseDir} {
		abs, err := filepath.Abs(*p)
		if err != nil {
			return err
		}
		*p = abs
	}
	for _, p := range []*string{&o.workload, &o.payloadDir} {
		if !filepath.IsAbs(*p) {
			*p = filepath.Join(o.repoDir, *p)
		}
		if _, err := os.Stat(*p); err != nil {
			return fmt.Errorf("%w (is --repo the repository root?)", err)
		}
	}
	for _, b := range []string{binNamesrv, binBroker, binCtl, binBench} {
		if _, err := os.Stat(filepath.Join(o.binDir, b)); err != nil {
			return fmt.Errorf("%w (run make build, or give --bin)", err)
		}
	}
	return nil
}

// parseSize parses a byte count with an optional binary suffix: 1048576, 64K, 1MiB, 16MB, 4G.
func parseSize(s string) (int64, error) {
	t := strings.ToUpper(strings.TrimSpace(s))
	t = strings.TrimSuffix(strings.TrimSuffix(t, "IB"), "B")
	mult := int64(1)
	if n := len(t); n > 0 {
		switch t[n-1] {
		case 'K':
			mult, t = 1<<10, t[:n-1]
		case 'M':
			mult, t = 1<<20, t[:n-1]
		case 'G':
			mult, t = 1<<30, t[:n-1]
		}
	}
	v, err := strconv.ParseInt(t, 10, 64)
	if err != nil || v <= 0 || v > (1<<50)/mult {
		return 0, fmt.Errorf("%q is not a positive size (bytes, or with a K/M/G suffix)", s)
	}
	return v * mult, nil
}

// formatSize renders a byte count the way --segment takes it: 1MiB, 16MiB, 65536.
func formatSize(n int64) string {
	switch {
	case n >= 1<<30 && n%(1<<30) == 0:
		return fmt.Sprintf("%dGiB", n>>30)
	case n >= 1<<20 && n%(1<<20) == 0:
		return fmt.Sprintf("%dMiB", n>>20)
	case n >= 1<<10 && n%(1<<10) == 0:
		return fmt.Sprintf("%dKiB", n>>10)
	}
	return strconv.FormatInt(n, 10)
}

// parseRange parses "1s-6s" (a uniformly random duration in between) or "2s" (always that).
func parseRange(s string) (lo, hi time.Duration, err error) {
	bad := fmt.Errorf("%q: want MIN-MAX (such as 1s-6s) with 0 <= MIN <= MAX, or one duration", s)
	a, b, ok := strings.Cut(s, "-")
	if lo, err = time.ParseDuration(strings.TrimSpace(a)); err != nil {
		return 0, 0, bad
	}
	hi = lo
	if ok {
		if hi, err = time.ParseDuration(strings.TrimSpace(b)); err != nil {
			return 0, 0, bad
		}
	}
	if lo < 0 || hi < lo {
		return 0, 0, bad
	}
	return lo, hi, nil
}

// parseSubnet parses the namespaces' subnet: IPv4, at least a /24 (the harness numbers hosts up
// to .30).
func parseSubnet(s string) (netip.Prefix, error) {
	p, err := netip.ParsePrefix(s)
	if err != nil {
		return p, err
	}
	if !p.Addr().Is4() || p.Bits() > 24 || p.Bits() < 8 {
		return p, fmt.Errorf("%s: want an IPv4 subnet from /8 to /24", s)
	}
	return p.Masked(), nil
}

// mixes are the named fault weights of --mix.
var mixes = map[string]map[faultKind]int{
	// Stalls and partitions are where a replicated log loses acknowledged data; kills are the
	// case the failover was built for. Every kind stays in, so every run covers them all.
	"stop-partition-heavy": {
		faultStop: 4, faultPartitionMaster: 3, faultIsolateMaster: 3, faultPartitionSlave: 2,
		faultPartitionBench: 2, faultKillMaster: 2, faultKillSlave: 1, faultKillMasterSlave: 1,
		faultElect: 1, faultNamesrvRestart: 1, faultNsRestart: 1, faultDiskFull: 1, faultTopicChange: 1,
	},
	"uniform": {
		faultStop: 1, faultPartitionMaster: 1, faultIsolateMaster: 1, faultPartitionSlave: 1,
		faultPartitionBench: 1, faultKillMaster: 1, faultKillSlave: 1, faultKillMasterSlave: 1,
		faultElect: 1, faultNamesrvRestart: 1, faultNsRestart: 1, faultDiskFull: 1, faultTopicChange: 1,
	},
	"kill-heavy": {
		faultKillMaster: 4, faultKillSlave: 2, faultKillMasterSlave: 2, faultStop: 1,
		faultPartitionMaster: 1, faultIsolateMaster: 1, faultElect: 1, faultNsRestart: 1,
	},
	"partition-only": {
		faultPartitionMaster: 1, faultIsolateMaster: 1, faultPartitionSlave: 1, faultPartitionBench: 1,
	},
	"stop-only": {faultStop: 1},
}

// mixHelp describes the mixes for --help.
func mixHelp() string {
	names := make([]string, 0, len(mixes))
	for n := range mixes {
		names = append(names, n)
	}
	slices.Sort(names)
	var b strings.Builder
	for _, n := range names {
		fmt.Fprintf(&b, "\n  %-22s %s", n, formatWeights(mixes[n]))
	}
	b.WriteString("\n  or kind=weight,... of the kinds " + strings.Join(kindNames(), ", "))
	return b.String()
}

// formatWeights renders weights as kind=weight,... in the order of allKinds.
func formatWeights(w map[faultKind]int) string {
	var parts []string
	for _, k := range allKinds {
		if w[k] > 0 {
			parts = append(parts, fmt.Sprintf("%s=%d", k, w[k]))
		}
	}
	return strings.Join(parts, ",")
}

// parseMix returns the weights of a mix name or of a kind=weight,... list.
func parseMix(s string) (map[faultKind]int, error) {
	if w, ok := mixes[s]; ok {
		return w, nil
	}
	w := map[faultKind]int{}
	for part := range strings.SplitSeq(s, ",") {
		k, v, ok := strings.Cut(strings.TrimSpace(part), "=")
		n, err := strconv.Atoi(v)
		if !ok || err != nil || n < 0 {
			return nil, fmt.Errorf("%q: want a mix name or kind=weight,... (weights >= 0)", s)
		}
		if !slices.Contains(allKinds, faultKind(k)) {
			return nil, fmt.Errorf("%q: unknown fault kind (kinds: %s)", k, strings.Join(kindNames(), ", "))
		}
		w[faultKind(k)] = n
	}
	total := 0
	for _, n := range w {
		total += n
	}
	if total == 0 {
		return nil, fmt.Errorf("%q: no fault has a weight", s)
	}
	return w, nil
}
