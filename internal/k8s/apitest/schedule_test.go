package apitest_test

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	utiljson "k8s.io/apimachinery/pkg/util/json"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/yaml"

	"github.com/gpuslice/gpuslice/internal/catalog"
	"github.com/gpuslice/gpuslice/internal/k8s/apitest"
	"github.com/gpuslice/gpuslice/internal/model"
	"github.com/gpuslice/gpuslice/internal/plan"
	"github.com/gpuslice/gpuslice/internal/render"
	"github.com/gpuslice/gpuslice/internal/spec"
	"github.com/gpuslice/gpuslice/internal/testkit"
)

// scheduleInputs are the specs whose renders must schedule as planned.
var scheduleInputs = []string{
	"../../../examples/gpuslice.yaml",
	"../../../examples/compose-timeslicing.yaml",
	"../../../examples/compose-mig.yaml",
	"testdata/two-tenants-timeslicing.yaml",
}

// The rendered workloads schedule exactly as planned on the real control
// plane: the stock kube-scheduler v1.36.3 binds every pod of the rendered
// Deployments to Nodes labelled and tainted as the rendered Karpenter
// NodePools make them, whose capacity is what the rendered device-plugin
// config advertises for the planned GPUs (kubernetes target), or allocates
// every rendered ResourceClaim against ResourceSlices describing the
// planned devices as NVIDIA's DRA driver publishes them (dra target). Per
// pool, the nodes hold the workloads' replicas in the plan's numbers (node
// names are interchangeable), tenants that take replicas of a shared
// resource are on separate nodes wherever the plan keeps them apart, and
// every DRA claim got a device of the planned kind.
//
// The inputs run side by side on one control plane of the test's own
// (its objects are real, in the namespaces the renders name, which the
// package's dry-run tests on the shared one must find empty) under one
// stock kube-scheduler: each run's nodes are named after it (RUN-node)
// and labelled apitest.GroupLabel=RUN, and its pods select that label
// beside the rendered pool's nodeSelector, so a run's pods land only on
// its nodes. The inputs' namespaces differ; an input's two targets share
// them and take turns, the first clearing its pods and claims when it
// ends.
func TestRenderedWorkloadsScheduleAsPlanned(t *testing.T) {
	t.Parallel()
	srv := apitest.Start(t)
	apitest.StartScheduler(t, srv, apitest.SchedulerOptions{})
	for i, in := range scheduleInputs {
		t.Run(strings.TrimSuffix(filepath.Base(in), ".yaml"), func(t *testing.T) {
			t.Parallel()
			for _, target := range []string{"kubernetes", "dra"} {
				t.Run(target, func(t *testing.T) {
					s, p := readPlan(t, in)
					if len(p.Unplaced) > 0 {
						t.Fatalf("the plan leaves %d replica(s) unplaced", len(p.Unplaced))
					}
					c := newCluster(t, srv, fmt.Sprintf("render%d-%s", i, target))
					c.createNodes(s, p, target == "kubernetes")
					if target == "dra" {
						c.publishDevices(p)
					}
					out, err := render.Render(target, s, p)
					if err != nil {
						t.Fatal(err)
					}
					pods := c.applyAndCreatePods(out)
					bound := c.waitBound(pods)
					checkPlacement(t, p, bound)
					if target == "kubernetes" {
						checkTenantsApart(t, p, bound)
					} else {
						c.checkClaims(p, bound)
					}
				})
			}
		})
	}
}

func readPlan(t *testing.T, path string) (*spec.Spec, *plan.Plan) {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	s, diags := spec.Read(filepath.Base(path), data, "")
	if err := diags.Err(); err != nil {
		t.Fatal(err)
	}
	p, err := plan.Make(s, plan.Options{})
	if err != nil {
		t.Fatal(err)
	}
	return s, p
}

