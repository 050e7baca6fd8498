package client

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/petrel-mq/petrel/protocol"
)

// Admin runs administrative requests against NameServers and brokers: the calls behind
// petrelctl's mqadmin-like commands (updateTopic, deleteTopic, deleteSubGroup, topicRoute,
// clusterList, topicStatus, consumerProgress, brokerStatus, haStatus, logChecksum,
// electMaster). A Client made
// WithNoNameServer serves the requests that name a broker address. Its methods are safe for
// concurrent use. Each request is bounded by the client's request timeout (WithRequestTimeout),
// or by ctx's deadline when it is earlier. Every method refuses a nil ctx, like any argument it
// cannot use, with an error wrapping ErrInvalidArgument before sending anything; it fails as
// early, with an error wrapping ctx's, when ctx has already ended, and with one wrapping
// ErrClientClosed once the Client is closed. A ctx that ends midway stops the method before
// its next request: what was sent by then may have been done.
type Admin struct {
	c *Client
}

// NewAdmin returns an Admin using c's NameServers and connections. The methods of an Admin made
// from a nil c return errors wrapping ErrInvalidArgument.
func NewAdmin(c *Client) *Admin { return &Admin{c: c} }

// args returns nil when the Admin has a Client, ctx is not nil, every check passed (nil), the
// Client is open and ctx has not ended, else the first failure, naming the method what. The
// checks are argument checks (argAddr, argQueue, protocol.ValidateTopic...): a call that fails
// any of these sends nothing.
func (a *Admin) args(ctx context.Context, what string, checks ...error) error {
	if a == nil || a.c == nil {
		return fmt.Errorf("%w: Admin.%s: the Admin has no Client (NewAdmin(nil))", ErrInvalidArgument, what)
	}
	if err := argContext(ctx, "Admin."+what); err != nil {
		return err
	}
	for _, err := range checks {
		if err != nil {
			return fmt.Errorf("Admin.%s: %w", what, err)
		}
	}
	if a.c.isClosed() {
		return fmt.Errorf("Admin.%s: %w", what, ErrClientClosed)
	}
	return ctxEnded(ctx, "Admin."+what)
}

// argAddr checks a broker address argument: host:port.
func argAddr(addr string) error {
	if err := checkAddr(addr); err != nil {
		return fmt.Errorf("%w: broker %v", ErrInvalidArgument, err)
	}
	return nil
}

// argQueue checks a queue id argument: not negative.
func argQueue(queueID int32) error {
	if queueID < 0 {
		return fmt.Errorf("%w: queue id %d is negative", ErrInvalidArgument, queueID)
	}
	return nil
}

// argOffset checks a queue offset argument: not negative.
func argOffset(offset int64) error {
	if offset < 0 {
		return fmt.Errorf("%w: offset %d is negative", ErrInvalidArgument, offset)
	}
	return nil
}

// argTopic and argGroup check a topic or consumer group name (ErrTopicInvalid, ErrGroupInvalid).
func argTopic(topic string) error { return protocol.ValidateTopic([]byte(topic)) }
func argGroup(group string) error { return protocol.ValidateGroup([]byte(group)) }

// argOptionalTopic is argTopic for a topic that may be "" (every topic).
func argOptionalTopic(topic string) error {
	if topic == "" {
		return nil
	}
	return argTopic(topic)
}

// BrokerTarget is a broker group's master, as Admin fans a request out to.
type BrokerTarget struct {
	// Cluster and BrokerName name the group ("" when the target was given as an address).
	Cluster    string
	BrokerName string
	// Addr is the master's address (host:port).
	Addr string
}

// String returns "ADDR (BROKERNAME)", or the address alone when the target has no broker name.
func (t BrokerTarget) String() string {
	if t.BrokerName == "" {
		return t.Addr
	}
	return t.Addr + " (" + t.BrokerName + ")"
}

