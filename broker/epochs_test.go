package broker

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"github.com/petrel-mq/petrel/commitlog"
	"github.com/petrel-mq/petrel/ha"
	"github.com/petrel-mq/petrel/internal/testutil"
	"github.com/petrel-mq/petrel/protocol"
)

// openTestStore opens a commit log with the broker's parser and small segments; it is closed at
// the end of the test.
func openTestStore(t *testing.T, dir string, segment int64) *commitlog.Store {
	t.Helper()
	s := openTestStoreCfg(t, dir, segment)
	t.Cleanup(func() { _ = s.Close() })
	return s
}

// openTestStoreCfg opens a commit log with the broker's parser; the caller closes it.
func openTestStoreCfg(t *testing.T, dir string, segment int64) *commitlog.Store {
	t.Helper()
	s, err := commitlog.Open(commitlog.Config{Dir: dir, SegmentSize: segment, Parser: parseStoredBatch, Logger: testLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// appendStamped appends a batch of body to the master's store, stamped with epoch.
func appendStamped(t *testing.T, s *commitlog.Store, qid int32, epoch uint32, body string) commitlog.AppendResult {
	t.Helper()
	b := buildBatch("T", qid, body)
	res, err := s.Append([]byte("T"), qid, b, 1, 0, epoch, stampBatch)
	if err != nil {
		t.Fatal(err)
	}
	return res
}

// replicate copies the master's log past the slave's end into the slave, chunk by chunk, as a
// Raft slave does (haLog records the epochs).
func replicate(t *testing.T, master *commitlog.Store, slave haLog) {
	t.Helper()
	for slave.LogEndOffset() < master.LogEndOffset() {
		from := slave.LogEndOffset()
		err := master.ReadReplication(from, 1<<20, func(start int64, data []byte) error {
			if len(data) == 0 {
				return nil
			}
			_, err := slave.AppendReplicated(start, data)
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
		if slave.LogEndOffset() == from {
			t.Fatalf("replication made no progress at %d", from)
		}
	}
}

// TestEpochStartsAtOneOffsetAcrossASegmentRoll: a new master's epoch starts at its log end E;
// when the epoch's first batch does not fit the rest of the segment it is stored at the next
// segment's start S > E. The slave must record the epoch at E too: recorded at S, the group's
// epoch history and its own disagree, and comparing them finds a divergence that is only
// padding (a cut back to E, copied again, cut again: a loop). A master that holds the same log
// finds nothing diverged.
func TestEpochStartsAtOneOffsetAcrossASegmentRoll(t *testing.T) {
	const segment = 16 << 10
	dir := t.TempDir()
	master := openTestStore(t, filepath.Join(dir, "master"), segment)
	slaveStore := openTestStore(t, filepath.Join(dir, "slave"), segment)
	slaveEpochs, err := openEpochLog(filepath.Join(dir, "slave-epochs"))
	if err != nil {
		t.Fatal(err)
	}
	slave := haLog{s: slaveStore, epochs: slaveEpochs}
	masterEpochs := []ha.EpochStart{{Epoch: 1, StartOffset: 0}}

	// Epoch 1 fills the first segment almost to its end.
	body := strings.Repeat("x", 900)
	for master.LogEndOffset()+int64(2*len(body)) < segment {
		appendStamped(t, master, 0, 1, body)
	}
	replicate(t, master, slave)
	// A new master takes over at its log end E; its first batch is too big for the rest of the
	// segment and lands at the next segment's start.
	e := master.LogEndOffset()
	masterEpochs = append(masterEpochs, ha.EpochStart{Epoch: 2, StartOffset: e})
	res := appendStamped(t, master, 1, 2, strings.Repeat("y", 4000))
	if res.PhysicalOffset != segment {
		t.Fatalf("the epoch's first batch is at %d, want the next segment's start %d", res.PhysicalOffset, segment)
	}
	appendStamped(t, master, 1, 2, "after")
	replicate(t, master, slave)

	got := slaveEpochs.list()
	if !slices.Equal(got, masterEpochs) {
		t.Fatalf("the slave recorded epochs %v, the master %v: an epoch must start at one offset on every member", got, masterEpochs)
	}
	end := slaveStore.LogEndOffset()
	if p := ha.TruncationPoint(got, slaveStore.LogMinOffset(), end, masterEpochs, master.LogEndOffset()); p != end {
		t.Fatalf("TruncationPoint %d for a slave holding exactly the master's log (end %d): it would cut", p, end)
	}
	last, _ := ha.NewestWithData(got, end)
	if epoch, epochEnd := ha.DivergingEpoch(masterEpochs, master.LogEndOffset(), last); epoch != last || epochEnd < end {
		t.Fatalf("the master would see the slave diverged: epoch %d ends at %d there (slave end %d)", epoch, epochEnd, end)
	}
}

// TestStaleControlStateNeverCuts: a member restarts with a Raft snapshot of epoch 5 (it has not
// applied the rest of the Raft log yet) while its log and epoch file hold epochs up to 9, and
// the other members are out of reach. Deciding from that state would cut everything since
// epoch 6. The member must cut nothing: its state is not known to be caught up with the
// leader's, and no master has said its log diverged. Hearing no Raft leader, it follows none
// (not the master the stale state names) and says it is between roles.
func TestStaleControlStateNeverCuts(t *testing.T) {
	dir := t.TempDir()
	addrs := testutil.FreeAddrs(t, 6) // Raft b1..b3, then the client and HA addresses of b2 and b3
	peers := fmt.Sprintf("b1-%s;b2-%s;b3-%s", addrs[0], addrs[1], addrs[2])
	cfg := haTestConfig(dir, RoleSyncMaster, 1)
	cfg.EnableRaftHA, cfg.RaftSelfID, cfg.RaftPeers, cfg.MinInSyncReplicas = true, "b1", peers, 2

	// The log: one batch per epoch 1..9, with the epoch file that says so.
	store := openTestStoreCfg(t, dir, cfg.MappedFileSizeCommitLog)
	ef, err := ha.OpenEpochFile(filepath.Join(dir, "epochs"))
	if err != nil {
		t.Fatal(err)
	}
	var all []ha.EpochStart
	for e := uint32(1); e <= 9; e++ {
		es := ha.EpochStart{Epoch: e, StartOffset: store.LogEndOffset()}
		all = append(all, es)
		if err := ef.Append(es); err != nil {
			t.Fatal(err)
		}
		appendStamped(t, store, 0, e, fmt.Sprintf("epoch %d", e))
	}
	end := store.LogEndOffset()
	if err := store.Close(); err != nil {
		t.Fatal(err)
	}
	// The Raft snapshot: the control state as of epoch 5, master b2 (first snapshot format, which
	// every version reads).
	st := ha.ControlState{MasterID: "b2", Epoch: 5, Epochs: all[:5], SyncStateSet: []string{"b1", "b2", "b3"},
		Members: []ha.MemberInfo{{ID: "b1", BrokerID: 1}, {ID: "b2", BrokerID: 2, Addr: addrs[3], HAAddr: addrs[4]}, {ID: "b3", BrokerID: 3, Addr: addrs[5]}}}
	snaps, err := raft.NewFileSnapshotStore(filepath.Join(dir, "raft"), 2, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	_, trans := raft.NewInmemTransport("")
	conf := raft.Configuration{Servers: []raft.Server{
		{ID: "b1", Address: raft.ServerAddress(addrs[0])}, {ID: "b2", Address: raft.ServerAddress(addrs[1])}, {ID: "b3", Address: raft.ServerAddress(addrs[2])}}}
	sink, err := snaps.Create(raft.SnapshotVersionMax, 40, 7, conf, 1, trans)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := sink.Write(st.MarshalBinary()); err != nil {
		t.Fatal(err)
	}
	if err := sink.Close(); err != nil {
		t.Fatal(err)
	}

	b := startBroker(t, cfg)
	defer b.Close()
	// It hears no leader, so it follows no master...
	testutil.EventuallyWithin(t, 10*time.Second, "the member to know it has no leader", func() bool {
		select {
		case err := <-b.Fatal():
			t.Fatalf("the member asked for a restart: %v", err)
		default:
		}
		r := b.role.Load()
		return r.State == ha.MemberBetween && r.NoMaster == ha.NoMasterNoLeader && r.slave == nil
	})
	// ... and keeps its whole log while it waits.
	for range 20 {
		select {
		case err := <-b.Fatal():
			t.Fatalf("the member asked for a restart: %v", err)
		case <-time.After(2 * reconcileInterval):
		}
	}
	if _, err := os.Stat(filepath.Join(dir, "truncate")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("a truncation request was written: %v", err)
	}
	if got := b.store.LogEndOffset(); got != end {
		t.Fatalf("log end %d, want %d", got, end)
	}
}

// TestOnlyAMasterMovesOffsets: a deposed master (its followers gone, it lost its Raft
// leadership) and a slave never answer OFFSET_MOVED, which sent consumers back over what they
// had consumed; they answer "not here" (go to the master). A master still moves an offset past
// its queue's end back to it.
func TestOnlyAMasterMovesOffsets(t *testing.T) {
	bs := raftMembers(t)
	defer func() {
		for _, b := range bs {
			_ = b.Close()
		}
	}()
	m := raftMaster(t, bs)
	c := dial(t, m.Addr())
	createTopic(t, c, "moved", 1)
	for i := range 10 {
		send(t, c, "moved", 0, fmt.Sprintf("m%d", i))
	}
	for _, b := range bs {
		if b == m {
			continue
		}
		// A slave asked past what it holds, or below it: not here.
		testutil.EventuallyWithin(t, 10*time.Second, "the slave to hold the topic and its messages", func() bool {
			return b.topics.get([]byte("moved")) != nil && b.store.MaxOffset([]byte("moved"), 0) == 10
		})
		sc := dial(t, b.Addr())
		for _, off := range []int64{50, 10_000} {
			if h := pullSome(t, sc, "moved", 0, off, 10, 0); h.Result != protocol.PullNotHere {
				t.Fatalf("a slave answered %v for offset %d, want not-here", h.Result, off)
			}
		}
	}
	if h := pullSome(t, c, "moved", 0, 50, 10, 0); h.Result != protocol.PullOffsetMoved || h.NextQueueOffset != 0 {
		t.Fatalf("the master answered %+v for an offset past the queue's end, want offset moved to 0 (the min offset)", h)
	}
	// The followers go: the master loses its Raft leadership and its role.
	for _, b := range bs {
		if b != m {
			_ = b.Close()
		}
	}
	testutil.EventuallyWithin(t, 10*time.Second, "the master to give its role up", func() bool { return m.role.Load().master == nil })
	// Its status says what it is now, in the epoch it was master of: no role, not "a slave of
	// epoch 0".
	if st := m.haStatus(); st.State == "master" || st.State == "slave" || st.Epoch == 0 {
		t.Fatalf("a deposed master's status: state %q epoch %d, want a state between roles in its last epoch", st.State, st.Epoch)
	}
	for _, off := range []int64{5, 50, 10_000} {
		h := pullSome(t, c, "moved", 0, off, 10, 0)
		if h.Result == protocol.PullOffsetMoved {
			t.Fatalf("a deposed master answered offset moved (to %d) for offset %d", h.NextQueueOffset, off)
		}
		if off > 10 && h.Result != protocol.PullNotHere {
			t.Fatalf("a deposed master answered %v for offset %d, want not-here", h.Result, off)
		}
	}
}

// divergedSlave starts a Raft group whose acknowledgements do not wait for slaves (no
// confirmed-offset floor), writes messages, and returns the group, its master, one slave and an
// offset of a batch boundary in the slave's log below its end.
func divergedSlave(t *testing.T) (bs []*Broker, m, s *Broker, point int64) {
	t.Helper()
	bs = raftMembers(t, func(c *Config) { c.BrokerRole = RoleAsyncMaster })
	t.Cleanup(func() {
		for _, b := range bs {
			_ = b.Close()
		}
	})
	m = raftMaster(t, bs)
	c := dial(t, m.Addr())
	createTopic(t, c, "cut", 1)
	for i := range 5 {
		send(t, c, "cut", 0, fmt.Sprintf("a%d", i))
	}
	for _, b := range bs {
		if b != m {
			s = b
			break
		}
	}
	testutil.EventuallyWithin(t, 10*time.Second, "the slave to hold the first messages", func() bool { return s.store.MaxOffset([]byte("cut"), 0) == 5 })
	point = s.store.LogEndOffset()
	for i := range 5 {
		send(t, c, "cut", 0, fmt.Sprintf("b%d", i))
	}
	testutil.EventuallyWithin(t, 10*time.Second, "the slave to hold every message", func() bool { return s.store.MaxOffset([]byte("cut"), 0) == 10 })
	raftMaster(t, bs) // both slaves in the set
	return bs, m, s, point
}

// TestDivergedMemberLeavesTheSetBeforeItCuts: a member of the committed in-sync set that must
// cut its log first stops replicating and has the master take it out of the set (committed
// through Raft), and only then writes the truncation request and asks for its restart: no
// acknowledgement relies on a copy being discarded, and no new master can come from it.
func TestDivergedMemberLeavesTheSetBeforeItCuts(t *testing.T) {
	_, m, s, point := divergedSlave(t)
	// The master committed the set; the slave applies that entry a moment later.
	testutil.EventuallyWithin(t, 10*time.Second, "the slave to apply the set naming it", func() bool {
		return slices.Contains(s.raft.node.State().SyncStateSet, s.raft.selfID)
	})
	st := s.raft.node.State()
	// At the moment the member starts its cut, the master's committed state must not name it
	// any more (closing its replication alone would leave it there until the master noticed).
	cutWhileIn := make(chan []string, 1)
	testBeforeTruncate = func(c *raftMember) {
		if c == s.raft {
			cutWhileIn <- m.raft.node.State().SyncStateSet
		}
	}
	t.Cleanup(func() { testBeforeTruncate = nil })
	s.roles.postFromSlave(ha.OutOfRange{Divergence: ha.Divergence{DivergingEpoch: st.Epoch, TruncateTo: point, MasterEnd: m.store.LogEndOffset(), Epoch: st.Epoch}})
	var err error
	testutil.EventuallyWithin(t, 10*time.Second, "the member to ask for its restart", func() bool {
		select {
		case err = <-s.Fatal():
			return true
		default:
			return false
		}
	})
	if !errors.Is(err, ErrRestart) {
		t.Fatalf("fatal: %v, want ErrRestart", err)
	}
	if set := <-cutWhileIn; slices.Contains(set, s.raft.selfID) {
		t.Fatalf("the member started its cut while the committed set %v still held it", set)
	}
	if n := m.role.Load().master.InSyncCount(); n != 1 {
		t.Fatalf("the master counts %d slaves after the member left", n)
	}
	req, err := os.ReadFile(filepath.Join(s.cfg.StorePathRootDir, "truncate"))
	if err != nil || strings.TrimSpace(string(req)) != fmt.Sprint(point) {
		t.Fatalf("truncation request %q (%v), want %d", req, err, point)
	}
	if e, p := s.raft.cuts.last(); e != st.Epoch || p != point {
		t.Fatalf("truncation log's last cut: epoch %d at %d, want %d at %d", e, p, st.Epoch, point)
	}
}

// TestSecondCutForAnEpochStops: a member that already cut its log for the current epoch and is
// told to cut again stops following its group and says why, instead of cutting in a loop.
func TestSecondCutForAnEpochStops(t *testing.T) {
	_, m, s, point := divergedSlave(t)
	st := s.raft.node.State()
	if err := s.raft.cuts.record(st.Epoch, point, time.Now()); err != nil {
		t.Fatal(err)
	}
	s.roles.postFromSlave(ha.OutOfRange{Divergence: ha.Divergence{DivergingEpoch: st.Epoch, TruncateTo: point, MasterEnd: m.store.LogEndOffset(), Epoch: st.Epoch}})
	testutil.EventuallyWithin(t, 10*time.Second, "the member to stop", func() bool { return s.haStatus().Stopped != "" })
	hs := s.haStatus()
	if hs.Electable || !strings.Contains(hs.Stopped, "already cut") {
		t.Fatalf("status of the stopped member: %+v", hs)
	}
	if _, err := os.Stat(filepath.Join(s.cfg.StorePathRootDir, "truncate")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("a stopped member wrote a truncation request: %v", err)
	}
	select {
	case err := <-s.Fatal():
		t.Fatalf("a stopped member asked for a restart: %v", err)
	default:
	}
	if r := s.role.Load(); r.slave != nil || r.master != nil {
		t.Fatal("a stopped member still replicates")
	}
}
