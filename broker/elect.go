package broker

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/petrel-mq/petrel/ha"
	"github.com/petrel-mq/petrel/internal/fsutil"
	"github.com/petrel-mq/petrel/protocol"
	"github.com/petrel-mq/petrel/protocol/rpc"
)

// electMasterTimeout bounds an online master change (catch-up, promotion, hand-over).
const electMasterTimeout = 4 * time.Second

// electMaster serves CodeElectMaster (petrelctl electMaster, RocketMQ 5's mqadmin electMaster)
// on an admin worker. Sent to the master, it hands the master role to member h.BrokerID once
// that slave holds the whole log (sends are refused meanwhile, so nothing acknowledged is
// lost); sent with Force to a slave of a group with static roles, the slave promotes itself
// (its master is down). In a Raft-elected group the master transfers Raft leadership and the
// election makes the target master.
func (b *Broker) electMaster(h protocol.ElectMasterRequest) rpc.Reply {
	if h.BrokerName != b.cfg.BrokerName {
		return rpc.Errorf(protocol.StatusServiceNotAvailable, "this broker is in group %s, not %s", b.cfg.BrokerName, h.BrokerName)
	}
	if b.raft != nil {
		return b.raft.electMaster(h)
	}
	r := b.role.Load()
	if h.BrokerID == b.staticID.Load() {
		if r.master != nil {
			return b.electedReply(b.staticID.Load(), r.epoch)
		}
		if !h.Force {
			return rpc.Reply{Status: protocol.StatusNotMaster, Remark: "ask the master to hand its role over (or force the promotion when it is down)", MasterAddr: b.master().clientAddr}
		}
		return b.promoteStatic(h.BrokerRole)
	}
	if r.master == nil || r.handingOver {
		return rpc.Reply{Status: protocol.StatusNotMaster, Remark: "broker " + b.cfg.BrokerName + "/" + strconv.FormatInt(b.registeredID(), 10) + " is not the master", MasterAddr: b.master().clientAddr}
	}
	return b.handOverStatic(r, h.BrokerID)
}

// electedReply answers with this broker as the master.
func (b *Broker) electedReply(brokerID int64, epoch uint32) rpc.Reply {
	return rpc.Reply{Header: &protocol.ElectMasterResponse{BrokerID: brokerID, MasterAddr: b.Addr(), Epoch: epoch, MasterHAAddr: b.haAdvertised()}}
}

// promoteStatic makes this slave of a group with static roles the master of a new epoch, with
// the acknowledgement mode the old master had (mode), or, when the old master is down (forced),
// SYNC_MASTER: it waits for the in-sync slaves there are, and with minInSyncReplicas=1 and none
// it acknowledges at once, so it never refuses what ASYNC_MASTER would take.
func (b *Broker) promoteStatic(mode string) rpc.Reply {
	if mode != RoleSyncMaster && mode != RoleAsyncMaster {
		mode = RoleSyncMaster
	}
	r := b.role.Load()
	if r.slave == nil {
		return rpc.Errorf(protocol.StatusServiceNotAvailable, "this broker is between roles")
	}
	b.role.Store(&role{epoch: r.epoch})
	_ = r.slave.Close()
	epoch := max(r.slave.Status().Epoch, b.epoch.Load(), r.epoch) + 1
	b.epoch.Store(epoch)
	hm := b.newMasterHA(nil, nil, 0)
	hm.SetEpoch(epoch)
	if err := startWithRetry(hm); err != nil {
		b.log.Error("cannot serve replication; staying a slave", "err", err)
		b.role.Store(r)
		return rpc.Errorf(protocol.StatusSystemError, "cannot serve replication: %v", err)
	}
	b.adoptStoredTopics()
	old := b.staticID.Swap(0)
	b.role.Store(&role{master: hm, epoch: epoch, mode: mode})
	b.recordElected(electedRole{BrokerID: 0, Role: mode, Epoch: epoch})
	b.registrar.kick()
	b.log.Warn("promoted to master by electMaster; the config files still name the old roles: update brokerId and brokerRole before the next restart",
		"epoch", epoch, "mode", mode, "oldBrokerId", old, "logEnd", b.store.LogEndOffset())
	return b.electedReply(0, epoch)
}

