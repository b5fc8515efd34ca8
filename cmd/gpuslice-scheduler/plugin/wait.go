package plugin

import (
	"time"

	v1 "k8s.io/api/core/v1"
	fwk "k8s.io/kube-scheduler/framework"
)

// waiting tracks how long GPU pods have waited (the reserve-after rule).
type waiting struct{}

func newWaiting() *waiting { return &waiting{} }

func (w *waiting) filter(c *cycle, pod *v1.Pod, node string, now time.Time) *fwk.Status { return nil }

func (w *waiting) unschedulable(c *cycle, pod *v1.Pod, now time.Time) {}
