package ha

import (
	"cmp"
	"fmt"
	"math"
	"slices"
	"time"
)

// The in-sync tracker (etcd-raft's tracker.ProgressTracker, for a master and its slaves): what
// the master knows of each slave and what follows from it, the in-sync verdicts, the counted set,
// the committed set, the acknowledgement limit and the confirmed offset. It is a plain value with
// methods: no lock, no goroutine, no channel, no clock and no log. The Master calls it under its
// mutex with its clock and its log end, and logs, wakes waiters and commits the set from what the
// methods return. A scenario harness drives it the same way from scripts.
//
// Units everywhere: offsets are bytes of the commit log (physical offsets, as HA pulls carry
// them); times are time.Time values the caller passes as now; a session is the id of one
// replication connection (rpc.Peer.ID), never 0.
//
// With a committed set (TrackerConfig.CommitSet, a Raft-elected group) every slave has two
// views: its verdict (InSync, the in-sync rules of NextInSync), and whether it counts for
// acknowledgements (Counted). A slave that joins counts at once; one that leaves keeps counting
// until the set without it is committed (SetCommitted). So the committed set is always a subset
// of the counted slaves (plus the master), and every member a new master may be elected from
// holds every acknowledged message. Without a committed set a verdict takes effect at once.

// More reasons of a verdict change (besides NextInSync's), for the events that take a slave out
// of the set without the in-sync rules.
const (
	// ReasonDisconnected: the slave's replication connection closed.
	ReasonDisconnected SyncReason = "disconnected"
	// ReasonLeaving: the slave asked to leave before it cuts its log (CodeHALeave).
	ReasonLeaving SyncReason = "leaving to cut its log"
)

// TrackerConfig configures a Tracker.
type TrackerConfig struct {
	// Rules are the in-sync thresholds (NextInSync).
	Rules SyncRules
	// MinAcks is how many counted slaves besides the master must hold an offset for it to be
	// confirmed (MasterConfig.MinAcks). 0: the master alone confirms while no slave counts.
	MinAcks int
	// CommitSet tells that changes of the in-sync set are committed before a leaving slave stops
	// counting (MasterConfig.CommitSyncSet is set): see SetCommitted. False: static roles.
	CommitSet bool
	// InitialSet (with CommitSet) is the committed set the master starts its epoch with: its
	// slaves count from the start and, until they acknowledge something, keep their place for a
	// grace of Rules.MaxLagTime.
	InitialSet []SyncMember
	// InitialConfirmed is the confirmed offset to start from (what the member knew the group
	// confirmed before it took over); a negative value is taken as 0.
	InitialConfirmed int64
	// Known, when set, tells whether a slave (its brokerId and member id) is a known member of
	// the group (MasterConfig.KnownSlave); the tracker keeps a known slave's record while it is
	// disconnected. Nil: no slave is known (static roles configure no slaves).
	Known func(brokerID int64, memberID string) bool
	// ForgetAfter is how long the record of a disconnected slave that is neither known, counted
	// nor in the committed set is kept (default DefaultForgetAfter): a slave that reconnects
	// within it finds its record, one that does not is forgotten (Expire).
	ForgetAfter time.Duration
	// MaxDisconnected caps how many such records are kept at once (default
	// DefaultMaxDisconnected): past it the oldest are forgotten as others disconnect, so that a
	// flood of connections naming new brokerIds leaves a bounded table.
	MaxDisconnected int
}

// Defaults of TrackerConfig.
const (
	// DefaultForgetAfter is how long a disconnected slave that is not a known member of the
	// group, and does not count, stays listed (haStatus, the per-slave metrics).
	DefaultForgetAfter = 10 * time.Second
	// DefaultMaxDisconnected caps the records of such slaves: a group's own slaves that restart
	// fit many times over.
	DefaultMaxDisconnected = 16
)

