// Package testcluster starts a Petrel cluster inside a test: NameServers and broker groups,
// every server in this process on loopback, each broker with its own store under
// t.TempDir(), all stopped through t.Cleanup so that the package's goroutine leak check
// (testutil.VerifyTestMain) stays quiet.
//
// A group is either static (a master, brokerId 0, of the configured role, and slaves with
// brokerIds 1..n, which learn their master from the NameServers) or Raft-elected (three or more
// members, brokerIds 1..n, that elect their master with Raft; the master registers as brokerId
// 0). Every port a broker listens on (client, replication, Raft) is picked once by
// testutil.FreePorts and kept, so a member stopped and started again is found where the others
// and the NameServers expect it, on the store it left.
//
//	c := testcluster.New(t, testcluster.Options{},
//		testcluster.GroupSpec{Name: "broker-a", Role: broker.RoleSyncMaster, Slaves: 2},
//		testcluster.GroupSpec{Name: "broker-b", RaftMembers: 3})
//	cl, err := client.New(ctx, client.WithNameServers(c.NamesrvAddr()))
//	c.CreateTopic("T", 4) // on every group's master, routed by every NameServer
//	m := c.Group("broker-b").WaitMaster()
//	m.Stop()
//	c.Group("broker-b").WaitMaster() // another member took over
//	m.Start()                        // it returns, on its store, and follows
//
// Only tests import it. It imports broker, namesrv, protocol and internal/testutil, and not
// client, so that the client package's own tests can use it as well.
package testcluster

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/petrel-mq/petrel/broker"
	"github.com/petrel-mq/petrel/internal/testutil"
	"github.com/petrel-mq/petrel/namesrv"
	"github.com/petrel-mq/petrel/protocol"
	"github.com/petrel-mq/petrel/protocol/rpc"
)

// ClusterName is the brokerClusterName of every broker (broker.DefaultConfig's).
const ClusterName = "DefaultCluster"

// Defaults every broker starts with, before Options.Config: small enough that many brokers fit
// a test machine, short enough that registrations and config syncs happen within a test.
const (
	// SegmentSize is mappedFileSizeCommitLog (bytes).
	SegmentSize = 16 << 20
	// MaxFrameSize is maxFrameSize (bytes): a request frame must fit a segment.
	MaxFrameSize = 8 << 20
	// ConsumeQueueFileEntries is consumeQueueFileEntries (entries of a consume-queue file).
	ConsumeQueueFileEntries = 1 << 14
	// RegisterPeriod is registerNameServerPeriod: a broker's routes reach the NameServers
	// this soon after a topic change, a restart or a failover.
	RegisterPeriod = 200 * time.Millisecond
	// SlaveSyncInterval is slaveSyncInterval: topic configs and consumer offsets reach the
	// slaves this soon.
	SlaveSyncInterval = 200 * time.Millisecond
	// ShutdownGracePeriod is shutdownGracePeriod: how long Stop waits for clients to go quiet.
	ShutdownGracePeriod = 2 * time.Second
	// EventLoops is numEventLoop.
	EventLoops = 2
	// RaftMinInSyncReplicas is minInSyncReplicas of a Raft-elected group's members (as
	// conf/raft-3-sync): a send is acknowledged once a slave holds it too.
	RaftMinInSyncReplicas = 2
)

// callTimeout bounds one request the harness makes (a registration, an HA status, a topic
// creation); waits for a state use testutil.DefaultWait.
const callTimeout = 5 * time.Second

// retryStartEvery is the pause between two attempts to start a broker whose port is still
// held (by the broker it replaces, or for a moment by another test's process).
const retryStartEvery = 20 * time.Millisecond

