package protocol

// Fixed headers, one per request code and one per success response. Each has AppendTo and
// ReadFrom; ReadFrom takes exactly the header bytes and rejects trailing bytes. String fields are
// u16-length prefixed; names are bounded by MaxTopicLength/MaxGroupLength/maxNameLength.
//
// A header that gained a field after its first version has it at the end, present or absent as
// a whole (HasIncarnation): ReadFrom takes the header with or without it, so a peer of an older
// version is understood, and a header is sent with it only to a peer known to read it (the
// broker answers it only to a request that carried its own), since older decoders refuse the
// bytes they do not know.

import (
	"encoding/binary"
	"errors"
	"fmt"
)

const (
	// maxNameLength bounds cluster names, broker names, addresses and remarks in headers.
	maxNameLength = 255
	// maxRemarkLength bounds an error remark (bytes).
	maxRemarkLength = 4096
)

// Permission bits of a topic (RocketMQ PermName).
const (
	PermInherit int32 = 1
	PermWrite   int32 = 2
	PermRead    int32 = 4
	// PermReadWrite is the default permission of a new topic.
	PermReadWrite = PermRead | PermWrite
)

// PullResult says what a pull found. It travels in PullResponseHeader.
type PullResult uint8

// Pull results.
const (
	// PullFound means the body holds at least one batch.
	PullFound PullResult = 0
	// PullNoNewMessage means the queue has nothing at or after the requested offset (after the
	// long-poll wait, if any).
	PullNoNewMessage PullResult = 1
	// PullOffsetMoved means the requested offset is outside [min, max] of the queue; the
	// consumer continues at NextQueueOffset.
	PullOffsetMoved PullResult = 2
	// PullNotHere means this broker (a slave) has not replicated the requested offset yet: pull
	// it from SuggestBrokerID (the master). It never means the queue is caught up.
	PullNotHere PullResult = 3
)

// String returns the result's name.
func (r PullResult) String() string {
	switch r {
	case PullFound:
		return "FOUND"
	case PullNoNewMessage:
		return "NO_NEW_MSG"
	case PullOffsetMoved:
		return "OFFSET_MOVED"
	case PullNotHere:
		return "NOT_HERE"
	}
	return "PULL_RESULT(?)"
}

// ErrorHeader is the header of every non-success response.
type ErrorHeader struct {
	// Remark says what went wrong, for people.
	Remark string
	// MasterAddr names the master of the broker group when the status is StatusNotMaster.
	MasterAddr string
}

// AppendTo implements Header. A remark longer than 4096 bytes and a master address longer than
// 255 bytes are cut to those limits, which ReadFrom enforces, so an error response always
// decodes.
func (h *ErrorHeader) AppendTo(dst []byte) []byte {
	remark, master := h.Remark, h.MasterAddr
	if len(remark) > maxRemarkLength {
		remark = remark[:maxRemarkLength]
	}
	if len(master) > maxNameLength {
		master = master[:maxNameLength]
	}
	dst = AppendString(dst, remark)
	return AppendString(dst, master)
}

// ReadFrom implements Header.
func (h *ErrorHeader) ReadFrom(src []byte) error {
	r := NewReader(src)
	h.Remark = r.Str(maxRemarkLength)
	h.MasterAddr = r.Str(maxNameLength)
	return r.Done()
}

// SendResponseHeader answers CodeSendMessage: where the batch was stored.
type SendResponseHeader struct {
	QueueID int32
	// QueueOffset is the queue offset of the batch's first message.
	QueueOffset int64
	// Count is the number of messages stored.
	Count int32
	// PhysicalOffset is the batch's byte offset in the broker's commit log.
	PhysicalOffset int64
	// StoreTimestamp is when the broker stored the batch (ms since the Unix epoch).
	StoreTimestamp int64
}

// SendResponseHeaderSize is the encoded size of SendResponseHeader (bytes).
const SendResponseHeaderSize = 32

// AppendTo implements Header.
func (h *SendResponseHeader) AppendTo(dst []byte) []byte {
	dst = AppendI32(dst, h.QueueID)
	dst = AppendI64(dst, h.QueueOffset)
	dst = AppendI32(dst, h.Count)
	dst = AppendI64(dst, h.PhysicalOffset)
	return AppendI64(dst, h.StoreTimestamp)
}

// ReadFrom implements Header.
func (h *SendResponseHeader) ReadFrom(src []byte) error {
	r := NewReader(src)
	h.QueueID = r.I32()
	h.QueueOffset = r.I64()
	h.Count = r.I32()
	h.PhysicalOffset = r.I64()
	h.StoreTimestamp = r.I64()
	return r.Done()
}