// TrackedSlave is the tracker's record of one slave. Offsets are bytes of the commit log.
type TrackedSlave struct {
	BrokerID int64
	// MemberID is its Raft server id ("" with static roles); the committed set names it so.
	MemberID string
	// Addr is its client address, HAAddr the remote address of its replication connection.
	Addr   string
	HAAddr string
	// Session is its current replication connection, 0 when it has none.
	Session uint64
	// Acked is the offset it last asked from with a valid pull: it holds every byte before it.
	// -1 when it has acknowledged nothing.
	Acked int64
	// ReadEnd is the master's log end when it last read for the slave (-1 before the first
	// read), ReadAt when (SlaveProgress.ReadEnd explains why the rules use it).
	ReadEnd int64
	ReadAt  time.Time
	// LastSeen is when it last sent a request (a held pull refreshes it on every tick).
	LastSeen time.Time
	// LastRequest is when a request of it last arrived: unlike LastSeen, nothing the master does
	// itself (a tick, a held pull ending) refreshes it, so it is evidence the slave was alive
	// then (QuorumHeard).
	LastRequest time.Time
	// LastCaughtUp is the last time CaughtUp held for it.
	LastCaughtUp time.Time
	// LastFull is the last time it held everything the master had when it last read for it, or
	// had a pull held: the time lag (LagTime) is measured from it.
	LastFull time.Time
	// Holding is how many of its pulls the master holds now.
	Holding int
	// InSync is the verdict of the in-sync rules; Counted whether it counts for
	// acknowledgements (the same as InSync without a committed set).
	InSync  bool
	Counted bool
	// GraceUntil: a slave of TrackerConfig.InitialSet keeps its verdict until then although it
	// has acknowledged nothing to this master yet.
	GraceUntil time.Time
	// Regressed tells that its acknowledged offset went back since the last evaluation.
	Regressed bool
	// Leaving tells that it asked to leave before cutting its log: it stays out, whatever it
	// acknowledges, until it connects again.
	Leaving bool
	// DisconnectedAt is when its last connection closed (zero while connected; the tracker's
	// start for a slave of the initial set that has not connected): a slave the tracker may
	// forget goes ForgetAfter after it.
	DisconnectedAt time.Time
}

// Progress returns the slave as the in-sync rules see it at now.
func (s TrackedSlave) Progress(now time.Time) SlaveProgress {
	p := SlaveProgress{
		Acked:        s.Acked,
		ReadEnd:      s.ReadEnd,
		ReadAt:       s.ReadAt,
		LastSeen:     s.LastSeen,
		LastCaughtUp: s.LastCaughtUp,
		Regressed:    s.Regressed,
		Connected:    s.Session != 0,
	}
	if s.Holding > 0 {
		p.LastSeen = now // a held pull is a live, caught-up slave
	}
	return p
}

// LagTime returns how long the slave has not held everything, at now, with the master's log
// ending at end: 0 when it lags no byte, has a pull held, or never held everything.
func (s TrackedSlave) LagTime(now time.Time, end int64) time.Duration {
	if LagBytes(s.Progress(now), end) == 0 || s.Holding > 0 || s.LastFull.IsZero() {
		return 0
	}
	return now.Sub(s.LastFull)
}

// SlaveConn is a new replication connection of a slave (Tracker.Connect).
type SlaveConn struct {
	// Session is the connection's id (not 0); BrokerID the slave it names.
	Session  uint64
	BrokerID int64
	MemberID string
	// Addr is the slave's client address, HAAddr the connection's remote address.
	Addr   string
	HAAddr string
}

// VerdictChange is a change of one slave's in-sync verdict, for the caller to log (and, with a
// committed set, to commit).
type VerdictChange struct {
	BrokerID int64
	InSync   bool
	Reason   SyncReason
	// Acked is the slave's acknowledged offset; LagBytes how far it is behind MasterEnd, the log
	// end the rules were applied with (both 0 for ReasonDisconnected and ReasonLeaving).
	Acked     int64
	LagBytes  int64
	MasterEnd int64
	// Counted is the number of counted slaves right after the change.
	Counted int
}

// AckResult is what an acknowledgement changed.
type AckResult struct {
	// BrokerID is the slave of the session (0: unknown session, nothing recorded).
	BrokerID int64
	// Refused: the offset is beyond the master's log end; nothing was recorded.
	Refused bool
	// Regressed: the acknowledged offset went back from From (the slave reset its log).
	Regressed bool
	From      int64
	// Changes holds the verdict change, if any.
	Changes []VerdictChange
}

// DisconnectResult is what a closed connection changed.
type DisconnectResult struct {
	// Current: the connection was its slave's current one (false: unknown or taken over, and
	// nothing changed).
	Current bool
	// Slave is the slave's record as it was when the connection closed.
	Slave TrackedSlave
	// Changes holds the verdict change (a slave in the set leaves it at once), if any.
	Changes []VerdictChange
	// Removed: the slave never acknowledged anything and does not count, so it is forgotten.
	Removed bool
	// Evicted lists the slaves forgotten to keep the disconnected records within
	// TrackerConfig.MaxDisconnected (the longest disconnected first): neither known nor counted.
	Evicted []TrackedSlave
}

