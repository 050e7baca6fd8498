package broker

import (
	"errors"
	"fmt"
	"runtime"
	"sort"
	"strconv"
	"time"

	"golang.org/x/sys/unix"

	"github.com/petrel-mq/petrel/commitlog"
	"github.com/petrel-mq/petrel/ha"
	"github.com/petrel-mq/petrel/protocol"
	"github.com/petrel-mq/petrel/protocol/rpc"
)

// replyElectMaster serves CodeElectMaster (electMaster decides).
func (b *Broker) replyElectMaster(req request) rpc.Reply {
	var h protocol.ElectMasterRequest
	if err := h.ReadFrom(req.header); err != nil {
		return req.malformed(err)
	}
	return b.electMaster(h)
}

// replyRaftReadIndex serves CodeRaftReadIndex: a member of a group with static roles has no
// Raft to ask.
func (b *Broker) replyRaftReadIndex(req request) rpc.Reply {
	var h protocol.RaftReadIndexRequest
	if err := h.ReadFrom(req.header); err != nil {
		return req.malformed(err)
	}
	if b.raft == nil {
		return rpc.Errorf(protocol.StatusServiceNotAvailable, "broker %s has static roles: no Raft", b.cfg.BrokerName)
	}
	return b.raft.readIndex(h)
}

// replyUpdateTopic serves CodeUpdateAndCreateTopic on the master: the topic table is
// persisted (committed through Raft first in a Raft-elected group), and the NameServers hear
// of a change at once.
func (b *Broker) replyUpdateTopic(req request) rpc.Reply {
	var h protocol.TopicConfig
	if err := h.ReadFrom(req.header); err != nil {
		return req.malformed(err)
	}
	if err := protocol.ValidateTopic([]byte(h.Topic)); err != nil {
		return rpc.Errorf(protocol.StatusTopicInvalid, "%v", err)
	}
	if err := validateTopicConfig(&h); err != nil {
		return rpc.Errorf(protocol.StatusRequestMalformed, "%v", err)
	}
	changed, err := b.putTopic(h)
	if errors.Is(err, ha.ErrNotLeader) {
		return notMasterReply(b.role.Load().Role, "no longer the master: "+err.Error())
	}
	if err != nil {
		return rpc.Errorf(protocol.StatusSystemError, "%v", err)
	}
	if changed {
		b.log.Info("topic updated", "topic", h.Topic, "read", h.ReadQueueNums, "write", h.WriteQueueNums, "perm", h.Perm, "remote", req.cs.remote)
		b.registrar.kick()
	}
	return rpc.Reply{}
}

// replyTopicConfigs serves CodeGetAllTopicConfig.
func (b *Broker) replyTopicConfigs(request) rpc.Reply {
	list := protocol.TopicConfigList{Topics: b.topics.list()}
	return rpc.Reply{Body: list.AppendTo(nil)}
}

// replyQueueOffset serves CodeGetMaxOffset and CodeGetMinOffset.
func (b *Broker) replyQueueOffset(req request) rpc.Reply {
	var h protocol.QueueHeader
	if err := h.ReadFrom(req.header); err != nil {
		return req.malformed(err)
	}
	if rep, ok := b.checkQueue(h.Topic, h.QueueID); !ok {
		return rep
	}
	off := b.store.MaxOffset([]byte(h.Topic), h.QueueID)
	if req.code == protocol.CodeGetMinOffset {
		off = b.store.MinOffset([]byte(h.Topic), h.QueueID)
	}
	return rpc.Reply{Header: &protocol.OffsetHeader{Offset: off}}
}

