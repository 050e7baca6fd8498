package client

import (
	"errors"

	"github.com/petrel-mq/petrel/protocol"
)

// Errors of the client itself. Test them with errors.Is.
var (
	// ErrUnknownOutcome marks a request that was written to a broker but whose answer never came
	// (the context ended, the send timeout passed, or the connection broke): the message may or
	// may not be stored. It is never retried automatically, because a retry could store the
	// message twice. A response that says "stored, but not flushed or replicated in time"
	// (ErrFlushDiskTimeout, ErrFlushSlaveTimeout) is reported as an unknown outcome too.
	ErrUnknownOutcome = errors.New("client: outcome unknown: the request was sent but its result is not known")
	// ErrClientClosed is returned by calls on a closed Client, and by every method of a
	// Producer, Consumer or Admin made from it that does I/O (the Producer's and Consumer's
	// errors then match their own closed error too).
	ErrClientClosed = errors.New("client: client closed")
	// ErrProducerClosed is returned by sends and Flush on a closed Producer, and given to the callbacks of
	// asynchronous sends that were still buffered (never sent) when Close gave up waiting.
	ErrProducerClosed = errors.New("client: producer closed")
	// ErrConsumerClosed is returned by Run on a Consumer that is closed or already ran, and by
	// Lag on a closed Consumer.
	ErrConsumerClosed = errors.New("client: consumer closed")
	// ErrNoQueue is returned when a topic's route has no queue the request can use (no group
	// with a live master and the needed permission).
	ErrNoQueue = errors.New("client: the topic's route has no usable queue")
	// ErrBrokerUnavailable is returned when no connection to a broker can be made, or while a
	// broker that answered SHUTTING_DOWN is left alone to stop; the request was not sent. The
	// client tries again after a backoff.
	ErrBrokerUnavailable = errors.New("client: broker unavailable")
	// ErrNameServerUnavailable is returned when no NameServer answered, or none that answered
	// was ready (then errors.Is(err, ErrNamesrvNotReady) holds too): every one was asked.
	ErrNameServerUnavailable = errors.New("client: no NameServer answered")
	// ErrUnknownBroker is returned by Admin calls that name a broker group or a member of one
	// (Admin.ElectMaster) when the NameServer's cluster table has no such group, or no live
	// member with that brokerId.
	ErrUnknownBroker = errors.New("client: unknown broker")
	// ErrUnknownCluster is returned by Admin calls given a cluster name that the NameServers'
	// cluster table does not hold; the error lists the clusters it does hold (CheckCluster).
	ErrUnknownCluster = errors.New("client: unknown cluster")
	// ErrNoMaster is returned by Admin calls that act on the masters of a cluster for a broker
	// group the cluster table lists with no master (brokerId 0): a Raft-elected group without
	// a quorum elects none, a static group has none while its master is down. The error names
	// the group and its live members.
	ErrNoMaster = errors.New("client: no master")
	// ErrInvalidArgument is returned, before anything is sent, by a function given an argument
	// it cannot use: a nil Client, context or Handler, an empty or malformed broker address
	// (host:port), a negative queue id, offset or brokerId, a target count below one. The error
	// names the argument; the call can only succeed with another one.
	ErrInvalidArgument = errors.New("client: invalid argument")
	// ErrInvalidOption is returned by New, NewProducer and NewConsumer for an option given a
	// value outside its range (a timeout, interval or size that must be positive, an unknown
	// ConsumeFrom, a NameServer address that is not host:port, a nil logger or option), or for
	// options that do not fit together (no NameServer address and no WithNoNameServer, a max
	// message size larger than the frames). The error names the option and its value.
	ErrInvalidOption = errors.New("client: invalid option")
	// ErrCorruptBatch is recorded for a consumer queue that received a batch failing its CRC or
	// structure check; the queue stops and nothing of that batch is delivered. It wraps
	// protocol.ErrBatchCRC or protocol.ErrBatchMalformed.
	ErrCorruptBatch = errors.New("client: corrupt message batch")

	// ErrMessageInvalid is returned for a message the client refuses before sending: an empty
	// body, keys/tags/properties over 65535 bytes, a topic that differs from the batch's.
	ErrMessageInvalid = protocol.ErrMessageInvalid
	// ErrMessageTooLarge is returned for a body over the maximum message size (4 MiB by default).
	ErrMessageTooLarge = protocol.ErrMessageTooLarge
	// ErrTopicInvalid is returned for an empty or too long topic name, or one with characters
	// outside [A-Za-z0-9_%|-].
	ErrTopicInvalid = protocol.ErrTopicInvalid
	// ErrGroupInvalid is returned for an invalid consumer group name.
	ErrGroupInvalid = protocol.ErrGroupInvalid
)

