package schedtest

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/utils/ptr"

	"github.com/gpuslice/gpuslice/internal/alloc"
	"github.com/gpuslice/gpuslice/internal/k8s/apitest"
	"github.com/gpuslice/gpuslice/internal/k8s/draalloc"
	"github.com/gpuslice/gpuslice/internal/k8s/dradriver"
	"github.com/gpuslice/gpuslice/internal/k8s/dranames"
	"github.com/gpuslice/gpuslice/internal/testkit"
)

// quickstartDir holds the shapes of NVIDIA's quickstart and
// extended-resource examples (github.com/NVIDIA/k8s-dra-driver-gpu
// demo/specs) written out in our own form for gpuslice's classes: the same
// namespaces, requests, selectors, constraints, opaque configs, replica
// counts and extended-resource limits, with our own pods and containers
// (the header of each file says which example it follows).
const quickstartDir = "testdata/quickstart"

// qsEnv is the control plane the quickstart subtests share: one API
// server, the controllers a spec's Deployments, templates and namespace
// deletion need, and both schedulers running side by side (each takes
// only the pods that name it).
type qsEnv struct {
	srv *apitest.Server
	cs  *kubernetes.Clientset
}

// qsScheduler is one scheduler a spec runs under.
type qsScheduler struct {
	name          string // the subtest's name
	schedulerName string // the pods' spec.schedulerName
	sched         *apitest.Scheduler
}

// qsCheck checks a spec's own promise on what the API server holds once
// every pod is bound and every claim allocated.
type qsCheck func(t *testing.T, r *qsRun)

// The specs, each with the check of what it asks for beyond "bound and
// allocated", and the GPUs its nodes need.
var quickstartSpecs = []struct {
	file  string
	check qsCheck
	// gh200 adds a node of two GH200-96GB (the spec's own hardware: the
	// 1g.12gb profile does not exist on an A100) to the DGX-A100s.
	gh200 bool
}{
	{file: "gpu-test1.yaml", check: checkTest1},
	{file: "gpu-test2.yaml", check: checkTest2},
	{file: "gpu-test3.yaml", check: checkTest3},
	{file: "gpu-test4.yaml", check: checkTest4},
	{file: "gpu-test5.yaml", check: checkTest5},
	{file: "gpu-test6.yaml", check: checkTest6},
	{file: "extended-gpu-full.yaml", check: checkGPUFull},
	{file: "extended-mig-1g-12gb.yaml", check: checkMIG1g12gb, gh200: true},
	{file: "prioritized-list.yaml", check: checkPrioritizedList},
	{file: "prioritized-list-nodes.yaml", check: checkPrioritizedNodes, gh200: true},
	{file: "prioritized-list-constraint.yaml", check: checkPrioritizedConstraint},
	{file: "allocation-mode-all.yaml", check: checkAllocationModeAll},
}

