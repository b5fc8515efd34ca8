package web_test

import (
	"bufio"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gpuslice/gpuslice/internal/alloc"
	"github.com/gpuslice/gpuslice/internal/api"
	"github.com/gpuslice/gpuslice/internal/gpu/fake"
	"github.com/gpuslice/gpuslice/internal/web"
)

func migReq(profile string) api.CreateClaimRequest {
	return api.CreateClaimRequest{ClaimSpec: api.ClaimSpec{Requests: []alloc.Request{{Name: "gpu", Mode: alloc.MIG, Profile: profile}}}}
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
	t.Parallel()
	l := newLive(t)
	l.Machine("gpu-a", fake.MachineSpec{GPUs: []fake.GPUSpec{{Model: "A100-40GB", MIGEnabled: true}, {Model: "A30", MIGEnabled: true}, {Model: "L4"}}})
	acme, beta := l.Tenant("acme", 0), l.Tenant("beta", 0)
	var a, b api.Claim
	l.Must(acme, "POST", "/v1/claims", migReq("3g.20gb"), 201, &a)
	l.Must(beta, "POST", "/v1/claims", migReq("2g.12gb"), 201, &b)
	real := func(c api.Claim) bool {
		return c.Allocation != nil && !strings.Contains(c.Allocation.Devices[0].Device, "@") // renamed to the real MIG uuid
	}
	a = l.waitClaim(acme, a.ID, real)
	b = l.waitClaim(beta, b.ID, real)

	var f web.Fleet
	l.Must(l.Admin, "GET", "/v1/fleet", nil, 200, &f)
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
	l.Must(acme, "GET", "/v1/fleet", nil, 200, &f)
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
	var dash web.Dashboard
	l.Must(acme, "GET", "/v1/dashboard", nil, 200, &dash)
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
		if code, _ := l.Call("", "GET", p, nil); code != http.StatusUnauthorized {
			t.Errorf("anonymous GET %s: %d, want 401", p, code)
		}
	}
	code, page := l.Call("", "GET", "/", nil)
	if code != 200 || !strings.Contains(string(page), `id="login-form"`) || strings.Contains(string(page), a.ID) {
		t.Errorf("anonymous GET /: %d, want the login page and no data", code)
	}
	if code, _ := l.Call("", "GET", "/ui/app.js", nil); code != 200 {
		t.Errorf("GET /ui/app.js: %d", code)
	}
	for _, p := range []string{"/ui/missing.js", "/ui/index.html", "/nothing"} {
		if code, _ := l.Call("", "GET", p, nil); code != http.StatusNotFound && code != http.StatusUnauthorized {
			t.Errorf("GET %s: %d, want 404", p, code)
		}
	}
}

