package client

import (
	"context"
	"errors"
	"maps"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/petrel-mq/petrel/internal/testutil"
	"github.com/petrel-mq/petrel/protocol"
)

func TestMain(m *testing.M) { testutil.VerifyTestMain(m) }

func testRoute() *topicRoute {
	data := protocol.TopicRouteData{
		QueueDatas: []protocol.QueueData{
			{BrokerName: "b", ReadQueueNums: 2, WriteQueueNums: 2, Perm: protocol.PermReadWrite},
			{BrokerName: "a", ReadQueueNums: 3, WriteQueueNums: 2, Perm: protocol.PermReadWrite},
			{BrokerName: "c", ReadQueueNums: 1, WriteQueueNums: 1, Perm: protocol.PermRead},      // read only
			{BrokerName: "d", ReadQueueNums: 1, WriteQueueNums: 1, Perm: protocol.PermReadWrite}, // no master
			{BrokerName: "e", ReadQueueNums: 1, WriteQueueNums: 1, Perm: protocol.PermReadWrite}, // no broker data
		},
		BrokerDatas: []protocol.BrokerData{
			{BrokerName: "a", Addrs: []protocol.BrokerAddr{{BrokerID: 0, Addr: "a0"}, {BrokerID: 1, Addr: "a1"}}},
			{BrokerName: "b", Addrs: []protocol.BrokerAddr{{BrokerID: 0, Addr: "b0"}}},
			{BrokerName: "c", Addrs: []protocol.BrokerAddr{{BrokerID: 0, Addr: "c0"}}},
			{BrokerName: "d", Addrs: []protocol.BrokerAddr{{BrokerID: 2, Addr: "d2"}}},
		},
	}
	return newTopicRoute("T", data, time.Time{})
}

func TestTopicRouteQueues(t *testing.T) {
	r := testRoute()
	f := func(qs []MessageQueue, want ...string) {
		t.Helper()
		var got []string
		for _, q := range qs {
			got = append(got, q.String())
		}
		if !slices.Equal(got, want) {
			t.Fatalf("queues %v, want %v", got, want)
		}
	}
	f(r.writeQueues, "T@a#0", "T@a#1", "T@b#0", "T@b#1")
	f(r.readQueues, "T@a#0", "T@a#1", "T@a#2", "T@b#0", "T@b#1", "T@c#0", "T@d#0")
	if r.masterAddr("a") != "a0" || r.masterAddr("d") != "" || r.masterAddr("zz") != "" {
		t.Fatal("masterAddr")
	}
}

func TestSelectQueue(t *testing.T) {
	qs := testRoute().writeQueues // a#0 a#1 b#0 b#1
	all := func(string) bool { return true }
	notA := func(b string) bool { return b != "a" }
	none := func(string) bool { return false }
	for _, tc := range []struct {
		name  string
		start uint32
		avoid string
		avail func(string) bool
		want  string
	}{
		{"round-robin", 0, "", all, "T@a#0"},
		{"round-robin", 1, "", all, "T@a#1"},
		{"round-robin, no tracker", 2, "", nil, "T@b#0"},
		{"round-robin wraps", 5, "", all, "T@a#1"},
		{"avoid the group that failed", 0, "a", all, "T@b#0"},
		{"avoid the group that failed", 1, "a", all, "T@b#1"},
		{"avoid the group that failed", 3, "b", all, "T@a#1"},
		{"skip a group in backoff", 0, "", notA, "T@b#0"},
		{"skip a group in backoff", 3, "", notA, "T@b#1"},
		{"all in backoff: another group than the failed one", 0, "a", none, "T@b#0"},
		{"all in backoff: another group than the failed one", 1, "a", none, "T@b#1"},
		{"all in backoff, none failed: any", 0, "", none, "T@a#0"},
	} {
		q, ok := selectQueue(qs, tc.start, tc.avoid, tc.avail, nil)
		if !ok || q.String() != tc.want {
			t.Errorf("%s: selectQueue(%d, %q) = %v, want %s", tc.name, tc.start, tc.avoid, q, tc.want)
		}
	}
	onlyA := []MessageQueue{{Topic: "T", BrokerName: "a"}}
	if q, ok := selectQueue(onlyA, 7, "a", none, nil); !ok || q.BrokerName != "a" {
		t.Fatal("single group must still be chosen")
	}
	if _, ok := selectQueue(nil, 0, "", all, nil); ok {
		t.Fatal("no queues")
	}
}

