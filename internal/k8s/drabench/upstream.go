package drabench

import (
	"context"
	"errors"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/dynamic-resource-allocation/cel"
	"k8s.io/dynamic-resource-allocation/structured"
)

// UpstreamFeatures are the DRA features the upstream allocator runs with:
// the set its "stable" implementation supports (admin access, prioritized
// lists, partitionable devices, device taints), so NewAllocator picks that
// implementation, as a scheduler with only those gates on would.
var UpstreamFeatures = structured.Features{AdminAccess: true, PrioritizedList: true,
	PartitionableDevices: true, DeviceTaints: true}

// DeviceClassName is the one DeviceClass every claim uses.
const DeviceClassName = "gpu.nvidia.com"

type classLister map[string]*resourceapi.DeviceClass

func (l classLister) List() ([]*resourceapi.DeviceClass, error) {
	out := make([]*resourceapi.DeviceClass, 0, len(l))
	for _, c := range l {
		out = append(out, c)
	}
	return out, nil
}

func (l classLister) Get(name string) (*resourceapi.DeviceClass, error) {
	if c, ok := l[name]; ok {
		return c, nil
	}
	return nil, fmt.Errorf("deviceclass %s not found", name)
}

type upstreamSide struct {
	ctx       context.Context
	nodes     []*corev1.Node
	slices    []*resourceapi.ResourceSlice
	classes   classLister
	cache     *cel.Cache
	claims    []*resourceapi.ResourceClaim
	models    map[structured.DeviceID]string
	allocated sets.Set[structured.DeviceID]
	// cursor is the node the next decision starts at (kube-scheduler's
	// nextStartNodeIndex).
	cursor int
	// calls counts per-node Allocate calls since the side was built.
	calls int64
	last  string
}

func ptrTo[T any](v T) *T { return &v }

func newUpstreamSide(f *fleetSpec) (*upstreamSide, error) {
	u := &upstreamSide{ctx: context.Background(), cache: cel.NewCache(10, cel.Features{}),
		models: map[structured.DeviceID]string{}, allocated: sets.New[structured.DeviceID]()}
	u.classes = classLister{DeviceClassName: {
		ObjectMeta: metav1.ObjectMeta{Name: DeviceClassName},
		Spec: resourceapi.DeviceClassSpec{Selectors: []resourceapi.DeviceSelector{{
			CEL: &resourceapi.CELDeviceSelector{Expression: fmt.Sprintf("device.driver == %q", Driver)}}}},
	}}
	for _, n := range f.nodes {
		u.nodes = append(u.nodes, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: n.name,
			Labels: map[string]string{"kubernetes.io/hostname": n.name}}})
		mem := resource.NewQuantity(n.model.MemoryMiB<<20, resource.BinarySI)
		product := n.model.Name
		if len(n.model.ProductNames) > 0 {
			product = n.model.ProductNames[0]
		}
		slice := &resourceapi.ResourceSlice{
			ObjectMeta: metav1.ObjectMeta{Name: n.name + "-" + Driver},
			Spec: resourceapi.ResourceSliceSpec{
				Driver:   Driver,
				Pool:     resourceapi.ResourcePool{Name: n.name, Generation: 1, ResourceSliceCount: 1},
				NodeName: ptrTo(n.name),
			},
		}
		for i := range GPUsPerNode {
			name := fmt.Sprintf("gpu-%d", i)
			slice.Spec.Devices = append(slice.Spec.Devices, resourceapi.Device{
				Name: name,
				Attributes: map[resourceapi.QualifiedName]resourceapi.DeviceAttribute{
					"model":        {StringValue: ptrTo(n.model.ID)},
					"productName":  {StringValue: ptrTo(product)},
					"architecture": {StringValue: ptrTo(n.model.Arch)},
					"uuid":         {StringValue: ptrTo(gpuUUID(n.name, i))},
					"index":        {IntValue: ptrTo(int64(i))},
				},
				Capacity: map[resourceapi.QualifiedName]resourceapi.DeviceCapacity{
					"memory": {Value: mem.DeepCopy()},
				},
			})
			u.models[structured.MakeDeviceID(Driver, n.name, name)] = n.model.ID
		}
		u.slices = append(u.slices, slice)
	}
	for i, m := range f.claims {
		name := fmt.Sprintf("claim-%d", i)
		u.claims = append(u.claims, &resourceapi.ResourceClaim{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "bench", UID: types.UID("uid-" + name)},
			Spec: resourceapi.ResourceClaimSpec{Devices: resourceapi.DeviceClaim{
				Requests: []resourceapi.DeviceRequest{{
					Name: "gpu",
					Exactly: &resourceapi.ExactDeviceRequest{
						DeviceClassName: DeviceClassName,
						AllocationMode:  resourceapi.DeviceAllocationModeExactCount,
						Count:           1,
						Selectors: []resourceapi.DeviceSelector{{CEL: &resourceapi.CELDeviceSelector{
							Expression: fmt.Sprintf("device.attributes[%q].model == %q", Driver, m)}}},
					},
				}},
			}},
		})
	}
	return u, nil
}

