package controlplane

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/restmapper"
)

// Environment variables Start reads.
const (
	// EnvBinDir names a directory holding etcd, kube-apiserver and the
	// Karpenter CRDs, instead of the cache directory (its binaries must be
	// the release GPUSLICE_K8S_VERSION selects: Launch checks).
	EnvBinDir = "GPUSLICE_K8S_BIN"
	// EnvCache is the cache root scripts/controlplane.sh builds into
	// (default $HOME/.cache/gpuslice).
	EnvCache = "GPUSLICE_CACHE"
	// EnvRequire, set to 1, makes Start fail the test instead of skipping
	// it when the binaries are missing.
	EnvRequire = "GPUSLICE_REQUIRE_APISERVER"
)

// requiredFiles must all be in the binary directory.
var requiredFiles = []string{"etcd", "kube-apiserver", "kube-scheduler", "karpenter.sh_nodepools.yaml", "karpenter.sh_nodeclaims.yaml"}

// RuntimeConfig is the --runtime-config kube-apiserver runs with: every
// version of resource.k8s.io that 1.36 and 1.37 can serve (both still
// serve v1beta1, v1beta2 and v1alpha3; only v1 is on by default).
const RuntimeConfig = "resource.k8s.io/v1=true,resource.k8s.io/v1beta1=true,resource.k8s.io/v1beta2=true,resource.k8s.io/v1alpha3=true"

// Server is a running kube-apiserver with its etcd. Its methods are safe
// for concurrent use.
type Server struct {
	// URL is the API server's address, https://127.0.0.1:PORT.
	URL string
	// Config authenticates as a member of system:masters. Copy it
	// (rest.CopyConfig) before changing it.
	Config *rest.Config
	// Client is a dynamic client for Config.
	Client dynamic.Interface
	// BinDir is the directory the binaries were started from.
	BinDir string
	// Version is the release the API server reports it runs (its
	// /version), which Launch checked is the one Options.Version named.
	Version Version
	// CAFile is the cluster CA (it signs the serving and client
	// certificates); SAKeyFile the service-account signing key; Dir the
	// directory holding them and the components' logs.
	CAFile, SAKeyFile, Dir string
	// Options are what it was started with, defaults filled in.
	Options Options

	pki *pki

	mapper *restmapper.DeferredDiscoveryRESTMapper

	nsMu       sync.Mutex
	namespaces map[string]bool // created for real, with a default ServiceAccount
}

// BinDir returns the directory Start looks in: $GPUSLICE_K8S_BIN if set,
// else ${GPUSLICE_CACHE:-$HOME/.cache/gpuslice}/k8s/VERSION for the
// release SelectedVersion names (v1.36.3 by default; for a version that is
// not Supported, the directory it would have).
func BinDir() string {
	if d := os.Getenv(EnvBinDir); d != "" {
		return d
	}
	return BinDirFor(SelectedVersionName())
}

// BinDirFor is the cache directory scripts/controlplane.sh builds release
// version into: ${GPUSLICE_CACHE:-$HOME/.cache/gpuslice}/k8s/VERSION.
func BinDirFor(version string) string {
	root := os.Getenv(EnvCache)
	if root == "" {
		home, err := os.UserHomeDir()
		if err != nil {
			return ""
		}
		root = filepath.Join(home, ".cache", "gpuslice")
	}
	return filepath.Join(root, "k8s", version)
}

// Built says why dir cannot run a control plane (nil when it can): the
// files it lacks.
func Built(dir string) error {
	if why := Missing(dir); why != "" {
		return errors.New(why)
	}
	return nil
}

// Missing returns what dir lacks of requiredFiles ("" when complete).
func Missing(dir string) string {
	if dir == "" {
		return "no home directory and " + EnvBinDir + " is unset"
	}
	var missing []string
	for _, f := range requiredFiles {
		if st, err := os.Stat(filepath.Join(dir, f)); err != nil || st.IsDir() {
			missing = append(missing, f)
		}
	}
	if len(missing) == 0 {
		return ""
	}
	return fmt.Sprintf("%s lacks %s", dir, strings.Join(missing, ", "))
}

