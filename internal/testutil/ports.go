package testutil

import (
	"math/rand/v2"
	"net"
	"os"
	"strconv"
	"strings"
)

// Ports are picked at random from [lowestPort, the start of the kernel's ephemeral range).
const (
	lowestPort = 20000
	// defaultEphemeralStart is Linux's default start of the ephemeral range, used when
	// /proc/sys/net/ipv4/ip_local_port_range cannot be read.
	defaultEphemeralStart = 32768
	// portTries bounds the random picks FreePorts makes (a pick fails when something listens
	// on the port).
	portTries = 10000
)

// FreePorts returns n distinct TCP ports of 127.0.0.1 on which nothing listened when it
// returned, for servers a test starts later at known addresses: a broker restarted on the port
// it had, the members of a Raft group written into each other's peer lists before they start,
// or an address that must refuse connections. Each port lies below the kernel's ephemeral
// range (net.ipv4.ip_local_port_range), the ports the kernel gives to outgoing connections and
// to listeners on port 0, so that none of those can take it while the test's server is down or
// not started yet. All n are held open together while they are picked, so they differ. It
// fails t when n such ports cannot be found.
func FreePorts(t TB, n int) []int {
	t.Helper()
	hi := ephemeralStart()
	if hi-lowestPort < 1000 {
		t.Fatalf("the ephemeral port range starts at %d: no room below it for test ports", hi)
		return nil
	}
	var lns []net.Listener
	defer func() {
		for _, ln := range lns {
			_ = ln.Close()
		}
	}()
	ports := make([]int, 0, n)
	for tries := 0; len(ports) < n; tries++ {
		if tries == portTries {
			t.Fatalf("found %d free ports in [%d, %d) after %d tries, want %d", len(ports), lowestPort, hi, portTries, n)
			return nil
		}
		ln, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(lowestPort+rand.IntN(hi-lowestPort))))
		if err != nil {
			continue
		}
		lns = append(lns, ln)
		ports = append(ports, ln.Addr().(*net.TCPAddr).Port)
	}
	return ports
}

// FreeAddrs is FreePorts as "127.0.0.1:port" addresses.
func FreeAddrs(t TB, n int) []string {
	t.Helper()
	var addrs []string
	for _, p := range FreePorts(t, n) {
		addrs = append(addrs, net.JoinHostPort("127.0.0.1", strconv.Itoa(p)))
	}
	return addrs
}

// ephemeralStart returns the first port of the kernel's ephemeral range.
func ephemeralStart() int {
	b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err != nil {
		return defaultEphemeralStart
	}
	if lo, ok := parsePortRange(string(b)); ok {
		return lo
	}
	return defaultEphemeralStart
}

// parsePortRange returns the first port of the contents of ip_local_port_range ("32768\t60999\n").
func parsePortRange(s string) (int, bool) {
	f := strings.Fields(s)
	if len(f) != 2 {
		return 0, false
	}
	lo, err := strconv.Atoi(f[0])
	if err != nil || lo <= 0 || lo > 65535 {
		return 0, false
	}
	return lo, true
}
