package client

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strconv"
	"strings"
	"time"

	"github.com/petrel-mq/petrel/protocol"
)

// Defaults. Durations and sizes follow RocketMQ's client where it has the same knob.
const (
	// DefaultRouteRefreshInterval is how often cached topic routes are refreshed (RocketMQ's
	// pollNameServerInterval).
	DefaultRouteRefreshInterval = 30 * time.Second
	// DefaultRequestTimeout bounds each request (RocketMQ's sendMsgTimeout and admin timeouts
	// are 3 s); a context with an earlier deadline bounds it more.
	DefaultRequestTimeout = 3 * time.Second
	// DefaultDialTimeout bounds establishing a connection.
	DefaultDialTimeout = 3 * time.Second
	// DefaultReconnectBackoff is the wait before re-dialling an address whose dial failed; it
	// doubles on each further failure up to DefaultMaxReconnectBackoff.
	DefaultReconnectBackoff    = 100 * time.Millisecond
	DefaultMaxReconnectBackoff = 3 * time.Second
	// DefaultLivenessInterval is how long a connection on which requests wait may receive
	// nothing before the client probes it; DefaultProbeTimeout how long after the probe it may
	// still receive nothing before it is closed as dead (see WithLivenessProbe).
	DefaultLivenessInterval = 300 * time.Millisecond
	DefaultProbeTimeout     = 300 * time.Millisecond

	// DefaultLinger is how long an asynchronous batch waits for more messages.
	DefaultLinger = 5 * time.Millisecond
	// DefaultMaxBatchBytes caps an asynchronous batch (bytes).
	DefaultMaxBatchBytes = 256 << 10
	// DefaultBufferBytes caps the bytes of asynchronous messages not yet acknowledged.
	DefaultBufferBytes = 32 << 20
	// DefaultMaxInFlightPerBroker caps the asynchronous batches in flight to one broker group.
	DefaultMaxInFlightPerBroker = 16
	// DefaultRetries is how many times a failed send is retried (RocketMQ's
	// retryTimesWhenSendFailed).
	DefaultRetries = 2
	// DefaultFaultBackoff is how long a broker group is avoided after a failure event (the
	// failures of the requests in flight when it failed count as one); it doubles with each
	// further event up to DefaultMaxFaultBackoff, and a success or a new master of the group
	// ends it.
	DefaultFaultBackoff    = time.Second
	DefaultMaxFaultBackoff = 10 * time.Second

	// DefaultPollTimeout is how long the broker holds a pull that finds nothing (RocketMQ's
	// brokerSuspendMaxTimeMillis).
	DefaultPollTimeout = 15 * time.Second
	// DefaultPullMaxMessages and DefaultPullMaxBytes cap one pull response.
	DefaultPullMaxMessages = 1024
	DefaultPullMaxBytes    = 4 << 20
	// DefaultCommitInterval is how often consumed offsets are committed (RocketMQ's
	// persistConsumerOffsetInterval is 5 s; we commit more often).
	DefaultCommitInterval = time.Second
	// DefaultRetryDelay is the wait before a failed handler call is retried, and the longest
	// wait between failed pulls.
	DefaultRetryDelay = time.Second
	// DefaultHeartbeatInterval is how often a consumer heartbeats the brokers of its topic
	// (RocketMQ's heartbeatBrokerInterval is 30 s; the broker forgets a client after its
	// channelExpiredTimeout, 120 s, without one).
	DefaultHeartbeatInterval = 10 * time.Second
	// DefaultRebalanceInterval is how often a consumer reads its group's members and takes its
	// share of the queues (RocketMQ's rebalance service waits 20 s; we want fast takeover).
	DefaultRebalanceInterval = 2 * time.Second
)

// frameOverhead is room left in a frame for the prefix and an empty header (bytes).
const frameOverhead = 1 << 10

// ClientOption configures a Client (see New). An option given a value outside its range (a
// duration or size that is not positive where one is needed, a NameServer address that is not
// host:port, a nil logger), or a nil option, makes New fail with an error wrapping
// ErrInvalidOption that names it; so do ProducerOption and ConsumerOption for NewProducer and
// NewConsumer.
type ClientOption func(*clientConfig)

// optionErrors collects the options given values outside their range, each error wrapping
// ErrInvalidOption and naming the option.
type optionErrors []error

func (e *optionErrors) add(option, format string, args ...any) {
	*e = append(*e, fmt.Errorf("%w: %s: %s", ErrInvalidOption, option, fmt.Sprintf(format, args...)))
}

