package namesrv

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/petrel-mq/petrel/internal/fielddoc"
)

func TestDefaultConfig(t *testing.T) {
	c := DefaultConfig()
	if c.ListenAddr != "0.0.0.0:9876" || c.BrokerExpiry != 120*time.Second || c.ScanInterval != 5*time.Second ||
		c.FrameReadTimeout != 10*time.Second || c.RegistrationPeriod != 30*time.Second || c.MaxConnections <= 0 || c.MaxConnections > DefaultMaxConnections ||
		c.Logger == nil || c.Now == nil {
		t.Errorf("DefaultConfig() = %+v", c)
	}
	if err := c.Validate(); err != nil {
		t.Errorf("default config invalid: %v", err)
	}
	want := fmt.Sprintf("listenAddr=0.0.0.0:9876\nbrokerExpiryMs=120000\nscanIntervalMs=5000\nframeReadTimeoutMs=10000\nmaxConnections=%d\nregistrationPeriodMs=30000\n", c.MaxConnections)
	if got := (Config{}).Properties(); got != want {
		t.Errorf("Properties() of the zero config = %q, want %q", got, want)
	}
}

func TestConfigLoad(t *testing.T) {
	cases := []struct {
		name, text string
		want       Config
	}{
		{"empty", "# nothing\n", Config{}},
		{"listenAddr", "listenAddr = 127.0.0.1:9999\n", Config{ListenAddr: "127.0.0.1:9999"}},
		{"rocketmq port", "listenPort=9877\n", Config{ListenAddr: "0.0.0.0:9877"}},
		{"rocketmq bind and port", "bindAddress=127.0.0.2\nlistenPort=1234\n", Config{ListenAddr: "127.0.0.2:1234"}},
		{"ipv6 bind", "bindAddress=::1\n", Config{ListenAddr: "[::1]:9876"}},
		{"durations", "brokerExpiryMs=30000\nscanIntervalMs=250\n", Config{BrokerExpiry: 30 * time.Second, ScanInterval: 250 * time.Millisecond}},
		{"rocketmq scan key", "scanNotActiveBrokerInterval=1000\n", Config{ScanInterval: time.Second}},
		{"connection limits", "frameReadTimeoutMs=2500\nmaxConnections=50\n", Config{FrameReadTimeout: 2500 * time.Millisecond, MaxConnections: 50}},
		{"registration period", "registrationPeriodMs=5000\n", Config{RegistrationPeriod: 5 * time.Second}},
	}
	for _, tc := range cases {
		var c Config
		if err := c.Load([]byte(tc.text), tc.name); err != nil {
			t.Errorf("%s: %v", tc.name, err)
			continue
		}
		if c.ListenAddr != tc.want.ListenAddr || c.BrokerExpiry != tc.want.BrokerExpiry || c.ScanInterval != tc.want.ScanInterval ||
			c.FrameReadTimeout != tc.want.FrameReadTimeout || c.MaxConnections != tc.want.MaxConnections ||
			c.RegistrationPeriod != tc.want.RegistrationPeriod {
			t.Errorf("%s: got %+v, want %+v", tc.name, c, tc.want)
		}
	}
}

func TestConfigLoadErrors(t *testing.T) {
	cases := []struct{ name, text, mention string }{
		{"unknown key", "listenPort=1\nbrokerClusterName=x\n", `"brokerClusterName"`},
		{"conflict", "listenAddr=127.0.0.1:1\nlistenPort=2\n", "listenAddr"},
		{"bad port", "listenPort=70000\n", "listenPort"},
		{"bad addr", "listenAddr=nocolon\n", "nocolon"},
		{"bad ms", "brokerExpiryMs=2m\n", "brokerExpiryMs"},
		{"zero ms", "scanIntervalMs=0\n", "scanIntervalMs"},
		{"both scan keys", "scanIntervalMs=1\nscanNotActiveBrokerInterval=2\n", "scanNotActiveBrokerInterval"},
		{"zero frame timeout", "frameReadTimeoutMs=0\n", "frameReadTimeoutMs"},
		{"zero connections", "maxConnections=0\n", "maxConnections"},
		{"bad connections", "maxConnections=many\n", "maxConnections"},
		{"zero registration period", "registrationPeriodMs=0\n", "registrationPeriodMs"},
	}
	for _, tc := range cases {
		c := Config{ListenAddr: "127.0.0.1:5"}
		err := c.Load([]byte(tc.text), "test.conf")
		if !errors.Is(err, ErrConfig) || !strings.Contains(err.Error(), tc.mention) || !strings.Contains(err.Error(), "test.conf") {
			t.Errorf("%s: %v; want ErrConfig naming %s and the file", tc.name, err, tc.mention)
		}
		if c.ListenAddr != "127.0.0.1:5" || c.BrokerExpiry != 0 || c.ScanInterval != 0 {
			t.Errorf("%s: failed load changed the config: %+v", tc.name, c)
		}
	}
}

func TestConfigLoadFileRoundTrip(t *testing.T) {
	want := Config{ListenAddr: "127.0.0.1:9999", BrokerExpiry: 7 * time.Second, ScanInterval: 300 * time.Millisecond,
		FrameReadTimeout: 900 * time.Millisecond, MaxConnections: 77, RegistrationPeriod: 4 * time.Second}
	path := filepath.Join(t.TempDir(), "namesrv.conf")
	if err := os.WriteFile(path, []byte(want.Properties()), 0o644); err != nil {
		t.Fatal(err)
	}
	var got Config
	if err := got.LoadFile(path); err != nil {
		t.Fatal(err)
	}
	if got.ListenAddr != want.ListenAddr || got.BrokerExpiry != want.BrokerExpiry || got.ScanInterval != want.ScanInterval ||
		got.FrameReadTimeout != want.FrameReadTimeout || got.MaxConnections != want.MaxConnections ||
		got.RegistrationPeriod != want.RegistrationPeriod {
		t.Errorf("round trip: got %+v, want %+v", got, want)
	}
	if err := got.LoadFile(filepath.Join(t.TempDir(), "missing.conf")); !errors.Is(err, ErrConfig) {
		t.Errorf("missing file: %v", err)
	}
}

// TestConfigHelp: config_help.go is what go generate makes of config.go now, and the fields
// petrel-namesrv has flags for are described.
func TestConfigHelp(t *testing.T) {
	for _, f := range []string{"ListenAddr", "BrokerExpiry", "ScanInterval", "FrameReadTimeout", "MaxConnections", "RegistrationPeriod"} {
		if ConfigHelp(f) == "" {
			t.Errorf("%s: no help text", f)
		}
	}
	want, err := fielddoc.Generate("config.go", "Config", "namesrv", "configHelp")
	if err != nil {
		t.Fatal(err)
	}
	if got, err := os.ReadFile("config_help.go"); err != nil || !bytes.Equal(got, want) {
		t.Errorf("config_help.go is not what config.go's doc comments make (%v): run go generate ./namesrv", err)
	}
}
