package render

import (
	"fmt"
	"strings"

	"github.com/gpuslice/gpuslice/internal/autoscale"
	"github.com/gpuslice/gpuslice/internal/model"
	"github.com/gpuslice/gpuslice/internal/plan"
)

// KEDAPrometheus is the Prometheus the rendered ScaledObjects query (a
// placeholder: the header says to set it).
const KEDAPrometheus = "http://prometheus.monitoring.svc:9090"

func init() {
	register("keda", renderKEDA)
	registerWarnings("keda", func(s *model.Spec, _ *plan.Plan) []string { return kedaWarnings(s) })
}

// kedaQuery is the PromQL of a workload's GPU trigger: the sum over its
// pods of each pod's slice compute utilization in percent (used over the
// most its slices may use, gpuslice's per-slice metrics). KEDA's
// Prometheus trigger is an AverageValue target, so the HPA it makes wants
// ceil(sum / threshold) pods: the same rule as the hpa target's per-pod
// average.
func kedaQuery(ns, deployment string) string {
	sel := fmt.Sprintf(`{namespace=%q,pod=~%q}`, ns, deployment+"-[a-z0-9]+-[a-z0-9]+")
	return fmt.Sprintf("sum(100 * sum by (pod) (gpuslice_slice_compute_used_ratio%s) / sum by (pod) (gpuslice_slice_compute_limit_ratio%s))", sel, sel)
}

// renderKEDA writes a keda.sh/v1alpha1 ScaledObject per workload with
// compose autoscaling, aimed at the kubernetes target's Deployment: min
// and max replicas from the compose bounds (min 0 with enableAutoStop or
// minReplicas 0), a Prometheus trigger on the pods' GPU slice utilization
// with the over-utilized threshold as its target and the idle threshold
// as its activation threshold, cooldownPeriod from
// idleMinutesBeforeScalingDown (how long it stays inactive before KEDA
// scales to zero), and the HPA behavior of the hpa target (one pod per
// period each way, stabilization windows from the compose minutes).
func renderKEDA(s *model.Spec, _ *plan.Plan) ([]byte, error) {
	var objs []obj
	var comments [][]string
	for i := range s.Workloads {
		wl := &s.Workloads[i]
		if wl.Autoscaling == nil {
			continue
		}
		a := wl.Autoscaling
		pol := autoscale.FromCapabilities(*a).WithDefaults()
		lo := pol.MinReplicas
		if a.EnableAutoStop {
			lo = 0
		}
		hi := max(pol.MaxReplicas, lo, 1)
		up, down := int(pol.UpAfter.Seconds()), int(pol.DownAfter.Seconds())
		name := dnsName(wl.Name)
		ns := tenantNamespace(wl.Tenant)
		objs = append(objs, obj{
			"apiVersion": "keda.sh/v1alpha1", "kind": "ScaledObject",
			"metadata": obj{"name": name, "namespace": ns, "labels": workloadLabels(wl)},
			"spec": obj{
				"scaleTargetRef":  obj{"apiVersion": "apps/v1", "kind": "Deployment", "name": name},
				"minReplicaCount": lo, "maxReplicaCount": hi,
				"pollingInterval": 30,
				"cooldownPeriod":  down,
				"advanced": obj{"horizontalPodAutoscalerConfig": obj{"behavior": obj{
					"scaleUp": obj{"stabilizationWindowSeconds": up, "selectPolicy": "Min",
						"policies": []obj{{"type": "Pods", "value": 1, "periodSeconds": max1800(up)}}},
					"scaleDown": obj{"stabilizationWindowSeconds": down, "selectPolicy": "Min",
						"policies": []obj{{"type": "Pods", "value": 1, "periodSeconds": max1800(down)}}},
				}}},
				"triggers": []obj{{
					"type": "prometheus", "name": "gpu-slice-utilization", "metricType": "AverageValue",
					"metadata": obj{
						"serverAddress":       KEDAPrometheus,
						"query":               kedaQuery(ns, name),
						"threshold":           fmt.Sprintf("%g", pol.UpThreshold),
						"activationThreshold": fmt.Sprintf("%g", pol.IdleThreshold),
					},
				}},
			},
		})
		note := fmt.Sprintf("%s: %d..%d replicas; ~%g%% GPU slice use per pod, up one pod per %ds, down one per %ds; ", wl.Name, lo, hi, pol.UpThreshold, up, down)
		if lo == 0 {
			note += fmt.Sprintf("to 0 after %ds at or under %g%%", down, pol.IdleThreshold)
		} else {
			note += "never to 0"
		}
		comments = append(comments, []string{note})
	}
	header := []string{"KEDA ScaledObjects rendered by gpuslice from " + strings.Join(s.Sources, ", "),
		"Each scales the kubernetes target's Deployment on gpuslice's per-slice metrics through KEDA's Prometheus",
		"trigger; set serverAddress (" + KEDAPrometheus + ") to your Prometheus. Apply instead of the hpa target",
		"(KEDA makes its own HPA; two HPAs on one Deployment fight)."}
	for _, w := range kedaWarnings(s) {
		header = append(header, "WARNING: "+w)
	}
	if len(objs) == 0 {
		header = append(header, "No workload has autoscaling (compose x-omnistrate-capabilities.autoscaling): nothing to render.")
	}
	return documents(header, objs, comments)
}

// kedaWarnings: what KEDA's ScaledObject does differently.
func kedaWarnings(s *model.Spec) []string {
	var out []string
	for _, wl := range s.Workloads {
		a := wl.Autoscaling
		if a == nil {
			continue
		}
		if a.EnableAutoStop || a.MinReplicas == 0 {
			w := fmt.Sprintf("%s: KEDA scales to 0 when GPU slice use stays at or under idleThreshold for the cooldown, not on an absence of requests, and a GPU metric cannot wake a stopped Deployment (no pod, no sample)", wl.Name)
			if scaleToZero(&wl) {
				w += "; the serverless target's proxy wakes it on a request"
			} else {
				w += "; nothing wakes it: add serverlessConfiguration targetPort and enableAutoStop for the serverless target's proxy"
			}
			out = append(out, w)
		}
	}
	return out
}
