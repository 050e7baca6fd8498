package broker

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net"
	"time"

	"golang.org/x/sys/unix"

	"github.com/petrel-mq/petrel/commitlog"
	"github.com/petrel-mq/petrel/ha"
	"github.com/petrel-mq/petrel/protocol"
	"github.com/petrel-mq/petrel/protocol/rpc"
)

// haLog adapts the commit log to what replication needs (ha.MasterLog, ha.SlaveLog), mapping
// the commit log's errors to ha's. In a Raft-elected group a slave also records the epochs of
// the batches it appends (epochs).
type haLog struct {
	s      *commitlog.Store
	epochs *epochLog
	// reset, when not nil, is called after the log was reset (ResetTo) with its new base.
	reset func(base int64)
	// deleted, when not nil, is called with the topic of every deletion record AppendReplicated
	// took into the log (after the store applied it).
	deleted func(topic string)
}

func (l haLog) LogMinOffset() int64 { return l.s.LogMinOffset() }
func (l haLog) LogEndOffset() int64 { return l.s.LogEndOffset() }

func (l haLog) ReadReplication(from int64, maxBytes int, fn func(start int64, data []byte) error) error {
	err := l.s.ReadReplication(from, maxBytes, fn)
	switch {
	case err == nil:
		return nil
	case errors.Is(err, commitlog.ErrBeyondEnd):
		return fmt.Errorf("%w: %v", ha.ErrBeyondEnd, err)
	case errors.Is(err, commitlog.ErrBelowMin):
		return fmt.Errorf("%w: %v", ha.ErrBelowMin, err)
	case errors.Is(err, commitlog.ErrNotBatchBoundary):
		return fmt.Errorf("%w: %v", ha.ErrNotBatchBoundary, err)
	}
	return err
}

// AppendReplicated appends replicated batches; a Raft member records the epochs they start
// before it appends them (observe), so that a crash in between leaves an epoch start with no
// data, which is harmless (ha.NewestWithData skips it), never data of an epoch the file lacks.
func (l haLog) AppendReplicated(start int64, data []byte) (int64, error) {
	if l.epochs != nil {
		prevEnd := l.s.LogEndOffset() // only the slave's goroutine appends: nothing moves it meanwhile
		if err := l.epochs.observe(prevEnd, start, data); err != nil {
			return prevEnd, err
		}
	}
	end, err := l.s.AppendReplicated(start, data)
	if l.deleted != nil {
		eachDeletion(data, end-start, l.deleted)
	}
	return end, err
}

// eachDeletion calls fn with the topic of every deletion record among the batches of data that
// lie within its first n bytes (those appended). Only the batch headers are read.
func eachDeletion(data []byte, n int64, fn func(topic string)) {
	for off := 0; off < len(data) && int64(off) < n; {
		size := protocol.PeekBatchSize(data[off:])
		if size <= 0 || off+size > len(data) {
			return
		}
		if a, ok := protocol.BatchAttributes(data[off:]); ok && a&protocol.AttrControl != 0 {
			if h, err := protocol.ReadBatchHeader(data[off:]); err == nil {
				if typ, ok := protocol.ControlOf(data[off:], h); ok && typ == protocol.ControlDeleteTopic {
					fn(string(h.Topic))
				}
			}
		}
		off += size
	}
}

// ResetTo restarts the log at base; a Raft member forgets its epochs first (the first batch
// replicated after base records its epoch at base, see ha.TruncationPoint), so that a crash in
// between never leaves old epochs over the new log.
func (l haLog) ResetTo(base int64, keep bool) (string, error) {
	if l.epochs != nil {
		if err := l.epochs.truncateTo(0); err != nil {
			return "", err
		}
	}
	kept, err := l.s.ResetTo(base, keep)
	if err == nil && l.reset != nil {
		l.reset(base)
	}
	return kept, err
}