// cluster is one run's part of the API server, seen through a typed
// client: its nodes are named RUN-<planned name> and carry
// apitest.GroupLabel=RUN, and its pods select them.
type cluster struct {
	*apitest.Cluster
	t   *testing.T
	run string
	// devices maps a ResourceSlice device ("node/device") to what it is.
	devices map[string]sliceDevice
	// namespaces are those the run's pods are in (cleared when it ends).
	namespaces []string
}

type sliceDevice struct {
	node, uuid, parentUUID, profile string
}

func newCluster(t *testing.T, srv *apitest.Server, run string) *cluster {
	c := &cluster{t: t, run: run, devices: map[string]sliceDevice{}}
	c.Cluster = apitest.NewCluster(t, srv, apitest.ClusterOptions{Group: run})
	t.Cleanup(func() {
		if len(c.namespaces) > 0 {
			c.Clear(c.namespaces...)
		}
	})
	return c
}

// node is the run's name of a planned node.
func (c *cluster) node(planned string) string { return c.run + "-" + planned }

// objects decodes a multi-document YAML render.
func objects(t *testing.T, data []byte) []*unstructured.Unstructured {
	t.Helper()
	var out []*unstructured.Unstructured
	r := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(data)))
	for {
		doc, err := r.Read()
		if err == io.EOF {
			return out
		} else if err != nil {
			t.Fatal(err)
		}
		// JSON numbers that are integers decode as int64, as the API
		// machinery's converters expect.
		js, err := yaml.YAMLToJSON(doc)
		if err != nil {
			t.Fatal(err)
		}
		var m map[string]any
		if err := utiljson.Unmarshal(js, &m); err != nil {
			t.Fatal(err)
		}
		if len(m) > 0 {
			out = append(out, &unstructured.Unstructured{Object: m})
		}
	}
}

// nodePoolShape is what the rendered NodePool puts on a pool's nodes.
type nodePoolShape struct {
	labels map[string]string
	taints []corev1.Taint
}

func nodePools(t *testing.T, s *model.Spec, p *plan.Plan) map[string]nodePoolShape {
	out, err := render.Render("karpenter", s, p)
	if err != nil {
		t.Fatal(err)
	}
	shapes := map[string]nodePoolShape{}
	for _, o := range objects(t, out) {
		var np struct {
			Spec struct {
				Template struct {
					Metadata struct {
						Labels map[string]string `json:"labels"`
					} `json:"metadata"`
					Spec struct {
						Taints []corev1.Taint `json:"taints"`
					} `json:"spec"`
				} `json:"template"`
			} `json:"spec"`
		}
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(o.Object, &np); err != nil {
			t.Fatal(err)
		}
		labels := np.Spec.Template.Metadata.Labels
		shapes[labels[plan.PoolLabel]] = nodePoolShape{labels: labels, taints: np.Spec.Template.Spec.Taints}
	}
	return shapes
}

// dpConfig is the part of NVIDIA's device-plugin config (api/config/v1)
// that decides which resources a node advertises.
type dpConfig struct {
	Flags struct {
		MigStrategy string `json:"migStrategy"`
	} `json:"flags"`
	Sharing struct {
		TimeSlicing *dpReplicated `json:"timeSlicing"`
		MPS         *dpReplicated `json:"mps"`
	} `json:"sharing"`
}

type dpReplicated struct {
	RenameByDefault bool `json:"renameByDefault"`
	Resources       []struct {
		Name     string `json:"name"`
		Rename   string `json:"rename"`
		Replicas int    `json:"replicas"`
	} `json:"resources"`
}

// advertised is what the device plugin advertises for one device whose
// unshared resource is name, under config c: the plugin's rules — a
// replicated resource gives `replicas` of itself, renamed to rename, or to
// name + ".shared" under renameByDefault.
func (c dpConfig) advertised(name string) (string, int) {
	rr := c.Sharing.TimeSlicing
	if c.Sharing.MPS != nil {
		rr = c.Sharing.MPS
	}
	if rr == nil {
		return name, 1
	}
	for _, r := range rr.Resources {
		if r.Name != name {
			continue
		}
		switch {
		case r.Rename != "":
			return r.Rename, r.Replicas
		case rr.RenameByDefault:
			return name + ".shared", r.Replicas
		}
		return name, r.Replicas
	}
	return name, 1
}

