package client

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/petrel-mq/petrel/broker"
	"github.com/petrel-mq/petrel/internal/fakebroker"
	"github.com/petrel-mq/petrel/internal/testcluster"
	"github.com/petrel-mq/petrel/internal/testutil"
	"github.com/petrel-mq/petrel/protocol"
)

// impatientDeadline is the impatient caller's deadline: far shorter than any broker's answer.
const impatientDeadline = 200 * time.Microsecond

// TestImpatientCallerLeavesOthersAlone: one Client, four goroutines sending synchronously with a
// generous context, and a fifth sending with a 200 µs deadline on the same connection. The
// broker holds every send until the impatient one has given up, so its request is abandoned
// while the four others wait. The four then succeed on the connection they were sent on: it is
// neither closed nor replaced, the group records no fault, nothing is logged, and the impatient
// send's late answer is dropped and counted. With the liveness probes on (but slow, so that
// the held connection is not probed within the test) and off (when a request's own timeout may
// close a silent connection, and the caller's deadline still must not).
func TestImpatientCallerLeavesOthersAlone(t *testing.T) {
	for _, tc := range []struct {
		name  string
		probe time.Duration
	}{
		{"probes on", time.Hour},
		{"probes off", 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fc := fakebroker.New(t)
			a := fc.AddGroup("a", 0, map[string]int32{"T": 4}).Master()
			var logs lockedBuffer
			c := newTestClient(t, fc.Addr(), WithLivenessProbe(tc.probe, tc.probe),
				WithLogger(slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelWarn}))))
			// A send timeout that does not pass while the test holds the sends.
			p := newTestProducer(t, c, WithSendTimeout(time.Hour))
			ctx := testCtx(t, time.Hour)
			msg := func() *Message { return &Message{Topic: "T", Body: []byte("x")} }
			if _, err := p.SendSync(ctx, msg()); err != nil { // dials, fetches the route
				t.Fatal(err)
			}
			conn := connTo(c, a.Addr())
			before := c.Stats()

			release := make(chan struct{})
			releaseAll := sync.OnceFunc(func() { close(release) })
			a.Control(protocol.CodeSendMessage, fakebroker.Hold(release))
			errs := make([]error, 4)
			var wg sync.WaitGroup
			defer wg.Wait()
			defer releaseAll() // a failing test ends its held sends too
			for i := range errs {
				wg.Go(func() { _, errs[i] = p.SendSync(ctx, msg()) })
			}
			testutil.Eventually(t, "the four sends waiting on the connection", func() bool { return conn.Waiting() == 4 })

			var err error
			for range 100 {
				ictx, cancel := context.WithTimeout(ctx, impatientDeadline)
				_, err = p.SendSync(ictx, msg())
				cancel()
				if errors.Is(err, ErrUnknownOutcome) || !errors.Is(err, context.DeadlineExceeded) {
					break
				}
				// The deadline passed before the request was written: nothing was sent, and
				// nothing is left behind to see; try again.
			}
			if !errors.Is(err, ErrUnknownOutcome) || !errors.Is(err, context.DeadlineExceeded) {
				t.Fatalf("impatient send: %v", err)
			}
			if !isOpen(conn) {
				t.Fatalf("the impatient caller's deadline closed the shared connection: %v", conn.Err())
			}
			if !p.fault.empty() {
				t.Fatal("the impatient caller's deadline put the group in fault backoff")
			}
			releaseAll()
			wg.Wait()
			unknown := 0
			for i, err := range errs {
				if err != nil {
					t.Errorf("patient send %d: %v", i, err)
					if errors.Is(err, ErrUnknownOutcome) {
						unknown++
					}
				}
			}
			if unknown > 0 {
				t.Fatalf("%d unknown outcomes among the patient sends", unknown)
			}
			if connTo(c, a.Addr()) != conn {
				t.Fatal("the connection was replaced")
			}
			testutil.Eventually(t, "the impatient send's late answer dropped", func() bool {
				return c.Stats().LateResponses == before.LateResponses+1
			})
			st := c.Stats()
			if st.Dials != before.Dials || st.DeadConnections != 0 || st.Abandoned != before.Abandoned+1 {
				t.Fatalf("stats before %+v, after %+v: want no dial, no dead connection, one abandoned request", before, st)
			}
			if s := logs.String(); s != "" {
				t.Fatalf("the caller's own deadline was logged:\n%s", s)
			}
		})
	}
}

