package bench

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestWorkloadFiles parses every OMB workload shipped in workloads/ as it is and loads its
// payload.
func TestWorkloadFiles(t *testing.T) {
	files, err := filepath.Glob("workloads/*.yaml")
	if err != nil || len(files) == 0 {
		t.Fatalf("no workload files: %v", err)
	}
	for _, f := range files {
		t.Run(filepath.Base(f), func(t *testing.T) {
			w, err := LoadWorkload(f)
			if err != nil {
				t.Fatal(err)
			}
			if w.Name == "" || w.Topics < 1 || w.PartitionsPerTopic < 1 || w.TestDurationMinutes < 1 {
				t.Fatalf("implausible workload: %+v", w)
			}
			// Defaults of fields the files leave out.
			if w.WarmupDurationMinutes != 1 || w.BacklogDrainRatio != 1 || w.KeyDistributor != NoKey {
				t.Errorf("defaults: warmup %d, drain ratio %v, key distributor %q", w.WarmupDurationMinutes, w.BacklogDrainRatio, w.KeyDistributor)
			}
			p, err := WorkloadPayloads(w, 1)
			if err != nil {
				t.Fatal(err)
			}
			for _, b := range p.Bodies {
				if len(b) != w.MessageSize {
					t.Errorf("body of %d bytes, messageSize %d", len(b), w.MessageSize)
				}
			}
		})
	}
}

func TestWorkloadOfFile(t *testing.T) {
	w, err := LoadWorkload("workloads/1-topic-100-partitions-1kb-4p-4c-200k-backlog.yaml")
	if err != nil {
		t.Fatal(err)
	}
	want := Workload{
		Name:                      "Backlog for 200k rate 4 producers and 4 consumers on 1 topic / 100 partition",
		Topics:                    1,
		PartitionsPerTopic:        100,
		KeyDistributor:            NoKey,
		MessageSize:               1024,
		UseRandomizedPayloads:     true,
		RandomBytesRatio:          0.5,
		RandomizedPayloadPoolSize: 1000,
		SubscriptionsPerTopic:     1,
		ConsumerPerSubscription:   4,
		ProducersPerTopic:         4,
		ProducerRate:              200000,
		ConsumerBacklogSizeGB:     512,
		BacklogDrainRatio:         1,
		TestDurationMinutes:       5,
		WarmupDurationMinutes:     1,
	}
	w.path = ""
	if *w != want {
		t.Fatalf("got  %+v\nwant %+v", *w, want)
	}
	p, err := WorkloadPayloads(w, 42)
	if err != nil {
		t.Fatal(err)
	}
	if len(p.Bodies) != 1000 || !p.Random {
		t.Fatalf("%d bodies, random %v", len(p.Bodies), p.Random)
	}
	// OMB: the first randomBytesRatio of each payload is random, the rest zeros.
	for _, b := range p.Bodies[:10] {
		if !bytes.Equal(b[512:], make([]byte, 512)) || bytes.Equal(b[:512], make([]byte, 512)) {
			t.Fatalf("payload not half random, half zeros: %x", b)
		}
	}
	again, _ := WorkloadPayloads(w, 42)
	if !bytes.Equal(again.Bodies[7], p.Bodies[7]) {
		t.Fatal("the same seed gave other payloads")
	}
}

