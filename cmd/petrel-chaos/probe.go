package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"sync"
	"time"

	"github.com/spf13/cobra"

	"github.com/petrel-mq/petrel/client"
	"github.com/petrel-mq/petrel/internal/netns"
	"github.com/petrel-mq/petrel/protocol"
)

// The harness lives in the root namespace, where the cluster's subnet does not exist, and
// Petrel's client cannot be given a dialer; so a helper, petrel-chaos probe, runs in the
// control namespace and answers the harness's admin questions (HA status, cluster table, log
// checksums, topic stats) as JSON lines on its stdin and stdout. The operator-facing verbs
// (updateTopic, electMaster) go through petrelctl in the same namespace instead, as an
// operator would run them.

// probeReq is one question to the probe.
type probeReq struct {
	ID int64 `json:"id"`
	// Op is "status" (HA status of Addrs, and the NameServer's cluster table), "checksum"
	// (Addr's log from From to To), "topicStats" (Topic's queues on every master) or "topics"
	// (the topic table of each of Addrs).
	Op        string   `json:"op"`
	Addrs     []string `json:"addrs,omitempty"`
	Addr      string   `json:"addr,omitempty"`
	From      int64    `json:"from,omitempty"`
	To        int64    `json:"to,omitempty"`
	Topic     string   `json:"topic,omitempty"`
	TimeoutMs int64    `json:"timeoutMs"`
}

// probeResp is the probe's answer to the request of the same ID.
type probeResp struct {
	ID  int64  `json:"id"`
	Err string `json:"err,omitempty"`
	// HA and HAErr hold, per address of a status request, its status or why there is none.
	HA         map[string]*protocol.HAStatus `json:"ha,omitempty"`
	HAErr      map[string]string             `json:"haErr,omitempty"`
	Cluster    *protocol.ClusterInfo         `json:"cluster,omitempty"`
	ClusterErr string                        `json:"clusterErr,omitempty"`
	Checksum   *protocol.LogChecksumResponse `json:"checksum,omitempty"`
	TopicStats []client.BrokerTopicStats     `json:"topicStats,omitempty"`
	// Topics holds, per address of a topics request, its topic table; HAErr why there is none.
	Topics map[string][]protocol.TopicConfig `json:"topics,omitempty"`
}

func newProbeCommand() *cobra.Command {
	var nameServers string
	cmd := &cobra.Command{
		Use:    "probe",
		Short:  "Answer the harness's admin questions from inside the control namespace (internal)",
		Hidden: true,
		Args:   cobra.NoArgs,
		RunE: func(*cobra.Command, []string) error {
			// Not the command's context, which a signal ends: the probe lives until its stdin
			// closes (the harness ends it, or dies: then Pdeathsig kills it), and a stray
			// SIGINT must not leave it answering every question with "context canceled".
			return serveProbe(context.Background(), nameServers, os.Stdin, os.Stdout, os.Stderr)
		},
	}
	cmd.Flags().StringVarP(&nameServers, "namesrv", "n", "", "the NameServer address")
	return cmd
}

// serveProbe answers requests from in until it ends. Requests are served concurrently (a slow
// broker must not hold up the others); answers are written whole, one line each.
func serveProbe(ctx context.Context, nameServers string, in io.Reader, out, logw io.Writer) error {
	c, err := client.New(ctx,
		client.WithNameServers(nameServers),
		// Admin answers come in milliseconds; a member that is down must not hold a poll up,
		// and one that comes back must be asked again soon, not after seconds of backoff.
		client.WithRequestTimeout(2*time.Second),
		client.WithDialTimeout(time.Second),
		client.WithReconnectBackoff(50*time.Millisecond, 250*time.Millisecond),
		client.WithLogger(slog.New(slog.NewTextHandler(logw, &slog.HandlerOptions{Level: slog.LevelWarn}))),
	)
	if err != nil {
		return err
	}
	defer c.Close()
	a := client.NewAdmin(c)
	var mu sync.Mutex
	enc := json.NewEncoder(out)
	sc := bufio.NewScanner(in)
	sc.Buffer(make([]byte, 64<<10), 4<<20)
	var wg sync.WaitGroup
	for sc.Scan() {
		var req probeReq
		if err := json.Unmarshal(sc.Bytes(), &req); err != nil {
			return fmt.Errorf("bad request %q: %w", sc.Text(), err)
		}
		wg.Go(func() {
			resp := answer(ctx, a, &req)
			mu.Lock()
			defer mu.Unlock()
			_ = enc.Encode(resp)
		})
	}
	wg.Wait()
	return sc.Err()
}

