package plugin

import (
	"context"

	"k8s.io/client-go/informers"
	fwk "k8s.io/kube-scheduler/framework"

	"github.com/gpuslice/gpuslice/internal/alloc"
)

// quotas are per-namespace limits on GPU memory and compute (see Args).
type quotas struct {
	source string
}

func newQuotas(source string) *quotas {
	if source == "" {
		return nil
	}
	return &quotas{source: source}
}

func (q *quotas) watch(ctx context.Context, inf informers.SharedInformerFactory) error { return nil }

// admit refuses claims that would take a namespace past its quota.
func (q *quotas) admit(ns string, cs []alloc.Claim, l *ledger) *fwk.Status {
	if q == nil {
		return nil
	}
	return nil
}