// PullRequestHeader asks for batches of one queue starting at QueueOffset.
type PullRequestHeader struct {
	ConsumerGroup string
	Topic         string
	QueueID       int32
	QueueOffset   int64
	// MaxMessages caps the messages returned (whole batches are returned, so the count may be
	// exceeded by the last batch).
	MaxMessages int32
	// MaxBytes caps the body size (bytes); the first batch is returned whole even if larger.
	MaxBytes int32
	// PollTimeoutMs is how long the broker holds a pull that finds nothing (ms); 0 answers at once.
	PollTimeoutMs int32
	// CommitOffset, when >= 0, commits the group's offset of this queue with the pull (as
	// RocketMQ's commitOffset flag).
	CommitOffset int64
	// Incarnation is the incarnation of the queue (PullResponseHeader.Incarnation) that
	// QueueOffset and CommitOffset belong to; 0 when the consumer knows none yet.
	Incarnation uint64
	// HasIncarnation says the header carries Incarnation: the broker then answers with the
	// queue's incarnation. The header of a client that does not know incarnations ends before it.
	HasIncarnation bool
}

// AppendTo implements Header.
func (h *PullRequestHeader) AppendTo(dst []byte) []byte {
	dst = AppendString(dst, h.ConsumerGroup)
	dst = AppendString(dst, h.Topic)
	dst = AppendI32(dst, h.QueueID)
	dst = AppendI64(dst, h.QueueOffset)
	dst = AppendI32(dst, h.MaxMessages)
	dst = AppendI32(dst, h.MaxBytes)
	dst = AppendI32(dst, h.PollTimeoutMs)
	dst = AppendI64(dst, h.CommitOffset)
	return appendIncarnation(dst, h.HasIncarnation, h.Incarnation)
}

// ReadFrom implements Header.
func (h *PullRequestHeader) ReadFrom(src []byte) error {
	r := NewReader(src)
	h.ConsumerGroup = r.Str(MaxGroupLength)
	h.Topic = r.Str(MaxTopicLength)
	h.QueueID = r.I32()
	h.QueueOffset = r.I64()
	h.MaxMessages = r.I32()
	h.MaxBytes = r.I32()
	h.PollTimeoutMs = r.I32()
	h.CommitOffset = r.I64()
	h.HasIncarnation, h.Incarnation = readIncarnation(&r)
	return r.Done()
}

// appendIncarnation appends the optional trailing incarnation field when has is set.
func appendIncarnation(dst []byte, has bool, v uint64) []byte {
	if !has {
		return dst
	}
	return AppendU64(dst, v)
}

// readIncarnation reads the optional trailing incarnation field: absent in the header of a
// peer that predates it.
func readIncarnation(r *Reader) (bool, uint64) {
	if !r.More() {
		return false, 0
	}
	return true, r.U64()
}

// pullRequestFixedSize is the size of PullRequestHeader's fields after its strings, without the
// incarnation: queue id, queue offset, max messages, max bytes, poll timeout, commit offset.
const pullRequestFixedSize = 4 + 8 + 4 + 4 + 4 + 8

// PullRequestView is PullRequestHeader decoded without copying strings: ConsumerGroup and Topic
// are views of the frame, valid while the frame is. The broker's data path uses it.
type PullRequestView struct {
	ConsumerGroup []byte
	Topic         []byte
	QueueID       int32
	QueueOffset   int64
	MaxMessages   int32
	MaxBytes      int32
	PollTimeoutMs int32
	CommitOffset  int64
	// Incarnation and HasIncarnation are PullRequestHeader's.
	Incarnation    uint64
	HasIncarnation bool
}

// ReadFrom decodes a PullRequestHeader's bytes.
func (h *PullRequestView) ReadFrom(src []byte) error {
	r := NewReader(src)
	h.ConsumerGroup = r.StrView(MaxGroupLength)
	h.Topic = r.StrView(MaxTopicLength)
	// Every pull decodes this: the fixed fields of a well-formed header, with or without the
	// incarnation, are read after one length check; anything else takes the checked path below,
	// for its error.
	if p := r.rest(); len(p) == pullRequestFixedSize || len(p) == pullRequestFixedSize+8 {
		h.QueueID = int32(binary.BigEndian.Uint32(p[0:]))
		h.QueueOffset = int64(binary.BigEndian.Uint64(p[4:]))
		h.MaxMessages = int32(binary.BigEndian.Uint32(p[12:]))
		h.MaxBytes = int32(binary.BigEndian.Uint32(p[16:]))
		h.PollTimeoutMs = int32(binary.BigEndian.Uint32(p[20:]))
		h.CommitOffset = int64(binary.BigEndian.Uint64(p[24:]))
		h.HasIncarnation, h.Incarnation = false, 0
		if len(p) > pullRequestFixedSize {
			h.HasIncarnation, h.Incarnation = true, binary.BigEndian.Uint64(p[pullRequestFixedSize:])
		}
		return nil
	}
	h.QueueID = r.I32()
	h.QueueOffset = r.I64()
	h.MaxMessages = r.I32()
	h.MaxBytes = r.I32()
	h.PollTimeoutMs = r.I32()
	h.CommitOffset = r.I64()
	h.HasIncarnation, h.Incarnation = readIncarnation(&r)
	return r.Done()
}

