package draplugin

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/retry"
	"k8s.io/client-go/util/workqueue"

	"github.com/gpuslice/gpuslice/internal/k8s/dranames"
)

// stateBinding: the claim's MIG instances were made before its pod was
// bound (binding conditions); it is not prepared. Prepare adopts the
// instances; the binding controller tears them down when the claim goes
// or loses its allocation before that.
const stateBinding = "binding"

// Condition reasons the binding controller writes.
const (
	ReasonInstanceReady  = "InstanceReady"
	ReasonInstanceFailed = "InstanceFailed"
)

// bindPlan is what the binding controller does for one claim name.
type bindPlan struct {
	// Pending are the claim's devices on this node that wait for
	// dranames.ConditionMIGReady: neither it nor the failure condition
	// is True yet.
	Pending []resourceapi.DeviceRequestAllocationResult
	// Release are the uids of records made before bind (stateBinding)
	// whose claim is gone, being deleted, another claim of the same name,
	// or no longer allocated those devices.
	Release []string
}

// planBinding decides, purely, what the binding controller does for a
// claim (nil: it does not exist) given the records made before bind for
// claims of that namespace/name.
func planBinding(claim *resourceapi.ResourceClaim, node string, records []*claimRecord) bindPlan {
	var p bindPlan
	alive := claim != nil && claim.DeletionTimestamp == nil
	for _, r := range records {
		if r.State != stateBinding {
			continue
		}
		if !alive || string(claim.UID) != r.UID || !holdsDevices(claim, r) {
			p.Release = append(p.Release, r.UID)
		}
	}
	if !alive || claim.Status.Allocation == nil {
		return p
	}
	for _, res := range claim.Status.Allocation.Devices.Results {
		if res.Driver != dranames.DriverName || res.Pool != node || !slices.Contains(res.BindingConditions, dranames.ConditionMIGReady) {
			continue
		}
		st := deviceStatus(claim, res)
		if st != nil && (apimeta.IsStatusConditionTrue(st.Conditions, dranames.ConditionMIGReady) ||
			apimeta.IsStatusConditionTrue(st.Conditions, dranames.ConditionMIGFailed)) {
			continue
		}
		p.Pending = append(p.Pending, res)
	}
	return p
}

// holdsDevices reports whether claim is still allocated every device of
// the record.
func holdsDevices(claim *resourceapi.ResourceClaim, r *claimRecord) bool {
	if claim.Status.Allocation == nil {
		return false
	}
	for _, dev := range r.Devices {
		if !slices.ContainsFunc(claim.Status.Allocation.Devices.Results, func(res resourceapi.DeviceRequestAllocationResult) bool {
			return res.Driver == dranames.DriverName && res.Pool == dev.Pool && res.Device == dev.Device
		}) {
			return false
		}
	}
	return true
}

// deviceStatus is the claim's status.devices entry for an allocated
// device (nil: none yet).
func deviceStatus(claim *resourceapi.ResourceClaim, res resourceapi.DeviceRequestAllocationResult) *resourceapi.AllocatedDeviceStatus {
	for i := range claim.Status.Devices {
		s := &claim.Status.Devices[i]
		if s.Driver == res.Driver && s.Pool == res.Pool && s.Device == res.Device {
			return s
		}
	}
	return nil
}

