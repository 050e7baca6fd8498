package namesrv

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/magiconair/properties"

	"github.com/petrel-mq/petrel/protocol/rpc"
)

// Defaults, as RocketMQ's NameServer.
const (
	// DefaultListenAddr is where a NameServer listens unless told otherwise (RocketMQ's port).
	DefaultListenAddr = "0.0.0.0:9876"
	// DefaultBrokerExpiry is how long a broker may stay silent before it is removed, as
	// RocketMQ's BROKER_CHANNEL_EXPIRED_TIME.
	DefaultBrokerExpiry = 120 * time.Second
	// DefaultScanInterval is how often silent brokers are looked for, as RocketMQ's
	// scanNotActiveBrokerInterval.
	DefaultScanInterval = 5 * time.Second
	// DefaultFrameReadTimeout bounds a request frame from its first byte to its last, and a
	// connection's first request from its accept. NameServer requests are small (a
	// registration with 10,000 topics is under a megabyte).
	DefaultFrameReadTimeout = 10 * time.Second
	// DefaultRegistrationPeriod is the brokers' default registration period (the broker's
	// registerNameServerPeriod, RocketMQ's 30 s).
	DefaultRegistrationPeriod = 30 * time.Second
	// DefaultMaxConnections caps the connections served at once, lowered to the open-file
	// limit less 64 descriptors when that is smaller: every client and broker holds one.
	DefaultMaxConnections = 16384
)

// ErrConfig is wrapped by every configuration error (bad value, unknown key, bad file).
var ErrConfig = errors.New("namesrv: invalid configuration")

// Config configures a Server. The zero value of every field means its default (see
// DefaultConfig), so Config{} is usable.
//
// Each field's doc comment is its one description: its first paragraph is also the help text
// of the petrel-namesrv flag that sets it (ConfigHelp), generated into config_help.go.
type Config struct {
	// ListenAddr is the TCP address to listen on (host:port); port 0 picks a free port.
	//
	// Server.Addr reports the address listened on. Default DefaultListenAddr.
	ListenAddr string
	// BrokerExpiry removes a broker that has not registered for this long.
	//
	// Default DefaultBrokerExpiry.
	BrokerExpiry time.Duration
	// ScanInterval is how often expired brokers are looked for.
	//
	// Default DefaultScanInterval.
	ScanInterval time.Duration
	// FrameReadTimeout closes a connection whose request frame is not whole this long after
	// its first byte, or that sends no whole request this long after it connects.
	//
	// A connection silent between requests is closed after BrokerExpiry (at least a second).
	// Default DefaultFrameReadTimeout.
	FrameReadTimeout time.Duration
	// MaxConnections caps the connections served at once; more are closed as they come, with
	// a log line.
	//
	// Default DefaultMaxConnections, or the open-file limit less 64 when lower.
	MaxConnections int
	// RegistrationPeriod is the brokers' registration period (their registerNameServerPeriod):
	// for this long after it starts, and while no broker has registered with it, the
	// NameServer answers NAMESRV_NOT_READY instead of "no such topic" and instead of the
	// cluster table.
	//
	// A broker registers with every NameServer at least once a period, so only after one
	// period can a NameServer that restarted know that a topic it has not heard of does not
	// exist, and that its cluster table is whole. Routes it knows are served from the start.
	// Set it to the longest registerNameServerPeriod of the brokers. Default
	// DefaultRegistrationPeriod.
	RegistrationPeriod time.Duration
	// Logger receives the server's logs.
	//
	// Default slog.Default().
	Logger *slog.Logger
	// Now is the clock used for heartbeats and expiry (tests move it).
	//
	// Default time.Now.
	Now func() time.Time
}

//go:generate go run github.com/petrel-mq/petrel/internal/fielddoc/cmd/fielddoc -type Config -var configHelp -o config_help.go config.go

// ConfigHelp returns the description of a Config field for a flag's help text (the first
// paragraph of the field's doc comment), "" for an unknown field.
func ConfigHelp(field string) string { return configHelp[field] }

// DefaultConfig returns the default configuration: listen on 0.0.0.0:9876, expire brokers
// after 120 s of silence, scan every 5 s, bound request frames by 10 s, serve at most 16384
// connections (fewer under a lower open-file limit), expect registrations every 30 s, log to
// slog.Default().
func DefaultConfig() Config {
	return Config{
		ListenAddr:         DefaultListenAddr,
		BrokerExpiry:       DefaultBrokerExpiry,
		ScanInterval:       DefaultScanInterval,
		FrameReadTimeout:   DefaultFrameReadTimeout,
		MaxConnections:     defaultMaxConnections(),
		RegistrationPeriod: DefaultRegistrationPeriod,
		Logger:             slog.Default(),
		Now:                time.Now,
	}
}

// defaultMaxConnections is DefaultMaxConnections, or the open-file limit less 64 descriptors
// when lower.
func defaultMaxConnections() int {
	if n := rpc.FileLimitConns(64); n > 0 && n < DefaultMaxConnections {
		return n
	}
	return DefaultMaxConnections
}

