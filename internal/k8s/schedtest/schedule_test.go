package schedtest

import (
	"fmt"
	"strings"
	"testing"

	"github.com/gpuslice/gpuslice/internal/k8s/dradriver"
)

// Shares of GPU memory from three namespaces are bound by
// gpuslice-scheduler: each namespace's shares go together on one shared
// GPU (binpack: a join newly holds nothing), no shared GPU serves two
// namespaces (tenant isolation), and what the API server then holds
// passes the allocator's Check.
func TestFractionalPodsOfSeveralNamespaces(t *testing.T) {
	nss := []string{"team-a", "team-b", "team-c"}
	c := newCluster(t, "", nss...)
	for i := range 3 {
		c.addNode(fmt.Sprintf("node-%d", i), "A100-40GB", 2)
	}
	for _, ns := range nss {
		for i := range 4 {
			c.create(podSpec{ns: ns, name: fmt.Sprintf("share-%d", i), class: dradriver.ClassShared, memory: "4Gi"})
		}
	}
	for _, ns := range nss {
		for i := range 4 {
			c.bound(ns, fmt.Sprintf("share-%d", i))
		}
	}
	snap := c.check()
	if snap.Claims != 12 {
		t.Fatalf("%d claims allocated, want 12", snap.Claims)
	}
	_, claims := c.snapshot()
	devices := tenantsPerDevice(claims)
	for dev, tenants := range devices {
		if !isShared(dev) {
			t.Errorf("a 4Gi share got %s, not a shared GPU", dev)
		}
		if len(tenants) != 1 {
			t.Errorf("shared GPU %s serves %d namespaces: %v", dev, len(tenants), tenants)
		}
	}
	if len(devices) != 3 {
		t.Errorf("12 shares of 4Gi from 3 namespaces hold %d shared GPUs, want 3 (one per namespace): %v", len(devices), devices)
	}
	for _, rc := range claims {
		r := rc.Status.Allocation.Devices.Results[0]
		if m := r.ConsumedCapacity["memory"]; m.String() != "4Gi" || r.ShareID == nil || !strings.HasPrefix(r.Device, "gpu-") {
			t.Errorf("claim %s/%s: result %+v", rc.Namespace, rc.Name, r)
		}
		if len(rc.Status.ReservedFor) != 1 || rc.Status.ReservedFor[0].Name != rc.Name {
			t.Errorf("claim %s/%s reserved for %+v", rc.Namespace, rc.Name, rc.Status.ReservedFor)
		}
	}
}
