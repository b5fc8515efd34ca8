package node

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/gpuslice/gpuslice/internal/alloc"
	"github.com/gpuslice/gpuslice/internal/catalog"
	"github.com/gpuslice/gpuslice/internal/gpu"
	"github.com/gpuslice/gpuslice/internal/mig"
)

func a100(t *testing.T) Geometries {
	t.Helper()
	m, err := catalog.Default().GPU("A100-40GB")
	if err != nil {
		t.Fatal(err)
	}
	geo, err := mig.New(m)
	if err != nil {
		t.Fatal(err)
	}
	return func(model string) *mig.Geometry {
		if model == "A100-40GB" {
			return geo
		}
		return nil
	}
}

func inst(uuid, profile string, start, size int) gpu.Instance {
	return gpu.Instance{UUID: uuid, Profile: profile, Start: start, Size: size}
}

// steps renders a plan's steps one per line, the holds they serve in
// brackets.
func steps(p Plan) string {
	var b strings.Builder
	for _, s := range p.Steps {
		fmt.Fprintf(&b, "%s %v\n", s, s.Holds)
	}
	for _, r := range p.Refused {
		fmt.Fprintf(&b, "refused %d: %v\n", r.Hold, r.Err)
	}
	return b.String()
}

func TestDecide(t *testing.T) {
	off := gpu.GPU{Index: 0, UUID: "G0", Model: "A100-40GB", MIGCapable: true}
	on := gpu.GPU{Index: 1, UUID: "G1", Model: "A100-40GB", MIGCapable: true, MIGEnabled: true,
		Instances: []gpu.Instance{inst("MIG-a", "1g.5gb", 0, 1), inst("MIG-b", "1g.5gb", 6, 1), inst("MIG-c", "2g.10gb", 2, 2)}}
	me := gpu.GPU{Index: 2, UUID: "G2", Model: "A100-40GB", MIGCapable: true, MIGEnabled: true,
		Instances: []gpu.Instance{inst("MIG-me", "1g.5gb+me", 0, 1)}}
	prohibited := gpu.GPU{Index: 3, UUID: "G3", Model: "L4", ComputeMode: gpu.ComputeProhibited}
	for _, tc := range []struct {
		name   string
		gpus   []gpu.GPU
		want   Want
		levels map[string]gpu.TimeSlice
		out    string
	}{
		{"MIG on before the create", []gpu.GPU{off},
			Want{Holds: []Hold{{Claim: "c", GPU: "G0", Profile: "3g.20gb", Start: 4, Make: true}}}, nil,
			"turn MIG on on GPU 0 [0]\ncreate MIG 3g.20gb at start 4 on GPU 0 [0]\n"},
		{"only the idle instance in the way goes; a held one stays", []gpu.GPU{on},
			Want{Holds: []Hold{{Claim: "o", GPU: "G1", Instance: "MIG-c", Profile: "2g.10gb", Start: 2},
				{Claim: "c", GPU: "G1", Profile: "3g.20gb", Start: 4, Make: true}}}, nil,
			"destroy MIG instance MIG-b (1g.5gb@6) on GPU 1 [1]\ncreate MIG 3g.20gb at start 4 on GPU 1 [1]\n"},
		{"an instance at the placement is adopted", []gpu.GPU{on},
			Want{Holds: []Hold{{Claim: "c", GPU: "G1", Profile: "1g.5gb", Start: 6, Make: true}}}, nil, ""},
		{"no overlap but no valid layout (two +me): every idle instance goes", []gpu.GPU{me},
			Want{Holds: []Hold{{Claim: "c", GPU: "G2", Profile: "1g.5gb+me", Start: 6, Make: true}}}, nil,
			"destroy MIG instance MIG-me (1g.5gb+me@0) on GPU 2 [0]\ncreate MIG 1g.5gb+me at start 6 on GPU 2 [0]\n"},
		{"whole: idle instances, MIG off, compute mode", []gpu.GPU{on},
			Want{Holds: []Hold{{Claim: "w", GPU: "G1", Mode: alloc.MPS, Make: true}}}, nil,
			"destroy MIG instance MIG-a (1g.5gb@0) on GPU 1 [0]\ndestroy MIG instance MIG-b (1g.5gb@6) on GPU 1 [0]\n" +
				"destroy MIG instance MIG-c (2g.10gb@2) on GPU 1 [0]\nturn MIG off on GPU 1 [0]\nset GPU 1's compute mode to EXCLUSIVE_PROCESS [0]\n"},
		{"whole refused beside another claim's instance", []gpu.GPU{on},
			Want{Holds: []Hold{{Claim: "o", Name: "ns/o", GPU: "G1", Instance: "MIG-a", Profile: "1g.5gb", Start: 0},
				{Claim: "w", GPU: "G1", Mode: alloc.Exclusive, Make: true}}}, nil,
			"refused 1: MIG instance 1g.5gb@0 on GPU 1 is held by claim ns/o\n"},
		{"MIG refused on a GPU another claim holds whole", []gpu.GPU{off},
			Want{Holds: []Hold{{Claim: "w", GPU: "G0", Mode: alloc.Exclusive},
				{Claim: "c", GPU: "G0", Profile: "1g.5gb", Start: 0, Make: true}}}, nil,
			"refused 1: GPU 0 is held by claim w\n"},
		{"a GPU that is not there", nil,
			Want{Holds: []Hold{{Claim: "c", GPU: "G9", Make: true}}}, nil,
			"refused 0: GPU G9: no such GPU or instance\n"},
		{"releases: by uuid, by placement; one another claim covers stays", []gpu.GPU{on},
			Want{Holds: []Hold{{Claim: "o", GPU: "G1", Profile: "2g.10gb", Start: 2}},
				Release: []Hold{{Claim: "c", GPU: "G1", Instance: "MIG-a"}, {Claim: "c", GPU: "G1", Profile: "1g.5gb", Start: 6},
					{Claim: "c", GPU: "G1", Profile: "2g.10gb", Start: 2}}}, nil,
			"destroy MIG instance MIG-a (1g.5gb@0) on GPU 1 []\ndestroy MIG instance MIG-b (1g.5gb@6) on GPU 1 []\n"},
		{"time slice: set when unknown", []gpu.GPU{off},
			Want{Holds: []Hold{{Claim: "a", GPU: "G0", Mode: alloc.TimeSlice, Interval: "Medium", Make: true},
				{Claim: "b", GPU: "G0", Mode: alloc.TimeSlice}}}, nil,
			"set GPU 0's time-slice interval to Medium [0]\n"},
		{"time slice: not again when known", []gpu.GPU{off},
			Want{Holds: []Hold{{Claim: "a", GPU: "G0", Mode: alloc.TimeSlice, Interval: "Medium", Make: true}}},
			map[string]gpu.TimeSlice{"G0": gpu.TimeSliceMedium}, ""},
		{"time slice: released, unknown, to what the rest name", []gpu.GPU{off},
			Want{Holds: []Hold{{Claim: "b", GPU: "G0", Mode: alloc.TimeSlice}},
				Release: []Hold{{Claim: "a", GPU: "G0", Mode: alloc.TimeSlice, Interval: "Long"}}}, nil,
			"set GPU 0's time-slice interval to Default []\n"},
		{"freed: compute mode and a time slice set otherwise go back", []gpu.GPU{prohibited}, Want{},
			map[string]gpu.TimeSlice{"G3": gpu.TimeSliceShort},
			"set GPU 3's compute mode to DEFAULT []\nset GPU 3's time-slice interval to Default []\n"},
		{"held, nothing to make: left as it is", []gpu.GPU{prohibited},
			Want{Holds: []Hold{{Claim: "a", GPU: "G3", Mode: alloc.Exclusive}}}, nil, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := Decide(tc.want, Observed{GPUs: tc.gpus, TimeSlice: tc.levels}, a100(t))
			if got := steps(p); got != tc.out {
				t.Fatalf("plan:\n%s\nwant:\n%s", got, tc.out)
			}
		})
	}
}

