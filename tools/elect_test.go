package tools

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/petrel-mq/petrel/client"
	"github.com/petrel-mq/petrel/internal/testutil"
	"github.com/petrel-mq/petrel/protocol"
)

func TestWriteElected(t *testing.T) {
	var out bytes.Buffer
	if err := writeElected(&out, "broker-a", protocol.ElectMasterResponse{BrokerID: 1, MasterAddr: "127.0.0.1:10921", Epoch: 3}); err != nil {
		t.Fatal(err)
	}
	if want := "broker-a: master is now brokerId 1 at 127.0.0.1:10921 (epoch 3)\n"; out.String() != want {
		t.Fatalf("printed %q, want %q", out.String(), want)
	}
	out.Reset()
	_ = writeElected(&out, "broker-b", protocol.ElectMasterResponse{})
	if want := "broker-b: master is now brokerId 0 at - (epoch 0)\n"; out.String() != want {
		t.Fatalf("printed %q, want %q", out.String(), want)
	}
}

// TestElectMasterRejects: bad arguments fail before any request (the NameServer is dead).
func TestElectMasterRejects(t *testing.T) {
	t.Parallel()
	c, a, err := NewAdmin(context.Background(), testutil.FreeAddrs(t, 1)[0], 0, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	for _, tt := range []struct {
		name string
		id   int64
		want string
	}{
		{"", 1, "give -b BROKERNAME"},
		{"broker-a", -1, "-i -1: a brokerId is 0 or more"},
	} {
		var out bytes.Buffer
		if err := ElectMaster(ctx5s(t), &out, a, tt.name, tt.id); err == nil || err.Error() != tt.want || out.Len() != 0 {
			t.Errorf("ElectMaster(%q, %d): %v, printed %q; want %q", tt.name, tt.id, err, out.String(), tt.want)
		}
	}
}

// TestElectMasterTargets: which broker is asked, against a real NameServer: an unknown group
// fails, a group with a master asks the master, a group without one asks the member (forced).
func TestElectMasterTargets(t *testing.T) {
	t.Parallel()
	tc := startCluster(t, "broker-a")
	run := func(name string, id int64) error {
		t.Helper()
		var out bytes.Buffer
		err := ElectMaster(ctx5s(t), &out, tc.admin, name, id)
		if err != nil && out.Len() != 0 {
			t.Errorf("ElectMaster(%q, %d) failed (%v) but printed %q", name, id, err, out.String())
		}
		return err
	}
	if err := run("broker-x", 1); !errors.Is(err, client.ErrUnknownBroker) || !strings.Contains(err.Error(), `no broker group "broker-x"`) {
		t.Fatalf("unknown group: %v", err)
	}
	// A master whose address is dead: it is the one asked, and the error names it.
	master := tc.c.RegisterDead("broker-c", 0)
	if err := run("broker-c", 1); !errors.Is(err, client.ErrBrokerUnavailable) || !strings.Contains(err.Error(), "(master "+master+")") {
		t.Fatalf("dead master: %v", err)
	}
	// No master: the member itself is asked; an id that is not live is unknown.
	slave := tc.c.RegisterDead("broker-d", 2)
	if err := run("broker-d", 2); !errors.Is(err, client.ErrBrokerUnavailable) || !strings.Contains(err.Error(), "(no master, forced on "+slave+")") {
		t.Fatalf("no master: %v", err)
	}
	if err := run("broker-d", 1); !errors.Is(err, client.ErrUnknownBroker) || !strings.Contains(err.Error(), "(live: 2 at "+slave+")") {
		t.Fatalf("unknown member: %v", err)
	}
}
