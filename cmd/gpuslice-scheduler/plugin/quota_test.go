package plugin

import (
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/gpuslice/gpuslice/internal/catalog"
	"github.com/gpuslice/gpuslice/internal/k8s/draalloc"
)

func ns(annotations map[string]string) *v1.Namespace {
	return &v1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "team-a", Annotations: annotations}}
}

func TestQuotaOf(t *testing.T) {
	if q, err := quotaOf(ns(nil)); q != nil || err != nil {
		t.Fatalf("no annotations: %+v, %v", q, err)
	}
	q, err := quotaOf(ns(map[string]string{QuotaMemoryAnnotation: "40Gi"}))
	if err != nil || q.memMiB != 40*1024 || q.compute != -1 {
		t.Fatalf("memory only: %+v, %v", q, err)
	}
	q, err = quotaOf(ns(map[string]string{QuotaComputeAnnotation: "250"}))
	if err != nil || q.memMiB != -1 || q.compute != 250 {
		t.Fatalf("compute only: %+v, %v", q, err)
	}
	for ann, want := range map[string]string{
		QuotaMemoryAnnotation:  `annotation gpuslice.dev/gpu-memory-quota "lots": want a quantity of GPU memory such as 40Gi`,
		QuotaComputeAnnotation: `annotation gpuslice.dev/gpu-compute-quota "lots": want a whole number of percent of a GPU such as 250`,
	} {
		if _, err := quotaOf(ns(map[string]string{ann: "lots"})); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: %v, want %q", ann, err, want)
		}
	}
}

func TestQuotaExceeded(t *testing.T) {
	q := &quota{memMiB: 20 * 1024, compute: 150}
	if why := q.exceeded("team-a", 16*1024, 100, 4*1024, 50); why != "" {
		t.Fatalf("exactly at the quota: %q", why)
	}
	if why := q.exceeded("team-a", 16*1024, 0, 4*1024+1, 0); !strings.Contains(why, "namespace team-a GPU memory quota 20Gi: 16Gi in use, the pod's claims need 4097Mi") {
		t.Fatalf("memory: %q", why)
	}
	if why := q.exceeded("team-a", 0, 100, 0, 51); !strings.Contains(why, "GPU compute quota 150%: 100% in use, the pod's claims need 51%") {
		t.Fatalf("compute: %q", why)
	}
}

// usageLocked counts in-flight and recorded claims of the namespace and
// leaves out those a preemption simulation removed.
func TestUsageLocked(t *testing.T) {
	l := newLedger(draalloc.Policy("binpack"), catalog.Default())
	l.mu.Lock()
	defer l.mu.Unlock()
	add := func(uid, ns string, mem int64, comp int) {
		l.claims[types.UID(uid)] = &claimEntry{uid: types.UID(uid), namespace: ns, node: "n", inflight: true, memMiB: mem, compute: comp}
	}
	add("a", "team-a", 4096, 25)
	add("b", "team-a", 8192, 50)
	add("c", "team-b", 40960, 100)
	if m, c := l.usageLocked("team-a", nil); m != 12288 || c != 75 {
		t.Fatalf("team-a: %d MiB %d%%", m, c)
	}
	if m, c := l.usageLocked("team-a", map[types.UID]bool{"b": true}); m != 4096 || c != 25 {
		t.Fatalf("team-a without b: %d MiB %d%%", m, c)
	}
}