// apply runs opts on cfg, recording a nil option as an error in errs, and returns the errors
// of the options joined (nil when all are valid).
func apply[T any, O ~func(*T)](cfg *T, errs *optionErrors, kind string, opts []O) error {
	for i, o := range opts {
		if o == nil {
			errs.add(fmt.Sprintf("%s %d", kind, i), "nil option")
			continue
		}
		o(cfg)
	}
	return errors.Join(*errs...)
}

// checkAddr reports whether addr has the form host:port with a port number (an empty host is
// the local machine, as for net.Dial).
func checkAddr(addr string) error {
	_, port, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("address %q: %v", addr, err)
	}
	if n, err := strconv.ParseUint(port, 10, 16); err != nil || n == 0 {
		return fmt.Errorf("address %q: bad port %q", addr, port)
	}
	return nil
}

type clientConfig struct {
	nameServers         []string
	noNameServer        bool
	routeRefresh        time.Duration
	requestTimeout      time.Duration
	dialTimeout         time.Duration
	reconnectBackoff    time.Duration
	maxReconnectBackoff time.Duration
	maxFrameSize        int
	maxInFlight         int
	livenessInterval    time.Duration
	probeTimeout        time.Duration
	logger              *slog.Logger
	errs                optionErrors
}

func defaultClientConfig() clientConfig {
	return clientConfig{
		routeRefresh:        DefaultRouteRefreshInterval,
		requestTimeout:      DefaultRequestTimeout,
		dialTimeout:         DefaultDialTimeout,
		reconnectBackoff:    DefaultReconnectBackoff,
		maxReconnectBackoff: DefaultMaxReconnectBackoff,
		maxFrameSize:        protocol.DefaultMaxFrameSize,
		maxInFlight:         4096,
		livenessInterval:    DefaultLivenessInterval,
		probeTimeout:        DefaultProbeTimeout,
		logger:              slog.Default(),
	}
}

// WithNameServers sets the NameServer addresses, ';'-separated as RocketMQ's namesrvAddr
// ("host1:9876;host2:9876"). Any of them answers; on failure the next is tried. Required.
func WithNameServers(addrs string) ClientOption {
	return func(c *clientConfig) {
		c.nameServers = c.nameServers[:0]
		for _, a := range strings.Split(addrs, ";") {
			if a = strings.TrimSpace(a); a != "" {
				if err := checkAddr(a); err != nil {
					c.errs.add("WithNameServers", "%v", err)
					continue
				}
				c.nameServers = append(c.nameServers, a)
			}
		}
	}
}

// WithNoNameServer lets New succeed without NameServer addresses, for a client that only talks
// to brokers by address: Admin's per-broker requests (BrokerRuntimeInfo, AllTopicConfig,
// CreateTopic on an address, the offset requests). Everything that needs a NameServer (routes,
// the cluster table, so producers and consumers too) then fails with ErrNameServerUnavailable.
func WithNoNameServer() ClientOption {
	return func(c *clientConfig) { c.noNameServer = true }
}

// WithRouteRefreshInterval sets how often the cached routes of the topics in use (see Client)
// are refreshed from the NameServer (default 30 s). Routes are also refreshed at once after send
// or pull errors.
func WithRouteRefreshInterval(d time.Duration) ClientOption {
	return func(c *clientConfig) {
		if d <= 0 {
			c.errs.add("WithRouteRefreshInterval", "%v is not positive", d)
			return
		}
		c.routeRefresh = d
	}
}

// WithRequestTimeout sets the timeout of each request other than sends and pulls (default 3 s):
// NameServer queries, admin requests, heartbeats, offset commits. A context with an earlier
// deadline ends a request sooner; a later one does not lift the timeout. A pull's timeout is
// its poll timeout plus this.
func WithRequestTimeout(d time.Duration) ClientOption {
	return func(c *clientConfig) {
		if d <= 0 {
			c.errs.add("WithRequestTimeout", "%v is not positive", d)
			return
		}
		c.requestTimeout = d
	}
}

// WithDialTimeout bounds establishing a connection (default 3 s).
func WithDialTimeout(d time.Duration) ClientOption {
	return func(c *clientConfig) {
		if d <= 0 {
			c.errs.add("WithDialTimeout", "%v is not positive", d)
			return
		}
		c.dialTimeout = d
	}
}

