package ha

import (
	"cmp"
	"errors"
	"fmt"
	"slices"

	"github.com/petrel-mq/petrel/protocol"
)

// TopicTable is a Raft-elected group's topic configs as its Raft log committed them: the
// master commits every topic creation, change and deletion (CmdPutTopic, CmdDeleteTopic)
// before it answers, and every member applies them in the same order, so every member and
// every future master holds the acknowledged table.
type TopicTable struct {
	// Known is set once a command set the table. Before it (a group whose stores predate topic
	// configs in Raft) each member keeps the table of its own store, and the group's first
	// master commits its table (CmdInitTopics) before it acts.
	Known bool
	// Topics are sorted by name; callers must not modify them.
	Topics []protocol.TopicConfig
}

// Topic returns the config of topic name.
func (t TopicTable) Topic(name string) (protocol.TopicConfig, bool) {
	i, ok := slices.BinarySearchFunc(t.Topics, name, func(c protocol.TopicConfig, n string) int { return cmp.Compare(c.Topic, n) })
	if !ok {
		return protocol.TopicConfig{}, false
	}
	return t.Topics[i], true
}

// ErrTopicsKnown refuses CmdInitTopics once the table is known: a member that took the master
// role later must not overwrite the committed table with its store's.
var ErrTopicsKnown = errors.New("ha: the group's topic table is already committed")

// isTopicCommand reports whether c changes the topic table rather than the control state.
func isTopicCommand(k CommandKind) bool {
	return k == CmdPutTopic || k == CmdDeleteTopic || k == CmdInitTopics
}

// ApplyTopic returns the table after c, a topic command, or the unchanged table and an error
// when the rules refuse c (a config protocol.ValidateTopicConfig refuses, a second
// CmdInitTopics, a malformed command). It never modifies t (the result's slice is fresh).
func (t TopicTable) ApplyTopic(c Command) (TopicTable, error) {
	switch c.Kind {
	case CmdPutTopic:
		if len(c.Topics) != 1 {
			return t, fmt.Errorf("%w: a topic update with %d configs", ErrBadCommand, len(c.Topics))
		}
		tc := c.Topics[0]
		if err := protocol.ValidateTopicConfig(&tc); err != nil {
			return t, fmt.Errorf("%w: %v", ErrBadCommand, err)
		}
		next := TopicTable{Known: true, Topics: slices.Clone(t.Topics)}
		i, found := slices.BinarySearchFunc(next.Topics, tc.Topic, func(x protocol.TopicConfig, n string) int { return cmp.Compare(x.Topic, n) })
		if found {
			next.Topics[i] = tc
		} else {
			next.Topics = slices.Insert(next.Topics, i, tc)
		}
		return next, nil
	case CmdDeleteTopic:
		if len(c.Topics) != 1 || protocol.ValidateTopic([]byte(c.Topics[0].Topic)) != nil {
			return t, fmt.Errorf("%w: a topic deletion of %d topics", ErrBadCommand, len(c.Topics))
		}
		next := TopicTable{Known: true, Topics: slices.DeleteFunc(slices.Clone(t.Topics), func(x protocol.TopicConfig) bool { return x.Topic == c.Topics[0].Topic })}
		return next, nil
	case CmdInitTopics:
		if t.Known {
			return t, ErrTopicsKnown
		}
		next := TopicTable{Known: true, Topics: slices.Clone(c.Topics)}
		for i := range next.Topics {
			if err := protocol.ValidateTopicConfig(&next.Topics[i]); err != nil {
				return t, fmt.Errorf("%w: %v", ErrBadCommand, err)
			}
		}
		slices.SortFunc(next.Topics, func(a, b protocol.TopicConfig) int { return cmp.Compare(a.Topic, b.Topic) })
		next.Topics = slices.CompactFunc(next.Topics, func(a, b protocol.TopicConfig) bool { return a.Topic == b.Topic })
		return next, nil
	}
	return t, fmt.Errorf("%w: kind %d is not a topic command", ErrBadCommand, c.Kind)
}

// appendTopicTable encodes a table: known (u8), then the configs as a u32-prefixed
// protocol.TopicConfigList.
func appendTopicTable(b []byte, t TopicTable) []byte {
	known := uint8(0)
	if t.Known {
		known = 1
	}
	b = append(b, known)
	l := protocol.TopicConfigList{Topics: t.Topics}
	return protocol.AppendBytes(b, l.AppendTo(nil))
}

// maxTopicTableBytes bounds an encoded topic table in a command or a snapshot.
const maxTopicTableBytes = 64 << 20

// readTopicTable decodes what appendTopicTable encoded.
func readTopicTable(r *protocol.Reader) TopicTable {
	t := TopicTable{Known: r.U8() == 1}
	raw := r.BytesView(maxTopicTableBytes)
	if r.Err() != nil {
		return TopicTable{}
	}
	var l protocol.TopicConfigList
	if err := l.ReadFrom(raw); err != nil {
		r.Fail(err)
		return TopicTable{}
	}
	t.Topics = l.Topics
	return t
}