// Options configure StartWith and Launch. The zero value is what Start
// uses: loopback on a free port, RBAC, the DRA feature gates.
type Options struct {
	// BindAddress is the API server's --bind-address and
	// --advertise-address (default 127.0.0.1); the serving certificate is
	// valid for it. A real node reaches the API server here.
	BindAddress string
	// SecurePort is the API server's port (default: a free one).
	SecurePort int
	// ServiceCIDR is --service-cluster-ip-range (default 10.96.0.0/16);
	// the "kubernetes" Service gets its first address.
	ServiceCIDR string
	// AuthorizationModes is --authorization-mode (default RBAC); a real
	// kubelet needs Node,RBAC.
	AuthorizationModes string
	// AdmissionPlugins is --enable-admission-plugins (default: the
	// API server's own defaults); a real node adds NodeRestriction.
	AdmissionPlugins string
	// Version is the Kubernetes release (one of SupportedVersions) the
	// binaries are: it picks the feature gates, and Launch fails when the
	// API server reports another. Default: SelectedVersion.
	Version string
	// ExtraFeatureGates are appended to the version's feature gates
	// (FeatureGatesFor).
	ExtraFeatureGates string
	// Args are further kube-apiserver flags, appended last.
	Args []string
}

func (o Options) withDefaults() Options {
	if o.BindAddress == "" {
		o.BindAddress = "127.0.0.1"
	}
	if o.ServiceCIDR == "" {
		o.ServiceCIDR = "10.96.0.0/16"
	}
	if o.AuthorizationModes == "" {
		o.AuthorizationModes = "RBAC"
	}
	if o.Version == "" {
		if v, err := SelectedVersion(); err == nil {
			o.Version = v.Git
		} else {
			o.Version = os.Getenv(EnvVersion) // start reports the error
		}
	}
	return o
}

// FeatureGates returns the API server's --feature-gates value: those of
// Options.Version (SelectedVersion when empty), then ExtraFeatureGates.
func (o Options) FeatureGates() string {
	o = o.withDefaults()
	var gates string
	if v, err := ParseVersion(o.Version); err == nil {
		gates = FeatureGatesFor(v)
	}
	switch {
	case o.ExtraFeatureGates == "":
		return gates
	case gates == "":
		return o.ExtraFeatureGates
	}
	return gates + "," + o.ExtraFeatureGates
}

// Launch is StartWith without a test: it starts etcd and kube-apiserver
// from dir with their files under tmp and returns a stop function that
// stops them (API server first) and returns the end of their logs. Call
// stop even when Launch fails: it stops whatever had started.
func Launch(ctx context.Context, dir, tmp string, opts Options) (*Server, func() string, error) {
	if why := Missing(dir); why != "" {
		return nil, func() string { return "" }, fmt.Errorf("kube-apiserver not built: run scripts/controlplane.sh (%s)", why)
	}
	if err := os.MkdirAll(tmp, 0o755); err != nil {
		return nil, func() string { return "" }, err
	}
	opts = opts.withDefaults()
	want, err := supportedVersion("Options.Version", opts.Version)
	if err != nil {
		return nil, func() string { return "" }, err
	}
	s, procs, err := start(ctx, dir, tmp, opts)
	if err == nil && s.Version.Git != want.Git {
		err = fmt.Errorf("%s runs Kubernetes %s, not %s: set %s=%s (or build %s with K8S_VERSION=%s scripts/controlplane.sh)",
			dir, s.Version, want, EnvVersion, s.Version, want, want)
	}
	var once sync.Once
	var logs strings.Builder
	stop := func() string {
		once.Do(func() {
			for i := len(procs) - 1; i >= 0; i-- {
				procs[i].stop()
				fmt.Fprintf(&logs, "%s log (tail):\n%s\n", procs[i].name, procs[i].tail(3000))
			}
		})
		return logs.String()
	}
	return s, stop, err
}

