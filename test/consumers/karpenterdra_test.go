package consumers

// Karpenter provisioning for gpuslice's DRA claims, with Karpenter's own
// provisioning scheduler and DRA allocator (v1.15.0), offline: the
// devices of each instance type are what `gpuslice dra slices
// --instance-type` prints, converted to the cloud provider's
// ResourceSliceTemplates the way a provider would; the DeviceClasses are
// `gpuslice dra classes`; the claims are gpuslice's (shared, mig, gpu
// classes). The scheduler runs on controller-runtime's fake client (as
// Karpenter's own scheduling benchmark does), with IGNORE_DRA_REQUESTS
// off, so what it decides is what the provisioner would launch.

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"unique"

	"github.com/go-logr/logr"
	"github.com/samber/lo"
	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/apimachinery/pkg/util/uuid"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/record"
	clock "k8s.io/utils/clock/testing"
	"sigs.k8s.io/controller-runtime/pkg/client"
	fakecr "sigs.k8s.io/controller-runtime/pkg/client/fake"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"
	karpv1 "sigs.k8s.io/karpenter/pkg/apis/v1"
	"sigs.k8s.io/karpenter/pkg/cloudprovider"
	"sigs.k8s.io/karpenter/pkg/cloudprovider/fake"
	"sigs.k8s.io/karpenter/pkg/controllers/provisioning/scheduling"
	"sigs.k8s.io/karpenter/pkg/controllers/state"
	"sigs.k8s.io/karpenter/pkg/events"
	"sigs.k8s.io/karpenter/pkg/operator/injection"
	"sigs.k8s.io/karpenter/pkg/operator/options"
	karpscheduling "sigs.k8s.io/karpenter/pkg/scheduling"
	"sigs.k8s.io/karpenter/pkg/scheduling/dynamicresources"
	"sigs.k8s.io/karpenter/pkg/test"
	"sigs.k8s.io/yaml"
)

// Karpenter logs through controller-runtime; the tests read its decisions.
func init() { ctrllog.SetLogger(logr.Discard()) }

const (
	gsDriver       = "gpu.gpuslice.dev"
	gsShared       = "shared.gpuslice.dev"
	gsMIG          = "mig.gpuslice.dev"
	gsGPU          = "gpu.gpuslice.dev"
	gsInstanceType = "gpuslice.dev/instance-type"
	gpuResource    = corev1.ResourceName("nvidia.com/gpu")
)

// gsOutput runs the gpuslice binary and returns its stdout.
func gsOutput(t *testing.T, args ...string) []byte {
	t.Helper()
	var stdout, stderr bytes.Buffer
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("gpuslice %s: %v\n%s", strings.Join(args, " "), err, stderr.String())
	}
	return stdout.Bytes()
}

// catalogInstance is what the test reads of `gpuslice catalog instances -o json`.
type catalogInstance struct {
	Name      string  `json:"name"`
	GPU       string  `json:"gpu"`
	GPUCount  int     `json:"gpuCount"`
	VCPU      int     `json:"vcpu"`
	MemoryGiB float64 `json:"memoryGiB"`
	Price     *struct {
		USDPerHour float64 `json:"usdPerHour"`
	} `json:"price"`
}

// sliceTemplate converts one ResourceSlice gpuslice prints into Karpenter's
// in-memory template, field by field, as a cloud provider would.
func sliceTemplate(s *resourcev1.ResourceSlice) cloudprovider.ResourceSliceTemplate {
	tmpl := cloudprovider.ResourceSliceTemplate{
		Driver:         unique.Make(s.Spec.Driver),
		Pool:           cloudprovider.ResourcePool{Name: unique.Make(s.Spec.Pool.Name)},
		SharedCounters: s.Spec.SharedCounters,
	}
	for _, d := range s.Spec.Devices {
		tmpl.Devices = append(tmpl.Devices, cloudprovider.Device{
			Name:                     unique.Make(d.Name),
			Attributes:               d.Attributes,
			Capacity:                 d.Capacity,
			AllowMultipleAllocations: lo.FromPtr(d.AllowMultipleAllocations),
			ConsumesCounters:         d.ConsumesCounters,
		})
	}
	return tmpl
}

