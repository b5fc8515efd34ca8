package dradriver

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/dynamic-resource-allocation/cel"
	"k8s.io/dynamic-resource-allocation/structured"

	"github.com/gpuslice/gpuslice/internal/catalog"
	"github.com/gpuslice/gpuslice/internal/k8s/dranames"
	"github.com/gpuslice/gpuslice/internal/mig"
)

type classes map[string]*resourceapi.DeviceClass

func (l classes) List() ([]*resourceapi.DeviceClass, error) {
	out := make([]*resourceapi.DeviceClass, 0, len(l))
	for _, c := range l {
		out = append(out, c)
	}
	return out, nil
}

func (l classes) Get(name string) (*resourceapi.DeviceClass, error) {
	if c, ok := l[name]; ok {
		return c, nil
	}
	return nil, fmt.Errorf("deviceclass %s not found", name)
}

// stockFirstFit runs the stock structured allocator (k8s.io/dynamic-
// resource-allocation, as kube-scheduler's DynamicResources plugin does)
// on one GPU's published slices, one claim per MIG profile.
type stockFirstFit struct {
	t       *testing.T
	geo     *mig.Geometry
	slices  []*resourceapi.ResourceSlice
	classes classes
	cache   *cel.Cache
	node    *corev1.Node
	claims  []*resourceapi.ResourceClaim // by profile index
	start   map[string]int               // device name → start
	fits    map[string]bool              // multiset key → fits the GPU
}

func newStockFirstFit(t *testing.T, model string, reorder func([]resourceapi.Device)) *stockFirstFit {
	cat := catalog.Default()
	m, err := cat.GPU(model)
	if err != nil {
		t.Fatal(err)
	}
	geo, err := mig.New(m)
	if err != nil {
		t.Fatal(err)
	}
	sl, err := Slices(node("n", model, 1), 1, "", cat)
	if err != nil {
		t.Fatal(err)
	}
	s := &stockFirstFit{t: t, geo: geo, classes: classes{}, cache: cel.NewCache(10, cel.Features{}),
		node:  &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n", Labels: map[string]string{"kubernetes.io/hostname": "n"}}},
		start: map[string]int{}, fits: map[string]bool{}}
	for i := range sl {
		if reorder != nil {
			reorder(sl[i].Spec.Devices)
		}
		s.slices = append(s.slices, &sl[i])
		for _, d := range sl[i].Spec.Devices {
			if st := d.Attributes["start"].IntValue; st != nil {
				s.start[d.Name] = int(*st)
			}
		}
	}
	for _, c := range DeviceClasses() {
		s.classes[c.Name] = &c
	}
	for _, sh := range geo.Shapes {
		name := "claim-" + dranames.ProfileLabel(sh.Name)
		s.claims = append(s.claims, &resourceapi.ResourceClaim{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "t", UID: types.UID(name)},
			Spec: resourceapi.ResourceClaimSpec{Devices: resourceapi.DeviceClaim{Requests: []resourceapi.DeviceRequest{{
				Name: "mig", Exactly: &resourceapi.ExactDeviceRequest{DeviceClassName: dranames.ClassMIG,
					AllocationMode: resourceapi.DeviceAllocationModeExactCount, Count: 1,
					Selectors: []resourceapi.DeviceSelector{{CEL: &resourceapi.CELDeviceSelector{
						Expression: fmt.Sprintf("device.attributes[%q].profile == %q", dranames.DriverName, sh.Name)}}}}}}}},
		})
	}
	return s
}

// allocate asks the stock allocator for profile p beside the allocated
// devices; it returns the device's name, or "" when none fits.
func (s *stockFirstFit) allocate(allocated sets.Set[structured.DeviceID], p int) string {
	features := structured.Features{AdminAccess: true, PrioritizedList: true, PartitionableDevices: true,
		DeviceTaints: true, ConsumableCapacity: true}
	state := structured.AllocatedState{AllocatedDevices: allocated, AllocatedSharedDeviceIDs: sets.New[structured.SharedDeviceID](),
		AggregatedCapacity: structured.NewConsumedCapacityCollection()}
	a, err := structured.NewAllocator(context.Background(), features, state, s.classes, s.slices, s.cache)
	if err != nil {
		s.t.Fatal(err)
	}
	res, err := a.Allocate(context.Background(), s.node, []*resourceapi.ResourceClaim{s.claims[p]})
	if errors.Is(err, structured.ErrFailedAllocationOnNode) || (err == nil && len(res) == 0) {
		return ""
	}
	if err != nil {
		s.t.Fatal(err)
	}
	return res[0].Devices.Results[0].Device
}

// fitsWith says whether the profiles counts holds, and one more p, fit
// the GPU in some layout (mig.Geometry.Fit, an exhaustive search).
func (s *stockFirstFit) fitsWith(counts []int, p int) bool {
	var names []string
	for q, n := range counts {
		for range n + b2i(q == p) {
			names = append(names, s.geo.Shapes[q].Name)
		}
	}
	key := strings.Join(names, "+")
	if v, ok := s.fits[key]; ok {
		return v
	}
	_, err := s.geo.Fit(names)
	s.fits[key] = err == nil
	return err == nil
}

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}

// smallerFirst is the small-first order of the arrival property: fewer
// memory slices, then fewer compute slices, then catalog order.
func smallerFirst(g *mig.Geometry, a, b int) bool {
	sa, sb := &g.Shapes[a], &g.Shapes[b]
	if sa.Size != sb.Size {
		return sa.Size < sb.Size
	}
	if sa.Compute != sb.Compute {
		return sa.Compute < sb.Compute
	}
	return a < b
}