// Options shape a Cluster. The zero value is a cluster of one NameServer with the defaults
// above, logging into Logs.
type Options struct {
	// NameServers is how many NameServers to start; every broker registers with all of them.
	// 0 means 1.
	NameServers int
	// Config, when not nil, adjusts a broker's config before the broker first starts, after
	// the defaults and the group's shape (BrokerName, BrokerID, BrokerRole, ports, store, Raft
	// keys) are set: cfg.BrokerName and cfg.BrokerID tell which member it is. Ports changed
	// here must stay fixed ones (not 0): Member.Addr reads them.
	Config func(cfg *broker.Config)
	// Logger, when not nil, receives every server's log. Nil: lines at Info and above are
	// kept in Logs and written to the test's log when the test fails.
	Logger *slog.Logger
}

// GroupSpec describes a broker group to start.
type GroupSpec struct {
	// Name is the group's brokerName.
	Name string
	// Role is the master's brokerRole in a static group: broker.RoleAsyncMaster (the default)
	// or broker.RoleSyncMaster. In a Raft-elected group it is every member's acknowledgement
	// mode, broker.RoleSyncMaster by default.
	Role string
	// Slaves is how many slaves a static group has (brokerIds 1..Slaves).
	Slaves int
	// RaftMembers, when not 0, makes the group Raft-elected with that many members (at least
	// 3; brokerIds and Raft ids b1..bN); Slaves must then be 0.
	RaftMembers int
}

// raft reports whether the group elects its master with Raft.
func (s GroupSpec) raft() bool { return s.RaftMembers > 0 }

// Cluster is NameServers and broker groups running in the test's process. Its methods must be
// called from the test's goroutine (they fail the test with t.Fatalf).
type Cluster struct {
	t    testing.TB
	opts Options
	dir  string
	logs *testutil.SyncBuffer
	log  *slog.Logger
	nss  []*namesrv.Server

	mu     sync.Mutex // guards groups; a leaf
	groups []*Group
}

// New starts opts.NameServers NameServers on free loopback ports, then each of groups in turn
// (AddGroup), and registers their shutdown with t.Cleanup: brokers first, in parallel, then
// the NameServers, then the data directory is removed.
func New(t testing.TB, opts Options, groups ...GroupSpec) *Cluster {
	t.Helper()
	// Made before the cleanup below is registered, so it is removed after the servers stop.
	c := &Cluster{t: t, opts: opts, dir: t.TempDir(), log: opts.Logger}
	if c.log == nil {
		c.logs = &testutil.SyncBuffer{}
		c.log = slog.New(slog.NewTextHandler(c.logs, &slog.HandlerOptions{Level: slog.LevelInfo}))
	}
	t.Cleanup(c.close)
	for i := range max(opts.NameServers, 1) {
		// Started before any broker, a NameServer has no registration period to wait out:
		// it is ready at the first registration.
		cfg := c.namesrvConfig(i, "127.0.0.1:0")
		cfg.RegistrationPeriod = time.Nanosecond
		ns := namesrv.New(cfg)
		if err := ns.Start(); err != nil {
			t.Fatalf("testcluster: NameServer %d: %v", i, err)
		}
		c.nss = append(c.nss, ns)
	}
	for _, spec := range groups {
		c.AddGroup(spec)
	}
	return c
}

// close stops every running broker (in parallel: each takes about half a second to stop its
// engine), then the NameServers, and shows the logs of a failed test.
func (c *Cluster) close() {
	var wg sync.WaitGroup
	for _, g := range c.Groups() {
		for _, m := range g.members {
			wg.Go(func() { m.stop() })
		}
	}
	wg.Wait()
	for _, ns := range c.nss {
		_ = ns.Close()
	}
	if c.logs != nil && c.t.Failed() {
		c.t.Logf("logs of the cluster:\n%s", c.logs.String())
	}
}

// NamesrvAddr returns the namesrvAddr of the cluster: every NameServer's host:port, separated
// by ';'.
func (c *Cluster) NamesrvAddr() string {
	var addrs []string
	for _, ns := range c.nss {
		addrs = append(addrs, ns.Addr())
	}
	return strings.Join(addrs, ";")
}

// NameServers returns the running NameServers, in the order of NamesrvAddr.
func (c *Cluster) NameServers() []*namesrv.Server { return c.nss }

