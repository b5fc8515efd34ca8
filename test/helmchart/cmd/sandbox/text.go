package main

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"

	"github.com/gpuslice/gpuslice/internal/k8s/apitest"
	"github.com/gpuslice/gpuslice/internal/k8s/nodetest"
	"github.com/gpuslice/gpuslice/test/helmchart/realnode"
)

// paths are the sandbox's files under <cache>/sandbox; none is in the
// repository.
type paths struct {
	Dir        string // <cache>/sandbox
	Images     string // scripts/images.sh --test-images' archives
	Run        string // the cluster's state and logs (wiped at start)
	Kubeconfig string // admin kubeconfig, a copy of Cluster.Kubeconfig
	Ready      string // exists while the sandbox is ready
	Pid        string // the sandbox process's pid, while it runs
	Slot       string // the node's slot (gsnode-N), while it runs
	Example    string // the example workload
	Usage      string // the usage text printed when ready
	Lock       string // held by the running sandbox
	Log        string // scripts/sandbox.sh's log of the sandbox process
}

func newPaths(cache string) paths {
	d := filepath.Join(cache, "sandbox")
	return paths{
		Dir:        d,
		Images:     filepath.Join(d, "images"),
		Run:        filepath.Join(d, "run"),
		Kubeconfig: filepath.Join(d, "kubeconfig"),
		Ready:      filepath.Join(d, "ready"),
		Pid:        filepath.Join(d, "pid"),
		Slot:       filepath.Join(d, "slot"),
		Example:    filepath.Join(d, "example.yaml"),
		Usage:      filepath.Join(d, "usage.txt"),
		Lock:       filepath.Join(d, "lock"),
		Log:        filepath.Join(d, "sandbox.log"),
	}
}

// cacheRoot is ${GPUSLICE_CACHE:-$HOME/.cache/gpuslice}, as the scripts
// and nodetest.BinDir have it.
func cacheRoot() string {
	if d := os.Getenv(apitest.EnvCache); d != "" {
		return d
	}
	home, err := os.UserHomeDir()
	if err != nil {
		return filepath.Join(os.TempDir(), "gpuslice-cache")
	}
	return filepath.Join(home, ".cache", "gpuslice")
}

// chartVersion is the chart's appVersion, the tag scripts/images.sh gives
// the images.
func chartVersion(chartYAML []byte) (string, error) {
	m := regexp.MustCompile(`(?m)^appVersion:\s*"?([^"\s]+)"?\s*$`).FindSubmatch(chartYAML)
	if m == nil {
		return "", fmt.Errorf("no appVersion in Chart.yaml")
	}
	return string(m[1]), nil
}

// Names in the example workload.
const (
	exampleClaim = "gpuslice-example"
	examplePod   = "gpuslice-example"
)

// exampleYAML is a claim for an 8Gi share of a simulated GPU and a pod
// using it that prints what it was given.
func exampleYAML(busyboxTag string) string {
	return `# gpuslice sandbox example: an 8Gi share of one simulated A100
# (DeviceClass shared.gpuslice.dev, memory as consumable capacity) and a pod
# that prints what the driver gave it. The image was imported into the
# node's containerd: there is no registry, so imagePullPolicy is Never.
apiVersion: resource.k8s.io/v1
kind: ResourceClaim
metadata:
  name: ` + exampleClaim + `
spec:
  devices:
    requests:
    - name: gpu
      exactly:
        deviceClassName: shared.gpuslice.dev
        capacity:
          requests:
            memory: 8Gi
---
apiVersion: v1
kind: Pod
metadata:
  name: ` + examplePod + `
spec:
  restartPolicy: Never
  resourceClaims:
  - name: gpu
    resourceClaimName: ` + exampleClaim + `
  containers:
  - name: main
    image: ` + busyboxTag + `
    imagePullPolicy: Never
    command: ["sh", "-c", "env | grep -E 'CUDA|GPUSLICE'"]
    resources:
      claims:
      - name: gpu
`
}

