package draalloc

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sort"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/dynamic-resource-allocation/cel"
	"k8s.io/dynamic-resource-allocation/structured"

	"github.com/gpuslice/gpuslice/internal/alloc"
	"github.com/gpuslice/gpuslice/internal/k8s/dradriver"
	"github.com/gpuslice/gpuslice/internal/k8s/dranames"
)

// upstreamFeatures are the features the stock scheduler runs gpuslice's
// slices with: consumable capacity (the shared devices), partitionable
// devices (the counters), prioritized lists.
var upstreamFeatures = structured.Features{AdminAccess: true, PrioritizedList: true, PartitionableDevices: true,
	DeviceTaints: true, ConsumableCapacity: true}

type upstreamClasses map[string]*resourceapi.DeviceClass

func (l upstreamClasses) List() ([]*resourceapi.DeviceClass, error) {
	var out []*resourceapi.DeviceClass
	for _, c := range l {
		out = append(out, c)
	}
	return out, nil
}

func (l upstreamClasses) Get(name string) (*resourceapi.DeviceClass, error) {
	if c, ok := l[name]; ok {
		return c, nil
	}
	return nil, fmt.Errorf("no DeviceClass %s", name)
}

// upstreamAllocate is the stock allocator's decision for rc on node,
// given the claims allocated before (their results).
func upstreamAllocate(t *testing.T, node string, sl []*resourceapi.ResourceSlice, before []*resourceapi.AllocationResult, rc *resourceapi.ResourceClaim) (*resourceapi.AllocationResult, error) {
	t.Helper()
	classes := upstreamClasses{}
	for _, dc := range dradriver.DeviceClasses() {
		classes[dc.Name] = &dc
	}
	st := structured.AllocatedState{AllocatedDevices: sets.New[structured.DeviceID](), AllocatedSharedDeviceIDs: sets.New[structured.SharedDeviceID](),
		AggregatedCapacity: structured.NewConsumedCapacityCollection()}
	for _, res := range before {
		for _, r := range res.Devices.Results {
			id := structured.MakeDeviceID(r.Driver, r.Pool, r.Device)
			if r.ShareID == nil {
				st.AllocatedDevices.Insert(id)
				continue
			}
			st.AllocatedSharedDeviceIDs.Insert(structured.MakeSharedDeviceID(id, r.ShareID))
			st.AggregatedCapacity.Insert(structured.NewDeviceConsumedCapacity(id, r.ConsumedCapacity))
		}
	}
	ctx := context.Background()
	a, err := structured.NewAllocator(ctx, upstreamFeatures, st, classes, sl, cel.NewCache(100, cel.Features{EnableConsumableCapacity: true}))
	if err != nil {
		t.Fatal(err)
	}
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: node}}
	out, err := a.Allocate(ctx, n, []*resourceapi.ResourceClaim{rc})
	if err != nil {
		if errors.Is(err, structured.ErrFailedAllocationOnNode) {
			return nil, nil
		}
		return nil, err
	}
	if len(out) == 0 {
		return nil, nil
	}
	return &out[0], nil
}

// randomSub is a random subrequest over gpuslice's classes: a whole GPU,
// a share, a MIG profile (by selector), sometimes of an index, sometimes
// All.
func randomSub(r *rand.Rand, name string, models []string) sub {
	s := sub{name: name, count: int64(1 + r.IntN(2))}
	var conds []string
	switch r.IntN(3) {
	case 0:
		s.class = dranames.ClassGPU
	case 1:
		s.class = dranames.ClassShared
		s.count = 1 // at most one MPS device; a share per GPU for All
	default:
		s.class = dranames.ClassMIG
		p := []string{"1g.5gb", "2g.10gb", "3g.20gb", "4g.20gb", "7g.40gb", "1g.6gb", "2g.12gb", "4g.24gb"}[r.IntN(8)]
		conds = append(conds, attrSel("profile", "==", `"`+p+`"`))
	}
	if r.IntN(3) == 0 {
		conds = append(conds, attrSel("index", "==", fmt.Sprint(r.IntN(3))))
	}
	if r.IntN(4) == 0 {
		conds = append(conds, attrSel("model", "==", `"`+models[r.IntN(len(models))]+`"`))
	}
	s.sel = strings.Join(conds, " && ")
	if r.IntN(4) == 0 {
		s.all, s.count = true, 0
	}
	return s
}

