package ha

import (
	"math/rand"
	"testing"
	"testing/quick"
	"time"
)

// syncTestRules are the thresholds of the in-sync table tests: small, distinct numbers so a case
// shows which one it is about.
var syncTestRules = SyncRules{MaxLagBytes: 1000, MaxLagTime: 3 * time.Second, RejoinLagBytes: 100}

// syncTestNow is the evaluation time of the in-sync table tests.
var syncTestNow = time.Date(2025, 6, 1, 12, 0, 0, 0, time.UTC)

// ago returns syncTestNow minus d.
func ago(d time.Duration) time.Time { return syncTestNow.Add(-d) }

func TestLagBytes(t *testing.T) {
	f := func(acked, masterEnd, want int64) {
		t.Helper()
		if got := LagBytes(SlaveProgress{Acked: acked}, masterEnd); got != want {
			t.Errorf("LagBytes(acked %d, end %d) = %d, want %d", acked, masterEnd, got, want)
		}
	}
	f(200, 500, 300)
	f(500, 500, 0)
	f(600, 500, 0)  // ahead of the end as the master last saw it: not behind
	f(-1, 500, 500) // nothing acknowledged: lags by the whole log
	f(-1, 0, 0)
	f(0, 0, 0)
	f(0, 1<<40, 1<<40)
}

func TestCaughtUp(t *testing.T) {
	r := syncTestRules
	f := func(name string, s SlaveProgress, masterEnd int64, want bool) {
		t.Helper()
		if got := CaughtUp(s, masterEnd, r); got != want {
			t.Errorf("%s: CaughtUp(%+v, end %d) = %v, want %v", name, s, masterEnd, got, want)
		}
	}
	f("holds the whole log", SlaveProgress{Acked: 5000, ReadEnd: 5000}, 5000, true)
	// The Kafka rule: it holds everything the master had when it last read for it, although the
	// live end moved far ahead during the round trip.
	f("reached ReadEnd, live end far ahead", SlaveProgress{Acked: 5000, ReadEnd: 5000}, 5000+10*r.MaxLagBytes, true)
	f("lag exactly MaxLagBytes", SlaveProgress{Acked: 4000, ReadEnd: 6000}, 4000+r.MaxLagBytes, true)
	f("lag MaxLagBytes+1", SlaveProgress{Acked: 4000, ReadEnd: 6000}, 4000+r.MaxLagBytes+1, false)
	f("ahead of the end", SlaveProgress{Acked: 7000, ReadEnd: 6000}, 6000, true)
	f("empty log, empty slave", SlaveProgress{Acked: 0, ReadEnd: 0}, 0, true)
	f("never acked, empty log", SlaveProgress{Acked: -1, ReadEnd: -1}, 0, false)
	f("never acked, small log", SlaveProgress{Acked: -1, ReadEnd: 10}, 10, false)
}

// syncCase is one NextInSync case: the slave's progress, the master's end, and the decision.
type syncCase struct {
	name      string
	cur       bool
	s         SlaveProgress
	masterEnd int64
	rules     *SyncRules // nil: syncTestRules
	want      bool
	why       SyncReason
}

func runSyncCases(t *testing.T, cases []syncCase) {
	t.Helper()
	for _, c := range cases {
		rules := syncTestRules
		if c.rules != nil {
			rules = *c.rules
		}
		got, why := NextInSync(c.cur, c.s, c.masterEnd, syncTestNow, rules)
		if got != c.want || why != c.why {
			t.Errorf("%s: NextInSync(cur %v, %+v, end %d) = (%v, %q), want (%v, %q)",
				c.name, c.cur, c.s, c.masterEnd, got, why, c.want, c.why)
		}
	}
}

