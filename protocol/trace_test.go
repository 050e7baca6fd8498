package protocol

import (
	"errors"
	"reflect"
	"testing"
)

func TestSendTraceTable(t *testing.T) {
	want := SendTraceTable{Next: 42, Dropped: 3, Traces: []SendTrace{
		{ID: 7, Topic: "TopicA", QueueID: 2, BaseQueueOffset: 1 << 33, Count: 16,
			Stamps: [TraceStamps]int64{1, 2, 3, 0, 5, 6},
			Slaves: []TraceSlave{{BrokerID: 1, Pulled: 3, Served: 4, Acked: 5}, {BrokerID: 2, Pulled: 2, Served: 4, Acked: 0}}},
		{ID: 8, Topic: "", Count: 1},
	}}
	enc := want.AppendTo(nil)
	var got SendTraceTable
	if err := got.ReadFrom(enc); err != nil || !reflect.DeepEqual(got, want) {
		t.Fatalf("round trip: %+v, %v; want %+v", got, err, want)
	}
	for n := range len(enc) {
		if err := new(SendTraceTable).ReadFrom(enc[:n]); err == nil {
			t.Fatalf("a %d-byte prefix of %d decoded", n, len(enc))
		}
	}
	if err := new(SendTraceTable).ReadFrom(append(enc, 0)); !errors.Is(err, ErrTrailingBytes) {
		t.Fatalf("trailing byte: %v", err)
	}
	// A count of slaves beyond the bound is refused, not allocated.
	one := SendTraceTable{Traces: []SendTrace{{ID: 1}}}
	b := one.AppendTo(nil)
	b[len(b)-1] = MaxTraceSlaves + 1
	if err := new(SendTraceTable).ReadFrom(b); !errors.Is(err, ErrBadValue) {
		t.Fatalf("%d slaves: %v", MaxTraceSlaves+1, err)
	}
	// More slaves than the bound are left out of the encoding.
	many := SendTraceTable{Traces: []SendTrace{{ID: 1, Slaves: make([]TraceSlave, MaxTraceSlaves+2)}}}
	if err := got.ReadFrom(many.AppendTo(nil)); err != nil || len(got.Traces[0].Slaves) != MaxTraceSlaves {
		t.Fatalf("encoded %d slaves, %v; want %d", len(got.Traces[0].Slaves), err, MaxTraceSlaves)
	}
}
