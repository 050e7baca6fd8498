package broker

import (
	"fmt"
	"net"
	"reflect"
	"strconv"
	"strings"
	"time"

	"github.com/petrel-mq/petrel/ha"
	"github.com/petrel-mq/petrel/internal/props"
	"github.com/petrel-mq/petrel/protocol"
)

//go:generate go run github.com/petrel-mq/petrel/internal/fielddoc/cmd/fielddoc -type Config -var configHelp -o config_help.go config.go

// Broker roles (RocketMQ BrokerRole).
const (
	RoleAsyncMaster = "ASYNC_MASTER"
	RoleSyncMaster  = "SYNC_MASTER"
	RoleSlave       = "SLAVE"
)

// Flush disk types (RocketMQ FlushDiskType).
const (
	AsyncFlush = "ASYNC_FLUSH"
	SyncFlush  = "SYNC_FLUSH"
)

// Config is a broker's configuration. Keys are RocketMQ's broker.conf keys where RocketMQ has
// the setting; the rest are Petrel's. Load it with LoadConfig, override single keys with Set.
//
// Each field's doc comment is the one description of its key: its first paragraph is also the
// key's help text (KeyHelp, petrel-broker --help), generated into config_help.go.
type Config struct {
	// BrokerClusterName is the cluster the broker group belongs to.
	BrokerClusterName string `prop:"brokerClusterName"`
	// BrokerName names the broker group; all members of a group share it.
	BrokerName string `prop:"brokerName"`
	// BrokerID is 0 for the master, > 0 for slaves.
	BrokerID int64 `prop:"brokerId"`
	// BrokerRole is ASYNC_MASTER, SYNC_MASTER or SLAVE.
	BrokerRole string `prop:"brokerRole"`
	// FlushDiskType is ASYNC_FLUSH or SYNC_FLUSH (group commit: a send is acknowledged after the
	// fdatasync/msync that covers it).
	FlushDiskType string `prop:"flushDiskType"`
	// NamesrvAddr lists the NameServers, ';'-separated host:port.
	NamesrvAddr string `prop:"namesrvAddr"`
	// ListenPort is the client port (RocketMQ default 10911); 0 picks a free port.
	ListenPort int `prop:"listenPort"`
	// BindAddress is the interface to listen on (default 0.0.0.0).
	BindAddress string `prop:"bindAddress"`
	// BrokerIP1 is the address advertised to NameServers and clients (default: the bind address,
	// or the host's first non-loopback IPv4 address when binding all interfaces).
	BrokerIP1 string `prop:"brokerIP1"`
	// StorePathRootDir holds the commit log, consume queues, offsets and topic configs.
	StorePathRootDir string `prop:"storePathRootDir"`
	// MappedFileSizeCommitLog is the commit-log segment size (bytes, default 1 GiB).
	MappedFileSizeCommitLog int64 `prop:"mappedFileSizeCommitLog"`
	// ConsumeQueueFileEntries is the number of index entries per consume-queue file.
	ConsumeQueueFileEntries int `prop:"consumeQueueFileEntries"`
	// FlushIntervalCommitLog is the ASYNC_FLUSH period (ms in the file).
	FlushIntervalCommitLog time.Duration `prop:"flushIntervalCommitLog" unit:"ms"`
	// FlushCommitLogDirtyBytes makes ASYNC_FLUSH flush early once this many bytes are dirty.
	FlushCommitLogDirtyBytes int64 `prop:"flushCommitLogDirtyBytes"`
	// CommitLogWriteThroughFile writes the active commit-log segment with pwrite (default true;
	// while the average batch is under 2 KiB appends still copy into the segment's mapping,
	// populated ahead); false copies every append into the mapping, RocketMQ's default.
	// Consumers and slaves read through the mapping either way. On a small virtual machine
	// writing through the file removed the page faults that zeroed fresh pages ahead of the
	// writes and the per-page TLB shootdowns of writeback (BENCHMARKS.md).
	CommitLogWriteThroughFile bool `prop:"commitLogWriteThroughFile"`
	// FileReservedTime is the retention age of commit-log segments (hours in the file, default
	// 72, as RocketMQ; 0 also means 72; a negative value never deletes segments by age).
	FileReservedTime time.Duration `prop:"fileReservedTime" unit:"h"`
	// RetentionBytes deletes the oldest segments while the log is larger (bytes, 0 = no limit).
	RetentionBytes int64 `prop:"retentionBytes"`
	// MaxMessageSize bounds one message body (bytes, default 4 MiB).
	MaxMessageSize int `prop:"maxMessageSize"`
	// MaxFrameSize bounds one request frame (bytes, default 16 MiB).
	MaxFrameSize int `prop:"maxFrameSize"`
	// MaxPullBytes caps the body of one pull response (bytes, default 4 MiB); larger asks are
	// reduced to it.
	MaxPullBytes int `prop:"maxPullBytes"`
	// MaxPullMessages caps the messages of one pull response (default 4096).
	MaxPullMessages int `prop:"maxPullMessages"`
	// LongPollingMaxWait caps a pull's long-poll wait (ms in the file, default 30 s).
	LongPollingMaxWait time.Duration `prop:"longPollingMaxWait" unit:"ms"`
	// ConnMaxInFlight bounds requests of one connection waiting for an answer (sync flush,
	// long polls); reading from the connection pauses above it.
	ConnMaxInFlight int `prop:"connMaxInFlight"`
	// ConnMaxOutboundBytes pauses reading from a connection while more than this many response
	// bytes wait to be sent to it.
	ConnMaxOutboundBytes int `prop:"connMaxOutboundBytes"`
	// RegisterNameServerPeriod is the registration (heartbeat) period (ms in the file, default 30 s).
	RegisterNameServerPeriod time.Duration `prop:"registerNameServerPeriod" unit:"ms"`
	// FlushConsumerOffsetInterval is how often committed consumer offsets are persisted (ms in
	// the file, default 1 s).
	FlushConsumerOffsetInterval time.Duration `prop:"flushConsumerOffsetInterval" unit:"ms"`
	// ChannelExpiredTimeout forgets a consumer client that sent no heartbeat for this long (ms
	// in the file, default 120 s as RocketMQ); a closed connection forgets it at once.
	ChannelExpiredTimeout time.Duration `prop:"channelExpiredTimeout" unit:"ms"`
	// AutoCreateTopicEnable creates an unknown topic on first send with defaultTopicQueueNums
	// queues (RocketMQ's default is true; Petrel's is false, as recommended for production).
	AutoCreateTopicEnable bool `prop:"autoCreateTopicEnable"`
	// DefaultTopicQueueNums is the queue count of auto-created topics.
	DefaultTopicQueueNums int32 `prop:"defaultTopicQueueNums"`
	// NumEventLoop is the number of gnet event loops (default: one per CPU).
	NumEventLoop int `prop:"numEventLoop"`
	// ReserveLoopProcs raises GOMAXPROCS by one per event loop (and one for the accepting
	// reactor) while the broker runs (default true): a loop waits in a blocking epoll_wait that
	// holds a P, and without spare Ps the other goroutines wait up to 10 ms for the runtime to
	// take it back.
	//
	// procs.go explains it further.
	ReserveLoopProcs bool `prop:"reserveLoopProcs"`
	// MaxConnections caps client connections; more are closed at once with a log line, so the
	// broker never runs out of file descriptors (0: the open-file limit minus 1024 kept for
	// the store, at least 64).
	MaxConnections int `prop:"maxConnections"`
	// HAMaxConnections caps the connections of the replication port (haListenPort); more are
	// closed at once with a log line (default 64: each slave holds one).
	HAMaxConnections int `prop:"haMaxConnections"`
	// RaftMaxConnections caps the connections of the Raft port (with enableRaftHA); more are
	// closed at once with a log line (default 64: each other member holds a few).
	RaftMaxConnections int `prop:"raftMaxConnections"`
	// MetricsMaxConnections caps the connections of the admin HTTP port
	// (metricsPromExporterPort); more are closed at once with a log line (default 16).
	MetricsMaxConnections int `prop:"metricsMaxConnections"`
	// MaxConsumerGroups caps the consumer groups that hold committed offsets on this broker
	// (default 10000): a commit of another group is refused with a log line, so that clients
	// naming ever new groups cannot grow the offset table, its file and the per-group metrics
	// without bound. Offsets merged from the group's other members are kept regardless.
	MaxConsumerGroups int `prop:"maxConsumerGroups"`
	// MaxInboundBufferedBytes caps the bytes of incomplete request frames buffered over all
	// connections (default 256 MiB); past it, connections holding an incomplete frame are closed.
	MaxInboundBufferedBytes int64 `prop:"maxInboundBufferedBytes"`
	// TraceRingEntries is how many send traces the broker keeps (default 4096, 0: send tracing
	// off, at no cost): a send whose request header is a trace header (a client sampling its
	// sends) has the time it passed each broker stage recorded, and GET_SEND_TRACES (petrel-bench)
	// reads them. About 200 bytes each, allocated at start.
	TraceRingEntries int `prop:"traceRingEntries"`
	// FrameReadTimeout closes a connection whose request frame stays incomplete this long after
	// its first byte, or that sends no whole request this long after it connects (ms in the
	// file, default 30 s): on the client, replication, Raft and metrics ports alike (on the
	// metrics port a request's header gets at most 10 s).
	FrameReadTimeout time.Duration `prop:"frameReadTimeout" unit:"ms"`
	// HAListenPort is the replication port a master serves its slaves on (default listenPort+1,
	// as RocketMQ's haListenPort; with listenPort 0, a free port).
	HAListenPort int `prop:"haListenPort"`
	// HAMasterAddress is the master's replication address (host:port) a slave pulls from; empty:
	// learnt from the NameServers' answer to the slave's registration.
	HAMasterAddress string `prop:"haMasterAddress"`
	// MinInSyncReplicas is how many members, the master included, must hold a message before a
	// SYNC_MASTER acknowledges it; fewer in-sync members refuse sends (default 1).
	MinInSyncReplicas int `prop:"minInSyncReplicas"`
	// SyncReplicationTimeout bounds a SYNC_MASTER's wait for its in-sync slaves (ms in the file,
	// default 2 s: below the client's 3 s send timeout, so that a client hears
	// FLUSH_SLAVE_TIMEOUT rather than nothing); past it the send answers FLUSH_SLAVE_TIMEOUT
	// (stored on the master only).
	SyncReplicationTimeout time.Duration `prop:"syncReplicationTimeout" unit:"ms"`
	// HACompression is the codec of replication chunks: s2 (default), zstd or none.
	HACompression string `prop:"haCompression"`
	// HAMaxChunkBytes caps one replication chunk before compression (bytes, default 1 MiB).
	HAMaxChunkBytes int `prop:"haMaxChunkBytes"`
	// HAInSyncMaxLagBytes takes a slave out of the in-sync set when it lags more than this many
	// bytes for longer than haInSyncMaxLagTime (default 256 MiB, as RocketMQ's
	// haMaxGapNotInSync); it rejoins once caught up, and a closed connection leaves at once.
	HAInSyncMaxLagBytes int64 `prop:"haInSyncMaxLagBytes"`
	// HAInSyncMaxLagTime is how long a slave may lag more than haInSyncMaxLagBytes, or stay
	// silent, before it leaves the in-sync set (ms in the file, default 1 s: a stalled slave
	// holds SYNC sends up for at most that long).
	HAInSyncMaxLagTime time.Duration `prop:"haInSyncMaxLagTime" unit:"ms"`
	// SlaveReadEnable lets the master suggest that consumers read from slaves (default true).
	SlaveReadEnable bool `prop:"slaveReadEnable"`
	// AccessMessageInMemoryMaxRatio sends a consumer to a slave when it reads further behind the
	// log end than this percentage of the machine's memory: it reads old data, likely out of the
	// page cache (RocketMQ's key and default, 40).
	AccessMessageInMemoryMaxRatio int `prop:"accessMessageInMemoryMaxRatio"`
	// SlaveReadBehindBytes replaces accessMessageInMemoryMaxRatio by a distance behind the log
	// end in bytes (0: use the ratio).
	SlaveReadBehindBytes int64 `prop:"slaveReadBehindBytes"`
	// SlaveReadLoadMsgsPerSec is the put rate (messages/s) above which the master counts as
	// loaded and sends consumers to in-sync slaves (0: never).
	SlaveReadLoadMsgsPerSec int64 `prop:"slaveReadLoadMsgsPerSec"`
	// SlaveSyncInterval is how often a slave syncs topic configs and consumer offsets with its
	// master (ms in the file, default 3 s).
	SlaveSyncInterval time.Duration `prop:"slaveSyncInterval" unit:"ms"`
	// EnableRaftHA makes the broker a member of a Raft-elected group of three or more: the Raft
	// leader that is in the in-sync set acts as master and registers as brokerId 0; the others
	// are its slaves. brokerRole (SYNC_MASTER or ASYNC_MASTER) is then the acknowledgement mode
	// of whoever is master, and brokerId (>= 1) the member's id while it is a slave.
	//
	// DESIGN.md ("Election") describes the protocol.
	EnableRaftHA bool `prop:"enableRaftHA"`
	// RaftSelfID is this member's Raft server id (e.g. b1), one of raftPeers.
	RaftSelfID string `prop:"raftSelfId"`
	// RaftPeers lists every member of the group as id-host:port of its Raft port, separated by
	// ';' (e.g. b1-127.0.0.1:10913;b2-127.0.0.1:10923;b3-127.0.0.1:10933, as DLedger's
	// dLegerPeers); keep Raft ports below the ephemeral port range.
	RaftPeers string `prop:"raftPeers"`
	// RaftHeartbeatTimeout is about how long a follower goes without hearing from the Raft
	// leader before it starts an election (ms in the file, default 300: a LAN). The leader lease
	// is half of it, so a master cut off from its quorum stops acknowledging before another can
	// be elected. Raise it on a slow network or a machine whose CPUs are often saturated: a
	// leader starved of CPU for a lease loses its role.
	RaftHeartbeatTimeout time.Duration `prop:"raftHeartbeatTimeout" unit:"ms"`
	// RaftElectionTimeout is how long a Raft candidate waits for votes before it tries again (ms
	// in the file, default 300); raise it with raftHeartbeatTimeout.
	RaftElectionTimeout time.Duration `prop:"raftElectionTimeout" unit:"ms"`
	// MetricsPromExporterPort is the admin HTTP port (RocketMQ 5's key): Prometheus metrics at
	// /metrics and Go profiles (net/http/pprof) under /debug/pprof/, on bindAddress. 0, the
	// default, serves neither.
	MetricsPromExporterPort int `prop:"metricsPromExporterPort"`
	// ShutdownGracePeriod bounds the wait for in-flight requests on shutdown (ms in the file).
	ShutdownGracePeriod time.Duration `prop:"shutdownGracePeriod" unit:"ms"`

	// metricsAnyPort, for tests, serves metrics on a free port the kernel picks (see
	// Broker.MetricsAddr), whatever MetricsPromExporterPort says.
	metricsAnyPort bool
}

