package tools

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"slices"
	"strings"

	"github.com/petrel-mq/petrel/client"
	"github.com/petrel-mq/petrel/protocol"
)

// Defaults of updateTopic's flags, as mqadmin's.
const (
	DefaultQueueNums int32 = 8
	DefaultPerm            = protocol.PermReadWrite
)

// UpdateTopicOptions are updateTopic's flags. Exactly one of BrokerAddr and Cluster is set.
type UpdateTopicOptions struct {
	Topic string
	// BrokerAddr (-b) creates the topic on that broker only (host:port).
	BrokerAddr string
	// Cluster (-c) creates the topic on the master of every broker group of the cluster.
	Cluster string
	// ReadQueueNums (-r) and WriteQueueNums (-w) are the queue counts (mqadmin's default is
	// DefaultQueueNums).
	ReadQueueNums  int32
	WriteQueueNums int32
	// Perm (-p) is 2 (write), 4 (read) or 6 (read and write; mqadmin's default, DefaultPerm).
	Perm int32
}

// UpdateTopic creates a topic or updates its queue counts and permission (mqadmin updateTopic).
// It prints "create topic to ADDR success." for every broker that took it and then the
// TopicConfig line; on a cluster where some masters failed it prints the successes and returns
// the failures. Brokers announce the topic to the NameServers asynchronously, so topicRoute may
// need a moment to show it.
func UpdateTopic(ctx context.Context, w io.Writer, a *client.Admin, o UpdateTopicOptions) error {
	if err := args(ctx, w); err != nil {
		return err
	}
	if err := protocol.ValidateTopic([]byte(o.Topic)); err != nil {
		return err
	}
	if o.ReadQueueNums <= 0 || o.WriteQueueNums <= 0 {
		return fmt.Errorf("queue counts must be positive: -r %d, -w %d", o.ReadQueueNums, o.WriteQueueNums)
	}
	switch o.Perm {
	case protocol.PermWrite, protocol.PermRead, protocol.PermReadWrite:
	default:
		return fmt.Errorf("-p %d: the permission must be 2 (W), 4 (R) or 6 (RW)", o.Perm)
	}
	var target string
	switch {
	case o.BrokerAddr != "" && o.Cluster != "":
		return errors.New("give -b BROKERADDR or -c CLUSTER, not both")
	case o.BrokerAddr != "":
		if _, _, err := net.SplitHostPort(o.BrokerAddr); err != nil {
			return fmt.Errorf("-b %q: want host:port", o.BrokerAddr)
		}
		target = o.BrokerAddr
	case o.Cluster != "":
		if strings.Contains(o.Cluster, ":") {
			return fmt.Errorf("-c %q: a cluster name has no ':' (use -b for a broker address)", o.Cluster)
		}
		target = o.Cluster
	default:
		return errors.New("give -b BROKERADDR or -c CLUSTER")
	}
	cfg := protocol.TopicConfig{Topic: o.Topic, ReadQueueNums: o.ReadQueueNums, WriteQueueNums: o.WriteQueueNums, Perm: o.Perm}
	done, err := a.CreateTopic(ctx, target, cfg)
	for _, t := range done {
		fmt.Fprintf(w, "create topic to %s success.\n", t.Addr)
	}
	if err != nil {
		return err
	}
	_, err = fmt.Fprintf(w, "TopicConfig [topicName=%s, readQueueNums=%d, writeQueueNums=%d, perm=%s]\n",
		cfg.Topic, cfg.ReadQueueNums, cfg.WriteQueueNums, permString(cfg.Perm))
	return err
}

// routeJSON is TopicRouteData as mqadmin prints it (fastjson: fields in alphabetical order,
// brokerAddrs keyed by brokerId). encoding/json quotes the brokerId keys, which fastjson does
// not, so the output is valid JSON.
type routeJSON struct {
	BrokerDatas []brokerDataJSON `json:"brokerDatas"`
	QueueDatas  []queueDataJSON  `json:"queueDatas"`
}

type brokerDataJSON struct {
	BrokerAddrs map[int64]string `json:"brokerAddrs"`
	BrokerName  string           `json:"brokerName"`
	Cluster     string           `json:"cluster"`
}

