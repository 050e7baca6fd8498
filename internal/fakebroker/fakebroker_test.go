package fakebroker

import (
	"context"
	"errors"
	"net"
	"slices"
	"testing"
	"time"

	"github.com/petrel-mq/petrel/internal/testutil"
	"github.com/petrel-mq/petrel/protocol"
	"github.com/petrel-mq/petrel/protocol/rpc"
)

func TestMain(m *testing.M) { testutil.VerifyTestMain(m) }

// Tests of the fake itself, through raw protocol/rpc connections: what it answers is what the
// client, tools and bench tests rely on.

func dial(t *testing.T, addr string) *rpc.Conn {
	t.Helper()
	conn, err := rpc.Dial(context.Background(), addr, rpc.Options{DialTimeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return conn
}

func ctx10s(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// batch returns a finished batch of bodies for queue queueID of topic.
func batch(t *testing.T, topic string, queueID int32, producer int64, seq int32, bodies ...string) []byte {
	t.Helper()
	var bb protocol.BatchBuilder
	bb.Reset(topic, queueID, producer, seq)
	for _, body := range bodies {
		bb.Add(&protocol.Message{Body: []byte(body), Timestamp: time.Now().UnixMilli()})
	}
	if err := bb.Err(); err != nil {
		t.Fatal(err)
	}
	return slices.Clone(bb.Finish())
}

func send(t *testing.T, conn *rpc.Conn, b []byte) (protocol.SendResponseHeader, error) {
	t.Helper()
	var h protocol.SendResponseHeader
	err := conn.CallDecode(ctx10s(t), protocol.CodeSendMessage, nil, b, &h, nil)
	return h, err
}

func pull(t *testing.T, conn *rpc.Conn, topic string, queueID int32, offset int64) (protocol.PullResponseHeader, []byte, error) {
	t.Helper()
	hdr := protocol.PullRequestHeader{ConsumerGroup: "G", Topic: topic, QueueID: queueID, QueueOffset: offset, MaxMessages: 100, MaxBytes: 1 << 20, CommitOffset: -1}
	resp, err := conn.Call(ctx10s(t), protocol.CodePullMessage, &hdr, nil)
	if err != nil {
		return protocol.PullResponseHeader{}, nil, err
	}
	defer resp.Release()
	var rh protocol.PullResponseHeader
	if err := rh.ReadFrom(resp.Header); err != nil {
		t.Fatal(err)
	}
	return rh, slices.Clone(resp.Body), nil
}

func statusOf(err error) protocol.Status {
	var pe *protocol.Error
	if errors.As(err, &pe) {
		return pe.Status
	}
	return protocol.StatusSuccess
}

func TestRoutesFollowLiveRegisteredBrokers(t *testing.T) {
	c := New(t)
	a := c.AddGroup("a", 1, map[string]int32{"T": 2})
	c.AddGroup("b", 0, map[string]int32{"U": 1})
	ns := dial(t, c.Addr())
	route := func(topic string) (protocol.TopicRouteData, error) {
		var rd protocol.TopicRouteData
		err := ns.CallDecode(ctx10s(t), protocol.CodeGetRouteInfoByTopic, &protocol.TopicHeader{Topic: topic}, nil, nil, &rd)
		return rd, err
	}
	rd, err := route("T")
	if err != nil {
		t.Fatal(err)
	}
	want := []protocol.BrokerAddr{{BrokerID: 0, Addr: a.Master().Addr()}, {BrokerID: 1, Addr: a.Members()[1].Addr()}}
	if len(rd.BrokerDatas) != 1 || rd.BrokerDatas[0].BrokerName != "a" || !slices.Equal(rd.BrokerDatas[0].Addrs, want) ||
		len(rd.QueueDatas) != 1 || rd.QueueDatas[0].WriteQueueNums != 2 {
		t.Fatalf("route of T: %+v", rd)
	}
	if _, err := route("V"); statusOf(err) != protocol.StatusTopicNotExist {
		t.Fatalf("route of a topic nobody holds: %v", err)
	}
	// A stopped broker leaves the routes; an unregistered one too, though it serves.
	a.Master().Stop()
	c.SetRegistered(a.Members()[1], false)
	if _, err := route("T"); statusOf(err) != protocol.StatusTopicNotExist {
		t.Fatalf("route without live members: %v", err)
	}
	a.Master().Start()
	c.SetRegistered(a.Members()[1], true)
	if rd, err := route("T"); err != nil || !slices.Equal(rd.BrokerDatas[0].Addrs, want) {
		t.Fatalf("route after the restart at the same address: %+v %v", rd, err)
	}
	var ci protocol.ClusterInfo
	if err := ns.CallDecode(ctx10s(t), protocol.CodeGetBrokerClusterInfo, nil, nil, nil, &ci); err != nil {
		t.Fatal(err)
	}
	if len(ci.Brokers) != 2 || ci.Brokers[0].BrokerName != "a" || ci.Brokers[1].BrokerName != "b" || !slices.Equal(ci.Clusters[0].BrokerNames, []string{"a", "b"}) {
		t.Fatalf("cluster info %+v", ci)
	}
	// A member added unregistered is left out until it registers.
	moved := a.AddMember(0, false)
	if rd, _ := route("T"); len(rd.BrokerDatas[0].Addrs) != 2 {
		t.Fatalf("an unregistered member in the route: %+v", rd)
	}
	c.SetRegistered(moved, true)
	if rd, _ := route("T"); len(rd.BrokerDatas[0].Addrs) != 3 {
		t.Fatalf("a registered member missing from the route: %+v", rd)
	}
	c.StopNameServer()
	if _, err := net.DialTimeout("tcp", c.Addr(), time.Second); err == nil {
		t.Fatal("a stopped NameServer accepted a connection")
	}
}

func TestSendPullAndSlaves(t *testing.T) {
	c := New(t)
	g := c.AddGroup("a", 1, map[string]int32{"T": 1})
	master, slave := dial(t, g.Master().Addr()), dial(t, g.Members()[1].Addr())
	for i, bodies := range [][]string{{"m0", "m1"}, {"m2"}, {"m3", "m4", "m5"}} {
		h, err := send(t, master, batch(t, "T", 0, 7, int32(i), bodies...))
		if err != nil {
			t.Fatal(err)
		}
		if want := []int64{0, 2, 3}[i]; h.QueueOffset != want || h.Count != int32(len(bodies)) {
			t.Fatalf("send %d: %+v, want offset %d", i, h, want)
		}
	}
	if _, err := send(t, master, batch(t, "T", 1, 7, 0, "x")); statusOf(err) != protocol.StatusQueueNotExist {
		t.Fatalf("send to a queue the topic lacks: %v", err)
	}
	if _, err := send(t, master, []byte("not a batch")); statusOf(err) != protocol.StatusMessageIllegal {
		t.Fatalf("send of garbage: %v", err)
	}
	var pe *protocol.Error
	if _, err := send(t, slave, batch(t, "T", 0, 7, 3, "x")); !errors.As(err, &pe) || pe.Status != protocol.StatusNotMaster || pe.MasterAddr != g.Master().Addr() {
		t.Fatalf("send to a slave: %v", err)
	}
	if g.MaxOffset("T", 0) != 6 || len(g.Batches("T", 0)) != 3 || g.StoredBatches() != 3 {
		t.Fatalf("stored: max offset %d, %d batches", g.MaxOffset("T", 0), len(g.Batches("T", 0)))
	}

	// Whole batches from the one holding the offset.
	rh, body, err := pull(t, master, "T", 0, 1)
	if err != nil || rh.Result != protocol.PullFound || rh.NextQueueOffset != 6 || rh.MaxOffset != 6 {
		t.Fatalf("pull at 1: %+v %v", rh, err)
	}
	if h, err := protocol.ReadBatchHeader(body); err != nil || h.BaseQueueOffset != 0 || h.ProducerID != 7 {
		t.Fatalf("first batch of the pull: %+v %v", h, err)
	}
	if rh, _, _ := pull(t, master, "T", 0, 6); rh.Result != protocol.PullNoNewMessage {
		t.Fatalf("pull at the end: %+v", rh)
	}
	if rh, _, _ := pull(t, master, "T", 0, 9); rh.Result != protocol.PullOffsetMoved || rh.NextQueueOffset != 6 {
		t.Fatalf("pull past the end: %+v", rh)
	}
	// A slave holding the batches that end by offset 3 serves them, and sends the consumer to
	// the master past them; unlinked, it long-polls at its end.
	g.Members()[1].SetReplicatedUpTo(4)
	g.Members()[1].SetSuggestBrokerID(1)
	if rh, _, _ := pull(t, slave, "T", 0, 0); rh.Result != protocol.PullFound || rh.NextQueueOffset != 3 || rh.MaxOffset != 3 || rh.SuggestBrokerID != 1 {
		t.Fatalf("lagging slave at 0: %+v", rh)
	}
	if rh, _, _ := pull(t, slave, "T", 0, 3); rh.Result != protocol.PullNotHere || rh.SuggestBrokerID != 0 {
		t.Fatalf("lagging slave at its end: %+v", rh)
	}
	g.Members()[1].SetMasterLinked(false)
	if rh, _, _ := pull(t, slave, "T", 0, 3); rh.Result != protocol.PullNoNewMessage {
		t.Fatalf("unlinked slave at its end: %+v", rh)
	}

	// Commits: a master takes the offset it is given, a slave keeps the larger.
	commit := func(conn *rpc.Conn, off int64) {
		t.Helper()
		if err := conn.CallDecode(ctx10s(t), protocol.CodeUpdateConsumerOffset, &protocol.ConsumerOffsetHeader{ConsumerGroup: "G", Topic: "T", Offset: off}, nil, nil, nil); err != nil {
			t.Fatal(err)
		}
	}
	commit(master, 5)
	commit(slave, 3)
	if off, ok := g.CommittedOffset("G", "T", 0); !ok || off != 5 {
		t.Fatalf("committed %d %v after a slave's lower commit", off, ok)
	}
	commit(master, 2)
	if off, _ := g.CommittedOffset("G", "T", 0); off != 2 {
		t.Fatalf("committed %d after the master's lower commit", off)
	}
	if g.Master().Commits() != 2 || g.Members()[1].Commits() != 1 || g.Master().Sends() != 3+2 || g.Master().Pulls() != 3 {
		t.Fatalf("counts: commits %d/%d sends %d pulls %d", g.Master().Commits(), g.Members()[1].Commits(), g.Master().Sends(), g.Master().Pulls())
	}

	// A corrupt batch no longer passes its CRC check.
	g.Corrupt("T", 0, 4)
	_, body, _ = pull(t, master, "T", 0, 3)
	if _, _, err := protocol.ValidateBatch(body, protocol.BatchLimits{}); !errors.Is(err, protocol.ErrBatchCRC) {
		t.Fatalf("corrupt batch: %v", err)
	}
}

func TestEditQueue(t *testing.T) {
	c := New(t)
	g := c.AddGroup("a", 0, map[string]int32{"T": 1})
	for i := range 3 {
		if _, err := g.Append(batch(t, "T", 0, 9, int32(2*i), "a", "b")); err != nil {
			t.Fatal(err)
		}
	}
	msgs := g.Messages("T", 0)
	if len(msgs) != 6 || msgs[5].QueueOffset != 5 || msgs[5].Sequence != 5 || string(msgs[5].Body) != "b" || msgs[5].ProducerID != 9 {
		t.Fatalf("messages %+v", msgs)
	}
	// Offset 2 missing, offset 3 damaged, the last message dropped.
	g.EditQueue("T", 0, func(ms []StoredMessage) []StoredMessage {
		ms[3].Body = []byte("damaged")
		return slices.Delete(ms[:5], 2, 3)
	})
	conn := dial(t, g.Master().Addr())
	rh, body, err := pull(t, conn, "T", 0, 2)
	if err != nil || rh.Result != protocol.PullFound || rh.MaxOffset != 5 || rh.NextQueueOffset != 5 {
		t.Fatalf("pull at the gap: %+v %v", rh, err)
	}
	h, _, err := protocol.ValidateBatch(body, protocol.BatchLimits{})
	if err != nil || h.BaseQueueOffset != 3 || h.Count != 1 || h.BaseSequence != 3 {
		t.Fatalf("first batch after the gap: %+v %v", h, err)
	}
	it := protocol.NewMessageIterator(body, h)
	if m, _ := it.Next(); string(m.Body) != "damaged" {
		t.Fatalf("body %q", m.Body)
	}
}

func TestControls(t *testing.T) {
	c := New(t)
	g := c.AddGroup("a", 0, map[string]int32{"T": 1})
	b := g.Master()
	conn := dial(t, b.Addr())
	one := batch(t, "T", 0, 1, 0, "x")

	remove := b.Control(protocol.CodeSendMessage, Refuse(protocol.StatusDiskFull, "full"))
	if _, err := send(t, conn, one); statusOf(err) != protocol.StatusDiskFull {
		t.Fatalf("refused: %v", err)
	}
	remove()
	var pe *protocol.Error
	remove = b.Control(AnyCode, NotMaster("h:1"))
	if _, err := send(t, conn, one); !errors.As(err, &pe) || pe.Status != protocol.StatusNotMaster || pe.MasterAddr != "h:1" {
		t.Fatalf("not master: %v", err)
	}
	remove()
	// The first function that does not pass decides; one that passes only watches.
	seen := make(chan protocol.RequestCode, 10)
	removeWatch := b.Control(AnyCode, func(req *rpc.Request) (rpc.Reply, Verdict) {
		seen <- req.Code
		return rpc.Reply{}, Pass
	})
	remove = b.Control(protocol.CodeSendMessage, func(req *rpc.Request) (rpc.Reply, Verdict) {
		b.Serve(req) // stored, then refused: a phantom
		return rpc.Errorf(protocol.StatusSystemBusy, "busy"), Answer
	})
	if _, err := send(t, conn, one); statusOf(err) != protocol.StatusSystemBusy || g.MaxOffset("T", 0) != 1 {
		t.Fatalf("served then refused: %v, max offset %d", err, g.MaxOffset("T", 0))
	}
	remove()
	removeWatch()
	if len(seen) != 1 || <-seen != protocol.CodeSendMessage {
		t.Fatal("the watching control did not see the one send alone")
	}

	d := 50 * time.Millisecond
	remove = b.Control(protocol.CodeSendMessage, Delay(d))
	start := time.Now()
	if _, err := send(t, conn, one); err != nil || time.Since(start) < d {
		t.Fatalf("delayed send: %v after %v", err, time.Since(start))
	}
	remove()

	release := make(chan struct{})
	remove = b.Control(protocol.CodeSendMessage, Hold(release))
	done := make(chan error, 1)
	go func() { _, err := send(t, conn, one); done <- err }()
	for b.Sends() < 5 {
		time.Sleep(time.Millisecond)
	}
	select {
	case err := <-done:
		t.Fatalf("a held send answered: %v", err)
	default:
	}
	close(release)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	remove()

	remove = b.Control(protocol.CodeSendMessage, DropConnection())
	if _, err := send(t, conn, one); !errors.Is(err, rpc.ErrClosed) {
		t.Fatalf("dropped connection: %v", err)
	}
	remove()
	if _, err := send(t, dial(t, b.Addr()), one); err != nil {
		t.Fatalf("after the controls were removed: %v", err)
	}
}

func TestHangAndStop(t *testing.T) {
	c := New(t)
	g := c.AddGroup("a", 0, map[string]int32{"T": 1})
	b := g.Master()
	release := b.Hang()
	conn := dial(t, b.Addr())
	errc := make(chan error, 1)
	one := batch(t, "T", 0, 1, 0, "x")
	go func() { _, err := send(t, conn, one); errc <- err }()
	for b.ReceivedSends() == 0 {
		time.Sleep(time.Millisecond)
	}
	select {
	case err := <-errc:
		t.Fatalf("a hung broker answered: %v", err)
	default:
	}
	if b.Sends() != 0 || g.StoredBatches() != 0 {
		t.Fatal("a hung broker served the send")
	}
	release()
	if err := <-errc; err != nil || g.StoredBatches() != 1 {
		t.Fatalf("after the release: %v, %d batches", err, g.StoredBatches())
	}

	addr := b.Addr()
	b.Stop()
	if b.Up() {
		t.Fatal("up after Stop")
	}
	if _, err := net.DialTimeout("tcp", addr, time.Second); err == nil {
		t.Fatal("a stopped broker accepted a connection")
	}
	b.Restart()
	if !b.Up() || b.Addr() != addr {
		t.Fatalf("restarted at %s, was %s", b.Addr(), addr)
	}
	if rh, _, err := pull(t, dial(t, addr), "T", 0, 0); err != nil || rh.Result != protocol.PullFound {
		t.Fatalf("the data after the restart: %+v %v", rh, err)
	}
}

func TestConsumerTable(t *testing.T) {
	c := New(t)
	b := c.AddGroup("a", 0, nil).Master()
	conn := dial(t, b.Addr())
	call := func(code protocol.RequestCode, client string) {
		t.Helper()
		if err := conn.CallDecode(ctx10s(t), code, &protocol.ConsumerHeartbeatHeader{ConsumerGroup: "G", ClientID: client, Topic: "T"}, nil, nil, nil); err != nil {
			t.Fatal(err)
		}
	}
	call(protocol.CodeHeartbeat, "c2")
	call(protocol.CodeHeartbeat, "c1")
	var l protocol.StringList
	if err := conn.CallDecode(ctx10s(t), protocol.CodeGetConsumerListByGroup, &protocol.GroupHeader{ConsumerGroup: "G"}, nil, nil, &l); err != nil || !slices.Equal(l.Items, []string{"c1", "c2"}) {
		t.Fatalf("members %q %v", l.Items, err)
	}
	call(protocol.CodeUnregisterClient, "c2")
	if got := b.Clients("G"); !slices.Equal(got, []string{"c1"}) || b.Heartbeats() != 2 {
		t.Fatalf("after the unregister: %q, %d heartbeats", got, b.Heartbeats())
	}
	b.ForgetClients()
	if got := b.Clients("G"); len(got) != 0 {
		t.Fatalf("after ForgetClients: %q", got)
	}
	if err := conn.CallDecode(ctx10s(t), protocol.CodeElectMaster, &protocol.ElectMasterRequest{BrokerName: "a", BrokerID: 1}, nil, nil, nil); statusOf(err) != protocol.StatusRequestCodeNotSupported {
		t.Fatalf("ELECT_MASTER without a control: %v", err)
	}
}

// TestHeldPull: a pull that finds nothing new is held, as long polling does, without holding up
// the requests behind it on its connection, and answered by the next append; one nothing
// answers ends at its poll timeout.
func TestHeldPull(t *testing.T) {
	c := New(t)
	g := c.AddGroup("a", 0, map[string]int32{"T": 1})
	conn := dial(t, g.Master().Addr())
	type answer struct {
		rh  protocol.PullResponseHeader
		err error
	}
	held := make(chan answer, 1)
	go func() {
		hdr := protocol.PullRequestHeader{ConsumerGroup: "G", Topic: "T", QueueOffset: 0, MaxMessages: 10, MaxBytes: 1 << 20, PollTimeoutMs: 60_000, CommitOffset: -1}
		var rh protocol.PullResponseHeader
		err := conn.CallDecode(context.Background(), protocol.CodePullMessage, &hdr, nil, &rh, nil)
		held <- answer{rh, err}
	}()
	for g.Master().Pulls() == 0 {
		time.Sleep(time.Millisecond)
	}
	// The send behind the held pull, on the same connection, is answered: it wakes the pull.
	one := batch(t, "T", 0, 1, 0, "x")
	if _, err := send(t, conn, one); err != nil {
		t.Fatal(err)
	}
	if a := <-held; a.err != nil || a.rh.Result != protocol.PullFound || a.rh.NextQueueOffset != 1 {
		t.Fatalf("held pull: %+v %v", a.rh, a.err)
	}
	hdr := protocol.PullRequestHeader{ConsumerGroup: "G", Topic: "T", QueueOffset: 1, MaxMessages: 10, MaxBytes: 1 << 20, PollTimeoutMs: 20, CommitOffset: -1}
	var rh protocol.PullResponseHeader
	if err := conn.CallDecode(ctx10s(t), protocol.CodePullMessage, &hdr, nil, &rh, nil); err != nil || rh.Result != protocol.PullNoNewMessage {
		t.Fatalf("pull at the end past its poll timeout: %+v %v", rh, err)
	}
}