// served walks every arrival sequence of plain profiles whose multiset
// fits (each request allocated before the next arrives, none released)
// and counts the sequences placed in full, small-first ones apart. At
// each request it checks that the stock allocator took the start
// mig.Geometry.FirstFitOrder lists first among the free ones, when
// checkOrder is set.
func (s *stockFirstFit) served(checkOrder bool) (smallFirst, all int) {
	g := s.geo
	counts := make([]int, len(g.Shapes))
	allocated := sets.New[structured.DeviceID]()
	var rec func(o mig.Occupancy, sorted bool, last int)
	rec = func(o mig.Occupancy, sorted bool, last int) {
		for p := range g.Shapes {
			if g.Shapes[p].ME || !s.fitsWith(counts, p) {
				continue
			}
			dev := s.allocate(allocated, p)
			want := -1
			for _, st := range g.FirstFitOrder(p) {
				if g.CanAdd(o, p, st) {
					want = st
					break
				}
			}
			if dev == "" {
				if checkOrder && want >= 0 {
					s.t.Fatalf("%s: %s not allocated beside %+v; FirstFitOrder has %d free", g.Model, g.Shapes[p].Name, counts, want)
				}
				continue
			}
			st := s.start[dev]
			if checkOrder && st != want {
				s.t.Fatalf("%s: stock allocator took %s, FirstFitOrder says start %d", g.Model, dev, want)
			}
			srt := sorted && (last < 0 || !smallerFirst(g, p, last))
			all++
			if srt {
				smallFirst++
			}
			id := structured.MakeDeviceID(dranames.DriverName, "n", dev)
			allocated.Insert(id)
			counts[p]++
			rec(g.Add(o, p, st), srt, p)
			counts[p]--
			allocated.Delete(id)
		}
	}
	rec(mig.Occupancy{}, true, -1)
	return smallFirst, all
}

// bestStartServed is the same walk with gpuslice's own rule
// (mig.Geometry.BestStart, what alloc and gpuslice-scheduler place by).
func bestStartServed(s *stockFirstFit) (smallFirst, all int) {
	g := s.geo
	counts := make([]int, len(g.Shapes))
	var rec func(o mig.Occupancy, sorted bool, last int)
	rec = func(o mig.Occupancy, sorted bool, last int) {
		for p := range g.Shapes {
			if g.Shapes[p].ME || !s.fitsWith(counts, p) {
				continue
			}
			st, ok := g.BestStart(o, p)
			if !ok {
				continue
			}
			srt := sorted && (last < 0 || !smallerFirst(g, p, last))
			all++
			if srt {
				smallFirst++
			}
			counts[p]++
			rec(g.Add(o, p, st), srt, p)
			counts[p]--
		}
	}
	rec(mig.Occupancy{}, true, -1)
	return smallFirst, all
}

// highestStartFirst is the order the driver published before: each
// profile's placements from the highest start down.
func highestStartFirst(devs []resourceapi.Device) {
	group := map[string]int{}
	for i, d := range devs {
		if p := d.Attributes["profile"].StringValue; p != nil {
			if _, ok := group[*p]; !ok {
				group[*p] = i
			}
		}
	}
	key := func(d resourceapi.Device) (int, int) {
		p := d.Attributes["profile"].StringValue
		if p == nil {
			return len(devs), 0
		}
		return group[*p], -int(*d.Attributes["start"].IntValue)
	}
	sort.SliceStable(devs, func(i, j int) bool {
		gi, si := key(devs[i])
		gj, sj := key(devs[j])
		if gi != gj {
			return gi < gj
		}
		return si < sj
	})
}

// The stock kube-scheduler takes the first device that fits, in slice
// order, so the order the driver publishes is its placement rule. For every
// arrival sequence of MIG profiles whose multiset fits one GPU (every order,
// each claim allocated before the next, none released), the stock
// allocator of k8s.io/dynamic-resource-allocation on the published slices
// places exactly where first fit over mig.Geometry.FirstFitOrder does, and
// places in full as many small-first sequences as gpuslice's own allocator
// (BestStart) — the most any online rule places — and more sequences in
// all than the order published before (highest start first).
func TestStockFirstFitKeepsRoom(t *testing.T) {
	t.Parallel()
	seen := map[int]bool{}
	for _, m := range catalog.Default().GPUs() {
		if m.MIG == nil {
			continue
		}
		s := newStockFirstFit(t, m.ID, nil)
		sf, all := s.served(true)
		bsf, ball := bestStartServed(s)
		if sf != bsf {
			t.Errorf("%s: stock first fit places %d small-first sequences in full, gpuslice's allocator %d", m.ID, sf, bsf)
		}
		if !seen[m.MIG.MemorySlices] {
			// The order before, once per shape (the stock allocator is
			// slow enough to count).
			seen[m.MIG.MemorySlices] = true
			old := newStockFirstFit(t, m.ID, highestStartFirst)
			osf, oall := old.served(false)
			if all < oall || sf < osf {
				t.Errorf("%s: stock first fit places %d small-first, %d in all; before %d, %d", m.ID, sf, all, osf, oall)
			}
			t.Logf("%s: sequences placed in full, small-first / all: stock first fit on our order %d / %d, on highest start first %d / %d; gpuslice's allocator %d / %d",
				m.ID, sf, all, osf, oall, bsf, ball)
		}
	}
	if len(seen) < 2 {
		t.Fatalf("MIG models of %v memory slices only", seen)
	}
}
