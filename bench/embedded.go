package bench

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"

	"github.com/petrel-mq/petrel/broker"
	"github.com/petrel-mq/petrel/namesrv"
)

// embeddedCluster is a NameServer and one master broker running in this process on loopback,
// with data in a directory of its own.
type embeddedCluster struct {
	ns     *namesrv.Server
	broker *broker.Broker
	dir    string
	keep   bool
}

// startEmbedded starts a NameServer and a broker on 127.0.0.1 (ports chosen by the kernel) with
// data in a new temporary directory, removed by close unless cfg.KeepData.
func startEmbedded(cfg *Config, log *slog.Logger) (_ *embeddedCluster, err error) {
	dir, err := os.MkdirTemp("", "petrel-bench-")
	if err != nil {
		return nil, fmt.Errorf("cannot create the embedded cluster's data directory: %w", err)
	}
	e := &embeddedCluster{dir: dir, keep: cfg.KeepData}
	defer func() {
		if err != nil {
			_ = e.close()
		}
	}()
	e.ns = namesrv.New(namesrv.Config{ListenAddr: "127.0.0.1:0", Logger: log})
	if err := e.ns.Start(); err != nil {
		return nil, fmt.Errorf("cannot start the embedded NameServer: %w", err)
	}
	bc := broker.DefaultConfig()
	bc.NamesrvAddr = e.ns.Addr()
	bc.ListenPort = 0
	bc.BindAddress = "127.0.0.1"
	bc.StorePathRootDir = filepath.Join(dir, "broker-a")
	bc.FlushDiskType = cfg.FlushDiskType
	bc.MappedFileSizeCommitLog = cfg.SegmentSize
	b, err := broker.New(bc, log)
	if err != nil {
		return nil, fmt.Errorf("cannot create the embedded broker: %w", err)
	}
	if err := b.Start(); err != nil {
		return nil, fmt.Errorf("cannot start the embedded broker: %w", err)
	}
	e.broker = b
	return e, nil
}

// nameServers returns the NameServer address for clients.
func (e *embeddedCluster) nameServers() string { return e.ns.Addr() }

// brokerAddr returns the broker's client address.
func (e *embeddedCluster) brokerAddr() string { return e.broker.Addr() }

// close stops the broker and the NameServer and removes the data directory unless kept.
func (e *embeddedCluster) close() error {
	var errs []error
	if e.broker != nil {
		if err := e.broker.Close(); err != nil {
			errs = append(errs, fmt.Errorf("embedded broker: %w", err))
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
