package main

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/petrel-mq/petrel/internal/netns"
)

// namePrefix starts every namespace and run directory name, followed by the harness's pid: an
// earlier run is dead when no petrel-chaos process has its pid (removeStale).
const namePrefix = "petrel-chaos-"

// The bridge namespace's device and the interface name inside every other namespace.
const (
	bridgeDev = "br0"
	nodeDev   = "eth0"
)

// Ports every process of the cluster uses on its own address.
const (
	namesrvPort = 9876
	brokerPort  = 10911 // listenPort; haListenPort is +1, the Raft port +2
)

// node is one network namespace of the run, joined to the bridge.
type node struct {
	// name is short ("a1", "ns1"); ns the namespace's name (prefix + name).
	name string
	ns   string
	addr netip.Addr
}

// nodeHosts gives each node's host number in the subnet.
var nodeHosts = []struct {
	name string
	host byte
}{
	{"ns1", 2}, {"ctl", 3}, {"bench", 4}, {"ns2", 5}, {"ns3", 6},
	{"a1", 11}, {"a2", 12}, {"a3", 13},
	{"b1", 21}, {"b2", 22},
}

// topology is the run's namespaces: the bridge's and one per node.
type topology struct {
	prefix   string
	bridgeNS string
	subnet   netip.Prefix
	nodes    map[string]*node
	made     []string // namespaces created, for teardown
}

func newTopology(prefix string, subnet netip.Prefix) *topology {
	t := &topology{prefix: prefix, bridgeNS: prefix + "br", subnet: subnet, nodes: map[string]*node{}}
	base := subnet.Addr().As4()
	for _, nh := range nodeHosts {
		a := base
		a[3] += nh.host
		t.nodes[nh.name] = &node{name: nh.name, ns: prefix + nh.name, addr: netip.AddrFrom4(a)}
	}
	return t
}

// create makes the bridge namespace and every node's namespace with its veth pair, address and
// filter chains.
func (t *topology) create() error {
	if err := netns.Add(t.bridgeNS); err != nil {
		return err
	}
	t.made = append(t.made, t.bridgeNS)
	if err := netns.AddBridge(t.bridgeNS, bridgeDev); err != nil {
		return err
	}
	for _, nh := range nodeHosts {
		n := t.nodes[nh.name]
		if err := netns.Add(n.ns); err != nil {
			return err
		}
		t.made = append(t.made, n.ns)
		pfx := netip.PrefixFrom(n.addr, t.subnet.Bits())
		if err := netns.AddVeth(t.bridgeNS, bridgeDev, "v-"+n.name, n.ns, nodeDev, pfx); err != nil {
			return err
		}
		if err := netns.InitFilter(n.ns); err != nil {
			return err
		}
	}
	return nil
}

// destroy kills whatever still runs in the namespaces made and deletes them.
func (t *topology) destroy() error {
	var errs []error
	for i := len(t.made) - 1; i >= 0; i-- {
		ns := t.made[i]
		killNamespace(ns)
		if err := netns.Delete(ns); err != nil {
			errs = append(errs, err)
		}
	}
	t.made = nil
	return errors.Join(errs...)
}

