package dradriver

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/gpuslice/gpuslice/internal/alloc"
	"github.com/gpuslice/gpuslice/internal/catalog"
	"github.com/gpuslice/gpuslice/internal/k8s/dranames"
	"github.com/gpuslice/gpuslice/internal/mig"
)

func node(name, model string, n int) alloc.Node {
	nd := alloc.Node{Name: name}
	for i := range n {
		nd.GPUs = append(nd.GPUs, alloc.GPU{UUID: fmt.Sprintf("GPU-%s-%d", name, i), Index: i, Model: model, Healthy: true})
	}
	return nd
}

// The counters say yes to a set of devices exactly when NVIDIA's
// placement rules (mig.Geometry.CanAdd) do: random sequences of MIG
// placements on every MIG-capable model of the catalog, with the whole
// GPU and the shared whole GPU in the mix.
func TestCountersAllowExactlyTheValidLayouts(t *testing.T) {
	cat := catalog.Default()
	models := 0
	for _, mm := range cat.GPUs() {
		m := &mm
		if m.MIG == nil {
			continue
		}
		models++
		geo, err := mig.New(m)
		if err != nil {
			t.Fatal(err)
		}
		slices, err := Slices(node("n", m.ID, 1), 1, "580.65.06", cat)
		if err != nil {
			t.Fatal(err)
		}
		var set resourceapi.CounterSet
		var devs []resourceapi.Device
		for _, s := range slices {
			if len(s.Spec.SharedCounters) > 0 {
				set = s.Spec.SharedCounters[0]
			}
			devs = append(devs, s.Spec.Devices...)
		}
		rng := rand.New(rand.NewPCG(uint64(models), 1))
		for round := range 300 {
			left := map[string]int64{}
			for k, c := range set.Counters {
				left[k] = c.Value.Value()
			}
			var occ mig.Occupancy
			wholeTaken := false
			for range 12 {
				d := devs[rng.IntN(len(devs))]
				fits := true
				for k, c := range d.ConsumesCounters[0].Counters {
					fits = fits && left[k] >= c.Value.Value()
				}
				var want bool
				typ := *d.Attributes["type"].StringValue
				if typ == dranames.TypeMIG {
					p, _ := geo.Profile(*d.Attributes["profile"].StringValue)
					want = !wholeTaken && geo.CanAdd(occ, p, int(*d.Attributes["start"].IntValue))
					if want {
						occ = geo.Add(occ, p, int(*d.Attributes["start"].IntValue))
					}
				} else {
					want = !wholeTaken && occ.Instances == 0
					wholeTaken = wholeTaken || want
				}
				if fits != want {
					t.Fatalf("%s round %d: %s: counters say %v, placement rules %v (occupancy %+v)", m.ID, round, d.Name, fits, want, occ)
				}
				if fits {
					for k, c := range d.ConsumesCounters[0].Counters {
						left[k] -= c.Value.Value()
					}
				}
			}
		}
	}
	if models < 3 {
		t.Fatalf("only %d MIG-capable models", models)
	}
}

