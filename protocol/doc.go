// Package protocol is Petrel's wire format: frames, request codes and statuses, the fixed
// header of every request, the administrative bodies, and the message batch, which is also the
// commit log's on-disk format. It imports nothing of Petrel's.
//
// # Frames
//
// Every request and response is one length-prefixed frame. Integers are big-endian.
//
//	 0       4       6   7   8               12              16
//	+-------+-------+---+---+---------------+---------------+-----------+----------+
//	| length| code  |flg|ver|  request id   | header length |  header   |   body   |
//	|  u32  |  u16  |u8 |u8 |      u32      |      u32      | H bytes   | rest     |
//	+-------+-------+---+---+---------------+---------------+-----------+----------+
//	length: bytes after the length field (12 + H + body)
//	code:   RequestCode in a request, Status in a response
//	flg:    bit 0 response, bit 1 oneway (a request with no response)
//	ver:    Version (1)
//
// A reader calls ParseFrameHeader on the first 16 bytes; it checks the length against the
// maximum frame size (DefaultMaxFrameSize, 16 MiB) and the header length against the frame
// before anything is allocated, so a hostile length prefix costs nothing. A frame that fails
// these checks cannot be resynchronised: the connection is closed.
//
// Many requests may be in flight on one connection; responses carry the request id and may come
// back in any order. The header of a request is fixed per code (headers.go); the header of a
// success response is fixed per request code; the header of every error response is an
// ErrorHeader (remark, master address).
//
// # Message batch
//
// The batch is the unit of storage and transfer. A producer builds it (BatchBuilder), the broker
// validates it (ValidateBatch), stamps the broker-assigned fields (StampBatch), and copies it into
// the commit log unchanged; a pull response is made of stored batches sent as they are, and the
// consumer checks each batch's CRC. These offsets are part of the wire and on-disk format; do not
// change them.
//
//	off  size  field
//	  0    4   batchSize        u32  whole batch, this field included (bytes)
//	  4    4   magic            u32  0x50455431 "PET1"
//	  8    8   physicalOffset   i64  broker: byte offset of the batch in the commit log
//	 16    8   baseQueueOffset  i64  broker: queue offset of the first message
//	 24    8   storeTimestamp   i64  broker: ms since the Unix epoch
//	 32    4   epoch            u32  broker: master epoch that stored the batch
//	 36    4   crc              u32  CRC32C (Castagnoli) of bytes [40, batchSize)
//	---------- covered by crc ----------
//	 40    2   attributes       u16  bits 0-2 compression codec (0 none); bit 5 control batch;
//	                                 other bits 0
//	 42    4   queueId          i32
//	 46    4   count            i32  messages in the batch, >= 1
//	 50    8   firstTimestamp   i64  producer: ms since the Unix epoch of the first message
//	 58    8   maxTimestamp     i64  producer: largest message timestamp (ms)
//	 66    8   producerId       i64  0 when the producer has no id
//	 74    4   baseSequence     i32  producer sequence of the first message
//	 78    1   topicLength      u8   1..127
//	 79    T   topic            [A-Za-z0-9_%|-]
//	79+T       count messages, each:
//	           4  messageSize    u32  bytes after this field
//	           4  timestampDelta i32  ms after firstTimestamp
//	           2  keysLength     u16, then keys (space separated, RocketMQ KEYS)
//	           2  tagsLength     u16, then tags (RocketMQ TAGS)
//	           2  propsLength    u16, then properties (name 0x01 value 0x02 ...)
//	           4  bodyLength     u32, then body (at most the max message size, 4 MiB)
//
// As in Kafka's record batch, the fields the broker assigns sit before the CRC, so the broker
// stamps a batch without recomputing the CRC; the producer's CRC protects the content from the
// producer to the consumer. Message i of a batch has queue offset baseQueueOffset+i and producer
// sequence baseSequence+i.
//
// # Control batches
//
// A control batch (attribute bit 5, AttrControl; Kafka's isControlBatch attribute, which marks
// its transaction markers) is a record a broker writes into its own commit log, never a
// producer's message: producers' sends carrying the bit are refused, and no consume queue
// indexes one, so no consumer ever reads it. It travels to the slaves with the rest of the log
// and so takes effect at the same log position on every member. It holds one message, queue id
// 0, and the message's body starts with the control type (u16, ControlType):
//
//	type 1  ControlDeleteTopic  the batch's topic is deleted here (DELETE_TOPIC_IN_BROKER):
//	                            its batches before the record belong to the deleted queues,
//	                            the ones after to a topic of the same name created afresh
//
// Unknown control types are refused like any malformed batch. The broker writes the whole
// record, so, unlike a producer's batch, its broker-assigned fields are under its CRC too: the
// body goes on with a copy of them (StampControlBatch), and a record whose copy differs from its
// header is refused (a copy of the record placed elsewhere, whatever fields outside the CRC were
// patched to pass there, would delete the queues of a topic created again since):
//
//	 0  2  control type     u16
//	 2  8  physicalOffset   i64  as the header's
//	10  8  storeTimestamp   i64  as the header's
//	18  4  epoch            u32  as the header's (its base queue offset is 0)
//
// A body of the control type alone (a record written before records carried the copy) is
// taken as it is; readers that know only the type read these records too.
//
// # Decoders
//
// Decoders never trust a length: every count is checked against the bytes left before a slice
// is allocated (Reader.Count), strings are bounded, and trailing bytes are an error. Every
// decoder is fuzzed (fuzz_test.go), fed both whole and split in two as a socket delivers it.
package protocol
