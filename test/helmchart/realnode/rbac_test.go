package realnode

import (
	"testing"

	authzv1 "k8s.io/api/authorization/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// testChartRBACHoldsBack: the chart's pods run (the earlier subtests) with
// their own ServiceAccounts, which proves the ClusterRoles grant enough;
// this asks the API server's authorizer what each ServiceAccount may do
// beyond that, as an attacker holding its token would: none may read
// Secrets, create pods or change nodes; the driver may write the
// per-driver claim status only for its own driver name; the webhook may
// not touch ResourceSlices.
func (e *env) testChartRBACHoldsBack(t *testing.T) {
	type check struct {
		verb, group, resource, sub, name, ns string
		allowed                              bool
	}
	sa := func(name string) string { return "system:serviceaccount:" + ReleaseNS + ":" + name }
	cases := map[string][]check{
		sa("gpuslice-driver"): {
			{verb: "create", group: "resource.k8s.io", resource: "resourceslices", allowed: true},
			{verb: "associated-node:patch", group: "resource.k8s.io", resource: "resourceclaims", sub: "driver", name: "gpu.gpuslice.dev", allowed: true},
			{verb: "associated-node:patch", group: "resource.k8s.io", resource: "resourceclaims", sub: "driver", name: "gpu.nvidia.com"},
			{verb: "get", resource: "secrets", ns: "team-a"},
			{verb: "list", resource: "secrets"},
			{verb: "create", resource: "pods", ns: "team-a"},
			{verb: "update", resource: "nodes"},
			{verb: "delete", resource: "pods", ns: "team-a"},
			{verb: "update", group: "resource.k8s.io", resource: "resourceclaims", ns: "team-a"},
		},
		sa("gpuslice-webhook"): {
			{verb: "get", resource: "namespaces", allowed: true},
			{verb: "create", group: "resource.k8s.io", resource: "resourceslices"},
			{verb: "get", resource: "secrets", ns: "team-a"},
			{verb: "update", group: "resource.k8s.io", resource: "resourceclaims", ns: "team-a"},
			{verb: "create", resource: "pods", ns: "team-a"},
		},
		sa("gpuslice-scheduler"): {
			{verb: "update", group: "resource.k8s.io", resource: "resourceclaims", sub: "status", ns: "team-a", allowed: true},
			{verb: "create", resource: "pods", sub: "binding", ns: "team-a", allowed: true},
			{verb: "get", resource: "secrets", ns: "team-a"},
			{verb: "create", group: "resource.k8s.io", resource: "resourceslices"},
			{verb: "update", resource: "nodes"},
		},
	}
	for user, checks := range cases {
		for _, c := range checks {
			r, err := e.c.Clientset.AuthorizationV1().SubjectAccessReviews().Create(t.Context(), &authzv1.SubjectAccessReview{
				Spec: authzv1.SubjectAccessReviewSpec{User: user, Groups: []string{"system:serviceaccounts", "system:serviceaccounts:" + ReleaseNS, "system:authenticated"},
					ResourceAttributes: &authzv1.ResourceAttributes{Verb: c.verb, Group: c.group, Resource: c.resource, Subresource: c.sub, Name: c.name, Namespace: c.ns}},
			}, metav1.CreateOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if r.Status.Allowed != c.allowed {
				t.Errorf("%s %s %s/%s %q in %q: allowed=%v, want %v (%s)", user, c.verb, c.resource, c.sub, c.name, c.ns, r.Status.Allowed, c.allowed, r.Status.Reason)
			}
		}
	}
}
