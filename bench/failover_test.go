package bench

import (
	"fmt"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/petrel-mq/petrel/client"
)

// tlBase is the timelines' base in the tests: observation times are ms after it.
var tlBase = time.Date(2026, 1, 2, 12, 0, 0, 0, time.Local)

// obs is one observation: the broker at addr served group at ms. As a batch it holds the
// messages at queue offsets ms*10 to ms*10+9 of topic "t", queue 0.
type obs struct {
	group, addr string
	ms          int64
}

func (o obs) first() MessagePos { return MessagePos{Topic: "t", QueueOffset: o.ms * 10} }
func (o obs) last() MessagePos  { return MessagePos{Topic: "t", QueueOffset: o.ms*10 + 9} }

// steady returns observations of group on addr from ms from to to (inclusive), step ms apart.
func steady(group, addr string, from, to, step int64) []obs {
	var out []obs
	for ms := from; ms <= to; ms += step {
		out = append(out, obs{group, addr, ms})
	}
	return out
}

func feed(tl *timeline, os ...[]obs) {
	for _, l := range os {
		for _, o := range l {
			tl.observe(o.group, o.addr, time.Duration(o.ms)*time.Millisecond, o.first(), o.last())
		}
	}
}

func unixMs(ms int64) int64 { return tlBase.Add(time.Duration(ms) * time.Millisecond).UnixMilli() }

// brk is the event of a break of group from old (last served at lastMs) to new (first at
// firstMs), as the tests' observations make it.
func brk(kind, group, old, new string, lastMs, firstMs int64) FailoverEvent {
	return FailoverEvent{
		BrokerName: group, Kind: kind, OldAddr: old, NewAddr: new,
		LastUnixMs: unixMs(lastMs), FirstUnixMs: unixMs(firstMs), GapMs: firstMs - lastMs,
		LastMessage:  MessagePos{Topic: "t", QueueOffset: lastMs*10 + 9},
		FirstMessage: MessagePos{Topic: "t", QueueOffset: firstMs * 10},
	}
}

// gone is the event of group last served by old at lastMs and not again until endMs.
func gone(kind, group, old string, lastMs, endMs int64) FailoverEvent {
	return FailoverEvent{
		BrokerName: group, Kind: kind, OldAddr: old,
		LastUnixMs: unixMs(lastMs), GapMs: endMs - lastMs,
		LastMessage: MessagePos{Topic: "t", QueueOffset: lastMs*10 + 9},
	}
}

const (
	addrA = "10.0.0.1:10911" // the master
	addrB = "10.0.0.2:10911" // another member
)

