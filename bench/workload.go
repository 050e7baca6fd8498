package bench

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"gopkg.in/yaml.v3"
)

// KeyDistributor says how messages are given keys, as OMB's KeyDistributorType. A keyed message
// carries the key as its ShardingKey (so it picks the queue) and as its Keys.
type KeyDistributor string

// Key distributors (OMB's names).
const (
	// NoKey sends messages without a key; the producer spreads them over the queues.
	NoKey KeyDistributor = "NO_KEY"
	// KeyRoundRobin cycles through a pool of random keys.
	KeyRoundRobin KeyDistributor = "KEY_ROUND_ROBIN"
	// RandomNano picks a key of the pool at random for every message.
	RandomNano KeyDistributor = "RANDOM_NANO"
)

// keyPoolSize is the number of distinct keys of the keyed distributors (OMB's 10,000).
const keyPoolSize = 10_000

// Workload is an OpenMessaging Benchmark workload file. Field names and defaults are OMB's; a
// field OMB does not know is an error.
type Workload struct {
	Name string `yaml:"name" json:"name"`
	// Topics is the number of topics to create.
	Topics int `yaml:"topics" json:"topics"`
	// PartitionsPerTopic is the queue count of each topic.
	PartitionsPerTopic int            `yaml:"partitionsPerTopic" json:"partitionsPerTopic"`
	KeyDistributor     KeyDistributor `yaml:"keyDistributor" json:"keyDistributor"`
	// MessageSize is the body size in bytes (of generated payloads; a payload file's size wins).
	MessageSize int `yaml:"messageSize" json:"messageSize"`
	// UseRandomizedPayloads sends bodies from a pool of RandomizedPayloadPoolSize payloads, each
	// RandomBytesRatio random bytes followed by zeros, instead of PayloadFile.
	UseRandomizedPayloads     bool    `yaml:"useRandomizedPayloads" json:"useRandomizedPayloads"`
	RandomBytesRatio          float64 `yaml:"randomBytesRatio" json:"randomBytesRatio"`
	RandomizedPayloadPoolSize int     `yaml:"randomizedPayloadPoolSize" json:"randomizedPayloadPoolSize"`
	// PayloadFile is the body of every message, relative to the OMB root (the parent of the
	// workload file's directory) unless absolute.
	PayloadFile           string `yaml:"payloadFile" json:"payloadFile"`
	SubscriptionsPerTopic int    `yaml:"subscriptionsPerTopic" json:"subscriptionsPerTopic"`
	// ConsumerPerSubscription is the number of consumers in each subscription's group.
	ConsumerPerSubscription int `yaml:"consumerPerSubscription" json:"consumerPerSubscription"`
	ProducersPerTopic       int `yaml:"producersPerTopic" json:"producersPerTopic"`
	// ProducerRate is the total send rate of all producers (msg/s); 0 sends as fast as possible.
	ProducerRate int `yaml:"producerRate" json:"producerRate"`
	// ConsumerBacklogSizeGB > 0 holds the consumers until this much backlog has built up, then
	// lets them drain it down to (1-BacklogDrainRatio) of it before the test may end.
	ConsumerBacklogSizeGB int64   `yaml:"consumerBacklogSizeGB" json:"consumerBacklogSizeGB"`
	BacklogDrainRatio     float64 `yaml:"backlogDrainRatio" json:"backlogDrainRatio"`
	TestDurationMinutes   int     `yaml:"testDurationMinutes" json:"testDurationMinutes"`
	// WarmupDurationMinutes precedes the test; its measurements are discarded (OMB default 1).
	WarmupDurationMinutes int `yaml:"warmupDurationMinutes" json:"warmupDurationMinutes"`

	// path is the file the workload was read from ("" when built in code).
	path string
}

// defaultWorkload returns the values OMB gives the fields a file leaves out.
func defaultWorkload() Workload {
	return Workload{
		KeyDistributor:        NoKey,
		BacklogDrainRatio:     1.0,
		WarmupDurationMinutes: 1,
	}
}

// LoadWorkload reads and validates an OMB workload file.
func LoadWorkload(path string) (*Workload, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("cannot read workload: %w", err)
	}
	w, err := ParseWorkload(data)
	if err != nil {
		return nil, fmt.Errorf("workload %s: %w", path, err)
	}
	w.path = path
	return w, nil
}

// ParseWorkload decodes and validates a workload from YAML. Fields missing from the document
// take OMB's defaults; an unknown field is an error that names it.
func ParseWorkload(data []byte) (*Workload, error) {
	w := defaultWorkload()
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	if err := dec.Decode(&w); err != nil {
		if errors.Is(err, io.EOF) {
			return nil, errors.New("empty workload document")
		}
		return nil, err
	}
	if err := w.Validate(); err != nil {
		return nil, err
	}
	return &w, nil
}