// Broker statuses, re-exported for errors.Is: a request the server refused returns an error for
// which errors.Is(err, ErrNotMaster) (or any protocol.Status) holds; errors.As with a
// *protocol.Error gives the remark and, for ErrNotMaster, the master's address. StatusOf
// extracts the status.
const (
	ErrSystemError             = protocol.StatusSystemError
	ErrSystemBusy              = protocol.StatusSystemBusy
	ErrFlushDiskTimeout        = protocol.StatusFlushDiskTimeout
	ErrSlaveNotAvailable       = protocol.StatusSlaveNotAvailable
	ErrFlushSlaveTimeout       = protocol.StatusFlushSlaveTimeout
	ErrMessageIllegal          = protocol.StatusMessageIllegal
	ErrServiceNotAvailable     = protocol.StatusServiceNotAvailable
	ErrNoPermission            = protocol.StatusNoPermission
	ErrTopicNotExist           = protocol.StatusTopicNotExist
	ErrQueryNotFound           = protocol.StatusQueryNotFound
	ErrDiskFull                = protocol.StatusDiskFull
	ErrNotMaster               = protocol.StatusNotMaster
	ErrInSyncReplicasNotEnough = protocol.StatusInSyncReplicasNotEnough
	ErrQueueNotExist           = protocol.StatusQueueNotExist
	ErrShuttingDown            = protocol.StatusShuttingDown
	// ErrNamesrvNotReady: the NameServers that answered had started less than a registration
	// period ago (or no broker had registered with them), so they may not know every broker
	// yet; retry later.
	ErrNamesrvNotReady = protocol.StatusNamesrvNotReady
)

// closedWithClient is the error of a Producer or Consumer used after its Client was closed: it
// matches ErrClientClosed, the cause, and the object's own closed error (ErrProducerClosed,
// ErrConsumerClosed), since Client.Close closed the object too.
type closedWithClient struct {
	own  error  // ErrProducerClosed or ErrConsumerClosed
	what string // "producer" or "consumer"
}

func (e *closedWithClient) Error() string {
	return ErrClientClosed.Error() + " (and with it the " + e.what + ")"
}

func (e *closedWithClient) Unwrap() []error { return []error{ErrClientClosed, e.own} }

// The errors of a Producer and a Consumer whose Client was closed.
var (
	errProducerClientClosed error = &closedWithClient{own: ErrProducerClosed, what: "producer"}
	errConsumerClientClosed error = &closedWithClient{own: ErrConsumerClosed, what: "consumer"}
)

// StatusOf returns the broker or NameServer status carried by err, if err (or an error it wraps)
// is a *protocol.Error.
func StatusOf(err error) (protocol.Status, bool) {
	var pe *protocol.Error
	if errors.As(err, &pe) {
		return pe.Status, true
	}
	return protocol.StatusSuccess, false
}

// storedButUnconfirmed reports whether a status means the broker stored the batch but could not
// confirm its flush or replication in time: a retry would duplicate it, so the outcome is
// reported as unknown.
func storedButUnconfirmed(s protocol.Status) bool {
	return s == protocol.StatusFlushDiskTimeout || s == protocol.StatusFlushSlaveTimeout
}
