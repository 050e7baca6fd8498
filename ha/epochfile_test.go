package ha

import (
	"os"
	"path/filepath"
	"reflect"
	"testing"
)

func TestEpochFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "epochs")
	f, err := OpenEpochFile(path)
	if err != nil || len(f.Epochs()) != 0 {
		t.Fatalf("new file: %v, %v", f.Epochs(), err)
	}
	for _, e := range []EpochStart{{1, 0}, {2, 100}, {2, 100}, {4, 100}, {5, 900}} {
		if err := f.Append(e); err != nil {
			t.Fatalf("append %v: %v", e, err)
		}
	}
	for _, bad := range []EpochStart{{5, 1000}, {3, 1000}, {6, 800}} {
		if err := f.Append(bad); err == nil {
			t.Fatalf("append %v accepted", bad)
		}
	}
	want := []EpochStart{{1, 0}, {2, 100}, {4, 100}, {5, 900}}
	g, err := OpenEpochFile(path)
	if err != nil || !reflect.DeepEqual(g.Epochs(), want) {
		t.Fatalf("reloaded %v, %v; want %v", g.Epochs(), err, want)
	}
	// A cut at 900 removes epoch 5 (it starts there); at 100, epochs 2 and 4.
	if err := g.TruncateTo(900); err != nil || !reflect.DeepEqual(g.Epochs(), want[:3]) {
		t.Fatalf("truncate 900: %v, %v", g.Epochs(), err)
	}
	if err := g.TruncateTo(150); err != nil || !reflect.DeepEqual(g.Epochs(), want[:3]) {
		t.Fatalf("truncate 150: %v, %v", g.Epochs(), err)
	}
	if err := g.TruncateTo(100); err != nil || !reflect.DeepEqual(g.Epochs(), want[:1]) {
		t.Fatalf("truncate 100: %v, %v", g.Epochs(), err)
	}
	h, err := OpenEpochFile(path)
	if err != nil || !reflect.DeepEqual(h.Epochs(), want[:1]) {
		t.Fatalf("reloaded after truncation %v, %v", h.Epochs(), err)
	}
	// Damaged files are refused, not guessed at.
	for _, content := range []string{"1\n", "x 0\n", "2 100\n1 200\n", "1 -5\n", "2 100\n3 50\n"} {
		if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
		if _, err := OpenEpochFile(path); err == nil {
			t.Fatalf("accepted %q", content)
		}
	}
}
