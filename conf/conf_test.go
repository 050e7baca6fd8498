// Package conf_test checks the sample broker configs under conf/: one directory per topology
// (as RocketMQ ships conf/2m-2s-sync/ and so on), one file per broker, each loaded by the
// broker's own loader (broker.LoadConfig, what `petrel-broker -c FILE` runs).
package conf_test

import (
	"bufio"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/petrel-mq/petrel/broker"
)

// topologies lists the directories expected under conf/ and their broker files.
var topologies = map[string][]string{
	"2m-2s-sync":  {"broker-a.conf", "broker-a-s.conf", "broker-b.conf", "broker-b-s.conf"},
	"2m-2s-async": {"broker-a.conf", "broker-a-s.conf", "broker-b.conf", "broker-b-s.conf"},
	"1m-2s-sync":  {"broker-a.conf", "broker-a-s1.conf", "broker-a-s2.conf"},
	"raft-3-sync": {"broker-a-b1.conf", "broker-a-b2.conf", "broker-a-b3.conf"},
}

// requiredKeys must be set explicitly in every file.
var requiredKeys = []string{
	"brokerClusterName", "brokerName", "brokerId", "brokerRole", "listenPort", "haListenPort",
	"storePathRootDir", "namesrvAddr", "flushDiskType", "minInSyncReplicas",
}

// loaded is one parsed file.
type loaded struct {
	path string
	cfg  broker.Config
}

func TestSampleConfigs(t *testing.T) {
	dirs, err := filepath.Glob("*")
	if err != nil {
		t.Fatal(err)
	}
	var found []string
	for _, d := range dirs {
		if fi, err := os.Stat(d); err == nil && fi.IsDir() {
			found = append(found, d)
		}
	}
	var want []string
	for d := range topologies {
		want = append(want, d)
	}
	slices.Sort(found)
	slices.Sort(want)
	if !slices.Equal(found, want) {
		t.Fatalf("topology directories %q, want %q", found, want)
	}
	for topo, files := range topologies {
		t.Run(topo, func(t *testing.T) {
			got, err := filepath.Glob(filepath.Join(topo, "*"))
			if err != nil {
				t.Fatal(err)
			}
			for i := range got {
				got[i] = filepath.Base(got[i])
			}
			slices.Sort(got)
			files = slices.Sorted(slices.Values(files))
			if !slices.Equal(got, files) {
				t.Fatalf("files %q, want %q", got, files)
			}
			var cfgs []loaded
			for _, f := range files {
				path := filepath.Join(topo, f)
				checkFile(t, path)
				cfg, err := broker.LoadConfig(path)
				if err != nil {
					t.Errorf("%s: %v", path, err)
					continue
				}
				cfgs = append(cfgs, loaded{path, cfg})
			}
			checkTopology(t, topo, cfgs)
		})
	}
}

// checkFile checks a file's text: every required key set, no key twice, and a comment line
// right above every key.
func checkFile(t *testing.T, path string) {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	seen := map[string]bool{}
	prevComment := false
	sc := bufio.NewScanner(f)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		switch {
		case line == "":
			prevComment = false
			continue
		case strings.HasPrefix(line, "#"):
			prevComment = true
			continue
		}
		key, _, ok := strings.Cut(line, "=")
		if !ok {
			t.Errorf("%s:%d: not key=value: %q", path, n, line)
			continue
		}
		key = strings.TrimSpace(key)
		if seen[key] {
			t.Errorf("%s:%d: %s set twice", path, n, key)
		}
		seen[key] = true
		if !prevComment {
			t.Errorf("%s:%d: %s has no comment above it", path, n, key)
		}
		if broker.KeyHelp(key) == "" {
			t.Errorf("%s:%d: %s is not a broker config key", path, n, key)
		}
		prevComment = false
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	for _, k := range requiredKeys {
		if !seen[k] {
			t.Errorf("%s: %s not set", path, k)
		}
	}
}

