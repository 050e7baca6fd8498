package lint

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// mutexDecl is a sync.Mutex or sync.RWMutex that non-test code declares: a struct field (an
// embedded one too), a package-level variable or a function's local variable.
type mutexDecl struct {
	pos token.Position
	pkg string // the package name of its file
	// names are the names LOCKS.md may give it, the one used in messages first:
	//   - a field f of type T: T.f; of a field g of T whose type is an anonymous struct: T.g.f;
	//   - a mutex embedded in such a struct: the field itself, T.g (Master.poll), or T.g.Mutex;
	//     embedded in a named type T: T.Mutex;
	//   - a package-level variable v: v, and a field f of its anonymous struct type: v.f;
	//   - a local variable v of function F: F.v, of method F of type R: R.F.v.
	// Each may also be written with the package name in front (ratelog.Limiter.mu).
	names []string
	typ   string // "sync.Mutex" or "sync.RWMutex"
}

// mutexes returns the mutexes the Go source src declares.
func mutexes(fset *token.FileSet, filename string, src any) ([]mutexDecl, error) {
	f, err := parser.ParseFile(fset, filename, src, parser.SkipObjectResolution)
	if err != nil {
		return nil, err
	}
	syncNames := map[string]bool{} // local names of the sync import
	for _, imp := range f.Imports {
		if p, _ := strconv.Unquote(imp.Path.Value); p == "sync" {
			switch {
			case imp.Name == nil:
				syncNames["sync"] = true
			case imp.Name.Name != "_" && imp.Name.Name != ".":
				syncNames[imp.Name.Name] = true
			}
		}
	}
	if len(syncNames) == 0 {
		return nil, nil
	}
	s := &mutexScan{fset: fset, pkg: f.Name.Name, sync: syncNames}
	for _, d := range f.Decls {
		switch d := d.(type) {
		case *ast.GenDecl:
			s.genDecl(d, "")
		case *ast.FuncDecl:
			if d.Body == nil {
				continue
			}
			fn := d.Name.Name
			if d.Recv != nil && len(d.Recv.List) == 1 {
				fn = recvType(d.Recv.List[0].Type) + "." + fn
			}
			ast.Inspect(d.Body, func(n ast.Node) bool {
				switch n := n.(type) {
				case *ast.DeclStmt:
					if g, ok := n.Decl.(*ast.GenDecl); ok {
						s.genDecl(g, fn+".")
					}
				case *ast.AssignStmt:
					if n.Tok != token.DEFINE {
						return true
					}
					for i, rhs := range n.Rhs { // len(Rhs) is 1 or len(Lhs)
						id, isID := n.Lhs[i].(*ast.Ident)
						if cl, isLit := rhs.(*ast.CompositeLit); isID && isLit {
							s.typed(cl.Type, fn+"."+id.Name, id.Pos())
						}
					}
				}
				return true
			})
		}
	}
	return s.found, nil
}

// mutexScan collects the mutexes of one file.
type mutexScan struct {
	fset  *token.FileSet
	pkg   string
	sync  map[string]bool
	found []mutexDecl
}

// genDecl scans the types and variables of d; prefix qualifies local variables ("F.").
func (s *mutexScan) genDecl(d *ast.GenDecl, prefix string) {
	for _, spec := range d.Specs {
		switch spec := spec.(type) {
		case *ast.TypeSpec:
			if st, ok := spec.Type.(*ast.StructType); ok {
				s.structFields(st, spec.Name.Name)
			}
		case *ast.ValueSpec:
			for i, id := range spec.Names {
				switch {
				case spec.Type != nil:
					s.typed(spec.Type, prefix+id.Name, id.Pos())
				case i < len(spec.Values):
					if cl, ok := spec.Values[i].(*ast.CompositeLit); ok {
						s.typed(cl.Type, prefix+id.Name, id.Pos())
					}
				}
			}
		}
	}
}

