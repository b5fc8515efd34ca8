package schedcore

import (
	"sync"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
)

// Waiting are the gpuslice pods the last cycle found unschedulable. The
// ledger follows claims and slices through its own informer handlers,
// which may run after the scheduling queue has already retried a pod on
// the same event; so whenever the ledger frees devices (a claim
// deallocated or deleted, a slice changed) it activates these pods
// itself, and a cycle during which devices were freed activates its pod
// again at once.
type Waiting struct {
	mu   sync.Mutex
	gen  uint64 // bumped whenever the ledger frees something
	pods map[types.UID]*v1.Pod
}

// NewWaiting starts with no pod waiting.
func NewWaiting() *Waiting { return &Waiting{pods: map[types.UID]*v1.Pod{}} }

// Generation is the current free generation (PreFilter records it).
func (w *Waiting) Generation() uint64 {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.gen
}

// Unschedulable records a pod whose cycle (started at generation gen)
// found no node; it reports whether devices were freed meanwhile.
func (w *Waiting) Unschedulable(pod *v1.Pod, gen uint64) (freedMeanwhile bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.pods[pod.UID] = pod
	return w.gen != gen
}

// Freed is called when the ledger frees devices; activate moves the pods back to the
// scheduling queue.
func (w *Waiting) Freed(activate func(map[string]*v1.Pod)) {
	w.mu.Lock()
	w.gen++
	pods := map[string]*v1.Pod{}
	for _, p := range w.pods {
		pods[p.Namespace+"/"+p.Name] = p
	}
	w.pods = map[types.UID]*v1.Pod{}
	w.mu.Unlock()
	if len(pods) > 0 && activate != nil {
		activate(pods)
	}
}
