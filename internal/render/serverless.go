package render

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/gpuslice/gpuslice/internal/autoscale"
	"github.com/gpuslice/gpuslice/internal/model"
	"github.com/gpuslice/gpuslice/internal/plan"
)

// ProxyImage is the image the serverless target runs `gpuslice proxy`
// from. No gpuslice image is published: build one from this repository
// and set it.
const ProxyImage = "registry.invalid/gpuslice:set-me"

// ProxyRules are the RBAC rules `gpuslice proxy` needs in its namespace:
// read and set the Deployment's scale, follow the Service's
// EndpointSlices.
var ProxyRules = []obj{
	{"apiGroups": []string{"apps"}, "resources": []string{"deployments/scale"}, "verbs": []string{"get", "update", "patch"}},
	{"apiGroups": []string{"discovery.k8s.io"}, "resources": []string{"endpointslices"}, "verbs": []string{"get", "list", "watch"}},
}

func init() {
	register("serverless", renderServerless)
	registerWarnings("serverless", func(s *model.Spec, _ *plan.Plan) []string { return serverlessWarnings(s) })
}

// scaleToZero reports whether a workload asks for scale to zero behind a
// proxy (compose serverlessConfiguration: targetPort and enableAutoStop).
func scaleToZero(wl *model.Workload) bool {
	return wl.Autoscaling != nil && wl.Autoscaling.TargetPort > 0 && wl.Autoscaling.EnableAutoStop
}

// renderServerless writes, for every workload with compose
// serverlessConfiguration (targetPort, enableAutoStop), the scale-to-zero
// proxy in front of the Deployment the kubernetes target writes: a
// Service selecting the workload's pods (the proxy forwards to its ready
// endpoints), the proxy's ServiceAccount, Role (ProxyRules) and
// RoleBinding, a Deployment running `gpuslice proxy`, and a Service named
// after the workload on targetPort in front of the proxy: what clients
// call. A request that finds no ready pod scales the Deployment from 0 to
// max(minReplicas, 1) and waits (30 s, then 503); after
// idleMinutesBeforeScalingDown without a request the proxy scales it to 0.
func renderServerless(s *model.Spec, _ *plan.Plan) ([]byte, error) {
	var objs []obj
	var comments [][]string
	for i := range s.Workloads {
		wl := &s.Workloads[i]
		if !scaleToZero(wl) {
			continue
		}
		pol := autoscale.FromCapabilities(*wl.Autoscaling).WithDefaults()
		name := dnsName(wl.Name)
		ns := tenantNamespace(wl.Tenant)
		port := wl.Autoscaling.TargetPort
		backend := dnsName(wl.Name + "-backend")
		proxy := dnsName(wl.Name + "-gpuslice-proxy")
		proxyLabels := obj{"app.kubernetes.io/name": proxy, "app.kubernetes.io/component": "gpuslice-proxy", workloadLabel: name, tenantLabel: dnsName(wl.Tenant)}
		meta := func(n string, labels obj) obj { return obj{"name": n, "namespace": ns, "labels": labels} }
		servicePort := []obj{{"name": "http", "port": port, "targetPort": port, "protocol": "TCP"}}
		args := []string{"proxy", "--namespace=" + ns, "--deployment=" + name, "--service=" + backend,
			"--port=" + strconv.Itoa(port), "--listen=:" + strconv.Itoa(port),
			"--min-replicas=" + strconv.Itoa(pol.MinReplicas), "--idle=" + pol.DownAfter.String(), "--wake-timeout=30s"}
		objs = append(objs,
			obj{"apiVersion": "v1", "kind": "Service", "metadata": meta(backend, workloadLabels(wl)),
				"spec": obj{"selector": obj{"app.kubernetes.io/name": name}, "ports": servicePort}},
			obj{"apiVersion": "v1", "kind": "ServiceAccount", "metadata": meta(proxy, proxyLabels)},
			obj{"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role", "metadata": meta(proxy, proxyLabels), "rules": ProxyRules},
			obj{"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding", "metadata": meta(proxy, proxyLabels),
				"roleRef":  obj{"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": proxy},
				"subjects": []obj{{"kind": "ServiceAccount", "name": proxy, "namespace": ns}}},
			obj{"apiVersion": "apps/v1", "kind": "Deployment", "metadata": meta(proxy, proxyLabels),
				"spec": obj{"replicas": 1, "selector": obj{"matchLabels": obj{"app.kubernetes.io/name": proxy}},
					"template": obj{"metadata": obj{"labels": proxyLabels}, "spec": obj{
						"serviceAccountName": proxy,
						"containers": []obj{{"name": "proxy", "image": ProxyImage, "args": args,
							"ports":          []obj{{"name": "http", "containerPort": port}},
							"readinessProbe": obj{"tcpSocket": obj{"port": port}, "periodSeconds": 5},
							"resources":      obj{"requests": obj{"cpu": "50m", "memory": "64Mi"}, "limits": obj{"memory": "256Mi"}}}},
					}}}},
			obj{"apiVersion": "v1", "kind": "Service", "metadata": meta(name, proxyLabels),
				"spec": obj{"selector": obj{"app.kubernetes.io/name": proxy}, "ports": servicePort}},
		)
		comments = append(comments,
			[]string{fmt.Sprintf("%s: the proxy forwards to the ready endpoints of this Service (the workload's pods on %d)", wl.Name, port)},
			[]string{"the proxy's identity"},
			[]string{"what gpuslice proxy does: read and set deployment " + name + "'s scale, follow endpointslices"},
			nil,
			[]string{fmt.Sprintf("%s: a request with no ready pod scales deployment %s from 0 to %d and waits (30s, then 503); %s without a request scales it to 0. One replica: its idle clock counts the requests it sees",
				wl.Name, name, max(pol.MinReplicas, 1), pol.DownAfter)},
			[]string{fmt.Sprintf("%s: clients call this Service (port %d)", wl.Name, port)},
		)
	}
	header := []string{"Scale-to-zero proxies rendered by gpuslice from " + strings.Join(s.Sources, ", "),
		"Each runs `gpuslice proxy` in front of a Deployment of the kubernetes target (apply both).",
		"No gpuslice image is published: build one from this repository and replace " + ProxyImage + "."}
	for _, w := range serverlessWarnings(s) {
		header = append(header, "WARNING: "+w)
	}
	if len(objs) == 0 {
		header = append(header, "No workload has serverlessConfiguration with targetPort and enableAutoStop: nothing to render.")
	}
	return documents(header, objs, comments)
}

// serverlessWarnings: what the proxy cannot do of the compose settings.
func serverlessWarnings(s *model.Spec) []string {
	var out []string
	for _, wl := range s.Workloads {
		a := wl.Autoscaling
		if a == nil || a.TargetPort == 0 || a.EnableAutoStop {
			continue
		}
		out = append(out, fmt.Sprintf("%s: serverlessConfiguration has targetPort %d but not enableAutoStop: no proxy is rendered (nothing would stop it)", wl.Name, a.TargetPort))
	}
	return out
}
