package protocol

import "fmt"

// RequestCode identifies a request and fixes the layout of its header and body. Values follow
// RocketMQ's RequestCode where RocketMQ has the same request; these constants are part of the
// wire format and must not change.
type RequestCode uint16

// Request codes.
const (
	// CodeSendMessage stores one message batch (one or many messages). Header: SendRequestHeader
	// (empty); body: a batch (see batch.go). Response: SendResponseHeader.
	CodeSendMessage RequestCode = 10
	// CodePullMessage reads batches of one queue. Header: PullRequestHeader. Response:
	// PullResponseHeader; body: whole batches, as stored.
	CodePullMessage RequestCode = 11
	// CodeQueryConsumerOffset reads a consumer group's committed offset of a queue.
	CodeQueryConsumerOffset RequestCode = 14
	// CodeUpdateConsumerOffset commits a consumer group's offset of a queue.
	CodeUpdateConsumerOffset RequestCode = 15
	// CodeUpdateAndCreateTopic creates a topic or updates its queue counts and permission.
	CodeUpdateAndCreateTopic RequestCode = 17
	// CodeGetAllTopicConfig lists the broker's topic configs. Response body: TopicConfigList.
	CodeGetAllTopicConfig RequestCode = 21
	// CodeGetBrokerRuntimeInfo returns the broker's runtime statistics as a KVTable body.
	CodeGetBrokerRuntimeInfo RequestCode = 28
	// CodeHeartbeat registers a consumer client with a broker (ConsumerHeartbeatHeader); a
	// client heartbeats every broker of its topic periodically, and the broker forgets it after
	// missed heartbeats or when its connection closes (RocketMQ HEART_BEAT).
	CodeHeartbeat RequestCode = 34
	// CodeUnregisterClient removes a consumer client from its group (ConsumerHeartbeatHeader).
	CodeUnregisterClient RequestCode = 35
	// CodeGetConsumerListByGroup returns the client ids of a consumer group (GroupHeader) as a
	// StringList body, sorted; consumers use it to share the queues among themselves.
	CodeGetConsumerListByGroup RequestCode = 38
	// CodeGetMaxOffset returns a queue's max offset (the next queue offset to be assigned).
	CodeGetMaxOffset RequestCode = 30
	// CodeGetMinOffset returns a queue's min offset (the oldest queue offset still stored).
	CodeGetMinOffset RequestCode = 31
	// CodeRegisterBroker registers a broker and its topics with a NameServer (also the
	// periodic heartbeat).
	CodeRegisterBroker RequestCode = 103
	// CodeUnregisterBroker removes a broker from a NameServer.
	CodeUnregisterBroker RequestCode = 104
	// CodeGetRouteInfoByTopic returns a topic's route. Response body: TopicRouteData.
	CodeGetRouteInfoByTopic RequestCode = 105
	// CodeGetBrokerClusterInfo returns the cluster table. Response body: ClusterInfo.
	CodeGetBrokerClusterInfo RequestCode = 106
	// CodeGetTopicStatsInfo returns min/max offsets of every queue of a topic on a broker.
	// Response body: TopicStatsTable.
	CodeGetTopicStatsInfo RequestCode = 202
	// CodeDeleteSubscriptionGroup removes a consumer group's committed offsets of every topic
	// from a broker group (RocketMQ's DELETE_SUBSCRIPTIONGROUP, mqadmin deleteSubGroup).
	// Header: GroupHeader (its Topic empty). Served by the master, which keeps the group's
	// deletion so that its slaves' offset syncs do not bring the offsets back. Success header:
	// DeleteResponseHeader (whether the master held offsets of the group).
	CodeDeleteSubscriptionGroup RequestCode = 207
	// CodeGetConsumeStats returns a consumer group's progress on a broker. Response body:
	// ConsumeStats.
	CodeGetConsumeStats RequestCode = 208
	// CodeDeleteTopicInBroker deletes a topic from a broker group (RocketMQ's
	// DELETE_TOPIC_IN_BROKER, mqadmin deleteTopic): the master writes a deletion record
	// (ControlDeleteTopic) into its commit log, which removes the topic's consume queues at
	// that position on every member, then its config and every group's committed offsets of
	// it. Header: TopicHeader. Answered, with success header DeleteResponseHeader, once the
	// record is as durable and replicated as a send would be (a SYNC_MASTER's in-sync slaves
	// hold it); the topic's bytes in the log go with retention. Deleting a topic the broker
	// does not have succeeds, and the header says it held none.
	CodeDeleteTopicInBroker RequestCode = 215
	// CodeDeleteTopicInNamesrv removes a topic from a NameServer's route table (RocketMQ's
	// DELETE_TOPIC_IN_NAMESRV). Header: TopicHeader; empty success header. A broker that still
	// holds the topic brings it back at its next registration, so the brokers delete it first.
	CodeDeleteTopicInNamesrv RequestCode = 216
	// CodeGetLogChecksum returns a SHA-256 of the broker's commit log over a range of physical
	// offsets (LogChecksumRequest -> LogChecksumResponse), so replicas can be compared.
	CodeGetLogChecksum RequestCode = 320
	// CodeGetHAStatus returns the broker's replication state (response body HAStatus).
	CodeGetHAStatus RequestCode = 321
	// CodeGetAllConsumerOffset returns every committed consumer offset of the broker (response
	// body ConsumerOffsetTable); slaves and masters exchange them.
	CodeGetAllConsumerOffset RequestCode = 322
	// CodeMergeConsumerOffsets merges a ConsumerOffsetTable body into the broker's offsets,
	// keeping the larger offset of each queue (a committed offset never moves backwards), less
	// the offsets of topics the broker does not have and of groups it deleted
	// (CodeDeleteSubscriptionGroup); the response body, when not empty, is a StringList naming
	// those groups, for the sender to drop.
	CodeMergeConsumerOffsets RequestCode = 323
	// CodeElectMaster makes a member of a broker group its master online, without a restart
	// (RocketMQ 5's ELECT_MASTER, mqadmin electMaster). Header: ElectMasterRequest -> success
	// header ElectMasterResponse (the member now master, its address and its epoch). It goes to
	// the group's current master, which hands over, or, when the NameServers list no master, to
	// the member to promote, with Force set. A refusal is an error response whose remark says
	// why (e.g. the member is unknown or not in sync, or the group's roles are static).
	CodeElectMaster RequestCode = 324
	// CodeRaftReadIndex asks the Raft leader of a Raft-elected group for a read index (the
	// Raft paper's section 6.4, etcd-raft's ReadIndex): the leader commits a no-op command
	// through a quorum, which confirms its leadership, and answers with its index
	// (RaftReadIndexRequest -> RaftReadIndexResponse). A member that waits until it has
	// applied that index itself decides from control state at least as new as the leader's.
	// Answered with SERVICE_NOT_AVAILABLE by a member that is not the leader.
	CodeRaftReadIndex RequestCode = 325
	// CodeGetSendTraces returns the send traces a broker recorded from a sequence number on
	// (GetSendTracesRequest -> SendTraceTable body; see trace.go). Answered with an empty table
	// by a broker whose trace ring is off.
	CodeGetSendTraces RequestCode = 326
	// CodeHAPull is a slave's replication pull on the master's HA port (HAPullRequest ->
	// HAPullResponse; body: commit-log bytes, compressed as the response header says).
	CodeHAPull RequestCode = 330
	// CodeHALeave is a slave's request on the master's HA port to leave the in-sync set before
	// its log shrinks (HALeaveRequest -> empty success header): the master stops counting the
	// slave's acknowledgements and, in a Raft-elected group, commits the set without it, and
	// answers only then, so that no member of the committed set ever lacks what it
	// acknowledged.
	CodeHALeave RequestCode = 331
)