// answer serves one request.
func answer(ctx context.Context, a *client.Admin, req *probeReq) *probeResp {
	ctx, cancel := context.WithTimeout(ctx, time.Duration(max(req.TimeoutMs, 100))*time.Millisecond)
	defer cancel()
	resp := &probeResp{ID: req.ID}
	switch req.Op {
	case "status":
		resp.HA, resp.HAErr = map[string]*protocol.HAStatus{}, map[string]string{}
		var mu sync.Mutex
		var wg sync.WaitGroup
		for _, addr := range req.Addrs {
			wg.Go(func() {
				st, err := a.HAStatus(ctx, addr)
				mu.Lock()
				defer mu.Unlock()
				if err != nil {
					resp.HAErr[addr] = err.Error()
				} else {
					resp.HA[addr] = st
				}
			})
		}
		ci, err := a.ClusterInfo(ctx)
		if err != nil {
			resp.ClusterErr = err.Error()
		}
		resp.Cluster = ci
		wg.Wait()
	case "checksum":
		sum, err := a.LogChecksum(ctx, req.Addr, req.From, req.To)
		if err != nil {
			resp.Err = err.Error()
		}
		resp.Checksum = sum
	case "topicStats":
		st, err := a.TopicStats(ctx, req.Topic)
		if err != nil {
			resp.Err = err.Error()
		}
		resp.TopicStats = st
	case "topics":
		resp.Topics, resp.HAErr = map[string][]protocol.TopicConfig{}, map[string]string{}
		var mu sync.Mutex
		var wg sync.WaitGroup
		for _, addr := range req.Addrs {
			wg.Go(func() {
				l, err := a.AllTopicConfig(ctx, addr)
				mu.Lock()
				defer mu.Unlock()
				if err != nil {
					resp.HAErr[addr] = err.Error()
				} else {
					resp.Topics[addr] = l.Topics
				}
			})
		}
		wg.Wait()
	default:
		resp.Err = fmt.Sprintf("unknown op %q", req.Op)
	}
	return resp
}

// prober is the harness's side of the probe: it starts the helper in the control namespace and
// sends it requests, starting it again when it dies or stops answering.
type prober struct {
	node    *node
	sp      *spawner
	self    string // this executable
	nsAddr  string
	logPath string

	mu     sync.Mutex
	cmd    *exec.Cmd
	stdin  io.WriteCloser
	nextID int64
	wait   map[int64]chan *probeResp
	// gen counts helper starts; a reader goroutine only delivers its own helper's answers.
	gen int
}

// startLocked starts the helper; p.mu is held.
func (p *prober) startLocked() error {
	logf, err := os.OpenFile(p.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	cmd := netns.Command(p.node.ns, p.self, "probe", "-n", p.nsAddr)
	cmd.Stderr = logf
	stdin, err := cmd.StdinPipe()
	if err != nil {
		_ = logf.Close()
		return err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		_ = logf.Close()
		return err
	}
	if err := p.sp.start(cmd); err != nil {
		_ = logf.Close()
		return fmt.Errorf("cannot start the probe: %w", err)
	}
	p.gen++
	gen := p.gen
	p.cmd, p.stdin = cmd, stdin
	if p.wait == nil {
		p.wait = map[int64]chan *probeResp{}
	}
	go func() {
		sc := bufio.NewScanner(stdout)
		sc.Buffer(make([]byte, 64<<10), 16<<20)
		for sc.Scan() {
			var resp probeResp
			if err := json.Unmarshal(sc.Bytes(), &resp); err != nil {
				continue
			}
			p.mu.Lock()
			if ch := p.wait[resp.ID]; ch != nil && p.gen == gen {
				ch <- &resp
				delete(p.wait, resp.ID)
			}
			p.mu.Unlock()
		}
		_ = cmd.Wait()
		_ = logf.Close()
		p.mu.Lock()
		if p.gen == gen {
			p.stopLocked() // the helper died: fail its waiters now, start a new one next call
		}
		p.mu.Unlock()
	}()
	return nil
}

// stopLocked kills the helper; p.mu is held.
func (p *prober) stopLocked() {
	if p.cmd == nil {
		return
	}
	_ = p.stdin.Close()
	_ = p.cmd.Process.Kill()
	p.cmd, p.stdin = nil, nil
	for id, ch := range p.wait {
		close(ch)
		delete(p.wait, id)
	}
}

// close stops the helper.
func (p *prober) close() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.stopLocked()
}

// call sends req and waits for its answer: the helper's own timeout plus a margin. A helper
// that misses that is killed and started again for the next call.
func (p *prober) call(req probeReq, timeout time.Duration) (*probeResp, error) {
	req.TimeoutMs = timeout.Milliseconds()
	p.mu.Lock()
	if p.cmd == nil {
		if err := p.startLocked(); err != nil {
			p.mu.Unlock()
			return nil, err
		}
	}
	p.nextID++
	req.ID = p.nextID
	ch := make(chan *probeResp, 1)
	p.wait[req.ID] = ch
	line, _ := json.Marshal(req)
	_, err := p.stdin.Write(append(line, '\n'))
	if err != nil {
		p.stopLocked()
		p.mu.Unlock()
		return nil, fmt.Errorf("the probe is gone: %w", err)
	}
	p.mu.Unlock()
	select {
	case resp, ok := <-ch:
		if !ok {
			return nil, errors.New("the probe was restarted")
		}
		return resp, nil
	case <-time.After(timeout + 5*time.Second):
		p.mu.Lock()
		p.stopLocked()
		p.mu.Unlock()
		return nil, fmt.Errorf("the probe did not answer %s within %v", req.Op, timeout+5*time.Second)
	}
}
