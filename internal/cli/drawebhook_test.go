package cli

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// `gpuslice dra-webhook --tls-self-signed` serves AdmissionReviews over
// TLS with a certificate for the names asked, and denies a bad claim with
// the field's path.
func TestDRAWebhookCommand(t *testing.T) {
	dir := t.TempDir()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
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
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		resp, err = client.Post("https://"+addr+"/validate", "application/json", strings.NewReader(body))
		if err == nil || time.Now().After(deadline) {
			break
		}
	}
	if err != nil {
		t.Fatalf("webhook not serving (stderr: %s): %v", errOut.String(), err)
	}
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
	var err error
	for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		var b []byte
		if b, err = os.ReadFile(path); err == nil && len(b) > 0 {
			return b, nil
		}
	}
	return nil, err
}