// CreateTopic creates or updates a topic (queue counts and permission). target is a broker
// address ("host:port": that broker only), a cluster name (every master of the cluster, from
// the NameServer's cluster table) or "" (every master of every cluster). It returns the
// masters it created the topic on; with a cluster, errors of single brokers are joined and the
// others still get the topic, and a group without a master is an error (ErrNoMaster), as is a
// cluster the table does not hold (ErrUnknownCluster). Brokers
// announce the topic to the NameServers at their next registration (see WaitTopicRoute).
// Errors before anything is sent: ErrTopicInvalid; ErrInvalidArgument for a malformed
// address, queue counts that are not positive, or a permission other than 0 (read and
// write), PermRead, PermWrite or PermReadWrite.
func (a *Admin) CreateTopic(ctx context.Context, target string, cfg protocol.TopicConfig) ([]BrokerTarget, error) {
	var targetErr, countErr, permErr error
	if strings.Contains(target, ":") {
		targetErr = argAddr(target)
	}
	if cfg.ReadQueueNums <= 0 || cfg.WriteQueueNums <= 0 {
		countErr = fmt.Errorf("%w: topic %q: queue counts must be positive (read %d, write %d)", ErrInvalidArgument, cfg.Topic, cfg.ReadQueueNums, cfg.WriteQueueNums)
	}
	switch cfg.Perm {
	case 0:
		cfg.Perm = protocol.PermReadWrite
	case protocol.PermRead, protocol.PermWrite, protocol.PermReadWrite:
	default:
		permErr = fmt.Errorf("%w: topic %q: permission %d is not %d (read), %d (write) or %d (both)", ErrInvalidArgument, cfg.Topic, cfg.Perm, protocol.PermRead, protocol.PermWrite, protocol.PermReadWrite)
	}
	if err := a.args(ctx, "CreateTopic", argTopic(cfg.Topic), targetErr, countErr, permErr); err != nil {
		return nil, err
	}
	var targets []BrokerTarget
	var errs []error
	if strings.Contains(target, ":") {
		targets = []BrokerTarget{{Addr: target}}
	} else {
		masters, masterless, err := a.clusterMasters(ctx, target)
		if err != nil {
			return nil, err
		}
		if len(masterless) > 0 {
			errs = append(errs, fmt.Errorf("cannot create topic %q: %w", cfg.Topic, noMaster(target, masterless)))
		}
		targets = masters
	}
	var done []BrokerTarget
	for _, t := range targets {
		if err := a.c.callAddr(ctx, t.Addr, protocol.CodeUpdateAndCreateTopic, &cfg, nil, nil, nil); err != nil {
			errs = append(errs, fmt.Errorf("cannot create topic %q on %s: %w", cfg.Topic, t, err))
			continue
		}
		done = append(done, t)
	}
	return done, errors.Join(errs...)
}

// BrokerDeletion is a master that served a deletion (DeleteTopic, DeleteSubGroup).
type BrokerDeletion struct {
	BrokerTarget
	// Absent: the master said it held nothing of what was deleted, so nothing changed there.
	// False when it deleted something, or did not say (a broker without DeleteResponseHeader).
	Absent bool
}

// deleteAnswer reads a deletion's success header. A broker that sends none (it predates
// protocol.DeleteResponseHeader) leaves absent false: it did not say.
type deleteAnswer struct{ absent bool }

// ReadFrom decodes the header, or nothing.
func (d *deleteAnswer) ReadFrom(src []byte) error {
	if len(src) == 0 {
		return nil
	}
	var h protocol.DeleteResponseHeader
	if err := h.ReadFrom(src); err != nil {
		return err
	}
	d.absent = !h.Existed
	return nil
}

// deleteOnMasters sends a deletion (code with header h; what names it in errors, as `topic
// "T"`) to the masters of cluster ("" for every cluster) that clusterMasters found, and returns
// those that served it and the failures joined, a group without a master among them
// (ErrNoMaster).
func (a *Admin) deleteOnMasters(ctx context.Context, cluster string, masters []BrokerTarget, masterless []*protocol.BrokerData, code protocol.RequestCode, h protocol.Header, what string) ([]BrokerDeletion, error) {
	var errs []error
	if len(masterless) > 0 {
		errs = append(errs, fmt.Errorf("cannot delete %s: %w", what, noMaster(cluster, masterless)))
	}
	var done []BrokerDeletion
	for _, t := range masters {
		var ans deleteAnswer
		if err := a.c.callAddr(ctx, t.Addr, code, h, nil, &ans, nil); err != nil {
			errs = append(errs, fmt.Errorf("cannot delete %s on %s: %w", what, t, err))
			continue
		}
		done = append(done, BrokerDeletion{BrokerTarget: t, Absent: ans.absent})
	}
	return done, errors.Join(errs...)
}