// PullResponseHeader answers CodePullMessage. The body holds whole batches when Result is
// PullFound, and nothing otherwise.
type PullResponseHeader struct {
	Result PullResult
	// NextQueueOffset is where the consumer pulls next.
	NextQueueOffset int64
	// MinOffset and MaxOffset are the queue's bounds on this broker (max is the next offset to
	// be assigned).
	MinOffset int64
	MaxOffset int64
	// SuggestBrokerID is the brokerId to pull this queue from next (0: the master).
	SuggestBrokerID int64
	// Incarnation identifies the queue's current life on this broker: fixed when the queue was
	// created by its first batch, the same on every member that holds that batch, and another
	// one after the queue was created again (its topic deleted and re-created, or the broker's
	// store lost). 0: unknown (the queue does not exist here, or its store predates
	// incarnations). Queue offsets of one life mean nothing in another.
	Incarnation uint64
	// HasIncarnation says the header carries Incarnation; a broker sets it only in answer to
	// a request that carried its own (older clients refuse the longer header).
	HasIncarnation bool
}

// PullResponseHeaderSize is the encoded size of PullResponseHeader without its incarnation
// (bytes); 8 more with it.
const PullResponseHeaderSize = 33

// AppendTo implements Header.
func (h *PullResponseHeader) AppendTo(dst []byte) []byte {
	dst = append(dst, byte(h.Result))
	dst = AppendI64(dst, h.NextQueueOffset)
	dst = AppendI64(dst, h.MinOffset)
	dst = AppendI64(dst, h.MaxOffset)
	dst = AppendI64(dst, h.SuggestBrokerID)
	return appendIncarnation(dst, h.HasIncarnation, h.Incarnation)
}

// ReadFrom implements Header.
func (h *PullResponseHeader) ReadFrom(src []byte) error {
	r := NewReader(src)
	h.Result = PullResult(r.U8())
	h.NextQueueOffset = r.I64()
	h.MinOffset = r.I64()
	h.MaxOffset = r.I64()
	h.SuggestBrokerID = r.I64()
	h.HasIncarnation, h.Incarnation = readIncarnation(&r)
	return r.Done()
}

// QueueHeader names one queue of a topic (CodeGetMinOffset, CodeGetMaxOffset).
type QueueHeader struct {
	Topic   string
	QueueID int32
}

// AppendTo implements Header.
func (h *QueueHeader) AppendTo(dst []byte) []byte {
	dst = AppendString(dst, h.Topic)
	return AppendI32(dst, h.QueueID)
}

// ReadFrom implements Header.
func (h *QueueHeader) ReadFrom(src []byte) error {
	r := NewReader(src)
	h.Topic = r.Str(MaxTopicLength)
	h.QueueID = r.I32()
	return r.Done()
}

// ConsumerOffsetHeader names a consumer group's queue (CodeQueryConsumerOffset) and, for
// CodeUpdateConsumerOffset, the offset to commit.
type ConsumerOffsetHeader struct {
	ConsumerGroup string
	Topic         string
	QueueID       int32
	// Offset is the next queue offset the group will consume; ignored by queries.
	Offset int64
	// Incarnation, in a commit, is the incarnation of the queue (PullResponseHeader.Incarnation)
	// Offset belongs to (0: not known); ignored by queries.
	Incarnation uint64
	// HasIncarnation says the header carries Incarnation; a query
	// that carries it is answered with the incarnation of the offset returned.
	HasIncarnation bool
}

// AppendTo implements Header.
func (h *ConsumerOffsetHeader) AppendTo(dst []byte) []byte {
	dst = AppendString(dst, h.ConsumerGroup)
	dst = AppendString(dst, h.Topic)
	dst = AppendI32(dst, h.QueueID)
	dst = AppendI64(dst, h.Offset)
	return appendIncarnation(dst, h.HasIncarnation, h.Incarnation)
}

// ReadFrom implements Header.
func (h *ConsumerOffsetHeader) ReadFrom(src []byte) error {
	r := NewReader(src)
	h.ConsumerGroup = r.Str(MaxGroupLength)
	h.Topic = r.Str(MaxTopicLength)
	h.QueueID = r.I32()
	h.Offset = r.I64()
	h.HasIncarnation, h.Incarnation = readIncarnation(&r)
	return r.Done()
}

