package testcluster

import (
	"github.com/petrel-mq/petrel/broker"
	"github.com/petrel-mq/petrel/protocol"
)

// What the waits look for, as pure functions of what a NameServer or a broker answers.

// memberIDs returns the members a NameServer lists in group: address -> the brokerId it
// registered as.
func memberIDs(ci protocol.ClusterInfo, group string) map[string]int64 {
	out := map[string]int64{}
	for _, bd := range ci.Brokers {
		if bd.BrokerName != group {
			continue
		}
		for _, a := range bd.Addrs {
			out[a.Addr] = a.BrokerID
		}
	}
	return out
}

// masterAddr returns the address a NameServer lists as brokerId 0 of group, or "".
func masterAddr(ci protocol.ClusterInfo, group string) string {
	for addr, id := range memberIDs(ci, group) {
		if id == 0 {
			return addr
		}
	}
	return ""
}

// routesTo reports whether a topic's route gives group writable queues and a master.
func routesTo(route protocol.TopicRouteData, group string) bool {
	writable := false
	for _, q := range route.QueueDatas {
		if q.BrokerName == group && q.WriteQueueNums > 0 && q.Perm&protocol.PermWrite != 0 {
			writable = true
		}
	}
	if !writable {
		return false
	}
	for _, bd := range route.BrokerDatas {
		if bd.BrokerName == group && bd.MasterAddr() != "" {
			return true
		}
	}
	return false
}

// isMaster reports whether a broker's HA status says it acts as its group's master: it
// registers as brokerId 0 and plays a master's role.
func isMaster(st protocol.HAStatus) bool {
	return st.BrokerID == 0 && st.Role != broker.RoleSlave
}

// inSyncSlaves counts the slaves a master's HA status has connected and in its in-sync set.
func inSyncSlaves(st protocol.HAStatus) int {
	n := 0
	for _, s := range st.Slaves {
		if s.Connected && s.InSync {
			n++
		}
	}
	return n
}
