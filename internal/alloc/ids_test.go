package alloc

import (
	"errors"
	"path/filepath"
	"strings"
	"testing"
	"unicode"
)

// Ids as NVML writes them (lowercase hex).
const (
	gpuA = "GPU-5fd4d9a8-4c6d-4e0d-9a3b-7c1a1f2e3d4c"
	gpuB = "GPU-0b1e2c3d-4e5f-4a6b-8c7d-9e0f1a2b3c4d"
	migA = "MIG-a1b2c3d4-e5f6-4a7b-8c9d-0e1f2a3b4c5d"
	migB = "MIG-ffffffff-0000-4000-8000-000000000001"
)

// hostileIDs are ids an adversarial agent might report; none is valid and
// none may name a pipe directory.
var hostileIDs = []struct{ name, id string }{
	{"empty", ""},
	{"dot", "."},
	{"dotdot", ".."},
	{"parent path", "../x"},
	{"deep parent path", "../../../../etc/passwd"},
	{"GPU prefix then parent", "GPU-../../etc"},
	{"absolute", "/etc/passwd"},
	{"uuid then parent", gpuA + "/../../x@0"},
	{"trailing newline", gpuA + "\n"},
	{"newline injects a variable", gpuA + "\nLD_PRELOAD=/tmp/x.so"},
	{"command substitution", "$(rm -rf /)"},
	{"command substitution after prefix", "GPU-$(rm -rf /)"},
	{"backticks", "GPU-`id`"},
	{"NUL", gpuA + "\x00"},
	{"NUL inside", "GPU-\x00/../x"},
	{"10 KB", "GPU-" + strings.Repeat("a", 10<<10)},
	{"spaces", "GPU- 5fd4d9a8"},
	{"semicolon", gpuA + ";reboot"},
	{"escape sequence", "GPU-\x1b[2J"},
	{"bidi override", "GPU-\u202e5fd4d9a8"},
	{"backslash", `GPU-..\..\x`},
}

func TestValidDeviceID(t *testing.T) {
	for _, tc := range []struct {
		name string
		id   string
		want bool
	}{
		{"GPU uuid", gpuA, true},
		{"MIG uuid", migA, true},
		{"GPU instance without a compute instance", "MIG-" + gpuA + "/7", true},
		{"planned instance", gpuA + "/3g.20gb@4", true},
		{"planned instance with media extensions", gpuA + "/1g.10gb+me@0", true},
		{"planned instance without media extensions", gpuA + "/1g.12gb-me@6", true},

		{"uppercase hex", strings.ToUpper(gpuA[:4]) + strings.ToUpper(gpuA[4:]), false},
		{"one uppercase digit", gpuA[:len(gpuA)-1] + "C", false},
		{"uppercase MIG hex", "MIG-" + strings.ToUpper(migA[4:]), false},
		{"lowercase prefix", "gpu-" + gpuA[4:], false},
		{"no prefix", gpuA[4:], false},
		{"MIG prefix on nothing", "MIG-", false},
		{"short uuid", gpuA[:len(gpuA)-1], false},
		{"long uuid", gpuA + "0", false},
		{"hyphens misplaced", "GPU-5fd4d9a84-c6d-4e0d-9a3b-7c1a1f2e3d4c", false},
		{"non-hex digit", "GPU-5fd4d9a8-4c6d-4e0d-9a3b-7c1a1f2e3d4g", false},
		{"braces", "GPU-{5fd4d9a8-4c6d-4e0d-9a3b-7c1a1f2e3d4c}", false},
		{"two ids", gpuA + "," + gpuB, false},
		{"pre-R470 MIG device with a CI", "MIG-" + gpuA + "/7/0", false},
		{"GPU instance id not a number", "MIG-" + gpuA + "/x", false},
		{"GPU instance id with a leading zero", "MIG-" + gpuA + "/07", false},
		{"planned on a MIG uuid", migA + "/1g.5gb@0", false},
		{"planned start with a leading zero", gpuA + "/1g.5gb@01", false},
		{"planned start negative", gpuA + "/1g.5gb@-1", false},
		{"planned start too large", gpuA + "/1g.5gb@100", false},
		{"planned without a start", gpuA + "/1g.5gb", false},
		{"planned profile with a parent", gpuA + "/..@0", false},
		{"planned profile uppercase", gpuA + "/1G.5GB@0", false},
		{"planned profile empty", gpuA + "/@0", false},
		{"planned profile over 32 bytes", gpuA + "/1g." + strings.Repeat("x", 40) + "@0", false},
		{"fullwidth digits", "GPU-５fd4d9a8-4c6d-4e0d-9a3b-7c1a1f2e3d4c", false},
	} {
		if got := ValidDeviceID(tc.id); got != tc.want {
			t.Errorf("%s: ValidDeviceID(%q) = %v, want %v", tc.name, tc.id, got, tc.want)
		}
	}
	for _, tc := range hostileIDs {
		if ValidDeviceID(tc.id) {
			t.Errorf("%s: ValidDeviceID(%q) = true", tc.name, tc.id)
		}
	}
}

