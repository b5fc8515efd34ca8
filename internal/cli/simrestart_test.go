package cli

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gpuslice/gpuslice/internal/alloc"
	"github.com/gpuslice/gpuslice/internal/api"
	"github.com/gpuslice/gpuslice/internal/catalog"
	"github.com/gpuslice/gpuslice/internal/testkit"
)

// Stopping serve and starting it again on simulated GPUs keeps a running
// MIG claim where it is: the simulated GPUs keep their instances (as real
// ones do), so the restart adopts the claim instead of re-queueing it.
func TestServeRestartKeepsRunningMIGClaimOnSimulatedGPUs(t *testing.T) {
	if testing.Short() {
		t.Skip("spawns servers")
	}
	t.Parallel()
	dir := t.TempDir()
	addr := freePort(t)
	child := startServe(t, dir, addr)
	tokB, err := os.ReadFile(filepath.Join(dir, "admin.token"))
	if err != nil {
		t.Fatal(err)
	}
	token := strings.TrimSpace(string(tokB))
	req := map[string]any{"tenant": "default", "requests": []alloc.Request{{Name: "gpu", Mode: alloc.MIG, Profile: "3g.40gb"}}}
	var c api.Claim
	if code, err := apiCall(addr, token, "POST", "/v1/claims", req, &c); err != nil || code != 201 {
		t.Fatalf("create: %d %v", code, err)
	}
	placed(t, addr, token, &c, 20*time.Second, "the local agent to make the instance", nil)
	device := c.Allocation.Devices[0].Device
	if code, err := apiCall(addr, token, "POST", "/v1/claims/"+c.ID+"/running", nil, nil); err != nil || code != 200 {
		t.Fatalf("running: %d %v", code, err)
	}
	// A time-sliced claim with no memory is promised the GPU's default
	// share (1/16 of its memory), and keeps that promise across a restart.
	shareReq := map[string]any{"tenant": "default", "requests": []alloc.Request{{Name: "gpu", Mode: alloc.TimeSlice}}}
	var sc api.Claim
	if code, err := apiCall(addr, token, "POST", "/v1/claims", shareReq, &sc); err != nil || code != 201 {
		t.Fatalf("create shared: %d %v", code, err)
	}
	placed(t, addr, token, &sc, 20*time.Second, "the shared claim to be placed", nil)
	shareDev, shareMiB := sc.Allocation.Devices[0].Device, sc.Allocation.Devices[0].MemoryMiB
	var before api.Node
	if _, err := apiCall(addr, token, "GET", "/v1/nodes/crashnode", nil, &before); err != nil {
		t.Fatal(err)
	}
	if want := defaultShareMiB(t, before); shareMiB != want {
		t.Fatalf("a time-sliced claim with no memory was promised %d MiB on %s, want the GPU's 1/16: %d MiB", shareMiB, shareDev, want)
	}
	if code, err := apiCall(addr, token, "POST", "/v1/claims/"+sc.ID+"/running", nil, nil); err != nil || code != 200 {
		t.Fatalf("running shared: %d %v", code, err)
	}
	_ = child.Process.Signal(syscall.SIGTERM)
	_ = child.Wait()

	restarted := time.Now()
	child = startServe(t, dir, addr)
	defer func() { _ = child.Process.Signal(syscall.SIGTERM); _ = child.Wait() }()
	// The local agent registers again with what the GPUs hold now.
	var node api.Node
	testkit.Eventually(t, 20*time.Second, "the local node to register again", func() (bool, string) {
		if _, err := apiCall(addr, token, "GET", "/v1/nodes/crashnode", nil, &node); err != nil {
			t.Fatal(err)
		}
		return node.LastHeartbeat.After(restarted), fmt.Sprintf("last heartbeat %s", node.LastHeartbeat)
	})
	found := false
	for _, g := range node.Inventory.GPUs {
		for _, in := range g.Instances {
			found = found || in.UUID == device
		}
	}
	if !found {
		t.Fatalf("after a restart the simulated GPUs lost instance %s", device)
	}
	var after api.Claim
	if _, err := apiCall(addr, token, "GET", "/v1/claims/"+c.ID, nil, &after); err != nil {
		t.Fatal(err)
	}
	if after.State != api.Running || after.Allocation == nil || after.Allocation.Devices[0].Device != device {
		t.Fatalf("after a restart the running claim is %s on %v (reason %q), want running on %s", after.State, after.Allocation, after.Reason, device)
	}
	if _, err := apiCall(addr, token, "GET", "/v1/claims/"+sc.ID, nil, &after); err != nil {
		t.Fatal(err)
	}
	if after.State != api.Running || after.Allocation == nil || after.Allocation.Devices[0].Device != shareDev ||
		after.Allocation.Devices[0].MemoryMiB != shareMiB {
		t.Fatalf("after a restart the shared claim is %s on %v, want running on %s with %d MiB", after.State, after.Allocation, shareDev, shareMiB)
	}
}

// placed waits until claim c (read again from serve at addr) is placed on
// a real device, not a planned one; serve's logs, if given, go with a
// failure.
func placed(t *testing.T, addr, token string, c *api.Claim, within time.Duration, what string, logs *syncBuffer) {
	t.Helper()
	testkit.Eventually(t, within, what, func() (bool, string) {
		if c.Allocation != nil && !alloc.IsPlanned(c.Allocation.Devices[0].Device) {
			return true, ""
		}
		if _, err := apiCall(addr, token, "GET", "/v1/claims/"+c.ID, nil, c); err != nil {
			t.Fatal(err)
		}
		last := fmt.Sprintf("%+v", *c)
		if logs != nil {
			last += "\nserve:\n" + logs.String()
		}
		return c.Allocation != nil && !alloc.IsPlanned(c.Allocation.Devices[0].Device), last
	})
}

// defaultShareMiB is 1/16 of the memory of the node's first GPU model, as
// the catalog gives it.
func defaultShareMiB(t *testing.T, n api.Node) int64 {
	t.Helper()
	if len(n.Inventory.GPUs) == 0 {
		t.Fatal("node has no GPUs")
	}
	m, err := catalog.Default().GPU(n.Inventory.GPUs[0].Model)
	if err != nil {
		t.Fatal(err)
	}
	return m.MemoryMiB / 16
}