// handOverStatic hands the master role of a group with static roles to slave target: sends are
// refused until the slave holds the whole log, the slave promotes itself, and this broker
// follows it under the slave's old brokerId.
func (b *Broker) handOverStatic(r *role, target int64) rpc.Reply {
	st := r.master.Status()
	i := slices.IndexFunc(st.Slaves, func(s protocol.SlaveStatus) bool { return s.BrokerID == target })
	if i < 0 || !st.Slaves[i].Connected || !st.Slaves[i].InSync {
		return rpc.Errorf(protocol.StatusServiceNotAvailable, "brokerId %d is not a connected in-sync slave of %s", target, b.cfg.BrokerName)
	}
	addr := st.Slaves[i].Addr
	deadline, refused, ok := b.pauseForHandover(r, target)
	if !ok {
		return refused
	}
	fail := func(st protocol.Status, format string, args ...any) rpc.Reply {
		b.role.Store(r) // the master role goes on
		return rpc.Errorf(st, format, args...)
	}
	ctx, cancel := context.WithDeadline(context.Background(), deadline)
	defer cancel()
	c, err := rpc.Dial(ctx, addr, rpc.Options{MaxFrameSize: b.cfg.MaxFrameSize})
	if err != nil {
		return fail(protocol.StatusServiceNotAvailable, "cannot reach brokerId %d at %s: %v", target, addr, err)
	}
	defer c.Close()
	var resp protocol.ElectMasterResponse
	req := protocol.ElectMasterRequest{BrokerName: b.cfg.BrokerName, BrokerID: target, Force: true, BrokerRole: r.mode}
	if err := c.CallDecode(ctx, protocol.CodeElectMaster, &req, nil, &resp, nil); err != nil {
		// NB: an unknown outcome (the answer lost) would leave two masters: the slave's epoch is
		// newer, so this broker's slaves fence it once they follow the new one.
		return fail(protocol.StatusSystemError, "brokerId %d did not take over: %v", target, err)
	}
	// Follow the new master under the slave's old brokerId.
	b.role.Store(&role{epoch: resp.Epoch})
	_ = r.master.Close()
	b.staticID.Store(target)
	b.setMaster(masterInfo{clientAddr: resp.MasterAddr, haAddr: resp.MasterHAAddr})
	s := b.newSlaveHA()
	s.ObserveEpoch(resp.Epoch)
	if err := s.Start(); err != nil {
		b.log.Error("cannot start replication from the new master", "err", err)
	}
	b.role.Store(&role{slave: s, epoch: resp.Epoch})
	b.recordElected(electedRole{BrokerID: target, Role: RoleSlave, Epoch: resp.Epoch})
	b.registrar.kick()
	b.log.Warn("master role handed over by electMaster; the config files still name the old roles: update brokerId and brokerRole before the next restart",
		"newMaster", resp.MasterAddr, "epoch", resp.Epoch, "brokerId", target)
	return rpc.Reply{Header: &protocol.ElectMasterResponse{BrokerID: target, MasterAddr: resp.MasterAddr, Epoch: resp.Epoch, MasterHAAddr: resp.MasterHAAddr}}
}

// pauseForHandover starts handing master role r over to slave target: sends are refused from
// now on, and it waits until the slave holds the whole log. It returns the deadline of the whole
// hand-over, or, when the slave did not catch up in time, the refusal to answer with (the master
// role goes on).
func (b *Broker) pauseForHandover(r *role, target int64) (time.Time, rpc.Reply, bool) {
	b.role.Store(&role{master: r.master, epoch: r.epoch, mode: r.mode, handingOver: true})
	deadline := time.Now().Add(electMasterTimeout)
	if !b.waitAcked(r.master, target, deadline) {
		b.role.Store(r)
		return deadline, rpc.Errorf(protocol.StatusServiceNotAvailable, "brokerId %d did not catch up with the log end %d in time", target, b.store.LogEndOffset()), false
	}
	return deadline, rpc.Reply{}, true
}