// TestNVIDIAQuickstartOnBothSchedulers applies the shape of each of
// NVIDIA's quickstart examples (see quickstartDir) as a user would, on two
// fresh simulated DGX-A100 nodes (eight A100-40GB each, MIG-capable, not
// tainted, so the specs carry no tolerations), under the
// stock kube-scheduler's default profile and under gpuslice-scheduler
// (the pods' schedulerName set to it, the one change a user makes; the
// test also gives the pods a nodeSelector of the run's nodes, so that the
// specs run side by side, each on nodes of its own), and
// checks every pod is bound, every claim allocated, and the allocation
// keeps what the spec asks (distinct GPUs, one parent GPU for gpu-test4's
// MIG devices, a shared claim's pods on its node, the selectors, the
// opaque configs carried into the allocation, the extended resource's
// generated claim). The extended-resource pods have no claims of their
// own, so GpusliceDynamicResources hands them to the stock plugin it wraps:
// under gpuslice-scheduler they are allocated by the stock allocator on
// gpuslice's slices, not by internal/alloc. A spec that cannot be placed
// fails its subtest after two minutes with the pods' Unschedulable
// messages.
func TestNVIDIAQuickstartOnBothSchedulers(t *testing.T) {
	t.Parallel()
	bin := apitest.GpusliceSchedulerBinary(t)
	srv := apitest.Start(t)
	cs, err := kubernetes.NewForConfig(srv.Config)
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	for _, dc := range dradriver.DeviceClasses() {
		if _, err := cs.ResourceV1().DeviceClasses().Create(ctx, &dc, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	apitest.StartControllerManager(t, srv, apitest.ControllerManagerOptions{Controllers: append(slices.Clone(apitest.DefaultControllers), "namespace-controller")})
	env := &qsEnv{srv: srv, cs: cs}
	scheds := []*qsScheduler{
		{name: "kube-scheduler", schedulerName: corev1.DefaultSchedulerName, sched: apitest.StartScheduler(t, srv, apitest.SchedulerOptions{})},
		{name: "gpuslice-scheduler", schedulerName: SchedulerName, sched: apitest.StartScheduler(t, srv, apitest.SchedulerOptions{Binary: bin, Profiles: Profile})},
	}
	for i, spec := range quickstartSpecs {
		t.Run(spec.file, func(t *testing.T) {
			// The specs run side by side, each on nodes of its own (its
			// pods select them); the two schedulers' runs of one spec
			// share its namespace, so they take turns.
			t.Parallel()
			for j, s := range scheds {
				t.Run(s.name, func(t *testing.T) {
					start := time.Now()
					env.run(t, fmt.Sprintf("qs%d%d", i, j), spec.file, s, spec.gh200, spec.check)
					t.Logf("%s under %s: %.1fs", spec.file, s.name, time.Since(start).Seconds())
				})
			}
		})
	}
}

// qsRun is one spec under one scheduler.
type qsRun struct {
	ctx    context.Context
	cs     *kubernetes.Clientset
	ns     string
	pods   []corev1.Pod
	claims []*resourceapi.ResourceClaim
	// attrs are the published devices' attributes, by pool/device.
	attrs map[string]map[resourceapi.QualifiedName]resourceapi.DeviceAttribute
	snap  *draalloc.Snapshot
}

// run creates the nodes and the spec's objects, waits for the pods and
// claims, checks, and deletes it all again.
func (e *qsEnv) run(t *testing.T, prefix, file string, s *qsScheduler, gh200 bool, check qsCheck) {
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	objs := readSpec(t, filepath.Join(quickstartDir, file))

	// The run's nodes carry GroupLabel=prefix and its pods select it:
	// the other specs' runs, side by side, keep to their own nodes.
	var nodes []string
	for k := range 2 {
		nodes = append(nodes, e.addNode(t, ctx, prefix, fmt.Sprintf("%s-dgx-a100-%d", prefix, k), "A100-40GB", 8))
	}
	if gh200 {
		nodes = append(nodes, e.addNode(t, ctx, prefix, prefix+"-gh200", "GH200-96GB", 2))
	}
	selectRun := func(spec *corev1.PodSpec) {
		if spec.NodeSelector == nil {
			spec.NodeSelector = map[string]string{}
		}
		spec.NodeSelector[apitest.GroupLabel] = prefix
	}

	ns := ""
	var deviceClasses []string
	wantPods := 0
	defer func() {
		e.cleanup(t, ns, deviceClasses, nodes)
		if t.Failed() {
			t.Logf("%s log:\n%s", s.name, s.sched.Tail(4000))
		}
	}()
	for _, o := range objs {
		var err error
		switch o := o.(type) {
		case *corev1.Namespace:
			ns = o.Name
			_, err = e.cs.CoreV1().Namespaces().Create(ctx, o, metav1.CreateOptions{})
			if err == nil {
				// No token controller runs: the ServiceAccount admission
				// wants the default account to exist.
				sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "default", Namespace: o.Name}}
				if _, err = e.cs.CoreV1().ServiceAccounts(o.Name).Create(ctx, sa, metav1.CreateOptions{}); apierrors.IsAlreadyExists(err) {
					err = nil
				}
			}
		case *resourceapi.DeviceClass:
			deviceClasses = append(deviceClasses, o.Name)
			_, err = e.cs.ResourceV1().DeviceClasses().Create(ctx, o, metav1.CreateOptions{})
		case *resourceapi.ResourceClaimTemplate:
			_, err = e.cs.ResourceV1().ResourceClaimTemplates(o.Namespace).Create(ctx, o, metav1.CreateOptions{})
		case *resourceapi.ResourceClaim:
			_, err = e.cs.ResourceV1().ResourceClaims(o.Namespace).Create(ctx, o, metav1.CreateOptions{})
		case *corev1.Pod:
			o.Spec.SchedulerName = s.schedulerName
			selectRun(&o.Spec)
			wantPods++
			_, err = e.cs.CoreV1().Pods(o.Namespace).Create(ctx, o, metav1.CreateOptions{})
		case *appsv1.Deployment:
			o.Spec.Template.Spec.SchedulerName = s.schedulerName
			selectRun(&o.Spec.Template.Spec)
			wantPods += int(ptr.Deref(o.Spec.Replicas, 1))
			_, err = e.cs.AppsV1().Deployments(o.Namespace).Create(ctx, o, metav1.CreateOptions{})
		default:
			t.Fatalf("%s: no creation for %T", file, o)
		}
		if err != nil {
			t.Fatalf("%s: creating %T: %v", file, o, err)
		}
	}
	if ns == "" {
		t.Fatalf("%s creates no namespace", file)
	}

	r := &qsRun{ctx: ctx, cs: e.cs, ns: ns}
	// Every pod bound and every claim allocated.
	testkit.EventuallyCtx(t, ctx, fmt.Sprintf("%s under %s: every pod bound and every claim allocated", file, s.name), func() (bool, string) {
		pl, err := e.cs.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		cl, err := e.cs.ResourceV1().ResourceClaims(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		bound, allocated := 0, 0
		var waiting []string
		for _, p := range pl.Items {
			if p.Spec.NodeName != "" {
				bound++
				continue
			}
			for _, c := range p.Status.Conditions {
				if c.Type == corev1.PodScheduled && c.Status == corev1.ConditionFalse {
					waiting = append(waiting, fmt.Sprintf("pod %s: %s: %s", p.Name, c.Reason, c.Message))
				}
			}
		}
		for _, c := range cl.Items {
			if c.Status.Allocation != nil {
				allocated++
			}
		}
		if len(pl.Items) == wantPods && bound == wantPods && allocated == len(cl.Items) && len(cl.Items) > 0 {
			r.pods = pl.Items
			for i := range cl.Items {
				r.claims = append(r.claims, &cl.Items[i])
			}
			return true, ""
		}
		return false, fmt.Sprintf("%d of %d pods bound, %d of %d claims allocated:\n%s",
			bound, wantPods, allocated, len(cl.Items), strings.Join(waiting, "\n"))
	})

	// The allocations, read back with the published devices.
	sl, err := e.cs.ResourceV1().ResourceSlices().List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	r.attrs = map[string]map[resourceapi.QualifiedName]resourceapi.DeviceAttribute{}
	var slicePtrs []*resourceapi.ResourceSlice
	for i := range sl.Items {
		slicePtrs = append(slicePtrs, &sl.Items[i])
		for _, d := range sl.Items[i].Spec.Devices {
			r.attrs[sl.Items[i].Spec.Pool.Name+"/"+d.Name] = d.Attributes
		}
	}
	for _, c := range r.claims {
		for _, res := range c.Status.Allocation.Devices.Results {
			if res.Driver != dranames.DriverName {
				t.Errorf("claim %s: device %s/%s of driver %s", c.Name, res.Pool, res.Device, res.Driver)
			}
			if r.attrs[res.Pool+"/"+res.Device] == nil {
				t.Errorf("claim %s: device %s/%s is not published", c.Name, res.Pool, res.Device)
			}
		}
	}
	// The GPUs are physically possible: no device twice, no MIG overlap.
	snap, err := draalloc.Read(slicePtrs, r.claims, nil)
	if err != nil {
		t.Fatalf("reading the allocations: %v", err)
	}
	if err := snap.Check(draalloc.Policy("binpack"), nil); err != nil {
		t.Errorf("the allocations break gpuslice's rules: %v", err)
	}
	r.snap = snap
	check(t, r)
}

// addNode creates a ready node of gpus GPUs of the model with the
// ResourceSlices the driver publishes for it (MIG devices included on a
// MIG-capable GPU) and returns its name.
func (e *qsEnv) addNode(t *testing.T, ctx context.Context, group, name, model string, gpus int) string {
	t.Helper()
	n := alloc.Node{Name: name}
	for i := range gpus {
		n.GPUs = append(n.GPUs, alloc.GPU{UUID: fmt.Sprintf("GPU-%s-%d", name, i), Index: i, Model: model, Healthy: true})
	}
	rl := corev1.ResourceList{"cpu": resource.MustParse("128"), "memory": resource.MustParse("1Ti"), "pods": resource.MustParse("110")}
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{apitest.GroupLabel: group}},
		Status: corev1.NodeStatus{Capacity: rl, Allocatable: rl}}
	if _, err := e.srv.CreateReadyNode(ctx, node); err != nil {
		t.Fatal(err)
	}
	sl, err := dradriver.Slices(n, 1, "580.65.06", nil)
	if err != nil {
		t.Fatal(err)
	}
	for i := range sl {
		if _, err := e.cs.ResourceV1().ResourceSlices().Create(ctx, &sl[i], metav1.CreateOptions{}); err != nil {
			t.Fatalf("slice %s: %v", sl[i].Name, err)
		}
	}
	return name
}

