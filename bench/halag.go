package bench

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/HdrHistogram/hdrhistogram-go"

	"github.com/petrel-mq/petrel/client"
	"github.com/petrel-mq/petrel/protocol"
)

// Ranges of the replication lag histograms (3 significant digits, as the latency ones): lag in
// bytes up to 1 TiB, lag in time up to 24 h. Larger values are clamped to the maximum.
const (
	lagHighestBytes = 1 << 40
	lagHighestMs    = 24 * 3600 * 1000
)

// lagSampler samples the replication status of the masters of the run's broker groups and
// keeps, per slave, histograms of its lag in bytes and in milliseconds plus its replication
// byte counters (for the compression ratio).
//
// Concurrency: add is called by the sampling goroutine (run) only; report may be called by any
// goroutine once run has returned. mu guards slaves and errors all the same, so tests may call
// add directly.
type lagSampler struct {
	cl       cluster
	groups   []groupInfo
	interval time.Duration

	// topics, when set, lets the sampler find a group's new master after a failover (the
	// status of the old address fails or says it is no longer master): it asks the routes again,
	// at most every masterRefreshInterval. Used by the sampling goroutine only.
	topics      []string
	lastRefresh time.Time

	mu     sync.Mutex
	slaves map[slaveKey]*slaveLag
	// samples counts sampling rounds; errors the HAStatus requests that failed.
	samples, errors int64
}

// slaveKey names one slave: its broker group and brokerId.
type slaveKey struct {
	group string
	id    int64
}

// slaveLag is what the sampler knows of one slave.
type slaveLag struct {
	addr              string
	lagBytes, lagMs   *hdrhistogram.Histogram
	samples           int64
	inSync, connected int64
	// lastRaw and lastWire are the replication byte counters at the last sample; runRaw and
	// runWire sum their growth from one sample to the next. Counters that went backwards
	// restarted from 0 (the master restarted): their new values are what the slave received
	// since, and resets counts those restarts.
	lastRaw, lastWire int64
	runRaw, runWire   int64
	resets            int64
}

// newLagSampler returns a sampler of the masters of groups, or nil when no group has a master
// or interval is not positive. Every master is sampled, whether or not the route listed slaves
// for its group when the run started (a slave may register later); a master's status lists the
// slaves it has, and a group whose master never lists one reports nothing.
func newLagSampler(cl cluster, groups []groupInfo, interval time.Duration) *lagSampler {
	var sampled []groupInfo
	for _, g := range groups {
		if g.master != "" {
			sampled = append(sampled, g)
		}
	}
	if len(sampled) == 0 || interval <= 0 {
		return nil
	}
	return &lagSampler{cl: cl, groups: sampled, interval: interval, slaves: map[slaveKey]*slaveLag{}}
}

// run samples every interval, from when start is closed (the end of the warm-up) until stop is
// closed, when it takes one last sample and returns. It samples at once when started, so even a
// run shorter than the interval has a sample.
func (s *lagSampler) run(start, stop <-chan struct{}) {
	select {
	case <-start:
	case <-stop:
		return
	}
	t := time.NewTicker(s.interval)
	defer t.Stop()
	for {
		s.sample()
		select {
		case <-stop:
			s.sample()
			return
		case <-t.C:
		}
	}
}

// lagSampleTimeout bounds one round of status requests. A round that takes longer than the
// interval delays the next (the ticker drops the ticks missed), so a slow master is sampled less
// often rather than piling up requests.
const lagSampleTimeout = 2 * time.Second

// masterRefreshInterval bounds how often the sampler asks the routes for new masters.
const masterRefreshInterval = time.Second

