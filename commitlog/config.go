package commitlog

import (
	"fmt"
	"log/slog"
	"os"
	"time"
)

// FlushMode says when appended bytes are made durable.
type FlushMode int

const (
	// AsyncFlush msyncs in the background every Config.FlushInterval, or earlier once
	// Config.FlushDirtyBytes are dirty (RocketMQ ASYNC_FLUSH).
	AsyncFlush FlushMode = iota
	// SyncFlush is group commit (RocketMQ SYNC_FLUSH): Store.WaitFlushed wakes the flusher at
	// once, and one msync acknowledges every append it covers.
	SyncFlush
)

// String returns the RocketMQ name of the mode (ASYNC_FLUSH, SYNC_FLUSH).
func (m FlushMode) String() string {
	switch m {
	case AsyncFlush:
		return "ASYNC_FLUSH"
	case SyncFlush:
		return "SYNC_FLUSH"
	}
	return fmt.Sprintf("FlushMode(%d)", int(m))
}

// BatchInfo describes one batch, as returned by a Parser.
type BatchInfo struct {
	// Size is the batch's total length in bytes.
	Size int
	// Topic is the batch's topic; a view into the bytes given to the Parser (not retained by
	// this package beyond its use of the result).
	Topic []byte
	// QueueID is the batch's queue within Topic.
	QueueID int32
	// BaseQueueOffset is the queue offset of the batch's first message (as stamped by Append).
	BaseQueueOffset int64
	// Count is the number of messages in the batch (>= 1).
	Count int32
	// TagHash is stored in the consume-queue entry for server-side tag filtering.
	TagHash uint32
	// StoreTimestamp is the store time stamped by Append, in Unix milliseconds. Store
	// timestamps never go down along the log from where the history file says (History).
	StoreTimestamp int64
	// Epoch is the epoch stamped by Append (the master epoch that stored the batch); 0 for a
	// format without epochs. Epochs never go down along the log.
	Epoch uint32
	// Control is set for a control batch: a record the broker wrote into its log (Kafka's
	// control batch), not messages. No consume queue indexes it and its QueueID,
	// BaseQueueOffset and Count are not checked against any queue; its epoch is checked like
	// any batch's.
	Control bool
	// DeletesTopic, for a control batch, says it deletes every consume queue of Topic at its
	// position (Store.DeleteTopic): the topic's batches before it belong to the deleted queues,
	// the ones after to queues created afresh, whose offsets start again.
	DeletesTopic bool
}

// Parser validates the batch at the start of b (b may extend past it): the batch CRC, and that
// the physical offset stored in the batch equals physicalOffset. It returns an error wrapping
// ErrIncomplete when b is shorter than the batch and any other error for corrupt data. Open
// calls it (recovery, on the goroutine calling Open) and so do ReadReplication and
// AppendReplicated (any goroutine); it must not retain b. The store then checks that the batch
// continues the log's history (see the package documentation, "History").
type Parser func(b []byte, physicalOffset int64) (BatchInfo, error)

// StampFunc writes the broker-assigned fields into the stored copy of a batch. Append calls it
// under the store mutex with dst = the batch's bytes inside the mapping, or in the store's
// write buffer before they are written through the file (see Config.WriteThroughMapping)
// (len(dst) == cap(dst) == batch size), its physical offset, base queue offset, store timestamp
// (Unix milliseconds) and the epoch passed to Append. It must be short and must not call back
// into the Store.
type StampFunc func(dst []byte, physicalOffset, baseQueueOffset, storeTimestamp int64, epoch uint32)