// newMasterHA builds a replication master for this broker (not started). commit, initial and
// confirmed are set in a Raft-elected group (ha.MasterConfig.CommitSyncSet, InitialSyncSet,
// InitialConfirmed).
func (b *Broker) newMasterHA(commit func([]ha.SyncMember) error, initial []ha.SyncMember, confirmed int64) *ha.Master {
	var epochs func() []ha.EpochStart
	var memberOf func(string) bool
	var known func(int64, string) bool
	if b.raft != nil {
		epochs = b.raft.epochs.snapshot
		memberOf, known = b.raft.isPeer, b.raft.knownSlave
	}
	return ha.NewMaster(ha.MasterConfig{
		BrokerName:        b.cfg.BrokerName,
		Log:               haLog{s: b.store},
		ListenAddr:        b.cfg.haListenAddr(),
		Codec:             ha.Codec(b.cfg.HACompression), // validated by Config.Validate
		MaxChunkBytes:     b.cfg.HAMaxChunkBytes,
		FrameReadTimeout:  b.cfg.FrameReadTimeout,
		MaxConns:          b.cfg.HAMaxConnections,
		InSyncMaxLagBytes: b.cfg.HAInSyncMaxLagBytes,
		InSyncMaxLagTime:  b.cfg.HAInSyncMaxLagTime,
		// NB: a held pull counts its slave as alive and caught up, and the master does not see
		// the slave's connection close until the hold ends; holding at most half the in-sync lag
		// time lets a slave that died while idle leave the set about haInSyncMaxLagTime later,
		// not 5 s (ha.DefaultMaxWait) later.
		MaxWait:          min(ha.DefaultMaxWait, b.cfg.HAInSyncMaxLagTime/2),
		Logger:           b.log, // ha adds component=ha-master
		Loaded:           b.loaded.Load,
		ClientAddr:       b.Addr,
		CommitSyncSet:    commit,
		InitialSyncSet:   initial,
		InitialConfirmed: confirmed,
		MinAcks:          b.cfg.MinInSyncReplicas - 1,
		Epochs:           epochs,
		Epoch:            func() uint32 { return b.role.Load().Epoch },
		MemberOf:         memberOf,
		KnownSlave:       known,
		Observer:         b.replicationObserver(),
	})
}

// newSlaveHA builds a replication slave for this broker (not started), registering as
// brokerID: it pulls from the master the role names.
func (b *Broker) newSlaveHA(brokerID int64) *ha.Slave {
	cfg := ha.SlaveConfig{
		BrokerName:    b.cfg.BrokerName,
		SlaveID:       brokerID,
		SlaveAddr:     b.Addr,
		MasterHAAddr:  func() string { return b.role.Load().Master.HAAddr },
		Log:           haLog{s: b.store, epochs: b.raft.epochLog(), reset: b.afterLogReset, deleted: b.deletedByRecord},
		MaxChunkBytes: b.cfg.HAMaxChunkBytes,
		MaxBatchBytes: b.cfg.MaxFrameSize, // a batch came to the master in one frame
		Logger:        b.log,              // ha adds component=ha-slave
		OnProgress:    func(end, masterEnd int64) { b.wakeReplicated() },
		Events:        b.roles.postFromSlave,
	}
	if b.raft != nil {
		cfg.MemberID = b.raft.selfID
		cfg.DecidesCuts = true
		cfg.LastEpoch = func() (uint32, int64) { return ha.NewestWithData(b.raft.epochs.snapshot(), b.store.LogEndOffset()) }
		cfg.Backoff, cfg.MaxBackoff = 20*time.Millisecond, 500*time.Millisecond
	}
	return ha.NewSlave(cfg)
}

// roleName is the brokerRole the broker plays now: a master's mode, or SLAVE.
func (b *Broker) roleName(r *role) string {
	if r.master != nil {
		return r.Mode
	}
	return RoleSlave
}

// startHA starts the role loop once the broker's client address is known: a member of a
// Raft-elected group starts its Raft node and gets its role from the election; a static one
// takes its configured role (a master listens on its HA port, a slave starts pulling). A slave,
// or any member of a Raft-elected group, also syncs topic configs and consumer offsets with its
// master.
func (b *Broker) startHA() error {
	if b.raft != nil {
		if err := b.raft.start(); err != nil {
			return err
		}
		b.roles.start(nil)
		b.bg.Add(1)
		go b.slaveSyncLoop()
		return nil
	}
	st := ha.StartStatic{Slave: b.cfg.isSlave(), Epoch: b.elected, BrokerID: b.cfg.BrokerID}
	if st.Slave {
		st.Master.HAAddr = b.cfg.HAMasterAddress // the client address comes with the master's first answer
	} else if last := b.store.LastEpoch(); last > st.Epoch {
		// A master never stamps an epoch below its log's newest batch (Store.Append refuses
		// it): without an elected file (removed, or roles swapped in the config files) a
		// static master would start in epoch 0.
		b.log.Info("starting in the epoch of the log's newest batch", "epoch", last, "electedEpoch", st.Epoch)
		st.Epoch = last
	}
	b.roles.start(&st)
	r := b.role.Load()
	if st.Slave {
		if r.slave == nil {
			return fmt.Errorf("cannot start replication from the master")
		}
		b.bg.Add(1)
		go b.slaveSyncLoop()
		return nil
	}
	if r.master == nil {
		return fmt.Errorf("cannot start replication on %s", b.cfg.haListenAddr())
	}
	return nil
}