// TestSelectQueueSpreadsRetries: batches moved away from a failed group (or one in backoff)
// spread evenly over the other groups' queues, whatever the round-robin counter's value; a scan
// from the counter would give the first queue of the next group every start that falls in the
// failed group's range.
func TestSelectQueueSpreadsRetries(t *testing.T) {
	var qs []MessageQueue
	for _, g := range []string{"a", "b", "c"} {
		for id := range int32(4) {
			qs = append(qs, MessageQueue{Topic: "T", BrokerName: g, QueueID: id})
		}
	}
	notB := func(b string) bool { return b != "b" }
	for _, tc := range []struct {
		name  string
		avoid string
		avail func(string) bool
		want  map[string]int // picks per queue over 240 consecutive starts
	}{
		{"retries from a", "a", nil, spread(qs, "b", "c")},
		{"retries from a, b in backoff", "a", notB, spread(qs, "c")},
		{"b in backoff", "", notB, spread(qs, "a", "c")},
		{"nothing avoided", "", nil, spread(qs, "a", "b", "c")},
	} {
		got := map[string]int{}
		for start := uint32(1000); start < 1240; start++ {
			q, _ := selectQueue(qs, start, tc.avoid, tc.avail, nil)
			got[q.String()]++
		}
		if !maps.Equal(got, tc.want) {
			t.Errorf("%s: picks %v, want %v", tc.name, got, tc.want)
		}
	}
}

// spread returns the even spread of 240 picks over the queues of groups.
func spread(qs []MessageQueue, groups ...string) map[string]int {
	var n int
	for _, q := range qs {
		if slices.Contains(groups, q.BrokerName) {
			n++
		}
	}
	out := map[string]int{}
	for _, q := range qs {
		if slices.Contains(groups, q.BrokerName) {
			out[q.String()] = 240 / n
		}
	}
	return out
}

func TestShardIndex(t *testing.T) {
	r := testRoute()
	counts := map[int]int{}
	for i := 0; i < 1000; i++ {
		key := "order-" + strconv.Itoa(i)
		a, b := shardIndex(key, len(r.writeQueues)), shardIndex(key, len(r.writeQueues))
		if a != b || a < 0 || a >= len(r.writeQueues) {
			t.Fatalf("shardIndex(%q) = %d, %d", key, a, b)
		}
		counts[a]++
	}
	for i := range r.writeQueues {
		if counts[i] < 150 {
			t.Fatalf("queue %d got %d of 1000 keys: %v", i, counts[i], counts)
		}
	}
	// The route's order does not depend on the NameServer's order.
	d := r.data
	slices.Reverse(d.QueueDatas)
	if r2 := newTopicRoute("T", d, time.Time{}); !slices.Equal(r2.writeQueues, r.writeQueues) {
		t.Fatal("queue order depends on the route's order")
	}
}

func TestPickBrokerAddr(t *testing.T) {
	f := func(addrs []protocol.BrokerAddr, suggest int64, wantAddr string, wantID int64, wantOK bool) {
		t.Helper()
		bd := &protocol.BrokerData{BrokerName: "x", Addrs: addrs}
		addr, id, ok := pickBrokerAddr(bd, suggest)
		if addr != wantAddr || id != wantID || ok != wantOK {
			t.Fatalf("pickBrokerAddr(%v, %d) = %q %d %v", addrs, suggest, addr, id, ok)
		}
	}
	three := []protocol.BrokerAddr{{BrokerID: 0, Addr: "m"}, {BrokerID: 1, Addr: "s1"}, {BrokerID: 2, Addr: "s2"}}
	f(three, 0, "m", 0, true)
	f(three, 2, "s2", 2, true)
	f(three, 7, "m", 0, true) // unknown id: the master
	slaves := []protocol.BrokerAddr{{BrokerID: 2, Addr: "s2"}, {BrokerID: 1, Addr: "s1"}}
	f(slaves, 0, "s1", 1, true) // no master: the lowest live member
	f(nil, 0, "", 0, false)
	if _, _, ok := pickBrokerAddr(nil, 0); ok {
		t.Fatal("nil group")
	}
}

