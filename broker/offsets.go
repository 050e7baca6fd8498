package broker

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"

	"github.com/petrel-mq/petrel/internal/fsutil"
	"github.com/petrel-mq/petrel/protocol"
)

// offsetTable holds committed consumer offsets per (consumer group, topic, queue): the next
// queue offset the group will consume. A commit never moves an offset backwards. The table is
// persisted to consumerOffset.json (RocketMQ's file name and shape: "topic@group" -> queue ->
// offset) by the broker's flush goroutine every FlushConsumerOffsetInterval and on shutdown.
type offsetTable struct {
	path  string
	mu    sync.Mutex // guards groups and dirty
	dirty bool
	// groups maps group -> topic -> queue id -> offset. Nested maps keyed by string let the
	// data path look up []byte names without allocating.
	groups map[string]map[string]map[int32]int64
}

type offsetFile struct {
	OffsetTable map[string]map[string]int64 `json:"offsetTable"`
}

func openOffsetTable(dir string) (*offsetTable, error) {
	t := &offsetTable{path: filepath.Join(dir, "consumerOffset.json"), groups: map[string]map[string]map[int32]int64{}}
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

// commit records off for the queue unless a larger offset is already committed. group and
// topic may be views of a request frame: they are copied only when a new entry is created.
func (t *offsetTable) commit(group, topic []byte, qid int32, off int64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if q := t.groups[string(group)][string(topic)]; q != nil {
		if cur, ok := q[qid]; ok && cur >= off {
			return
		}
		q[qid] = off
		t.dirty = true
		return
	}
	t.setLocked(string(group), string(topic), qid, off)
	t.dirty = true
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
	t.mu.Lock()
	if !t.dirty {
		t.mu.Unlock()
		return nil
	}
	file := offsetFile{OffsetTable: map[string]map[string]int64{}}
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

// merge takes the larger offset of each queue from tbl (commits never move backwards), and
// returns how many offsets moved.
func (t *offsetTable) merge(tbl *protocol.ConsumerOffsetTable) int {
	t.mu.Lock()
	defer t.mu.Unlock()
	moved := 0
	for _, o := range tbl.Offsets {
		if o.Offset < 0 || protocol.ValidateGroup([]byte(o.ConsumerGroup)) != nil || protocol.ValidateTopic([]byte(o.Topic)) != nil || o.QueueID < 0 {
			continue
		}
		if cur, ok := t.groups[o.ConsumerGroup][o.Topic][o.QueueID]; ok && cur >= o.Offset {
			continue
		}
		t.setLocked(o.ConsumerGroup, o.Topic, o.QueueID, o.Offset)
		t.dirty = true
		moved++
	}
	return moved
}