func TestTimeline(t *testing.T) {
	tests := []struct {
		name string
		send bool // the send policy; else the consume one
		obs  [][]obs
		// endMs is when the watch ended (the silence cutoff as well); 0: no silence check.
		endMs int64
		want  []FailoverEvent
	}{
		{
			name: "no change", send: true,
			obs:   [][]obs{steady("a", addrA, 0, 3000, 10)},
			endMs: 3005,
		},
		{
			name: "one switch", send: true,
			obs:   [][]obs{steady("a", addrA, 0, 1000, 10), steady("a", addrB, 1812, 3000, 10)},
			endMs: 3005,
			want:  []FailoverEvent{brk(FailoverSend, "a", addrA, addrB, 1000, 1812)},
		},
		{
			// Sends have one master at a time: another address is an event without a gap.
			name: "switch without gap", send: true,
			obs:  [][]obs{steady("a", addrA, 0, 1000, 10), steady("a", addrB, 1001, 2000, 10)},
			want: []FailoverEvent{brk(FailoverSend, "a", addrA, addrB, 1000, 1001)},
		},
		{
			name: "switch and back", send: true,
			obs: [][]obs{
				steady("a", addrA, 0, 1000, 10), steady("a", addrB, 1812, 3000, 10), steady("a", addrA, 3600, 5000, 10),
			},
			endMs: 5001,
			want: []FailoverEvent{
				brk(FailoverSend, "a", addrA, addrB, 1000, 1812),
				brk(FailoverSend, "a", addrB, addrA, 2992, 3600),
			},
		},
		{
			// The old master's late answers (callbacks run late, writes it had in flight) are
			// no change back; a change back after failoverSettle is.
			name: "late answers of the old master", send: true,
			obs: [][]obs{
				steady("a", addrA, 0, 1000, 10),
				{{"a", addrB, 1500}, {"a", addrA, 1501}, {"a", addrB, 1502}, {"a", addrA, 1990}, {"a", addrB, 1995}},
				steady("a", addrB, 2000, 2200, 10), steady("a", addrA, 2210, 2300, 10),
			},
			want: []FailoverEvent{
				brk(FailoverSend, "a", addrA, addrB, 1000, 1500),
				brk(FailoverSend, "a", addrB, addrA, 2200, 2210),
			},
		},
		{
			name: "restart at the same address", send: true,
			obs:  [][]obs{steady("a", addrA, 0, 1000, 10), steady("a", addrA, 1900, 3000, 10)},
			want: []FailoverEvent{brk(FailoverSend, "a", addrA, addrA, 1000, 1900)},
		},
		{
			name: "pause below the floor", send: true,
			obs:   [][]obs{steady("a", addrA, 0, 1000, 10), steady("a", addrA, 1400, 3000, 10)},
			endMs: 3000,
		},
		{
			// Every 100 ms: a pause counts from 20 times the mean interval, 20 x 100 ms at first.
			// The pause of 1.5 s is none, and is part of the mean after it (130 ms).
			name: "low rate", send: true,
			obs: [][]obs{
				steady("a", addrA, 0, 3000, 100), steady("a", addrA, 4500, 6000, 100), steady("a", addrA, 8700, 9000, 100),
			},
			want: []FailoverEvent{brk(FailoverSend, "a", addrA, addrA, 6000, 8700)},
		},
		{
			name: "group going silent", send: true,
			obs:   [][]obs{steady("a", addrA, 0, 1000, 10), steady("b", addrB, 0, 5000, 10)},
			endMs: 5003,
			want:  []FailoverEvent{gone(FailoverSend, "a", addrA, 1000, 5003)},
		},
		{
			name: "silent after a switch", send: true,
			obs:   [][]obs{steady("a", addrA, 0, 1000, 10), steady("a", addrB, 1500, 2000, 10)},
			endMs: 6000,
			want: []FailoverEvent{
				brk(FailoverSend, "a", addrA, addrB, 1000, 1500),
				gone(FailoverSend, "a", addrB, 2000, 6000),
			},
		},
		{
			name: "stopped just before the end", send: true,
			obs:   [][]obs{steady("a", addrA, 0, 1000, 10)},
			endMs: 1300,
		},
		{
			name: "one observation only", send: true,
			obs:   [][]obs{{{"a", addrA, 0}}},
			endMs: 9000,
		},
		{
			name: "groups apart", send: true,
			obs: [][]obs{
				steady("a", addrA, 0, 1000, 10), steady("b", addrB, 0, 3000, 10), steady("a", "10.0.0.3:10911", 1700, 3000, 10),
			},
			endMs: 3001,
			want:  []FailoverEvent{brk(FailoverSend, "a", addrA, "10.0.0.3:10911", 1000, 1700)},
		},
		{
			// Another goroutine read the clock at 1200 on the old master but recorded after
			// the new one's first acknowledgement: the break starts at 1200.
			name: "straggler", send: true,
			obs:  [][]obs{steady("a", addrA, 0, 1000, 10), {{"a", addrB, 1812}, {"a", addrA, 1200}, {"a", addrB, 1813}}},
			want: []FailoverEvent{brk(FailoverSend, "a", addrA, addrB, 1200, 1812)},
		},
		{
			// A broker back at its address after a stall: an answer read out of order inside
			// the break is its first after it, not the end of the old run.
			name: "restart at the same address, out of order", send: true,
			obs:  [][]obs{steady("a", addrA, 0, 1000, 10), {{"a", addrA, 3000}, {"a", addrA, 2990}, {"a", addrA, 3001}}},
			want: []FailoverEvent{brk(FailoverSend, "a", addrA, addrA, 1000, 3000)},
		},
		{
			// Consumers move between the members of a healthy group queue by queue.
			name:  "consume: slave reads interleaved",
			obs:   [][]obs{steady("a", addrA, 0, 3000, 4), steady("a", addrB, 2, 3002, 4)},
			endMs: 3005,
		},
		{
			name: "consume: switch to a slave without gap",
			obs:  [][]obs{steady("a", addrA, 0, 1000, 5), steady("a", addrB, 1010, 2000, 5)},
		},
		{
			// A pull that fails waits 50 ms, then goes to a slave.
			name: "consume: to a slave in the outage and back",
			obs: [][]obs{
				steady("a", addrA, 0, 1000, 2), steady("a", addrB, 1080, 1500, 2), steady("a", addrA, 2300, 3000, 2),
			},
			want: []FailoverEvent{
				brk(FailoverConsume, "a", addrA, addrB, 1000, 1080),
				brk(FailoverConsume, "a", addrB, addrA, 1500, 2300),
			},
		},
		{
			name: "consume: gap on the same broker",
			obs:  [][]obs{steady("a", addrA, 0, 1000, 5), steady("a", addrA, 1700, 2000, 5)},
			want: []FailoverEvent{brk(FailoverConsume, "a", addrA, addrA, 1000, 1700)},
		},
		{
			name:  "consume: silent",
			obs:   [][]obs{steady("a", addrA, 0, 1000, 5)},
			endMs: 4000,
			want:  []FailoverEvent{gone(FailoverConsume, "a", addrA, 1000, 4000)},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			pol := consumePolicy
			if tc.send {
				pol = sendPolicy
			}
			tl := newTimeline(pol, tlBase)
			feed(tl, tc.obs...)
			end := tlBase.Add(time.Duration(tc.endMs) * time.Millisecond)
			cutoff := func(string) (time.Time, bool) { return end, tc.endMs > 0 }
			got, omitted := tl.events(cutoff, end)
			if omitted != 0 {
				t.Errorf("%d omitted", omitted)
			}
			sortFailovers(got)
			if len(got) == 0 && len(tc.want) == 0 {
				return
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("events:\n got %s\nwant %s", eventsText(got), eventsText(tc.want))
			}
		})
	}
}