// gpusliceInstanceTypes are Karpenter instance types for the named catalog
// instance types: capacity from the catalog (with nvidia.com/gpu, what
// NodePool limits count), one on-demand offering at the catalog price, and
// as DynamicResources the templates `gpuslice dra slices --instance-type`
// prints for them (one run for all, split by the instance-type label).
func gpusliceInstanceTypes(t *testing.T, names ...string) []*cloudprovider.InstanceType {
	t.Helper()
	var cat []catalogInstance
	if err := json.Unmarshal(gsOutput(t, "catalog", "instances", "-o", "json"), &cat); err != nil {
		t.Fatal(err)
	}
	byName := map[string]catalogInstance{}
	for _, c := range cat {
		byName[c.Name] = c
	}
	templates := map[string][]cloudprovider.ResourceSliceTemplate{}
	for _, doc := range documents(gsOutput(t, "dra", "slices", "--instance-type", strings.Join(names, ","))) {
		var s resourcev1.ResourceSlice
		if err := yaml.UnmarshalStrict(doc, &s); err != nil {
			t.Fatalf("a slice gpuslice prints does not decode strictly: %v\n%s", err, doc)
		}
		if s.Spec.Driver != gsDriver || (len(s.Spec.Devices) > 0) == (len(s.Spec.SharedCounters) > 0) {
			t.Fatalf("slice %s: driver %s, %d devices and %d counter sets; Karpenter templates hold one or the other",
				s.Name, s.Spec.Driver, len(s.Spec.Devices), len(s.Spec.SharedCounters))
		}
		it := s.Labels[gsInstanceType]
		templates[it] = append(templates[it], sliceTemplate(&s))
	}
	var out []*cloudprovider.InstanceType
	for _, n := range names {
		c, ok := byName[n]
		if !ok || len(templates[n]) == 0 {
			t.Fatalf("instance type %s: catalog %v, %d templates", n, ok, len(templates[n]))
		}
		price := 1000.0
		if c.Price != nil {
			price = c.Price.USDPerHour
		}
		res := corev1.ResourceList{
			corev1.ResourceCPU:    *resource.NewQuantity(int64(c.VCPU), resource.DecimalSI),
			corev1.ResourceMemory: resource.MustParse(fmt.Sprintf("%dGi", int(c.MemoryGiB))),
			corev1.ResourcePods:   resource.MustParse("110"),
			gpuResource:           *resource.NewQuantity(int64(c.GPUCount), resource.DecimalSI),
		}
		out = append(out, fake.NewInstanceType(n,
			fake.WithResources(res),
			fake.WithOfferings(cloudprovider.Offering{Available: true, Price: price,
				Requirements: karpscheduling.NewLabelRequirements(map[string]string{
					karpv1.CapacityTypeLabelKey: karpv1.CapacityTypeOnDemand, corev1.LabelTopologyZone: "zone-a"})}),
			fake.WithResourceSliceTemplates(templates[n]...)))
	}
	return out
}

// gpusliceDeviceClasses are the classes `gpuslice dra classes` prints.
func gpusliceDeviceClasses(t *testing.T) []client.Object {
	t.Helper()
	var out []client.Object
	for _, doc := range documents(gsOutput(t, "dra", "classes")) {
		var c resourcev1.DeviceClass
		if err := yaml.UnmarshalStrict(doc, &c); err != nil {
			t.Fatal(err)
		}
		out = append(out, &c)
	}
	if len(out) != 3 {
		t.Fatalf("%d DeviceClasses, want 3", len(out))
	}
	return out
}

// claim is a ResourceClaim with one request of count devices of class,
// with an optional CEL selector and memory capacity request.
func claim(name, class, selector, memory string, count int64) *resourcev1.ResourceClaim {
	req := &resourcev1.ExactDeviceRequest{DeviceClassName: class, AllocationMode: resourcev1.DeviceAllocationModeExactCount, Count: count}
	if selector != "" {
		req.Selectors = []resourcev1.DeviceSelector{{CEL: &resourcev1.CELDeviceSelector{Expression: selector}}}
	}
	if memory != "" {
		req.Capacity = &resourcev1.CapacityRequirements{Requests: map[resourcev1.QualifiedName]resource.Quantity{"memory": resource.MustParse(memory)}}
	}
	return &resourcev1.ResourceClaim{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default"},
		Spec:       resourcev1.ResourceClaimSpec{Devices: resourcev1.DeviceClaim{Requests: []resourcev1.DeviceRequest{{Name: "gpu", Exactly: req}}}},
	}
}