// withDefaults returns c with every zero field set to its default.
func (c Config) withDefaults() Config {
	d := DefaultConfig()
	if c.ListenAddr == "" {
		c.ListenAddr = d.ListenAddr
	}
	if c.BrokerExpiry == 0 {
		c.BrokerExpiry = d.BrokerExpiry
	}
	if c.ScanInterval == 0 {
		c.ScanInterval = d.ScanInterval
	}
	if c.FrameReadTimeout == 0 {
		c.FrameReadTimeout = d.FrameReadTimeout
	}
	if c.MaxConnections == 0 {
		c.MaxConnections = d.MaxConnections
	}
	if c.RegistrationPeriod == 0 {
		c.RegistrationPeriod = d.RegistrationPeriod
	}
	if c.Logger == nil {
		c.Logger = d.Logger
	}
	if c.Now == nil {
		c.Now = d.Now
	}
	return c
}

// Validate reports the first invalid field as an error wrapping ErrConfig. Zero fields are
// valid (they mean the default).
func (c *Config) Validate() error {
	if c.ListenAddr != "" {
		if _, _, err := splitListenAddr(c.ListenAddr); err != nil {
			return err
		}
	}
	if c.BrokerExpiry < 0 {
		return fmt.Errorf("%w: broker expiry %v is negative", ErrConfig, c.BrokerExpiry)
	}
	if c.ScanInterval < 0 {
		return fmt.Errorf("%w: scan interval %v is negative", ErrConfig, c.ScanInterval)
	}
	if c.FrameReadTimeout < 0 {
		return fmt.Errorf("%w: frame read timeout %v is negative", ErrConfig, c.FrameReadTimeout)
	}
	if c.MaxConnections < 0 {
		return fmt.Errorf("%w: max connections %d is negative", ErrConfig, c.MaxConnections)
	}
	if c.RegistrationPeriod < 0 {
		return fmt.Errorf("%w: registration period %v is negative", ErrConfig, c.RegistrationPeriod)
	}
	return nil
}

func splitListenAddr(addr string) (host string, port int, err error) {
	h, p, err := net.SplitHostPort(addr)
	if err != nil {
		return "", 0, fmt.Errorf("%w: listen address %q: %v", ErrConfig, addr, err)
	}
	port, err = strconv.Atoi(p)
	if err != nil || port < 0 || port > 65535 {
		return "", 0, fmt.Errorf("%w: listen address %q: port %q is not a number in [0, 65535]", ErrConfig, addr, p)
	}
	return h, port, nil
}

// Keys of a namesrv.conf file. Durations are integers in milliseconds, as in RocketMQ.
const (
	// KeyListenAddr is the whole listen address, host:port. It cannot be combined with
	// KeyBindAddress or KeyListenPort.
	KeyListenAddr = "listenAddr"
	// KeyBindAddress is the host part of the listen address (RocketMQ's bindAddress).
	KeyBindAddress = "bindAddress"
	// KeyListenPort is the port part of the listen address (RocketMQ's listenPort).
	KeyListenPort = "listenPort"
	// KeyBrokerExpiryMs is Config.BrokerExpiry in milliseconds.
	KeyBrokerExpiryMs = "brokerExpiryMs"
	// KeyScanIntervalMs is Config.ScanInterval in milliseconds.
	KeyScanIntervalMs = "scanIntervalMs"
	// KeyScanNotActiveBrokerInterval is RocketMQ's name of KeyScanIntervalMs (milliseconds).
	KeyScanNotActiveBrokerInterval = "scanNotActiveBrokerInterval"
	// KeyFrameReadTimeoutMs is Config.FrameReadTimeout in milliseconds.
	KeyFrameReadTimeoutMs = "frameReadTimeoutMs"
	// KeyMaxConnections is Config.MaxConnections.
	KeyMaxConnections = "maxConnections"
	// KeyRegistrationPeriodMs is Config.RegistrationPeriod in milliseconds.
	KeyRegistrationPeriodMs = "registrationPeriodMs"
)

// LoadFile applies the RocketMQ-style properties file at path to c (see Load).
func (c *Config) LoadFile(path string) error {
	data, err := os.ReadFile(path)
	if err != nil {
		return fmt.Errorf("%w: cannot read %s: %v", ErrConfig, path, err)
	}
	return c.Load(data, path)
}

