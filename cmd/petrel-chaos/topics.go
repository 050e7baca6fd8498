package main

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/petrel-mq/petrel/protocol"
)

// scratchTopic is what the topic-change faults left a group's scratch topic as: known false
// after a change whose outcome the harness could not learn (then the next acknowledged change
// says again); exists and queues as acknowledged.
type scratchTopic struct {
	known  bool
	exists bool
	queues int32
}

// topicChange is one change of a scratch topic.
type topicChange struct {
	delete bool
	queues int32 // the queue count created or changed to
}

// nextTopicChange decides the change a topic-change fault makes to a scratch topic in state cur
// from the cycle's draw: one that does not exist (or whose state is unknown) is created; one that
// exists is deleted one time in three, otherwise its queue count changes (1 to 8, never the
// count it has).
func nextTopicChange(cur scratchTopic, pick uint64) topicChange {
	q := int32(1 + pick%8)
	if !cur.known || !cur.exists {
		return topicChange{queues: q}
	}
	if (pick/8)%3 == 0 {
		return topicChange{delete: true}
	}
	if q == cur.queues {
		q = q%8 + 1
	}
	return topicChange{queues: q}
}

// scratchName is group g's scratch topic.
func scratchName(g *group) string { return "petrel-chaos-scratch-" + g.name }

// changeTopic is the topic-change fault: the change of g's scratch topic nextTopicChange
// decides, through petrelctl as an operator runs it, recorded when acknowledged.
func (h *harness) changeTopic(ctx context.Context, c *cycle, m *member, pick uint64) error {
	if h.scratch == nil {
		h.scratch = map[string]scratchTopic{}
	}
	topic := scratchName(c.g)
	cur := h.scratch[c.g.name]
	ch := nextTopicChange(cur, pick)
	c.targets = []*member{m}
	var err error
	if ch.delete {
		c.what = fmt.Sprintf("deleteTopic %s", topic)
		_, err = h.ctl(ctx, 30*time.Second, "deleteTopic", "-n", h.nsAddr(), "-c", clusterName, "-t", topic)
	} else {
		q := strconv.Itoa(int(ch.queues))
		c.what = fmt.Sprintf("updateTopic %s -r %s -w %s on master %s", topic, q, q, m.name)
		_, err = h.ctl(ctx, 30*time.Second, "updateTopic", "-b", m.addr(), "-t", topic, "-r", q, "-w", q)
	}
	for _, mm := range c.g.members {
		mm.proc.note("chaos: %s (cycle %d)", c.what, c.n)
	}
	if err != nil {
		h.scratch[c.g.name] = scratchTopic{} // the outcome is not known
		return err
	}
	h.scratch[c.g.name] = scratchTopic{known: true, exists: !ch.delete, queues: ch.queues}
	return nil
}

// tableVerdict says whether one member's topic table agrees with a scratch topic's acknowledged
// state: "" when it does, else what differs.
func tableVerdict(topic string, want scratchTopic, table []protocol.TopicConfig) string {
	var have *protocol.TopicConfig
	for i := range table {
		if table[i].Topic == topic {
			have = &table[i]
		}
	}
	switch {
	case !want.known:
		return ""
	case !want.exists && have != nil:
		return fmt.Sprintf("holds %s (%d queues), deleted", topic, have.WriteQueueNums)
	case want.exists && have == nil:
		return fmt.Sprintf("lacks %s, created with %d queues", topic, want.queues)
	case want.exists && (have.ReadQueueNums != want.queues || have.WriteQueueNums != want.queues):
		return fmt.Sprintf("holds %s with %d/%d queues, acknowledged with %d", topic, have.ReadQueueNums, have.WriteQueueNums, want.queues)
	}
	return ""
}

// topicTablesTimeout bounds the wait for every member's topic table to agree at the end: a few
// of a static slave's config syncs.
const topicTablesTimeout = 15 * time.Second

// checkTopicTables waits, up to timeout (a static slave takes its master's table at its next
// config sync), until every member's topic table agrees with what the topic-change faults had
// acknowledged, and returns what still differs.
func (h *harness) checkTopicTables(ctx context.Context, timeout time.Duration) []string {
	if len(h.scratch) == 0 {
		return nil
	}
	var addrs []string
	for _, g := range h.groups {
		for _, m := range g.members {
			addrs = append(addrs, m.addr())
		}
	}
	deadline := time.Now().Add(timeout)
	for {
		var diffs []string
		resp, err := h.probe.call(probeReq{Op: "topics", Addrs: addrs}, 3*time.Second)
		if err != nil {
			diffs = append(diffs, "cannot read the topic tables: "+err.Error())
		}
		for _, g := range h.groups {
			want, ok := h.scratch[g.name]
			if !ok {
				continue
			}
			for _, m := range g.members {
				if resp == nil {
					break
				}
				table, ok := resp.Topics[m.addr()]
				if !ok {
					diffs = append(diffs, fmt.Sprintf("%s: no topic table: %s", m.label(), resp.HAErr[m.addr()]))
					continue
				}
				if v := tableVerdict(scratchName(g), want, table); v != "" {
					diffs = append(diffs, m.label()+" "+v)
				}
			}
		}
		if len(diffs) == 0 || time.Now().After(deadline) || sleepCtx(ctx, 250*time.Millisecond) != nil {
			return diffs
		}
	}
}

// describeScratch says what the scratch topics were left as, for the report.
func (h *harness) describeScratch() string {
	var parts []string
	for _, g := range h.groups {
		st, ok := h.scratch[g.name]
		switch {
		case !ok:
		case !st.known:
			parts = append(parts, g.name+": unknown (last change not acknowledged)")
		case !st.exists:
			parts = append(parts, g.name+": deleted")
		default:
			parts = append(parts, fmt.Sprintf("%s: %d queues", g.name, st.queues))
		}
	}
	return strings.Join(parts, ", ")
}