func TestNextInSyncMember(t *testing.T) {
	r := syncTestRules
	const end = 100_000
	// live is a connected member that holds the whole log, seen and caught up just now.
	live := SlaveProgress{Acked: end, ReadEnd: end, LastSeen: syncTestNow, LastCaughtUp: syncTestNow, Connected: true}
	with := func(edit func(*SlaveProgress)) SlaveProgress {
		s := live
		edit(&s)
		return s
	}
	runSyncCases(t, []syncCase{
		{name: "live and caught up stays", cur: true, s: live, masterEnd: end, want: true},
		// Idle: no writes, so nothing to acknowledge; its last request was a while ago but within
		// MaxLagTime. It has not been "caught up" recently by the clock, yet it lags by nothing.
		{name: "idle caught-up member stays", cur: true, masterEnd: end, want: true,
			s: with(func(s *SlaveProgress) { s.LastSeen = ago(r.MaxLagTime / 2); s.LastCaughtUp = ago(time.Hour) })},
		{name: "silent exactly MaxLagTime stays", cur: true, masterEnd: end, want: true,
			s: with(func(s *SlaveProgress) { s.LastSeen = ago(r.MaxLagTime) })},
		{name: "silent MaxLagTime+1ns leaves", cur: true, masterEnd: end, want: false, why: ReasonSilent,
			s: with(func(s *SlaveProgress) { s.LastSeen = ago(r.MaxLagTime + time.Nanosecond) })},
		{name: "never seen leaves", cur: true, masterEnd: end, want: false, why: ReasonSilent,
			s: with(func(s *SlaveProgress) { s.LastSeen = time.Time{} })},
		{name: "disconnected but heard recently stays until silent", cur: true, masterEnd: end, want: true,
			s: with(func(s *SlaveProgress) { s.Connected = false; s.LastSeen = ago(time.Second) })},
		{name: "lagging MaxLagBytes+1 for MaxLagTime+1ns leaves", cur: true, masterEnd: end, want: false, why: ReasonLagging,
			s: with(func(s *SlaveProgress) {
				s.Acked = end - r.MaxLagBytes - 1
				s.LastCaughtUp = ago(r.MaxLagTime + time.Nanosecond)
			})},
		{name: "lagging MaxLagBytes+1 for exactly MaxLagTime stays", cur: true, masterEnd: end, want: true,
			s: with(func(s *SlaveProgress) { s.Acked = end - r.MaxLagBytes - 1; s.LastCaughtUp = ago(r.MaxLagTime) })},
		{name: "lagging far behind, but not for MaxLagTime yet, stays", cur: true, masterEnd: end, want: true,
			s: with(func(s *SlaveProgress) { s.Acked = 0; s.ReadEnd = end; s.LastCaughtUp = ago(r.MaxLagTime / 3) })},
		{name: "lag exactly MaxLagBytes for an hour stays", cur: true, masterEnd: end, want: true,
			s: with(func(s *SlaveProgress) { s.Acked = end - r.MaxLagBytes; s.LastCaughtUp = ago(time.Hour) })},
		{name: "lagging and never caught up leaves", cur: true, masterEnd: end, want: false, why: ReasonLagging,
			s: with(func(s *SlaveProgress) { s.Acked = 0; s.LastCaughtUp = time.Time{} })},
		// CaughtUp holds now (it acknowledged everything the master last read for it), so it has
		// not been behind for longer than MaxLagTime, however far the live end ran ahead and
		// however stale LastCaughtUp is (the doc of NextInSync; Kafka's lastCaughtUpTime rule).
		{name: "reached ReadEnd while the live end ran ahead stays", cur: true, masterEnd: end + 10*r.MaxLagBytes, want: true,
			s: with(func(s *SlaveProgress) { s.LastCaughtUp = ago(time.Hour) })},
		{name: "regressed leaves though caught up", cur: true, masterEnd: end, want: false, why: ReasonRegressed,
			s: with(func(s *SlaveProgress) { s.Regressed = true })},
		{name: "regressed to 0 leaves", cur: true, masterEnd: end, want: false, why: ReasonRegressed,
			s: with(func(s *SlaveProgress) { s.Acked = 0; s.Regressed = true })},
		{name: "never acked leaves", cur: true, masterEnd: end, want: false, why: ReasonNeverAcked,
			s: with(func(s *SlaveProgress) { s.Acked = -1; s.ReadEnd = -1 })},
		{name: "never acked on an empty log leaves", cur: true, masterEnd: 0, want: false, why: ReasonNeverAcked,
			s: with(func(s *SlaveProgress) { s.Acked = -1; s.ReadEnd = 0 })},
		{name: "ahead of the end stays", cur: true, masterEnd: end, want: true,
			s: with(func(s *SlaveProgress) { s.Acked = end + 500 })},
	})
}