// OffsetHeader answers offset queries (min, max, consumer offset).
type OffsetHeader struct {
	Offset int64
	// Incarnation, in the answer to a consumer offset query that carried
	// ConsumerOffsetHeader.HasIncarnation, is the incarnation of the queue Offset belongs to (0:
	// not known).
	Incarnation uint64
	// HasIncarnation says the header carries Incarnation.
	HasIncarnation bool
}

// AppendTo implements Header.
func (h *OffsetHeader) AppendTo(dst []byte) []byte {
	dst = AppendI64(dst, h.Offset)
	return appendIncarnation(dst, h.HasIncarnation, h.Incarnation)
}

// ReadFrom implements Header.
func (h *OffsetHeader) ReadFrom(src []byte) error {
	r := NewReader(src)
	h.Offset = r.I64()
	h.HasIncarnation, h.Incarnation = readIncarnation(&r)
	return r.Done()
}

// ConsumerOffsetTableRequest is CodeGetAllConsumerOffset's optional header: a requester that
// reads ConsumerOffsetTable's incarnations section asks for it, and a broker sends the section
// only then, since decoders that predate it refuse bytes they do not know. A request without
// the header (an older requester) gets the table without the section; a broker that predates
// the header ignores it and sends no section, which decodes with every Incarnation 0.
type ConsumerOffsetTableRequest struct {
	// WithIncarnations asks for the incarnations section.
	WithIncarnations bool
}

// AppendTo implements Header: one byte, 1 when WithIncarnations.
func (h *ConsumerOffsetTableRequest) AppendTo(dst []byte) []byte {
	if h.WithIncarnations {
		return append(dst, 1)
	}
	return append(dst, 0)
}

// ReadFrom implements Header. (A request without any header is one without incarnations: the
// broker decodes the header only when there is one.)
func (h *ConsumerOffsetTableRequest) ReadFrom(src []byte) error {
	h.WithIncarnations = false
	r := NewReader(src)
	switch v := r.U8(); v {
	case 0:
	case 1:
		h.WithIncarnations = true
	default:
		r.Fail(fmt.Errorf("%w: incarnations flag %d", ErrBadValue, v))
	}
	return r.Done()
}

// TopicConfig is a topic's configuration on one broker group (CodeUpdateAndCreateTopic header,
// and the elements of TopicConfigList).
type TopicConfig struct {
	Topic          string
	ReadQueueNums  int32
	WriteQueueNums int32
	// Perm is a combination of PermRead and PermWrite.
	Perm int32
}

// MaxQueueNums bounds a topic's read or write queue count.
const MaxQueueNums = 1024

// ErrTopicConfigInvalid is returned by ValidateTopicConfig for queue counts or a permission out
// of range.
var ErrTopicConfigInvalid = errors.New("protocol: invalid topic config")

// ValidateTopicConfig checks a topic config a broker stores: a valid topic name (ValidateTopic),
// read and write queue counts in 1..MaxQueueNums, a permission of PermRead, PermWrite and
// PermInherit bits only. Errors wrap ErrTopicInvalid or ErrTopicConfigInvalid.
func ValidateTopicConfig(c *TopicConfig) error {
	if err := ValidateTopic([]byte(c.Topic)); err != nil {
		return err
	}
	if c.ReadQueueNums < 1 || c.ReadQueueNums > MaxQueueNums || c.WriteQueueNums < 1 || c.WriteQueueNums > MaxQueueNums {
		return fmt.Errorf("%w: topic %s: queue counts read=%d write=%d out of range 1..%d", ErrTopicConfigInvalid, c.Topic, c.ReadQueueNums, c.WriteQueueNums, MaxQueueNums)
	}
	if c.Perm&^(PermRead|PermWrite|PermInherit) != 0 {
		return fmt.Errorf("%w: topic %s: perm %d has unknown bits", ErrTopicConfigInvalid, c.Topic, c.Perm)
	}
	return nil
}

// AppendTo implements Header.
func (h *TopicConfig) AppendTo(dst []byte) []byte {
	dst = AppendString(dst, h.Topic)
	dst = AppendI32(dst, h.ReadQueueNums)
	dst = AppendI32(dst, h.WriteQueueNums)
	return AppendI32(dst, h.Perm)
}

func (h *TopicConfig) read(r *Reader) {
	h.Topic = r.Str(MaxTopicLength)
	h.ReadQueueNums = r.I32()
	h.WriteQueueNums = r.I32()
	h.Perm = r.I32()
}

// ReadFrom implements Header.
func (h *TopicConfig) ReadFrom(src []byte) error {
	r := NewReader(src)
	h.read(&r)
	return r.Done()
}

