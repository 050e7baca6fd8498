package main

import (
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// Cluster settings: those of conf/raft-3-sync for broker-a, of conf/2m-2s-sync for broker-b.
const (
	clusterName          = "DefaultCluster"
	raftGroupName        = "broker-a"
	staticGroupName      = "broker-b"
	raftMinInSync        = 2
	staticMinInSync      = 1
	raftHeartbeatTimeout = 300 // ms
	raftElectionTimeout  = 300 // ms
	raftInSyncMaxLagTime = 500 // ms
	roleSyncMaster       = "SYNC_MASTER"
	roleSlave            = "SLAVE"
	// registrationPeriod is every broker's registerNameServerPeriod and every NameServer's
	// registration period (the two must agree: a NameServer answers NAMESRV_NOT_READY for
	// that long after it starts). Shorter than the default 30 s, so that a restarted
	// NameServer is ready again within a cycle's recovery.
	registrationPeriod = 5 * time.Second
)

// namesrvNodes are the nodes the NameServers run on, one each, in the order of namesrvAddr.
var namesrvNodes = []string{"ns1", "ns2", "ns3"}

// group is a broker group of the run.
type group struct {
	name    string
	raft    bool
	members []*member
}

// member is one broker of a group.
type member struct {
	name string // a1, a2, a3 (broker-a), b1, b2 (broker-b)
	g    *group
	node *node
	// brokerID and role are the configured ones: a Raft member's brokerId as a slave (its
	// role is the acknowledgement mode of whoever is master); a static broker's first roles,
	// which electMaster may change (its store's elected file then says what it plays).
	brokerID int64
	role     string
	store    *store
	proc     *proc
	confPath string
}

// addr returns the member's client address.
func (m *member) addr() string { return netip.AddrPortFrom(m.node.addr, brokerPort).String() }

// label returns "broker-a/a1".
func (m *member) label() string { return m.g.name + "/" + m.name }

// buildGroups returns the run's two broker groups on the topology's nodes, with their stores
// under dir.
func buildGroups(t *topology, dir string, storeSize int64) []*group {
	a := &group{name: raftGroupName, raft: true}
	for i, n := range []string{"a1", "a2", "a3"} {
		a.members = append(a.members, &member{name: n, g: a, node: t.nodes[n], brokerID: int64(i + 1), role: roleSyncMaster})
	}
	b := &group{name: staticGroupName}
	b.members = []*member{
		{name: "b1", g: b, node: t.nodes["b1"], brokerID: 0, role: roleSyncMaster},
		{name: "b2", g: b, node: t.nodes["b2"], brokerID: 1, role: roleSlave},
	}
	groups := []*group{a, b}
	for _, g := range groups {
		for _, m := range g.members {
			m.store = &store{dir: filepath.Join(dir, "store", m.name), size: storeSize}
			m.confPath = filepath.Join(dir, m.name+".conf")
		}
	}
	return groups
}

// brokerConfig returns the member's config file for its next start. A static broker that
// electMaster gave another role gets that role (brokerId and brokerRole from its store's
// elected file): the broker refuses a config that contradicts the file.
func brokerConfig(m *member, nsAddr string, segment int64, writeThroughMapping bool) (string, error) {
	id, role := m.brokerID, m.role
	if !m.g.raft {
		if e, ok, err := readElected(m.store.dir); err != nil {
			return "", err
		} else if ok {
			id, role = e.brokerID, e.role
		}
	}
	var b strings.Builder
	kv := func(k string, v any) { fmt.Fprintf(&b, "%s=%v\n", k, v) }
	b.WriteString("# written by petrel-chaos for " + m.label() + "\n")
	kv("brokerClusterName", clusterName)
	kv("brokerName", m.g.name)
	kv("brokerId", id)
	kv("brokerRole", role)
	kv("flushDiskType", "ASYNC_FLUSH")
	kv("namesrvAddr", nsAddr)
	kv("registerNameServerPeriod", registrationPeriod.Milliseconds())
	kv("listenPort", brokerPort)
	kv("haListenPort", brokerPort+1)
	kv("brokerIP1", m.node.addr)
	kv("storePathRootDir", m.store.dir)
	kv("mappedFileSizeCommitLog", segment)
	if writeThroughMapping {
		kv("commitLogWriteThroughFile", false)
	}
	if m.g.raft {
		var peers []string
		for _, p := range m.g.members {
			peers = append(peers, fmt.Sprintf("%s-%s", p.name, netip.AddrPortFrom(p.node.addr, brokerPort+2)))
		}
		kv("minInSyncReplicas", raftMinInSync)
		kv("enableRaftHA", true)
		kv("raftSelfId", m.name)
		kv("raftPeers", strings.Join(peers, ";"))
		kv("raftHeartbeatTimeout", raftHeartbeatTimeout)
		kv("raftElectionTimeout", raftElectionTimeout)
		kv("haInSyncMaxLagTime", raftInSyncMaxLagTime)
	} else {
		kv("minInSyncReplicas", staticMinInSync)
	}
	return b.String(), nil
}

// elected is what a static broker's elected file says (broker/elect.go writes it).
type elected struct {
	brokerID int64
	role     string
}

// readElected reads <store>/elected; ok is false when there is none.
func readElected(storeDir string) (e elected, ok bool, err error) {
	data, err := os.ReadFile(filepath.Join(storeDir, "elected"))
	if os.IsNotExist(err) {
		return e, false, nil
	}
	if err != nil {
		return e, false, err
	}
	var haveID, haveRole bool
	for line := range strings.SplitSeq(string(data), "\n") {
		k, v, _ := strings.Cut(strings.TrimSpace(line), "=")
		switch k {
		case "brokerId":
			if e.brokerID, err = strconv.ParseInt(v, 10, 64); err != nil {
				return e, false, fmt.Errorf("%s: %q: %w", filepath.Join(storeDir, "elected"), line, err)
			}
			haveID = true
		case "brokerRole":
			e.role, haveRole = v, true
		}
	}
	if !haveID || !haveRole {
		return e, false, fmt.Errorf("%s: no brokerId or brokerRole in %q", filepath.Join(storeDir, "elected"), data)
	}
	return e, true, nil
}