// DefaultConfig returns the defaults: RocketMQ's where RocketMQ has the setting.
func DefaultConfig() Config {
	return Config{
		BrokerClusterName:             "DefaultCluster",
		BrokerName:                    "broker-a",
		BrokerID:                      0,
		BrokerRole:                    RoleAsyncMaster,
		FlushDiskType:                 AsyncFlush,
		ListenPort:                    10911,
		BindAddress:                   "0.0.0.0",
		StorePathRootDir:              "petrel-store",
		MappedFileSizeCommitLog:       1 << 30,
		ConsumeQueueFileEntries:       300_000,
		FlushIntervalCommitLog:        500 * time.Millisecond,
		CommitLogWriteThroughFile:     true,
		FlushCommitLogDirtyBytes:      16 << 20,
		FileReservedTime:              72 * time.Hour,
		MaxMessageSize:                protocol.DefaultMaxMessageSize,
		MaxFrameSize:                  protocol.DefaultMaxFrameSize,
		MaxPullBytes:                  4 << 20,
		MaxPullMessages:               4096,
		LongPollingMaxWait:            30 * time.Second,
		ConnMaxInFlight:               4096,
		ConnMaxOutboundBytes:          16 << 20,
		RegisterNameServerPeriod:      30 * time.Second,
		FlushConsumerOffsetInterval:   time.Second,
		DefaultTopicQueueNums:         8,
		ChannelExpiredTimeout:         120 * time.Second,
		ShutdownGracePeriod:           5 * time.Second,
		MaxInboundBufferedBytes:       256 << 20,
		TraceRingEntries:              4096,
		MinInSyncReplicas:             1,
		SyncReplicationTimeout:        2 * time.Second,
		HACompression:                 "s2",
		HAMaxChunkBytes:               1 << 20,
		HAInSyncMaxLagBytes:           256 << 20,
		HAInSyncMaxLagTime:            time.Second,
		SlaveReadEnable:               true,
		ReserveLoopProcs:              true,
		AccessMessageInMemoryMaxRatio: 40,
		SlaveReadLoadMsgsPerSec:       200_000,
		SlaveSyncInterval:             3 * time.Second,
		FrameReadTimeout:              30 * time.Second,
		HAMaxConnections:              64,
		RaftMaxConnections:            64,
		MetricsMaxConnections:         16,
		MaxConsumerGroups:             10000,
		RaftHeartbeatTimeout:          300 * time.Millisecond,
		RaftElectionTimeout:           300 * time.Millisecond,
	}
}

