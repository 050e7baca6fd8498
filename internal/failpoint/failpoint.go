// Package failpoint lets crash tests kill a real process at a named point of the code.
//
// A process started with PETREL_FAILPOINTS="name=N[,name2=M]" sends itself SIGKILL the N-th
// time execution passes Inject(name): no deferred function, flush or exit handler runs, as in a
// power cut of the process. Without the variable, Inject is one atomic load.
package failpoint

import (
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
)

var (
	enabled atomic.Bool
	mu      sync.Mutex
	counts  map[string]int // remaining hits before the kill
)

func init() {
	spec := os.Getenv("PETREL_FAILPOINTS")
	if spec == "" {
		return
	}
	counts = map[string]int{}
	for _, part := range strings.Split(spec, ",") {
		name, n, ok := strings.Cut(strings.TrimSpace(part), "=")
		hits := 1
		if ok {
			if v, err := strconv.Atoi(n); err == nil && v > 0 {
				hits = v
			}
		}
		if name != "" {
			counts[name] = hits
		}
	}
	enabled.Store(len(counts) > 0)
}

// Inject kills the process with SIGKILL when the failpoint name is armed and its count is reached.
func Inject(name string) {
	if !enabled.Load() {
		return
	}
	mu.Lock()
	n, ok := counts[name]
	if ok {
		n--
		counts[name] = n
	}
	mu.Unlock()
	if ok && n == 0 {
		_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
		select {} // SIGKILL is not deliverable late; never return
	}
}