var requestCodeNames = map[RequestCode]string{
	CodeSendMessage:             "SEND_MESSAGE",
	CodePullMessage:             "PULL_MESSAGE",
	CodeQueryConsumerOffset:     "QUERY_CONSUMER_OFFSET",
	CodeUpdateConsumerOffset:    "UPDATE_CONSUMER_OFFSET",
	CodeUpdateAndCreateTopic:    "UPDATE_AND_CREATE_TOPIC",
	CodeGetAllTopicConfig:       "GET_ALL_TOPIC_CONFIG",
	CodeGetBrokerRuntimeInfo:    "GET_BROKER_RUNTIME_INFO",
	CodeHeartbeat:               "HEART_BEAT",
	CodeUnregisterClient:        "UNREGISTER_CLIENT",
	CodeGetConsumerListByGroup:  "GET_CONSUMER_LIST_BY_GROUP",
	CodeGetMaxOffset:            "GET_MAX_OFFSET",
	CodeGetMinOffset:            "GET_MIN_OFFSET",
	CodeRegisterBroker:          "REGISTER_BROKER",
	CodeUnregisterBroker:        "UNREGISTER_BROKER",
	CodeGetRouteInfoByTopic:     "GET_ROUTEINFO_BY_TOPIC",
	CodeGetBrokerClusterInfo:    "GET_BROKER_CLUSTER_INFO",
	CodeGetTopicStatsInfo:       "GET_TOPIC_STATS_INFO",
	CodeGetConsumeStats:         "GET_CONSUME_STATS",
	CodeDeleteSubscriptionGroup: "DELETE_SUBSCRIPTIONGROUP",
	CodeDeleteTopicInBroker:     "DELETE_TOPIC_IN_BROKER",
	CodeDeleteTopicInNamesrv:    "DELETE_TOPIC_IN_NAMESRV",
	CodeGetLogChecksum:          "GET_LOG_CHECKSUM",
	CodeGetHAStatus:             "GET_HA_STATUS",
	CodeGetAllConsumerOffset:    "GET_ALL_CONSUMER_OFFSET",
	CodeMergeConsumerOffsets:    "MERGE_CONSUMER_OFFSETS",
	CodeElectMaster:             "ELECT_MASTER",
	CodeRaftReadIndex:           "RAFT_READ_INDEX",
	CodeGetSendTraces:           "GET_SEND_TRACES",
	CodeHAPull:                  "HA_PULL",
	CodeHALeave:                 "HA_LEAVE",
}

