package ha

import "errors"

// MasterLog is the master's commit log as replication needs it. The broker implements it with an
// adapter over its commit log. Its methods are called from replication goroutines (one per slave
// connection), concurrently with appends, so they must be safe for concurrent use.
type MasterLog interface {
	LogMinOffset() int64
	LogEndOffset() int64
	// ReadReplication calls fn with whole batches starting at from — or, when from is the end of a
	// segment (a segment-end marker or the segment's last byte), starting at the next segment's
	// base: start tells where. At most maxBytes unless the first batch is bigger. data is valid only
	// during fn. Errors: ErrBeyondEnd (from > end), ErrBelowMin (from < min: retention removed it),
	// ErrNotBatchBoundary (from is inside a batch or not a batch start), others (I/O).
	// from == end calls fn with start=end, empty data.
	ReadReplication(from int64, maxBytes int, fn func(start int64, data []byte) error) error
}

// SlaveLog is the slave's commit log. Only the Slave's goroutine calls AppendReplicated and
// ResetTo; LogMinOffset and LogEndOffset may also be called by Status from any goroutine.
type SlaveLog interface {
	LogMinOffset() int64
	LogEndOffset() int64
	// AppendReplicated writes data (whole batches, exactly as the master stores them) at start, which
	// must be the log end or, after a segment end on the master, the next segment's base (the log
	// writes its segment-end marker and rolls). Every batch's CRC and stored physical offset are
	// checked; consume queues are rebuilt from the batches. Returns the new end.
	AppendReplicated(start int64, data []byte) (end int64, err error)
	// ResetTo discards the whole log and consume queues and starts an empty log at base (a segment
	// boundary of the master), for a resync. With keep the old log is set aside rather than
	// deleted, and where it went is returned (for the log line an operator reads).
	ResetTo(base int64, keep bool) (kept string, err error)
}

// Errors of MasterLog.ReadReplication, which the master maps to pull results.
var (
	// ErrBeyondEnd is returned when the requested offset is past the log end.
	ErrBeyondEnd = errors.New("ha: offset beyond the log end")
	// ErrBelowMin is returned when the requested offset is below the log's min offset
	// (retention removed it).
	ErrBelowMin = errors.New("ha: offset below the log's min offset")
	// ErrNotBatchBoundary is returned when the requested offset is inside a batch or otherwise
	// not where a batch starts.
	ErrNotBatchBoundary = errors.New("ha: offset is not a batch boundary")
)

// Errors of the replication service.
var (
	// ErrReplicationTimeout is passed to a WaitReplicated callback when the in-sync slaves did
	// not acknowledge the offset in time.
	ErrReplicationTimeout = errors.New("ha: replication not confirmed in time")
	// ErrClosed is returned by a closed Master or Slave, and passed to WaitReplicated callbacks
	// still waiting when the Master closes.
	ErrClosed = errors.New("ha: closed")
	// ErrBadChunk is returned when a replication response cannot be decoded: a body whose
	// announced or actual uncompressed size disagrees with RawLength or exceeds the slave's
	// bound (a decompression bomb), an unknown codec, or corrupt compressed data.
	ErrBadChunk = errors.New("ha: bad replication chunk")
)