func TestNextInSyncNonMember(t *testing.T) {
	r := syncTestRules
	const end = 100_000
	// back is a connected non-member that holds everything the master read for it, seen now.
	back := SlaveProgress{Acked: end, ReadEnd: end, ReadAt: syncTestNow, LastSeen: syncTestNow, LastCaughtUp: syncTestNow, Connected: true}
	with := func(edit func(*SlaveProgress)) SlaveProgress {
		s := back
		edit(&s)
		return s
	}
	exact := SyncRules{MaxLagBytes: r.MaxLagBytes, MaxLagTime: r.MaxLagTime, RejoinLagBytes: 0}
	runSyncCases(t, []syncCase{
		{name: "caught up joins", masterEnd: end, want: true, why: ReasonCaughtUp, s: back},
		// Back from a freeze: it acknowledges all of a read made before the freeze.
		{name: "holds a read made longer than MaxLagTime ago stays out", masterEnd: end + 100*r.MaxLagBytes, want: false,
			s: with(func(s *SlaveProgress) { s.ReadAt = ago(r.MaxLagTime + time.Millisecond) })},
		{name: "holds a read made exactly MaxLagTime ago joins", masterEnd: end, want: true, why: ReasonCaughtUp,
			s: with(func(s *SlaveProgress) { s.ReadAt = ago(r.MaxLagTime) })},
		{name: "RejoinLagBytes behind ReadEnd joins", masterEnd: end, want: true, why: ReasonCaughtUp,
			s: with(func(s *SlaveProgress) { s.Acked = end - r.RejoinLagBytes })},
		{name: "RejoinLagBytes+1 behind ReadEnd stays out", masterEnd: end, want: false,
			s: with(func(s *SlaveProgress) { s.Acked = end - r.RejoinLagBytes - 1 })},
		// Within MaxLagBytes is not enough to join: joining needs RejoinLagBytes.
		{name: "within MaxLagBytes but over RejoinLagBytes stays out", masterEnd: end, want: false,
			s: with(func(s *SlaveProgress) { s.Acked = end - r.MaxLagBytes })},
		// ReadEnd, not the live end, decides: under continuous writes the live end is always ahead.
		{name: "reached ReadEnd with the live end far ahead joins", masterEnd: end + 100*r.MaxLagBytes, want: true, why: ReasonCaughtUp, s: back},
		{name: "disconnected never joins", masterEnd: end, want: false,
			s: with(func(s *SlaveProgress) { s.Connected = false })},
		{name: "silent MaxLagTime+1ns does not join", masterEnd: end, want: false,
			s: with(func(s *SlaveProgress) { s.LastSeen = ago(r.MaxLagTime + time.Nanosecond) })},
		{name: "heard exactly MaxLagTime ago joins", masterEnd: end, want: true, why: ReasonCaughtUp,
			s: with(func(s *SlaveProgress) { s.LastSeen = ago(r.MaxLagTime) })},
		{name: "never seen does not join", masterEnd: end, want: false,
			s: with(func(s *SlaveProgress) { s.LastSeen = time.Time{} })},
		{name: "regressed does not join", masterEnd: end, want: false,
			s: with(func(s *SlaveProgress) { s.Regressed = true })},
		{name: "regressed to an empty log does not join", masterEnd: 0, want: false,
			s: with(func(s *SlaveProgress) { s.Acked, s.ReadEnd, s.Regressed = 0, 0, true })},
		{name: "never acked does not join", masterEnd: 0, want: false,
			s: with(func(s *SlaveProgress) { s.Acked, s.ReadEnd = -1, -1 })},
		{name: "never acked with ReadEnd 0 does not join", masterEnd: 0, want: false,
			s: with(func(s *SlaveProgress) { s.Acked, s.ReadEnd = -1, 0 })},
		{name: "empty log joins", masterEnd: 0, want: true, why: ReasonCaughtUp,
			s: with(func(s *SlaveProgress) { s.Acked, s.ReadEnd = 0, 0 })},
		{name: "RejoinLagBytes 0: holds all joins", masterEnd: end, rules: &exact, want: true, why: ReasonCaughtUp, s: back},
		{name: "RejoinLagBytes 0: one byte short stays out", masterEnd: end, rules: &exact, want: false,
			s: with(func(s *SlaveProgress) { s.Acked = end - 1 })},
	})
}

