// Package helmchart checks the Helm chart deploy/helm/gpuslice through
// Helm's own Go packages (helm.sh/helm/v3 from the module proxy): the chart
// lints as `helm lint` lints it, renders with the default values and with
// every non-default mode, and every rendered object decodes strictly into
// its k8s.io/api type (an unknown or misplaced field fails). The rendered
// DeviceClasses must equal what `gpuslice dra classes` prints, and the
// scheduler's KubeSchedulerConfiguration decodes strictly with
// k8s.io/kube-scheduler's types.
//
// Every object also passes a server-side dry-run on the test
// kube-apiserver (apiserver_test.go).
//
// It is a separate module so the main module does not depend on Helm (and
// the many modules Helm brings). What gpuslice prints is checked by running
// the binary built from the main module, as test/consumers does; the only
// import of the main module is internal/k8s/apitest (replace ../..), whose
// k8s.io versions (v0.37.2) are the ones Helm v3.22.0 needs too.
package helmchart

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/base64"
	"encoding/pem"
	"fmt"
	"math/big"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"helm.sh/helm/v3/pkg/chart"
	"helm.sh/helm/v3/pkg/chart/loader"
	"helm.sh/helm/v3/pkg/chartutil"
	"helm.sh/helm/v3/pkg/engine"
	"helm.sh/helm/v3/pkg/lint"
	"helm.sh/helm/v3/pkg/lint/support"
	"helm.sh/helm/v3/pkg/releaseutil"
	"sigs.k8s.io/yaml"

	"github.com/gpuslice/gpuslice/internal/k8s/apitest"
)

// root is the main module's directory; chartDir the chart under test.
const (
	root     = "../.."
	chartDir = root + "/deploy/helm/gpuslice"
)

// bin is the gpuslice binary built from this checkout.
var bin string

func TestMain(m *testing.M) {
	bin = os.Getenv("GPUSLICE_BIN")
	if bin == "" {
		dir, err := os.MkdirTemp("", "gpuslice-helmchart")
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		bin = filepath.Join(dir, "gpuslice")
		cmd := exec.Command("go", "build", "-mod=readonly", "-o", bin, "./cmd/gpuslice")
		cmd.Dir = root
		cmd.Env = append(os.Environ(), "GOFLAGS=-mod=readonly", "GOTOOLCHAIN=local")
		if out, err := cmd.CombinedOutput(); err != nil {
			fmt.Fprintf(os.Stderr, "building gpuslice: %v\n%s", err, out)
			os.RemoveAll(dir)
			os.Exit(1)
		}
		code := m.Run()
		os.RemoveAll(dir)
		os.Exit(code)
	}
	os.Exit(m.Run())
}

// overrides parses YAML values given on top of values.yaml.
func overrides(t *testing.T, y string) map[string]any {
	t.Helper()
	v := map[string]any{}
	y = strings.ReplaceAll(y, "CABUNDLE", testCABundle(t))
	if err := yaml.Unmarshal([]byte(y), &v); err != nil {
		t.Fatalf("test values: %v", err)
	}
	return v
}

// testCABundle is a self-signed CA certificate, base64 PEM, as a user
// would give in webhook.tls.caBundle.
func testCABundle(t *testing.T) string {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "test-ca"},
		NotBefore: time.Unix(0, 0), NotAfter: time.Unix(1<<33, 0), IsCA: true, BasicConstraintsValid: true,
		KeyUsage: x509.KeyUsageCertSign}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	return base64.StdEncoding.EncodeToString(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}))
}

func load(t *testing.T) *chart.Chart {
	t.Helper()
	c, err := loader.Load(chartDir)
	if err != nil {
		t.Fatalf("loading %s: %v", chartDir, err)
	}
	return c
}

// render is `helm template --namespace NS RELEASE chart -f over` through
// Helm's engine: it returns the rendered documents, or the render error.
func render(t *testing.T, release, ns string, over map[string]any) ([][]byte, error) {
	t.Helper()
	c := load(t)
	vals, err := chartutil.ToRenderValues(c, over, chartutil.ReleaseOptions{
		Name: release, Namespace: ns, Revision: 1, IsInstall: true,
	}, chartutil.DefaultCapabilities)
	if err != nil {
		return nil, err
	}
	files, err := engine.Render(c, vals)
	if err != nil {
		return nil, err
	}
	var all strings.Builder
	for name, body := range files {
		if strings.HasSuffix(name, ".tpl") || strings.HasSuffix(name, "NOTES.txt") {
			continue
		}
		all.WriteString("\n---\n# Source: " + name + "\n" + body)
	}
	var docs [][]byte
	for _, m := range releaseutil.SplitManifests(all.String()) {
		if strings.TrimSpace(stripComments(m)) == "" {
			continue
		}
		docs = append(docs, []byte(m))
	}
	return docs, nil
}

func stripComments(s string) string {
	var b strings.Builder
	for _, l := range strings.Split(s, "\n") {
		if !strings.HasPrefix(strings.TrimSpace(l), "#") {
			b.WriteString(l + "\n")
		}
	}
	return b.String()
}

