package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// build compiles this command as scripts/images.sh does.
func build(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "pause")
	cmd := exec.Command("go", "build", "-trimpath", "-o", bin, ".")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return bin
}

func TestExitsZeroOnTERMAndINT(t *testing.T) {
	bin := build(t)
	for _, sig := range []syscall.Signal{syscall.SIGTERM, syscall.SIGINT} {
		cmd := exec.Command(bin)
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		time.Sleep(200 * time.Millisecond) // past the runtime's start, to the handler
		if err := cmd.Process.Signal(sig); err != nil {
			t.Fatal(err)
		}
		if err := cmd.Wait(); err != nil {
			t.Errorf("after %v: %v, want exit 0", sig, err)
		}
	}
}

// As PID 1 of a PID namespace, pause reaps an orphan reparented to it:
// nsenter starts sh in pause's namespace, sh starts a short sleep in the
// background and exits, the sleep is reparented to pause and ends.
func TestReapsOrphansAsPID1(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root for a PID namespace")
	}
	nsenter, err := exec.LookPath("nsenter")
	if err != nil {
		t.Skip("needs nsenter (util-linux)")
	}
	cmd := exec.Command(build(t))
	cmd.SysProcAttr = &syscall.SysProcAttr{Cloneflags: syscall.CLONE_NEWPID}
	if err := cmd.Start(); err != nil {
		t.Skipf("cannot start a process in a new PID namespace here: %v", err)
	}
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	time.Sleep(200 * time.Millisecond)
	sh := exec.Command(nsenter, "--target", strconv.Itoa(cmd.Process.Pid), "--pid", "--", "/bin/sh", "-c", "sleep 1 </dev/null >/dev/null 2>&1 & exit 0")
	if out, err := sh.CombinedOutput(); err != nil {
		t.Fatalf("nsenter: %v\n%s", err, out)
	}
	// While the sleep runs it is pause's child; once it ends it must not
	// stay a zombie.
	var sawChild bool
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		kids := children(t, cmd.Process.Pid)
		if len(kids) > 0 {
			sawChild = true
		}
		if sawChild && len(kids) == 0 {
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
	if !sawChild {
		t.Fatal("the orphaned sleep never became pause's child")
	}
	t.Fatalf("pause left children behind: %v", children(t, cmd.Process.Pid))
}

// children lists the pids and states ("S", "Z") of ppid's children.
func children(t *testing.T, ppid int) []string {
	t.Helper()
	dirs, err := filepath.Glob("/proc/[0-9]*/stat")
	if err != nil {
		t.Fatal(err)
	}
	var kids []string
	for _, d := range dirs {
		b, err := os.ReadFile(d)
		if err != nil {
			continue // gone
		}
		// pid (comm) state ppid ...; comm may hold spaces, so cut at the last ')'.
		s := string(b)
		f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
		if len(f) > 1 && f[1] == strconv.Itoa(ppid) {
			kids = append(kids, filepath.Base(filepath.Dir(d))+":"+f[0])
		}
	}
	return kids
}
