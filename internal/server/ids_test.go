package server_test

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"unicode"

	"github.com/gpuslice/gpuslice/internal/alloc"
	"github.com/gpuslice/gpuslice/internal/api"
)

// Ids as NVML writes them (lowercase hex).
const (
	okGPU0 = "GPU-5fd4d9a8-4c6d-4e0d-9a3b-7c1a1f2e3d4c"
	okGPU1 = "GPU-0b1e2c3d-4e5f-4a6b-8c7d-9e0f1a2b3c4d"
	okMIG  = "MIG-a1b2c3d4-e5f6-4a7b-8c9d-0e1f2a3b4c5d"
)

// hostileInventory is a two-GPU A100 node whose second GPU's uuid, or its
// MIG instance's, is id.
func hostileInventory(gpuUUID, migUUID string) alloc.Node {
	return alloc.Node{GPUs: []alloc.GPU{
		{UUID: okGPU0, Index: 0, Model: "A100-40GB", Healthy: true, Sharing: alloc.Sharing{Mode: alloc.Dynamic}},
		{UUID: gpuUUID, Index: 1, Model: "A100-40GB", Healthy: true, MIGEnabled: true, Sharing: alloc.Sharing{Mode: alloc.Dynamic},
			Instances: []alloc.MIGInstance{{UUID: migUUID, Profile: "3g.20gb", Start: 4, Sharing: alloc.Sharing{Mode: alloc.Dynamic}}}},
	}}
}

var hostileUUIDs = []struct{ name, id string }{
	{"dotdot", ".."},
	{"parent path", "../x"},
	{"GPU prefix then parent", "GPU-../../etc"},
	{"newline", okGPU1 + "\nCUDA_VISIBLE_DEVICES=all"},
	{"command substitution", "$(rm -rf /)"},
	{"NUL", okGPU1 + "\x00"},
	{"10 KB", "GPU-" + strings.Repeat("a", 10<<10)},
	{"uppercase hex", "GPU-" + strings.ToUpper(okGPU1[4:])},
	{"empty", ""},
}

// TestHostileUUIDsRefused: PUT /v1/nodes/{name} with a hostile GPU or MIG
// uuid is a 422 naming the field, over real HTTP; the node is not
// registered and the message carries no control character.
func TestHostileUUIDsRefused(t *testing.T) {
	t.Parallel()
	h := newHarness(t, nil)
	var tok api.Token
	h.Must(h.Admin, "POST", "/v1/tokens", api.CreateTokenRequest{Role: api.RoleAgent, Node: "evil"}, 201, &tok)
	check := func(what string, inv alloc.Node, field string) {
		t.Helper()
		code, body := h.Call(tok.Secret, "PUT", "/v1/nodes/evil", api.RegisterRequest{Inventory: inv, Simulated: true})
		var e api.Error
		if err := json.Unmarshal(body, &e); err != nil {
			t.Fatalf("%s: %d %s", what, code, body)
		}
		if code != http.StatusUnprocessableEntity || e.Field != field {
			t.Errorf("%s: HTTP %d, field %q (%s); want 422 naming %s", what, code, e.Field, e.Error, field)
		}
		if !strings.Contains(e.Error, strings.TrimPrefix(field, "inventory.")) || strings.ContainsFunc(e.Error, unicode.IsControl) ||
			len(e.Error) > 1024 {
			t.Errorf("%s: message %q", what, e.Error)
		}
	}
	for _, tc := range hostileUUIDs {
		check("GPU uuid "+tc.name, hostileInventory(tc.id, okMIG), "inventory.gpus[1].uuid")
		check("MIG uuid "+tc.name, hostileInventory(okGPU1, tc.id), "inventory.gpus[1].instances[0].uuid")
	}
	check("repeated uuid", hostileInventory(okGPU0, okMIG), "inventory.gpus[1].uuid")
	label := hostileInventory(okGPU1, okMIG)
	label.Labels = map[string]string{"zone": "a\nb"}
	check("label with a newline", label, `inventory.labels["zone"]`)
	if code, body := h.Call(h.Admin, "GET", "/v1/nodes/evil", nil); code != http.StatusNotFound {
		t.Fatalf("the node was registered: %d %s", code, body)
	}

	// The same node with NVML's uuids registers; a heartbeat carrying a
	// hostile inventory is refused and leaves the stored one alone.
	h.Must(tok.Secret, "PUT", "/v1/nodes/evil", api.RegisterRequest{Inventory: hostileInventory(okGPU1, okMIG), Simulated: true}, 200, nil)
	bad := hostileInventory("GPU-../../etc", okMIG)
	code, body := h.Call(tok.Secret, "POST", "/v1/nodes/evil/heartbeat", api.HeartbeatRequest{Inventory: &bad})
	var e api.Error
	_ = json.Unmarshal(body, &e)
	if code != http.StatusUnprocessableEntity || e.Field != "inventory.gpus[1].uuid" {
		t.Errorf("heartbeat: HTTP %d %s; want 422 naming inventory.gpus[1].uuid", code, body)
	}
	var n api.Node
	h.Must(h.Admin, "GET", "/v1/nodes/evil", nil, 200, &n)
	if len(n.Inventory.GPUs) != 2 || n.Inventory.GPUs[1].UUID != okGPU1 {
		t.Errorf("stored inventory %+v", n.Inventory)
	}
}