func TestPickMember(t *testing.T) {
	three := []protocol.BrokerAddr{{BrokerID: 0, Addr: "m"}, {BrokerID: 1, Addr: "s1"}, {BrokerID: 2, Addr: "s2"}}
	slaves := []protocol.BrokerAddr{{BrokerID: 1, Addr: "s1"}, {BrokerID: 2, Addr: "s2"}}
	f := func(addrs []protocol.BrokerAddr, want, avoid int64, down []string, wantAddr string, wantFallback bool) {
		t.Helper()
		bd := &protocol.BrokerData{BrokerName: "x", Addrs: addrs}
		usable := func(a string) bool { return !slices.Contains(down, a) }
		addr, id, fallback, ok := pickMember(bd, want, avoid, usable)
		if !ok || addr != wantAddr || fallback != wantFallback {
			t.Fatalf("pickMember(%v, want %d, avoid %d, down %v) = %q %d fallback %v ok %v; want %q fallback %v",
				addrs, want, avoid, down, addr, id, fallback, ok, wantAddr, wantFallback)
		}
		if got, _ := memberAddr(bd, id); got != addr {
			t.Fatalf("id %d is not %q", id, addr)
		}
	}
	f(three, 2, -1, nil, "s2", false)                                           // the suggestion
	f(three, 2, -1, []string{"s2"}, "m", false)                                 // suggested member down: the master
	f(three, 0, -1, []string{"m"}, "s1", false)                                 // master down: the lowest live slave
	f(three, 0, -1, []string{"m", "s1"}, "s2", false)                           //
	f(three, 0, 1, []string{"m"}, "s2", false)                                  // s1 said "not here": the other slave
	f(three, 0, 1, []string{"m", "s2"}, "s1", false)                            // ... unless it is the only one usable
	f(three, 1, 1, nil, "m", false)                                             // a suggestion of the member to avoid
	f(three, 2, -1, []string{"m", "s1", "s2"}, "s2", true)                      // nothing usable: the suggestion
	f(three, 7, -1, []string{"m", "s1", "s2"}, "m", true)                       // ... or the master
	f(slaves, 0, -1, []string{"s1", "s2"}, "s1", true)                          // ... or the lowest member
	f(slaves, 0, -1, nil, "s1", false)                                          // no master: the lowest member
	f(slaves, 0, 1, nil, "s2", false)                                           //
	f([]protocol.BrokerAddr{{BrokerID: 3, Addr: "s3"}}, 0, 3, nil, "s3", false) // the avoided one alone
	if _, _, _, ok := pickMember(nil, 0, -1, nil); ok {
		t.Fatal("nil group")
	}
	if _, _, _, ok := pickMember(&protocol.BrokerData{}, 0, -1, nil); ok {
		t.Fatal("empty group")
	}
}

func TestMembersInOrder(t *testing.T) {
	bd := &protocol.BrokerData{Addrs: []protocol.BrokerAddr{{BrokerID: 2, Addr: "s2"}, {BrokerID: 0, Addr: "m"}, {BrokerID: 1, Addr: "s1"}}}
	f := func(down []string, want ...string) {
		t.Helper()
		var got []string
		for _, a := range membersInOrder(bd, func(a string) bool { return !slices.Contains(down, a) }) {
			got = append(got, a.Addr)
		}
		if !slices.Equal(got, want) {
			t.Fatalf("down %v: %v, want %v", down, got, want)
		}
	}
	f(nil, "m", "s1", "s2")
	f([]string{"m"}, "s1", "s2", "m")
	f([]string{"s1", "m"}, "s2", "m", "s1")
	if membersInOrder(nil, nil) != nil {
		t.Fatal("nil group")
	}
}

func TestFaultTracker(t *testing.T) {
	ft := newFaultTracker(time.Second, 5*time.Second)
	now := time.Unix(1000, 0)
	if !ft.empty() || !ft.available("a", "a0", now) {
		t.Fatal("fresh tracker")
	}
	// event records a failure event at now, of a request sent then that got no answer, and
	// checks the backoff.
	event := func(wantBackoff time.Duration) {
		t.Helper()
		if d := ft.failed("a", "a0", now, now, true); d != wantBackoff {
			t.Fatalf("backoff %v, want %v", d, wantBackoff)
		}
		if ft.available("a", "a0", now.Add(wantBackoff-time.Millisecond)) || !ft.available("a", "a0", now.Add(wantBackoff)) {
			t.Fatalf("availability around %v", wantBackoff)
		}
	}
	event(time.Second)
	event(2 * time.Second)
	event(4 * time.Second)
	event(5 * time.Second) // capped
	event(5 * time.Second)
	if !ft.available("b", "b0", now) {
		t.Fatal("other groups are not affected")
	}
	ft.succeeded("a")
	if !ft.empty() || !ft.available("a", "a0", now) {
		t.Fatal("success resets")
	}
	event(time.Second)
	// Refusals (the master answered) start at refusedBackoffBase and double up to
	// maxRefusedBackoff only.
	ft.succeeded("a")
	for _, want := range []time.Duration{refusedBackoffBase, 2 * refusedBackoffBase, maxRefusedBackoff, maxRefusedBackoff} {
		if d := ft.failed("a", "a0", now, now, false); d != want {
			t.Fatalf("refusal backoff %v, want %v", d, want)
		}
	}
}

