package broker

import (
	"bytes"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/petrel-mq/petrel/internal/fielddoc"
)

func TestConfigValidate(t *testing.T) {
	f := func(key, value, wantErr string) {
		t.Helper()
		cfg := DefaultConfig()
		if err := cfg.Set(key, value); err != nil {
			if wantErr != "" && strings.Contains(err.Error(), wantErr) {
				return
			}
			t.Fatalf("Set(%s=%s): %v", key, value, err)
		}
		err := cfg.Validate()
		switch {
		case wantErr == "" && err != nil:
			t.Fatalf("%s=%s rejected: %v", key, value, err)
		case wantErr != "" && (err == nil || !strings.Contains(err.Error(), wantErr)):
			t.Fatalf("%s=%s: got %v, want an error about %q", key, value, err, wantErr)
		}
	}
	f("brokerName", "broker-b", "")
	f("brokerName", "has space", "brokerName")
	f("brokerClusterName", "", "brokerClusterName")
	f("brokerRole", "MASTER", "brokerRole")
	f("flushDiskType", "SOMETIMES", "flushDiskType")
	f("connMaxInFlight", "0", "connMaxInFlight")
	f("numEventLoop", "-3", "numEventLoop")
	f("longPollingMaxWait", "-1", "longPollingMaxWait")
	f("shutdownGracePeriod", "-1", "shutdownGracePeriod")
	f("retentionBytes", "-1", "retentionBytes")
	f("flushIntervalCommitLog", "0", "flushIntervalCommitLog")
	f("registerNameServerPeriod", "0", "registerNameServerPeriod")
	f("maxFrameSize", "10", "maxFrameSize")
	f("maxInboundBufferedBytes", "1024", "maxInboundBufferedBytes")
	f("traceRingEntries", "0", "")
	f("traceRingEntries", "-1", "traceRingEntries")
	f("traceRingEntries", "2000000", "traceRingEntries")
	f("listenPort", "70000", "listenPort")
	f("brokerIP1", "10.0.0.7", "")
	f("brokerIP1", "::1", "")
	f("brokerIP1", "not an ip", "brokerIP1")
	f("brokerIP1", "not-an-ip", "want an IP address")
	f("brokerIP1", "broker-a.example.com", "want an IP address")
	f("bindAddress", "localhost", "bindAddress")
	f("namesrvAddr", "127.0.0.1", "namesrvAddr")
	f("namesrvAddr", "127.0.0.1:9876;127.0.0.2:9876", "")
	f("fileReservedTime", "-1", "")
	f("brokerId", "1", "brokerId")
	f("nosuchKey", "1", "unknown key")
}

func TestLoadConfigFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "broker.conf")
	content := "brokerClusterName=C1\nbrokerName=broker-x\nflushDiskType=SYNC_FLUSH\nlistenPort=20911\nflushIntervalCommitLog=250\nfileReservedTime=48\n"
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg, err := LoadConfig(path)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.BrokerClusterName != "C1" || cfg.BrokerName != "broker-x" || cfg.FlushDiskType != SyncFlush ||
		cfg.ListenPort != 20911 || cfg.FlushIntervalCommitLog != 250*time.Millisecond || cfg.FileReservedTime != 48*time.Hour {
		t.Fatalf("loaded %+v", cfg)
	}
	if !strings.Contains(cfg.String(), "flushIntervalCommitLog=250\n") || KeyHelp("flushDiskType") == "" {
		t.Fatalf("effective config:\n%s", cfg.String())
	}
	if err := os.WriteFile(path, []byte("brokerNmae=x\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := LoadConfig(path); err == nil || !strings.Contains(err.Error(), "brokerNmae") {
		t.Fatalf("unknown key: %v", err)
	}
}

func TestAdvertisedHost(t *testing.T) {
	cfg := DefaultConfig()
	cfg.BrokerIP1 = "10.1.2.3"
	if h := cfg.advertisedHost(); h != "10.1.2.3" {
		t.Fatalf("brokerIP1: %s", h)
	}
	cfg.BrokerIP1, cfg.BindAddress = "", "127.0.0.1"
	if h := cfg.advertisedHost(); h != "127.0.0.1" {
		t.Fatalf("bind address: %s", h)
	}
	cfg.BindAddress = "0.0.0.0"
	h := cfg.advertisedHost()
	if ip := net.ParseIP(h); ip == nil || (h != "127.0.0.1" && ip.IsLoopback()) {
		t.Fatalf("all interfaces: advertised %q", h)
	}
	if want := localIPv4(); want != "" && h != want {
		t.Fatalf("all interfaces: advertised %q, want the host's address %q", h, want)
	}
}

// TestConfigHelp: every key has a help text, generated from its field's doc comment, and
// config_help.go is what go generate makes of config.go now.
func TestConfigHelp(t *testing.T) {
	cfg := DefaultConfig()
	for _, key := range cfg.Keys() {
		if KeyHelp(key) == "" {
			t.Errorf("%s: no help text", key)
		}
	}
	if KeyHelp("noSuchKey") != "" {
		t.Errorf("an unknown key has a help text")
	}
	want, err := fielddoc.Generate("config.go", "Config", "broker", "configHelp")
	if err != nil {
		t.Fatal(err)
	}
	if got, err := os.ReadFile("config_help.go"); err != nil || !bytes.Equal(got, want) {
		t.Errorf("config_help.go is not what config.go's doc comments make (%v): run go generate ./broker", err)
	}
}
