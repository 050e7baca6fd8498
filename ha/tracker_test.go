package ha

import (
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cockroachdb/datadriven"
)

// TestTrackerScripts runs the scripts of testdata/tracker (rewrite their expected output with
// go test ./ha -run TestTrackerScripts -rewrite). Every script drives one Tracker with a clock of
// its own and the master's log end, as the Master does under its mutex. Commands:
//
//	config [min-acks=N] [max-lag-bytes=N] [max-lag-time=D] [rejoin-lag-bytes=N] [commit]
//	       [initial=(brokerId:member, ...)] [initial-confirmed=N] [end=N]
//	       [known=(brokerId:member, ...)] [forget-after=D] [max-disconnected=N]
//	                         a new tracker at time 0 (defaults: 1000 bytes, 1s, 0 bytes, no
//	                         known slave, DefaultForgetAfter, DefaultMaxDisconnected)
//	connect slave=N [member=M] a new connection of slave N (sessions are numbered from 1)
//	ack slave=N offset=N [read-end=N] [session=N]
//	                         a valid pull from offset; read-end defaults to the log end
//	tick                     the periodic evaluation, then the records it forgets (Expire)
//	hold slave=N             a pull of slave N is held
//	wake slave=N [read-end=N] the held pull woke (and read up to read-end)
//	leave slave=N [member=M] the slave asks to leave before it cuts its log
//	disconnect slave=N [session=N] a connection of slave N closed (default: its current one)
//	commit [set=(M, ...)]    the set to commit is committed (set: that set, committed late)
//	status                   every slave's progress and verdict, and what follows from them
//
// Every command takes now=D (the time since the start) or now=+D (later by D), and end=N (the
// master's log end from now on, in bytes). Times print as @D since the start.
func TestTrackerScripts(t *testing.T) {
	datadriven.Walk(t, "testdata/tracker", func(t *testing.T, path string) {
		sc := &trackerScript{}
		datadriven.RunTest(t, path, sc.run)
	})
}

// trackerScript is one script's tracker, clock, log end and connections.
type trackerScript struct {
	tr      Tracker
	ready   bool
	t0, now time.Time
	end     int64
	// session is the last session number given out; current the current session of each slave.
	session uint64
	current map[int64]uint64
}

