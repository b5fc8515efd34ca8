package draalloc

import (
	"strings"
	"testing"

	"github.com/gpuslice/gpuslice/internal/k8s/dranames"
)

// Selectors written for the stock allocator (NVIDIA's quickstart
// gpu-test6, renamed to gpuslice's domain) compile and select here:
// Kubernetes' string library (lowerAscii), regex matches, quantity
// comparison and semver.
func TestSelectorsUseKubernetesCELLibraries(t *testing.T) {
	nd, _ := nodeDevices(t, "n1", "A100-40GB", 4)
	for _, tc := range []struct {
		name, class, expr string
		wantIndex         []int // GPU indexes the claims may land on (nil: any)
	}{
		{"gpu-test6", dranames.ClassGPU, `device.attributes["gpu.gpuslice.dev"].productName.lowerAscii().matches("^.*a100.*$") &&
(device.attributes["gpu.gpuslice.dev"].index == 0 || device.attributes["gpu.gpuslice.dev"].index == 2)`, []int{0, 2}},
		{"quantity", dranames.ClassShared, `device.capacity["gpu.gpuslice.dev"].memory.compareTo(quantity("10Gi")) >= 0`, nil},
		{"upperAscii and find", dranames.ClassGPU, `device.attributes["gpu.gpuslice.dev"].productName.upperAscii().find("A100") == "A100"`, nil},
		{"semver", dranames.ClassGPU, `semver("1.2.3").isLessThan(semver("1.10.0")) && isSemver("580.65.6")`, nil},
		{"sets", dranames.ClassGPU, `sets.contains([0, 1, 3], [device.attributes["gpu.gpuslice.dev"].index])`, []int{0, 1, 3}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, failed, err := NewState([]*NodeDevices{nd}, nil, Policy("binpack"), nil)
			if err != nil || len(failed) > 0 {
				t.Fatal(err, failed)
			}
			for i := range 2 {
				rc := claim("team-a", "c"+string(rune('0'+i)), tc.class, tc.expr, "")
				c, err := ToClaim(rc, 0)
				if err != nil {
					t.Fatal(err)
				}
				a, err := s.Allocate(&c)
				if err != nil {
					t.Fatalf("claim %d: %v", i, err)
				}
				if err := s.Apply(a); err != nil {
					t.Fatal(err)
				}
				if tc.wantIndex != nil {
					idx := gpuIndex(t, nd, a.Devices[0].GPU)
					if !containsInt(tc.wantIndex, idx) {
						t.Errorf("claim %d on GPU index %d, want one of %v", i, idx, tc.wantIndex)
					}
				}
			}
		})
	}
}

// A selector the stock allocator refuses is refused with the expression
// as the user wrote it (gpuslice's domain, not the allocator's).
func TestSelectorErrorsQuoteWhatTheUserWrote(t *testing.T) {
	for _, expr := range []string{
		`device.attributes["gpu.gpuslice.dev"].productName.noSuchFunction()`,
		`device.attributes["gpu.gpuslice.dev"].index ==`,
	} {
		_, err := ToClaim(claim("team-a", "bad", dranames.ClassGPU, expr, ""), 0)
		if err == nil {
			t.Fatalf("%s: accepted", expr)
		}
		if strings.Contains(err.Error(), "gpu.nvidia.com") || !strings.Contains(err.Error(), "gpu.gpuslice.dev") {
			t.Errorf("%s: error does not quote the selector as written: %v", expr, err)
		}
	}
}

func gpuIndex(t *testing.T, nd *NodeDevices, uuid string) int {
	t.Helper()
	for _, g := range nd.Node.GPUs {
		if g.UUID == uuid {
			return g.Index
		}
	}
	t.Fatalf("no GPU %s", uuid)
	return -1
}

func containsInt(xs []int, x int) bool {
	for _, v := range xs {
		if v == x {
			return true
		}
	}
	return false
}
