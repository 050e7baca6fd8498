package client

import (
	"context"
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
