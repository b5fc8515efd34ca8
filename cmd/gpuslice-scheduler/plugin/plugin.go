// Package plugin is gpuslice-scheduler's one scheduler plugin,
// GpusliceDynamicResources. It takes the place of the stock
// DynamicResources plugin in a profile and wraps an instance of it: pods
// whose ResourceClaims name gpuslice's DeviceClasses are decided by
// gpuslice's allocator (internal/alloc, through internal/k8s/draalloc),
// every other pod is handed to the stock plugin unchanged. It is the
// framework glue only: the ledger, the decisions, quotas and the
// reserve-after hold are internal/k8s/schedcore's (on internal/admit's
// rules), whose outcomes it maps onto framework statuses.
package plugin

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/go-logr/logr"

	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/client-go/kubernetes"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/retry"
	"k8s.io/dynamic-resource-allocation/resourceclaim"
	"k8s.io/klog/v2"
	fwk "k8s.io/kube-scheduler/framework"
	"k8s.io/kubernetes/pkg/scheduler/apis/config"
	"k8s.io/kubernetes/pkg/scheduler/framework/plugins/dynamicresources"
	plfeature "k8s.io/kubernetes/pkg/scheduler/framework/plugins/feature"
	"k8s.io/utils/ptr"

	"github.com/gpuslice/gpuslice/internal/admit"
	"github.com/gpuslice/gpuslice/internal/catalog"
	"github.com/gpuslice/gpuslice/internal/k8s/draalloc"
	"github.com/gpuslice/gpuslice/internal/k8s/dranames"
	"github.com/gpuslice/gpuslice/internal/k8s/schedcore"
)

// Name is the plugin's name in a KubeSchedulerConfiguration.
const Name = "GpusliceDynamicResources"

const stateKey fwk.StateKey = Name

// Args are the plugin's arguments (pluginConfig args in the profile).
type Args struct {
	// Placement is binpack (default) or spread, as in gpuslice serve.
	Placement string `json:"placement,omitempty"`
	// ReserveAfter is how long a GPU pod may stay unschedulable while
	// pods of its priority or lower take the room it waits for; after
	// it, a node is held for it (serve's --reserve-after). A duration
	// ("5m", the default); "0" turns the rule off.
	ReserveAfter string `json:"reserveAfter,omitempty"`
}

// Plugin is GpusliceDynamicResources.
type Plugin struct {
	stock fwk.Plugin
	fh    fwk.Handle
	cs    kubernetes.Interface
	led   *schedcore.Ledger
	args  Args
	now   func() time.Time
	wait  *schedcore.Waiting
	// reserveAfter and hold: the starvation rule (reserve.go).
	reserveAfter time.Duration
	hold         schedcore.Holding
	// namespaces reads the pods' namespaces for their GPU quotas.
	namespaces corelisters.NamespaceLister
	// pods tells whether the pod holding a node still waits.
	pods corelisters.PodLister
	// synced are the ledger's informer registrations: nothing is decided
	// until they have delivered the initial lists (a restarted scheduler
	// must see every allocation before it makes one).
	synced []cache.ResourceEventHandlerRegistration
}

// stock is the set of extension points the stock plugin implements.
type stockPlugin interface {
	fwk.PreEnqueuePlugin
	fwk.PreFilterPlugin
	fwk.FilterPlugin
	fwk.PostFilterPlugin
	fwk.ScorePlugin
	fwk.ReservePlugin
	fwk.EnqueueExtensions
	fwk.PreBindPlugin
	fwk.SignPlugin
}

var (
	_ fwk.PreEnqueuePlugin    = &Plugin{}
	_ fwk.PreFilterPlugin     = &Plugin{}
	_ fwk.FilterPlugin        = &Plugin{}
	_ fwk.PostFilterPlugin    = &Plugin{}
	_ fwk.ScorePlugin         = &Plugin{}
	_ fwk.ReservePlugin       = &Plugin{}
	_ fwk.EnqueueExtensions   = &Plugin{}
	_ fwk.PreBindPlugin       = &Plugin{}
	_ fwk.SignPlugin          = &Plugin{}
	_ fwk.PreFilterExtensions = &Plugin{}
)