type queueDataJSON struct {
	BrokerName     string `json:"brokerName"`
	Perm           int32  `json:"perm"`
	ReadQueueNums  int32  `json:"readQueueNums"`
	WriteQueueNums int32  `json:"writeQueueNums"`
}

// TopicRoute prints the topic's route from a NameServer as JSON (mqadmin topicRoute), broker
// groups sorted by name. errors.Is(err, client.ErrTopicNotExist) when no broker serves it.
func TopicRoute(ctx context.Context, w io.Writer, a *client.Admin, topic string) error {
	if err := args(ctx, w); err != nil {
		return err
	}
	data, err := a.TopicRoute(ctx, topic)
	if err != nil {
		return err
	}
	out := routeJSON{BrokerDatas: []brokerDataJSON{}, QueueDatas: []queueDataJSON{}}
	for _, bd := range data.BrokerDatas {
		addrs := make(map[int64]string, len(bd.Addrs))
		for _, ba := range bd.Addrs {
			addrs[ba.BrokerID] = ba.Addr
		}
		out.BrokerDatas = append(out.BrokerDatas, brokerDataJSON{BrokerAddrs: addrs, BrokerName: bd.BrokerName, Cluster: bd.Cluster})
	}
	for _, qd := range data.QueueDatas {
		out.QueueDatas = append(out.QueueDatas, queueDataJSON{BrokerName: qd.BrokerName, Perm: qd.Perm, ReadQueueNums: qd.ReadQueueNums, WriteQueueNums: qd.WriteQueueNums})
	}
	slices.SortFunc(out.BrokerDatas, func(x, y brokerDataJSON) int { return strings.Compare(x.BrokerName, y.BrokerName) })
	slices.SortFunc(out.QueueDatas, func(x, y queueDataJSON) int { return strings.Compare(x.BrokerName, y.BrokerName) })
	b, err := json.MarshalIndent(out, "", "\t")
	if err != nil {
		return err
	}
	_, err = fmt.Fprintf(w, "%s\n", b)
	return err
}

// TopicStatus prints min and max offset and the store time of the newest message of every
// queue of the topic on every broker group of its route (mqadmin topicStatus). The time is
// empty for a queue that holds nothing. Groups that fail are left out and their errors
// returned after the table.
func TopicStatus(ctx context.Context, w io.Writer, a *client.Admin, topic string) error {
	if err := args(ctx, w); err != nil {
		return err
	}
	stats, err := a.TopicStats(ctx, topic)
	if len(stats) == 0 && err != nil {
		return err
	}
	tw := newTable(w)
	fmt.Fprintln(tw, "#Broker Name\t#QID\t#Min Offset\t#Max Offset\t#Last Updated")
	for _, bs := range stats {
		for _, q := range bs.Stats.Queues {
			fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%s\n", bs.BrokerName, q.QueueID, q.MinOffset, q.MaxOffset,
				formatMillis(q.LastUpdateTimestamp, layoutMillis, ""))
		}
	}
	return errors.Join(tw.Flush(), err)
}

// TopicList prints the names of the topics stored on the masters of cluster ("" for every
// cluster), sorted, one per line (mqadmin topicList). Masters that fail are left out and their
// errors returned after the list. With brokerAddr instead, it prints the topic table of that
// broker itself, a slave's too: a row per topic with its queue counts and permission.
func TopicList(ctx context.Context, w io.Writer, a *client.Admin, brokerAddr, cluster string) error {
	if err := args(ctx, w); err != nil {
		return err
	}
	if brokerAddr != "" && cluster != "" {
		return errors.New("give -b BROKERADDR or -c CLUSTER, not both")
	}
	if brokerAddr != "" {
		return brokerTopics(ctx, w, a, brokerAddr)
	}
	masters, err := a.ClusterMasters(ctx, cluster)
	if errors.Is(err, client.ErrNoMaster) {
		return fmt.Errorf("%w; topicList -b BROKERADDR lists the topics of a slave", err)
	}
	if err != nil {
		return err
	}
	lists := make([]*protocol.TopicConfigList, len(masters))
	errs := fanOut(len(masters), func(i int) error {
		var err error
		lists[i], err = a.AllTopicConfig(ctx, masters[i].Addr)
		return err
	})
	var names []string
	for _, l := range lists {
		if l == nil {
			continue
		}
		for _, tc := range l.Topics {
			names = append(names, tc.Topic)
		}
	}
	slices.Sort(names)
	for _, n := range slices.Compact(names) {
		if _, err := fmt.Fprintln(w, n); err != nil {
			return err
		}
	}
	return errs
}

