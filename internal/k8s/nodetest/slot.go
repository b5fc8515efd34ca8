package nodetest

import (
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// slotDir holds one lock file per slot: a slot is taken while a process
// holds its lock, so two tests (or a test and the sandbox) never share
// addresses, a namespace or a cgroup, and a slot whose holder died is free
// again, its leftovers swept by the next taker.
const slotDir = "/run/gpuslice-nodetest"

// maxSlots bounds how many nodes run on one machine at once.
const maxSlots = 200

// slot is one node's share of the host: its names and addresses.
type slot struct {
	n    int
	lock *os.File
}

// Names and addresses of a slot n:
//
//	network namespace gsnode-n, host veth gsh-n (node end: eth0)
//	link 10.217.n.0/24: host .1, node .2
//	pods 10.218.n.0/24 (bridge cni0 at .1)
//	services 10.219.n.0/24: the API server at 10.219.n.1:443, which is
//	  also the "kubernetes" Service's ClusterIP
//	cgroup root /gsnode-n in every hierarchy
func (s *slot) netns() string       { return "gsnode-" + strconv.Itoa(s.n) }
func (s *slot) hostVeth() string    { return "gsh-" + strconv.Itoa(s.n) }
func (s *slot) hostIP() string      { return fmt.Sprintf("10.217.%d.1", s.n) }
func (s *slot) nodeIP() string      { return fmt.Sprintf("10.217.%d.2", s.n) }
func (s *slot) podCIDR() string     { return fmt.Sprintf("10.218.%d.0/24", s.n) }
func (s *slot) serviceCIDR() string { return fmt.Sprintf("10.219.%d.0/24", s.n) }
func (s *slot) apiIP() string       { return fmt.Sprintf("10.219.%d.1", s.n) }
func (s *slot) cgroupRoot() string  { return "/gsnode-" + strconv.Itoa(s.n) }

// acquireSlot takes the first free slot. On the way it sweeps every free
// slot a dead holder left something in (its own included), so what a
// killed test left behind goes at the next start, whichever slot that
// start takes.
func acquireSlot() (*slot, error) {
	if err := os.MkdirAll(slotDir, 0o755); err != nil {
		return nil, err
	}
	var taken *slot
	var errs []error
	for n := 1; n <= maxSlots; n++ {
		f, err := os.OpenFile(filepath.Join(slotDir, "slot-"+strconv.Itoa(n)+".lock"), os.O_CREATE|os.O_RDWR, 0o600)
		if err != nil {
			return nil, err
		}
		if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
			f.Close()
			continue
		}
		s := &slot{n: n, lock: f}
		if s.leftovers() {
			if err := s.sweep(); err != nil {
				errs = append(errs, fmt.Errorf("slot %d: sweeping a dead node's leftovers: %w", n, err))
				s.release()
				continue
			}
		}
		if taken != nil {
			s.release()
			continue
		}
		_ = f.Truncate(0)
		_, _ = f.WriteString(strconv.Itoa(os.Getpid()) + "\n")
		taken = s
	}
	if taken == nil {
		errs = append(errs, fmt.Errorf("all %d node slots in %s are taken", maxSlots, slotDir))
		return nil, errors.Join(errs...)
	}
	return taken, nil
}

// leftovers reports whether a dead holder left the slot's namespace, veth
// or cgroups behind.
func (s *slot) leftovers() bool {
	if netnsExists(s.netns()) || len(cgroupDirs(s.cgroupRoot())) > 0 {
		return true
	}
	_, err := net.InterfaceByName(s.hostVeth())
	return err == nil
}

func (s *slot) release() {
	if s.lock != nil {
		s.lock.Close()
		s.lock = nil
	}
}

