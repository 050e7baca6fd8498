package client

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/petrel-mq/petrel/internal/fakebroker"
	"github.com/petrel-mq/petrel/internal/testutil"
)

// TestUserCodeRunsWithoutClientLocks: a Handler and a SendAsync callback run with no lock of
// the client held, so they may call the methods that take those locks, also while Close stops
// the Consumer around a handler call in progress: Close returns once the handler has.
func TestUserCodeRunsWithoutClientLocks(t *testing.T) {
	fc := fakebroker.New(t)
	fc.AddGroup("a", 0, map[string]int32{"T": 1})
	c := newTestClient(t, fc.Addr())
	ctx := testCtx(t, 30*time.Second)
	p := newTestProducer(t, c)

	var calls atomic.Int32
	cbDone := make(chan struct{})
	err := p.SendAsync(ctx, &Message{Topic: "T", Body: []byte("first")}, func(_ SendResult, err error) {
		if err != nil {
			t.Errorf("first send: %v", err)
		}
		_ = p.BufferedBytes()
		_ = c.Stats()
		if err := p.SendAsync(ctx, &Message{Topic: "T", Body: []byte("second")}, func(SendResult, error) { close(cbDone) }); err != nil {
			t.Errorf("SendAsync from a callback: %v", err)
			close(cbDone)
		}
		calls.Add(1)
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case <-cbDone:
	case <-ctx.Done():
		t.Fatal("the send made from a callback was not answered")
	}
	if calls.Load() != 1 {
		t.Fatalf("callback ran %d times", calls.Load())
	}

	co := newTestConsumer(t, c, "G", "T")
	entered := make(chan struct{}, 1)
	handlerDone := make(chan struct{})
	errc := make(chan error, 1)
	go func() {
		errc <- co.Run(ctx, func(hctx context.Context, _ []MessageExt) error {
			select {
			case entered <- struct{}{}:
			default:
				return nil
			}
			<-hctx.Done() // Close is stopping the consumer
			_ = co.Assignment()
			_ = co.Progress()
			_ = co.Stats()
			_ = c.Stats()
			close(handlerDone)
			return nil
		})
	}()
	select {
	case <-entered:
	case <-ctx.Done():
		t.Fatal("no message delivered")
	}
	closed := make(chan error, 1)
	go func() { closed <- co.Close(ctx) }()
	testutil.Eventually(t, "the handler's calls during Close", func() bool {
		select {
		case <-handlerDone:
			return true
		default:
			return false
		}
	})
	if err := <-closed; err != nil {
		t.Fatal(err)
	}
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
}
