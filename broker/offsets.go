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
// queue offset the group will consume, with the incarnation of the queue it belongs to (the
// queue's life, commitlog's QueueIncarnation; 0 when not known). A commit never moves an offset
// backwards within a life, an offset of another life than the queue's is never applied to it,
// and no offset is held beyond its queue's max offset (decideOffset): a commit or merge beyond
// it is lowered, and so is every held offset when the log loses entries (clampToLog). The table
// is persisted to consumerOffset.json (RocketMQ's file name and shape: "topic@group" -> queue
// -> offset, the incarnations beside it) by the broker's flush goroutine every
// FlushConsumerOffsetInterval and on shutdown.
type offsetTable struct {
	path string
	// log reads the store's queues (commitlog.Store); nil until the store is open, and then no
	// offset is checked. It is called under mu, so that a commit that read a queue's max before
	// the log was reset is done before clampToLog runs.
	log queueLog
	// maxGroups caps the consumer groups a commit may add (maxConsumerGroups; 0: no cap), so
	// that commits naming ever new groups leave a bounded table, file and metric series. Set
	// before the table is used.
	maxGroups int
	// persistMu serialises persist from the table's copy to the file's rename, so that an older
	// copy never replaces a newer one (the flush goroutine, admin workers and Close persist).
	persistMu sync.Mutex
	mu        sync.Mutex // guards groups, deletedGroups, deletedTopics and dirty
	dirty     bool
	// groups maps group -> topic -> queue id -> committed offset. Nested maps keyed by string
	// let the data path look up []byte names without allocating.
	groups map[string]map[string]map[int32]committed
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

// committed is a group's committed offset of a queue and the incarnation of the queue it
// belongs to (0: not known: committed by a client or member that predates incarnations).
type committed struct {
	off int64
	inc uint64
}

// queueLog is what the offset table reads of the store's queues (commitlog.Store).
type queueLog interface {
	MaxOffset(topic []byte, queueID int32) int64
	MinOffset(topic []byte, queueID int32) int64
	QueueIncarnation(topic []byte, queueID int32) uint64
}

// otherLife reports whether incarnations a and b name different lives of a queue: both are
// known and they differ. An unknown one (0, an older peer's) is never taken for another life.
func otherLife(a, b uint64) bool { return a != 0 && b != 0 && a != b }

// queueLife is a queue as this member holds it when an offset is decided.
type queueLife struct {
	// min and max are its min and max offsets (min is read only when an offset is beyond max).
	min, max int64
	// inc is its incarnation, 0 when not known (the queue does not exist here, or its store
	// predates incarnations).
	inc uint64
}

// offsetDecision is what a commit or a merge does to one queue's committed offset.
type offsetDecision struct {
	// off and inc are what the queue holds afterwards; store is false when that is what it
	// held already.
	off   int64
	inc   uint64
	store bool
	// clamped reports that the offset asked for, or the one held, was beyond the queue's max
	// offset and was lowered.
	clamped bool
	// otherLife reports that the offset asked for belongs to another life of the queue than
	// the one this member holds: it was not applied (store is false).
	otherLife bool
	// replaced reports that the offset held belonged to an earlier life of the queue and was
	// replaced by the one asked for, whatever their values.
	replaced bool
	// refused reports a commit of a new group past the table's cap (offsetTable.commit).
	refused bool
}

// decideOffset decides a commit or merge of in onto a queue q that holds the committed offset
// cur (held false: none). An offset of another life of the queue than q's is not applied, and
// a held one of another life counts as none (queue offsets start afresh in each life: an old
// life's offset would skip the new life's messages or point at nothing). Within a life offsets
// never move backwards, and no queue holds an offset beyond its max offset: the larger of the
// two is kept, each first lowered (an offset equal to max is valid: the group consumed
// everything). Only a log that lost entries (a master that lost its store, a slave that reset
// or cut its diverged log, a crash that lost the tail) has a max below a group's offset, and
// the offset is lowered so that no stored message is skipped that the group may not have read:
// to max when the offset is known to be of the queue's life (what lies below max is what the
// group read there: a queue offset is assigned once in a life), or when it is this member's own
// view (held offsets, and a slave's, whose commits of what the master served may simply be
// ahead of replication: elsewhere false); to min, the first stored message, when elsewhere (a
// commit or a slave's merge on a master) and the life is not known, since it may come from
// another log. The stored incarnation is q's when known (the offset, decided against q's
// bounds, is a position in q's life), else the winning offset's own.
func decideOffset(cur committed, held bool, in committed, q queueLife, elsewhere bool) offsetDecision {
	if otherLife(in.inc, q.inc) {
		return offsetDecision{off: cur.off, inc: cur.inc, otherLife: true}
	}
	had := held
	var d offsetDecision
	if held && otherLife(cur.inc, q.inc) {
		held, d.replaced = false, true
	}
	lower := func(e committed, elsewhere bool) int64 {
		switch {
		case e.off <= q.max:
			return e.off
		case !elsewhere || e.inc != 0 && e.inc == q.inc:
			d.clamped = true
			return q.max
		}
		d.clamped = true
		return q.min
	}
	d.off, d.inc = lower(in, elsewhere), in.inc
	if held {
		if c := lower(cur, false); c > d.off {
			d.off, d.inc = c, cur.inc
		}
	}
	if q.inc != 0 {
		d.inc = q.inc
	}
	d.store = !had || d.off != cur.off || d.inc != cur.inc
	return d
}

// overflowTarget is where a master moves a pull beyond the queue's max offset (OFFSET_MOVED),
// by decideOffset's rule: to max when the pull's position is known to be of the queue's life
// (pullInc equals the queue's incarnation: the group read everything below max), else to min,
// so that no stored message is skipped (RocketMQ does so when the min offset is 0).
func overflowTarget(pullInc uint64, q queueLife) int64 {
	if pullInc != 0 && pullInc == q.inc {
		return q.max
	}
	return q.min
}

// clampedOffset describes an offset lowered because it was beyond its queue's max offset, or
// left out because it was of another life of the queue (Inc, the queue's QueueInc), for the
// log.
type clampedOffset struct {
	Group, Topic    string
	QueueID         int32
	Offset, To, Max int64
	Inc, QueueInc   uint64
}

func (c clampedOffset) String() string {
	if otherLife(c.Inc, c.QueueInc) {
		return fmt.Sprintf("group %s on %s queue %d: %d of incarnation %#x left out: the queue is of incarnation %#x (max offset %d)",
			c.Group, c.Topic, c.QueueID, c.Offset, c.Inc, c.QueueInc, c.Max)
	}
	return fmt.Sprintf("group %s on %s queue %d: %d lowered to %d (max offset %d)", c.Group, c.Topic, c.QueueID, c.Offset, c.To, c.Max)
}

type offsetFile struct {
	OffsetTable map[string]map[string]int64 `json:"offsetTable"`
	// Incarnations holds, in OffsetTable's shape, the incarnation each offset belongs to
	// (known ones only).
	Incarnations map[string]map[string]uint64 `json:"incarnations,omitempty"`
	// DeletedGroups maps a deleted group to the time of its deletion (Unix ms).
	DeletedGroups map[string]int64 `json:"deletedGroups,omitempty"`
}

func openOffsetTable(dir string) (*offsetTable, error) {
	t := &offsetTable{path: filepath.Join(dir, "consumerOffset.json"), groups: map[string]map[string]map[int32]committed{},
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
			t.setLocked(group, topic, int32(qid), committed{off: off, inc: file.Incarnations[key][q]})
		}
	}
	maps.Copy(t.deletedGroups, file.DeletedGroups)
	return t, nil
}

