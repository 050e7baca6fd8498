package protocol

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"math"
)

// Message batch layout. These constants are part of the wire and on-disk format; do not change
// them. See the package doc for the drawing.
const (
	// BatchMagic marks the start of a batch: "PET1".
	BatchMagic uint32 = 0x50455431
	// BatchFixedSize is the size of the batch header before the topic (bytes).
	BatchFixedSize = 79
	// BatchCRCStart is the first byte covered by the batch CRC.
	BatchCRCStart = 40
	// MessageOverhead is the size of a message's fixed fields (bytes).
	MessageOverhead = 18
	// MaxTopicLength is the longest topic name (bytes), as RocketMQ's TOPIC_MAX_LENGTH.
	MaxTopicLength = 127
	// MaxGroupLength is the longest consumer or producer group name (bytes).
	MaxGroupLength = 255
	// MaxKeysLength, MaxTagsLength and MaxPropertiesLength bound a message's u16 fields.
	MaxKeysLength       = 1<<16 - 1
	MaxTagsLength       = 1<<16 - 1
	MaxPropertiesLength = 1<<16 - 1

	offBatchSize      = 0
	offMagic          = 4
	offPhysicalOffset = 8
	offBaseQueueOff   = 16
	offStoreTimestamp = 24
	offEpoch          = 32
	offCRC            = 36
	offAttributes     = 40
	offQueueID        = 42
	offCount          = 46
	offFirstTimestamp = 50
	offMaxTimestamp   = 58
	offProducerID     = 66
	offBaseSequence   = 74
	offTopicLength    = 78
)

// Compression codecs, in the low three bits of a batch's attributes. Only CodecNone is accepted
// for stored batches in this version.
const (
	CodecNone uint16 = 0
	codecMask uint16 = 0x7
)

// AttrControl marks a control batch (Kafka's isControlBatch attribute, bit 5): a record a broker
// writes into its commit log, never a producer's message (see the package documentation,
// "Control batches"). ValidateBatch accepts it only with BatchLimits.AllowControl.
const AttrControl uint16 = 1 << 5

// ControlType is what a control batch records: the first two bytes (u16) of its one message's
// body.
type ControlType uint16

// Control types.
const (
	// ControlDeleteTopic deletes the batch's topic at the batch's position in the log.
	ControlDeleteTopic ControlType = 1
)

// ErrControlBatch is returned by ValidateBatch for a control batch when BatchLimits does not
// allow them (a producer's send), and for a control batch of an unknown type or shape; such an
// error also matches ErrBatchMalformed.
var ErrControlBatch = errors.New("protocol: control batch")

