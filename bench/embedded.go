package bench

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/petrel-mq/petrel/broker"
	"github.com/petrel-mq/petrel/client"
	"github.com/petrel-mq/petrel/namesrv"
)

// Settings of the embedded cluster.
const (
	// embeddedBrokerName names the embedded broker group.
	embeddedBrokerName = "broker-a"
	// embeddedReadyTimeout bounds the wait for the embedded group to be complete: every member
	// registered with the NameServer and every slave replicating from the master.
	embeddedReadyTimeout = 15 * time.Second
	// embeddedSlaveSyncInterval is the embedded slaves' slaveSyncInterval: shorter than the
	// broker's 3 s so consumer offsets reach the slaves within a short run.
	embeddedSlaveSyncInterval = 500 * time.Millisecond
)

// embeddedCluster is a NameServer and one broker group (a master and cfg.EmbeddedSlaves
// slaves) running in this process on loopback, each broker with a data directory of its own
// under one temporary directory.
type embeddedCluster struct {
	ns *namesrv.Server
	// brokers holds the master, then the slaves by brokerId.
	brokers []*broker.Broker
	role    string
	dir     string
	keep    bool
}

// startEmbedded starts a NameServer and a broker group on 127.0.0.1 (ports chosen by the
// kernel) with data in a new temporary directory, removed by close unless cfg.KeepData. With
// slaves, it returns once every member is registered with the NameServer and every slave is
// connected to the master, so the run starts with the group complete.
func startEmbedded(cfg *Config, log *slog.Logger) (_ *embeddedCluster, err error) {
	dir, err := os.MkdirTemp("", "petrel-bench-")
	if err != nil {
		return nil, fmt.Errorf("cannot create the embedded cluster's data directory: %w", err)
	}
	e := &embeddedCluster{dir: dir, keep: cfg.KeepData, role: cfg.EmbeddedRole}
	defer func() {
		if err != nil {
			_ = e.close()
		}
	}()
	// The NameServer starts before the brokers it will know, all in this process: it has no
	// registration period to wait out, only the first registration.
	e.ns = namesrv.New(namesrv.Config{ListenAddr: "127.0.0.1:0", RegistrationPeriod: time.Nanosecond, Logger: log})
	if err := e.ns.Start(); err != nil {
		return nil, fmt.Errorf("cannot start the embedded NameServer: %w", err)
	}
	bc := e.brokerConfig(cfg, 0)
	bc.BrokerRole = cfg.EmbeddedRole
	if err := e.startBroker(bc, log); err != nil {
		return nil, err
	}
	if cfg.EmbeddedSlaves == 0 {
		return e, nil
	}

	ctx, cancel := context.WithTimeout(context.Background(), embeddedReadyTimeout)
	defer cancel()
	cl, err := client.New(ctx, client.WithNameServers(e.ns.Addr()), client.WithLogger(log))
	if err != nil {
		return nil, err
	}
	defer cl.Close()
	admin := client.NewAdmin(cl)
	// NB: the slaves learn the master's client and replication addresses from the NameServer's
	// answer to their first registration, so they start once the master is registered. Giving
	// them haMasterAddress instead would make them guess the master's client address as the
	// replication port - 1 (RocketMQ's convention), wrong with kernel-chosen ports, until the
	// NameServer answers: their first config sync would fail.
	if err := waitMembers(ctx, admin, 1); err != nil {
		return nil, err
	}
	for id := 1; id <= cfg.EmbeddedSlaves; id++ {
		sc := e.brokerConfig(cfg, int64(id))
		sc.BrokerRole = broker.RoleSlave
		sc.SlaveSyncInterval = embeddedSlaveSyncInterval
		if err := e.startBroker(sc, log); err != nil {
			return nil, err
		}
	}
	if err := waitMembers(ctx, admin, 1+cfg.EmbeddedSlaves); err != nil {
		return nil, err
	}
	if err := waitSlavesConnected(ctx, admin, e.brokers[0].Addr(), cfg.EmbeddedSlaves); err != nil {
		return nil, err
	}
	return e, nil
}