// claimPod is a pending pod using the claim, tolerating the GPU taint,
// with an optional node selector.
func claimPod(c *resourcev1.ResourceClaim, nodeSelector map[string]string) *corev1.Pod {
	p := test.UnschedulablePod(test.PodOptions{
		ObjectMeta:              metav1.ObjectMeta{Name: "pod-" + c.Name, Namespace: c.Namespace, UID: uuid.NewUUID()},
		ResourceClaims:          []corev1.PodResourceClaim{{Name: "gpu", ResourceClaimName: &c.Name}},
		ContainerResourceClaims: []corev1.ResourceClaim{{Name: "gpu"}},
		Tolerations:             []corev1.Toleration{{Key: "nvidia.com/gpu", Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule}},
		NodeSelector:            nodeSelector,
	})
	return p
}

// nodePoolFor admits exactly the named instance types (on-demand), as the
// karpenter target's NodePools do.
func nodePoolFor(name string, its ...string) *karpv1.NodePool {
	return &karpv1.NodePool{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: karpv1.NodePoolSpec{Template: karpv1.NodeClaimTemplate{Spec: karpv1.NodeClaimTemplateSpec{
			Requirements: []karpv1.NodeSelectorRequirementWithMinValues{
				{Key: corev1.LabelInstanceTypeStable, Operator: corev1.NodeSelectorOpIn, Values: its},
				{Key: karpv1.CapacityTypeLabelKey, Operator: corev1.NodeSelectorOpIn, Values: []string{karpv1.CapacityTypeOnDemand}},
			},
			NodeClassRef: &karpv1.NodeClassReference{Group: "karpenter.k8s.aws", Kind: "EC2NodeClass", Name: "default"},
		}}},
	}
}

// solve runs one Karpenter provisioning simulation: its scheduler with its
// DRA allocator (nothing allocated in the cluster yet) over the pods,
// with instanceTypes offered to every NodePool.
func solve(t *testing.T, nodePools []*karpv1.NodePool, instanceTypes []*cloudprovider.InstanceType, claims []*resourcev1.ResourceClaim, pods []*corev1.Pod) scheduling.Results {
	t.Helper()
	ctx := options.ToContext(injection.WithControllerName(context.Background(), "provisioner"),
		test.Options(test.OptionsFields{IgnoreDRARequests: lo.ToPtr(false)}))
	objs := gpusliceDeviceClasses(t)
	for _, c := range claims {
		objs = append(objs, c.DeepCopy())
	}
	kube := fakecr.NewClientBuilder().WithScheme(scheme.Scheme).WithObjects(objs...).Build()
	clk := clock.NewFakeClock(metav1.Now().Time)
	cp := fake.NewCloudProvider()
	cp.InstanceTypes = instanceTypes
	cluster := state.NewCluster(clk, kube, cp)
	byPool := map[string][]*cloudprovider.InstanceType{}
	for _, np := range nodePools {
		byPool[np.Name] = instanceTypes
	}
	topology, err := scheduling.NewTopology(ctx, kube, cluster, nil, nodePools, byPool, pods)
	if err != nil {
		t.Fatal(err)
	}
	allocator := dynamicresources.NewAllocator(nil, dynamicresources.AllocatedDeviceState{
		ExclusiveDevices: sets.New[cloudprovider.DeviceID](),
		ConsumedCapacity: map[cloudprovider.DeviceID]map[resourcev1.QualifiedName]resource.Quantity{},
	}, dynamicresources.BuildAttributeBindings(byPool), kube, nil)
	s := scheduling.NewScheduler(ctx, kube, nodePools, cluster, nil, topology, byPool, nil,
		events.NewRecorder(&record.FakeRecorder{}), clk, nil, allocator)
	res, err := s.Solve(ctx, pods)
	if err != nil {
		t.Fatal(err)
	}
	return res
}

// optionNames are the instance types a NodeClaim may still launch as.
func optionNames(nc *scheduling.NodeClaim) []string {
	return lo.Map(nc.InstanceTypeOptions, func(it *cloudprovider.InstanceType, _ int) string { return it.Name })
}

