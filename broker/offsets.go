package broker

import (
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"math"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/petrel-mq/petrel/internal/fsutil"
	"github.com/petrel-mq/petrel/protocol"
)

// offsetTable holds committed consumer offsets per (consumer group, topic, queue): the next
// queue offset the group will consume. A commit never moves an offset backwards, and no offset
// is held beyond its queue's max offset (decideOffset): a commit or merge beyond it is lowered
// to it, and so is every held offset when the log loses entries (clampToLog). The table is
// persisted to consumerOffset.json (RocketMQ's file name and shape: "topic@group" -> queue ->
// offset) by the broker's flush goroutine every FlushConsumerOffsetInterval and on shutdown.
type offsetTable struct {
	path string
	// maxOffset returns a queue's max offset in the store (commitlog.Store.MaxOffset); nil
	// until the store is open, and then no offset is checked. It is called under mu, so that a
	// commit that read a queue's max before the log was reset is done before clampToLog runs.
	maxOffset func(topic []byte, queueID int32) int64
	// maxGroups caps the consumer groups a commit may add (maxConsumerGroups; 0: no cap), so
	// that commits naming ever new groups leave a bounded table, file and metric series. Set
	// before the table is used.
	maxGroups int
	// persistMu serialises persist from the table's copy to the file's rename, so that an older
	// copy never replaces a newer one (the flush goroutine, admin workers and Close persist).
	persistMu sync.Mutex
	mu        sync.Mutex // guards groups, deletedGroups, deletedTopics and dirty
	dirty     bool
	// groups maps group -> topic -> queue id -> offset. Nested maps keyed by string let the
	// data path look up []byte names without allocating.
	groups map[string]map[string]map[int32]int64
	// deletedGroups maps a group this member deleted (DELETE_SUBSCRIPTIONGROUP) to the time of
	// the deletion (Unix ms): merges from other members leave it out, and their next merge is
	// answered with it so that they drop it too, until a commit of the group here or
	// groupTombstoneTTL. Persisted with the offsets.
	deletedGroups map[string]int64
	// deletedTopics maps a topic this member deleted to the time of the deletion: merges leave
	// its offsets out for topicTombstoneTTL, while a slave that has not replicated the deletion
	// record yet may still send them. Memory only.
	deletedTopics map[string]time.Time
}

// How long a deletion is kept for merges to leave out (see offsetTable). A group's outlives
// any slave's absence it is likely to meet; a topic's needs only cover a slave's offset sync
// racing with the deletion record's replication.
const (
	groupTombstoneTTL = 24 * time.Hour
	topicTombstoneTTL = time.Minute
)

// offsetDecision is what a commit or a merge does to one queue's committed offset.
type offsetDecision struct {
	// off is the offset the queue holds afterwards; store is false when that is the one it
	// held already.
	off   int64
	store bool
	// clamped reports that the offset asked for, or the one held, was beyond the queue's max
	// offset and was lowered to it.
	clamped bool
	// refused reports a commit of a new group past the table's cap (offsetTable.commit).
	refused bool
}

// decideOffset decides a commit or merge of off onto a queue that holds the committed offset
// cur (held false: none) and whose max offset is maxOff. Offsets never move backwards, and no
// queue holds an offset beyond its max offset: the larger of the two is kept, each first
// lowered to maxOff. An offset equal to maxOff is valid (the group consumed everything). Only
// a log that lost entries (a master that lost its store, a slave that reset or cut its
// diverged log) has a max below a group's offset; a commit or merge beyond it comes from a
// consumer or member that read another log, and the queue's offsets below maxOff are what the
// group may still have to consume. Nothing is ever raised above maxOff: a master's max only
// grows while it serves, so a commit made against what it served is never lowered.
func decideOffset(cur int64, held bool, off, maxOff int64) offsetDecision {
	d := offsetDecision{off: min(off, maxOff), clamped: off > maxOff}
	if !held {
		d.store = true
		return d
	}
	if cur > maxOff {
		d.clamped = true
	}
	d.off = max(d.off, min(cur, maxOff))
	d.store = d.off != cur
	return d
}

