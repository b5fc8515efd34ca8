package server_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/gpuslice/gpuslice/internal/agent"
	"github.com/gpuslice/gpuslice/internal/alloc"
	"github.com/gpuslice/gpuslice/internal/api"
	"github.com/gpuslice/gpuslice/internal/gpu/fake"
	"github.com/gpuslice/gpuslice/internal/server"
	"github.com/gpuslice/gpuslice/internal/state"
)

// fuzzRoutes are the bodies the API parses: claims from tenants, tenants
// from the admin, registrations and heartbeats from agents.
var fuzzRoutes = []struct{ method, path, role string }{
	{"POST", "/v1/claims", "tenant"},
	{"POST", "/v1/claims", "admin"},
	{"PUT", "/v1/tenants/fuzz", "admin"},
	{"PUT", "/v1/nodes/fuzz-node", "agent"},
	{"POST", "/v1/nodes/host-a/heartbeat", "agent"},
	{"POST", "/v1/tokens", "admin"},
}

// FuzzAPIBodies sends arbitrary bodies to every route that parses one. An
// answer is never a 5xx, and the server's Check holds afterwards: bad input
// changes nothing it should not.
func FuzzAPIBodies(f *testing.F) {
	ctx := context.Background()
	srv, err := server.New(ctx, server.Config{Store: state.NewMemory(), Log: slog.New(slog.NewTextHandler(io.Discard, nil)),
		Clock: func() time.Time { return time.Date(2026, 11, 21, 12, 0, 0, 0, time.UTC) }})
	if err != nil {
		f.Fatal(err)
	}
	h := srv.Handler()
	do := func(method, path, token string, body []byte) *httptest.ResponseRecorder {
		r := httptest.NewRequest(method, path, bytes.NewReader(body))
		r.Header.Set("Authorization", "Bearer "+token)
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		return w
	}
	admin, err := srv.CreateToken(ctx, api.RoleAdmin, "")
	if err != nil {
		f.Fatal(err)
	}
	if w := do("PUT", "/v1/tenants/acme", admin.Secret, []byte(`{"memoryMiB": 100000}`)); w.Code != 200 {
		f.Fatalf("tenant: %d %s", w.Code, w.Body)
	}
	tenant, err := srv.CreateToken(ctx, api.RoleTenant, "acme")
	if err != nil {
		f.Fatal(err)
	}
	agentTok, err := srv.CreateToken(ctx, api.RoleAgent, "")
	if err != nil {
		f.Fatal(err)
	}
	spec, _ := fake.Preset("mixed")
	m, err := fake.New(spec)
	if err != nil {
		f.Fatal(err)
	}
	gpus, _ := m.GPUs(ctx)
	inv, err := agent.Inventory("host-a", gpus)
	if err != nil {
		f.Fatal(err)
	}
	reg, _ := json.Marshal(api.RegisterRequest{Inventory: inv, Simulated: true})
	if w := do("PUT", "/v1/nodes/host-a", agentTok.Secret, reg); w.Code != 200 {
		f.Fatalf("register: %d %s", w.Code, w.Body)
	}
	tokens := map[string]string{"admin": admin.Secret, "tenant": tenant.Secret, "agent": agentTok.Secret}

	claim, _ := json.Marshal(api.CreateClaimRequest{ClaimSpec: api.ClaimSpec{Requests: []alloc.Request{{Name: "gpu", MemoryMiB: 4096, Mode: alloc.TimeSlice}}}})
	for _, seed := range []struct {
		route byte
		body  string
	}{
		{0, string(claim)},
		{0, `{"requests":[{"name":"gpu","profile":"3g.20gb","mode":"mig"}],"isolation":"hardware"}`},
		{1, `{"tenant":"acme","requests":[{"name":"gpu","count":2,"selector":"device.attributes['gpu.nvidia.com'].model == 'L4'"}]}`},
		{0, `{"requests":[{"name":"gpu","memoryMiB":-1}]}`},
		{2, `{"memoryMiB": 40960, "computePercent": 200}`},
		{3, string(reg)},
		{4, `{"usage":[{"claim":"c-x","gpuSeconds":1e308}],"inventory":{"gpus":[]}}`},
		{5, `{"role":"tenant","tenant":"acme"}`},
	} {
		f.Add(seed.route, []byte(seed.body))
	}
	f.Fuzz(func(t *testing.T, route byte, body []byte) {
		rt := fuzzRoutes[int(route)%len(fuzzRoutes)]
		w := do(rt.method, rt.path, tokens[rt.role], body)
		if w.Code >= 500 {
			t.Fatalf("%s %s: %d %s\nbody: %q", rt.method, rt.path, w.Code, w.Body, body)
		}
		if err := srv.Check(ctx); err != nil {
			t.Fatalf("%s %s answered %d, and then: %v\nbody: %q", rt.method, rt.path, w.Code, err, body)
		}
	})
}
