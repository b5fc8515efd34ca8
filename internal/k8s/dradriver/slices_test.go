package dradriver

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"

	resourceapi "k8s.io/api/resource/v1"

	"github.com/gpuslice/gpuslice/internal/alloc"
	"github.com/gpuslice/gpuslice/internal/catalog"
	"github.com/gpuslice/gpuslice/internal/mig"
)

func node(name, model string, n int) alloc.Node {
	nd := alloc.Node{Name: name}
	for i := range n {
		nd.GPUs = append(nd.GPUs, alloc.GPU{UUID: fmt.Sprintf("GPU-%s-%d", name, i), Index: i, Model: model, Healthy: true})
	}
	return nd
}

// The counters say yes to a set of devices exactly when NVIDIA's
// placement rules (mig.Geometry.CanAdd) do: random sequences of MIG
// placements on every MIG-capable model of the catalog, with the whole
// GPU and the shared whole GPU in the mix.
func TestCountersAllowExactlyTheValidLayouts(t *testing.T) {
	cat := catalog.Default()
	models := 0
	for _, mm := range cat.GPUs() {
		m := &mm
		if m.MIG == nil {
			continue
		}
		models++
		geo, err := mig.New(m)
		if err != nil {
			t.Fatal(err)
		}
		slices, err := Slices(node("n", m.ID, 1), 1, "580.65.06", cat)
		if err != nil {
			t.Fatal(err)
		}
		var set resourceapi.CounterSet
		var devs []resourceapi.Device
		for _, s := range slices {
			if len(s.Spec.SharedCounters) > 0 {
				set = s.Spec.SharedCounters[0]
			}
			devs = append(devs, s.Spec.Devices...)
		}
		rng := rand.New(rand.NewPCG(uint64(models), 1))
		for round := range 300 {
			left := map[string]int64{}
			for k, c := range set.Counters {
				left[k] = c.Value.Value()
			}
			var occ mig.Occupancy
			wholeTaken := false
			for range 12 {
				d := devs[rng.IntN(len(devs))]
				fits := true
				for k, c := range d.ConsumesCounters[0].Counters {
					fits = fits && left[k] >= c.Value.Value()
				}
				var want bool
				typ := *d.Attributes["type"].StringValue
				if typ == TypeMIG {
					p, _ := geo.Profile(*d.Attributes["profile"].StringValue)
					want = !wholeTaken && geo.CanAdd(occ, p, int(*d.Attributes["start"].IntValue))
					if want {
						occ = geo.Add(occ, p, int(*d.Attributes["start"].IntValue))
					}
				} else {
					want = !wholeTaken && occ.Instances == 0
					wholeTaken = wholeTaken || want
				}
				if fits != want {
					t.Fatalf("%s round %d: %s: counters say %v, placement rules %v (occupancy %+v)", m.ID, round, d.Name, fits, want, occ)
				}
				if fits {
					for k, c := range d.ConsumesCounters[0].Counters {
						left[k] -= c.Value.Value()
					}
				}
			}
		}
	}
	if models < 3 {
		t.Fatalf("only %d MIG-capable models", models)
	}
}

// A DGX A100 (8 GPUs) fits the API's limits: at most 64 devices per slice
// that consumes counters, 8 counter sets per slice, 32 counters per set,
// counters in slices of their own; every device name is a DNS label and
// unique in the pool; the pool counts its slices.
func TestSlicesKeepTheAPILimits(t *testing.T) {
	for _, model := range []string{"A100-40GB", "H100-80GB-SXM", "A30", "B200-180GB", "L4", "T4"} {
		t.Run(model, func(t *testing.T) {
			out, err := Slices(node("host-1", model, 9), 3, "580.65.06", nil)
			if err != nil {
				t.Fatal(err)
			}
			names := map[string]bool{}
			sets := 0
			for _, s := range out {
				if s.Spec.Pool.ResourceSliceCount != int64(len(out)) || s.Spec.Pool.Generation != 3 || s.Spec.Pool.Name != "host-1" {
					t.Fatalf("pool %+v", s.Spec.Pool)
				}
				if len(s.Spec.Devices) > 0 && len(s.Spec.SharedCounters) > 0 {
					t.Fatalf("%s has devices and counters", s.Name)
				}
				if len(s.Spec.Devices) > 64 || len(s.Spec.SharedCounters) > 8 {
					t.Fatalf("%s: %d devices, %d counter sets", s.Name, len(s.Spec.Devices), len(s.Spec.SharedCounters))
				}
				for _, c := range s.Spec.SharedCounters {
					sets++
					if len(c.Counters) > 32 {
						t.Fatalf("counter set %s has %d counters", c.Name, len(c.Counters))
					}
				}
				for _, d := range s.Spec.Devices {
					if names[d.Name] || len(d.Name) > 63 || strings.ContainsAny(d.Name, ".+_") {
						t.Fatalf("device name %q", d.Name)
					}
					names[d.Name] = true
				}
			}
			if sets != 9 {
				t.Fatalf("%d counter sets for 9 GPUs", sets)
			}
		})
	}
}

// With binding conditions every MIG device (and only those) waits for
// gpuslice.dev/mig-ready and fails on gpuslice.dev/mig-failed, bound to
// its node; the input slices are not changed.
func TestWithMIGBindingConditions(t *testing.T) {
	n := alloc.Node{Name: "n", GPUs: []alloc.GPU{{UUID: "GPU-a", Index: 0, Model: "A100-40GB", Healthy: true}, {UUID: "GPU-b", Index: 1, Model: "L4", Healthy: true}}}
	sl, err := Slices(n, 1, "580.65.06", nil)
	if err != nil {
		t.Fatal(err)
	}
	got := WithMIGBindingConditions(sl)
	migs := 0
	for i, s := range got {
		for j, d := range s.Spec.Devices {
			if sl[i].Spec.Devices[j].BindingConditions != nil {
				t.Fatal("the input slices were changed")
			}
			isMIG := *d.Attributes["type"].StringValue == TypeMIG
			has := len(d.BindingConditions) == 1 && d.BindingConditions[0] == ConditionMIGReady &&
				len(d.BindingFailureConditions) == 1 && d.BindingFailureConditions[0] == ConditionMIGFailed &&
				d.BindsToNode != nil && *d.BindsToNode
			if isMIG != has {
				t.Fatalf("device %s: MIG %v, binding conditions %v %v %v", d.Name, isMIG, d.BindingConditions, d.BindingFailureConditions, d.BindsToNode)
			}
			if isMIG {
				migs++
			}
		}
	}
	if migs == 0 {
		t.Fatal("no MIG device")
	}
}