// TopicHeader names a topic (CodeGetRouteInfoByTopic, CodeGetTopicStatsInfo).
type TopicHeader struct {
	Topic string
}

// AppendTo implements Header.
func (h *TopicHeader) AppendTo(dst []byte) []byte { return AppendString(dst, h.Topic) }

// ReadFrom implements Header.
func (h *TopicHeader) ReadFrom(src []byte) error {
	r := NewReader(src)
	h.Topic = r.Str(MaxTopicLength)
	return r.Done()
}

// GroupHeader names a consumer group and optionally a topic ("" for all) (CodeGetConsumeStats).
type GroupHeader struct {
	ConsumerGroup string
	Topic         string
}

// AppendTo implements Header.
func (h *GroupHeader) AppendTo(dst []byte) []byte {
	dst = AppendString(dst, h.ConsumerGroup)
	return AppendString(dst, h.Topic)
}

// ReadFrom implements Header.
func (h *GroupHeader) ReadFrom(src []byte) error {
	r := NewReader(src)
	h.ConsumerGroup = r.Str(MaxGroupLength)
	h.Topic = r.Str(MaxTopicLength)
	return r.Done()
}

// BrokerHeader identifies a broker to a NameServer (CodeRegisterBroker with a TopicConfigList
// body, CodeUnregisterBroker with none).
type BrokerHeader struct {
	ClusterName string
	BrokerName  string
	// BrokerID is 0 for the master of the group, > 0 for slaves.
	BrokerID int64
	// BrokerAddr is the address clients connect to (host:port).
	BrokerAddr string
	// HAServerAddr is the replication address (host:port), "" if none.
	HAServerAddr string
	// DataVersion increases whenever the broker's topic set changes.
	DataVersion int64
	// Epoch is the master epoch of the broker's role (0 with static roles never changed): a
	// NameServer refuses a master (BrokerID 0) of an older epoch than the group's master it
	// lists, so a deposed master cannot displace the new one from the routes.
	Epoch uint32
}

// AppendTo implements Header.
func (h *BrokerHeader) AppendTo(dst []byte) []byte {
	dst = AppendString(dst, h.ClusterName)
	dst = AppendString(dst, h.BrokerName)
	dst = AppendI64(dst, h.BrokerID)
	dst = AppendString(dst, h.BrokerAddr)
	dst = AppendString(dst, h.HAServerAddr)
	dst = AppendI64(dst, h.DataVersion)
	return AppendU32(dst, h.Epoch)
}

// ReadFrom implements Header.
func (h *BrokerHeader) ReadFrom(src []byte) error {
	r := NewReader(src)
	h.ClusterName = r.Str(maxNameLength)
	h.BrokerName = r.Str(maxNameLength)
	h.BrokerID = r.I64()
	h.BrokerAddr = r.Str(maxNameLength)
	h.HAServerAddr = r.Str(maxNameLength)
	h.DataVersion = r.I64()
	h.Epoch = r.U32()
	return r.Done()
}

// RegisterBrokerResponseHeader answers CodeRegisterBroker with the group's master, so a slave
// learns where to replicate from.
type RegisterBrokerResponseHeader struct {
	MasterAddr   string
	HAServerAddr string
}

// AppendTo implements Header.
func (h *RegisterBrokerResponseHeader) AppendTo(dst []byte) []byte {
	dst = AppendString(dst, h.MasterAddr)
	return AppendString(dst, h.HAServerAddr)
}

// ReadFrom implements Header.
func (h *RegisterBrokerResponseHeader) ReadFrom(src []byte) error {
	r := NewReader(src)
	h.MasterAddr = r.Str(maxNameLength)
	h.HAServerAddr = r.Str(maxNameLength)
	return r.Done()
}

// ConsumerHeartbeatHeader identifies a consumer client of a group (CodeHeartbeat,
// CodeUnregisterClient).
type ConsumerHeartbeatHeader struct {
	// ClientID is unique per consumer instance (e.g. host@pid@random).
	ClientID      string
	ConsumerGroup string
	// Topic is the topic the consumer subscribes to.
	Topic string
}

// AppendTo implements Header.
func (h *ConsumerHeartbeatHeader) AppendTo(dst []byte) []byte {
	dst = AppendString(dst, h.ClientID)
	dst = AppendString(dst, h.ConsumerGroup)
	return AppendString(dst, h.Topic)
}

// ReadFrom implements Header.
func (h *ConsumerHeartbeatHeader) ReadFrom(src []byte) error {
	r := NewReader(src)
	h.ClientID = r.Str(maxNameLength)
	h.ConsumerGroup = r.Str(MaxGroupLength)
	h.Topic = r.Str(MaxTopicLength)
	return r.Done()
}