// clampedOffset describes an offset lowered to its queue's max offset, for the log.
type clampedOffset struct {
	Group, Topic string
	QueueID      int32
	Offset, Max  int64
}

func (c clampedOffset) String() string {
	return fmt.Sprintf("group %s on %s queue %d: %d lowered to the max offset %d", c.Group, c.Topic, c.QueueID, c.Offset, c.Max)
}

type offsetFile struct {
	OffsetTable map[string]map[string]int64 `json:"offsetTable"`
	// DeletedGroups maps a deleted group to the time of its deletion (Unix ms).
	DeletedGroups map[string]int64 `json:"deletedGroups,omitempty"`
}

func openOffsetTable(dir string) (*offsetTable, error) {
	t := &offsetTable{path: filepath.Join(dir, "consumerOffset.json"), groups: map[string]map[string]map[int32]int64{},
		deletedGroups: map[string]int64{}, deletedTopics: map[string]time.Time{}}
	data, err := os.ReadFile(t.path)
	if errors.Is(err, os.ErrNotExist) {
		return t, nil
	}
	if err != nil {
		return nil, fmt.Errorf("cannot read consumer offsets: %w", err)
	}
	var file offsetFile
	if err := json.Unmarshal(data, &file); err != nil {
		return nil, fmt.Errorf("cannot decode consumer offsets %s: %w", t.path, err)
	}
	for key, queues := range file.OffsetTable {
		topic, group, ok := strings.Cut(key, "@")
		if !ok {
			return nil, fmt.Errorf("consumer offsets %s: bad key %q (want topic@group)", t.path, key)
		}
		for q, off := range queues {
			qid, err := strconv.ParseInt(q, 10, 32)
			if err != nil {
				return nil, fmt.Errorf("consumer offsets %s: bad queue id %q", t.path, q)
			}
			t.setLocked(group, topic, int32(qid), off)
		}
	}
	maps.Copy(t.deletedGroups, file.DeletedGroups)
	return t, nil
}

func (t *offsetTable) setLocked(group, topic string, qid int32, off int64) {
	g := t.groups[group]
	if g == nil {
		g = map[string]map[int32]int64{}
		t.groups[group] = g
	}
	q := g[topic]
	if q == nil {
		q = map[int32]int64{}
		g[topic] = q
	}
	q[qid] = off
}

// maxLocked returns the queue's max offset, or the largest int64 before the store is open.
// Caller holds mu.
func (t *offsetTable) maxLocked(topic []byte, qid int32) int64 {
	if t.maxOffset == nil {
		return math.MaxInt64
	}
	return t.maxOffset(topic, qid)
}

// commit records off for the queue as decideOffset says, and returns the decision and the
// queue's max offset. group and topic may be views of a request frame: they are copied only
// when a new entry is created. A commit of a group the table does not hold while it holds
// maxGroups is refused (d.refused): nothing is recorded.
func (t *offsetTable) commit(group, topic []byte, qid int32, off int64) (offsetDecision, int64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	maxOff := t.maxLocked(topic, qid)
	g, known := t.groups[string(group)]
	if !known && t.maxGroups > 0 && len(t.groups) >= t.maxGroups {
		return offsetDecision{refused: true}, maxOff
	}
	q := g[string(topic)]
	cur, held := q[qid]
	d := decideOffset(cur, held, off, maxOff)
	if !d.store {
		return d, maxOff
	}
	t.dirty = true
	if q != nil {
		q[qid] = d.off
	} else {
		t.setLocked(string(group), string(topic), qid, d.off)
	}
	if len(t.deletedGroups) != 0 {
		delete(t.deletedGroups, string(group)) // the group is in use again
	}
	return d, maxOff
}

// get returns the committed offset and whether one exists.
func (t *offsetTable) get(group, topic []byte, qid int32) (int64, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	off, ok := t.groups[string(group)][string(topic)][qid]
	return off, ok
}