// Tracker is the master's in-sync tracker (see the top of this file). Make one with
// MakeTracker; it holds maps, so a copy shares its state with the original.
type Tracker struct {
	cfg    TrackerConfig
	slaves map[int64]*TrackedSlave
	// sessions maps every open connection to the record it was bound to, which a newer
	// connection may have taken over (or, once forgotten, no map of slaves holds any more).
	sessions  map[uint64]*TrackedSlave
	committed []string
	counted   int
	connected int
	ackLimit  int64
	confirmed int64
	live      bool
}

// MakeTracker returns a tracker that starts, at now, with the initial set of cfg counted (with
// CommitSet) and committed, and the confirmed offset at cfg.InitialConfirmed.
func MakeTracker(cfg TrackerConfig, now time.Time) Tracker {
	t := Tracker{
		cfg:       cfg,
		slaves:    make(map[int64]*TrackedSlave),
		sessions:  make(map[uint64]*TrackedSlave),
		ackLimit:  math.MaxInt64,
		confirmed: max(cfg.InitialConfirmed, 0),
	}
	if t.cfg.ForgetAfter <= 0 {
		t.cfg.ForgetAfter = DefaultForgetAfter
	}
	if t.cfg.MaxDisconnected <= 0 {
		t.cfg.MaxDisconnected = DefaultMaxDisconnected
	}
	if cfg.CommitSet {
		for _, sm := range cfg.InitialSet {
			if sm.BrokerID <= 0 || t.slaves[sm.BrokerID] != nil {
				continue
			}
			t.slaves[sm.BrokerID] = &TrackedSlave{BrokerID: sm.BrokerID, Addr: sm.Addr, MemberID: sm.MemberID,
				Acked: -1, ReadEnd: -1, LastSeen: now, LastCaughtUp: now, InSync: true, Counted: true,
				GraceUntil: now.Add(cfg.Rules.MaxLagTime), DisconnectedAt: now}
			t.committed = append(t.committed, sm.MemberID)
		}
		slices.Sort(t.committed)
	}
	// NB: the live confirmation needs no log end here: a tracker starts confirming alone only
	// when it counts no slave from the start.
	t.publish(0)
	return t
}

// Connect binds a new connection to its slave (a record is made for a slave seen the first
// time) at now: the slave is connected, heard from, no longer leaving (it may rejoin), and no
// pull of it is held. When the slave had another connection open (it reconnected before the old
// one was seen closing, or a second broker uses the same brokerId), the new one takes over:
// tookOver is set and prev is the record before, whose Session the caller closes.
func (t *Tracker) Connect(c SlaveConn, now time.Time) (prev TrackedSlave, tookOver bool) {
	s := t.slaves[c.BrokerID]
	if s == nil {
		s = &TrackedSlave{BrokerID: c.BrokerID, Acked: -1, ReadEnd: -1, LastCaughtUp: now}
		t.slaves[c.BrokerID] = s
	} else {
		prev, tookOver = *s, s.Session != 0
	}
	if s.Session == 0 {
		t.connected++
	}
	s.Session = c.Session
	s.DisconnectedAt = time.Time{}
	s.Leaving = false // a new connection: the slave has cut its log (or never did) and may rejoin
	s.Addr = c.Addr
	s.MemberID = c.MemberID
	s.HAAddr = c.HAAddr
	s.LastSeen = now
	s.Holding = 0
	t.sessions[c.Session] = s
	// NB: no verdict and no acknowledged offset changed: the counted slaves, the acknowledgement
	// limit and the confirmed offset stay as they are.
	return prev, tookOver
}

// Ack records a valid pull of session from offset at now: the slave holds every byte before
// offset. readEnd is the master's log end read for this pull and end the log end now (at least
// readEnd). The in-sync rules judge the slave against its previous read end (SlaveProgress), then
// readEnd becomes its read end. An offset beyond end is refused: the master never wrote it.
func (t *Tracker) Ack(session uint64, offset, readEnd, end int64, now time.Time) AckResult {
	s := t.sessions[session]
	if s == nil {
		return AckResult{}
	}
	res := AckResult{BrokerID: s.BrokerID}
	if offset > end {
		res.Refused = true
		return res
	}
	if s.Acked >= 0 && offset < s.Acked {
		s.Regressed = true
		res.Regressed, res.From = true, s.Acked
	}
	if s.ReadEnd < 0 {
		s.ReadEnd, s.ReadAt = readEnd, now
	}
	if offset >= s.ReadEnd {
		s.LastFull = now
	}
	s.Acked = offset
	s.LastSeen = now
	s.LastRequest = now
	if CaughtUp(s.Progress(now), readEnd, t.cfg.Rules) {
		s.LastCaughtUp = now
	}
	res.Changes = t.eval(s, readEnd, now, nil)
	s.ReadEnd, s.ReadAt = readEnd, now
	t.publish(end)
	return res
}

