package nodetest

import (
	"bytes"
	"context"
	_ "embed"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"text/template"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/gpuslice/gpuslice/internal/k8s/apitest"
)

// ContainerdVersion is the containerd scripts/realnode.sh builds; the
// cache directory is named after it and apitest.SelectedVersionName.
const ContainerdVersion = "v2.4.2"

// Environment variables Start reads.
const (
	// EnvBinDir names a directory holding kubelet, containerd,
	// containerd-shim-runc-v2 and ctr instead of the cache directory.
	EnvBinDir = "GPUSLICE_NODE_BIN"
	// EnvRequire, set to 1, makes Start fail the test instead of skipping
	// it when the node cannot run here.
	EnvRequire = "GPUSLICE_REQUIRE_NODE"
)

// NodeFeatureGates are added to apitest.FeatureGates for every component
// of a real-node cluster: the kubelet reports device health from DRA
// drivers (KEP-4680) in the pods' status.
const NodeFeatureGates = "ResourceHealthStatus=true"

// Controllers are the kube-controller-manager controllers a real node's
// cluster runs: node lifecycle (a Ready node loses its not-ready taint),
// service accounts and their CA bundle (pods' API credentials),
// DaemonSets, Deployments, ReplicaSets, endpoints (webhooks are reached by
// them), ResourceClaims from templates, device-taint eviction, and garbage
// collection.
var Controllers = []string{
	"node-lifecycle-controller", "serviceaccount-controller", "root-ca-certificate-publisher-controller",
	"daemonset-controller", apitest.DeploymentController, apitest.ReplicaSetController,
	"endpoints-controller", "endpointslice-controller", "namespace-controller",
	apitest.ResourceClaimController, apitest.DeviceTaintEvictionController,
	apitest.GarbageCollectorCtrl, apitest.PodGarbageCollectorCtrl,
}

// Options configure a cluster.
type Options struct {
	// NodeName is the node's name (default "gpu-node-1").
	NodeName string
	// Labels are the node's labels (kubelet --node-labels).
	Labels map[string]string
	// Images are OCI image archives imported into the node's containerd
	// before its kubelet starts. SandboxImage, the pod sandbox ("pause")
	// image, must be among them: no registry is reachable.
	Images       []string
	SandboxImage string
	// Scheduler configures the stock kube-scheduler; NoScheduler runs
	// none (a test brings its own).
	Scheduler   apitest.SchedulerOptions
	NoScheduler bool
}

// Node is the running node.
type Node struct {
	// Name and IP are the node's name and address.
	Name, IP string
	// Root is the host directory holding the node's configuration, logs
	// and the directories it sees at its standard paths:
	// KubeletDir (/var/lib/kubelet), CDIDir (/var/run/cdi), RunDir
	// (/run/gpuslice, the MPS pipe directories' parent) and PodLogDir
	// (/var/log/pods).
	Root, KubeletDir, CDIDir, RunDir, PodLogDir string

	slot *slot
	cmd  *exec.Cmd
	done chan struct{}
}

// Cluster is a control plane with one real node.
type Cluster struct {
	API               *apitest.Server
	ControllerManager *apitest.ControllerManager
	Scheduler         *apitest.Scheduler // nil with Options.NoScheduler
	Node              *Node
	// Clientset is an admin (system:masters) client.
	Clientset kubernetes.Interface
	// Kubeconfig is an admin kubeconfig file for kubectl and Helm.
	Kubeconfig string
}

// BinDir returns where Start looks for the node's binaries:
// $GPUSLICE_NODE_BIN if set, else
// ${GPUSLICE_CACHE:-$HOME/.cache/gpuslice}/node/VERSION-containerd-v2.4.2
// (VERSION: apitest.SelectedVersionName, v1.36.3 by default;
// `K8S_VERSION=VERSION scripts/realnode.sh` builds it).
func BinDir() string {
	if d := os.Getenv(EnvBinDir); d != "" {
		return d
	}
	root := os.Getenv(apitest.EnvCache)
	if root == "" {
		home, err := os.UserHomeDir()
		if err != nil {
			return ""
		}
		root = filepath.Join(home, ".cache", "gpuslice")
	}
	return filepath.Join(root, "node", apitest.SelectedVersionName()+"-containerd-"+ContainerdVersion)
}

