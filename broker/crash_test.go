package broker

import (
	"context"
	"fmt"
	"math/rand"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/petrel-mq/petrel/internal/testutil"
	"github.com/petrel-mq/petrel/protocol"
	"github.com/petrel-mq/petrel/protocol/rpc"
)

// The crash tests run the real petrel-broker binary, kill it with SIGKILL in the middle of a
// SYNC_FLUSH run (and, through a failpoint, in the middle of a segment roll), restart it, and
// check that every acknowledged message is still there, byte-identical, at the offset the
// acknowledgement gave, with the consume queues matching the log.

func buildBrokerBinary(t *testing.T) string {
	t.Helper()
	if testing.Short() {
		t.Skip("builds and kills a real broker process")
	}
	bin := filepath.Join(t.TempDir(), "petrel-broker")
	cmd := exec.Command("go", "build", "-o", bin, "github.com/petrel-mq/petrel/cmd/petrel-broker")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("cannot build petrel-broker: %v\n%s", err, out)
	}
	return bin
}

type brokerProc struct {
	t    *testing.T
	bin  string
	conf string
	addr string
	cmd  *exec.Cmd
	done chan error
}

func newBrokerProc(t *testing.T, bin, dir string) *brokerProc {
	port := testutil.FreePorts(t, 1)[0]
	conf := filepath.Join(dir, "broker.conf")
	content := fmt.Sprintf(`brokerClusterName=CrashCluster
brokerName=broker-crash
brokerId=0
brokerRole=ASYNC_MASTER
flushDiskType=SYNC_FLUSH
listenPort=%d
bindAddress=127.0.0.1
storePathRootDir=%s
mappedFileSizeCommitLog=65536
consumeQueueFileEntries=512
`, port, filepath.Join(dir, "store"))
	if err := os.WriteFile(conf, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	return &brokerProc{t: t, bin: bin, conf: conf, addr: fmt.Sprintf("127.0.0.1:%d", port)}
}

func (p *brokerProc) start(env ...string) {
	p.t.Helper()
	p.cmd = exec.Command(p.bin, "-c", p.conf, "--log-level", "warn")
	p.cmd.Env = append(os.Environ(), env...)
	p.cmd.Stderr = &testWriter{p.t}
	if err := p.cmd.Start(); err != nil {
		p.t.Fatal(err)
	}
	p.done = make(chan error, 1)
	go func() { p.done <- p.cmd.Wait() }()
	deadline := time.Now().Add(20 * time.Second)
	for {
		c, err := net.DialTimeout("tcp", p.addr, 200*time.Millisecond)
		if err == nil {
			c.Close()
			return
		}
		select {
		case err := <-p.done:
			p.t.Fatalf("broker exited during start: %v", err)
		default:
		}
		if time.Now().After(deadline) {
			p.t.Fatalf("broker did not listen on %s: %v", p.addr, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func (p *brokerProc) kill() {
	_ = p.cmd.Process.Signal(syscall.SIGKILL)
	<-p.done
}

func (p *brokerProc) stop() {
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case err := <-p.done:
		if err != nil {
			p.t.Errorf("broker exit after SIGTERM: %v", err)
		}
	case <-time.After(15 * time.Second):
		p.kill()
		p.t.Error("broker did not stop on SIGTERM")
	}
}

// ackLog records what the broker acknowledged: queue -> queue offset -> body.
type ackLog struct {
	mu    sync.Mutex
	acked map[int32]map[int64]string
	n     int
}

func (a *ackLog) add(q int32, off int64, body string) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.acked[q] == nil {
		a.acked[q] = map[int64]string{}
	}
	if prev, ok := a.acked[q][off]; ok && prev != body {
		return fmt.Errorf("queue %d offset %d acknowledged twice: %q and %q", q, off, prev, body)
	}
	a.acked[q][off] = body
	a.n++
	return nil
}

// produce sends from several connections until ctx ends; sends that fail (the kill) are fine.
func produce(ctx context.Context, t *testing.T, addr, topic string, queues int32, round int, acks *ackLog) {
	var wg sync.WaitGroup
	for w := 0; w < 4; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c, err := rpc.Dial(ctx, addr, rpc.Options{})
			if err != nil {
				return
			}
			defer c.Close()
			for i := 0; ctx.Err() == nil; i++ {
				q := int32((w + i) % int(queues))
				n := 1 + rand.Intn(4)
				bodies := make([]string, n)
				for j := range bodies {
					bodies[j] = fmt.Sprintf("r%d-w%d-i%d-j%d-%s", round, w, i, j, strings.Repeat("p", rand.Intn(2000)))
				}
				var resp protocol.SendResponseHeader
				cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
				err := c.CallDecode(cctx, protocol.CodeSendMessage, nil, buildBatch(topic, q, bodies...), &resp, nil)
				cancel()
				if err != nil {
					return // killed or cancelled: outcome unknown, not recorded
				}
				for j, body := range bodies {
					if err := acks.add(q, resp.QueueOffset+int64(j), body); err != nil {
						t.Error(err)
					}
				}
			}
		}()
	}
	wg.Wait()
}

// verifyAfterCrash pulls every queue from 0 and checks every acknowledged message.
func verifyAfterCrash(t *testing.T, addr, topic string, queues int32, acks *ackLog) {
	t.Helper()
	c, err := rpc.Dial(context.Background(), addr, rpc.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	acks.mu.Lock()
	defer acks.mu.Unlock()
	for q := int32(0); q < queues; q++ {
		got := map[int64]string{}
		off := int64(0)
		for {
			p := pull(t, c, topic, q, off, 0)
			if p.hdr.Result == protocol.PullNoNewMessage {
				break
			}
			if p.hdr.Result != protocol.PullFound {
				t.Fatalf("queue %d offset %d: %v (min %d max %d)", q, off, p.hdr.Result, p.hdr.MinOffset, p.hdr.MaxOffset)
			}
			for i, o := range p.offs {
				if o < off {
					continue
				}
				got[o] = p.bodies[i]
			}
			if p.hdr.NextQueueOffset <= off {
				t.Fatalf("queue %d: next offset %d did not advance from %d", q, p.hdr.NextQueueOffset, off)
			}
			off = p.hdr.NextQueueOffset
		}
		for o := int64(0); o < off; o++ {
			if _, ok := got[o]; !ok {
				t.Fatalf("queue %d: offset %d missing below max %d (consume queue does not match the log)", q, o, off)
			}
		}
		for o, body := range acks.acked[q] {
			g, ok := got[o]
			if !ok {
				t.Fatalf("queue %d: acknowledged offset %d lost (queue max %d)", q, o, off)
			}
			if g != body {
				t.Fatalf("queue %d offset %d: body differs from the acknowledged one", q, o)
			}
		}
	}
}

func TestCrashDuringSyncFlushLoad(t *testing.T) {
	bin := buildBrokerBinary(t)
	p := newBrokerProc(t, bin, t.TempDir())
	const topic, queues = "Crash", 4
	acks := &ackLog{acked: map[int32]map[int64]string{}}
	p.start()
	c, err := rpc.Dial(context.Background(), p.addr, rpc.Options{})
	if err != nil {
		t.Fatal(err)
	}
	createTopic(t, c, topic, queues)
	c.Close()
	for round := 0; round < 4; round++ {
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() { produce(ctx, t, p.addr, topic, queues, round, acks); close(done) }()
		time.Sleep(time.Duration(300+rand.Intn(500)) * time.Millisecond)
		p.kill()
		cancel()
		<-done
		p.start()
		verifyAfterCrash(t, p.addr, topic, queues, acks)
	}
	if acks.n == 0 {
		t.Fatal("no send was acknowledged")
	}
	t.Logf("%d acknowledged messages survived 4 kills", acks.n)
	p.stop()
}

func TestCrashDuringSegmentRoll(t *testing.T) {
	bin := buildBrokerBinary(t)
	p := newBrokerProc(t, bin, t.TempDir())
	const topic, queues = "Roll", 2
	acks := &ackLog{acked: map[int32]map[int64]string{}}
	p.start()
	c, err := rpc.Dial(context.Background(), p.addr, rpc.Options{})
	if err != nil {
		t.Fatal(err)
	}
	createTopic(t, c, topic, queues)
	c.Close()
	p.kill()
	for round, fp := range []string{"commitlog-roll=2", "commitlog-roll-marker=3", "commitlog-roll=5"} {
		p.start("PETREL_FAILPOINTS=" + fp)
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		go produce(ctx, t, p.addr, topic, queues, round, acks)
		select {
		case <-p.done: // the failpoint killed the broker in the roll
		case <-ctx.Done():
			t.Fatalf("failpoint %s never fired", fp)
		}
		cancel()
		if ws := p.cmd.ProcessState.Sys().(syscall.WaitStatus); !ws.Signaled() || ws.Signal() != syscall.SIGKILL {
			t.Fatalf("broker ended with %v, want SIGKILL from failpoint %s", p.cmd.ProcessState, fp)
		}
		p.start()
		verifyAfterCrash(t, p.addr, topic, queues, acks)
		p.kill()
	}
	if acks.n == 0 {
		t.Fatal("no send was acknowledged")
	}
}