// inventory is a node as an agent on NVML reports it.
func inventory() Node {
	return Node{Name: "n1", Labels: map[string]string{"zone": "a", "example.com/rack": "r1"}, InstanceType: "p4d.24xlarge",
		GPUs: []GPU{
			{UUID: gpuA, Index: 0, Model: "A100-40GB", Healthy: true, Sharing: Sharing{Mode: Dynamic}},
			{UUID: gpuB, Index: 1, Model: "A100-40GB", Healthy: true, MIGEnabled: true, DynamicMIG: true, Sharing: Sharing{Mode: Dynamic},
				Instances: []MIGInstance{
					{UUID: migA, Profile: "3g.20gb", Start: 4, Sharing: Sharing{Mode: Dynamic}},
					{UUID: "MIG-" + gpuB + "/2", Profile: "1g.5gb", Start: 0, Sharing: Sharing{Mode: Dynamic}},
				}},
		}}
}

func TestValidateInventoryAcceptsWhatNVMLReports(t *testing.T) {
	n := inventory()
	if err := ValidateInventory(n); err != nil {
		t.Fatal(err)
	}
	if _, err := NewState(Fleet{Nodes: []Node{n}}, nil, Options{}); err != nil {
		t.Fatal(err)
	}
}

func TestValidateInventoryNamesTheField(t *testing.T) {
	type edit func(n *Node)
	type fieldCase struct {
		name  string
		edit  edit
		field string
		says  string
	}
	gpuUUID := func(i int, id string) edit { return func(n *Node) { n.GPUs[i].UUID = id } }
	migUUID := func(id string) edit { return func(n *Node) { n.GPUs[1].Instances[0].UUID = id } }
	cases := []fieldCase{
		{"uppercase GPU uuid", gpuUUID(0, "GPU-"+strings.ToUpper(gpuA[4:])), "gpus[0].uuid", "lowercase"},
		{"GPU uuid without its prefix", gpuUUID(1, gpuA[4:]), "gpus[1].uuid", "8-4-4-4-12"},
		{"a MIG uuid as a GPU's", gpuUUID(0, migB), "gpus[0].uuid", `"GPU-"`},
		{"repeated GPU uuid", gpuUUID(1, gpuA), "gpus[1].uuid", "gpus[0].uuid"},
		{"GPU uuid as a MIG instance's", migUUID(gpuA), "gpus[1].instances[0].uuid", `"MIG-"`},
		{"repeated MIG uuid", func(n *Node) { n.GPUs[1].Instances[1].UUID = migA }, "gpus[1].instances[1].uuid", "every uuid once"},
		{"legacy MIG id of another GPU", func(n *Node) { n.GPUs[1].Instances[1].UUID = "MIG-" + gpuA + "/2" }, "gpus[1].instances[1].uuid", "not its own GPU"},
		{"profile with a newline", func(n *Node) { n.GPUs[1].Instances[0].Profile = "3g.20gb\n" }, "gpus[1].instances[0].profile", "profile"},
		{"model with a NUL", func(n *Node) { n.GPUs[0].Model = "A100\x00" }, "gpus[0].model", "control character"},
		{"model of 10 KB", func(n *Node) { n.GPUs[0].Model = strings.Repeat("A", 10<<10) }, "gpus[0].model", "at most 64"},
		{"interval with an escape", func(n *Node) { n.GPUs[0].Sharing.Interval = "\x1b[2J" }, "gpus[0].sharing.interval", "control character"},
		{"instance type with a newline", func(n *Node) { n.InstanceType = "p4d\nFAKE LOG LINE" }, "instanceType", "control character"},
		{"label value with a bidi override", func(n *Node) { n.Labels["zone"] = "a\u202e" }, `labels["zone"]`, "control character"},
		{"label key with a space", func(n *Node) { n.Labels["a b"] = "x" }, `labels["a b"]`, "no spaces"},
		{"empty label key", func(n *Node) { n.Labels[""] = "x" }, `labels[""]`, "empty"},
		{"invalid UTF-8", func(n *Node) { n.Labels["zone"] = "\xff" }, `labels["zone"]`, "UTF-8"},
		{"too many labels", func(n *Node) {
			for i := range 65 {
				n.Labels[strings.Repeat("k", i+1)] = "v"
			}
		}, "labels", "at most 64"},
	}
	for _, h := range hostileIDs {
		cases = append(cases,
			fieldCase{"GPU uuid " + h.name, gpuUUID(1, h.id), "gpus[1].uuid", "8-4-4-4-12"},
			fieldCase{"MIG uuid " + h.name, migUUID(h.id), "gpus[1].instances[0].uuid", "8-4-4-4-12"})
	}
	for _, tc := range cases {
		n := inventory()
		tc.edit(&n)
		err := ValidateInventory(n)
		var fe *FieldError
		if !errors.As(err, &fe) {
			t.Errorf("%s: error %v, want a *FieldError", tc.name, err)
			continue
		}
		if fe.Field != tc.field || !strings.Contains(fe.Msg, tc.says) {
			t.Errorf("%s: field %q, message %q; want field %q saying %q", tc.name, fe.Field, fe.Msg, tc.field, tc.says)
		}
		if strings.ContainsFunc(err.Error(), isControl) || len(err.Error()) > 1024 {
			t.Errorf("%s: the message carries the hostile value raw: %q", tc.name, err.Error())
		}
	}
}