// replyConsumerOffset serves CodeQueryConsumerOffset and CodeUpdateConsumerOffset.
func (b *Broker) replyConsumerOffset(req request) rpc.Reply {
	var h protocol.ConsumerOffsetHeader
	if err := h.ReadFrom(req.header); err != nil {
		return req.malformed(err)
	}
	if err := protocol.ValidateGroup([]byte(h.ConsumerGroup)); err != nil {
		return rpc.Errorf(protocol.StatusRequestMalformed, "%v", err)
	}
	if rep, ok := b.checkQueue(h.Topic, h.QueueID); !ok {
		return rep
	}
	if req.code == protocol.CodeUpdateConsumerOffset {
		if h.Offset < 0 {
			return rpc.Errorf(protocol.StatusRequestMalformed, "negative offset %d", h.Offset)
		}
		if err := b.commitOffset([]byte(h.ConsumerGroup), []byte(h.Topic), h.QueueID, h.Offset, h.Incarnation, req.cs.remote); err != nil {
			return rpc.Errorf(protocol.StatusNoPermission, "%v", err)
		}
		return rpc.Reply{}
	}
	// An offset of an earlier life of the queue comes back as the current life's min offset
	// (offsetTable.get), for every client: the group starts over there, whatever its
	// ConsumeFrom, since everything in the new life came after its old position.
	c, ok := b.offsets.get([]byte(h.ConsumerGroup), []byte(h.Topic), h.QueueID)
	if !ok {
		return rpc.Errorf(protocol.StatusQueryNotFound, "no committed offset for group %s on %s queue %d", h.ConsumerGroup, h.Topic, h.QueueID)
	}
	return rpc.Reply{Header: &protocol.OffsetHeader{Offset: c.off, Incarnation: c.inc, HasIncarnation: h.HasIncarnation}}
}

// replyTopicStats serves CodeGetTopicStatsInfo.
func (b *Broker) replyTopicStats(req request) rpc.Reply {
	var h protocol.TopicHeader
	if err := h.ReadFrom(req.header); err != nil {
		return req.malformed(err)
	}
	tp := b.topics.get([]byte(h.Topic))
	if tp == nil {
		return rpc.Errorf(protocol.StatusTopicNotExist, "topic %s does not exist on broker %s", h.Topic, b.cfg.BrokerName)
	}
	n := max(tp.cfg.ReadQueueNums, tp.cfg.WriteQueueNums)
	var t protocol.TopicStatsTable
	name := []byte(h.Topic)
	for q := int32(0); q < n; q++ {
		t.Queues = append(t.Queues, protocol.QueueStats{
			QueueID:             q,
			MinOffset:           b.store.MinOffset(name, q),
			MaxOffset:           b.store.MaxOffset(name, q),
			LastUpdateTimestamp: b.store.LastStoreTimestamp(name, q),
		})
	}
	return rpc.Reply{Body: t.AppendTo(nil)}
}

// replyConsumeStats serves CodeGetConsumeStats.
func (b *Broker) replyConsumeStats(req request) rpc.Reply {
	var h protocol.GroupHeader
	if err := h.ReadFrom(req.header); err != nil {
		return req.malformed(err)
	}
	queues := b.offsets.groupQueues(h.ConsumerGroup, h.Topic)
	for i := range queues {
		q := &queues[i]
		q.BrokerOffset = b.store.MaxOffset([]byte(q.Topic), q.QueueID)
		if q.ConsumerOffset > 0 {
			q.LastTimestamp = b.storeTimestampAt([]byte(q.Topic), q.QueueID, q.ConsumerOffset-1)
		}
	}
	st := protocol.ConsumeStats{Queues: queues}
	return rpc.Reply{Body: st.AppendTo(nil)}
}

// replyRuntimeInfo serves CodeGetBrokerRuntimeInfo.
func (b *Broker) replyRuntimeInfo(request) rpc.Reply {
	t := b.runtimeInfo()
	return rpc.Reply{Body: t.AppendTo(nil)}
}

// replyConsumerOffsets serves CodeGetAllConsumerOffset, with the incarnations section only to
// a requester that asks for it (protocol.ConsumerOffsetTableRequest).
func (b *Broker) replyConsumerOffsets(req request) rpc.Reply {
	var h protocol.ConsumerOffsetTableRequest
	if len(req.header) > 0 { // an older requester sends none
		if err := h.ReadFrom(req.header); err != nil {
			return req.malformed(err)
		}
	}
	t := b.offsets.table()
	t.HasIncarnations = h.WithIncarnations
	return rpc.Reply{Body: t.AppendTo(nil)}
}

