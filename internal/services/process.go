package services

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// A replica's process: who it runs as, what it sees, and how it ends.
//
//   - It runs as the identity Users hands out (serve as root: a uid of its
//     own from a range, or a named unprivileged user), never as root by
//     default, with no supplementary groups.
//   - Its environment is built, not inherited: a fixed PATH, HOME and
//     TMPDIR in its own working directory, the service's variables, then
//     the claim's (devices) and PORT/GPUSLICE_*, which win.
//   - Its working directory is its own (mode 0700, owned by its uid),
//     under Config.WorkDir, removed when it ends.
//   - It leads a process group of its own and gets SIGKILL when the
//     controller's process dies (parent-death signal), and stopping it
//     signals the whole group, so nothing it started outlives it.
//   - A record of it (pid, kernel start time, uid) is kept in
//     Config.RecordDir while it runs; a controller starting after a crash
//     ends every process of the previous run's groups (reapRecords).

// Users hands out the identity each replica runs as.
type Users interface {
	// Acquire returns the credential for one replica (nil: the
	// controller's own user) and a function that gives it back.
	Acquire() (*syscall.Credential, func(), error)
}

// SameUser runs replicas as the controller's own user: only for a
// controller that is not root (which cannot switch users).
type SameUser struct{}

// Acquire implements Users.
func (SameUser) Acquire() (*syscall.Credential, func(), error) { return nil, func() {}, nil }

// NamedUser runs every replica as one unprivileged user of the host.
type NamedUser struct{ UID, GID uint32 }

// LookupUser finds a user by name (or numeric id) for NamedUser; root is
// refused.
func LookupUser(name string) (NamedUser, error) {
	u, err := user.Lookup(name)
	if err != nil {
		if u, err = user.LookupId(name); err != nil {
			return NamedUser{}, fmt.Errorf("replica user %q: no such user", name)
		}
	}
	uid, err1 := strconv.ParseUint(u.Uid, 10, 32)
	gid, err2 := strconv.ParseUint(u.Gid, 10, 32)
	if err1 != nil || err2 != nil {
		return NamedUser{}, fmt.Errorf("replica user %q: ids %s/%s are not numbers", name, u.Uid, u.Gid)
	}
	if uid == 0 {
		return NamedUser{}, fmt.Errorf("replica user %q is root: replicas never run as root; name an unprivileged user", name)
	}
	return NamedUser{UID: uint32(uid), GID: uint32(gid)}, nil
}

// Acquire implements Users.
func (n NamedUser) Acquire() (*syscall.Credential, func(), error) {
	return &syscall.Credential{Uid: n.UID, Gid: n.GID, Groups: []uint32{}}, func() {}, nil
}

// UIDRange gives each live replica a uid (and gid) of its own from
// [From, To]: replicas of different services and tenants cannot signal,
// trace or read each other's processes and files.
type UIDRange struct {
	From, To uint32
	mu       sync.Mutex
	inUse    map[uint32]bool
	next     uint32
}

// ParseUIDRange reads "FROM-TO" (both > 0, FROM <= TO).
func ParseUIDRange(s string) (*UIDRange, error) {
	a, b, ok := strings.Cut(s, "-")
	from, err1 := strconv.ParseUint(strings.TrimSpace(a), 10, 32)
	to, err2 := strconv.ParseUint(strings.TrimSpace(b), 10, 32)
	if !ok || err1 != nil || err2 != nil || from == 0 || from > to || to >= 1<<32-1 {
		return nil, fmt.Errorf("replica uids %q: want FROM-TO, e.g. 2100000000-2100065535 (ids no account of the host uses, not 0)", s)
	}
	return &UIDRange{From: uint32(from), To: uint32(to)}, nil
}

// Acquire implements Users.
func (r *UIDRange) Acquire() (*syscall.Credential, func(), error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.inUse == nil {
		r.inUse = map[uint32]bool{}
	}
	size := uint64(r.To-r.From) + 1
	for i := uint64(0); i < size; i++ {
		uid := r.From + uint32((uint64(r.next)+i)%size)
		if !r.inUse[uid] {
			r.inUse[uid] = true
			r.next = uid - r.From + 1
			return &syscall.Credential{Uid: uid, Gid: uid, Groups: []uint32{}}, func() {
				r.mu.Lock()
				defer r.mu.Unlock()
				delete(r.inUse, uid)
			}, nil
		}
	}
	return nil, nil, fmt.Errorf("all %d replica uids (%d-%d) are in use", size, r.From, r.To)
}