// sweep kills every process of the slot's node (in its cgroups and its
// network namespace) and removes its cgroups, veth and namespace. It is
// idempotent and succeeds on a clean slot.
func (s *slot) sweep() error {
	var errs []error
	// Containers first (they are in the cgroups, not the node's netns),
	// then containerd, its shims and the kubelet (in the netns).
	for range 3 {
		killed := killCgroupProcs(s.cgroupRoot())
		killed += killNetnsProcs(s.netns())
		if killed == 0 {
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	if err := removeCgroups(s.cgroupRoot()); err != nil {
		errs = append(errs, err)
	}
	if netnsExists(s.netns()) {
		if out, err := exec.Command("ip", "netns", "delete", s.netns()).CombinedOutput(); err != nil {
			errs = append(errs, fmt.Errorf("ip netns delete %s: %v: %s", s.netns(), err, out))
		}
	}
	if _, err := net.InterfaceByName(s.hostVeth()); err == nil {
		if out, err := exec.Command("ip", "link", "delete", s.hostVeth()).CombinedOutput(); err != nil {
			errs = append(errs, fmt.Errorf("ip link delete %s: %v: %s", s.hostVeth(), err, out))
		}
	}
	return errors.Join(errs...)
}

func netnsExists(name string) bool {
	_, err := os.Stat(filepath.Join("/run/netns", name))
	return err == nil
}

// killNetnsProcs SIGKILLs every process in the named network namespace and
// returns how many it signalled.
func killNetnsProcs(name string) int {
	if !netnsExists(name) {
		return 0
	}
	out, err := exec.Command("ip", "netns", "pids", name).Output()
	if err != nil {
		return 0
	}
	n := 0
	for _, f := range strings.Fields(string(out)) {
		if pid, err := strconv.Atoi(f); err == nil && pid > 1 && pid != os.Getpid() {
			if syscall.Kill(pid, syscall.SIGKILL) == nil {
				n++
			}
		}
	}
	return n
}

// cgroupDirs returns root's directory in every mounted cgroup hierarchy
// (v1 controllers, the named systemd one, the unified v2 one) that has it.
func cgroupDirs(root string) []string {
	var dirs []string
	base := "/sys/fs/cgroup"
	if _, err := os.Stat(filepath.Join(base, "cgroup.controllers")); err == nil { // pure v2
		if _, err := os.Stat(filepath.Join(base, root)); err == nil {
			dirs = append(dirs, filepath.Join(base, root))
		}
		return dirs
	}
	entries, _ := os.ReadDir(base)
	for _, e := range entries {
		d := filepath.Join(base, e.Name(), root)
		if st, err := os.Stat(d); err == nil && st.IsDir() {
			dirs = append(dirs, d)
		}
	}
	return dirs
}

// killCgroupProcs SIGKILLs every process in root's subtrees.
func killCgroupProcs(root string) int {
	n := 0
	for _, d := range cgroupDirs(root) {
		_ = filepath.WalkDir(d, func(p string, e os.DirEntry, err error) error {
			if err != nil || e.IsDir() || e.Name() != "cgroup.procs" {
				return nil
			}
			data, _ := os.ReadFile(p)
			for _, f := range strings.Fields(string(data)) {
				if pid, err := strconv.Atoi(f); err == nil && pid > 1 && pid != os.Getpid() {
					if syscall.Kill(pid, syscall.SIGKILL) == nil {
						n++
					}
				}
			}
			return nil
		})
	}
	return n
}

// removeCgroups removes root's subtrees, deepest first, retrying while the
// kernel still counts a dying process in them.
func removeCgroups(root string) error {
	var last error
	for range 50 {
		last = nil
		for _, d := range cgroupDirs(root) {
			var all []string
			_ = filepath.WalkDir(d, func(p string, e os.DirEntry, err error) error {
				if err == nil && e.IsDir() {
					all = append(all, p)
				}
				return nil
			})
			sort.Slice(all, func(i, j int) bool { return len(all[i]) > len(all[j]) })
			for _, p := range all {
				if err := syscall.Rmdir(p); err != nil && !errors.Is(err, syscall.ENOENT) {
					last = fmt.Errorf("removing cgroup %s: %w", p, err)
				}
			}
		}
		if last == nil {
			return nil
		}
		killCgroupProcs(root)
		time.Sleep(100 * time.Millisecond)
	}
	return last
}

// setupNetwork makes the slot's namespace and veth: the node end eth0 with
// the node IP and a default route to the host, IP forwarding on (the pods'
// bridge routes through it); the host end with the link address and the
// API server's address, and a route to the pod range through the node.
func (s *slot) setupNetwork() error {
	steps := [][]string{
		{"ip", "netns", "add", s.netns()},
		{"ip", "link", "add", s.hostVeth(), "type", "veth", "peer", "name", "eth0", "netns", s.netns()},
		{"ip", "addr", "add", s.hostIP() + "/24", "dev", s.hostVeth()},
		{"ip", "addr", "add", s.apiIP() + "/32", "dev", s.hostVeth()},
		{"ip", "link", "set", s.hostVeth(), "up"},
		{"ip", "-n", s.netns(), "link", "set", "lo", "up"},
		{"ip", "-n", s.netns(), "addr", "add", s.nodeIP() + "/24", "dev", "eth0"},
		{"ip", "-n", s.netns(), "link", "set", "eth0", "up"},
		{"ip", "-n", s.netns(), "route", "add", "default", "via", s.hostIP()},
		{"ip", "route", "add", s.podCIDR(), "via", s.nodeIP(), "dev", s.hostVeth()},
		{"ip", "netns", "exec", s.netns(), "sysctl", "-q", "-w", "net.ipv4.ip_forward=1"},
	}
	for _, st := range steps {
		if out, err := exec.Command(st[0], st[1:]...).CombinedOutput(); err != nil {
			return fmt.Errorf("%s: %v: %s", strings.Join(st, " "), err, strings.TrimSpace(string(out)))
		}
	}
	return nil
}