func eventsText(ev []FailoverEvent) string {
	var b strings.Builder
	for i := range ev {
		fmt.Fprintf(&b, "\n  %s [%+v]", ev[i].text(), ev[i])
	}
	return b.String()
}

// TestFailoverEventsConsumeSilence: consumption that stops while the group's sends go on never
// came back; consumption that stops with the sends (nothing more to consume) is no event, and a
// consume-only run (no sends) does not judge.
func TestFailoverEventsConsumeSilence(t *testing.T) {
	send := newTimeline(sendPolicy, tlBase)
	cons := newTimeline(consumePolicy, tlBase)
	feed(send, steady("a", addrA, 0, 5000, 10), steady("b", addrB, 0, 5000, 10))
	feed(cons, steady("a", addrA, 0, 2000, 10), steady("b", addrB, 5, 5005, 10))
	stop := tlBase.Add(5001 * time.Millisecond)
	end := tlBase.Add(7000 * time.Millisecond)
	got, _ := failoverEvents(send, cons, stop, end)
	want := []FailoverEvent{gone(FailoverConsume, "a", addrA, 2000, 7000)}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("events:\n got %s\nwant %s", eventsText(got), eventsText(want))
	}
	if got, _ := failoverEvents(nil, cons, time.Time{}, end); len(got) != 0 {
		t.Fatalf("consume-only: %s", eventsText(got))
	}
	// Group a fails over (consumption resumes on the new master); b is no longer sent to. In
	// time order, sends before consumption at the same time.
	feed(send, steady("a", addrB, 5600, 6000, 10))
	feed(cons, steady("a", addrB, 5600, 6000, 10))
	got, _ = failoverEvents(send, cons, tlBase.Add(6001*time.Millisecond), end)
	want = []FailoverEvent{
		brk(FailoverConsume, "a", addrA, addrB, 2000, 5600),
		brk(FailoverSend, "a", addrA, addrB, 5000, 5600),
		gone(FailoverSend, "b", addrB, 5000, 6001),
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("events:\n got %s\nwant %s", eventsText(got), eventsText(want))
	}
}

