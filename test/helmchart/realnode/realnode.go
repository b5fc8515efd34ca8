// Package realnode installs the Helm chart deploy/helm/gpuslice on a real
// one-node Kubernetes cluster (internal/k8s/nodetest: kubelet v1.36.3 and
// containerd v2 in their own namespaces, the images built by
// scripts/images.sh imported into containerd) and runs GPU workloads on
// it, checking from inside each container what it was given. Install and
// SandboxValues are what scripts/sandbox.sh installs too.
//
// The chart is installed with Helm's own Go packages (action.Install, as
// `helm install --wait` does) with simulated GPUs (driver.simulate
// dgx-a100); its pods then talk to the API server with their own
// ServiceAccounts, so the chart's ClusterRoles are what is tested, not an
// admin's credentials.
package realnode

import (
	"fmt"
	"time"

	"helm.sh/helm/v3/pkg/action"
	"helm.sh/helm/v3/pkg/chart/loader"
	"helm.sh/helm/v3/pkg/kube"
)

// The release the tests and the sandbox install.
const (
	Release   = "gpuslice"
	ReleaseNS = "gpuslice-system"
)

// SandboxValues are the chart values for a node without GPUs whose images
// were imported, not pulled: simulated DGX A100s, images never pulled.
func SandboxValues() map[string]any {
	return map[string]any{
		"image":  map[string]any{"pullPolicy": "Never"},
		"driver": map[string]any{"simulate": "dgx-a100"},
	}
}

// Install is `helm install gpuslice CHART -n gpuslice-system
// --create-namespace --wait --timeout 4m` with values, through Helm's Go
// packages, against the cluster of kubeconfig. logf gets Helm's progress.
func Install(kubeconfig, chartDir string, values map[string]any, logf func(string, ...any)) error {
	ch, err := loader.Load(chartDir)
	if err != nil {
		return fmt.Errorf("loading the chart %s: %w", chartDir, err)
	}
	cfg := new(action.Configuration)
	if err := cfg.Init(kube.GetConfig(kubeconfig, "", ReleaseNS), ReleaseNS, "secret", logf); err != nil {
		return fmt.Errorf("helm: %w", err)
	}
	in := action.NewInstall(cfg)
	in.ReleaseName, in.Namespace, in.CreateNamespace = Release, ReleaseNS, true
	in.Wait, in.Timeout = true, 4*time.Minute
	if _, err := in.Run(ch, values); err != nil {
		return fmt.Errorf("helm install: %w", err)
	}
	return nil
}
