package helmchart

import (
	"context"
	"strings"
	"testing"
	"time"

	"helm.sh/helm/v3/pkg/chartutil"

	"github.com/gpuslice/gpuslice/internal/k8s/apitest"
)

// Every object the chart renders, with every value set, is accepted by a
// real kube-apiserver v1.36.3 (server-side dry-run, strict field
// validation: RBAC rules, the webhook's rules and CA bundle, the
// DeviceClasses' CEL, the pod specs). cert-manager's Certificate is left
// out: the test API server has no cert-manager CRDs.
func TestChartPassesDryRun(t *testing.T) {
	srv := apitest.Start(t)
	for name, over := range valueSets {
		t.Run(name, func(t *testing.T) {
			docs, err := render(t, "gs", "gpuslice-system", overrides(t, over))
			if err != nil {
				t.Fatal(err)
			}
			var all []string
			for _, d := range docs {
				if strings.Contains(string(d), "apiVersion: cert-manager.io/") {
					continue
				}
				all = append(all, string(d))
			}
			ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
			defer cancel()
			for _, e := range srv.DryRun(ctx, []byte(strings.Join(all, "\n---\n"))) {
				t.Errorf("%v", e)
			}
		})
	}
}

// With a cluster to ask (Helm's lookup), an upgrade in tls mode auto keeps
// the webhook's certificate: the Secret of the first install is reused.
func TestAutoTLSKeptAcrossUpgrades(t *testing.T) {
	srv := apitest.Start(t)
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	c := load(t)
	renderSecret := func() string {
		vals, err := chartutil.ToRenderValues(c, map[string]any{}, chartutil.ReleaseOptions{
			Name: "gs", Namespace: "gpuslice-system", Revision: 2, IsUpgrade: true}, chartutil.DefaultCapabilities)
		if err != nil {
			t.Fatal(err)
		}
		files, err := engineWithClient(c, vals, srv)
		if err != nil {
			t.Fatal(err)
		}
		body := files["gpuslice/templates/webhook.yaml"]
		for _, doc := range strings.Split(body, "\n---\n") {
			if strings.Contains(doc, "\nkind: Secret\n") {
				return doc
			}
		}
		t.Fatalf("no Secret in webhook.yaml:\n%s", body)
		return ""
	}
	first := renderSecret()
	for _, e := range srv.Apply(ctx, []byte(first)) {
		t.Fatalf("applying the Secret: %v", e)
	}
	second := renderSecret()
	if first != second {
		t.Errorf("the upgrade made a new certificate:\n%s\nthen\n%s", first, second)
	}
	if !strings.Contains(first, "tls.crt:") {
		t.Errorf("no certificate in the Secret:\n%s", first)
	}
}