// closeHA stops the role loop and replication (and the Raft member).
func (b *Broker) closeHA() {
	b.roles.close()
	if b.raft != nil {
		b.raft.close()
	}
	b.syncMu.Lock()
	if b.syncConn != nil {
		_ = b.syncConn.Close()
		b.syncConn = nil
	}
	b.syncMu.Unlock()
}

// haAdvertised returns the replication address a master registers, "" for a slave.
func (b *Broker) haAdvertised() string {
	r := b.role.Load()
	if r.master == nil {
		return ""
	}
	_, port, err := net.SplitHostPort(r.master.Addr())
	if err != nil {
		return ""
	}
	return net.JoinHostPort(b.cfg.advertisedHost(), port)
}

// registeredID is the brokerId the broker registers under (ha.Role.BrokerID): 0 for a master
// of a Raft-elected group or one electMaster promoted, else its configured brokerId (the one
// electMaster gave it).
func (b *Broker) registeredID() int64 { return b.role.Load().BrokerID }

// selfInfo is this broker's entry as the master hm serves it.
func (b *Broker) selfInfo(hm *ha.Master) ha.MemberInfo {
	return ha.MemberInfo{ID: b.cfg.RaftSelfID, BrokerID: b.cfg.BrokerID, Addr: b.Addr(), HAAddr: net.JoinHostPort(b.cfg.advertisedHost(), portOf(hm.Addr()))}
}

// highWatermark returns the physical offset consumers may read up to: in a Raft-elected SYNC
// group the confirmed offset (held by every in-sync member; a slave knows its master's as
// last heard), so that no read is undone by a failover; without one, no limit.
func (b *Broker) highWatermark(r *role) int64 {
	if !b.hwm {
		return math.MaxInt64
	}
	var v int64
	switch {
	case r.master != nil:
		v = r.master.ConfirmedOffset()
	case r.slave != nil:
		v = r.slave.ConfirmedOffset()
	default:
		return b.lastHWM.Load() // between roles: what was confirmed before
	}
	if v > b.lastHWM.Load() {
		b.lastHWM.Store(v)
	}
	return v
}

// learnMaster records the group's master as a static slave learns it from the NameServers or
// the master's own replication answers (ha.MasterLearnt); an empty address leaves what was
// known (the NameServer does not know a master that is down). A slave configured with
// haMasterAddress keeps that replication address.
func (b *Broker) learnMaster(clientAddr, haAddr string) {
	if b.raft != nil {
		return // a Raft-elected member learns the master from Raft
	}
	if b.cfg.HAMasterAddress != "" {
		haAddr = b.cfg.HAMasterAddress
	}
	if r := b.role.Load(); r.master != nil || (clientAddr == "" || clientAddr == r.Master.Addr) && (haAddr == "" || haAddr == r.Master.HAAddr) {
		return // a master, or nothing new
	}
	b.roles.post(ha.MasterLearnt{Addr: clientAddr, HAAddr: haAddr})
}

// wakeReplicated answers the pulls held on a slave for queues that replication just extended.
func (b *Broker) wakeReplicated() {
	// Runs after every replicated chunk: only topics with held pulls cost anything.
	for name, tp := range *b.topics.m.Load() {
		if tp.waiters.n.Load() == 0 {
			continue
		}
		key := []byte(name)
		if ws := tp.waiters.takeReady(func(qid int32) int64 { return b.store.MaxOffset(key, qid) }); ws != nil {
			b.wakeWaiters(ws)
		}
	}
}

// slaveSyncLoop keeps a slave's topic configs and consumer offsets in step with its master's
// every SlaveSyncInterval (RocketMQ's SlaveSynchronize). Offsets flow both ways and merge by
// maximum, so a commit made on the slave while the master was down survives its return and
// no offset ever moves backwards; each side lowers what it merges to its own queues' max
// offsets, and a slave sends its offsets only while the master acknowledges its log.
func (b *Broker) slaveSyncLoop() {
	defer b.bg.Done()
	t := time.NewTicker(b.cfg.SlaveSyncInterval)
	defer t.Stop()
	for {
		b.syncWithMaster()
		select {
		case <-b.stop:
			return
		case <-t.C:
		}
	}
}