// LoadConfig returns DefaultConfig overridden by the properties file at path.
func LoadConfig(path string) (Config, error) {
	cfg := DefaultConfig()
	if err := props.Load(path, &cfg); err != nil {
		return cfg, err
	}
	return cfg, cfg.Validate()
}

// KeyHelp returns the description of a config key, "" for an unknown key: the first paragraph
// of its Config field's doc comment, on one line.
func KeyHelp(key string) string {
	t := reflect.TypeOf(Config{})
	for i := 0; i < t.NumField(); i++ {
		if f := t.Field(i); f.Tag.Get("prop") == key {
			return configHelp[f.Name]
		}
	}
	return ""
}

// Set overrides one key, as a flag does.
func (c *Config) Set(key, value string) error { return props.Set(c, key, value) }

// Keys lists the config keys.
func (c *Config) Keys() []string { return props.Keys(c) }

// String returns the effective config, one key=value per line.
func (c *Config) String() string { return props.Format(c) }

// Validate checks the config and returns the first problem found.
func (c *Config) Validate() error {
	switch c.BrokerRole {
	case RoleAsyncMaster, RoleSyncMaster, RoleSlave:
	default:
		return fmt.Errorf("brokerRole %q: want ASYNC_MASTER, SYNC_MASTER or SLAVE", c.BrokerRole)
	}
	switch c.FlushDiskType {
	case AsyncFlush, SyncFlush:
	default:
		return fmt.Errorf("flushDiskType %q: want ASYNC_FLUSH or SYNC_FLUSH", c.FlushDiskType)
	}
	if c.EnableRaftHA {
		if err := c.validateRaft(); err != nil {
			return err
		}
	} else {
		if c.BrokerRole == RoleSlave && c.BrokerID <= 0 {
			return fmt.Errorf("brokerId %d: a SLAVE has brokerId > 0", c.BrokerID)
		}
		if c.BrokerRole != RoleSlave && c.BrokerID != 0 {
			return fmt.Errorf("brokerId %d: a master (%s) has brokerId 0", c.BrokerID, c.BrokerRole)
		}
	}
	if c.HAListenPort < 0 || c.HAListenPort > 65535 || (c.HAListenPort != 0 && c.HAListenPort == c.ListenPort) {
		return fmt.Errorf("haListenPort %d: out of range or equal to listenPort", c.HAListenPort)
	}
	if err := c.validateMetricsPort(); err != nil {
		return err
	}
	if c.HAMasterAddress != "" {
		if _, _, err := net.SplitHostPort(c.HAMasterAddress); err != nil {
			return fmt.Errorf("haMasterAddress %q: %w", c.HAMasterAddress, err)
		}
	}
	if c.MinInSyncReplicas < 1 {
		return fmt.Errorf("minInSyncReplicas %d: at least 1 (the master)", c.MinInSyncReplicas)
	}
	if _, err := ha.ParseCodec(c.HACompression); err != nil {
		return fmt.Errorf("haCompression: %w", err)
	}
	if c.HAMaxChunkBytes < 64<<10 || c.HAMaxChunkBytes > 64<<20 {
		return fmt.Errorf("haMaxChunkBytes %d: between 64 KiB and 64 MiB", c.HAMaxChunkBytes)
	}
	if c.HAInSyncMaxLagBytes < 0 || c.SlaveReadBehindBytes < 0 || c.SlaveReadLoadMsgsPerSec < 0 {
		return fmt.Errorf("haInSyncMaxLagBytes, slaveReadBehindBytes and slaveReadLoadMsgsPerSec must not be negative")
	}
	if c.AccessMessageInMemoryMaxRatio < 1 || c.AccessMessageInMemoryMaxRatio > 100 {
		return fmt.Errorf("accessMessageInMemoryMaxRatio %d: 1..100 (percent of memory)", c.AccessMessageInMemoryMaxRatio)
	}
	for _, n := range []struct{ key, v string }{{"brokerName", c.BrokerName}, {"brokerClusterName", c.BrokerClusterName}} {
		if err := protocol.ValidateGroup([]byte(n.v)); err != nil {
			return fmt.Errorf("%s %q: 1..255 characters of [A-Za-z0-9_%%|-]", n.key, n.v)
		}
	}
	if c.ListenPort < 0 || c.ListenPort > 65535 {
		return fmt.Errorf("listenPort %d out of range 0..65535", c.ListenPort)
	}
	if c.BindAddress != "" && net.ParseIP(c.BindAddress) == nil {
		return fmt.Errorf("bindAddress %q: want an IP address", c.BindAddress)
	}
	if c.BrokerIP1 != "" && net.ParseIP(c.BrokerIP1) == nil {
		return fmt.Errorf("brokerIP1 %q: want an IP address (the address NameServers and clients dial), such as 10.0.0.7", c.BrokerIP1)
	}
	if c.StorePathRootDir == "" {
		return fmt.Errorf("storePathRootDir must not be empty")
	}
	if c.MappedFileSizeCommitLog < 64<<10 {
		return fmt.Errorf("mappedFileSizeCommitLog %d: at least 64 KiB", c.MappedFileSizeCommitLog)
	}
	if c.ConsumeQueueFileEntries < 0 {
		return fmt.Errorf("consumeQueueFileEntries %d: must not be negative (0: default)", c.ConsumeQueueFileEntries)
	}
	if c.MaxMessageSize <= 0 {
		return fmt.Errorf("maxMessageSize %d: must be positive", c.MaxMessageSize)
	}
	if c.MaxFrameSize < 4<<10 {
		return fmt.Errorf("maxFrameSize %d: at least 4 KiB", c.MaxFrameSize)
	}
	if c.MaxPullBytes <= 0 || c.MaxPullMessages <= 0 {
		return fmt.Errorf("maxPullBytes %d and maxPullMessages %d must be positive", c.MaxPullBytes, c.MaxPullMessages)
	}
	if c.DefaultTopicQueueNums <= 0 || c.DefaultTopicQueueNums > protocol.MaxQueueNums {
		return fmt.Errorf("defaultTopicQueueNums %d out of range 1..%d", c.DefaultTopicQueueNums, protocol.MaxQueueNums)
	}
	if c.ConnMaxInFlight < 1 {
		return fmt.Errorf("connMaxInFlight %d: at least 1", c.ConnMaxInFlight)
	}
	if c.ConnMaxOutboundBytes < 64<<10 {
		return fmt.Errorf("connMaxOutboundBytes %d: at least 64 KiB", c.ConnMaxOutboundBytes)
	}
	if c.NumEventLoop < 0 || c.MaxConnections < 0 {
		return fmt.Errorf("numEventLoop %d and maxConnections %d must not be negative (0: automatic)", c.NumEventLoop, c.MaxConnections)
	}
	for _, n := range []struct {
		key string
		v   int
	}{{"haMaxConnections", c.HAMaxConnections}, {"raftMaxConnections", c.RaftMaxConnections}, {"metricsMaxConnections", c.MetricsMaxConnections},
		{"maxConsumerGroups", c.MaxConsumerGroups}} {
		if n.v < 1 {
			return fmt.Errorf("%s %d: at least 1", n.key, n.v)
		}
	}
	if c.TraceRingEntries < 0 || c.TraceRingEntries > maxTraceRingEntries {
		return fmt.Errorf("traceRingEntries %d: between 0 (off) and %d", c.TraceRingEntries, maxTraceRingEntries)
	}
	if c.MaxInboundBufferedBytes < int64(c.MaxFrameSize) {
		return fmt.Errorf("maxInboundBufferedBytes %d: at least maxFrameSize (%d)", c.MaxInboundBufferedBytes, c.MaxFrameSize)
	}
	if c.FlushCommitLogDirtyBytes <= 0 || c.RetentionBytes < 0 {
		return fmt.Errorf("flushCommitLogDirtyBytes %d must be positive, retentionBytes %d not negative", c.FlushCommitLogDirtyBytes, c.RetentionBytes)
	}
	for _, d := range []struct {
		key string
		v   time.Duration
		min time.Duration
	}{
		{"flushIntervalCommitLog", c.FlushIntervalCommitLog, time.Millisecond},
		{"registerNameServerPeriod", c.RegisterNameServerPeriod, 10 * time.Millisecond},
		{"flushConsumerOffsetInterval", c.FlushConsumerOffsetInterval, 10 * time.Millisecond},
		{"channelExpiredTimeout", c.ChannelExpiredTimeout, time.Second},
		{"frameReadTimeout", c.FrameReadTimeout, 100 * time.Millisecond},
		{"longPollingMaxWait", c.LongPollingMaxWait, 0},
		{"shutdownGracePeriod", c.ShutdownGracePeriod, 0},
		{"syncReplicationTimeout", c.SyncReplicationTimeout, time.Millisecond},
		{"haInSyncMaxLagTime", c.HAInSyncMaxLagTime, 10 * time.Millisecond},
		{"slaveSyncInterval", c.SlaveSyncInterval, 10 * time.Millisecond},
		{"raftHeartbeatTimeout", c.RaftHeartbeatTimeout, 10 * time.Millisecond},
		{"raftElectionTimeout", c.RaftElectionTimeout, 10 * time.Millisecond},
	} {
		if d.v < d.min {
			return fmt.Errorf("%s %v: at least %v", d.key, d.v, d.min)
		}
	}
	for _, a := range c.NamesrvAddrs() {
		if _, _, err := net.SplitHostPort(a); err != nil {
			return fmt.Errorf("namesrvAddr %q: %w", a, err)
		}
	}
	return nil
}

