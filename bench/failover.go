package bench

import (
	"cmp"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// The failover timeline: for each broker group, which broker acknowledged the run's sends and
// which served its consumers, and when that changed or stopped. A timeline is fed one
// observation per acknowledged send and per consumed batch (group, broker address, time,
// message positions) and keeps only the breaks: it is cheap enough for every acknowledgement
// (a map lookup without allocation, then a per-group mutex).
//
// What counts as a break:
//
//   - sends: every change of the acknowledging address (a group has one master at a time, so
//     another address means the master died and another member took over, or the producer
//     moved), whatever the gap;
//   - consumption: a change of serving address after a gap of at least
//     failoverConsumeSwitchMinGap. Consumers of a healthy group move between its members
//     without a pause (the master's read suggestions send a consumer that is far behind, or a
//     loaded master's consumers, to a slave, queue by queue, and back), so a change alone is no
//     evidence of an outage;
//   - both: a gap of at least failoverStallMinGap on the same address (the broker came back at
//     its address, or stalled);
//   - not: answers from the address a group just left, for failoverSettle after the change
//     (late callbacks, or an old master finishing the writes it had in flight), which are no
//     change back;
//   - both, at the end: a group that was not observed again (see failoverEvents).
//
// A gap also counts only when it is at least failoverRhythm times the group's mean interval
// between observations, so a group that is seldom sent to or consumed from (a low rate spread
// over many groups) does not report its ordinary pauses.

const (
	// failoverStallMinGap is the least pause on one address that counts as an outage.
	failoverStallMinGap = 500 * time.Millisecond
	// failoverConsumeSwitchMinGap is the least gap that makes a change of the broker serving a
	// group's consumption an event (a pull that fails waits 50 ms before it tries another member).
	failoverConsumeSwitchMinGap = 50 * time.Millisecond
	// failoverRhythm is how many times the group's mean interval between observations a gap
	// must also be.
	failoverRhythm = 20
	// failoverMaxEvents bounds the events kept per broker group and kind; further ones are
	// only counted (Result.FailoversOmitted).
	failoverMaxEvents = 100
	// failoverSettle is how long after a change of address the address left may still answer
	// without that being a change back.
	failoverSettle = 500 * time.Millisecond
)

// FailoverSend is the FailoverEvent.Kind of a break in a group's acknowledged sends.
const FailoverSend = "send"

// FailoverConsume is the FailoverEvent.Kind of a break in a group's consumption.
const FailoverConsume = "consume"

// MessagePos is where a message is stored.
type MessagePos struct {
	// Topic, QueueID and QueueOffset name the message's queue (in the event's broker group)
	// and its offset there.
	Topic       string `json:"topic"`
	QueueID     int32  `json:"queueId"`
	QueueOffset int64  `json:"queueOffset"`
}

// String returns "topic#queueId@queueOffset".
func (p MessagePos) String() string {
	return fmt.Sprintf("%s#%d@%d", p.Topic, p.QueueID, p.QueueOffset)
}

// FailoverEvent is one break in a broker group's service as the run saw it: the broker that
// acknowledged its sends (Kind "send") or served its consumers (Kind "consume") changed, paused
// or never came back.
type FailoverEvent struct {
	// BrokerName is the broker group.
	BrokerName string `json:"brokerName"`
	// Kind is FailoverSend or FailoverConsume.
	Kind string `json:"kind"`
	// OldAddr is the broker that served the group before the break. NewAddr is the one that
	// served it after: another member, OldAddr again (the broker came back at its address, or
	// stalled), or "" when the group was not served again until the end of the run.
	OldAddr string `json:"oldAddr"`
	NewAddr string `json:"newAddr"`
	// LastUnixMs is when the last send was acknowledged by OldAddr (or the last message from
	// it consumed) before the break; FirstUnixMs when the first after it was, by NewAddr (0
	// when NewAddr is ""). Both in ms since the Unix epoch, as the bench's clock read them.
	LastUnixMs  int64 `json:"lastUnixMs"`
	FirstUnixMs int64 `json:"firstUnixMs"`
	// GapMs is the break's length in ms: FirstUnixMs - LastUnixMs (measured on the monotonic
	// clock), or, when NewAddr is "", from LastUnixMs to the end of what was watched (for
	// sends, the producers' stop; for consumption, the end of the run).
	GapMs int64 `json:"gapMs"`
	// LastMessage is the position of that last message; FirstMessage of the first after the
	// break (absent when NewAddr is "").
	LastMessage  MessagePos `json:"lastMessage"`
	FirstMessage MessagePos `json:"firstMessage,omitzero"`
}

// timelinePolicy says which observations make an event (see the comment at the top).
type timelinePolicy struct {
	kind string
	// switchAlways makes every change of address an event; otherwise one needs a gap of at
	// least switchMinGap.
	switchAlways bool
	switchMinGap time.Duration
	// stallMinGap is the least gap on one address that makes an event.
	stallMinGap time.Duration
	// rhythm is how many times the group's mean interval a gap must also be.
	rhythm int64
	// settle is how long after a change of address the address left may still answer.
	settle time.Duration
	// maxEvents bounds the events kept per group.
	maxEvents int
}

var (
	sendPolicy = timelinePolicy{
		kind: FailoverSend, switchAlways: true,
		stallMinGap: failoverStallMinGap, rhythm: failoverRhythm, settle: failoverSettle, maxEvents: failoverMaxEvents,
	}
	consumePolicy = timelinePolicy{
		kind: FailoverConsume, switchMinGap: failoverConsumeSwitchMinGap,
		stallMinGap: failoverStallMinGap, rhythm: failoverRhythm, settle: failoverSettle, maxEvents: failoverMaxEvents,
	}
)

// timeline follows the serving broker of every broker group for one kind of observation. Times
// are offsets from base on the monotonic clock (time.Since(base) reads one clock, time.Now two).
// Safe for concurrent use.
type timeline struct {
	pol  timelinePolicy
	base time.Time
	// groups maps a broker group's name to its state; it is replaced, never changed, when a
	// group is added (under mu), so a lookup is one atomic load and a map access.
	groups atomic.Pointer[map[string]*tlGroup]
	mu     sync.Mutex
}

func newTimeline(pol timelinePolicy, base time.Time) *timeline {
	tl := &timeline{pol: pol, base: base}
	tl.groups.Store(&map[string]*tlGroup{})
	return tl
}

// tlGroup is what a timeline knows of one broker group.
type tlGroup struct {
	mu sync.Mutex
	n  int64 // observations
	// intervals and busy count and sum the intervals between in-order observations that were
	// not breaks (for the mean interval).
	intervals int64
	busy      time.Duration
	// addr, last (since the timeline's base) and lastPos describe the latest observation.
	addr    string
	last    time.Duration
	lastPos MessagePos
	// left is the address the group's latest change of address left, at switched.
	left     string
	switched time.Duration
	events   []tlEvent
	omitted  int64
}

// tlEvent is a break as recorded, times since the timeline's base; FailoverEvent is its
// exported form.
type tlEvent struct {
	old, new    string // new is "" when the group never came back
	last, first time.Duration
	end         time.Duration // when the group never came back: the end of the watch
	lastPos     MessagePos
	firstPos    MessagePos
}

// group returns the state of the named group, adding it on first use.
func (tl *timeline) group(name string) *tlGroup {
	if g := (*tl.groups.Load())[name]; g != nil {
		return g
	}
	tl.mu.Lock()
	defer tl.mu.Unlock()
	old := *tl.groups.Load()
	if g := old[name]; g != nil {
		return g
	}
	m := maps.Clone(old)
	g := &tlGroup{}
	m[name] = g
	tl.groups.Store(&m)
	return g
}

// observe records that the broker at addr served group at t (since the timeline's base): it
// acknowledged the send of the message at first (= last), or delivered a batch from first to
// last. An empty addr (unknown) is ignored, as is a nil timeline.
func (tl *timeline) observe(group, addr string, t time.Duration, first, last MessagePos) {
	if tl == nil || addr == "" {
		return
	}
	tl.group(group).observe(&tl.pol, addr, t, first, last)
}

func (g *tlGroup) observe(p *timelinePolicy, addr string, t time.Duration, first, last MessagePos) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.n++
	if g.n == 1 {
		g.addr, g.last, g.lastPos = addr, t, last
		return
	}
	gap := t - g.last
	if gap <= 0 {
		g.straggler(addr, t, last)
		return
	}
	if addr != g.addr && addr == g.left && t-g.switched < p.settle {
		return // a late answer of the broker left
	}
	var brk bool
	if addr != g.addr {
		brk = p.switchAlways || (gap >= p.switchMinGap && g.rhythmic(p, gap))
	} else {
		brk = gap >= p.stallMinGap && g.rhythmic(p, gap)
	}
	if brk {
		g.record(p, tlEvent{old: g.addr, new: addr, last: g.last, first: t, lastPos: g.lastPos, firstPos: first})
		if addr != g.addr {
			g.left, g.switched = g.addr, t
		}
	} else {
		g.intervals++
		g.busy += gap
	}
	g.addr, g.last, g.lastPos = addr, t, last
}