// cleanup deletes the namespace (the namespace controller deletes what is
// in it; with no kubelet the test confirms the pods gone), the spec's
// DeviceClasses, and the nodes with their slices, and waits for the
// namespace to be gone so the next scheduler's run can create it again.
func (e *qsEnv) cleanup(t *testing.T, ns string, deviceClasses, nodes []string) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if ns != "" {
		if err := e.cs.CoreV1().Namespaces().Delete(ctx, ns, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
			t.Errorf("deleting namespace %s: %v", ns, err)
		}
		err := apitest.Poll(ctx, func() (bool, string) {
			if _, err := e.cs.CoreV1().Namespaces().Get(ctx, ns, metav1.GetOptions{}); apierrors.IsNotFound(err) {
				return true, ""
			}
			pl, _ := e.cs.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
			if pl != nil {
				for _, p := range pl.Items {
					_ = e.cs.CoreV1().Pods(ns).Delete(ctx, p.Name, metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)})
				}
			}
			return false, "namespace " + ns + " still there"
		})
		if err != nil {
			t.Errorf("namespace %s still there after 2 minutes: %v", ns, err)
			return
		}
	}
	for _, dc := range deviceClasses {
		if err := e.cs.ResourceV1().DeviceClasses().Delete(ctx, dc, metav1.DeleteOptions{}); err != nil {
			t.Errorf("deleting DeviceClass %s: %v", dc, err)
		}
	}
	for _, n := range nodes {
		if err := e.cs.ResourceV1().ResourceSlices().DeleteCollection(ctx, metav1.DeleteOptions{},
			metav1.ListOptions{LabelSelector: "gpuslice.dev/node=" + n}); err != nil {
			t.Errorf("deleting the slices of %s: %v", n, err)
		}
		if err := e.cs.CoreV1().Nodes().Delete(ctx, n, metav1.DeleteOptions{}); err != nil {
			t.Errorf("deleting node %s: %v", n, err)
		}
	}
}