// WithReconnectBackoff sets the wait before re-dialling an address whose dial failed (default
// 100 ms), doubling per failure up to max (default 3 s). During the wait requests to that address
// fail at once with ErrBrokerUnavailable, so producers move to another broker group. A broker
// that answers SHUTTING_DOWN gets the same backoff before it is sent anything again.
func WithReconnectBackoff(initial, max time.Duration) ClientOption {
	return func(c *clientConfig) {
		if initial <= 0 || max < initial {
			c.errs.add("WithReconnectBackoff", "initial %v, max %v: want 0 < initial <= max", initial, max)
			return
		}
		c.reconnectBackoff, c.maxReconnectBackoff = initial, max
	}
}

// WithLivenessProbe tunes how the client tells a hung broker (a stopped process, a network
// partition that drops packets without a reset) from a slow one, well before the request
// timeout: when requests are waiting on a connection and nothing at all has been received on it
// for interval (default 300 ms), the client sends a probe, a request every broker answers at
// once on its event loop; when nothing arrives within timeout (default 300 ms) after the probe
// either, the connection is closed as dead. Its waiting requests end as unknown outcomes (they
// were written: a send returns ErrUnknownOutcome, and its producer avoids the group and
// refreshes the route), and the address is dialled again after the reconnect backoff (see
// WithReconnectBackoff), requests to it failing at once meanwhile. A request the broker holds
// legitimately, a long-polling pull or a send a SYNC_MASTER acknowledges only once its slaves
// have it, keeps a live connection: the probe's answer arrives. An interval of 0 or less turns
// the probes off (then only a request that times out by its own timeout, WithRequestTimeout or
// WithSendTimeout or a pull's, with nothing received since it was sent closes its connection);
// a timeout of 0 or less keeps the default. Whether the probes are on or off, the end of a
// caller's context never closes a connection: the request is forgotten and the connection,
// shared with other callers, stays.
func WithLivenessProbe(interval, timeout time.Duration) ClientOption {
	return func(c *clientConfig) {
		c.livenessInterval = max(interval, 0)
		if timeout > 0 {
			c.probeTimeout = timeout
		}
	}
}

// WithMaxFrameSize bounds the frames the client sends and accepts (bytes, default 16 MiB).
func WithMaxFrameSize(n int) ClientOption {
	return func(c *clientConfig) {
		if n <= frameOverhead {
			c.errs.add("WithMaxFrameSize", "%d bytes: want more than %d", n, frameOverhead)
			return
		}
		c.maxFrameSize = n
	}
}

// WithLogger sets the logger (default slog.Default()).
func WithLogger(l *slog.Logger) ClientOption {
	return func(c *clientConfig) {
		if l == nil {
			c.errs.add("WithLogger", "nil logger")
			return
		}
		c.logger = l
	}
}

// ProducerOption configures a Producer (see NewProducer).
type ProducerOption func(*producerConfig)

type producerConfig struct {
	linger               time.Duration
	maxBatchBytes        int
	bufferBytes          int
	maxInFlightPerBroker int
	retries              int
	sendTimeout          time.Duration
	faultBackoff         time.Duration
	maxFaultBackoff      time.Duration
	maxMessageSize       int
	traceEvery           int // WithTraceEvery; 0: off
	traceObserver        func(SendTraceClient)
	errs                 optionErrors
}

func defaultProducerConfig() producerConfig {
	return producerConfig{
		linger:               DefaultLinger,
		maxBatchBytes:        DefaultMaxBatchBytes,
		bufferBytes:          DefaultBufferBytes,
		maxInFlightPerBroker: DefaultMaxInFlightPerBroker,
		retries:              DefaultRetries,
		sendTimeout:          DefaultRequestTimeout,
		faultBackoff:         DefaultFaultBackoff,
		maxFaultBackoff:      DefaultMaxFaultBackoff,
		maxMessageSize:       protocol.DefaultMaxMessageSize,
	}
}

// WithLinger sets how long an asynchronous batch waits for more messages before it is sent
// (default 5 ms; 0 sends as soon as the queue's previous batch is answered).
func WithLinger(d time.Duration) ProducerOption {
	return func(c *producerConfig) {
		if d < 0 {
			c.errs.add("WithLinger", "%v is negative", d)
			return
		}
		c.linger = d
	}
}

// WithMaxBatchBytes caps an asynchronous batch (bytes, default 256 KiB; at most the frame size
// less 1 KiB). A single message larger than the cap is sent alone.
func WithMaxBatchBytes(n int) ProducerOption {
	return func(c *producerConfig) {
		if n <= 0 {
			c.errs.add("WithMaxBatchBytes", "%d is not positive", n)
			return
		}
		c.maxBatchBytes = n
	}
}

