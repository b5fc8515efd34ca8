package schedcore

import (
	"testing"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/gpuslice/gpuslice/internal/catalog"
	"github.com/gpuslice/gpuslice/internal/k8s/draalloc"
)

// Pods found unschedulable are activated, once, when the ledger frees
// devices; a cycle that began before a free learns it missed one.
func TestWaitingActivatesOnFree(t *testing.T) {
	w := NewWaiting()
	pod := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: "p", UID: "u"}}
	gen := w.Generation()
	if w.Unschedulable(pod, gen) {
		t.Fatal("nothing freed, yet freed meanwhile")
	}
	var got []map[string]*v1.Pod
	w.Freed(func(m map[string]*v1.Pod) { got = append(got, m) })
	if len(got) != 1 || got[0]["team-a/p"] != pod {
		t.Fatalf("activated %v", got)
	}
	w.Freed(func(m map[string]*v1.Pod) { got = append(got, m) })
	if len(got) != 1 {
		t.Fatal("activated twice for one wait")
	}
	if !w.Unschedulable(pod, gen) {
		t.Fatal("a cycle that began before a free did not learn of it")
	}
}

// The ledger's OnFree hears devices freed: a slice changed, an in-flight
// allocation taken back.
func TestLedgerOnFree(t *testing.T) {
	l := NewLedger(draalloc.Policy("binpack"), catalog.Default(), nil)
	n := 0
	l.OnFree(func() { n++ })
	l.SetSlice("s", "a", nil)
	l.Unreserve("nobody")
	if n != 2 {
		t.Fatalf("OnFree called %d times, want 2", n)
	}
}
