package dradriver

import (
	"reflect"
	"strings"
	"testing"

	resourceapi "k8s.io/api/resource/v1"

	"github.com/gpuslice/gpuslice/internal/catalog"
	"github.com/gpuslice/gpuslice/internal/k8s/dranames"
)

// A future node's slices are the driver's slices of the instance type's
// GPUs, less the runtime-only attributes, for every GPU instance type of
// the catalog.
func TestInstanceTypeSlicesAreTheDriversSlices(t *testing.T) {
	cat := catalog.Default()
	its, err := cat.InstanceTypes("")
	if err != nil {
		t.Fatal(err)
	}
	checked := 0
	for _, it := range its {
		if it.GPUCount == 0 {
			continue
		}
		checked++
		got, err := InstanceTypeSlices(strings.ToUpper(it.Name), "", cat)
		if err != nil {
			t.Fatalf("%s: %v", it.Name, err)
		}
		want, err := Slices(node(nodeName(it.Name), it.GPU, it.GPUCount), 1, "", cat)
		if err != nil {
			t.Fatal(err)
		}
		if len(got) != len(want) {
			t.Fatalf("%s: %d slices, the driver publishes %d", it.Name, len(got), len(want))
		}
		for i := range got {
			if got[i].Labels[dranames.InstanceTypeLabel] != it.Name {
				t.Errorf("%s slice %d labelled %q", it.Name, i, got[i].Labels[dranames.InstanceTypeLabel])
			}
			if got[i].Spec.Pool.Name != nodeName(it.Name) {
				t.Errorf("%s: pool %q", it.Name, got[i].Spec.Pool.Name)
			}
			g, _ := cat.GPU(it.GPU)
			k := g.MemoryMiB / 256
			for j := range want[i].Spec.SharedCounters {
				for n, c := range want[i].Spec.SharedCounters[j].Counters {
					gc := got[i].Spec.SharedCounters[j].Counters[n]
					if got := gc.Value.Value(); got != c.Value.Value()*k {
						t.Errorf("%s counter %s: %d, want %d × %d", it.Name, n, got, c.Value.Value(), k)
					}
				}
			}
			for j := range want[i].Spec.Devices {
				d := &want[i].Spec.Devices[j]
				delete(d.Attributes, "uuid")
				delete(d.Attributes, "parentUUID")
				shared := d.AllowMultipleAllocations != nil && *d.AllowMultipleAllocations
				for c := range d.ConsumesCounters {
					for n, v := range d.ConsumesCounters[c].Counters {
						gc := got[i].Spec.Devices[j].ConsumesCounters[c].Counters[n]
						gv := gc.Value.Value()
						if (shared && gv != v.Value.Value()) || (!shared && gv != v.Value.Value()*k) {
							t.Errorf("%s %s consumes %d of %s (shared %v, published %d, k %d)", it.Name, d.Name, gv, n, shared, v.Value.Value(), k)
						}
					}
				}
			}
			want[i].Spec.SharedCounters = got[i].Spec.SharedCounters
			for j := range want[i].Spec.Devices {
				want[i].Spec.Devices[j].ConsumesCounters = got[i].Spec.Devices[j].ConsumesCounters
			}
			delete(got[i].Labels, dranames.InstanceTypeLabel)
			if !reflect.DeepEqual(got[i].Spec, want[i].Spec) {
				t.Errorf("%s slice %d differs from the driver's", it.Name, i)
			}
		}
	}
	if checked < 20 {
		t.Fatalf("only %d GPU instance types", checked)
	}
}

func TestInstanceTypeSlicesErrors(t *testing.T) {
	_, err := InstanceTypeSlices("p4dd.24xlarge", "", nil)
	if !catalog.IsNotFound(err) || !strings.Contains(err.Error(), "g5.xlarge") {
		t.Errorf("unknown instance type: %v, want an error naming the valid ones", err)
	}
	got, err := InstanceTypeSlices("Standard_NC24ads_A100_v4", "", nil)
	if err != nil {
		t.Skipf("no Azure A100 type in the catalog: %v", err)
	}
	if p := got[0].Spec.Pool.Name; p != "standard-nc24ads-a100-v4" {
		t.Errorf("pool %q, want a DNS name", p)
	}
}

// Charged on every allocation (as Karpenter v1.15 charges them), the
// template counters of a MIG GPU still decide as Kubernetes' once-per-
// device charging does: up to k shares fit and k+1 do not; a share
// excludes the whole GPU and every MIG placement; a MIG placement
// excludes shares.
func TestInstanceTypeCountersPerAllocation(t *testing.T) {
	got, err := InstanceTypeSlices("p4d.24xlarge", "", nil)
	if err != nil {
		t.Fatal(err)
	}
	var set resourceapi.CounterSet
	devs := map[string]resourceapi.Device{}
	for _, s := range got {
		for _, cs := range s.Spec.SharedCounters {
			if cs.Name == "gpu-0" {
				set = cs
			}
		}
		for _, d := range s.Spec.Devices {
			if strings.HasPrefix(d.Name, "gpu-0-") || d.Name == "gpu-0" {
				devs[d.Name] = d
			}
		}
	}
	fresh := func() map[string]int64 {
		left := map[string]int64{}
		for n, c := range set.Counters {
			left[n] = c.Value.Value()
		}
		return left
	}
	take := func(left map[string]int64, name string) bool {
		d, ok := devs[name]
		if !ok {
			t.Fatalf("no device %s", name)
		}
		for n, c := range d.ConsumesCounters[0].Counters {
			if left[n] < c.Value.Value() {
				return false
			}
		}
		for n, c := range d.ConsumesCounters[0].Counters {
			left[n] -= c.Value.Value()
		}
		return true
	}
	k := int64(40960 / 256)
	left := fresh()
	for i := range k {
		if !take(left, "gpu-0-shared") {
			t.Fatalf("share %d of %d does not fit", i+1, k)
		}
	}
	if take(left, "gpu-0-shared") {
		t.Errorf("share %d fits", k+1)
	}
	left = fresh()
	take(left, "gpu-0-shared")
	for name := range devs {
		if name != "gpu-0-shared" && take(left, name) {
			t.Errorf("%s fits beside a share", name)
		}
	}
	left = fresh()
	if !take(left, "gpu-0-mig-1g-5gb-at-6") || take(left, "gpu-0-shared") || take(left, "gpu-0") {
		t.Error("a MIG placement does not exclude a share and the whole GPU")
	}
	if !take(left, "gpu-0-mig-3g-20gb-at-0") || take(left, "gpu-0-mig-1g-5gb-at-6") {
		t.Error("MIG placements do not exclude each other exactly")
	}
}