// TestFaultTrackerOneEvent: the failures of requests sent before a group's backoff began (the
// requests in flight when its master failed) are one event: they do not lengthen the backoff.
// A request sent since, failing, starts the next event.
func TestFaultTrackerOneEvent(t *testing.T) {
	ft := newFaultTracker(time.Second, 30*time.Second)
	t0 := time.Unix(1000, 0)
	ms := func(n int) time.Time { return t0.Add(time.Duration(n) * time.Millisecond) }
	// 50 requests sent during the 100 ms before the first failure, failing over 3 s (no answer:
	// the master hung).
	if d := ft.failed("a", "a0", ms(0), ms(100), true); d != time.Second {
		t.Fatalf("first failure: backoff %v", d)
	}
	for i := 1; i < 50; i++ {
		if d := ft.failed("a", "a0", ms(2*i), ms(100+60*i), true); d != max(ms(1100).Sub(ms(100+60*i)), 0) {
			t.Fatalf("failure %d of the same event: backoff %v", i, d)
		}
	}
	if ft.available("a", "a0", ms(1099)) || !ft.available("a", "a0", ms(1100)) {
		t.Fatal("one event: the group is back after the base backoff")
	}
	// A request sent after the event began (a retry, once the backoff ended) fails: a new event.
	if d := ft.failed("a", "a0", ms(1200), ms(1300), true); d != 2*time.Second {
		t.Fatalf("second event: backoff %v", d)
	}
}

// TestFaultTrackerNewMaster: a group in backoff is available again as soon as its master is
// another than the one that failed, and a failure of the new master starts from the base.
func TestFaultTrackerNewMaster(t *testing.T) {
	ft := newFaultTracker(time.Second, 30*time.Second)
	now := time.Unix(1000, 0)
	for i := range 3 {
		ft.failed("a", "a0", now.Add(time.Duration(i)*time.Minute), now.Add(time.Duration(i)*time.Minute), false)
	}
	now = now.Add(2 * time.Minute)
	if ft.available("a", "a0", now) {
		t.Fatal("in backoff")
	}
	if !ft.available("a", "a1", now) {
		t.Fatal("the route names a new master: available at once")
	}
	if d := ft.failed("a", "a1", now, now, true); d != time.Second {
		t.Fatalf("the new master's first failure: backoff %v", d)
	}
	if ft.available("a", "a1", now) {
		t.Fatal("the new master failed")
	}
	// A NOT_MASTER answer names yet another master.
	ft.masterMoved("a", "a1")
	if ft.available("a", "a1", now) {
		t.Fatal("moved to the master that failed: still in backoff")
	}
	ft.masterMoved("a", "a2")
	if !ft.empty() || !ft.available("a", "a1", now) {
		t.Fatal("moved to a new master: the backoff ends")
	}
}