// safePATH is the PATH a replica gets: the system's directories only.
const safePATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

// procSpec is one replica process to start.
type procSpec struct {
	argv []string
	// env is the whole environment (nothing is inherited).
	env  []string
	dir  string
	cred *syscall.Credential
	out  io.Writer
}

// proc is a started replica process.
type proc struct {
	pid   int
	start uint64 // kernel start time (clock ticks since boot)
	// exited receives Wait's result once.
	exited <-chan error
	// gate holds the process until release (startProc).
	gate *os.File
}

// StartTied starts cmd with SIGKILL as its parent-death signal (kept with
// the rest of cmd.SysProcAttr), so the child dies when this process does,
// kill -9 included; the channel gets cmd.Wait's result. The kernel sends
// that signal when the thread that forked the child ends, so the fork
// happens on a goroutine locked to its thread that stays until the child
// has exited. gpuslice run starts CMD with it too.
func StartTied(cmd *exec.Cmd) (<-chan error, error) {
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	cmd.SysProcAttr.Pdeathsig = syscall.SIGKILL
	started, exited := make(chan error, 1), make(chan error, 1)
	go func() {
		runtime.LockOSThread() // never unlocked: the thread ends after the child
		if err := cmd.Start(); err != nil {
			started <- err
			return
		}
		started <- nil
		exited <- cmd.Wait()
	}()
	return exited, <-started
}

// gate is what a replica's process runs first: it waits on fd 3 until the
// controller has recorded it (proc.release), then becomes the command
// (exec keeps its pid, group and start time). Were the controller to die
// before the record is written, the pipe closes unread and the process
// exits without running the command: a crash at any moment leaves no
// process the next start cannot find.
const gate = `IFS= read -r go <&3 && [ "$go" = go ] || exit 111; exec 3<&-; exec "$@"`

// startProc starts a replica in its own process group, tied to this
// process (StartTied), held at the gate until release.
func startProc(ps procSpec) (*proc, error) {
	if err := lookPath(ps.argv[0], ps.env, ps.dir); err != nil {
		return nil, err
	}
	gr, gw, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	defer gr.Close()
	cmd := exec.Command("/bin/sh", append([]string{"-c", gate, "gpuslice-replica"}, ps.argv...)...)
	cmd.Env, cmd.Dir = ps.env, ps.dir
	cmd.Stdout, cmd.Stderr = ps.out, ps.out
	cmd.ExtraFiles = []*os.File{gr}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Credential: ps.cred}
	exited, err := StartTied(cmd)
	if err != nil {
		gw.Close()
		return nil, err
	}
	p := &proc{pid: cmd.Process.Pid, exited: exited, gate: gw}
	p.start, _ = procStartTime(p.pid)
	return p, nil
}

// release lets the process past the gate, to run its command.
func (p *proc) release() error {
	_, err := p.gate.Write([]byte("go\n"))
	if cerr := p.gate.Close(); err == nil {
		err = cerr
	}
	return err
}

// lookPath says whether name can run as the replica: a path, or a name
// found in the replica's own PATH (not the controller's), so a command
// that is not there fails with a clear error before anything starts.
func lookPath(name string, env []string, dir string) error {
	if strings.Contains(name, "/") {
		if !filepath.IsAbs(name) {
			name = filepath.Join(dir, name)
		}
		if fi, err := os.Stat(name); err != nil || fi.IsDir() || fi.Mode()&0o111 == 0 {
			return fmt.Errorf("%s: not an executable file", name)
		}
		return nil
	}
	path := safePATH
	for _, kv := range env {
		if v, ok := strings.CutPrefix(kv, "PATH="); ok {
			path = v
		}
	}
	for _, d := range filepath.SplitList(path) {
		if fi, err := os.Stat(filepath.Join(d, name)); err == nil && !fi.IsDir() && fi.Mode()&0o111 != 0 {
			return nil
		}
	}
	return fmt.Errorf("%s: not found in the replica's PATH (%s)", name, path)
}