// Load applies Java-properties text (key=value lines, # comments) to c; source names it in
// errors. Keys are KeyListenAddr, KeyBindAddress, KeyListenPort, KeyBrokerExpiryMs,
// KeyScanIntervalMs, KeyScanNotActiveBrokerInterval, KeyFrameReadTimeoutMs,
// KeyMaxConnections and KeyRegistrationPeriodMs; keys not set keep c's values. An
// unknown key, a bad value or a conflicting pair of keys is an error wrapping ErrConfig that
// names the key, and leaves c unchanged.
func (c *Config) Load(data []byte, source string) error {
	l := properties.Loader{Encoding: properties.UTF8, DisableExpansion: true}
	p, err := l.LoadBytes(data)
	if err != nil {
		return fmt.Errorf("%w: %s: %v", ErrConfig, source, err)
	}
	next := *c
	keys := p.Keys()
	sort.Strings(keys)
	for _, k := range keys {
		switch k {
		case KeyListenAddr, KeyBindAddress, KeyListenPort, KeyBrokerExpiryMs, KeyScanIntervalMs, KeyScanNotActiveBrokerInterval,
			KeyFrameReadTimeoutMs, KeyMaxConnections, KeyRegistrationPeriodMs:
		default:
			return fmt.Errorf("%w: %s: unknown key %q", ErrConfig, source, k)
		}
	}
	get := func(k string) (string, bool) {
		v, ok := p.Get(k)
		return strings.TrimSpace(v), ok
	}
	ms := func(k string) (time.Duration, bool, error) {
		v, ok := get(k)
		if !ok {
			return 0, false, nil
		}
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n <= 0 || n > int64(time.Duration(1<<63-1)/time.Millisecond) {
			return 0, false, fmt.Errorf("%w: %s: %s=%q is not a positive number of milliseconds", ErrConfig, source, k, v)
		}
		return time.Duration(n) * time.Millisecond, true, nil
	}

	addr, hasAddr := get(KeyListenAddr)
	host, hasHost := get(KeyBindAddress)
	port, hasPort := get(KeyListenPort)
	switch {
	case hasAddr && (hasHost || hasPort):
		return fmt.Errorf("%w: %s: %s cannot be combined with %s or %s", ErrConfig, source, KeyListenAddr, KeyBindAddress, KeyListenPort)
	case hasAddr:
		if _, _, err := splitListenAddr(addr); err != nil {
			return fmt.Errorf("%s: %s: %w", source, KeyListenAddr, err)
		}
		next.ListenAddr = addr
	case hasHost || hasPort:
		cur := next.ListenAddr
		if cur == "" {
			cur = DefaultListenAddr
		}
		h, pt, err := splitListenAddr(cur)
		if err != nil {
			return err
		}
		if hasHost {
			h = host
		}
		if hasPort {
			n, err := strconv.Atoi(port)
			if err != nil || n < 0 || n > 65535 {
				return fmt.Errorf("%w: %s: %s=%q is not a port number", ErrConfig, source, KeyListenPort, port)
			}
			pt = n
		}
		next.ListenAddr = net.JoinHostPort(h, strconv.Itoa(pt))
	}

	if d, ok, err := ms(KeyBrokerExpiryMs); err != nil {
		return err
	} else if ok {
		next.BrokerExpiry = d
	}
	_, hasScan := get(KeyScanIntervalMs)
	_, hasRocketScan := get(KeyScanNotActiveBrokerInterval)
	if hasScan && hasRocketScan {
		return fmt.Errorf("%w: %s: set %s or %s, not both", ErrConfig, source, KeyScanIntervalMs, KeyScanNotActiveBrokerInterval)
	}
	for _, k := range []string{KeyScanIntervalMs, KeyScanNotActiveBrokerInterval} {
		if d, ok, err := ms(k); err != nil {
			return err
		} else if ok {
			next.ScanInterval = d
		}
	}
	if d, ok, err := ms(KeyFrameReadTimeoutMs); err != nil {
		return err
	} else if ok {
		next.FrameReadTimeout = d
	}
	if d, ok, err := ms(KeyRegistrationPeriodMs); err != nil {
		return err
	} else if ok {
		next.RegistrationPeriod = d
	}
	if v, ok := get(KeyMaxConnections); ok {
		n, err := strconv.Atoi(v)
		if err != nil || n <= 0 {
			return fmt.Errorf("%w: %s: %s=%q is not a positive number", ErrConfig, source, KeyMaxConnections, v)
		}
		next.MaxConnections = n
	}
	*c = next
	return nil
}

// Properties renders the effective configuration (defaults filled in) as properties text that
// Load accepts, one key per line in a fixed order.
func (c Config) Properties() string {
	e := c.withDefaults()
	var b strings.Builder
	fmt.Fprintf(&b, "%s=%s\n", KeyListenAddr, e.ListenAddr)
	fmt.Fprintf(&b, "%s=%d\n", KeyBrokerExpiryMs, e.BrokerExpiry.Milliseconds())
	fmt.Fprintf(&b, "%s=%d\n", KeyScanIntervalMs, e.ScanInterval.Milliseconds())
	fmt.Fprintf(&b, "%s=%d\n", KeyFrameReadTimeoutMs, e.FrameReadTimeout.Milliseconds())
	fmt.Fprintf(&b, "%s=%d\n", KeyMaxConnections, e.MaxConnections)
	fmt.Fprintf(&b, "%s=%d\n", KeyRegistrationPeriodMs, e.RegistrationPeriod.Milliseconds())
	return b.String()
}
