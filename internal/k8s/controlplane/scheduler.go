package controlplane

import (
	"context"
	"crypto/tls"
	"encoding/base64"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/yaml"
)

// SchedulerConfigAPIVersion is the KubeSchedulerConfiguration version the
// stock kube-scheduler reads (v1.36 and v1.37 alike).
const SchedulerConfigAPIVersion = "kubescheduler.config.k8s.io/v1"

// SchedulerOptions configure StartScheduler. The zero value runs the stock
// default profile (schedulerName default-scheduler) with the API server's
// DRA feature gates.
type SchedulerOptions struct {
	// Config is a whole KubeSchedulerConfiguration (YAML or JSON) to start
	// from, e.g. with extenders or percentageOfNodesToScore. StartScheduler
	// always sets its clientConnection.kubeconfig (the test API server)
	// and leaderElection.leaderElect=false, overriding what it says; its
	// clientConnection qps and burst are kept when given (else 200 and
	// 400, four times kube-scheduler's defaults).
	// Empty: an empty configuration (the scheduler's defaults).
	Config string
	// Profiles is the YAML (or JSON) list that becomes the configuration's
	// profiles, replacing any in Config, e.g.
	//
	//	- schedulerName: binpack
	//	  pluginConfig:
	//	  - name: NodeResourcesFit
	//	    args: {scoringStrategy: {type: MostAllocated}}
	//
	// Empty: Config's profiles, or the default profile.
	Profiles string
	// FeatureGates is the --feature-gates value; empty means FeatureGates,
	// the same gates the API server runs with (a scheduler whose gates
	// differ from the API server's drops fields the server keeps).
	FeatureGates string
	// Args are further kube-scheduler flags, appended last.
	Args []string
	// Binary is the scheduler to run; empty means the stock
	// kube-scheduler in the Server's BinDir (GpusliceSchedulerBinary
	// finds gpuslice-scheduler, which takes the same flags).
	Binary string
	// LeaderElect keeps leader election on (a Lease in kube-system),
	// for tests of several replicas; StartScheduler turns it off
	// otherwise.
	LeaderElect bool
	// ReadyTimeout is how long StartScheduler waits for /readyz (its
	// informers synced); 0 means a minute. Thousands of nodes' slices
	// take longer to list on a loaded machine.
	ReadyTimeout time.Duration
}

// Scheduler is a running stock kube-scheduler bound to one Server.
type Scheduler struct {
	// ConfigFile is the KubeSchedulerConfiguration it was started with.
	ConfigFile string
	// LogFile holds its stdout and stderr.
	LogFile string
	// URL is its secure serving address (https://127.0.0.1:port): /readyz,
	// /metrics and, started with --profiling, /debug/pprof/.
	URL string

	proc *process
	once sync.Once
}

// LaunchScheduler is StartScheduler without a test: its files go under tmp
// and the caller stops it.
func LaunchScheduler(ctx context.Context, s *Server, tmp string, opts SchedulerOptions) (*Scheduler, error) {
	return startScheduler(ctx, s, tmp, opts)
}

// Stop terminates the scheduler and waits for it to exit; later calls do
// nothing. StartScheduler's cleanup calls it.
func (sc *Scheduler) Stop() {
	sc.once.Do(sc.proc.stop)
}

// Tail returns up to the last n bytes of the scheduler's log.
func (sc *Scheduler) Tail(n int64) string { return sc.proc.tail(n) }

// PID is the scheduler's process ID (for reading its CPU time).
func (sc *Scheduler) PID() int { return sc.proc.cmd.Process.Pid }

