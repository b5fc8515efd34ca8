package ociimage_test

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gpuslice/gpuslice/internal/testkit"
)

// The containerd the real-node tests run (scripts/realnode.sh builds it).
const nodeRelease = "v1.36.3-containerd-v2.4.2"

// TestImagesRunUnderContainerd checks scripts/images.sh's archives against
// their real consumer: a private containerd v2.4.2 (root, state and socket
// of its own) imports each with `ctr -n k8s.io images import`, lists every
// tag, and runs them with runc: busybox prints, gpuslice and
// gpuslice-scheduler report their versions (also as non-root users),
// gpuslice opens its device layer (no NVIDIA library in the container: it
// falls back to a simulated machine, which shows the dynamic loader and
// glibc in the image work), and pause exits 0 on SIGTERM.
//
// It needs root, containerd, ctr and containerd-shim-runc-v2 in
// $GPUSLICE_NODE_BIN (default ~/.cache/gpuslice/node/v1.36.3-containerd-v2.4.2,
// from scripts/realnode.sh) and runc on PATH; without them it is skipped,
// or fails with GPUSLICE_REQUIRE_NODE=1. The archives come from
// $GPUSLICE_IMAGES_DIR (scripts/images.sh --test-images DIR), else the test
// runs the script itself (minutes on a cold build cache).
func TestImagesRunUnderContainerd(t *testing.T) {
	bin := nodeBinaries(t)
	repo, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	version := chartAppVersion(t, repo)
	dir := os.Getenv("GPUSLICE_IMAGES_DIR")
	if dir == "" {
		dir = t.TempDir()
		t.Logf("building the images: scripts/images.sh --test-images %s", dir)
		start := time.Now()
		cmd := exec.Command(filepath.Join(repo, "scripts", "images.sh"), "--test-images", dir)
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		if out, err := cmd.Output(); err != nil {
			t.Fatalf("scripts/images.sh: %v\nstdout:\n%s\nstderr:\n%s", err, out, stderr.String())
		}
		t.Logf("built in %s", time.Since(start).Round(time.Second))
	}
	images := map[string]string{ // archive → tag
		"gpuslice-" + version + ".tar":           "ghcr.io/gpuslice/gpuslice:" + version,
		"gpuslice-scheduler-" + version + ".tar": "ghcr.io/gpuslice/gpuslice-scheduler:" + version,
		"test-pause-" + version + ".tar":         "gpuslice.dev/test/pause:" + version,
		"test-busybox-" + version + ".tar":       "gpuslice.dev/test/busybox:" + version,
	}

	c := startContainerd(t, bin)
	for archive := range images {
		c.ctr(t, "images", "import", "--platform", "linux/amd64", filepath.Join(dir, archive))
	}
	listed := strings.Fields(c.ctr(t, "images", "ls", "-q"))
	for archive, tag := range images {
		if !slices.Contains(listed, tag) {
			t.Errorf("%s imported, but ctr images ls does not list %s: %v", archive, tag, listed)
		}
	}
	if t.Failed() {
		return
	}

	busybox := images["test-busybox-"+version+".tar"]
	out := c.ctr(t, "run", "--rm", busybox, "busybox-1", "sh", "-c", "echo hello from busybox; id -u; stat -c %a /tmp; cat /etc/passwd")
	t.Logf("busybox: %q", out)
	for _, want := range []string{"hello from busybox\n0\n1777\n", "nobody:x:65534:65534:"} {
		if !strings.Contains(out, want) {
			t.Errorf("busybox printed %q, want it to contain %q", out, want)
		}
	}

	gs := images["gpuslice-"+version+".tar"]
	for _, user := range []string{"0", "65534"} {
		out := c.ctr(t, "run", "--rm", "--user", user, gs, "gpuslice-version-"+user, "/gpuslice", "--version")
		t.Logf("gpuslice --version as uid %s: %q", user, out)
		if want := "gpuslice version " + version + "\n"; !strings.Contains(out, want) {
			t.Errorf("gpuslice --version as uid %s printed %q, want %q", user, out, want)
		}
	}
	out = c.ctr(t, "run", "--rm", gs, "gpuslice-slices", "/gpuslice", "dra", "slices", "--simulate", "dgx-a100", "--node", "n1")
	if !strings.Contains(out, "kind: ResourceSlice") {
		t.Errorf("gpuslice dra slices printed no ResourceSlice:\n%s", out)
	}
	// Without --simulate the image's loader looks for NVML (no driver is
	// mounted here) and the command says what to check instead of
	// publishing simulated GPUs.
	out = c.ctrQuiet("run", "--rm", gs, "gpuslice-slices-nvml", "/gpuslice", "dra", "slices", "--node", "n1")
	if strings.Contains(out, "kind: ResourceSlice") || !strings.Contains(out, "libnvidia-ml.so.1") {
		t.Errorf("gpuslice dra slices without NVML and without --simulate printed:\n%s", out)
	}

	sched := images["gpuslice-scheduler-"+version+".tar"]
	out = c.ctr(t, "run", "--rm", "--user", "65532", sched, "scheduler-version", "/gpuslice-scheduler", "--version")
	t.Logf("gpuslice-scheduler --version as uid 65532: %q", out)
	if !strings.Contains(out, "Kubernetes v1.36.3") {
		t.Errorf("gpuslice-scheduler --version printed %q, want Kubernetes v1.36.3", out)
	}

	// pause runs until SIGTERM (ctr task kill's default) and exits 0.
	pause := exec.Command(bin.ctr, c.args("run", "--rm", images["test-pause-"+version+".tar"], "pause-1")...)
	var pauseOut bytes.Buffer
	pause.Stdout, pause.Stderr = &pauseOut, &pauseOut
	if err := pause.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- pause.Wait() }()
	testkit.Eventually(t, 30*time.Second, "pause-1 to run", func() (bool, string) {
		ls := c.ctrQuiet("task", "ls")
		return regexp.MustCompile(`(?m)^pause-1\s+\d+\s+RUNNING`).MatchString(ls), ls + "\n" + pauseOut.String()
	})
	time.Sleep(200 * time.Millisecond) // past the Go runtime's start, to the handler
	c.ctr(t, "task", "kill", "pause-1")
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("pause after SIGTERM: %v, want exit 0\n%s", err, pauseOut.String())
		}
	case <-time.After(30 * time.Second):
		_ = pause.Process.Kill()
		t.Fatalf("pause did not exit within 30 s of SIGTERM\n%s", pauseOut.String())
	}
}