// rhythmic reports whether gap is at least p.rhythm times the group's mean interval (false
// while the group has no interval to go by).
func (g *tlGroup) rhythmic(p *timelinePolicy, gap time.Duration) bool {
	return g.intervals > 0 && gap >= time.Duration(p.rhythm)*(g.busy/time.Duration(g.intervals))
}

// straggler takes an observation no later than the latest one (another goroutine read the
// clock later but recorded first). One from the address the group's latest change of address
// left, dated inside that break, means the old address served until then: the break starts
// later.
func (g *tlGroup) straggler(addr string, t time.Duration, pos MessagePos) {
	if len(g.events) == 0 || g.omitted > 0 {
		return
	}
	e := &g.events[len(g.events)-1]
	// NB: only for a change of address: after a stall on one address, an observation dated
	// inside the break is the same broker's first answer after it, read out of order.
	if addr == e.old && e.new != "" && e.new != e.old && t > e.last && t < e.first {
		e.last, e.lastPos = t, pos
	}
}

func (g *tlGroup) record(p *timelinePolicy, e tlEvent) {
	if len(g.events) >= p.maxEvents {
		g.omitted++
		return
	}
	g.events = append(g.events, e)
}

// silence returns the event of a group whose latest observation came a break (as observe
// judges a gap on one address) before cutoff: it was not served again. The event's gap runs to
// end.
func (g *tlGroup) silence(p *timelinePolicy, cutoff, end time.Duration) (tlEvent, bool) {
	if g.n == 0 {
		return tlEvent{}, false
	}
	gap := cutoff - g.last
	if gap < p.stallMinGap || !g.rhythmic(p, gap) {
		return tlEvent{}, false
	}
	return tlEvent{old: g.addr, last: g.last, end: end, lastPos: g.lastPos}, true
}