// NamesrvAddrs splits NamesrvAddr.
func (c *Config) NamesrvAddrs() []string {
	var out []string
	for _, a := range strings.Split(c.NamesrvAddr, ";") {
		if a = strings.TrimSpace(a); a != "" {
			out = append(out, a)
		}
	}
	return out
}

func (c *Config) listenAddr() string {
	return net.JoinHostPort(c.BindAddress, strconv.Itoa(c.ListenPort))
}

// haListenAddr returns the replication listen address: haListenPort, else listenPort+1, else
// (listenPort 0) a free port.
func (c *Config) haListenAddr() string {
	port := c.HAListenPort
	if port == 0 && c.ListenPort != 0 {
		port = c.ListenPort + 1
	}
	return net.JoinHostPort(c.BindAddress, strconv.Itoa(port))
}

// validateMetricsPort checks metricsPromExporterPort: 0..65535, and not a port the broker
// listens on for something else (listenPort, the replication port, its Raft port).
func (c *Config) validateMetricsPort() error {
	p := c.MetricsPromExporterPort
	if p < 0 || p > 65535 {
		return fmt.Errorf("metricsPromExporterPort %d out of range 0..65535 (0: off)", p)
	}
	if p == 0 {
		return nil
	}
	_, haPort, _ := net.SplitHostPort(c.haListenAddr())
	switch strconv.Itoa(p) {
	case strconv.Itoa(c.ListenPort):
		return fmt.Errorf("metricsPromExporterPort %d: also the listenPort", p)
	case haPort:
		return fmt.Errorf("metricsPromExporterPort %d: also the haListenPort (default listenPort+1)", p)
	}
	if c.EnableRaftHA {
		if peers, err := c.RaftPeerList(); err == nil {
			for _, peer := range peers {
				if peer.ID == c.RaftSelfID && portOf(peer.Addr) == strconv.Itoa(p) {
					return fmt.Errorf("metricsPromExporterPort %d: also this member's Raft port", p)
				}
			}
		}
	}
	return nil
}

