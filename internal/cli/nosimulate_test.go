package cli

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gpuslice/gpuslice/internal/gpu/nvml"
)

// The DRA driver and `dra slices` never publish simulated GPUs unless told
// (--simulate): on a GPU node whose container lacks NVML (no NVIDIA
// Container Toolkit injection) pods would otherwise be handed GPUs that do
// not exist. They exit with NVML's error and what to check.
func TestDRADriverWithoutNVMLFailsUnlessSimulated(t *testing.T) {
	if dev, err := nvml.Open(); err == nil {
		_ = dev.Close()
		t.Skip("NVML loads here: the driver would publish the real GPUs")
	}
	kc := filepath.Join(t.TempDir(), "kubeconfig")
	// A kubeconfig that parses; its server is never reached.
	if err := os.WriteFile(kc, []byte(`apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: "https://127.0.0.1:1"}}]
users: [{name: u, user: {token: x}}]
contexts: [{name: c, context: {cluster: c, user: u}}]
current-context: c
`), 0o600); err != nil {
		t.Fatal(err)
	}
	for name, args := range map[string][]string{
		"dra-driver": {"dra-driver", "--node", "n1", "--kubeconfig", kc, "--state-dir", t.TempDir(),
			"--registrar-dir", t.TempDir(), "--cdi-dir", t.TempDir()},
		"dra slices": {"dra", "slices", "--node", "n1"},
	} {
		t.Run(name, func(t *testing.T) {
			var out, errOut bytes.Buffer
			cmd := New(&out, &errOut)
			cmd.SetArgs(args)
			err := cmd.Execute()
			if err == nil {
				t.Fatalf("%s ran without NVML:\n%s\n%s", name, out.String(), errOut.String())
			}
			for _, want := range []string{"nvidia-smi", "libnvidia-ml.so.1", "Container Toolkit", "--simulate"} {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("error %q lacks %q", err, want)
				}
			}
			if strings.Contains(out.String(), "ResourceSlice") || strings.Contains(errOut.String(), "simulated GPUs (") {
				t.Errorf("%s simulated:\n%s\n%s", name, out.String(), errOut.String())
			}
		})
	}
}