func (t *offsetTable) setLocked(group, topic string, qid int32, c committed) {
	g := t.groups[group]
	if g == nil {
		g = map[string]map[int32]committed{}
		t.groups[group] = g
	}
	q := g[topic]
	if q == nil {
		q = map[int32]committed{}
		g[topic] = q
	}
	q[qid] = c
}

// lifeLocked returns the queue as the store holds it, with off (an offset being decided) and
// cur (the one held) to tell whether its min offset is needed; before the store is open every
// offset is within it (max is the largest int64) and its life is not known. Caller holds mu.
func (t *offsetTable) lifeLocked(topic []byte, qid int32, off, cur int64) queueLife {
	if t.log == nil {
		return queueLife{max: math.MaxInt64}
	}
	q := queueLife{max: t.log.MaxOffset(topic, qid), inc: t.log.QueueIncarnation(topic, qid)}
	if off > q.max || cur > q.max {
		q.min = t.log.MinOffset(topic, qid)
	}
	return q
}

// commit records off, of incarnation inc, for the queue as decideOffset says (elsewhere: see
// there), and returns the decision and the queue's max offset. group and topic may be views of
// a request frame: they are copied only when a new entry is created. A commit of a group the
// table does not hold while it holds maxGroups is refused (d.refused): nothing is recorded.
func (t *offsetTable) commit(group, topic []byte, qid int32, off int64, inc uint64, elsewhere bool) (offsetDecision, queueLife) {
	t.mu.Lock()
	defer t.mu.Unlock()
	g, known := t.groups[string(group)]
	if !known && t.maxGroups > 0 && len(t.groups) >= t.maxGroups {
		return offsetDecision{refused: true}, queueLife{}
	}
	q := g[string(topic)]
	cur, held := q[qid]
	life := t.lifeLocked(topic, qid, off, cur.off)
	d := decideOffset(cur, held, committed{off: off, inc: inc}, life, elsewhere)
	if !d.store {
		return d, life
	}
	t.dirty = true
	if q != nil {
		q[qid] = committed{off: d.off, inc: d.inc}
	} else {
		t.setLocked(string(group), string(topic), qid, committed{off: d.off, inc: d.inc})
	}
	if len(t.deletedGroups) != 0 {
		delete(t.deletedGroups, string(group)) // the group is in use again
	}
	return d, life
}