// New builds the plugin and the stock DynamicResources plugin it wraps
// (with that plugin's default arguments and the scheduler's feature
// gates), and starts following gpuslice's ResourceSlices and every
// ResourceClaim through the scheduler's informers.
func New(ctx context.Context, obj runtime.Object, fh fwk.Handle, fts plfeature.Features) (fwk.Plugin, error) {
	args := Args{Placement: "binpack"}
	if u, ok := obj.(*runtime.Unknown); ok && u != nil && len(u.Raw) > 0 {
		dec := json.NewDecoder(strings.NewReader(string(u.Raw)))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&args); err != nil {
			return nil, fmt.Errorf("%s args: %w (fields: placement, reserveAfter)", Name, err)
		}
	}
	if args.Placement != "binpack" && args.Placement != "spread" {
		return nil, fmt.Errorf("%s args: placement %q: want binpack or spread", Name, args.Placement)
	}
	reserveAfter := 5 * time.Minute
	if args.ReserveAfter != "" {
		d, err := time.ParseDuration(args.ReserveAfter)
		if err != nil || d < 0 {
			return nil, fmt.Errorf("%s args: reserveAfter %q: want a duration such as 5m (0: off)", Name, args.ReserveAfter)
		}
		reserveAfter = d
	}
	stock, err := dynamicresources.New(ctx, &config.DynamicResourcesArgs{
		FilterTimeout:  &metav1.Duration{Duration: config.DynamicResourcesFilterTimeoutDefault},
		BindingTimeout: &metav1.Duration{Duration: config.DynamicResourcesBindingTimeoutDefault},
	}, fh, fts)
	if err != nil {
		return nil, fmt.Errorf("the stock DynamicResources plugin: %w", err)
	}
	if _, ok := stock.(stockPlugin); !ok {
		return nil, errors.New("the stock DynamicResources plugin lacks an extension point this wrapper delegates")
	}
	log := slog.New(logr.ToSlogHandler(klog.FromContext(ctx)))
	p := &Plugin{stock: stock, fh: fh, cs: fh.ClientSet(), args: args, now: time.Now, reserveAfter: reserveAfter,
		led: schedcore.NewLedger(draalloc.Policy(args.Placement), catalog.Default(), log), wait: schedcore.NewWaiting()}
	p.led.OnFree(func() { p.wait.Freed(activator(fh)) })
	if err := p.watch(ctx); err != nil {
		return nil, err
	}
	return p, nil
}

func (p *Plugin) inner() stockPlugin { return p.stock.(stockPlugin) }

