// Package netns builds small private networks out of Linux network namespaces and cuts them
// apart, for fault-injection runs: named namespaces (ip netns), a bridge in one of them, a veth
// pair from the bridge into each of the others, and iptables chains in every namespace whose
// DROP rules make partitions that heal by flushing the chains.
//
// It drives iproute2 and iptables as processes (ip, iptables-restore) rather than netlink, so
// what it does can be repeated by hand, and opens sockets inside a namespace by switching one
// OS thread into it (Dial, Listen). Everything needs root (CAP_NET_ADMIN, CAP_SYS_ADMIN).
package netns

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// Dir is where ip netns keeps its named namespaces (one bind-mounted file each).
const Dir = "/var/run/netns"

// Chain names: every namespace prepared with InitFilter jumps from INPUT to ChainIn and from
// OUTPUT to ChainOut, and partitions only ever add rules to these two chains, so a heal is a
// flush that cannot touch anything else.
const (
	ChainIn  = "CHAOS-IN"
	ChainOut = "CHAOS-OUT"
)

// cmdTimeout bounds each ip or iptables invocation: they finish in milliseconds, and one that
// hangs (a stuck xtables lock) must not hang the caller.
const cmdTimeout = 30 * time.Second

// run runs name with args, stdin as its input, and returns its error with its output.
func run(stdin string, name string, args ...string) error {
	ctx, cancel := context.WithTimeout(context.Background(), cmdTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, name, args...)
	if stdin != "" {
		cmd.Stdin = strings.NewReader(stdin)
	}
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("%s %s: %w: %s", name, strings.Join(args, " "), err, strings.TrimSpace(out.String()))
	}
	return nil
}

// Add creates the named namespace with its loopback up.
func Add(name string) error {
	if err := run("", "ip", "netns", "add", name); err != nil {
		return err
	}
	return run("", "ip", "-n", name, "link", "set", "lo", "up")
}

// Delete removes the named namespace. Its interfaces go with it once no process is left in it
// (a veth pair disappears when either end does); kill those processes first (Pids).
func Delete(name string) error {
	return run("", "ip", "netns", "delete", name)
}