func (sc *trackerScript) run(t *testing.T, td *datadriven.TestData) string {
	if td.Cmd != "config" && !sc.ready {
		td.Fatalf(t, "config first")
	}
	if td.Cmd != "config" {
		sc.advance(t, td)
	}
	var out strings.Builder
	switch td.Cmd {
	case "config":
		sc.config(t, td)
		sc.status(&out)
	case "connect":
		id := sc.slaveArg(t, td)
		var member string
		td.MaybeScanArgs(t, "member", &member)
		sc.session++
		prev, tookOver := sc.tr.Connect(SlaveConn{Session: sc.session, BrokerID: id, MemberID: member,
			Addr: fmt.Sprintf("slave-%d:10911", id), HAAddr: fmt.Sprintf("slave-%d:%d", id, 40000+sc.session)}, sc.now)
		sc.current[id] = sc.session
		fmt.Fprintf(&out, "session %d\n", sc.session)
		if tookOver {
			fmt.Fprintf(&out, "took over session %d: the master closes it\n", prev.Session)
		}
		fmt.Fprintf(&out, "connected=%d\n", sc.tr.ConnectedSlaves())
	case "ack":
		id := sc.slaveArg(t, td)
		var offset int64
		td.ScanArgs(t, "offset", &offset)
		readEnd := sc.end
		td.MaybeScanArgs(t, "read-end", &readEnd)
		if readEnd > sc.end {
			td.Fatalf(t, "read-end %d beyond the log end %d", readEnd, sc.end)
		}
		res := sc.tr.Ack(sc.sessionArg(t, td, id), offset, readEnd, sc.end, sc.now)
		switch {
		case res.BrokerID == 0:
			out.WriteString("unknown session: nothing recorded\n")
		case res.Refused:
			fmt.Fprintf(&out, "refused: offset %d is beyond the log end %d\n", offset, sc.end)
		case res.Regressed:
			fmt.Fprintf(&out, "regressed: acknowledged offset went back %d -> %d\n", res.From, offset)
		}
		changes(&out, res.Changes)
		sc.summary(&out)
	case "tick":
		changes(&out, sc.tr.Tick(sc.end, sc.now))
		for _, s := range sc.tr.Expire(sc.now) {
			fmt.Fprintf(&out, "forgot slave %d: disconnected %s\n", s.BrokerID, sc.at(s.DisconnectedAt))
		}
		sc.summary(&out)
	case "hold", "wake":
		id := sc.slaveArg(t, td)
		session := sc.sessionArg(t, td, id)
		if td.Cmd == "hold" {
			sc.tr.Hold(session, 1, sc.now)
		} else {
			sc.tr.Hold(session, -1, sc.now)
			var readEnd int64
			if td.MaybeScanArgs(t, "read-end", &readEnd) {
				sc.tr.ReadFor(session, readEnd, sc.now)
			}
		}
		s, _ := sc.tr.Slave(id)
		fmt.Fprintf(&out, "holding=%d\n", s.Holding)
	case "leave":
		id := sc.slaveArg(t, td)
		var member string
		td.MaybeScanArgs(t, "member", &member)
		known, ch, err := sc.tr.Leave(id, member, sc.end)
		switch {
		case err != nil:
			fmt.Fprintf(&out, "refused: %v\n", err)
		case !known:
			out.WriteString("unknown slave: never counted\n")
		}
		changes(&out, ch)
		sc.summary(&out)
	case "disconnect":
		id := sc.slaveArg(t, td)
		session := sc.sessionArg(t, td, id)
		res := sc.tr.Disconnect(session, sc.end, sc.now)
		if !res.Current {
			fmt.Fprintf(&out, "session %d was not the slave's current one: nothing changed\n", session)
		} else {
			delete(sc.current, id)
		}
		changes(&out, res.Changes)
		if res.Removed {
			out.WriteString("removed: never acknowledged anything\n")
		}
		for _, e := range res.Evicted {
			fmt.Fprintf(&out, "evicted slave %d: disconnected %s\n", e.BrokerID, sc.at(e.DisconnectedAt))
		}
		sc.summary(&out)
	case "commit":
		_, ids, differs := sc.tr.ToCommit()
		if arg, ok := td.Arg("set"); ok {
			ids = nonEmpty(arg.Vals)
		} else if !differs {
			out.WriteString("nothing to commit\n")
			sc.summary(&out)
			break
		}
		n := sc.tr.SetCommitted(ids, sc.end)
		fmt.Fprintf(&out, "committed %s: counted=%d\n", set(ids), n)
		sc.summary(&out)
	case "status":
		sc.status(&out)
	default:
		td.Fatalf(t, "unknown command %s", td.Cmd)
	}
	return out.String()
}

// config makes a new tracker from the config command.
func (sc *trackerScript) config(t *testing.T, td *datadriven.TestData) {
	cfg := TrackerConfig{Rules: SyncRules{MaxLagBytes: 1000, MaxLagTime: time.Second}}
	td.MaybeScanArgs(t, "min-acks", &cfg.MinAcks)
	td.MaybeScanArgs(t, "max-lag-bytes", &cfg.Rules.MaxLagBytes)
	td.MaybeScanArgs(t, "max-lag-time", &cfg.Rules.MaxLagTime)
	td.MaybeScanArgs(t, "rejoin-lag-bytes", &cfg.Rules.RejoinLagBytes)
	td.MaybeScanArgs(t, "initial-confirmed", &cfg.InitialConfirmed)
	td.MaybeScanArgs(t, "forget-after", &cfg.ForgetAfter)
	td.MaybeScanArgs(t, "max-disconnected", &cfg.MaxDisconnected)
	cfg.CommitSet = td.HasArg("commit")
	members := func(key string) []SyncMember {
		var out []SyncMember
		if arg, ok := td.Arg(key); ok {
			for _, v := range nonEmpty(arg.Vals) {
				idStr, member, found := strings.Cut(v, ":")
				id, err := strconv.ParseInt(idStr, 10, 64)
				if !found || err != nil {
					td.Fatalf(t, "%s member %q: want brokerId:member", key, v)
				}
				out = append(out, SyncMember{MemberID: member, BrokerID: id, Addr: fmt.Sprintf("slave-%d:10911", id)})
			}
		}
		return out
	}
	cfg.InitialSet = members("initial")
	if known := members("known"); len(known) > 0 {
		cfg.Known = func(brokerID int64, memberID string) bool {
			return slices.Contains(known, SyncMember{MemberID: memberID, BrokerID: brokerID, Addr: fmt.Sprintf("slave-%d:10911", brokerID)})
		}
	}
	sc.t0 = time.Date(2025, 6, 1, 12, 0, 0, 0, time.UTC)
	sc.now = sc.t0
	sc.end = 0
	td.MaybeScanArgs(t, "end", &sc.end)
	sc.session = 0
	sc.current = make(map[int64]uint64)
	sc.tr = MakeTracker(cfg, sc.now)
	sc.ready = true
}

