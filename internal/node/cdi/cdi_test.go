package cdi_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/gpuslice/gpuslice/internal/alloc"
	"github.com/gpuslice/gpuslice/internal/api"
	"github.com/gpuslice/gpuslice/internal/gpu"
	"github.com/gpuslice/gpuslice/internal/gpu/fake"
	"github.com/gpuslice/gpuslice/internal/node/cdi"
	cdiapi "tags.cncf.io/container-device-interface/pkg/cdi"
	specs "tags.cncf.io/container-device-interface/specs-go"
)

const node = "n1"

// host is an A100 with MIG off and one with two instances.
func host(t *testing.T) cdi.Host {
	t.Helper()
	m, err := fake.New(fake.MachineSpec{GPUs: []fake.GPUSpec{
		{Model: "A100-40GB"},
		{Model: "A100-40GB", MIGEnabled: true, Instances: []string{"3g.20gb@0", "3g.20gb@4"}},
	}})
	if err != nil {
		t.Fatal(err)
	}
	gpus, err := m.GPUs(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return cdi.Host{GPUs: gpus}
}

// allocated builds a claim the way the server hands it to the agent: the
// environment comes from the allocator (through RenameDevice).
func allocated(id string, devs ...alloc.Assigned) api.Claim {
	a := &alloc.Allocation{Claim: id, Tenant: "acme", Devices: devs}
	for _, d := range devs {
		a.RenameDevice(d.Device, d.Device) // fills in Env
	}
	return api.Claim{ID: id, Tenant: "acme", State: api.Allocated, Allocation: a}
}

// pipeDir is alloc.PipeDirectory of an id the test knows is fine.
func pipeDir(id string) string {
	p, err := alloc.PipeDirectory(id)
	if err != nil {
		panic(err)
	}
	return p
}

func whole(g gpu.GPU, mode alloc.Mode) alloc.Assigned {
	d := alloc.Assigned{Node: node, GPU: g.UUID, Device: g.UUID, Mode: mode, MemoryMiB: 10240}
	if mode == alloc.MPS {
		d.MPS = &alloc.MPSLimits{ActiveThreadPercent: 25, PinnedMemoryMiB: 10240, PipeDirectory: pipeDir(g.UUID)}
	}
	return d
}

func instance(g gpu.GPU, in gpu.Instance) alloc.Assigned {
	return alloc.Assigned{Node: node, GPU: g.UUID, Device: in.UUID, Profile: in.Profile, Start: in.Start, Mode: alloc.MIG, MemoryMiB: in.MemoryMiB}
}

func paths(d specs.Device) []string {
	var out []string
	for _, n := range d.ContainerEdits.DeviceNodes {
		out = append(out, n.Path)
	}
	return out
}

func TestSpecForWholeGPU(t *testing.T) {
	h := host(t)
	c := allocated("c-1", whole(h.GPUs[0], alloc.TimeSlice))
	spec, err := cdi.SpecFor(c, node, h)
	if err != nil {
		t.Fatal(err)
	}
	if spec.Kind != "gpuslice.dev/claim" || len(spec.Devices) != 1 || spec.Devices[0].Name != "c-1" {
		t.Fatalf("spec %+v", spec)
	}
	d := spec.Devices[0]
	if got, want := paths(d), []string{"/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia0"}; !slices.Equal(got, want) {
		t.Errorf("device nodes %v, want %v", got, want)
	}
	if !slices.Contains(d.ContainerEdits.Env, "CUDA_VISIBLE_DEVICES="+h.GPUs[0].UUID) || !slices.IsSorted(d.ContainerEdits.Env) ||
		len(d.ContainerEdits.Env) != len(c.Allocation.Env) {
		t.Errorf("env %v, want the allocation's %v sorted", d.ContainerEdits.Env, c.Allocation.Env)
	}
	if len(d.ContainerEdits.Mounts) != 0 {
		t.Errorf("mounts %v on a time-sliced claim", d.ContainerEdits.Mounts)
	}

	// A GPU whose minor differs from its index.
	h.Minors = map[string]int{h.GPUs[0].UUID: 3}
	spec, err = cdi.SpecFor(c, node, h)
	if err != nil {
		t.Fatal(err)
	}
	if got := paths(spec.Devices[0]); !slices.Contains(got, "/dev/nvidia3") || slices.Contains(got, "/dev/nvidia0") {
		t.Errorf("device nodes %v, want /dev/nvidia3", got)
	}
}

func TestSpecForMPSMountsThePipeDirectory(t *testing.T) {
	h := host(t)
	c := allocated("c-2", whole(h.GPUs[0], alloc.MPS))
	spec, err := cdi.SpecFor(c, node, h)
	if err != nil {
		t.Fatal(err)
	}
	pipe := pipeDir(h.GPUs[0].UUID)
	want := []*specs.Mount{{HostPath: pipe, ContainerPath: pipe, Options: []string{"rbind", "rw", "nosuid", "nodev"}}}
	if got := spec.Devices[0].ContainerEdits.Mounts; !reflect.DeepEqual(got, want) {
		t.Errorf("mounts %+v, want %+v", got, want)
	}
	if !slices.Contains(spec.Devices[0].ContainerEdits.Env, "CUDA_MPS_PIPE_DIRECTORY="+pipe) {
		t.Errorf("env %v", spec.Devices[0].ContainerEdits.Env)
	}
}

func TestSpecForMIG(t *testing.T) {
	h := host(t)
	g := h.GPUs[1]
	a, b := g.Instances[0], g.Instances[1]
	c := allocated("c-3", instance(g, a), instance(g, b))

	// Without the mig-minors table the caps are left out.
	spec, err := cdi.SpecFor(c, node, h)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := paths(spec.Devices[0]), []string{"/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia1"}; !slices.Equal(got, want) {
		t.Errorf("device nodes %v, want %v", got, want)
	}

	table := "config 1\nmonitor 2\n"
	for _, in := range []gpu.Instance{a, b} {
		gi := "gpu1/gi" + strconv.Itoa(in.GIID)
		table += gi + "/access " + strconv.Itoa(10+in.GIID) + "\n" + gi + "/ci" + strconv.Itoa(in.CIID) + "/access " + strconv.Itoa(100+in.GIID) + "\n"
	}
	minors, err := cdi.ParseMIGMinors(strings.NewReader(table))
	if err != nil {
		t.Fatal(err)
	}
	h.MIGMinors = minors
	spec, err = cdi.SpecFor(c, node, h)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia1",
		"/dev/nvidia-caps/nvidia-cap" + strconv.Itoa(10+a.GIID), "/dev/nvidia-caps/nvidia-cap" + strconv.Itoa(100+a.GIID),
		"/dev/nvidia-caps/nvidia-cap" + strconv.Itoa(10+b.GIID), "/dev/nvidia-caps/nvidia-cap" + strconv.Itoa(100+b.GIID)}
	if got := paths(spec.Devices[0]); !slices.Equal(got, want) {
		t.Errorf("device nodes %v, want %v", got, want)
	}
}

