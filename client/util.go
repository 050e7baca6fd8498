package client

import (
	"context"
	"fmt"
	"time"
	"unsafe"
)

// unsafeBytes returns the bytes of s without copying. The result must only be read, and only
// while s is alive; the client passes it to encoders that copy it.
func unsafeBytes(s string) []byte {
	if s == "" {
		return nil
	}
	return unsafe.Slice(unsafe.StringData(s), len(s))
}

// sleepCtx waits for d or ctx's end; it reports whether the full wait passed.
func sleepCtx(ctx context.Context, d time.Duration) bool {
	if d <= 0 {
		return ctx.Err() == nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// argContext checks the context argument of the entry point what ("Producer.SendSync"): a nil
// ctx is refused with ErrInvalidArgument before anything else happens, since it would panic
// wherever the call first waits on it, possibly with state half changed (a lock taken, a
// waiter queued, a goroutine started).
func argContext(ctx context.Context, what string) error {
	if ctx == nil {
		return fmt.Errorf("%w: %s: nil context (use context.Background() or context.TODO())", ErrInvalidArgument, what)
	}
	return nil
}

// ctxEnded returns an error wrapping ctx's error (errors.Is with context.Canceled or
// context.DeadlineExceeded) when ctx has already ended, naming the entry point what: a call
// given an ended context fails at once, having sent nothing and changed nothing, so its
// failure is definite, never ErrUnknownOutcome. A context that ends once a request was written
// is another matter: the request may have been acted on (see ErrUnknownOutcome).
func ctxEnded(ctx context.Context, what string) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("%s: the context had ended; nothing was sent: %w", what, err)
	}
	return nil
}
