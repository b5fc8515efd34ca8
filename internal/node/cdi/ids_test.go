package cdi_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gpuslice/gpuslice/internal/alloc"
	"github.com/gpuslice/gpuslice/internal/node/cdi"
	specs "tags.cncf.io/container-device-interface/specs-go"
)

// hostileClaimIDs would put a spec file outside the spec directory, or a
// name no CDI runtime resolves.
var hostileClaimIDs = []string{"", ".", "..", "../x", "../../etc/cron.d/x", "a/b", "/etc/passwd", "c-1\n", "c-1\x00",
	"$(rm -rf /)", `..\x`, strings.Repeat("c", 10<<10), "-c", "c-1 "}

// TestPathStaysInsideTheSpecDirectory: every claim id the server makes is
// one file of the directory; every hostile one is refused.
func TestPathStaysInsideTheSpecDirectory(t *testing.T) {
	dir := t.TempDir()
	for _, id := range []string{"c-1", "c-0123456789abcdef", "c-a.b", "C_9"} {
		p, err := cdi.Path(dir, id)
		if err != nil {
			t.Errorf("Path(%q): %v", id, err)
			continue
		}
		if filepath.Dir(p) != dir || alloc.Within(dir, p) != nil {
			t.Errorf("Path(%q) = %s: not a file of %s", id, p, dir)
		}
	}
	for _, id := range hostileClaimIDs {
		if p, err := cdi.Path(dir, id); err == nil {
			t.Errorf("Path(%q) = %s, want an error", id, p)
		}
	}
}

// Remove and Write never touch a file outside the directory, whatever
// the claim id.
func TestRemoveAndWriteRefuseHostileClaimIDs(t *testing.T) {
	parent := t.TempDir()
	dir := filepath.Join(parent, "cdi")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	victim := filepath.Join(parent, "gpuslice-x.yaml")
	if err := os.WriteFile(victim, []byte("keep"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, id := range append(hostileClaimIDs, "../gpuslice-x", "../x") {
		if err := cdi.Remove(dir, id); err == nil {
			t.Errorf("Remove(%q) = nil", id)
		}
		spec := &specs.Spec{Version: "0.5.0", Kind: cdi.Kind, Devices: []specs.Device{{Name: id,
			ContainerEdits: specs.ContainerEdits{Env: []string{"A=1"}}}}}
		if p, err := cdi.Write(dir, spec); err == nil {
			t.Errorf("Write of claim %q = %s", id, p)
		}
	}
	if b, err := os.ReadFile(victim); err != nil || string(b) != "keep" {
		t.Errorf("the file outside the directory was touched: %q, %v", b, err)
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 0 {
		t.Errorf("files written: %v", entries)
	}
}

// SpecFor refuses an allocation whose environment or pipe directory did
// not come from a valid inventory: a runtime would hand them to every
// process of the container, and bind-mount the pipe directory.
func TestSpecForRefusesHostileAllocations(t *testing.T) {
	h := host(t)
	g := h.GPUs[0]
	for name, edit := range map[string]func(c *alloc.Allocation){
		"pipe directory is the host's root": func(a *alloc.Allocation) { a.Devices[0].MPS.PipeDirectory = "/" },
		"pipe directory above the MPS root": func(a *alloc.Allocation) {
			a.Devices[0].MPS.PipeDirectory = alloc.MPSPipeRoot + "/.."
		},
		"pipe directory elsewhere":   func(a *alloc.Allocation) { a.Devices[0].MPS.PipeDirectory = "/etc" },
		"pipe directory empty":       func(a *alloc.Allocation) { a.Devices[0].MPS.PipeDirectory = "" },
		"newline in the device list": func(a *alloc.Allocation) { a.Env["CUDA_VISIBLE_DEVICES"] = g.UUID + "\nLD_PRELOAD=/x.so" },
		"command substitution":       func(a *alloc.Allocation) { a.Env["CUDA_VISIBLE_DEVICES"] = "$(rm -rf /)" },
		"NUL in the tenant":          func(a *alloc.Allocation) { a.Env["GPUSLICE_TENANT"] = "acme\x00" },
		"env pipe directory elsewhere": func(a *alloc.Allocation) {
			a.Env["CUDA_MPS_PIPE_DIRECTORY"] = "/tmp"
		},
	} {
		c := allocated("c-1", whole(g, alloc.MPS))
		if _, err := cdi.SpecFor(c, node, h); err != nil {
			t.Fatalf("%s: before the edit: %v", name, err)
		}
		edit(c.Allocation)
		if spec, err := cdi.SpecFor(c, node, h); err == nil {
			t.Errorf("%s: spec %+v", name, spec.Devices[0].ContainerEdits)
		}
	}
}

// Sync leaves alone a file whose name no claim id makes.
func TestSyncLeavesOddNamesAlone(t *testing.T) {
	h := host(t)
	dir := t.TempDir()
	odd := filepath.Join(dir, "gpuslice-a b.yaml")
	if err := os.WriteFile(odd, []byte("not ours"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := cdi.Sync(dir, nil, node, h); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(odd); err != nil {
		t.Errorf("odd file: %v", err)
	}
}
