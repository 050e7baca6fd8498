// Package commitlog is Petrel's storage engine: one commit log per broker, in the style of
// Apache RocketMQ, plus a consume queue per (topic, queueId) that indexes it.
//
// Every topic's message batches are appended in arrival order to fixed-size segment files that
// are preallocated (fallocate) and memory-mapped. A batch's physical offset is its byte position
// in the log. Each batch also gets one fixed-size entry in its queue's consume queue, so a pull
// for a queue offset finds its batch with a binary search. Reads return slices of the mapping
// (zero copy) guarded by per-file reference counts.
//
// The package never looks inside a batch: it copies the caller's bytes, lets the caller stamp
// the broker-assigned fields (StampFunc) and, during recovery, asks the caller's Parser to
// validate and describe what it finds on disk. It imports nothing of Petrel's but internal/.
//
// # Batch contract
//
// What the caller (the broker) guarantees about every batch passed to Store.Append:
//
//   - A batch is opaque bytes of known length, at least 8 bytes long, at most Config.SegmentSize.
//   - A batch never begins with 4 zero bytes. (In Petrel's wire format the first 4 bytes are the
//     big-endian u32 total size, but this package does not rely on that.) Four zero bytes at a
//     batch boundary therefore mean "end of the log" or, followed by SegmentEndMagic, a
//     segment-end marker.
//   - Config.Parser validates the batch at the start of b (b may extend past it): it checks the
//     batch CRC and that the physical offset stored in the batch equals physicalOffset, and
//     returns the batch's BatchInfo (its queue, base queue offset, count and epoch among them;
//     for a control batch, a record of the broker's such as a topic's deletion record, Control
//     and DeletesTopic).
//     It returns an error wrapping ErrIncomplete when b is shorter than the batch, and any other
//     error for corrupt data. Recovery stops at the first error, so a batch whose CRC fails is
//     never served after a restart.
//   - The StampFunc passed to Append writes the broker-assigned fields (physical offset, base
//     queue offset, store timestamp, epoch) into the stored copy; those fields are outside the
//     CRC.
//
// # History
//
// The CRC cannot tell a batch from a stale copy of one: the fields a copy needs changed to pass
// the parser (its physical offset) are outside it. So every path that puts a batch into the
// log accepts it only if it continues the log's own history:
//
//   - its physical offset is its position (the Parser checks it);
//   - its base queue offset is its queue's next offset (a queue without entries takes the
//     first batch's: a log reset to a master's min offset starts its queues where the master's
//     are), and 0 for a queue's first batch after its topic's deletion record (the queue is
//     created afresh);
//   - its epoch is not below the previous batch's;
//   - its store timestamp is not below the previous batch's, from the position the history
//     file records on.
//
// Append assigns the first two and refuses an epoch below LastEpoch (ErrStaleEpoch);
// AppendReplicated refuses a chunk with any batch that breaks one of the first three rules
// (ErrReplicaMismatch); recovery cuts the log at the first batch that breaks one (below). So a
// queue's max offset never goes back across a restart unless the log was cut, and a cut is
// reported: logged with its range and reason, in Store.Recovery, and per queue whose max
// offset went back.
//
// Store timestamps order the log because nothing else tells a copy of a batch from the batch
// a producer's retry stored again (same content, same producer sequence): the retry was stored
// later. Append stamps the clock's time, but not below the log's newest store timestamp, and
// DeleteTopic stamps its record above every batch before it, so a copy of a deleted queue's
// batch is below the record. A clock more than a second behind the newest gets its own time
// (holding the newest would freeze every later timestamp until the clock caught up): the order
// restarts at that batch, and the history file records the position before the batch is
// written. AppendReplicated takes a timestamp that goes down (the master restarted its order,
// or a master that does not keep an order) and records the restart the same way. Recovery
// checks timestamps only where the order is vouched for: by a checkpoint with the ordered flag
// (a broker that does not keep the order leaves the flag out: it rewrites the checkpoint when
// it opens the store), from where the history file says. A store whose checkpoint lacks the
// flag is recovered without the check, and its order starts at the end recovery found.
//
// A topic is deleted at a position of the log: DeleteTopic appends a deletion record (a control
// batch the Parser reports as BatchInfo.DeletesTopic, indexed in no consume queue) and removes
// the topic's queues; AppendReplicated applies a replicated record at the same position, and
// recovery applies a record it scans. The topic's batches before the record belong to the
// deleted queues (never indexed again), the ones after to new queues, whose offsets start
// afresh at 0: the second rule. Recovery checks it after the records its scan met (it saw every
// batch since, whatever the consume queues hold), AppendReplicated after a record in the same
// chunk or one it applied since the store opened. Each member records the record's position
// in the deletions file before it removes the queues, so recovery need not find the record to
// know it; a record the file lacks is applied when recovery scans it, and a recorded deletion
// whose record the recovered log no longer holds (cut, or lost with the tail in a crash) is
// undone: the topic's batches are indexed again, as the log's history has them.
//
// Each life of a queue has an incarnation (Store.QueueIncarnation, ReadResult.Incarnation),
// fixed by the life's first batch, so that readers can tell a queue created again, whose
// offsets start at 0 again, from the one they read before (incarnation.go).
//
// # On-disk layout
//
//	<Dir>/
//	  LOCK                                   flock(2)ed while a Store has the directory open
//	  checkpoint                             40 bytes, see below (written as checkpoint.tmp, renamed)
//	  deletions                              "<escaped topic> <record's offset>\n" per deleted topic (History)
//	  history                                where store timestamps are in order from, and each queue's incarnation (history.go)
//	  commitlog/
//	    00000000000000000000                 segment: physical offsets [0, SegmentSize)
//	    00000000001073741824                 next segment: [SegmentSize, 2*SegmentSize)
//	  consumequeue/
//	    <escaped topic>/<queueId>/
//	      00000000000000000000               entries with index [0, QueueFileEntries)
//	      00000000000000300000               entries with index [300000, 600000)
//
// File names are the 20-digit decimal start offset (segments) or first entry index (consume
// queue files). Topic directory names escape every byte outside [A-Za-z0-9._-] (and a leading
// '.') as %XX. Every file is preallocated to its full size with fallocate (never a sparse
// ftruncate: writing through a mapping into a hole on a full disk raises SIGBUS) before it is
// mapped, and is never truncated or removed while mapped.
//
// # Segment file
//
// Batches are laid out back to back from the segment's start. A batch never spans segments: when
// the next batch does not fit in the rest of a segment, a segment-end marker is written at the
// current position (when at least 8 bytes remain) and the batch goes to the start of the next
// segment, whose base is this segment's base plus its size. Physical offsets jump at rolls.
//
//	base                                                                base+SegmentSize
//	+---------+---------+-----+---------+--------+----------------------------------+
//	| batch 0 | batch 1 | ... | batch n | marker | zeros (fallocated, never written) |
//	+---------+---------+-----+---------+--------+----------------------------------+
//
// Segment-end marker (8 bytes, big-endian):
//
//	0               4               8
//	+---------------+---------------+
//	|  00 00 00 00  | 0xCBD43194    |   SegmentEndMagic
//	+---------------+---------------+
//
// Four zero bytes not followed by SegmentEndMagic mean end of the log; so does a position with
// fewer than 8 bytes left in the last segment. Recovery relies on this: once the bytes after the
// recovered end are zero, no later (stale) segment can ever be reached again.
//
// # Consume-queue entry
//
// One 32-byte entry per batch, big-endian, entries back to back in each consume-queue file:
//
//	0                   8                   16        20        24        28        32
//	+-------------------+-------------------+---------+---------+---------+---------+
//	| physical offset   | base queue offset | size    | count   | tag hash| crc32c  |
//	| i64               | i64               | u32     | u32     | u32     | u32     |
//	+-------------------+-------------------+---------+---------+---------+---------+
//
// crc32c (Castagnoli) covers bytes [0, 28). An all-zero entry is unwritten. Base queue offsets
// increase through a queue (entry i+1's base >= entry i's base + count), and so do physical
// offsets, which is what the binary searches rely on.
//
// # Checkpoint file
//
//	0        4        8               16              24              32       36       40
//	+--------+--------+---------------+---------------+---------------+--------+--------+
//	| "PCKP" | ver=1  | log durable   | queues durable| written at ms | flags  | crc32c |
//	| u32    | u32    | i64           | i64           | i64           | u32    | u32    |
//	+--------+--------+---------------+---------------+---------------+--------+--------+
//
// "log durable" is a log offset up to which the commit log was msync'd; "queues durable" is a
// log offset such that the consume-queue entries of every batch below it were msync'd. Flag bit 0
// says the checkpoint was written by Close after a complete flush (a clean shutdown); bit 1 (set
// by every checkpoint of a store that keeps its timestamps in order) that the history file's
// order start is current (History). The file is replaced atomically (write tmp, fsync, rename,
// fsync dir) on every queue-flush tick and on Close, after the history file when that changed. crc32c covers bytes [0, 36). A missing or bad checkpoint only costs a longer recovery.
//
// # Recovery
//
// Open scans the log from the start of the segment holding the checkpoint's durable offset (the
// first segment without a usable checkpoint), calling Parser on each batch, and stops at zeros,
// at a parser error, at a batch running past its segment or at a batch that does not continue
// the log's history (History: epochs and store timestamps are checked from the scan's start,
// continuing the batch before it; queue offsets from D, below); a marker continues at the next
// segment. It then zeroes the rest of that segment and msyncs it (after a clean shutdown only
// when the scan stopped at something else than zeros, or the first 64 KiB after the end are not
// all zero), and only then deletes later segment files (newest first), so a crash at any point
// of recovery leads to the same result. Consume queues are loaded and validated (each keeps its
// longest valid prefix) and every batch from D, the earlier of the checkpoint's two durable
// offsets (earlier still where damage was found), is dispatched again: its base queue offset
// must continue where its queue's entries before D and the batches dispatched since end, and
// every entry pointing at or after D must match the scanned batches one for one and in order,
// so entries that match are kept, missing ones appended, and dangling ones (past the
// recovered end) truncated. After a crash or a cut each queue's file tail past its last entry
// is zeroed too, so stale entries can never be revived later. A deletion record the scan meets
// deletes its topic's queues there; recorded deletions at or past the recovered end are undone
// (History). The log and queues are msync'd and a fresh checkpoint is
// written before Open returns; Store.Recovery tells what was cut.
//
// # Concurrency
//
// Append and DeleteTopic are serialised by one store mutex (Store.mu); it copies into the mapping
// or writes through the segment's file (Config.WriteThroughMapping), stamps, writes
// the consume-queue entry and publishes the new end with atomic stores, so Read, ReadLog and the
// offset accessors never take that mutex (they take a read lock on the queue map only). Open
// starts four goroutines, all stopped by Close: the flusher (msync + group commit), the queue
// flusher (consume queues + checkpoint), the segment pre-allocator and the retention/cleaner
// goroutine. Lock order: Store.mu before Store.qmu and Store.amu; the other mutexes are leaves.
package commitlog
