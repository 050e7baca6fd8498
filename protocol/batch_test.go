package protocol

import (
	"bytes"
	"errors"
	"testing"
)

func TestBatchRoundTrip(t *testing.T) {
	var bb BatchBuilder
	bb.Reset("TopicA", 3, 42, 7)
	msgs := []Message{
		{Keys: []byte("k1 k2"), Tags: []byte("tagA"), Body: []byte("hello"), Timestamp: 1000},
		{Tags: []byte("tagA"), Properties: AppendProperty(nil, "a", "b"), Body: []byte("world!"), Timestamp: 1005},
		{Tags: []byte("tagA"), Body: nil, Timestamp: 999},
	}
	for i := range msgs {
		bb.Add(&msgs[i])
	}
	b := bb.Finish()
	StampBatch(b, 4096, 100, 123456, 2)
	h, tagHash, err := ValidateBatch(b, BatchLimits{})
	if err != nil {
		t.Fatal(err)
	}
	if h.Count != 3 || h.QueueID != 3 || string(h.Topic) != "TopicA" || h.PhysicalOffset != 4096 || h.BaseQueueOffset != 100 || h.Epoch != 2 || h.ProducerID != 42 {
		t.Fatalf("header %+v", h)
	}
	if h.MaxTimestamp != 1005 || h.FirstTimestamp != 1000 {
		t.Fatalf("timestamps %d %d", h.FirstTimestamp, h.MaxTimestamp)
	}
	if tagHash != TagHash([]byte("tagA")) {
		t.Fatalf("tag hash %d", tagHash)
	}
	it := NewMessageIterator(b, h)
	for i := 0; ; i++ {
		m, ok := it.Next()
		if !ok {
			if i != 3 {
				t.Fatalf("iterated %d messages", i)
			}
			break
		}
		if !bytes.Equal(m.Body, msgs[i].Body) || !bytes.Equal(m.Keys, msgs[i].Keys) || !bytes.Equal(m.Properties, msgs[i].Properties) || m.Timestamp != msgs[i].Timestamp || m.QueueOffset != 100+int64(i) || m.Sequence != 7+int32(i) {
			t.Fatalf("message %d: %+v", i, m)
		}
	}
	if it.Err() != nil {
		t.Fatal(it.Err())
	}
	b[len(b)-1] ^= 1
	if _, _, err := ValidateBatch(b, BatchLimits{}); !errors.Is(err, ErrBatchCRC) {
		t.Fatalf("corrupted batch: %v", err)
	}
}

// TestControlBatch builds a deletion record: it validates only where control batches are
// allowed (a stored log), names its topic and type, and its shape is checked.
func TestControlBatch(t *testing.T) {
	b := AppendControlBatch([]byte("prefix"), "Gone", ControlDeleteTopic, 1234)[len("prefix"):]
	StampControlBatch(b, 4096, 0, 99, 3)
	if _, _, err := ValidateBatch(b, BatchLimits{}); !errors.Is(err, ErrControlBatch) || !errors.Is(err, ErrBatchMalformed) {
		t.Fatalf("a control batch as a producer's send: %v, want ErrControlBatch", err)
	}
	h, tag, err := ValidateBatch(b, BatchLimits{AllowControl: true})
	if err != nil {
		t.Fatal(err)
	}
	if string(h.Topic) != "Gone" || h.Count != 1 || h.QueueID != 0 || tag != 0 || h.PhysicalOffset != 4096 || h.Epoch != 3 {
		t.Fatalf("header %+v, tag hash %d", h, tag)
	}
	if typ, ok := ControlOf(b, h); !ok || typ != ControlDeleteTopic {
		t.Fatalf("ControlOf = %d, %v", typ, ok)
	}
	if a, ok := BatchAttributes(b); !ok || a != AttrControl {
		t.Fatalf("BatchAttributes = %#x, %v", a, ok)
	}
	var bb BatchBuilder
	bb.Reset("Plain", 0, 0, 0)
	bb.Add(&Message{Body: []byte{0, 1}})
	plain := bb.Finish()
	ph, _, err := ValidateBatch(plain, BatchLimits{AllowControl: true})
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := ControlOf(plain, ph); ok {
		t.Fatal("a producer's batch whose body looks like a control type is a control batch")
	}
	// An unknown control type is refused.
	odd := AppendControlBatch(nil, "Gone", ControlType(77), 1)
	if _, _, err := ValidateBatch(odd, BatchLimits{AllowControl: true}); !errors.Is(err, ErrControlBatch) {
		t.Fatalf("control type 77: %v", err)
	}
}

// TestControlBatchStamp: a deletion record carries a copy of its broker-assigned fields under
// its CRC (StampControlBatch), so a copy of it placed elsewhere is refused whichever of its
// fields outside the CRC were patched to pass there; a record of an earlier version (its type
// alone in its body) is taken as it is.
func TestControlBatchStamp(t *testing.T) {
	lim := BatchLimits{AllowControl: true}
	rec := AppendControlBatch(nil, "Gone", ControlDeleteTopic, 1234)
	StampControlBatch(rec, 4096, 0, 99, 3)
	if _, _, err := ValidateBatch(rec, lim); err != nil {
		t.Fatalf("a stamped record: %v", err)
	}
	for _, c := range []struct {
		name  string
		patch func(b []byte)
	}{
		{"physical offset", func(b []byte) { StampBatch(b, 8192, 0, 99, 3) }},
		{"physical offset and store timestamp", func(b []byte) { StampBatch(b, 8192, 0, 150, 3) }},
		{"physical offset, store timestamp and epoch", func(b []byte) { StampBatch(b, 8192, 0, 150, 4) }},
		{"base queue offset", func(b []byte) { StampBatch(b, 4096, 7, 99, 3) }},
	} {
		b := append([]byte(nil), rec...)
		c.patch(b)
		if _, _, err := ValidateBatch(b, lim); !errors.Is(err, ErrControlBatch) || !errors.Is(err, ErrBatchMalformed) {
			t.Errorf("a copy with its %s patched: %v, want ErrControlBatch", c.name, err)
		}
	}
	// A record whose body is its type alone, as earlier versions write it, has no copy to check.
	var legacy BatchBuilder
	legacy.Reset("Gone", 0, 0, 0)
	legacy.Add(&Message{Body: []byte{0, byte(ControlDeleteTopic)}, Timestamp: 1})
	old := append([]byte(nil), legacy.Finish()...)
	putU16(old, offAttributes, AttrControl)
	putU32(old, offCRC, CRC32C(old[BatchCRCStart:]))
	StampControlBatch(old, 8192, 0, 5, 1) // as StampBatch
	if h, _, err := ValidateBatch(old, lim); err != nil || h.PhysicalOffset != 8192 || h.StoreTimestamp != 5 {
		t.Fatalf("an earlier version's record: %+v, %v", h, err)
	}
	// A body between the type and the full copy is malformed.
	var bb BatchBuilder
	bb.Reset("Gone", 0, 0, 0)
	bb.Add(&Message{Body: []byte{0, byte(ControlDeleteTopic), 1, 2, 3}, Timestamp: 1})
	short := append([]byte(nil), bb.Finish()...)
	putU16(short, offAttributes, AttrControl)
	putU32(short, offCRC, CRC32C(short[BatchCRCStart:]))
	if _, _, err := ValidateBatch(short, lim); !errors.Is(err, ErrControlBatch) {
		t.Fatalf("a record body of 5 bytes: %v, want ErrControlBatch", err)
	}
}
