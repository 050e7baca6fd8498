package main

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/petrel-mq/petrel/protocol"
)

// statusTimeout bounds one health poll's requests.
const statusTimeout = 1500 * time.Millisecond

// pollInterval is the pause between health polls.
const pollInterval = 200 * time.Millisecond

// snapshot is one poll of the cluster: every member's HA status and the NameServer's table.
type snapshot struct {
	at    time.Time
	ha    map[string]*protocol.HAStatus // by member name
	haErr map[string]string
	ci    *protocol.ClusterInfo
	ciErr string
}

// poll takes a snapshot through the probe.
func (h *harness) poll() snapshot {
	s := snapshot{at: time.Now(), ha: map[string]*protocol.HAStatus{}, haErr: map[string]string{}}
	var addrs []string
	byAddr := map[string]*member{}
	for _, g := range h.groups {
		for _, m := range g.members {
			addrs = append(addrs, m.addr())
			byAddr[m.addr()] = m
		}
	}
	resp, err := h.probe.call(probeReq{Op: "status", Addrs: addrs}, statusTimeout)
	if err != nil {
		for _, m := range byAddr {
			s.haErr[m.name] = err.Error()
		}
		s.ciErr = err.Error()
		return s
	}
	for addr, st := range resp.HA {
		if m := byAddr[addr]; m != nil && st != nil {
			s.ha[m.name] = st
		}
	}
	for addr, e := range resp.HAErr {
		if m := byAddr[addr]; m != nil {
			s.haErr[m.name] = e
		}
	}
	s.ci, s.ciErr = resp.Cluster, resp.ClusterErr
	return s
}

// groupHealth judges one group in a snapshot: its master, and "" when the group is healthy
// (every member runs and answers, exactly one is master, every other member is a slave
// connected to it, the master's in-sync set holds every member, and the NameServer lists the
// master as brokerId 0 and every member), else why not.
func (h *harness) groupHealth(s snapshot, g *group) (*member, string) {
	var why []string
	var masters []*member
	for _, m := range g.members {
		switch {
		case !m.proc.running():
			why = append(why, m.name+" not running")
			continue
		case m.proc.isStopped():
			why = append(why, m.name+" stopped")
			continue
		}
		st := s.ha[m.name]
		if st == nil {
			why = append(why, fmt.Sprintf("%s does not answer (%s)", m.name, short(s.haErr[m.name])))
			continue
		}
		if st.Role != roleSlave {
			masters = append(masters, m)
		}
	}
	if len(why) > 0 {
		return nil, strings.Join(why, "; ")
	}
	if len(masters) != 1 {
		names := make([]string, len(masters))
		for i, m := range masters {
			names[i] = m.name
		}
		return nil, fmt.Sprintf("%d masters %v", len(masters), names)
	}
	master := masters[0]
	mst := s.ha[master.name]
	for _, m := range g.members {
		if m == master {
			continue
		}
		st := s.ha[m.name]
		switch {
		case st.MasterAddr != master.addr():
			why = append(why, fmt.Sprintf("%s follows %q, not %s", m.name, st.MasterAddr, master.name))
		case !st.Connected:
			why = append(why, m.name+" not connected to the master")
		}
		i := slices.IndexFunc(mst.Slaves, func(sl protocol.SlaveStatus) bool { return sl.Addr == m.addr() })
		switch {
		case i < 0:
			why = append(why, fmt.Sprintf("master %s does not list %s", master.name, m.name))
		case !mst.Slaves[i].InSync:
			why = append(why, fmt.Sprintf("%s not in sync (lag %d bytes)", m.name, mst.Slaves[i].LagBytes))
		}
	}
	if int(mst.InSyncReplicas) != len(g.members) {
		why = append(why, fmt.Sprintf("in-sync set %d of %d", mst.InSyncReplicas, len(g.members)))
	}
	switch {
	case s.ci == nil:
		why = append(why, "NameServer: "+short(s.ciErr))
	default:
		i := slices.IndexFunc(s.ci.Brokers, func(bd protocol.BrokerData) bool { return bd.BrokerName == g.name })
		if i < 0 {
			why = append(why, "NameServer lists no "+g.name)
			break
		}
		bd := &s.ci.Brokers[i]
		if a := bd.MasterAddr(); a != master.addr() {
			why = append(why, fmt.Sprintf("NameServer's master is %q, not %s", a, master.name))
		}
		for _, m := range g.members {
			if !slices.ContainsFunc(bd.Addrs, func(ba protocol.BrokerAddr) bool { return ba.Addr == m.addr() }) {
				why = append(why, "NameServer does not list "+m.name)
			}
		}
	}
	if len(why) > 0 {
		return master, strings.Join(why, "; ")
	}
	return master, ""
}

// health judges every group: the masters, and "" when all are healthy, else why not.
func (h *harness) health(s snapshot) (map[string]*member, string) {
	masters := map[string]*member{}
	var why []string
	for _, p := range h.namesrvs {
		if !p.running() {
			why = append(why, "NameServer "+p.name+" not running")
		}
	}
	for _, g := range h.groups {
		m, w := h.groupHealth(s, g)
		if m != nil {
			masters[g.name] = m
		}
		if w != "" {
			why = append(why, g.name+": "+w)
		}
	}
	return masters, strings.Join(why, " | ")
}

// waitHealthy polls until the cluster is healthy, timeout passes or ctx ends. It returns the
// masters and "" when healthy, else the last reason it was not.
func (h *harness) waitHealthy(ctx context.Context, timeout time.Duration) (map[string]*member, string) {
	deadline := time.Now().Add(timeout)
	lastWhy := ""
	for {
		s := h.poll()
		h.lastSnap = s
		masters, why := h.health(s)
		if why == "" {
			h.lastMasters = masters
			h.healthyAt = append(h.healthyAt, s.at)
			return masters, ""
		}
		if h.o.verbose && why != lastWhy {
			h.printf("    %s not healthy: %s\n", clock(time.Now()), why)
		}
		lastWhy = why
		if time.Now().After(deadline) {
			return masters, why
		}
		select {
		case <-ctx.Done():
			return masters, "interrupted"
		case <-time.After(pollInterval):
		}
	}
}

// short cuts a long error message for a status line.
func short(s string) string {
	if s == "" {
		return "no answer"
	}
	const n = 120
	if len(s) > n {
		return s[:n] + "..."
	}
	return s
}