// WithBufferBytes caps the bytes of asynchronous messages accepted but not yet answered
// (default 32 MiB). When the buffer is full, SendAsync blocks until space frees or its context
// ends.
func WithBufferBytes(n int) ProducerOption {
	return func(c *producerConfig) {
		if n <= 0 {
			c.errs.add("WithBufferBytes", "%d is not positive", n)
			return
		}
		c.bufferBytes = n
	}
}

// WithMaxInFlightPerBroker caps the asynchronous batches waiting for an answer from one broker
// group (default 16). Each queue has at most one batch in flight, which keeps per-queue order.
func WithMaxInFlightPerBroker(n int) ProducerOption {
	return func(c *producerConfig) {
		if n <= 0 {
			c.errs.add("WithMaxInFlightPerBroker", "%d is not positive", n)
			return
		}
		c.maxInFlightPerBroker = n
	}
}

// WithRetries sets how many times a send that failed definitely and retriably (network failure
// before the request was written, or a retriable status) is retried, on another broker group
// when there is one (default 2, so at most 3 attempts). Unknown outcomes are never retried.
func WithRetries(n int) ProducerOption {
	return func(c *producerConfig) {
		if n < 0 {
			c.errs.add("WithRetries", "%d is negative", n)
			return
		}
		c.retries = n
	}
}

// WithSendTimeout bounds a send, all its attempts included, and every asynchronous batch
// (default 3 s). A context with an earlier deadline ends a synchronous send sooner; a later one
// does not lift the timeout (RocketMQ's sendMsgTimeout).
func WithSendTimeout(d time.Duration) ProducerOption {
	return func(c *producerConfig) {
		if d <= 0 {
			c.errs.add("WithSendTimeout", "%v is not positive", d)
			return
		}
		c.sendTimeout = d
	}
}

// WithFaultBackoff sets how long a broker group is avoided after a failure event (default 1 s),
// doubling per further event up to max (default 10 s). An event is a failed send, or a send
// without an answer, together with the failures of every request sent to the group before it:
// a failover that fails all the requests in flight counts once, and only an attempt sent later
// that fails too starts the next event. A success resets the backoff; so does a new master of
// the group (the route, or a NOT_MASTER answer, names another master than the one that failed),
// which is used at once, and so does the master answering the producer's fault detector again
// when the event was a failure to reach it (the detector probes such masters every 200 ms). An
// event that was a refusal (the master answered with a retriable error: a full disk, busy)
// doubles up to 2 s at most, since only the next send can tell it is over. It is RocketMQ's
// sendLatencyFaultEnable with its detector, driven by failures.
func WithFaultBackoff(initial, max time.Duration) ProducerOption {
	return func(c *producerConfig) {
		if initial < 0 || max < initial {
			c.errs.add("WithFaultBackoff", "initial %v, max %v: want 0 <= initial <= max", initial, max)
			return
		}
		c.faultBackoff, c.maxFaultBackoff = initial, max
	}
}

// WithMaxMessageSize sets the largest body accepted (bytes, default 4 MiB, the broker's default).
func WithMaxMessageSize(n int) ProducerOption {
	return func(c *producerConfig) {
		if n <= 0 {
			c.errs.add("WithMaxMessageSize", "%d is not positive", n)
			return
		}
		c.maxMessageSize = n
	}
}

// ConsumeFrom says where a consumer group starts on a queue it has no committed offset for.
type ConsumeFrom uint8

// Start positions.
const (
	// ConsumeFromFirst starts at the queue's min offset (the oldest stored message). Default.
	ConsumeFromFirst ConsumeFrom = iota
	// ConsumeFromLast starts at the queue's max offset: only messages stored from now on.
	ConsumeFromLast
)

// ConsumerOption configures a Consumer (see NewConsumer).
type ConsumerOption func(*consumerConfig)

type consumerConfig struct {
	consumeFrom       ConsumeFrom
	pollTimeout       time.Duration
	maxMessages       int32
	maxBytes          int32
	commitInterval    time.Duration
	retryDelay        time.Duration
	heartbeatInterval time.Duration
	rebalanceInterval time.Duration
	readBrokerID      int64 // -1: follow the brokers' suggestions
	pullObserver      func(PullTiming)
	errs              optionErrors
}

func defaultConsumerConfig() consumerConfig {
	return consumerConfig{
		consumeFrom:       ConsumeFromFirst,
		pollTimeout:       DefaultPollTimeout,
		maxMessages:       DefaultPullMaxMessages,
		maxBytes:          DefaultPullMaxBytes,
		commitInterval:    DefaultCommitInterval,
		retryDelay:        DefaultRetryDelay,
		heartbeatInterval: DefaultHeartbeatInterval,
		rebalanceInterval: DefaultRebalanceInterval,
		readBrokerID:      -1,
	}
}

