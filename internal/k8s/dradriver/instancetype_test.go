package dradriver

import (
	"reflect"
	"strings"
	"testing"

	"github.com/gpuslice/gpuslice/internal/catalog"
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
			if got[i].Labels[InstanceTypeLabel] != it.Name {
				t.Errorf("%s slice %d labelled %q", it.Name, i, got[i].Labels[InstanceTypeLabel])
			}
			if got[i].Spec.Pool.Name != nodeName(it.Name) {
				t.Errorf("%s: pool %q", it.Name, got[i].Spec.Pool.Name)
			}
			for j := range want[i].Spec.Devices {
				delete(want[i].Spec.Devices[j].Attributes, "uuid")
				delete(want[i].Spec.Devices[j].Attributes, "parentUUID")
			}
			delete(got[i].Labels, InstanceTypeLabel)
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