// TestNextInSyncScenario drives NextInSync as the Master does (CaughtUp refreshes LastCaughtUp
// before each evaluation) through a slave that stops, falls behind, is dropped, comes back and
// rejoins.
func TestNextInSyncScenario(t *testing.T) {
	r := syncTestRules
	t0 := syncTestNow
	in := true
	p := SlaveProgress{Acked: 0, ReadEnd: 0, ReadAt: t0, LastSeen: t0, LastCaughtUp: t0, Connected: true}
	end := int64(0)
	var reasons []SyncReason
	step := func(at time.Duration, acked, readEnd, newEnd int64, seen bool) {
		t.Helper()
		now := t0.Add(at)
		end = newEnd
		if acked >= 0 {
			p.Acked = acked
		}
		if seen {
			p.LastSeen = now
		}
		if CaughtUp(p, end, r) {
			p.LastCaughtUp = now
		}
		next, why := NextInSync(in, p, end, now, r)
		if (next != in) != (why != ReasonNone) {
			t.Fatalf("at %v: membership %v -> %v with reason %q", at, in, next, why)
		}
		if why != ReasonNone {
			reasons = append(reasons, why)
		}
		in = next
		if readEnd >= 0 {
			p.ReadEnd, p.ReadAt = readEnd, now
		}
	}
	// Keeps up with writes of 500 bytes per 100 ms.
	for i := int64(1); i <= 10; i++ {
		step(time.Duration(i)*100*time.Millisecond, (i-1)*500, i*500, i*500, true)
		if !in {
			t.Fatalf("dropped while keeping up at step %d", i)
		}
	}
	// It stalls at 4500 but keeps asking (a slow disk): the master writes on, and reads its end
	// for every request.
	stall := 4500
	var left time.Duration
	for i := int64(11); i <= 60; i++ {
		at := time.Duration(i) * 100 * time.Millisecond
		step(at, int64(stall), i*500, i*500, true)
		if !in {
			left = at
			break
		}
	}
	// It last counted as caught up at 1.1 s (lag exactly MaxLagBytes: 4500 acked, end 5500); it
	// must leave on the first evaluation more than MaxLagTime after that, for lagging, not before
	// (4.1 s is exactly MaxLagTime: it stays).
	if want := 1100*time.Millisecond + r.MaxLagTime + 100*time.Millisecond; left != want {
		t.Fatalf("left the set at %v, want %v (reasons %q)", left, want, reasons)
	}
	// It catches up to what the master read for it, and rejoins.
	step(left+100*time.Millisecond, end, end, end, true)
	if !in {
		t.Fatalf("did not rejoin after catching up (reasons %q)", reasons)
	}
	// Its connection drops and it goes silent: it leaves after MaxLagTime without a request.
	p.Connected = false
	base := left + 100*time.Millisecond
	step(base+r.MaxLagTime, -1, -1, end, false)
	if !in {
		t.Fatal("left before MaxLagTime of silence")
	}
	step(base+r.MaxLagTime+time.Millisecond, -1, -1, end, false)
	if in {
		t.Fatal("still in the set after MaxLagTime of silence")
	}
	want := []SyncReason{ReasonLagging, ReasonCaughtUp, ReasonSilent}
	if len(reasons) != len(want) {
		t.Fatalf("reasons %q, want %q", reasons, want)
	}
	for i := range want {
		if reasons[i] != want[i] {
			t.Fatalf("reasons %q, want %q", reasons, want)
		}
	}
}

// TestNextInSyncProperties checks, over random inputs, what every decision must satisfy: the
// reason is given exactly when membership changes; a member that is caught up, heard from and
// not regressed never leaves; a regressed, never-acked, silent or disconnected slave never joins;
// and a joining slave is within RejoinLagBytes of ReadEnd.
func TestNextInSyncProperties(t *testing.T) {
	r := syncTestRules
	check := func(cur bool, acked, readEnd, end int16, seenMs, caughtMs uint16, regressed, connected bool) bool {
		s := SlaveProgress{
			Acked:        int64(acked),
			ReadEnd:      int64(readEnd),
			LastSeen:     ago(time.Duration(seenMs) * time.Millisecond),
			LastCaughtUp: ago(time.Duration(caughtMs) * time.Millisecond),
			Regressed:    regressed,
			Connected:    connected,
		}
		masterEnd := int64(end)
		next, why := NextInSync(cur, s, masterEnd, syncTestNow, r)
		if (next != cur) != (why != ReasonNone) {
			t.Logf("reason %q with membership %v -> %v for %+v", why, cur, next, s)
			return false
		}
		silent := syncTestNow.Sub(s.LastSeen) > r.MaxLagTime
		if cur && !next && s.Acked >= 0 && !s.Regressed && !silent && CaughtUp(s, masterEnd, r) {
			t.Logf("a caught-up live member left (%q): %+v end %d", why, s, masterEnd)
			return false
		}
		if !cur && next && (s.Acked < 0 || s.Regressed || silent || !s.Connected || s.ReadEnd-s.Acked > r.RejoinLagBytes) {
			t.Logf("joined against the rules: %+v", s)
			return false
		}
		if cur && !next && why == ReasonLagging && (CaughtUp(s, masterEnd, r) || syncTestNow.Sub(s.LastCaughtUp) <= r.MaxLagTime) {
			t.Logf("left for lagging without lagging for MaxLagTime: %+v end %d", s, masterEnd)
			return false
		}
		return true
	}
	cfg := &quick.Config{MaxCount: 20000, Rand: rand.New(rand.NewSource(1))}
	// Small ranges so the thresholds (1000 bytes, 3 s) fall inside them.
	if err := quick.Check(func(cur bool, acked, readEnd, end int16, seenMs, caughtMs uint16, regressed, connected bool) bool {
		return check(cur, acked%3000, readEnd%3000, end%3000, seenMs%6000, caughtMs%6000, regressed, connected)
	}, cfg); err != nil {
		t.Fatal(err)
	}
}