// LogChecksumRequest asks for the checksum of the commit log over [From, To) (physical
// offsets; From -1: the log's min offset, To -1: its end).
type LogChecksumRequest struct {
	From int64
	To   int64
}

// AppendTo implements Header.
func (h *LogChecksumRequest) AppendTo(dst []byte) []byte {
	dst = AppendI64(dst, h.From)
	return AppendI64(dst, h.To)
}

// ReadFrom implements Header.
func (h *LogChecksumRequest) ReadFrom(src []byte) error {
	r := NewReader(src)
	h.From = r.I64()
	h.To = r.I64()
	return r.Done()
}

// LogChecksumResponse answers CodeGetLogChecksum: the range covered and its SHA-256 in hex.
type LogChecksumResponse struct {
	From     int64
	To       int64
	Checksum string
}

// AppendTo implements Header.
func (h *LogChecksumResponse) AppendTo(dst []byte) []byte {
	dst = AppendI64(dst, h.From)
	dst = AppendI64(dst, h.To)
	return AppendString(dst, h.Checksum)
}

// ReadFrom implements Header.
func (h *LogChecksumResponse) ReadFrom(src []byte) error {
	r := NewReader(src)
	h.From = r.I64()
	h.To = r.I64()
	h.Checksum = r.Str(128)
	return r.Done()
}

// ElectMasterRequest asks for member BrokerID of broker group BrokerName to become the group's
// master (CodeElectMaster). Sent to the current master, it hands its role over; sent to a slave,
// the slave promotes itself only with Force.
type ElectMasterRequest struct {
	BrokerName string
	// BrokerID is the brokerId of the member to make master (the brokerId of its config).
	BrokerID int64
	// Force, on a slave, promotes it even though the current master cannot be reached: what only
	// the master held (not yet replicated to this member) may be lost. Only a slave heeds it.
	Force bool
	// BrokerRole is the acknowledgement mode the new master takes over (SYNC_MASTER or
	// ASYNC_MASTER), set by a master handing its role over; "" lets the slave choose
	// (SYNC_MASTER when its minInSyncReplicas is above 1).
	BrokerRole string
}

// AppendTo implements Header.
func (h *ElectMasterRequest) AppendTo(dst []byte) []byte {
	dst = AppendString(dst, h.BrokerName)
	dst = AppendI64(dst, h.BrokerID)
	dst = append(dst, boolByte(h.Force))
	return AppendString(dst, h.BrokerRole)
}

// ReadFrom implements Header.
func (h *ElectMasterRequest) ReadFrom(src []byte) error {
	r := NewReader(src)
	h.BrokerName = r.Str(maxNameLength)
	h.BrokerID = r.I64()
	h.Force = r.Bool()
	h.BrokerRole = r.Str(maxNameLength)
	return r.Done()
}

// ElectMasterResponse answers CodeElectMaster: the group's master after the election.
type ElectMasterResponse struct {
	// BrokerID is the brokerId (of its config) of the member now master.
	BrokerID int64
	// MasterAddr is its client address (host:port).
	MasterAddr string
	// Epoch is the master epoch it now serves.
	Epoch uint32
	// MasterHAAddr is its replication address (host:port), so that the old master can follow
	// it at once.
	MasterHAAddr string
}

// AppendTo implements Header.
func (h *ElectMasterResponse) AppendTo(dst []byte) []byte {
	dst = AppendI64(dst, h.BrokerID)
	dst = AppendString(dst, h.MasterAddr)
	dst = AppendU32(dst, h.Epoch)
	return AppendString(dst, h.MasterHAAddr)
}

// ReadFrom implements Header.
func (h *ElectMasterResponse) ReadFrom(src []byte) error {
	r := NewReader(src)
	h.BrokerID = r.I64()
	h.MasterAddr = r.Str(maxNameLength)
	h.Epoch = r.U32()
	h.MasterHAAddr = r.Str(maxNameLength)
	return r.Done()
}

// DeleteResponseHeader answers CodeDeleteTopicInBroker and CodeDeleteSubscriptionGroup:
// whether the master held what it was asked to delete, so that an operator learns a mistyped
// name. Brokers that predate it answer with an empty header, which clients that read none
// ignore; a client reads an empty header as "not told".
type DeleteResponseHeader struct {
	// Existed: the master held it (a topic's config or a consume queue of it; committed
	// offsets of the group) and deleted it. False: it held nothing of it, nothing changed.
	Existed bool
}

// AppendTo implements Header.
func (h *DeleteResponseHeader) AppendTo(dst []byte) []byte { return append(dst, boolByte(h.Existed)) }

// ReadFrom implements Header.
func (h *DeleteResponseHeader) ReadFrom(src []byte) error {
	r := NewReader(src)
	h.Existed = r.Bool()
	return r.Done()
}