// StartBinding starts the binding controller (Config.MIGBindingConditions):
// it watches ResourceClaims, and for each allocated to this node's pool
// a MIG device waiting for dranames.ConditionMIGReady it creates the
// instance at the allocated placement (the code Prepare runs; recorded in
// the checkpoint first, so that Prepare, or a restarted driver, adopts
// it) and sets the condition True in status.devices, upon which the
// scheduler binds the pod; when the instance cannot be made it sets
// dranames.ConditionMIGFailed, upon which the scheduler frees the
// allocation and schedules the pod again. Instances made for a claim that
// is deleted or loses its allocation before it is prepared are destroyed.
// It runs until ctx ends.
func (d *Driver) StartBinding(ctx context.Context) error {
	if d.cfg.Kube == nil {
		return errors.New("draplugin: the binding controller needs a Kubernetes client")
	}
	factory := informers.NewSharedInformerFactory(d.cfg.Kube, 10*time.Minute)
	inf := factory.Resource().V1().ResourceClaims()
	lister := inf.Lister()
	q := workqueue.NewTypedRateLimitingQueueWithConfig(workqueue.DefaultTypedControllerRateLimiter[string](),
		workqueue.TypedRateLimitingQueueConfig[string]{Name: "gpuslice-mig-binding"})
	enqueue := func(obj any) {
		if key, err := cache.DeletionHandlingMetaNamespaceKeyFunc(obj); err == nil {
			q.Add(key)
		}
	}
	if _, err := inf.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    enqueue,
		UpdateFunc: func(_, obj any) { enqueue(obj) },
		DeleteFunc: enqueue,
	}); err != nil {
		return err
	}
	factory.Start(ctx.Done())
	go func() {
		defer q.ShutDown()
		if !cache.WaitForCacheSync(ctx.Done(), inf.Informer().HasSynced) {
			return
		}
		// Records made before bind whose claim went while the driver
		// was down: look at each once.
		d.mu.Lock()
		for _, r := range d.claims {
			if r.State == stateBinding {
				q.Add(r.Namespace + "/" + r.Name)
			}
		}
		d.mu.Unlock()
		<-ctx.Done()
	}()
	for range max(d.cfg.BindingWorkers, 1) {
		go func() {
			for {
				key, quit := q.Get()
				if quit {
					return
				}
				err := d.syncBinding(ctx, key, func(ns, name string) (*resourceapi.ResourceClaim, error) {
					return lister.ResourceClaims(ns).Get(name)
				})
				if err != nil && ctx.Err() == nil {
					d.cfg.Log.Warn("MIG binding", "claim", key, "err", err)
					q.AddRateLimited(key)
				} else {
					q.Forget(key)
				}
				q.Done(key)
			}
		}()
	}
	d.cfg.Log.Info("MIG binding controller started", "node", d.cfg.Node, "workers", max(d.cfg.BindingWorkers, 1))
	return nil
}

// syncBinding handles one claim key (namespace/name).
func (d *Driver) syncBinding(ctx context.Context, key string, get func(ns, name string) (*resourceapi.ResourceClaim, error)) error {
	ns, name, err := cache.SplitMetaNamespaceKey(key)
	if err != nil {
		return nil // not a key we made
	}
	claim, err := get(ns, name)
	if apierrors.IsNotFound(err) {
		claim, err = nil, nil
	}
	if err != nil {
		return err
	}
	d.mu.Lock()
	var records []*claimRecord
	for _, r := range sortedRecords(d.claims) {
		if r.Namespace == ns && r.Name == name {
			records = append(records, r)
		}
	}
	plan := planBinding(claim, d.cfg.Node, records)
	var errs []error
	for _, uid := range plan.Release {
		errs = append(errs, d.releaseLocked(ctx, uid))
	}
	d.mu.Unlock()
	if len(plan.Pending) > 0 {
		errs = append(errs, d.bindClaim(ctx, claim, plan.Pending))
	}
	return errors.Join(errs...)
}

