package ha

import "time"

// The in-sync set of a Raft-elected group is committed through Raft before the master relies on
// it (MasterConfig.CommitSyncSet): the tracker (Tracker.ToCommit, SetCommitted) says what to
// commit and what a commit changes; the committer below carries the commits out.

// commitRetry is how long the committer waits before it retries a failed commit.
const commitRetry = 100 * time.Millisecond

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
		want, ids, differs := m.tr.ToCommit()
		m.mu.Unlock()
		if !differs {
			continue
		}
		if err := m.cfg.CommitSyncSet(want); err != nil {
			m.warn.Warn(m.log, "cannot commit the in-sync set; retrying", "set", ids, "err", err)
			retry.Reset(commitRetry)
			continue
		}
		m.mu.Lock()
		n := m.tr.SetCommitted(ids, m.cfg.Log.LogEndOffset())
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