// ReadFor records that a held pull of session woke at now and read the log up to readEnd for
// its slave: the slave is caught up once it acknowledges that end. A connection that was taken
// over records nothing.
func (t *Tracker) ReadFor(session uint64, readEnd int64, now time.Time) {
	if s := t.sessions[session]; s != nil && s.Session == session {
		s.ReadEnd, s.ReadAt = readEnd, now
	}
}

// Hold records at now that a pull of session is held (delta +1) or no longer held (-1): a held
// pull, or one woken by an append, finds the slave holding everything, and one that ends is a
// request heard. A connection that was taken over records nothing.
func (t *Tracker) Hold(session uint64, delta int, now time.Time) {
	s := t.sessions[session]
	if s == nil || s.Session != session {
		return
	}
	s.Holding += delta
	s.LastFull = now
	if delta < 0 {
		s.LastSeen = now
	}
}

// Tick applies the in-sync rules to every slave at now with the master's log ending at end, so
// that silent slaves leave the set without an acknowledgement to trigger it; a slave with a
// pull held counts as heard from and holding everything. It returns the verdict changes, by
// brokerId.
func (t *Tracker) Tick(end int64, now time.Time) []VerdictChange {
	var changes []VerdictChange
	for _, s := range t.sorted() {
		if s.Holding > 0 {
			s.LastSeen = now
			s.LastFull = now
			if CaughtUp(s.Progress(now), end, t.cfg.Rules) {
				s.LastCaughtUp = now
			}
		}
		changes = t.eval(s, end, now, changes)
	}
	if len(changes) > 0 {
		t.publish(end)
	}
	return changes
}

// Disconnect records that connection session closed (after its last request) at now, with the
// master's log ending at end. A slave whose current connection it was is no longer connected,
// and leaves the set at once if it was in it (a clear sign, rather than MaxLagTime of silence).
// A slave that never acknowledged anything and does not count is forgotten at once; past
// MaxDisconnected records of slaves the tracker may forget (forgettable), the longest
// disconnected go.
func (t *Tracker) Disconnect(session uint64, end int64, now time.Time) DisconnectResult {
	s := t.sessions[session]
	if s == nil {
		return DisconnectResult{}
	}
	delete(t.sessions, session)
	if s.Session != session {
		return DisconnectResult{Slave: *s} // taken over by a newer connection
	}
	res := DisconnectResult{Current: true, Slave: *s}
	s.Session = 0
	s.Holding = 0
	s.DisconnectedAt = now
	t.connected--
	if s.InSync {
		res.Changes = []VerdictChange{t.setInSync(s, false, ReasonDisconnected)}
	}
	if s.Acked < 0 && !s.Counted {
		delete(t.slaves, s.BrokerID) // never acknowledged anything: not worth listing
		res.Removed = true
	} else {
		res.Evicted = t.evict()
	}
	t.publish(end)
	return res
}

// forgettable reports whether the tracker may forget s: it is disconnected, does not count, is
// not in the committed set and is not a known member of the group. Its record then says
// nothing the master needs: a slave that connects again starts from its next pull.
func (t *Tracker) forgettable(s *TrackedSlave) bool {
	if s.Session != 0 || s.Counted || s.InSync {
		return false
	}
	if s.MemberID != "" && slices.Contains(t.committed, s.MemberID) {
		return false
	}
	return t.cfg.Known == nil || !t.cfg.Known(s.BrokerID, s.MemberID)
}

// evict forgets the longest disconnected forgettable slaves while there are more than
// MaxDisconnected of them, and returns their records.
func (t *Tracker) evict() []TrackedSlave {
	var idle []*TrackedSlave
	for _, s := range t.slaves {
		if t.forgettable(s) {
			idle = append(idle, s)
		}
	}
	if len(idle) <= t.cfg.MaxDisconnected {
		return nil
	}
	slices.SortFunc(idle, func(a, b *TrackedSlave) int {
		if c := a.DisconnectedAt.Compare(b.DisconnectedAt); c != 0 {
			return c
		}
		return cmp.Compare(a.BrokerID, b.BrokerID)
	})
	var out []TrackedSlave
	for _, s := range idle[:len(idle)-t.cfg.MaxDisconnected] {
		delete(t.slaves, s.BrokerID)
		out = append(out, *s)
	}
	return out
}

