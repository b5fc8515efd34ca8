package mps_test

import (
	"reflect"
	"slices"
	"testing"

	"github.com/gpuslice/gpuslice/internal/alloc"
	"github.com/gpuslice/gpuslice/internal/api"
	"github.com/gpuslice/gpuslice/internal/gpu"
	"github.com/gpuslice/gpuslice/internal/node/mps"
)

// pipeDir is alloc.PipeDirectory of an id the test knows is fine.
func pipeDir(id string) string {
	p, err := alloc.PipeDirectory(id)
	if err != nil {
		panic(err)
	}
	return p
}

func TestWantFromClaims(t *testing.T) {
	const g0, g1, mig0 = "GPU-0000", "GPU-1111", "MIG-aaaa"
	sharing := func(pct int, mib int64) *alloc.Sharing {
		return &alloc.Sharing{Mode: alloc.MPS, MaxClients: 4, DefaultThreadPercent: pct, DefaultPinnedMiB: mib}
	}
	whole := func(gpuID string) mps.Daemon {
		p := pipeDir(gpuID)
		return mps.Daemon{Device: gpuID, GPU: gpuID, GPUIndex: -1, PipeDir: p, LogDir: p + "/log"}
	}
	withDefaults := func(d mps.Daemon, pct int, mib int64) mps.Daemon {
		d.DefaultThreadPercent, d.DefaultPinnedMiB = pct, mib
		return d
	}
	migD := mps.Daemon{Device: mig0, GPU: g1, GPUIndex: -1, MIG: true, PipeDir: pipeDir(mig0), LogDir: pipeDir(mig0) + "/log"}
	withChanges := func(c api.Claim, chs ...alloc.Change) api.Claim {
		c.Allocation.Changes = chs
		return c
	}
	other := func(c api.Claim, mode alloc.Mode) api.Claim {
		c.Allocation.Devices[0].Mode, c.Allocation.Devices[0].MPS = mode, nil
		return c
	}

	for _, tc := range []struct {
		name   string
		claims []api.Claim
		want   []mps.Daemon
	}{
		{name: "no claims"},
		{name: "one MPS claim on a whole GPU, no sharing change", claims: []api.Claim{
			mpsClaim("c-1", "a", 1, "n1", dev(g0, g0, "")),
		}, want: []mps.Daemon{whole(g0)}},
		{name: "two clients share one daemon; defaults from the configuring claim", claims: []api.Claim{
			mpsClaim("c-2", "a", 2, "n1", dev(g0, g0, "")),
			withChanges(mpsClaim("c-1", "a", 1, "n1", dev(g0, g0, "")),
				alloc.Change{Kind: alloc.ConfigureShare, Node: "n1", GPU: g0, Device: g0, Sharing: sharing(25, 8192)}),
		}, want: []mps.Daemon{withDefaults(whole(g0), 25, 8192)}},
		{name: "the oldest claim's sharing wins", claims: []api.Claim{
			withChanges(mpsClaim("c-9", "a", 9, "n1", dev(g0, g0, "")),
				alloc.Change{Kind: alloc.ConfigureShare, Node: "n1", GPU: g0, Device: g0, Sharing: sharing(10, 1)}),
			withChanges(mpsClaim("c-3", "a", 3, "n1", dev(g0, g0, "")),
				alloc.Change{Kind: alloc.ConfigureShare, Node: "n1", GPU: g0, Device: g0, Sharing: sharing(50, 2048)}),
		}, want: []mps.Daemon{withDefaults(whole(g0), 50, 2048)}},
		{name: "MIG instance created as MPS, and a GPU whose MIG was switched off", claims: []api.Claim{
			withChanges(mpsClaim("c-1", "a", 1, "n1", dev(g1, mig0, "")),
				alloc.Change{Kind: alloc.CreateInstance, Node: "n1", GPU: g1, Device: mig0, Profile: "3g.20gb", Start: 4, Sharing: sharing(100, 0)}),
			withChanges(mpsClaim("c-2", "b", 2, "n1", dev(g0, g0, "")),
				alloc.Change{Kind: alloc.DisableMIG, Node: "n1", GPU: g0, Disruptive: true, Sharing: sharing(33, 4096)}),
		}, want: []mps.Daemon{withDefaults(whole(g0), 33, 4096), withDefaults(migD, 100, 0)}},
		{name: "a non-MPS sharing change is ignored", claims: []api.Claim{
			withChanges(mpsClaim("c-1", "a", 1, "n1", dev(g0, g0, "")),
				alloc.Change{Kind: alloc.ConfigureShare, Node: "n1", GPU: g0, Device: g0, Sharing: &alloc.Sharing{Mode: alloc.TimeSlice, Replicas: 4}}),
		}, want: []mps.Daemon{whole(g0)}},
		{name: "other nodes, other modes, planned devices and final claims are left out", claims: []api.Claim{
			mpsClaim("c-1", "a", 1, "n2", dev(g0, g0, "")),
			other(mpsClaim("c-2", "a", 2, "n1", dev(g0, g0, "")), alloc.TimeSlice),
			mpsClaim("c-3", "a", 3, "n1", dev(g1, g1+"/3g.20gb@4", "")),
			func() api.Claim {
				c := mpsClaim("c-4", "a", 4, "n1", dev(g1, g1, ""))
				c.State = api.Released
				return c
			}(),
			{ID: "c-5", State: api.Pending},
		}},
		{name: "the allocation's pipe directory is used", claims: []api.Claim{
			mpsClaim("c-1", "a", 1, "n1", dev(g0, g0, "/srv/mps/x")),
		}, want: []mps.Daemon{{Device: g0, GPU: g0, GPUIndex: -1, PipeDir: "/srv/mps/x", LogDir: "/srv/mps/x/log"}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := mps.WantFromClaims(tc.claims, "n1")
			if len(got) == 0 && len(tc.want) == 0 {
				return
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("got  %+v\nwant %+v", got, tc.want)
			}
		})
	}
}