// validIDs are device ids of every form, with each profile of the
// catalog's A100 and H100 in planned ids.
func validIDs() []string {
	ids := []string{gpuA, gpuB, migA, migB, "MIG-" + gpuA + "/0", "MIG-" + gpuB + "/14"}
	for _, p := range []string{"1g.5gb", "1g.5gb+me", "1g.10gb", "2g.10gb", "3g.20gb", "4g.20gb", "7g.40gb",
		"1g.12gb-me", "1g.20gb", "7g.80gb"} {
		for _, start := range []string{"0", "4", "6"} {
			ids = append(ids, gpuA+"/"+p+"@"+start)
		}
	}
	return ids
}

func TestPipeDirectoryStaysInsideItsRoot(t *testing.T) {
	seen := map[string]string{}
	for _, id := range append(validIDs(), "GPU-web-0", "MIG-web-0-3g.20gb-4", "G0", "GPU-web-0/1g.5gb@0") {
		dir, err := PipeDirectory(id)
		if err != nil {
			t.Errorf("PipeDirectory(%q): %v", id, err)
			continue
		}
		if filepath.Dir(dir) != MPSPipeRoot || filepath.Clean(dir) != dir {
			t.Errorf("PipeDirectory(%q) = %q, want one directory of %s", id, dir, MPSPipeRoot)
		}
		if err := Within(MPSPipeRoot, dir); err != nil {
			t.Errorf("PipeDirectory(%q): %v", id, err)
		}
		if err := CheckPipeDirectory(dir); err != nil {
			t.Errorf("CheckPipeDirectory(PipeDirectory(%q)): %v", id, err)
		}
		if other, dup := seen[dir]; dup {
			t.Errorf("%q and %q share the pipe directory %s", id, other, dir)
		}
		seen[dir] = id
	}
	for _, tc := range hostileIDs {
		if dir, err := PipeDirectory(tc.id); err == nil {
			t.Errorf("%s: PipeDirectory(%q) = %q, want an error", tc.name, tc.id, dir)
		}
	}
}