// bindClaim makes the MIG instances of a claim's pending devices and
// sets their condition: ready when all exist, failed (with the reason)
// when one cannot be made. A claim gone or reallocated meanwhile gets
// nothing written; its instances are released on its next sync.
func (d *Driver) bindClaim(ctx context.Context, claim *resourceapi.ResourceClaim, pending []resourceapi.DeviceRequestAllocationResult) error {
	made, cause := d.makeInstances(ctx, claim)
	if ctx.Err() != nil {
		// Shutting down (or killed) between steps: what exists stays
		// for the next driver to adopt by placement.
		return ctx.Err()
	}
	cond := metav1.Condition{Type: dranames.ConditionMIGReady, Status: metav1.ConditionTrue, Reason: ReasonInstanceReady,
		Message: fmt.Sprintf("MIG instance created on node %s", d.cfg.Node), ObservedGeneration: claim.Generation,
		LastTransitionTime: metav1.NewTime(d.cfg.Clock())}
	if cause != nil {
		cond.Type, cond.Reason, cond.Message = dranames.ConditionMIGFailed, ReasonInstanceFailed, truncate(cause.Error(), 1024)
	}
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		cur, err := d.cfg.Kube.ResourceV1().ResourceClaims(claim.Namespace).Get(ctx, claim.Name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if cur.UID != claim.UID || cur.DeletionTimestamp != nil {
			return errClaimChanged
		}
		changed := false
		for _, res := range pending {
			if cur.Status.Allocation == nil || !slices.ContainsFunc(cur.Status.Allocation.Devices.Results, func(r resourceapi.DeviceRequestAllocationResult) bool {
				return r.Driver == res.Driver && r.Pool == res.Pool && r.Device == res.Device
			}) {
				return errClaimChanged
			}
			st := deviceStatus(cur, res)
			if st == nil {
				entry := resourceapi.AllocatedDeviceStatus{Driver: res.Driver, Pool: res.Pool, Device: res.Device}
				if res.ShareID != nil {
					id := string(*res.ShareID)
					entry.ShareID = &id
				}
				cur.Status.Devices = append(cur.Status.Devices, entry)
				st = &cur.Status.Devices[len(cur.Status.Devices)-1]
			}
			c := cond
			c.ObservedGeneration = cur.Generation
			changed = apimeta.SetStatusCondition(&st.Conditions, c) || changed
		}
		if !changed {
			return nil
		}
		_, err = d.cfg.Kube.ResourceV1().ResourceClaims(cur.Namespace).UpdateStatus(ctx, cur, metav1.UpdateOptions{})
		return err
	})
	switch {
	case errors.Is(err, errClaimChanged) || apierrors.IsNotFound(err):
		// Released on the claim's next sync (its update or deletion
		// is queued).
		d.cfg.Log.Info("claim changed while its MIG instance was made", "claim", claim.Namespace+"/"+claim.Name, "uid", claim.UID)
		return nil
	case err != nil:
		return fmt.Errorf("claim %s/%s: setting %s: %w", claim.Namespace, claim.Name, cond.Type, err)
	}
	if cause != nil {
		d.cfg.Log.Warn("MIG instance before bind failed; the scheduler will allocate again", "claim", claim.Namespace+"/"+claim.Name, "err", cause)
	} else {
		d.cfg.Log.Info("MIG instance ready before bind", "claim", claim.Namespace+"/"+claim.Name, "uid", claim.UID, "instances", made)
	}
	return nil
}

var errClaimChanged = errors.New("the claim was deleted or reallocated")

// makeInstances records the claim in the checkpoint (state binding) and
// makes its MIG instances, found at the placement (adopted) or created.
// On failure, the instances it made are destroyed and the record
// dropped, and the cause returned. A claim already prepared (or being
// prepared) is left to Prepare.
func (d *Driver) makeInstances(ctx context.Context, claim *resourceapi.ResourceClaim) (int, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	uid := string(claim.UID)
	if old := d.claims[uid]; old != nil && old.State != stateBinding {
		return 0, nil // the kubelet got there first: Prepare made them
	}
	rec, err := planClaim(claim, d.cfg.Node, d.table, d.cfg.Sharing)
	if err != nil {
		return 0, err
	}
	if err := conflict(rec, d.claims); err != nil {
		return 0, err
	}
	rec.State = stateBinding
	prev := d.claims[uid]
	d.claims[uid] = &rec
	if err := d.save(); err != nil {
		d.restore(uid, prev)
		return 0, err
	}
	d.cfg.Observe(StepIntent, uid)
	isMIG := func(dev preparedDevice) bool { return dev.Type == dranames.TypeMIG }
	err = d.makeDevices(ctx, &rec, isMIG)
	made := 0
	for _, dev := range rec.Devices {
		if isMIG(dev) && dev.ID != "" {
			made++
		}
	}
	if ctx.Err() != nil {
		return made, ctx.Err()
	}
	if err != nil {
		if rerr := d.releaseLocked(ctx, uid); rerr != nil {
			d.cfg.Log.Warn("undoing a failed MIG binding", "claim", rec.Namespace+"/"+rec.Name, "err", rerr)
		}
		return made, err
	}
	return made, d.save() // the instances' uuids
}

// restore puts back the record uid had (nil: none).
func (d *Driver) restore(uid string, prev *claimRecord) {
	if prev == nil {
		delete(d.claims, uid)
	} else {
		d.claims[uid] = prev
	}
}

// releaseLocked destroys the MIG instances of a record made before bind
// (unless another claim holds the placement) and drops it. d.mu is held.
func (d *Driver) releaseLocked(ctx context.Context, uid string) error {
	rec := d.claims[uid]
	if rec == nil || rec.State != stateBinding {
		return nil
	}
	if err := d.releaseDevices(ctx, uid, rec, " made before bind"); err != nil {
		return err
	}
	delete(d.claims, uid)
	if err := d.save(); err != nil {
		d.claims[uid] = rec
		return err
	}
	return nil
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n]
}
