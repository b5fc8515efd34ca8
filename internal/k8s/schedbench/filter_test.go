package schedbench

import (
	"context"
	"errors"
	"fmt"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/dynamic-resource-allocation/cel"
	"k8s.io/dynamic-resource-allocation/structured"

	"github.com/gpuslice/gpuslice/internal/k8s/dradriver"
)

// schedulerFeatures are the allocator features kube-scheduler runs with
// under apitest's feature gates.
var schedulerFeatures = structured.Features{AdminAccess: true, PrioritizedList: true, PartitionableDevices: true,
	DeviceTaints: true, DeviceBindingAndStatus: true, ConsumableCapacity: true}

type lister map[string]*resourceapi.DeviceClass

func (l lister) List() ([]*resourceapi.DeviceClass, error) {
	var out []*resourceapi.DeviceClass
	for _, c := range l {
		out = append(out, c)
	}
	return out, nil
}
func (l lister) Get(n string) (*resourceapi.DeviceClass, error) {
	if c, ok := l[n]; ok {
		return c, nil
	}
	return nil, fmt.Errorf("no class %s", n)
}

func classes() lister {
	l := lister{}
	for _, c := range append(dradriver.DeviceClasses(), NVIDIAClasses()...) {
		l[c.Name] = &c
	}
	return l
}

// filterCase is one per-node Allocate, as DynamicResources.Filter runs it
// in the allocator this module links (the 1.37 one).
func filterCase(b testing.TB, shape Shape, w Workload, tenants, migProfiles []string, nodes int) func() {
	var all []*resourceapi.ResourceSlice
	for i := range nodes {
		ss, err := NodeSlices(shape, Node{Name: fmt.Sprintf("node-%03d", i), Model: "A100-40GB", GPUs: 8}, tenants, migProfiles)
		if err != nil {
			b.Fatal(err)
		}
		for j := range ss {
			all = append(all, &ss[j])
		}
	}
	tenant := ""
	if tenants != nil {
		tenant = tenants[0]
	}
	claim, err := Claim(shape, w, tenant+"ns", "c", tenant)
	if err != nil {
		b.Fatal(err)
	}
	claim.UID = types.UID("uid")
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-000", Labels: map[string]string{"kubernetes.io/hostname": "node-000"}}}
	ctx := context.Background()
	cache := cel.NewCache(10, cel.Features{})
	cl := classes()
	return func() {
		a, err := structured.NewAllocator(ctx, schedulerFeatures, structured.AllocatedState{AllocatedDevices: sets.New[structured.DeviceID](),
			AllocatedSharedDeviceIDs: sets.New[structured.SharedDeviceID](), AggregatedCapacity: structured.NewConsumedCapacityCollection()}, cl, all, cache)
		if err != nil {
			b.Fatal(err)
		}
		res, err := a.Allocate(ctx, node, []*resourceapi.ResourceClaim{claim})
		if err != nil && !errors.Is(err, structured.ErrFailedAllocationOnNode) {
			b.Fatal(err)
		}
		if len(res) != 1 {
			b.Fatalf("%s %s: not allocated: %v", shape, w, err)
		}
	}
}

func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func tenantNames(n int) []string {
	var out []string
	for i := range n {
		out = append(out, fmt.Sprintf("team-%d", i))
	}
	return out
}

// BenchmarkFilter is the cost of one DynamicResources.Filter call (one
// node's Allocate) for each shape in the 1.37 allocator.
func BenchmarkFilter(b *testing.B) {
	few := []string{"1g.5gb", "3g.20gb", "7g.40gb"}
	for _, c := range []struct {
		shape   Shape
		w       Workload
		tenants []string
		mig     []string
	}{
		{Gpuslice, Share, nil, nil}, {Gpuslice, Share, tenantNames(10), nil}, {Gpuslice, Whole, nil, nil}, {Gpuslice, Whole, tenantNames(10), nil},
		{Gpuslice, Share, tenantNames(10), few}, {Gpuslice, Share, tenantNames(10), []string{}}, {Gpuslice, Share, nil, []string{}},
		{Gpuslice, Whole, nil, []string{}},
		{NVIDIAShares, Share, nil, nil}, {NVIDIAPartitionable, Whole, nil, nil}, {NVIDIADynamicMIG, Whole, nil, nil},
	} {
		mig := "all"
		if c.mig != nil {
			mig = fmt.Sprint(len(c.mig))
		}
		b.Run(fmt.Sprintf("%s/%s/tenants=%d/mig=%s", c.shape, c.w, len(c.tenants), mig), func(b *testing.B) {
			f := filterCase(b, c.shape, c.w, c.tenants, c.mig, 4)
			start := processCPU()
			for b.Loop() {
				f()
			}
			// CPU time, which other load on a shared machine changes
			// less than wall time (ns/op).
			b.ReportMetric(float64(processCPU()-start)/float64(b.N), "cpu-ns/op")
		})
	}
}