// groupQueues returns the committed offsets of a group, optionally of one topic, sorted.
func (t *offsetTable) groupQueues(group, topic string) []protocol.ConsumeQueueStats {
	t.mu.Lock()
	defer t.mu.Unlock()
	var out []protocol.ConsumeQueueStats
	for tp, queues := range t.groups[group] {
		if topic != "" && tp != topic {
			continue
		}
		for qid, off := range queues {
			out = append(out, protocol.ConsumeQueueStats{Topic: tp, QueueID: qid, ConsumerOffset: off})
		}
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Topic != out[j].Topic {
			return out[i].Topic < out[j].Topic
		}
		return out[i].QueueID < out[j].QueueID
	})
	return out
}

// groupCount returns the number of consumer groups with committed offsets.
func (t *offsetTable) groupCount() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.groups)
}

// persist writes the table if it changed since the last write.
func (t *offsetTable) persist() error {
	t.persistMu.Lock()
	defer t.persistMu.Unlock()
	t.mu.Lock()
	if !t.dirty {
		t.mu.Unlock()
		return nil
	}
	file := offsetFile{OffsetTable: map[string]map[string]int64{}, DeletedGroups: maps.Clone(t.deletedGroups)}
	for group, topics := range t.groups {
		for topic, queues := range topics {
			m := make(map[string]int64, len(queues))
			for qid, off := range queues {
				m[strconv.Itoa(int(qid))] = off
			}
			file.OffsetTable[topic+"@"+group] = m
		}
	}
	t.dirty = false
	t.mu.Unlock()
	data, err := json.MarshalIndent(&file, "", "  ")
	if err == nil {
		err = fsutil.WriteFileAtomic(t.path, data, 0o644)
	}
	if err != nil {
		t.mu.Lock()
		t.dirty = true
		t.mu.Unlock()
		return fmt.Errorf("cannot persist consumer offsets: %w", err)
	}
	return nil
}

// table returns every committed offset, sorted.
func (t *offsetTable) table() protocol.ConsumerOffsetTable {
	t.mu.Lock()
	defer t.mu.Unlock()
	var out protocol.ConsumerOffsetTable
	for group, topics := range t.groups {
		for topic, queues := range topics {
			for qid, off := range queues {
				out.Offsets = append(out.Offsets, protocol.ConsumerOffset{ConsumerGroup: group, Topic: topic, QueueID: qid, Offset: off})
			}
		}
	}
	sort.Slice(out.Offsets, func(i, j int) bool {
		a, b := &out.Offsets[i], &out.Offsets[j]
		if a.ConsumerGroup != b.ConsumerGroup {
			return a.ConsumerGroup < b.ConsumerGroup
		}
		if a.Topic != b.Topic {
			return a.Topic < b.Topic
		}
		return a.QueueID < b.QueueID
	})
	return out
}

// mergeResult is what a merge did: how many offsets moved, how many of those asked for (or
// held) were beyond their queue's max offset and lowered to it, and the first such one.
type mergeResult struct {
	moved, clamped int
	first          clampedOffset
	// refused lists the groups left out because this member deleted them.
	refused []string
}

// mergeVerdict is what a master does with one offset a slave's merge sends.
type mergeVerdict uint8

const (
	mergeTaken        mergeVerdict = iota // merged as decideOffset says
	mergeLeftOut                          // its topic is not here, or was deleted moments ago
	mergeGroupDeleted                     // its group was deleted here: the slave must drop it
)

// mergeKept decides whether a master takes a slave's offset of group on topic: not for a
// topic it does not have (deleted, or never created here: the offset would outlive the
// topic and land on one created later under its name), nor one it deleted less than
// topicTombstoneTTL ago (a slave that has not replicated the deletion record yet still holds
// the old topic's offsets, and the topic may exist again already), nor for a group it deleted
// less than groupTombstoneTTL ago (deletedGroups, Unix ms).
func mergeKept(group, topic string, hasTopic bool, deletedGroups map[string]int64, deletedTopics map[string]time.Time, now time.Time) mergeVerdict {
	if at, ok := deletedGroups[group]; ok && now.UnixMilli()-at < groupTombstoneTTL.Milliseconds() {
		return mergeGroupDeleted
	}
	if at, ok := deletedTopics[topic]; !hasTopic || ok && now.Sub(at) < topicTombstoneTTL {
		return mergeLeftOut
	}
	return mergeTaken
}