// WithConsumeFrom sets where the group starts on a queue without a committed offset (default
// ConsumeFromFirst).
func WithConsumeFrom(f ConsumeFrom) ConsumerOption {
	return func(c *consumerConfig) {
		if f > ConsumeFromLast {
			c.errs.add("WithConsumeFrom", "unknown start position %d", f)
			return
		}
		c.consumeFrom = f
	}
}

// WithPollTimeout sets how long the broker holds a pull that finds nothing (default 15 s; 0
// answers at once). The pull's own timeout is this plus the client's request timeout.
func WithPollTimeout(d time.Duration) ConsumerOption {
	return func(c *consumerConfig) {
		if d < 0 {
			c.errs.add("WithPollTimeout", "%v is negative", d)
			return
		}
		c.pollTimeout = d
	}
}

// WithPullMaxMessages caps the messages of one pull (default 1024; whole batches are returned,
// so the last one may exceed it).
func WithPullMaxMessages(n int) ConsumerOption {
	return func(c *consumerConfig) {
		if n <= 0 {
			c.errs.add("WithPullMaxMessages", "%d is not positive", n)
			return
		}
		c.maxMessages = int32(min(n, 1<<30))
	}
}

// WithPullMaxBytes caps the body of one pull (bytes, default 4 MiB; the first batch is returned
// whole even if larger).
func WithPullMaxBytes(n int) ConsumerOption {
	return func(c *consumerConfig) {
		if n <= 0 {
			c.errs.add("WithPullMaxBytes", "%d is not positive", n)
			return
		}
		c.maxBytes = int32(min(n, 1<<30))
	}
}

// WithCommitInterval sets how often consumed offsets are committed to the brokers (default 1 s).
// Offsets are also committed with pulls and when Run returns.
func WithCommitInterval(d time.Duration) ConsumerOption {
	return func(c *consumerConfig) {
		if d <= 0 {
			c.errs.add("WithCommitInterval", "%v is not positive", d)
			return
		}
		c.commitInterval = d
	}
}

// WithRetryDelay sets the wait before a handler call that returned an error is repeated with
// the same messages (default 1 s). It also caps the wait between failed pulls, which starts at
// 50 ms and doubles.
func WithRetryDelay(d time.Duration) ConsumerOption {
	return func(c *consumerConfig) {
		if d <= 0 {
			c.errs.add("WithRetryDelay", "%v is not positive", d)
			return
		}
		c.retryDelay = d
	}
}

// WithHeartbeatInterval sets how often the consumer heartbeats every broker of its topic
// (default 10 s). It must stay well under the brokers' channelExpiredTimeout (120 s by default),
// after which a silent client is dropped from its group. A heartbeat is also sent at once to a
// broker newly in the route, or whose connection was re-established.
func WithHeartbeatInterval(d time.Duration) ConsumerOption {
	return func(c *consumerConfig) {
		if d <= 0 {
			c.errs.add("WithHeartbeatInterval", "%v is not positive", d)
			return
		}
		c.heartbeatInterval = d
	}
}

// WithRebalanceInterval sets how often the consumer reads its group's members and takes its
// share of the topic's queues (default 2 s). It bounds how long a queue stays unconsumed after
// its owner left; a queue taken from a member still in the group is first pulled 1.5 intervals
// later, so the members of a group should use the same interval (see Consumer).
func WithRebalanceInterval(d time.Duration) ConsumerOption {
	return func(c *consumerConfig) {
		if d <= 0 {
			c.errs.add("WithRebalanceInterval", "%v is not positive", d)
			return
		}
		c.rebalanceInterval = d
	}
}

// WithReadBrokerID pins every pull (and start-offset lookup) to member id of each queue's broker
// group (0: the master, > 0: a slave), ignoring the brokers' read suggestions and never falling
// back to another member: while that member is not in the route or does not answer, its queues
// wait (with backoff). A member that has not replicated an offset yet answers "not here", and
// the pull is repeated there after a backoff. Offsets are still committed to the master when it
// is reachable. It shows what one member alone serves (petrel-bench --read-broker-id); a
// negative id restores the default, following suggestions.
func WithReadBrokerID(id int64) ConsumerOption {
	return func(c *consumerConfig) {
		c.readBrokerID = max(id, -1)
	}
}