func devicePluginConfigs(t *testing.T, s *model.Spec, p *plan.Plan) map[string]dpConfig {
	out, err := render.Render("nvidia-device-plugin", s, p)
	if err != nil {
		t.Fatal(err)
	}
	cfgs := map[string]dpConfig{}
	for _, o := range objects(t, out) {
		data, _, _ := unstructured.NestedStringMap(o.Object, "data")
		for pool, text := range data {
			var c dpConfig
			if err := yaml.Unmarshal([]byte(text), &c); err != nil {
				t.Fatalf("device-plugin config of pool %s: %v", pool, err)
			}
			cfgs[pool] = c
		}
	}
	return cfgs
}

// createNodes creates the plan's nodes, shaped by the rendered NodePools,
// with the rendered device-plugin config's resources when devicePlugin.
func (c *cluster) createNodes(s *model.Spec, p *plan.Plan, devicePlugin bool) {
	t := c.t
	shapes := nodePools(t, s, p)
	cfgs := devicePluginConfigs(t, s, p)
	cat := catalog.Default()
	for _, pp := range p.Pools {
		shape, ok := shapes[pp.Name]
		if !ok {
			shape = nodePoolShape{labels: map[string]string{plan.PoolLabel: pp.Name, render.DevicePluginConfigLabel: pp.Name}}
		}
		cpu, mem := "96", "512Gi"
		if it, err := cat.InstanceType(pp.InstanceType); err == nil {
			cpu, mem = strconv.Itoa(it.VCPU), fmt.Sprintf("%dMi", int64(it.MemoryGiB*1024))
		}
		byNode := map[string][]plan.GPUPlan{}
		var names []string
		for _, g := range pp.GPUs {
			if _, ok := byNode[g.Node]; !ok {
				names = append(names, g.Node)
			}
			byNode[g.Node] = append(byNode[g.Node], g)
		}
		cfg := cfgs[pp.Name]
		for _, name := range names {
			res := corev1.ResourceList{"cpu": resource.MustParse(cpu), "memory": resource.MustParse(mem), "pods": resource.MustParse("110")}
			if devicePlugin {
				counts := map[string]int64{}
				for _, g := range byNode[name] {
					if !g.MIG {
						n, k := cfg.advertised("nvidia.com/gpu")
						counts[n] += int64(k)
						continue
					}
					if cfg.Flags.MigStrategy != "mixed" {
						t.Fatalf("pool %s: GPU %s/%d has MIG on but the device-plugin config's migStrategy is %q", pp.Name, name, g.Index, cfg.Flags.MigStrategy)
					}
					for _, in := range g.Instances {
						n, k := cfg.advertised("nvidia.com/mig-" + strings.ReplaceAll(in.Profile, "+", "."))
						counts[n] += int64(k)
					}
				}
				for n, k := range counts {
					res[corev1.ResourceName(n)] = *resource.NewQuantity(k, resource.DecimalSI)
				}
			}
			labels := map[string]string{corev1.LabelHostname: c.node(name)}
			for k, v := range shape.labels {
				labels[k] = v
			}
			if pp.InstanceType != "" {
				labels[corev1.LabelInstanceTypeStable] = pp.InstanceType
			}
			node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: c.node(name), Labels: labels},
				Spec:   corev1.NodeSpec{Taints: shape.taints},
				Status: corev1.NodeStatus{Capacity: res, Allocatable: res}}
			c.AddNodeObject(node)
		}
	}
}

const nvidiaDriver = "gpu.nvidia.com"

