package broker

import (
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/petrel-mq/petrel/ha"
	"github.com/petrel-mq/petrel/protocol"
	"github.com/petrel-mq/petrel/protocol/rpc"
)

// Deleting a topic (DELETE_TOPIC_IN_BROKER, mqadmin deleteTopic) happens at one position of the
// commit log, the same on every member: the master appends a deletion record
// (protocol.ControlDeleteTopic), which removes the topic's consume queues there
// (commitlog.Store.DeleteTopic) and, replicated, on every slave at the same offset
// (AppendReplicated), because the topic's later batches start queue offsets afresh. Only then
// does the topic's config go, so no send admitted before the deletion lands in the new queues
// (the store refuses the topic until it is created again), and with it every group's committed
// offsets of the topic. The answer waits for the record as a send's would (the flush of a
// SYNC_FLUSH broker, the in-sync slaves of a SYNC_MASTER), and the NameServers hear of the
// deletion before it is given, so that the operator's DELETE_TOPIC_IN_NAMESRV, which follows,
// is not undone by a registration still carrying the topic.

// replyDeleteTopic serves CodeDeleteTopicInBroker on the master (an admin worker).
func (b *Broker) replyDeleteTopic(req request) rpc.Reply {
	var h protocol.TopicHeader
	if err := h.ReadFrom(req.header); err != nil {
		return req.malformed(err)
	}
	if err := protocol.ValidateTopic([]byte(h.Topic)); err != nil {
		return rpc.Errorf(protocol.StatusTopicInvalid, "%v", err)
	}
	return b.deleteTopic(h.Topic, req.cs.remote)
}

// deleteTopic deletes topic name (see above) and answers the request of remote.
func (b *Broker) deleteTopic(name, remote string) rpc.Reply {
	b.topicOps.Lock()
	defer b.topicOps.Unlock()
	r := b.role.Load()
	if r.master == nil || r.State == ha.MemberHandingOver {
		return b.notMaster(r, "delete topics on the master")
	}
	tp := b.topics.get([]byte(name))
	if tp == nil && !b.storeHasTopic(name) {
		b.registrar.registerNow()
		// Nothing to delete: deleting twice succeeds, and the answer says there was none.
		return rpc.Reply{Header: &protocol.DeleteResponseHeader{Existed: false}}
	}
	if rep, ok := b.canAppend(r); !ok {
		return rep
	}
	record := protocol.AppendControlBatch(nil, name, protocol.ControlDeleteTopic, time.Now().UnixMilli())
	res, err := b.store.DeleteTopic([]byte(name), record, r.Epoch, protocol.StampControlBatch)
	if err != nil {
		b.warn.Error(b.log, "cannot delete a topic", "topic", name, "remote", remote, "err", err)
		return rpc.Errorf(appendStatus(err), "cannot delete topic %s: %v", name, err)
	}
	r.master.NotifyAppend(res.EndOffset)
	st, remark := b.waitDurable(r, res.EndOffset)
	removed, err := b.commitTopicDeletion(name)
	if err != nil {
		b.warn.Error(b.log, "a topic's queues are deleted, its config is not", "topic", name, "remote", remote, "err", err)
		remark := fmt.Sprintf("topic %s: its queues are deleted, its config is not (delete it again): %v", name, err)
		if errors.Is(err, ha.ErrNotLeader) {
			return notMasterReply(b.role.Load().Role, remark)
		}
		return rpc.Reply{Status: protocol.StatusSystemError, Remark: remark}
	}
	queues := b.offsets.removeTopic(name, time.Now())
	if err := b.offsets.persist(); err != nil {
		b.log.Error("consumer offsets not persisted after a topic deletion", "topic", name, "err", err)
	}
	if tp == nil {
		tp = removed
	}
	b.wakeGone(tp)
	b.log.Info("topic deleted", "topic", name, "recordAt", res.PhysicalOffset, "offsetsRemoved", queues, "remote", remote)
	b.registrar.registerNow()
	if st != protocol.StatusSuccess {
		return rpc.Errorf(st, "topic %s deleted on the master, %s", name, remark)
	}
	return rpc.Reply{Header: &protocol.DeleteResponseHeader{Existed: true}}
}