// RaftReadIndexRequest asks the Raft leader of broker group BrokerName for a read index
// (CodeRaftReadIndex).
type RaftReadIndexRequest struct {
	BrokerName string
}

// AppendTo implements Header.
func (h *RaftReadIndexRequest) AppendTo(dst []byte) []byte { return AppendString(dst, h.BrokerName) }

// ReadFrom implements Header.
func (h *RaftReadIndexRequest) ReadFrom(src []byte) error {
	r := NewReader(src)
	h.BrokerName = r.Str(maxNameLength)
	return r.Done()
}

// RaftReadIndexResponse answers CodeRaftReadIndex.
type RaftReadIndexResponse struct {
	// Index is the Raft log index of the no-op command the leader committed for this read
	// index: a member holds control state at least as new as the leader's once it has applied
	// this index.
	Index uint64
	// Term is the leader's Raft term.
	Term uint64
}

// AppendTo implements Header.
func (h *RaftReadIndexResponse) AppendTo(dst []byte) []byte {
	dst = AppendU64(dst, h.Index)
	return AppendU64(dst, h.Term)
}

// ReadFrom implements Header.
func (h *RaftReadIndexResponse) ReadFrom(src []byte) error {
	r := NewReader(src)
	h.Index = r.U64()
	h.Term = r.U64()
	return r.Done()
}

// HALeaveRequest asks the master, on its HA port, to take slave SlaveID out of the in-sync set
// before the slave cuts its log to TruncateTo (CodeHALeave).
type HALeaveRequest struct {
	BrokerName string
	SlaveID    int64
	// MemberID is the slave's Raft server id ("" in a group with static roles).
	MemberID string
	// Epoch is the master epoch the slave follows: a master of another epoch refuses.
	Epoch uint32
	// TruncateTo is the offset the slave will cut its log to (for the master's log line).
	TruncateTo int64
}

// AppendTo implements Header.
func (h *HALeaveRequest) AppendTo(dst []byte) []byte {
	dst = AppendString(dst, h.BrokerName)
	dst = AppendI64(dst, h.SlaveID)
	dst = AppendString(dst, h.MemberID)
	dst = AppendU32(dst, h.Epoch)
	return AppendI64(dst, h.TruncateTo)
}

// ReadFrom implements Header.
func (h *HALeaveRequest) ReadFrom(src []byte) error {
	r := NewReader(src)
	h.BrokerName = r.Str(maxNameLength)
	h.SlaveID = r.I64()
	h.MemberID = r.Str(maxNameLength)
	h.Epoch = r.U32()
	h.TruncateTo = r.I64()
	return r.Done()
}

// HA pull results (HAPullResponse.Result).
const (
	// HAOK: the body holds whole batches starting at Offset (empty after a wait with nothing new).
	HAOK uint8 = 0
	// HAOutOfRange: the requested offset is past the master's end or not on a batch boundary;
	// it acknowledges nothing. The slave must truncate or resync (MasterMin, MasterEnd tell).
	HAOutOfRange uint8 = 1
	// HAResync: the master no longer has the requested offset (retention); the slave must
	// restart from Offset (the master's min offset) with an empty log.
	HAResync uint8 = 2
	// HAFenced: the request's epoch is stale (older than the master's) or the master is not
	// master any more; the slave must find the current master.
	HAFenced uint8 = 3
)

// Replication compression codecs (HAPullResponse.Codec).
const (
	HACodecNone uint8 = 0
	HACodecS2   uint8 = 1
	HACodecZstd uint8 = 2
)

// HAPullRequest is a slave's replication pull: send me commit-log bytes from Offset. Offset
// acknowledges every byte before it once the master verified it is a batch boundary.
type HAPullRequest struct {
	BrokerName string
	// SlaveID is the slave's brokerId; SlaveAddr its client address (for read suggestions).
	SlaveID   int64
	SlaveAddr string
	Offset    int64
	// MaxBytes caps the uncompressed bytes of the answer.
	MaxBytes int32
	// WaitMs is how long the master may hold the request when it has nothing past Offset (ms).
	WaitMs int32
	// Epoch is the newest master epoch the slave knows (0: none).
	Epoch uint32
	// MemberID is the slave's Raft server id (raftSelfId) in a Raft-elected group, "" in a
	// group with static roles; the master names the slave by it in the in-sync set it commits.
	MemberID string
	// LastEpoch and LastEpochStart are the newest epoch of the slave's log and where it starts
	// there (0 and -1: the slave keeps no epochs, as in a group with static roles). The master
	// acknowledges Offset only when the slave's log up to it is a prefix of its own
	// (Kafka's diverging-epoch check, KIP-320): otherwise it answers HAOutOfRange with the
	// offset to cut to.
	LastEpoch      uint32
	LastEpochStart int64
}