// DeleteTopic deletes topic from every master of cluster ("" for every cluster; DELETE_TOPIC_IN_BROKER:
// each master writes a deletion record into its commit log, which removes the topic's queues
// at that position on every member of its group, then its config and every group's committed
// offsets of it, and answers once the record is as durable and replicated as a send would be),
// then from every NameServer of the client (DELETE_TOPIC_IN_NAMESRV). It returns the masters
// (each saying whether it held the topic) and the NameServers it deleted the topic on; errors
// of single servers are joined. When a master fails, or a group of the cluster has no master
// (ErrNoMaster), the NameServers are not asked: a member still holding the topic would bring
// it back at its next registration (run it again). Deleting a topic that does not exist
// succeeds, with every BrokerDeletion Absent. A cluster the NameServers do not know is
// ErrUnknownCluster.
func (a *Admin) DeleteTopic(ctx context.Context, cluster, topic string) (brokers []BrokerDeletion, nameServers []string, err error) {
	if err := a.args(ctx, "DeleteTopic", argTopic(topic)); err != nil {
		return nil, nil, err
	}
	masters, masterless, err := a.clusterMasters(ctx, cluster)
	if err != nil {
		return nil, nil, err
	}
	h := protocol.TopicHeader{Topic: topic}
	brokers, err = a.deleteOnMasters(ctx, cluster, masters, masterless, protocol.CodeDeleteTopicInBroker, &h, fmt.Sprintf("topic %q", topic))
	if err != nil {
		return brokers, nil, errors.Join(err, fmt.Errorf("topic %q not deleted from the NameServers: a member that still holds it would register it again", topic))
	}
	var errs []error
	for _, ns := range a.c.cfg.nameServers {
		if err := a.c.callAddr(ctx, ns, protocol.CodeDeleteTopicInNamesrv, &h, nil, nil, nil); err != nil {
			errs = append(errs, fmt.Errorf("cannot delete topic %q on NameServer %s: %w", topic, ns, err))
			continue
		}
		nameServers = append(nameServers, ns)
	}
	return brokers, nameServers, errors.Join(errs...)
}

// DeleteSubGroup removes consumer group's committed offsets of every topic from every master of
// cluster ("" for every cluster; DELETE_SUBSCRIPTIONGROUP); their slaves drop them at their
// next offset sync. It returns the masters it deleted the group on, each saying whether it held
// offsets of the group; errors of single masters are joined, a group of the cluster without a
// master among them (ErrNoMaster). A cluster the NameServers do not know is ErrUnknownCluster.
func (a *Admin) DeleteSubGroup(ctx context.Context, cluster, group string) ([]BrokerDeletion, error) {
	if err := a.args(ctx, "DeleteSubGroup", argGroup(group)); err != nil {
		return nil, err
	}
	masters, masterless, err := a.clusterMasters(ctx, cluster)
	if err != nil {
		return nil, err
	}
	return a.deleteOnMasters(ctx, cluster, masters, masterless, protocol.CodeDeleteSubscriptionGroup, &protocol.GroupHeader{ConsumerGroup: group}, fmt.Sprintf("group %q", group))
}

// ClusterMasters returns the master of every broker group of cluster ("" for every cluster),
// sorted by broker name. Groups without a live master are left out; none at all is an error
// that names them (ErrNoMaster). A cluster the NameServers' cluster table does not hold is
// ErrUnknownCluster.
func (a *Admin) ClusterMasters(ctx context.Context, cluster string) ([]BrokerTarget, error) {
	if err := a.args(ctx, "ClusterMasters"); err != nil {
		return nil, err
	}
	masters, masterless, err := a.clusterMasters(ctx, cluster)
	if err != nil {
		return nil, err
	}
	if len(masters) == 0 {
		return nil, noMaster(cluster, masterless)
	}
	return masters, nil
}

// clusterMasters reads the cluster table and returns the master of every broker group of
// cluster ("" for every cluster) and the groups that have none, both sorted by broker name. A
// cluster the table does not hold is ErrUnknownCluster; no group at all is ErrNoMaster.
func (a *Admin) clusterMasters(ctx context.Context, cluster string) (masters []BrokerTarget, masterless []*protocol.BrokerData, err error) {
	ci, err := a.c.clusterInfo(ctx)
	if err != nil {
		return nil, nil, err
	}
	if err := CheckCluster(ci, cluster); err != nil {
		return nil, nil, err
	}
	for i := range ci.Brokers {
		bd := &ci.Brokers[i]
		if cluster != "" && bd.Cluster != cluster {
			continue
		}
		if m := bd.MasterAddr(); m != "" {
			masters = append(masters, BrokerTarget{Cluster: bd.Cluster, BrokerName: bd.BrokerName, Addr: m})
		} else {
			masterless = append(masterless, bd)
		}
	}
	if len(masters) == 0 && len(masterless) == 0 {
		if cluster == "" {
			return nil, nil, fmt.Errorf("%w: no broker group is registered with the NameServers", ErrNoMaster)
		}
		return nil, nil, fmt.Errorf("%w: cluster %q has no live broker group", ErrNoMaster, cluster)
	}
	slices.SortFunc(masters, func(x, y BrokerTarget) int { return strings.Compare(x.BrokerName, y.BrokerName) })
	slices.SortFunc(masterless, func(x, y *protocol.BrokerData) int { return strings.Compare(x.BrokerName, y.BrokerName) })
	return masters, masterless, nil
}

