package agent_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/gpuslice/gpuslice/internal/agent"
	"github.com/gpuslice/gpuslice/internal/alloc"
	"github.com/gpuslice/gpuslice/internal/api"
	"github.com/gpuslice/gpuslice/internal/client"
	"github.com/gpuslice/gpuslice/internal/gpu"
	"github.com/gpuslice/gpuslice/internal/gpu/fake"
	"github.com/gpuslice/gpuslice/internal/server"
	"github.com/gpuslice/gpuslice/internal/state"
)

// These tests drive the agent against a real server (memory store) on
// simulated GPUs, for the rules the agent shares with the DRA plugin
// through internal/node: idle MIG instances in the way are cleared before
// a MIG change, whole GPUs get their compute mode (and get DEFAULT back
// when freed), time-sliced GPUs get the interval their allocation names.

type rig struct {
	t      *testing.T
	url    string
	admin  string
	tenant string
	m      *fake.Machine
	ag     *agent.Agent
}

func newRig(t *testing.T, spec fake.MachineSpec) *rig {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	srv, err := server.New(ctx, server.Config{Store: state.NewMemory(), Log: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(srv.Handler())
	t.Cleanup(hs.Close)
	tok, err := srv.CreateToken(ctx, api.RoleAdmin, "")
	if err != nil {
		t.Fatal(err)
	}
	r := &rig{t: t, url: hs.URL, admin: tok.Secret}
	r.must(r.admin, "PUT", "/v1/tenants/acme", api.Tenant{}, 200, nil)
	var tt, at api.Token
	r.must(r.admin, "POST", "/v1/tokens", api.CreateTokenRequest{Role: api.RoleTenant, Tenant: "acme"}, 201, &tt)
	r.must(r.admin, "POST", "/v1/tokens", api.CreateTokenRequest{Role: api.RoleAgent}, 201, &at)
	r.tenant = tt.Secret
	if r.m, err = fake.New(spec, fake.WithSeed(11)); err != nil {
		t.Fatal(err)
	}
	c, err := client.New(hs.URL, at.Secret, nil)
	if err != nil {
		t.Fatal(err)
	}
	if r.ag, err = agent.New(agent.Config{Name: "host-a", Client: c, Device: r.m, Log: slog.New(slog.NewTextHandler(io.Discard, nil))}); err != nil {
		t.Fatal(err)
	}
	if err := r.ag.Register(ctx); err != nil {
		t.Fatal(err)
	}
	return r
}

func (r *rig) must(token, method, path string, body any, want int, out any) {
	r.t.Helper()
	data, _ := json.Marshal(body)
	req, _ := http.NewRequest(method, r.url+path, bytes.NewReader(data))
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		r.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != want {
		r.t.Fatalf("%s %s: HTTP %d, want %d: %s", method, path, resp.StatusCode, want, b)
	}
	if out != nil {
		if err := json.Unmarshal(b, out); err != nil {
			r.t.Fatal(err)
		}
	}
}

func (r *rig) claim(req alloc.Request) api.Claim {
	r.t.Helper()
	var c api.Claim
	r.must(r.tenant, "POST", "/v1/claims", api.CreateClaimRequest{ClaimSpec: api.ClaimSpec{Requests: []alloc.Request{req}}}, 201, &c)
	if c.State != api.Allocated {
		r.t.Fatalf("claim %+v: not allocated", c)
	}
	return c
}

func (r *rig) step() {
	r.t.Helper()
	if err := r.ag.Step(context.Background()); err != nil {
		r.t.Fatalf("agent step: %v", err)
	}
}

func (r *rig) gpu(i int) gpu.GPU {
	r.t.Helper()
	gs, err := r.m.GPUs(context.Background())
	if err != nil {
		r.t.Fatal(err)
	}
	return gs[i]
}

// Idle instances the server does not know of (left behind, made by hand)
// that are in the way of a planned instance are destroyed before it is
// created; those out of its way stay. (Before internal/node, the agent
// applied the server's changes alone: the create failed.)
func TestAgentClearsIdleInstancesInTheWay(t *testing.T) {
	r := newRig(t, fake.MachineSpec{GPUs: []fake.GPUSpec{{Model: "A100-40GB", MIGEnabled: true}}})
	ctx := context.Background()
	// Behind the server's back: a 1g.5gb on every start.
	for start := 0; start < 7; start++ {
		if _, err := r.m.CreateInstance(ctx, 0, "1g.5gb", start); err != nil {
			t.Fatal(err)
		}
	}
	c := r.claim(alloc.Request{Name: "gpu", Profile: "3g.20gb"})
	d := c.Allocation.Devices[0]
	r.step()
	var got, rest int
	for _, in := range r.gpu(0).Instances {
		switch {
		case in.Profile == "3g.20gb" && in.Start == d.Start:
			got++
		case in.Profile == "1g.5gb" && (in.Start < d.Start || in.Start >= d.Start+4):
			rest++
		default:
			t.Errorf("instance %s@%d left in the way of 3g.20gb@%d", in.Profile, in.Start, d.Start)
		}
	}
	outside := 0
	for start := 0; start < 7; start++ {
		if start < d.Start || start >= d.Start+4 {
			outside++
		}
	}
	if got != 1 || rest != outside {
		t.Fatalf("instances %+v: want the 3g.20gb at %d and the idle ones out of its way", r.gpu(0).Instances, d.Start)
	}
	r.must(r.tenant, "GET", "/v1/claims/"+c.ID, nil, 200, &c)
	if alloc.IsPlanned(c.Allocation.Devices[0].Device) {
		t.Fatalf("the server never learned the instance's uuid: %+v", c.Allocation.Devices[0])
	}
}

// A time-sliced GPU's compute mode is DEFAULT (whatever it was) and the
// time slice its allocation configured is set; an MPS GPU is in
// EXCLUSIVE_PROCESS while held and back in DEFAULT once freed. (Before
// internal/node, only the MPS manager touched compute modes, on real
// GPUs, and no time slice was set.)
func TestAgentShapesWholeGPUs(t *testing.T) {
	r := newRig(t, fake.MachineSpec{GPUs: []fake.GPUSpec{{Model: "A100-40GB"}}})
	ctx := context.Background()
	if err := r.m.SetComputeMode(ctx, 0, gpu.ComputeProhibited); err != nil {
		t.Fatal(err)
	}
	if err := r.m.SetTimeSlice(ctx, 0, gpu.TimeSliceLong); err != nil {
		t.Fatal(err)
	}
	c := r.claim(alloc.Request{Name: "gpu", Mode: alloc.TimeSlice, MemoryMiB: 4096})
	r.step()
	if g := r.gpu(0); g.ComputeMode != gpu.ComputeDefault {
		t.Fatalf("time-sliced GPU in compute mode %v, want DEFAULT", g.ComputeMode)
	}
	if l, _ := r.m.TimeSlice(0); l != gpu.TimeSliceDefault {
		t.Fatalf("time slice %v, want the allocation's Default", l)
	}
	r.must(r.tenant, "DELETE", "/v1/claims/"+c.ID, nil, 200, nil)

	// MPS: EXCLUSIVE_PROCESS while held, DEFAULT once freed.
	c = r.claim(alloc.Request{Name: "gpu", Mode: alloc.MPS, MemoryMiB: 4096})
	r.step()
	if g := r.gpu(0); g.ComputeMode != gpu.ComputeExclusiveProcess {
		t.Fatalf("MPS GPU in compute mode %v, want EXCLUSIVE_PROCESS", g.ComputeMode)
	}
	r.must(r.tenant, "DELETE", "/v1/claims/"+c.ID, nil, 200, nil)
	r.step()
	if g := r.gpu(0); g.ComputeMode != gpu.ComputeDefault {
		t.Fatalf("freed GPU in compute mode %v, want DEFAULT", g.ComputeMode)
	}
}
