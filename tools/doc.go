// Package tools implements petrelctl, Petrel's admin CLI modelled on RocketMQ's mqadmin: one
// function per verb, writing what mqadmin prints to an io.Writer, on top of client.Admin.
// cmd/petrelctl only parses flags and calls these, so tests run every command in-process
// against real servers.
//
//	updateTopic      create or update a topic on a broker (-b) or every master of a cluster (-c)
//	deleteTopic      delete a topic from every master of a cluster, then from the NameServers
//	deleteSubGroup   remove a consumer group's committed offsets from every master of a cluster
//	topicRoute       a topic's route from the NameServer, as JSON
//	topicList        the topics stored on the masters, or one broker's own topic table (-b, a slave's too)
//	topicStatus      min/max offset and last store time of every queue of a topic
//	clusterList      every broker of the cluster table with its version and rates
//	brokerStatus     a broker's runtime statistics, one key per line
//	consumerProgress a consumer group's committed offsets against the queues' max offsets
//	haStatus         a broker's replication state: a master's slaves and their lag, a slave's master
//	logChecksum      the SHA-256 of a broker's commit log up to an offset, to compare replicas
//	electMaster      make a member of a broker group its master online (no restart)
//
// Every command returns an error instead of printing one; a command that asks several brokers
// prints what the others answered and returns the failures joined. A nil context or writer is
// refused, like any argument a command cannot use, with an error wrapping
// client.ErrInvalidArgument before anything is asked; a context that has already ended fails
// the command as early with an error wrapping the context's, and an Admin whose Client is
// closed with one wrapping client.ErrClientClosed. Commands are safe to run
// concurrently with each other on one Admin.
package tools