// noMaster says that the broker groups of cluster ("" for every cluster) have no master,
// naming each with its live members; it wraps ErrNoMaster.
func noMaster(cluster string, groups []*protocol.BrokerData) error {
	parts := make([]string, 0, len(groups))
	for _, bd := range groups {
		ids := make([]string, 0, len(bd.Addrs))
		for _, ba := range bd.Addrs {
			ids = append(ids, strconv.FormatInt(ba.BrokerID, 10))
		}
		name := "broker group " + bd.BrokerName
		if cluster == "" {
			name += " of cluster " + bd.Cluster
		}
		parts = append(parts, fmt.Sprintf("%s: no member is master, live brokerIds %s", name, strings.Join(ids, ", ")))
	}
	where := "any cluster"
	if cluster != "" {
		where = "cluster " + strconv.Quote(cluster)
	}
	return fmt.Errorf("%w right now in %s (%s; a Raft group without a quorum elects none, a static group has none while its master is down)",
		ErrNoMaster, where, strings.Join(parts, "; "))
}

// CheckCluster returns nil when cluster is "" (every cluster) or a cluster of the cluster
// table ci, else an error wrapping ErrUnknownCluster that lists the clusters ci holds.
func CheckCluster(ci *protocol.ClusterInfo, cluster string) error {
	if cluster == "" {
		return nil
	}
	var known []string
	for _, ce := range ci.Clusters {
		known = append(known, ce.Name)
	}
	for i := range ci.Brokers {
		known = append(known, ci.Brokers[i].Cluster)
	}
	slices.Sort(known)
	known = slices.Compact(known)
	if slices.Contains(known, cluster) {
		return nil
	}
	known = slices.DeleteFunc(known, func(n string) bool { return n == "" })
	list := "none"
	if len(known) > 0 {
		list = strings.Join(known, ", ")
	}
	return fmt.Errorf("%w: cluster %q is not known to the NameServers (known: %s)", ErrUnknownCluster, cluster, list)
}

// TopicRoute asks a NameServer for the topic's route now (bypassing the client's cache, which it
// updates). errors.Is(err, ErrTopicNotExist) when no broker serves the topic.
func (a *Admin) TopicRoute(ctx context.Context, topic string) (*protocol.TopicRouteData, error) {
	if err := a.args(ctx, "TopicRoute", argTopic(topic)); err != nil {
		return nil, err
	}
	var data protocol.TopicRouteData
	if err := a.c.callNameServer(ctx, protocol.CodeGetRouteInfoByTopic, &protocol.TopicHeader{Topic: topic}, nil, &data); err != nil {
		return nil, fmt.Errorf("cannot get the route of topic %q: %w", topic, err)
	}
	a.c.storeRoute(topic, data)
	return &data, nil
}

// WaitTopicRoute polls the NameServer until the topic's route lists at least groups broker
// groups with a master and write permission, or ctx ends. It is what a caller does after
// CreateTopic before producing, since brokers register new topics asynchronously. Errors:
// ErrTopicInvalid, ErrInvalidArgument for groups below 1, ErrClientClosed when the Client is
// closed (before or while it waits), or ctx's error wrapped with the last reason to wait.
func (a *Admin) WaitTopicRoute(ctx context.Context, topic string, groups int) error {
	var groupsErr error
	if groups < 1 {
		groupsErr = fmt.Errorf("%w: %d broker groups to wait for: want at least 1", ErrInvalidArgument, groups)
	}
	if err := a.args(ctx, "WaitTopicRoute", argTopic(topic), groupsErr); err != nil {
		return err
	}
	for {
		r, err := a.TopicRoute(ctx, topic)
		if errors.Is(err, ErrClientClosed) {
			return err // closed while waiting: no route will come
		}
		if err == nil {
			n := 0
			tr := newTopicRoute(topic, *r, time.Time{})
			seen := map[string]bool{}
			for _, q := range tr.writeQueues {
				if !seen[q.BrokerName] {
					seen[q.BrokerName] = true
					n++
				}
			}
			if n >= groups {
				return nil
			}
		}
		if !sleepCtx(ctx, 50*time.Millisecond) {
			if err == nil {
				err = fmt.Errorf("%w: the route of %q has fewer than %d writable groups", ErrNoQueue, topic, groups)
			}
			return fmt.Errorf("%w (last: %w)", ctx.Err(), err)
		}
	}
}

