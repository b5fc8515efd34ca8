// Package scalezero runs internal/services' scale-to-zero proxy in front
// of a Kubernetes Deployment: the proxy's wake and idle-stop decisions
// (services.Gate, autoscale.DecideZero) set the Deployment's replicas
// through its scale subresource, and the replicas it forwards to are the
// ready endpoints of the Service in front of the Deployment's pods, read
// from EndpointSlices with a watch. It needs, in the Deployment's
// namespace: get, update and patch on deployments/scale, and get, list and
// watch on endpointslices (render --target serverless writes that Role).
package scalezero

import (
	"context"
	"fmt"
	"net"
	"net/url"
	"sort"
	"strconv"
	"sync"

	autoscalingv1 "k8s.io/api/autoscaling/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	appsv1client "k8s.io/client-go/kubernetes/typed/apps/v1"
	discoveryv1client "k8s.io/client-go/kubernetes/typed/discovery/v1"
	"k8s.io/client-go/tools/cache"
)

// Deployment is a Deployment's replica count, read and set through its
// scale subresource (what kubectl scale and an HPA use): it implements
// services.Scaler.
type Deployment struct {
	Client    appsv1client.DeploymentsGetter
	Namespace string
	Name      string
}

// Replicas is the Deployment's desired replica count (spec.replicas).
func (d *Deployment) Replicas(ctx context.Context) (int, error) {
	s, err := d.Client.Deployments(d.Namespace).GetScale(ctx, d.Name, metav1.GetOptions{})
	if err != nil {
		return 0, fmt.Errorf("reading the scale of deployment %s/%s: %w", d.Namespace, d.Name, err)
	}
	return int(s.Spec.Replicas), nil
}

// Scale sets the Deployment's replicas.
func (d *Deployment) Scale(ctx context.Context, n int) error {
	s := &autoscalingv1.Scale{
		ObjectMeta: metav1.ObjectMeta{Name: d.Name, Namespace: d.Namespace},
		Spec:       autoscalingv1.ScaleSpec{Replicas: int32(n)},
	}
	if _, err := d.Client.Deployments(d.Namespace).UpdateScale(ctx, d.Name, s, metav1.UpdateOptions{}); err != nil {
		return fmt.Errorf("scaling deployment %s/%s to %d: %w", d.Namespace, d.Name, n, err)
	}
	return nil
}

// Backends is where the ready replicas go: services.Proxy has these.
type Backends interface {
	Add(id string, u *url.URL)
	Remove(id string) <-chan struct{}
}

// Endpoints follows the ready endpoints of a Service (its EndpointSlices,
// labeled kubernetes.io/service-name) on one port and keeps Backends in
// step: an address that becomes ready is added, one that stops being
// ready (or goes) is removed, its requests finishing.
type Endpoints struct {
	Client    discoveryv1client.EndpointSlicesGetter
	Namespace string
	Service   string
	// Port is the endpoint port to forward to (the pods' targetPort);
	// 0 takes the slice's only port.
	Port int

	mu      sync.Mutex
	slices  map[string]*discoveryv1.EndpointSlice
	current map[string]bool
}

// Run watches until ctx ends (an informer: list, watch, re-list after a
// broken watch).
func (e *Endpoints) Run(ctx context.Context, b Backends) error {
	e.slices, e.current = map[string]*discoveryv1.EndpointSlice{}, map[string]bool{}
	sel := discoveryv1.LabelServiceName + "=" + e.Service
	api := e.Client.EndpointSlices(e.Namespace)
	lw := &cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			o.LabelSelector = sel
			return api.List(ctx, o)
		},
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			o.LabelSelector = sel
			return api.Watch(ctx, o)
		},
	}
	inf := cache.NewSharedIndexInformer(lw, &discoveryv1.EndpointSlice{}, 0, cache.Indexers{})
	set := func(obj any) {
		if s, ok := obj.(*discoveryv1.EndpointSlice); ok {
			e.mu.Lock()
			e.slices[s.Name] = s
			e.mu.Unlock()
			e.sync(b)
		}
	}
	if _, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    set,
		UpdateFunc: func(_, obj any) { set(obj) },
		DeleteFunc: func(obj any) {
			if t, ok := obj.(cache.DeletedFinalStateUnknown); ok {
				obj = t.Obj
			}
			if s, ok := obj.(*discoveryv1.EndpointSlice); ok {
				e.mu.Lock()
				delete(e.slices, s.Name)
				e.mu.Unlock()
				e.sync(b)
			}
		},
	}); err != nil {
		return err
	}
	inf.RunWithContext(ctx)
	return ctx.Err()
}

// Ready lists the backend addresses now in rotation ("ip:port"), sorted.
func (e *Endpoints) Ready() []string {
	e.mu.Lock()
	defer e.mu.Unlock()
	out := make([]string, 0, len(e.current))
	for a := range e.current {
		out = append(out, a)
	}
	sort.Strings(out)
	return out
}

// sync recomputes the ready addresses and adds and removes the difference.
func (e *Endpoints) sync(b Backends) {
	e.mu.Lock()
	want := map[string]bool{}
	for _, s := range e.slices {
		port := e.portOf(s)
		if port == 0 {
			continue
		}
		for _, ep := range s.Endpoints {
			// A nil ready condition is unknown: the API says to read it
			// as ready.
			if ep.Conditions.Ready != nil && !*ep.Conditions.Ready {
				continue
			}
			for _, a := range ep.Addresses {
				want[net.JoinHostPort(a, strconv.Itoa(port))] = true
			}
		}
	}
	var add, remove []string
	for a := range want {
		if !e.current[a] {
			add = append(add, a)
		}
	}
	for a := range e.current {
		if !want[a] {
			remove = append(remove, a)
		}
	}
	e.current = want
	e.mu.Unlock()
	sort.Strings(add)
	sort.Strings(remove)
	for _, a := range remove {
		b.Remove(a)
	}
	for _, a := range add {
		b.Add(a, &url.URL{Scheme: "http", Host: a})
	}
}

// portOf is the port of a slice to forward to: e.Port when the slice has
// it, the only port when e.Port is 0; else 0 (skipped).
func (e *Endpoints) portOf(s *discoveryv1.EndpointSlice) int {
	for _, p := range s.Ports {
		if p.Port == nil {
			continue
		}
		if e.Port == 0 && len(s.Ports) == 1 || int(*p.Port) == e.Port {
			return int(*p.Port)
		}
	}
	return 0
}