func TestOffsetTracker(t *testing.T) {
	const x, y = 0xa1, 0xb2 // two lives of the queue
	ot := newOffsetTracker()
	if _, _, ok := ot.toCommit(); ok {
		t.Fatal("nothing to commit before the start")
	}
	ot.start(10, true, x)
	if _, _, ok := ot.toCommit(); ok {
		t.Fatal("the start offset is already committed")
	}
	ot.advance(15)
	if v, inc, ok := ot.toCommit(); !ok || v != 15 || inc != x {
		t.Fatalf("toCommit = %d %#x %v", v, inc, ok)
	}
	ot.confirm(15, x)
	ot.confirm(12, x) // a late confirmation of an older commit
	if _, got, _ := ot.position(); got != 15 {
		t.Fatalf("committed moved back to %d", got)
	}
	ot.advance(11) // OFFSET_MOVED backwards
	if _, _, ok := ot.toCommit(); ok {
		t.Fatal("a commit must never move backwards")
	}
	ot.advance(20)
	if v, _, ok := ot.toCommit(); !ok || v != 20 {
		t.Fatalf("toCommit = %d %v", v, ok)
	}
	ot.confirm(20, x)
	ot.reset(3) // OFFSET_MOVED: the broker's position wins
	if v, inc, ok := ot.toCommit(); !ok || v != 3 || inc != x {
		t.Fatalf("after reset toCommit = %d %#x %v", v, inc, ok)
	}
	// The queue is reborn: the new life's position, with its incarnation; a late confirmation
	// of the old life's commit changes nothing.
	ot.reborn(0, y)
	ot.confirm(20, x)
	if v, inc, ok := ot.toCommit(); !ok || v != 0 || inc != y { // the new life's start is committed
		t.Fatalf("after reborn at 0 toCommit = %d %#x %v", v, inc, ok)
	}
	if c, cm, inc := ot.position(); c != 0 || cm != -1 || inc != y {
		t.Fatalf("after reborn: consumed %d committed %d incarnation %#x", c, cm, inc)
	}
	ot.advance(4)
	if v, inc, ok := ot.toCommit(); !ok || v != 4 || inc != y {
		t.Fatalf("new life toCommit = %d %#x %v", v, inc, ok)
	}
	ot.learn(x) // one is known: learn keeps it
	if _, _, inc := ot.position(); inc != y {
		t.Fatalf("learn replaced the known incarnation: %#x", inc)
	}

	fresh := newOffsetTracker()
	fresh.start(0, false, 0) // from ConsumeFromFirst: not committed yet, no incarnation
	fresh.advance(0)
	if v, inc, ok := fresh.toCommit(); !ok || v != 0 || inc != 0 {
		t.Fatalf("an uncommitted start offset is committed: %d %#x %v", v, inc, ok)
	}
	fresh.learn(x)
	if _, inc, _ := fresh.toCommit(); inc != x {
		t.Fatalf("learnt incarnation %#x", inc)
	}
}

func TestByteBudget(t *testing.T) {
	b := newByteBudget(100)
	ctx := context.Background()
	if n, err := b.acquire(ctx, 60); err != nil || n != 60 {
		t.Fatal(n, err)
	}
	// Larger than the whole budget: capped, so it can pass alone.
	got := make(chan int, 1)
	go func() {
		n, err := b.acquire(ctx, 500)
		if err != nil {
			t.Error(err)
		}
		got <- n
	}()
	// A later small request waits behind it (FIFO).
	testutil.Eventually(t, "the big waiter queues", func() bool { b.mu.Lock(); defer b.mu.Unlock(); return len(b.waiters) == 1 })
	small := make(chan error, 1)
	go func() { _, err := b.acquire(ctx, 10); small <- err }()
	testutil.Eventually(t, "the small waiter queues", func() bool { b.mu.Lock(); defer b.mu.Unlock(); return len(b.waiters) == 2 })
	b.release(60)
	if n := <-got; n != 100 {
		t.Fatalf("capped acquire took %d", n)
	}
	// Context ends while waiting.
	cctx, cancel := context.WithTimeout(ctx, 20*time.Millisecond)
	defer cancel()
	if _, err := b.acquire(cctx, 1); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("acquire with a dead context: %v", err)
	}
	b.release(100)
	if err := <-small; err != nil {
		t.Fatal(err)
	}
	if b.inUse() != 10 {
		t.Fatalf("in use %d", b.inUse())
	}
	// Close fails waiters and later acquires.
	if _, err := b.acquire(ctx, 90); err != nil {
		t.Fatal(err)
	}
	failed := make(chan error, 1)
	go func() { _, err := b.acquire(ctx, 50); failed <- err }()
	testutil.Eventually(t, "the waiter queues", func() bool { b.mu.Lock(); defer b.mu.Unlock(); return len(b.waiters) == 1 })
	b.close()
	if err := <-failed; !errors.Is(err, ErrProducerClosed) {
		t.Fatal(err)
	}
	if _, err := b.acquire(ctx, 1); !errors.Is(err, ErrProducerClosed) {
		t.Fatal(err)
	}
}