// checkTopology checks the brokers of one topology directory together: ports and store
// directories unique, every group one master whose role matches the directory's name (-sync:
// SYNC_MASTER, -async: ASYNC_MASTER), every slave's group has that master in the same cluster,
// brokerIds unique per group, a slave's haMasterAddress (when set) names its master's
// replication port, and minInSyncReplicas no more than the group's members.
func checkTopology(t testing.TB, topo string, cfgs []loaded) {
	t.Helper()
	ports := map[int]string{}
	stores := map[string]string{}
	type group struct {
		master  *loaded
		members map[int64]string
		cluster string
	}
	groups := map[string]*group{}
	for i := range cfgs {
		c := &cfgs[i]
		ha := c.cfg.HAListenPort
		if ha == 0 {
			ha = c.cfg.ListenPort + 1
		}
		for _, p := range []int{c.cfg.ListenPort, ha} {
			if p == 0 {
				t.Errorf("%s: a sample config needs fixed ports", c.path)
			}
			if other, dup := ports[p]; dup {
				t.Errorf("%s: port %d also used by %s", c.path, p, other)
			}
			ports[p] = c.path
		}
		store := filepath.Clean(c.cfg.StorePathRootDir)
		if other, dup := stores[store]; dup {
			t.Errorf("%s: storePathRootDir %s also used by %s", c.path, store, other)
		}
		stores[store] = c.path
		if !strings.HasPrefix(store, "/tmp/petrel/"+topo+"/") {
			t.Errorf("%s: storePathRootDir %s not under /tmp/petrel/%s/", c.path, store, topo)
		}
		g := groups[c.cfg.BrokerName]
		if g == nil {
			g = &group{members: map[int64]string{}, cluster: c.cfg.BrokerClusterName}
			groups[c.cfg.BrokerName] = g
		}
		if other, dup := g.members[c.cfg.BrokerID]; dup {
			t.Errorf("%s: brokerId %d of %s also used by %s", c.path, c.cfg.BrokerID, c.cfg.BrokerName, other)
		}
		g.members[c.cfg.BrokerID] = c.path
		if g.cluster != c.cfg.BrokerClusterName {
			t.Errorf("%s: cluster %s, its group's other members say %s", c.path, c.cfg.BrokerClusterName, g.cluster)
		}
		if c.cfg.BrokerID == 0 {
			g.master = c
		}
	}
	wantRole := broker.RoleAsyncMaster
	if strings.HasSuffix(topo, "-sync") {
		wantRole = broker.RoleSyncMaster
	}
	for name, g := range groups {
		if raftGroup(t, topo, name, wantRole, cfgs, ports) {
			continue
		}
		if g.master == nil {
			t.Errorf("group %s has slaves %v but no master (brokerId 0)", name, g.members)
			continue
		}
		if g.master.cfg.BrokerRole != wantRole {
			t.Errorf("%s: brokerRole %s, want %s in %s", g.master.path, g.master.cfg.BrokerRole, wantRole, topo)
		}
		if g.master.cfg.MinInSyncReplicas > len(g.members) {
			t.Errorf("%s: minInSyncReplicas %d, but the group has %d member(s)", g.master.path, g.master.cfg.MinInSyncReplicas, len(g.members))
		}
		masterHA := g.master.cfg.HAListenPort
		if masterHA == 0 {
			masterHA = g.master.cfg.ListenPort + 1
		}
		for i := range cfgs {
			c := &cfgs[i]
			if c.cfg.BrokerName != name || c.cfg.BrokerID == 0 {
				continue
			}
			if c.cfg.BrokerRole != broker.RoleSlave {
				t.Errorf("%s: brokerId %d with role %s", c.path, c.cfg.BrokerID, c.cfg.BrokerRole)
			}
			if a := c.cfg.HAMasterAddress; a != "" {
				_, port, err := net.SplitHostPort(a)
				if err != nil || port != strconv.Itoa(masterHA) {
					t.Errorf("%s: haMasterAddress %s, but its master %s replicates on port %d", c.path, a, g.master.path, masterHA)
				}
			}
			if c.cfg.NamesrvAddr != g.master.cfg.NamesrvAddr {
				t.Errorf("%s: namesrvAddr %s differs from its master's %s", c.path, c.cfg.NamesrvAddr, g.master.cfg.NamesrvAddr)
			}
		}
	}
}