// AppendTo implements Header.
func (h *HAPullRequest) AppendTo(dst []byte) []byte {
	dst = AppendString(dst, h.BrokerName)
	dst = AppendI64(dst, h.SlaveID)
	dst = AppendString(dst, h.SlaveAddr)
	dst = AppendI64(dst, h.Offset)
	dst = AppendI32(dst, h.MaxBytes)
	dst = AppendI32(dst, h.WaitMs)
	dst = AppendU32(dst, h.Epoch)
	dst = AppendString(dst, h.MemberID)
	dst = AppendU32(dst, h.LastEpoch)
	return AppendI64(dst, h.LastEpochStart)
}

// ReadFrom implements Header.
func (h *HAPullRequest) ReadFrom(src []byte) error {
	r := NewReader(src)
	h.BrokerName = r.Str(maxNameLength)
	h.SlaveID = r.I64()
	h.SlaveAddr = r.Str(maxNameLength)
	h.Offset = r.I64()
	h.MaxBytes = r.I32()
	h.WaitMs = r.I32()
	h.Epoch = r.U32()
	h.MemberID = r.Str(maxNameLength)
	h.LastEpoch = r.U32()
	h.LastEpochStart = r.I64()
	return r.Done()
}

// HAPullResponse answers CodeHAPull.
type HAPullResponse struct {
	Result uint8
	// Offset is where the body's bytes go in the log: the requested offset, or the start of
	// the next segment when the request pointed at a segment's end (the slave then writes the
	// segment-end marker and rolls), or the resync point.
	Offset int64
	// MasterMin and MasterEnd are the master's log bounds; ConfirmedOffset is the offset every
	// in-sync member holds.
	MasterMin       int64
	MasterEnd       int64
	ConfirmedOffset int64
	// Codec is the body's compression (HACodec*); RawLength its uncompressed size (bytes).
	Codec     uint8
	RawLength int32
	// Epoch is the master's epoch.
	Epoch uint32
	// MasterLoaded tells the slave that the master counts as loaded (its put rate is over
	// slaveReadLoadMsgsPerSec): a slave then keeps the consumers the master sent it instead of
	// sending them back (see ha.SuggestReadBroker).
	MasterLoaded bool
	// MasterAddr is the master's client address (host:port), so a slave configured with only
	// the replication address learns where to redirect producers and sync offsets. A view: on
	// the receiving side it is valid only as long as the header's bytes.
	MasterAddr []byte
	// DivergingEpoch and TruncateTo, in an HAOutOfRange answer to a pull with LastEpoch set,
	// are the master's newest epoch at or before the slave's LastEpoch and where it ends in the
	// master's log (ha.DivergingEpoch): the slave's log leaves the master's at the smaller of
	// TruncateTo and where DivergingEpoch ends in the slave's own log, and the slave must cut
	// it there before it pulls again. TruncateTo is -1 when the master cannot tell (the offset
	// is not a batch boundary, or the slave keeps no epochs).
	DivergingEpoch uint32
	TruncateTo     int64
}

// AppendTo implements Header.
func (h *HAPullResponse) AppendTo(dst []byte) []byte {
	dst = append(dst, h.Result)
	dst = AppendI64(dst, h.Offset)
	dst = AppendI64(dst, h.MasterMin)
	dst = AppendI64(dst, h.MasterEnd)
	dst = AppendI64(dst, h.ConfirmedOffset)
	dst = append(dst, h.Codec)
	dst = AppendI32(dst, h.RawLength)
	dst = AppendU32(dst, h.Epoch)
	dst = append(dst, boolByte(h.MasterLoaded))
	addr := h.MasterAddr
	if len(addr) > maxNameLength {
		addr = nil // not an address; the decoder would refuse it
	}
	dst = AppendU16(dst, uint16(len(addr)))
	dst = append(dst, addr...)
	dst = AppendU32(dst, h.DivergingEpoch)
	return AppendI64(dst, h.TruncateTo)
}

// ReadFrom implements Header.
func (h *HAPullResponse) ReadFrom(src []byte) error {
	r := NewReader(src)
	h.Result = r.U8()
	h.Offset = r.I64()
	h.MasterMin = r.I64()
	h.MasterEnd = r.I64()
	h.ConfirmedOffset = r.I64()
	h.Codec = r.U8()
	h.RawLength = r.I32()
	h.Epoch = r.U32()
	h.MasterLoaded = r.Bool()
	h.MasterAddr = r.StrView(maxNameLength)
	h.DivergingEpoch = r.U32()
	h.TruncateTo = r.I64()
	return r.Done()
}