// watch feeds the ledger from the scheduler's shared informers.
func (p *Plugin) watch(ctx context.Context) error {
	inf := p.fh.SharedInformerFactory()
	slice := func(obj any, deleted bool) {
		if t, ok := obj.(cache.DeletedFinalStateUnknown); ok {
			obj, deleted = t.Obj, true
		}
		s, ok := obj.(*resourceapi.ResourceSlice)
		if !ok || s.Spec.Driver != dranames.DriverName || s.Spec.NodeName == nil {
			return
		}
		if deleted {
			p.led.SetSlice(s.Name, *s.Spec.NodeName, nil)
		} else {
			p.led.SetSlice(s.Name, *s.Spec.NodeName, s)
		}
	}
	reg, err := inf.Resource().V1().ResourceSlices().Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(o any) { slice(o, false) },
		UpdateFunc: func(_, o any) { slice(o, false) },
		DeleteFunc: func(o any) { slice(o, true) },
	})
	if err != nil {
		return err
	}
	p.synced = append(p.synced, reg)
	claim := func(obj any, deleted bool) {
		if t, ok := obj.(cache.DeletedFinalStateUnknown); ok {
			obj, deleted = t.Obj, true
		}
		rc, ok := obj.(*resourceapi.ResourceClaim)
		if !ok {
			return
		}
		if deleted {
			p.led.SetClaim(rc.UID, nil)
		} else {
			p.led.SetClaim(rc.UID, rc)
		}
	}
	reg, err = inf.Resource().V1().ResourceClaims().Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(o any) { claim(o, false) },
		UpdateFunc: func(_, o any) { claim(o, false) },
		DeleteFunc: func(o any) { claim(o, true) },
	})
	p.synced = append(p.synced, reg)
	if err != nil {
		return err
	}
	// Namespaces, for their quotas; a quota raised or removed may let a
	// waiting pod fit.
	p.namespaces = inf.Core().V1().Namespaces().Lister()
	p.pods = inf.Core().V1().Pods().Lister()
	reg, err = inf.Core().V1().Namespaces().Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		UpdateFunc: func(old, cur any) {
			o, ok1 := old.(*v1.Namespace)
			n, ok2 := cur.(*v1.Namespace)
			if ok1 && ok2 && (o.Annotations[schedcore.QuotaMemoryAnnotation] != n.Annotations[schedcore.QuotaMemoryAnnotation] ||
				o.Annotations[schedcore.QuotaComputeAnnotation] != n.Annotations[schedcore.QuotaComputeAnnotation]) {
				p.led.Freed()
			}
		},
	})
	p.synced = append(p.synced, reg)
	return err
}

// Name implements fwk.Plugin.
func (p *Plugin) Name() string { return Name }

// cycle is one scheduling cycle's state for a pod.
type cycle struct {
	ours bool
	gen  uint64 // the waiting generation when the cycle began
	// pod is what schedcore decides: the pod's gpuslice claims, its
	// namespace's quota and priority (fixed once PreFilter is done).
	pod  *schedcore.Pod
	node string // the node claims already allocated are on ("" none)

	mu      sync.Mutex
	results map[string]*schedcore.NodeResult
	// removed are claims a preemption simulation took away, per node.
	removed map[string]map[types.UID]bool
	// reserved are the claims Reserve allocated.
	reserved []reserved
}

type reserved struct {
	schedcore.Reserved
	// written is set once PreBind stored the allocation.
	written bool
}

// Clone implements fwk.StateData: preemption simulates on clones, so the
// removed claims and the results under them are per clone.
func (c *cycle) Clone() fwk.StateData {
	c.mu.Lock()
	defer c.mu.Unlock()
	d := &cycle{ours: c.ours, gen: c.gen, pod: c.pod, node: c.node,
		results: map[string]*schedcore.NodeResult{}, removed: map[string]map[types.UID]bool{}}
	for n, m := range c.removed {
		d.removed[n] = maps.Clone(m)
	}
	return d
}

func getCycle(cs fwk.CycleState) *cycle {
	d, err := cs.Read(stateKey)
	if err != nil {
		return nil
	}
	c, _ := d.(*cycle)
	return c
}

// ours reports whether this cycle's pod is decided here.
func ours(cs fwk.CycleState) *cycle {
	if c := getCycle(cs); c != nil && c.ours {
		return c
	}
	return nil
}

// SignPod implements fwk.SignPlugin (the stock answer: pods with claims
// are not signable).
func (p *Plugin) SignPod(ctx context.Context, pod *v1.Pod) ([]fwk.SignFragment, *fwk.Status) {
	return p.inner().SignPod(ctx, pod)
}

// EventsToRegister implements fwk.EnqueueExtensions: the stock events,
// and deleted claims (with no controller deallocating first, a deleted
// claim frees its devices).
func (p *Plugin) EventsToRegister(ctx context.Context) ([]fwk.ClusterEventWithHint, error) {
	ev, err := p.inner().EventsToRegister(ctx)
	if err != nil {
		return nil, err
	}
	ev = append(ev, fwk.ClusterEventWithHint{Event: fwk.ClusterEvent{Resource: fwk.ResourceClaim, ActionType: fwk.Delete}},
		fwk.ClusterEventWithHint{Event: fwk.ClusterEvent{Resource: fwk.ResourceSlice, ActionType: fwk.Delete}})
	return ev, nil
}