// usageText is what `scripts/sandbox.sh up` and `status` print.
func usageText(p paths, kubectl string, imgs nodetest.ImageSet, nodeName string) string {
	var b strings.Builder
	w := func(format string, a ...any) { fmt.Fprintf(&b, format+"\n", a...) }
	w("gpuslice sandbox: Kubernetes %s, node %s with a simulated DGX A100 (8 GPUs),", apitest.SelectedVersionName(), nodeName)
	w("the gpuslice chart installed as release %q in namespace %s.", realnode.Release, realnode.ReleaseNS)
	w("")
	w("Use it (kubectl %s, built by scripts/realnode.sh):", apitest.SelectedVersionName())
	w("")
	w("  export KUBECONFIG=%s", p.Kubeconfig)
	w("  KUBECTL=%s", kubectl)
	w("  $KUBECTL get nodes,deviceclasses,resourceslices")
	w("  $KUBECTL -n %s get pods", realnode.ReleaseNS)
	w("")
	w("Try a GPU share (8Gi of one GPU's memory):")
	w("")
	w("  $KUBECTL apply -f %s", p.Example)
	w("  $KUBECTL wait --for=jsonpath='{.status.phase}'=Succeeded pod/%s --timeout=2m", examplePod)
	w("  $KUBECTL logs %s        # CUDA_VISIBLE_DEVICES=GPU-..., GPUSLICE_MEMORY_LIMIT_MIB=8192", examplePod)
	w("  $KUBECTL delete -f %s", p.Example)
	w("")
	w("No registry: pods use imagePullPolicy: Never with an imported image:")
	w("  %s (sh, env, grep...), %s, %s", imgs.BusyboxTag(), imgs.GpusliceTag(), imgs.SchedulerTag())
	w("Only the \"kubernetes\" Service routes (no kube-proxy). See docs/sandbox.md.")
	w("")
	w("Logs:  %s/node/{kubelet,containerd}.log, %s/apiserver/, %s", p.Run, p.Run, p.Log)
	w("Stop:  scripts/sandbox.sh down")
	return b.String()
}

// fixFor turns what nodetest.Missing and the control plane's check report
// into the commands that fix it.
func fixFor(why []string) []string {
	var fixes []string
	add := func(f string) {
		for _, have := range fixes {
			if have == f {
				return
			}
		}
		fixes = append(fixes, f)
	}
	for _, w := range why {
		switch {
		case strings.Contains(w, "scripts/controlplane.sh"), strings.Contains(w, "scripts/realnode.sh"):
			add("scripts/realnode.sh   # builds the control plane, kubelet, containerd, kubectl; apt-installs runc, CNI plugins (or: scripts/sandbox.sh up)")
		case strings.HasPrefix(w, "ip "):
			add("apt-get install iproute2")
		case strings.HasPrefix(w, "sysctl "):
			add("apt-get install procps")
		case strings.HasPrefix(w, "mknod "):
			add("apt-get install coreutils")
		case strings.HasSuffix(w, " is not on PATH"):
			add("apt-get install util-linux mount")
		case w == "not root":
			add("run it as root (sudo scripts/sandbox.sh up)")
		case strings.HasPrefix(w, "missing CAP_"), strings.HasPrefix(w, "missing a readable"):
			add("run it in a privileged container (docker run --privileged ...) or a VM: the node needs CAP_SYS_ADMIN, CAP_NET_ADMIN and CAP_MKNOD")
		}
	}
	return fixes
}

// missing is why no sandbox can start here: control plane or node
// binaries absent, Debian packages, tools, root or capabilities.
func missing() []string {
	var why []string
	cp := apitest.BinDir()
	for _, f := range []string{"etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler"} {
		if _, err := os.Stat(filepath.Join(cp, f)); err != nil {
			why = append(why, cp+" lacks "+f+" (run scripts/controlplane.sh)")
		}
	}
	if m := nodetest.Missing(nodetest.BinDir()); m != "" {
		why = append(why, strings.Split(m, "; ")...)
	}
	if _, err := os.Stat(filepath.Join(nodetest.BinDir(), "kubectl")); err != nil {
		why = append(why, nodetest.BinDir()+" lacks kubectl (run scripts/realnode.sh)")
	}
	return why
}
