package bench

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/petrel-mq/petrel/internal/testutil"
)

func TestNatsNames(t *testing.T) {
	if got := natsSubject("petrel-bench-ab-0", 15); got != "petrel-bench-ab-0.15" {
		t.Errorf("subject %q", got)
	}
	if got := natsDurable("sub-0-ab", 3); got != "sub-0-ab-p3" {
		t.Errorf("durable %q", got)
	}
	if q := natsQueue("t", 7); q != (QueueRef{Topic: "t", Broker: natsBroker, QueueID: 7}) {
		t.Errorf("queue %v", q)
	}
}

func TestNatsPartition(t *testing.T) {
	for rr := range uint64(40) {
		if p := natsPartition("", rr, 16); p != int(rr%16) {
			t.Fatalf("round robin %d: partition %d", rr, p)
		}
	}
	// A key always picks the same partition, whatever the round-robin counter.
	for _, key := range []string{"a", "abcdefg", "Zz09xyz"} {
		p := natsPartition(key, 0, 16)
		if p < 0 || p >= 16 {
			t.Fatalf("key %q: partition %d", key, p)
		}
		for rr := range uint64(5) {
			if q := natsPartition(key, rr, 16); q != p {
				t.Fatalf("key %q: partition %d then %d", key, p, q)
			}
		}
	}
}

func TestNatsConfig(t *testing.T) {
	c := Config{Driver: DriverNats}
	if err := c.setNatsDefaults(); err != nil || c.NatsURL != DefaultNatsURL || c.NatsReplicas != 1 || c.HASampleInterval >= 0 {
		t.Fatalf("defaults: %v %+v", err, c)
	}
	c = Config{}
	if err := c.setNatsDefaults(); err != nil || c.Driver != DriverPetrel {
		t.Fatalf("petrel default: %v %q", err, c.Driver)
	}
	for _, bad := range []Config{
		{Driver: "kafka"},
		{Driver: DriverNats, NatsReplicas: 7},
		{Driver: DriverNats, ConsumeOnly: true},
		{Driver: DriverNats, NoCreateTopic: true},
		{Driver: DriverNats, NameServers: "127.0.0.1:9876"},
	} {
		if err := bad.setNatsDefaults(); err == nil {
			t.Errorf("%+v accepted", bad)
		}
	}
}

// natsServerBinary returns a nats-server from PATH or the repository's bin/ ("" if none).
func natsServerBinary() string {
	if p, err := exec.LookPath("nats-server"); err == nil {
		return p
	}
	if p, err := filepath.Abs(filepath.Join("..", "bin", "nats-server")); err == nil {
		if fi, err := os.Stat(p); err == nil && !fi.IsDir() && fi.Mode()&0o111 != 0 {
			return p
		}
	}
	return ""
}

// TestNatsRun runs a short verified workload through the NATS driver against a nats-server it
// starts (skipped without one: scripts/nats-server.sh installs it into bin/).
func TestNatsRun(t *testing.T) {
	bin := natsServerBinary()
	if bin == "" {
		t.Skip("no nats-server on PATH or in bin/ (scripts/nats-server.sh installs one)")
	}
	if testing.Short() {
		t.Skip("short")
	}
	port := testutil.FreePorts(t, 1)[0]
	var serverLog strings.Builder
	cmd := exec.Command(bin, "-a", "127.0.0.1", "-p", fmt.Sprint(port), "-js", "-sd", t.TempDir())
	cmd.Stdout, cmd.Stderr = &serverLog, &serverLog
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		c, err := net.Dial("tcp", addr)
		if err == nil {
			c.Close()
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("nats-server did not listen on %s: %v\n%s", addr, err, serverLog.String())
		}
	}

	var out testutil.SyncBuffer
	cfg := Config{
		Driver:       DriverNats,
		NatsURL:      "nats://" + addr,
		WorkloadFile: "workloads/1-topic-16-partitions-1kb.yaml",
		Duration:     3 * time.Second,
		Verify:       true,
		Out:          &out,
		Logger:       testLogger(t),
	}
	cfg.SetProducerRate(10000)
	res, err := Run(t.Context(), cfg)
	t.Logf("output:\n%s", out.String())
	if err != nil {
		t.Fatal(err)
	}
	if !res.OK() || res.Lost != 0 || res.MessagesAcked == 0 || res.MessagesConsumed != res.MessagesAcked {
		t.Fatalf("%s; problems %q", countsOf(res), res.Problems)
	}
	if res.Driver != DriverNatsName || res.Partitions != 16 {
		t.Errorf("driver %q partitions %d", res.Driver, res.Partitions)
	}
}
