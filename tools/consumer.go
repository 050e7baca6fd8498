package tools

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"

	"github.com/petrel-mq/petrel/client"
	"github.com/petrel-mq/petrel/protocol"
)

// notAvailable fills cells Petrel cannot know: which client pulls a queue (#Client IP; the
// members of a group share the queues among themselves, and brokers only know who the members
// are) and the consume rate of a group (Consume TPS; brokers keep none).
const notAvailable = "N/A"

// ErrNoConsumeStats is returned by ConsumerProgress when no broker has an offset of the group.
var ErrNoConsumeStats = errors.New("no consume stats: the group has committed no offset")

// ConsumerProgress prints a consumer group's progress on every queue it has committed an offset
// for, on the groups serving topic (or on every master when topic is ""), as mqadmin
// consumerProgress -g: broker offset (the queue's max offset), consumer offset, their difference
// and the store time of the last consumed message, then the totals, then the client ids of the
// group's live members ("Clients: id1, id2", or "none"), which the brokers know from the
// members' heartbeats (Admin.ConsumerClients). #Client IP and Consume TPS are "N/A": the members
// assign the queues among themselves, so no broker knows which member pulls a queue, and
// brokers keep no per-group rate. Brokers that fail are left out and their errors returned
// after the table.
func ConsumerProgress(ctx context.Context, w io.Writer, a *client.Admin, group, topic string) error {
	if err := args(ctx, w); err != nil {
		return err
	}
	stats, err := a.ConsumeStats(ctx, group, topic)
	type row struct {
		brokerName string
		q          protocol.ConsumeQueueStats
	}
	var rows []row
	for _, bs := range stats {
		for _, q := range bs.Stats.Queues {
			rows = append(rows, row{brokerName: bs.BrokerName, q: q})
		}
	}
	if len(rows) == 0 {
		if err != nil {
			return err
		}
		if topic != "" {
			return fmt.Errorf("%w: group %q on topic %q", ErrNoConsumeStats, group, topic)
		}
		return fmt.Errorf("%w: group %q", ErrNoConsumeStats, group)
	}
	// mqadmin sorts by MessageQueue: topic, broker name, queue id.
	slices.SortFunc(rows, func(x, y row) int {
		return cmp.Or(strings.Compare(x.q.Topic, y.q.Topic), strings.Compare(x.brokerName, y.brokerName), cmp.Compare(x.q.QueueID, y.q.QueueID))
	})
	tw := newTable(w)
	fmt.Fprintln(tw, "#Topic\t#Broker Name\t#QID\t#Broker Offset\t#Consumer Offset\t#Client IP\t#Diff\t#LastTime")
	var diffTotal int64
	for _, r := range rows {
		diff := r.q.BrokerOffset - r.q.ConsumerOffset
		diffTotal += diff
		fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%d\t%s\t%d\t%s\n", r.q.Topic, r.brokerName, r.q.QueueID,
			r.q.BrokerOffset, r.q.ConsumerOffset, notAvailable, diff, formatMillis(r.q.LastTimestamp, layoutSeconds, notAvailable))
	}
	if ferr := tw.Flush(); ferr != nil {
		return ferr
	}
	fmt.Fprintf(w, "\nConsume TPS: %s\nDiff Total: %d\n", notAvailable, diffTotal)
	ids, cerr := a.ConsumerClients(ctx, group, topic)
	clients := "none"
	if len(ids) > 0 {
		clients = strings.Join(ids, ", ")
	} else if cerr != nil {
		clients = notAvailable
	}
	_, werr := fmt.Fprintf(w, "Clients: %s\n", clients)
	return errors.Join(err, cerr, werr)
}