// Config configures a Store. Zero values select the documented defaults.
type Config struct {
	// Dir is the store root (see the package documentation for the layout). Required.
	Dir string
	// SegmentSize is the size of each commit-log segment file in bytes (default 1 GiB, minimum
	// 4096). It is also the largest batch Append accepts. Existing segments keep their own size.
	SegmentSize int64
	// QueueFileEntries is the number of 32-byte entries per consume-queue file (default 300_000).
	QueueFileEntries int
	// FlushMode selects AsyncFlush (default) or SyncFlush.
	FlushMode FlushMode
	// FlushInterval is the background msync period (default 500ms).
	FlushInterval time.Duration
	// FlushDirtyBytes makes Append wake the flusher early once this many bytes are not yet
	// durable (default 16 MiB).
	FlushDirtyBytes int64
	// QueueFlushInterval is the period of the consume-queue msync and checkpoint write
	// (default 1s).
	QueueFlushInterval time.Duration
	// RetentionAge deletes whole segments whose newest batch is older than this (default 72h;
	// negative disables age-based retention).
	RetentionAge time.Duration
	// RetentionBytes deletes the oldest segments while the log's files are larger than this many
	// bytes (0 = unlimited). The active segment is never deleted.
	RetentionBytes int64
	// RetentionCheckInterval is how often retention runs (default 10s).
	RetentionCheckInterval time.Duration
	// CloseTimeout bounds how long Close waits for readers to release their Slices before it
	// logs a warning and leaves the still-held mappings to be unmapped on their last release
	// (default 5s).
	CloseTimeout time.Duration
	// DisablePrefault stops the segment pre-allocator from preparing the pages ahead of the log
	// end (populating their page tables with MADV_POPULATE_WRITE, or reading them into the page
	// cache with MADV_WILLNEED) and the consume-queue flusher from populating the next entries'.
	// Preparing takes page faults and page allocation off Append, which runs under the store
	// mutex, at the cost of up to prefaultWindow (8 MiB) of zero pages ahead of the writes.
	DisablePrefault bool
	// WriteThroughMapping makes every append copy into the active commit-log segment's mapping,
	// whose page tables the segment pre-allocator populates ahead (RocketMQ's default). By
	// default (false) appends write the active segment through its file (pwrite) into pages
	// the pre-allocator read into the page cache ahead, unmapped; while the average write is
	// under smallWrite (2 KiB) the pre-allocator populates the page tables ahead instead, and
	// an append that lands where they are populated is copied into the mapping, whatever its
	// size. Readers read through the mapping either way. Writing through the file zeroes no fresh page in a fault ahead of
	// the writes and leaves writeback no writable mapping to write-protect page by page (see
	// "Writing the active segment" in log.go).
	WriteThroughMapping bool
	// Parser validates and describes batches found on disk. Required.
	Parser Parser
	// Logger receives recovery reports, flush errors and retention actions
	// (default slog.Default()).
	Logger *slog.Logger
	// Now is the clock used for store timestamps and retention (default time.Now). A store
	// timestamp is the clock's time, but not below the log's newest while the clock is at most
	// a second behind it (History).
	Now func() time.Time
	// OnFlush, when not nil, is called after every successful flush of the log by the flusher
	// (periodic, group commit, or the final flush of Close) with the time the msyncs took and the
	// number of bytes they made durable: a hook for metrics. It runs on the flusher goroutine (or
	// the goroutine calling Close), must be short and must not call into the Store.
	OnFlush func(d time.Duration, bytes int64)
	// Preallocate gives f (an empty, newly created file) its full size without holes. It is a
	// fault-injection hook for tests; the default uses fallocate(2) mode 0 and falls back to
	// writing zeros where fallocate is unsupported. An error for which errors.Is(err,
	// syscall.ENOSPC) holds is reported as ErrDiskFull.
	Preallocate func(f *os.File, size int64) error
}

// Defaults, after RocketMQ's MessageStoreConfig where it has an equivalent.
const (
	DefaultSegmentSize            = 1 << 30
	DefaultQueueFileEntries       = 300_000
	DefaultFlushInterval          = 500 * time.Millisecond
	DefaultFlushDirtyBytes        = 16 << 20
	DefaultQueueFlushInterval     = time.Second
	DefaultRetentionAge           = 72 * time.Hour
	DefaultRetentionCheckInterval = 10 * time.Second
	DefaultCloseTimeout           = 5 * time.Second

	minSegmentSize = 4096
)

func (c *Config) setDefaults() error {
	if c.Dir == "" {
		return fmt.Errorf("cannot open store: Dir is empty: %w", ErrInvalidConfig)
	}
	if c.Parser == nil {
		return fmt.Errorf("cannot open store in %q: Parser is nil: %w", c.Dir, ErrInvalidConfig)
	}
	if c.SegmentSize == 0 {
		c.SegmentSize = DefaultSegmentSize
	}
	if c.SegmentSize < minSegmentSize {
		return fmt.Errorf("cannot open store in %q: SegmentSize %d is below %d: %w", c.Dir, c.SegmentSize, minSegmentSize, ErrInvalidConfig)
	}
	if c.QueueFileEntries == 0 {
		c.QueueFileEntries = DefaultQueueFileEntries
	}
	if c.QueueFileEntries < 1 {
		return fmt.Errorf("cannot open store in %q: QueueFileEntries %d < 1: %w", c.Dir, c.QueueFileEntries, ErrInvalidConfig)
	}
	if c.FlushMode != AsyncFlush && c.FlushMode != SyncFlush {
		return fmt.Errorf("cannot open store in %q: unknown %v: %w", c.Dir, c.FlushMode, ErrInvalidConfig)
	}
	if c.FlushInterval <= 0 {
		c.FlushInterval = DefaultFlushInterval
	}
	if c.FlushDirtyBytes <= 0 {
		c.FlushDirtyBytes = DefaultFlushDirtyBytes
	}
	if c.QueueFlushInterval <= 0 {
		c.QueueFlushInterval = DefaultQueueFlushInterval
	}
	if c.RetentionAge == 0 {
		c.RetentionAge = DefaultRetentionAge
	}
	if c.RetentionBytes < 0 {
		c.RetentionBytes = 0
	}
	if c.RetentionCheckInterval <= 0 {
		c.RetentionCheckInterval = DefaultRetentionCheckInterval
	}
	if c.CloseTimeout <= 0 {
		c.CloseTimeout = DefaultCloseTimeout
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	if c.Preallocate == nil {
		c.Preallocate = defaultPreallocate
	}
	return nil
}
