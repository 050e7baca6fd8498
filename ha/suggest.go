package ha

// SlaveRead is a slave as the read suggestion sees it.
type SlaveRead struct {
	BrokerID int64
	// InSync tells whether the slave is in the in-sync set and connected.
	InSync bool
	// Acked is the offset the slave last acknowledged: it holds every byte before it.
	Acked int64
}

// SuggestInput is everything SuggestReadBroker decides from; the broker fills it per pull.
type SuggestInput struct {
	// SelfID is this broker's id: 0 for the master, > 0 for a slave.
	SelfID int64
	// SlaveReadEnable is RocketMQ's slaveReadEnable: may the master send consumers to slaves.
	SlaveReadEnable bool
	// MasterAlive (a slave's view) tells whether the slave's link to the master is up.
	MasterAlive bool
	// Loaded (the master's view) tells that the master is busy: its write rate or pending
	// requests are over a threshold, as the caller judges.
	Loaded bool
	// LogEnd is this broker's commit-log end.
	LogEnd int64
	// MasterEnd (a slave's view) is the master's log end as last heard.
	MasterEnd int64
	// MasterLoaded (a slave's view) tells that the master said it was loaded: it sends
	// consumers to slaves, so the slave keeps them.
	MasterLoaded bool
	// NextPhys is the physical offset of the consumer's next batch; LogEnd when the consumer
	// is caught up.
	NextPhys int64
	// SlowBytes is the "far behind" threshold (bytes): a consumer whose next batch is more than
	// this far behind the end reads cold data.
	SlowBytes int64
	// Slaves are the master's slaves (SlavesForRead); unused on a slave.
	Slaves []SlaveRead
}

// SuggestReadBroker returns the brokerId a consumer should pull its queue from next (the pull
// response's SuggestBrokerID). It is a pure function.
//
// RocketMQ's master suggests a slave when the consumer reads old data: in
// DefaultMessageStore.getMessage, diff = maxPhyOffset - nextPhyOffset and
// "diff > memory * accessMessageInMemoryMaxRatio / 100" (40% of RAM) marks the pull
// suggestPullingFromSlave, because that data is no longer in the page cache and reading it
// from disk would compete with the master's writes. RocketMQ does not look at the slave's
// progress, so a lagging slave may be suggested for data it does not have yet, and the consumer
// bounces back. Petrel also suggests a slave when the master is loaded, and only a slave that
// holds the consumer's next batch:
//
// On the master (SelfID 0): suggest nobody but itself (0) unless SlaveReadEnable; otherwise, when
// the master is loaded or the consumer is more than SlowBytes behind the end, suggest the in-sync
// slave with the largest acknowledged offset (ties: the lowest id) among those that hold the next
// batch (Acked > NextPhys). With no such slave, 0. One exception: a consumer at the log end of a
// loaded master (NextPhys >= LogEnd: its next batch is not written yet) may go to any in-sync
// slave, which holds the pull until replication brings that batch (and sends the consumer back
// if it does not come within the poll timeout): under load, even caught-up consumers leave the
// master.
//
// On a slave: when it does not have the next batch (NextPhys >= LogEnd), send the consumer to the
// master (0): a slave never answers "no new message" for data the master may have. When the
// master is alive, not loaded (MasterLoaded: it would only send the consumer back) and the
// consumer is not slow by the master's end (MasterEnd - NextPhys <= SlowBytes), also send it back
// to the master, which serves hot data from memory. Otherwise (master down or loaded, or a slow
// consumer reading cold data) keep it here: SelfID.
func SuggestReadBroker(in SuggestInput) int64 {
	if in.SelfID != 0 {
		if in.NextPhys >= in.LogEnd {
			return 0
		}
		if in.MasterAlive && !in.MasterLoaded && in.MasterEnd-in.NextPhys <= in.SlowBytes {
			return 0
		}
		return in.SelfID
	}
	if !in.SlaveReadEnable {
		return 0
	}
	if !in.Loaded && in.LogEnd-in.NextPhys <= in.SlowBytes {
		return 0
	}
	// A consumer at the end (nothing written for it yet) of a loaded master goes to an in-sync
	// slave too: the slave holds its pull until replication brings the next batch.
	tail := in.Loaded && in.NextPhys >= in.LogEnd
	best := int64(0)
	bestAcked := int64(-1)
	for _, s := range in.Slaves {
		if !s.InSync || s.BrokerID <= 0 || (s.Acked <= in.NextPhys && !tail) {
			continue
		}
		if s.Acked > bestAcked || (s.Acked == bestAcked && s.BrokerID < best) {
			best, bestAcked = s.BrokerID, s.Acked
		}
	}
	return best
}