// A DGX A100 (8 GPUs) fits the API's limits: at most 64 devices per slice
// that consumes counters, 8 counter sets per slice, 32 counters per set,
// counters in slices of their own; every device name is a DNS label and
// unique in the pool; the pool counts its slices.
func TestSlicesKeepTheAPILimits(t *testing.T) {
	for _, model := range []string{"A100-40GB", "H100-80GB-SXM", "A30", "B200-180GB", "L4", "T4"} {
		t.Run(model, func(t *testing.T) {
			out, err := Slices(node("host-1", model, 9), 3, "580.65.06", nil)
			if err != nil {
				t.Fatal(err)
			}
			names := map[string]bool{}
			sets := 0
			for _, s := range out {
				if s.Spec.Pool.ResourceSliceCount != int64(len(out)) || s.Spec.Pool.Generation != 3 || s.Spec.Pool.Name != "host-1" {
					t.Fatalf("pool %+v", s.Spec.Pool)
				}
				if len(s.Spec.Devices) > 0 && len(s.Spec.SharedCounters) > 0 {
					t.Fatalf("%s has devices and counters", s.Name)
				}
				if len(s.Spec.Devices) > 64 || len(s.Spec.SharedCounters) > 8 {
					t.Fatalf("%s: %d devices, %d counter sets", s.Name, len(s.Spec.Devices), len(s.Spec.SharedCounters))
				}
				for _, c := range s.Spec.SharedCounters {
					sets++
					if len(c.Counters) > 32 {
						t.Fatalf("counter set %s has %d counters", c.Name, len(c.Counters))
					}
				}
				for _, d := range s.Spec.Devices {
					if names[d.Name] || len(d.Name) > 63 || strings.ContainsAny(d.Name, ".+_") {
						t.Fatalf("device name %q", d.Name)
					}
					names[d.Name] = true
				}
			}
			if sets != 9 {
				t.Fatalf("%d counter sets for 9 GPUs", sets)
			}
		})
	}
}

// With binding conditions every MIG device (and only those) waits for
// gpuslice.dev/mig-ready and fails on gpuslice.dev/mig-failed, bound to
// its node; the input slices are not changed.
func TestWithMIGBindingConditions(t *testing.T) {
	n := alloc.Node{Name: "n", GPUs: []alloc.GPU{{UUID: "GPU-a", Index: 0, Model: "A100-40GB", Healthy: true}, {UUID: "GPU-b", Index: 1, Model: "L4", Healthy: true}}}
	sl, err := Slices(n, 1, "580.65.06", nil)
	if err != nil {
		t.Fatal(err)
	}
	got := WithMIGBindingConditions(sl)
	migs := 0
	for i, s := range got {
		for j, d := range s.Spec.Devices {
			if sl[i].Spec.Devices[j].BindingConditions != nil {
				t.Fatal("the input slices were changed")
			}
			isMIG := *d.Attributes["type"].StringValue == dranames.TypeMIG
			has := len(d.BindingConditions) == 1 && d.BindingConditions[0] == dranames.ConditionMIGReady &&
				len(d.BindingFailureConditions) == 1 && d.BindingFailureConditions[0] == dranames.ConditionMIGFailed &&
				d.BindsToNode != nil && *d.BindsToNode
			if isMIG != has {
				t.Fatalf("device %s: MIG %v, binding conditions %v %v %v", d.Name, isMIG, d.BindingConditions, d.BindingFailureConditions, d.BindsToNode)
			}
			if isMIG {
				migs++
			}
		}
	}
	if migs == 0 {
		t.Fatal("no MIG device")
	}
}

