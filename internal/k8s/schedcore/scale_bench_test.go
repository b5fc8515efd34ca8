package schedcore

import (
	"fmt"
	"testing"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/gpuslice/gpuslice/internal/alloc"
	"github.com/gpuslice/gpuslice/internal/catalog"
	"github.com/gpuslice/gpuslice/internal/k8s/draalloc"
	"github.com/gpuslice/gpuslice/internal/k8s/dradriver"
	"github.com/gpuslice/gpuslice/internal/k8s/dranames"
)

// benchClaim is the i-th claim of the scale test's mix (internal/k8s/
// schedtest TestSchedulerScale): per nine, a whole GPU, six memory shares
// (4, 10, 20 GiB twice), a 3g.20gb and a 1g.5gb; five namespaces in turn.
func benchClaim(i int) *resourceapi.ResourceClaim {
	req := resourceapi.ExactDeviceRequest{AllocationMode: resourceapi.DeviceAllocationModeExactCount, Count: 1}
	prof := func(p string) []resourceapi.DeviceSelector {
		return []resourceapi.DeviceSelector{{CEL: &resourceapi.CELDeviceSelector{Expression: `device.attributes["gpu.gpuslice.dev"].profile == "` + p + `"`}}}
	}
	switch k := i % 9; {
	case k == 0:
		req.DeviceClassName = dranames.ClassGPU
	case k <= 6:
		req.DeviceClassName = dranames.ClassShared
		mem := []string{"4Gi", "10Gi", "20Gi"}[(k-1)%3]
		req.Capacity = &resourceapi.CapacityRequirements{Requests: map[resourceapi.QualifiedName]resource.Quantity{"memory": resource.MustParse(mem)}}
	case k == 7:
		req.DeviceClassName, req.Selectors = dranames.ClassMIG, prof("3g.20gb")
	default:
		req.DeviceClassName, req.Selectors = dranames.ClassMIG, prof("1g.5gb")
	}
	ns, name := fmt.Sprintf("team-%d", i%5), fmt.Sprintf("p-%d", i)
	return &resourceapi.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, UID: types.UID(ns + "-" + name)},
		Spec: resourceapi.ResourceClaimSpec{Devices: resourceapi.DeviceClaim{Requests: []resourceapi.DeviceRequest{{Name: "gpu", Exactly: &req}}}}}
}

// BenchmarkSchedulingCycles is the plugin's share of kube-scheduler's
// scheduling cycles for 1,008 pods on 500 and 5,000 nodes of 8 × A100-40GB,
// without an API server: per pod what PreFilter does (translate, shape),
// Filter on the nodes kube-scheduler would evaluate (every node, or its
// default sample: 50 − nodes/125 percent, at least 100, from a start that
// moves on each cycle), the binpack score, and Reserve on the best node.
// "kept" is Filter as it is (kept verdicts); "decide" runs the allocator
// on every node as Filter did before. Reported: CPU time per pod and the
// GPUs the pods hold at the end (go test -bench SchedulingCycles -run ^$
// -benchtime 1x ./internal/k8s/schedcore/).
func BenchmarkSchedulingCycles(b *testing.B) {
	for _, nodes := range []int{500, 5000} {
		for _, sample := range []string{"default", "all"} {
			for _, mode := range []string{"kept", "decide"} {
				if nodes == 5000 && mode == "decide" && sample == "all" {
					continue // minutes per run; the 10% sample shows the trend
				}
				b.Run(fmt.Sprintf("nodes=%d/filter=%s/%s", nodes, sample, mode), func(b *testing.B) {
					for range b.N {
						benchCycles(b, nodes, sample == "all", mode == "kept")
					}
				})
			}
		}
	}
}

func benchCycles(b *testing.B, nodes int, all, kept bool) {
	b.StopTimer()
	l := NewLedger(draalloc.Policy("binpack"), catalog.Default(), nil)
	names := make([]string, nodes)
	for i := range nodes {
		names[i] = fmt.Sprintf("node-%04d", i)
		an := alloc.Node{Name: names[i]}
		for g := range 8 {
			an.GPUs = append(an.GPUs, alloc.GPU{UUID: fmt.Sprintf("GPU-%s-%d", names[i], g), Index: g, Model: "A100-40GB", Healthy: true})
		}
		sl, err := dradriver.Slices(an, 1, "580.65.06", nil)
		if err != nil {
			b.Fatal(err)
		}
		for j := range sl {
			l.SetSlice(sl[j].Name, names[i], &sl[j])
		}
		// the slices are read once the node is first filtered, as in the
		// scheduler; do it now so the timing is the steady state
		l.mu.Lock()
		if _, err := l.devices(l.node(names[i])); err != nil {
			b.Fatal(err)
		}
		l.mu.Unlock()
	}
	want := nodes
	if !all {
		// kube-scheduler's adaptive percentageOfNodesToScore
		pct := max(50-nodes/125, 5)
		want = max(nodes*pct/100, min(100, nodes))
	}
	const pods = 1008
	start := 0
	b.StartTimer()
	for i := range pods {
		rc := benchClaim(i)
		ac, err := draalloc.Translate(rc, 0)
		if err != nil {
			b.Fatal(err)
		}
		c := &Pod{Namespace: rc.Namespace, Claims: []*resourceapi.ResourceClaim{rc}, ToAlloc: []int{0}, Acs: []*draalloc.Claim{ac},
			Classes: map[string]*resourceapi.DeviceClass{}}
		l.Prepare(c)
		best, bestScore, feasible := "", int64(-1), 0
		processed := 0
		for k := 0; k < nodes && feasible < want; k++ {
			node := names[(start+k)%nodes]
			processed++
			var share, used float64
			if kept {
				v, err := l.verdict(c, node, nil)
				if err != nil {
					b.Fatal(err)
				}
				if v.reason != "" {
					continue
				}
				share, used = v.share, v.used
			} else {
				r, _, _, err := l.decide(c, node, nil, nil, false)
				if err != nil {
					b.Fatal(err)
				}
				if r == nil {
					continue
				}
				share, used = r.share, r.used
			}
			feasible++
			if s := Score("binpack", &NodeResult{share: share, used: used}); s > bestScore {
				best, bestScore = node, s
			}
		}
		start = (start + processed) % nodes
		if best == "" {
			b.Fatalf("pod %d fits nowhere", i)
		}
		if res, out, err := l.Reserve(c, best, nil); err != nil || len(res) == 0 {
			b.Fatalf("reserve pod %d on %s: %q %v", i, best, out.Reason(), err)
		}
	}
	b.StopTimer()
	gpus := map[string]bool{}
	for _, e := range l.claims {
		for _, d := range e.a.Devices {
			gpus[d.GPU] = true
		}
	}
	b.ReportMetric(float64(b.Elapsed().Microseconds())/1000/float64(pods*(b.N)), "ms/pod")
	b.ReportMetric(float64(len(gpus)), "GPUs")
	b.ReportMetric(0, "ns/op")
	b.StartTimer()
}