func TestProperties(t *testing.T) {
	props := map[string]string{"b": "2", "a": "1", "UNIQ_KEY": "x y", "empty": ""}
	enc, err := appendProperties(nil, props)
	if err != nil {
		t.Fatal(err)
	}
	if string(enc) != "UNIQ_KEY\x01x y\x02a\x011\x02b\x012\x02empty\x01\x02" {
		t.Fatalf("encoding %q is not sorted", enc)
	}
	m := MessageExt{Properties: enc}
	if v, ok := m.Property("a"); !ok || v != "1" {
		t.Fatal("Property a")
	}
	if v, ok := m.Property("empty"); !ok || v != "" {
		t.Fatal("Property empty")
	}
	if _, ok := m.Property("zz"); ok {
		t.Fatal("Property zz")
	}
	parsed := ParseProperties(enc)
	if len(parsed) != len(props) {
		t.Fatalf("parsed %v", parsed)
	}
	for k, v := range props {
		if parsed[k] != v {
			t.Fatalf("parsed %v", parsed)
		}
	}
	for _, bad := range []map[string]string{{"": "x"}, {"a\x01": "x"}, {"a": "x\x02"}, {"big": string(make([]byte, 70000))}} {
		if _, err := appendProperties(nil, bad); !errors.Is(err, ErrMessageInvalid) {
			t.Fatalf("%q: %v", bad, err)
		}
	}
	c := m.Clone()
	enc[0] = 'Z'
	if c.Properties[0] != 'U' {
		t.Fatal("Clone aliases the original")
	}
}

// TestFaultTrackerProbes: only a backoff for a master that could not be reached is probed, and
// its master answering ends it; a refusal's backoff and another master's answer do not.
func TestFaultTrackerProbes(t *testing.T) {
	ft := newFaultTracker(time.Second, 30*time.Second)
	now := time.Unix(1000, 0)
	ft.failed("a", "a0", now, now, true)  // a: unreachable
	ft.failed("b", "b0", now, now, false) // b: refused (busy)
	ps := ft.probes(now)
	if len(ps) != 1 || ps[0] != (faultProbe{group: "a", addr: "a0"}) {
		t.Fatalf("probes %v, want a's master alone", ps)
	}
	if got := ft.probes(now.Add(2 * time.Second)); len(got) != 0 {
		t.Fatalf("probes after the backoff ended: %v", got)
	}
	ft.recovered("a", "a1") // another master answering says nothing of a0
	ft.recovered("b", "b0") // a refusal's backoff stays
	if ft.available("a", "a0", now) || ft.available("b", "b0", now) {
		t.Fatal("a backoff ended by the wrong answer")
	}
	ft.recovered("a", "a0")
	if !ft.available("a", "a0", now) {
		t.Fatal("a's master answers again: the group is available")
	}
	// A refusal during an unreachable event makes no difference; an unreachable failure during
	// a refused event makes it probed.
	ft.failed("b", "b0", now.Add(-time.Millisecond), now, true)
	if ps := ft.probes(now); len(ps) != 1 || ps[0].group != "b" {
		t.Fatalf("probes %v, want b's master", ps)
	}
}

// TestRouteMissingGroups: a route remembers the groups an earlier one had and it lacks, since
// when, and forgets them after missingWatch or once they are back.
func TestRouteMissingGroups(t *testing.T) {
	t0 := time.Unix(1000, 0)
	rd := func(groups ...string) protocol.TopicRouteData {
		var d protocol.TopicRouteData
		for _, g := range groups {
			d.QueueDatas = append(d.QueueDatas, protocol.QueueData{BrokerName: g, ReadQueueNums: 1, WriteQueueNums: 1, Perm: protocol.PermReadWrite})
			d.BrokerDatas = append(d.BrokerDatas, protocol.BrokerData{BrokerName: g, Addrs: []protocol.BrokerAddr{{BrokerID: 0, Addr: g + ":1"}}})
		}
		return d
	}
	r1 := newTopicRoute("T", rd("a", "b"), t0)
	r2 := newTopicRoute("T", rd("a"), t0.Add(time.Second)).withMissing(r1)
	if len(r2.missing) != 1 || !r2.missing["b"].Equal(t0.Add(time.Second)) {
		t.Fatalf("missing %v", r2.missing)
	}
	r3 := newTopicRoute("T", rd("a"), t0.Add(time.Minute)).withMissing(r2)
	if !r3.missing["b"].Equal(t0.Add(time.Second)) {
		t.Fatalf("missing since %v, want the first miss", r3.missing["b"])
	}
	if r4 := newTopicRoute("T", rd("a"), t0.Add(missingWatch+2*time.Second)).withMissing(r3); len(r4.missing) != 0 {
		t.Fatalf("missing %v after missingWatch", r4.missing)
	}
	if r5 := newTopicRoute("T", rd("a", "b"), t0.Add(2*time.Minute)).withMissing(r3); len(r5.missing) != 0 {
		t.Fatalf("missing %v once b is back", r5.missing)
	}
}
