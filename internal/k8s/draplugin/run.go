package draplugin

import (
	"context"
	"errors"
	"net"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
)

// RunOptions are what Run adds around a Driver.
type RunOptions struct {
	// REST is the API server's configuration (in a pod, its
	// ServiceAccount's); used when Config.Kube is nil.
	REST *rest.Config
	// Metrics, when set, serves /metrics (gpuslice_slice_*) on it.
	Metrics net.Listener
	// WatchInterval is how often the memory watchdog runs (default 10s).
	WatchInterval time.Duration
}

// Run starts the driver (New, Start), serves metrics and runs the
// watchdog until ctx ends, then stops serving. Prepared claims stay
// prepared across a restart: the next Run adopts them from the checkpoint.
func Run(ctx context.Context, cfg Config, opts RunOptions) error {
	if cfg.Kube == nil {
		if opts.REST == nil {
			return errors.New("draplugin: no Kubernetes client and no REST config")
		}
		cs, err := kubernetes.NewForConfig(opts.REST)
		if err != nil {
			return err
		}
		cfg.Kube = cs
	}
	d, err := New(ctx, cfg)
	if err != nil {
		return err
	}
	if err := d.Start(ctx); err != nil {
		return err
	}
	defer d.Stop()
	if cfg.MIGBindingConditions {
		if err := d.StartBinding(ctx); err != nil {
			return err
		}
	}
	if opts.Metrics != nil {
		reg := prometheus.NewRegistry()
		reg.MustRegister(d.Collector())
		mux := http.NewServeMux()
		mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
		srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
		go func() { _ = srv.Serve(opts.Metrics) }()
		defer srv.Close()
	}
	interval := opts.WatchInterval
	if interval <= 0 {
		interval = 10 * time.Second
	}
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		d.Watch(ctx)
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}
