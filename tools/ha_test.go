package tools

import (
	"bytes"
	"slices"
	"strings"
	"testing"

	"github.com/petrel-mq/petrel/protocol"
)

func TestWriteHAStatusMaster(t *testing.T) {
	st := &protocol.HAStatus{Role: "SYNC_MASTER", Epoch: 4, LogMin: 0, LogEnd: 5000, ConfirmedOffset: 4000, KnownConfirmed: 4000, Electable: true, InSyncReplicas: 2, Slaves: []protocol.SlaveStatus{
		{BrokerID: 1, Addr: "127.0.0.1:10921", AckedOffset: 5000, InSync: true, Connected: true, RawBytes: 342, WireBytes: 100},
		{BrokerID: 2, Addr: "127.0.0.1:10931", AckedOffset: 1000, LagBytes: 4000, LagMs: 1500},
	}}
	var out bytes.Buffer
	if err := WriteHAStatus(&out, st); err != nil {
		t.Fatal(err)
	}
	got := lines(out.String())
	want := [][]string{
		{"#Role", "SYNC_MASTER"}, {"#BrokerId", "0"}, {"#Epoch", "4"}, {"#LogMinOffset", "0"}, {"#LogEndOffset", "5000"},
		{"#ConfirmedOffset", "4000"}, {"#KnownConfirmedOffset", "4000"}, {"#Electable", "true"}, {"#InSyncReplicas", "2"}, {"#SlaveNum", "2"}, nil,
		{"#BrokerId", "#Addr", "#AckedOffset", "#LagBytes", "#LagMs", "#InSync", "#Connected", "#Compression"},
		{"1", "127.0.0.1:10921", "5000", "0", "0", "true", "true", "3.42x"},
		{"2", "127.0.0.1:10931", "1000", "4000", "1500", "false", "false", "-"},
	}
	if len(got) != len(want) {
		t.Fatalf("output:\n%s", out.String())
	}
	for i := range want {
		if c := cells(got[i]); !slices.Equal(c, want[i]) {
			t.Fatalf("line %d: %q, want %q\noutput:\n%s", i, c, want[i], out.String())
		}
	}
}

func TestWriteHAStatusSlave(t *testing.T) {
	st := &protocol.HAStatus{Role: "SLAVE", BrokerID: 2, Epoch: 4, LogEnd: 3000, ConfirmedOffset: 2500, KnownConfirmed: -1, Electable: true,
		MasterAddr: "127.0.0.1:10911", MasterHAAddr: "127.0.0.1:10912", MasterEnd: 5000, Connected: true}
	var out bytes.Buffer
	if err := WriteHAStatus(&out, st); err != nil {
		t.Fatal(err)
	}
	want := "#Role             SLAVE\n#BrokerId         2\n#Epoch            4\n#LogMinOffset     0\n#LogEndOffset     3000\n" +
		"#ConfirmedOffset  2500\n#Electable        true\n#MasterAddr       127.0.0.1:10911\n#MasterHAAddr     127.0.0.1:10912\n" +
		"#MasterEndOffset  5000\n#LagBytes         2000\n#Connected        true\n"
	if out.String() != want {
		t.Fatalf("output:\n%s\nwant:\n%s", out.String(), want)
	}
	// A slave that never heard from its master: dashes, no negative lag.
	out.Reset()
	if err := WriteHAStatus(&out, &protocol.HAStatus{Role: "SLAVE", BrokerID: 1, LogEnd: 10, KnownConfirmed: -1}); err != nil {
		t.Fatal(err)
	}
	if s := out.String(); !strings.Contains(s, "#MasterAddr       -\n") || !strings.Contains(s, "#LagBytes         0\n") || !strings.Contains(s, "#Connected        false\n") {
		t.Fatalf("output:\n%s", s)
	}
}

// TestWriteHAStatusStopped: a member that stopped following its group says why, and that it
// is not electable.
func TestWriteHAStatusStopped(t *testing.T) {
	var out bytes.Buffer
	st := &protocol.HAStatus{Role: "SLAVE", BrokerID: 3, LogEnd: 10, KnownConfirmed: 500, Stopped: "a second cut for epoch 7"}
	if err := WriteHAStatus(&out, st); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"#KnownConfirmedOffset  500\n", "#Electable             false\n", "#Stopped               a second cut for epoch 7\n"} {
		if !strings.Contains(out.String(), want) {
			t.Fatalf("output lacks %q:\n%s", want, out.String())
		}
	}
}

func TestCompressionRatio(t *testing.T) {
	f := func(raw, wire int64, want string) {
		t.Helper()
		if got := CompressionRatio(raw, wire); got != want {
			t.Fatalf("CompressionRatio(%d, %d) = %q, want %q", raw, wire, got, want)
		}
	}
	f(342, 100, "3.42x")
	f(100, 100, "1.00x")
	f(0, 0, "-")
	f(10, 0, "-")
}
