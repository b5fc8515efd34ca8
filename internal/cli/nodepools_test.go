package cli

import (
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gpuslice/gpuslice/internal/alloc"
	"github.com/gpuslice/gpuslice/internal/api"
)

// serve --node-pools with no node of its own: a claim that waits for
// nodes (a MIG profile) makes the node autoscaler buy a node of the
// cheapest pool that holds it (the A100 pool, not the cheaper T4 or L4
// ones); the simulated node joins and the claim gets a real MIG instance
// on it.
func TestServeNodePoolsBuysANodeForAPendingClaim(t *testing.T) {
	if testing.Short() {
		t.Skip("spawns servers")
	}
	t.Parallel()
	pools, err := filepath.Abs("../../examples/nodepools/pools.yaml")
	if err != nil {
		t.Fatal(err)
	}
	dir, addr, _, _, logs := serveUp(t, "--no-agent", "--node-pools", pools, "--node-interval", "200ms", "--simulate", "dgx-a100")
	admin := adminToken(t, dir)
	req := map[string]any{"tenant": "default", "waitForNodes": true,
		"requests": []alloc.Request{{Name: "gpu", Mode: alloc.MIG, Profile: "3g.20gb"}}}
	var c api.Claim
	if code, err := apiCall(addr, admin, "POST", "/v1/claims", req, &c); err != nil || code != 201 {
		t.Fatalf("create: %d %v", code, err)
	}
	placed(t, addr, admin, &c, 30*time.Second, "the claim to be placed on a real instance", logs)
	if d := c.Allocation.Devices[0]; d.Node != "a100-0" || !strings.HasPrefix(d.Device, "MIG-") || d.Profile != "3g.20gb" {
		t.Fatalf("allocation %+v", d)
	}
	if !strings.Contains(logs.String(), "node added") || !strings.Contains(logs.String(), "pool=a100") {
		t.Fatalf("serve did not log the node it added:\n%s", logs.String())
	}
}

// A compose file's minimumNodesInPool becomes its pool's warm minimum
// (serve --node-pools then keeps that many nodes, see autoscale.PlanNodes).
func TestReadNodePoolsWarmMinimum(t *testing.T) {
	pools, err := readNodePools("../../examples/compose-timeslicing.yaml", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if len(pools) != 1 || pools[0].MinNodes != 1 || pools[0].EmptyTTL != time.Minute || pools[0].Pool.InstanceType != "g4dn.xlarge" {
		t.Fatalf("pools %+v", pools)
	}
}