// readSpec decodes a multi-document YAML file into typed objects, in order.
func readSpec(t *testing.T, path string) []runtime.Object {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	rd := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(data)))
	var out []runtime.Object
	for {
		doc, err := rd.Read()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		if onlyComments(doc) {
			continue
		}
		obj, _, err := scheme.Codecs.UniversalDeserializer().Decode(doc, nil, nil)
		if err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		out = append(out, obj)
	}
	return out
}

func onlyComments(doc []byte) bool {
	for _, l := range strings.Split(string(doc), "\n") {
		if l = strings.TrimSpace(l); l != "" && !strings.HasPrefix(l, "#") {
			return false
		}
	}
	return true
}

// attr is a string or int attribute of an allocated device, as text.
func (r *qsRun) attr(res resourceapi.DeviceRequestAllocationResult, name string) string {
	a := r.attrs[res.Pool+"/"+res.Device][resourceapi.QualifiedName(name)]
	switch {
	case a.StringValue != nil:
		return *a.StringValue
	case a.IntValue != nil:
		return fmt.Sprint(*a.IntValue)
	}
	return ""
}

// claimOf is the claim a pod's entry names (by resourceClaimName, or the
// one generated for it from a template).
func (r *qsRun) claimOf(t *testing.T, p corev1.Pod, entry string) *resourceapi.ResourceClaim {
	t.Helper()
	name := ""
	for _, pc := range p.Spec.ResourceClaims {
		if pc.Name == entry && pc.ResourceClaimName != nil {
			name = *pc.ResourceClaimName
		}
	}
	for _, s := range p.Status.ResourceClaimStatuses {
		if s.Name == entry && s.ResourceClaimName != nil {
			name = *s.ResourceClaimName
		}
	}
	for _, c := range r.claims {
		if c.Name == name {
			return c
		}
	}
	t.Fatalf("pod %s: no claim for its entry %s", p.Name, entry)
	return nil
}

