package lint

import (
	"io/fs"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"

	"github.com/petrel-mq/petrel/internal/testutil"
)

func TestMain(m *testing.M) { testutil.VerifyTestMain(m) }

// modulePath is the module every rule is about.
const modulePath = "github.com/petrel-mq/petrel"

var moduleRoot = sync.OnceValues(func() (string, error) {
	out, err := exec.Command("go", "env", "GOMOD").Output()
	if err != nil {
		return "", err
	}
	return filepath.Dir(strings.TrimSpace(string(out))), nil
})

// root returns the module's root directory.
func root(t *testing.T) string {
	t.Helper()
	dir, err := moduleRoot()
	if err != nil {
		t.Fatalf("cannot find the module root: %v", err)
	}
	return dir
}

// reportAll fails t once for each problem, in sorted order, so that runs list them alike.
func reportAll(t *testing.T, problems []string) {
	t.Helper()
	sort.Strings(problems)
	for _, p := range problems {
		t.Error(p)
	}
}

// nonTestGoFiles returns the path of every non-test Go file under the module root dir, leaving
// out testdata, vendor and directories whose name starts with "." or "_" (the go tool's rule).
// It fails t when there is none.
func nonTestGoFiles(t *testing.T, dir string) []string {
	t.Helper()
	var files []string
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			name := d.Name()
			if path != dir && (strings.HasPrefix(name, ".") || strings.HasPrefix(name, "_") || name == "testdata" || name == "vendor") {
				return filepath.SkipDir
			}
			return nil
		}
		if strings.HasSuffix(path, ".go") && !strings.HasSuffix(path, "_test.go") {
			files = append(files, path)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(files) == 0 {
		t.Fatal("no Go files found")
	}
	return files
}