// PreEnqueue implements fwk.PreEnqueuePlugin (the stock check: the pod's
// claims exist).
func (p *Plugin) PreEnqueue(ctx context.Context, pod *v1.Pod) *fwk.Status {
	return p.inner().PreEnqueue(ctx, pod)
}

// podClaims are the pod's ResourceClaims (nil entries for claims not
// created yet).
func (p *Plugin) podClaims(pod *v1.Pod) ([]*resourceapi.ResourceClaim, error) {
	var out []*resourceapi.ResourceClaim
	for i := range pod.Spec.ResourceClaims {
		name, _, err := resourceclaim.Name(pod, &pod.Spec.ResourceClaims[i])
		if err != nil {
			return nil, err
		}
		if name == nil {
			continue
		}
		rc, err := p.fh.SharedDRAManager().ResourceClaims().Get(pod.Namespace, *name)
		if err != nil {
			return nil, err
		}
		out = append(out, rc)
	}
	return out, nil
}

// PreFilter implements fwk.PreFilterPlugin. A pod without gpuslice claims
// goes to the stock plugin. For one with, each claim not yet allocated is
// translated (ToClaim: an error is the pod's unresolvable status, naming
// the field); claims already allocated pin the pod to their node.
func (p *Plugin) PreFilter(ctx context.Context, cs fwk.CycleState, pod *v1.Pod, nodes []fwk.NodeInfo) (*fwk.PreFilterResult, *fwk.Status) {
	claims, err := p.podClaims(pod)
	if err != nil || !slices.ContainsFunc(claims, draalloc.IsOurs) {
		cs.Write(stateKey, &cycle{})
		return p.inner().PreFilter(ctx, cs, pod, nodes)
	}
	for _, r := range p.synced {
		if !r.HasSynced() {
			cs.Write(stateKey, &cycle{})
			return nil, fwk.AsStatus(errors.New("gpuslice-scheduler is still reading ResourceSlices and ResourceClaims"))
		}
	}
	pp := &schedcore.Pod{Namespace: pod.Namespace, Priority: int(ptr.Deref(pod.Spec.Priority, 0)), Classes: map[string]*resourceapi.DeviceClass{}}
	c := &cycle{ours: true, gen: p.wait.Generation(), pod: pp, results: map[string]*schedcore.NodeResult{}, removed: map[string]map[types.UID]bool{}}
	cs.Write(stateKey, c)
	if ns, err := p.namespaces.Get(pod.Namespace); err == nil {
		if pp.Quota, err = schedcore.QuotaOf(ns); err != nil {
			return nil, fwk.NewStatus(fwk.UnschedulableAndUnresolvable, err.Error())
		}
	}
	for _, rc := range claims {
		if !draalloc.IsOurs(rc) {
			return nil, fwk.NewStatus(fwk.UnschedulableAndUnresolvable, fmt.Sprintf(
				"pod mixes gpuslice claims with claim %s of other drivers; gpuslice-scheduler does not allocate both for one pod yet", rc.Name))
		}
		if rc.DeletionTimestamp != nil {
			return nil, fwk.NewStatus(fwk.UnschedulableAndUnresolvable, fmt.Sprintf("claim %s is being deleted", rc.Name))
		}
		if a := rc.Status.Allocation; a != nil {
			n := draalloc.AllocatedNode(a)
			if c.node != "" && c.node != n {
				return nil, fwk.NewStatus(fwk.UnschedulableAndUnresolvable, fmt.Sprintf("claims of the pod are allocated on nodes %s and %s", c.node, n))
			}
			c.node = n
			pp.Claims = append(pp.Claims, rc)
			continue
		}
		if pending := p.fh.SharedDRAManager().ResourceClaims().GetPendingAllocation(rc.UID); pending != nil {
			return nil, fwk.NewStatus(fwk.Unschedulable, fmt.Sprintf("claim %s is being allocated for another pod", rc.Name))
		}
		ac, err := draalloc.Translate(rc, pp.Priority)
		if err != nil {
			return nil, fwk.NewStatus(fwk.UnschedulableAndUnresolvable, err.Error())
		}
		for _, r := range rc.Spec.Devices.Requests {
			var names []string
			if r.Exactly != nil {
				names = append(names, r.Exactly.DeviceClassName)
			}
			for _, s := range r.FirstAvailable {
				names = append(names, s.DeviceClassName)
			}
			for _, name := range names {
				if dc, err := p.fh.SharedDRAManager().DeviceClasses().Get(name); err == nil {
					pp.Classes[dc.Name] = dc
				} else {
					return nil, fwk.NewStatus(fwk.UnschedulableAndUnresolvable, fmt.Sprintf("claim %s: DeviceClass %s: %v", rc.Name, name, err))
				}
			}
		}
		pp.ToAlloc = append(pp.ToAlloc, len(pp.Claims))
		pp.Claims = append(pp.Claims, rc)
		pp.Acs = append(pp.Acs, ac)
	}
	p.led.Prepare(pp)
	p.holderGone()
	if c.node != "" {
		return &fwk.PreFilterResult{NodeNames: sets.New(c.node)}, nil
	}
	return nil, nil
}