// reservedFor says whether the claim is reserved for the pod.
func reservedFor(c *resourceapi.ResourceClaim, p corev1.Pod) bool {
	for _, rf := range c.Status.ReservedFor {
		if rf.Resource == "pods" && rf.UID == p.UID {
			return true
		}
	}
	return false
}

// wholeGPUs checks that each pod's claim entry holds exactly one whole GPU
// (type gpu) and that no two pods hold the same one; it returns the
// results in pod order.
func (r *qsRun) wholeGPUs(t *testing.T, entry string, want int) []resourceapi.DeviceRequestAllocationResult {
	t.Helper()
	if len(r.pods) != want {
		t.Fatalf("%d pods, want %d", len(r.pods), want)
	}
	seen := map[string]string{}
	var out []resourceapi.DeviceRequestAllocationResult
	for _, p := range r.pods {
		c := r.claimOf(t, p, entry)
		res := c.Status.Allocation.Devices.Results
		if len(res) != 1 {
			t.Fatalf("pod %s: claim %s has %d devices, want 1", p.Name, c.Name, len(res))
		}
		if typ := r.attr(res[0], "type"); typ != dranames.TypeGPU {
			t.Errorf("pod %s: device %s is of type %q, want a whole GPU", p.Name, res[0].Device, typ)
		}
		k := res[0].Pool + "/" + res[0].Device
		if q, ok := seen[k]; ok {
			t.Errorf("pods %s and %s both hold %s", q, p.Name, k)
		}
		seen[k] = p.Name
		if !reservedFor(c, p) {
			t.Errorf("claim %s is not reserved for pod %s", c.Name, p.Name)
		}
		out = append(out, res[0])
	}
	return out
}

// gpu-test1: two pods, each its own claim from the template, each one
// distinct whole GPU.
func checkTest1(t *testing.T, r *qsRun) {
	r.wholeGPUs(t, "gpu", 2)
	if len(r.claims) != 2 {
		t.Errorf("%d claims, want 2 (one per pod)", len(r.claims))
	}
}

// gpu-test2: one pod, two containers sharing its one claim of one GPU.
func checkTest2(t *testing.T, r *qsRun) {
	r.wholeGPUs(t, "shared-gpu", 1)
	if len(r.claims) != 1 {
		t.Errorf("%d claims, want 1", len(r.claims))
	}
}

// gpu-test3: one claim, two pods sharing its GPU: both reserved for it
// and bound to the node the GPU is on.
func checkTest3(t *testing.T, r *qsRun) {
	if len(r.claims) != 1 || len(r.pods) != 2 {
		t.Fatalf("%d claims and %d pods, want 1 and 2", len(r.claims), len(r.pods))
	}
	c := r.claims[0]
	res := c.Status.Allocation.Devices.Results
	if len(res) != 1 || r.attr(res[0], "type") != dranames.TypeGPU {
		t.Fatalf("claim %s: %+v, want one whole GPU", c.Name, res)
	}
	for _, p := range r.pods {
		if r.claimOf(t, p, "shared-gpu").Name != c.Name {
			t.Errorf("pod %s does not use claim %s", p.Name, c.Name)
		}
		if !reservedFor(c, p) {
			t.Errorf("claim %s is not reserved for pod %s", c.Name, p.Name)
		}
		if p.Spec.NodeName != res[0].Pool {
			t.Errorf("pod %s is on %s, the shared GPU %s on %s", p.Name, p.Spec.NodeName, res[0].Device, res[0].Pool)
		}
	}
}

