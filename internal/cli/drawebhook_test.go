package cli

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gpuslice/gpuslice/internal/testkit"
)

// `gpuslice dra-webhook --tls-self-signed` serves AdmissionReviews over
// TLS with a certificate for the names asked, and denies a bad claim with
// the field's path.
func TestDRAWebhookCommand(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	addr := freePort(t)
	var out, errOut syncBuffer
	cmd := New(&out, &errOut)
	cmd.SetArgs([]string{"dra-webhook", "--tls-self-signed", dir, "--dns-name", "gpuslice-webhook.gpuslice.svc", "--listen", addr})
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- cmd.ExecuteContext(ctx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("dra-webhook: %v", err)
		}
	}()
	pemBytes, err := waitFile(filepath.Join(dir, "tls.crt"))
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(pemBytes)
	client := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, ServerName: "gpuslice-webhook.gpuslice.svc"}}, Timeout: 5 * time.Second}
	body := `{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"uid":"1","operation":"CREATE",
"resource":{"group":"resource.k8s.io","version":"v1","resource":"resourceclaims"},
"object":{"apiVersion":"resource.k8s.io/v1","kind":"ResourceClaim","metadata":{"name":"c","namespace":"a"},
"spec":{"devices":{"requests":[{"name":"gpu","exactly":{"deviceClassName":"shared.gpuslice.dev"}}],
"config":[{"opaque":{"driver":"gpu.gpuslice.dev","parameters":{"apiVersion":"gpu.gpuslice.dev/v1alpha1","kind":"SliceConfig","mode":"mps","threadPercent":500}}}]}}}}}`
	var resp *http.Response
	testkit.Eventually(t, 20*time.Second, "the webhook to serve", func() (bool, string) {
		resp, err = client.Post("https://"+addr+"/validate", "application/json", strings.NewReader(body))
		return err == nil, fmt.Sprintf("%v (stderr: %s)", err, errOut.String())
	})
	defer resp.Body.Close()
	var review struct {
		Response struct {
			Allowed bool
			Status  struct{ Message string } `json:"status"`
		} `json:"response"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&review); err != nil {
		t.Fatal(err)
	}
	if review.Response.Allowed || !strings.Contains(review.Response.Status.Message, "spec.devices.config[0].opaque.parameters.threadPercent 500: valid is 1..100") {
		t.Fatalf("review %+v", review)
	}
	if !strings.Contains(errOut.String(), "caBundle=") {
		t.Errorf("no caBundle printed: %s", errOut.String())
	}
}

func TestDRAWebhookNeedsTLS(t *testing.T) {
	if msg := runErr(t, "dra-webhook"); !strings.Contains(msg, "--tls-cert and --tls-key are required") {
		t.Fatalf("got %q", msg)
	}
}

func waitFile(path string) ([]byte, error) {
	var b []byte
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	err := testkit.Wait(ctx, func() (bool, string) {
		var err error
		if b, err = os.ReadFile(path); err != nil {
			return false, err.Error()
		}
		return len(b) > 0, path + " is empty"
	})
	return b, err
}