// publishDevices creates a ResourceSlice per planned node with the devices
// NVIDIA's DRA driver publishes for its planned GPUs: a whole GPU (type
// gpu) or, with MIG on, each planned MIG instance (type mig, profile,
// parentUUID), with productName, uuid and memory capacity; in GPU order.
func (c *cluster) publishDevices(p *plan.Plan) {
	t := c.t
	cat := catalog.Default()
	for _, pp := range p.Pools {
		g, err := cat.GPU(pp.GPU)
		if err != nil {
			t.Fatal(err)
		}
		product := g.ID
		if len(g.ProductNames) > 0 {
			product = g.ProductNames[0]
		}
		slices := map[string]*resourcev1.ResourceSlice{}
		var order []string
		for _, gp := range pp.GPUs {
			node := c.node(gp.Node)
			sl := slices[node]
			if sl == nil {
				sl = &resourcev1.ResourceSlice{ObjectMeta: metav1.ObjectMeta{Name: node + "-gpu.nvidia.com"},
					Spec: resourcev1.ResourceSliceSpec{Driver: nvidiaDriver, NodeName: ptr(node),
						Pool: resourcev1.ResourcePool{Name: node, ResourceSliceCount: 1}}}
				slices[node] = sl
				order = append(order, node)
			}
			str := func(s string) resourcev1.DeviceAttribute { return resourcev1.DeviceAttribute{StringValue: ptr(s)} }
			if !gp.MIG {
				name := fmt.Sprintf("gpu-%d", gp.Index)
				sl.Spec.Devices = append(sl.Spec.Devices, resourcev1.Device{Name: name,
					Attributes: map[resourcev1.QualifiedName]resourcev1.DeviceAttribute{
						"type": str("gpu"), "uuid": str(gp.UUID), "productName": str(product)},
					Capacity: map[resourcev1.QualifiedName]resourcev1.DeviceCapacity{
						"memory": {Value: *resource.NewQuantity(g.MemoryMiB<<20, resource.BinarySI)}}})
				c.devices[node+"/"+name] = sliceDevice{node: node, uuid: gp.UUID}
				continue
			}
			for _, in := range gp.Instances {
				prof, err := g.Profile(in.Profile)
				if err != nil {
					t.Fatal(err)
				}
				name := fmt.Sprintf("gpu-%d-mig-%s-%d", gp.Index, strings.NewReplacer(".", "-", "+", "-").Replace(in.Profile), in.Start)
				uuid := fmt.Sprintf("MIG-%s-%d-%d", node, gp.Index, in.Start)
				sl.Spec.Devices = append(sl.Spec.Devices, resourcev1.Device{Name: name,
					Attributes: map[resourcev1.QualifiedName]resourcev1.DeviceAttribute{
						"type": str("mig"), "uuid": str(uuid), "parentUUID": str(gp.UUID),
						"profile": str(in.Profile), "productName": str(product)},
					Capacity: map[resourcev1.QualifiedName]resourcev1.DeviceCapacity{
						"memory":          {Value: *resource.NewQuantity(prof.MemoryMiB<<20, resource.BinarySI)},
						"multiprocessors": {Value: *resource.NewQuantity(int64(prof.SMs), resource.DecimalSI)}}})
				c.devices[node+"/"+name] = sliceDevice{node: node, uuid: uuid, parentUUID: gp.UUID, profile: in.Profile}
			}
		}
		for _, n := range order {
			c.CreateSlices([]resourcev1.ResourceSlice{*slices[n]})
		}
	}
}

func ptr[T any](v T) *T { return &v }

// driverDeviceClasses are the DeviceClasses NVIDIA's DRA driver installs.
const driverDeviceClasses = `
apiVersion: resource.k8s.io/v1
kind: DeviceClass
metadata: {name: gpu.nvidia.com}
spec:
  selectors:
  - cel: {expression: "device.driver == 'gpu.nvidia.com' && device.attributes['gpu.nvidia.com'].type == 'gpu'"}
---
apiVersion: resource.k8s.io/v1
kind: DeviceClass
metadata: {name: mig.nvidia.com}
spec:
  selectors:
  - cel: {expression: "device.driver == 'gpu.nvidia.com' && device.attributes['gpu.nvidia.com'].type == 'mig'"}
`

