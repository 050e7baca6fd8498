package broker

import (
	"context"
	"net"
	"strconv"
	"testing"
	"time"

	"github.com/petrel-mq/petrel/internal/testutil"
	"github.com/petrel-mq/petrel/protocol"
	"github.com/petrel-mq/petrel/protocol/rpc"
)

// TestFirstRequestMeetsTheConfiguredRole: the client port listens before the replication
// master has started (its port is taken here, so it retries), and a request that arrives in
// between waits unread until the broker holds its configured role: a static master's first
// answer is a master's, never NOT_MASTER.
func TestFirstRequestMeetsTheConfiguredRole(t *testing.T) {
	ports := testutil.FreePorts(t, 2)
	cfg := testConfig(t.TempDir())
	cfg.ListenPort, cfg.HAListenPort = ports[0], ports[1]
	blocker, err := net.Listen("tcp", net.JoinHostPort(cfg.BindAddress, strconv.Itoa(ports[1])))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = blocker.Close() }()
	b, err := New(cfg, testLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	started := make(chan error, 1)
	go func() { started <- b.Start() }()
	defer func() { _ = b.Close() }()

	var c *rpc.Conn
	testutil.Eventually(t, "the client port to listen", func() bool {
		c, err = rpc.Dial(context.Background(), cfg.listenAddr(), rpc.Options{})
		return err == nil
	})
	defer c.Close()
	answered := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		tc := protocol.TopicConfig{Topic: "early", ReadQueueNums: 1, WriteQueueNums: 1, Perm: protocol.PermReadWrite}
		answered <- c.CallDecode(ctx, protocol.CodeUpdateAndCreateTopic, &tc, nil, nil, nil)
	}()
	// The request is either held (read nothing of it yet) or, wrongly, answered already.
	var early error
	gotEarly := false
	testutil.Eventually(t, "the request to reach the broker", func() bool {
		select {
		case early = <-answered:
			gotEarly = true
			return true
		default:
		}
		b.paused.mu.Lock()
		defer b.paused.mu.Unlock()
		return len(b.paused.m) > 0
	})
	if gotEarly {
		t.Fatalf("a request answered before the broker took its configured role: %v", early)
	}
	_ = blocker.Close() // the replication master can start now
	if err := <-started; err != nil {
		t.Fatal(err)
	}
	if err := <-answered; err != nil {
		t.Fatalf("the first request of a static master: %v", err)
	}
}