// waitAcked waits until slave id holds this broker's whole log.
func (b *Broker) waitAcked(m *ha.Master, id int64, deadline time.Time) bool {
	for time.Now().Before(deadline) {
		end := b.store.LogEndOffset()
		for _, s := range m.Status().Slaves {
			if s.BrokerID == id && s.AckedOffset >= end {
				return true
			}
		}
		time.Sleep(2 * time.Millisecond)
	}
	return false
}

// startWithRetry starts a replication master, retrying while the HA port is still held by a
// connection of the previous role.
func startWithRetry(hm *ha.Master) error {
	var err error
	for range 40 {
		if err = hm.Start(); err == nil {
			return nil
		}
		time.Sleep(50 * time.Millisecond)
	}
	_ = hm.Close()
	return err
}

// electMaster hands the master role of a Raft-elected group to member h.BrokerID: the master
// refuses sends until the member holds the whole log, then transfers Raft leadership to it;
// the answer comes once the control state names the new master.
func (m *raftMember) electMaster(h protocol.ElectMasterRequest) rpc.Reply {
	b := m.b
	st := m.node.State()
	mem, ok := st.MemberByBrokerID(h.BrokerID)
	if !ok {
		var known []string
		for _, m := range st.Members {
			known = append(known, fmt.Sprintf("brokerId %d (%s, %s)", m.BrokerID, m.ID, m.Addr))
		}
		return rpc.Errorf(protocol.StatusServiceNotAvailable, "no member of %s has brokerId %d; members: %s", b.cfg.BrokerName, h.BrokerID, strings.Join(known, ", "))
	}
	reply := func(st ha.ControlState) rpc.Reply {
		cur, _ := st.Member(st.MasterID)
		return rpc.Reply{Header: &protocol.ElectMasterResponse{BrokerID: cur.BrokerID, MasterAddr: cur.Addr, Epoch: st.Epoch, MasterHAAddr: cur.HAAddr}}
	}
	if st.MasterID == mem.ID {
		return reply(st)
	}
	r := b.role.Load()
	if r.master == nil || r.handingOver || !m.node.IsLeader() {
		if m.node.LeaderID() == "" {
			return rpc.Errorf(protocol.StatusServiceNotAvailable, "%s has no Raft leader: fewer than a majority of its %d members are up; a master is elected once a majority runs", b.cfg.BrokerName, len(m.peers))
		}
		return rpc.Reply{Status: protocol.StatusNotMaster, Remark: "ask the master; in a Raft-elected group a master that is down is replaced automatically", MasterAddr: b.master().clientAddr}
	}
	if !slices.Contains(st.SyncStateSet, mem.ID) {
		return rpc.Errorf(protocol.StatusServiceNotAvailable, "brokerId %d (%s) is not in the in-sync set %v", h.BrokerID, mem.ID, st.SyncStateSet)
	}
	deadline, refused, ok := b.pauseForHandover(r, mem.BrokerID)
	if !ok {
		return refused
	}
	if err := m.node.TransferLeadership(mem.ID); err != nil {
		b.role.Store(r)
		return rpc.Errorf(protocol.StatusSystemError, "Raft leadership transfer to %s failed: %v", mem.ID, err)
	}
	for time.Now().Before(deadline) {
		if st := m.node.State(); st.MasterID == mem.ID {
			return reply(st)
		}
		time.Sleep(5 * time.Millisecond)
	}
	return rpc.Errorf(protocol.StatusSystemError, "leadership went to %s but it has not started its epoch in time (the master is still %q)", mem.ID, m.node.State().MasterID)
}