type nodeBin struct{ containerd, ctr, dir string }

// nodeBinaries finds containerd, ctr and the runc shim, and runc; it skips
// the test (fails it with GPUSLICE_REQUIRE_NODE=1) when something is
// missing.
func nodeBinaries(t *testing.T) nodeBin {
	t.Helper()
	missing := func(format string, args ...any) {
		t.Helper()
		msg := fmt.Sprintf(format, args...)
		if os.Getenv("GPUSLICE_REQUIRE_NODE") == "1" {
			t.Fatal(msg + " (GPUSLICE_REQUIRE_NODE=1)")
		}
		t.Skip(msg)
	}
	if os.Geteuid() != 0 {
		missing("needs root to run containerd and runc (uid %d)", os.Geteuid())
	}
	dir := os.Getenv("GPUSLICE_NODE_BIN")
	if dir == "" {
		cache := os.Getenv("GPUSLICE_CACHE")
		if cache == "" {
			home, err := os.UserHomeDir()
			if err != nil {
				t.Fatal(err)
			}
			cache = filepath.Join(home, ".cache", "gpuslice")
		}
		dir = filepath.Join(cache, "node", nodeRelease)
	}
	for _, name := range []string{"containerd", "ctr", "containerd-shim-runc-v2"} {
		if _, err := os.Stat(filepath.Join(dir, name)); err != nil {
			missing("containerd v2.4.2 is not built: %v (run scripts/realnode.sh, or set GPUSLICE_NODE_BIN)", err)
		}
	}
	if _, err := exec.LookPath("runc"); err != nil {
		missing("runc is not on PATH (apt-get install runc; scripts/realnode.sh does)")
	}
	return nodeBin{containerd: filepath.Join(dir, "containerd"), ctr: filepath.Join(dir, "ctr"), dir: dir}
}