// applyAndCreatePods applies every rendered object and creates each
// Deployment's pods from its template (no controller manager runs), in
// the render's order. It returns the pods' namespace/name.
func (c *cluster) applyAndCreatePods(out []byte) []string {
	t := c.t
	objs := objects(t, out)
	hasClasses := slices.ContainsFunc(objs, func(o *unstructured.Unstructured) bool { return o.GetKind() == "DeviceClass" })
	if !hasClasses && slices.ContainsFunc(objs, func(o *unstructured.Unstructured) bool {
		return strings.HasPrefix(o.GetAPIVersion(), "resource.k8s.io/")
	}) {
		for _, err := range c.Srv.Apply(c.Ctx, []byte(driverDeviceClasses)) {
			t.Fatal(err)
		}
	}
	for _, err := range c.Srv.Apply(c.Ctx, out) {
		t.Fatal(err)
	}
	var pods []string
	for _, o := range objs {
		if o.GetKind() != "Deployment" {
			continue
		}
		replicas, _, _ := unstructured.NestedInt64(o.Object, "spec", "replicas")
		tmpl, _, _ := unstructured.NestedMap(o.Object, "spec", "template")
		for i := range replicas {
			var pod corev1.Pod
			if err := runtime.DefaultUnstructuredConverter.FromUnstructured(tmpl, &pod); err != nil {
				t.Fatal(err)
			}
			pod.Name, pod.Namespace = fmt.Sprintf("%s-%d", o.GetName(), i), o.GetNamespace()
			c.SelectGroup(&pod.Spec)
			if err := c.Srv.EnsureNamespace(c.Ctx, pod.Namespace); err != nil {
				t.Fatal(err)
			}
			if !slices.Contains(c.namespaces, pod.Namespace) {
				c.namespaces = append(c.namespaces, pod.Namespace)
			}
			created, err := c.CS.CoreV1().Pods(pod.Namespace).Create(c.Ctx, &pod, metav1.CreateOptions{})
			if err != nil {
				t.Fatalf("pod %s/%s: %v", pod.Namespace, pod.Name, err)
			}
			c.claimsFromTemplates(created)
			pods = append(pods, pod.Namespace+"/"+pod.Name)
		}
	}
	if len(pods) == 0 {
		t.Fatal("the render has no Deployments")
	}
	return pods
}

// waitBound waits until every pod is bound and returns them; a pod that
// stays unbound fails the test with the scheduler's reason.
func (c *cluster) waitBound(names []string) []corev1.Pod {
	t := c.t
	// The scheduler binds these in well under a second each; a pod it
	// cannot place is retried with backoff and stays unbound.
	var out []corev1.Pod
	testkit.Eventually(t, 30*time.Second, fmt.Sprintf("every one of %d pods bound", len(names)), func() (bool, string) {
		out = nil
		var pending []string
		for _, nn := range names {
			ns, name, _ := strings.Cut(nn, "/")
			pod := c.Pod(ns, name)
			if pod.Spec.NodeName == "" {
				why := "not tried yet"
				for _, cond := range pod.Status.Conditions {
					if cond.Type == corev1.PodScheduled {
						why = cond.Message
					}
				}
				pending = append(pending, nn+": "+why)
			}
			out = append(out, *pod)
		}
		return len(pending) == 0, fmt.Sprintf("%d of %d pods were never bound:\n  %s", len(pending), len(names), strings.Join(pending, "\n  "))
	})
	return out
}

