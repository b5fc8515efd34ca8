package draplugin

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"

	"github.com/gpuslice/gpuslice/internal/k8s/dradriver"
	"github.com/gpuslice/gpuslice/internal/k8s/dranames"
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
	// WatchNamespaces, with Config.Isolation.TenantIsolation, publishes
	// copies of the shared GPUs for the tenant of every namespace
	// (dradriver.TenantsOf: its gpuslice.dev/tenant label, else its
	// name) beside Config.Isolation.Tenants, following namespaces as they
	// come, go and are relabelled; except the namespaces
	// dradriver.TenantCopies gives none (the system namespaces, those
	// labelled gpuslice.dev/tenant-copies=false, NoTenantNamespaces).
	WatchNamespaces bool
	// NoTenantNamespaces are namespaces whose tenant gets no copies
	// beside dradriver.SystemNamespaces (dra-driver
	// --no-tenant-namespaces).
	NoTenantNamespaces []string
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
	if opts.WatchNamespaces && cfg.Isolation.TenantIsolation {
		stopTenants, err := watchTenants(ctx, d, cfg.Kube, cfg.Isolation.Tenants, opts.NoTenantNamespaces, d.cfg.Log)
		if err != nil {
			return err
		}
		defer stopTenants() // before d.Stop: nothing is published or logged after Run returns
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

// watchTenants follows the cluster's namespaces (and the claims holding
// tenant copies of this node's shared GPUs: dradriver.AllocatedTenants)
// and sets the driver's tenants to static plus theirs (those
// dradriver.TenantCopies gives copies, excluded beside the system
// namespaces) after every change
// (changes coalesce: one recomputation covers all that came before it). It returns once the
// namespaces are listed and the first set is published, with stop, which
// ends the watch and waits until nothing more is published or logged.
func watchTenants(parent context.Context, d *Driver, kube kubernetes.Interface, static, excluded []string, log *slog.Logger) (stop func(), err error) {
	ctx, cancel := context.WithCancel(parent)
	factory := informers.NewSharedInformerFactory(kube, 0)
	done := make(chan struct{})
	stop = func() {
		cancel()
		<-done
		factory.Shutdown()
	}
	defer func() {
		if err != nil {
			close(done)
			stop()
		}
	}()
	inf := factory.Core().V1().Namespaces()
	claimInf := factory.Resource().V1().ResourceClaims()
	changed := make(chan struct{}, 1)
	poke := func(any) {
		select {
		case changed <- struct{}{}:
		default:
		}
	}
	if _, err := inf.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{AddFunc: poke,
		UpdateFunc: func(_, n any) { poke(n) }, DeleteFunc: poke}); err != nil {
		return nil, err
	}
	// A claim allocated one of the node's tenant copies keeps that copy
	// published, even once no namespace names its tenant any more.
	// Only claims holding one of them wake the recomputation: a busy
	// cluster's other claims cost this node nothing but the informer.
	if _, err := claimInf.Informer().AddEventHandler(cache.FilteringResourceEventHandler{
		FilterFunc: func(obj any) bool { return holdsTenantCopy(obj, d.cfg.Node) },
		Handler: cache.ResourceEventHandlerFuncs{AddFunc: poke,
			UpdateFunc: func(_, n any) { poke(n) }, DeleteFunc: poke}}); err != nil {
		return nil, err
	}
	factory.Start(ctx.Done())
	if !cache.WaitForCacheSync(ctx.Done(), inf.Informer().HasSynced, claimInf.Informer().HasSynced) {
		return nil, errors.New("draplugin: namespaces or resource claims never listed")
	}
	apply := func() error {
		nss, err := inf.Lister().List(labels.Everything())
		if err != nil {
			return err
		}
		claims, err := claimInf.Lister().List(labels.Everything())
		if err != nil {
			return err
		}
		held := dradriver.AllocatedTenants(claims, d.cfg.Node)
		kept, dropped := dradriver.TenantsHolding(nss, static, excluded, held)
		if len(dropped) > 0 {
			log.Warn("tenants without copies of the shared GPUs: their shared claims wait", "dropped", dropped, "max", dradriver.MaxTenants)
		}
		_, err = d.SetTenants(ctx, kept)
		return err
	}
	if err := apply(); err != nil {
		return nil, err
	}
	go func() {
		defer close(done)
		for {
			select {
			case <-ctx.Done():
				return
			case <-changed:
				if err := apply(); err != nil {
					log.Error("publishing tenants", "err", err)
				}
			}
		}
	}()
	return stop, nil
}

// holdsTenantCopy reports whether obj (a ResourceClaim, or a deleted one's
// tombstone) is allocated a tenant copy of a shared GPU in pool. An update
// passes the filter when either its old or its new version does
// (client-go's FilteringResourceEventHandler turns those into adds and
// deletes).
func holdsTenantCopy(obj any, pool string) bool {
	if tomb, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = tomb.Obj
	}
	c, ok := obj.(*resourceapi.ResourceClaim)
	if !ok || c.Status.Allocation == nil {
		return false
	}
	for _, r := range c.Status.Allocation.Devices.Results {
		if r.Driver != dranames.DriverName || r.Pool != pool {
			continue
		}
		if name, err := dranames.ParseDeviceName(r.Device); err == nil && name.TenantHash != "" {
			return true
		}
	}
	return false
}