// gpu-test4: four pods (a Deployment), each claim four MIG devices
// (1g.5gb twice, 2g.10gb, 3g.20gb) on one parent GPU, no device twice.
func checkTest4(t *testing.T, r *qsRun) {
	if len(r.pods) != 4 || len(r.claims) != 4 {
		t.Fatalf("%d pods and %d claims, want 4 and 4", len(r.pods), len(r.claims))
	}
	want := map[string]string{"mig-1g-5gb-0": "1g.5gb", "mig-1g-5gb-1": "1g.5gb", "mig-2g-10gb": "2g.10gb", "mig-3g-20gb": "3g.20gb"}
	seen := map[string]string{}
	parents := map[string]string{}
	for _, p := range r.pods {
		c := r.claimOf(t, p, "mig-devices")
		res := c.Status.Allocation.Devices.Results
		if len(res) != 4 {
			t.Errorf("claim %s: %d devices, want 4", c.Name, len(res))
			continue
		}
		parent := r.attr(res[0], "parentUUID")
		for _, d := range res {
			if got := r.attr(d, "profile"); got != want[d.Request] || r.attr(d, "type") != dranames.TypeMIG {
				t.Errorf("claim %s request %s: device %s of profile %q, want MIG %s", c.Name, d.Request, d.Device, got, want[d.Request])
			}
			if pu := r.attr(d, "parentUUID"); pu != parent || pu == "" {
				t.Errorf("claim %s: devices on parents %q and %q, matchAttribute parentUUID wants one", c.Name, parent, pu)
			}
			if d.Pool != p.Spec.NodeName {
				t.Errorf("pod %s on %s holds %s/%s", p.Name, p.Spec.NodeName, d.Pool, d.Device)
			}
			k := d.Pool + "/" + d.Device
			if q, ok := seen[k]; ok {
				t.Errorf("claims %s and %s both hold %s", q, c.Name, k)
			}
			seen[k] = c.Name
		}
		if q, ok := parents[parent]; ok {
			// Two sets of 1g+1g+2g+3g (7 memory slices) do not fit on one A100.
			t.Errorf("claims %s and %s on one parent GPU %s", q, c.Name, parent)
		}
		parents[parent] = c.Name
	}
}

// gpu-test5: one pod, one claim of two distinct whole GPUs, the
// time-slicing GpuConfig for ts-gpu and the MPS one for mps-gpu carried
// into the allocation for the driver.
func checkTest5(t *testing.T, r *qsRun) {
	if len(r.pods) != 1 || len(r.claims) != 1 {
		t.Fatalf("%d pods and %d claims, want 1 and 1", len(r.pods), len(r.claims))
	}
	c := r.claims[0]
	res := c.Status.Allocation.Devices.Results
	if len(res) != 2 || res[0].Device == res[1].Device || r.attr(res[0], "type") != dranames.TypeGPU || r.attr(res[1], "type") != dranames.TypeGPU {
		t.Fatalf("claim %s: %+v, want two distinct whole GPUs", c.Name, res)
	}
	strategy := map[string]string{}
	for _, cfg := range c.Status.Allocation.Devices.Config {
		if cfg.Opaque == nil || cfg.Opaque.Driver != dranames.DriverName {
			t.Errorf("claim %s: config %+v, want opaque for %s", c.Name, cfg, dranames.DriverName)
			continue
		}
		var gc struct {
			Kind    string `json:"kind"`
			Sharing struct {
				Strategy string `json:"strategy"`
			} `json:"sharing"`
		}
		if err := json.Unmarshal(cfg.Opaque.Parameters.Raw, &gc); err != nil {
			t.Errorf("claim %s: config: %v", c.Name, err)
		}
		for _, q := range cfg.Requests {
			strategy[q] = gc.Kind + "/" + gc.Sharing.Strategy
		}
		if cfg.Source != resourceapi.AllocationConfigSourceClaim {
			t.Errorf("claim %s: config source %s, want FromClaim", c.Name, cfg.Source)
		}
	}
	if strategy["ts-gpu"] != "GpuConfig/TimeSlicing" || strategy["mps-gpu"] != "GpuConfig/MPS" {
		t.Errorf("claim %s: allocation configs %v, want ts-gpu GpuConfig/TimeSlicing and mps-gpu GpuConfig/MPS", c.Name, strategy)
	}
}