// TestImpatientCallerOnSyncFlushBroker: the same against a real broker in this process whose
// sends are acknowledged after their flush (SYNC_FLUSH): while four goroutines send
// synchronously with a generous context, a fifth keeps sending with a 200 µs deadline. Every
// send of the four succeeds, on the connection they started with, and the client closes no
// connection as dead.
func TestImpatientCallerOnSyncFlushBroker(t *testing.T) {
	rc := testcluster.New(t, testcluster.Options{Config: func(cfg *broker.Config) { cfg.FlushDiskType = broker.SyncFlush }},
		testcluster.GroupSpec{Name: "broker-a"})
	rc.CreateTopic("T", 4)
	var logs lockedBuffer
	c := newTestClient(t, rc.NamesrvAddr(), WithLogger(slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelWarn}))))
	p := newTestProducer(t, c)
	ctx := testCtx(t, time.Minute)
	body := make([]byte, 1024)
	if _, err := p.SendSync(ctx, &Message{Topic: "T", Body: body}); err != nil {
		t.Fatal(err)
	}
	addr := rc.Group("broker-a").Member(0).Addr()
	conn := connTo(c, addr)
	const perSender = 200
	var patientErrs, unknown, impatient, impatientUnknown atomic.Int64
	stop := make(chan struct{})
	var wg, patient sync.WaitGroup
	for range 4 {
		patient.Go(func() {
			for range perSender {
				if _, err := p.SendSync(ctx, &Message{Topic: "T", Body: body}); err != nil {
					patientErrs.Add(1)
					if errors.Is(err, ErrUnknownOutcome) {
						unknown.Add(1)
					}
					t.Errorf("patient send: %v", err)
				}
			}
		})
	}
	wg.Go(func() {
		for {
			select {
			case <-stop:
				return
			default:
			}
			ictx, cancel := context.WithTimeout(ctx, impatientDeadline)
			_, err := p.SendSync(ictx, &Message{Topic: "T", Body: body})
			cancel()
			impatient.Add(1)
			if errors.Is(err, ErrUnknownOutcome) {
				impatientUnknown.Add(1)
			}
		}
	})
	patient.Wait()
	close(stop)
	wg.Wait()
	t.Logf("impatient sends: %d, %d of them abandoned; client stats %+v", impatient.Load(), impatientUnknown.Load(), c.Stats())
	if n := unknown.Load(); n > 0 {
		t.Fatalf("%d unknown outcomes (%d failures) among the %d patient sends", n, patientErrs.Load(), 4*perSender)
	}
	if impatientUnknown.Load() == 0 {
		t.Fatal("no impatient send gave up: the test did not test an impatient caller")
	}
	if connTo(c, addr) != conn || c.Stats().DeadConnections != 0 {
		t.Fatalf("the broker's connection was replaced; stats %+v\n%s", c.Stats(), logs.String())
	}
}

// TestDialFailed: a dial cut short by its caller's ctx (ended, or a deadline earlier than the
// dial timeout that the dial's timeout error reports) does not put the address in the reconnect
// backoff; a refused dial, or one that ran out its own dial timeout, does.
func TestDialFailed(t *testing.T) {
	begun := time.Now()
	const dialTimeout = time.Hour
	timeout := &net.OpError{Op: "dial", Net: "tcp", Err: os.ErrDeadlineExceeded}
	refused := &net.OpError{Op: "dial", Net: "tcp", Err: syscall.ECONNREFUSED}
	cancelled, cancel := context.WithCancel(context.Background())
	cancel()
	short, cancelShort := context.WithDeadline(context.Background(), begun.Add(time.Minute))
	defer cancelShort()
	long, cancelLong := context.WithDeadline(context.Background(), begun.Add(2*time.Hour))
	defer cancelLong()
	for _, tc := range []struct {
		name string
		ctx  context.Context
		err  error
		want bool
	}{
		{"refused", context.Background(), refused, true},
		{"own dial timeout", context.Background(), timeout, true},
		{"own dial timeout under a longer ctx", long, timeout, true},
		{"cut by the caller's earlier deadline", short, timeout, false},
		{"refused within the caller's short deadline", short, refused, true},
		{"caller cancelled", cancelled, refused, false},
	} {
		if got := dialFailed(tc.ctx, tc.err, begun, dialTimeout); got != tc.want {
			t.Errorf("%s: dialFailed %v, want %v", tc.name, got, tc.want)
		}
	}
}
