package cli

import (
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/gpuslice/gpuslice/internal/autoscale"
	"github.com/gpuslice/gpuslice/internal/k8s/scalezero"
)

// proxyCmd runs the scale-to-zero proxy in front of a Kubernetes
// Deployment (render --target serverless writes its Deployment, Services
// and RBAC).
func proxyCmd(e *env) *cobra.Command {
	var (
		kubeconfig, namespace, deployment, service, listen string
		port, minReplicas                                  int
		idle, wakeTimeout, interval                        time.Duration
		autoStop                                           bool
	)
	cmd := &cobra.Command{
		Use:   "proxy --deployment NAME --service NAME",
		Short: "Scale-to-zero proxy in front of a Kubernetes Deployment (wake on request, stop when idle)",
		Long: `Runs the reverse proxy gpuslice serve puts in front of a service, for a workload that
Kubernetes runs: requests go to the ready endpoints of --service (the Service in front of the
Deployment's pods, followed through its EndpointSlices), the one with the fewest in flight.
A request that finds none scales --deployment from 0 to max(--min-replicas, 1) through its
scale subresource and waits up to --wake-timeout for a ready endpoint, then gets a 503; with
--auto-stop, --idle without any request scales the Deployment to 0. Between those, replicas
are left to whatever else scales the Deployment (an HPA or KEDA: render --target hpa|keda).

In a pod it uses the pod's ServiceAccount (render --target serverless writes the Role it
needs); elsewhere --kubeconfig or $KUBECONFIG.`,
		Example: "  gpuslice proxy --namespace shop --deployment gpuinfo --service gpuinfo-backend --port 5000 --listen :5000 --idle 2m",
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg, ns, err := scalezero.KubeConfig(kubeconfig)
			if err != nil {
				return err
			}
			if namespace == "" {
				namespace = ns
			}
			if minReplicas < 0 {
				return fmt.Errorf("--min-replicas %d: want 0 or more (a wake brings up at least 1)", minReplicas)
			}
			if idle <= 0 {
				return fmt.Errorf("--idle %s: want a positive duration, e.g. 5m", idle)
			}
			log := slog.New(slog.NewTextHandler(e.errOut, &slog.HandlerOptions{Level: slog.LevelInfo}))
			p, err := scalezero.New(scalezero.Config{REST: cfg, Namespace: namespace, Deployment: deployment, Service: service, Port: port,
				Policy:      autoscale.Policy{MinReplicas: minReplicas, MaxReplicas: max(minReplicas, 1), DownAfter: idle, AutoStop: autoStop},
				WakeTimeout: wakeTimeout, Interval: interval, Log: log})
			if err != nil {
				return err
			}
			ln, err := net.Listen("tcp", listen)
			if err != nil {
				return fmt.Errorf("--listen %s: %w", listen, err)
			}
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			log.Info("gpuslice proxy listening", "addr", ln.Addr().String(), "deployment", namespace+"/"+deployment, "service", service)
			return p.Serve(ctx, ln)
		},
	}
	f := cmd.Flags()
	f.StringVar(&kubeconfig, "kubeconfig", "", "kubeconfig file (default: in-cluster, else $KUBECONFIG or ~/.kube/config)")
	f.StringVar(&namespace, "namespace", "", "namespace of the Deployment and Service (default: the pod's, or the kubeconfig context's)")
	f.StringVar(&deployment, "deployment", "", "the Deployment to wake and stop (required)")
	f.StringVar(&service, "service", "", "the Service in front of the Deployment's pods (required)")
	f.IntVar(&port, "port", 0, "the pods' port to forward to (0: the endpoints' only port)")
	f.StringVar(&listen, "listen", ":8080", "address to answer on")
	f.IntVar(&minReplicas, "min-replicas", 1, "replicas a wake brings up (at least 1)")
	f.DurationVar(&idle, "idle", 5*time.Minute, "without a request for this long, scale to 0 (with --auto-stop)")
	f.DurationVar(&wakeTimeout, "wake-timeout", 30*time.Second, "how long a request waits for a ready endpoint before a 503")
	f.DurationVar(&interval, "interval", 5*time.Second, "how often requests are sampled and the replica count read")
	f.BoolVar(&autoStop, "auto-stop", true, "scale to 0 after --idle without a request")
	return cmd
}