// checkPlacement compares, per pool, the multiset of per-node workload
// counts with the plan's.
func checkPlacement(t *testing.T, p *plan.Plan, pods []corev1.Pod) {
	t.Helper()
	want := map[string]map[string]map[string]int{} // pool → node → workload → replicas
	for _, pl := range p.Placements {
		node := pl.Devices[0].Node
		add(want, pl.Pool, node, dnsLike(pl.Workload))
	}
	got := map[string]map[string]map[string]int{}
	for _, pod := range pods {
		add(got, pod.Spec.NodeSelector[plan.PoolLabel], pod.Spec.NodeName, pod.Labels["gpuslice.dev/workload"])
	}
	for pool := range want {
		w, g := shapeOf(want[pool]), shapeOf(got[pool])
		if !slices.Equal(w, g) {
			t.Errorf("pool %s: nodes hold %v, the plan %v", pool, g, w)
		}
	}
	if len(got) != len(want) {
		t.Errorf("pods landed in pools %v, the plan uses %v", keys(got), keys(want))
	}
}

func add(m map[string]map[string]map[string]int, a, b, c string) {
	if m[a] == nil {
		m[a] = map[string]map[string]int{}
	}
	if m[a][b] == nil {
		m[a][b] = map[string]int{}
	}
	m[a][b][c]++
}

// shapeOf writes each node's workload counts, sorted, without node names.
func shapeOf(nodes map[string]map[string]int) []string {
	var out []string
	for _, wls := range nodes {
		var parts []string
		for wl, n := range wls {
			parts = append(parts, fmt.Sprintf("%s×%d", wl, n))
		}
		sort.Strings(parts)
		out = append(out, "{"+strings.Join(parts, " ")+"}")
	}
	sort.Strings(out)
	return out
}

func keys[V any](m map[string]V) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

func dnsLike(s string) string {
	return strings.Trim(strings.Map(func(r rune) rune {
		switch {
		case r >= 'a' && r <= 'z', r >= '0' && r <= '9', r == '-':
			return r
		case r >= 'A' && r <= 'Z':
			return r + 'a' - 'A'
		}
		return '-'
	}, s), "-")
}

// checkTenantsApart: on every node, the tenants whose pods take a replica
// of a shared resource are the plan's tenants on that kind of node: no
// node mixes tenants the plan keeps on separate nodes.
func checkTenantsApart(t *testing.T, p *plan.Plan, pods []corev1.Pod) {
	t.Helper()
	together := map[string]bool{} // "a,b" sets of tenants the plan puts on one node
	perNode := map[string][]string{}
	for _, pl := range p.Placements {
		n := pl.Devices[0].Node
		if tn := dnsLike(pl.Tenant); !slices.Contains(perNode[n], tn) {
			perNode[n] = append(perNode[n], tn)
		}
	}
	for _, ts := range perNode {
		sort.Strings(ts)
		together[strings.Join(ts, ",")] = true
	}
	got := map[string][]string{}
	for _, pod := range pods {
		shared := false
		for k := range pod.Labels {
			shared = shared || strings.HasPrefix(k, "shared.gpuslice.dev/")
		}
		if tn := pod.Labels["gpuslice.dev/tenant"]; shared && !slices.Contains(got[pod.Spec.NodeName], tn) {
			got[pod.Spec.NodeName] = append(got[pod.Spec.NodeName], tn)
		}
	}
	for node, ts := range got {
		sort.Strings(ts)
		if len(ts) > 1 && !together[strings.Join(ts, ",")] {
			t.Errorf("node %s runs shared-GPU pods of tenants %v, which the plan keeps on separate nodes", node, ts)
		}
	}
}