// Validate checks the workload's values.
func (w *Workload) Validate() error {
	switch {
	case w.Topics < 1:
		return fmt.Errorf("topics %d: want at least 1", w.Topics)
	case w.PartitionsPerTopic < 1 || w.PartitionsPerTopic > maxPartitions:
		return fmt.Errorf("partitionsPerTopic %d: want 1..%d", w.PartitionsPerTopic, maxPartitions)
	case w.MessageSize < 0:
		return fmt.Errorf("messageSize %d: must not be negative", w.MessageSize)
	case w.RandomBytesRatio < 0 || w.RandomBytesRatio > 1:
		return fmt.Errorf("randomBytesRatio %v: want 0..1", w.RandomBytesRatio)
	case w.UseRandomizedPayloads && w.RandomizedPayloadPoolSize < 1:
		return fmt.Errorf("randomizedPayloadPoolSize %d: want at least 1 with useRandomizedPayloads", w.RandomizedPayloadPoolSize)
	case w.UseRandomizedPayloads && w.MessageSize < 1:
		return fmt.Errorf("messageSize %d: want at least 1 with useRandomizedPayloads", w.MessageSize)
	case w.SubscriptionsPerTopic < 0:
		return fmt.Errorf("subscriptionsPerTopic %d: must not be negative", w.SubscriptionsPerTopic)
	case w.SubscriptionsPerTopic > 0 && w.ConsumerPerSubscription < 1:
		return fmt.Errorf("consumerPerSubscription %d: want at least 1", w.ConsumerPerSubscription)
	case w.ProducersPerTopic < 1:
		return fmt.Errorf("producersPerTopic %d: want at least 1", w.ProducersPerTopic)
	case w.ProducerRate < 0:
		return fmt.Errorf("producerRate %d: must not be negative (0 means as fast as possible)", w.ProducerRate)
	case w.ConsumerBacklogSizeGB < 0:
		return fmt.Errorf("consumerBacklogSizeGB %d: must not be negative", w.ConsumerBacklogSizeGB)
	case w.BacklogDrainRatio < 0 || w.BacklogDrainRatio > 1:
		return fmt.Errorf("backlogDrainRatio %v: want 0..1", w.BacklogDrainRatio)
	case w.TestDurationMinutes < 0 || w.WarmupDurationMinutes < 0:
		return fmt.Errorf("testDurationMinutes %d / warmupDurationMinutes %d: must not be negative", w.TestDurationMinutes, w.WarmupDurationMinutes)
	}
	switch w.KeyDistributor {
	case NoKey, KeyRoundRobin, RandomNano:
	default:
		return fmt.Errorf("keyDistributor %q: want %s, %s or %s", w.KeyDistributor, NoKey, KeyRoundRobin, RandomNano)
	}
	return nil
}

// maxPartitions is the most queues a topic may have (the broker's limit).
const maxPartitions = 1024

// ombRoot returns the directory payloadFile is relative to: the parent of the workload file's
// directory, as in the OMB source tree (workloads/ and payload/ side by side).
func (w *Workload) ombRoot() (string, error) {
	if w.path == "" {
		return os.Getwd()
	}
	abs, err := filepath.Abs(w.path)
	if err != nil {
		return "", err
	}
	return filepath.Dir(filepath.Dir(abs)), nil
}

// PayloadPath returns where PayloadFile is ("" when the workload names none).
func (w *Workload) PayloadPath() (string, error) {
	if w.PayloadFile == "" {
		return "", nil
	}
	if filepath.IsAbs(w.PayloadFile) {
		return w.PayloadFile, nil
	}
	root, err := w.ombRoot()
	if err != nil {
		return "", fmt.Errorf("cannot resolve payloadFile %q: %w", w.PayloadFile, err)
	}
	return filepath.Join(root, filepath.FromSlash(w.PayloadFile)), nil
}

// Payloads is the set of message bodies a run sends and how producers pick them.
type Payloads struct {
	// Bodies are the distinct bodies; never empty, no body is empty.
	Bodies [][]byte
	// CRCs[i] is the CRC32C of Bodies[i].
	CRCs []uint32
	// Replay sends every body once, in order, and then stops.
	Replay bool
	// Random picks a body at random for every message (OMB's randomized payload pool);
	// otherwise producers cycle through Bodies in order.
	Random bool
	// Source describes where the bodies came from (for the report).
	Source string
	// Files lists the files of a payload directory, in the order their lines are sent.
	Files []string
	// SkippedEmpty counts empty lines of a payload directory, which cannot be message bodies.
	SkippedEmpty int
	// TotalBytes is the sum of the sizes of Bodies.
	TotalBytes int64
}

func (p *Payloads) finish() {
	p.CRCs = make([]uint32, len(p.Bodies))
	p.TotalBytes = 0
	for i, b := range p.Bodies {
		p.CRCs[i] = bodyCRC(b)
		p.TotalBytes += int64(len(b))
	}
}

