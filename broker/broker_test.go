package broker

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"testing"
	"time"

	"github.com/petrel-mq/petrel/internal/testutil"
	"github.com/petrel-mq/petrel/namesrv"
	"github.com/petrel-mq/petrel/protocol"
	"github.com/petrel-mq/petrel/protocol/rpc"
)

func TestMain(m *testing.M) { testutil.VerifyTestMain(m) }

func testLogger(t testing.TB) *slog.Logger {
	if testing.Verbose() {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	return slog.New(slog.NewTextHandler(&testWriter{t}, &slog.HandlerOptions{Level: slog.LevelWarn}))
}

type testWriter struct{ t testing.TB }

func (w *testWriter) Write(p []byte) (int, error) {
	w.t.Log(string(bytes.TrimRight(p, "\n")))
	return len(p), nil
}

func testConfig(dir string) Config {
	cfg := DefaultConfig()
	cfg.ListenPort = 0
	cfg.BindAddress = "127.0.0.1"
	cfg.StorePathRootDir = dir
	cfg.MappedFileSizeCommitLog = 1 << 20
	cfg.ConsumeQueueFileEntries = 1024
	cfg.ShutdownGracePeriod = 2 * time.Second
	cfg.NumEventLoop = 2
	return cfg
}

func startBroker(t testing.TB, cfg Config) *Broker {
	t.Helper()
	return startBrokerLogging(t, cfg, testLogger(t))
}

// startEdited starts a broker of testConfig changed by edit (nil: as is), closed when the test
// ends.
func startEdited(t testing.TB, edit func(*Config)) *Broker {
	t.Helper()
	cfg := testConfig(t.TempDir())
	if edit != nil {
		edit(&cfg)
	}
	b := startBroker(t, cfg)
	t.Cleanup(func() { _ = b.Close() })
	return b
}

// startBrokerLogging is startBroker with the broker's log lines going to logger.
func startBrokerLogging(t testing.TB, cfg Config, logger *slog.Logger) *Broker {
	t.Helper()
	b, err := New(cfg, logger)
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Start(); err != nil {
		t.Fatal(err)
	}
	return b
}

func dial(t testing.TB, addr string) *rpc.Conn {
	t.Helper()
	c, err := rpc.Dial(context.Background(), addr, rpc.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func ctx5s(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func createTopic(t testing.TB, c *rpc.Conn, topic string, queues int32) {
	t.Helper()
	cfg := protocol.TopicConfig{Topic: topic, ReadQueueNums: queues, WriteQueueNums: queues, Perm: protocol.PermReadWrite}
	if err := c.CallDecode(ctx5s(t), protocol.CodeUpdateAndCreateTopic, &cfg, nil, nil, nil); err != nil {
		t.Fatal(err)
	}
}

func buildBatch(topic string, qid int32, bodies ...string) []byte {
	var bb protocol.BatchBuilder
	bb.Reset(topic, qid, 1, 0)
	for _, body := range bodies {
		bb.Add(&protocol.Message{Body: []byte(body), Tags: []byte("t"), Timestamp: time.Now().UnixMilli()})
	}
	return append([]byte(nil), bb.Finish()...)
}

func send(t testing.TB, c *rpc.Conn, topic string, qid int32, bodies ...string) protocol.SendResponseHeader {
	t.Helper()
	var resp protocol.SendResponseHeader
	if err := c.CallDecode(ctx5s(t), protocol.CodeSendMessage, nil, buildBatch(topic, qid, bodies...), &resp, nil); err != nil {
		t.Fatalf("send: %v", err)
	}
	return resp
}

// sendAnswerOffset decodes the answer of an asynchronous send (CallAsync's callback arguments)
// into its queue offset, releasing the response.
func sendAnswerOffset(resp *rpc.Response, err error) (int64, error) {
	if err != nil {
		return 0, err
	}
	defer resp.Release()
	var h protocol.SendResponseHeader
	if err := h.ReadFrom(resp.Header); err != nil {
		return 0, err
	}
	return h.QueueOffset, nil
}

type pulled struct {
	hdr    protocol.PullResponseHeader
	bodies []string
	offs   []int64
}

func pull(t testing.TB, c *rpc.Conn, topic string, qid int32, off int64, pollMs int32) pulled {
	t.Helper()
	req := protocol.PullRequestHeader{ConsumerGroup: "g", Topic: topic, QueueID: qid, QueueOffset: off, MaxMessages: 1000, MaxBytes: 1 << 20, PollTimeoutMs: pollMs, CommitOffset: -1}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	resp, err := c.Call(ctx, protocol.CodePullMessage, &req, nil)
	if err != nil {
		t.Fatalf("pull: %v", err)
	}
	defer resp.Release()
	var p pulled
	if err := p.hdr.ReadFrom(resp.Header); err != nil {
		t.Fatal(err)
	}
	body := resp.Body
	for len(body) > 0 {
		h, _, err := protocol.ValidateBatch(body, protocol.BatchLimits{})
		if err != nil {
			t.Fatalf("pulled batch: %v", err)
		}
		it := protocol.NewMessageIterator(body, h)
		for {
			m, ok := it.Next()
			if !ok {
				break
			}
			p.bodies = append(p.bodies, string(m.Body))
			p.offs = append(p.offs, m.QueueOffset)
		}
		body = body[h.Size:]
	}
	return p
}

func TestSendPullRoundTrip(t *testing.T) {
	b := startBroker(t, testConfig(t.TempDir()))
	defer b.Close()
	c := dial(t, b.Addr())
	createTopic(t, c, "TopicA", 4)
	want := map[int32][]string{}
	for i := 0; i < 200; i++ {
		q := int32(i % 4)
		body := fmt.Sprintf("msg-%d-%s", i, bytes.Repeat([]byte("x"), i*37%5000))
		r := send(t, c, "TopicA", q, body)
		if r.QueueID != q || r.QueueOffset != int64(len(want[q])) || r.Count != 1 {
			t.Fatalf("send %d: %+v", i, r)
		}
		want[q] = append(want[q], body)
	}
	// A batch of three.
	r := send(t, c, "TopicA", 0, "b1", "b2", "b3")
	if r.Count != 3 || r.QueueOffset != int64(len(want[0])) {
		t.Fatalf("batch send: %+v", r)
	}
	want[0] = append(want[0], "b1", "b2", "b3")
	for q := int32(0); q < 4; q++ {
		var got []string
		off := int64(0)
		for off < int64(len(want[q])) {
			p := pull(t, c, "TopicA", q, off, 0)
			if p.hdr.Result != protocol.PullFound {
				t.Fatalf("queue %d offset %d: %v", q, off, p.hdr.Result)
			}
			for i, o := range p.offs {
				if o >= off {
					got = append(got, p.bodies[i])
				}
			}
			off = p.hdr.NextQueueOffset
		}
		if fmt.Sprint(got) != fmt.Sprint(want[q]) {
			t.Fatalf("queue %d: got %d messages, want %d", q, len(got), len(want[q]))
		}
		p := pull(t, c, "TopicA", q, off, 0)
		if p.hdr.Result != protocol.PullNoNewMessage || p.hdr.MaxOffset != off {
			t.Fatalf("queue %d at end: %+v", q, p.hdr)
		}
		// Past the end: to the max offset for a consumer of the queue's life (it read
		// everything below), else to the min offset, skipping no stored message.
		p = pull(t, c, "TopicA", q, off+10, 0)
		if p.hdr.Result != protocol.PullOffsetMoved || p.hdr.NextQueueOffset != 0 || p.hdr.HasIncarnation {
			t.Fatalf("queue %d past end: %+v", q, p.hdr)
		}
		inc := b.store.QueueIncarnation([]byte("TopicA"), q)
		if h := pullLife(t, c, "TopicA", q, off+10, inc); h.Result != protocol.PullOffsetMoved || h.NextQueueOffset != off || h.Incarnation != inc || inc == 0 {
			t.Fatalf("queue %d past end, of the queue's life %#x: %+v", q, inc, h)
		}
	}
	// A pull from the middle of the batch returns the whole batch; the consumer skips.
	p := pull(t, c, "TopicA", 0, int64(len(want[0])-2), 0)
	if p.hdr.Result != protocol.PullFound || p.offs[0] != int64(len(want[0])-3) {
		t.Fatalf("mid-batch pull: %+v %v", p.hdr, p.offs)
	}
}

func TestLongPolling(t *testing.T) {
	b := startBroker(t, testConfig(t.TempDir()))
	defer b.Close()
	c := dial(t, b.Addr())
	createTopic(t, c, "Poll", 2)

	// Held pull answered by a send.
	done := make(chan pulled, 1)
	go func() { done <- pull(t, c, "Poll", 1, 0, 5000) }()
	time.Sleep(100 * time.Millisecond)
	select {
	case p := <-done:
		t.Fatalf("pull answered before any message: %+v", p.hdr)
	default:
	}
	start := time.Now()
	send(t, dial(t, b.Addr()), "Poll", 1, "wake")
	p := <-done
	if p.hdr.Result != protocol.PullFound || len(p.bodies) != 1 || p.bodies[0] != "wake" {
		t.Fatalf("held pull: %+v %v", p.hdr, p.bodies)
	}
	if d := time.Since(start); d > time.Second {
		t.Fatalf("held pull answered %v after the send", d)
	}

	// Held pull answered by its timeout.
	start = time.Now()
	p = pull(t, c, "Poll", 0, 0, 200)
	if p.hdr.Result != protocol.PullNoNewMessage {
		t.Fatalf("timed-out pull: %+v", p.hdr)
	}
	if d := time.Since(start); d < 150*time.Millisecond {
		t.Fatalf("pull with 200 ms poll returned after %v", d)
	}

	// A send to another queue does not wake it.
	go func() { done <- pull(t, c, "Poll", 0, 0, 300) }()
	time.Sleep(50 * time.Millisecond)
	send(t, c, "Poll", 1, "other")
	p = <-done
	if p.hdr.Result != protocol.PullNoNewMessage {
		t.Fatalf("pull on queue 0 woken by queue 1: %+v", p.hdr)
	}
}

func TestHeldPullsAnsweredOnClose(t *testing.T) {
	b := startBroker(t, testConfig(t.TempDir()))
	c := dial(t, b.Addr())
	createTopic(t, c, "Poll", 1)
	done := make(chan pulled, 1)
	go func() { done <- pull(t, c, "Poll", 0, 0, 20000) }()
	time.Sleep(100 * time.Millisecond)
	start := time.Now()
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	select {
	case p := <-done:
		if p.hdr.Result != protocol.PullNoNewMessage {
			t.Fatalf("held pull on close: %+v", p.hdr)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("held pull not answered on close")
	}
	if d := time.Since(start); d > 3*time.Second {
		t.Fatalf("close took %v", d)
	}
}

func TestErrorsStatuses(t *testing.T) {
	cfg := testConfig(t.TempDir())
	b := startBroker(t, cfg)
	defer b.Close()
	c := dial(t, b.Addr())
	createTopic(t, c, "T", 2)
	expect := func(err error, st protocol.Status) {
		t.Helper()
		if !errors.Is(err, st) {
			t.Fatalf("got %v, want %v", err, st)
		}
	}
	_, err := c.Call(ctx5s(t), protocol.CodeSendMessage, nil, buildBatch("Nope", 0, "x"))
	expect(err, protocol.StatusTopicNotExist)
	_, err = c.Call(ctx5s(t), protocol.CodeSendMessage, nil, buildBatch("T", 5, "x"))
	expect(err, protocol.StatusQueueNotExist)
	bad := buildBatch("T", 0, "x")
	bad[len(bad)-1] ^= 0xff
	_, err = c.Call(ctx5s(t), protocol.CodeSendMessage, nil, bad)
	expect(err, protocol.StatusMessageIllegal)
	_, err = c.Call(ctx5s(t), protocol.CodeSendMessage, nil, []byte("garbage"))
	expect(err, protocol.StatusMessageIllegal)
	big := protocol.TopicConfig{Topic: string(bytes.Repeat([]byte("a"), 10000)), ReadQueueNums: 1, WriteQueueNums: 1, Perm: 6}
	_, err = c.Call(ctx5s(t), protocol.CodeUpdateAndCreateTopic, &big, nil)
	if err == nil {
		t.Fatal("10,000-character topic accepted")
	}
	huge := protocol.PullRequestHeader{ConsumerGroup: "g", Topic: "T", QueueID: 0, MaxMessages: 1 << 30, MaxBytes: 1 << 30, CommitOffset: -1}
	send(t, c, "T", 0, "one")
	resp, err := c.Call(ctx5s(t), protocol.CodePullMessage, &huge, nil)
	if err != nil {
		t.Fatalf("pull of 1 GiB: %v", err)
	}
	if len(resp.Body) > cfg.MaxPullBytes+cfg.MaxMessageSize {
		t.Fatalf("pull answered %d bytes", len(resp.Body))
	}
	resp.Release()
	_, err = c.Call(ctx5s(t), protocol.RequestCode(9999), nil, nil)
	expect(err, protocol.StatusRequestCodeNotSupported)
	var q protocol.OffsetHeader
	err = c.CallDecode(ctx5s(t), protocol.CodeQueryConsumerOffset, &protocol.ConsumerOffsetHeader{ConsumerGroup: "g", Topic: "T", QueueID: 0}, nil, &q, nil)
	expect(err, protocol.StatusQueryNotFound)
}

func TestConsumerOffsetsDurable(t *testing.T) {
	dir := t.TempDir()
	b := startBroker(t, testConfig(dir))
	c := dial(t, b.Addr())
	createTopic(t, c, "T", 2)
	sendQueues(t, c, "T", 2, 50) // an offset is held up to its queue's max offset
	commit := func(c *rpc.Conn, off int64) {
		h := protocol.ConsumerOffsetHeader{ConsumerGroup: "grp", Topic: "T", QueueID: 1, Offset: off}
		if err := c.CallDecode(ctx5s(t), protocol.CodeUpdateConsumerOffset, &h, nil, nil, nil); err != nil {
			t.Fatal(err)
		}
	}
	query := func(c *rpc.Conn) int64 {
		var o protocol.OffsetHeader
		if err := c.CallDecode(ctx5s(t), protocol.CodeQueryConsumerOffset, &protocol.ConsumerOffsetHeader{ConsumerGroup: "grp", Topic: "T", QueueID: 1}, nil, &o, nil); err != nil {
			t.Fatal(err)
		}
		return o.Offset
	}
	commit(c, 42)
	commit(c, 7) // never backwards
	if got := query(c); got != 42 {
		t.Fatalf("offset %d, want 42", got)
	}
	c.Close()
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	b = startBroker(t, testConfig(dir))
	defer b.Close()
	c = dial(t, b.Addr())
	if got := query(c); got != 42 {
		t.Fatalf("offset after restart %d, want 42", got)
	}
}

func TestRestartKeepsMessages(t *testing.T) {
	dir := t.TempDir()
	cfg := testConfig(dir)
	cfg.MappedFileSizeCommitLog = 64 << 10
	b := startBroker(t, cfg)
	c := dial(t, b.Addr())
	createTopic(t, c, "R", 3)
	body := string(bytes.Repeat([]byte("r"), 3000))
	for i := 0; i < 300; i++ { // ~900 KiB: many segment rolls
		send(t, c, "R", int32(i%3), fmt.Sprint(i, body))
	}
	c.Close()
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	b = startBroker(t, cfg)
	defer b.Close()
	c = dial(t, b.Addr())
	for q := int32(0); q < 3; q++ {
		n := 0
		for off := int64(0); off < 100; {
			p := pull(t, c, "R", q, off, 0)
			if p.hdr.Result != protocol.PullFound {
				t.Fatalf("queue %d offset %d after restart: %+v", q, off, p.hdr)
			}
			for i, o := range p.offs {
				if want := fmt.Sprint(int(o)*3+int(q), body); p.bodies[i] != want {
					t.Fatalf("queue %d offset %d: wrong body", q, o)
				}
				n++
			}
			off = p.hdr.NextQueueOffset
		}
		if n != 100 {
			t.Fatalf("queue %d: %d messages", q, n)
		}
	}
	// The restarted broker still accepts and assigns the next offsets.
	if r := send(t, c, "R", 0, "after"); r.QueueOffset != 100 {
		t.Fatalf("offset after restart: %+v", r)
	}
}

func TestSyncFlushSend(t *testing.T) {
	cfg := testConfig(t.TempDir())
	cfg.FlushDiskType = SyncFlush
	b := startBroker(t, cfg)
	defer b.Close()
	c := dial(t, b.Addr())
	createTopic(t, c, "S", 1)
	// Many sends in flight on one connection: a group commit acknowledges many of them at once,
	// and their answers leave together (queueAnswer); each must come back once, to its request.
	const n = 200
	type answer struct {
		i      int
		offset int64
		err    error
	}
	answers := make(chan answer, n)
	for i := 0; i < n; i++ {
		c.CallAsync(protocol.CodeSendMessage, nil, buildBatch("S", 0, fmt.Sprint(i)), func(resp *rpc.Response, err error) {
			off, err := sendAnswerOffset(resp, err)
			answers <- answer{i: i, offset: off, err: err}
		})
	}
	seen := make(map[int64]int)
	for range n {
		a := <-answers
		if a.err != nil {
			t.Fatal(a.err)
		}
		if prev, dup := seen[a.offset]; dup {
			t.Fatalf("sends %d and %d both answered queue offset %d", prev, a.i, a.offset)
		}
		seen[a.offset] = a.i
	}
	for off := range int64(n) {
		if _, ok := seen[off]; !ok {
			t.Fatalf("no send answered queue offset %d", off)
		}
	}
	// Each answer matched its own request: message i is stored at the offset its answer gave.
	p := pull(t, c, "S", 0, 0, 0)
	if len(p.bodies) != n {
		t.Fatalf("pulled %d messages, want %d", len(p.bodies), n)
	}
	for off, body := range p.bodies {
		if want := fmt.Sprint(seen[int64(off)]); body != want {
			t.Fatalf("offset %d holds %q, but its answer went to send %s", off, body, want)
		}
	}
	if f, e := b.store.FlushedOffset(), b.store.LogEndOffset(); f < e {
		t.Fatalf("acknowledged before flush: flushed %d, end %d", f, e)
	}
}

func slogTo(w io.Writer) *slog.Logger {
	return slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: slog.LevelInfo}))
}

func TestAutoCreateTopic(t *testing.T) {
	cfg := testConfig(t.TempDir())
	cfg.AutoCreateTopicEnable = true
	cfg.DefaultTopicQueueNums = 3
	b := startBroker(t, cfg)
	defer b.Close()
	c := dial(t, b.Addr())
	r := send(t, c, "Fresh", 2, "first")
	if r.QueueOffset != 0 || r.QueueID != 2 {
		t.Fatalf("first send: %+v", r)
	}
	send(t, c, "Fresh", 2, "second")
	p := pull(t, c, "Fresh", 2, 0, 0)
	if fmt.Sprint(p.bodies) != "[first second]" {
		t.Fatalf("pulled %v", p.bodies)
	}
	if _, err := c.Call(ctx5s(t), protocol.CodeSendMessage, nil, buildBatch("Fresh", 3, "x")); !errors.Is(err, protocol.StatusQueueNotExist) {
		t.Fatalf("queue 3 of an auto-created 3-queue topic: %v", err)
	}
}

// TestConsumerClientsPerConnectionBounded: heartbeats on one connection that each name a new
// consumer client are refused past maxConsumerClientsPerConn, with a line, so the consumer
// table stays bounded; another connection's clients and the clients already registered are
// unaffected, and the connection's clients go when it closes.
func TestConsumerClientsPerConnectionBounded(t *testing.T) {
	cfg := testConfig(t.TempDir())
	b, logs := startLogged(t, cfg)
	flood, other := dial(t, b.Addr()), dial(t, b.Addr())
	hb := func(c *rpc.Conn, id string) error {
		h := protocol.ConsumerHeartbeatHeader{ClientID: id, ConsumerGroup: "grp", Topic: "T"}
		return c.CallDecode(ctx5s(t), protocol.CodeHeartbeat, &h, nil, nil, nil)
	}
	const extra = 100
	refused := 0
	for i := range maxConsumerClientsPerConn + extra {
		if err := hb(flood, fmt.Sprintf("flood-%d", i)); err != nil {
			refused++
		}
	}
	if refused != extra {
		t.Fatalf("%d of %d heartbeats naming new clients on one connection refused, want %d", refused, maxConsumerClientsPerConn+extra, extra)
	}
	if err := hb(flood, "flood-0"); err != nil {
		t.Fatalf("a registered client's heartbeat refused: %v", err)
	}
	if err := hb(other, "other"); err != nil {
		t.Fatalf("another connection's client refused: %v", err)
	}
	logs.WaitForLine(t, "refusing a consumer heartbeat: its connection registered too many consumer clients", "remote=")
	if n := len(b.consumers.list("grp", "")); n != maxConsumerClientsPerConn+1 {
		t.Fatalf("%d clients listed, want %d", n, maxConsumerClientsPerConn+1)
	}
	flood.Close()
	testutil.Eventually(t, "the flood's clients gone with its connection", func() bool {
		return len(b.consumers.list("grp", "")) == 1
	})
}

func TestConsumerHeartbeats(t *testing.T) {
	cfg := testConfig(t.TempDir())
	b := startBroker(t, cfg)
	defer b.Close()
	c1, c2 := dial(t, b.Addr()), dial(t, b.Addr())
	hb := func(c *rpc.Conn, id string) {
		h := protocol.ConsumerHeartbeatHeader{ClientID: id, ConsumerGroup: "grp", Topic: "T"}
		if id == "c-client" {
			h.Topic = "Other"
		}
		if err := c.CallDecode(ctx5s(t), protocol.CodeHeartbeat, &h, nil, nil, nil); err != nil {
			t.Fatal(err)
		}
	}
	list := func() string {
		var l protocol.StringList
		if err := c1.CallDecode(ctx5s(t), protocol.CodeGetConsumerListByGroup, &protocol.GroupHeader{ConsumerGroup: "grp", Topic: "T"}, nil, nil, &l); err != nil {
			t.Fatal(err)
		}
		return fmt.Sprint(l.Items)
	}
	hb(c2, "b-client")
	hb(c1, "a-client")
	hb(c1, "a-client")
	hb(c1, "c-client")
	if got := list(); got != "[a-client b-client]" {
		t.Fatalf("group members of topic T %s", got)
	}
	h := protocol.ConsumerHeartbeatHeader{ClientID: "c-client", ConsumerGroup: "grp"}
	if err := c1.CallDecode(ctx5s(t), protocol.CodeUnregisterClient, &h, nil, nil, nil); err != nil {
		t.Fatal(err)
	}
	h = protocol.ConsumerHeartbeatHeader{ClientID: "a-client", ConsumerGroup: "grp"}
	if err := c1.CallDecode(ctx5s(t), protocol.CodeUnregisterClient, &h, nil, nil, nil); err != nil {
		t.Fatal(err)
	}
	if got := list(); got != "[b-client]" {
		t.Fatalf("after unregister: %s", got)
	}
	c2.Close() // the connection b-client heartbeat on closes: it leaves at once
	// Long before channelExpiredTimeout (120 s) could forget it.
	testutil.Eventually(t, "the client of the closed connection to leave the group", func() bool { return list() == "[]" })
}

// TestPipelinedSendsAndPulls: sends and pulls written back to back on one connection arrive in
// one read; the sends' answers are collected while the read is dispatched and must leave before
// (and with) a pull's zero-copy answer, each to its own request.
func TestPipelinedSendsAndPulls(t *testing.T) {
	b := startBroker(t, testConfig(t.TempDir()))
	defer b.Close()
	c := dial(t, b.Addr())
	createTopic(t, c, "P", 1)
	const rounds = 50
	type answer struct {
		pull   bool
		offset int64 // a send's queue offset
		n      int   // messages a pull returned
		err    error
	}
	answers := make(chan answer, 4*rounds)
	for i := range rounds {
		for j := range 3 {
			c.CallAsync(protocol.CodeSendMessage, nil, buildBatch("P", 0, fmt.Sprint(3*i+j)), func(resp *rpc.Response, err error) {
				off, err := sendAnswerOffset(resp, err)
				answers <- answer{offset: off, err: err}
			})
		}
		req := protocol.PullRequestHeader{ConsumerGroup: "g", Topic: "P", QueueID: 0, QueueOffset: 0, MaxMessages: 1000, MaxBytes: 1 << 20, CommitOffset: -1}
		c.CallAsync(protocol.CodePullMessage, &req, nil, func(resp *rpc.Response, err error) {
			a := answer{pull: true, err: err}
			if err == nil {
				var h protocol.PullResponseHeader
				a.err = h.ReadFrom(resp.Header)
				for body := resp.Body; a.err == nil && len(body) > 0; {
					bh, _, verr := protocol.ValidateBatch(body, protocol.BatchLimits{})
					if verr != nil {
						a.err = fmt.Errorf("pulled batch: %w", verr)
						break
					}
					a.n += int(bh.Count)
					body = body[bh.Size:]
				}
				resp.Release()
			}
			answers <- a
		})
	}
	sends, pulls := map[int64]bool{}, 0
	for range 4 * rounds {
		a := <-answers
		if a.err != nil {
			t.Fatal(a.err)
		}
		if a.pull {
			pulls++
			if a.n > 3*rounds {
				t.Fatalf("a pull returned %d messages, more than were sent", a.n)
			}
			continue
		}
		if sends[a.offset] {
			t.Fatalf("queue offset %d answered twice", a.offset)
		}
		sends[a.offset] = true
	}
	if len(sends) != 3*rounds || pulls != rounds {
		t.Fatalf("%d send answers, %d pull answers; want %d and %d", len(sends), pulls, 3*rounds, rounds)
	}
}

// TestRegistersAgainWhenANameServerRestarts: a NameServer that restarted knows no broker; the
// broker registers with it again as soon as its connection closes and the NameServer is back,
// not at the next registration period (30 s), so routes come back within moments.
func TestRegistersAgainWhenANameServerRestarts(t *testing.T) {
	ns := namesrv.New(namesrv.Config{ListenAddr: "127.0.0.1:0", Logger: testLogger(t)})
	if err := ns.Start(); err != nil {
		t.Fatal(err)
	}
	addr := ns.Addr()
	cfg := testConfig(t.TempDir())
	cfg.NamesrvAddr = addr
	cfg.RegisterNameServerPeriod = time.Hour
	b := startBroker(t, cfg)
	defer b.Close()
	registered := func(ns *namesrv.Server) bool {
		for _, lb := range ns.LiveBrokers() {
			if lb.Addr == b.Addr() {
				return true
			}
		}
		return false
	}
	testutil.EventuallyWithin(t, 10*time.Second, "the first registration", func() bool { return registered(ns) })
	_ = ns.Close()
	ns2 := namesrv.New(namesrv.Config{ListenAddr: addr, Logger: testLogger(t)})
	testutil.EventuallyWithin(t, 10*time.Second, "the NameServer to listen again", func() bool { return ns2.Start() == nil })
	defer ns2.Close()
	testutil.EventuallyWithin(t, 10*time.Second, "the broker to register with the restarted NameServer", func() bool { return registered(ns2) })
}