// adoptStoredTopics gives a broker taking the master role a topic config for every topic its log
// holds messages of but its topic table lacks: a topic created on the old master shortly before
// it died may not have reached this member through the config sync yet (slaveSyncInterval),
// and its messages must stay readable and writable. The queue count is the highest queue id
// stored plus one, at least defaultTopicQueueNums; the permission is read-write.
func (b *Broker) adoptStoredTopics() {
	maxQueue := map[string]int32{}
	for _, q := range b.store.Queues() {
		maxQueue[q.Topic] = max(maxQueue[q.Topic], q.QueueID+1)
	}
	for name, n := range maxQueue {
		if b.topics.get([]byte(name)) != nil {
			continue
		}
		n = max(n, b.cfg.DefaultTopicQueueNums)
		tc := protocol.TopicConfig{Topic: name, ReadQueueNums: n, WriteQueueNums: n, Perm: protocol.PermReadWrite}
		if _, err := b.topics.upsert(tc); err != nil {
			b.log.Error("cannot adopt a topic found in the log", "topic", name, "err", err)
			continue
		}
		b.log.Warn("topic config adopted from the log: its config had not reached this member", "topic", name, "queues", n)
	}
}

// electedName is the file in the store root that records a role changed online by electMaster in
// a group with static roles (see electedRole).
const electedName = "elected"

// electedRole is the role electMaster gave a broker with static roles: the config files still
// name the old roles, and a broker restarted with them would be a second master (the old one)
// or a slave of nobody (the new one). The file makes such a restart refuse to start until the
// config matches the role played (or the file is removed).
type electedRole struct {
	BrokerID int64
	Role     string // RoleSyncMaster, RoleAsyncMaster or RoleSlave
	Epoch    uint32
}

func (e electedRole) master() bool { return e.Role != RoleSlave }

// recordElected writes e durably (atomic replace, fsynced).
func (b *Broker) recordElected(e electedRole) {
	body := fmt.Sprintf("brokerId=%d\nbrokerRole=%s\nepoch=%d\n", e.BrokerID, e.Role, e.Epoch)
	if err := fsutil.WriteFileAtomic(filepath.Join(b.cfg.StorePathRootDir, electedName), []byte(body), 0o644); err != nil {
		b.log.Error("cannot record the role electMaster gave this broker; update the config before a restart", "err", err)
	}
}

// loadElected reads the file recordElected wrote; ok is false when there is none.
func loadElected(root string) (e electedRole, ok bool, err error) {
	data, err := os.ReadFile(filepath.Join(root, electedName))
	if errors.Is(err, os.ErrNotExist) {
		return e, false, nil
	}
	if err != nil {
		return e, false, err
	}
	for _, line := range strings.Split(string(data), "\n") {
		k, v, _ := strings.Cut(strings.TrimSpace(line), "=")
		switch k {
		case "brokerId":
			e.BrokerID, err = strconv.ParseInt(v, 10, 64)
		case "brokerRole":
			e.Role = v
		case "epoch":
			var n uint64
			n, err = strconv.ParseUint(v, 10, 32)
			e.Epoch = uint32(n)
		}
		if err != nil {
			return e, false, fmt.Errorf("%s: %q: %w", filepath.Join(root, electedName), line, err)
		}
	}
	return e, true, nil
}

// checkElected refuses a config that contradicts the role electMaster gave the broker, and
// returns the epoch to start with.
func checkElected(cfg *Config) (uint32, error) {
	if cfg.EnableRaftHA {
		return 0, nil
	}
	e, ok, err := loadElected(cfg.StorePathRootDir)
	if err != nil || !ok {
		return 0, err
	}
	if e.BrokerID != cfg.BrokerID || e.master() != !cfg.isSlave() {
		return 0, fmt.Errorf("electMaster made this broker brokerId %d, %s, in epoch %d, but its config says brokerId %d, %s: "+
			"set brokerId and brokerRole to the role it plays (or remove %s to start it as configured, "+
			"which may make two masters)", e.BrokerID, e.Role, e.Epoch, cfg.BrokerID, cfg.BrokerRole, filepath.Join(cfg.StorePathRootDir, electedName))
	}
	return e.Epoch, nil
}
