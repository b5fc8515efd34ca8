package draalloc

import (
	"errors"
	"fmt"
	"sort"

	resourceapi "k8s.io/api/resource/v1"

	"github.com/gpuslice/gpuslice/internal/alloc"
	"github.com/gpuslice/gpuslice/internal/catalog"
	"github.com/gpuslice/gpuslice/internal/k8s/dranames"
)

// NewState builds the allocator's state over nodes holding allocs (read
// back with FromResult; Slots numbers them here). Each allocation is
// restored with the layout changes that make it true on idle hardware
// (alloc.State.Restore); failed says which could not be (two claims on
// one exclusive device, overlapping MIG instances, more memory than a
// GPU has): a scheduler treats them as a fault to report, never as room.
func NewState(nodes []*NodeDevices, allocs []*alloc.Allocation, policy alloc.Policy, cat *catalog.Catalog) (s *alloc.State, failed map[string]error, err error) {
	f := alloc.Fleet{Policy: policy}
	for _, nd := range nodes {
		f.Nodes = append(f.Nodes, nd.Node)
	}
	s, err = alloc.NewState(f, nil, alloc.Options{Catalog: cat})
	if err != nil {
		return nil, nil, err
	}
	as := append([]*alloc.Allocation(nil), allocs...)
	Slots(as)
	_, failed = s.Restore(as)
	return s, failed, nil
}

// Snapshot is what the API server holds for gpuslice: every node's
// devices and every allocation of gpuslice devices.
type Snapshot struct {
	Nodes  []*NodeDevices
	Allocs []*alloc.Allocation
	// Claims is the number of claims with gpuslice devices allocated.
	Claims int
}

// Read builds a Snapshot from lists of ResourceSlices and ResourceClaims,
// as a test or an operator reads them from the API server.
func Read(slices []*resourceapi.ResourceSlice, claims []*resourceapi.ResourceClaim, cat *catalog.Catalog) (*Snapshot, error) {
	byNode := map[string][]*resourceapi.ResourceSlice{}
	for _, s := range slices {
		if s.Spec.NodeName != nil {
			byNode[*s.Spec.NodeName] = append(byNode[*s.Spec.NodeName], s)
		}
	}
	names := make([]string, 0, len(byNode))
	for n := range byNode {
		names = append(names, n)
	}
	sort.Strings(names)
	snap := &Snapshot{}
	nodes := map[string]*NodeDevices{}
	for _, n := range names {
		nd, err := NodeFromSlices(n, nil, byNode[n], cat)
		if err != nil {
			return nil, err
		}
		if len(nd.Node.GPUs) > 0 {
			snap.Nodes = append(snap.Nodes, nd)
			nodes[n] = nd
		}
	}
	for _, rc := range claims {
		if rc.Status.Allocation == nil {
			continue
		}
		node := AllocatedNode(rc.Status.Allocation)
		nd := nodes[node]
		if nd == nil {
			if IsOurs(rc) {
				return nil, fmt.Errorf("claim %s is allocated on node %q, which publishes no gpuslice devices", ClaimName(rc), node)
			}
			continue
		}
		a, ok, err := FromResult(rc, rc.Status.Allocation, nd, cat)
		if err != nil {
			return nil, err
		}
		if ok {
			snap.Allocs = append(snap.Allocs, a)
			snap.Claims++
		}
	}
	return snap, nil
}

// Check restores every allocation of the snapshot into one State and runs
// the allocator's Check: no device promised more than it has, one tenant
// per shared device (unless all chose isolation none), exclusive devices
// held alone, every MIG layout valid. Any allocation that cannot be
// restored is an error too.
func (snap *Snapshot) Check(policy alloc.Policy, cat *catalog.Catalog) error {
	s, failed, err := NewState(snap.Nodes, snap.Allocs, policy, cat)
	if err != nil {
		return err
	}
	var errs []error
	names := make([]string, 0, len(failed))
	for n := range failed {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		errs = append(errs, fmt.Errorf("allocation %s: %w", n, failed[n]))
	}
	if err := s.Check(); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// AllocatedNode is the node an allocation's node selector names (the
// metadata.name field the scheduler writes), or "".
func AllocatedNode(res *resourceapi.AllocationResult) string {
	if res == nil || res.NodeSelector == nil {
		return ""
	}
	for _, t := range res.NodeSelector.NodeSelectorTerms {
		for _, f := range t.MatchFields {
			if f.Key == "metadata.name" && len(f.Values) == 1 {
				return f.Values[0]
			}
		}
	}
	// The stock allocator writes a node name for node-local slices the
	// same way; a result without one is read from its pool (gpuslice's
	// pools are named after the node).
	for _, r := range res.Devices.Results {
		if r.Driver == dranames.DriverName {
			return r.Pool
		}
	}
	return ""
}

// HoldsOurs reports whether an allocation holds any gpuslice device
// (a claim of another driver's classes may still have been given
// gpuslice devices, e.g. nvidia.com/gpu pods through the whole-GPU
// class's extended resource name).
func HoldsOurs(res *resourceapi.AllocationResult) bool {
	if res == nil {
		return false
	}
	for _, r := range res.Devices.Results {
		if r.Driver == dranames.DriverName {
			return true
		}
	}
	return false
}
