package ha

import (
	"bytes"
	"errors"
	"io"
	"reflect"
	"testing"

	"github.com/hashicorp/raft"

	"github.com/petrel-mq/petrel/protocol"
)

func tc(name string, queues int32) protocol.TopicConfig {
	return protocol.TopicConfig{Topic: name, ReadQueueNums: queues, WriteQueueNums: queues, Perm: protocol.PermReadWrite}
}

// TestApplyTopic is the topic table's rules as a table: puts insert sorted and replace, deletes
// remove (absent names too), the first init sets the table and a second is refused, and bad
// configs change nothing.
func TestApplyTopic(t *testing.T) {
	known := func(cs ...protocol.TopicConfig) TopicTable { return TopicTable{Known: true, Topics: cs} }
	for _, c := range []struct {
		name    string
		from    TopicTable
		cmd     Command
		want    TopicTable
		wantErr error
	}{
		{"put into an unknown table", TopicTable{}, Command{Kind: CmdPutTopic, Topics: []protocol.TopicConfig{tc("b", 4)}}, known(tc("b", 4)), nil},
		{"put sorted", known(tc("a", 1), tc("c", 1)), Command{Kind: CmdPutTopic, Topics: []protocol.TopicConfig{tc("b", 2)}}, known(tc("a", 1), tc("b", 2), tc("c", 1)), nil},
		{"put replaces", known(tc("a", 1)), Command{Kind: CmdPutTopic, Topics: []protocol.TopicConfig{tc("a", 16)}}, known(tc("a", 16)), nil},
		{"put of a bad config", known(tc("a", 1)), Command{Kind: CmdPutTopic, Topics: []protocol.TopicConfig{tc("a", 0)}}, known(tc("a", 1)), ErrBadCommand},
		{"put of a bad name", known(), Command{Kind: CmdPutTopic, Topics: []protocol.TopicConfig{tc("a b", 1)}}, known(), ErrBadCommand},
		{"put of two", known(), Command{Kind: CmdPutTopic, Topics: []protocol.TopicConfig{tc("a", 1), tc("b", 1)}}, known(), ErrBadCommand},
		{"delete", known(tc("a", 1), tc("b", 1)), Command{Kind: CmdDeleteTopic, Topics: []protocol.TopicConfig{{Topic: "a"}}}, known(tc("b", 1)), nil},
		{"delete of an absent topic", known(tc("b", 1)), Command{Kind: CmdDeleteTopic, Topics: []protocol.TopicConfig{{Topic: "a"}}}, known(tc("b", 1)), nil},
		{"delete makes an unknown table known", TopicTable{}, Command{Kind: CmdDeleteTopic, Topics: []protocol.TopicConfig{{Topic: "a"}}}, known(), nil},
		{"init", TopicTable{}, Command{Kind: CmdInitTopics, Topics: []protocol.TopicConfig{tc("z", 1), tc("a", 2), tc("a", 2)}}, known(tc("a", 2), tc("z", 1)), nil},
		{"init of an empty table", TopicTable{}, Command{Kind: CmdInitTopics}, known(), nil},
		{"a second init", known(tc("a", 1)), Command{Kind: CmdInitTopics, Topics: []protocol.TopicConfig{tc("b", 1)}}, known(tc("a", 1)), ErrTopicsKnown},
		{"init of a bad config", TopicTable{}, Command{Kind: CmdInitTopics, Topics: []protocol.TopicConfig{tc("a", 5000)}}, TopicTable{}, ErrBadCommand},
		{"not a topic command", known(), Command{Kind: CmdNoop}, known(), ErrBadCommand},
	} {
		t.Run(c.name, func(t *testing.T) {
			from := TopicTable{Known: c.from.Known, Topics: append([]protocol.TopicConfig(nil), c.from.Topics...)}
			got, err := from.ApplyTopic(c.cmd)
			if !errors.Is(err, c.wantErr) || (c.wantErr == nil) != (err == nil) {
				t.Fatalf("error %v, want %v", err, c.wantErr)
			}
			if got.Known != c.want.Known || len(got.Topics) != len(c.want.Topics) || len(got.Topics) > 0 && !reflect.DeepEqual(got.Topics, c.want.Topics) {
				t.Fatalf("table %+v, want %+v", got, c.want)
			}
			if !reflect.DeepEqual(from.Topics, c.from.Topics) && len(c.from.Topics) > 0 {
				t.Fatalf("ApplyTopic modified its receiver: %+v", from)
			}
		})
	}
}