// metricsListenAddr returns the admin HTTP listen address, "" when metrics are off.
func (c *Config) metricsListenAddr() string {
	switch {
	case c.metricsAnyPort:
		return net.JoinHostPort(c.BindAddress, "0")
	case c.MetricsPromExporterPort == 0:
		return ""
	}
	return net.JoinHostPort(c.BindAddress, strconv.Itoa(c.MetricsPromExporterPort))
}

// isSlave reports whether the broker is a slave by config (static roles).
func (c *Config) isSlave() bool { return !c.EnableRaftHA && c.BrokerRole == RoleSlave }

// validateRaft checks the keys of a Raft-elected member.
func (c *Config) validateRaft() error {
	if c.BrokerRole == RoleSlave {
		return fmt.Errorf("brokerRole SLAVE with enableRaftHA: want SYNC_MASTER or ASYNC_MASTER, the acknowledgement mode of whoever is master")
	}
	if c.BrokerID <= 0 {
		return fmt.Errorf("brokerId %d: a member of a Raft-elected group has brokerId >= 1 (it registers as 0 while master)", c.BrokerID)
	}
	peers, err := c.RaftPeerList()
	if err != nil {
		return err
	}
	if len(peers) < 3 {
		return fmt.Errorf("raftPeers %q: a Raft-elected group has at least 3 members (two-member groups keep static roles)", c.RaftPeers)
	}
	if c.MinInSyncReplicas > len(peers) {
		return fmt.Errorf("minInSyncReplicas %d: more than the %d members of raftPeers; no send could ever be acknowledged", c.MinInSyncReplicas, len(peers))
	}
	addrs := map[string]string{}
	var self *ha.RaftPeer
	for i, p := range peers {
		if other, dup := addrs[p.Addr]; dup {
			return fmt.Errorf("raftPeers: %s and %s have the same address %s", other, p.ID, p.Addr)
		}
		addrs[p.Addr] = p.ID
		if p.ID == c.RaftSelfID {
			self = &peers[i]
		}
	}
	if self == nil {
		return fmt.Errorf("raftSelfId %q is not one of raftPeers %q", c.RaftSelfID, c.RaftPeers)
	}
	_, port, _ := net.SplitHostPort(self.Addr)
	_, haPort, _ := net.SplitHostPort(c.haListenAddr())
	switch port {
	case strconv.Itoa(c.ListenPort):
		return fmt.Errorf("raftPeers: this member's Raft port %s is also its listenPort", port)
	case haPort:
		return fmt.Errorf("raftPeers: this member's Raft port %s is also its haListenPort", port)
	}
	return nil
}

