package schedtest

import (
	"os"
	"strings"
	"testing"

	resourceapi "k8s.io/api/resource/v1"
	schedulingv1 "k8s.io/api/scheduling/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/gpuslice/gpuslice/internal/k8s/apitest"
	"github.com/gpuslice/gpuslice/internal/k8s/draalloc"
)

// TestMain stops the package's shared control plane and scheduler; its
// tests mostly wait, so up to 8 run at once.
func TestMain(m *testing.M) {
	apitest.RaiseParallel(8)
	os.Exit(apitest.Main(m))
}

// SchedulerName is the profile gpuslice-scheduler runs in these tests.
const SchedulerName = "gpuslice-scheduler"

// Profile enables GpusliceDynamicResources in place of DynamicResources;
// every other plugin is the default profile's.
const Profile = `
- schedulerName: gpuslice-scheduler
  plugins:
    multiPoint:
      enabled: [{name: GpusliceDynamicResources, weight: 5}]
      disabled: [{name: DynamicResources}]
`

// named is a profile (Profile or one built on it) with its schedulerName
// replaced, for a test's own scheduler on the shared control plane.
func named(profile, schedulerName string) string {
	return strings.Replace(profile, "schedulerName: "+SchedulerName, "schedulerName: "+schedulerName, 1)
}

// cluster is a test's part of a control plane and the scheduler its pods
// name.
type cluster struct {
	*apitest.Cluster
	t     *testing.T
	sched *apitest.Scheduler
	opts  apitest.SchedulerOptions
	// own says the test started sched itself (restart may stop it).
	own bool
}

// sharedCluster is the test's part of the package's shared control plane
// under the shared gpuslice-scheduler (Profile): its namespaces and nodes
// are its own (nodes labelled with group, pods selecting them), so tests
// using it run in parallel.
func sharedCluster(t *testing.T, group string, namespaces ...string) *cluster {
	srv := apitest.Shared(t)
	opts := apitest.SchedulerOptions{Binary: apitest.GpusliceSchedulerBinary(t), Profiles: Profile}
	c := &cluster{t: t, opts: opts}
	c.Cluster = apitest.NewCluster(t, srv, apitest.ClusterOptions{Namespaces: namespaces, Group: group, SchedulerName: SchedulerName, Timeout: clusterTimeout})
	c.sched = apitest.SharedScheduler(t, srv, opts)
	return c
}

// ownScheduler is sharedCluster with a gpuslice-scheduler of the test's
// own running profile (Profile when ""), its schedulerName made the
// test's (SchedulerName-group): for a test that restarts its scheduler or
// configures the plugin.
func ownScheduler(t *testing.T, group, profile string, namespaces ...string) *cluster {
	if profile == "" {
		profile = Profile
	}
	name := SchedulerName + "-" + group
	srv := apitest.Shared(t)
	c := &cluster{t: t, own: true, opts: apitest.SchedulerOptions{Binary: apitest.GpusliceSchedulerBinary(t), Profiles: named(profile, name)}}
	c.Cluster = apitest.NewCluster(t, srv, apitest.ClusterOptions{Namespaces: namespaces, Group: group, SchedulerName: name, Timeout: clusterTimeout})
	c.sched = apitest.StartScheduler(t, srv, c.opts)
	return c
}

// ownControlPlane starts a control plane of the test's own with the
// scheduler bin ("": the stock kube-scheduler, in its default profile
// when profile is "-"; else Profile when profile is ""): for a test whose
// scheduler must see no other test's nodes.
func ownControlPlane(t *testing.T, bin, profile string, namespaces ...string) *cluster {
	srv := apitest.Start(t)
	schedName := SchedulerName
	switch profile {
	case "":
		profile = Profile
	case "-":
		profile, schedName = "", "default-scheduler"
	}
	c := &cluster{t: t, own: true, opts: apitest.SchedulerOptions{Binary: bin, Profiles: profile}}
	c.Cluster = apitest.NewCluster(t, srv, apitest.ClusterOptions{Namespaces: namespaces, SchedulerName: schedName, Timeout: clusterTimeout})
	c.sched = apitest.StartScheduler(t, srv, c.opts)
	return c
}

// restart stops the test's own scheduler and starts a new one.
func (c *cluster) restart() {
	if !c.own {
		c.t.Fatal("restart: the test runs under the shared scheduler; start its own with ownScheduler")
	}
	c.sched.Stop()
	c.sched = apitest.StartScheduler(c.t, c.Srv, c.opts)
}