// TestTopicCommandsThroughTheFSM: topic commands round-trip their encoding, change the topic
// table (not the control state) on apply, tell OnTopics, and survive a snapshot; a snapshot of
// the format before topic tables restores with none known; commands of the other kinds encode
// as before (no topic section).
func TestTopicCommandsThroughTheFSM(t *testing.T) {
	var heard []TopicTable
	f := NewControlFSM(nil, func(tt TopicTable) { heard = append(heard, tt) })
	apply := func(i uint64, c Command) any {
		b, err := c.MarshalBinary()
		if err != nil {
			t.Fatal(err)
		}
		var back Command
		if err := back.UnmarshalBinary(b); err != nil || !reflect.DeepEqual(back.Topics, c.Topics) {
			t.Fatalf("%+v does not round-trip: %+v, %v", c, back, err)
		}
		return f.Apply(&raft.Log{Index: i, Type: raft.LogCommand, Data: b})
	}
	apply(1, Command{Kind: CmdNewEpoch, MasterID: "b1"})
	if r := apply(2, Command{Kind: CmdInitTopics, Topics: []protocol.TopicConfig{tc("a", 8)}}); r != nil {
		t.Fatal(r)
	}
	apply(3, Command{Kind: CmdPutTopic, Topics: []protocol.TopicConfig{tc("b", 4)}})
	apply(4, Command{Kind: CmdDeleteTopic, Topics: []protocol.TopicConfig{{Topic: "a"}}})
	if r := apply(5, Command{Kind: CmdInitTopics, Topics: []protocol.TopicConfig{tc("x", 1)}}); !errors.Is(r.(error), ErrTopicsKnown) {
		t.Fatalf("a second init: %v", r)
	}
	want := TopicTable{Known: true, Topics: []protocol.TopicConfig{tc("b", 4)}}
	if got := f.Topics(); !reflect.DeepEqual(got, want) || len(heard) != 3 || !reflect.DeepEqual(heard[2], want) {
		t.Fatalf("topics %+v, heard %+v; want %+v", got, heard, want)
	}
	if st := f.State(); st.MasterID != "b1" || st.Epoch != 1 || f.AppliedIndex() != 5 {
		t.Fatalf("state %+v at %d", st, f.AppliedIndex())
	}
	snap, err := f.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	sink := &memSink{}
	if err := snap.Persist(sink); err != nil {
		t.Fatal(err)
	}
	var restored []TopicTable
	g := NewControlFSM(nil, func(tt TopicTable) { restored = append(restored, tt) })
	if err := g.Restore(io.NopCloser(bytes.NewReader(sink.Bytes()))); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(g.Topics(), want) || !reflect.DeepEqual(g.State(), f.State()) || g.AppliedIndex() != 5 || len(restored) != 1 {
		t.Fatalf("restored topics %+v state %+v index %d (heard %d)", g.Topics(), g.State(), g.AppliedIndex(), len(restored))
	}
	// The format before topic tables: version, index, state.
	old := protocol.AppendU64([]byte{snapshotVersionIndex}, 9)
	old = append(old, f.State().MarshalBinary()...)
	h := NewControlFSM(nil, nil)
	if err := h.Restore(io.NopCloser(bytes.NewReader(old))); err != nil {
		t.Fatal(err)
	}
	if h.Topics().Known || h.AppliedIndex() != 9 || !reflect.DeepEqual(h.State(), f.State()) {
		t.Fatalf("old-format restore: topics %+v index %d", h.Topics(), h.AppliedIndex())
	}
	// A command of another kind ends with its members, as before topic commands.
	b, _ := Command{Kind: CmdNoop, Topics: []protocol.TopicConfig{tc("ignored", 1)}}.MarshalBinary()
	if nb, _ := (Command{Kind: CmdNoop}).MarshalBinary(); !bytes.Equal(b, nb) {
		t.Fatal("a no-op encodes topics")
	}
}
