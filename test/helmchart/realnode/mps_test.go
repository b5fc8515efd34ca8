package realnode

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/runtime"
)

// testMPSThroughGpuConfig: a shared claim with NVIDIA's GpuConfig asking
// for MPS. The driver starts the GPU's MPS control daemon (simulated, a
// real process); the container sees the pipe directory at its
// CUDA_MPS_PIPE_DIRECTORY with the daemon's files, and the limits the
// config gave.
func (e *env) testMPSThroughGpuConfig(t *testing.T) {
	params, err := json.Marshal(map[string]any{
		"apiVersion": "resource.nvidia.com/v1beta1", "kind": "GpuConfig",
		"sharing": map[string]any{"strategy": "MPS", "mpsConfig": map[string]any{
			"defaultActiveThreadPercentage": 40, "defaultPinnedDeviceMemoryLimit": "6Gi"}},
	})
	if err != nil {
		t.Fatal(err)
	}
	c := claim("mps", "shared.gpuslice.dev", func(r *resourcev1.DeviceRequest) {
		r.Exactly.Capacity = &resourcev1.CapacityRequirements{Requests: map[resourcev1.QualifiedName]resource.Quantity{"memory": resource.MustParse("8Gi")}}
	})
	c.Spec.Devices.Config = []resourcev1.DeviceClaimConfiguration{{Requests: []string{"gpu"},
		DeviceConfiguration: resourcev1.DeviceConfiguration{Opaque: &resourcev1.OpaqueDeviceConfiguration{
			Driver: "gpu.gpuslice.dev", Parameters: runtime.RawExtension{Raw: params}}}}}
	log := e.run(t, workload{ns: "mps", name: "mps", claims: []resourcev1.ResourceClaim{c},
		refs:   []corev1.PodResourceClaim{ref("mps")},
		script: showEnv + `d=$CUDA_MPS_PIPE_DIRECTORY; test -d "$d" && echo pipe-dir-mounted; ls "$d" | sed 's/^/pipe:/'; cat "$d"/gpuslice-sim-limits 2>/dev/null | sed 's/^/limits:/'`})
	env := envOf(log)
	uuid := env["CUDA_VISIBLE_DEVICES"]
	if env["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"] != "40" {
		t.Errorf("CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=%q, want the config's 40", env["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"])
	}
	if want := uuid + "=6144M"; env["CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"] != want {
		t.Errorf("CUDA_MPS_PINNED_DEVICE_MEM_LIMIT=%q, want %q", env["CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"], want)
	}
	if !strings.Contains(log, "pipe-dir-mounted") || !strings.Contains(log, "pipe:control\n") || !strings.Contains(log, "pipe:nvidia-cuda-mps-control.pid\n") {
		t.Errorf("the MPS pipe directory %q is not in the container with the daemon's files; log:\n%s", env["CUDA_MPS_PIPE_DIRECTORY"], log)
	}
	// The daemon stops with the GPU's last MPS claim: its socket leaves
	// the pipe directory (a host directory under the node's /run/gpuslice).
	pipe := filepath.Join(e.c.Node.RunDir, strings.TrimPrefix(env["CUDA_MPS_PIPE_DIRECTORY"], "/run/gpuslice/"))
	e.deleteAll(t, "mps")
	e.waitState(t, "the MPS claim unprepared", 2*time.Minute, func(s nodeState) bool { return len(s.checkpoint) == 0 })
	deadline := time.Now().Add(time.Minute)
	for {
		_, err := os.Stat(filepath.Join(pipe, "control"))
		if os.IsNotExist(err) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the MPS daemon's socket %s is still there a minute after its last claim left (%v)", pipe, err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}
