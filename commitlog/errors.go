package commitlog

import "errors"

var (
	// ErrClosed is returned by every Store method called after (or concurrently with) Close.
	ErrClosed = errors.New("commitlog: store is closed")
	// ErrDiskFull is wrapped by Append (and Open) when a segment or consume-queue file cannot be
	// preallocated because the file system is out of space; the call may succeed once space frees.
	ErrDiskFull = errors.New("commitlog: disk full")
	// ErrOffsetOutOfRange is wrapped by ReadLog when the physical offset is outside the log.
	ErrOffsetOutOfRange = errors.New("commitlog: offset out of range")
	// ErrIncomplete must be wrapped by a Parser when its input is shorter than the batch.
	ErrIncomplete = errors.New("commitlog: incomplete batch")
	// ErrCorrupt is wrapped when on-disk data (a consume-queue entry, the segment list) is damaged.
	ErrCorrupt = errors.New("commitlog: corrupt data")
	// ErrInvalidBatch is wrapped by Append for a batch that breaks the batch contract.
	ErrInvalidBatch = errors.New("commitlog: invalid batch")
	// ErrStaleEpoch is wrapped by Append for an epoch below the epoch of the log's newest batch:
	// stored, the batch would not continue the log's history and the next Open would cut it.
	ErrStaleEpoch = errors.New("commitlog: epoch below the epoch of the log's newest batch")
	// ErrTopicDeleted is wrapped by Append for a topic DeleteTopic deleted that AllowTopic has
	// not allowed again since: a send admitted before the deletion must not land in the queues
	// created after it.
	ErrTopicDeleted = errors.New("commitlog: topic deleted")
	// ErrInvalidTopic is wrapped by Append for an empty or too long topic or a negative queue id.
	ErrInvalidTopic = errors.New("commitlog: invalid topic or queue id")
	// ErrInvalidConfig is wrapped by Open for a Config it cannot use.
	ErrInvalidConfig = errors.New("commitlog: invalid config")
	// ErrLocked is wrapped by Open when another Store holds the directory.
	ErrLocked = errors.New("commitlog: store directory is in use")
	// errRetry is internal: a concurrent deletion was seen; the read must start over.
	errRetry = errors.New("commitlog: concurrent deletion, retry")
)