// TestTimelineEventCap: a group flapping between two addresses (slower than failoverSettle)
// keeps failoverMaxEvents events and counts the rest.
func TestTimelineEventCap(t *testing.T) {
	tl := newTimeline(sendPolicy, tlBase)
	for i := range int64(3 * failoverMaxEvents) {
		addr := addrA
		if i%2 == 1 {
			addr = addrB
		}
		feed(tl, []obs{{"a", addr, i * failoverSettle.Milliseconds()}})
	}
	got, omitted := tl.events(func(string) (time.Time, bool) { return time.Time{}, false }, tlBase)
	if len(got) != failoverMaxEvents || omitted != 2*failoverMaxEvents-1 {
		t.Fatalf("%d events, %d omitted", len(got), omitted)
	}
}

// TestTimelineConcurrent feeds one group from several goroutines (as a producer's queues'
// callbacks do) while groups are added: no event, and the race detector finds nothing.
func TestTimelineConcurrent(t *testing.T) {
	tl := newTimeline(sendPolicy, time.Now())
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 20000 {
				group := "a"
				if i%100 == 0 {
					group = fmt.Sprintf("g%d-%d", g, i/100%10)
				}
				tl.observe(group, addrA, time.Since(tl.base), MessagePos{}, MessagePos{})
			}
		}()
	}
	wg.Wait()
	got, omitted := tl.events(func(string) (time.Time, bool) { return time.Time{}, false }, time.Now())
	if len(got) != 0 || omitted != 0 {
		t.Fatalf("events %s, %d omitted", eventsText(got), omitted)
	}
	if n := len(*tl.groups.Load()); n != 81 {
		t.Fatalf("%d groups, want 81", n)
	}
}

// newHotPathRunner returns a runner with what onSendResult needs (no verifier).
func newHotPathRunner() *runner {
	base := time.Now()
	return &runner{cfg: &Config{}, pubLat: NewRecorder(), clockBase: base, sendTL: newTimeline(sendPolicy, base)}
}

// BenchmarkOnSendResult measures the per-acknowledgement work of the bench: one goroutine, as a
// producer queue's callbacks run.
func BenchmarkOnSendResult(b *testing.B) {
	r := newHotPathRunner()
	ps := &prodState{topic: "bench-t-0"}
	res := client.SendResult{BrokerName: "broker-a", BrokerAddr: "127.0.0.1:10911", QueueID: 3}
	start := time.Now()
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		res.QueueOffset = int64(i)
		r.onSendResult(ps, retryEntry{}, 64, start, res, nil)
	}
}

// BenchmarkOnSendResultParallel is BenchmarkOnSendResult with the callbacks of many queues of
// one broker group running at once.
func BenchmarkOnSendResultParallel(b *testing.B) {
	r := newHotPathRunner()
	ps := &prodState{topic: "bench-t-0"}
	res := client.SendResult{BrokerName: "broker-a", BrokerAddr: "127.0.0.1:10911", QueueID: 3}
	start := time.Now()
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			r.onSendResult(ps, retryEntry{}, 64, start, res, nil)
		}
	})
}

// BenchmarkTimelineObserve measures one observation alone.
func BenchmarkTimelineObserve(b *testing.B) {
	tl := newTimeline(sendPolicy, time.Now())
	pos := MessagePos{Topic: "bench-t-0", QueueID: 3}
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		tl.observe("broker-a", "127.0.0.1:10911", time.Duration(i)*time.Microsecond, pos, pos)
	}
}