func start(ctx context.Context, dir, tmp string, opts Options) (*Server, []*process, error) {
	var procs []*process
	var extraIPs []net.IP
	ip := net.ParseIP(opts.BindAddress)
	if ip == nil {
		return nil, procs, fmt.Errorf("Options.BindAddress: %q is not an IP address", opts.BindAddress)
	} else if !ip.IsLoopback() {
		extraIPs = append(extraIPs, ip)
	}
	p, err := writePKI(tmp, extraIPs...)
	if err != nil {
		return nil, procs, fmt.Errorf("generating certificates: %w", err)
	}

	// A port found free can be taken before the process binds it: retry.
	var etcdURL string
	for attempt := 1; ; attempt++ {
		ports, err := freePorts(2)
		if err != nil {
			return nil, procs, err
		}
		client := "http://127.0.0.1:" + strconv.Itoa(ports[0])
		peer := "http://127.0.0.1:" + strconv.Itoa(ports[1])
		etcd, err := startProcess("etcd", filepath.Join(dir, "etcd"), filepath.Join(tmp, "etcd.log"),
			"--name=apitest",
			"--data-dir="+filepath.Join(tmp, "etcd"),
			"--listen-client-urls="+client,
			"--advertise-client-urls="+client,
			"--listen-peer-urls="+peer,
			"--initial-advertise-peer-urls="+peer,
			"--initial-cluster=apitest="+peer,
			"--initial-cluster-state=new",
			"--unsafe-no-fsync=true",
			"--log-level=warn",
		)
		if err != nil {
			return nil, procs, err
		}
		procs = append(procs, etcd)
		err = etcd.waitUntil(ctx, 60*time.Second, func(ctx context.Context) error { return etcdHealthy(ctx, client) })
		if err == nil {
			etcdURL = client
			break
		}
		etcd.stop()
		procs = procs[:len(procs)-1]
		if attempt < 3 && strings.Contains(etcd.tail(4000), "address already in use") {
			continue
		}
		return nil, procs, fmt.Errorf("etcd did not become healthy: %w\n%s", err, etcd.tail(3000))
	}

	var cfg *rest.Config
	var dc *discovery.DiscoveryClient
	for attempt := 1; ; attempt++ {
		port := opts.SecurePort
		if port == 0 {
			ports, err := freePorts(1)
			if err != nil {
				return nil, procs, err
			}
			port = ports[0]
		}
		url := "https://" + net.JoinHostPort(opts.BindAddress, strconv.Itoa(port))
		args := []string{
			"--etcd-servers=" + etcdURL,
			"--bind-address=" + opts.BindAddress,
			"--advertise-address=" + opts.BindAddress,
			"--secure-port=" + strconv.Itoa(port),
			"--cert-dir=" + filepath.Join(tmp, "apiserver-certs"),
			"--tls-cert-file=" + p.servingCert,
			"--tls-private-key-file=" + p.servingKey,
			"--client-ca-file=" + p.caFile,
			"--kubelet-client-certificate=" + p.clientCert,
			"--kubelet-client-key=" + p.clientKey,
			"--authorization-mode=" + opts.AuthorizationModes,
			"--service-account-issuer=https://kubernetes.default.svc.cluster.local",
			"--service-account-key-file=" + p.saPub,
			"--service-account-signing-key-file=" + p.saKey,
			"--service-cluster-ip-range=" + opts.ServiceCIDR,
			"--allow-privileged=true",
			"--runtime-config=" + RuntimeConfig,
			"--feature-gates=" + opts.FeatureGates(),
			"--enable-priority-and-fairness=false",
			"--profiling=false",
		}
		if opts.AdmissionPlugins != "" {
			args = append(args, "--enable-admission-plugins="+opts.AdmissionPlugins)
		}
		if ip.IsLoopback() {
			// The "kubernetes" Service's endpoints cannot hold a loopback
			// address (Endpoints validation rejects it): 1.36's lease
			// reconciler only fails to write them, 1.37's API server
			// refuses to start ("cannot use public IP 127.0.0.1 with
			// endpoint reconciler"; pkg/controlplane/instance.go).
			// A real node (nodetest) binds a routable address and keeps
			// the reconciler.
			args = append(args, "--endpoint-reconciler-type=none")
		}
		args = append(args, opts.Args...)
		api, err := startProcess("kube-apiserver", filepath.Join(dir, "kube-apiserver"), filepath.Join(tmp, "kube-apiserver.log"), args...)
		if err != nil {
			return nil, procs, err
		}
		procs = append(procs, api)
		cfg = &rest.Config{
			Host: url,
			TLSClientConfig: rest.TLSClientConfig{
				CAData:   p.caPEM,
				CertData: p.clientCertPEM,
				KeyData:  p.clientKeyPEM,
			},
			QPS:            200,
			Burst:          400,
			Timeout:        30 * time.Second,
			UserAgent:      "gpuslice-apitest",
			WarningHandler: rest.NoWarnings{},
		}
		dc, err = discovery.NewDiscoveryClientForConfig(cfg)
		if err != nil {
			return nil, procs, err
		}
		err = api.waitUntil(ctx, 120*time.Second, func(ctx context.Context) error {
			body, err := dc.RESTClient().Get().AbsPath("/readyz").DoRaw(ctx)
			if err != nil {
				return fmt.Errorf("%w: %s", err, body)
			}
			return nil
		})
		if err == nil {
			break
		}
		api.stop()
		procs = procs[:len(procs)-1]
		if attempt < 3 && opts.SecurePort == 0 && strings.Contains(api.tail(4000), "address already in use") {
			continue
		}
		return nil, procs, fmt.Errorf("kube-apiserver did not become ready: %w\n%s", err, api.tail(3000))
	}

	client, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return nil, procs, err
	}
	info, err := dc.ServerVersion()
	if err != nil {
		return nil, procs, fmt.Errorf("reading the API server's version: %w", err)
	}
	running, err := ParseVersion(info.GitVersion)
	if err != nil {
		return nil, procs, fmt.Errorf("the API server's /version: %w", err)
	}
	s := &Server{
		URL:        cfg.Host,
		Config:     cfg,
		Client:     client,
		BinDir:     dir,
		Version:    running,
		CAFile:     p.caFile,
		SAKeyFile:  p.saKey,
		Dir:        tmp,
		Options:    opts,
		pki:        p,
		mapper:     restmapper.NewDeferredDiscoveryRESTMapper(memory.NewMemCacheClient(dc)),
		namespaces: map[string]bool{},
	}
	if err := s.installCRDs(ctx, dir); err != nil {
		return nil, procs, err
	}
	return s, procs, nil
}

