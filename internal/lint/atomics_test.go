package lint

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"strconv"
	"testing"
)

// atomicTypes are the names of package sync/atomic that non-test code may use: the typed atomics.
var atomicTypes = map[string]bool{
	"Bool": true, "Int32": true, "Int64": true, "Uint32": true, "Uint64": true, "Uintptr": true,
	"Pointer": true, "Value": true,
}

// rawAtomics returns every use of a sync/atomic function (atomic.AddInt64, atomic.LoadUint32,
// ...) in the Go source src, as "file:line: atomic.Name".
func rawAtomics(fset *token.FileSet, filename string, src any) ([]string, error) {
	f, err := parser.ParseFile(fset, filename, src, parser.SkipObjectResolution)
	if err != nil {
		return nil, err
	}
	names := map[string]bool{} // local names of the sync/atomic import
	var found []string
	for _, imp := range f.Imports {
		path, _ := strconv.Unquote(imp.Path.Value)
		if path != "sync/atomic" {
			continue
		}
		switch {
		case imp.Name == nil:
			names["atomic"] = true
		case imp.Name.Name == ".":
			found = append(found, fmt.Sprintf("%s: dot import of sync/atomic", fset.Position(imp.Pos())))
		case imp.Name.Name != "_":
			names[imp.Name.Name] = true
		}
	}
	if len(names) == 0 {
		return found, nil
	}
	ast.Inspect(f, func(n ast.Node) bool {
		sel, ok := n.(*ast.SelectorExpr)
		if !ok {
			return true
		}
		if id, ok := sel.X.(*ast.Ident); ok && names[id.Name] && !atomicTypes[sel.Sel.Name] {
			// A local variable shadowing the import would be reported too; Petrel code does not
			// name variables "atomic".
			found = append(found, fmt.Sprintf("%s: %s.%s", fset.Position(sel.Pos()), id.Name, sel.Sel.Name))
		}
		return true
	})
	return found, nil
}

// TestNoRawAtomics scans every non-test Go file of the module (pebble's raw-atomics lint).
func TestNoRawAtomics(t *testing.T) {
	dir := root(t)
	fset := token.NewFileSet()
	var found []string
	for _, path := range nonTestGoFiles(t, dir) {
		f, err := rawAtomics(fset, path, nil)
		if err != nil {
			// A file someone is editing may not parse; the build reports it.
			rel, _ := filepath.Rel(dir, path)
			t.Logf("cannot parse %s: %v", rel, err)
			continue
		}
		for _, use := range f {
			found = append(found, use+": use a typed atomic (atomic.Int64, atomic.Pointer[T], ...) instead")
		}
	}
	reportAll(t, found)
}

// TestRawAtomicsRule checks the scanner on small sources.
func TestRawAtomicsRule(t *testing.T) {
	f := func(src string, want int) {
		t.Helper()
		found, err := rawAtomics(token.NewFileSet(), "x.go", "package x\n"+src)
		if err != nil {
			t.Fatal(err)
		}
		if len(found) != want {
			t.Errorf("%q: found %q, want %d", src, found, want)
		}
	}
	f(`import "sync/atomic"; var n atomic.Int64; func g() { n.Add(1) }`, 0)
	f(`import "sync/atomic"; type s struct{ p atomic.Pointer[int]; v atomic.Value; b atomic.Bool }`, 0)
	f(`import "sync/atomic"; var n int64; func g() { atomic.AddInt64(&n, 1) }`, 1)
	f(`import "sync/atomic"; var n int64; func g() int64 { atomic.StoreInt64(&n, 1); return atomic.LoadInt64(&n) }`, 2)
	f(`import "sync/atomic"; var n uint32; func g() bool { return atomic.CompareAndSwapUint32(&n, 0, 1) }`, 1)
	f(`import "sync/atomic"; var load = atomic.LoadInt32`, 1)
	f(`import at "sync/atomic"; var n int64; func g() { at.AddInt64(&n, 1) }`, 1)
	f(`import . "sync/atomic"`, 1)
	f(`import _ "sync/atomic"`, 0)
	f(`import "go.uber.org/atomic"; func g() { atomic.NewInt64(1) }`, 0)
}
