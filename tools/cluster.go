package tools

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/petrel-mq/petrel/client"
	"github.com/petrel-mq/petrel/protocol"
)

// brokerMember is one broker of the cluster table.
type brokerMember struct {
	cluster, brokerName string
	id                  int64
	addr                string
}

// clusterMembers returns every broker of cluster ("" for all clusters) in the cluster table,
// sorted by cluster, broker name and brokerId. A cluster that is named but not in the table is
// an error that lists those it holds (client.ErrUnknownCluster).
func clusterMembers(ci *protocol.ClusterInfo, cluster string) ([]brokerMember, error) {
	if err := client.CheckCluster(ci, cluster); err != nil {
		return nil, err
	}
	groups := make(map[string]*protocol.BrokerData, len(ci.Brokers))
	for i := range ci.Brokers {
		groups[ci.Brokers[i].BrokerName] = &ci.Brokers[i]
	}
	var out []brokerMember
	for _, ce := range ci.Clusters {
		if cluster != "" && ce.Name != cluster {
			continue
		}
		for _, name := range ce.BrokerNames {
			bd := groups[name]
			if bd == nil {
				continue
			}
			for _, ba := range bd.Addrs {
				out = append(out, brokerMember{cluster: ce.Name, brokerName: name, id: ba.BrokerID, addr: ba.Addr})
			}
		}
	}
	slices.SortFunc(out, func(x, y brokerMember) int {
		return cmp.Or(strings.Compare(x.cluster, y.cluster), strings.Compare(x.brokerName, y.brokerName), cmp.Compare(x.id, y.id))
	})
	return out, nil
}

// fanOut runs fn(0..n-1) concurrently and returns their errors joined in index order.
func fanOut(n int, fn func(i int) error) error {
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() { errs[i] = fn(i) })
	}
	wg.Wait()
	return errors.Join(errs...)
}

// runtimeInfos asks every member for its runtime statistics, concurrently; a member that fails
// has a nil table.
func runtimeInfos(ctx context.Context, a *client.Admin, members []brokerMember) ([]*protocol.KVTable, error) {
	kvs := make([]*protocol.KVTable, len(members))
	err := fanOut(len(members), func(i int) error {
		var err error
		kvs[i], err = a.BrokerRuntimeInfo(ctx, members[i].addr)
		return err
	})
	return kvs, err
}

// ClusterList prints every broker of the cluster table (of cluster, or of every cluster when
// "") with mqadmin clusterList's first columns: version, put and get TPS from the broker's
// runtime statistics, and #ACTIVATED (the broker's brokerActive key, or true when it answered
// and has none). Petrel has no send/pull thread-pool queues, so the LOAD part of the TPS
// columns is not printed. A broker that does not answer keeps its row, with dashes, and its
// error is returned after the table.
func ClusterList(ctx context.Context, w io.Writer, a *client.Admin, cluster string) error {
	if err := args(ctx, w); err != nil {
		return err
	}
	ci, err := a.ClusterInfo(ctx)
	if err != nil {
		return err
	}
	members, err := clusterMembers(ci, cluster)
	if err != nil {
		return err
	}
	kvs, errs := runtimeInfos(ctx, a, members)
	tw := newTable(w)
	fmt.Fprintln(tw, "#Cluster Name\t#Broker Name\t#BID\t#Addr\t#Version\t#InTPS(LOAD)\t#OutTPS(LOAD)\t#ACTIVATED")
	for i, m := range members {
		version, in, out, active := noValue, noValue, noValue, noValue
		if kv := kvs[i]; kv != nil {
			version = cmp.Or(kv.Get("brokerVersionDesc"), noValue)
			in = formatTPS(kv.Get("putTps"))
			out = formatTPS(kv.Get("getTransferredTps"))
			active = cmp.Or(kv.Get("brokerActive"), "true")
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%s\t%s\t%s\t%s\n", m.cluster, m.brokerName, m.id, m.addr, version, in, out, active)
	}
	return errors.Join(tw.Flush(), errs)
}

// formatTPS renders the first of the space-separated rates of a runtime statistic (RocketMQ
// reports several windows) with two decimals, as mqadmin does.
func formatTPS(v string) string {
	fields := strings.Fields(v)
	if len(fields) == 0 {
		return noValue
	}
	f, err := strconv.ParseFloat(fields[0], 64)
	if err != nil {
		return fields[0]
	}
	return strconv.FormatFloat(f, 'f', 2, 64)
}

// BrokerStatus prints the runtime statistics of the broker at brokerAddr, one "key: value" line
// per statistic sorted by key (mqadmin brokerStatus -b). With cluster instead, it prints those
// of every broker of the cluster, masters and slaves, each line prefixed with the broker's
// address; brokers that fail are left out and their errors returned after the others.
func BrokerStatus(ctx context.Context, w io.Writer, a *client.Admin, brokerAddr, cluster string) error {
	if err := args(ctx, w); err != nil {
		return err
	}
	members, err := brokerTargets(ctx, a, brokerAddr, cluster)
	if err != nil {
		return err
	}
	if brokerAddr != "" {
		kv, err := a.BrokerRuntimeInfo(ctx, brokerAddr)
		if err != nil {
			return err
		}
		return printKV(w, "", kv)
	}
	kvs, errs := runtimeInfos(ctx, a, members)
	for i, m := range members {
		if kvs[i] == nil {
			continue
		}
		if err := printKV(w, m.addr, kvs[i]); err != nil {
			return err
		}
	}
	return errs
}

// brokerTargets checks a -b BROKERADDR / -c CLUSTER choice (exactly one) and returns the
// members of the cluster for -c (nil for -b: the caller asks brokerAddr alone).
func brokerTargets(ctx context.Context, a *client.Admin, brokerAddr, cluster string) ([]brokerMember, error) {
	switch {
	case brokerAddr != "" && cluster != "":
		return nil, errors.New("give -b BROKERADDR or -c CLUSTER, not both")
	case brokerAddr != "":
		return nil, nil
	case cluster == "":
		return nil, errors.New("give -b BROKERADDR or -c CLUSTER")
	}
	ci, err := a.ClusterInfo(ctx)
	if err != nil {
		return nil, err
	}
	return clusterMembers(ci, cluster)
}

// printKV prints a runtime table sorted by key as mqadmin's printBrokerRuntimeStats: "%-32s: %s",
// prefixed with "%-24s " and the broker's address when addr is set.
func printKV(w io.Writer, addr string, kv *protocol.KVTable) error {
	entries := slices.Clone(kv.Entries)
	slices.SortStableFunc(entries, func(x, y protocol.KV) int { return strings.Compare(x.Key, y.Key) })
	for _, e := range entries {
		var err error
		if addr != "" {
			_, err = fmt.Fprintf(w, "%-24s %-32s: %s\n", addr, e.Key, e.Value)
		} else {
			_, err = fmt.Fprintf(w, "%-32s: %s\n", e.Key, e.Value)
		}
		if err != nil {
			return err
		}
	}
	return nil
}
