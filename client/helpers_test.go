package client

import (
	"context"
	"log/slog"
	"os"
	"testing"
	"time"
)

// Most tests of this package run the client against internal/fakebroker: a NameServer and
// broker groups speaking the real protocol on loopback, with hooks to inject failures.

// testLogger logs warnings to the test's output; PETREL_TEST_DEBUG=1 logs everything.
func testLogger(t testing.TB) *slog.Logger {
	level := slog.LevelWarn
	if os.Getenv("PETREL_TEST_DEBUG") != "" {
		level = slog.LevelDebug
	}
	return slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: level}))
}

// newTestClient returns a client of the NameServers nsAddrs closed at the end of the test.
func newTestClient(t testing.TB, nsAddrs string, opts ...ClientOption) *Client {
	t.Helper()
	opts = append([]ClientOption{WithNameServers(nsAddrs), WithLogger(testLogger(t)), WithReconnectBackoff(10*time.Millisecond, 100*time.Millisecond)}, opts...)
	c, err := New(context.Background(), opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

func testCtx(t testing.TB, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}
