package schedcore

import (
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/gpuslice/gpuslice/internal/admit"
	"github.com/gpuslice/gpuslice/internal/catalog"
	"github.com/gpuslice/gpuslice/internal/k8s/draalloc"
)

func ns(annotations map[string]string) *v1.Namespace {
	return &v1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "team-a", Annotations: annotations}}
}

func TestQuotaOf(t *testing.T) {
	if q, err := QuotaOf(ns(nil)); q != nil || err != nil {
		t.Fatalf("no annotations: %+v, %v", q, err)
	}
	q, err := QuotaOf(ns(map[string]string{QuotaMemoryAnnotation: "40Gi"}))
	if err != nil || q.MemMiB != 40*1024 || q.Compute != -1 || q.Name != "team-a" || q.Scope != admit.NamespaceScope {
		t.Fatalf("memory only: %+v, %v", q, err)
	}
	q, err = QuotaOf(ns(map[string]string{QuotaComputeAnnotation: "250"}))
	if err != nil || q.MemMiB != -1 || q.Compute != 250 {
		t.Fatalf("compute only: %+v, %v", q, err)
	}
	for ann, want := range map[string]string{
		QuotaMemoryAnnotation:  `annotation gpuslice.dev/gpu-memory-quota "lots": want a quantity of GPU memory such as 40Gi`,
		QuotaComputeAnnotation: `annotation gpuslice.dev/gpu-compute-quota "lots": want a whole number of percent of a GPU such as 250`,
	} {
		if _, err := QuotaOf(ns(map[string]string{ann: "lots"})); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: %v, want %q", ann, err, want)
		}
	}
}

func TestQuotaExceeded(t *testing.T) {
	q := admit.Quota{Scope: admit.NamespaceScope, Name: "team-a", MemMiB: 20 * 1024, Compute: 150}
	if o := q.Check(admit.Use{MemMiB: 16 * 1024, Compute: 100}, admit.Use{MemMiB: 4 * 1024, Compute: 50}); o != nil {
		t.Fatalf("exactly at the quota: %q", o.Reason())
	}
	if o := q.Check(admit.Use{MemMiB: 16 * 1024}, admit.Use{MemMiB: 4*1024 + 1}); o == nil || !strings.Contains(o.Reason(), "namespace team-a GPU memory quota 20Gi: 16Gi in use, the pod's claims need 4097Mi") {
		t.Fatalf("memory: %+v", o)
	}
	if o := q.Check(admit.Use{Compute: 100}, admit.Use{Compute: 51}); o == nil || !strings.Contains(o.Reason(), "GPU compute quota 150%: 100% in use, the pod's claims need 51%") {
		t.Fatalf("compute: %+v", o)
	}
}

// usageLocked counts in-flight and recorded claims of the namespace and
// leaves out those a preemption simulation removed.
func TestUsageLocked(t *testing.T) {
	l := NewLedger(draalloc.Policy("binpack"), catalog.Default(), nil)
	l.mu.Lock()
	defer l.mu.Unlock()
	add := func(uid, ns string, mem int64, comp int) {
		l.claims[types.UID(uid)] = &claimEntry{uid: types.UID(uid), namespace: ns, node: "n", inflight: true, held: admit.Use{MemMiB: mem, Compute: comp}}
	}
	add("a", "team-a", 4096, 25)
	add("b", "team-a", 8192, 50)
	add("c", "team-b", 40960, 100)
	if u := l.usageLocked("team-a", nil); u != (admit.Use{MemMiB: 12288, Compute: 75}) {
		t.Fatalf("team-a: %+v", u)
	}
	if u := l.usageLocked("team-a", map[types.UID]bool{"b": true}); u != (admit.Use{MemMiB: 4096, Compute: 25}) {
		t.Fatalf("team-a without b: %+v", u)
	}
}
