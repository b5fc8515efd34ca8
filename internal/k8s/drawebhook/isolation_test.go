package drawebhook

import (
	"context"
	"encoding/pem"
	"fmt"
	"io"
	"log/slog"
	"net/http/httptest"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	admissionregv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/gpuslice/gpuslice/internal/alloc"
	"github.com/gpuslice/gpuslice/internal/k8s/apitest"
	"github.com/gpuslice/gpuslice/internal/k8s/dradriver"
	"github.com/gpuslice/gpuslice/internal/k8s/dranames"
)

// isolationCluster is a real kube-apiserver, the stock kube-scheduler,
// gpuslice's DeviceClasses, the webhook's ClaimPath registered as a
// mutating webhook (tenant read from the namespace's label), nodes of L4s
// publishing dradriver.SlicesFor(opts), and namespaces by tenant.
type isolationCluster struct {
	t        *testing.T
	ctx      context.Context
	cs       *kubernetes.Clientset
	tenantOf map[string]string // namespace → tenant
	gpuOf    map[string]string // pool/device → GPU uuid
}

func newIsolationCluster(t *testing.T, opts dradriver.Options, nodes, gpus int, tenantOf map[string]string) *isolationCluster {
	srv := apitest.Start(t)
	sched := apitest.StartScheduler(t, srv, apitest.SchedulerOptions{})
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("kube-scheduler log:\n%s", sched.Tail(6000))
		}
	})
	cs, err := kubernetes.NewForConfig(srv.Config)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	t.Cleanup(cancel)
	ts := httptest.NewTLSServer(Handler(slog.New(slog.NewTextHandler(io.Discard, nil)), "", ReadNamespace(cs), Copies{}))
	t.Cleanup(ts.Close)
	ca := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: ts.Certificate().Raw})
	fail, none := admissionregv1.Fail, admissionregv1.SideEffectClassNone
	url := ts.URL + ClaimPath
	hook := &admissionregv1.MutatingWebhookConfiguration{ObjectMeta: metav1.ObjectMeta{Name: "gpuslice-tenants"},
		Webhooks: []admissionregv1.MutatingWebhook{{
			Name:         "tenants.gpu.gpuslice.dev",
			ClientConfig: admissionregv1.WebhookClientConfig{URL: &url, CABundle: ca},
			Rules: []admissionregv1.RuleWithOperations{{Operations: []admissionregv1.OperationType{admissionregv1.Create},
				Rule: admissionregv1.Rule{APIGroups: []string{"resource.k8s.io"}, APIVersions: []string{"v1"}, Resources: []string{"resourceclaims", "resourceclaimtemplates"}}}},
			FailurePolicy:           &fail,
			SideEffects:             &none,
			AdmissionReviewVersions: []string{"v1"},
		}}}
	if _, err := cs.AdmissionregistrationV1().MutatingWebhookConfigurations().Create(ctx, hook, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	for _, dc := range dradriver.DeviceClasses() {
		if _, err := cs.ResourceV1().DeviceClasses().Create(ctx, &dc, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	for ns, tenant := range tenantOf {
		if err := srv.EnsureNamespace(ctx, ns); err != nil {
			t.Fatal(err)
		}
		if tenant == ns {
			continue
		}
		n, err := cs.CoreV1().Namespaces().Get(ctx, ns, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if n.Labels == nil {
			n.Labels = map[string]string{}
		}
		n.Labels[dranames.TenantKey] = tenant
		if _, err := cs.CoreV1().Namespaces().Update(ctx, n, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	c := &isolationCluster{t: t, ctx: ctx, cs: cs, tenantOf: tenantOf, gpuOf: map[string]string{}}
	for i := range nodes {
		name := fmt.Sprintf("node-%d", i)
		n := alloc.Node{Name: name}
		for g := range gpus {
			n.GPUs = append(n.GPUs, alloc.GPU{UUID: fmt.Sprintf("GPU-%s-%d", name, g), Index: g, Model: "L4", Healthy: true})
		}
		node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}, Status: corev1.NodeStatus{
			Capacity:    corev1.ResourceList{"cpu": resource.MustParse("64"), "memory": resource.MustParse("512Gi"), "pods": resource.MustParse("110")},
			Allocatable: corev1.ResourceList{"cpu": resource.MustParse("64"), "memory": resource.MustParse("512Gi"), "pods": resource.MustParse("110")}}}
		if _, err := srv.CreateReadyNode(ctx, node); err != nil {
			t.Fatal(err)
		}
		slices, err := dradriver.SlicesFor(n, 1, "580.65.06", nil, opts)
		if err != nil {
			t.Fatal(err)
		}
		for i := range slices {
			if _, err := cs.ResourceV1().ResourceSlices().Create(ctx, &slices[i], metav1.CreateOptions{}); err != nil {
				t.Fatalf("the API server refuses slice %s: %v", slices[i].Name, err)
			}
			for _, d := range slices[i].Spec.Devices {
				c.gpuOf[name+"/"+d.Name] = *d.Attributes["uuid"].StringValue
			}
		}
	}
	// The API server picks the webhook up within a second or so: wait
	// until a dry-run claim comes back with its tenant's toleration.
	for ns := range tenantOf {
		for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(200 * time.Millisecond) {
			got, err := cs.ResourceV1().ResourceClaims(ns).Create(ctx, sharedClaim(ns, "probe", "1Gi"), metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
			if err != nil {
				t.Fatal(err)
			}
			if len(got.Spec.Devices.Requests[0].Exactly.Tolerations) == 1 {
				break
			}
			if time.Now().After(deadline) {
				t.Fatal("the claim webhook was never called")
			}
		}
		break
	}
	return c
}

func sharedClaim(ns, name, memory string) *resourceapi.ResourceClaim {
	return &resourceapi.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: resourceapi.ResourceClaimSpec{Devices: resourceapi.DeviceClaim{Requests: []resourceapi.DeviceRequest{{Name: "gpu",
			Exactly: &resourceapi.ExactDeviceRequest{DeviceClassName: dranames.ClassShared, AllocationMode: resourceapi.DeviceAllocationModeExactCount, Count: 1,
				Capacity: &resourceapi.CapacityRequirements{Requests: map[resourceapi.QualifiedName]resource.Quantity{"memory": resource.MustParse(memory)}}}}}}}}
}

// run creates perNS claims of memory and their pods in every namespace,
// from two goroutines per namespace at once, waits until every pod is
// bound, and returns, per GPU, the tenants of the claims allocated on it
// (one entry per claim).
func (c *isolationCluster) run(perNS int, memory string) map[string][]string {
	c.t.Helper()
	var wg sync.WaitGroup
	errs := make(chan error, 2*len(c.tenantOf))
	for ns := range c.tenantOf {
		for w := range 2 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := w; i < perNS; i += 2 {
					name := fmt.Sprintf("w-%d", i)
					if _, err := c.cs.ResourceV1().ResourceClaims(ns).Create(c.ctx, sharedClaim(ns, name, memory), metav1.CreateOptions{}); err != nil {
						errs <- fmt.Errorf("claim %s/%s: %w", ns, name, err)
						return
					}
					cn := name
					pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns}, Spec: corev1.PodSpec{
						ResourceClaims: []corev1.PodResourceClaim{{Name: "gpu", ResourceClaimName: &cn}},
						Containers:     []corev1.Container{{Name: "c", Image: "x", Resources: corev1.ResourceRequirements{Claims: []corev1.ResourceClaim{{Name: "gpu"}}}}}}}
					if _, err := c.cs.CoreV1().Pods(ns).Create(c.ctx, pod, metav1.CreateOptions{}); err != nil {
						errs <- fmt.Errorf("pod %s/%s: %w", ns, name, err)
						return
					}
				}
			}()
		}
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		c.t.Fatal(err)
	}
	want := perNS * len(c.tenantOf)
	for {
		pods, err := c.cs.CoreV1().Pods("").List(c.ctx, metav1.ListOptions{})
		if err != nil {
			c.t.Fatal(err)
		}
		bound, pending := 0, []string{}
		for _, p := range pods.Items {
			if p.Spec.NodeName != "" {
				bound++
			} else {
				pending = append(pending, p.Namespace+"/"+p.Name)
			}
		}
		if bound == want {
			break
		}
		select {
		case <-c.ctx.Done():
			c.t.Fatalf("%d of %d pods bound; pending %v", bound, want, pending)
		case <-time.After(250 * time.Millisecond):
		}
	}
	onGPU := map[string][]string{}
	claims, err := c.cs.ResourceV1().ResourceClaims("").List(c.ctx, metav1.ListOptions{})
	if err != nil {
		c.t.Fatal(err)
	}
	for _, cl := range claims.Items {
		a := cl.Status.Allocation
		if a == nil || len(a.Devices.Results) != 1 {
			c.t.Fatalf("claim %s/%s bound but allocated %+v", cl.Namespace, cl.Name, a)
		}
		r := a.Devices.Results[0]
		gpu, ok := c.gpuOf[r.Pool+"/"+r.Device]
		if !ok {
			c.t.Fatalf("claim %s/%s: allocated %s/%s, not a published device", cl.Namespace, cl.Name, r.Pool, r.Device)
		}
		onGPU[gpu] = append(onGPU[gpu], c.tenantOf[cl.Namespace])
	}
	if n := len(claims.Items); n != want {
		c.t.Fatalf("%d claims, want %d", n, want)
	}
	return onGPU
}