// replyMergeConsumerOffsets serves CodeMergeConsumerOffsets: a slave's offsets, less those of
// topics this broker does not have or deleted and of groups it deleted, whose names the answer
// lists (the slave drops them).
func (b *Broker) replyMergeConsumerOffsets(req request) rpc.Reply {
	var t protocol.ConsumerOffsetTable
	if err := t.ReadFrom(req.body); err != nil {
		return req.malformed(err)
	}
	res := b.offsets.merge(&t, func(topic string) bool { return b.topics.get([]byte(topic)) != nil }, time.Now())
	b.mergedOffsets(res, req.cs.remote)
	if len(res.refused) == 0 {
		return rpc.Reply{}
	}
	l := protocol.StringList{Items: res.refused}
	return rpc.Reply{Body: l.AppendTo(nil)}
}

// replyLogChecksum serves CodeGetLogChecksum.
func (b *Broker) replyLogChecksum(req request) rpc.Reply {
	var h protocol.LogChecksumRequest
	if err := h.ReadFrom(req.header); err != nil {
		return req.malformed(err)
	}
	from, to, sum, err := b.store.Checksum(h.From, h.To)
	if err != nil {
		return rpc.Errorf(protocol.StatusSystemError, "%v", err)
	}
	return rpc.Reply{Header: &protocol.LogChecksumResponse{From: from, To: to, Checksum: sum}}
}

// replyHAStatus serves CodeGetHAStatus.
func (b *Broker) replyHAStatus(request) rpc.Reply {
	st := b.haStatus()
	return rpc.Reply{Body: st.AppendTo(nil)}
}

// storeTimestampAt returns the store time of the batch holding queue offset off (ms), or 0.
func (b *Broker) storeTimestampAt(topic []byte, qid int32, off int64) int64 {
	var rr commitlog.ReadResult
	defer rr.Release()
	if err := b.store.Read(topic, qid, off, 1, 1, &rr); err != nil || rr.Status != commitlog.Found || len(rr.Slices) == 0 {
		return 0
	}
	h, err := protocol.ReadBatchHeader(rr.Slices[0].B)
	if err != nil {
		return 0
	}
	return h.StoreTimestamp
}

// diskRatio returns the used fraction of the file system holding dir, or "" if unknown.
func diskRatio(dir string) string {
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil || st.Blocks == 0 {
		return ""
	}
	used := float64(st.Blocks-st.Bavail) / float64(st.Blocks)
	return strconv.FormatFloat(used, 'f', 4, 64)
}

// checkQueue answers an error unless the topic exists here and qid is one of its queues.
func (b *Broker) checkQueue(topic string, qid int32) (rpc.Reply, bool) {
	tp := b.topics.get([]byte(topic))
	if tp == nil {
		return rpc.Errorf(protocol.StatusTopicNotExist, "topic %s does not exist on broker %s", topic, b.cfg.BrokerName), false
	}
	if qid < 0 || qid >= max(tp.cfg.ReadQueueNums, tp.cfg.WriteQueueNums) {
		return rpc.Errorf(protocol.StatusQueueNotExist, "topic %s has no queue %d", topic, qid), false
	}
	return rpc.Reply{}, true
}