// avgSize returns the mean body size.
func (p *Payloads) avgSize() int {
	if len(p.Bodies) == 0 {
		return 0
	}
	return int(p.TotalBytes / int64(len(p.Bodies)))
}

// WorkloadPayloads returns the bodies a workload asks for: a pool of randomized payloads, the
// payload file, or, when it names neither, one random payload of MessageSize bytes. seed makes
// the random bytes reproducible.
func WorkloadPayloads(w *Workload, seed uint64) (*Payloads, error) {
	rng := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	p := &Payloads{}
	switch {
	case w.UseRandomizedPayloads:
		// OMB: randomBytesRatio of each payload is random, the rest zeros.
		random := int(float64(w.MessageSize) * w.RandomBytesRatio)
		for range w.RandomizedPayloadPoolSize {
			b := make([]byte, w.MessageSize)
			fillRandom(rng, b[:random])
			p.Bodies = append(p.Bodies, b)
		}
		p.Random = true
		p.Source = fmt.Sprintf("%d randomized payloads of %d bytes (%.0f%% random)", w.RandomizedPayloadPoolSize, w.MessageSize, w.RandomBytesRatio*100)
	case w.PayloadFile != "":
		path, err := w.PayloadPath()
		if err != nil {
			return nil, err
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return nil, fmt.Errorf("cannot read payloadFile: %w", err)
		}
		if len(b) == 0 {
			return nil, fmt.Errorf("payloadFile %s is empty", path)
		}
		p.Bodies = [][]byte{b}
		p.Source = path
	default:
		if w.MessageSize < 1 {
			return nil, errors.New("workload has neither payloadFile, useRandomizedPayloads nor a messageSize")
		}
		b := make([]byte, w.MessageSize)
		fillRandom(rng, b)
		p.Bodies = [][]byte{b}
		p.Source = fmt.Sprintf("random payload of %d bytes", w.MessageSize)
	}
	p.finish()
	return p, nil
}

func fillRandom(rng *rand.Rand, b []byte) {
	for i := 0; i < len(b); i += 8 {
		v := rng.Uint64()
		for j := i; j < len(b) && j < i+8; j++ {
			b[j] = byte(v)
			v >>= 8
		}
	}
}

// LoadPayloadDir reads the message bodies of a payload directory: every line of every file is
// one body, files in name order, lines in file order. The files are the directory's *.log files
// when it has any, otherwise all its regular files except LICENSE*, README*, NOTICE* and hidden
// ones. A line ends at "\n"; a "\r" before it is dropped; empty lines are skipped (a message
// must have a body) and counted in SkippedEmpty.
func LoadPayloadDir(dir string) (*Payloads, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("cannot read payload directory: %w", err)
	}
	var logs, others []string
	for _, e := range entries {
		name := e.Name()
		if !e.Type().IsRegular() || strings.HasPrefix(name, ".") {
			continue
		}
		if strings.HasSuffix(name, ".log") {
			logs = append(logs, name)
			continue
		}
		base := strings.ToUpper(strings.TrimSuffix(name, filepath.Ext(name)))
		if base == "LICENSE" || base == "README" || base == "NOTICE" {
			continue
		}
		others = append(others, name)
	}
	files := logs
	if len(files) == 0 {
		files = others
	}
	slices.Sort(files) // ReadDir sorts already; keep the contract explicit
	if len(files) == 0 {
		return nil, fmt.Errorf("payload directory %s has no payload files", dir)
	}
	p := &Payloads{Replay: true, Source: dir}
	for _, name := range files {
		path := filepath.Join(dir, name)
		data, err := os.ReadFile(path)
		if err != nil {
			return nil, fmt.Errorf("cannot read payload file: %w", err)
		}
		p.Files = append(p.Files, path)
		p.SkippedEmpty += splitLines(data, func(line []byte) { p.Bodies = append(p.Bodies, line) })
	}
	if len(p.Bodies) == 0 {
		return nil, fmt.Errorf("payload directory %s has no non-empty lines", dir)
	}
	p.finish()
	return p, nil
}

// splitLines calls fn for every non-empty line of data (sub-slices of data, capacity clipped)
// and returns the number of empty lines. A final line without "\n" counts; a trailing "\n" does
// not start another line.
func splitLines(data []byte, fn func([]byte)) (empty int) {
	for len(data) > 0 {
		i := bytes.IndexByte(data, '\n')
		var line []byte
		if i < 0 {
			line, data = data, nil
		} else {
			line, data = data[:i], data[i+1:]
		}
		line = bytes.TrimSuffix(line, []byte{'\r'})
		if len(line) == 0 {
			empty++
			continue
		}
		fn(line[:len(line):len(line)])
	}
	return empty
}
