package nodetest_test

import (
	"bufio"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gpuslice/gpuslice/internal/k8s/nodetest"
)

// TestHelperNode is not a test: TestKilledNodeIsSwept runs the test binary
// with it to have a node whose owner can be killed with SIGKILL.
func TestHelperNode(t *testing.T) {
	if os.Getenv("GPUSLICE_NODETEST_HELPER") != "1" {
		t.Skip("a helper process of TestKilledNodeIsSwept")
	}
	imgs := nodetest.Images(t)
	c, _, err := nodetest.LaunchCluster(context.Background(), t.TempDir(), nodetest.Options{
		Images: []string{imgs.Pause()}, SandboxImage: imgs.PauseTag(), NoScheduler: true})
	if err != nil {
		t.Fatal(err)
	}
	// The parent reads this line, then kills us.
	os.Stdout.WriteString("READY " + strconv.Itoa(c.Node.Slot()) + "\n")
	time.Sleep(10 * time.Minute)
}

// TestKilledNodeIsSwept: the process that started a node is killed with
// SIGKILL, so no cleanup of its runs: its kubelet, containerd, network
// namespace and cgroups are left behind. The next node to take the slot
// sweeps them before it starts, and its own teardown leaves nothing.
func TestKilledNodeIsSwept(t *testing.T) {
	nodetest.SkipUnlessSupported(t)
	imgs := nodetest.Images(t)
	cmd := exec.Command(os.Args[0], "-test.run=^TestHelperNode$", "-test.timeout=15m")
	cmd.Env = append(os.Environ(), "GPUSLICE_NODETEST_HELPER=1", nodetest.EnvImagesDir+"="+imgs.Dir)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	slot := -1
	lines := bufio.NewScanner(out)
	for lines.Scan() {
		if v, ok := strings.CutPrefix(lines.Text(), "READY "); ok {
			slot, _ = strconv.Atoi(v)
			break
		}
	}
	if slot < 0 {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		t.Fatalf("the helper node never became ready")
	}
	_ = cmd.Process.Signal(syscall.SIGKILL)
	_ = cmd.Wait()

	netns := "/run/netns/gsnode-" + strconv.Itoa(slot)
	cgroup := "/sys/fs/cgroup/memory/gsnode-" + strconv.Itoa(slot)
	if _, err := os.Stat(netns); err != nil {
		t.Fatalf("after SIGKILL the node's namespace %s is gone already (%v): this test would prove nothing", netns, err)
	}
	if n := nodeProcs(t, slot); n == 0 {
		t.Fatalf("after SIGKILL no process is left in the node's namespace: this test would prove nothing")
	}

	gone := func(when string) {
		t.Helper()
		for _, p := range []string{netns, cgroup, filepath.Join("/sys/class/net", "gsh-"+strconv.Itoa(slot))} {
			if _, err := os.Stat(p); err == nil {
				t.Errorf("%s: %s is still there", when, p)
			}
		}
		if n := nodeProcs(t, slot); n > 0 {
			t.Errorf("%s: %d processes left in the dead node's namespace", when, n)
		}
	}
	var next int
	t.Run("next", func(t *testing.T) {
		c := nodetest.StartCluster(t, nodetest.Options{Images: []string{imgs.Pause()}, SandboxImage: imgs.PauseTag(), NoScheduler: true})
		next = c.Node.Slot()
		if next != slot {
			gone("once the next node started")
		}
	})
	gone("after the next node's teardown")
	if next != slot {
		slot = next
		netns, cgroup = "/run/netns/gsnode-"+strconv.Itoa(slot), "/sys/fs/cgroup/memory/gsnode-"+strconv.Itoa(slot)
		gone("after the next node's teardown (its own slot)")
	}
}

// nodeProcs counts the processes in slot's network namespace.
func nodeProcs(t *testing.T, slot int) int {
	t.Helper()
	out, err := exec.Command("ip", "netns", "pids", "gsnode-"+strconv.Itoa(slot)).Output()
	if err != nil {
		return 0
	}
	return len(strings.Fields(string(out)))
}