// ClusterInfo returns the NameServer's cluster table: broker groups and their members, and the
// groups of each cluster.
func (a *Admin) ClusterInfo(ctx context.Context) (*protocol.ClusterInfo, error) {
	if err := a.args(ctx, "ClusterInfo"); err != nil {
		return nil, err
	}
	return a.c.clusterInfo(ctx)
}

// BrokerTopicStats is one broker group's share of a topic.
type BrokerTopicStats struct {
	// BrokerName is the group, Addr the member that answered (the master for TopicStats).
	BrokerName string
	Addr       string
	// Stats lists the group's queues of the topic.
	Stats protocol.TopicStatsTable
}

// TopicStats returns the min/max offsets of every queue of the topic on every broker group of
// its route (asked from each master), sorted by broker name. Errors of single brokers are
// joined; the stats of the others are still returned.
func (a *Admin) TopicStats(ctx context.Context, topic string) ([]BrokerTopicStats, error) {
	if err := a.args(ctx, "TopicStats", argTopic(topic)); err != nil {
		return nil, err
	}
	data, err := a.TopicRoute(ctx, topic)
	if err != nil {
		return nil, err
	}
	var out []BrokerTopicStats
	var errs []error
	for _, t := range routeMasters(data) {
		var st protocol.TopicStatsTable
		if err := a.c.callAddr(ctx, t.Addr, protocol.CodeGetTopicStatsInfo, &protocol.TopicHeader{Topic: topic}, nil, nil, &st); err != nil {
			errs = append(errs, fmt.Errorf("cannot get the stats of %q from %s: %w", topic, t, err))
			continue
		}
		out = append(out, BrokerTopicStats{BrokerName: t.BrokerName, Addr: t.Addr, Stats: st})
	}
	return out, errors.Join(errs...)
}

// BrokerConsumeStats is a consumer group's progress on one broker group.
type BrokerConsumeStats struct {
	// BrokerName is the group, Addr the master that answered.
	BrokerName string
	Addr       string
	// Stats lists the group's queues the consumer group has offsets on.
	Stats protocol.ConsumeStats
}

// ConsumeStats returns the group's progress (broker and consumer offsets per queue) from every
// master serving topic, or from every master of every cluster when topic is "". Errors of single
// brokers are joined.
func (a *Admin) ConsumeStats(ctx context.Context, group, topic string) ([]BrokerConsumeStats, error) {
	if err := a.args(ctx, "ConsumeStats", argGroup(group), argOptionalTopic(topic)); err != nil {
		return nil, err
	}
	targets, err := a.topicMasters(ctx, topic)
	if err != nil {
		return nil, err
	}
	var out []BrokerConsumeStats
	var errs []error
	for _, t := range targets {
		var st protocol.ConsumeStats
		if err := a.c.callAddr(ctx, t.Addr, protocol.CodeGetConsumeStats, &protocol.GroupHeader{ConsumerGroup: group, Topic: topic}, nil, nil, &st); err != nil {
			errs = append(errs, fmt.Errorf("cannot get the consume stats of %q from %s: %w", group, t, err))
			continue
		}
		out = append(out, BrokerConsumeStats{BrokerName: t.BrokerName, Addr: t.Addr, Stats: st})
	}
	return out, errors.Join(errs...)
}

// ConsumerClients returns the client ids of the consumer group's live members, as the brokers
// know them from the members' heartbeats (GET_CONSUMER_LIST_BY_GROUP), asked of every master
// serving topic, or of every master of every cluster when topic is "": the union, sorted. With a
// topic, only the members consuming it are listed. Errors of single brokers are joined; the ids
// the others gave are still returned. Which member pulls which queue is decided by the members
// themselves and known to no broker.
func (a *Admin) ConsumerClients(ctx context.Context, group, topic string) ([]string, error) {
	if err := a.args(ctx, "ConsumerClients", argGroup(group), argOptionalTopic(topic)); err != nil {
		return nil, err
	}
	targets, err := a.topicMasters(ctx, topic)
	if err != nil {
		return nil, err
	}
	var ids []string
	var errs []error
	for _, t := range targets {
		var l protocol.StringList
		if err := a.c.callAddr(ctx, t.Addr, protocol.CodeGetConsumerListByGroup, &protocol.GroupHeader{ConsumerGroup: group, Topic: topic}, nil, nil, &l); err != nil {
			errs = append(errs, fmt.Errorf("cannot get the clients of %q from %s: %w", group, t, err))
			continue
		}
		ids = append(ids, l.Items...)
	}
	return normalizeClientIDs(ids), errors.Join(errs...)
}