// stop ends the replica's process group: SIGTERM, then SIGKILL after
// grace; once the leader has exited, whatever else is left in its group
// is killed too. It returns the leader's exit.
func (p *proc) stop(grace time.Duration) error {
	_ = p.gate.Close() // one held at the gate exits without running its command
	_ = syscall.Kill(-p.pid, syscall.SIGTERM)
	var err error
	select {
	case err = <-p.exited:
	case <-time.After(grace):
		_ = syscall.Kill(-p.pid, syscall.SIGKILL)
		err = <-p.exited
	}
	p.killGroup()
	return err
}

// killGroup kills what is left of the replica's process group (children
// it started that did not leave the group).
func (p *proc) killGroup() { _ = syscall.Kill(-p.pid, syscall.SIGKILL) }

// procStat reads a process's group and kernel start time from
// /proc/PID/stat.
func procStat(pid int) (pgrp int, start uint64, err error) {
	path := filepath.Join("/proc", strconv.Itoa(pid), "stat")
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, 0, err
	}
	return parseStat(path, string(b))
}

// parseStat reads the process group and start time from the text of a
// /proc/PID/stat file (path names it in errors).
func parseStat(path, s string) (pgrp int, start uint64, err error) {
	// The command name (field 2) may hold spaces and parentheses: the
	// fields after it start at the last ')'.
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return 0, 0, fmt.Errorf("%s: no ')' ending the command name", path)
	}
	f := strings.Fields(s[i+1:])
	// f[0] is field 3 (state): pgrp is field 5, starttime field 22.
	if len(f) < 20 {
		return 0, 0, fmt.Errorf("%s: %d fields, want at least 22", path, len(f)+2)
	}
	pg, err1 := strconv.Atoi(f[2])
	st, err2 := strconv.ParseUint(f[19], 10, 64)
	if err1 != nil || err2 != nil {
		return 0, 0, fmt.Errorf("%s: field 5 (pgrp) %q or 22 (starttime) %q is not a number", path, f[2], f[19])
	}
	return pg, st, nil
}

func procStartTime(pid int) (uint64, error) {
	_, st, err := procStat(pid)
	return st, err
}

// record is what the controller writes down about a running replica, so
// that after a crash the next run can end what it left.
type record struct {
	Replica string `json:"replica"`
	Service string `json:"service"`
	Claim   string `json:"claim"`
	// PID leads the replica's process group; Start is its kernel start
	// time, which tells it from a later process that reused the pid.
	PID   int    `json:"pid"`
	Start uint64 `json:"start"`
	UID   uint32 `json:"uid"`
}

// records keeps one file per running replica in dir ("" keeps none).
type records struct{ dir string }

func (rs records) path(replica string) string {
	return filepath.Join(rs.dir, replica+".json")
}

func (rs records) put(r record) error {
	if rs.dir == "" {
		return nil
	}
	b, _ := json.Marshal(r)
	tmp := rs.path(r.Replica) + ".tmp"
	if err := os.WriteFile(tmp, b, 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, rs.path(r.Replica))
}

func (rs records) remove(replica string) {
	if rs.dir != "" {
		_ = os.Remove(rs.path(replica))
	}
}

// reap ends every process of every recorded replica of a previous run —
// each member of its process group started no earlier than it, owned by
// its uid (so a pid reused since by a stranger is left alone) — removes
// the records and returns them (their claims are the caller's to release).
// A record that cannot be read is removed and reported in the error.
func (rs records) reap(grace time.Duration) ([]record, error) {
	if rs.dir == "" {
		return nil, nil
	}
	entries, err := os.ReadDir(rs.dir)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return nil, nil
		}
		return nil, err
	}
	var out []record
	var errs []error
	for _, e := range entries {
		if !strings.HasSuffix(e.Name(), ".json") {
			_ = os.Remove(filepath.Join(rs.dir, e.Name())) // a write cut short
			continue
		}
		path := filepath.Join(rs.dir, e.Name())
		var r record
		b, err := os.ReadFile(path)
		if err == nil {
			err = json.Unmarshal(b, &r)
		}
		if err != nil || r.PID <= 1 {
			errs = append(errs, fmt.Errorf("replica record %s: unreadable (%v); removed", path, err))
			_ = os.Remove(path)
			continue
		}
		out = append(out, r)
	}
	endGroups(out, grace)
	for _, r := range out {
		rs.remove(r.Replica)
	}
	return out, errors.Join(errs...)
}