func TestSafeJoinAndWithin(t *testing.T) {
	const root = "/var/run/cdi"
	for _, elem := range []string{"gpuslice-c-1.yaml", "a..b", ".hidden", "x:y"} {
		p, err := SafeJoin(root, elem)
		if err != nil || p != root+"/"+elem {
			t.Errorf("SafeJoin(%q) = %q, %v", elem, p, err)
		}
	}
	for _, elem := range []string{"", ".", "..", "../x", "x/..", "a/b", `..\x`, "a\x00b", "a\nb", strings.Repeat("a", 256)} {
		if p, err := SafeJoin(root, elem); err == nil {
			t.Errorf("SafeJoin(%q) = %q, want an error", elem, p)
		}
	}
	for _, tc := range []struct {
		root, path string
		ok         bool
	}{
		{"/run/gpuslice/mps", "/run/gpuslice/mps", true},
		{"/run/gpuslice/mps", "/run/gpuslice/mps/GPU-x/log", true},
		{"/run/gpuslice/mps/", "/run/gpuslice/mps//GPU-x", true},
		{"/run/gpuslice/mps", "/run/gpuslice/mps/../mps2", false},
		{"/run/gpuslice/mps", "/run/gpuslice/mpsx", false},
		{"/run/gpuslice/mps", "/run/gpuslice", false},
		{"/run/gpuslice/mps", "/", false},
		{"/run/gpuslice/mps", "run/gpuslice/mps/x", false},
		{"/run/gpuslice/mps", "/run/gpuslice/mps/x\n", false},
		{"", "/x", false},
	} {
		if err := Within(tc.root, tc.path); (err == nil) != tc.ok {
			t.Errorf("Within(%q, %q) = %v, want ok=%v", tc.root, tc.path, err, tc.ok)
		}
	}
	for _, dir := range []string{"", MPSPipeRoot, MPSPipeRoot + "/..", MPSPipeRoot + "/a/b", "/tmp/x", MPSPipeRoot + "/x/", "/run/gpuslice/mps/a\nb"} {
		if err := CheckPipeDirectory(dir); err == nil {
			t.Errorf("CheckPipeDirectory(%q) = nil", dir)
		}
	}
}

// The environments the allocator makes pass CheckProcessEnv: whole GPUs,
// MPS, existing and planned MIG instances.
func TestAllocatedEnvironmentsPass(t *testing.T) {
	s := newState(t, Policy{}, inventory())
	for _, c := range []*Claim{
		claim("c-mps", "acme", Request{Mode: MPS, MemoryMiB: 4096, ComputePercent: 20}),
		claim("c-mig", "acme", Request{Mode: MIG, Profile: "1g.5gb"}),
		claim("c-two", "beta", Request{Mode: MIG, Profile: "2g.10gb"}, Request{Mode: MIG, Profile: "1g.5gb"}),
	} {
		a := must(t, s, c)
		if err := CheckProcessEnv(a.Env); err != nil {
			t.Errorf("%s: env %v: %v", c.Name, a.Env, err)
		}
		for _, d := range a.Devices {
			if !ValidDeviceID(d.Device) {
				t.Errorf("%s: device %q is not valid", c.Name, d.Device)
			}
		}
	}
}