// topicMasters returns the masters of the groups serving topic (from its route), or of every
// group of every cluster when topic is "".
func (a *Admin) topicMasters(ctx context.Context, topic string) ([]BrokerTarget, error) {
	if topic == "" {
		return a.ClusterMasters(ctx, "")
	}
	data, err := a.TopicRoute(ctx, topic)
	if err != nil {
		return nil, err
	}
	return routeMasters(data), nil
}

// routeMasters returns the master of every group of a route that has one, sorted by name.
func routeMasters(data *protocol.TopicRouteData) []BrokerTarget {
	var out []BrokerTarget
	for i := range data.BrokerDatas {
		bd := &data.BrokerDatas[i]
		if m := bd.MasterAddr(); m != "" {
			out = append(out, BrokerTarget{Cluster: bd.Cluster, BrokerName: bd.BrokerName, Addr: m})
		}
	}
	slices.SortFunc(out, func(x, y BrokerTarget) int { return strings.Compare(x.BrokerName, y.BrokerName) })
	return out
}

// BrokerRuntimeInfo returns the broker's runtime statistics (RocketMQ's brokerStatus table).
func (a *Admin) BrokerRuntimeInfo(ctx context.Context, addr string) (*protocol.KVTable, error) {
	if err := a.args(ctx, "BrokerRuntimeInfo", argAddr(addr)); err != nil {
		return nil, err
	}
	var kv protocol.KVTable
	if err := a.c.callAddr(ctx, addr, protocol.CodeGetBrokerRuntimeInfo, nil, nil, nil, &kv); err != nil {
		return nil, fmt.Errorf("cannot get the runtime info of %s: %w", addr, err)
	}
	return &kv, nil
}

// AllTopicConfig returns the topic configs stored on the broker at addr.
func (a *Admin) AllTopicConfig(ctx context.Context, addr string) (*protocol.TopicConfigList, error) {
	if err := a.args(ctx, "AllTopicConfig", argAddr(addr)); err != nil {
		return nil, err
	}
	var l protocol.TopicConfigList
	if err := a.c.callAddr(ctx, addr, protocol.CodeGetAllTopicConfig, nil, nil, nil, &l); err != nil {
		return nil, fmt.Errorf("cannot get the topic configs of %s: %w", addr, err)
	}
	return &l, nil
}

// MinOffset returns the oldest queue offset still stored in the queue on the broker.
func (a *Admin) MinOffset(ctx context.Context, brokerAddr, topic string, queueID int32) (int64, error) {
	if err := a.args(ctx, "MinOffset", argAddr(brokerAddr), argTopic(topic), argQueue(queueID)); err != nil {
		return 0, err
	}
	return a.offset(ctx, protocol.CodeGetMinOffset, brokerAddr, &protocol.QueueHeader{Topic: topic, QueueID: queueID})
}

// MaxOffset returns the queue's max offset on the broker: the offset the next message will get.
func (a *Admin) MaxOffset(ctx context.Context, brokerAddr, topic string, queueID int32) (int64, error) {
	if err := a.args(ctx, "MaxOffset", argAddr(brokerAddr), argTopic(topic), argQueue(queueID)); err != nil {
		return 0, err
	}
	return a.offset(ctx, protocol.CodeGetMaxOffset, brokerAddr, &protocol.QueueHeader{Topic: topic, QueueID: queueID})
}

// QueryConsumerOffset returns the group's committed offset of the queue on the broker;
// errors.Is(err, ErrQueryNotFound) when the group has none.
func (a *Admin) QueryConsumerOffset(ctx context.Context, brokerAddr, group, topic string, queueID int32) (int64, error) {
	if err := a.args(ctx, "QueryConsumerOffset", argAddr(brokerAddr), argGroup(group), argTopic(topic), argQueue(queueID)); err != nil {
		return 0, err
	}
	return a.offset(ctx, protocol.CodeQueryConsumerOffset, brokerAddr, &protocol.ConsumerOffsetHeader{ConsumerGroup: group, Topic: topic, QueueID: queueID})
}