// Every dashboard view and stream, read with a tenant's token, shows
// other tenants' shares without claim or tenant, and none of their claims,
// events, usage or names; another tenant's pages are 404s.
func TestDashboardViewsKeepTenantsApart(t *testing.T) {
	t.Parallel()
	l := newLive(t)
	l.Machine("gpu-a", fake.MachineSpec{GPUs: []fake.GPUSpec{{Model: "A100-40GB", MIGEnabled: true}, {Model: "A30", MIGEnabled: true}, {Model: "L4"}}})
	acme, beta := l.Tenant("acme", 0), l.Tenant("beta-secret", 0)
	var a, b api.Claim
	l.Must(acme, "POST", "/v1/claims", migReq("3g.20gb"), 201, &a)
	l.Must(beta, "POST", "/v1/claims", migReq("2g.12gb"), 201, &b)
	real := func(c api.Claim) bool {
		return c.Allocation != nil && !strings.Contains(c.Allocation.Devices[0].Device, "@")
	}
	a, b = l.waitClaim(acme, a.ID, real), l.waitClaim(beta, b.ID, real)
	secrets := []string{"beta-secret", b.ID}
	clean := func(what string, body []byte) {
		t.Helper()
		for _, s := range secrets {
			if strings.Contains(string(body), s) {
				t.Errorf("acme's %s shows %q: %.400s", what, s, body)
			}
		}
	}
	// beta's GPU is the A30 (index 1); acme's the A100 (index 0).
	for _, path := range []string{"/v1/fleet", "/v1/fleet?node=gpu-a", "/v1/fleet/grid", "/v1/fleet/summary", "/v1/fleet/gpus/gpu-a/1",
		"/v1/fleet/gpus/gpu-a/0", "/v1/dashboard", "/v1/dashboard?q=beta", "/v1/dashboard?sort=cost", "/v1/dashboard/tenants/acme", "/v1/usage",
		"/v1/claims/" + a.ID + "/events"} {
		code, body := l.Call(acme, "GET", path, nil)
		if code != http.StatusOK {
			t.Errorf("acme GET %s: %d %s", path, code, body)
		}
		clean(path, body)
	}
	// The grid names acme only; beta's share is there, as tenant -1.
	var g web.Grid
	l.Must(acme, "GET", "/v1/fleet/grid", nil, 200, &g)
	if len(g.Tenants) != 1 || g.Tenants[0] != "acme" || len(g.GPUs) != 3 {
		t.Errorf("acme's grid: tenants %v, %d GPUs", g.Tenants, len(g.GPUs))
	}
	if cell := g.GPUs[1]; len(cell) < 16 || cell[13] != -1 {
		t.Errorf("beta's A30 in acme's grid: %v, want one share of tenant -1", cell)
	}
	var gv web.GPUView
	l.Must(acme, "GET", "/v1/fleet/gpus/gpu-a/1", nil, 200, &gv)
	if len(gv.Claims) != 0 || len(gv.GPU.Devices) == 0 {
		t.Errorf("acme's page of beta's GPU: claims %v", gv.Claims)
	}
	for _, e := range gv.Events {
		if e.Tenant != "acme" {
			t.Errorf("acme's page of the GPU shows an event of %q", e.Tenant)
		}
	}
	// Another tenant's pages are 404s; an admin gets them.
	for _, path := range []string{"/v1/dashboard/tenants/beta-secret", "/v1/claims/" + b.ID + "/events"} {
		if code, body := l.Call(acme, "GET", path, nil); code != http.StatusNotFound {
			t.Errorf("acme GET %s: %d %s, want 404", path, code, body)
		}
		if code, _ := l.Call(l.Admin, "GET", path, nil); code != http.StatusOK {
			t.Errorf("admin GET %s: %d", path, code)
		}
	}
	var sum web.Summary
	l.Must(acme, "GET", "/v1/fleet/summary", nil, 200, &sum)
	if sum.LiveClaims != 1 || sum.Tenants != 0 || sum.GPUs != 3 {
		t.Errorf("acme's summary: %+v, want its 1 live claim, no tenant count, 3 GPUs", sum)
	}
	// The stream: its first messages, then the delta when beta's claim
	// goes, name nobody but acme.
	req, _ := http.NewRequest("GET", l.URL+"/v1/dashboard/stream", nil)
	req.Header.Set("Authorization", "Bearer "+acme)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	events := make(chan string, 100)
	go func() {
		sc := bufio.NewScanner(resp.Body)
		sc.Buffer(make([]byte, 1<<20), 1<<24)
		for sc.Scan() {
			events <- sc.Text()
		}
		close(events)
	}()
	next := func(kind string) string {
		t.Helper()
		deadline := time.After(10 * time.Second)
		for {
			select {
			case line, ok := <-events:
				if !ok {
					t.Fatalf("the stream ended before %s", kind)
				}
				clean("stream", []byte(line))
				if line == "event: "+kind {
					data := <-events
					clean("stream", []byte(data))
					return data
				}
			case <-deadline:
				t.Fatalf("no %s on the stream", kind)
			}
		}
	}
	next("grid")
	next("summary")
	l.Must(beta, "DELETE", "/v1/claims/"+b.ID, nil, 200, nil)
	var d web.GridDelta
	if err := json.Unmarshal([]byte(strings.TrimPrefix(next("cells"), "data: ")), &d); err != nil {
		t.Fatal(err)
	}
	i := slices.IndexFunc(d.Cells, func(c []int) bool { return c[0] == 1 })
	if i < 0 || len(d.Tenants) != 0 || d.Cells[i][1+7] != 1 || d.Cells[i][1+12] != 0 {
		t.Errorf("the delta when beta's claim went: %+v, want the A30's cell, no share left, no name", d)
	}
	// Anonymous: nothing.
	for _, p := range []string{"/v1/fleet/grid", "/v1/fleet/summary", "/v1/fleet/gpus/gpu-a/0", "/v1/dashboard/tenants/acme", "/v1/dashboard/stream", "/v1/claims/" + a.ID + "/events"} {
		if code, _ := l.Call("", "GET", p, nil); code != http.StatusUnauthorized {
			t.Errorf("anonymous GET %s: %d, want 401", p, code)
		}
	}
}

// The views are paged and small: GET /v1/usage and /v1/dashboard go on
// with X-Next-Cursor; bad parameters are refused naming the field.
func TestDashboardPagesAndBadParameters(t *testing.T) {
	t.Parallel()
	l := newLive(t)
	for i := 0; i < 7; i++ {
		l.Tenant(fmt.Sprintf("t%d", i), 0)
	}
	var all []string
	for cursor := ""; ; {
		path := "/v1/dashboard?limit=3"
		if cursor != "" {
			path += "&after=" + cursor
		}
		var d web.Dashboard
		l.Must(l.Admin, "GET", path, nil, 200, &d)
		for _, tv := range d.Tenants {
			all = append(all, tv.Name)
		}
		if d.TotalTenants != 7 || len(d.Tenants) > 3 {
			t.Fatalf("page %s: %d of %d tenants", path, len(d.Tenants), d.TotalTenants)
		}
		if cursor = d.Next; cursor == "" {
			break
		}
	}
	if strings.Join(all, ",") != "t0,t1,t2,t3,t4,t5,t6" {
		t.Errorf("dashboard pages: %v", all)
	}
	var us []api.Usage
	l.Must(l.Admin, "GET", "/v1/usage?limit=4", nil, 200, &us)
	if len(us) != 4 {
		t.Errorf("usage page: %d tenants, want 4", len(us))
	}
	for path, field := range map[string]string{"/v1/dashboard?limit=0": "limit", "/v1/dashboard?points=1": "points",
		"/v1/dashboard?sort=size": "sort", "/v1/dashboard?sort=cost&after=x": "after", "/v1/dashboard?since=yesterday": "since",
		"/v1/fleet/gpus/n/minus": "index", "/v1/usage?limit=x": "limit"} {
		code, body := l.Call(l.Admin, "GET", path, nil)
		var e api.Error
		_ = json.Unmarshal(body, &e)
		if code != http.StatusUnprocessableEntity || e.Field != field {
			t.Errorf("GET %s: %d %s, want 422 naming %s", path, code, body, field)
		}
	}
	if code, _ := l.Call(l.Admin, "GET", "/v1/fleet/gpus/nowhere/0", nil); code != http.StatusNotFound {
		t.Errorf("a GPU of no node: %d, want 404", code)
	}
}
