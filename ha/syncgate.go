package ha

import (
	"cmp"
	"slices"
	"time"
)

// The in-sync set of a Raft-elected group is committed through Raft before the master relies on
// it (MasterConfig.CommitSyncSet). The master keeps two views of each slave: inSync, the verdict
// of the in-sync rules, and counted, whether the slave counts for acknowledgements. A slave that
// joins counts at once; one that leaves keeps counting until the set without it is committed.
// So the committed set is always a subset of the counted slaves (plus the master), and every
// member a new master may be elected from holds every acknowledged message.

// commitRetry is how long the committer waits before it retries a failed commit.
const commitRetry = 100 * time.Millisecond

// seedSyncSet starts the counted set with MasterConfig.InitialSyncSet. Called by NewMaster.
func (m *Master) seedSyncSet() {
	if m.cfg.CommitSyncSet == nil {
		return
	}
	now := m.cfg.Now()
	for _, sm := range m.cfg.InitialSyncSet {
		if sm.BrokerID <= 0 || m.slaves[sm.BrokerID] != nil {
			continue
		}
		m.slaves[sm.BrokerID] = &slaveState{id: sm.BrokerID, addr: sm.Addr, memberID: sm.MemberID,
			acked: -1, readEnd: -1, lastSeen: now, lastCaughtUp: now, inSync: true, counted: true,
			graceUntil: now.Add(m.rules.MaxLagTime)}
		m.committed = append(m.committed, sm.MemberID)
	}
	slices.Sort(m.committed)
	m.recountLocked()
	m.publishLocked()
}

// setInSyncLocked records the rules' verdict for s and returns the number of counted slaves.
// m.mu must be held.
func (m *Master) setInSyncLocked(s *slaveState, inSync bool) int {
	s.inSync = inSync
	if m.cfg.CommitSyncSet == nil || inSync {
		s.counted = inSync
	}
	if m.cfg.CommitSyncSet != nil {
		select {
		case m.setKick <- struct{}{}:
		default:
		}
	}
	return m.recountLocked()
}

// recountLocked recomputes inSyncN from the counted slaves. m.mu must be held.
func (m *Master) recountLocked() int {
	n := 0
	for _, s := range m.slaves {
		if s.counted {
			n++
		}
	}
	m.inSyncN.Store(int32(n))
	return n
}

// syncSetCommitter commits the in-sync verdicts through CommitSyncSet whenever they differ from
// the committed set, then stops counting the slaves the committed set no longer holds.
func (m *Master) syncSetCommitter() {
	defer m.wg.Done()
	retry := time.NewTimer(time.Hour)
	retry.Stop()
	defer retry.Stop()
	for {
		select {
		case <-m.done:
			return
		case <-m.setKick:
		case <-retry.C:
		}
		m.mu.Lock()
		var want []SyncMember
		var ids []string
		for _, s := range m.slaves {
			if s.inSync && s.memberID != "" {
				want = append(want, SyncMember{MemberID: s.memberID, BrokerID: s.id, Addr: s.addr})
				ids = append(ids, s.memberID)
			}
		}
		slices.Sort(ids)
		same := slices.Equal(ids, m.committed)
		m.mu.Unlock()
		if same {
			continue
		}
		slices.SortFunc(want, func(a, b SyncMember) int { return cmp.Compare(a.BrokerID, b.BrokerID) })
		if err := m.cfg.CommitSyncSet(want); err != nil {
			m.warn.Warn(m.log, "cannot commit the in-sync set; retrying", "set", ids, "err", err)
			retry.Reset(commitRetry)
			continue
		}
		m.mu.Lock()
		m.committed = ids
		for _, s := range m.slaves {
			if s.counted && !s.inSync && !slices.Contains(ids, s.memberID) {
				s.counted = false
			}
		}
		n := m.recountLocked()
		m.publishLocked()
		m.mu.Unlock()
		m.log.Info("in-sync set committed", "set", ids, "countedSlaves", n)
		select {
		case m.waitKick <- struct{}{}: // waiters may now complete with fewer slaves
		default:
		}
		select { // verdicts may have changed during the commit
		case m.setKick <- struct{}{}:
		default:
		}
	}
}