// podSpec describes one pod with one claim.
type podSpec struct {
	ns, name, class, selector, memory string
	priority                          string // a PriorityClass name
	scheduler                         string
	isolation                         string // the claim's gpuslice.dev/isolation annotation
}

// claimPod is p as apitest's ClaimPod (a 10m CPU request beside the claim).
func (p podSpec) claimPod() apitest.ClaimPod {
	cp := apitest.ClaimPod{Namespace: p.ns, Name: p.name, Class: p.class, Selector: p.selector, Memory: p.memory,
		Priority: p.priority, Scheduler: p.scheduler, CPU: "10m"}
	if p.isolation != "" {
		cp.Annotations = map[string]string{"gpuslice.dev/isolation": p.isolation}
	}
	return cp
}

// create makes the pod's ResourceClaim and the pod.
func (c *cluster) create(p podSpec) {
	c.t.Helper()
	c.CreateClaimPod(p.claimPod())
}

// priorityClass creates a PriorityClass.
func (c *cluster) priorityClass(name string, value int32) {
	c.t.Helper()
	pc := &schedulingv1.PriorityClass{ObjectMeta: metav1.ObjectMeta{Name: name}, Value: value}
	if _, err := c.CS.SchedulingV1().PriorityClasses().Create(c.Ctx, pc, metav1.CreateOptions{}); err != nil {
		c.t.Fatal(err)
	}
}

// bound waits for the pod to be bound and returns its node.
func (c *cluster) bound(ns, name string) string {
	c.t.Helper()
	return c.WaitBound(ns, name)
}

// unschedulable waits until the pod's PodScheduled condition says
// Unschedulable and returns its message; it fails if the pod is bound.
func (c *cluster) unschedulable(ns, name string) string {
	c.t.Helper()
	return c.WaitUnschedulable(ns, name)
}

// claim reads a claim.
func (c *cluster) claim(ns, name string) *resourceapi.ResourceClaim {
	c.t.Helper()
	return c.Claim(ns, name)
}

// snapshot reads the slices of the test's nodes and the claims of its
// namespaces from the API server (on a control plane of the test's own:
// every slice and claim).
func (c *cluster) snapshot() (*draalloc.Snapshot, []*resourceapi.ResourceClaim) {
	c.t.Helper()
	sl, err := c.CS.ResourceV1().ResourceSlices().List(c.Ctx, metav1.ListOptions{})
	if err != nil {
		c.t.Fatal(err)
	}
	cl, err := c.CS.ResourceV1().ResourceClaims("").List(c.Ctx, metav1.ListOptions{})
	if err != nil {
		c.t.Fatal(err)
	}
	// On the shared control plane: the pools (one per node) of the
	// test's nodes, the claims of its namespaces.
	shared := c.Options.Group != ""
	nodes, nss := map[string]bool{}, map[string]bool{}
	for _, n := range c.Nodes() {
		nodes[n] = true
	}
	for _, ns := range c.Options.Namespaces {
		nss[ns] = true
	}
	var slices []*resourceapi.ResourceSlice
	for i := range sl.Items {
		if !shared || nodes[sl.Items[i].Spec.Pool.Name] {
			slices = append(slices, &sl.Items[i])
		}
	}
	var claims []*resourceapi.ResourceClaim
	for i := range cl.Items {
		if !shared || nss[cl.Items[i].Namespace] {
			claims = append(claims, &cl.Items[i])
		}
	}
	snap, err := draalloc.Read(slices, claims, nil)
	if err != nil {
		c.t.Fatal(err)
	}
	return snap, claims
}

// check runs the allocator's Check over what the API server holds.
func (c *cluster) check() *draalloc.Snapshot {
	c.t.Helper()
	snap, _ := c.snapshot()
	if err := snap.Check(draalloc.Policy("binpack"), nil); err != nil {
		c.t.Fatalf("the API server's allocations break the allocator's rules: %v", err)
	}
	return snap
}

// tenantsPerDevice maps each allocated device (node/device) to the
// namespaces whose claims hold it.
func tenantsPerDevice(claims []*resourceapi.ResourceClaim) map[string]map[string]bool {
	out := map[string]map[string]bool{}
	for _, rc := range claims {
		if rc.Status.Allocation == nil {
			continue
		}
		for _, r := range rc.Status.Allocation.Devices.Results {
			k := r.Pool + "/" + r.Device
			if out[k] == nil {
				out[k] = map[string]bool{}
			}
			out[k][rc.Namespace] = true
		}
	}
	return out
}

func isShared(device string) bool { return strings.HasSuffix(device, "-shared") }