// typed records a variable or field called name of type expr when it is a mutex, or scans the
// fields of an anonymous struct type.
func (s *mutexScan) typed(expr ast.Expr, name string, pos token.Pos) {
	expr = elem(expr)
	if typ, ok := s.mutexType(expr); ok {
		s.add(pos, typ, name)
		return
	}
	if st, ok := expr.(*ast.StructType); ok {
		s.structFields(st, name)
	}
}

// structFields scans the fields of st, a struct type named (or stored in a field or variable
// named) owner.
func (s *mutexScan) structFields(st *ast.StructType, owner string) {
	for _, field := range st.Fields.List {
		if len(field.Names) == 0 { // embedded
			if typ, ok := s.mutexType(field.Type); ok {
				embedded := owner + "." + strings.TrimPrefix(typ, "sync.")
				if strings.Contains(owner, ".") { // a field or variable: it is the lock
					s.add(field.Pos(), typ, owner, embedded)
				} else {
					s.add(field.Pos(), typ, embedded)
				}
			}
			continue
		}
		for _, id := range field.Names {
			s.typed(field.Type, owner+"."+id.Name, id.Pos())
		}
	}
}

func (s *mutexScan) add(pos token.Pos, typ string, names ...string) {
	s.found = append(s.found, mutexDecl{pos: s.fset.Position(pos), pkg: s.pkg, names: names, typ: typ})
}

// mutexType reports whether expr is sync.Mutex or sync.RWMutex, and which.
func (s *mutexScan) mutexType(expr ast.Expr) (string, bool) {
	sel, ok := expr.(*ast.SelectorExpr)
	if !ok {
		return "", false
	}
	id, ok := sel.X.(*ast.Ident)
	if !ok || !s.sync[id.Name] || (sel.Sel.Name != "Mutex" && sel.Sel.Name != "RWMutex") {
		return "", false
	}
	return "sync." + sel.Sel.Name, true
}

// elem strips array types: every element of [N]sync.Mutex is the same lock to document.
func elem(expr ast.Expr) ast.Expr {
	for {
		a, ok := expr.(*ast.ArrayType)
		if !ok {
			return expr
		}
		expr = a.Elt
	}
}

// recvType returns the type name of a method receiver (T for *T, T[K] and the like).
func recvType(expr ast.Expr) string {
	for {
		switch e := expr.(type) {
		case *ast.StarExpr:
			expr = e.X
		case *ast.IndexExpr:
			expr = e.X
		case *ast.IndexListExpr:
			expr = e.X
		case *ast.Ident:
			return e.Name
		default:
			return "?"
		}
	}
}

// lockSection is the text of one "## <dir>" section of LOCKS.md, reduced to the names it holds.
type lockSection struct {
	dir   string          // the heading: a directory of the module (broker, protocol/rpc, internal)
	names map[string]bool // every dotted or plain identifier of the section
}

// nameRE matches an identifier or a dotted chain of them (Store.mu, ratelog.Limiter.mu).
var nameRE = regexp.MustCompile(`[A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)*`)

// goFileRE matches a Go file a section refers to for its locks (`client/doc.go`).
var goFileRE = regexp.MustCompile("`([A-Za-z0-9_./-]+\\.go)`")

// lockSections splits the text of LOCKS.md into its "## " sections. A section that names a Go
// file in backquotes (`client/doc.go`) has that file's names too: readFile returns its text.
func lockSections(text string, readFile func(string) (string, error)) ([]lockSection, error) {
	var sections []lockSection
	var cur *lockSection
	add := func(s string) {
		for _, n := range nameRE.FindAllString(s, -1) {
			cur.names[n] = true
		}
	}
	for line := range strings.Lines(text) {
		if h, ok := strings.CutPrefix(line, "## "); ok {
			sections = append(sections, lockSection{dir: strings.TrimSpace(h), names: map[string]bool{}})
			cur = &sections[len(sections)-1]
			continue
		}
		if cur == nil {
			continue
		}
		add(line)
		for _, m := range goFileRE.FindAllStringSubmatch(line, -1) {
			doc, err := readFile(m[1])
			if err != nil {
				return nil, fmt.Errorf("LOCKS.md, section %q: %w", cur.dir, err)
			}
			add(doc)
		}
	}
	return sections, nil
}

