package draalloc

import (
	"fmt"
	"testing"

	resourceapi "k8s.io/api/resource/v1"

	"github.com/gpuslice/gpuslice/internal/alloc"
	"github.com/gpuslice/gpuslice/internal/k8s/dradriver"
)

func shapeNode(t *testing.T, name, model string, gpus int, opts dradriver.Options) *NodeDevices {
	t.Helper()
	n := alloc.Node{Name: name}
	for i := range gpus {
		n.GPUs = append(n.GPUs, alloc.GPU{UUID: fmt.Sprintf("GPU-%s-%d", name, i), Index: i, Model: model, Healthy: true})
	}
	sl, err := dradriver.SlicesFor(n, 1, "580.65.06", nil, opts)
	if err != nil {
		t.Fatal(err)
	}
	var ptrs []*resourceapi.ResourceSlice
	for i := range sl {
		ptrs = append(ptrs, &sl[i])
	}
	nd, err := NodeFromSlices(name, nil, ptrs, nil)
	if err != nil {
		t.Fatal(err)
	}
	return nd
}

// Nodes alike but for their names and GPU uuids have one shape; a
// different model, GPU count or set of published devices is another.
func TestShape(t *testing.T) {
	a := shapeNode(t, "a", "A100-40GB", 8, dradriver.Options{})
	b := shapeNode(t, "b", "A100-40GB", 8, dradriver.Options{})
	if a.Shape() == "" || a.Shape() != b.Shape() {
		t.Fatalf("two 8×A100-40GB nodes differ:\n%s\n%s", a.Shape(), b.Shape())
	}
	for _, other := range []*NodeDevices{
		shapeNode(t, "c", "A100-80GB", 8, dradriver.Options{}),
		shapeNode(t, "d", "A100-40GB", 4, dradriver.Options{}),
		shapeNode(t, "e", "A100-40GB", 8, dradriver.Options{TenantIsolation: true, Tenants: []string{"team-a"}}),
	} {
		if other.Shape() == a.Shape() {
			t.Errorf("node %s has the shape of 8×A100-40GB", other.Node.Name)
		}
	}
}