// PreFilterExtensions implements fwk.PreFilterPlugin: AddPod and RemovePod
// let preemption see the devices of lower-priority pods freed.
func (p *Plugin) PreFilterExtensions() fwk.PreFilterExtensions { return p }

// AddPod implements fwk.PreFilterExtensions.
func (p *Plugin) AddPod(ctx context.Context, cs fwk.CycleState, pod *v1.Pod, add fwk.PodInfo, ni fwk.NodeInfo) *fwk.Status {
	c := ours(cs)
	if c == nil {
		if ext := p.inner().PreFilterExtensions(); ext != nil {
			return ext.AddPod(ctx, cs, pod, add, ni)
		}
		return nil
	}
	p.markRemoved(c, add.GetPod(), ni.Node().Name, false)
	return nil
}

// RemovePod implements fwk.PreFilterExtensions.
func (p *Plugin) RemovePod(ctx context.Context, cs fwk.CycleState, pod *v1.Pod, rm fwk.PodInfo, ni fwk.NodeInfo) *fwk.Status {
	c := ours(cs)
	if c == nil {
		if ext := p.inner().PreFilterExtensions(); ext != nil {
			return ext.RemovePod(ctx, cs, pod, rm, ni)
		}
		return nil
	}
	p.markRemoved(c, rm.GetPod(), ni.Node().Name, true)
	return nil
}

