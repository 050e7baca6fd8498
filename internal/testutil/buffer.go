package testutil

import (
	"bytes"
	"strings"
	"sync"
)

// SyncBuffer collects what many goroutines write (a slog handler shared by a cluster's
// members, a process's stdout and stderr, a command's output) while the test reads it. The
// zero value is empty and ready to use; it is safe for concurrent use.
type SyncBuffer struct {
	mu sync.Mutex // guards b; a leaf
	b  bytes.Buffer
}

// Write appends p; it never fails (io.Writer).
func (s *SyncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

// String returns everything written so far.
func (s *SyncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// Count returns how many times sub occurs, without overlaps, in what was written so far.
func (s *SyncBuffer) Count(sub string) int {
	return strings.Count(s.String(), sub)
}

// HasLine reports whether one line written so far (text between newlines) contains every one
// of parts: a log line with its message and attributes, whatever their order.
func (s *SyncBuffer) HasLine(parts ...string) bool {
	_, ok := lineWith(s.String(), parts)
	return ok
}

// WaitForLine waits, as Eventually does, until a line containing every one of parts has been
// written, and returns the first such line; when DefaultWait passes first it fails t, showing
// everything written.
func (s *SyncBuffer) WaitForLine(t TB, parts ...string) string {
	t.Helper()
	var line string
	if !poll(DefaultWait, func() bool {
		var ok bool
		line, ok = lineWith(s.String(), parts)
		return ok
	}) {
		t.Fatalf("no line with %q written within %v; written:\n%s", parts, DefaultWait, s.String())
	}
	return line
}

// lineWith returns the first line of text that contains every one of parts.
func lineWith(text string, parts []string) (string, bool) {
	for line := range strings.Lines(text) {
		line = strings.TrimSuffix(line, "\n")
		all := true
		for _, p := range parts {
			if !strings.Contains(line, p) {
				all = false
				break
			}
		}
		if all {
			return line, true
		}
	}
	return "", false
}
