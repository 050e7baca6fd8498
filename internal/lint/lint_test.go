package lint

import (
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

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