// advance applies the now= and end= arguments every command takes.
func (sc *trackerScript) advance(t *testing.T, td *datadriven.TestData) {
	if arg, ok := td.Arg("now"); ok {
		v := arg.SingleVal(t)
		d, err := time.ParseDuration(strings.TrimPrefix(v, "+"))
		if err != nil {
			td.Fatalf(t, "now=%s: %v", v, err)
		}
		next := sc.t0.Add(d)
		if strings.HasPrefix(v, "+") {
			next = sc.now.Add(d)
		}
		if next.Before(sc.now) {
			td.Fatalf(t, "now=%s goes back from %s", v, sc.at(sc.now))
		}
		sc.now = next
	}
	td.MaybeScanArgs(t, "end", &sc.end)
}

func (sc *trackerScript) slaveArg(t *testing.T, td *datadriven.TestData) int64 {
	var id int64
	td.ScanArgs(t, "slave", &id)
	return id
}

// sessionArg returns the session= argument, or the slave's current session.
func (sc *trackerScript) sessionArg(t *testing.T, td *datadriven.TestData, id int64) uint64 {
	var s uint64
	if td.MaybeScanArgs(t, "session", &s) {
		return s
	}
	s, ok := sc.current[id]
	if !ok {
		td.Fatalf(t, "slave %d has no connection", id)
	}
	return s
}

// at prints a time as its distance from the start, "never" for the zero Time.
func (sc *trackerScript) at(tm time.Time) string {
	if tm.IsZero() {
		return "never"
	}
	return "@" + tm.Sub(sc.t0).String()
}

// summary prints what follows from the slaves: counted slaves, acknowledgement limit, confirmed
// offset, and the set to commit when it differs from the committed one.
func (sc *trackerScript) summary(out *strings.Builder) {
	limit := "none"
	if l := sc.tr.AckLimit(); l != math.MaxInt64 {
		limit = strconv.FormatInt(l, 10)
	}
	_, live := sc.tr.Confirmed()
	fmt.Fprintf(out, "counted=%d ack-limit=%s confirmed=%d", sc.tr.CountedSlaves(), limit, sc.tr.ConfirmedOffset(sc.end))
	if live {
		out.WriteString(" (live: the master alone)")
	}
	if _, ids, differs := sc.tr.ToCommit(); sc.tr.cfg.CommitSet && differs {
		fmt.Fprintf(out, " to-commit=%s", set(ids))
	}
	out.WriteString("\n")
}

