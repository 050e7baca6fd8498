// Package namesrv is Petrel's NameServer: the route registry brokers register with and clients
// read routes from, modelled on RocketMQ's NamesrvController and RouteInfoManager. It keeps
// everything in memory; several NameServers run side by side and never talk to each other, so
// every broker registers with each of them.
//
// # Tables
//
// As in RocketMQ's RouteInfoManager, four tables (table.go), guarded together by one
// sync.RWMutex:
//
//	topics    topic -> broker group name -> queue data (read/write queue counts, perm)
//	groups    broker group name -> cluster, members by brokerId, and the group's topic set
//	clusters  cluster name -> broker group names
//	live      broker address -> last heartbeat, data version, HA address, the connection
//
// # Registration
//
// A broker sends CodeRegisterBroker (header protocol.BrokerHeader, body
// protocol.TopicConfigList) on start and then periodically as its heartbeat. A registration
// replaces what the NameServer knew about that broker:
//
//   - The master's (brokerId 0) topic list defines its group's queue data: topics missing from
//     the list leave the group, and a topic left with no group disappears.
//   - A slave's topic list does not change queue data (as in RocketMQ), with one exception: a
//     group that has no master and no queue data at all (the NameServer started while the
//     master was down) takes its queue data from the slave, so consumers can read from it.
//   - The answer (protocol.RegisterBrokerResponseHeader) names the group's master and its HA
//     address, so a slave learns where to replicate from.
//
// The latest registration is always applied; its data version is kept for display only.
//
// CodeDeleteTopicInNamesrv (mqadmin deleteTopic, after the brokers deleted the topic) removes
// a topic's queue data of every group. A master that registers without the topic leaves it
// gone; one that still lists it brings it back, so a topic is deleted on its brokers first.
//
// # Liveness
//
// A broker is removed when it unregisters (CodeUnregisterBroker), when the connection it last
// registered on closes, or when it has been silent for Config.BrokerExpiry (checked every
// Config.ScanInterval). Removing the last member of a group removes the group and its queue
// data; removing a master while slaves remain keeps the group's queue data, so the route lists
// the group with its slaves and no master, and consumers read from the slaves.
//
// # Readiness
//
// A NameServer keeps nothing across a restart, so a restarted one knows no broker until each
// registers again; until then its "no such topic" would be wrong, and its cluster table
// short. For Config.RegistrationPeriod after Start (the brokers' registration period: every
// live broker registers within it), and for as long as no broker has registered at all, the
// NameServer is not ready: a route it does not know, and the cluster table, are answered
// protocol.StatusNamesrvNotReady (retriable; the remark says why and to ask another
// NameServer), never protocol.StatusTopicNotExist. A route it knows (a broker registered the
// topic) is served from the first registration on, as it stands: a group whose brokers have
// not registered yet is missing from it. Once ready it stays ready. Clients ask the next
// NameServer on NAMESRV_NOT_READY; brokers register with a NameServer as soon as they connect
// to it, so a restarted NameServer's routes come back within moments, and its readiness
// after one period. The rule is readiness (server.go), a pure function with a table test.
//
// # Connections
//
// A request frame must be whole within Config.FrameReadTimeout of its first byte, and a
// connection's first request within it of the accept; a connection silent for BrokerExpiry
// between requests is closed, and at most Config.MaxConnections are served at once. A first
// frame that looks like TLS or HTTP is logged as such. Lines a peer can cause are
// rate-limited per reason (internal/ratelog).
//
// # Concurrency
//
// Requests are served on the rpc.Server's goroutine per connection; handlers hold the table lock
// only to copy in or out of the tables, and encode outside it. The Server owns two more
// goroutines, the accept loop and the expiry scanner; Close stops and waits for all of them.
package namesrv