// With tenant isolation every GPU's shared device becomes one copy per
// tenant: named by the tenant's hash, tainted and attributed with the
// tenant, consuming exactly the counters the untainted shared device
// consumed (the whole GPU's), in slices of at most 64 devices after the
// GPUs' own; the GPUs' slices keep their MIG devices and whole GPU and no
// untainted shared device is left. 128 tenants on a DGX A100 fit.
func TestTenantCopies(t *testing.T) {
	tenants := make([]string, MaxTenants)
	for i := range tenants {
		tenants[i] = fmt.Sprintf("team-%03d", MaxTenants-1-i)
	}
	for _, model := range []string{"A100-40GB", "L4"} {
		t.Run(model, func(t *testing.T) {
			plain, err := Slices(node("h", model, 8), 1, "580.65.06", nil)
			if err != nil {
				t.Fatal(err)
			}
			sharedUse := map[string][]resourceapi.DeviceCounterConsumption{}
			for _, s := range plain {
				for _, d := range s.Spec.Devices {
					if *d.Attributes["type"].StringValue == dranames.TypeShared {
						sharedUse[*d.Attributes["uuid"].StringValue] = d.ConsumesCounters
					}
				}
			}
			out, err := SlicesFor(node("h", model, 8), 1, "580.65.06", nil, Options{TenantIsolation: true, Tenants: append(tenants, tenants[0])})
			if err != nil {
				t.Fatal(err)
			}
			names := map[string]bool{}
			perGPU := map[string]map[string]bool{}
			for _, s := range out {
				if len(s.Spec.Devices) > 64 || s.Spec.Pool.ResourceSliceCount != int64(len(out)) {
					t.Fatalf("%s: %d devices, pool %+v", s.Name, len(s.Spec.Devices), s.Spec.Pool)
				}
				for _, d := range s.Spec.Devices {
					if names[d.Name] || len(d.Name) > 63 {
						t.Fatalf("device name %q", d.Name)
					}
					names[d.Name] = true
					if *d.Attributes["type"].StringValue != dranames.TypeShared {
						if len(d.Taints) > 0 {
							t.Fatalf("%s is tainted", d.Name)
						}
						continue
					}
					tn, uuid := d.Attributes[dranames.AttrTenant].StringValue, *d.Attributes["uuid"].StringValue
					if tn == nil {
						t.Fatalf("%s: an untainted shared device beside the tenants' copies", d.Name)
					}
					want := resourceapi.DeviceTaint{Key: dranames.TenantKey, Value: *tn, Effect: resourceapi.DeviceTaintEffectNoSchedule}
					if len(d.Taints) != 1 || d.Taints[0] != want || d.Name != dranames.SharedDeviceName(int(*d.Attributes["index"].IntValue), *tn) {
						t.Fatalf("%s: taints %+v, want %+v", d.Name, d.Taints, want)
					}
					if d.AllowMultipleAllocations == nil || !*d.AllowMultipleAllocations {
						t.Fatalf("%s does not allow multiple allocations", d.Name)
					}
					if fmt.Sprint(d.ConsumesCounters) != fmt.Sprint(sharedUse[uuid]) {
						t.Fatalf("%s consumes %v, the shared GPU %v", d.Name, d.ConsumesCounters, sharedUse[uuid])
					}
					if perGPU[uuid] == nil {
						perGPU[uuid] = map[string]bool{}
					}
					perGPU[uuid][*tn] = true
				}
			}
			if len(perGPU) != 8 {
				t.Fatalf("copies on %d GPUs", len(perGPU))
			}
			for g, ts := range perGPU {
				if len(ts) != MaxTenants {
					t.Fatalf("GPU %s has copies for %d tenants", g, len(ts))
				}
			}
		})
	}
	// Isolation without tenants publishes no shared device at all.
	out, err := SlicesFor(node("h", "L4", 2), 1, "", nil, Options{TenantIsolation: true})
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range out {
		for _, d := range s.Spec.Devices {
			if *d.Attributes["type"].StringValue == dranames.TypeShared {
				t.Fatalf("shared device %s without tenants", d.Name)
			}
		}
	}
	if _, err := SlicesFor(node("h", "L4", 1), 1, "", nil, Options{TenantIsolation: true, Tenants: append(tenants, "one-more")}); err == nil || !strings.Contains(err.Error(), "at most 128") {
		t.Fatalf("129 tenants: %v", err)
	}
}

func TestParseTenants(t *testing.T) {
	got, err := ParseTenants(" b,a,, b ,team.x_1")
	if err != nil || strings.Join(got, ",") != "a,b,team.x_1" {
		t.Fatalf("got %v, %v", got, err)
	}
	for in, want := range map[string]string{
		"a,-b":                  `tenant "-b": a valid label must be`,
		"a,b c":                 `tenant "b c"`,
		strings.Repeat("x", 64): "must be no more than 63",
	} {
		if _, err := ParseTenants(in); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%q: %v, want %q", in, err, want)
		}
	}
	if got, err := ParseTenants(""); err != nil || len(got) != 0 {
		t.Fatalf("empty: %v %v", got, err)
	}
}

