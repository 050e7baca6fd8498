package testutil

import (
	"errors"
	"io"
	"net"
	"time"
)

// WaitClosed waits, as Eventually does, until the other end closes nc (reading and discarding
// whatever it sends first), and fails t when DefaultWait passes first; what names the
// connection in the failure. A reset counts as closed.
func WaitClosed(t TB, nc net.Conn, what string) {
	t.Helper()
	_ = nc.SetReadDeadline(time.Now().Add(DefaultWait))
	_, err := io.Copy(io.Discard, nc)
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		t.Fatalf("%s: the connection is still open after %v", what, DefaultWait)
	}
}