// RaftPeerList parses RaftPeers ("id-host:port;..."). Ids are unique and made of
// [A-Za-z0-9_]; addresses are host:port.
func (c *Config) RaftPeerList() ([]ha.RaftPeer, error) {
	var out []ha.RaftPeer
	seen := map[string]bool{}
	for _, item := range strings.Split(c.RaftPeers, ";") {
		if item = strings.TrimSpace(item); item == "" {
			continue
		}
		id, addr, ok := strings.Cut(item, "-")
		if !ok || id == "" || strings.Trim(id, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_") != "" {
			return nil, fmt.Errorf("raftPeers item %q: want id-host:port with an id of [A-Za-z0-9_]", item)
		}
		_, port, err := net.SplitHostPort(addr)
		if err != nil {
			return nil, fmt.Errorf("raftPeers item %q: %w", item, err)
		}
		if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 {
			return nil, fmt.Errorf("raftPeers item %q: port %q is not a number in 1..65535", item, port)
		}
		if seen[id] {
			return nil, fmt.Errorf("raftPeers: id %q appears twice", id)
		}
		seen[id] = true
		out = append(out, ha.RaftPeer{ID: id, Addr: addr})
	}
	return out, nil
}

// advertisedHost returns the host part clients should dial: brokerIP1, else the bind address,
// else (bound to all interfaces) the host's first non-loopback IPv4 address, as RocketMQ
// picks its local address, else 127.0.0.1.
func (c *Config) advertisedHost() string {
	if c.BrokerIP1 != "" {
		return c.BrokerIP1
	}
	if c.BindAddress != "" && c.BindAddress != "0.0.0.0" && c.BindAddress != "::" {
		return c.BindAddress
	}
	if ip := localIPv4(); ip != "" {
		return ip
	}
	return "127.0.0.1"
}

// localIPv4 returns the first IPv4 address of an up, non-loopback interface, or "".
func localIPv4() string {
	ifaces, err := net.Interfaces()
	if err != nil {
		return ""
	}
	for _, ifc := range ifaces {
		if ifc.Flags&net.FlagUp == 0 || ifc.Flags&net.FlagLoopback != 0 {
			continue
		}
		addrs, err := ifc.Addrs()
		if err != nil {
			continue
		}
		for _, a := range addrs {
			if n, ok := a.(*net.IPNet); ok && n.IP.To4() != nil && !n.IP.IsLinkLocalUnicast() {
				return n.IP.String()
			}
		}
	}
	return ""
}
