package ha

import "time"

// The in-sync set (RocketMQ 5's SyncStateSet, Kafka's ISR) as pure functions of explicit inputs
// (etcd-raft's R1: no goroutine, no clock, no I/O). The in-sync tracker (Tracker) applies them on
// every acknowledgement and on the Master's periodic tick, with the Master's clock.

// SyncRules are the thresholds of the in-sync set.
type SyncRules struct {
	// MaxLagBytes: a member lagging more than this many bytes behind the master's end...
	MaxLagBytes int64
	// MaxLagTime: ...for longer than this leaves the set; so does a member not heard from for
	// this long.
	MaxLagTime time.Duration
	// RejoinLagBytes: a slave joins (or rejoins) once it lags at most this many bytes behind the
	// master's end as of the master's last answer to it (0: it holds everything the master had).
	RejoinLagBytes int64
}

// SlaveProgress is what the master knows of one slave when it evaluates the set.
type SlaveProgress struct {
	// Acked is the offset the slave last asked from with a valid request: it holds every byte
	// before it. -1 when the slave has acknowledged nothing yet.
	Acked int64
	// ReadEnd is the master's log end when the master last read the log for this slave: the
	// slave is caught up when Acked reaches it (Kafka's lastCaughtUpTime rule; measuring against
	// the live end instead would keep a slave out forever under continuous writes, because the
	// end always moves during the round trip).
	ReadEnd int64
	// ReadAt is when the master made that read: a slave that held ReadEnd long ago (it was
	// frozen since) is not caught up now, however close Acked is to ReadEnd.
	ReadAt time.Time
	// LastSeen is when the slave last sent a request, or now while one of its pulls is held by
	// the master (a held pull is a live, caught-up slave).
	LastSeen time.Time
	// LastCaughtUp is the last time CaughtUp held for the slave; the zero Time if never.
	LastCaughtUp time.Time
	// Regressed tells that the slave's acknowledged offset went back since the last evaluation
	// (it reset its log): it no longer holds what it acknowledged.
	Regressed bool
	// Connected tells whether the slave has a replication connection open.
	Connected bool
}

// SyncReason says why a slave's verdict changed (NextInSync's reasons, and the tracker's
// ReasonDisconnected and ReasonLeaving); it goes into the log line of a change.
type SyncReason string

// Reasons.
const (
	ReasonNone       SyncReason = ""
	ReasonCaughtUp   SyncReason = "caught up"
	ReasonLagging    SyncReason = "lagging too far for too long"
	ReasonSilent     SyncReason = "not heard from"
	ReasonRegressed  SyncReason = "acknowledged offset went back (log reset)"
	ReasonNeverAcked SyncReason = "nothing acknowledged"
)

// LagBytes returns how far the slave is behind masterEnd (0 when not behind); a slave that has
// acknowledged nothing lags by masterEnd.
func LagBytes(s SlaveProgress, masterEnd int64) int64 {
	return max(masterEnd-max(s.Acked, 0), 0)
}

// CaughtUp reports whether the slave counts as caught up now: it holds everything the master had
// when it last read for it, or it lags at most MaxLagBytes behind masterEnd. The tracker records
// the time of every acknowledgement (and tick with a held pull) for which this holds as
// LastCaughtUp.
func CaughtUp(s SlaveProgress, masterEnd int64, rules SyncRules) bool {
	if s.Acked < 0 {
		return false
	}
	return s.Acked >= s.ReadEnd || LagBytes(s, masterEnd) <= rules.MaxLagBytes
}

// NextInSync returns whether the slave belongs to the in-sync set after this evaluation, given
// whether it does now (cur), and the reason when that changes (ReasonNone otherwise).
//
// A member leaves when it has not been heard from for MaxLagTime, when its acknowledged offset
// went back, or when it has not been caught up (CaughtUp) for longer than MaxLagTime. A
// non-member joins when it is connected, was heard from within MaxLagTime, did not regress, and
// lags at most RejoinLagBytes behind ReadEnd, read within MaxLagTime (a slave back from a freeze
// acknowledges the end of a read made before the freeze: that does not make it caught up).
func NextInSync(cur bool, s SlaveProgress, masterEnd int64, now time.Time, rules SyncRules) (bool, SyncReason) {
	silent := now.Sub(s.LastSeen) > rules.MaxLagTime
	if cur {
		switch {
		case s.Acked < 0:
			return false, ReasonNeverAcked
		case s.Regressed:
			return false, ReasonRegressed
		case silent:
			return false, ReasonSilent
		case !CaughtUp(s, masterEnd, rules) && now.Sub(s.LastCaughtUp) > rules.MaxLagTime:
			// NB: CaughtUp, not the lag alone: a member that holds everything the master last read
			// for it is caught up however far the live end ran ahead since (see ReadEnd).
			return false, ReasonLagging
		}
		return true, ReasonNone
	}
	if s.Acked < 0 || s.Regressed || silent || !s.Connected {
		return false, ReasonNone
	}
	if s.ReadEnd-s.Acked <= rules.RejoinLagBytes && now.Sub(s.ReadAt) <= rules.MaxLagTime {
		return true, ReasonCaughtUp
	}
	return false, ReasonNone
}