// runtimeInfo returns the broker's statistics as RocketMQ's GET_BROKER_RUNTIME_INFO keys where
// RocketMQ has them.
func (b *Broker) runtimeInfo() protocol.KVTable {
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	i64 := func(v int64) string { return strconv.FormatInt(v, 10) }
	f2 := func(v float64) string { return strconv.FormatFloat(v, 'f', 2, 64) }
	put, get := b.stats.rates()
	hs := b.haStatus()
	kv := map[string]string{
		"brokerVersionDesc":      Version,
		"brokerName":             b.cfg.BrokerName,
		"brokerId":               i64(b.registeredID()),
		"brokerRole":             b.roleName(b.role.Load()),
		"brokerAddr":             b.Addr(),
		"flushDiskType":          b.cfg.FlushDiskType,
		"bootTimestamp":          i64(b.started.UnixMilli()),
		"runtime":                time.Since(b.started).Round(time.Second).String(),
		"commitLogMinOffset":     i64(b.store.LogMinOffset()),
		"commitLogMaxOffset":     i64(b.store.LogEndOffset()),
		"commitLogFlushedOffset": i64(b.store.FlushedOffset()),
		"msgPutTotal":            i64(b.stats.putMessages.Load()),
		"msgGetTotal":            i64(b.stats.getMessages.Load()),
		"putMessageSizeTotal":    i64(b.stats.putBytes.Load()),
		"getMessageSizeTotal":    i64(b.stats.getBytes.Load()),
		"putMessageErrorsTotal":  i64(b.stats.putErrors.Load()),
		"requestsTotal":          i64(b.stats.requests.Load()),
		"putTps":                 f2(put),
		"getTransferredTps":      f2(get),
		"connections":            i64(b.conns.Load()),
		"topicCount":             strconv.Itoa(len(b.topics.list())),
		"consumerGroupCount":     strconv.Itoa(b.offsets.groupCount()),
		"heapInuseBytes":         strconv.FormatUint(ms.HeapInuse, 10),
		"goroutines":             strconv.Itoa(runtime.NumGoroutine()),
		"epoch":                  strconv.FormatUint(uint64(hs.Epoch), 10),
		"namesrvAddr":            b.cfg.NamesrvAddr,
		"brokerClusterName":      b.cfg.BrokerClusterName,
		"commitLogDiskRatio":     diskRatio(b.cfg.StorePathRootDir),
		"haListenAddr":           b.haAdvertised(),
		"masterAddr":             hs.MasterAddr, // none while it knows no current master
	}
	if b.role.Load().master != nil {
		delete(kv, "masterAddr") // this broker is the master; what it followed before is history
	}
	rec := b.store.Recovery()
	if rec.Cut {
		kv["commitLogRecoveryCut"] = fmt.Sprintf("from=%d to=%d reason=%s", rec.End, rec.CutTo, rec.Reason)
	}
	if rec.QueuesBack > 0 {
		kv["commitLogRecoveryQueuesBack"] = strconv.Itoa(rec.QueuesBack)
	}
	addHAKeys(kv, hs)
	t := protocol.KVTable{}
	for k, v := range kv {
		if v == "" {
			continue
		}
		t.Entries = append(t.Entries, protocol.KV{Key: k, Value: v})
	}
	sort.Slice(t.Entries, func(i, j int) bool { return t.Entries[i].Key < t.Entries[j].Key })
	return t
}

// addHAKeys adds the replication state to the runtime info (brokerStatus): the in-sync count
// and confirmed offset, per slave of a master "haSlave<id>" with its address, acknowledged
// offset, lag (bytes, ms), in-sync flag and compression ratio, and for a slave its view of the
// master.
func addHAKeys(kv map[string]string, st protocol.HAStatus) {
	i64 := func(v int64) string { return strconv.FormatInt(v, 10) }
	kv["haConfirmedOffset"] = i64(st.ConfirmedOffset)
	if st.BrokerID != 0 {
		kv["haMasterEndOffset"] = i64(st.MasterEnd)
		kv["haMasterConnected"] = strconv.FormatBool(st.Connected)
		kv["haLagBytes"] = i64(max(st.MasterEnd-st.LogEnd, 0))
		return
	}
	kv["haInSyncReplicas"] = strconv.Itoa(int(st.InSyncReplicas))
	for _, sl := range st.Slaves {
		ratio := "-"
		if sl.WireBytes > 0 {
			ratio = strconv.FormatFloat(float64(sl.RawBytes)/float64(sl.WireBytes), 'f', 2, 64) + "x"
		}
		kv["haSlave"+i64(sl.BrokerID)] = fmt.Sprintf("addr=%s ackedOffset=%d lagBytes=%d lagMs=%d inSync=%t connected=%t compression=%s",
			sl.Addr, sl.AckedOffset, sl.LagBytes, sl.LagMs, sl.InSync, sl.Connected, ratio)
	}
}