// Expire forgets, at now, the forgettable slaves disconnected for ForgetAfter or longer, and
// returns their records by brokerId. The master calls it on its tick.
func (t *Tracker) Expire(now time.Time) []TrackedSlave {
	var out []TrackedSlave
	for _, s := range t.sorted() {
		if s.Session == 0 && !s.DisconnectedAt.IsZero() && now.Sub(s.DisconnectedAt) >= t.cfg.ForgetAfter && t.forgettable(s) {
			delete(t.slaves, s.BrokerID)
			out = append(out, *s)
		}
	}
	return out
}

// Leave takes slave brokerID out of the set before it cuts its log (CodeHALeave), with the
// master's log ending at end: it stays out, whatever it acknowledges, until it connects again.
// known is false for a slave never seen (nothing to do); memberID, when both it and the record
// have one, must be the record's.
func (t *Tracker) Leave(brokerID int64, memberID string, end int64) (known bool, changes []VerdictChange, err error) {
	s := t.slaves[brokerID]
	if s == nil {
		return false, nil, nil
	}
	if memberID != "" && s.MemberID != "" && memberID != s.MemberID {
		return true, nil, fmt.Errorf("slave %d is member %s, not %s", brokerID, s.MemberID, memberID)
	}
	s.Leaving = true
	if s.InSync {
		changes = []VerdictChange{t.setInSync(s, false, ReasonLeaving)}
	}
	t.publish(end)
	return true, changes, nil
}

// QuorumHeard reports whether at least MinAcks counted slaves sent a request within maxAge of
// now (true with MinAcks 0): a master that cannot say so may have been stalled (SIGSTOP, a long
// pause) or cut off while its group elected another, and must not act on its own view of the
// log's end, such as moving a consumer's offset. A live slave sends a request at least every
// MasterConfig.MaxWait (a held pull ends then).
func (t *Tracker) QuorumHeard(now time.Time, maxAge time.Duration) bool {
	if t.cfg.MinAcks <= 0 {
		return true
	}
	n := 0
	for _, s := range t.slaves {
		if s.Counted && s.Session != 0 && now.Sub(s.LastRequest) < maxAge {
			n++
		}
	}
	return n >= t.cfg.MinAcks
}

// Counted reports whether slave brokerID counts for acknowledgements (false for one not known).
func (t *Tracker) Counted(brokerID int64) bool {
	s := t.slaves[brokerID]
	return s != nil && s.Counted
}

// ToCommit returns the in-sync set the verdicts call for: its slaves (those with a member id),
// by brokerId, and their member ids, sorted; differs tells whether it is not the committed set.
func (t *Tracker) ToCommit() (set []SyncMember, ids []string, differs bool) {
	for _, s := range t.sorted() {
		if s.InSync && s.MemberID != "" {
			set = append(set, SyncMember{MemberID: s.MemberID, BrokerID: s.BrokerID, Addr: s.Addr})
			ids = append(ids, s.MemberID)
		}
	}
	slices.Sort(ids)
	return set, ids, !slices.Equal(ids, t.committed)
}

// SetCommitted records that the set of member ids ids (sorted; what ToCommit returned when the
// commit began) is committed, with the master's log ending at end: a slave that is out by its
// verdict and not in ids stops counting. It returns the number of counted slaves.
func (t *Tracker) SetCommitted(ids []string, end int64) int {
	t.committed = slices.Clone(ids)
	for _, s := range t.slaves {
		if s.Counted && !s.InSync && !slices.Contains(ids, s.MemberID) {
			s.Counted = false
		}
	}
	t.publish(end)
	return t.counted
}

// CommittedSet returns the member ids of the committed set, sorted (shared: do not modify).
func (t *Tracker) CommittedSet() []string { return t.committed }

// AckLimit returns the lowest offset acknowledged by a counted slave (-1 while one has
// acknowledged nothing), math.MaxInt64 when none counts: every replication wait whose end is at
// most this is complete.
func (t *Tracker) AckLimit() int64 { return t.ackLimit }

// CountedSlaves returns the number of slaves that count for acknowledgements.
func (t *Tracker) CountedSlaves() int { return t.counted }

// ConnectedSlaves returns the number of slaves with a replication connection open.
func (t *Tracker) ConnectedSlaves() int { return t.connected }

