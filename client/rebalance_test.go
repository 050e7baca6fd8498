package client

import (
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/petrel-mq/petrel/protocol"
)

func testQueues(spec ...any) []MessageQueue {
	// spec: brokerName, count, brokerName, count, ...
	var out []MessageQueue
	for i := 0; i < len(spec); i += 2 {
		for id := range int32(spec[i+1].(int)) {
			out = append(out, MessageQueue{Topic: "T", BrokerName: spec[i].(string), QueueID: id})
		}
	}
	return out
}

func queueList(qs []MessageQueue) string {
	parts := make([]string, len(qs))
	for i, q := range qs {
		parts[i] = q.BrokerName + strconv.Itoa(int(q.QueueID))
	}
	return strings.Join(parts, " ")
}

func TestAllocateAveragely(t *testing.T) {
	f := func(queues []MessageQueue, clients []string, self string, want string, wantOK bool) {
		t.Helper()
		got, ok := allocateAveragely(queues, clients, self)
		if ok != wantOK || queueList(got) != want {
			t.Fatalf("allocate(%d queues, %v, %q) = %q, %v; want %q, %v", len(queues), clients, self, queueList(got), ok, want, wantOK)
		}
	}
	q8 := testQueues("a", 8)
	f(q8, []string{"c1"}, "c1", "a0 a1 a2 a3 a4 a5 a6 a7", true)
	f(q8, []string{"c1", "c2"}, "c1", "a0 a1 a2 a3", true)
	f(q8, []string{"c1", "c2"}, "c2", "a4 a5 a6 a7", true)
	// Uneven: 8 over 3 gives 3, 3, 2 (the first 8%3 clients get one more).
	f(q8, []string{"c1", "c2", "c3"}, "c1", "a0 a1 a2", true)
	f(q8, []string{"c1", "c2", "c3"}, "c2", "a3 a4 a5", true)
	f(q8, []string{"c1", "c2", "c3"}, "c3", "a6 a7", true)
	// More clients than queues: one each, the last clients none.
	q3 := testQueues("a", 2, "b", 1)
	f(q3, []string{"c1", "c2", "c3", "c4", "c5"}, "c1", "a0", true)
	f(q3, []string{"c1", "c2", "c3", "c4", "c5"}, "c3", "b0", true)
	f(q3, []string{"c1", "c2", "c3", "c4", "c5"}, "c4", "", true)
	f(q3, []string{"c1", "c2", "c3", "c4", "c5"}, "c5", "", true)
	// Blocks span broker groups.
	q6 := testQueues("a", 3, "b", 3)
	f(q6, []string{"c1", "c2", "c3", "c4"}, "c2", "a2 b0", true)
	f(q6, []string{"c1", "c2", "c3", "c4"}, "c4", "b2", true)
	// Not a member: nothing, not ok.
	f(q8, []string{"c1", "c2"}, "c3", "", false)
	f(q8, nil, "c1", "", false)
	// No queue.
	f(nil, []string{"c1", "c2"}, "c2", "", true)
}

// allocateReference is RocketMQ's AllocateMessageQueueAveragely.allocate as written in Java,
// to check allocateAveragely against.
func allocateReference(mqAll []MessageQueue, cidAll []string, currentCID string) []MessageQueue {
	index := slices.Index(cidAll, currentCID)
	if index < 0 || len(mqAll) == 0 {
		return nil
	}
	mod := len(mqAll) % len(cidAll)
	var averageSize int
	switch {
	case len(mqAll) <= len(cidAll):
		averageSize = 1
	case mod > 0 && index < mod:
		averageSize = len(mqAll)/len(cidAll) + 1
	default:
		averageSize = len(mqAll) / len(cidAll)
	}
	startIndex := index*averageSize + mod
	if mod > 0 && index < mod {
		startIndex = index * averageSize
	}
	rng := min(averageSize, len(mqAll)-startIndex)
	var out []MessageQueue
	for i := 0; i < rng; i++ {
		out = append(out, mqAll[(startIndex+i)%len(mqAll)])
	}
	return out
}

// TestAllocateAveragelyProperties checks, for every n x m up to 12 x 40, that the members'
// shares are disjoint contiguous blocks in client order covering every queue, sized m/n or
// m/n+1 (the larger ones first), and equal to RocketMQ's own formula.
func TestAllocateAveragelyProperties(t *testing.T) {
	for n := 1; n <= 12; n++ {
		clients := make([]string, n)
		for i := range clients {
			clients[i] = fmt.Sprintf("c%02d", i)
		}
		for m := 0; m <= 40; m++ {
			queues := testQueues("a", m/2, "b", m-m/2)
			next := 0
			for i, c := range clients {
				got, ok := allocateAveragely(queues, clients, c)
				if !ok {
					t.Fatalf("n=%d m=%d: %s not a member", n, m, c)
				}
				want := m / n
				if i < m%n {
					want++
				}
				if len(got) != want {
					t.Fatalf("n=%d m=%d: client %d got %d queues, want %d", n, m, i, len(got), want)
				}
				if !slices.Equal(got, queues[next:next+len(got)]) {
					t.Fatalf("n=%d m=%d: client %d got %q, not the next block", n, m, i, queueList(got))
				}
				next += len(got)
				if ref := allocateReference(queues, clients, c); !slices.Equal(got, ref) {
					t.Fatalf("n=%d m=%d: client %d got %q, RocketMQ gives %q", n, m, i, queueList(got), queueList(ref))
				}
			}
			if next != m {
				t.Fatalf("n=%d m=%d: %d queues assigned", n, m, next)
			}
		}
	}
}

