package client

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/petrel-mq/petrel/protocol"
	"github.com/petrel-mq/petrel/protocol/rpc"
)

// TestElectMaster: the request goes to the group's master when the cluster table lists one, and
// to the member to promote, with Force, when it does not; unknown groups and members fail
// without a request.
func TestElectMaster(t *testing.T) {
	fc := newFakeCluster(t)
	a := fc.addGroup("broker-a", 2, nil)
	b := fc.addGroup("broker-b", 0, nil)
	admin := NewAdmin(newTestClient(t, fc.addr))
	ctx := testCtx(t, 10*time.Second)
	elected := func(addr string) func(h *protocol.ElectMasterRequest) rpc.Reply {
		return func(h *protocol.ElectMasterRequest) rpc.Reply {
			return rpc.Reply{Header: &protocol.ElectMasterResponse{BrokerID: h.BrokerID, MasterAddr: addr, Epoch: 3}}
		}
	}
	for _, m := range a {
		m.setElectHook(elected(a[2].addr))
	}
	wantRequests := func(m *fakeBroker, want ...protocol.ElectMasterRequest) {
		t.Helper()
		got := m.electRequests()
		if len(got) != len(want) {
			t.Fatalf("broker %s/%d got %+v, want %+v", m.name, m.id, got, want)
		}
		for i := range want {
			if got[i] != want[i] {
				t.Fatalf("broker %s/%d got %+v, want %+v", m.name, m.id, got, want)
			}
		}
	}

	// With a master: the master is asked, without Force.
	resp, err := admin.ElectMaster(ctx, "broker-a", 2)
	if err != nil || resp != (protocol.ElectMasterResponse{BrokerID: 2, MasterAddr: a[2].addr, Epoch: 3}) {
		t.Fatalf("ElectMaster: %+v %v", resp, err)
	}
	wantRequests(a[0], protocol.ElectMasterRequest{BrokerName: "broker-a", BrokerID: 2})
	wantRequests(a[1])
	wantRequests(a[2])

	// A brokerId the table does not list still goes to the master, which decides (the master is
	// listed as 0 whatever its configured brokerId); its refusal comes back as the status.
	a[0].setElectHook(func(h *protocol.ElectMasterRequest) rpc.Reply {
		return rpc.Errorf(protocol.StatusServiceNotAvailable, "no member with brokerId %d", h.BrokerID)
	})
	_, err = admin.ElectMaster(ctx, "broker-a", 7)
	if s, ok := StatusOf(err); !ok || s != protocol.StatusServiceNotAvailable || !strings.Contains(err.Error(), "master "+a[0].addr) ||
		!strings.Contains(err.Error(), "no member with brokerId 7") {
		t.Fatalf("refused election: %v", err)
	}
	wantRequests(a[0], protocol.ElectMasterRequest{BrokerName: "broker-a", BrokerID: 2}, protocol.ElectMasterRequest{BrokerName: "broker-a", BrokerID: 7})

	// A group with static roles answers REQUEST_CODE_NOT_SUPPORTED.
	if _, err := admin.ElectMaster(ctx, "broker-b", 0); !errors.Is(err, protocol.StatusRequestCodeNotSupported) {
		t.Fatalf("static group: %v", err)
	}
	wantRequests(b[0], protocol.ElectMasterRequest{BrokerName: "broker-b", BrokerID: 0})

	// Without a master: the member to promote is asked, with Force.
	fc.setHidden(a[0], true)
	resp, err = admin.ElectMaster(ctx, "broker-a", 1)
	if err != nil || resp != (protocol.ElectMasterResponse{BrokerID: 1, MasterAddr: a[2].addr, Epoch: 3}) {
		t.Fatalf("forced ElectMaster: %+v %v", resp, err)
	}
	wantRequests(a[1], protocol.ElectMasterRequest{BrokerName: "broker-a", BrokerID: 1, Force: true})
	wantRequests(a[2])
	if n := len(a[0].electRequests()); n != 2 {
		t.Fatalf("the hidden master got %d requests, want the 2 of before", n)
	}
	// ... and a member that is not live is unknown: nothing is sent.
	_, err = admin.ElectMaster(ctx, "broker-a", 0)
	if !errors.Is(err, ErrUnknownBroker) || !strings.Contains(err.Error(), "1 at "+a[1].addr+", 2 at "+a[2].addr) {
		t.Fatalf("dead member: %v", err)
	}
	// A failure of the forced member names it.
	a[1].setElectHook(func(*protocol.ElectMasterRequest) rpc.Reply {
		return rpc.Errorf(protocol.StatusSystemError, "cannot open the log")
	})
	if _, err := admin.ElectMaster(ctx, "broker-a", 1); !errors.Is(err, protocol.StatusSystemError) || !strings.Contains(err.Error(), "no master, forced on "+a[1].addr) {
		t.Fatalf("forced failure: %v", err)
	}

	// Unknown group, bad arguments: nothing is sent.
	if _, err := admin.ElectMaster(ctx, "broker-z", 1); !errors.Is(err, ErrUnknownBroker) || !strings.Contains(err.Error(), `"broker-z"`) {
		t.Fatalf("unknown group: %v", err)
	}
	if _, err := admin.ElectMaster(ctx, "", 1); err == nil {
		t.Fatal("no broker name: no error")
	}
	if _, err := admin.ElectMaster(ctx, "broker-a", -1); err == nil {
		t.Fatal("negative brokerId: no error")
	}
	wantRequests(a[2])
	if n := len(a[1].electRequests()); n != 2 {
		t.Fatalf("member 1 got %d requests, want 2", n)
	}
}

// TestElectMasterNameServerDown: the NameServer's failure is returned as such.
func TestElectMasterNameServerDown(t *testing.T) {
	fc := newFakeCluster(t)
	admin := NewAdmin(newTestClient(t, fc.addr, WithRequestTimeout(time.Second)))
	_ = fc.srv.Close()
	if _, err := admin.ElectMaster(testCtx(t, 10*time.Second), "broker-a", 1); !errors.Is(err, ErrNameServerUnavailable) {
		t.Fatalf("%v", err)
	}
}
