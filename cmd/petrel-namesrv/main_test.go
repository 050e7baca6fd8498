package main

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/petrel-mq/petrel/internal/testutil"
	"github.com/petrel-mq/petrel/namesrv"
	"github.com/petrel-mq/petrel/protocol"
	"github.com/petrel-mq/petrel/protocol/rpc"
)

func TestMain(m *testing.M) { testutil.VerifyTestMain(m) }

func writeConf(t *testing.T, text string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "namesrv.conf")
	if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

func execute(args ...string) (string, string, error) {
	var out, errOut testutil.SyncBuffer
	cmd := newCommand(&out, &errOut)
	cmd.SetArgs(args)
	err := cmd.ExecuteContext(context.Background())
	return out.String(), errOut.String(), err
}

func TestPrintConfig(t *testing.T) {
	out, _, err := execute("-p")
	if err != nil {
		t.Fatal(err)
	}
	conns := namesrv.DefaultConfig().MaxConnections
	if want := fmt.Sprintf("listenAddr=0.0.0.0:9876\nbrokerExpiryMs=120000\nscanIntervalMs=5000\nframeReadTimeoutMs=10000\nmaxConnections=%d\nregistrationPeriodMs=30000\n", conns); out != want {
		t.Errorf("-p printed %q, want %q", out, want)
	}

	conf := writeConf(t, "listenPort=9999\nbrokerExpiryMs=1000\nscanIntervalMs=100\n")
	out, _, err = execute("-c", conf, "--listen", "127.0.0.1:7", "--scan-interval", "2s", "--frame-read-timeout", "3s", "--max-connections", "9", "--registration-period", "5s", "-p")
	if err != nil {
		t.Fatal(err)
	}
	if want := "listenAddr=127.0.0.1:7\nbrokerExpiryMs=1000\nscanIntervalMs=2000\nframeReadTimeoutMs=3000\nmaxConnections=9\nregistrationPeriodMs=5000\n"; out != want {
		t.Errorf("-p with file and flags printed %q, want %q", out, want)
	}
}

func TestConfigErrors(t *testing.T) {
	conf := writeConf(t, "listenPort=9999\nkvConfigPath=/tmp/x\n")
	if _, _, err := execute("-c", conf, "-p"); err == nil || !strings.Contains(err.Error(), "kvConfigPath") {
		t.Errorf("unknown key: %v", err)
	}
	if _, _, err := execute("-c", filepath.Join(t.TempDir(), "missing.conf"), "-p"); err == nil {
		t.Error("missing config file accepted")
	}
	if _, _, err := execute("--log-level", "loud", "-p"); err == nil || !strings.Contains(err.Error(), "log-level") {
		t.Errorf("bad log level: %v", err)
	}
	if _, _, err := execute("--listen", "nocolon", "-p"); err == nil {
		t.Error("bad listen address accepted")
	}
	if _, _, err := execute("extra-arg"); err == nil {
		t.Error("positional argument accepted")
	}
	// A zero or negative value given to a flag whose zero means the default is refused, not
	// taken for the default.
	for _, args := range [][]string{
		{"--broker-expiry", "0s"}, {"--scan-interval", "0"}, {"--frame-read-timeout", "0s"}, {"--registration-period", "0s"},
		{"--broker-expiry", "-1s"}, {"--registration-period", "-5s"}, {"--max-connections", "0"}, {"--max-connections", "-1"},
	} {
		out, _, err := execute(append(args, "-p")...)
		if want := args[0] + " "; err == nil || !strings.HasPrefix(err.Error(), want) || !strings.Contains(err.Error(), "must be positive") || out != "" {
			t.Errorf("%q: printed %q, err %v; want an error starting %q, saying it must be positive", args, out, err, want)
		}
	}
}

func TestListenFailure(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	_, _, err = execute("--listen", ln.Addr().String())
	if err == nil || !strings.Contains(err.Error(), "cannot listen on "+ln.Addr().String()) {
		t.Errorf("listening on a busy address: %v", err)
	}
}

func TestServeUntilCancelled(t *testing.T) {
	var out, errOut testutil.SyncBuffer
	cmd := newCommand(&out, &errOut)
	cmd.SetArgs([]string{"--listen", "127.0.0.1:0", "--log-level", "debug"})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- cmd.ExecuteContext(ctx) }()

	const prefix = "petrel-namesrv listening on "
	var addr string
	deadline := time.Now().Add(10 * time.Second)
	for addr == "" {
		if s := out.String(); strings.HasPrefix(s, prefix) && strings.HasSuffix(s, "\n") {
			addr = strings.TrimSpace(strings.TrimPrefix(s, prefix))
			break
		}
		select {
		case err := <-done:
			t.Fatalf("command ended before listening: %v; stderr:\n%s", err, errOut.String())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("no listen line; stdout %q", out.String())
		}
		time.Sleep(2 * time.Millisecond)
	}

	c, err := rpc.Dial(context.Background(), addr, rpc.Options{})
	if err != nil {
		t.Fatal(err)
	}
	callCtx, callCancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer callCancel()
	hdr := &protocol.BrokerHeader{ClusterName: "c", BrokerName: "g", BrokerAddr: "127.0.0.1:10911"}
	list := protocol.TopicConfigList{Topics: []protocol.TopicConfig{{Topic: "T", ReadQueueNums: 4, WriteQueueNums: 4, Perm: protocol.PermReadWrite}}}
	var rh protocol.RegisterBrokerResponseHeader
	if err := c.CallDecode(callCtx, protocol.CodeRegisterBroker, hdr, list.AppendTo(nil), &rh, nil); err != nil {
		t.Fatal(err)
	}
	var rd protocol.TopicRouteData
	if err := c.CallDecode(callCtx, protocol.CodeGetRouteInfoByTopic, &protocol.TopicHeader{Topic: "T"}, nil, nil, &rd); err != nil {
		t.Fatal(err)
	}
	if len(rd.BrokerDatas) != 1 || rd.BrokerDatas[0].MasterAddr() != hdr.BrokerAddr {
		t.Errorf("route %+v", rd)
	}

	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("command after cancel: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("command did not stop after cancel")
	}
	select {
	case <-c.Done():
	case <-time.After(10 * time.Second):
		t.Error("client connection open after shutdown")
	}
	_ = c.Close()
	if log := errOut.String(); !strings.Contains(log, "broker registered") || !strings.Contains(log, "shutting down") {
		t.Errorf("log lacks registration or shutdown:\n%s", log)
	}
}