// TestAgainstUpstreamAllocator decides random claims with prioritized
// lists and allocationMode All on random small nodes (A100-40GB and A30
// GPUs, some of them already holding random claims) with gpuslice's
// allocator and with the stock one (k8s.io/dynamic-resource-allocation's
// structured allocator, with the features the stock scheduler runs, on
// the slices dradriver publishes), and checks they agree: both allocate
// or neither does; the subrequest chosen for the first prioritized list
// (the stock allocator's is the first that fits with the rest of the
// claim, and with one list so is every one) is the same; an All request
// gets the same devices; each request the same number of devices of the
// same types; and gpuslice's allocation passes Check.
func TestAgainstUpstreamAllocator(t *testing.T) {
	trials := 150
	if testing.Short() {
		trials = 40
	}
	agree, fitted, twice, refused := 0, 0, 0, 0
	for seed := range trials {
		r := rand.New(rand.NewPCG(uint64(seed), 7))
		node := fmt.Sprintf("n%d", seed)
		models := []string{"A100-40GB", "A30"}
		n := alloc.Node{Name: node}
		for i := range 1 + r.IntN(3) {
			n.GPUs = append(n.GPUs, alloc.GPU{UUID: fmt.Sprintf("GPU-%s-%d", node, i), Index: i, Model: models[r.IntN(2)], Healthy: true})
		}
		sl, err := dradriver.Slices(n, 1, "580.65.06", nil)
		if err != nil {
			t.Fatal(err)
		}
		var ps []*resourceapi.ResourceSlice
		for i := range sl {
			ps = append(ps, &sl[i])
		}
		nd, err := NodeFromSlices(node, nil, ps, nil)
		if err != nil {
			t.Fatal(err)
		}
		s, _, err := NewState([]*NodeDevices{nd}, nil, Policy("binpack"), nil)
		if err != nil {
			t.Fatal(err)
		}
		// Claims allocated before, by gpuslice, seen by both.
		var before []*resourceapi.AllocationResult
		for k := range r.IntN(3) {
			x := randomSub(r, "x", models)
			x.all, x.count = false, 1
			rc := rcOf("team-a", fmt.Sprintf("before-%d", k), [][]sub{{x}})
			c, err := Translate(rc, 0)
			if err != nil {
				t.Fatal(err)
			}
			a, err := c.Allocate(s, nd, nil)
			if err != nil {
				continue
			}
			if err := s.Apply(a); err != nil {
				t.Fatal(err)
			}
			res, err := ToResult(a, nd, rc, nil)
			if err != nil {
				t.Fatal(err)
			}
			before = append(before, res)
		}
		// The claim: one or two requests, each exactly or a list of two
		// or three subrequests; sometimes one parent GPU for all.
		var reqs [][]sub
		for q := range 1 + r.IntN(2) {
			name := fmt.Sprintf("r%d", q)
			if r.IntN(2) == 0 {
				reqs = append(reqs, []sub{randomSub(r, name, models)})
				continue
			}
			list := []sub{{name: name}}
			for k := range 2 + r.IntN(2) {
				list = append(list, randomSub(r, fmt.Sprintf("s%d", k), models))
			}
			reqs = append(reqs, list)
		}
		var cons []resourceapi.DeviceConstraint
		if len(reqs) > 1 && r.IntN(3) == 0 {
			cons = append(cons, resourceapi.DeviceConstraint{MatchAttribute: attr(dranames.DriverName + "/parentUUID")})
		}
		rc := rcOf("team-a", "claim", reqs, cons...)
		lists := 0
		for _, q := range reqs {
			if len(q) > 1 {
				lists++
			}
		}

		up, upErr := upstreamAllocate(t, node, ps, before, rc)
		c, err := Translate(rc, 0)
		if err != nil {
			t.Fatalf("seed %d: %v", seed, err)
		}
		ours, ourErr := c.Allocate(s, nd, nil)
		var beforeText []string
		for _, b := range before {
			beforeText = append(beforeText, resultText(b))
		}
		desc := fmt.Sprintf("seed %d: GPUs %v, before %v, claim %+v constraints %d", seed, models3(n), beforeText, reqs, len(cons))
		if upErr != nil {
			// A fatal error of the stock allocator: an All of more
			// than 32 devices, which gpuslice refuses too, or a
			// device of an All request that breaks a constraint,
			// which aborts the stock allocator's whole decision
			// (gpuslice tries the next subrequest instead).
			if !strings.Contains(upErr.Error(), "constraint would not be satisfied") && ourErr == nil {
				t.Errorf("%s: upstream refuses (%v), gpuslice allocates %+v", desc, upErr, ours.Devices)
			}
			refused++
			continue
		}
		if up != nil && ourErr != nil && sharesTwice(up) {
			// The stock allocator gives one claim two shares of one
			// shared GPU; gpuslice gives a claim distinct devices.
			twice++
			continue
		}
		if (up != nil) != (ourErr == nil) {
			t.Errorf("%s: upstream allocates: %v (%s); gpuslice: %v", desc, up != nil, resultText(up), ourErr)
			continue
		}
		agree++
		if up == nil {
			continue
		}
		fitted++
		mine, err := ToResult(ours, nd, rc, nil)
		if err != nil {
			t.Fatal(err)
		}
		if err := s.Apply(ours); err != nil {
			t.Fatal(err)
		}
		if err := s.Check(); err != nil {
			t.Errorf("%s: gpuslice's allocation breaks its rules: %v", desc, err)
		}
		for qi, q := range rc.Spec.Devices.Requests {
			upRef, ourRef := chosenRef(up, q.Name), chosenRef(mine, q.Name)
			// The stock allocator searches depth first in request
			// order: a list that is the first request gets the first
			// subrequest with which the claim fits, as here; a later
			// list the first that fits beside the devices the requests
			// before it took first, so gpuslice's (the first that fits
			// at all) is never later when it is the claim's only list.
			if len(q.FirstAvailable) > 0 {
				ui, oi := subIndex(q, upRef), subIndex(q, ourRef)
				if (qi == 0 && ui != oi) || (lists == 1 && oi > ui) {
					t.Errorf("%s: request %s: upstream chose %s, gpuslice %s (upstream %s; gpuslice %s)", desc, q.Name, upRef, ourRef, resultText(up), resultText(mine))
				}
			}
			if upRef != ourRef {
				continue
			}
			upDevs, ourDevs := devicesOf(up, upRef), devicesOf(mine, ourRef)
			if len(upDevs) != len(ourDevs) {
				t.Errorf("%s: %s: upstream %v, gpuslice %v", desc, upRef, upDevs, ourDevs)
				continue
			}
			if isAll(q, upRef) && !slices.Equal(upDevs, ourDevs) {
				t.Errorf("%s: %s (All): upstream %v, gpuslice %v", desc, upRef, upDevs, ourDevs)
			}
			for i := range upDevs {
				if nd.Devices[upDevs[i]].Type != nd.Devices[ourDevs[i]].Type {
					t.Errorf("%s: %s: upstream %v, gpuslice %v", desc, upRef, upDevs, ourDevs)
				}
			}
		}
	}
	t.Logf("%d of %d random claims decided alike (%d allocated), %d the stock allocator aborts (an All of more than 32 devices, or one a constraint breaks); %d only the stock allocator fits, with two shares of one GPU",
		agree, trials, fitted, refused, twice)
}