func FuzzParseTenants(f *testing.F) {
	for _, s := range []string{"a,b", "", ",,", "team-a, team-b", "-x", strings.Repeat("a,", 200)} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		ts, err := ParseTenants(s)
		if err != nil {
			return
		}
		for _, tn := range ts {
			if CheckTenant(tn) != nil || strings.Contains(tn, ",") {
				t.Fatalf("%q accepted from %q", tn, s)
			}
		}
		if _, err := SlicesFor(node("h", "L4", 1), 1, "", nil, Options{TenantIsolation: true, Tenants: ts}); err != nil {
			t.Fatal(err)
		}
	})
}

func TestTenantsOf(t *testing.T) {
	ns := func(name, label string) *corev1.Namespace {
		n := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}
		if label != "" {
			n.Labels = map[string]string{dranames.TenantKey: label}
		}
		return n
	}
	kept, dropped := TenantsOf([]*corev1.Namespace{ns("b", ""), ns("b-batch", "b"), ns("x", "team-x")}, []string{"a", "b"}, nil)
	if strings.Join(kept, ",") != "a,b,team-x" || len(dropped) != 0 {
		t.Fatalf("kept %v dropped %v", kept, dropped)
	}
	var many []*corev1.Namespace
	for i := range MaxTenants + 2 {
		many = append(many, ns(fmt.Sprintf("ns-%03d", i), ""))
	}
	kept, dropped = TenantsOf(many, nil, nil)
	if len(kept) != MaxTenants || strings.Join(dropped, ",") != "ns-128,ns-129" {
		t.Fatalf("%d kept, dropped %v", len(kept), dropped)
	}
}

// TenantCopies: the rule of which namespaces' tenants get copies, case by case.
func TestTenantCopiesRule(t *testing.T) {
	ns := func(name string, labels ...string) *corev1.Namespace {
		n := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{}}}
		for i := 0; i+1 < len(labels); i += 2 {
			n.Labels[labels[i]] = labels[i+1]
		}
		return n
	}
	static, excluded := []string{"kube-system", "team-s"}, []string{"gpuslice", "infra"}
	for _, c := range []struct {
		ns   *corev1.Namespace
		want bool
		why  string
	}{
		{ns("default"), true, ""},
		{ns("team-a"), true, ""},
		{ns("kube-public"), false, "Kubernetes system namespace"},
		{ns("kube-node-lease"), false, "Kubernetes system namespace"},
		{ns("kube-system"), true, ""}, // named in static
		{ns("gpuslice"), false, "--no-tenant-namespaces"},
		{ns("infra", dranames.TenantKey, "team-s"), true, ""},           // its tenant is static
		{ns("infra", dranames.TenantCopiesKey, "true"), true, ""},       // the label overrides the flag
		{ns("kube-public", dranames.TenantCopiesKey, "true"), true, ""}, // and the built-in list
		{ns("team-b", dranames.TenantCopiesKey, "false"), false, "labelled gpuslice.dev/tenant-copies=false"},
		{ns("team-b", dranames.TenantCopiesKey, "False"), true, ""},                               // only "false" and "true" mean anything
		{ns("team-c", dranames.TenantKey, "team-s", dranames.TenantCopiesKey, "false"), true, ""}, // static wins over the label
	} {
		got, why := TenantCopies(c.ns, static, excluded)
		if got != c.want || !strings.Contains(why, c.why) || (got && why != "") {
			t.Errorf("%s %v: %v %q, want %v %q", c.ns.Name, c.ns.Labels, got, why, c.want, c.why)
		}
	}
	if _, err := ParseNamespaces("a, b,,a"); err != nil {
		t.Fatal(err)
	}
	if got, _ := ParseNamespaces(" b,a,b "); !slices.Equal(got, []string{"a", "b"}) {
		t.Fatalf("ParseNamespaces: %v", got)
	}
	if _, err := ParseNamespaces("Team_A"); err == nil {
		t.Fatal("ParseNamespaces accepted Team_A")
	}
}