// commitTopicDeletion removes the topic's config (after its deletion record): from the local
// table in a group with static roles, through Raft in a Raft-elected group (every member
// applies it). It returns the topic removed, if it was still here.
func (b *Broker) commitTopicDeletion(name string) (*topic, error) {
	if b.raft == nil {
		return b.topics.remove(name)
	}
	tp := b.topics.get([]byte(name))
	if err := b.raft.proposeTopic(ha.CmdDeleteTopic, protocol.TopicConfig{Topic: name}); err != nil {
		return nil, fmt.Errorf("cannot commit the deletion through Raft: %w", err)
	}
	return tp, nil
}

// storeHasTopic reports whether the store holds a consume queue of topic name.
func (b *Broker) storeHasTopic(name string) bool {
	for _, q := range b.store.Queues() {
		if q.Topic == name {
			return true
		}
	}
	return false
}

// canAppend refuses, before anything is stored, a write a SYNC_MASTER could not replicate to
// enough in-sync slaves, as a send's refusal does.
func (b *Broker) canAppend(r *role) (rpc.Reply, bool) {
	if st, why := b.replicasShort(r); st != protocol.StatusSuccess {
		return rpc.Reply{Status: st, Remark: why + ": nothing deleted"}, false
	}
	return rpc.Reply{}, true
}

// replicasShort says why a SYNC_MASTER could not replicate a write to enough in-sync slaves
// now, checked before anything is stored: SLAVE_NOT_AVAILABLE (none connected) or
// IN_SYNC_REPLICAS_NOT_ENOUGH, with the reason; SUCCESS when it could, or need not.
func (b *Broker) replicasShort(r *role) (protocol.Status, string) {
	if r.Mode != RoleSyncMaster || b.cfg.MinInSyncReplicas <= 1 {
		return protocol.StatusSuccess, ""
	}
	if r.master.ConnectedSlaves() == 0 {
		return protocol.StatusSlaveNotAvailable, "no slave is connected and minInSyncReplicas is " + strconv.Itoa(b.cfg.MinInSyncReplicas)
	}
	if n := r.master.InSyncCount() + 1; n < b.cfg.MinInSyncReplicas {
		return protocol.StatusInSyncReplicasNotEnough, strconv.Itoa(n) + " in-sync replicas, minInSyncReplicas is " + strconv.Itoa(b.cfg.MinInSyncReplicas)
	}
	return protocol.StatusSuccess, ""
}

// waitDurable waits until the log up to end is as durable and replicated as a send's
// acknowledgement needs (awaitDurable) and returns the status a send would get, with a remark
// for a failure. Off the event loops.
func (b *Broker) waitDurable(r *role, end int64) (protocol.Status, string) {
	w := durableWait(make(chan rpc.Reply, 2))
	b.awaitDurable(r, end, w)
	var first rpc.Reply
	for range b.durableWaits(r) {
		if o := <-w; o.Status != protocol.StatusSuccess && first.Status == protocol.StatusSuccess {
			first = o
		}
	}
	return first.Status, first.Remark
}

// durableWait collects the outcomes of awaitDurable's waits for a caller that blocks on them.
type durableWait chan rpc.Reply

func (w durableWait) flushed(err error) {
	if err != nil {
		w <- rpc.Reply{Status: protocol.StatusFlushDiskTimeout, Remark: "the flush failed: " + err.Error()}
		return
	}
	w <- rpc.Reply{}
}

func (w durableWait) replicated(err error) {
	if err != nil {
		w <- rpc.Reply{Status: protocol.StatusFlushSlaveTimeout, Remark: "replication not confirmed: " + err.Error()}
		return
	}
	w <- rpc.Reply{}
}

// wakeGone answers the pulls held on a topic that is gone (nil: none) with TOPIC_NOT_EXIST.
func (b *Broker) wakeGone(tp *topic) {
	if tp != nil {
		b.wakeWaiters(tp.waiters.takeAll())
	}
}

// topicsChanged carries out what a change of the topic table needs: the store takes appends to
// a topic created (again), pulls held on a topic removed are answered, and the NameServers hear
// of any change at once.
func (b *Broker) topicsChanged(ch tableChange) {
	for _, name := range ch.created {
		b.store.AllowTopic([]byte(name))
	}
	for _, tp := range ch.removed {
		b.wakeGone(tp)
		b.log.Info("topic removed", "topic", tp.cfg.Topic)
	}
	if ch.changed {
		b.registrar.kick()
	}
}