// String returns RocketMQ's name of the code, or "REQUEST_CODE(n)".
func (c RequestCode) String() string {
	if s, ok := requestCodeNames[c]; ok {
		return s
	}
	return fmt.Sprintf("REQUEST_CODE(%d)", uint16(c))
}

// Known reports whether c is a request code this version understands.
func (c RequestCode) Known() bool { _, ok := requestCodeNames[c]; return ok }

// Status is a response status. Success is 0; every other status is an error whose response
// header is an ErrorHeader (remark and, for NotMaster, the master's address). Values follow
// RocketMQ's ResponseCode where RocketMQ has the same meaning; they are part of the wire format.
type Status uint16

// Statuses.
const (
	StatusSuccess                 Status = 0
	StatusSystemError             Status = 1
	StatusSystemBusy              Status = 2
	StatusRequestCodeNotSupported Status = 3
	StatusFlushDiskTimeout        Status = 10
	StatusSlaveNotAvailable       Status = 11
	StatusFlushSlaveTimeout       Status = 12
	StatusMessageIllegal          Status = 13
	StatusServiceNotAvailable     Status = 14
	StatusNoPermission            Status = 16
	StatusTopicNotExist           Status = 17
	StatusQueryNotFound           Status = 22
	StatusRequestMalformed        Status = 100
	StatusDiskFull                Status = 101
	StatusNotMaster               Status = 102
	StatusInSyncReplicasNotEnough Status = 103
	StatusQueueNotExist           Status = 104
	StatusShuttingDown            Status = 105
	StatusTopicInvalid            Status = 106
	// StatusNamesrvNotReady is a NameServer's answer, during its first registration period
	// after it started (or while no broker has registered with it), to a route it does not
	// know and to the cluster table: what it lacks may be a broker that has not registered
	// with it yet, not a topic or broker that does not exist. A client asks another
	// NameServer. (RocketMQ 5's NameServer answers SYSTEM_ERROR "name server not ready" under
	// needWaitForService; a status of its own lets a client tell it from a failure.)
	StatusNamesrvNotReady Status = 107
)

type statusInfo struct {
	name      string
	retriable bool
	desc      string
}

