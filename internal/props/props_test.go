package props

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

type testConfig struct {
	Name     string        `prop:"brokerName"`
	ID       int64         `prop:"brokerId"`
	Enabled  bool          `prop:"enabled"`
	Interval time.Duration `prop:"flushInterval" unit:"ms"`
	Timeout  time.Duration `prop:"timeout"`
	Ignored  string
}

func TestLoadAndFormat(t *testing.T) {
	path := filepath.Join(t.TempDir(), "broker.conf")
	content := "# comment\nbrokerName = broker-a\nbrokerId=2\nenabled=true\nflushInterval=500\ntimeout=3s\n"
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	var c testConfig
	if err := Load(path, &c); err != nil {
		t.Fatal(err)
	}
	want := testConfig{Name: "broker-a", ID: 2, Enabled: true, Interval: 500 * time.Millisecond, Timeout: 3 * time.Second}
	if c != want {
		t.Fatalf("loaded %+v, want %+v", c, want)
	}
	if got := Format(&c); got != "brokerId=2\nbrokerName=broker-a\nenabled=true\nflushInterval=500\ntimeout=3s\n" {
		t.Fatalf("format:\n%s", got)
	}
	// A duration with a unit tag also takes Go syntax.
	if err := Set(&c, "flushInterval", "2s"); err != nil || c.Interval != 2*time.Second {
		t.Fatalf("set 2s: %v %v", err, c.Interval)
	}
}

func TestErrors(t *testing.T) {
	var c testConfig
	f := func(key, value, wantErr string) {
		t.Helper()
		err := Set(&c, key, value)
		if err == nil || !strings.Contains(err.Error(), wantErr) {
			t.Fatalf("Set(%q, %q) = %v, want an error containing %q", key, value, err, wantErr)
		}
	}
	f("brokerNmae", "x", `unknown key "brokerNmae"`)
	f("brokerId", "two", "cannot parse integer")
	f("enabled", "yes please", "cannot parse bool")
	f("timeout", "soon", "cannot parse duration")
	f("Ignored", "x", "unknown key")
	if err := Load(filepath.Join(t.TempDir(), "missing.conf"), &c); err == nil {
		t.Fatal("missing file accepted")
	}
}