// claimDevices is, per claim, the devices Karpenter's allocator gave it on
// instance type it.
func claimDevices(res scheduling.Results, it string) map[string][]string {
	out := map[string][]string{}
	for key, meta := range res.DRAClaimAllocationMetadata {
		for _, d := range meta.Devices[unique.Make(it)] {
			out[key.Name] = append(out[key.Name], d.DeviceID.Device.Value())
		}
	}
	return out
}

// Four 4 GiB time-sliced shares (shared.gpuslice.dev, memory capacity
// requests) are one node of a one-GPU A10G, L4 or A100 instance type, all
// four claims on its one shared device; the same four pods asking for a
// whole GPU each (gpu.gpuslice.dev) are four nodes, as any autoscaler
// counting whole GPUs would buy.
func TestKarpenterCountsShares(t *testing.T) {
	for _, it := range []string{"g5.xlarge", "g6.xlarge", "a2-highgpu-1g"} {
		t.Run(it, func(t *testing.T) {
			its := gpusliceInstanceTypes(t, it)
			np := nodePoolFor("gpuslice-pool", it)
			for _, mode := range []string{"shares", "whole"} {
				var claims []*resourcev1.ResourceClaim
				var pods []*corev1.Pod
				for i := range 4 {
					c := claim(fmt.Sprintf("share-%d", i), gsShared, "", "4Gi", 1)
					if mode == "whole" {
						c = claim(fmt.Sprintf("whole-%d", i), gsGPU, "", "", 1)
					}
					claims, pods = append(claims, c), append(pods, claimPod(c, nil))
				}
				res := solve(t, []*karpv1.NodePool{np}, its, claims, pods)
				if len(res.PodErrors) > 0 {
					t.Fatalf("%s: pods not scheduled: %v", mode, res.PodErrors)
				}
				want := map[string]int{"shares": 1, "whole": 4}[mode]
				if len(res.NewNodeClaims) != want {
					t.Fatalf("%s: Karpenter would launch %d nodes, want %d", mode, len(res.NewNodeClaims), want)
				}
				devs := claimDevices(res, it)
				if len(devs) != 4 {
					t.Fatalf("%s: %d claims allocated on %s, want 4: %v", mode, len(devs), it, devs)
				}
				for name, d := range devs {
					want := map[string]string{"shares": "gpu-0-shared", "whole": "gpu-0"}[mode]
					if len(d) != 1 || d[0] != want {
						t.Errorf("%s: claim %s got %v on %s, want [%s]", mode, name, d, it, want)
					}
				}
				t.Logf("%s on %s: %d node(s), %d GPU(s)", mode, it, len(res.NewNodeClaims), len(res.NewNodeClaims))
			}
		})
	}
}

// Why the templates scale their counters, pinned so that a Karpenter that
// charges a shared device's counters once (as Kubernetes does) shows up
// here: on the slices the driver publishes for a one-T4 host (`dra slices
// --simulate t4`), Karpenter v1.15.0 buys one node per 4 GiB share; on
// the instance type's templates, one node for all four.
func TestKarpenterChargesSharedCountersPerAllocation(t *testing.T) {
	published := gpusliceInstanceTypes(t, "g4dn.xlarge")
	var tmpls []cloudprovider.ResourceSliceTemplate
	for _, doc := range documents(gsOutput(t, "dra", "slices", "--simulate", "t4", "--node", "g4dn-host")) {
		var s resourcev1.ResourceSlice
		if err := yaml.UnmarshalStrict(doc, &s); err != nil {
			t.Fatal(err)
		}
		tmpls = append(tmpls, sliceTemplate(&s))
	}
	published[0].DynamicResources.ResourceSliceTemplates = lo.ToSlicePtr(tmpls)
	for name, its := range map[string][]*cloudprovider.InstanceType{"published": published, "templates": gpusliceInstanceTypes(t, "g4dn.xlarge")} {
		var claims []*resourcev1.ResourceClaim
		var pods []*corev1.Pod
		for i := range 4 {
			c := claim(fmt.Sprintf("share-%d", i), gsShared, "", "4Gi", 1)
			claims, pods = append(claims, c), append(pods, claimPod(c, nil))
		}
		res := solve(t, []*karpv1.NodePool{nodePoolFor("t4", "g4dn.xlarge")}, its, claims, pods)
		want := map[string]int{"published": 4, "templates": 1}[name]
		if len(res.PodErrors) > 0 || len(res.NewNodeClaims) != want {
			t.Errorf("%s counters: %d nodes (errors %v), want %d", name, len(res.NewNodeClaims), res.PodErrors, want)
		}
	}
}