func TestDiffAssignment(t *testing.T) {
	f := func(cur, next []MessageQueue, wantAdded, wantRemoved string) {
		t.Helper()
		added, removed := diffAssignment(cur, next)
		if queueList(added) != wantAdded || queueList(removed) != wantRemoved {
			t.Fatalf("diff(%q, %q) = +%q -%q; want +%q -%q", queueList(cur), queueList(next), queueList(added), queueList(removed), wantAdded, wantRemoved)
		}
	}
	q := testQueues("a", 4, "b", 4)
	f(nil, nil, "", "")
	f(nil, q[:4], "a0 a1 a2 a3", "")
	f(q[:4], nil, "", "a0 a1 a2 a3")
	f(q[:4], q[:4], "", "")
	f(q, q[:4], "", "b0 b1 b2 b3")
	f(q[:4], q, "b0 b1 b2 b3", "")
	f(q[2:6], q[4:8], "b2 b3", "a2 a3")
	f([]MessageQueue{q[0], q[2], q[4]}, []MessageQueue{q[1], q[2], q[7]}, "a1 b3", "a0 b0")
}

func TestNormalizeClientIDs(t *testing.T) {
	f := func(in []string, want string) {
		t.Helper()
		if got := strings.Join(normalizeClientIDs(in), ","); got != want {
			t.Fatalf("normalize(%v) = %q, want %q", in, got, want)
		}
	}
	f(nil, "")
	f([]string{"b", "a", "", "b", "c"}, "a,b,c")
}

func TestRouteAddrs(t *testing.T) {
	// Masters in broker-name order, then the others; "d" has no master; a shared address once.
	want := "a0,b0,c0,a1,d2"
	if got := strings.Join(routeAddrs(testRoute()), ","); got != want {
		t.Fatalf("routeAddrs = %q, want %q", got, want)
	}
	r := newTopicRoute("T", protocol.TopicRouteData{BrokerDatas: []protocol.BrokerData{
		{BrokerName: "x", Addrs: []protocol.BrokerAddr{{BrokerID: 0, Addr: "h:1"}, {BrokerID: 1, Addr: "h:1"}}},
	}}, time.Time{})
	if got := strings.Join(routeAddrs(r), ","); got != "h:1" {
		t.Fatalf("routeAddrs = %q", got)
	}
}

func TestNewClientID(t *testing.T) {
	a, b := newClientID(), newClientID()
	if a == b {
		t.Fatalf("two ids are equal: %s", a)
	}
	parts := strings.Split(a, "@")
	if len(parts) != 3 || parts[0] == "" || parts[1] != strconv.Itoa(os.Getpid()) || len(parts[2]) != 16 {
		t.Fatalf("id %q is not host@pid@random", a)
	}
}

func TestHeldByOthers(t *testing.T) {
	f := func(prev, cur []string, self, want string) {
		t.Helper()
		q := testQueues("a", 8)
		held := heldByOthers(q, prev, cur, self)
		var got []MessageQueue
		for _, mq := range q {
			if held[mq] {
				got = append(got, mq)
			}
		}
		if queueList(got) != want || len(held) != len(got) {
			t.Fatalf("heldByOthers(%v, %v, %s) = %q, want %q", prev, cur, self, queueList(got), want)
		}
	}
	// Alone from the start: nothing to wait for.
	f(nil, []string{"b"}, "b", "")
	// Joining a: a held everything (nil prev stands for the list without self).
	f(nil, []string{"a", "b"}, "b", "a0 a1 a2 a3 a4 a5 a6 a7")
	f([]string{"a"}, []string{"a", "b"}, "b", "a0 a1 a2 a3 a4 a5 a6 a7")
	// a left or died: its queues are free at once.
	f([]string{"a", "b"}, []string{"b"}, "b", "")
	// c joins a and b: a held a0-a3, b a4-a7; a and b are still there.
	f([]string{"a", "b"}, []string{"a", "b", "c"}, "c", "a0 a1 a2 a3 a4 a5 a6 a7")
	// c replaces a (a left, c joined): only b's queues are held.
	f([]string{"a", "b"}, []string{"b", "c"}, "c", "a4 a5 a6 a7")
	// Our own former queues never count.
	f([]string{"a", "b"}, []string{"a", "b"}, "a", "a4 a5 a6 a7")
}