func TestSpecForErrors(t *testing.T) {
	h := host(t)
	g := h.GPUs[0]
	planned := allocated("c-4", alloc.Assigned{Node: node, GPU: h.GPUs[1].UUID, Device: h.GPUs[1].UUID + "/1g.5gb@6", Mode: alloc.MIG})
	for name, tc := range map[string]struct {
		claim api.Claim
		is    error
		msg   string
	}{
		"not allocated": {claim: api.Claim{ID: "c-1", State: api.Pending}, msg: "not allocated"},
		"other node": {claim: func() api.Claim {
			c := allocated("c-1", whole(g, alloc.Exclusive))
			c.Allocation.Devices[0].Node = "n2"
			return c
		}(), msg: "no device on node n1"},
		"unknown device":    {claim: allocated("c-1", alloc.Assigned{Node: node, GPU: "GPU-x", Device: "GPU-x"}), is: gpu.ErrNotFound},
		"planned instance":  {claim: planned, is: cdi.ErrNotCreated},
		"invalid device id": {claim: allocated("c/1", whole(g, alloc.Exclusive)), msg: "invalid character"},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := cdi.SpecFor(tc.claim, node, h)
			if err == nil || (tc.is != nil && !errors.Is(err, tc.is)) || !strings.Contains(err.Error(), tc.msg) {
				t.Errorf("error %v", err)
			}
		})
	}
}

// Written specs pass the CDI library's validation: ReadSpec parses and
// validates the file, and a CDI cache over the directory resolves the
// qualified device names without errors.
func TestWriteValidates(t *testing.T) {
	h := host(t)
	h.MIGMinors = cdi.MIGMinors{"gpu1/gi1/access": 12, "gpu1/gi1/ci0/access": 13, "gpu1/gi2/access": 21, "gpu1/gi2/ci0/access": 22}
	g := h.GPUs[1]
	dir := t.TempDir()
	for _, c := range []api.Claim{
		allocated("c-1", whole(h.GPUs[0], alloc.MPS)),
		allocated("c-2", instance(g, g.Instances[0]), instance(g, g.Instances[1])),
	} {
		spec, err := cdi.SpecFor(c, node, h)
		if err != nil {
			t.Fatal(err)
		}
		path, err := cdi.Write(dir, spec)
		if err != nil {
			t.Fatal(err)
		}
		if path != filepath.Join(dir, "gpuslice-"+c.ID+".yaml") {
			t.Errorf("path %s", path)
		}
		read, err := cdiapi.ReadSpec(path, 0)
		if err != nil {
			t.Fatalf("library validation: %v", err)
		}
		if !reflect.DeepEqual(read.Spec, spec) {
			t.Errorf("round trip:\n got  %+v\n want %+v", read.Spec, spec)
		}
		fi, err := os.Stat(path)
		if err != nil || fi.Mode().Perm() != 0o644 {
			t.Errorf("stat %v, %v", fi, err)
		}
	}
	cache, err := cdiapi.NewCache(cdiapi.WithSpecDirs(dir), cdiapi.WithAutoRefresh(false))
	if err != nil {
		t.Fatal(err)
	}
	if errs := cache.GetErrors(); len(errs) != 0 {
		t.Fatalf("cache errors %v", errs)
	}
	if got := cache.ListDevices(); !slices.Equal(got, []string{"gpuslice.dev/claim=c-1", "gpuslice.dev/claim=c-2"}) {
		t.Errorf("devices %v", got)
	}
	if d := cache.GetDevice("gpuslice.dev/claim=c-2"); d == nil || len(d.ContainerEdits.DeviceNodes) != 7 {
		t.Errorf("device c-2: %+v", d)
	}
	// Nothing but the specs is left in the directory.
	entries, _ := os.ReadDir(dir)
	if len(entries) != 2 {
		t.Errorf("directory holds %d entries", len(entries))
	}
}