var crdGVR = schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"}

// installCRDs creates every CustomResourceDefinition in dir/*.yaml and waits
// until each is established and served.
func (s *Server) installCRDs(ctx context.Context, dir string) error {
	files, err := filepath.Glob(filepath.Join(dir, "*.yaml"))
	if err != nil {
		return err
	}
	sort.Strings(files)
	var names []string
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			return err
		}
		for _, d := range splitDocuments(data) {
			if d.err != nil {
				return fmt.Errorf("%s: %w", f, d.err)
			}
			if d.obj.GetKind() != "CustomResourceDefinition" {
				continue
			}
			if _, err := s.Client.Resource(crdGVR).Create(ctx, d.obj, createOptions(false)); err != nil {
				return fmt.Errorf("installing CRD %s from %s: %w", d.obj.GetName(), f, err)
			}
			names = append(names, d.obj.GetName())
		}
	}
	deadline := time.Now().Add(60 * time.Second)
	for _, name := range names {
		for {
			crd, err := s.Client.Resource(crdGVR).Get(ctx, name, getOptions)
			if err == nil && crdEstablished(crd) {
				break
			}
			if time.Now().After(deadline) {
				return fmt.Errorf("CRD %s not established after 60s (last error: %v)", name, err)
			}
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(100 * time.Millisecond):
			}
		}
	}
	s.mapper.Reset()
	return nil
}

func crdEstablished(crd *unstructured.Unstructured) bool {
	conds, _, _ := unstructured.NestedSlice(crd.Object, "status", "conditions")
	ok := map[string]bool{}
	for _, c := range conds {
		m, _ := c.(map[string]any)
		if m != nil && m["status"] == "True" {
			t, _ := m["type"].(string)
			ok[t] = true
		}
	}
	return ok["Established"] && ok["NamesAccepted"]
}

