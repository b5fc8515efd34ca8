package alloc

import (
	"slices"
	"strings"
	"testing"
)

func TestSmoke(t *testing.T) {
	s := newState(t, Policy{}, gpuNode("n1", "A100-40GB", 2, migDynamic), gpuNode("n2", "T4", 2))
	a := must(t, s, claim("c1", "acme", Request{MemoryMiB: 4000, ComputePercent: 10}))
	t.Logf("%+v", a)
	b := must(t, s, claim("c2", "acme", Request{MemoryMiB: 4000, ComputePercent: 10, Mode: TimeSlice}))
	t.Logf("%+v", b)
	c := must(t, s, claim("c3", "beta", Request{MemoryMiB: 14000, Mode: Exclusive}))
	t.Logf("%+v", c)
	_, err := s.Allocate(claim("c4", "beta", Request{MemoryMiB: 90000}))
	if !IsNoFit(err) || !strings.Contains(err.Error(), "insufficient GPU memory") {
		t.Fatalf("got %v", err)
	}
	t.Log(err)
	if err := s.Release("c1"); err != nil {
		t.Fatal(err)
	}
}

// A device the fleet reports as dynamic goes back to dynamic when its last
// claim leaves: a GPU once held exclusively can be time-sliced next.
func TestDynamicDeviceForgetsItsSharingWhenIdle(t *testing.T) {
	f := Fleet{Nodes: []Node{{Name: "n", GPUs: []GPU{
		{UUID: "G0", Model: "L4", Healthy: true, Sharing: Sharing{Mode: Dynamic}},
	}}}}
	s, err := NewState(f, nil, Options{})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []*Claim{
		{Name: "ex", Tenant: "a", Requests: []Request{{Name: "gpu", Mode: Exclusive}}},
		{Name: "ts", Tenant: "b", Requests: []Request{{Name: "gpu", Mode: TimeSlice, MemoryMiB: 4000}}},
		{Name: "mps", Tenant: "c", Requests: []Request{{Name: "gpu", Mode: MPS, MemoryMiB: 4000}}},
	} {
		a, err := s.Allocate(c)
		if err != nil {
			t.Fatalf("%s after the previous claim left: %v", c.Name, err)
		}
		if err := s.Apply(a); err != nil {
			t.Fatal(err)
		}
		if err := s.Release(c.Name); err != nil {
			t.Fatal(err)
		}
		if err := s.Check(); err != nil {
			t.Fatal(err)
		}
	}
	if sh := s.Fleet().Nodes[0].GPUs[0].Sharing; sh.Mode != Dynamic {
		t.Errorf("idle GPU reports sharing %+v, want dynamic", sh)
	}
}

// Under spread a time-sliced claim joins the shared device with the most
// room, not the tightest fit.
func TestSpreadJoinsTheLoosestDevice(t *testing.T) {
	f := Fleet{Policy: Policy{Placement: "spread"}, Nodes: []Node{{Name: "n", GPUs: []GPU{
		{UUID: "G0", Model: "L4", Healthy: true, Sharing: Sharing{Mode: TimeSlice, Replicas: 4}},
		{UUID: "G1", Index: 1, Model: "L4", Healthy: true, Sharing: Sharing{Mode: TimeSlice, Replicas: 4}},
	}}}}
	s, err := NewState(f, nil, Options{})
	if err != nil {
		t.Fatal(err)
	}
	place := func(name string, mem int64, on string) string {
		t.Helper()
		r := Request{Name: "gpu", Mode: TimeSlice, MemoryMiB: mem}
		if on != "" {
			r.Selector = "device.attributes['gpu.nvidia.com'].uuid == '" + on + "'"
		}
		a, err := s.Allocate(&Claim{Name: name, Tenant: "a", Requests: []Request{r}})
		if err != nil {
			t.Fatal(err)
		}
		if err := s.Apply(a); err != nil {
			t.Fatal(err)
		}
		return a.Devices[0].GPU
	}
	place("big", 16000, "G0")
	place("small", 2000, "G1")
	if got := place("third", 2000, ""); got != "G1" {
		t.Errorf("third claim joined %s; want G1, the shared device with more room", got)
	}
}

func TestSelectorNames(t *testing.T) {
	attrs, caps, err := SelectorNames(`device.attributes['gpu.nvidia.com'].model == 'A100-40GB' && ` +
		`device.attributes["gpu.nvidia.com"]['memoryMiB'] >= 40000 && node.labels['zone'] == 'a' && ` +
		`device.capacity['gpu.nvidia.com'].memory.compareTo(quantity('10Gi')) >= 0 && device.attributes['gpu.nvidia.com'].model != ''`)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(attrs, []string{"model", "memoryMiB"}) || !slices.Equal(caps, []string{"memory"}) {
		t.Errorf("attributes %v capacities %v", attrs, caps)
	}
	if _, _, err := SelectorNames("device.attributes[ "); err == nil {
		t.Error("a broken selector parsed")
	}
}

// Selectors written for NVIDIA's DRA driver, with Kubernetes' quantity
// functions, work unchanged; a quantity literal that does not parse is an
// error that says what was likely meant.
func TestSelectorQuantities(t *testing.T) {
	s := newState(t, Policy{}, gpuNode("n1", "L4", 1), gpuNode("n2", "A100-40GB", 1))
	for sel, node := range map[string]string{
		"device.capacity['gpu.nvidia.com'].memory.compareTo(quantity('30Gi')) >= 0":                       "n2",
		"device.capacity['gpu.nvidia.com'].memory.isLessThan(quantity('30Gi'))":                           "n1",
		"device.capacity['gpu.nvidia.com'].memory.isGreaterThan(quantity('24Gi')) && isQuantity('1.5Gi')": "n2",
		"device.capacity['gpu.nvidia.com'].memory.asInteger() == quantity('24Gi')":                        "n1",
	} {
		a, err := s.Allocate(claim("c", "t", Request{Mode: Exclusive, Selector: sel}))
		if err != nil || a.Devices[0].Node != node {
			t.Errorf("%s: %v %v, want node %s", sel, a, err, node)
		}
	}
	_, err := s.Allocate(claim("c", "t", Request{Selector: "device.capacity['gpu.nvidia.com'].memory.compareTo(quantity('10GB')) >= 0"}))
	if err == nil || !strings.Contains(err.Error(), `did you mean "10Gi" or "10G"?`) {
		t.Errorf("bad quantity: %v", err)
	}
}
