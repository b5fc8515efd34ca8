package datadir

import (
	"bufio"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
)

func lockContent(t *testing.T, dir string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, LockFile))
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(b))
}

func TestAcquireWritesPIDAndReleaseEmpties(t *testing.T) {
	dir := t.TempDir()
	l, err := Acquire(dir)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := lockContent(t, dir), strconv.Itoa(os.Getpid()); got != want {
		t.Errorf("lock file holds %q, want our pid %s", got, want)
	}
	fi, err := os.Stat(filepath.Join(dir, LockFile))
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o600 {
		t.Errorf("lock file mode %v, want 0600", fi.Mode().Perm())
	}
	if err := l.Release(); err != nil {
		t.Fatal(err)
	}
	if err := l.Release(); err != nil {
		t.Fatalf("second Release: %v", err)
	}
	if got := lockContent(t, dir); got != "" {
		t.Errorf("lock file holds %q after Release, want it empty", got)
	}
	l2, err := Acquire(dir)
	if err != nil {
		t.Fatalf("Acquire after Release: %v", err)
	}
	l2.Release()
}

// Two holders in one process are two open file descriptions, so flock
// keeps them apart just as it keeps two processes apart.
func TestSecondAcquireFailsNamingTheHolder(t *testing.T) {
	dir := t.TempDir()
	l, err := Acquire(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Release()
	_, err = Acquire(dir)
	var inUse *InUseError
	if !errors.As(err, &inUse) || !errors.Is(err, ErrInUse) {
		t.Fatalf("second Acquire: %v, want an *InUseError", err)
	}
	if inUse.PID != os.Getpid() {
		t.Errorf("holder pid %d, want %d", inUse.PID, os.Getpid())
	}
	want := "data directory " + l.Dir() + " is in use by another gpuslice serve (pid " + strconv.Itoa(os.Getpid()) + "); stop it or pass another --data-dir"
	if err.Error() != want {
		t.Errorf("error %q\nwant  %q", err, want)
	}
	// The failed attempt must not have touched the holder's pid.
	if got := lockContent(t, dir); got != strconv.Itoa(os.Getpid()) {
		t.Errorf("lock file holds %q after a failed Acquire", got)
	}
}

// A lock file whose pid names a process that is gone (or any other
// content) does not block: only the flock counts.
func TestStaleLockFileDoesNotBlock(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, LockFile), []byte("999999999\ngarbage that is longer than a pid\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	l, err := Acquire(dir)
	if err != nil {
		t.Fatalf("Acquire over a stale lock file: %v", err)
	}
	defer l.Release()
	if got := lockContent(t, dir); got != strconv.Itoa(os.Getpid()) {
		t.Errorf("lock file holds %q, want only our pid", got)
	}
}

// TestLockChild is not a test: TestLockOfKilledProcessDoesNotBlock runs the
// test binary with DATADIR_LOCK_CHILD set, and this takes the lock in it,
// says so, and waits to be killed.
func TestLockChild(t *testing.T) {
	dir := os.Getenv("DATADIR_LOCK_CHILD")
	if dir == "" {
		t.Skip("helper process for TestLockOfKilledProcessDoesNotBlock")
	}
	if _, err := Acquire(dir); err != nil {
		os.Stdout.WriteString("error: " + err.Error() + "\n")
		os.Exit(1)
	}
	os.Stdout.WriteString("locked\n")
	_, _ = io.Copy(io.Discard, os.Stdin) // until the parent closes stdin or kills us
	os.Exit(0)
}

func TestLockOfKilledProcessDoesNotBlock(t *testing.T) {
	dir := t.TempDir()
	cmd := exec.Command(os.Args[0], "-test.run=^TestLockChild$")
	cmd.Env = append(os.Environ(), "DATADIR_LOCK_CHILD="+dir)
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	defer stdin.Close()
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	line, err := bufio.NewReader(stdout).ReadString('\n')
	if strings.TrimSpace(line) != "locked" {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		t.Fatalf("child: %q, %v", line, err)
	}
	_, err = Acquire(dir)
	var inUse *InUseError
	if !errors.As(err, &inUse) || inUse.PID != cmd.Process.Pid {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		t.Fatalf("Acquire while the child holds the lock: %v, want in use by pid %d", err, cmd.Process.Pid)
	}
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = cmd.Wait() // the kernel has released the child's lock once it is reaped
	if got := lockContent(t, dir); got != strconv.Itoa(cmd.Process.Pid) {
		t.Fatalf("lock file holds %q, want the killed child's pid %d left behind", got, cmd.Process.Pid)
	}
	l, err := Acquire(dir)
	if err != nil {
		t.Fatalf("Acquire after the holder was killed: %v", err)
	}
	defer l.Release()
	if got := lockContent(t, dir); got != strconv.Itoa(os.Getpid()) {
		t.Errorf("lock file holds %q, want our pid %d", got, os.Getpid())
	}
}
