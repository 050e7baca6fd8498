package netguard

import "time"

// StalledAttrs returns the attributes of the line that closes a slow sender (a connection
// that sent part of a request, then not the rest within the port's bound), the same facts on
// every port: the peer, the bytes of the request received (got), how many the request
// announced (want, left out when unknown: 0), how long it had been coming (waited: since its
// first byte, or since the accept for a connection's first request) and the bound.
func StalledAttrs(remote string, got, want int64, waited, bound time.Duration) []any {
	args := make([]any, 0, 10)
	args = append(args, "remote", remote, "got", got)
	if want > 0 {
		args = append(args, "want", want)
	}
	return append(args, "waited", waited.Round(time.Millisecond), "frameReadTimeout", bound)
}
