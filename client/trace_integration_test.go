package client

import (
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/petrel-mq/petrel/internal/testcluster"
	"github.com/petrel-mq/petrel/internal/testutil"
	"github.com/petrel-mq/petrel/protocol"
)

// TestSendTracesOnARealBroker: against a real broker on real sockets, the client's trace of a
// send and the broker's (Admin.SendTraces) match by ID and describe the same batch, and the
// broker's stages lie between the client's Written and Received (one process: one clock). A
// broker that predates tracing refuses GET_SEND_TRACES with REQUEST_CODE_NOT_SUPPORTED and a
// traced send as REQUEST_MALFORMED, while untraced sends go through: the test checks that
// instead.
func TestSendTracesOnARealBroker(t *testing.T) {
	rc := testcluster.New(t, testcluster.Options{}, testcluster.GroupSpec{Name: "broker-a"})
	rc.CreateTopic("TR", 2)
	c := newTestClient(t, rc.NamesrvAddr())
	admin := NewAdmin(c)
	ctx := testCtx(t, 60*time.Second)
	addr := rc.Group("broker-a").Member(0).Addr()
	var mu sync.Mutex
	obs := map[uint64]SendTraceClient{}
	p := newTestProducer(t, c, WithTraceEvery(1), WithSendTraceObserver(func(st SendTraceClient) {
		mu.Lock()
		defer mu.Unlock()
		obs[st.ID] = st
	}))
	_, serr := p.SendSync(ctx, &Message{Topic: "TR", Body: []byte("first")})
	_, terr := admin.SendTraces(ctx, addr, 0)
	if errors.Is(terr, protocol.StatusRequestCodeNotSupported) {
		if !errors.Is(serr, protocol.StatusRequestMalformed) {
			t.Fatalf("a traced send to a broker without tracing: %v, want REQUEST_MALFORMED", serr)
		}
		if _, err := newTestProducer(t, c).SendSync(ctx, &Message{Topic: "TR", Body: []byte("untraced")}); err != nil {
			t.Fatalf("an untraced send to a broker without tracing: %v", err)
		}
		t.Logf("the broker predates send tracing (%v): checked its refusals only", terr)
		return
	}
	if serr != nil || terr != nil {
		t.Fatalf("traced send: %v; SendTraces: %v", serr, terr)
	}
	for i := range 20 {
		if _, err := p.SendSync(ctx, &Message{Topic: "TR", Body: []byte("sync")}); err != nil {
			t.Fatal(err)
		}
		if err := p.SendAsync(ctx, &Message{Topic: "TR", Body: []byte("async")}, func(_ SendResult, err error) {
			if err != nil {
				t.Errorf("async send %d: %v", i, err)
			}
		}); err != nil {
			t.Fatal(err)
		}
	}
	if err := p.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	want := len(obs)
	mu.Unlock()
	broker := map[uint64]protocol.SendTrace{}
	next := uint64(0)
	testutil.Eventually(t, "the broker's traces of every traced send", func() bool {
		tbl, err := admin.SendTraces(ctx, addr, next)
		if err != nil {
			t.Fatal(err)
		}
		for _, bt := range tbl.Traces {
			broker[bt.ID] = bt
		}
		next = tbl.Next
		return len(broker) >= want
	})
	mu.Lock()
	defer mu.Unlock()
	for id, st := range obs {
		checkStamps(t, st)
		bt, ok := broker[id]
		if !ok {
			t.Errorf("no broker trace of %#x", id)
			continue
		}
		if bt.Topic != st.Topic || bt.QueueID != st.QueueID || bt.BaseQueueOffset != st.BaseQueueOffset || bt.Count != st.Count {
			t.Errorf("broker trace %+v of the client's %+v", bt, st)
		}
		s := bt.Stamps
		order := []int64{st.Written, s[protocol.TraceRead], s[protocol.TraceDispatched], s[protocol.TraceAppended], s[protocol.TraceAnswered], st.Received}
		for i := 1; i < len(order); i++ {
			if order[i] == 0 || order[i] < order[i-1] {
				t.Errorf("trace %#x: client Written, broker Read, Dispatched, Appended, Answered, client Received = %v: not ordered", id, order)
				break
			}
		}
	}
}