func (b *Broker) syncWithMaster() {
	addr := b.role.Load().Master.Addr
	if addr == "" || b.role.Load().master != nil {
		return // no master known, or this broker is the master now (Raft, electMaster)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	c, err := b.syncConnTo(ctx, addr)
	if err != nil {
		b.syncLog.Warn(b.log, "cannot reach the master to sync configs and offsets", "master", addr, "err", err)
		return
	}
	// What the master had appended before this sync: the offsets go back to it only once this
	// log holds all of it, deletion records included (see below).
	var heard int64
	if s := b.role.Load().slave; s != nil {
		heard = s.MasterEnd()
	}
	if b.syncsTopics() {
		var topics protocol.TopicConfigList
		if err := c.CallDecode(ctx, protocol.CodeGetAllTopicConfig, nil, nil, nil, &topics); err != nil {
			b.syncFailed(c, addr, err)
			return
		}
		b.takeMasterTopics(topics.Topics)
	}
	var offs protocol.ConsumerOffsetTable
	if err := c.CallDecode(ctx, protocol.CodeGetAllConsumerOffset, &protocol.ConsumerOffsetTableRequest{WithIncarnations: true}, nil, nil, &offs); err != nil {
		b.syncFailed(c, addr, err)
		return
	}
	b.mergedOffsets(b.offsets.merge(&offs, nil, time.Now()), addr)
	// Only offsets of the master's own log go back to it: until the master has acknowledged
	// this member's log end on the current replication link, the log may have diverged from
	// the master's (the master lost its store, say) and the offsets were committed against it.
	// The master would lower them to its max offsets, over messages the groups never saw. Nor
	// before this log holds what the master had when the sync began: a topic deleted there
	// keeps its offsets here until the deletion record arrives, and the master may hold a new
	// topic of that name already.
	if s := b.role.Load().slave; s == nil || !s.LogAcknowledged() || b.store.LogEndOffset() < heard {
		return
	}
	mine := b.offsets.table()
	var refused protocol.StringList
	resp, err := c.Call(ctx, protocol.CodeMergeConsumerOffsets, nil, mine.AppendTo(nil))
	if err != nil {
		b.syncFailed(c, addr, err)
		return
	}
	if len(resp.Body) > 0 {
		err = refused.ReadFrom(resp.Body)
	}
	resp.Release()
	if err != nil {
		b.syncFailed(c, addr, err)
		return
	}
	for _, g := range refused.Items {
		if n := b.offsets.removeGroup(g, false, time.Now()); n > 0 {
			b.log.Info("consumer group deleted on the master: its offsets are removed here too", "group", g, "queues", n)
		}
	}
}

// syncsTopics reports whether the broker takes its topic table from its master's by the
// periodic sync: a slave of a group with static roles, or a member of a Raft-elected group
// whose topic table is not committed in Raft yet (a store from before topic configs went
// through Raft, until its first master commits the table).
func (b *Broker) syncsTopics() bool { return !b.raft.topicsKnown() }

// takeMasterTopics makes the master's topic table this slave's: topics the master no longer has
// (deleted) go, with their held pulls answered TOPIC_NOT_EXIST.
func (b *Broker) takeMasterTopics(list []protocol.TopicConfig) {
	ch, err := b.topics.replace(list)
	if err != nil {
		b.warn.Error(b.log, "cannot store the master's topic configs", "err", err)
		return
	}
	b.topicsChanged(ch)
}

func (b *Broker) syncConnTo(ctx context.Context, addr string) (*rpc.Conn, error) {
	b.syncMu.Lock()
	defer b.syncMu.Unlock()
	if b.syncConn != nil && b.syncConn.Err() == nil && b.syncConn.Addr() == addr {
		return b.syncConn, nil
	}
	if b.syncConn != nil {
		_ = b.syncConn.Close()
		b.syncConn = nil
	}
	c, err := rpc.Dial(ctx, addr, rpc.Options{MaxFrameSize: b.cfg.MaxFrameSize})
	if err != nil {
		return nil, err
	}
	b.syncConn = c
	return c, nil
}

func (b *Broker) syncFailed(c *rpc.Conn, addr string, err error) {
	b.syncLog.Warn(b.log, "sync with the master failed", "master", addr, "err", err)
	b.syncMu.Lock()
	if b.syncConn == c {
		_ = c.Close()
		b.syncConn = nil
	}
	b.syncMu.Unlock()
}

// haStatus builds the CodeGetHAStatus answer.
func (b *Broker) haStatus() protocol.HAStatus {
	r := b.role.Load()
	master := r.Master
	if r.NoMaster != "" {
		master = ha.MemberInfo{} // the master it followed last may be gone or deposed
	}
	st := protocol.HAStatus{
		Role:            b.roleName(r),
		State:           r.State.String(),
		Cutting:         r.Cutting,
		Epoch:           r.Epoch,
		MasterAddr:      master.Addr,
		MasterHAAddr:    master.HAAddr,
		BrokerID:        b.registeredID(),
		LogMin:          b.store.LogMinOffset(),
		LogEnd:          b.store.LogEndOffset(),
		ConfirmedOffset: b.store.LogEndOffset(),
		InSyncReplicas:  1,
	}
	switch {
	case r.master != nil:
		ms := r.master.Status()
		st.Epoch = ms.Epoch
		st.ConfirmedOffset = ms.ConfirmedOffset
		st.InSyncReplicas = ms.InSyncReplicas
		st.Slaves = ms.Slaves
	case r.slave != nil:
		ss := r.slave.Status()
		st.MasterEnd = ss.MasterEnd
		st.Connected = ss.Connected
		st.ConfirmedOffset = ss.ConfirmedOffset
		st.Epoch = ss.Epoch
	}
	if st.Slaves == nil {
		st.Slaves = []protocol.SlaveStatus{}
	}
	st.KnownConfirmed, st.Electable = -1, true
	if b.raft != nil {
		st.KnownConfirmed = b.raft.knownConfirmed()
		st.Electable = b.raft.electable()
		st.Stopped = r.Stopped
	}
	return st
}

// readSuggestion decides which broker a consumer pulls its queue from next (ha.SuggestReadBroker),
// from where the consumer's next batch sits in this broker's log.
func (b *Broker) readSuggestion(r *role, topic []byte, queueID int32, nextQueueOffset int64) int64 {
	end := b.store.LogEndOffset()
	switch {
	case r.master != nil:
		if !b.cfg.SlaveReadEnable {
			return 0
		}
		slaves := r.master.SlavesForRead()
		if len(slaves) == 0 {
			return 0
		}
		return ha.SuggestReadBroker(ha.SuggestInput{
			SelfID:          0,
			SlaveReadEnable: true,
			Loaded:          b.loaded.Load(),
			LogEnd:          end,
			NextPhys:        b.store.QueuePhysicalOffset(topic, queueID, nextQueueOffset),
			SlowBytes:       b.slowBytes,
			Slaves:          slaves,
		})
	case r.slave != nil:
		return ha.SuggestReadBroker(ha.SuggestInput{
			SelfID:          b.registeredID(),
			SlaveReadEnable: b.cfg.SlaveReadEnable,
			MasterAlive:     r.slave.Connected() && r.NoMaster == "", // only a master it knows to be current
			LogEnd:          end,
			MasterEnd:       r.slave.MasterEnd(),
			MasterLoaded:    r.slave.MasterLoaded(),
			NextPhys:        b.store.QueuePhysicalOffset(topic, queueID, nextQueueOffset),
			SlowBytes:       b.slowBytes,
		})
	}
	return 0
}

// slowReadBytes is how far behind the log end a consumer must read to count as reading old
// data: slaveReadBehindBytes, or accessMessageInMemoryMaxRatio percent of the machine's memory.
func slowReadBytes(cfg *Config) int64 {
	if cfg.SlaveReadBehindBytes > 0 {
		return cfg.SlaveReadBehindBytes
	}
	var si unix.Sysinfo_t
	if err := unix.Sysinfo(&si); err != nil {
		return 1 << 30
	}
	return int64(si.Totalram) * int64(si.Unit) * int64(cfg.AccessMessageInMemoryMaxRatio) / 100
}

// replicationObserver is the master's ReplicationObserver: the trace ring, nil when it is off.
func (b *Broker) replicationObserver() ha.ReplicationObserver {
	if b.trace == nil {
		return nil
	}
	return b.trace
}
