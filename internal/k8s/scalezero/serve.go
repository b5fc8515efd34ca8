package scalezero

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"strings"
	"time"

	appsv1client "k8s.io/client-go/kubernetes/typed/apps/v1"
	discoveryv1client "k8s.io/client-go/kubernetes/typed/discovery/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/gpuslice/gpuslice/internal/autoscale"
	"github.com/gpuslice/gpuslice/internal/services"
)

// Config is one scale-to-zero proxy.
type Config struct {
	// REST reaches the API server as the proxy's ServiceAccount.
	REST *rest.Config
	// Namespace, Deployment: the workload woken and stopped. Service: the
	// Service in front of its pods, whose ready endpoints are served;
	// Port: their port (0: the slices' only port).
	Namespace, Deployment, Service string
	Port                           int
	// Policy: MinReplicas (what a wake brings up, at least 1),
	// DownAfter (idle period) and AutoStop.
	Policy      autoscale.Policy
	WakeTimeout time.Duration
	Interval    time.Duration
	Clock       func() time.Time
	Log         *slog.Logger
}

// Proxy is a running scale-to-zero proxy.
type Proxy struct {
	Gate      *services.Gate
	Endpoints *Endpoints
}

// New checks the configuration and makes the clients.
func New(cfg Config) (*Proxy, error) {
	var errs []error
	if cfg.REST == nil {
		errs = append(errs, errors.New("no Kubernetes client configuration"))
	}
	for _, f := range []struct{ name, v string }{{"namespace", cfg.Namespace}, {"deployment", cfg.Deployment}, {"service", cfg.Service}} {
		if f.v == "" {
			errs = append(errs, fmt.Errorf("--%s is required", f.name))
		}
	}
	if cfg.Port < 0 || cfg.Port > 65535 {
		errs = append(errs, fmt.Errorf("--port %d: want 1..65535 (or 0: the endpoints' only port)", cfg.Port))
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	apps, err := appsv1client.NewForConfig(cfg.REST)
	if err != nil {
		return nil, err
	}
	disc, err := discoveryv1client.NewForConfig(cfg.REST)
	if err != nil {
		return nil, err
	}
	g, err := services.NewGate(services.GateConfig{Name: cfg.Namespace + "/" + cfg.Deployment,
		Scaler: &Deployment{Client: apps, Namespace: cfg.Namespace, Name: cfg.Deployment},
		Policy: cfg.Policy, WakeTimeout: cfg.WakeTimeout, Interval: cfg.Interval, Clock: cfg.Clock, Log: cfg.Log})
	if err != nil {
		return nil, err
	}
	return &Proxy{Gate: g, Endpoints: &Endpoints{Client: disc, Namespace: cfg.Namespace, Service: cfg.Service, Port: cfg.Port}}, nil
}

// Serve answers on ln until ctx ends: the proxy, the endpoint watch and
// the gate's decisions.
func (p *Proxy) Serve(ctx context.Context, ln net.Listener) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	errc := make(chan error, 3)
	go func() { errc <- p.Endpoints.Run(ctx, p.Gate.Proxy()) }()
	go func() { errc <- p.Gate.Run(ctx) }()
	hs := &http.Server{Handler: p.Gate.Proxy(), ReadHeaderTimeout: 10 * time.Second}
	go func() {
		<-ctx.Done()
		sctx, c := context.WithTimeout(context.Background(), 10*time.Second)
		defer c()
		_ = hs.Shutdown(sctx)
	}()
	err := hs.Serve(ln)
	cancel()
	if errors.Is(err, http.ErrServerClosed) {
		err = nil
	}
	return err
}

// KubeConfig is the in-cluster configuration in a pod, else the
// kubeconfig's (file given, $KUBECONFIG, ~/.kube/config), with the
// namespace it implies.
func KubeConfig(path string) (*rest.Config, string, error) {
	if path == "" {
		if cfg, err := rest.InClusterConfig(); err == nil {
			ns := "default"
			if b, err := os.ReadFile("/var/run/secrets/kubernetes.io/serviceaccount/namespace"); err == nil {
				ns = strings.TrimSpace(string(b))
			}
			return cfg, ns, nil
		}
	}
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	rules.ExplicitPath = path
	cc := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, &clientcmd.ConfigOverrides{})
	cfg, err := cc.ClientConfig()
	if err != nil {
		return nil, "", fmt.Errorf("no Kubernetes configuration: not in a pod, and the kubeconfig: %w (give --kubeconfig)", err)
	}
	ns, _, err := cc.Namespace()
	if err != nil || ns == "" {
		ns = "default"
	}
	return cfg, ns, nil
}