func chartAppVersion(t *testing.T, repo string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(repo, "deploy", "helm", "gpuslice", "Chart.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^appVersion:\s*"?([^"\s]+)"?\s*$`).FindSubmatch(b)
	if m == nil {
		t.Fatal("Chart.yaml has no appVersion")
	}
	return string(m[1])
}

type containerd struct {
	bin    nodeBin
	socket string
}

func (c *containerd) args(args ...string) []string {
	return append([]string{"--address", c.socket, "--namespace", "k8s.io"}, args...)
}

// ctr runs ctr against c and returns its stdout, failing the test on error.
func (c *containerd) ctr(t *testing.T, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, c.bin.ctr, c.args(args...)...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("ctr %s: %v\nstdout:\n%s\nstderr:\n%s", strings.Join(args, " "), err, out, stderr.String())
	}
	return string(out)
}

func (c *containerd) ctrQuiet(args ...string) string {
	out, _ := exec.Command(c.bin.ctr, c.args(args...)...).CombinedOutput()
	return string(out)
}

// startContainerd starts a containerd of the test's own: root and state in
// a temporary directory, its socket under /tmp (a unix socket's path must
// stay under 108 bytes), the CRI plugins off (ctr needs none of them). It
// is stopped, and its mounts undone, when the test ends.
func startContainerd(t *testing.T, bin nodeBin) *containerd {
	t.Helper()
	sockDir, err := os.MkdirTemp("/tmp", "gs-ctr-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(sockDir) })
	socket := filepath.Join(sockDir, "containerd.sock")
	if len(socket)+len(".ttrpc") >= 100 {
		t.Fatalf("socket path %s is too long for a unix socket", socket)
	}
	dir := t.TempDir()
	config := fmt.Sprintf(`version = 3
root = %q
state = %q
disabled_plugins = ["io.containerd.grpc.v1.cri", "io.containerd.cri.v1.runtime", "io.containerd.cri.v1.images", "io.containerd.podsandbox.controller.v1.podsandbox"]

[grpc]
  address = %q

[ttrpc]
  address = %q
`, filepath.Join(dir, "root"), filepath.Join(dir, "state"), socket, socket+".ttrpc")
	cfgPath := filepath.Join(dir, "config.toml")
	if err := os.WriteFile(cfgPath, []byte(config), 0o644); err != nil {
		t.Fatal(err)
	}
	logFile, err := os.Create(filepath.Join(dir, "containerd.log"))
	if err != nil {
		t.Fatal(err)
	}
	runc, _ := exec.LookPath("runc")
	cmd := exec.Command(bin.containerd, "--config", cfgPath)
	// The shim is found on PATH, and runc by the shim.
	cmd.Env = append(os.Environ(), "PATH="+bin.dir+":"+filepath.Dir(runc)+":/usr/sbin:/usr/bin:/sbin:/bin")
	cmd.Stdout, cmd.Stderr = logFile, logFile
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	c := &containerd{bin: bin, socket: socket}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(20 * time.Second):
			_ = cmd.Process.Kill()
			<-exited
		}
		logFile.Close()
		unmountUnder(t, dir)
		if t.Failed() {
			if b, err := os.ReadFile(logFile.Name()); err == nil {
				t.Logf("containerd's log (last 4 KiB):\n%s", tail(b, 4096))
			}
		}
	})
	testkit.Eventually(t, 30*time.Second, "containerd to answer", func() (bool, string) {
		out, err := exec.Command(bin.ctr, "--address", socket, "version").CombinedOutput()
		if err == nil {
			return true, ""
		}
		select {
		case <-exited:
			b, _ := os.ReadFile(logFile.Name())
			t.Fatalf("containerd exited at start:\n%s", tail(b, 4096))
		default:
		}
		return false, fmt.Sprintf("%v\n%s", err, out)
	})
	return c
}

// unmountUnder lazily unmounts whatever containerd left mounted under dir
// (deepest first), so that the temporary directory can be removed.
func unmountUnder(t *testing.T, dir string) {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return
	}
	defer f.Close()
	var mounts []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) > 4 && strings.HasPrefix(fields[4], dir+"/") {
			mounts = append(mounts, fields[4])
		}
	}
	slices.Sort(mounts)
	slices.Reverse(mounts)
	for _, m := range mounts {
		if err := syscall.Unmount(m, syscall.MNT_DETACH); err != nil {
			t.Logf("unmount %s: %v", m, err)
		}
	}
}

func tail(b []byte, n int) []byte {
	if len(b) > n {
		return b[len(b)-n:]
	}
	return b
}