// A MIG claim (mig.gpuslice.dev, a profile selector) is provisioned only
// on instance types whose GPUs have the profile: with T4, L4, A100-80GB
// and H100 types in one NodePool, the NodeClaim keeps only the A100 and
// H100 types; a NodePool of T4 and L4 types cannot serve it.
func TestKarpenterMIGOnlyOnMIGTypes(t *testing.T) {
	mixed := []string{"g4dn.xlarge", "g6.xlarge", "p4de.24xlarge", "p5.4xlarge", "p5.48xlarge"}
	its := gpusliceInstanceTypes(t, mixed...)
	c := claim("mig-1g", gsMIG, `device.attributes["gpu.gpuslice.dev"].profile == "1g.10gb"`, "", 1)
	res := solve(t, []*karpv1.NodePool{nodePoolFor("mixed", mixed...)}, its, []*resourcev1.ResourceClaim{c}, []*corev1.Pod{claimPod(c, nil)})
	if len(res.PodErrors) > 0 || len(res.NewNodeClaims) != 1 {
		t.Fatalf("%d NodeClaims, errors %v; want one", len(res.NewNodeClaims), res.PodErrors)
	}
	got := optionNames(res.NewNodeClaims[0])
	slices.Sort(got)
	if want := []string{"p4de.24xlarge", "p5.48xlarge", "p5.4xlarge"}; !slices.Equal(got, want) {
		t.Errorf("the MIG claim's NodeClaim may launch as %v, want %v", got, want)
	}
	for _, it := range got {
		d := claimDevices(res, it)["mig-1g"]
		if len(d) != 1 || !strings.Contains(d[0], "-mig-1g-10gb-at-") {
			t.Errorf("on %s the claim got %v, want a 1g.10gb placement", it, d)
		}
	}

	small := []string{"g4dn.xlarge", "g6.xlarge"}
	res = solve(t, []*karpv1.NodePool{nodePoolFor("small", small...)}, gpusliceInstanceTypes(t, small...),
		[]*resourcev1.ResourceClaim{c}, []*corev1.Pod{claimPod(c, nil)})
	if len(res.NewNodeClaims) != 0 || len(res.PodErrors) != 1 {
		t.Errorf("T4/L4 only: %d NodeClaims, %d pod errors; want none and one", len(res.NewNodeClaims), len(res.PodErrors))
	}
}

// Claims no instance type's gpuslice devices can serve fit no node: a
// share larger than any GPU, a MIG profile no GPU has, a GPU model none
// of the types has.
func TestKarpenterImpossibleClaims(t *testing.T) {
	all := []string{"g4dn.xlarge", "g5.xlarge", "g6.xlarge", "p4d.24xlarge", "p5.48xlarge"}
	its := gpusliceInstanceTypes(t, all...)
	for _, c := range []*resourcev1.ResourceClaim{
		claim("too-big", gsShared, "", "200Gi", 1),
		claim("no-profile", gsMIG, `device.attributes["gpu.gpuslice.dev"].profile == "9g.99gb"`, "", 1),
		claim("no-model", gsGPU, `device.attributes["gpu.gpuslice.dev"].model == "B300"`, "", 1),
	} {
		res := solve(t, []*karpv1.NodePool{nodePoolFor("all", all...)}, its, []*resourcev1.ResourceClaim{c}, []*corev1.Pod{claimPod(c, nil)})
		if len(res.NewNodeClaims) != 0 || len(res.PodErrors) != 1 {
			t.Errorf("%s: %d NodeClaims, %d pod errors; want none and one", c.Name, len(res.NewNodeClaims), len(res.PodErrors))
		}
		for _, err := range res.PodErrors {
			t.Logf("%s: %v", c.Name, err)
		}
	}
}