// namesrvConfig is NameServer i's config: its registration period is the brokers'
// (RegisterPeriod).
func (c *Cluster) namesrvConfig(i int, addr string) namesrv.Config {
	return namesrv.Config{ListenAddr: addr, RegistrationPeriod: RegisterPeriod, Logger: c.log.With("namesrv", i)}
}

// RestartNameServer stops NameServer i (0-based, in the order of NamesrvAddr) and starts a
// fresh one, knowing nothing, on the same address, as a NameServer killed and started again;
// edit, when not nil, adjusts its config first (its registration period, RegisterPeriod by
// default, say). Brokers
// connected to the old one see their connection close. It returns the new NameServer, which
// replaces the old one in NameServers and is stopped with the cluster.
func (c *Cluster) RestartNameServer(i int, edit func(cfg *namesrv.Config)) *namesrv.Server {
	c.t.Helper()
	old := c.nss[i]
	addr := old.Addr()
	_ = old.Close()
	cfg := c.namesrvConfig(i, addr)
	if edit != nil {
		edit(&cfg)
	}
	var ns *namesrv.Server
	testutil.Eventually(c.t, "NameServer "+strconv.Itoa(i)+" to listen on "+addr+" again", func() bool {
		// A refused listen closes nothing: a Server that failed to Start holds no goroutine.
		ns = namesrv.New(cfg)
		return ns.Start() == nil
	})
	c.nss[i] = ns
	return ns
}

// Logs returns what the servers logged (Info and above), or nil when Options.Logger took the
// logs.
func (c *Cluster) Logs() *testutil.SyncBuffer { return c.logs }

// AddGroup starts a broker group and returns once every member is registered with every
// NameServer; a static group's master starts first, and its slaves once the NameServers list
// it (they learn its addresses from the answer to their registration); a Raft group's members
// start together and AddGroup waits until they have elected a master. It does not wait for
// slaves to be in sync (Group.WaitInSync).
func (c *Cluster) AddGroup(spec GroupSpec) *Group {
	c.t.Helper()
	g := c.newGroup(spec)
	c.mu.Lock()
	c.groups = append(c.groups, g)
	c.mu.Unlock()
	if spec.raft() {
		for _, m := range g.members {
			m.launch()
		}
		g.WaitMaster()
		g.WaitRegistered()
		return g
	}
	for _, m := range g.members {
		m.Start()
	}
	return g
}

// newGroup checks spec and makes the group's members with their configs, nothing started.
func (c *Cluster) newGroup(spec GroupSpec) *Group {
	c.t.Helper()
	switch {
	case spec.Name == "":
		c.t.Fatalf("testcluster: a group needs a name")
	case c.group(spec.Name) != nil:
		c.t.Fatalf("testcluster: group %s exists", spec.Name)
	case spec.raft() && (spec.RaftMembers < 3 || spec.Slaves != 0):
		c.t.Fatalf("testcluster: group %s: a Raft group has 3 or more members and no Slaves, got RaftMembers=%d Slaves=%d", spec.Name, spec.RaftMembers, spec.Slaves)
	case spec.Slaves < 0:
		c.t.Fatalf("testcluster: group %s: Slaves=%d", spec.Name, spec.Slaves)
	}
	g := &Group{c: c, spec: spec}
	n, portsEach, firstID := spec.Slaves+1, 2, int64(0)
	if spec.raft() {
		n, portsEach, firstID = spec.RaftMembers, 3, 1
	}
	ports := testutil.FreePorts(c.t, n*portsEach)
	var peers []string
	if spec.raft() {
		for i := range n {
			peers = append(peers, fmt.Sprintf("b%d-127.0.0.1:%d", i+1, ports[i*portsEach+2]))
		}
	}
	for i := range n {
		id := firstID + int64(i)
		cfg := c.baseConfig(spec, id, ports[i*portsEach], ports[i*portsEach+1])
		if spec.raft() {
			cfg.EnableRaftHA = true
			cfg.RaftSelfID = "b" + strconv.FormatInt(id, 10)
			cfg.RaftPeers = strings.Join(peers, ";")
		}
		if c.opts.Config != nil {
			c.opts.Config(&cfg)
		}
		g.members = append(g.members, &Member{g: g, id: id, cfg: cfg, log: c.log.With("member", fmt.Sprintf("%s/%d", spec.Name, id))})
	}
	return g
}