// UpdateConsumerOffset commits offset as the group's offset of the queue on the broker (the
// broker decides whether it may move backwards; the Consumer never asks it to).
func (a *Admin) UpdateConsumerOffset(ctx context.Context, brokerAddr, group, topic string, queueID int32, offset int64) error {
	if err := a.args(ctx, "UpdateConsumerOffset", argAddr(brokerAddr), argGroup(group), argTopic(topic), argQueue(queueID), argOffset(offset)); err != nil {
		return err
	}
	h := protocol.ConsumerOffsetHeader{ConsumerGroup: group, Topic: topic, QueueID: queueID, Offset: offset}
	if err := a.c.callAddr(ctx, brokerAddr, protocol.CodeUpdateConsumerOffset, &h, nil, nil, nil); err != nil {
		return fmt.Errorf("cannot update the offset of %s on %s#%d at %s: %w", group, topic, queueID, brokerAddr, err)
	}
	return nil
}

func (a *Admin) offset(ctx context.Context, code protocol.RequestCode, addr string, h protocol.Header) (int64, error) {
	var oh protocol.OffsetHeader
	if err := a.c.callAddr(ctx, addr, code, h, nil, &oh, nil); err != nil {
		return 0, fmt.Errorf("%s at %s: %w", code, addr, err)
	}
	return oh.Offset, nil
}

// HAStatus returns the replication state of the broker at addr (CODE GET_HA_STATUS): its role,
// log bounds, epoch and confirmed offset; a master lists its slaves (acknowledged offset, lag
// in bytes and time, in-sync, compression), a slave describes its link to the master.
func (a *Admin) HAStatus(ctx context.Context, addr string) (*protocol.HAStatus, error) {
	if err := a.args(ctx, "HAStatus", argAddr(addr)); err != nil {
		return nil, err
	}
	var st protocol.HAStatus
	if err := a.c.callAddr(ctx, addr, protocol.CodeGetHAStatus, nil, nil, nil, &st); err != nil {
		return nil, fmt.Errorf("cannot get the HA status of %s: %w", addr, err)
	}
	return &st, nil
}

// LogChecksum returns the SHA-256 of the commit log of the broker at addr over the physical
// offsets [from, to) (from -1: the log's min offset; to -1: its end), with the range the broker
// covered. Replicas of a group hold byte-identical logs, so equal ranges give equal checksums.
// A bound below -1, or to below from, is ErrInvalidArgument.
func (a *Admin) LogChecksum(ctx context.Context, addr string, from, to int64) (*protocol.LogChecksumResponse, error) {
	var rangeErr error
	if from < -1 || to < -1 || (from >= 0 && to >= 0 && to < from) {
		rangeErr = fmt.Errorf("%w: log range [%d, %d)", ErrInvalidArgument, from, to)
	}
	if err := a.args(ctx, "LogChecksum", argAddr(addr), rangeErr); err != nil {
		return nil, err
	}
	var resp protocol.LogChecksumResponse
	if err := a.c.callAddr(ctx, addr, protocol.CodeGetLogChecksum, &protocol.LogChecksumRequest{From: from, To: to}, nil, &resp, nil); err != nil {
		return nil, fmt.Errorf("cannot get the log checksum of %s: %w", addr, err)
	}
	return &resp, nil
}

// AllConsumerOffsets returns every consumer offset committed on the broker at addr.
func (a *Admin) AllConsumerOffsets(ctx context.Context, addr string) (*protocol.ConsumerOffsetTable, error) {
	if err := a.args(ctx, "AllConsumerOffsets", argAddr(addr)); err != nil {
		return nil, err
	}
	var t protocol.ConsumerOffsetTable
	if err := a.c.callAddr(ctx, addr, protocol.CodeGetAllConsumerOffset, &protocol.ConsumerOffsetTableRequest{WithIncarnations: true}, nil, nil, &t); err != nil {
		return nil, fmt.Errorf("cannot get the consumer offsets of %s: %w", addr, err)
	}
	return &t, nil
}

// TopicStatsFrom is TopicStats asking, in each broker group of the topic's route, the first
// live member of brokerIDs (0: the master), else the group's master, else its lowest live
// member; so a group whose master is dead still answers through a slave. BrokerTopicStats.Addr
// names the member that answered. A negative brokerId is ErrInvalidArgument.
func (a *Admin) TopicStatsFrom(ctx context.Context, topic string, brokerIDs ...int64) ([]BrokerTopicStats, error) {
	var idErr error
	for _, id := range brokerIDs {
		if id < 0 {
			idErr = fmt.Errorf("%w: brokerId %d is negative", ErrInvalidArgument, id)
			break
		}
	}
	if err := a.args(ctx, "TopicStatsFrom", argTopic(topic), idErr); err != nil {
		return nil, err
	}
	data, err := a.TopicRoute(ctx, topic)
	if err != nil {
		return nil, err
	}
	bds := slices.Clone(data.BrokerDatas)
	slices.SortFunc(bds, func(x, y protocol.BrokerData) int { return strings.Compare(x.BrokerName, y.BrokerName) })
	var out []BrokerTopicStats
	var errs []error
	for i := range bds {
		bd := &bds[i]
		addr, found := "", false
		for _, id := range brokerIDs {
			if addr, found = memberAddr(bd, id); found {
				break
			}
		}
		if !found {
			if addr, _, found = pickBrokerAddr(bd, -1); !found {
				continue
			}
		}
		var st protocol.TopicStatsTable
		if err := a.c.callAddr(ctx, addr, protocol.CodeGetTopicStatsInfo, &protocol.TopicHeader{Topic: topic}, nil, nil, &st); err != nil {
			errs = append(errs, fmt.Errorf("cannot get the stats of %q from %s (%s): %w", topic, addr, bd.BrokerName, err))
			continue
		}
		out = append(out, BrokerTopicStats{BrokerName: bd.BrokerName, Addr: addr, Stats: st})
	}
	return out, errors.Join(errs...)
}