// raftGroup checks a Raft-elected group (enableRaftHA) and reports whether the group is one:
// at least three members, all with the directory's role, brokerIds >= 1, the same raftPeers in
// every file naming each member once, Raft ports distinct from every other port of the
// topology, and minInSyncReplicas no more than the members.
func raftGroup(t testing.TB, topo, name, wantRole string, cfgs []loaded, ports map[int]string) bool {
	t.Helper()
	var members []*loaded
	raft := false
	for i := range cfgs {
		if c := &cfgs[i]; c.cfg.BrokerName == name {
			members = append(members, c)
			raft = raft || c.cfg.EnableRaftHA
		}
	}
	if !raft {
		return false
	}
	if len(members) < 3 {
		t.Errorf("Raft group %s in %s has %d members, want at least 3", name, topo, len(members))
	}
	peers := members[0].cfg.RaftPeers
	ids := map[string]string{}
	for _, c := range members {
		if !c.cfg.EnableRaftHA {
			t.Errorf("%s: enableRaftHA is not set but other members of %s set it", c.path, name)
		}
		if c.cfg.BrokerRole != wantRole {
			t.Errorf("%s: brokerRole %s, want %s in %s", c.path, c.cfg.BrokerRole, wantRole, topo)
		}
		if c.cfg.RaftPeers != peers {
			t.Errorf("%s: raftPeers %q differ from %s's %q", c.path, c.cfg.RaftPeers, members[0].path, peers)
		}
		if other, dup := ids[c.cfg.RaftSelfID]; dup {
			t.Errorf("%s: raftSelfId %s also used by %s", c.path, c.cfg.RaftSelfID, other)
		}
		ids[c.cfg.RaftSelfID] = c.path
		if c.cfg.MinInSyncReplicas > len(members) {
			t.Errorf("%s: minInSyncReplicas %d, but the group has %d members", c.path, c.cfg.MinInSyncReplicas, len(members))
		}
	}
	list, err := members[0].cfg.RaftPeerList()
	if err != nil {
		t.Errorf("%s: %v", members[0].path, err)
		return true
	}
	if len(list) != len(members) {
		t.Errorf("%s: raftPeers names %d members, the directory has %d", members[0].path, len(list), len(members))
	}
	for _, p := range list {
		_, port, _ := net.SplitHostPort(p.Addr)
		n, _ := strconv.Atoi(port)
		if other, dup := ports[n]; dup {
			t.Errorf("Raft port %d of %s also used by %s", n, p.ID, other)
		}
		ports[n] = "raft " + p.ID
	}
	return true
}

// TestLoaderRejectsUnknownKeys makes sure the loader the samples are checked with fails on a
// key the broker does not have, so a misspelt key in a sample cannot pass.
func TestLoaderRejectsUnknownKeys(t *testing.T) {
	path := filepath.Join(t.TempDir(), "bad.conf")
	body := "brokerName=broker-a\nstorePathRootDir=/tmp/x\nhaListenPortt=10912\n"
	if err := os.WriteFile(path, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := broker.LoadConfig(path); err == nil || !strings.Contains(err.Error(), "haListenPortt") {
		t.Fatalf("unknown key: %v", err)
	}
	// And the checks above catch a topology whose slave has no master.
	ft := &fakeT{}
	cfg := broker.DefaultConfig()
	cfg.BrokerID, cfg.BrokerRole, cfg.StorePathRootDir = 1, broker.RoleSlave, "/tmp/petrel/x/s"
	checkTopology(ft, "x", []loaded{{path: "s.conf", cfg: cfg}})
	if !strings.Contains(ft.errs, "no master") {
		t.Fatalf("a slave without a master passed: %q", ft.errs)
	}
}

// fakeT collects errors for testing the checks.
type fakeT struct {
	testing.TB
	errs string
}

func (f *fakeT) Helper() {}

func (f *fakeT) Errorf(format string, args ...any) { f.errs += fmt.Sprintf(format, args...) + "\n" }