// statusTable is the one table of wire statuses: name, whether a client may retry the same
// request (on this or another broker), and what it means.
var statusTable = map[Status]statusInfo{
	StatusSuccess:                 {"SUCCESS", false, "the request succeeded"},
	StatusSystemError:             {"SYSTEM_ERROR", false, "the broker failed to serve the request"},
	StatusSystemBusy:              {"SYSTEM_BUSY", true, "the broker is overloaded; retry later"},
	StatusRequestCodeNotSupported: {"REQUEST_CODE_NOT_SUPPORTED", false, "the server does not know this request code"},
	StatusFlushDiskTimeout:        {"FLUSH_DISK_TIMEOUT", true, "stored, but the disk flush did not finish in time"},
	StatusSlaveNotAvailable:       {"SLAVE_NOT_AVAILABLE", true, "no in-sync slave is available; not stored"},
	StatusFlushSlaveTimeout:       {"FLUSH_SLAVE_TIMEOUT", true, "stored on the master, replication not confirmed in time"},
	StatusMessageIllegal:          {"MESSAGE_ILLEGAL", false, "the message batch is malformed, too large or fails its CRC"},
	StatusServiceNotAvailable:     {"SERVICE_NOT_AVAILABLE", true, "the broker cannot serve this request now"},
	StatusNoPermission:            {"NO_PERMISSION", false, "the topic's permission forbids this request"},
	StatusTopicNotExist:           {"TOPIC_NOT_EXIST", true, "the topic does not exist on this broker"},
	StatusQueryNotFound:           {"QUERY_NOT_FOUND", false, "nothing is stored under that key"},
	StatusRequestMalformed:        {"REQUEST_MALFORMED", false, "the request header or body cannot be decoded"},
	StatusDiskFull:                {"DISK_FULL", true, "the broker's disk is full; not stored"},
	StatusNotMaster:               {"NOT_MASTER", true, "this broker is not the master; the error names the master"},
	StatusInSyncReplicasNotEnough: {"IN_SYNC_REPLICAS_NOT_ENOUGH", true, "fewer in-sync replicas than minInSyncReplicas; not stored"},
	StatusQueueNotExist:           {"QUEUE_NOT_EXIST", false, "the queue id is outside the topic's queue count"},
	StatusShuttingDown:            {"SHUTTING_DOWN", true, "the server is shutting down"},
	StatusTopicInvalid:            {"TOPIC_INVALID", false, "the topic name is empty, too long or has characters outside [A-Za-z0-9_%|-]"},
	StatusNamesrvNotReady:         {"NAMESRV_NOT_READY", true, "the NameServer may not know every broker yet (it started less than a registration period ago, or no broker has registered with it); ask another NameServer"},
}

// String returns the status name, or "STATUS(n)".
func (s Status) String() string {
	if i, ok := statusTable[s]; ok {
		return i.name
	}
	return fmt.Sprintf("STATUS(%d)", uint16(s))
}

// Retriable reports whether a client may retry a request that got this status.
func (s Status) Retriable() bool { return statusTable[s].retriable }

// Description says what the status means.
func (s Status) Description() string {
	if i, ok := statusTable[s]; ok {
		return i.desc
	}
	return "unknown status"
}

// Error is a non-success response as a Go error: the status, the server's remark and, for
// StatusNotMaster, the master's address. Clients test it with errors.As, or errors.Is against a
// Status value (Error.Is matches on the status).
type Error struct {
	Status     Status
	Remark     string
	MasterAddr string
}

// Error implements error.
func (e *Error) Error() string {
	s := e.Status.String()
	if e.Remark != "" {
		s += ": " + e.Remark
	}
	if e.MasterAddr != "" {
		s += " (master " + e.MasterAddr + ")"
	}
	return s
}

// Retriable reports whether the request may be retried.
func (e *Error) Retriable() bool { return e.Status.Retriable() }

// Is reports whether target is the same Status or an *Error with the same status.
func (e *Error) Is(target error) bool {
	switch t := target.(type) {
	case Status:
		return t == e.Status
	case *Error:
		return t.Status == e.Status
	}
	return false
}

// Error lets a Status be used as an errors.Is target.
func (s Status) Error() string { return s.String() }
