package consumers

import (
	"strconv"
	"strings"
	"testing"

	kedav1alpha1 "github.com/kedacore/keda/v2/apis/keda/v1alpha1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/util/validation"
)

func init() {
	// KEDA's types join the strict scheme (its SchemeBuilder).
	if err := kedav1alpha1.AddToScheme(strictScheme); err != nil {
		panic(err)
	}
}

// checkKEDA: KEDA's own ScaledObject type, strictly decoded, and the
// checks of KEDA's admission webhook that need no cluster: replica bounds
// (CheckReplicaCountBoundsAreValid), fallback (CheckFallbackValid),
// triggers (ValidateTriggers), the HPA name KEDA derives fitting a label
// value; plus the Prometheus trigger's required metadata (serverAddress,
// query, numeric threshold and activationThreshold) as KEDA's Prometheus
// scaler reads it.
func checkKEDA(t *testing.T, out []byte) {
	for _, doc := range documents(out) {
		so, ok := decodeAny(t, doc).(*kedav1alpha1.ScaledObject)
		if !ok {
			t.Errorf("not a ScaledObject:\n%s", doc)
			continue
		}
		if err := kedav1alpha1.CheckReplicaCountBoundsAreValid(so); err != nil {
			t.Errorf("ScaledObject %s: %v", so.Name, err)
		}
		if err := kedav1alpha1.CheckFallbackValid(so); err != nil {
			t.Errorf("ScaledObject %s: %v", so.Name, err)
		}
		if err := kedav1alpha1.ValidateTriggers(so.Spec.Triggers); err != nil {
			t.Errorf("ScaledObject %s: %v", so.Name, err)
		}
		if errs := validation.IsValidLabelValue("keda-hpa-" + so.Name); len(errs) > 0 {
			t.Errorf("ScaledObject %s: KEDA's HPA name: %v", so.Name, errs)
		}
		if so.Spec.ScaleTargetRef == nil || so.Spec.ScaleTargetRef.Kind != "Deployment" || so.Spec.MaxReplicaCount == nil || so.Spec.MinReplicaCount == nil {
			t.Errorf("ScaledObject %s: %+v", so.Name, so.Spec)
			continue
		}
		for _, tr := range so.Spec.Triggers {
			if tr.Type != "prometheus" {
				t.Errorf("ScaledObject %s: trigger type %s", so.Name, tr.Type)
				continue
			}
			for _, k := range []string{"serverAddress", "query", "threshold", "activationThreshold"} {
				if tr.Metadata[k] == "" {
					t.Errorf("ScaledObject %s: prometheus trigger without %s", so.Name, k)
				}
			}
			for _, k := range []string{"threshold", "activationThreshold"} {
				if _, err := strconv.ParseFloat(tr.Metadata[k], 64); err != nil {
					t.Errorf("ScaledObject %s: %s %q is not a number: %v", so.Name, k, tr.Metadata[k], err)
				}
			}
		}
	}
}

// checkServerless: the scale-to-zero proxy's objects strictly decoded; the
// Role grants what `gpuslice proxy` calls (deployments/scale get and
// update, endpointslices list and watch), the RoleBinding binds it to the
// Deployment's ServiceAccount, and the front Service selects the proxy's
// pods on the port the proxy listens on.
func checkServerless(t *testing.T, out []byte) {
	roles := map[string]*rbacv1.Role{}
	bindings := map[string]*rbacv1.RoleBinding{}
	services := map[string]*corev1.Service{}
	var deployments []*appsv1.Deployment
	for _, doc := range documents(out) {
		switch o := decodeAny(t, doc).(type) {
		case *corev1.Service:
			services[o.Name] = o
		case *corev1.ServiceAccount:
		case *rbacv1.Role:
			roles[o.Name] = o
		case *rbacv1.RoleBinding:
			bindings[o.Name] = o
		case *appsv1.Deployment:
			deployments = append(deployments, o)
		default:
			t.Errorf("unexpected %T", o)
		}
	}
	allows := func(r *rbacv1.Role, group, resource, verb string) bool {
		for _, rule := range r.Rules {
			if has(rule.APIGroups, group) && has(rule.Resources, resource) && has(rule.Verbs, verb) {
				return true
			}
		}
		return false
	}
	for _, d := range deployments {
		pod := d.Spec.Template.Spec
		if len(pod.Containers) != 1 || len(pod.Containers[0].Args) == 0 || pod.Containers[0].Args[0] != "proxy" {
			t.Errorf("Deployment %s does not run gpuslice proxy: %+v", d.Name, pod.Containers)
			continue
		}
		b := bindings[pod.ServiceAccountName]
		if b == nil || len(b.Subjects) != 1 || b.Subjects[0].Name != pod.ServiceAccountName || b.RoleRef.Kind != "Role" || roles[b.RoleRef.Name] == nil {
			t.Errorf("Deployment %s: ServiceAccount %s has no RoleBinding to a rendered Role", d.Name, pod.ServiceAccountName)
			continue
		}
		r := roles[b.RoleRef.Name]
		for _, need := range [][3]string{{"apps", "deployments/scale", "get"}, {"apps", "deployments/scale", "update"},
			{"discovery.k8s.io", "endpointslices", "list"}, {"discovery.k8s.io", "endpointslices", "watch"}} {
			if !allows(r, need[0], need[1], need[2]) {
				t.Errorf("Role %s does not allow %s %s/%s, which gpuslice proxy uses", r.Name, need[2], need[0], need[1])
			}
		}
		var listen, backend string
		for _, a := range pod.Containers[0].Args {
			if v, ok := strings.CutPrefix(a, "--listen=:"); ok {
				listen = v
			}
			if v, ok := strings.CutPrefix(a, "--service="); ok {
				backend = v
			}
		}
		if services[backend] == nil {
			t.Errorf("Deployment %s: --service=%s is not rendered", d.Name, backend)
		}
		front := false
		for _, s := range services {
			if s.Spec.Selector["app.kubernetes.io/name"] == d.Spec.Selector.MatchLabels["app.kubernetes.io/name"] &&
				len(s.Spec.Ports) == 1 && strconv.Itoa(s.Spec.Ports[0].TargetPort.IntValue()) == listen {
				front = true
			}
		}
		if !front {
			t.Errorf("Deployment %s: no Service selects it on its --listen port %s", d.Name, listen)
		}
	}
}

func has(ss []string, s string) bool {
	for _, x := range ss {
		if x == s {
			return true
		}
	}
	return false
}