// checkClaims: every claim the pods use is allocated, on the pod's node,
// to devices of the kind the plan gave the workload's requests.
func (c *cluster) checkClaims(p *plan.Plan, pods []corev1.Pod) {
	t := c.t
	profiles := map[string][]string{} // workload → planned profiles ("" = whole GPU)
	for _, pl := range p.Placements {
		if _, ok := profiles[dnsLike(pl.Workload)]; ok {
			continue
		}
		for _, d := range pl.Devices {
			profiles[dnsLike(pl.Workload)] = append(profiles[dnsLike(pl.Workload)], d.Profile)
		}
	}
	for _, pod := range pods {
		var got []string
		for _, st := range pod.Status.ResourceClaimStatuses {
			if st.ResourceClaimName == nil {
				t.Errorf("pod %s/%s: claim %s was not created", pod.Namespace, pod.Name, st.Name)
				continue
			}
			got = append(got, *st.ResourceClaimName)
		}
		for _, pc := range pod.Spec.ResourceClaims {
			if pc.ResourceClaimName != nil {
				got = append(got, *pc.ResourceClaimName)
			}
		}
		var kinds []string
		for _, name := range got {
			claim, err := c.CS.ResourceV1().ResourceClaims(pod.Namespace).Get(c.Ctx, name, metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if claim.Status.Allocation == nil {
				t.Errorf("pod %s/%s is bound but claim %s is not allocated", pod.Namespace, pod.Name, name)
				continue
			}
			for _, r := range claim.Status.Allocation.Devices.Results {
				d, ok := c.devices[r.Pool+"/"+r.Device]
				if !ok || r.Driver != nvidiaDriver {
					t.Errorf("claim %s/%s got %s/%s/%s, which no slice published", pod.Namespace, name, r.Driver, r.Pool, r.Device)
					continue
				}
				if d.node != pod.Spec.NodeName {
					t.Errorf("pod %s/%s runs on %s but its claim %s holds a device of %s", pod.Namespace, pod.Name, pod.Spec.NodeName, name, d.node)
				}
				kinds = append(kinds, d.profile)
			}
		}
		want := slices.Clone(profiles[pod.Labels["gpuslice.dev/workload"]])
		sort.Strings(kinds)
		sort.Strings(want)
		if !slices.Equal(kinds, want) {
			t.Errorf("pod %s/%s got devices %q, the plan %q (\"\" = whole GPU)", pod.Namespace, pod.Name, kinds, want)
		}
	}
}

// claimsFromTemplates does what kube-controller-manager's resourceclaim
// controller does for a new pod (none runs here): a ResourceClaim per
// template the pod names, owned by the pod, recorded in the pod's status.
func (c *cluster) claimsFromTemplates(pod *corev1.Pod) {
	t := c.t
	var statuses []corev1.PodResourceClaimStatus
	for _, pc := range pod.Spec.ResourceClaims {
		if pc.ResourceClaimTemplateName == nil {
			continue
		}
		tmpl, err := c.CS.ResourceV1().ResourceClaimTemplates(pod.Namespace).Get(c.Ctx, *pc.ResourceClaimTemplateName, metav1.GetOptions{})
		if err != nil {
			t.Fatalf("pod %s/%s: template %s: %v", pod.Namespace, pod.Name, *pc.ResourceClaimTemplateName, err)
		}
		claim := &resourcev1.ResourceClaim{ObjectMeta: metav1.ObjectMeta{
			Name: pod.Name + "-" + pc.Name, Namespace: pod.Namespace,
			Annotations: map[string]string{"resource.kubernetes.io/pod-claim-name": pc.Name},
			OwnerReferences: []metav1.OwnerReference{{APIVersion: "v1", Kind: "Pod", Name: pod.Name, UID: pod.UID,
				Controller: ptr(true), BlockOwnerDeletion: ptr(true)}}},
			Spec: tmpl.Spec.Spec}
		if _, err := c.CS.ResourceV1().ResourceClaims(pod.Namespace).Create(c.Ctx, claim, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		statuses = append(statuses, corev1.PodResourceClaimStatus{Name: pc.Name, ResourceClaimName: ptr(claim.Name)})
	}
	if len(statuses) == 0 {
		return
	}
	pod.Status.ResourceClaimStatuses = statuses
	if _, err := c.CS.CoreV1().Pods(pod.Namespace).UpdateStatus(c.Ctx, pod, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
}