// removeTopic drops every group's offsets of topic and keeps its deletion for merges (the
// topic was deleted here at now). It reports how many queues' offsets went.
func (t *offsetTable) removeTopic(topic string, now time.Time) int {
	t.mu.Lock()
	defer t.mu.Unlock()
	n := 0
	for group, topics := range t.groups {
		if qs, ok := topics[topic]; ok {
			n += len(qs)
			delete(topics, topic)
			if len(topics) == 0 {
				delete(t.groups, group)
			}
		}
	}
	t.deletedTopics[topic] = now
	for name, at := range t.deletedTopics {
		if now.Sub(at) >= topicTombstoneTTL {
			delete(t.deletedTopics, name)
		}
	}
	t.dirty = true
	return n
}

// removeGroup drops a group's offsets of every topic; with keep (the deleting master) the
// deletion is kept for merges from other members. It reports how many queues' offsets went.
func (t *offsetTable) removeGroup(group string, keep bool, now time.Time) int {
	t.mu.Lock()
	defer t.mu.Unlock()
	n := 0
	for _, qs := range t.groups[group] {
		n += len(qs)
	}
	delete(t.groups, group)
	if keep {
		t.deletedGroups[group] = now.UnixMilli()
		for name, at := range t.deletedGroups {
			if now.UnixMilli()-at >= groupTombstoneTTL.Milliseconds() {
				delete(t.deletedGroups, name)
			}
		}
	}
	t.dirty = true
	return n
}

// merge takes, for each queue of tbl, the larger of its offset and the one held, as
// decideOffset says (never backwards, never beyond the queue's max offset). With hasTopic set
// (a master merging a slave's offsets) it leaves out what this member deleted or does not have
// (mergeKept), and reports the deleted groups it met in refused.
func (t *offsetTable) merge(tbl *protocol.ConsumerOffsetTable, hasTopic func(string) bool, now time.Time) mergeResult {
	t.mu.Lock()
	defer t.mu.Unlock()
	var res mergeResult
	for _, o := range tbl.Offsets {
		if o.Offset < 0 || protocol.ValidateGroup([]byte(o.ConsumerGroup)) != nil || protocol.ValidateTopic([]byte(o.Topic)) != nil || o.QueueID < 0 {
			continue
		}
		if hasTopic != nil {
			switch mergeKept(o.ConsumerGroup, o.Topic, hasTopic(o.Topic), t.deletedGroups, t.deletedTopics, now) {
			case mergeGroupDeleted:
				if !slices.Contains(res.refused, o.ConsumerGroup) {
					res.refused = append(res.refused, o.ConsumerGroup)
				}
				continue
			case mergeLeftOut:
				continue
			}
		}
		maxOff := t.maxLocked([]byte(o.Topic), o.QueueID)
		cur, held := t.groups[o.ConsumerGroup][o.Topic][o.QueueID]
		d := decideOffset(cur, held, o.Offset, maxOff)
		if d.clamped {
			if res.clamped == 0 {
				res.first = clampedOffset{Group: o.ConsumerGroup, Topic: o.Topic, QueueID: o.QueueID, Offset: max(o.Offset, cur), Max: maxOff}
			}
			res.clamped++
		}
		if !d.store {
			continue
		}
		t.setLocked(o.ConsumerGroup, o.Topic, o.QueueID, d.off)
		t.dirty = true
		res.moved++
	}
	return res
}