// healAll removes every partition rule of the run.
func (t *topology) healAll() error {
	var errs []error
	for _, nh := range nodeHosts {
		if err := netns.Heal(t.nodes[nh.name].ns); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// cut partitions a from b: DROP rules both ways in both namespaces.
func (t *topology) cut(a, b *node) error {
	return errors.Join(netns.Block(a.ns, b.addr), netns.Block(b.ns, a.addr))
}

// isolate cuts n from every other namespace.
func (t *topology) isolate(n *node) error {
	return netns.Isolate(n.ns, nodeDev)
}

// killNamespace kills every process left in namespace ns.
func killNamespace(ns string) {
	pids, _ := netns.Pids(ns)
	for _, p := range pids {
		_ = syscall.Kill(p, syscall.SIGCONT)
		_ = syscall.Kill(p, syscall.SIGKILL)
	}
}

// runAlive reports whether the run of harness pid still lives: a petrel-chaos process has
// that pid.
func runAlive(pid int) bool {
	comm, err := os.ReadFile(fmt.Sprintf("/proc/%d/comm", pid))
	return err == nil && strings.TrimSpace(string(comm)) == "petrel-chaos"
}

// stalePid returns the harness pid in a name made by a run ("petrel-chaos-<pid>-..."), and
// whether that run is dead.
func stalePid(name string) (int, bool) {
	rest, ok := strings.CutPrefix(name, namePrefix)
	if !ok {
		return 0, false
	}
	p, _, _ := strings.Cut(rest, "-")
	pid, err := strconv.Atoi(p)
	if err != nil || pid == os.Getpid() {
		return 0, false
	}
	return pid, !runAlive(pid)
}

// storeMountRE finds a run directory's store mounts in a mount point.
var storeMountRE = regexp.MustCompile(`/` + namePrefix + `(\d+)-[^/]*/store/`)

// removeStale removes what runs that died left behind: processes in their namespaces, the
// namespaces, and their tmpfs stores (unmounted lazily; the run directories with their logs
// stay). It reports what it removed to w.
func removeStale(w io.Writer) error {
	names, err := netns.List()
	if err != nil {
		return err
	}
	var errs []error
	for _, n := range names {
		if _, dead := stalePid(n); !dead {
			continue
		}
		killNamespace(n)
		if err := netns.Delete(n); err != nil {
			errs = append(errs, err)
			continue
		}
		fmt.Fprintf(w, "chaos: removed namespace %s of a run that died\n", n)
	}
	mounts, err := tmpfsMounts()
	if err != nil {
		return errors.Join(append(errs, err)...)
	}
	for _, mp := range mounts {
		m := storeMountRE.FindStringSubmatch(mp + "/")
		if m == nil {
			continue
		}
		if pid, _ := strconv.Atoi(m[1]); pid == os.Getpid() || runAlive(pid) {
			continue
		}
		if err := unix.Unmount(mp, unix.MNT_DETACH); err != nil {
			errs = append(errs, fmt.Errorf("umount %s: %w", mp, err))
			continue
		}
		fmt.Fprintf(w, "chaos: unmounted store %s of a run that died\n", mp)
	}
	return errors.Join(errs...)
}

// tmpfsMounts returns the mount points of every tmpfs of this mount namespace.
func tmpfsMounts() ([]string, error) {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var out []string
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		// ID PARENT MAJ:MIN ROOT MOUNTPOINT OPTS [OPTIONAL...] - FSTYPE SOURCE SUPEROPTS
		fields := strings.Fields(sc.Text())
		if len(fields) < 10 {
			continue
		}
		for i := 6; i < len(fields)-1; i++ {
			if fields[i] == "-" {
				if fields[i+1] == "tmpfs" {
					out = append(out, unescapeMount(fields[4]))
				}
				break
			}
		}
	}
	return out, sc.Err()
}

// unescapeMount undoes mountinfo's octal escapes (\040 for a space).
func unescapeMount(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			if v, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(v))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// store is one broker's store root on a tmpfs of its own.
type store struct {
	dir  string
	size int64
	// filler is the file fill made, "" when the store is not filled.
	filler  string
	mounted bool
}

// mount mounts the store's tmpfs (size bytes at most) on its directory.
func (s *store) mount() error {
	if err := os.MkdirAll(s.dir, 0o755); err != nil {
		return err
	}
	if err := unix.Mount("tmpfs", s.dir, "tmpfs", 0, fmt.Sprintf("size=%d,mode=0755", s.size)); err != nil {
		return fmt.Errorf("mount tmpfs on %s: %w", s.dir, err)
	}
	s.mounted = true
	return nil
}

// unmount unmounts the store's tmpfs; with keep it first copies the store off it, into the
// same path once unmounted.
func (s *store) unmount(keep bool) error {
	if !s.mounted {
		return nil
	}
	s.mounted = false
	kept := s.dir + ".kept"
	if keep {
		if err := copyTree(s.dir, kept); err != nil {
			_ = os.RemoveAll(kept)
			return errors.Join(fmt.Errorf("cannot keep the store %s: %w", s.dir, err), s.unmountOnly())
		}
	}
	if err := s.unmountOnly(); err != nil {
		return err
	}
	if keep {
		if err := os.Remove(s.dir); err != nil {
			return err
		}
		return os.Rename(kept, s.dir)
	}
	return nil
}

// unmountOnly unmounts the tmpfs, lazily when it is busy.
func (s *store) unmountOnly() error {
	if err := unix.Unmount(s.dir, 0); err != nil {
		if err2 := unix.Unmount(s.dir, unix.MNT_DETACH); err2 != nil {
			return fmt.Errorf("umount %s: %w", s.dir, err)
		}
	}
	return nil
}

// usage returns the bytes in use on the store's filesystem.
func (s *store) usage() (int64, error) {
	var st unix.Statfs_t
	if err := unix.Statfs(s.dir, &st); err != nil {
		return 0, err
	}
	return int64(st.Blocks-st.Bfree) * st.Bsize, nil
}

// fillSlack is what the shrunk tmpfs leaves above the bytes in use before the filler takes it.
const fillSlack = 4 << 20

// fill makes the store's filesystem full: it shrinks the tmpfs to what is in use plus
// fillSlack (a remount; tmpfs refuses a size below its use, so a broker writing meanwhile only
// makes it try again), then writes a filler file until ENOSPC. Shrinking first keeps the filler
// small: filling a multi-GiB cap would take that much memory.
func (s *store) fill() (int64, error) {
	var err error
	for range 20 {
		var used int64
		if used, err = s.usage(); err != nil {
			return 0, err
		}
		size := used + fillSlack
		if err = unix.Mount("tmpfs", s.dir, "tmpfs", unix.MS_REMOUNT, fmt.Sprintf("size=%d", size)); err == nil {
			break
		}
	}
	if err != nil {
		return 0, fmt.Errorf("cannot shrink the tmpfs %s: %w", s.dir, err)
	}
	s.filler = filepath.Join(s.dir, "chaos-filler")
	f, err := os.OpenFile(s.filler, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o644)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	buf := make([]byte, 64<<10)
	var n int64
	for {
		m, err := f.Write(buf)
		n += int64(m)
		if errors.Is(err, syscall.ENOSPC) {
			return n, nil
		}
		if err != nil {
			return n, err
		}
	}
}

// unfill deletes the filler and gives the tmpfs its size back.
func (s *store) unfill() error {
	if s.filler == "" {
		return nil
	}
	var errs []error
	if err := os.Remove(s.filler); err != nil && !errors.Is(err, os.ErrNotExist) {
		errs = append(errs, err)
	}
	s.filler = ""
	if err := unix.Mount("tmpfs", s.dir, "tmpfs", unix.MS_REMOUNT, fmt.Sprintf("size=%d", s.size)); err != nil {
		errs = append(errs, fmt.Errorf("cannot restore the tmpfs size of %s: %w", s.dir, err))
	}
	return errors.Join(errs...)
}

// copyTree copies the regular files and directories under src into dst (made).
func copyTree(src, dst string) error {
	return filepath.WalkDir(src, func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(src, path)
		if err != nil {
			return err
		}
		target := filepath.Join(dst, rel)
		if d.IsDir() {
			return os.MkdirAll(target, 0o755)
		}
		if !d.Type().IsRegular() {
			return nil
		}
		in, err := os.Open(path)
		if err != nil {
			return err
		}
		defer in.Close()
		out, err := os.Create(target)
		if err != nil {
			return err
		}
		if _, err := io.Copy(out, in); err != nil {
			_ = out.Close()
			return err
		}
		return out.Close()
	})
}
