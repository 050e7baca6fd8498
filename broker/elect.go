package broker

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
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
// election makes the target master. The role loop decides and acts (ha.Member); this worker
// only waits for it.
func (b *Broker) electMaster(h protocol.ElectMasterRequest) rpc.Reply {
	if h.BrokerName != b.cfg.BrokerName {
		return rpc.Errorf(protocol.StatusServiceNotAvailable, "this broker is in group %s, not %s", b.cfg.BrokerName, h.BrokerName)
	}
	deadline := time.Now().Add(2 * electMasterTimeout)
	res := b.roles.call(h)
	if res.waitFor != "" {
		return b.raft.waitElected(res.waitFor, deadline)
	}
	return res.reply
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

// adoptStoredTopics gives a slave of a group with static roles that takes the master role
// (electMaster) a topic config for every topic its log holds messages of but its topic table
// lacks: a topic created on the old master shortly before it died may not have reached this
// member through the config sync yet (slaveSyncInterval), and its messages must stay readable
// and writable. The queue count is the highest queue id stored plus one, at least
// defaultTopicQueueNums; the permission is read-write. A Raft-elected group needs none: its
// topic table is committed through Raft before any answer.
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