// allocator is what the DRA scheduler plugin builds in PreFilter: an
// allocator over all slices that knows the devices already allocated.
func (u *upstreamSide) allocator() (structured.Allocator, error) {
	return structured.NewAllocator(u.ctx, UpstreamFeatures,
		structured.AllocatedState{AllocatedDevices: u.allocated}, u.classes, u.slices, u.cache)
}

// allocateOn is one Filter call: can claim i be allocated on node n?
func (u *upstreamSide) allocateOn(a structured.Allocator, i, n int) ([]resourceapi.AllocationResult, error) {
	u.calls++
	res, err := a.Allocate(u.ctx, u.nodes[n], []*resourceapi.ResourceClaim{u.claims[i]})
	if err != nil {
		if errors.Is(err, structured.ErrFailedAllocationOnNode) {
			return nil, nil
		}
		return nil, fmt.Errorf("claim %s on %s: %w", u.claims[i].Name, u.nodes[n].Name, err)
	}
	return res, nil
}

func (u *upstreamSide) decide(i int) (bool, error) {
	a, err := u.allocator()
	if err != nil {
		return false, err
	}
	for k := range u.nodes {
		n := (u.cursor + k) % len(u.nodes)
		res, err := u.allocateOn(a, i, n)
		if err != nil {
			return false, err
		}
		if len(res) == 0 {
			continue
		}
		u.cursor = (n + 1) % len(u.nodes)
		return true, u.commit(i, res)
	}
	return false, nil
}

// commit records the devices of claim i's allocation as allocated, as the
// scheduler's allocated-devices tracker does once the claim is assumed.
func (u *upstreamSide) commit(i int, res []resourceapi.AllocationResult) error {
	if len(res) != 1 || len(res[0].Devices.Results) != 1 {
		return fmt.Errorf("claim %s: unexpected result %+v", u.claims[i].Name, res)
	}
	d := res[0].Devices.Results[0]
	id := structured.MakeDeviceID(d.Driver, d.Pool, d.Device)
	if u.allocated.Has(id) {
		return fmt.Errorf("claim %s: device %s allocated twice", u.claims[i].Name, id)
	}
	u.allocated.Insert(id)
	u.last = u.models[id]
	return nil
}

// numFeasibleNodesToFind is kube-scheduler's rule for how many feasible
// nodes Filter must find before scoring (percentageOfNodesToScore unset:
// adaptive, 50% less 1% per 125 nodes, at least 5%, and at least 100
// nodes).
func numFeasibleNodesToFind(all int) int {
	const minNodes, basePercent, minPercent = 100, 50, 5
	if all < minNodes {
		return all
	}
	percent := max(basePercent-all/125, minPercent)
	return max(all*percent/100, minNodes)
}

// decideScheduler is a decision as kube-scheduler makes it: Filter (one
// per-node Allocate) runs on nodes from the rotating start index until
// numFeasibleNodesToFind nodes fit or every node was tried; the first
// feasible node wins (the DRA plugin does not score). kube-scheduler runs
// Filter on 16 goroutines; this runs it serially, so the time is CPU time.
func (u *upstreamSide) decideScheduler(i int) (bool, error) {
	a, err := u.allocator()
	if err != nil {
		return false, err
	}
	want := numFeasibleNodesToFind(len(u.nodes))
	var first []resourceapi.AllocationResult
	feasible, processed := 0, 0
	for k := range u.nodes {
		n := (u.cursor + k) % len(u.nodes)
		res, err := u.allocateOn(a, i, n)
		if err != nil {
			return false, err
		}
		processed++
		if len(res) == 0 {
			continue
		}
		if feasible == 0 {
			first = res
		}
		if feasible++; feasible == want {
			break
		}
	}
	u.cursor = (u.cursor + processed) % len(u.nodes)
	if feasible == 0 {
		return false, nil
	}
	return true, u.commit(i, first)
}

func (u *upstreamSide) lastModel() string { return u.last }

func (u *upstreamSide) reset() error {
	u.allocated.Clear()
	u.cursor = 0
	return nil
}

// schedulerSide is the upstream side deciding as kube-scheduler does (see
// decideScheduler) rather than first-fit.
type schedulerSide struct{ *upstreamSide }

func (s schedulerSide) decide(i int) (bool, error) { return s.decideScheduler(i) }
