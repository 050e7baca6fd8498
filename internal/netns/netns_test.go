package netns

import (
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"testing"
	"time"
)

// testNet builds a bridge namespace and two namespaces joined to it, removed at the end; it
// skips the test when the machine cannot (not root, no iproute2 or iptables, no netns).
func testNet(t *testing.T) (a, b string, addrA, addrB netip.Addr) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("netns: cannot create network namespaces: not root")
	}
	prefix := fmt.Sprintf("netns-test-%d-", os.Getpid())
	br, a, b := prefix+"br", prefix+"a", prefix+"b"
	addrA, addrB = netip.MustParseAddr("10.214.0.1"), netip.MustParseAddr("10.214.0.2")
	var made []string
	t.Cleanup(func() {
		for _, ns := range made {
			if err := Delete(ns); err != nil {
				t.Errorf("cleanup: %v", err)
			}
		}
	})
	step := func(err error) {
		t.Helper()
		if err != nil {
			t.Skipf("netns: cannot create network namespaces: %v", err)
		}
	}
	step(Add(br))
	made = append(made, br)
	step(AddBridge(br, "br0"))
	for _, n := range []struct {
		ns   string
		addr netip.Addr
	}{{a, addrA}, {b, addrB}} {
		step(Add(n.ns))
		made = append(made, n.ns)
		step(AddVeth(br, "br0", "v-"+n.ns[len(prefix):], n.ns, "eth0", netip.PrefixFrom(n.addr, 24)))
		step(InitFilter(n.ns))
	}
	return a, b, addrA, addrB
}

// reaches reports whether a connection from namespace from to addr gets the listener's token.
func reaches(t *testing.T, from, addr, token string) bool {
	t.Helper()
	c, err := Dial(from, addr, 300*time.Millisecond)
	if err != nil {
		return false
	}
	defer c.Close()
	_ = c.SetReadDeadline(time.Now().Add(300 * time.Millisecond))
	buf := make([]byte, len(token))
	_, err = io.ReadFull(c, buf)
	return err == nil && string(buf) == token
}

func TestPartitionAndHeal(t *testing.T) {
	a, b, addrA, addrB := testNet(t)
	const token = "netns-test\n"
	serve := func(ns string, addr netip.Addr) string {
		hp := netip.AddrPortFrom(addr, 10999).String()
		l, err := Listen(ns, hp)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = l.Close() })
		go func() {
			for {
				c, err := l.Accept()
				if err != nil {
					return
				}
				_, _ = io.WriteString(c, token)
				_ = c.Close()
			}
		}()
		return hp
	}
	toA, toB := serve(a, addrA), serve(b, addrB)
	check := func(when string, wantAB, wantBA bool) {
		t.Helper()
		if got := reaches(t, a, toB, token); got != wantAB {
			t.Errorf("%s: a reaches b: %t, want %t", when, got, wantAB)
		}
		if got := reaches(t, b, toA, token); got != wantBA {
			t.Errorf("%s: b reaches a: %t, want %t", when, got, wantBA)
		}
	}
	check("before any rule", true, true)

	// Rules in one namespace only block both ways: the DROP covers input and output.
	if err := Block(a, addrB); err != nil {
		t.Fatal(err)
	}
	check("a blocks b", false, false)
	if err := Heal(a); err != nil {
		t.Fatal(err)
	}
	check("healed", true, true)

	if err := Isolate(b, "eth0"); err != nil {
		t.Fatal(err)
	}
	check("b isolated", false, false)
	rules, err := Rules(b)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("rules of an isolated namespace:\n%s", rules)
	if err := Heal(b); err != nil {
		t.Fatal(err)
	}
	check("healed", true, true)

	// A namespace's loopback keeps working while it is isolated.
	if err := Isolate(a, "eth0"); err != nil {
		t.Fatal(err)
	}
	if !reaches(t, a, toA, token) {
		t.Error("an isolated namespace cannot reach its own address")
	}
	if err := Heal(a); err != nil {
		t.Fatal(err)
	}
}

func TestDoStaysInNamespace(t *testing.T) {
	a, _, addrA, _ := testNet(t)
	var ifaces []net.Interface
	if err := Do(a, func() error {
		var err error
		ifaces, err = net.Interfaces()
		return err
	}); err != nil {
		t.Fatal(err)
	}
	names := map[string]bool{}
	for _, i := range ifaces {
		names[i.Name] = true
	}
	if !names["eth0"] || !names["lo"] || len(names) != 2 {
		t.Errorf("interfaces seen inside %s: %v, want lo and eth0", a, names)
	}
	// The calling goroutine is not in the namespace: its own interfaces have no addrA.
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		t.Fatal(err)
	}
	for _, ad := range addrs {
		if p, err := netip.ParsePrefix(ad.String()); err == nil && p.Addr() == addrA {
			t.Errorf("the caller's namespace has %s: Do leaked its namespace", addrA)
		}
	}
	pids, err := Pids(a)
	if err != nil || len(pids) != 0 {
		t.Errorf("Pids(%s) = %v, %v; want none", a, pids, err)
	}
	found := false
	list, err := List()
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range list {
		found = found || n == a
	}
	if !found {
		t.Errorf("List() = %v lacks %s", list, a)
	}
}