// List returns the names of the namespaces ip netns knows.
func List() ([]string, error) {
	ents, err := os.ReadDir(Dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	names := make([]string, 0, len(ents))
	for _, e := range ents {
		names = append(names, e.Name())
	}
	return names, nil
}

// Pids returns the processes running in the named namespace.
func Pids(name string) ([]int, error) {
	out, err := exec.Command("ip", "netns", "pids", name).Output()
	if err != nil {
		return nil, fmt.Errorf("ip netns pids %s: %w", name, err)
	}
	var pids []int
	for _, f := range strings.Fields(string(out)) {
		if p, err := strconv.Atoi(f); err == nil {
			pids = append(pids, p)
		}
	}
	return pids, nil
}

// Command returns a command that runs path with args inside the named namespace. ip netns exec
// execs path, so once started the command's pid is path's own.
func Command(ns, path string, args ...string) *exec.Cmd {
	return exec.Command("ip", append([]string{"netns", "exec", ns, path}, args...)...)
}

// AddBridge creates bridge device dev, up, in namespace ns.
func AddBridge(ns, dev string) error {
	if err := run("", "ip", "-n", ns, "link", "add", dev, "type", "bridge"); err != nil {
		return err
	}
	return run("", "ip", "-n", ns, "link", "set", dev, "up")
}

// AddVeth connects namespace ns to the bridge bridgeDev of namespace bridgeNS: a veth pair
// created inside bridgeNS (so that its names never meet another run's in the root namespace),
// one end bridgePort enslaved to the bridge, the other moved into ns as dev with address
// prefix (e.g. 10.213.0.11/24), both up.
func AddVeth(bridgeNS, bridgeDev, bridgePort, ns, dev string, prefix netip.Prefix) error {
	steps := [][]string{
		{"-n", bridgeNS, "link", "add", bridgePort, "type", "veth", "peer", "name", dev, "netns", ns},
		{"-n", bridgeNS, "link", "set", bridgePort, "master", bridgeDev},
		{"-n", bridgeNS, "link", "set", bridgePort, "up"},
		{"-n", ns, "addr", "add", prefix.String(), "dev", dev},
		{"-n", ns, "link", "set", dev, "up"},
	}
	for _, s := range steps {
		if err := run("", "ip", s...); err != nil {
			return err
		}
	}
	return nil
}

// iptablesRestore applies rules (iptables-restore lines of the filter table, without the
// *filter and COMMIT lines) in namespace ns in one transaction, leaving other rules alone.
func iptablesRestore(ns string, rules ...string) error {
	in := "*filter\n" + strings.Join(rules, "\n") + "\nCOMMIT\n"
	return run(in, "ip", "netns", "exec", ns, "iptables-restore", "--noflush", "--wait", "10")
}

// InitFilter creates ChainIn and ChainOut in namespace ns and jumps to them from INPUT and
// OUTPUT. Call it once per namespace.
func InitFilter(ns string) error {
	return iptablesRestore(ns,
		":"+ChainIn+" - [0:0]",
		":"+ChainOut+" - [0:0]",
		"-A INPUT -j "+ChainIn,
		"-A OUTPUT -j "+ChainOut)
}

// Block drops every packet between namespace ns and each of peers, in both directions, inside
// ns. A partition between two namespaces blocks in both (each with the other's address), so
// that it holds whichever side a packet is checked on.
func Block(ns string, peers ...netip.Addr) error {
	var rules []string
	for _, p := range peers {
		rules = append(rules,
			fmt.Sprintf("-A %s -s %s -j DROP", ChainIn, p),
			fmt.Sprintf("-A %s -d %s -j DROP", ChainOut, p))
	}
	return iptablesRestore(ns, rules...)
}

// Isolate drops every packet in and out of interface dev of namespace ns: the namespace keeps
// only its loopback.
func Isolate(ns, dev string) error {
	return iptablesRestore(ns,
		fmt.Sprintf("-A %s -i %s -j DROP", ChainIn, dev),
		fmt.Sprintf("-A %s -o %s -j DROP", ChainOut, dev))
}

// Heal removes every rule Block and Isolate added in namespace ns.
func Heal(ns string) error {
	return iptablesRestore(ns, "-F "+ChainIn, "-F "+ChainOut)
}

// Rules returns the rules of ChainIn and ChainOut in namespace ns (iptables -S), for reports.
func Rules(ns string) (string, error) {
	var b strings.Builder
	for _, c := range []string{ChainIn, ChainOut} {
		out, err := exec.Command("ip", "netns", "exec", ns, "iptables", "--wait", "10", "-S", c).CombinedOutput()
		if err != nil {
			return "", fmt.Errorf("iptables -S %s in %s: %w: %s", c, ns, err, strings.TrimSpace(string(out)))
		}
		b.Write(out)
	}
	return b.String(), nil
}

// Do runs fn on an OS thread that has entered namespace ns, and returns its error. Sockets fn
// creates belong to ns for their whole life, whichever thread uses them later. The thread is
// never handed back to the runtime: a goroutine that ends while locked to its thread ends the
// thread too, so no other goroutine ever runs in ns by accident.
func Do(ns string, fn func() error) error {
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		f, err := os.Open(filepath.Join(Dir, ns))
		if err != nil {
			errc <- err
			return
		}
		err = unix.Setns(int(f.Fd()), unix.CLONE_NEWNET)
		_ = f.Close()
		if err != nil {
			errc <- fmt.Errorf("setns %s: %w", ns, err)
			return
		}
		errc <- fn()
	}()
	return <-errc
}

// Dial opens a TCP connection to addr from inside namespace ns, giving up after timeout.
func Dial(ns, addr string, timeout time.Duration) (net.Conn, error) {
	var c net.Conn
	err := Do(ns, func() error {
		var err error
		c, err = net.DialTimeout("tcp", addr, timeout)
		return err
	})
	return c, err
}

// Listen opens a TCP listener on addr inside namespace ns.
func Listen(ns, addr string) (net.Listener, error) {
	var l net.Listener
	err := Do(ns, func() error {
		var err error
		l, err = net.Listen("tcp", addr)
		return err
	})
	return l, err
}
