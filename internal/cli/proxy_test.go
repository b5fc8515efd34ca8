package cli

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// gpuslice proxy refuses what it cannot run with, naming the flag: no
// Kubernetes configuration, missing --deployment/--service, a bad port
// or idle period.
func TestProxyFlagErrors(t *testing.T) {
	if out := run("proxy", "--kubeconfig", filepath.Join(t.TempDir(), "none")); !strings.Contains(out, "error: no Kubernetes configuration") {
		t.Errorf("no kubeconfig:\n%s", out)
	}
	kc := filepath.Join(t.TempDir(), "kubeconfig")
	if err := os.WriteFile(kc, []byte(`apiVersion: v1
kind: Config
current-context: c
clusters: [{name: c, cluster: {server: "https://127.0.0.1:1"}}]
users: [{name: u, user: {token: x}}]
contexts: [{name: c, context: {cluster: c, user: u, namespace: shop}}]
`), 0o600); err != nil {
		t.Fatal(err)
	}
	out := run("proxy", "--kubeconfig", kc, "--port", "70000")
	for _, want := range []string{"--deployment is required", "--service is required", "--port 70000: want 1..65535"} {
		if !strings.Contains(out, want) {
			t.Errorf("missing %q:\n%s", want, out)
		}
	}
	if out := run("proxy", "--kubeconfig", kc, "--deployment", "d", "--service", "s", "--idle", "0s"); !strings.Contains(out, "--idle 0s: want a positive duration") {
		t.Errorf("idle 0:\n%s", out)
	}
}
