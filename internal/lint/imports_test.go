package lint

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"os/exec"
	"strings"
	"testing"
)

// allowedImports is the import table of ARCHITECTURE.md: for each top-level package, the
// top-level Petrel packages its non-test code may import. A package may always import its own
// subpackages and siblings (protocol/rpc -> protocol). cmd may import anything. A package of
// ownRows has a row of its own, apart from its top-level package's.
var allowedImports = map[string][]string{
	"protocol":  {"internal"},
	"commitlog": {"internal"},
	"ha":        {"protocol", "internal"},
	"broker":    {"ha", "commitlog", "protocol", "internal"},
	"namesrv":   {"protocol", "internal"},
	"client":    {"protocol", "internal"},
	"bench":     {"client", "protocol", "broker", "namesrv", "internal"},
	"tools":     {"client", "protocol", "internal"},
	"internal":  {},
	"cmd":       {"*"},
	// The cluster harness starts NameServers and brokers for the tests of the packages above
	// them; nothing below it may import it, so it imports broker and namesrv without making a
	// cycle of internal. Not client: client's own tests use it.
	"internal/testcluster": {"broker", "namesrv", "protocol", "internal"},
	// The fake broker answers the protocol for the tests of the packages above it; nothing
	// below it may import it, so it imports protocol without making a cycle of internal.
	"internal/fakebroker": {"protocol", "internal"},
}

// ownRows are the packages below a top-level package that have their own row of the import
// table: each is a component of its own, with its subpackages.
var ownRows = []string{"internal/fakebroker", "internal/testcluster"}

// component returns the row of the import table a Petrel import path belongs to: its top-level
// package ("protocol" for .../protocol/rpc), or the package of ownRows it is or is under; ""
// for the module root, and ok=false for a path outside the module.
func component(importPath string) (string, bool) {
	if importPath == modulePath {
		return "", true
	}
	rest, ok := strings.CutPrefix(importPath, modulePath+"/")
	if !ok {
		return "", false
	}
	for _, own := range ownRows {
		if rest == own || strings.HasPrefix(rest, own+"/") {
			return own, true
		}
	}
	top, _, _ := strings.Cut(rest, "/")
	return top, true
}

// importAllowed reports whether Petrel package from may import Petrel package to, and why not.
func importAllowed(from, to string) (bool, string) {
	fc, _ := component(from)
	tc, _ := component(to)
	if fc == tc && fc != "" {
		return true, ""
	}
	allowed, known := allowedImports[fc]
	if !known {
		return false, "package " + from + " belongs to no row of the import table (internal/lint/imports_test.go)"
	}
	for _, a := range allowed {
		if a == "*" || a == tc {
			return true, ""
		}
	}
	if len(allowed) == 0 {
		return false, fc + " may import nothing of Petrel's"
	}
	return false, fc + " may import only " + strings.Join(allowed, ", ")
}

// listedPackage is the part of `go list -json` output the rule needs.
type listedPackage struct {
	ImportPath string
	Imports    []string // non-test imports only
	Error      *struct{ Err string }
}

// listPackages runs `go list -e -json ./...` once at the module root.
func listPackages(t *testing.T) []listedPackage {
	t.Helper()
	cmd := exec.Command("go", "list", "-e", "-json=ImportPath,Imports,Error", "./...")
	cmd.Dir = root(t)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, stderr.String())
	}
	var pkgs []listedPackage
	dec := json.NewDecoder(bytes.NewReader(out))
	for {
		var p listedPackage
		if err := dec.Decode(&p); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			t.Fatalf("cannot decode go list output: %v", err)
		}
		pkgs = append(pkgs, p)
	}
	if len(pkgs) == 0 {
		t.Fatal("go list found no packages")
	}
	return pkgs
}

// TestImportDirection fails on any non-test import between Petrel packages that the table
// does not allow (pebble's TestForbiddenImports).
func TestImportDirection(t *testing.T) {
	var violations []string
	edges := 0
	for _, p := range listPackages(t) {
		if p.Error != nil {
			// Someone's work in progress; the build and vet report it. Imports that did parse
			// are still checked.
			t.Logf("%s: %s", p.ImportPath, p.Error.Err)
		}
		for _, imp := range p.Imports {
			if _, ours := component(imp); !ours {
				continue
			}
			edges++
			if ok, why := importAllowed(p.ImportPath, imp); !ok {
				violations = append(violations, p.ImportPath+" imports "+imp+": "+why)
			}
		}
	}
	if edges == 0 {
		t.Fatal("no import between Petrel packages found: the go list output was not understood")
	}
	reportAll(t, violations)
}

// TestImportTable checks the rule itself on the edges ARCHITECTURE.md names.
func TestImportTable(t *testing.T) {
	f := func(from, to string, want bool) {
		t.Helper()
		ok, why := importAllowed(modulePath+"/"+from, modulePath+"/"+to)
		if ok != want {
			t.Errorf("%s -> %s: allowed %v (%s), want %v", from, to, ok, why, want)
		}
	}
	// Allowed edges.
	f("broker", "ha", true)
	f("broker", "commitlog", true)
	f("broker", "protocol/rpc", true)
	f("ha", "protocol", true)
	f("client", "protocol", true)
	f("namesrv", "internal/props", true)
	f("bench", "broker", true)
	f("bench", "namesrv", true)
	f("tools", "client", true)
	f("cmd/petrel-broker", "broker", true)
	f("cmd/petrelctl", "tools/segdump", true)
	f("protocol/rpc", "protocol", true)
	f("internal/failpoint", "internal/fsutil", true)
	f("internal/testcluster", "broker", true)
	f("internal/testcluster", "namesrv", true)
	f("internal/testcluster", "protocol/rpc", true)
	f("internal/testcluster", "internal/testutil", true)
	f("internal/fakebroker", "protocol/rpc", true)
	f("internal/fakebroker", "internal/ratelog", true)
	// Upward and sideways edges.
	f("protocol", "commitlog", false)
	f("protocol/rpc", "client", false)
	f("commitlog", "protocol", false)
	f("ha", "commitlog", false)
	f("ha", "broker", false)
	f("client", "broker", false)
	f("client", "namesrv", false)
	f("namesrv", "broker", false)
	f("broker", "client", false)
	f("broker", "namesrv", false)
	f("bench", "commitlog", false)
	f("bench", "ha", false)
	f("tools", "broker", false)
	f("internal/props", "protocol", false)
	f("broker", "cmd/petrel-broker", false)
	// The cluster harness imports broker and namesrv: nothing they or internal hold may import
	// it back, and it may not import client, whose tests use it.
	f("broker", "internal/testcluster", false)
	f("namesrv", "internal/testcluster", false)
	f("internal/testutil", "internal/testcluster", false)
	f("internal/testcluster", "client", false)
	f("internal/testcluster", "ha", false)
	// The fake broker imports protocol: nothing protocol or internal holds may import it back,
	// nor may it reach up to the packages it stands in for.
	f("protocol", "internal/fakebroker", false)
	f("protocol/rpc", "internal/fakebroker", false)
	f("internal/props", "internal/fakebroker", false)
	f("internal/fakebroker", "client", false)
	f("internal/fakebroker", "broker", false)
	f("internal/fakebroker", "namesrv", false)
	f("client", "internal/fakebroker", false)
	// Packages outside the table.
	f("newpkg", "protocol", false)
	if _, ours := component("github.com/petrel-mq/petrelx/protocol"); ours {
		t.Error("a module whose path merely starts with ours counted as ours")
	}
}