// status prints every slave's record, then the summary, the committed set and the read view.
func (sc *trackerScript) status(out *strings.Builder) {
	fmt.Fprintf(out, "now=%s end=%d\n", sc.at(sc.now), sc.end)
	for _, s := range sc.tr.Slaves() {
		fmt.Fprintf(out, "slave %d", s.BrokerID)
		if s.MemberID != "" {
			fmt.Fprintf(out, " member=%s", s.MemberID)
		}
		fmt.Fprintf(out, " session=%d acked=%d read-end=%d read-at=%s seen=%s caught-up=%s full=%s",
			s.Session, s.Acked, s.ReadEnd, sc.at(s.ReadAt), sc.at(s.LastSeen), sc.at(s.LastCaughtUp), sc.at(s.LastFull))
		if s.Holding != 0 {
			fmt.Fprintf(out, " holding=%d", s.Holding)
		}
		if !s.GraceUntil.IsZero() {
			fmt.Fprintf(out, " grace-until=%s", sc.at(s.GraceUntil))
		}
		if s.Regressed {
			out.WriteString(" regressed")
		}
		if s.Leaving {
			out.WriteString(" leaving")
		}
		if s.Session == 0 && !s.DisconnectedAt.IsZero() {
			fmt.Fprintf(out, " disconnected=%s", sc.at(s.DisconnectedAt))
		}
		fmt.Fprintf(out, " in-sync=%v counted=%v lag=%dB/%s\n", s.InSync, s.Counted,
			LagBytes(s.Progress(sc.now), sc.end), s.LagTime(sc.now, sc.end))
	}
	sc.summary(out)
	fmt.Fprintf(out, "committed=%s connected=%d\n", set(sc.tr.CommittedSet()), sc.tr.ConnectedSlaves())
	var reads []string
	for _, r := range sc.tr.SlavesForRead() {
		in := "out"
		if r.InSync {
			in = "in"
		}
		reads = append(reads, fmt.Sprintf("%d:%s@%d", r.BrokerID, in, r.Acked))
	}
	fmt.Fprintf(out, "for-read=%s\n", set(reads))
}

// changes prints verdict changes, one a line.
func changes(out *strings.Builder, cs []VerdictChange) {
	for _, c := range cs {
		dir := "leaves"
		if c.InSync {
			dir = "joins"
		}
		fmt.Fprintf(out, "slave %d %s the set (%s): acked=%d", c.BrokerID, dir, c.Reason, c.Acked)
		if c.Reason != ReasonDisconnected && c.Reason != ReasonLeaving {
			fmt.Fprintf(out, " lag=%d end=%d", c.LagBytes, c.MasterEnd)
		}
		fmt.Fprintf(out, " counted=%d\n", c.Counted)
	}
}

func set(ids []string) string { return "(" + strings.Join(ids, ", ") + ")" }

// nonEmpty drops the empty value datadriven gives for "()".
func nonEmpty(vals []string) []string {
	var out []string
	for _, v := range vals {
		if v = strings.TrimSpace(v); v != "" {
			out = append(out, v)
		}
	}
	return out
}

// TestQuorumHeard: a master hears its quorum only from the slaves' own requests; its ticks and
// the end of a held pull (what a master stalled by SIGSTOP does first when it resumes) do not
// count.
func TestQuorumHeard(t *testing.T) {
	t0 := time.Unix(1000, 0)
	tr := MakeTracker(TrackerConfig{Rules: SyncRules{MaxLagBytes: 1000, MaxLagTime: time.Second}, MinAcks: 1}, t0)
	if tr.QuorumHeard(t0, 500*time.Millisecond) {
		t.Fatal("heard with no slave")
	}
	tr.Connect(SlaveConn{Session: 7, BrokerID: 1}, t0)
	tr.Ack(7, 0, 0, 0, t0) // caught up: it joins the set and counts
	if !tr.QuorumHeard(t0.Add(100*time.Millisecond), 500*time.Millisecond) {
		t.Fatal("a slave heard 100 ms ago is not a quorum")
	}
	tr.Hold(7, 1, t0)
	stalled := t0.Add(2 * time.Second) // the master resumes after a stall
	tr.Tick(0, stalled)
	tr.Hold(7, -1, stalled)
	if tr.QuorumHeard(stalled, 500*time.Millisecond) {
		t.Fatal("a tick and a held pull's end counted as the slave's word")
	}
	tr.Ack(7, 0, 0, 0, stalled)
	if !tr.QuorumHeard(stalled, 500*time.Millisecond) {
		t.Fatal("the slave's new request is not heard")
	}
	if none := MakeTracker(TrackerConfig{Rules: SyncRules{MaxLagTime: time.Second}}, t0); !none.QuorumHeard(t0, time.Millisecond) {
		t.Fatal("MinAcks 0 needs no quorum")
	}
}