func TestCheckEnvRefusesHostileValues(t *testing.T) {
	good := func() map[string]string {
		return map[string]string{
			"CUDA_VISIBLE_DEVICES":              gpuA + "," + migA,
			"CUDA_MPS_PIPE_DIRECTORY":           MPSPipeRoot + "/" + gpuA,
			"CUDA_MPS_LOG_DIRECTORY":            MPSPipeRoot + "/" + gpuA + "/log",
			"CUDA_MPS_ACTIVE_THREAD_PERCENTAGE": "25",
			"CUDA_MPS_PINNED_DEVICE_MEM_LIMIT":  gpuA + "=4096M",
			"GPUSLICE_CLAIM":                    "c-1",
			"GPUSLICE_TENANT":                   "acme",
		}
	}
	if err := CheckProcessEnv(good()); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, key, value string
	}{
		{"newline in the device list", "CUDA_VISIBLE_DEVICES", gpuA + "\nLD_PRELOAD=/tmp/x.so"},
		{"command substitution", "CUDA_VISIBLE_DEVICES", "$(rm -rf /)"},
		{"NUL", "CUDA_VISIBLE_DEVICES", gpuA + "\x00"},
		{"a device that is not one", "CUDA_VISIBLE_DEVICES", "GPU-.._.._etc"},
		{"uppercase uuid", "CUDA_VISIBLE_DEVICES", "GPU-" + strings.ToUpper(gpuA[4:])},
		{"empty device list entry", "CUDA_VISIBLE_DEVICES", gpuA + ","},
		{"pipe directory escaping", "CUDA_MPS_PIPE_DIRECTORY", MPSPipeRoot + "/.."},
		{"pipe directory elsewhere", "CUDA_MPS_PIPE_DIRECTORY", "/etc"},
		{"relative pipe directory", "CUDA_MPS_PIPE_DIRECTORY", "mps/x"},
		{"log directory outside the pipe directory", "CUDA_MPS_LOG_DIRECTORY", "/var/log"},
		{"space", "GPUSLICE_TENANT", "acme corp"},
		{"quote", "GPUSLICE_CLAIM", `c-1"`},
		{"10 KB", "GPUSLICE_CLAIM", strings.Repeat("c", 10<<10)},
		{"variable name with '='", "A=B", "1"},
		{"lowercase variable name", "ld_preload", "x"},
		{"empty variable name", "", "x"},
	} {
		env := good()
		env[tc.key] = tc.value
		err := CheckProcessEnv(env)
		if err == nil {
			t.Errorf("%s: %s=%q passed", tc.name, tc.key, tc.value)
			continue
		}
		if strings.ContainsFunc(err.Error(), isControl) {
			t.Errorf("%s: the error carries the value raw: %q", tc.name, err)
		}
	}
}

func TestRenameDeviceRefusesHostileIDs(t *testing.T) {
	s := newState(t, Policy{}, inventory())
	a := must(t, s, claim("c-1", "acme", Request{Mode: MIG, Profile: "2g.10gb"}))
	planned := a.Devices[0].Device
	if !IsPlanned(planned) {
		t.Fatalf("device %s is not planned", planned)
	}
	for _, tc := range hostileIDs {
		if a.RenameDevice(planned, tc.id) {
			t.Errorf("%s: RenameDevice to %q changed the allocation", tc.name, tc.id)
		}
	}
	if !a.RenameDevice(planned, migB) || a.Devices[0].Device != migB || !strings.Contains(a.Env["CUDA_VISIBLE_DEVICES"], migB) {
		t.Errorf("after renaming to %s: %+v", migB, a)
	}
}

// FuzzValidDeviceID: whatever the id, PipeDirectory either refuses it or
// names one directory of MPSPipeRoot; an id ValidDeviceID accepts always
// has a pipe directory, and the process environment of an MPS device with
// that id passes CheckProcessEnv with no control character in any value.
func FuzzValidDeviceID(f *testing.F) {
	for _, id := range validIDs() {
		f.Add(id)
	}
	for _, tc := range hostileIDs {
		f.Add(tc.id)
	}
	f.Fuzz(func(t *testing.T, id string) {
		dir, err := PipeDirectory(id)
		if err == nil {
			if filepath.Dir(dir) != MPSPipeRoot || filepath.Clean(dir) != dir || Within(MPSPipeRoot, dir) != nil ||
				strings.ContainsFunc(dir, unicode.IsControl) {
				t.Fatalf("PipeDirectory(%q) = %q: not one directory of %s", id, dir, MPSPipeRoot)
			}
		}
		if !ValidDeviceID(id) {
			return
		}
		if err != nil {
			t.Fatalf("valid id %q has no pipe directory: %v", id, err)
		}
		if strings.Count(id, "/") > 1 || strings.Contains(id, "..") {
			t.Fatalf("valid id %q has more than one '/' or a '..'", id)
		}
		a := &Allocation{Claim: "c-1", Tenant: "acme", Devices: []Assigned{{Device: id, Mode: MPS, MemoryMiB: 1024,
			MPS: &MPSLimits{ActiveThreadPercent: 50, PinnedMemoryMiB: 1024, PipeDirectory: dir}}}}
		a.Env = processEnv(a)
		if err := CheckProcessEnv(a.Env); err != nil {
			t.Fatalf("env of valid id %q: %v", id, err)
		}
		for k, v := range a.Env {
			if strings.ContainsFunc(v, unicode.IsControl) {
				t.Fatalf("%s=%q carries a control character", k, v)
			}
		}
	})
}
