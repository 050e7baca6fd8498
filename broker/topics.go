package broker

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"sync"
	"sync/atomic"

	"github.com/petrel-mq/petrel/internal/fsutil"
	"github.com/petrel-mq/petrel/protocol"
)

// topic is one topic's config plus the long-poll waiters of its queues. A topic value is
// immutable once published in the table; an update publishes a new value that shares waiters.
type topic struct {
	cfg     protocol.TopicConfig
	waiters *pollWaiters
}

// topicTable holds the broker's topics in a copy-on-write map: lookups on the data path are one
// atomic load and a map read, with no lock; updates (rare) copy the map under mu and persist it.
type topicTable struct {
	path    string
	mu      sync.Mutex // serialises updates and persistence
	m       atomic.Pointer[map[string]*topic]
	version atomic.Int64 // data version reported to NameServers
}

func openTopicTable(dir string) (*topicTable, error) {
	t := &topicTable{path: filepath.Join(dir, "topics.json")}
	m := map[string]*topic{}
	data, err := os.ReadFile(t.path)
	switch {
	case errors.Is(err, os.ErrNotExist):
	case err != nil:
		return nil, fmt.Errorf("cannot read topic configs: %w", err)
	default:
		var file topicFile
		if err := json.Unmarshal(data, &file); err != nil {
			return nil, fmt.Errorf("cannot decode topic configs %s: %w", t.path, err)
		}
		for _, c := range file.Topics {
			if err := validateTopicConfig(&c); err != nil {
				return nil, fmt.Errorf("topic configs %s: %w", t.path, err)
			}
			m[c.Topic] = &topic{cfg: c, waiters: newPollWaiters()}
		}
		t.version.Store(file.DataVersion)
	}
	t.m.Store(&m)
	return t, nil
}

type topicFile struct {
	DataVersion int64                  `json:"dataVersion"`
	Topics      []protocol.TopicConfig `json:"topics"`
}

// get returns the topic named by name (a view; no allocation), or nil.
func (t *topicTable) get(name []byte) *topic {
	return (*t.m.Load())[string(name)]
}

// list returns every topic config sorted by name.
func (t *topicTable) list() []protocol.TopicConfig {
	m := *t.m.Load()
	out := make([]protocol.TopicConfig, 0, len(m))
	for _, tp := range m {
		out = append(out, tp.cfg)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Topic < out[j].Topic })
	return out
}

// validateTopicConfig checks a topic config before it is stored (protocol.ValidateTopicConfig).
func validateTopicConfig(c *protocol.TopicConfig) error { return protocol.ValidateTopicConfig(c) }

// upsert creates or updates a topic and persists the table. It reports whether anything changed.
func (t *topicTable) upsert(c protocol.TopicConfig) (bool, error) {
	if err := validateTopicConfig(&c); err != nil {
		return false, err
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	old := *t.m.Load()
	prev := old[c.Topic]
	if prev != nil && prev.cfg == c {
		return false, nil
	}
	next := make(map[string]*topic, len(old)+1)
	for k, v := range old {
		next[k] = v
	}
	w := newPollWaiters()
	if prev != nil {
		w = prev.waiters
	}
	next[c.Topic] = &topic{cfg: c, waiters: w}
	if err := t.persistLocked(next); err != nil {
		return false, err
	}
	t.m.Store(&next)
	return true, nil
}

// persistLocked writes m to disk. Lock should be held.
func (t *topicTable) persistLocked(m map[string]*topic) error {
	file := topicFile{DataVersion: t.version.Load() + 1}
	for _, tp := range m {
		file.Topics = append(file.Topics, tp.cfg)
	}
	sort.Slice(file.Topics, func(i, j int) bool { return file.Topics[i].Topic < file.Topics[j].Topic })
	data, err := json.MarshalIndent(&file, "", "  ")
	if err != nil {
		return err
	}
	if err := fsutil.WriteFileAtomic(t.path, data, 0o644); err != nil {
		return fmt.Errorf("cannot persist topic configs: %w", err)
	}
	t.version.Store(file.DataVersion)
	return nil
}

// remove deletes topic name from the table and persists it. It returns the topic removed (nil
// when the table had none): the caller answers its held pulls.
func (t *topicTable) remove(name string) (*topic, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	old := *t.m.Load()
	prev := old[name]
	if prev == nil {
		return nil, nil
	}
	next := make(map[string]*topic, len(old))
	for k, v := range old {
		if k != name {
			next[k] = v
		}
	}
	if err := t.persistLocked(next); err != nil {
		return nil, err
	}
	t.m.Store(&next)
	return prev, nil
}

// tableChange is what replace did to the table.
type tableChange struct {
	// created names the topics the table did not have; removed holds the topics it dropped
	// (their held pulls are the caller's to answer); changed is set when anything differs.
	created []string
	removed []*topic
	changed bool
}

// replace makes list the whole table (a slave taking its master's topics, a Raft member its
// group's committed table) and persists it when anything changed. A topic whose config is
// unchanged keeps its value; an updated one keeps its held pulls.
func (t *topicTable) replace(list []protocol.TopicConfig) (tableChange, error) {
	var ch tableChange
	for i := range list {
		if err := validateTopicConfig(&list[i]); err != nil {
			return ch, err
		}
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	old := *t.m.Load()
	next := make(map[string]*topic, len(list))
	for _, c := range list {
		prev := old[c.Topic]
		switch {
		case prev == nil:
			next[c.Topic] = &topic{cfg: c, waiters: newPollWaiters()}
			ch.created = append(ch.created, c.Topic)
			ch.changed = true
		case prev.cfg == c:
			next[c.Topic] = prev
		default:
			next[c.Topic] = &topic{cfg: c, waiters: prev.waiters}
			ch.changed = true
		}
	}
	for name, tp := range old {
		if next[name] == nil {
			ch.removed = append(ch.removed, tp)
			ch.changed = true
		}
	}
	if !ch.changed {
		return ch, nil
	}
	if err := t.persistLocked(next); err != nil {
		return tableChange{}, err
	}
	t.m.Store(&next)
	return ch, nil
}