// tenantsOn lists the distinct tenants of one GPU's claims.
func tenantsOn(claims []string) []string {
	seen := map[string]bool{}
	var out []string
	for _, t := range claims {
		if !seen[t] {
			seen[t] = true
			out = append(out, t)
		}
	}
	sort.Strings(out)
	return out
}

// The namespaces of the isolation tests: four tenants, one of them
// (team-d) over two namespaces through the gpuslice.dev/tenant label.
var isolationNamespaces = map[string]string{"team-a": "team-a", "team-b": "team-b", "team-c": "team-c", "team-d": "team-d", "team-d-batch": "team-d"}

// Tenant isolation with the STOCK kube-scheduler: three nodes of four L4s
// publish one tainted copy of each shared GPU per tenant; five namespaces
// (four tenants) create 8 claims of 1 GiB each with their pods from ten
// goroutines at once. Every pod binds (a tenant's claims, 16 GiB at most,
// fit one copy per node: at most 12 GPUs for 4 tenants on 3 nodes); read
// back from the API server's allocations, no GPU serves two tenants, each
// claim got its own tenant's copy, and each tenant's claims share GPUs (8
// or 16 claims on at most 3 GPUs). A claim tolerating another tenant is
// refused at create.
func TestStockSchedulerIsolatesTenants(t *testing.T) {
	c := newIsolationCluster(t, dradriver.Options{TenantIsolation: true, Tenants: []string{"team-a", "team-b", "team-c", "team-d"}}, 3, 4, isolationNamespaces)

	sneaky := sharedClaim("team-b", "sneaky", "1Gi")
	sneaky.Spec.Devices.Requests[0].Exactly.Tolerations = []resourceapi.DeviceToleration{dradriver.TenantToleration("team-a")}
	_, err := c.cs.ResourceV1().ResourceClaims("team-b").Create(c.ctx, sneaky, metav1.CreateOptions{})
	if err == nil || !strings.Contains(err.Error(), `tolerations[0]: tolerates tenant "team-a"; a claim of namespace tenant "team-b"`) {
		t.Fatalf("a claim tolerating another tenant: %v", err)
	}

	onGPU := c.run(8, "1Gi")
	perTenant := map[string]int{}
	shared := map[string]bool{}
	for gpu, claims := range onGPU {
		if ts := tenantsOn(claims); len(ts) != 1 {
			t.Errorf("GPU %s serves tenants %v", gpu, ts)
		}
		perTenant[claims[0]]++
		if len(claims) > 1 {
			shared[claims[0]] = true
		}
	}
	claims, err := c.cs.ResourceV1().ResourceClaims("").List(c.ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, cl := range claims.Items {
		r := cl.Status.Allocation.Devices.Results[0]
		tenant := c.tenantOf[cl.Namespace]
		if suffix := strings.TrimPrefix(dranames.SharedDeviceName(0, tenant), "gpu-0"); !strings.HasSuffix(r.Device, suffix) {
			t.Errorf("claim %s/%s (tenant %s) got device %s, not its tenant's copy", cl.Namespace, cl.Name, tenant, r.Device)
		}
	}
	for _, tenant := range []string{"team-a", "team-b", "team-c", "team-d"} {
		claims := 8
		if tenant == "team-d" {
			claims = 16
		}
		if perTenant[tenant] == 0 || perTenant[tenant] >= claims || !shared[tenant] {
			t.Errorf("tenant %s: %d claims on %d GPUs; same-tenant claims should share", tenant, claims, perTenant[tenant])
		}
	}
	t.Logf("GPUs per tenant: %v (of %d)", perTenant, 12)
}

// The same workload with isolation off (one untainted shared device per
// GPU, as dra-driver --tenant-isolation=false publishes): the stock
// scheduler puts several tenants on one GPU, so the check above can fail.
// (Four tenants of 8 claims: some node gets at least 11 of the 32 and
// packs them all on its first GPU, first fit, so at least two tenants meet
// there.)
func TestStockSchedulerMixesTenantsWithoutIsolation(t *testing.T) {
	c := newIsolationCluster(t, dradriver.Options{}, 3, 4, map[string]string{"team-a": "team-a", "team-b": "team-b", "team-c": "team-c", "team-d": "team-d"})
	onGPU := c.run(8, "1Gi")
	mixed := 0
	for gpu, claims := range onGPU {
		if ts := tenantsOn(claims); len(ts) > 1 {
			mixed++
			t.Logf("GPU %s serves tenants %v", gpu, ts)
		}
	}
	if mixed == 0 {
		t.Fatalf("no GPU serves two tenants without isolation: %v", onGPU)
	}
}