// gpu-test6: four pods, each one whole A100 of index 0, 2, 4 or 6, no GPU
// twice.
func checkTest6(t *testing.T, r *qsRun) {
	for _, res := range r.wholeGPUs(t, "a100", 4) {
		if idx := r.attr(res, "index"); !slices.Contains([]string{"0", "2", "4", "6"}, idx) {
			t.Errorf("device %s/%s has index %s, the selector wants 0, 2, 4 or 6", res.Pool, res.Device, idx)
		}
		if pn := strings.ToLower(r.attr(res, "productName")); !strings.Contains(pn, "a100") {
			t.Errorf("device %s/%s is a %q, the selector wants an A100", res.Pool, res.Device, pn)
		}
	}
}

// extendedClaim checks the pod's generated claim for its extended
// resource: the pod's extendedResourceClaimStatus names it, it is
// reserved for the pod and holds one device, which it returns.
func (r *qsRun) extendedClaim(t *testing.T, resourceName string) resourceapi.DeviceRequestAllocationResult {
	t.Helper()
	if len(r.pods) != 1 || len(r.claims) != 1 {
		t.Fatalf("%d pods and %d claims, want 1 and 1 (the generated one)", len(r.pods), len(r.claims))
	}
	p, c := r.pods[0], r.claims[0]
	st := p.Status.ExtendedResourceClaimStatus
	if st == nil || st.ResourceClaimName != c.Name {
		t.Fatalf("pod %s: extendedResourceClaimStatus %+v, want claim %s", p.Name, st, c.Name)
	}
	if len(st.RequestMappings) != 1 || st.RequestMappings[0].ResourceName != resourceName {
		t.Errorf("pod %s: request mappings %+v, want one for %s", p.Name, st.RequestMappings, resourceName)
	}
	if !reservedFor(c, p) {
		t.Errorf("claim %s is not reserved for pod %s", c.Name, p.Name)
	}
	res := c.Status.Allocation.Devices.Results
	if len(res) != 1 || res[0].Pool != p.Spec.NodeName {
		t.Fatalf("claim %s: %+v, want one device on %s", c.Name, res, p.Spec.NodeName)
	}
	return res[0]
}

// extended-gpu-full: nvidia.com/gpu: 1 is one whole GPU.
func checkGPUFull(t *testing.T, r *qsRun) {
	res := r.extendedClaim(t, dranames.LegacyGPUResource)
	if typ := r.attr(res, "type"); typ != dranames.TypeGPU {
		t.Errorf("device %s is of type %q, want a whole GPU", res.Device, typ)
	}
}

// extended-mig-1g-12gb: nvidia.com/mig-1g.12gb: 1 is one 1g.12gb MIG
// device (on the GH200 node).
func checkMIG1g12gb(t *testing.T, r *qsRun) {
	res := r.extendedClaim(t, "nvidia.com/mig-1g.12gb")
	if typ, prof := r.attr(res, "type"), r.attr(res, "profile"); typ != dranames.TypeMIG || prof != "1g.12gb" {
		t.Errorf("device %s is %s %q, want MIG 1g.12gb", res.Device, typ, prof)
	}
}

// prioritized-list: no 80 GB GPU on the A100-40GB nodes, so each pod's
// claim gets its list's second subrequest: two distinct 1g.5gb devices,
// named gpu/small in the result, on the pod's node.
func checkPrioritizedList(t *testing.T, r *qsRun) {
	if len(r.pods) != 2 || len(r.claims) != 2 {
		t.Fatalf("%d pods and %d claims, want 2 and 2", len(r.pods), len(r.claims))
	}
	seen := map[string]bool{}
	for _, p := range r.pods {
		c := r.claimOf(t, p, "gpu")
		res := c.Status.Allocation.Devices.Results
		if len(res) != 2 {
			t.Fatalf("claim %s: %d devices, want 2", c.Name, len(res))
		}
		for _, d := range res {
			if d.Request != "gpu/small" || r.attr(d, "profile") != "1g.5gb" || d.Pool != p.Spec.NodeName {
				t.Errorf("claim %s: %s/%s for %s (profile %q), want 1g.5gb devices for gpu/small on %s", c.Name, d.Pool, d.Device, d.Request, r.attr(d, "profile"), p.Spec.NodeName)
			}
			if seen[d.Pool+"/"+d.Device] {
				t.Errorf("device %s/%s allocated twice", d.Pool, d.Device)
			}
			seen[d.Pool+"/"+d.Device] = true
		}
	}
}