// Confirmed returns the confirmed offset as stored (the highest offset held by the master and at
// least MinAcks counted slaves, never lowered) and live, set while MinAcks is 0 and no slave
// counts: the master alone then confirms its whole log, whatever the stored offset says.
func (t *Tracker) Confirmed() (offset int64, live bool) { return t.confirmed, t.live }

// ConfirmedOffset returns the confirmed offset of a log ending at end: end while live, else the
// stored offset capped at end.
func (t *Tracker) ConfirmedOffset(end int64) int64 {
	if t.live {
		return end
	}
	return min(t.confirmed, end)
}

// SlavesForRead returns the slaves as the read suggestion sees them (in sync and connected), by
// brokerId, in a new slice.
func (t *Tracker) SlavesForRead() []SlaveRead {
	reads := make([]SlaveRead, 0, len(t.slaves))
	for _, s := range t.slaves {
		reads = append(reads, SlaveRead{BrokerID: s.BrokerID, InSync: s.InSync && s.Session != 0, Acked: s.Acked})
	}
	slices.SortFunc(reads, func(a, b SlaveRead) int { return cmp.Compare(a.BrokerID, b.BrokerID) })
	return reads
}

// Slaves returns a copy of every slave's record, by brokerId.
func (t *Tracker) Slaves() []TrackedSlave {
	out := make([]TrackedSlave, 0, len(t.slaves))
	for _, s := range t.sorted() {
		out = append(out, *s)
	}
	return out
}

// Slave returns a copy of slave brokerID's record.
func (t *Tracker) Slave(brokerID int64) (TrackedSlave, bool) {
	if s := t.slaves[brokerID]; s != nil {
		return *s, true
	}
	return TrackedSlave{}, false
}

// sorted returns the records by brokerId.
func (t *Tracker) sorted() []*TrackedSlave {
	out := make([]*TrackedSlave, 0, len(t.slaves))
	for _, s := range t.slaves {
		out = append(out, s)
	}
	slices.SortFunc(out, func(a, b *TrackedSlave) int { return cmp.Compare(a.BrokerID, b.BrokerID) })
	return out
}

// eval applies the in-sync rules to s at now, with the master's log ending at end, and appends
// the verdict change, if any, to changes.
func (t *Tracker) eval(s *TrackedSlave, end int64, now time.Time, changes []VerdictChange) []VerdictChange {
	if s.Leaving {
		s.Regressed = false
		return changes // out since it asked to leave
	}
	if s.Acked < 0 && now.Before(s.GraceUntil) {
		return changes // a member of the committed set this master started with, not heard yet
	}
	p := s.Progress(now)
	next, why := NextInSync(s.InSync, p, end, now, t.cfg.Rules)
	s.Regressed = false
	if next == s.InSync {
		return changes
	}
	c := t.setInSync(s, next, why)
	c.LagBytes, c.MasterEnd = LagBytes(p, end), end
	return append(changes, c)
}

// setInSync records the verdict inSync for s: a slave joining counts at once, one leaving stops
// counting at once only without a committed set.
func (t *Tracker) setInSync(s *TrackedSlave, inSync bool, why SyncReason) VerdictChange {
	s.InSync = inSync
	if !t.cfg.CommitSet || inSync {
		s.Counted = inSync
	}
	t.counted = 0
	for _, o := range t.slaves {
		if o.Counted {
			t.counted++
		}
	}
	return VerdictChange{BrokerID: s.BrokerID, InSync: inSync, Reason: why, Acked: s.Acked, Counted: t.counted}
}

// publish recomputes the counted slaves, the acknowledgement limit and the confirmed offset,
// with the master's log ending at end (used only when the master stops confirming alone: what it
// confirmed alone, its whole log, stays confirmed).
func (t *Tracker) publish(end int64) {
	limit := int64(math.MaxInt64)
	counted := 0
	for _, s := range t.slaves {
		if s.Counted {
			limit = min(limit, s.Acked)
			counted++
		}
	}
	t.ackLimit, t.counted = limit, counted
	live := t.cfg.MinAcks <= 0 && counted == 0
	switch {
	case live:
	case t.live:
		t.raiseConfirmed(end)
	case counted >= t.cfg.MinAcks:
		t.raiseConfirmed(limit)
	}
	t.live = live
}

// raiseConfirmed moves the confirmed offset up to off, never down.
func (t *Tracker) raiseConfirmed(off int64) {
	if off > t.confirmed && off != math.MaxInt64 {
		t.confirmed = off
	}
}
