package bench

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/petrel-mq/petrel/internal/testutil"
)

// TestEmbeddedReplicated runs the loghub replay, verified, against the embedded broker group (a
// SYNC_MASTER and 2 slaves) as a running cluster, then a consume-only run against each member
// alone and one following the read suggestions: each returns every message. The producing run
// reports both slaves' lag and compression and the served-by counts, in the summary and the JSON.
func TestEmbeddedReplicated(t *testing.T) {
	log := testLogger(t)
	ecfg := Config{}
	if err := ecfg.setDefaults(); err != nil {
		t.Fatal(err)
	}
	emb, err := startEmbedded(&ecfg, log)
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := emb.close(); err != nil {
			t.Error(err)
		}
	}()
	if len(emb.brokers) != 3 || emb.role != "SYNC_MASTER" {
		t.Fatalf("embedded group: %s", emb.describe())
	}

	var out testutil.SyncBuffer
	jsonPath := filepath.Join(t.TempDir(), "out.json")
	res, err := Run(t.Context(), Config{
		PayloadDir:  "testdata/loghub",
		NameServers: emb.nameServers(),
		TopicID:     "rep",
		Verify:      true,
		JSONFile:    jsonPath,
		Out:         &out,
		Logger:      log,
	})
	t.Logf("output:\n%s", out.String())
	if err != nil {
		t.Fatal(err)
	}
	if !res.OK() || res.MessagesAcked != 16000 || res.MessagesConsumed != 16000 {
		t.Fatalf("%s; problems %q", countsOf(res), res.Problems)
	}
	var served int64
	for _, s := range res.ServedBy {
		served += s.Messages
	}
	if len(res.ServedBy) == 0 || res.ServedBy[0].BrokerID != 0 || served != 16000 {
		t.Errorf("served by %+v: %d messages, want 16000", res.ServedBy, served)
	}
	if len(res.Replication) != 2 {
		t.Fatalf("replication %+v", res.Replication)
	}
	for i, r := range res.Replication {
		// loghub lines compress well; every sample saw the slave connected.
		if r.BrokerName != embeddedBrokerName || r.BrokerID != int64(i+1) || r.Samples == 0 || r.ConnectedSamples != r.Samples ||
			r.CompressionRatio < 2 || r.RawBytes < 16000*100 {
			t.Errorf("slave %d: %+v", i+1, r)
		}
	}
	for _, want := range []string{"served by         master pulls=", "replication       broker-a slave 1 ", "replication       broker-a slave 2 "} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("summary lacks %q", want)
		}
	}
	data, err := os.ReadFile(jsonPath)
	if err != nil {
		t.Fatal(err)
	}
	var m struct {
		ServedBy    []map[string]any `json:"servedBy"`
		Replication []map[string]any `json:"replication"`
	}
	if err := json.Unmarshal(data, &m); err != nil || len(m.ServedBy) == 0 || len(m.Replication) != 2 || m.Replication[1]["brokerId"] != 2.0 {
		t.Fatalf("JSON: %v; %+v", err, m)
	}

	for _, id := range []int64{1, 2, 0, -1} {
		t.Run(fmt.Sprintf("consume-only/read-broker-id=%d", id), func(t *testing.T) {
			var out testutil.SyncBuffer
			cfg := Config{ConsumeOnly: true, NameServers: emb.nameServers(), TopicID: "rep", Out: &out, Logger: log}
			if id >= 0 {
				cfg.SetReadBrokerID(id)
			}
			res, err := Run(t.Context(), cfg)
			t.Logf("output:\n%s", out.String())
			if err != nil {
				t.Fatal(err)
			}
			if !res.OK() || res.ExpectedMessages != 16000 || res.MessagesConsumed != 16000 || res.ConsumedOutside != 0 || !res.Drained {
				t.Fatalf("%s; expected %d consumed %d; problems %q", countsOf(res), res.ExpectedMessages, res.MessagesConsumed, res.Problems)
			}
			var total int64
			for _, s := range res.ServedBy {
				total += s.Messages
				if id >= 0 && s.BrokerID != id && s.Messages != 0 {
					t.Errorf("reads pinned to %d, but %s served %d message(s)", id, memberName(s.BrokerID), s.Messages)
				}
			}
			if total != 16000 || res.ReadBrokerID != id {
				t.Errorf("served by %+v (read broker %d): %d messages", res.ServedBy, res.ReadBrokerID, total)
			}
		})
	}
}

// TestEmbeddedNoSlaves: --slaves 0 runs a lone ASYNC_MASTER, and nothing is sampled.
func TestEmbeddedNoSlaves(t *testing.T) {
	dir := t.TempDir()
	var b strings.Builder
	for i := range 300 {
		fmt.Fprintf(&b, "line %d\n", i)
	}
	if err := os.WriteFile(filepath.Join(dir, "a.log"), []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	var out testutil.SyncBuffer
	cfg := Config{PayloadDir: dir, Verify: true, SegmentSize: 16 << 20, Out: &out, Logger: testLogger(t)}
	cfg.SetEmbeddedSlaves(0)
	res, err := Run(t.Context(), cfg)
	t.Logf("output:\n%s", out.String())
	if err != nil {
		t.Fatal(err)
	}
	if !res.OK() || res.MessagesConsumed != 300 || len(res.Replication) != 0 || len(res.ServedBy) != 1 || res.ServedBy[0].Messages != 300 {
		t.Fatalf("%s; replication %+v served %+v", countsOf(res), res.Replication, res.ServedBy)
	}
	if !strings.Contains(out.String(), "(ASYNC_MASTER)") || strings.Contains(out.String(), "replication ") {
		t.Error("the output does not show a lone ASYNC_MASTER")
	}
	assertDataDirRemoved(t, out.String())
}
