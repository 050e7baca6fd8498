package ha

import (
	"context"
	"errors"
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/petrel-mq/petrel/internal/testutil"
	"github.com/petrel-mq/petrel/protocol"
)

// TestWaitReplicatedFollowsTheClock: a waiter's timeout is measured on the master's clock: it
// does not expire while that clock stands still, however many times the master looks, and
// expires once the clock reaches its deadline.
func TestWaitReplicatedFollowsTheClock(t *testing.T) {
	mlog := newMemLog(64 << 10)
	end := fill(mlog, 0, 5, 100)
	clock := testutil.NewClock()
	m := startMaster(t, mlog, MasterConfig{Now: clock.Now})
	done := make(chan error, 1)
	// No slave: a waiter that needs one can only time out.
	m.WaitReplicated(end, 1, 100*time.Millisecond, func(err error) { done <- err })
	pending := func(what string) {
		t.Helper()
		time.Sleep(300 * time.Millisecond) // three ticks of the master, and its timer
		select {
		case err := <-done:
			t.Fatalf("%s: the waiter ended (%v) before the master's clock reached its deadline", what, err)
		default:
		}
	}
	pending("clock standing still")
	clock.Advance(99 * time.Millisecond)
	pending("1ms before the deadline")
	clock.Advance(time.Millisecond)
	if err := waitErr(t, done, 10*time.Second); !errors.Is(err, ErrReplicationTimeout) {
		t.Fatalf("at the deadline: %v", err)
	}
}

// TestLeaveRefusedOnTheClock: a leave whose set cannot be committed is refused (the slave
// retries) once the master's clock passes leaveTimeout.
func TestLeaveRefusedOnTheClock(t *testing.T) {
	mlog, slog := newMemLog(64<<10), newMemLog(64<<10)
	fill(mlog, 0, 5, 100)
	clock := testutil.NewClock()
	release := make(chan struct{})
	var commits atomic.Int32
	commit := func(slaves []SyncMember) error {
		if commits.Add(1) > 1 && len(slaves) == 0 {
			<-release // the set without the slave is never committed while the test runs
		}
		return nil
	}
	p := startPair(t, mlog, slog, MasterConfig{InSyncMaxLagTime: time.Hour, CommitSyncSet: commit, Now: clock.Now},
		SlaveConfig{SlaveID: 2, MemberID: "b2"})
	var once sync.Once
	t.Cleanup(func() { once.Do(func() { close(release) }) }) // before the pair's cleanup
	p.waitEqual(t, 5*time.Second)
	eventually(t, 5*time.Second, "the slave counted", func() bool { return p.m.InSyncCount() == 1 })
	_ = p.s.Close()
	answered := make(chan error, 1)
	go func() {
		answered <- RequestLeave(context.Background(), p.m.Addr(), protocol.HALeaveRequest{
			BrokerName: "broker-a", SlaveID: 2, MemberID: "b2", Epoch: p.m.Epoch()})
	}()
	eventually(t, 5*time.Second, "the commit without the slave", func() bool { return commits.Load() >= 2 })
	// The clock moves by leaveTimeout until the leave is answered: its deadline is passed at the
	// latest by the second move after the master took the request.
	var err error
	eventually(t, 10*time.Second, "the leave answered", func() bool {
		clock.Advance(leaveTimeout)
		select {
		case err = <-answered:
			return true
		default:
			return false
		}
	})
	if !errors.Is(err, protocol.StatusSystemError) {
		t.Fatalf("leave with the set never committed: %v", err)
	}
	if n := p.m.InSyncCount(); n != 1 {
		t.Fatalf("counted slaves %d: the set without the slave was never committed", n)
	}
}

// TestClockInjected: no code of package ha reads the wall clock itself (time.Now, time.Since,
// time.Until) except as the default of a config's clock (Now: time.Now), so that tests drive
// every decision that depends on time through that clock.
func TestClockInjected(t *testing.T) {
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	var found []string
	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, name, nil, parser.SkipObjectResolution)
		if err != nil {
			t.Fatal(err)
		}
		local := ""
		for _, imp := range f.Imports {
			if imp.Path.Value == `"time"` {
				local = "time"
				if imp.Name != nil {
					local = imp.Name.Name
				}
			}
		}
		if local == "" {
			continue
		}
		// The default of a config clock: an assignment whose right side is time.Now itself.
		allowed := map[ast.Expr]bool{}
		ast.Inspect(f, func(n ast.Node) bool {
			if as, ok := n.(*ast.AssignStmt); ok && len(as.Lhs) == 1 && len(as.Rhs) == 1 {
				if lhs, ok := as.Lhs[0].(*ast.SelectorExpr); ok && lhs.Sel.Name == "Now" {
					allowed[as.Rhs[0]] = true
				}
			}
			return true
		})
		ast.Inspect(f, func(n ast.Node) bool {
			sel, ok := n.(*ast.SelectorExpr)
			if !ok {
				return true
			}
			if id, ok := sel.X.(*ast.Ident); ok && id.Name == local && !allowed[sel] {
				switch sel.Sel.Name {
				case "Now", "Since", "Until":
					found = append(found, fset.Position(sel.Pos()).String()+": time."+sel.Sel.Name)
				}
			}
			return true
		})
	}
	for _, f := range found {
		t.Errorf("%s reads the wall clock; use the config's clock (Now)", f)
	}
	if len(files) == 0 {
		t.Fatal("no Go files found")
	}
}