func TestDecideAdoptsAndRefusesTyped(t *testing.T) {
	on := gpu.GPU{Index: 1, UUID: "G1", Model: "A100-40GB", MIGEnabled: true, Instances: []gpu.Instance{inst("MIG-a", "1g.5gb", 0, 1)}}
	c := Hold{Claim: "c", GPU: "G1", Profile: "1g.5gb", Start: 0, Make: true}
	p := Decide(Want{Holds: []Hold{c}}, Observed{GPUs: []gpu.GPU{on}}, nil)
	if p.Found[0] != "MIG-a" || len(p.Steps) != 0 {
		t.Fatalf("found %v, steps %v", p.Found, p.Steps)
	}
	// Both to make, each the other way: both refused.
	p = Decide(Want{Holds: []Hold{c, {Claim: "w", GPU: "G1", Make: true}}}, Observed{GPUs: []gpu.GPU{on}}, nil)
	if len(p.Refused) != 2 {
		t.Fatalf("refused %+v", p.Refused)
	}
	c.Make = false
	p = Decide(Want{Holds: []Hold{c, {Claim: "w", GPU: "G1", Make: true}}}, Observed{GPUs: []gpu.GPU{on}}, nil)
	var he *HeldError
	if len(p.Refused) != 1 || !errors.As(p.Refused[0].Err, &he) || he.Holder != "c" {
		t.Fatalf("refused %+v", p.Refused)
	}
}

func TestTimeSliceLevels(t *testing.T) {
	ts := func(claim, g, interval string) Hold {
		return Hold{Claim: claim, GPU: g, Mode: alloc.TimeSlice, Interval: interval}
	}
	got := TimeSliceLevels([]Hold{ts("b", "G0", "Medium"), ts("a", "G0", ""), ts("c", "G1", ""),
		{Claim: "d", GPU: "G2", Mode: alloc.MPS}, {Claim: "e", GPU: "G3", Mode: alloc.TimeSlice, Profile: "1g.5gb"}})
	if len(got) != 2 || got["G0"] != gpu.TimeSliceMedium || got["G1"] != gpu.TimeSliceDefault {
		t.Fatalf("levels %v", got)
	}
	if who, l := IntervalConflict(ts("x", "G0", "Short"), []Hold{ts("b", "G0", "Medium")}); who != "b" || l != "Medium" {
		t.Fatalf("conflict %q %q", who, l)
	}
	if who, _ := IntervalConflict(ts("x", "G0", ""), []Hold{ts("b", "G0", "Medium")}); who != "" {
		t.Fatalf("a claim naming no interval conflicts with %q", who)
	}
}
