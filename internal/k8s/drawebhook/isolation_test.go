package drawebhook

import (
	"context"
	"encoding/pem"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net/http/httptest"
	"slices"
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
	"github.com/gpuslice/gpuslice/internal/testkit"
)

// isolationCluster is a test's part of the package's real kube-apiserver
// and stock kube-scheduler (an apitest.Cluster whose group is the test's
// prefix): gpuslice's DeviceClasses, the webhook's ClaimPath registered
// as a mutating webhook for the test's namespaces (tenant read from the
// namespace's label), nodes of L4s publishing dradriver.SlicesFor(opts)
// (named with the prefix, the test's pods kept on them), and namespaces
// by tenant.
type isolationCluster struct {
	*apitest.Cluster
	t        *testing.T
	ctx      context.Context
	cs       *kubernetes.Clientset
	tenantOf map[string]string // namespace → tenant
	gpuOf    map[string]string // pool/device → GPU uuid
}

func newIsolationCluster(t *testing.T, prefix string, opts dradriver.Options, nodes, gpus int, tenantOf map[string]string) *isolationCluster {
	srv := apitest.Shared(t)
	sched := apitest.SharedScheduler(t, srv, apitest.SchedulerOptions{})
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("kube-scheduler log (all tests):\n%s", sched.Tail(6000))
		}
	})
	ac := apitest.NewCluster(t, srv, apitest.ClusterOptions{Namespaces: slices.Sorted(maps.Keys(tenantOf)), Group: prefix, Timeout: 4 * time.Minute})
	cs, ctx := ac.CS, ac.Ctx
	ts := httptest.NewTLSServer(Handler(slog.New(slog.NewTextHandler(io.Discard, nil)), "", ReadNamespace(cs), Copies{}))
	t.Cleanup(ts.Close)
	ca := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: ts.Certificate().Raw})
	fail, none := admissionregv1.Fail, admissionregv1.SideEffectClassNone
	url := ts.URL + ClaimPath
	hook := &admissionregv1.MutatingWebhookConfiguration{ObjectMeta: metav1.ObjectMeta{Name: prefix + "-gpuslice-tenants"},
		Webhooks: []admissionregv1.MutatingWebhook{{
			Name:         "tenants.gpu.gpuslice.dev",
			ClientConfig: admissionregv1.WebhookClientConfig{URL: &url, CABundle: ca},
			Rules: []admissionregv1.RuleWithOperations{{Operations: []admissionregv1.OperationType{admissionregv1.Create},
				Rule: admissionregv1.Rule{APIGroups: []string{"resource.k8s.io"}, APIVersions: []string{"v1"}, Resources: []string{"resourceclaims", "resourceclaimtemplates"}}}},
			NamespaceSelector:       onlyNamespaces(slices.Collect(maps.Keys(tenantOf))...),
			FailurePolicy:           &fail,
			SideEffects:             &none,
			AdmissionReviewVersions: []string{"v1"},
		}}}
	if _, err := cs.AdmissionregistrationV1().MutatingWebhookConfigurations().Create(ctx, hook, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	deleteOnCleanup(t, ctx, cs, hook) // the Cluster deletes the pods and claims
	for ns, tenant := range tenantOf {
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
	c := &isolationCluster{Cluster: ac, t: t, ctx: ctx, cs: cs, tenantOf: tenantOf, gpuOf: map[string]string{}}
	for i := range nodes {
		name := fmt.Sprintf("%s-node-%d", prefix, i)
		n := alloc.Node{Name: name}
		for g := range gpus {
			n.GPUs = append(n.GPUs, alloc.GPU{UUID: fmt.Sprintf("GPU-%s-%d", name, g), Index: g, Model: "L4", Healthy: true})
		}
		node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}, Status: corev1.NodeStatus{
			Capacity:    corev1.ResourceList{"cpu": resource.MustParse("64"), "memory": resource.MustParse("512Gi"), "pods": resource.MustParse("110")},
			Allocatable: corev1.ResourceList{"cpu": resource.MustParse("64"), "memory": resource.MustParse("512Gi"), "pods": resource.MustParse("110")}}}
		ac.AddNodeObject(node)
		sl, err := dradriver.SlicesFor(n, 1, "580.65.06", nil, opts)
		if err != nil {
			t.Fatal(err)
		}
		ac.CreateSlices(sl)
		for i := range sl {
			for _, d := range sl[i].Spec.Devices {
				c.gpuOf[name+"/"+d.Name] = *d.Attributes["uuid"].StringValue
			}
		}
	}
	// The API server picks the webhook up within a second or so: wait
	// until a dry-run claim comes back with its tenant's toleration.
	for ns := range tenantOf {
		testkit.Eventually(t, 30*time.Second, "the claim webhook called", func() (bool, string) {
			got, err := cs.ResourceV1().ResourceClaims(ns).Create(ctx, sharedClaim(ns, "probe", "1Gi"), metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
			if err != nil {
				t.Fatal(err)
			}
			return len(got.Spec.Devices.Requests[0].Exactly.Tolerations) == 1, "no toleration added"
		})
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
						Containers:     []corev1.Container{{Name: "c", Image: "x", Resources: corev1.ResourceRequirements{Claims: []corev1.ResourceClaim{{Name: "gpu"}}}}},
					}}
					c.SelectGroup(&pod.Spec)
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
	testkit.EventuallyCtx(c.t, c.ctx, fmt.Sprintf("%d pods bound", want), func() (bool, string) {
		bound, pending := 0, []string{}
		for ns := range c.tenantOf {
			pods, err := c.cs.CoreV1().Pods(ns).List(c.ctx, metav1.ListOptions{})
			if err != nil {
				c.t.Fatal(err)
			}
			for _, p := range pods.Items {
				if p.Spec.NodeName != "" {
					bound++
				} else {
					pending = append(pending, p.Namespace+"/"+p.Name)
				}
			}
		}
		return bound == want, fmt.Sprintf("%d of %d pods bound; pending %v", bound, want, pending)
	})
	onGPU := map[string][]string{}
	claims := c.claims()
	for _, cl := range claims {
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
	if n := len(claims); n != want {
		c.t.Fatalf("%d claims, want %d", n, want)
	}
	return onGPU
}

// claims lists the ResourceClaims of the test's namespaces.
func (c *isolationCluster) claims() []resourceapi.ResourceClaim {
	c.t.Helper()
	var out []resourceapi.ResourceClaim
	for ns := range c.tenantOf {
		list, err := c.cs.ResourceV1().ResourceClaims(ns).List(c.ctx, metav1.ListOptions{})
		if err != nil {
			c.t.Fatal(err)
		}
		out = append(out, list.Items...)
	}
	return out
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
	t.Parallel()
	c := newIsolationCluster(t, "iso", dradriver.Options{TenantIsolation: true, Tenants: []string{"team-a", "team-b", "team-c", "team-d"}}, 3, 4, isolationNamespaces)

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
	for _, cl := range c.claims() {
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
	t.Parallel()
	c := newIsolationCluster(t, "mix", dradriver.Options{}, 3, 4, map[string]string{"mix-a": "mix-a", "mix-b": "mix-b", "mix-c": "mix-c", "mix-d": "mix-d"})
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