// Write refuses a spec the library rejects and leaves the old file alone.
func TestWriteRefusesInvalid(t *testing.T) {
	h := host(t)
	dir := t.TempDir()
	spec, err := cdi.SpecFor(allocated("c-1", whole(h.GPUs[0], alloc.Exclusive)), node, h)
	if err != nil {
		t.Fatal(err)
	}
	path, err := cdi.Write(dir, spec)
	if err != nil {
		t.Fatal(err)
	}
	before, _ := os.ReadFile(path)
	spec.Devices[0].ContainerEdits.Env = append(spec.Devices[0].ContainerEdits.Env, "=oops")
	if _, err := cdi.Write(dir, spec); err == nil || !strings.Contains(err.Error(), "invalid environment variable") {
		t.Fatalf("error %v", err)
	}
	after, _ := os.ReadFile(path)
	if string(before) != string(after) {
		t.Error("invalid spec replaced the old one")
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 1 {
		t.Errorf("temporary file left: %v", entries)
	}
	if _, err := cdi.Write(dir, &specs.Spec{Kind: "nvidia.com/gpu"}); err == nil {
		t.Error("foreign spec written")
	}
}

func TestSync(t *testing.T) {
	h := host(t)
	dir := t.TempDir()
	g := h.GPUs[1]
	c1 := allocated("c-1", whole(h.GPUs[0], alloc.Exclusive))
	c2 := allocated("c-2", instance(g, g.Instances[0]))
	planned := allocated("c-3", alloc.Assigned{Node: node, GPU: g.UUID, Device: g.UUID + "/1g.5gb@6", Mode: alloc.MIG})
	elsewhere := c1
	elsewhere.ID = "c-9"
	elsewhere.Allocation = &alloc.Allocation{Devices: []alloc.Assigned{{Node: "n2", Device: "GPU-z"}}}
	if err := os.WriteFile(filepath.Join(dir, "nvidia.yaml"), []byte("not ours"), 0o644); err != nil {
		t.Fatal(err)
	}

	rep, err := cdi.Sync(dir, []api.Claim{c1, c2, planned, elsewhere}, node, h)
	if err != nil || !slices.Equal(rep.Written, []string{"c-1", "c-2"}) || len(rep.Removed) != 0 {
		t.Fatalf("first sync %+v, %v", rep, err)
	}
	rep, err = cdi.Sync(dir, []api.Claim{c1, c2, planned}, node, h)
	if err != nil || len(rep.Written)+len(rep.Removed) != 0 {
		t.Fatalf("unchanged sync %+v, %v", rep, err)
	}
	c2.State = api.Released
	rep, err = cdi.Sync(dir, []api.Claim{c1, c2}, node, h)
	if err != nil || !slices.Equal(rep.Removed, []string{"c-2"}) {
		t.Fatalf("sync after release %+v, %v", rep, err)
	}
	entries, _ := os.ReadDir(dir)
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	if !slices.Equal(names, []string{"gpuslice-c-1.yaml", "nvidia.yaml"}) {
		t.Errorf("directory %v", names)
	}
}

func TestParseMIGMinors(t *testing.T) {
	m, err := cdi.ParseMIGMinors(strings.NewReader("config 1\nmonitor 2\n\ngpu0/gi1/access 12\ngpu0/gi1/ci0/access 13\n"))
	if err != nil {
		t.Fatal(err)
	}
	if want := (cdi.MIGMinors{"config": 1, "monitor": 2, "gpu0/gi1/access": 12, "gpu0/gi1/ci0/access": 13}); !reflect.DeepEqual(m, want) {
		t.Errorf("got %v", m)
	}
	for _, bad := range []string{"gpu0/gi1/access\n", "gpu0/gi1/access x\n", "a 1 2\n"} {
		if _, err := cdi.ParseMIGMinors(strings.NewReader(bad)); err == nil {
			t.Errorf("%q parsed", bad)
		}
	}
	if _, err := cdi.ReadMIGMinors(filepath.Join(t.TempDir(), "none")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("missing file: %v", err)
	}
}