func models3(n alloc.Node) []string {
	var out []string
	for _, g := range n.GPUs {
		out = append(out, g.Model)
	}
	return out
}

func resultText(res *resourceapi.AllocationResult) string {
	if res == nil {
		return "-"
	}
	var parts []string
	for _, r := range res.Devices.Results {
		parts = append(parts, r.Request+"="+r.Device)
	}
	return strings.Join(parts, " ")
}

// chosenRef is the request name a result gives request q's devices: q,
// or q/<subrequest>.
func chosenRef(res *resourceapi.AllocationResult, q string) string {
	for _, r := range res.Devices.Results {
		if r.Request == q || strings.HasPrefix(r.Request, q+"/") {
			return r.Request
		}
	}
	return ""
}

func devicesOf(res *resourceapi.AllocationResult, ref string) []string {
	var out []string
	for _, r := range res.Devices.Results {
		if r.Request == ref {
			out = append(out, r.Device)
		}
	}
	sort.Strings(out)
	return out
}

func subIndex(q resourceapi.DeviceRequest, ref string) int {
	for i, s := range q.FirstAvailable {
		if q.Name+"/"+s.Name == ref {
			return i
		}
	}
	return -1
}

// sharesTwice reports whether a result holds one shared device twice.
func sharesTwice(res *resourceapi.AllocationResult) bool {
	seen := map[string]bool{}
	for _, r := range res.Devices.Results {
		if r.ShareID != nil {
			if seen[r.Device] {
				return true
			}
			seen[r.Device] = true
		}
	}
	return false
}

func isAll(q resourceapi.DeviceRequest, ref string) bool {
	if q.Exactly != nil {
		return q.Exactly.AllocationMode == resourceapi.DeviceAllocationModeAll
	}
	for _, s := range q.FirstAvailable {
		if q.Name+"/"+s.Name == ref {
			return s.AllocationMode == resourceapi.DeviceAllocationModeAll
		}
	}
	return false
}