// ElectMaster makes member brokerID of broker group brokerName the group's master online
// (CODE ELECT_MASTER, mqadmin electMaster) and returns the group's master afterwards: its
// brokerId, client address and epoch. The members are looked up in a NameServer's cluster
// table, where the current master is listed as brokerId 0 whatever the brokerId of its config:
//
//   - When the group has a master, the request goes to it (Force false): the master hands its
//     role over to the member, or refuses, e.g. when the member is unknown to it or not in sync.
//     brokerID may be one the table does not list (the master's own, or a member it knows), so
//     only the master decides whether it is unknown.
//   - When the group has no master (it is down and its registration gone), the request goes to
//     member brokerID itself with Force true: it promotes itself without the old master, and
//     whatever only the old master held (not replicated to it) may be lost.
//
// Errors: ErrUnknownBroker (errors.Is) when the cluster table has no group brokerName, or,
// without a master, no live member brokerID; the NameServer's error when the table cannot be
// read; otherwise the broker's refusal as a *protocol.Error (StatusOf gives the status, the
// remark says why), or the failure to reach the broker (ErrBrokerUnavailable: nothing was sent)
// or to get its answer in time (the election may or may not have happened: clusterList or
// haStatus tells). Each error names the broker asked. The request is bounded by the request
// timeout like every Admin call.
func (a *Admin) ElectMaster(ctx context.Context, brokerName string, brokerID int64) (protocol.ElectMasterResponse, error) {
	var resp protocol.ElectMasterResponse
	var nameErr, idErr error
	if brokerName == "" {
		nameErr = fmt.Errorf("%w: no broker name", ErrInvalidArgument)
	}
	if brokerID < 0 {
		idErr = fmt.Errorf("%w: brokerId %d is negative", ErrInvalidArgument, brokerID)
	}
	if err := a.args(ctx, "ElectMaster", nameErr, idErr); err != nil {
		return resp, err
	}
	ci, err := a.c.clusterInfo(ctx)
	if err != nil {
		return resp, err
	}
	var bd *protocol.BrokerData
	for i := range ci.Brokers {
		if ci.Brokers[i].BrokerName == brokerName {
			bd = &ci.Brokers[i]
			break
		}
	}
	if bd == nil {
		return resp, fmt.Errorf("%w: the cluster table has no broker group %q", ErrUnknownBroker, brokerName)
	}
	req := protocol.ElectMasterRequest{BrokerName: brokerName, BrokerID: brokerID}
	addr, asked := bd.MasterAddr(), "master "
	if addr == "" {
		target, ok := memberAddr(bd, brokerID)
		if !ok {
			return resp, fmt.Errorf("%w: broker group %q has no master and no live member with brokerId %d (live: %s)",
				ErrUnknownBroker, brokerName, brokerID, liveMembers(bd))
		}
		addr, asked, req.Force = target, "no master, forced on ", true
	}
	if err := a.c.callAddr(ctx, addr, protocol.CodeElectMaster, &req, nil, &resp, nil); err != nil {
		return resp, fmt.Errorf("cannot elect brokerId %d master of %s (%s%s): %w", brokerID, brokerName, asked, addr, err)
	}
	return resp, nil
}

// liveMembers lists a group's members as "ID at ADDR, ...", or "none".
func liveMembers(bd *protocol.BrokerData) string {
	if len(bd.Addrs) == 0 {
		return "none"
	}
	parts := make([]string, len(bd.Addrs))
	for i, m := range bd.Addrs {
		parts[i] = fmt.Sprintf("%d at %s", m.BrokerID, m.Addr)
	}
	return strings.Join(parts, ", ")
}