// brokerConfig returns the config of embedded member id (0: the master).
func (e *embeddedCluster) brokerConfig(cfg *Config, id int64) broker.Config {
	bc := broker.DefaultConfig()
	bc.NamesrvAddr = e.ns.Addr()
	bc.BrokerName = embeddedBrokerName
	bc.BrokerID = id
	bc.ListenPort = 0
	bc.BindAddress = "127.0.0.1"
	bc.StorePathRootDir = filepath.Join(e.dir, fmt.Sprintf("%s-%d", embeddedBrokerName, id))
	bc.FlushDiskType = cfg.FlushDiskType
	bc.MappedFileSizeCommitLog = cfg.SegmentSize
	bc.CommitLogWriteThroughFile = !cfg.EmbeddedWriteThroughMapping
	if cfg.EmbeddedHACompression != "" {
		bc.HACompression = cfg.EmbeddedHACompression
	}
	return bc
}

func (e *embeddedCluster) startBroker(bc broker.Config, log *slog.Logger) error {
	what := "master"
	if bc.BrokerID > 0 {
		what = fmt.Sprintf("slave %d", bc.BrokerID)
	}
	b, err := broker.New(bc, log.With("broker", fmt.Sprintf("%s-%d", bc.BrokerName, bc.BrokerID)))
	if err != nil {
		return fmt.Errorf("cannot create the embedded %s: %w", what, err)
	}
	if err := b.Start(); err != nil {
		return fmt.Errorf("cannot start the embedded %s: %w", what, err)
	}
	e.brokers = append(e.brokers, b)
	return nil
}

// waitMembers waits until the NameServer lists n members of the embedded group.
func waitMembers(ctx context.Context, admin *client.Admin, n int) error {
	var last string
	for backoff := 5 * time.Millisecond; ; backoff = min(2*backoff, 200*time.Millisecond) {
		ci, err := admin.ClusterInfo(ctx)
		if err == nil {
			for _, bd := range ci.Brokers {
				if bd.BrokerName == embeddedBrokerName {
					if len(bd.Addrs) >= n {
						return nil
					}
					last = fmt.Sprintf("%d registered", len(bd.Addrs))
				}
			}
		} else {
			last = err.Error()
		}
		if !sleepCtx(ctx, backoff) {
			return fmt.Errorf("the embedded group's %d member(s) did not register with the NameServer in time (%s)", n, last)
		}
	}
}

// waitSlavesConnected waits until the master at addr has n slaves connected.
func waitSlavesConnected(ctx context.Context, admin *client.Admin, addr string, n int) error {
	var last string
	for backoff := 5 * time.Millisecond; ; backoff = min(2*backoff, 200*time.Millisecond) {
		st, err := admin.HAStatus(ctx, addr)
		if err == nil {
			connected := 0
			for _, s := range st.Slaves {
				if s.Connected {
					connected++
				}
			}
			if connected >= n {
				return nil
			}
			last = fmt.Sprintf("%d connected", connected)
		} else {
			last = err.Error()
		}
		if !sleepCtx(ctx, backoff) {
			return fmt.Errorf("the embedded slaves did not connect to the master in time (%s)", last)
		}
	}
}

// nameServers returns the NameServer address for clients.
func (e *embeddedCluster) nameServers() string { return e.ns.Addr() }

// masterAddr returns the master's client address.
func (e *embeddedCluster) masterAddr() string { return e.brokers[0].Addr() }

// slaveAddrs returns the slaves' client addresses, by brokerId.
func (e *embeddedCluster) slaveAddrs() []string {
	var out []string
	for _, b := range e.brokers[1:] {
		out = append(out, b.Addr())
	}
	return out
}

// describe returns the embedded group for the run's header: "broker ADDR" for a lone master,
// else the master's role and address and the slaves'.
func (e *embeddedCluster) describe() string {
	if len(e.brokers) == 1 {
		return fmt.Sprintf("broker %s (%s)", e.masterAddr(), e.role)
	}
	return fmt.Sprintf("group %s: master %s (%s), slaves %s", embeddedBrokerName, e.masterAddr(), e.role, strings.Join(e.slaveAddrs(), " "))
}

// close stops the slaves, the master and the NameServer and removes the data directory unless
// kept.
func (e *embeddedCluster) close() error {
	var errs []error
	for i := len(e.brokers) - 1; i >= 0; i-- {
		if err := e.brokers[i].Close(); err != nil {
			errs = append(errs, fmt.Errorf("embedded broker %d: %w", i, err))
		}
	}
	if e.ns != nil {
		if err := e.ns.Close(); err != nil {
			errs = append(errs, fmt.Errorf("embedded NameServer: %w", err))
		}
	}
	if !e.keep {
		if err := os.RemoveAll(e.dir); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}