// prioritized-list-nodes: both pods on the GH200 node, each with one
// whole GH200 for gpu/large (the node where the first subrequest fits
// scores highest on both schedulers).
func checkPrioritizedNodes(t *testing.T, r *qsRun) {
	res := r.wholeGPUs(t, "gpu", 2)
	for i, d := range res {
		if d.Request != "gpu/large" || r.attr(d, "model") != "GH200-96GB" || d.Pool != r.pods[i].Spec.NodeName {
			t.Errorf("pod %s on %s: %s/%s (%s) for %s, want a GH200 for gpu/large", r.pods[i].Name, r.pods[i].Spec.NodeName, d.Pool, d.Device, r.attr(d, "model"), d.Request)
		}
	}
}

// prioritized-list-constraint: the list's first subrequest (a second
// 4g.20gb) cannot share the first's GPU, so it is more/three: a 3g.20gb
// on big's GPU, with the claim's config for more/three in the allocation.
func checkPrioritizedConstraint(t *testing.T, r *qsRun) {
	if len(r.pods) != 1 || len(r.claims) != 1 {
		t.Fatalf("%d pods and %d claims, want 1 and 1", len(r.pods), len(r.claims))
	}
	c := r.claims[0]
	got := map[string]resourceapi.DeviceRequestAllocationResult{}
	for _, d := range c.Status.Allocation.Devices.Results {
		got[d.Request] = d
	}
	big, more := got["big"], got["more/three"]
	if len(got) != 2 || r.attr(big, "profile") != "4g.20gb" || r.attr(more, "profile") != "3g.20gb" {
		t.Fatalf("claim %s: %+v, want big a 4g.20gb and more/three a 3g.20gb", c.Name, c.Status.Allocation.Devices.Results)
	}
	if r.attr(big, "parentUUID") != r.attr(more, "parentUUID") {
		t.Errorf("claim %s: devices on GPUs %s and %s, the constraint wants one", c.Name, r.attr(big, "parentUUID"), r.attr(more, "parentUUID"))
	}
	cfg := c.Status.Allocation.Devices.Config
	if len(cfg) != 1 || !slices.Equal(cfg[0].Requests, []string{"more/three"}) || cfg[0].Source != resourceapi.AllocationConfigSourceClaim {
		t.Errorf("claim %s: config %+v, want the claim's config for more/three", c.Name, cfg)
	}
}

// allocation-mode-all: pod whole holds every whole GPU of index 4 to 7 of
// its node, pod migs every 1g.5gb placement (seven) of GPU 0 of its node.
func checkAllocationModeAll(t *testing.T, r *qsRun) {
	if len(r.pods) != 2 || len(r.claims) != 2 {
		t.Fatalf("%d pods and %d claims, want 2 and 2", len(r.pods), len(r.claims))
	}
	for _, p := range r.pods {
		entry := map[string]string{"whole": "gpus", "migs": "migs"}[p.Name]
		c := r.claimOf(t, p, entry)
		var got []string
		for _, d := range c.Status.Allocation.Devices.Results {
			if d.Request != entry || d.Pool != p.Spec.NodeName {
				t.Errorf("claim %s: %s/%s for %s, want devices for %s on %s", c.Name, d.Pool, d.Device, d.Request, entry, p.Spec.NodeName)
			}
			got = append(got, r.attr(d, "type")+" "+r.attr(d, "index")+" "+r.attr(d, "profile")+" "+r.attr(d, "start"))
		}
		slices.Sort(got)
		var want []string
		if p.Name == "whole" {
			for i := 4; i < 8; i++ {
				want = append(want, fmt.Sprintf("gpu %d  ", i))
			}
		} else {
			for s := range 7 {
				want = append(want, fmt.Sprintf("mig 0 1g.5gb %d", s))
			}
		}
		if !slices.Equal(got, want) {
			t.Errorf("pod %s: claim %s holds %q, want %q", p.Name, c.Name, got, want)
		}
	}
}