// The rendered NodePools drive Karpenter: `render --target karpenter
// --dra-driver gpuslice` of the example spec, decoded with Karpenter's
// types, offered every AWS GPU instance type with gpuslice's templates.
// A pod of the a100 pool (its label) with a MIG claim of a profile the
// plan uses there launches only as a type that NodePool admits and whose
// GPUs have the profile; four 4 GiB shares for the l4 pool take one L4
// node; and the MIG claim in the l4 pool is not served (L4 has no MIG).
func TestKarpenterRenderedNodePools(t *testing.T) {
	in := input{name: "examples/gpuslice.yaml", files: []string{root + "/examples/gpuslice.yaml"}}
	out := render(t, in, "karpenter", "--dra-driver", "gpuslice")
	var nodePools []*karpv1.NodePool
	for _, doc := range documents(out) {
		np := &karpv1.NodePool{}
		if err := yaml.UnmarshalStrict(doc, np); err != nil {
			t.Fatal(err)
		}
		nodePools = append(nodePools, np)
	}
	var cat []catalogInstance
	if err := json.Unmarshal(gsOutput(t, "catalog", "instances", "--provider", "aws", "-o", "json"), &cat); err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, c := range cat {
		if c.GPUCount > 0 {
			names = append(names, c.Name)
		}
	}
	its := gpusliceInstanceTypes(t, names...)
	admitted := func(pool string) []string {
		for _, np := range nodePools {
			if np.Spec.Template.Labels["gpuslice.dev/pool"] == pool {
				for _, r := range np.Spec.Template.Spec.Requirements {
					if r.Key == corev1.LabelInstanceTypeStable {
						return r.Values
					}
				}
			}
		}
		t.Fatalf("no NodePool for pool %s", pool)
		return nil
	}

	mig := claim("mig-3g", gsMIG, `device.attributes["gpu.gpuslice.dev"].profile == "3g.20gb"`, "", 1)
	res := solve(t, nodePools, its, []*resourcev1.ResourceClaim{mig}, []*corev1.Pod{claimPod(mig, map[string]string{"gpuslice.dev/pool": "a100"})})
	if len(res.PodErrors) > 0 || len(res.NewNodeClaims) != 1 {
		t.Fatalf("a100 MIG claim: %d NodeClaims, errors %v", len(res.NewNodeClaims), res.PodErrors)
	}
	for _, it := range optionNames(res.NewNodeClaims[0]) {
		if !slices.Contains(admitted("a100"), it) {
			t.Errorf("a100 MIG claim may launch as %s, which the a100 NodePool does not admit", it)
		}
		if d := claimDevices(res, it)["mig-3g"]; len(d) != 1 || !strings.Contains(d[0], "-mig-3g-20gb-at-") {
			t.Errorf("on %s the claim got %v, want a 3g.20gb placement", it, d)
		}
	}

	var claims []*resourcev1.ResourceClaim
	var pods []*corev1.Pod
	for i := range 4 {
		c := claim(fmt.Sprintf("l4-share-%d", i), gsShared, `device.attributes["gpu.gpuslice.dev"].model == "L4"`, "4Gi", 1)
		claims, pods = append(claims, c), append(pods, claimPod(c, map[string]string{"gpuslice.dev/pool": "l4"}))
	}
	res = solve(t, nodePools, its, claims, pods)
	if len(res.PodErrors) > 0 || len(res.NewNodeClaims) != 1 {
		t.Fatalf("l4 shares: %d NodeClaims, errors %v; want one node", len(res.NewNodeClaims), res.PodErrors)
	}
	for _, it := range optionNames(res.NewNodeClaims[0]) {
		if !slices.Contains(admitted("l4"), it) {
			t.Errorf("l4 shares may launch as %s, which the l4 NodePool does not admit", it)
		}
	}

	res = solve(t, nodePools, its, []*resourcev1.ResourceClaim{mig}, []*corev1.Pod{claimPod(mig, map[string]string{"gpuslice.dev/pool": "l4"})})
	if len(res.NewNodeClaims) != 0 || len(res.PodErrors) != 1 {
		t.Errorf("MIG claim in the l4 pool: %d NodeClaims, %d errors; want none and one", len(res.NewNodeClaims), len(res.PodErrors))
	}
}