// brokerTopics prints the topic table of the broker at addr, sorted by topic: #Topic
// #ReadQueueNums #WriteQueueNums #Perm.
func brokerTopics(ctx context.Context, w io.Writer, a *client.Admin, addr string) error {
	l, err := a.AllTopicConfig(ctx, addr)
	if err != nil {
		return err
	}
	topics := slices.Clone(l.Topics)
	slices.SortFunc(topics, func(x, y protocol.TopicConfig) int { return strings.Compare(x.Topic, y.Topic) })
	tw := newTable(w)
	fmt.Fprintln(tw, "#Topic\t#ReadQueueNums\t#WriteQueueNums\t#Perm")
	for _, tc := range topics {
		fmt.Fprintf(tw, "%s\t%d\t%d\t%s\n", tc.Topic, tc.ReadQueueNums, tc.WriteQueueNums, permString(tc.Perm))
	}
	return tw.Flush()
}

// DeleteTopic deletes a topic from every master of cluster, then from every NameServer (mqadmin
// deleteTopic -c CLUSTER -t TOPIC): its consume queues and every group's committed offsets of
// it go on every member of each group, and its commit-log bytes with retention. It prints
// mqadmin's lines, one per master and one for the NameServers; a master that held no such
// topic says so instead ("did not exist ... (nothing to delete)"), which is still a success.
// When a master fails, or a group of the cluster has no master, the NameServers are left alone
// (run the command again) and the error says so.
func DeleteTopic(ctx context.Context, w io.Writer, a *client.Admin, cluster, topic string) error {
	if err := args(ctx, w); err != nil {
		return err
	}
	if err := protocol.ValidateTopic([]byte(topic)); err != nil {
		return err
	}
	if err := clusterArg(cluster); err != nil {
		return err
	}
	brokers, nss, err := a.DeleteTopic(ctx, cluster, topic)
	absent := 0
	for _, b := range brokers {
		if b.Absent {
			absent++
			fmt.Fprintf(w, "topic [%s] did not exist on broker [%s] (nothing to delete).\n", topic, b)
		} else {
			fmt.Fprintf(w, "delete topic [%s] from broker [%s] success.\n", topic, b)
		}
	}
	switch {
	case len(brokers) == 0 || err != nil:
	case absent == len(brokers):
		fmt.Fprintf(w, "topic [%s] did not exist in cluster [%s] (nothing to delete).\n", topic, cluster)
	default:
		fmt.Fprintf(w, "delete topic [%s] from cluster [%s] success.\n", topic, cluster)
	}
	if len(nss) > 0 {
		fmt.Fprintf(w, "delete topic [%s] from NameServer success.\n", topic)
	}
	return err
}

// DeleteSubGroup removes a consumer group's committed offsets of every topic from every master
// of cluster (mqadmin deleteSubGroup -c CLUSTER -g GROUP); the slaves drop them at their next
// offset sync. It prints mqadmin's line per master; a master that held no offset of the group
// says so instead ("did not exist ... (nothing to delete)"), which is still a success.
func DeleteSubGroup(ctx context.Context, w io.Writer, a *client.Admin, cluster, group string) error {
	if err := args(ctx, w); err != nil {
		return err
	}
	if err := protocol.ValidateGroup([]byte(group)); err != nil {
		return err
	}
	if err := clusterArg(cluster); err != nil {
		return err
	}
	done, err := a.DeleteSubGroup(ctx, cluster, group)
	for _, b := range done {
		if b.Absent {
			fmt.Fprintf(w, "subscription group [%s] did not exist on broker [%s] in cluster [%s]: no offset committed there (nothing to delete).\n", group, b, cluster)
		} else {
			fmt.Fprintf(w, "delete subscription group [%s] from broker [%s] in cluster [%s] success.\n", group, b, cluster)
		}
	}
	return err
}

// clusterArg checks the -c of a command that needs a cluster name.
func clusterArg(cluster string) error {
	if cluster == "" || strings.Contains(cluster, ":") {
		return fmt.Errorf("-c %q: give the cluster name (clusterList lists them)", cluster)
	}
	return nil
}