// TestLint is `helm lint` (all of Helm's chart linters) with the default
// values and with each non-default values set the render tests use.
func TestLint(t *testing.T) {
	for name, over := range valueSets {
		t.Run(name, func(t *testing.T) {
			res := lint.All(chartDir, overrides(t, over), "gpuslice-system", false)
			for _, m := range res.Messages {
				if m.Severity > support.InfoSev {
					t.Errorf("helm lint: %s", m)
				}
			}
		})
	}
}

// valueSets are the values the chart is rendered with, on top of
// values.yaml: the defaults, then every mode and toggle.
var valueSets = map[string]string{
	"defaults": ``,
	"certManager": `
webhook:
  tls: {mode: certManager, certManager: {issuerRef: {name: cluster-ca, kind: ClusterIssuer}}}`,
	"secret": `
tenantIsolation: false
webhook:
  failurePolicy: Ignore
  tls: {mode: secret, secretName: my-tls, caBundle: CABUNDLE}`,
	"simulated-spread": `
image: {repository: registry.example.com/gpuslice, tag: v9.9.9, pullPolicy: Always}
imagePullSecrets: [{name: regcred}]
driver:
  simulate: dgx-a100
  metricsPort: 0
  kubeletDir: /var/lib/k0s/kubelet
  runtimeClassName: nvidia
  nodeSelector: {nvidia.com/gpu.present: "true"}
  resources: {limits: {memory: 256Mi}}
  extraArgs: [--mig-minors=/proc/driver/nvidia-caps/mig-minors]
  tenants: [team-a, team-b]
  noTenantNamespaces: [infra, batch-system]
  xidNoSchedule: [63, 92]
  migProfiles: [1g.5gb, 3g.20gb, 7g.40gb]
scheduler:
  placement: spread
  leaderElect: false
  clientConnection: {qps: 300, burst: 600}
  replicas: 2
  schedulerName: gpu-scheduler
  tolerations: [{key: node-role.kubernetes.io/control-plane, operator: Exists, effect: NoSchedule}]`,
	"driver-only": `
deviceClasses: {enabled: false}
webhook: {enabled: false}
scheduler: {enabled: false}`,
	"nothing": `
driver: {enabled: false}
deviceClasses: {enabled: false}
webhook: {enabled: false}
scheduler: {enabled: false}`,
}

// TestValuesRefused: a wrong mode or a missing required value fails the
// render with a message naming the value and what would be valid.
func TestValuesRefused(t *testing.T) {
	for _, tc := range []struct{ values, want string }{
		// values.schema.json: Helm refuses these before any template runs.
		{`webhook: {tls: {mode: manual}}`, `at '/webhook/tls/mode': value must be one of 'auto', 'certManager', 'secret'`},
		{`scheduler: {placement: fair}`, `at '/scheduler/placement': value must be one of 'binpack', 'spread'`},
		{`scheduler: {clientConnection: {qps: 0}}`, `at '/scheduler/clientConnection/qps'`},
		{`scheduler: {clientConnection: {burst: 1.5}}`, `at '/scheduler/clientConnection/burst'`},
		{`webhook: {tlss: {mode: auto}}`, `at '/webhook': additional properties 'tlss' not allowed`},
		{`driver: {kubeletdir: /var/lib/k0s/kubelet}`, `at '/driver': additional properties 'kubeletdir' not allowed`},
		{`driver: {memoryGrace: 30}`, `at '/driver/memoryGrace'`},
		{`driver: {kubeletDir: var/lib/kubelet}`, `at '/driver/kubeletDir'`},
		{`driver: {xidNoSchedule: [abc]}`, `at '/driver/xidNoSchedule/0'`},
		{`driver: {migProfiles: some}`, `at '/driver/migProfiles'`},
		{`driver: {migProfiles: [3g]}`, `at '/driver/migProfiles'`},
		{`driver: {noTenantNamespaces: [Team_A]}`, `at '/driver/noTenantNamespaces/0'`},
		// the templates' own checks (schema cannot say "required when").
		{`webhook: {tls: {mode: certManager}}`, `webhook.tls.certManager.issuerRef.name is required`},
		{`webhook: {tls: {mode: secret, caBundle: eA==}}`, `webhook.tls.secretName is required`},
		{`webhook: {tls: {mode: secret, secretName: x}}`, `webhook.tls.caBundle is required`},
	} {
		_, err := render(t, "r", "ns", overrides(t, tc.values))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("values %s: got error %v, want one saying %q", tc.values, err, tc.want)
		}
	}
}

// runGpuslice runs the binary and returns its stdout.
func runGpuslice(t *testing.T, args ...string) []byte {
	t.Helper()
	var out, errOut bytes.Buffer
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = &out, &errOut
	if err := cmd.Run(); err != nil {
		t.Fatalf("gpuslice %s: %v\n%s", strings.Join(args, " "), err, errOut.String())
	}
	return out.Bytes()
}

// engineWithClient renders with Helm's lookup answered by the API server.
func engineWithClient(c *chart.Chart, vals chartutil.Values, srv *apitest.Server) (map[string]string, error) {
	return engine.RenderWithClient(c, vals, srv.Config)
}