// clampToLog lowers every held offset beyond its queue's max offset to it: after the store was
// opened (offsets loaded from disk over a log that recovery or a truncation cut) and after the
// log was reset. It returns how many offsets it lowered and the first of them.
func (t *offsetTable) clampToLog() (int, clampedOffset) {
	t.mu.Lock()
	defer t.mu.Unlock()
	n := 0
	var first clampedOffset
	var key []byte
	for group, topics := range t.groups {
		for topic, queues := range topics {
			key = append(key[:0], topic...)
			for qid, off := range queues {
				maxOff := t.maxLocked(key, qid)
				d := decideOffset(off, true, off, maxOff)
				if !d.store {
					continue
				}
				if n == 0 {
					first = clampedOffset{Group: group, Topic: topic, QueueID: qid, Offset: off, Max: maxOff}
				}
				n++
				queues[qid] = d.off
				t.dirty = true
			}
		}
	}
	return n, first
}

// commitOffset commits a consumer's offset (a pull's commit, UPDATE_CONSUMER_OFFSET). One beyond
// the queue's max offset is lowered to it (decideOffset) and logged: on a master, which holds
// everything acknowledged, the committer read another log (this one lost entries, or it is a
// bogus offset), a warning; on a slave or a member between roles a commit of what the master
// served may simply be ahead of replication, so the line is at debug level. remote is the
// committer's address, for the line. A commit of a new group past maxConsumerGroups is
// refused with a line and an error, and records nothing.
func (b *Broker) commitOffset(group, topic []byte, qid int32, off int64, remote string) error {
	d, maxOff := b.offsets.commit(group, topic, qid, off)
	if d.refused {
		b.warn.Warn(b.log, "refusing a consumer offset of a new consumer group: maxConsumerGroups groups hold offsets",
			"group", string(group), "topic", string(topic), "remote", remote, "maxConsumerGroups", b.cfg.MaxConsumerGroups)
		return fmt.Errorf("%d consumer groups hold offsets on this broker, the most it keeps (maxConsumerGroups): group %s is not recorded", b.cfg.MaxConsumerGroups, group)
	}
	if !d.clamped {
		return nil
	}
	c := clampedOffset{Group: string(group), Topic: string(topic), QueueID: qid, Offset: off, Max: maxOff}
	if b.role.Load().master != nil {
		b.offsetLog.Warn(b.log, "a consumer offset committed beyond its queue's max offset was lowered to it", "offset", c, "remote", remote)
		return nil
	}
	b.log.Debug("a consumer offset committed beyond this member's max offset of the queue was lowered to it", "offset", c, "remote", remote)
	return nil
}

// mergedOffsets logs what a merge of another member's offsets into this one's did (from names
// the member): offsets beyond this member's max offsets were lowered to them.
func (b *Broker) mergedOffsets(res mergeResult, from string) {
	if res.moved > 0 {
		b.log.Debug("consumer offsets merged", "from", from, "moved", res.moved)
	}
	if res.clamped == 0 {
		return
	}
	if b.role.Load().master != nil {
		b.offsetLog.Warn(b.log, "consumer offsets merged from a slave beyond this master's max offsets were lowered to them",
			"from", from, "lowered", res.clamped, "first", res.first)
		return
	}
	b.log.Debug("consumer offsets merged from the master beyond this member's max offsets were lowered to them (replication is behind)",
		"from", from, "lowered", res.clamped, "first", res.first)
}

// afterLogReset re-checks what the broker holds against its log, which was reset to start empty
// at base (every consume queue is empty): committed offsets are lowered to the queues' max
// offsets, and the high watermark a member between roles serves up to drops to base (what it
// knew confirmed was of the old log).
func (b *Broker) afterLogReset(base int64) {
	for {
		cur := b.lastHWM.Load()
		if cur <= base || b.lastHWM.CompareAndSwap(cur, base) {
			break
		}
	}
	if n, first := b.offsets.clampToLog(); n > 0 {
		b.log.Warn("consumer offsets beyond the max offsets of the reset log were lowered to them", "lowered", n, "first", first)
	}
}
