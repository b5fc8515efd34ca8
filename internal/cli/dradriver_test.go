package cli

import (
	"bytes"
	"context"
	"encoding/base64"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes"

	"github.com/gpuslice/gpuslice/internal/k8s/apitest"
	"github.com/gpuslice/gpuslice/internal/k8s/dradriver"
	"github.com/gpuslice/gpuslice/internal/k8s/dranames"
	"github.com/gpuslice/gpuslice/internal/testkit"
)

// `gpuslice dra-driver` wires the plugin to a real kube-apiserver: on
// simulated GPUs (dgx-a100) on a ready Node it publishes the node's
// ResourceSlices through the kubelet-plugin helper — nine, plus the
// tenants' copies of the shared GPUs: --tenants and every namespace's
// tenant (by label or name), following a namespace created later, none
// for the system namespaces, --no-tenant-namespaces or a namespace
// labelled gpuslice.dev/tenant-copies=false (withdrawn when it is so
// relabelled, unless a claim holds it; back when the label goes) —,
// with MIG devices under binding conditions (the default), opens the
// registration socket the kubelet watches, taints a GPU on a fault
// written to its fault directory by `gpuslice dra simulate-fault` and
// untaints it on recovery, and stops cleanly on cancel.
func TestDRADriverCommand(t *testing.T) {
	t.Parallel()
	srv := apitest.Start(t)
	if _, err := srv.CreateReadyNode(t.Context(), &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "gpu-1"}}); err != nil {
		t.Fatal(err)
	}
	dir, err := os.MkdirTemp("", "dracli")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	kc := filepath.Join(dir, "kubeconfig")
	b64 := base64.StdEncoding.EncodeToString
	tc := srv.Config.TLSClientConfig
	conf := fmt.Sprintf(`apiVersion: v1
kind: Config
current-context: t
clusters: [{name: t, cluster: {server: %q, certificate-authority-data: %s}}]
users: [{name: t, user: {client-certificate-data: %s, client-key-data: %s}}]
contexts: [{name: t, context: {cluster: t, user: t}}]
`, srv.URL, b64(tc.CAData), b64(tc.CertData), b64(tc.KeyData))
	if err := os.WriteFile(kc, []byte(conf), 0o600); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	if err := srv.EnsureNamespace(ctx, "ml"); err != nil {
		t.Fatal(err)
	}
	cs, err := kubernetes.NewForConfig(srv.Config)
	if err != nil {
		t.Fatal(err)
	}
	ml, err := cs.CoreV1().Namespaces().Get(ctx, "ml", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	ml.Labels[dranames.TenantKey] = "team-ml"
	if _, err := cs.CoreV1().Namespaces().Update(ctx, ml, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	// The driver logs to errOut while the test reads it.
	var out bytes.Buffer
	errOut := &syncBuffer{}
	cmd := New(&out, errOut)
	cmd.SetArgs([]string{"dra-driver", "--simulate", "dgx-a100", "--node", "gpu-1", "--kubeconfig", kc,
		"--state-dir", filepath.Join(dir, "state"), "--registrar-dir", filepath.Join(dir, "reg"), "--cdi-dir", filepath.Join(dir, "cdi"),
		"--mps-root", filepath.Join(dir, "mps"), "--metrics-listen", "127.0.0.1:0", "--tenants", "team-a,team-b",
		"--no-tenant-namespaces", "infra"})
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- cmd.ExecuteContext(runCtx) }()

	gvr := schema.GroupVersionResource{Group: "resource.k8s.io", Version: "v1", Resource: "resourceslices"}
	// published reports whether every tenant has its copy of GPU 7's
	// shared device, and no other copies are published.
	published := func(tenants ...string) (bool, int) {
		list, err := srv.Client.Resource(gvr).List(ctx, metav1.ListOptions{FieldSelector: "spec.nodeName=gpu-1"})
		if err != nil {
			t.Fatal(err)
		}
		names := map[string]bool{}
		copies := 0
		for _, s := range list.Items {
			devs, _, _ := unstructured.NestedSlice(s.Object, "spec", "devices")
			for _, d := range devs {
				name, _, _ := unstructured.NestedString(d.(map[string]any), "name")
				names[name] = true
				if strings.HasPrefix(name, "gpu-7-shared-t-") {
					copies++
				}
			}
		}
		for _, tn := range tenants {
			if !names[dranames.SharedDeviceName(7, tn)] {
				return false, len(list.Items)
			}
		}
		return copies == len(tenants), len(list.Items)
	}
	if err := srv.EnsureNamespace(ctx, "infra"); err != nil {
		t.Fatal(err)
	}
	// The API server's own namespaces get no copies (default does), nor
	// does infra (--no-tenant-namespaces).
	tenants := []string{"team-a", "team-b", "team-ml", "default"}
	testkit.EventuallyCtx(t, ctx, "the node's slices with the tenants' copies and the registration socket", func() (bool, string) {
		select {
		case err := <-done:
			t.Fatalf("dra-driver ended: %v\n%s", err, errOut.String())
		default:
		}
		ok, n := published(tenants...)
		_, sockErr := os.Stat(filepath.Join(dir, "reg", "gpu.gpuslice.dev-reg.sock"))
		// the counters and one per GPU, copies in it
		return ok && n == 9 && sockErr == nil, fmt.Sprintf("%d slices published (copies for %v: %v), socket: %v\n%s", n, tenants, ok, sockErr, errOut.String())
	})
	// --mig-binding-conditions is on by default: MIG devices wait for
	// gpuslice.dev/mig-ready, and no other device does.
	list, err := srv.Client.Resource(gvr).List(ctx, metav1.ListOptions{FieldSelector: "spec.nodeName=gpu-1"})
	if err != nil {
		t.Fatal(err)
	}
	migs := 0
	for _, it := range list.Items {
		devs, _, _ := unstructured.NestedSlice(it.Object, "spec", "devices")
		for _, d := range devs {
			dm, _ := d.(map[string]any)
			typ, _, _ := unstructured.NestedString(dm, "attributes", "type", "string")
			conds, _, _ := unstructured.NestedStringSlice(dm, "bindingConditions")
			if (typ == "mig") != (len(conds) == 1 && conds[0] == "gpuslice.dev/mig-ready") {
				t.Fatalf("device %v (type %s): bindingConditions %v", dm["name"], typ, conds)
			}
			if typ == "mig" {
				migs++
			}
		}
	}
	if migs == 0 {
		t.Fatal("no MIG device published")
	}
	if err := srv.EnsureNamespace(ctx, "late"); err != nil {
		t.Fatal(err)
	}
	testkit.EventuallyCtx(t, ctx, "copies for namespace late", func() (bool, string) {
		ok, _ := published(append(tenants, "late")...)
		return ok, errOut.String()
	})
	// A claim in ml holds team-ml's copy of GPU 7 (allocated as the stock
	// scheduler writes it); ml is then relabelled team-ml2, so no namespace
	// names team-ml any more: its copy stays published while the claim
	// holds it (dropping it would free the GPU's counters under the claim),
	// and team-ml2 gets copies too.
	held := &resourceapi.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Name: "held", Namespace: "ml"},
		Spec: resourceapi.ResourceClaimSpec{Devices: resourceapi.DeviceClaim{Requests: []resourceapi.DeviceRequest{{Name: "gpu",
			Exactly: &resourceapi.ExactDeviceRequest{DeviceClassName: dranames.ClassShared, AllocationMode: resourceapi.DeviceAllocationModeExactCount,
				Count: 1, Tolerations: []resourceapi.DeviceToleration{dradriver.TenantToleration("team-ml")}}}}}}}
	held, err = cs.ResourceV1().ResourceClaims("ml").Create(ctx, held, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	held.Status.Allocation = &resourceapi.AllocationResult{Devices: resourceapi.DeviceAllocationResult{Results: []resourceapi.DeviceRequestAllocationResult{{
		Request: "gpu", Driver: dranames.DriverName, Pool: "gpu-1", Device: dranames.SharedDeviceName(7, "team-ml")}}}}
	if _, err := cs.ResourceV1().ResourceClaims("ml").UpdateStatus(ctx, held, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if ml, err = cs.CoreV1().Namespaces().Get(ctx, "ml", metav1.GetOptions{}); err != nil {
		t.Fatal(err)
	}
	ml.Labels[dranames.TenantKey] = "team-ml2"
	if _, err := cs.CoreV1().Namespaces().Update(ctx, ml, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	testkit.EventuallyCtx(t, ctx, "team-ml's held copy and team-ml2's copies after relabelling ml", func() (bool, string) {
		ok, _ := published(append(tenants, "late", "team-ml2")...)
		return ok, errOut.String()
	})
	// Relabelled gpuslice.dev/tenant-copies=false, late loses its copies
	// and ml its tenant team-ml2's; team-ml's, which the claim holds,
	// stays. Without the label, late's copies return.
	copiesLabel := func(name, value string) {
		ns, err := cs.CoreV1().Namespaces().Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if value == "" {
			delete(ns.Labels, dranames.TenantCopiesKey)
		} else {
			ns.Labels[dranames.TenantCopiesKey] = value
		}
		if _, err := cs.CoreV1().Namespaces().Update(ctx, ns, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	waitFor := func(what string, want []string) {
		t.Helper()
		testkit.EventuallyCtx(t, ctx, fmt.Sprintf("%s: copies for exactly %v", what, want), func() (bool, string) {
			ok, _ := published(want...)
			return ok, errOut.String()
		})
	}
	copiesLabel("late", "false")
	copiesLabel("ml", "false")
	waitFor("late and ml labelled tenant-copies=false", tenants)
	copiesLabel("late", "")
	waitFor("late's label removed", append(tenants, "late"))
	// MPS devices get the simulated control daemon: a link to this
	// (multicall) binary in the state directory.
	link, err := os.Stat(filepath.Join(dir, "state", "bin", "nvidia-cuda-mps-control"))
	self, _ := os.Executable()
	if me, serr := os.Stat(self); err != nil || serr != nil || !os.SameFile(link, me) {
		t.Fatalf("the simulated MPS control binary: %v %v, want a link to %s", err, serr, self)
	}
	// A fault asked from outside the process (the fault directory in
	// --state-dir) taints GPU 3's devices NoExecute; its recovery
	// untaints them.
	tainted := func() bool {
		list, err := srv.Client.Resource(gvr).List(ctx, metav1.ListOptions{FieldSelector: "spec.nodeName=gpu-1"})
		if err != nil {
			t.Fatal(err)
		}
		for _, s := range list.Items {
			devs, _, _ := unstructured.NestedSlice(s.Object, "spec", "devices")
			for _, d := range devs {
				dm, _ := d.(map[string]any)
				if dm["name"] != "gpu-3" {
					continue
				}
				taints, _, _ := unstructured.NestedSlice(dm, "taints")
				for _, tn := range taints {
					tm, _ := tn.(map[string]any)
					if tm["key"] == dranames.TaintKey && tm["value"] == "79" && tm["effect"] == "NoExecute" {
						return true
					}
				}
			}
		}
		return false
	}
	for _, step := range []struct {
		args    []string
		out     string
		tainted bool
	}{
		{[]string{"--gpu", "3", "--xid", "79"}, "XID 79 on GPU 3 (GPU has fallen off the bus, fatal: the GPU is unhealthy)", true},
		{[]string{"--gpu", "3", "--recover"}, "GPU 3 recovered", false},
	} {
		var fout, ferr bytes.Buffer
		fc := New(&fout, &ferr)
		fc.SetArgs(append([]string{"dra", "simulate-fault", "--state-dir", filepath.Join(dir, "state"), "--timeout", "20s"}, step.args...))
		if err := fc.ExecuteContext(ctx); err != nil || strings.TrimSpace(fout.String()) != step.out {
			t.Fatalf("simulate-fault %v: %v, printed %q, want %q", step.args, err, fout.String(), step.out)
		}
		testkit.EventuallyCtx(t, ctx, fmt.Sprintf("after simulate-fault %v: GPU 3 tainted %v", step.args, step.tainted), func() (bool, string) {
			return tainted() == step.tainted, errOut.String()
		})
	}
	stop()
	if err := <-done; err != nil {
		t.Fatalf("dra-driver after cancel: %v", err)
	}
	if !strings.Contains(errOut.String(), "gpuslice DRA driver started") {
		t.Fatalf("log: %s", errOut.String())
	}

	cmd = New(&out, errOut)
	cmd.SetArgs([]string{"dra-driver", "--node", ""})
	if err := cmd.Execute(); err == nil || !strings.Contains(err.Error(), "--node") {
		t.Fatalf("without a node: %v", err)
	}
	for arg, want := range map[string]string{
		"92,x": `--xid-noschedule: entry 2 "x": want a positive XID number such as 92, or "none"`,
		"48":   "--xid-noschedule: XID 48 (double-bit ECC error) is fatal and always taints NoExecute",
	} {
		cmd = New(&out, errOut)
		cmd.SetArgs([]string{"dra-driver", "--node", "gpu-1", "--xid-noschedule", arg})
		if err := cmd.Execute(); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("--xid-noschedule %s: %v, want %q", arg, err, want)
		}
	}
}