// Missing says why a real node cannot run on this machine ("" when it can):
// binaries not built, Debian packages not installed, not root, or a
// capability missing.
func Missing(binDir string) string {
	var why []string
	for _, f := range []string{"kubelet", "containerd", "containerd-shim-runc-v2", "ctr"} {
		if st, err := os.Stat(filepath.Join(binDir, f)); err != nil || st.IsDir() {
			why = append(why, binDir+" lacks "+f+" (run scripts/realnode.sh)")
		}
	}
	for _, f := range []string{"/usr/sbin/runc", "/usr/lib/cni/bridge", "/usr/lib/cni/host-local", "/usr/lib/cni/loopback"} {
		if _, err := os.Stat(f); err != nil {
			if f == "/usr/sbin/runc" {
				if _, err := exec.LookPath("runc"); err == nil {
					continue
				}
			}
			why = append(why, f+" is missing (scripts/realnode.sh installs runc and containernetworking-plugins)")
		}
	}
	for _, tool := range []string{"ip", "unshare", "nsenter", "mount", "mknod", "mountpoint", "sysctl"} {
		if _, err := exec.LookPath(tool); err != nil {
			why = append(why, tool+" is not on PATH")
		}
	}
	if os.Geteuid() != 0 {
		why = append(why, "not root")
	} else if caps := missingCaps(); caps != "" {
		why = append(why, "missing "+caps)
	} else if refused := namespacesRefused(); refused != "" {
		why = append(why, refused)
	}
	return strings.Join(why, "; ")
}

var (
	probeOnce sync.Once
	probeWhy  string
)

// namespacesRefused tries, once per process, what a node does first: a new
// network and mount namespace, a tmpfs mount and a character device node
// in it. A machine whose seccomp profile or LSM refuses any of them
// although the capabilities are there gets its refusal named.
func namespacesRefused() string {
	probeOnce.Do(func() {
		dir, err := os.MkdirTemp("", "gpuslice-nodetest-probe-")
		if err != nil {
			probeWhy = "cannot make a temp dir: " + err.Error()
			return
		}
		defer os.RemoveAll(dir)
		out, err := exec.Command("unshare", "--net", "--mount", "--propagation", "private", "--",
			"sh", "-c", `mount -t tmpfs tmpfs "$0" && mknod "$0/probe" c 1 3`, dir).CombinedOutput()
		if err != nil {
			probeWhy = fmt.Sprintf("this machine refuses a network and mount namespace, a tmpfs mount or mknod in it (%v: %s)",
				err, strings.TrimSpace(string(out)))
		}
	})
	return probeWhy
}

// missingCaps names the effective capabilities a node needs and this
// process lacks.
func missingCaps() string {
	data, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return "a readable /proc/self/status"
	}
	var eff uint64
	for _, line := range strings.Split(string(data), "\n") {
		if v, ok := strings.CutPrefix(line, "CapEff:"); ok {
			eff, _ = strconv.ParseUint(strings.TrimSpace(v), 16, 64)
		}
	}
	var missing []string
	for _, c := range []struct {
		bit  uint
		name string
	}{{21, "CAP_SYS_ADMIN"}, {12, "CAP_NET_ADMIN"}, {27, "CAP_MKNOD"}} {
		if eff&(1<<c.bit) == 0 {
			missing = append(missing, c.name)
		}
	}
	return strings.Join(missing, ", ")
}