// Batch errors.
var (
	// ErrBatchMalformed is returned for a batch whose structure is inconsistent.
	ErrBatchMalformed = errors.New("protocol: malformed message batch")
	// ErrBatchCRC is returned when a batch's CRC32C does not match its contents.
	ErrBatchCRC = errors.New("protocol: message batch CRC mismatch")
	// ErrMessageTooLarge is returned when a message body exceeds the maximum message size.
	ErrMessageTooLarge = errors.New("protocol: message body larger than the maximum message size")
	// ErrTopicInvalid is returned for an empty or too long topic, or one with characters outside
	// [A-Za-z0-9_%|-] (RocketMQ's rule).
	ErrTopicInvalid = errors.New("protocol: invalid topic name")
	// ErrGroupInvalid is returned for an invalid group name (same characters as topics).
	ErrGroupInvalid = errors.New("protocol: invalid group name")
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// CRC32C returns the Castagnoli CRC of b (hardware accelerated on amd64 and arm64).
func CRC32C(b []byte) uint32 { return crc32.Checksum(b, castagnoli) }

// Message is one message as a producer builds it. Every field is optional except Body.
type Message struct {
	// Keys are space-separated business keys (RocketMQ KEYS).
	Keys []byte
	// Tags is the message tag used for filtering (RocketMQ TAGS).
	Tags []byte
	// Properties are user properties encoded with AppendProperty.
	Properties []byte
	// Body is the payload, at most the broker's maximum message size.
	Body []byte
	// Timestamp is the producer's timestamp (ms since the Unix epoch); 0 means "now" is unknown
	// and the batch's first timestamp is used.
	Timestamp int64
}

// AppendProperty appends one name/value property in RocketMQ's encoding (name 0x01 value 0x02).
func AppendProperty(dst []byte, name, value string) []byte {
	dst = append(dst, name...)
	dst = append(dst, 1)
	dst = append(dst, value...)
	return append(dst, 2)
}

// AppendBatchHeader starts a batch at the end of dst: the broker-assigned fields are zero, the
// count and timestamps are filled by FinishBatch. It returns the extended slice; the batch starts
// at len(dst) before the call. The topic must pass ValidateTopic.
func AppendBatchHeader(dst []byte, topic string, queueID int32, producerID int64, baseSequence int32) []byte {
	start := len(dst)
	dst = append(dst, make([]byte, BatchFixedSize)...)
	h := dst[start:]
	binary.BigEndian.PutUint32(h[offMagic:], BatchMagic)
	binary.BigEndian.PutUint32(h[offQueueID:], uint32(queueID))
	binary.BigEndian.PutUint64(h[offProducerID:], uint64(producerID))
	binary.BigEndian.PutUint32(h[offBaseSequence:], uint32(baseSequence))
	h[offTopicLength] = byte(len(topic))
	return append(dst, topic...)
}

// AppendMessage appends m to the batch that starts at start in dst. The timestamp delta is taken
// against the batch's first message, so the first message appended sets firstTimestamp. It does
// not check m: call CheckMessage first (BatchBuilder.Add does).
func AppendMessage(dst []byte, start int, m *Message) []byte {
	h := dst[start:]
	count := binary.BigEndian.Uint32(h[offCount:])
	ts := m.Timestamp
	first := int64(binary.BigEndian.Uint64(h[offFirstTimestamp:]))
	if count == 0 {
		first = ts
		binary.BigEndian.PutUint64(h[offFirstTimestamp:], uint64(ts))
		binary.BigEndian.PutUint64(h[offMaxTimestamp:], uint64(ts))
	} else if ts > int64(binary.BigEndian.Uint64(h[offMaxTimestamp:])) {
		binary.BigEndian.PutUint64(h[offMaxTimestamp:], uint64(ts))
	}
	binary.BigEndian.PutUint32(h[offCount:], count+1)
	size := MessageOverhead - 4 + len(m.Keys) + len(m.Tags) + len(m.Properties) + len(m.Body)
	dst = AppendU32(dst, uint32(size))
	dst = AppendI32(dst, int32(ts-first))
	dst = AppendU16(dst, uint16(len(m.Keys)))
	dst = append(dst, m.Keys...)
	dst = AppendU16(dst, uint16(len(m.Tags)))
	dst = append(dst, m.Tags...)
	dst = AppendU16(dst, uint16(len(m.Properties)))
	dst = append(dst, m.Properties...)
	dst = AppendU32(dst, uint32(len(m.Body)))
	return append(dst, m.Body...)
}

// ErrMessageInvalid is returned by CheckMessage (and BatchBuilder.Err) for a message the batch
// format cannot carry.
var ErrMessageInvalid = errors.New("protocol: message cannot be encoded in a batch")

// CheckMessage reports whether AppendMessage can encode m into the batch that starts at start
// in dst: keys, tags and properties fit their u16 lengths, the body its u32 length, and the
// timestamp lies within an i32 of milliseconds (about 24.8 days) of the batch's first message.
// AppendMessage itself does not check; a message that fails would be encoded wrongly.
func CheckMessage(dst []byte, start int, m *Message) error {
	if len(m.Keys) > MaxKeysLength || len(m.Tags) > MaxTagsLength || len(m.Properties) > MaxPropertiesLength {
		return fmt.Errorf("%w: keys %d, tags %d, properties %d bytes, limit %d each", ErrMessageInvalid, len(m.Keys), len(m.Tags), len(m.Properties), MaxKeysLength)
	}
	if int64(len(m.Body)) > int64(^uint32(0)-MessageOverhead) {
		return fmt.Errorf("%w: body of %d bytes", ErrMessageInvalid, len(m.Body))
	}
	h := dst[start:]
	if binary.BigEndian.Uint32(h[offCount:]) == 0 {
		return nil
	}
	first := int64(binary.BigEndian.Uint64(h[offFirstTimestamp:]))
	ts := m.Timestamp
	// The differences are computed in uint64, where they are exact for any two int64 values.
	if (ts >= first && uint64(ts)-uint64(first) > math.MaxInt32) || (ts < first && uint64(first)-uint64(ts) > -math.MinInt32) {
		return fmt.Errorf("%w: timestamp %d more than 2^31 ms from the first message's %d", ErrMessageInvalid, ts, first)
	}
	return nil
}

// FinishBatch sets the size and CRC of the batch that starts at start and runs to the end of
// dst. It returns the batch bytes (a view of dst).
func FinishBatch(dst []byte, start int) []byte {
	b := dst[start:]
	binary.BigEndian.PutUint32(b[offBatchSize:], uint32(len(b)))
	binary.BigEndian.PutUint32(b[offCRC:], CRC32C(b[BatchCRCStart:]))
	return b
}

// BatchBuilder builds one batch at a time into a reusable buffer. It is not safe for concurrent
// use. After warm-up it does not allocate.
//
// Errors are sticky (pebble's LogWriter.err): an invalid topic or a message that cannot be
// encoded (see CheckMessage) is not added, no later message is added, and Err reports why until
// the next Reset. Check Err before sending the batch.
type BatchBuilder struct {
	buf []byte
	err error
}

// Reset starts a new batch, discarding the previous one and its error.
func (bb *BatchBuilder) Reset(topic string, queueID int32, producerID int64, baseSequence int32) {
	bb.err = validateName(topic, MaxTopicLength, ErrTopicInvalid)
	if bb.err != nil {
		topic = ""
	}
	bb.buf = AppendBatchHeader(bb.buf[:0], topic, queueID, producerID, baseSequence)
}

// Add appends a message to the batch, unless the builder has failed or m cannot be encoded
// (then Err says why).
func (bb *BatchBuilder) Add(m *Message) {
	if bb.err == nil {
		bb.err = CheckMessage(bb.buf, 0, m)
	}
	if bb.err != nil {
		return
	}
	bb.buf = AppendMessage(bb.buf, 0, m)
}

// Err returns the first error since Reset: an invalid topic or a message that could not be
// added.
func (bb *BatchBuilder) Err() error { return bb.err }

// Count returns the number of messages added since Reset.
func (bb *BatchBuilder) Count() int {
	if len(bb.buf) < BatchFixedSize {
		return 0
	}
	return int(binary.BigEndian.Uint32(bb.buf[offCount:]))
}

// Len returns the size of the batch so far (bytes).
func (bb *BatchBuilder) Len() int { return len(bb.buf) }

// Finish seals the batch and returns it. The slice is valid until the next Reset.
func (bb *BatchBuilder) Finish() []byte { return FinishBatch(bb.buf, 0) }

// BatchHeader is a decoded batch header. Topic is a view of the batch.
type BatchHeader struct {
	Size            int
	PhysicalOffset  int64
	BaseQueueOffset int64
	StoreTimestamp  int64
	Epoch           uint32
	CRC             uint32
	Attributes      uint16
	QueueID         int32
	Count           int32
	FirstTimestamp  int64
	MaxTimestamp    int64
	ProducerID      int64
	BaseSequence    int32
	Topic           []byte
}

// LastQueueOffset returns the queue offset of the batch's last message.
func (h *BatchHeader) LastQueueOffset() int64 { return h.BaseQueueOffset + int64(h.Count) - 1 }

// NextQueueOffset returns the queue offset after the batch's last message.
func (h *BatchHeader) NextQueueOffset() int64 { return h.BaseQueueOffset + int64(h.Count) }

// PeekBatchSize returns the size field of the batch that starts at b, or 0 when b is shorter
// than 4 bytes.
func PeekBatchSize(b []byte) int {
	if len(b) < 4 {
		return 0
	}
	return int(binary.BigEndian.Uint32(b))
}

// BatchEpoch returns the master epoch stamped in the batch at the start of b (StampBatch); ok
// is false when b is shorter than the field.
func BatchEpoch(b []byte) (epoch uint32, ok bool) {
	if len(b) < offEpoch+4 {
		return 0, false
	}
	return binary.BigEndian.Uint32(b[offEpoch:]), true
}

// ReadBatchHeader decodes the header of the batch at the start of b. b may extend past the
// batch. It checks the magic, the sizes and the topic length, not the CRC or the messages;
// ErrShort means b ends inside the header or the batch.
func ReadBatchHeader(b []byte) (BatchHeader, error) {
	var h BatchHeader
	if len(b) < BatchFixedSize {
		return h, ErrShort
	}
	h.Size = int(binary.BigEndian.Uint32(b[offBatchSize:]))
	if m := binary.BigEndian.Uint32(b[offMagic:]); m != BatchMagic {
		return h, fmt.Errorf("%w: magic %#08x", ErrBatchMalformed, m)
	}
	tl := int(b[offTopicLength])
	if h.Size < BatchFixedSize+tl+MessageOverhead {
		return h, fmt.Errorf("%w: size %d too small", ErrBatchMalformed, h.Size)
	}
	if len(b) < h.Size {
		return h, ErrShort
	}
	h.PhysicalOffset = int64(binary.BigEndian.Uint64(b[offPhysicalOffset:]))
	h.BaseQueueOffset = int64(binary.BigEndian.Uint64(b[offBaseQueueOff:]))
	h.StoreTimestamp = int64(binary.BigEndian.Uint64(b[offStoreTimestamp:]))
	h.Epoch = binary.BigEndian.Uint32(b[offEpoch:])
	h.CRC = binary.BigEndian.Uint32(b[offCRC:])
	h.Attributes = binary.BigEndian.Uint16(b[offAttributes:])
	h.QueueID = int32(binary.BigEndian.Uint32(b[offQueueID:]))
	h.Count = int32(binary.BigEndian.Uint32(b[offCount:]))
	h.FirstTimestamp = int64(binary.BigEndian.Uint64(b[offFirstTimestamp:]))
	h.MaxTimestamp = int64(binary.BigEndian.Uint64(b[offMaxTimestamp:]))
	h.ProducerID = int64(binary.BigEndian.Uint64(b[offProducerID:]))
	h.BaseSequence = int32(binary.BigEndian.Uint32(b[offBaseSequence:]))
	h.Topic = b[BatchFixedSize : BatchFixedSize+tl : BatchFixedSize+tl]
	return h, nil
}

// BatchLimits bounds what ValidateBatch accepts.
type BatchLimits struct {
	// MaxMessageSize is the largest message body (bytes); 0 means DefaultMaxMessageSize.
	MaxMessageSize int
	// AllowControl accepts control batches (AttrControl): set when reading a stored log, never
	// for a producer's send.
	AllowControl bool
}

// A control batch's body is its type (u16) and a copy of the fields the
// broker assigns it (controlStampSize bytes: physical offset i64, store timestamp i64, epoch
// u32), under the CRC: a copy of the record anywhere else fails the check, whichever of its
// fields outside the CRC were patched (see the package documentation, "Control batches"). A
// body of the type alone (a record written before records carried the copy) is accepted as
// it is.
const (
	controlTypeSize  = 2
	controlStampSize = 8 + 8 + 4
)

// AppendControlBatch appends a control batch of type typ for topic to dst, with the store time
// ts (Unix ms) as its message timestamp, and returns the extended slice; the batch starts at
// len(dst) before the call and is finished (size and CRC set, broker-assigned fields zero, as
// their copy in the body). Stamp it with StampControlBatch. The topic must pass ValidateTopic.
func AppendControlBatch(dst []byte, topic string, typ ControlType, ts int64) []byte {
	start := len(dst)
	dst = AppendBatchHeader(dst, topic, 0, 0, 0)
	binary.BigEndian.PutUint16(dst[start+offAttributes:], AttrControl)
	var body [controlTypeSize + controlStampSize]byte
	binary.BigEndian.PutUint16(body[:], uint16(typ))
	dst = AppendMessage(dst, start, &Message{Body: body[:], Timestamp: ts})
	FinishBatch(dst, start)
	return dst
}

// StampControlBatch writes the broker-assigned fields into the control batch b (from
// AppendControlBatch) as StampBatch does, and their copy into its body, and computes its CRC
// again: the broker wrote the whole record, so it owns the CRC. A control batch without the
// copy (a body of the type alone) is stamped as StampBatch stamps it.
func StampControlBatch(b []byte, physicalOffset, baseQueueOffset, storeTimestamp int64, epoch uint32) {
	StampBatch(b, physicalOffset, baseQueueOffset, storeTimestamp, epoch)
	stamp := controlStampOf(b)
	if stamp == nil {
		return
	}
	binary.BigEndian.PutUint64(stamp, uint64(physicalOffset))
	binary.BigEndian.PutUint64(stamp[8:], uint64(storeTimestamp))
	binary.BigEndian.PutUint32(stamp[16:], epoch)
	size := int(binary.BigEndian.Uint32(b[offBatchSize:]))
	binary.BigEndian.PutUint32(b[offCRC:], CRC32C(b[BatchCRCStart:size]))
}

// controlStampOf returns the copy of the broker-assigned fields in the body of the control
// batch b (a view of b), or nil when its body holds none (or b is not a whole control batch
// of one message).
func controlStampOf(b []byte) []byte {
	h, err := ReadBatchHeader(b)
	if err != nil || h.Attributes&AttrControl == 0 || h.Count != 1 {
		return nil
	}
	it := NewMessageIterator(b, h)
	m, ok := it.Next()
	if !ok || len(m.Body) < controlTypeSize+controlStampSize {
		return nil
	}
	return m.Body[controlTypeSize : controlTypeSize+controlStampSize]
}

// checkControlStamp reports whether the copy of the broker-assigned fields in the body of the
// control batch b (header h; its message body is body) matches its header: a record whose body
// is its type alone (written before records carried the copy) has nothing to check, and any other length short of
// the copy is malformed.
func checkControlStamp(h BatchHeader, body []byte) error {
	switch {
	case len(body) == controlTypeSize:
		return nil
	case len(body) < controlTypeSize+controlStampSize:
		return fmt.Errorf("%w: %w: body of %d bytes", ErrBatchMalformed, ErrControlBatch, len(body))
	}
	stamp := body[controlTypeSize:]
	phys := int64(binary.BigEndian.Uint64(stamp))
	ts := int64(binary.BigEndian.Uint64(stamp[8:]))
	epoch := binary.BigEndian.Uint32(stamp[16:])
	if phys != h.PhysicalOffset || ts != h.StoreTimestamp || epoch != h.Epoch || h.BaseQueueOffset != 0 {
		return fmt.Errorf("%w: %w: stamped at physical offset %d, store timestamp %d, epoch %d, but its header says %d, %d, %d (base queue offset %d): a copy of a record written elsewhere",
			ErrBatchMalformed, ErrControlBatch, phys, ts, epoch, h.PhysicalOffset, h.StoreTimestamp, h.Epoch, h.BaseQueueOffset)
	}
	return nil
}

// ControlOf returns the control type of the batch b (its header h from ReadBatchHeader or
// ValidateBatch); ok is false for a batch that is not a control batch or whose message is not
// one.
func ControlOf(b []byte, h BatchHeader) (typ ControlType, ok bool) {
	if h.Attributes&AttrControl == 0 || h.Count != 1 {
		return 0, false
	}
	it := NewMessageIterator(b, h)
	m, ok := it.Next()
	if !ok || len(m.Body) < 2 {
		return 0, false
	}
	return ControlType(binary.BigEndian.Uint16(m.Body)), true
}

// BatchAttributes returns the attributes of the batch at the start of b without checking it;
// ok is false when b is shorter than the field.
func BatchAttributes(b []byte) (attrs uint16, ok bool) {
	if len(b) < offAttributes+2 {
		return 0, false
	}
	return binary.BigEndian.Uint16(b[offAttributes:]), true
}

// ValidateBatch fully checks the batch at the start of b: header, topic name, CRC, and every
// message (sizes add up, count matches, bodies within limits, no trailing bytes). b may extend
// past the batch. It returns the header and the tag hash for the consume queue: the FNV-1a hash
// of the tags when every message carries the same tags, otherwise 0. It does not allocate.
func ValidateBatch(b []byte, lim BatchLimits) (BatchHeader, uint32, error) {
	h, err := ReadBatchHeader(b)
	if err != nil {
		return h, 0, err
	}
	b = b[:h.Size]
	if got := CRC32C(b[BatchCRCStart:]); got != h.CRC {
		return h, 0, fmt.Errorf("%w: stored %#08x, computed %#08x", ErrBatchCRC, h.CRC, got)
	}
	if err := ValidateTopic(h.Topic); err != nil {
		return h, 0, err
	}
	if h.Attributes&AttrControl != 0 {
		return h, 0, validateControlBatch(b, &h, lim)
	}
	if h.Attributes&codecMask != CodecNone || h.Attributes&^codecMask != 0 {
		return h, 0, fmt.Errorf("%w: unsupported attributes %#04x", ErrBatchMalformed, h.Attributes)
	}
	if h.Count < 1 {
		return h, 0, fmt.Errorf("%w: count %d", ErrBatchMalformed, h.Count)
	}
	if h.QueueID < 0 {
		return h, 0, fmt.Errorf("%w: queue id %d", ErrBatchMalformed, h.QueueID)
	}
	maxBody := maxMessageSize(lim)
	it := NewMessageIterator(b, h)
	var tagHash uint32
	var firstTags []byte
	mixed := false
	n := int32(0)
	for {
		m, ok := it.Next()
		if !ok {
			break
		}
		if len(m.Body) > maxBody {
			return h, 0, fmt.Errorf("%w: %d bytes, limit %d", ErrMessageTooLarge, len(m.Body), maxBody)
		}
		if n == 0 {
			firstTags = m.Tags
		} else if !mixed && string(m.Tags) != string(firstTags) {
			mixed = true
		}
		n++
	}
	if err := it.Err(); err != nil {
		return h, 0, err
	}
	if n != h.Count {
		return h, 0, fmt.Errorf("%w: header counts %d messages, batch holds %d", ErrBatchMalformed, h.Count, n)
	}
	if !mixed && len(firstTags) > 0 {
		tagHash = TagHash(firstTags)
	}
	return h, tagHash, nil
}

// maxMessageSize is the largest message body lim allows (bytes).
func maxMessageSize(lim BatchLimits) int {
	if lim.MaxMessageSize <= 0 {
		return DefaultMaxMessageSize
	}
	return lim.MaxMessageSize
}

// validateControlBatch checks the control batch b with header h (ValidateBatch has checked its
// header, CRC and topic): refused without lim.AllowControl; else it must have no other
// attribute, queue 0 and one well-formed message whose body is a known control type followed by
// a copy of the broker-assigned fields that matches the header (or the type alone). Apart from
// ValidateBatch's loop, which every producer's send runs.
func validateControlBatch(b []byte, h *BatchHeader, lim BatchLimits) error {
	if !lim.AllowControl {
		return fmt.Errorf("%w: %w: only a broker writes one (attributes %#04x)", ErrBatchMalformed, ErrControlBatch, h.Attributes)
	}
	if h.Attributes != AttrControl {
		return fmt.Errorf("%w: unsupported attributes %#04x", ErrBatchMalformed, h.Attributes)
	}
	if h.Count != 1 || h.QueueID != 0 {
		return fmt.Errorf("%w: %w: %d messages, queue %d", ErrBatchMalformed, ErrControlBatch, h.Count, h.QueueID)
	}
	it := NewMessageIterator(b, *h)
	m, ok := it.Next()
	_, more := it.Next()
	if err := it.Err(); err != nil {
		return err
	}
	if !ok || more {
		return fmt.Errorf("%w: %w: header counts 1 message, the batch holds another number", ErrBatchMalformed, ErrControlBatch)
	}
	if maxBody := maxMessageSize(lim); len(m.Body) > maxBody {
		return fmt.Errorf("%w: %d bytes, limit %d", ErrMessageTooLarge, len(m.Body), maxBody)
	}
	if len(m.Body) < controlTypeSize || ControlType(binary.BigEndian.Uint16(m.Body)) != ControlDeleteTopic {
		return fmt.Errorf("%w: %w: unknown type, body of %d bytes", ErrBatchMalformed, ErrControlBatch, len(m.Body))
	}
	return checkControlStamp(*h, m.Body)
}

// TagHash returns the 32-bit FNV-1a hash of tags, the value consume queues store.
func TagHash(tags []byte) uint32 {
	h := uint32(2166136261)
	for _, c := range tags {
		h ^= uint32(c)
		h *= 16777619
	}
	return h
}

// StampBatch writes the broker-assigned fields into a batch (they sit before the CRC, so the
// CRC stays valid, as Kafka's baseOffset does).
func StampBatch(b []byte, physicalOffset, baseQueueOffset, storeTimestamp int64, epoch uint32) {
	binary.BigEndian.PutUint64(b[offPhysicalOffset:], uint64(physicalOffset))
	binary.BigEndian.PutUint64(b[offBaseQueueOff:], uint64(baseQueueOffset))
	binary.BigEndian.PutUint64(b[offStoreTimestamp:], uint64(storeTimestamp))
	binary.BigEndian.PutUint32(b[offEpoch:], epoch)
}

// MessageView is one decoded message; its byte fields are views of the batch.
type MessageView struct {
	// QueueOffset is the message's offset in its queue (batch base + index).
	QueueOffset int64
	// Sequence is the producer sequence (batch base sequence + index).
	Sequence int32
	// Timestamp is the producer timestamp (ms since the Unix epoch).
	Timestamp  int64
	Keys       []byte
	Tags       []byte
	Properties []byte
	Body       []byte
}

// MessageIterator walks the messages of one batch. It does not allocate.
type MessageIterator struct {
	b     []byte
	off   int
	index int32
	h     BatchHeader
	err   error
}

// NewMessageIterator returns an iterator over the messages of the batch b with header h (from
// ReadBatchHeader or ValidateBatch).
func NewMessageIterator(b []byte, h BatchHeader) MessageIterator {
	return MessageIterator{b: b[:h.Size], off: BatchFixedSize + len(h.Topic), h: h}
}

// Next returns the next message, or false at the end of the batch or on a malformed message
// (then Err tells which).
func (it *MessageIterator) Next() (MessageView, bool) {
	var m MessageView
	if it.err != nil || it.off >= len(it.b) {
		return m, false
	}
	rest := it.b[it.off:]
	if len(rest) < MessageOverhead {
		it.err = fmt.Errorf("%w: %d trailing bytes after message %d", ErrBatchMalformed, len(rest), it.index)
		return m, false
	}
	size := int(binary.BigEndian.Uint32(rest))
	if size < MessageOverhead-4 || size > len(rest)-4 {
		it.err = fmt.Errorf("%w: message %d size %d, %d bytes left", ErrBatchMalformed, it.index, size, len(rest)-4)
		return m, false
	}
	msg := rest[4 : 4+size]
	m.Timestamp = it.h.FirstTimestamp + int64(int32(binary.BigEndian.Uint32(msg)))
	p := 4
	var ok bool
	if m.Keys, p, ok = field16(msg, p); !ok {
		return it.fail()
	}
	if m.Tags, p, ok = field16(msg, p); !ok {
		return it.fail()
	}
	if m.Properties, p, ok = field16(msg, p); !ok {
		return it.fail()
	}
	if p+4 > len(msg) {
		return it.fail()
	}
	bl := int(binary.BigEndian.Uint32(msg[p:]))
	p += 4
	if bl != len(msg)-p {
		return it.fail()
	}
	m.Body = msg[p:len(msg):len(msg)]
	m.QueueOffset = it.h.BaseQueueOffset + int64(it.index)
	m.Sequence = it.h.BaseSequence + it.index
	it.index++
	it.off += 4 + size
	return m, true
}

func (it *MessageIterator) fail() (MessageView, bool) {
	it.err = fmt.Errorf("%w: message %d fields do not add up to its size", ErrBatchMalformed, it.index)
	return MessageView{}, false
}

func field16(msg []byte, p int) ([]byte, int, bool) {
	if p+2 > len(msg) {
		return nil, p, false
	}
	n := int(binary.BigEndian.Uint16(msg[p:]))
	p += 2
	if p+n > len(msg) {
		return nil, p, false
	}
	if n == 0 {
		return nil, p, true
	}
	return msg[p : p+n : p+n], p + n, true
}

// Err returns the error that stopped the iteration, or nil.
func (it *MessageIterator) Err() error { return it.err }

// ValidateTopic checks a topic name: 1..MaxTopicLength bytes of [A-Za-z0-9_%|-].
func ValidateTopic(name []byte) error {
	return validateName(name, MaxTopicLength, ErrTopicInvalid)
}

// ValidateGroup checks a consumer or producer group name: 1..MaxGroupLength bytes of
// [A-Za-z0-9_%|-].
func ValidateGroup(name []byte) error {
	return validateName(name, MaxGroupLength, ErrGroupInvalid)
}

func validateName[S string | []byte](name S, max int, kind error) error {
	if len(name) == 0 {
		return fmt.Errorf("%w: empty", kind)
	}
	if len(name) > max {
		return fmt.Errorf("%w: %d bytes, limit %d", kind, len(name), max)
	}
	for i := 0; i < len(name); i++ {
		if c := name[i]; !nameChar[c] {
			if c >= 0x80 {
				return fmt.Errorf("%w: non-ASCII byte %#02x at %d; allowed are A-Z a-z 0-9 _ %% | -", kind, c, i)
			}
			return fmt.Errorf("%w: character %q at %d not allowed; allowed are A-Z a-z 0-9 _ %% | -", kind, rune(c), i)
		}
	}
	return nil
}

var nameChar = func() (t [256]bool) {
	for c := 'a'; c <= 'z'; c++ {
		t[c] = true
	}
	for c := 'A'; c <= 'Z'; c++ {
		t[c] = true
	}
	for c := '0'; c <= '9'; c++ {
		t[c] = true
	}
	for _, c := range "_%|-" {
		t[c] = true
	}
	return t
}()