// baseConfig returns the defaults of member id of the group spec describes.
func (c *Cluster) baseConfig(spec GroupSpec, id int64, port, haPort int) broker.Config {
	cfg := broker.DefaultConfig()
	cfg.BrokerClusterName = ClusterName
	cfg.BrokerName = spec.Name
	cfg.BrokerID = id
	switch {
	case spec.raft():
		cfg.BrokerRole = broker.RoleSyncMaster
		cfg.MinInSyncReplicas = RaftMinInSyncReplicas
	case id > 0:
		cfg.BrokerRole = broker.RoleSlave
	default:
		cfg.BrokerRole = broker.RoleAsyncMaster
	}
	if spec.Role != "" && (spec.raft() || id == 0) {
		cfg.BrokerRole = spec.Role
	}
	cfg.BindAddress = "127.0.0.1"
	cfg.ListenPort = port
	cfg.HAListenPort = haPort
	cfg.NamesrvAddr = c.NamesrvAddr()
	cfg.StorePathRootDir = filepath.Join(c.dir, fmt.Sprintf("%s-%d", spec.Name, id))
	cfg.MappedFileSizeCommitLog = SegmentSize
	cfg.MaxFrameSize = MaxFrameSize
	cfg.ConsumeQueueFileEntries = ConsumeQueueFileEntries
	cfg.RegisterNameServerPeriod = RegisterPeriod
	cfg.SlaveSyncInterval = SlaveSyncInterval
	cfg.ShutdownGracePeriod = ShutdownGracePeriod
	cfg.NumEventLoop = EventLoops
	return cfg
}

// Group returns the group named name; it fails the test when there is none.
func (c *Cluster) Group(name string) *Group {
	c.t.Helper()
	g := c.group(name)
	if g == nil {
		c.t.Fatalf("testcluster: no group %s", name)
	}
	return g
}

// group returns the group named name, or nil.
func (c *Cluster) group(name string) *Group {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, g := range c.groups {
		if g.spec.Name == name {
			return g
		}
	}
	return nil
}

// Groups returns every group, in the order they were added.
func (c *Cluster) Groups() []*Group {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]*Group(nil), c.groups...)
}

// CreateTopic creates topic with queues read and write queues on the master of each named
// group (every group when none is named) and waits until every NameServer routes it to them
// (WaitRoute).
func (c *Cluster) CreateTopic(topic string, queues int32, groups ...string) {
	c.t.Helper()
	cfg := protocol.TopicConfig{Topic: topic, ReadQueueNums: queues, WriteQueueNums: queues, Perm: protocol.PermReadWrite}
	for _, g := range c.named(groups) {
		m := g.WaitMaster()
		if err := call(m.Addr(), protocol.CodeUpdateAndCreateTopic, &cfg, nil, nil); err != nil {
			c.t.Fatalf("testcluster: create topic %s on %s: %v", topic, m, err)
		}
	}
	c.WaitRoute(topic, groups...)
}

// WaitRoute waits until every NameServer's route of topic gives each named group (every group
// when none is named) writable queues and a master.
func (c *Cluster) WaitRoute(topic string, groups ...string) {
	c.t.Helper()
	gs := c.named(groups)
	testutil.Eventually(c.t, fmt.Sprintf("every NameServer to route topic %s to %d group(s)", topic, len(gs)), func() bool {
		for _, ns := range c.nss {
			route, ok := ns.Route(topic)
			if !ok {
				return false
			}
			for _, g := range gs {
				if !routesTo(route, g.spec.Name) {
					return false
				}
			}
		}
		return true
	})
}