// SkipUnlessSupported skips t (fails it when GPUSLICE_REQUIRE_NODE=1) where
// a real node cannot run, naming why.
func SkipUnlessSupported(t testing.TB) {
	t.Helper()
	apitest.SkipUnlessBuilt(t, apitest.BinDir())
	if why := Missing(BinDir()); why != "" {
		msg := "no real node here: " + why
		if os.Getenv(EnvRequire) == "1" {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
}

// StartCluster runs a control plane and one real node for the test and
// tears everything down when it ends; on failure the end of every
// component's log goes to the test log.
func StartCluster(t testing.TB, opts Options) *Cluster {
	t.Helper()
	SkipUnlessSupported(t)
	c, stop, err := LaunchCluster(t.Context(), t.TempDir(), opts)
	t.Cleanup(func() {
		logs := stop()
		if t.Failed() {
			t.Log(logs)
		}
	})
	if err != nil {
		t.Fatalf("nodetest: %v", err)
	}
	return c
}

// LaunchCluster is StartCluster without a test: files go under tmp, and
// stop (to be called even on error) tears the cluster down and returns the
// end of its components' logs.
func LaunchCluster(ctx context.Context, tmp string, opts Options) (*Cluster, func() string, error) {
	var stops []func() string
	var once sync.Once
	var logs strings.Builder
	stop := func() string {
		once.Do(func() {
			for i := len(stops) - 1; i >= 0; i-- {
				logs.WriteString(stops[i]())
			}
		})
		return logs.String()
	}
	if opts.NodeName == "" {
		opts.NodeName = "gpu-node-1"
	}
	if why := Missing(BinDir()); why != "" {
		return nil, stop, errors.New("no real node here: " + why)
	}
	s, err := acquireSlot()
	if err != nil {
		return nil, stop, err
	}
	stops = append(stops, func() string {
		if err := s.sweep(); err != nil {
			return "sweeping the node's slot: " + err.Error() + "\n"
		}
		s.release()
		return ""
	})
	if err := s.setupNetwork(); err != nil {
		return nil, stop, err
	}

	api, apiStop, err := apitest.Launch(ctx, apitest.BinDir(), filepath.Join(tmp, "apiserver"), apitest.Options{
		BindAddress:        s.apiIP(),
		SecurePort:         443,
		ServiceCIDR:        s.serviceCIDR(),
		AuthorizationModes: "Node,RBAC",
		AdmissionPlugins:   "NodeRestriction",
		ExtraFeatureGates:  NodeFeatureGates,
		Args:               []string{"--enable-aggregator-routing=true", "--kubelet-preferred-address-types=InternalIP,Hostname"},
	})
	stops = append(stops, apiStop)
	if err != nil {
		return nil, stop, err
	}
	c := &Cluster{API: api}
	if c.Clientset, err = kubernetes.NewForConfig(api.Config); err != nil {
		return nil, stop, err
	}
	c.Kubeconfig = filepath.Join(tmp, "admin.kubeconfig")
	if err := api.WriteKubeconfig(c.Kubeconfig, api.Config.CertData, api.Config.KeyData); err != nil {
		return nil, stop, err
	}

	cmDir := filepath.Join(tmp, "controller-manager")
	if err := os.MkdirAll(cmDir, 0o755); err != nil {
		return nil, stop, err
	}
	cm, err := apitest.LaunchControllerManager(ctx, api, cmDir, apitest.ControllerManagerOptions{
		Controllers: Controllers,
		Args: []string{
			"--root-ca-file=" + api.CAFile,
			"--service-account-private-key-file=" + api.SAKeyFile,
			"--node-monitor-grace-period=20s",
		},
	})
	if cm != nil {
		stops = append(stops, func() string {
			cm.Stop()
			return "kube-controller-manager log (tail):\n" + cm.Tail(4000) + "\n"
		})
	}
	if err != nil {
		return nil, stop, err
	}
	c.ControllerManager = cm

	if !opts.NoScheduler {
		schedDir := filepath.Join(tmp, "scheduler")
		if err := os.MkdirAll(schedDir, 0o755); err != nil {
			return nil, stop, err
		}
		sc, err := apitest.LaunchScheduler(ctx, api, schedDir, opts.Scheduler)
		if sc != nil {
			stops = append(stops, func() string {
				sc.Stop()
				return "kube-scheduler log (tail):\n" + sc.Tail(4000) + "\n"
			})
		}
		if err != nil {
			return nil, stop, err
		}
		c.Scheduler = sc
	}

	n, err := startNode(ctx, api, s, filepath.Join(tmp, "node"), opts)
	if n != nil {
		stops = append(stops, n.stop)
	}
	if err != nil {
		return nil, stop, err
	}
	c.Node = n
	if err := c.waitReady(ctx, 3*time.Minute); err != nil {
		return nil, stop, err
	}
	return c, stop, nil
}

//go:embed node.sh
var nodeScript []byte

var kubeletConfig = template.Must(template.New("kubelet").Parse(`apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
address: {{.IP}}
port: 10250
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
healthzPort: 10248
authentication:
  anonymous: {enabled: false}
  webhook: {enabled: true}
  x509: {clientCAFile: {{.CAFile}}}
authorization: {mode: Webhook}
cgroupDriver: cgroupfs
cgroupRoot: {{.CgroupRoot}}
cgroupsPerQOS: true
failCgroupV1: false
failSwapOn: false
containerRuntimeEndpoint: unix:///run/containerd/containerd.sock
podCIDR: {{.PodCIDR}}
resolvConf: ""
makeIPTablesUtilChains: false
localStorageCapacityIsolation: false
evictionHard: {memory.available: "1Mi"}
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
serializeImagePulls: false
nodeStatusUpdateFrequency: 5s
syncFrequency: 10s
fileCheckFrequency: 10s
shutdownGracePeriod: 0s
featureGates:
{{- range .Gates}}
  {{.}}
{{- end}}
`))

var containerdConfig = template.Must(template.New("containerd").Parse(`version = 3
root = "{{.Root}}/containerd/root"
state = "/run/containerd/state"

[grpc]
  address = "/run/containerd/containerd.sock"

[plugins.'io.containerd.cri.v1.runtime']
  cdi_spec_dirs = ["/var/run/cdi"]
  # No CAP_SYS_RESOURCE here: runc cannot lower a sandbox's oom_score_adj.
  restrict_oom_score_adj = true
  netns_mounts_under_state_dir = true
  [plugins.'io.containerd.cri.v1.runtime'.containerd]
    default_runtime_name = "runc"
    [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc.options]
        BinaryName = "{{.Runc}}"
        SystemdCgroup = false
  [plugins.'io.containerd.cri.v1.runtime'.cni]
    bin_dirs = ["/usr/lib/cni"]
    conf_dir = "{{.Root}}/cni"

[plugins.'io.containerd.cri.v1.images']
  [plugins.'io.containerd.cri.v1.images'.pinned_images]
    sandbox = "{{.SandboxImage}}"
`))

var cniConfig = template.Must(template.New("cni").Parse(`{
  "cniVersion": "1.0.0",
  "name": "gpuslice-node",
  "plugins": [
    {"type": "bridge", "bridge": "cni0", "isGateway": true, "ipMasq": false, "hairpinMode": true,
     "ipam": {"type": "host-local", "ranges": [[{"subnet": "{{.PodCIDR}}"}]], "routes": [{"dst": "0.0.0.0/0"}],
              "dataDir": "/var/lib/cni/networks"}},
    {"type": "portmap", "capabilities": {"portMappings": true}}
  ]
}
`))

func startNode(ctx context.Context, api *apitest.Server, s *slot, root string, opts Options) (*Node, error) {
	n := &Node{
		Name: opts.NodeName, IP: s.nodeIP(), Root: root,
		KubeletDir: filepath.Join(root, "fs", "kubelet"), CDIDir: filepath.Join(root, "fs", "cdi"),
		RunDir: filepath.Join(root, "fs", "gpuslice"), PodLogDir: filepath.Join(root, "fs", "pods"),
		slot: s, done: make(chan struct{}),
	}
	for _, d := range []string{root, filepath.Join(root, "cni"), filepath.Join(root, "kubelet-pki")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return nil, err
		}
	}
	if opts.SandboxImage == "" {
		return nil, errors.New("Options.SandboxImage is empty: name the pause image (one of Options.Images)")
	}
	for _, img := range opts.Images {
		if strings.ContainsAny(img, " \t\n'\"$`\\") {
			return nil, fmt.Errorf("Options.Images: %q: the path must not contain spaces or shell characters", img)
		}
		if _, err := os.Stat(img); err != nil {
			return nil, fmt.Errorf("Options.Images: %w", err)
		}
	}
	runc, err := exec.LookPath("runc")
	if err != nil {
		return nil, err
	}

	// The kubelet's credentials: system:node:NAME in system:nodes, which
	// the Node authorizer and NodeRestriction admission confine to it.
	certPEM, keyPEM, err := api.ClientCert("system:node:"+n.Name, "system:nodes")
	if err != nil {
		return nil, err
	}
	if err := api.WriteKubeconfig(filepath.Join(root, "kubelet.kubeconfig"), certPEM, keyPEM); err != nil {
		return nil, err
	}

	gates := strings.Split(api.Options.FeatureGates(), ",")
	sort.Strings(gates)
	for i, g := range gates {
		gates[i] = strings.Replace(g, "=", ": ", 1)
	}
	files := map[string]*bytes.Buffer{}
	render := func(name string, tmpl *template.Template, data any) error {
		var b bytes.Buffer
		if err := tmpl.Execute(&b, data); err != nil {
			return fmt.Errorf("rendering %s: %w", name, err)
		}
		files[name] = &b
		return nil
	}
	if err := render("kubelet.yaml", kubeletConfig, map[string]any{
		"IP": n.IP, "CAFile": api.CAFile, "CgroupRoot": s.cgroupRoot(), "PodCIDR": s.podCIDR(), "Gates": gates,
	}); err != nil {
		return nil, err
	}
	if err := render("containerd.toml", containerdConfig, map[string]any{
		"Root": root, "Runc": runc, "SandboxImage": opts.SandboxImage,
	}); err != nil {
		return nil, err
	}
	if err := render("cni/10-gpuslice.conflist", cniConfig, map[string]any{"PodCIDR": s.podCIDR()}); err != nil {
		return nil, err
	}
	var labels []string
	for k, v := range opts.Labels {
		labels = append(labels, k+"="+v)
	}
	sort.Strings(labels)
	env := fmt.Sprintf("BIN=%s\nNODE_NAME=%s\nNODE_IP=%s\nIMAGES='%s'\nNODE_LABELS='%s'\nCGROUP_ROOT=%s\n",
		BinDir(), n.Name, n.IP, strings.Join(opts.Images, " "), strings.Join(labels, ","), s.cgroupRoot())
	files["node.env"] = bytes.NewBufferString(env)
	files["node.sh"] = bytes.NewBuffer(nodeScript)
	for name, b := range files {
		if err := os.WriteFile(filepath.Join(root, name), b.Bytes(), 0o644); err != nil {
			return nil, err
		}
	}

	logf, err := os.Create(filepath.Join(root, "node.log"))
	if err != nil {
		return nil, err
	}
	n.cmd = exec.Command("nsenter", "--net=/run/netns/"+s.netns(),
		"unshare", "--mount", "--propagation", "private", "--fork", "--",
		"/bin/sh", filepath.Join(root, "node.sh"), root)
	n.cmd.Stdout, n.cmd.Stderr = logf, logf
	n.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := n.cmd.Start(); err != nil {
		logf.Close()
		return nil, fmt.Errorf("starting the node: %w", err)
	}
	go func() {
		_ = n.cmd.Wait()
		logf.Close()
		close(n.done)
	}()

	// Images are imported before the kubelet starts.
	deadline := time.Now().Add(3 * time.Minute)
	for {
		if _, err := os.Stat(filepath.Join(root, "images.ready")); err == nil {
			break
		}
		select {
		case <-n.done:
			return n, fmt.Errorf("the node's init exited before its kubelet started:\n%s", n.Logs(4000))
		case <-ctx.Done():
			return n, ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return n, fmt.Errorf("containerd did not import the images in 3m:\n%s", n.Logs(4000))
		}
	}
	return n, nil
}

// waitReady waits until the node is registered and Ready, with the
// not-ready taints gone, and the default ServiceAccount exists.
func (c *Cluster) waitReady(ctx context.Context, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var last string
	for {
		node, err := c.Clientset.CoreV1().Nodes().Get(ctx, c.Node.Name, metav1.GetOptions{})
		switch {
		case err != nil:
			last = err.Error()
		case !nodeReady(node):
			last = "node not Ready"
		case len(node.Spec.Taints) > 0:
			last = fmt.Sprintf("node tainted %v", node.Spec.Taints)
		default:
			if _, err := c.Clientset.CoreV1().ServiceAccounts("default").Get(ctx, "default", metav1.GetOptions{}); err != nil {
				last = "no default ServiceAccount yet: " + err.Error()
				break
			}
			return nil
		}
		select {
		case <-c.Node.done:
			return fmt.Errorf("the node exited: %s\n%s", last, c.Node.Logs(4000))
		case <-ctx.Done():
			return fmt.Errorf("node %s not ready after %v: %s\n%s", c.Node.Name, timeout, last, c.Node.Logs(4000))
		case <-time.After(250 * time.Millisecond):
		}
	}
}

func nodeReady(n *corev1.Node) bool {
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// Exec runs argv inside the node's network and mount namespaces (as
// containerd and the kubelet see the machine) and returns its combined
// output.
func (n *Node) Exec(ctx context.Context, argv ...string) ([]byte, error) {
	data, err := os.ReadFile(filepath.Join(n.Root, "node.pid"))
	if err != nil {
		return nil, fmt.Errorf("the node's init pid: %w", err)
	}
	pid := strings.TrimSpace(string(data))
	args := append([]string{"--target", pid, "--mount", "--net", "--"}, argv...)
	out, err := exec.CommandContext(ctx, "nsenter", args...).CombinedOutput()
	if err != nil {
		return out, fmt.Errorf("nsenter %s: %w: %s", strings.Join(argv, " "), err, out)
	}
	return out, nil
}

// Ctr runs containerd's ctr against the node's containerd in the k8s.io
// namespace.
func (n *Node) Ctr(ctx context.Context, args ...string) ([]byte, error) {
	return n.Exec(ctx, append([]string{filepath.Join(BinDir(), "ctr"), "--address", "/run/containerd/containerd.sock", "-n", "k8s.io"}, args...)...)
}

// Logs returns the end of the node's init, containerd and kubelet logs.
func (n *Node) Logs(max int64) string {
	var b strings.Builder
	for _, f := range []string{"node.log", "import.log", "containerd.log", "kubelet.log"} {
		fmt.Fprintf(&b, "--- node %s (tail):\n%s\n", f, apitest.TailFile(filepath.Join(n.Root, f), max))
	}
	return b.String()
}

// stop kills the node's processes (containers, containerd, its shims, the
// kubelet) and removes its cgroups and network; the mount namespace goes
// with its last process.
func (n *Node) stop() string {
	logs := n.Logs(3000)
	if n.cmd != nil && n.cmd.Process != nil {
		_ = syscall.Kill(-n.cmd.Process.Pid, syscall.SIGKILL)
	}
	if err := n.slot.sweep(); err != nil {
		logs += "sweeping the node: " + err.Error() + "\n"
	}
	if n.cmd != nil {
		select {
		case <-n.done:
		case <-time.After(10 * time.Second):
			logs += "the node's init did not exit\n"
		}
	}
	return logs
}

// Slot is the node's slot number (its names and addresses, docs/realnode.md).
func (n *Node) Slot() int { return n.slot.n }

// PodCIDR is the node's pod address range.
func (n *Node) PodCIDR() *net.IPNet {
	_, ipn, _ := net.ParseCIDR(n.slot.podCIDR())
	return ipn
}