func startScheduler(ctx context.Context, s *Server, tmp string, opts SchedulerOptions) (*Scheduler, error) {
	kubeconfig := filepath.Join(tmp, "scheduler.kubeconfig")
	if err := writeKubeconfig(kubeconfig, s); err != nil {
		return nil, err
	}
	cfg, err := schedulerConfig(opts, kubeconfig)
	if err != nil {
		return nil, err
	}
	configFile := filepath.Join(tmp, "scheduler-config.yaml")
	if err := os.WriteFile(configFile, cfg, 0o600); err != nil {
		return nil, err
	}
	gates := opts.FeatureGates
	if gates == "" {
		gates = s.Options.FeatureGates()
	}
	bin := opts.Binary
	if bin == "" {
		bin = filepath.Join(s.BinDir, "kube-scheduler")
	}
	var url string
	ready := opts.ReadyTimeout
	if ready <= 0 {
		ready = time.Minute
	}
	proc, logFile, err := startComponent(ctx, filepath.Base(bin), bin, tmp, "/readyz", ready, func(port int) []string {
		url = "https://127.0.0.1:" + strconv.Itoa(port)
		return append([]string{
			"--config=" + configFile,
			"--authentication-kubeconfig=" + kubeconfig,
			"--authorization-kubeconfig=" + kubeconfig,
			"--authentication-skip-lookup=true",
			"--bind-address=127.0.0.1",
			"--secure-port=" + strconv.Itoa(port),
			"--cert-dir=" + filepath.Join(tmp, "scheduler-certs"),
			"--feature-gates=" + gates,
			"--profiling=false",
			"--v=2",
		}, opts.Args...)
	})
	if proc == nil {
		return nil, err
	}
	return &Scheduler{ConfigFile: configFile, LogFile: logFile, URL: url, proc: proc}, err
}

// startComponent starts a control-plane component (kube-scheduler,
// kube-controller-manager) serving HTTPS on a free port and waits until
// path answers; a start that lost its port to another process is retried
// (three attempts). A component that started but never became healthy is
// returned with the error, for its log.
func startComponent(ctx context.Context, name, bin, tmp, path string, wait time.Duration, args func(port int) []string) (*process, string, error) {
	var last error
	for attempt := 1; attempt <= 3; attempt++ {
		ports, err := freePorts(1)
		if err != nil {
			return nil, "", err
		}
		logFile := filepath.Join(tmp, fmt.Sprintf("%s-%d.log", name, attempt))
		proc, err := startProcess(name, bin, logFile, args(ports[0])...)
		if err != nil {
			return nil, "", err
		}
		proc.url = "https://127.0.0.1:" + strconv.Itoa(ports[0])
		url := proc.url + path
		last = proc.waitUntil(ctx, wait, func(ctx context.Context) error { return schedulerReady(ctx, url) })
		if last == nil {
			return proc, logFile, nil
		}
		if attempt < 3 && strings.Contains(proc.tail(4000), "address already in use") {
			proc.stop()
			continue
		}
		return proc, logFile, fmt.Errorf("%s did not become ready: %w", name, last)
	}
	return nil, "", last
}

// schedulerConfig merges opts into a KubeSchedulerConfiguration that
// talks to kubeconfig without leader election.
func schedulerConfig(opts SchedulerOptions, kubeconfig string) ([]byte, error) {
	cfg := map[string]any{}
	if strings.TrimSpace(opts.Config) != "" {
		if err := yaml.Unmarshal([]byte(opts.Config), &cfg); err != nil {
			return nil, fmt.Errorf("SchedulerOptions.Config: %w", err)
		}
		if cfg == nil {
			cfg = map[string]any{}
		}
	}
	if v, ok := cfg["apiVersion"]; ok && v != SchedulerConfigAPIVersion {
		return nil, fmt.Errorf("SchedulerOptions.Config: apiVersion %v; kube-scheduler (1.36 and 1.37) reads %s", v, SchedulerConfigAPIVersion)
	}
	cfg["apiVersion"] = SchedulerConfigAPIVersion
	cfg["kind"] = "KubeSchedulerConfiguration"
	cc, _ := cfg["clientConnection"].(map[string]any)
	if cc == nil {
		cc = map[string]any{}
	}
	cc["kubeconfig"] = kubeconfig
	if _, ok := cc["qps"]; !ok {
		cc["qps"] = 200
	}
	if _, ok := cc["burst"]; !ok {
		cc["burst"] = 400
	}
	cfg["clientConnection"] = cc
	le, _ := cfg["leaderElection"].(map[string]any)
	if le == nil {
		le = map[string]any{}
	}
	le["leaderElect"] = opts.LeaderElect
	cfg["leaderElection"] = le
	if strings.TrimSpace(opts.Profiles) != "" {
		var profiles []any
		if err := yaml.Unmarshal([]byte(opts.Profiles), &profiles); err != nil {
			return nil, fmt.Errorf("SchedulerOptions.Profiles: want a YAML list of profiles: %w", err)
		}
		cfg["profiles"] = profiles
	}
	return yaml.Marshal(cfg)
}