// sectionFor returns the section whose heading is dir or the nearest directory above it.
func sectionFor(sections []lockSection, dir string) (lockSection, bool) {
	best := -1
	for i, s := range sections {
		if (dir == s.dir || strings.HasPrefix(dir, s.dir+"/")) && (best < 0 || len(s.dir) > len(sections[best].dir)) {
			best = i
		}
	}
	if best < 0 {
		return lockSection{}, false
	}
	return sections[best], true
}

// documented reports whether section s names m, by one of its names, with or without its
// package's name in front.
func documented(s lockSection, m mutexDecl) bool {
	for _, n := range m.names {
		if s.names[n] || s.names[m.pkg+"."+n] {
			return true
		}
	}
	return false
}

// TestLocksDocumented: every mutex of the module's non-test code is named in LOCKS.md, in the
// section of its package's directory (or of the nearest directory above it), so that what it
// guards and the order in which it is taken with others are written down.
func TestLocksDocumented(t *testing.T) {
	dir := root(t)
	text, err := os.ReadFile(filepath.Join(dir, "LOCKS.md"))
	if err != nil {
		t.Fatal(err)
	}
	sections, err := lockSections(string(text), func(name string) (string, error) {
		b, err := os.ReadFile(filepath.Join(dir, filepath.FromSlash(name)))
		return string(b), err
	})
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	var problems []string
	total := 0
	for _, file := range nonTestGoFiles(t, dir) {
		rel, _ := filepath.Rel(dir, file)
		found, err := mutexes(fset, file, nil)
		if err != nil {
			t.Logf("cannot parse %s: %v", rel, err) // a file being edited; the build reports it
			continue
		}
		total += len(found)
		pkgDir := path.Dir(filepath.ToSlash(rel))
		for _, m := range found {
			where := fmt.Sprintf("%s:%d", filepath.ToSlash(rel), m.pos.Line)
			s, ok := sectionFor(sections, pkgDir)
			switch {
			case !ok:
				problems = append(problems, fmt.Sprintf("%s: %s (%s): LOCKS.md has no section for %s: add a \"## %s\" section naming it, with what it guards and its lock order", where, m.names[0], m.typ, pkgDir, pkgDir))
			case !documented(s, m):
				problems = append(problems, fmt.Sprintf("%s: %s (%s) is not named in LOCKS.md (section %q): add what it guards and its lock order there", where, m.names[0], m.typ, s.dir))
			}
		}
	}
	if total == 0 {
		t.Fatal("no mutex found: the scan is broken")
	}
	reportAll(t, problems)
}