// named returns the groups of names, or every group when names is empty; it fails the test
// on an unknown name.
func (c *Cluster) named(names []string) []*Group {
	c.t.Helper()
	if len(names) == 0 {
		return c.Groups()
	}
	var gs []*Group
	for _, n := range names {
		gs = append(gs, c.Group(n))
	}
	return gs
}

// RegisterDead registers, on every NameServer, member brokerID of group at a loopback address
// on which nothing listens, and returns that address: a member the routes name but nobody can
// reach. The registration lasts until the test ends (a NameServer drops a broker whose
// registering connection closes). The group need not be one of the cluster's.
func (c *Cluster) RegisterDead(group string, brokerID int64) string {
	c.t.Helper()
	dead := testutil.FreeAddrs(c.t, 1)[0]
	h := protocol.BrokerHeader{ClusterName: ClusterName, BrokerName: group, BrokerID: brokerID, BrokerAddr: dead, DataVersion: 1}
	var topics protocol.TopicConfigList
	for _, ns := range c.nss {
		ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
		conn, err := rpc.Dial(ctx, ns.Addr(), rpc.Options{})
		if err != nil {
			cancel()
			c.t.Fatalf("testcluster: dial NameServer %s: %v", ns.Addr(), err)
		}
		c.t.Cleanup(func() { _ = conn.Close() })
		err = conn.CallDecode(ctx, protocol.CodeRegisterBroker, &h, topics.AppendTo(nil), nil, nil)
		cancel()
		if err != nil {
			c.t.Fatalf("testcluster: register %s/%d at %s: %v", group, brokerID, dead, err)
		}
	}
	return dead
}

// Group is one broker group of a Cluster.
type Group struct {
	c       *Cluster
	spec    GroupSpec
	members []*Member // by brokerId: 0..Slaves for a static group, 1..RaftMembers for a Raft one
}

// Name returns the group's brokerName.
func (g *Group) Name() string { return g.spec.Name }

// Raft reports whether the group's members elect their master with Raft.
func (g *Group) Raft() bool { return g.spec.raft() }

// Members returns every member, running or not, by configured brokerId.
func (g *Group) Members() []*Member { return append([]*Member(nil), g.members...) }

// Member returns the member whose configured brokerId is id (in a Raft group, 1..RaftMembers:
// not the brokerId 0 its master registers as); it fails the test when there is none.
func (g *Group) Member(id int64) *Member {
	g.c.t.Helper()
	for _, m := range g.members {
		if m.id == id {
			return m
		}
	}
	g.c.t.Fatalf("testcluster: group %s has no member %d", g.spec.Name, id)
	return nil
}

// running returns the members that run now.
func (g *Group) running() []*Member {
	var out []*Member
	for _, m := range g.members {
		if m.Running() {
			out = append(out, m)
		}
	}
	return out
}

// WaitMaster waits until one running member acts as the group's master and every NameServer
// names it as brokerId 0, and returns it.
func (g *Group) WaitMaster() *Member {
	g.c.t.Helper()
	var m *Member
	testutil.Eventually(g.c.t, "a master of group "+g.spec.Name+" that every NameServer names", func() bool {
		m = g.master()
		return m != nil
	})
	return m
}

// master returns the running member that says it is master and that every NameServer names
// as brokerId 0, or nil.
func (g *Group) master() *Member {
	addr := ""
	for _, ns := range g.c.nss {
		a := masterAddr(ns.ClusterInfo(), g.spec.Name)
		if a == "" || (addr != "" && a != addr) {
			return nil
		}
		addr = a
	}
	for _, m := range g.running() {
		if m.Addr() != addr {
			continue
		}
		if st, err := m.HAStatus(); err == nil && isMaster(st) {
			return m
		}
	}
	return nil
}

// WaitRegistered waits until every NameServer lists every running member of the group.
func (g *Group) WaitRegistered() {
	g.c.t.Helper()
	for _, m := range g.running() {
		m.waitListed()
	}
}