// writeKubeconfig writes a kubeconfig for s's client certificate.
func writeKubeconfig(path string, s *Server) error {
	tc := s.Config.TLSClientConfig
	return s.WriteKubeconfig(path, tc.CertData, tc.KeyData)
}

// WriteKubeconfig writes a kubeconfig (mode 0600) for the server with the
// given client certificate and key, e.g. from ClientCert, or the admin's
// (Config.CertData, Config.KeyData).
func (s *Server) WriteKubeconfig(path string, certPEM, keyPEM []byte) error {
	b64 := base64.StdEncoding.EncodeToString
	cfg := map[string]any{
		"apiVersion":      "v1",
		"kind":            "Config",
		"current-context": "apitest",
		"clusters": []any{map[string]any{"name": "apitest", "cluster": map[string]any{
			"server": s.URL, "certificate-authority-data": b64(s.Config.TLSClientConfig.CAData)}}},
		"users": []any{map[string]any{"name": "apitest", "user": map[string]any{
			"client-certificate-data": b64(certPEM), "client-key-data": b64(keyPEM)}}},
		"contexts": []any{map[string]any{"name": "apitest", "context": map[string]any{
			"cluster": "apitest", "user": "apitest"}}},
	}
	out, err := yaml.Marshal(cfg)
	if err != nil {
		return err
	}
	return os.WriteFile(path, out, 0o600)
}

// schedulerReady asks the scheduler's /readyz (its serving certificate is
// self-signed, so it is not verified; nothing secret is sent).
func schedulerReady(ctx context.Context, url string) error {
	client := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}} //nolint:gosec // loopback health check of a test process
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s: %s %s", url, resp.Status, body)
	}
	return nil
}

// EnsureNamespace creates the namespace and its default ServiceAccount
// unless this Server made them already: pods need the ServiceAccount to
// pass admission, and no controller manager runs to add it.
func (s *Server) EnsureNamespace(ctx context.Context, ns string) error {
	return s.ensureNamespace(ctx, ns)
}

// notReadyTaint is the taint the API server's TaintNodesByCondition
// admission puts on every new Node until a kubelet reports it ready.
const notReadyTaint = "node.kubernetes.io/not-ready"

// CreateReadyNode creates node as a kubelet would leave it once ready:
// its status (capacity, allocatable: what a device plugin advertises) as
// given, a Ready condition, and without the not-ready taint the API server
// adds on creation (no kubelet or node controller runs to lift it). Other
// taints in node.Spec stay. It returns the stored Node.
func (s *Server) CreateReadyNode(ctx context.Context, node *corev1.Node) (*corev1.Node, error) {
	cs, err := kubernetes.NewForConfig(s.Config)
	if err != nil {
		return nil, err
	}
	n := node.DeepCopy()
	if n.Labels == nil {
		n.Labels = map[string]string{}
	}
	if _, ok := n.Labels[corev1.LabelHostname]; !ok {
		n.Labels[corev1.LabelHostname] = n.Name
	}
	status := n.Status
	ready := false
	for _, c := range status.Conditions {
		ready = ready || c.Type == corev1.NodeReady
	}
	if !ready {
		now := metav1.Now()
		status.Conditions = append(status.Conditions, corev1.NodeCondition{Type: corev1.NodeReady, Status: corev1.ConditionTrue,
			Reason: "KubeletReady", LastHeartbeatTime: now, LastTransitionTime: now})
	}
	created, err := cs.CoreV1().Nodes().Create(ctx, n, metav1.CreateOptions{FieldManager: FieldManager})
	if err != nil {
		return nil, fmt.Errorf("creating Node %s: %w", n.Name, err)
	}
	created.Status = status
	created, err = cs.CoreV1().Nodes().UpdateStatus(ctx, created, metav1.UpdateOptions{FieldManager: FieldManager})
	if err != nil {
		return nil, fmt.Errorf("setting the status of Node %s: %w", n.Name, err)
	}
	var keep []corev1.Taint
	for _, t := range created.Spec.Taints {
		if t.Key != notReadyTaint {
			keep = append(keep, t)
		}
	}
	if len(keep) != len(created.Spec.Taints) {
		created.Spec.Taints = keep
		if created, err = cs.CoreV1().Nodes().Update(ctx, created, metav1.UpdateOptions{FieldManager: FieldManager}); err != nil {
			return nil, fmt.Errorf("removing the %s taint from Node %s: %w", notReadyTaint, n.Name, err)
		}
	}
	return created, nil
}