// A fresh cluster's namespaces: only default and the users' get copies;
// a held copy stays whatever the namespace says.
func TestTenantsOfSkipsSystemNamespaces(t *testing.T) {
	var nss []*corev1.Namespace
	for _, n := range []string{"default", "kube-system", "kube-public", "kube-node-lease", "gpuslice", "team-a", "team-b"} {
		nss = append(nss, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: n}})
	}
	off := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "team-off", Labels: map[string]string{dranames.TenantCopiesKey: "false"}}}
	nss = append(nss, off)
	kept, dropped := TenantsOf(nss, nil, []string{"gpuslice"})
	if !slices.Equal(kept, []string{"default", "team-a", "team-b"}) || dropped != nil {
		t.Fatalf("kept %v dropped %v", kept, dropped)
	}
	kept, _ = TenantsHolding(nss, nil, []string{"gpuslice"}, []string{"team-off"})
	if !slices.Equal(kept, []string{"default", "team-a", "team-b", "team-off"}) {
		t.Fatalf("held team-off: kept %v", kept)
	}
}

// A fault on a GPU taints its tenants' copies too, beside their tenant
// taint (which must stay: without it the copy would be anyone's).
func TestHealthTaintsKeepTenantTaints(t *testing.T) {
	out, err := SlicesFor(node("h", "L4", 2), 1, "", nil, Options{TenantIsolation: true, Tenants: []string{"team-a"}})
	if err != nil {
		t.Fatal(err)
	}
	h, _ := Health{}.With(Fault{GPU: "GPU-h-0", Value: "79", Effect: resourceapi.DeviceTaintEffectNoExecute})
	for _, s := range TaintSlices(out, h) {
		for _, d := range s.Spec.Devices {
			if d.Attributes[dranames.AttrTenant].StringValue == nil {
				continue
			}
			keys := map[string]bool{}
			for _, tn := range d.Taints {
				keys[tn.Key] = true
			}
			onFaulty := *d.Attributes["uuid"].StringValue == "GPU-h-0"
			if !keys[dranames.TenantKey] || keys[dranames.TaintKey] != onFaulty {
				t.Fatalf("%s: taints %+v", d.Name, d.Taints)
			}
		}
	}
}

// A claim allocated a tenant's copy keeps that tenant published: found by
// the copy's name and the claim's own toleration, only for this driver and
// pool; a toleration that does not name the copy's tenant (or a claim not
// allocated) holds nothing.
func TestAllocatedTenants(t *testing.T) {
	claim := func(name string, tol []string, results ...resourceapi.DeviceRequestAllocationResult) *resourceapi.ResourceClaim {
		var ts []resourceapi.DeviceToleration
		for _, v := range tol {
			ts = append(ts, TenantToleration(v))
		}
		c := &resourceapi.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Name: name},
			Spec: resourceapi.ResourceClaimSpec{Devices: resourceapi.DeviceClaim{Requests: []resourceapi.DeviceRequest{{
				Name: "gpu", Exactly: &resourceapi.ExactDeviceRequest{DeviceClassName: dranames.ClassShared, Tolerations: ts}}}}}}
		if results != nil {
			c.Status.Allocation = &resourceapi.AllocationResult{Devices: resourceapi.DeviceAllocationResult{Results: results}}
		}
		return c
	}
	res := func(driver, pool, device string) resourceapi.DeviceRequestAllocationResult {
		return resourceapi.DeviceRequestAllocationResult{Request: "gpu", Driver: driver, Pool: pool, Device: device}
	}
	claims := []*resourceapi.ResourceClaim{
		claim("a", []string{"team-a"}, res(dranames.DriverName, "node-1", dranames.SharedDeviceName(2, "team-a"))),
		claim("a-again", []string{"team-a"}, res(dranames.DriverName, "node-1", dranames.SharedDeviceName(0, "team-a"))),
		claim("b-other-node", []string{"team-b"}, res(dranames.DriverName, "node-2", dranames.SharedDeviceName(0, "team-b"))),
		claim("c-other-driver", []string{"team-c"}, res("gpu.nvidia.com", "node-1", dranames.SharedDeviceName(0, "team-c"))),
		claim("d-wrong-toleration", []string{"team-x"}, res(dranames.DriverName, "node-1", dranames.SharedDeviceName(1, "team-d"))),
		claim("e-pending", []string{"team-e"}),
		claim("f-whole-gpu", []string{"team-f"}, res(dranames.DriverName, "node-1", "gpu-3")),
		claim("g", []string{"team-g"}, res(dranames.DriverName, "node-1", dranames.SharedDeviceName(11, "team-g"))),
	}
	if got := AllocatedTenants(claims, "node-1"); !slices.Equal(got, []string{"team-a", "team-g"}) {
		t.Fatalf("held %v, want [team-a team-g]", got)
	}
}