// WaitInSync waits until the group's master (WaitMaster) has every other running member
// connected and in its in-sync set, and returns the master.
func (g *Group) WaitInSync() *Member {
	g.c.t.Helper()
	m := g.WaitMaster()
	testutil.Eventually(g.c.t, "every running member of group "+g.spec.Name+" in sync with "+m.String(), func() bool {
		st, err := m.HAStatus()
		return err == nil && isMaster(st) && inSyncSlaves(st) >= len(g.running())-1
	})
	return m
}

// Member is one broker of a group: its config, kept across restarts, and the broker while it
// runs. While it runs, a goroutine watches it: when the broker asks for its own restart (a
// Raft member that must cut its log, broker.ErrRestart) it is closed and started again on the
// same config and store, as petrel-broker does; any other fatal error fails the test.
type Member struct {
	g   *Group
	id  int64
	log *slog.Logger

	mu  sync.Mutex // guards the fields below; a leaf
	cfg broker.Config
	b   *broker.Broker // nil while stopped, or after a fatal error
	// quit, closed by stop, ends the watching goroutine, which closes the broker and then
	// done; both nil while no goroutine watches.
	quit, done chan struct{}
	restarts   int
}

// String names the member as group/brokerId (configured brokerId).
func (m *Member) String() string { return fmt.Sprintf("%s/%d", m.g.spec.Name, m.id) }

// ID returns the member's configured brokerId.
func (m *Member) ID() int64 { return m.id }

// Addr returns the member's client address (host:port), the same across restarts.
func (m *Member) Addr() string {
	m.mu.Lock()
	defer m.mu.Unlock()
	return net.JoinHostPort(m.cfg.BindAddress, strconv.Itoa(m.cfg.ListenPort))
}

// HAAddr returns the member's replication address (host:port), where it serves its slaves
// while it is master.
func (m *Member) HAAddr() string {
	m.mu.Lock()
	defer m.mu.Unlock()
	return net.JoinHostPort(m.cfg.BindAddress, strconv.Itoa(m.cfg.HAListenPort))
}

// Config returns the config the member starts with.
func (m *Member) Config() broker.Config {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.cfg
}

// EditConfig changes the config of the member's next start (Start, or a restart it asks for).
// A static member that electMaster moved to another role must start with that role (the
// broker refuses a config that contradicts its elected file).
func (m *Member) EditConfig(edit func(cfg *broker.Config)) {
	m.mu.Lock()
	defer m.mu.Unlock()
	edit(&m.cfg)
}

// Running reports whether the member's broker runs.
func (m *Member) Running() bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.b != nil
}

// Restarts returns how many times the member restarted in place because its broker asked to
// (broker.ErrRestart).
func (m *Member) Restarts() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.restarts
}

// Broker returns the member's running broker (a new one after each restart); it fails the
// test when the member does not run.
func (m *Member) Broker() *broker.Broker {
	m.g.c.t.Helper()
	m.mu.Lock()
	b := m.b
	m.mu.Unlock()
	if b == nil {
		m.g.c.t.Fatalf("testcluster: %s does not run", m)
	}
	return b
}

// Start starts the member's broker on its store and ports and waits until every NameServer
// lists it. A port still held by the broker it replaces is waited for.
func (m *Member) Start() {
	m.g.c.t.Helper()
	m.launch()
	m.waitListed()
}

// launch starts the member's broker and the goroutine that watches it.
func (m *Member) launch() {
	t := m.g.c.t
	t.Helper()
	m.mu.Lock()
	cfg, watched := m.cfg, m.quit != nil
	m.mu.Unlock()
	if watched {
		t.Fatalf("testcluster: %s is already started", m)
	}
	b, err := openBroker(cfg, m.log, nil)
	if err != nil {
		t.Fatalf("testcluster: start %s: %v", m, err)
	}
	quit, done := make(chan struct{}), make(chan struct{})
	m.mu.Lock()
	m.b, m.quit, m.done = b, quit, done
	m.mu.Unlock()
	go m.watch(b, quit, done)
}