// sample asks every sampled master for its status, in parallel, and looks the masters up again
// when one of them failed or is no master any more.
func (s *lagSampler) sample() {
	ctx, cancel := context.WithTimeout(context.Background(), lagSampleTimeout)
	defer cancel()
	var wg sync.WaitGroup
	stale := false
	for _, g := range s.groups {
		wg.Add(1)
		go func() {
			defer wg.Done()
			st, err := s.cl.haStatus(ctx, g.master)
			if err != nil || st.BrokerID != 0 {
				s.mu.Lock()
				if err != nil {
					s.errors++
				}
				stale = true
				s.mu.Unlock()
				return
			}
			s.add(g.name, st)
		}()
	}
	wg.Wait()
	s.mu.Lock()
	s.samples++
	refresh := stale && s.topics != nil && time.Since(s.lastRefresh) >= masterRefreshInterval
	s.mu.Unlock()
	if refresh {
		s.refreshMasters(ctx)
	}
}

// refreshMasters looks up the current master of every sampled group in the routes.
func (s *lagSampler) refreshMasters(ctx context.Context) {
	s.lastRefresh = time.Now()
	groups, err := s.cl.groups(ctx, s.topics)
	if err != nil {
		return
	}
	for i := range s.groups {
		for _, g := range groups {
			if g.name == s.groups[i].name && g.master != "" {
				s.groups[i].master = g.master
			}
		}
	}
}

// add records one status of group's master.
func (s *lagSampler) add(group string, st *protocol.HAStatus) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, ss := range st.Slaves {
		k := slaveKey{group, ss.BrokerID}
		sl := s.slaves[k]
		if sl == nil {
			sl = &slaveLag{
				lagBytes: hdrhistogram.New(1, lagHighestBytes, histSigFigs),
				lagMs:    hdrhistogram.New(1, lagHighestMs, histSigFigs),
				lastRaw:  ss.RawBytes, lastWire: ss.WireBytes,
			}
			s.slaves[k] = sl
		}
		if ss.RawBytes < sl.lastRaw || ss.WireBytes < sl.lastWire {
			sl.resets++
			sl.runRaw += ss.RawBytes
			sl.runWire += ss.WireBytes
		} else {
			sl.runRaw += ss.RawBytes - sl.lastRaw
			sl.runWire += ss.WireBytes - sl.lastWire
		}
		sl.addr = ss.Addr
		_ = sl.lagBytes.RecordValue(max(0, min(ss.LagBytes, lagHighestBytes)))
		_ = sl.lagMs.RecordValue(max(0, min(ss.LagMs, lagHighestMs)))
		sl.samples++
		if ss.InSync {
			sl.inSync++
		}
		if ss.Connected {
			sl.connected++
		}
		sl.lastRaw, sl.lastWire = ss.RawBytes, ss.WireBytes
	}
}

// report returns the per-slave summary, sorted by group and brokerId.
func (s *lagSampler) report() []SlaveReplication {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]SlaveReplication, 0, len(s.slaves))
	for k, sl := range s.slaves {
		r := SlaveReplication{
			BrokerName:       k.group,
			BrokerID:         k.id,
			Addr:             sl.addr,
			Samples:          sl.samples,
			InSyncSamples:    sl.inSync,
			ConnectedSamples: sl.connected,
			LagBytes50pct:    sl.lagBytes.ValueAtPercentile(50),
			LagBytes99pct:    sl.lagBytes.ValueAtPercentile(99),
			LagBytesMax:      sl.lagBytes.Max(),
			LagMs50pct:       sl.lagMs.ValueAtPercentile(50),
			LagMs99pct:       sl.lagMs.ValueAtPercentile(99),
			LagMsMax:         sl.lagMs.Max(),
		}
		// The ratio over the run when something was replicated during it (the counters are the
		// slave's since the master started; across a master restart, what was replicated
		// before it plus what was since); otherwise over the counters' whole life, unless the
		// master restarted: then nothing is known ("-").
		r.RawBytes, r.WireBytes, r.CounterResets = sl.runRaw, sl.runWire, sl.resets
		if (r.RawBytes <= 0 || r.WireBytes <= 0) && sl.resets == 0 {
			r.RawBytes, r.WireBytes = sl.lastRaw, sl.lastWire
		}
		if r.RawBytes > 0 && r.WireBytes > 0 {
			r.CompressionRatio = round3(float64(r.RawBytes) / float64(r.WireBytes))
		}
		out = append(out, r)
	}
	slices.SortFunc(out, func(a, b SlaveReplication) int {
		return cmp.Or(cmp.Compare(a.BrokerName, b.BrokerName), cmp.Compare(a.BrokerID, b.BrokerID))
	})
	return out
}