// endGroups sends SIGTERM to the processes of the recorded groups, waits
// up to grace for them to go, then sends SIGKILL to what is left.
func endGroups(rs []record, grace time.Duration) {
	deadline := time.Now().Add(grace)
	sig := syscall.SIGTERM
	for {
		left := 0
		for _, pid := range groupMembers(rs) {
			_ = syscall.Kill(pid, sig)
			left++
		}
		if left == 0 {
			return
		}
		if sig == syscall.SIGKILL {
			// Killed: give the kernel a moment to reap, then look once
			// more.
			time.Sleep(50 * time.Millisecond)
			if len(groupMembers(rs)) == 0 || time.Now().After(deadline.Add(5*time.Second)) {
				return
			}
			continue
		}
		time.Sleep(50 * time.Millisecond)
		if time.Now().After(deadline) {
			sig = syscall.SIGKILL
		}
	}
}

// groupMembers lists the live processes that belong to a recorded
// replica: in its process group, started no earlier than its leader, owned
// by its uid.
func groupMembers(rs []record) []int {
	if len(rs) == 0 {
		return nil
	}
	byGroup := map[int]record{}
	for _, r := range rs {
		byGroup[r.PID] = r
	}
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	var pids []int
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		pg, start, err := procStat(pid)
		if err != nil {
			continue
		}
		r, ok := byGroup[pg]
		if !ok || start < r.Start {
			continue
		}
		info, err := os.Stat(filepath.Join("/proc", e.Name()))
		if err != nil {
			continue
		}
		if st, ok := info.Sys().(*syscall.Stat_t); !ok || st.Uid != r.UID {
			continue
		}
		if isZombie(pid) {
			continue
		}
		pids = append(pids, pid)
	}
	return pids
}

func isZombie(pid int) bool {
	b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "stat"))
	if err != nil {
		return true
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	return i < 0 || i+2 >= len(s) || s[i+2] == 'Z'
}

// workDir makes a replica's own working directory under root (root itself
// made 0711 when missing: others may pass through it, not list it), owned
// by cred's uid, mode 0700. A root that is a symlink, or not owned by the
// controller's user, is refused: another local user could have planted it.
func workDir(root, replica string, cred *syscall.Credential) (string, error) {
	if err := os.MkdirAll(root, 0o711); err != nil {
		return "", fmt.Errorf("replica directory %s: %w", root, err)
	}
	fi, err := os.Lstat(root)
	if err != nil {
		return "", err
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !fi.IsDir() || fi.Mode()&os.ModeSymlink != 0 || !ok || int(st.Uid) != os.Geteuid() {
		return "", fmt.Errorf("replica directory %s is not a directory owned by this user (uid %d): refusing to run replicas in it", root, os.Geteuid())
	}
	if fi.Mode().Perm() != 0o711 {
		if err := os.Chmod(root, 0o711); err != nil {
			return "", err
		}
	}
	if cred != nil && int(cred.Uid) != os.Geteuid() {
		// A replica of another uid must pass through every directory
		// above its own.
		abs, _ := filepath.Abs(root)
		for d := filepath.Dir(abs); ; d = filepath.Dir(d) {
			if fi, err := os.Stat(d); err == nil && fi.Mode().Perm()&0o001 == 0 {
				return "", fmt.Errorf("replica directory %s: %s (mode %o) is closed to other users, and replicas run as uids of their own; choose a directory others may pass through (--replica-dir), e.g. under /var/lib or /tmp", root, d, fi.Mode().Perm())
			}
			if d == filepath.Dir(d) {
				break
			}
		}
	}
	dir := filepath.Join(root, replica)
	_ = os.RemoveAll(dir) // left by a crashed run
	if err := os.Mkdir(dir, 0o700); err != nil {
		return "", fmt.Errorf("replica directory %s: %w", dir, err)
	}
	if cred != nil {
		if err := os.Chown(dir, int(cred.Uid), int(cred.Gid)); err != nil {
			_ = os.RemoveAll(dir)
			return "", fmt.Errorf("replica directory %s: %w", dir, err)
		}
	}
	return dir, nil
}