// putTopic creates or updates a topic on the master (UPDATE_AND_CREATE_TOPIC, auto-creation)
// and reports whether it changed: in the local table in a group with static roles, through
// Raft in a Raft-elected group, where every member applies it (applyRaftTopics) and this one
// has once putTopic returns.
func (b *Broker) putTopic(cfg protocol.TopicConfig) (bool, error) {
	b.topicOps.Lock()
	defer b.topicOps.Unlock()
	prev := b.topics.get([]byte(cfg.Topic))
	if b.raft != nil {
		if prev != nil && prev.cfg == cfg {
			return false, nil
		}
		if err := b.raft.proposeTopic(ha.CmdPutTopic, cfg); err != nil {
			return false, fmt.Errorf("cannot commit the topic through Raft: %w", err)
		}
		return true, nil
	}
	created := prev == nil
	changed, err := b.topics.upsert(cfg)
	if err != nil {
		return false, err
	}
	if created {
		b.store.AllowTopic([]byte(cfg.Topic))
	}
	return changed, nil
}

// applyRaftTopics makes the group's committed topic table (ha.TopicTable) this member's, on
// every change of it (Raft's FSM goroutine): from the first commit of a table on, a Raft
// member's topics are exactly the group's.
func (b *Broker) applyRaftTopics(tt ha.TopicTable) {
	if !tt.Known {
		return
	}
	ch, err := b.topics.replace(append([]protocol.TopicConfig(nil), tt.Topics...))
	if err != nil {
		b.log.Error("cannot store the group's topic table", "err", err)
		return
	}
	b.topicsChanged(ch)
}

// deletedByRecord removes, on a member that replicated a deletion record of topic name, what
// the record's master removed with it: every group's committed offsets of the topic and, on a
// slave of a group with static roles, its config; pulls held on it are answered.
func (b *Broker) deletedByRecord(name string) {
	n := b.offsets.removeTopic(name, time.Now())
	if err := b.offsets.persist(); err != nil {
		b.log.Error("consumer offsets not persisted after a replicated topic deletion", "topic", name, "err", err)
	}
	tp := b.topics.get([]byte(name))
	if b.syncsTopics() {
		removed, err := b.topics.remove(name)
		if err != nil {
			b.warn.Error(b.log, "cannot remove a deleted topic's config", "topic", name, "err", err)
		} else if removed != nil {
			tp = removed
			b.registrar.kick()
		}
	}
	if tp != nil {
		b.wakeWaiters(tp.waiters.takeAll())
	}
	b.log.Info("topic deleted by a replicated record", "topic", name, "offsetsRemoved", n)
}

// replyDeleteGroup serves CodeDeleteSubscriptionGroup on the master: the group's offsets of
// every topic go, and the deletion is kept so that slaves' offset syncs leave the group out
// and drop it too.
func (b *Broker) replyDeleteGroup(req request) rpc.Reply {
	var h protocol.GroupHeader
	if err := h.ReadFrom(req.header); err != nil {
		return req.malformed(err)
	}
	if err := protocol.ValidateGroup([]byte(h.ConsumerGroup)); err != nil {
		return rpc.Errorf(protocol.StatusRequestMalformed, "%v", err)
	}
	if h.Topic != "" {
		return rpc.Errorf(protocol.StatusRequestMalformed, "deleteSubGroup removes a group from every topic; got topic %q", h.Topic)
	}
	n := b.offsets.removeGroup(h.ConsumerGroup, true, time.Now())
	if err := b.offsets.persist(); err != nil {
		return rpc.Errorf(protocol.StatusSystemError, "group %s removed, but not persisted: %v", h.ConsumerGroup, err)
	}
	b.log.Info("consumer group deleted", "group", h.ConsumerGroup, "queues", n, "remote", req.cs.remote)
	// A group is its committed offsets here: with none, there was nothing to delete (the
	// deletion is kept all the same, for offsets a slave may still sync).
	return rpc.Reply{Header: &protocol.DeleteResponseHeader{Existed: n > 0}}
}
