package plugin

import (
	"strings"
	"time"

	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/klog/v2"
	fwk "k8s.io/kube-scheduler/framework"

	"github.com/gpuslice/gpuslice/internal/k8s/schedcore"
)

// starving applies the reserve-after rule (schedcore.Ledger.Starve) to a
// pod found unschedulable, over the nodes of the scheduler's snapshot the
// pod could ever use: a node some filter rejected as unresolvable (the
// pod's nodeSelector or affinity, a taint it does not tolerate, GPUs that
// can never hold it) is never held for it. One not yet past reserveAfter
// is activated again when it will be.
func (p *Plugin) starving(pod *v1.Pod, c *cycle, statuses fwk.NodeToStatusReader, now time.Time) {
	nodes := func() []string {
		infos, err := p.fh.SnapshotSharedLister().NodeInfos().List()
		if err != nil {
			return nil
		}
		var names []string
		for _, ni := range infos {
			node := ni.Node()
			if node == nil {
				continue
			}
			if statuses != nil {
				if st := statuses.Get(node.Name); st.Code() == fwk.UnschedulableAndUnresolvable {
					continue
				}
			}
			names = append(names, node.Name)
		}
		return names
	}
	w := schedcore.Waiter{UID: pod.UID, Key: pod.Namespace + "/" + pod.Name, Created: pod.CreationTimestamp.Time, Priority: c.pod.Priority, Claims: c.pod.Acs}
	if wait := p.led.Starve(&p.hold, w, nodes, now, p.reserveAfter); wait > 0 {
		p.retryAt(pod, wait)
	}
}

// holderGone releases the hold of a pod that was deleted or bound
// meanwhile (by this scheduler's Reserve, or another way).
func (p *Plugin) holderGone() {
	uid, key := p.hold.Holder()
	if uid == "" || p.pods == nil {
		return
	}
	ns, name, _ := strings.Cut(key, "/")
	pod, err := p.pods.Pods(ns).Get(name)
	if (err != nil && apierrors.IsNotFound(err)) || (err == nil && (pod.UID != uid || pod.Spec.NodeName != "" || pod.DeletionTimestamp != nil)) {
		if p.hold.Release(uid) {
			p.led.Freed()
		}
	}
}

// retryAt moves pod back to the active queue after d, once per pod.
func (p *Plugin) retryAt(pod *v1.Pod, d time.Duration) {
	if !p.hold.RetryPending(pod.UID) {
		return
	}
	time.AfterFunc(d+100*time.Millisecond, func() {
		p.hold.RetryDone(pod.UID)
		activator(p.fh)(map[string]*v1.Pod{pod.Namespace + "/" + pod.Name: pod})
	})
}

func activator(h interface {
	Activate(klog.Logger, map[string]*v1.Pod)
}) func(map[string]*v1.Pod) {
	return func(pods map[string]*v1.Pod) { h.Activate(klog.Background(), pods) }
}
