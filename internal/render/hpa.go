package render

import (
	"fmt"
	"strings"

	"github.com/gpuslice/gpuslice/internal/autoscale"
	"github.com/gpuslice/gpuslice/internal/model"
	"github.com/gpuslice/gpuslice/internal/plan"
)

// HPAMetric is the per-pod custom metric the rendered
// HorizontalPodAutoscalers scale on: how busy a pod's GPU slices are, the
// compute they use over the most they can use (0..1). The custom metrics
// API serves it from gpuslice's per-slice metrics with the rule HPARule
// (prometheus-adapter's seriesQuery/metricsQuery form).
const HPAMetric = "gpuslice_slice_compute_utilization_ratio"

// HPARule is the PromQL a custom-metrics adapter uses for HPAMetric.
const HPARule = "sum by (namespace, pod) (gpuslice_slice_compute_used_ratio) / sum by (namespace, pod) (gpuslice_slice_compute_limit_ratio)"

func init() {
	register("hpa", renderHPA)
	registerWarnings("hpa", func(s *model.Spec, _ *plan.Plan) []string { return hpaWarnings(s) })
}

// renderHPA writes an autoscaling/v2 HorizontalPodAutoscaler for every
// workload with compose autoscaling, aimed at the Deployment the
// kubernetes target writes for it. The compose rule (up by one after the
// metric stays over overUtilizedThreshold for overUtilizedMinutes, down by
// one after it stays under idleThreshold for idleMinutes) maps onto the
// HPA's behavior: a stabilization window of those minutes and a policy of
// one pod per period each way, with the target at the over-utilized
// threshold. The HPA's proportional rule is not the compose one (it may
// scale down before the metric falls under idleThreshold); the header
// says so.
func renderHPA(s *model.Spec, p *plan.Plan) ([]byte, error) {
	var objs []obj
	var comments [][]string
	for i := range s.Workloads {
		wl := &s.Workloads[i]
		if wl.Autoscaling == nil {
			continue
		}
		pol := autoscale.FromCapabilities(*wl.Autoscaling).WithDefaults()
		lo := max(pol.MinReplicas, 1)
		hi := max(pol.MaxReplicas, lo)
		up, down := int(pol.UpAfter.Seconds()), int(pol.DownAfter.Seconds())
		name := dnsName(wl.Name)
		objs = append(objs, obj{
			"apiVersion": "autoscaling/v2", "kind": "HorizontalPodAutoscaler",
			"metadata": obj{"name": name, "namespace": tenantNamespace(wl.Tenant), "labels": workloadLabels(wl)},
			"spec": obj{
				"scaleTargetRef": obj{"apiVersion": "apps/v1", "kind": "Deployment", "name": name},
				"minReplicas":    lo, "maxReplicas": hi,
				"metrics": []obj{{"type": "Pods", "pods": obj{
					"metric": obj{"name": HPAMetric},
					"target": obj{"type": "AverageValue", "averageValue": fmt.Sprintf("%dm", int(pol.UpThreshold*10))},
				}}},
				"behavior": obj{
					"scaleUp": obj{"stabilizationWindowSeconds": up, "selectPolicy": "Min",
						"policies": []obj{{"type": "Pods", "value": 1, "periodSeconds": max1800(up)}}},
					"scaleDown": obj{"stabilizationWindowSeconds": down, "selectPolicy": "Min",
						"policies": []obj{{"type": "Pods", "value": 1, "periodSeconds": max1800(down)}}},
				},
			},
		})
		comments = append(comments, []string{fmt.Sprintf("%s: %d..%d replicas; up one pod per %ds over %g%%, down one per %ds (compose idle threshold %g%%)",
			wl.Name, lo, hi, up, pol.UpThreshold, down, pol.IdleThreshold)})
	}
	header := []string{"HorizontalPodAutoscalers rendered by gpuslice from " + strings.Join(s.Sources, ", "),
		"They scale on the per-pod custom metric " + HPAMetric + " (how busy a pod's GPU slices are, 0..1): have your",
		"custom metrics adapter (e.g. prometheus-adapter) serve it as " + HPARule,
		"over gpuslice's /metrics. Apply them with the kubernetes target's Deployments."}
	for _, w := range hpaWarnings(s) {
		header = append(header, "WARNING: "+w)
	}
	if len(objs) == 0 {
		header = append(header, "No workload has autoscaling (compose x-omnistrate-capabilities.autoscaling): nothing to render.")
	}
	return documents(header, objs, comments)
}

// hpaWarnings is what an HPA cannot do of the compose settings.
func hpaWarnings(s *model.Spec) []string {
	var out []string
	for _, wl := range s.Workloads {
		a := wl.Autoscaling
		if a == nil {
			continue
		}
		if a.MinReplicas == 0 || a.EnableAutoStop {
			out = append(out, fmt.Sprintf("%s: scale to zero (minReplicas 0 / enableAutoStop) needs the HPAScaleToZero gate or KEDA; the HPA keeps at least one replica", wl.Name))
		}
		if a.IdleThreshold > 0 {
			out = append(out, fmt.Sprintf("%s: the HPA scales down proportionally to the metric, not only under idleThreshold %d%%", wl.Name, a.IdleThreshold))
		}
	}
	return out
}

// max1800 keeps an HPA policy period within the API's 1..1800 seconds.
func max1800(s int) int { return min(max(s, 1), 1800) }