func etcdHealthy(ctx context.Context, url string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url+"/health", nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
	if resp.StatusCode != http.StatusOK || !bytes.Contains(body, []byte(`"health":"true"`)) {
		return fmt.Errorf("etcd /health: %s %s", resp.Status, body)
	}
	return nil
}

// freePorts returns n distinct loopback TCP ports that were free a moment ago.
func freePorts(n int) ([]int, error) {
	var ports []int
	var ls []net.Listener
	defer func() {
		for _, l := range ls {
			l.Close()
		}
	}()
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, fmt.Errorf("finding a free port: %w", err)
		}
		ls = append(ls, l)
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}

// process is a started binary in its own process group.
type process struct {
	name string
	cmd  *exec.Cmd
	log  string
	url  string        // https://127.0.0.1:PORT of a component serving HTTPS (startComponent)
	done chan struct{} // closed once the process has exited and been reaped
	err  error         // cmd.Wait's result, once done is closed
}

func startProcess(name, bin, logPath string, args ...string) (*process, error) {
	f, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = f, f
	cmd.SysProcAttr = sysProcAttr()
	// etcd reads its flags from ETCD_* variables too; keep the caller's out.
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "ETCD_") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	// The kernel sends the parent-death signal (sysProcAttr) when the
	// thread that forked the child ends, not the process: fork on a thread
	// of its own, kept until the child has exited. On a shared thread, a
	// goroutine that locks it and exits (services.StartTied, as an
	// in-process `gpuslice run` in a parallel test does) would end the
	// thread and SIGKILL the control plane with it.
	p := &process{name: name, cmd: cmd, log: logPath, done: make(chan struct{})}
	started := make(chan error, 1)
	go func() {
		runtime.LockOSThread() // never unlocked: the thread ends after the child
		if err := cmd.Start(); err != nil {
			started <- err
			return
		}
		started <- nil
		p.err = cmd.Wait()
		f.Close()
		close(p.done)
	}()
	if err := <-started; err != nil {
		f.Close()
		return nil, fmt.Errorf("starting %s: %w", name, err)
	}
	return p, nil
}

// waitUntil polls check until it succeeds, the process exits, or timeout.
func (p *process) waitUntil(ctx context.Context, timeout time.Duration, check func(context.Context) error) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var last error
	for {
		cctx, ccancel := context.WithTimeout(ctx, 5*time.Second)
		last = check(cctx)
		ccancel()
		if last == nil {
			return nil
		}
		select {
		case <-p.done:
			return fmt.Errorf("%s exited (%v); last check: %v", p.name, p.err, last)
		case <-ctx.Done():
			return fmt.Errorf("%s not ready after %v: %v", p.name, timeout, last)
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// stop terminates the process group (SIGTERM, then SIGKILL after 10s) and
// reaps the process.
func (p *process) stop() {
	pid := p.cmd.Process.Pid
	select {
	case <-p.done:
	default:
		_ = signalGroup(pid, syscall.SIGTERM)
		select {
		case <-p.done:
		case <-time.After(10 * time.Second):
		}
	}
	// Anything left in the group (the leader ignoring SIGTERM, or a child).
	if err := signalGroup(pid, syscall.SIGKILL); err != nil && !errors.Is(err, syscall.ESRCH) {
		_ = p.cmd.Process.Kill()
	}
	<-p.done
}

// tail returns up to the last n bytes of the process's log.
func (p *process) tail(n int64) string { return TailFile(p.log, n) }

// TailFile returns up to the last n bytes of the file at path ("" when it
// cannot be read): the end of a component's log for a failure message.
func TailFile(path string, n int64) string {
	f, err := os.Open(path)
	if err != nil {
		return ""
	}
	defer f.Close()
	if st, err := f.Stat(); err == nil && st.Size() > n {
		_, _ = f.Seek(st.Size()-n, io.SeekStart)
	}
	b, _ := io.ReadAll(f)
	return string(b)
}