// Held tenants are never the ones dropped for room, and are kept even when
// no namespace names them any more.
func TestTenantsHolding(t *testing.T) {
	var static []string
	for i := range MaxTenants {
		static = append(static, fmt.Sprintf("a-%03d", i))
	}
	kept, dropped := TenantsHolding(nil, static, nil, []string{"zz-held"})
	if len(kept) != MaxTenants || !slices.Contains(kept, "zz-held") || !slices.Equal(dropped, []string{fmt.Sprintf("a-%03d", MaxTenants-1)}) {
		t.Fatalf("kept %d (held in: %v), dropped %v", len(kept), slices.Contains(kept, "zz-held"), dropped)
	}
	kept, dropped = TenantsHolding([]*corev1.Namespace{{ObjectMeta: metav1.ObjectMeta{Name: "ns"}}}, nil, nil, []string{"old"})
	if !slices.Equal(kept, []string{"ns", "old"}) || dropped != nil {
		t.Fatalf("kept %v dropped %v", kept, dropped)
	}
}

// AllocatedTenants reads device names and tolerations from the API server
// (any string): it never panics, and names only tenants the claim
// tolerates whose copy it holds.
func FuzzAllocatedTenants(f *testing.F) {
	f.Add("team-a", dranames.SharedDeviceName(3, "team-a"), "node-1")
	f.Add("x", "gpu-1-shared-t-", "node-1")
	f.Add("", "gpu--1-shared-t-zz", "")
	f.Fuzz(func(t *testing.T, tenant, device, pool string) {
		c := &resourceapi.ResourceClaim{Spec: resourceapi.ResourceClaimSpec{Devices: resourceapi.DeviceClaim{Requests: []resourceapi.DeviceRequest{{
			Name: "gpu", Exactly: &resourceapi.ExactDeviceRequest{Tolerations: []resourceapi.DeviceToleration{TenantToleration(tenant)}}}}}},
			Status: resourceapi.ResourceClaimStatus{Allocation: &resourceapi.AllocationResult{Devices: resourceapi.DeviceAllocationResult{
				Results: []resourceapi.DeviceRequestAllocationResult{{Request: "gpu", Driver: dranames.DriverName, Pool: pool, Device: device}}}}}}
		for _, got := range AllocatedTenants([]*resourceapi.ResourceClaim{c}, pool) {
			var i int
			var h string
			if n, _ := fmt.Sscanf(device, "gpu-%d-shared-t-%s", &i, &h); got != tenant || n != 2 || dranames.SharedDeviceName(i, got) != device {
				t.Fatalf("tenant %q from device %q, toleration %q", got, device, tenant)
			}
		}
	})
}