// markRemoved records that the victim's claims would be freed on node
// (only claims no other pod holds).
func (p *Plugin) markRemoved(c *cycle, victim *v1.Pod, node string, removed bool) {
	claims, err := p.podClaims(victim)
	if err != nil {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	m := c.removed[node]
	if m == nil {
		m = map[types.UID]bool{}
		c.removed[node] = m
	}
	for _, rc := range claims {
		if rc.Status.Allocation == nil || len(rc.Status.ReservedFor) > 1 {
			continue
		}
		if removed {
			m[rc.UID] = true
		} else {
			delete(m, rc.UID)
		}
	}
	delete(c.results, node)
}

// Filter implements fwk.FilterPlugin: the allocator decides the pod's
// claims on this node alone (a State of the node's devices and the
// claims holding them). When they do not fit, the status is the
// allocator's reason for this node ("insufficient GPU memory", "tenant
// isolation", ...), which kube-scheduler aggregates over the nodes into
// the pod's FailedScheduling event and PodScheduled condition.
func (p *Plugin) Filter(ctx context.Context, cs fwk.CycleState, pod *v1.Pod, ni fwk.NodeInfo) *fwk.Status {
	c := ours(cs)
	if c == nil {
		return p.inner().Filter(ctx, cs, pod, ni)
	}
	node := ni.Node()
	if c.node != "" && node.Name != c.node {
		return fwk.NewStatus(fwk.UnschedulableAndUnresolvable, "the pod's claims are allocated on another node")
	}
	if len(c.pod.ToAlloc) == 0 {
		return nil
	}
	if h := p.hold.Held(pod.UID, c.pod.Priority, p.now()); h != nil && h.Node == node.Name {
		return status(h, "")
	}
	c.mu.Lock()
	skip := c.removed[node.Name]
	c.mu.Unlock()
	r, out, err := p.led.Filter(c.pod, node.Name, node.Labels, skip)
	if err != nil {
		return fwk.AsStatus(err)
	}
	if st := status(out, ""); st != nil {
		return st
	}
	c.mu.Lock()
	c.results[node.Name] = r
	c.mu.Unlock()
	return nil
}

// status is an admission outcome as a framework status: nil when
// admitted; UnschedulableAndUnresolvable for a pod no node could ever
// hold (retrying elsewhere or later cannot help); Unschedulable with the
// outcome's reason (prefixed) otherwise — doesn't fit now, over the
// namespace's quota, kept off a held node — so the pod is retried as
// things change and preemption may help.
func status(out admit.Outcome, prefix string) *fwk.Status {
	switch out.(type) {
	case nil, admit.Admit:
		return nil
	case *admit.NeverFits:
		return fwk.NewStatus(fwk.UnschedulableAndUnresolvable, prefix+out.Reason())
	}
	return fwk.NewStatus(fwk.Unschedulable, prefix+out.Reason())
}

// PostFilter implements fwk.PostFilterPlugin: nothing to undo for
// gpuslice pods (preemption is DefaultPreemption's, with RemovePod).
func (p *Plugin) PostFilter(ctx context.Context, cs fwk.CycleState, pod *v1.Pod, m fwk.NodeToStatusReader) (*fwk.PostFilterResult, *fwk.Status) {
	if c := ours(cs); c != nil {
		p.starving(pod, c, m, p.now())
		if p.wait.Unschedulable(pod, c.gen) {
			p.wait.Freed(activator(p.fh))
		}
		return nil, fwk.NewStatus(fwk.Unschedulable)
	}
	return p.inner().PostFilter(ctx, cs, pod, m)
}

// Score implements fwk.ScorePlugin: binpack scores a node higher the less
// GPU share the placement newly holds there and the fuller the node's
// GPUs are after it; spread the emptier they are.
func (p *Plugin) Score(ctx context.Context, cs fwk.CycleState, pod *v1.Pod, ni fwk.NodeInfo) (int64, *fwk.Status) {
	c := ours(cs)
	if c == nil {
		return p.inner().Score(ctx, cs, pod, ni)
	}
	c.mu.Lock()
	r := c.results[ni.Node().Name]
	c.mu.Unlock()
	if r == nil {
		return 0, nil
	}
	return schedcore.Score(p.args.Placement, r), nil
}

// ScoreExtensions implements fwk.ScorePlugin.
func (p *Plugin) ScoreExtensions() fwk.ScoreExtensions { return p }

// NormalizeScore implements fwk.ScoreExtensions (the stock plugin's for
// its pods; gpuslice's scores are in range already).
func (p *Plugin) NormalizeScore(ctx context.Context, cs fwk.CycleState, pod *v1.Pod, scores fwk.NodeScoreList) *fwk.Status {
	if c := ours(cs); c != nil {
		c.mu.Lock()
		defer c.mu.Unlock()
		ns := make([]schedcore.NodeScore, len(scores))
		for i, s := range scores {
			ns[i] = schedcore.NodeScore{Name: s.Name, Score: s.Score}
		}
		schedcore.PreferEarlierSubrequests(ns, c.results)
		for i := range scores {
			scores[i].Score = ns[i].Score
		}
		return nil
	}
	if ext := p.inner().ScoreExtensions(); ext != nil {
		return ext.NormalizeScore(ctx, cs, pod, scores)
	}
	return nil
}

// Reserve implements fwk.ReservePlugin: the claims are decided again on
// the chosen node's current State and applied to it, recorded in flight
// and announced to the stock plugin's tracker (so pods it allocates for,
// such as nvidia.com/gpu ones, see the devices taken).
func (p *Plugin) Reserve(ctx context.Context, cs fwk.CycleState, pod *v1.Pod, node string) *fwk.Status {
	c := ours(cs)
	if c == nil {
		return p.inner().Reserve(ctx, cs, pod, node)
	}
	if len(c.pod.ToAlloc) == 0 {
		return nil
	}
	var labels map[string]string
	if ni, err := p.fh.SnapshotSharedLister().NodeInfos().Get(node); err == nil && ni.Node() != nil {
		labels = ni.Node().Labels
	}
	res, out, err := p.led.Reserve(c.pod, node, labels)
	if err != nil {
		return fwk.AsStatus(err)
	}
	if st := status(out, "gpuslice: the node changed since Filter: "); st != nil {
		return st
	}
	for _, r := range res {
		c.reserved = append(c.reserved, reserved{Reserved: r})
	}
	if p.hold.Release(pod.UID) {
		p.led.Freed() // pods kept off the held node may try it again
	}
	for _, rv := range c.reserved {
		claim := rv.Claim.DeepCopy()
		claim.Status.Allocation = rv.Result
		if err := p.fh.SharedDRAManager().ResourceClaims().SignalClaimPendingAllocation(claim.UID, claim); err != nil {
			klog.FromContext(ctx).Error(err, "signal pending allocation", "claim", klog.KObj(claim))
		}
	}
	return nil
}

// Unreserve implements fwk.ReservePlugin: in-flight allocations are
// forgotten (their node's State is rebuilt without them); one already
// written is taken back from the API server, so nothing stays allocated
// for a pod that was not bound.
func (p *Plugin) Unreserve(ctx context.Context, cs fwk.CycleState, pod *v1.Pod, node string) {
	c := ours(cs)
	if c == nil {
		p.inner().Unreserve(ctx, cs, pod, node)
		return
	}
	logger := klog.FromContext(ctx)
	for _, rv := range c.reserved {
		p.fh.SharedDRAManager().ResourceClaims().MaybeRemoveClaimPendingAllocation(rv.Claim.UID, true)
		if rv.written {
			if err := p.takeBack(ctx, rv.Claim, pod); err != nil {
				logger.Error(err, "taking back an allocation of an unbound pod", "claim", klog.KObj(rv.Claim))
			}
		}
		p.led.Unreserve(rv.Claim.UID)
	}
	c.reserved = nil
}

// takeBack removes the pod's reservation and the allocation from a claim.
func (p *Plugin) takeBack(ctx context.Context, rc *resourceapi.ResourceClaim, pod *v1.Pod) error {
	return retry.RetryOnConflict(retry.DefaultRetry, func() error {
		cur, err := p.cs.ResourceV1().ResourceClaims(rc.Namespace).Get(ctx, rc.Name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return nil
		}
		if err != nil {
			return err
		}
		cur.Status.ReservedFor = slices.DeleteFunc(cur.Status.ReservedFor, func(r resourceapi.ResourceClaimConsumerReference) bool { return r.UID == pod.UID })
		if len(cur.Status.ReservedFor) == 0 {
			cur.Status.Allocation = nil
		}
		_, err = p.cs.ResourceV1().ResourceClaims(rc.Namespace).UpdateStatus(ctx, cur, metav1.UpdateOptions{})
		return err
	})
}

// PreBindPreFlight implements fwk.PreBindPlugin.
func (p *Plugin) PreBindPreFlight(ctx context.Context, cs fwk.CycleState, pod *v1.Pod, node string) (*fwk.PreBindPreFlightResult, *fwk.Status) {
	c := ours(cs)
	if c == nil {
		return p.inner().PreBindPreFlight(ctx, cs, pod, node)
	}
	return &fwk.PreBindPreFlightResult{}, nil
}

// PreBind implements fwk.PreBindPlugin: each claim gets the finalizer
// the stock plugin sets, its allocation (if this cycle made one) and the
// pod in reservedFor, written as the stock plugin writes them.
func (p *Plugin) PreBind(ctx context.Context, cs fwk.CycleState, pod *v1.Pod, node string) *fwk.Status {
	c := ours(cs)
	if c == nil {
		return p.inner().PreBind(ctx, cs, pod, node)
	}
	byUID := map[types.UID]int{}
	for i, rv := range c.reserved {
		byUID[rv.Claim.UID] = i
	}
	for _, rc := range c.pod.Claims {
		var res *resourceapi.AllocationResult
		i, mine := byUID[rc.UID]
		if mine {
			res = c.reserved[i].Result
		}
		updated, err := p.bind(ctx, rc, res, pod)
		if mine {
			p.fh.SharedDRAManager().ResourceClaims().MaybeRemoveClaimPendingAllocation(rc.UID, err == nil)
		}
		if err != nil {
			return fwk.AsStatus(err)
		}
		if mine {
			c.reserved[i].written = true
		}
		if err := p.fh.SharedDRAManager().ResourceClaims().AssumeClaimAfterAPICall(updated); err != nil {
			klog.FromContext(ctx).V(5).Info("claim not assumed", "claim", klog.KObj(updated), "err", err)
		}
	}
	return nil
}

func (p *Plugin) bind(ctx context.Context, rc *resourceapi.ResourceClaim, res *resourceapi.AllocationResult, pod *v1.Pod) (*resourceapi.ResourceClaim, error) {
	claim := rc.DeepCopy()
	refresh := false
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		if refresh {
			cur, err := p.cs.ResourceV1().ResourceClaims(claim.Namespace).Get(ctx, claim.Name, metav1.GetOptions{})
			if err != nil {
				return err
			}
			claim = cur
		}
		refresh = true
		if claim.DeletionTimestamp != nil {
			return fmt.Errorf("claim %s is being deleted", klog.KObj(claim))
		}
		if res != nil {
			if claim.Status.Allocation != nil {
				return fmt.Errorf("claim %s was allocated elsewhere meanwhile", klog.KObj(claim))
			}
			if !slices.Contains(claim.Finalizers, resourceapi.Finalizer) {
				claim.Finalizers = append(claim.Finalizers, resourceapi.Finalizer)
				u, err := p.cs.ResourceV1().ResourceClaims(claim.Namespace).Update(ctx, claim, metav1.UpdateOptions{})
				if err != nil {
					return err
				}
				claim = u
			}
			r := res.DeepCopy()
			r.AllocationTimestamp = &metav1.Time{Time: p.now()}
			claim.Status.Allocation = r
		} else if claim.Status.Allocation == nil {
			return fmt.Errorf("claim %s was deallocated meanwhile", klog.KObj(claim))
		}
		if !slices.ContainsFunc(claim.Status.ReservedFor, func(r resourceapi.ResourceClaimConsumerReference) bool { return r.UID == pod.UID }) {
			claim.Status.ReservedFor = append(claim.Status.ReservedFor, resourceapi.ResourceClaimConsumerReference{Resource: "pods", Name: pod.Name, UID: pod.UID})
		}
		u, err := p.cs.ResourceV1().ResourceClaims(claim.Namespace).UpdateStatus(ctx, claim, metav1.UpdateOptions{})
		if err != nil {
			return err
		}
		claim = u
		return nil
	})
	return claim, err
}