// get returns the group's position on the queue and whether it has one: its committed offset
// and the incarnation that offset belongs to, or, for an offset of another life of the queue
// than the store's (an earlier one: the queue was created again since), the queue's min offset
// in its current life, where the group starts over since everything there came after its old
// position.
func (t *offsetTable) get(group, topic []byte, qid int32) (committed, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	c, ok := t.groups[string(group)][string(topic)][qid]
	if ok {
		c = t.positionLocked(topic, qid, c)
	}
	return c, ok
}

// positionLocked is get's translation of a held offset c. Caller holds mu.
func (t *offsetTable) positionLocked(topic []byte, qid int32, c committed) committed {
	if t.log == nil {
		return c
	}
	if inc := t.log.QueueIncarnation(topic, qid); otherLife(c.inc, inc) {
		return committed{off: t.log.MinOffset(topic, qid), inc: inc}
	}
	return c
}

// groupQueues returns the committed offsets of a group, optionally of one topic, sorted.
func (t *offsetTable) groupQueues(group, topic string) []protocol.ConsumeQueueStats {
	t.mu.Lock()
	defer t.mu.Unlock()
	var out []protocol.ConsumeQueueStats
	var key []byte
	for tp, queues := range t.groups[group] {
		if topic != "" && tp != topic {
			continue
		}
		key = append(key[:0], tp...)
		for qid, c := range queues {
			out = append(out, protocol.ConsumeQueueStats{Topic: tp, QueueID: qid, ConsumerOffset: t.positionLocked(key, qid, c).off})
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
	file := offsetFile{OffsetTable: map[string]map[string]int64{}, Incarnations: map[string]map[string]uint64{},
		DeletedGroups: maps.Clone(t.deletedGroups)}
	for group, topics := range t.groups {
		for topic, queues := range topics {
			m := make(map[string]int64, len(queues))
			var incs map[string]uint64
			for qid, c := range queues {
				m[strconv.Itoa(int(qid))] = c.off
				if c.inc != 0 {
					if incs == nil {
						incs = map[string]uint64{}
						file.Incarnations[topic+"@"+group] = incs
					}
					incs[strconv.Itoa(int(qid))] = c.inc
				}
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

// table returns every committed offset as held, with its incarnation, sorted.
func (t *offsetTable) table() protocol.ConsumerOffsetTable {
	t.mu.Lock()
	defer t.mu.Unlock()
	out := protocol.ConsumerOffsetTable{HasIncarnations: true}
	for group, topics := range t.groups {
		for topic, queues := range topics {
			for qid, c := range queues {
				out.Offsets = append(out.Offsets, protocol.ConsumerOffset{ConsumerGroup: group, Topic: topic, QueueID: qid, Offset: c.off, Incarnation: c.inc})
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
// held) were beyond their queue's max offset and lowered, and the first such one; how many
// were of another life of their queue than this member's and left out, and the first one.
type mergeResult struct {
	moved, clamped int
	first          clampedOffset
	otherLife      int
	firstOther     clampedOffset
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
// decideOffset says (never backwards, never beyond the queue's max offset, never one of
// another life of the queue). With hasTopic set (a master merging a slave's offsets: elsewhere
// in decideOffset's terms) it leaves out what this member deleted or does not have
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
		cur, held := t.groups[o.ConsumerGroup][o.Topic][o.QueueID]
		life := t.lifeLocked([]byte(o.Topic), o.QueueID, o.Offset, cur.off)
		d := decideOffset(cur, held, committed{off: o.Offset, inc: o.Incarnation}, life, hasTopic != nil)
		if d.otherLife {
			if res.otherLife == 0 {
				res.firstOther = clampedOffset{Group: o.ConsumerGroup, Topic: o.Topic, QueueID: o.QueueID, Offset: o.Offset, Max: life.max,
					Inc: o.Incarnation, QueueInc: life.inc}
			}
			res.otherLife++
		}
		if d.clamped {
			if res.clamped == 0 {
				res.first = clampedOffset{Group: o.ConsumerGroup, Topic: o.Topic, QueueID: o.QueueID, Offset: max(o.Offset, cur.off), To: d.off, Max: life.max}
			}
			res.clamped++
		}
		if !d.store {
			continue
		}
		t.setLocked(o.ConsumerGroup, o.Topic, o.QueueID, committed{off: d.off, inc: d.inc})
		t.dirty = true
		res.moved++
	}
	return res
}

// clampToLog lowers every held offset beyond its queue's max offset to it: after the store was
// opened (offsets loaded from disk over a log that recovery or a truncation cut) and after the
// log was reset. These are this member's own offsets, lowered as decideOffset lowers them
// (to max); each keeps its incarnation, so that one of an earlier life is still told apart. It
// returns how many offsets it lowered and the first of them.
func (t *offsetTable) clampToLog() (int, clampedOffset) {
	t.mu.Lock()
	defer t.mu.Unlock()
	n := 0
	var first clampedOffset
	var key []byte
	if t.log == nil {
		return 0, first
	}
	for group, topics := range t.groups {
		for topic, queues := range topics {
			key = append(key[:0], topic...)
			for qid, c := range queues {
				maxOff := t.log.MaxOffset(key, qid)
				if c.off <= maxOff {
					continue
				}
				if n == 0 {
					first = clampedOffset{Group: group, Topic: topic, QueueID: qid, Offset: c.off, To: maxOff, Max: maxOff}
				}
				n++
				queues[qid] = committed{off: maxOff, inc: c.inc}
				t.dirty = true
			}
		}
	}
	return n, first
}

// commitOffset commits a consumer's offset of incarnation inc (a pull's commit,
// UPDATE_CONSUMER_OFFSET; inc 0 from a client that predates incarnations) as decideOffset says.
// One of another life of the queue is left out, and one beyond the queue's max offset lowered,
// and logged: on a master, which holds everything acknowledged, the committer read another log
// (this one lost entries or was created again, or it is a bogus offset), a rate-limited
// warning; on a slave or a member between roles a commit of what the master served may simply
// be ahead of replication or of this member's reset, so the line is at debug level. remote is
// the committer's address, for the line. A commit of a new group past maxConsumerGroups is
// refused with a line and an error, and records nothing.
func (b *Broker) commitOffset(group, topic []byte, qid int32, off int64, inc uint64, remote string) error {
	master := b.role.Load().master != nil
	d, life := b.offsets.commit(group, topic, qid, off, inc, master)
	if d.refused {
		b.warn.Warn(b.log, "refusing a consumer offset of a new consumer group: maxConsumerGroups groups hold offsets",
			"group", string(group), "topic", string(topic), "remote", remote, "maxConsumerGroups", b.cfg.MaxConsumerGroups)
		return fmt.Errorf("%d consumer groups hold offsets on this broker, the most it keeps (maxConsumerGroups): group %s is not recorded", b.cfg.MaxConsumerGroups, group)
	}
	if !d.clamped && !d.otherLife {
		return nil
	}
	c := clampedOffset{Group: string(group), Topic: string(topic), QueueID: qid, Offset: off, To: d.off, Max: life.max, Inc: inc, QueueInc: life.inc}
	switch {
	case d.otherLife && master:
		b.lifeLog.Warn(b.log, "a consumer offset committed for another life of its queue (created again since) was left out", "offset", c, "remote", remote)
	case master:
		b.offsetLog.Warn(b.log, "a consumer offset committed beyond its queue's max offset was lowered", "offset", c, "remote", remote)
	default:
		b.log.Debug("a consumer offset committed beyond this member's max offset, or for another life, of the queue was not taken as it is", "offset", c, "remote", remote)
	}
	return nil
}

// mergedOffsets logs what a merge of another member's offsets into this one's did (from names
// the member): offsets beyond this member's max offsets were lowered to them.
func (b *Broker) mergedOffsets(res mergeResult, from string) {
	if res.moved > 0 {
		b.log.Debug("consumer offsets merged", "from", from, "moved", res.moved)
	}
	if res.otherLife > 0 {
		b.lifeLog.Warn(b.log, "consumer offsets merged for another life of their queues (created again since) were left out",
			"from", from, "leftOut", res.otherLife, "first", res.firstOther)
	}
	if res.clamped == 0 {
		return
	}
	if b.role.Load().master != nil {
		b.offsetLog.Warn(b.log, "consumer offsets merged from a slave beyond this master's max offsets were lowered",
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
