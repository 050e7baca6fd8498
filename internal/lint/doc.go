// Package lint holds Petrel's lint rules, written as Go tests so that `go test ./...` (and so
// `make test`) enforces them, as pebble's internal/lint does. It has no non-test code.
//
// The rules:
//
//   - imports_test.go: the direction of imports between Petrel's packages (ARCHITECTURE.md,
//     "Packages and the direction of imports"). Each package may import only the Petrel
//     packages its row of the table allows; subpackages count as their top-level package, so
//     protocol/rpc is part of protocol, except those with a row of their own
//     (internal/testcluster, which imports broker and namesrv, and internal/fakebroker, which
//     imports protocol, apart from the rest of internal, which they import). Only non-test
//     imports are checked: tests may start servers from any package.
//   - atomics_test.go: no sync/atomic functions (atomic.AddInt64, atomic.LoadUint32, ...) in
//     non-test code; use the typed atomics (atomic.Int64, atomic.Pointer[T], ...), which cannot
//     be read or written non-atomically by mistake (STYLE.md P6).
//   - locks_test.go: every sync.Mutex and sync.RWMutex of non-test code (a field, an embedded
//     one, a variable) is named in LOCKS.md, in the section of its package's directory, so
//     that what it guards and its lock order are written down. A failure names the file and
//     line of the mutex to document.
//
// A new top-level package must be added to the import table in imports_test.go before it can
// be imported by anything but cmd/.
package lint
