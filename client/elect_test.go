package client

import (
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/petrel-mq/petrel/internal/fakebroker"
	"github.com/petrel-mq/petrel/protocol"
	"github.com/petrel-mq/petrel/protocol/rpc"
)

// electRecorder records the ELECT_MASTER requests a fake broker receives and answers them with
// its answer function; without one the broker answers as a group with static roles.
type electRecorder struct {
	mu   sync.Mutex
	got  []protocol.ElectMasterRequest
	with func(h *protocol.ElectMasterRequest) rpc.Reply
}

func recordElects(b *fakebroker.Broker) *electRecorder {
	r := &electRecorder{}
	b.Control(protocol.CodeElectMaster, func(req *rpc.Request) (rpc.Reply, fakebroker.Verdict) {
		var h protocol.ElectMasterRequest
		if err := h.ReadFrom(req.Header); err != nil {
			return rpc.Reply{}, fakebroker.Pass
		}
		r.mu.Lock()
		defer r.mu.Unlock()
		r.got = append(r.got, h)
		if r.with == nil {
			return rpc.Reply{}, fakebroker.Pass
		}
		return r.with(&h), fakebroker.Answer
	})
	return r
}

func (r *electRecorder) answer(f func(h *protocol.ElectMasterRequest) rpc.Reply) {
	r.mu.Lock()
	r.with = f
	r.mu.Unlock()
}

func (r *electRecorder) requests() []protocol.ElectMasterRequest {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.got)
}

// TestElectMaster: the request goes to the group's master when the cluster table lists one, and
// to the member to promote, with Force, when it does not; unknown groups and members fail
// without a request.
func TestElectMaster(t *testing.T) {
	fc := fakebroker.New(t)
	a := fc.AddGroup("broker-a", 2, nil).Members()
	b := fc.AddGroup("broker-b", 0, nil).Members()
	admin := NewAdmin(newTestClient(t, fc.Addr()))
	ctx := testCtx(t, 10*time.Second)
	elected := func(addr string) func(h *protocol.ElectMasterRequest) rpc.Reply {
		return func(h *protocol.ElectMasterRequest) rpc.Reply {
			return rpc.Reply{Header: &protocol.ElectMasterResponse{BrokerID: h.BrokerID, MasterAddr: addr, Epoch: 3}}
		}
	}
	elects := map[*fakebroker.Broker]*electRecorder{}
	for _, m := range append(slices.Clone(a), b...) {
		elects[m] = recordElects(m)
	}
	for _, m := range a {
		elects[m].answer(elected(a[2].Addr()))
	}
	wantRequests := func(m *fakebroker.Broker, want ...protocol.ElectMasterRequest) {
		t.Helper()
		got := elects[m].requests()
		if len(got) != len(want) {
			t.Fatalf("broker %s/%d got %+v, want %+v", m.Name(), m.ID(), got, want)
		}
		for i := range want {
			if got[i] != want[i] {
				t.Fatalf("broker %s/%d got %+v, want %+v", m.Name(), m.ID(), got, want)
			}
		}
	}

	// With a master: the master is asked, without Force.
	resp, err := admin.ElectMaster(ctx, "broker-a", 2)
	if err != nil || resp != (protocol.ElectMasterResponse{BrokerID: 2, MasterAddr: a[2].Addr(), Epoch: 3}) {
		t.Fatalf("ElectMaster: %+v %v", resp, err)
	}
	wantRequests(a[0], protocol.ElectMasterRequest{BrokerName: "broker-a", BrokerID: 2})
	wantRequests(a[1])
	wantRequests(a[2])

	// A brokerId the table does not list still goes to the master, which decides (the master is
	// listed as 0 whatever its configured brokerId); its refusal comes back as the status.
	elects[a[0]].answer(func(h *protocol.ElectMasterRequest) rpc.Reply {
		return rpc.Errorf(protocol.StatusServiceNotAvailable, "no member with brokerId %d", h.BrokerID)
	})
	_, err = admin.ElectMaster(ctx, "broker-a", 7)
	if s, ok := StatusOf(err); !ok || s != protocol.StatusServiceNotAvailable || !strings.Contains(err.Error(), "master "+a[0].Addr()) ||
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
	fc.SetRegistered(a[0], false)
	resp, err = admin.ElectMaster(ctx, "broker-a", 1)
	if err != nil || resp != (protocol.ElectMasterResponse{BrokerID: 1, MasterAddr: a[2].Addr(), Epoch: 3}) {
		t.Fatalf("forced ElectMaster: %+v %v", resp, err)
	}
	wantRequests(a[1], protocol.ElectMasterRequest{BrokerName: "broker-a", BrokerID: 1, Force: true})
	wantRequests(a[2])
	if n := len(elects[a[0]].requests()); n != 2 {
		t.Fatalf("the hidden master got %d requests, want the 2 of before", n)
	}
	// ... and a member that is not live is unknown: nothing is sent.
	_, err = admin.ElectMaster(ctx, "broker-a", 0)
	if !errors.Is(err, ErrUnknownBroker) || !strings.Contains(err.Error(), "1 at "+a[1].Addr()+", 2 at "+a[2].Addr()) {
		t.Fatalf("dead member: %v", err)
	}
	// A failure of the forced member names it.
	elects[a[1]].answer(func(*protocol.ElectMasterRequest) rpc.Reply {
		return rpc.Errorf(protocol.StatusSystemError, "cannot open the log")
	})
	if _, err := admin.ElectMaster(ctx, "broker-a", 1); !errors.Is(err, protocol.StatusSystemError) || !strings.Contains(err.Error(), "no master, forced on "+a[1].Addr()) {
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
	if n := len(elects[a[1]].requests()); n != 2 {
		t.Fatalf("member 1 got %d requests, want 2", n)
	}
}

// TestElectMasterNameServerDown: the NameServer's failure is returned as such.
func TestElectMasterNameServerDown(t *testing.T) {
	fc := fakebroker.New(t)
	admin := NewAdmin(newTestClient(t, fc.Addr(), WithRequestTimeout(time.Second)))
	fc.StopNameServer()
	if _, err := admin.ElectMaster(testCtx(t, 10*time.Second), "broker-a", 1); !errors.Is(err, ErrNameServerUnavailable) {
		t.Fatalf("%v", err)
	}
}