// The log directory WantFromClaims picks is the one the allocation hands
// its clients.
func TestWantMatchesClientEnv(t *testing.T) {
	st, err := alloc.NewState(alloc.Fleet{Nodes: []alloc.Node{{Name: "n1", GPUs: []alloc.GPU{{
		UUID: "GPU-0000", Model: "A100-40GB", Healthy: true,
		Sharing: alloc.Sharing{Mode: alloc.MPS, MaxClients: 4, DefaultThreadPercent: 25},
	}}}}}, nil, alloc.Options{})
	if err != nil {
		t.Fatal(err)
	}
	a, err := st.Allocate(&alloc.Claim{Name: "c-1", Tenant: "a", Requests: []alloc.Request{{Name: "r", Mode: alloc.MPS, MemoryMiB: 4096}}})
	if err != nil {
		t.Fatal(err)
	}
	want := mps.WantFromClaims([]api.Claim{{ID: "c-1", State: api.Allocated, Allocation: a}}, "n1")
	if len(want) != 1 {
		t.Fatalf("want %+v", want)
	}
	if want[0].PipeDir != a.Env["CUDA_MPS_PIPE_DIRECTORY"] || want[0].LogDir != a.Env["CUDA_MPS_LOG_DIRECTORY"] {
		t.Errorf("daemon dirs %s, %s; client env %v", want[0].PipeDir, want[0].LogDir, a.Env)
	}
}

func TestResolve(t *testing.T) {
	gpus := []gpu.GPU{
		{Index: 0, UUID: "GPU-0000"},
		{Index: 1, UUID: "GPU-1111", MIGEnabled: true, Instances: []gpu.Instance{{UUID: "MIG-aaaa"}}},
		{Index: 2, UUID: "GPU-2222", MIGEnabled: true},
	}
	want := []mps.Daemon{
		{Device: "GPU-0000", GPUIndex: -1},
		{Device: "MIG-aaaa", GPU: "GPU-1111", GPUIndex: -1, MIG: true},
		{Device: "MIG-bbbb", GPU: "GPU-1111", GPUIndex: -1, MIG: true}, // not created yet
		{Device: "GPU-2222", GPUIndex: -1},                             // still in MIG mode
		{Device: "GPU-9999", GPUIndex: -1},                             // not on this node
	}
	ready, missing := mps.Resolve(want, gpus)
	var got []string
	for _, d := range ready {
		got = append(got, d.Device)
		if wantIdx := map[string]int{"GPU-0000": 0, "MIG-aaaa": 1}[d.Device]; d.GPUIndex != wantIdx {
			t.Errorf("%s: GPU index %d, want %d", d.Device, d.GPUIndex, wantIdx)
		}
	}
	if !slices.Equal(got, []string{"GPU-0000", "MIG-aaaa"}) || !slices.Equal(missing, []string{"MIG-bbbb", "GPU-2222", "GPU-9999"}) {
		t.Errorf("ready %v, missing %v", got, missing)
	}
	if want[0].GPUIndex != -1 {
		t.Error("Resolve changed its input")
	}
}