func TestPayloadFileResolvesAgainstOMBRoot(t *testing.T) {
	root := t.TempDir()
	for _, d := range []string{"workloads", "payload", "elsewhere"} {
		if err := os.Mkdir(filepath.Join(root, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	write(t, filepath.Join(root, "payload", "p.data"), "0123456789")
	abs := filepath.Join(root, "elsewhere", "abs.data")
	write(t, abs, "abs")
	for name, tt := range map[string]struct{ payloadFile, want string }{
		"relative": {"payload/p.data", "0123456789"},
		"absolute": {abs, "abs"},
	} {
		t.Run(name, func(t *testing.T) {
			wf := filepath.Join(root, "workloads", "w.yaml")
			write(t, wf, "name: w\ntopics: 1\npartitionsPerTopic: 2\nmessageSize: 10\npayloadFile: \""+tt.payloadFile+"\"\n"+
				"subscriptionsPerTopic: 1\nconsumerPerSubscription: 1\nproducersPerTopic: 1\nproducerRate: 10\ntestDurationMinutes: 1\n")
			w, err := LoadWorkload(wf)
			if err != nil {
				t.Fatal(err)
			}
			p, err := WorkloadPayloads(w, 1)
			if err != nil {
				t.Fatal(err)
			}
			if string(p.Bodies[0]) != tt.want {
				t.Fatalf("body %q, want %q", p.Bodies[0], tt.want)
			}
		})
	}
}

const validWorkload = `name: x
topics: 2
partitionsPerTopic: 4
messageSize: 100
subscriptionsPerTopic: 1
consumerPerSubscription: 1
producersPerTopic: 1
producerRate: 1000
testDurationMinutes: 1
`

func TestParseWorkloadErrors(t *testing.T) {
	tests := []struct {
		name, doc, want string
	}{
		{"unknown field is named", validWorkload + "producerRateList: [1, 2]\n", "field producerRateList not found"},
		{"typo is named", strings.Replace(validWorkload, "topics:", "topic:", 1), "field topic not found"},
		{"wrong type", strings.Replace(validWorkload, "topics: 2", "topics: two", 1), "cannot unmarshal"},
		{"empty", "", "empty workload"},
		{"no topics", strings.Replace(validWorkload, "topics: 2", "topics: 0", 1), "topics 0"},
		{"too many partitions", strings.Replace(validWorkload, "partitionsPerTopic: 4", "partitionsPerTopic: 5000", 1), "partitionsPerTopic 5000"},
		{"bad key distributor", validWorkload + "keyDistributor: ROUND\n", `keyDistributor "ROUND"`},
		{"negative rate", strings.Replace(validWorkload, "producerRate: 1000", "producerRate: -1", 1), "producerRate -1"},
		{"ratio above 1", validWorkload + "randomBytesRatio: 1.5\n", "randomBytesRatio 1.5"},
		{"randomized without pool", validWorkload + "useRandomizedPayloads: true\n", "randomizedPayloadPoolSize 0"},
		{"no producers", strings.Replace(validWorkload, "producersPerTopic: 1", "producersPerTopic: 0", 1), "producersPerTopic 0"},
		{"drain ratio", validWorkload + "backlogDrainRatio: -0.1\n", "backlogDrainRatio"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := ParseWorkload([]byte(tt.doc))
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("err = %v, want one containing %q", err, tt.want)
			}
		})
	}
	w, err := ParseWorkload([]byte(validWorkload + "keyDistributor: KEY_ROUND_ROBIN\nwarmupDurationMinutes: 0\n"))
	if err != nil {
		t.Fatal(err)
	}
	if w.KeyDistributor != KeyRoundRobin || w.WarmupDurationMinutes != 0 {
		t.Fatalf("explicit values lost: %+v", w)
	}
}

func TestLoghubPayloads(t *testing.T) {
	p, err := LoadPayloadDir("testdata/loghub")
	if err != nil {
		t.Fatal(err)
	}
	if len(p.Files) != 8 || filepath.Base(p.Files[0]) != "Android_2k.log" || filepath.Base(p.Files[7]) != "Zookeeper_2k.log" {
		t.Fatalf("files %v", p.Files)
	}
	// 8 files of 2,000 lines; some end without a newline, all use CRLF.
	if len(p.Bodies) != 16000 || p.SkippedEmpty != 0 || !p.Replay {
		t.Fatalf("%d bodies, %d empty skipped, replay %v", len(p.Bodies), p.SkippedEmpty, p.Replay)
	}
	for i, b := range p.Bodies {
		if len(b) == 0 || bytes.ContainsAny(b, "\r\n") {
			t.Fatalf("body %d: %q", i, b)
		}
		if p.CRCs[i] != bodyCRC(b) {
			t.Fatalf("crc %d", i)
		}
	}
	first, err := os.ReadFile(p.Files[0])
	if err != nil {
		t.Fatal(err)
	}
	line, _, _ := bytes.Cut(first, []byte("\r\n"))
	if !bytes.Equal(p.Bodies[0], line) {
		t.Fatalf("first body %q, want %q", p.Bodies[0], line)
	}
	if !bytes.HasPrefix(p.Bodies[2000], []byte("[Sun Dec 04 04:47:44 2005]")) { // Apache_2k.log comes second
		t.Fatalf("body 2000 = %q", p.Bodies[2000])
	}
}

func TestLoadPayloadDir(t *testing.T) {
	tests := []struct {
		name    string
		files   map[string]string
		want    []string
		skipped int
		err     string
	}{
		{
			name:  "log files only, in name order",
			files: map[string]string{"b.log": "b1\nb2\n", "a.log": "a1\r\na2", "notes.txt": "ignored\n", "LICENSE": "x\n"},
			want:  []string{"a1", "a2", "b1", "b2"},
		},
		{
			name:  "no log files: every file but LICENSE, README and NOTICE",
			files: map[string]string{"2.txt": "two\n", "1.data": "one\n", "LICENSE": "l\n", "README.md": "r\n", "NOTICE": "n\n", ".hidden": "h\n"},
			want:  []string{"one", "two"},
		},
		{
			name:    "empty lines are skipped",
			files:   map[string]string{"a.log": "\nx\n\r\n\ny\n\n"},
			want:    []string{"x", "y"},
			skipped: 4,
		},
		{
			name:  "a lone CR inside a line is kept",
			files: map[string]string{"a.log": "x\ry\r\n"},
			want:  []string{"x\ry"},
		},
		{name: "nothing but licences", files: map[string]string{"LICENSE": "l\n"}, err: "no payload files"},
		{name: "only empty lines", files: map[string]string{"a.log": "\n\n"}, err: "no non-empty lines"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			for name, text := range tt.files {
				write(t, filepath.Join(dir, name), text)
			}
			if err := os.Mkdir(filepath.Join(dir, "sub.log"), 0o755); err != nil { // directories are skipped
				t.Fatal(err)
			}
			p, err := LoadPayloadDir(dir)
			if tt.err != "" {
				if err == nil || !strings.Contains(err.Error(), tt.err) {
					t.Fatalf("err = %v, want %q", err, tt.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, b := range p.Bodies {
				got = append(got, string(b))
			}
			if strings.Join(got, "|") != strings.Join(tt.want, "|") || p.SkippedEmpty != tt.skipped {
				t.Fatalf("bodies %q skipped %d, want %q skipped %d", got, p.SkippedEmpty, tt.want, tt.skipped)
			}
		})
	}
}

func write(t *testing.T, path, text string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
}
