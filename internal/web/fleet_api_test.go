package web_test

import (
	"net/http"
	"strings"
	"testing"

	"github.com/gpuslice/gpuslice/internal/alloc"
	"github.com/gpuslice/gpuslice/internal/api"
	"github.com/gpuslice/gpuslice/internal/gpu/fake"
	"github.com/gpuslice/gpuslice/internal/server"
	"github.com/gpuslice/gpuslice/internal/web"
)

func migReq(profile string) server.CreateClaimRequest {
	return server.CreateClaimRequest{ClaimSpec: api.ClaimSpec{Requests: []alloc.Request{{Name: "gpu", Mode: alloc.MIG, Profile: profile}}}}
}

func findDevice(f web.Fleet, pred func(web.FleetGPU, web.FleetDevice) bool) (web.FleetGPU, web.FleetDevice, bool) {
	for _, n := range f.Nodes {
		for _, g := range n.GPUs {
			for _, d := range g.Devices {
				if pred(g, d) {
					return g, d, true
				}
			}
		}
	}
	return web.FleetGPU{}, web.FleetDevice{}, false
}

// GET /v1/fleet draws MIG instances where the agent really made them, with
// the model's geometry (8 memory slices on an A100, 4 on an A30), and a
// tenant sees other tenants' claims only as anonymous shares.
func TestFleetViewPlacementsAndScope(t *testing.T) {
	l := newLive(t)
	l.machine("gpu-a", fake.MachineSpec{GPUs: []fake.GPUSpec{{Model: "A100-40GB", MIGEnabled: true}, {Model: "A30", MIGEnabled: true}, {Model: "L4"}}})
	acme, beta := l.tenant("acme", 0), l.tenant("beta", 0)
	var a, b api.Claim
	l.must(acme, "POST", "/v1/claims", migReq("3g.20gb"), 201, &a)
	l.must(beta, "POST", "/v1/claims", migReq("2g.12gb"), 201, &b)
	real := func(c api.Claim) bool {
		return c.Allocation != nil && !strings.Contains(c.Allocation.Devices[0].Device, "@") // renamed to the real MIG uuid
	}
	a = l.waitClaim(acme, a.ID, real)
	b = l.waitClaim(beta, b.ID, real)

	var f web.Fleet
	l.must(l.admin, "GET", "/v1/fleet", nil, 200, &f)
	for _, c := range []api.Claim{a, b} {
		ad := c.Allocation.Devices[0]
		g, d, ok := findDevice(f, func(g web.FleetGPU, d web.FleetDevice) bool { return d.ID == ad.Device })
		if !ok {
			t.Fatalf("claim %s's device %s is not in the fleet view: %+v", c.ID, ad.Device, f)
		}
		if d.Profile != ad.Profile || d.Start != ad.Start || d.Planned || d.Mode != "exclusive" {
			t.Errorf("device %+v, want profile %s at %d, real, exclusive", d, ad.Profile, ad.Start)
		}
		if len(d.Claims) != 1 || d.Claims[0].Claim != c.ID || d.Claims[0].Tenant != c.Tenant || d.Claims[0].MemoryShare != 1 {
			t.Errorf("device %s claims %+v, want %s of %s holding all of it", d.ID, d.Claims, c.ID, c.Tenant)
		}
		wantSlices, wantSize := map[string]int{"A100-40GB": 8, "A30": 4}[g.Model], map[string]int{"3g.20gb": 4, "2g.12gb": 2}[d.Profile]
		if g.MemorySlices != wantSlices || d.Size != wantSize || !g.MIG {
			t.Errorf("GPU %s: %d slices (want %d), %s size %d (want %d)", g.Model, g.MemorySlices, wantSlices, d.Profile, d.Size, wantSize)
		}
	}
	_, l4, ok := findDevice(f, func(g web.FleetGPU, d web.FleetDevice) bool { return g.Model == "L4" })
	if !ok || l4.Size != 1 || l4.Profile != "" || l4.Mode != "idle" {
		t.Errorf("L4 (no MIG) should be one idle whole-GPU device: %+v", l4)
	}

	// acme's view: its own claim named, beta's anonymous.
	f = web.Fleet{}
	l.must(acme, "GET", "/v1/fleet", nil, 200, &f)
	if f.Viewer != "acme" {
		t.Errorf("viewer %q", f.Viewer)
	}
	_, d, _ := findDevice(f, func(g web.FleetGPU, d web.FleetDevice) bool { return d.ID == b.Allocation.Devices[0].Device })
	if len(d.Claims) != 1 || d.Claims[0].Claim != "" || d.Claims[0].Tenant != "" {
		t.Errorf("acme sees beta's claim as %+v, want an anonymous share", d.Claims)
	}
	_, d, _ = findDevice(f, func(g web.FleetGPU, d web.FleetDevice) bool { return d.ID == a.Allocation.Devices[0].Device })
	if len(d.Claims) != 1 || d.Claims[0].Claim != a.ID {
		t.Errorf("acme does not see its own claim: %+v", d.Claims)
	}

	// The dashboard: acme sees only itself.
	var dash server.Dashboard
	l.must(acme, "GET", "/v1/dashboard", nil, 200, &dash)
	if len(dash.Tenants) != 1 || dash.Tenants[0].Name != "acme" || dash.Tenants[0].Usage.Claims != 1 {
		t.Errorf("acme's dashboard tenants: %+v", dash.Tenants)
	}
	for _, s := range dash.Series {
		for name := range s.Tenants {
			if name != "acme" {
				t.Errorf("acme's series names tenant %s", name)
			}
		}
	}
	if c := dash.Tenants[0].Cost; c.PerHour <= 0 || c.DedicatedPerHour <= c.PerHour {
		t.Errorf("acme's cost %+v: a 3g.20gb should cost something, and less than a dedicated A100", c)
	}

	// Anonymous: the page (login only) but no data.
	for _, p := range []string{"/v1/fleet", "/v1/dashboard"} {
		if code, _ := l.call("", "GET", p, nil); code != http.StatusUnauthorized {
			t.Errorf("anonymous GET %s: %d, want 401", p, code)
		}
	}
	code, page := l.call("", "GET", "/", nil)
	if code != 200 || !strings.Contains(string(page), `id="login-form"`) || strings.Contains(string(page), a.ID) {
		t.Errorf("anonymous GET /: %d, want the login page and no data", code)
	}
	if code, _ := l.call("", "GET", "/ui/app.js", nil); code != 200 {
		t.Errorf("GET /ui/app.js: %d", code)
	}
	for _, p := range []string{"/ui/missing.js", "/ui/index.html", "/nothing"} {
		if code, _ := l.call("", "GET", p, nil); code != http.StatusNotFound && code != http.StatusUnauthorized {
			t.Errorf("GET %s: %d, want 404", p, code)
		}
	}
}