// lastSeen returns the time of the group's latest observation.
func (tl *timeline) lastSeen(group string) (time.Time, bool) {
	g := (*tl.groups.Load())[group]
	if g == nil {
		return time.Time{}, false
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	return tl.base.Add(g.last), g.n > 0
}

// events returns the timeline's events, and how many it did not keep. cutoff gives, per group,
// the time by which a group must have been observed again not to count as never served again
// (false: not checked); end is when the watch ended.
func (tl *timeline) events(cutoff func(group string) (time.Time, bool), end time.Time) ([]FailoverEvent, int64) {
	if tl == nil {
		return nil, 0
	}
	var out []FailoverEvent
	var omitted int64
	for name, g := range *tl.groups.Load() {
		g.mu.Lock()
		for i := range g.events {
			out = append(out, g.events[i].export(tl, name))
		}
		omitted += g.omitted
		if c, ok := cutoff(name); ok {
			if e, ok := g.silence(&tl.pol, c.Sub(tl.base), end.Sub(tl.base)); ok {
				out = append(out, e.export(tl, name))
			}
		}
		g.mu.Unlock()
	}
	return out, omitted
}

func (e *tlEvent) export(tl *timeline, group string) FailoverEvent {
	f := FailoverEvent{
		BrokerName: group, Kind: tl.pol.kind, OldAddr: e.old, NewAddr: e.new,
		LastUnixMs: tl.base.Add(e.last).UnixMilli(), LastMessage: e.lastPos,
	}
	if e.new == "" {
		f.GapMs = max(0, e.end-e.last).Milliseconds()
		return f
	}
	f.FirstUnixMs = tl.base.Add(e.first).UnixMilli()
	f.GapMs = (e.first - e.last).Milliseconds()
	f.FirstMessage = e.firstPos
	return f
}

// failoverEvents returns the events of a run's send and consume timelines in time order, and
// how many were not kept. send is nil for a run without producers. A group whose sends were
// last acknowledged a break (failoverStallMinGap and failoverRhythm) before sendStop, when the
// producers were told to stop, never came back; so did a group whose consumption stopped a
// break before its last acknowledged send. consEnd is when consumption stopped being watched.
func failoverEvents(send, cons *timeline, sendStop, consEnd time.Time) ([]FailoverEvent, int64) {
	out := []FailoverEvent{}
	var omitted int64
	if send != nil {
		ev, n := send.events(func(string) (time.Time, bool) { return sendStop, !sendStop.IsZero() }, sendStop)
		out, omitted = append(out, ev...), omitted+n
	}
	cutoff := func(string) (time.Time, bool) { return time.Time{}, false }
	if send != nil {
		cutoff = send.lastSeen
	}
	ev, n := cons.events(cutoff, consEnd)
	out, omitted = append(out, ev...), omitted+n
	sortFailovers(out)
	return out, omitted
}

// sortFailovers sorts events by the time of their break's start, then broker group, sends
// before consumption, then the time of their end.
func sortFailovers(ev []FailoverEvent) {
	slices.SortFunc(ev, func(a, b FailoverEvent) int {
		return cmp.Or(cmp.Compare(a.LastUnixMs, b.LastUnixMs), cmp.Compare(a.BrokerName, b.BrokerName),
			cmp.Compare(b.Kind, a.Kind), cmp.Compare(a.FirstUnixMs, b.FirstUnixMs))
	})
}

// clockMs formats a time in ms since the Unix epoch as the local time of day, to the ms.
func clockMs(ms int64) string { return time.UnixMilli(ms).Format("15:04:05.000") }

// text returns the event's summary line (after the "failover" label).
func (e *FailoverEvent) text() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s %s: %s -> ", e.BrokerName, e.Kind, e.OldAddr)
	consume := e.Kind == FailoverConsume
	if e.NewAddr == "" {
		if consume {
			fmt.Fprintf(&b, "none, nothing consumed for %d ms to the end of the run though sends went on (last consumed %s %s)",
				e.GapMs, clockMs(e.LastUnixMs), e.LastMessage)
		} else {
			fmt.Fprintf(&b, "none, no ack for %d ms to the end of sending (last ack %s)", e.GapMs, clockMs(e.LastUnixMs))
		}
		return b.String()
	}
	b.WriteString(e.NewAddr)
	if e.NewAddr == e.OldAddr {
		b.WriteString(" (same address)")
	}
	if consume {
		fmt.Fprintf(&b, " gap %d ms (last consumed %s %s, first consumed %s %s)",
			e.GapMs, clockMs(e.LastUnixMs), e.LastMessage, clockMs(e.FirstUnixMs), e.FirstMessage)
	} else {
		fmt.Fprintf(&b, " gap %d ms (last ack %s, first ack %s)", e.GapMs, clockMs(e.LastUnixMs), clockMs(e.FirstUnixMs))
	}
	return b.String()
}

// writeFailovers prints one line per failover event; nothing when there was none.
func (r *Result) writeFailovers(w io.Writer) {
	for i := range r.Failovers {
		fmt.Fprintf(w, "  failover          %s\n", r.Failovers[i].text())
	}
	if r.FailoversOmitted > 0 {
		fmt.Fprintf(w, "  failover          %d more event(s) not listed (at most %d per broker group and kind)\n", r.FailoversOmitted, failoverMaxEvents)
	}
}