// SlaveReplication summarises one slave's replication over the test and drain phases, from the
// master's status sampled every Config.HASampleInterval.
type SlaveReplication struct {
	// BrokerName and BrokerID name the slave; Addr is its client address.
	BrokerName string `json:"brokerName"`
	BrokerID   int64  `json:"brokerId"`
	Addr       string `json:"addr"`
	// Samples counts the statuses that listed the slave; InSyncSamples and ConnectedSamples
	// those in which it was in the in-sync set and connected.
	Samples          int64 `json:"samples"`
	InSyncSamples    int64 `json:"inSyncSamples"`
	ConnectedSamples int64 `json:"connectedSamples"`
	// LagBytes*: how far the slave's acknowledged offset was behind the master's log end
	// (bytes): median, 99th percentile and maximum over the samples.
	LagBytes50pct int64 `json:"lagBytes50pct"`
	LagBytes99pct int64 `json:"lagBytes99pct"`
	LagBytesMax   int64 `json:"lagBytesMax"`
	// LagMs*: how long the slave had not been caught up (ms; 0 when caught up): median, 99th
	// percentile and maximum over the samples.
	LagMs50pct int64 `json:"lagMs50pct"`
	LagMs99pct int64 `json:"lagMs99pct"`
	LagMsMax   int64 `json:"lagMsMax"`
	// RawBytes and WireBytes are the bytes replicated to the slave during the run before and
	// after compression (over the master's whole life when nothing was replicated during the
	// run and the master did not restart); CompressionRatio is RawBytes/WireBytes (0 when
	// nothing was replicated).
	RawBytes         int64   `json:"rawBytes"`
	WireBytes        int64   `json:"wireBytes"`
	CompressionRatio float64 `json:"compressionRatio"`
	// CounterResets counts the times the master's byte counters for the slave went backwards
	// during the run (the master restarted): RawBytes and WireBytes then sum what was
	// replicated before and after.
	CounterResets int64 `json:"counterResets"`
}

// ServedBy counts what one member of the broker groups served the run's consumers, summed over
// every consumer and every group (client.ConsumerStats.ServedBy).
type ServedBy struct {
	// BrokerID is the member: 0 the master, > 0 a slave.
	BrokerID int64 `json:"brokerId"`
	// Pulls counts the pulls it answered (messages, nothing new or a moved offset); Messages
	// the messages of its answers the bench consumed; NotHere its "not here" answers (a slave
	// that had not replicated the requested offset yet).
	Pulls    int64 `json:"pulls"`
	Messages int64 `json:"messages"`
	NotHere  int64 `json:"notHere"`
}

// servedByList turns the client's counts into a list sorted by brokerId, the master first
// (always present, so a run served by slaves alone shows the master's zeros).
func servedByList(m map[int64]client.ServedCount) []ServedBy {
	if m == nil {
		return []ServedBy{}
	}
	out := []ServedBy{{BrokerID: 0}}
	for id, n := range m {
		if id == 0 {
			out[0] = ServedBy{BrokerID: 0, Pulls: n.Pulls, Messages: n.Messages, NotHere: n.NotHere}
			continue
		}
		out = append(out, ServedBy{BrokerID: id, Pulls: n.Pulls, Messages: n.Messages, NotHere: n.NotHere})
	}
	slices.SortFunc(out, func(a, b ServedBy) int { return cmp.Compare(a.BrokerID, b.BrokerID) })
	return out
}

// memberName returns "master" for brokerId 0, else "slave N".
func memberName(id int64) string {
	if id == 0 {
		return "master"
	}
	return fmt.Sprintf("slave %d", id)
}
