package broker

import (
	"fmt"
	"net"
	"strconv"
	"strings"
	"time"

	"github.com/petrel-mq/petrel/internal/props"
	"github.com/petrel-mq/petrel/protocol"
)

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
	// or 127.0.0.1 when binding all interfaces).
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
	// FileReservedTime is the retention age of commit-log segments (hours in the file, default 72).
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
	// AutoCreateTopicEnable creates an unknown topic on first send with DefaultTopicQueueNums
	// queues (RocketMQ's default is true; Petrel's is false, as recommended for production).
	AutoCreateTopicEnable bool `prop:"autoCreateTopicEnable"`
	// DefaultTopicQueueNums is the queue count of auto-created topics.
	DefaultTopicQueueNums int32 `prop:"defaultTopicQueueNums"`
	// NumEventLoop is the number of gnet event loops (default: one per CPU).
	NumEventLoop int `prop:"numEventLoop"`
	// ShutdownGracePeriod bounds the wait for in-flight requests on shutdown (ms in the file).
	ShutdownGracePeriod time.Duration `prop:"shutdownGracePeriod" unit:"ms"`
}

// DefaultConfig returns the defaults: RocketMQ's where RocketMQ has the setting.
func DefaultConfig() Config {
	return Config{
		BrokerClusterName:           "DefaultCluster",
		BrokerName:                  "broker-a",
		BrokerID:                    0,
		BrokerRole:                  RoleAsyncMaster,
		FlushDiskType:               AsyncFlush,
		ListenPort:                  10911,
		BindAddress:                 "0.0.0.0",
		StorePathRootDir:            "petrel-store",
		MappedFileSizeCommitLog:     1 << 30,
		ConsumeQueueFileEntries:     300_000,
		FlushIntervalCommitLog:      500 * time.Millisecond,
		FlushCommitLogDirtyBytes:    16 << 20,
		FileReservedTime:            72 * time.Hour,
		MaxMessageSize:              protocol.DefaultMaxMessageSize,
		MaxFrameSize:                protocol.DefaultMaxFrameSize,
		MaxPullBytes:                4 << 20,
		MaxPullMessages:             4096,
		LongPollingMaxWait:          30 * time.Second,
		ConnMaxInFlight:             4096,
		ConnMaxOutboundBytes:        16 << 20,
		RegisterNameServerPeriod:    30 * time.Second,
		FlushConsumerOffsetInterval: time.Second,
		DefaultTopicQueueNums:       8,
		ChannelExpiredTimeout:       120 * time.Second,
		ShutdownGracePeriod:         5 * time.Second,
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
	if c.BrokerRole == RoleSlave {
		return fmt.Errorf("brokerRole SLAVE is not supported by this version (replication is not built yet)")
	}
	if c.BrokerID != 0 {
		return fmt.Errorf("brokerId %d: a master has brokerId 0", c.BrokerID)
	}
	if c.BrokerName == "" || c.BrokerClusterName == "" {
		return fmt.Errorf("brokerName and brokerClusterName must not be empty")
	}
	if c.ListenPort < 0 || c.ListenPort > 65535 {
		return fmt.Errorf("listenPort %d out of range", c.ListenPort)
	}
	if c.StorePathRootDir == "" {
		return fmt.Errorf("storePathRootDir must not be empty")
	}
	if c.MappedFileSizeCommitLog < 64<<10 {
		return fmt.Errorf("mappedFileSizeCommitLog %d: at least 64 KiB", c.MappedFileSizeCommitLog)
	}
	if c.MaxMessageSize <= 0 || c.MaxFrameSize < protocol.FramePrefixSize {
		return fmt.Errorf("maxMessageSize %d / maxFrameSize %d: must be positive", c.MaxMessageSize, c.MaxFrameSize)
	}
	if c.MaxPullBytes <= 0 || c.MaxPullMessages <= 0 {
		return fmt.Errorf("maxPullBytes and maxPullMessages must be positive")
	}
	if c.DefaultTopicQueueNums <= 0 || c.DefaultTopicQueueNums > maxQueueNums {
		return fmt.Errorf("defaultTopicQueueNums %d out of range 1..%d", c.DefaultTopicQueueNums, maxQueueNums)
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

// advertisedHost returns the host part clients should dial.
func (c *Config) advertisedHost() string {
	if c.BrokerIP1 != "" {
		return c.BrokerIP1
	}
	if c.BindAddress == "" || c.BindAddress == "0.0.0.0" || c.BindAddress == "::" {
		return "127.0.0.1"
	}
	return c.BindAddress
}