// Stop closes the member's broker gracefully (held pulls answered, the store flushed, the
// member unregistered from the NameServers) and returns once it has stopped. An in-process
// broker cannot be killed abruptly; the crash tests run the petrel-broker binary instead.
func (m *Member) Stop() {
	m.g.c.t.Helper()
	if !m.stop() {
		m.g.c.t.Fatalf("testcluster: %s is not started", m)
	}
}

// stop ends the watching goroutine, which closes the broker, and reports whether there was
// one.
func (m *Member) stop() bool {
	m.mu.Lock()
	quit, done := m.quit, m.done
	m.quit, m.done = nil, nil
	m.mu.Unlock()
	if quit == nil {
		return false
	}
	close(quit)
	<-done
	return true
}

// watch runs while the member is started: it closes b when quit is closed, and restarts the
// broker in place when it asks to.
func (m *Member) watch(b *broker.Broker, quit, done chan struct{}) {
	t := m.g.c.t
	defer close(done)
	for {
		select {
		case <-quit:
			err := b.Close()
			m.setBroker(nil)
			if err != nil {
				t.Errorf("testcluster: close %s: %v", m, err)
			}
			return
		case err := <-b.Fatal():
			_ = b.Close()
			m.setBroker(nil)
			if !errors.Is(err, broker.ErrRestart) {
				t.Errorf("testcluster: %s stopped: %v", m, err)
				<-quit
				return
			}
			m.log.Warn("restarting the broker in place", "reason", err)
			nb, err := openBroker(m.Config(), m.log, quit)
			if errors.Is(err, errQuit) {
				return
			}
			if err != nil {
				t.Errorf("testcluster: restart %s in place: %v", m, err)
				<-quit
				return
			}
			m.setBroker(nb)
			b = nb
		}
	}
}

// setBroker records the member's running broker (nil: none); a new one after a restart in
// place counts in Restarts.
func (m *Member) setBroker(b *broker.Broker) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if b != nil {
		m.restarts++
	}
	m.b = b
}

// errQuit is openBroker's answer when it was told to give up.
var errQuit = errors.New("testcluster: start abandoned")

// openBroker creates and starts a broker with cfg, trying again every retryStartEvery for up
// to testutil.DefaultWait while it cannot listen (a port of the broker it replaces may be
// held for a moment), and giving up with errQuit when quit is closed.
func openBroker(cfg broker.Config, log *slog.Logger, quit <-chan struct{}) (*broker.Broker, error) {
	deadline := time.Now().Add(testutil.DefaultWait)
	for {
		b, err := broker.New(cfg, log)
		if err != nil {
			return nil, err
		}
		if err = b.Start(); err == nil {
			return b, nil
		}
		if time.Now().After(deadline) {
			return nil, err
		}
		select {
		case <-quit:
			return nil, errQuit
		case <-time.After(retryStartEvery):
		}
	}
}

// waitListed waits until every NameServer lists the member in its group.
func (m *Member) waitListed() {
	t := m.g.c.t
	t.Helper()
	addr := m.Addr()
	testutil.Eventually(t, m.String()+" at "+addr+" listed by every NameServer", func() bool {
		for _, ns := range m.g.c.nss {
			if _, ok := memberIDs(ns.ClusterInfo(), m.g.spec.Name)[addr]; !ok {
				return false
			}
		}
		return true
	})
}

// HAStatus asks the member for its replication state (GET_HA_STATUS, as petrelctl haStatus).
func (m *Member) HAStatus() (protocol.HAStatus, error) {
	var st protocol.HAStatus
	err := call(m.Addr(), protocol.CodeGetHAStatus, nil, nil, &st)
	return st, err
}

// call makes one request to the broker at addr on a connection of its own, decoding the
// answer's body into respBody when not nil.
func call(addr string, code protocol.RequestCode, h protocol.Header, body []byte, respBody interface{ ReadFrom([]byte) error }) error {
	ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
	defer cancel()
	conn, err := rpc.Dial(ctx, addr, rpc.Options{})
	if err != nil {
		return err
	}
	defer conn.Close()
	return conn.CallDecode(ctx, code, h, body, nil, respBody)
}