// TestMutexScanner checks what the scanner finds in small sources: the first name of each
// mutex, in source order.
func TestMutexScanner(t *testing.T) {
	for _, tc := range []struct {
		src  string
		want []string
	}{
		{`import "sync"; type T struct{ mu sync.Mutex; n int }`, []string{"T.mu"}},
		{`import "sync"; type T struct{ a, b sync.RWMutex }`, []string{"T.a", "T.b"}},
		{`import "sync"; type T struct{ sync.Mutex }`, []string{"T.Mutex"}},
		{`import "sync"; type T struct{ poll struct{ sync.Mutex; ch chan struct{} } }`, []string{"T.poll"}},
		{`import "sync"; type T struct{ inner struct{ mu sync.Mutex } }`, []string{"T.inner.mu"}},
		{`import "sync"; type T struct{ shards [4]struct{ mu sync.Mutex } }`, []string{"T.shards.mu"}},
		{`import "sync"; type T struct{ p *sync.Mutex }`, nil}, // another's lock
		{`import "sync"; var mu sync.Mutex`, []string{"mu"}},
		{`import "sync"; var procs struct{ mu sync.Mutex; n int }`, []string{"procs.mu"}},
		{`import "sync"; var mu = sync.Mutex{}`, []string{"mu"}},
		{`import "sync"; func f() { var mu sync.Mutex; _ = &mu }`, []string{"f.mu"}},
		{`import "sync"; type R struct{}; func (r *R) g() { mu := sync.RWMutex{}; _ = &mu }`, []string{"R.g.mu"}},
		{`import "sync"; type R[K any] struct{}; func (r R[K]) g() { go func() { var mu sync.Mutex; _ = &mu }() }`, []string{"R.g.mu"}},
		{`import s "sync"; type T struct{ mu s.Mutex }`, []string{"T.mu"}},
		{`import "sync"; type T struct{ wg sync.WaitGroup; once sync.Once }`, nil},
		{`type T struct{ mu sync.Mutex }`, nil}, // not the sync package
	} {
		found, err := mutexes(token.NewFileSet(), "x.go", "package x\n"+tc.src)
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, m := range found {
			got = append(got, m.names[0])
		}
		if strings.Join(got, " ") != strings.Join(tc.want, " ") {
			t.Errorf("%s: found %q, want %q", tc.src, got, tc.want)
		}
	}
}

// TestLockDocumentation checks how LOCKS.md's sections are matched to mutexes.
func TestLockDocumentation(t *testing.T) {
	const locks = "# Lock order\nStore.mu before any section counts for none.\n" +
		"## commitlog\n- `Store.mu -> Store.qmu`; `Store.fmu` is a leaf.\n" +
		"## protocol/rpc\n- `Server.mu` is a leaf.\n" +
		"## internal\n- `ratelog.Limiter.mu` is a leaf.\n" +
		"## ha\n- `Master.poll` (the wake channel) is a leaf.\n" +
		"## client\n- See `client/doc.go`.\n"
	docs := map[string]string{"client/doc.go": "// Producer.mu (read) -> Producer.qMu"}
	sections, err := lockSections(locks, func(name string) (string, error) {
		if d, ok := docs[name]; ok {
			return d, nil
		}
		return "", os.ErrNotExist
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		dir, pkg string
		names    []string
		want     string // the section that documents it, "" for none, "-" for no section at all
	}{
		{"commitlog", "commitlog", []string{"Store.mu"}, "commitlog"},
		{"commitlog", "commitlog", []string{"Store.amu"}, ""},
		{"commitlog", "commitlog", []string{"Store.fmu"}, "commitlog"},
		{"protocol/rpc", "rpc", []string{"Server.mu"}, "protocol/rpc"},
		{"namesrv", "namesrv", []string{"Server.mu"}, "-"}, // protocol/rpc's Server.mu is another lock
		{"protocol", "protocol", []string{"Server.mu"}, "-"},
		{"internal/ratelog", "ratelog", []string{"Limiter.mu"}, "internal"},
		{"internal/failpoint", "failpoint", []string{"mu"}, ""},
		{"ha", "ha", []string{"Master.poll", "Master.poll.Mutex"}, "ha"},
		{"ha", "ha", []string{"Master.mu"}, ""},
		{"client", "client", []string{"Producer.qMu"}, "client"}, // from client/doc.go
		{"client", "client", []string{"Producer.seqMu"}, ""},
		{"cmd/petrel-chaos", "main", []string{"proc.mu"}, "-"},
	} {
		m := mutexDecl{pkg: tc.pkg, names: tc.names}
		got := "-"
		if s, ok := sectionFor(sections, tc.dir); ok {
			got = ""
			if documented(s, m) {
				got = s.dir
			}
		}
		if got != tc.want {
			t.Errorf("%s %v: documented by %q, want %q", tc.dir, tc.names, got, tc.want)
		}
	}
	if _, err := lockSections("## client\nSee `client/gone.go`.\n", func(string) (string, error) { return "", os.ErrNotExist }); err == nil {
		t.Error("a section naming a missing file was accepted")
	}
}
