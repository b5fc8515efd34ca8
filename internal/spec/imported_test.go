package spec

import (
	"reflect"
	"strings"
	"testing"

	"github.com/gpuslice/gpuslice/internal/alloc"
)

// readFiles reads name/content pairs as gpuslice plan does and applies the
// imported configs; reading errors fail the test, ApplyImported's are
// returned.
func readFiles(t *testing.T, files ...string) (*Spec, Diagnostics) {
	t.Helper()
	var merged *Spec
	for i := 0; i+1 < len(files); i += 2 {
		s, diags := Read(files[i], []byte(files[i+1]), "")
		if err := diags.Err(); err != nil {
			t.Fatalf("%s: %v", files[i], err)
		}
		if merged == nil {
			merged = s
		} else {
			merged = Merge(merged, s)
		}
	}
	return merged, ApplyImported(merged)
}

// wantDiag checks that diags hold exactly the wanted errors and warnings,
// each given as "E file:line text" with pieces of the message.
func wantDiag(t *testing.T, diags Diagnostics, wants ...string) {
	t.Helper()
	used := make([]bool, len(diags))
	for _, w := range wants {
		sev, rest, _ := strings.Cut(w, " ")
		at, text, _ := strings.Cut(rest, " ")
		found := false
		for i, d := range diags {
			if used[i] || strings.ToUpper(string(d.Severity[:1])) != sev || posText(d.Pos) != at {
				continue
			}
			ok := true
			for _, piece := range strings.Split(text, "|") {
				ok = ok && strings.Contains(d.Message+" ("+d.Hint+")", piece)
			}
			if ok {
				used[i], found = true, true
				break
			}
		}
		if !found {
			t.Errorf("missing %q in:\n%v", w, diags)
		}
	}
	for i, d := range diags {
		if !used[i] {
			t.Errorf("unexpected %s", d)
		}
	}
}

const t4Pool = `apiVersion: gpuslice.dev/v1alpha1
kind: Spec
pools:
  - name: t4
    instanceType: g4dn.xlarge
`

const dp4 = `version: v1
flags:
  migStrategy: none
sharing:
  timeSlicing:
    renameByDefault: true
    failRequestsGreaterThanOne: true
    resources:
    - name: nvidia.com/gpu
      replicas: 4
`

func TestApplyDevicePluginFillsPlannerDecidedSharing(t *testing.T) {
	s, diags := readFiles(t, "pool.yaml", t4Pool, "dp.yaml", dp4)
	wantDiag(t, diags)
	p := s.Pools[0]
	if p.Sharing != (alloc.Sharing{Mode: alloc.TimeSlice, Replicas: 4}) {
		t.Errorf("sharing %+v, want time-slicing with 4", p.Sharing)
	}
	if p.DevicePlugin == nil || p.DevicePlugin.Text != dp4 {
		t.Fatalf("the pool keeps the config as written: %+v", p.DevicePlugin)
	}
	dp := p.DevicePlugin.DevicePlugin
	if dp == nil || !dp.RenameByDefault || dp.FailRequestsGreaterThanOne == nil || !*dp.FailRequestsGreaterThanOne ||
		dp.Mode != "timeSlicing" || !reflect.DeepEqual(dp.Replicas, map[string]int{"nvidia.com/gpu": 4}) {
		t.Errorf("settings %+v", dp)
	}
	if len(p.FixedBy) != 1 || !strings.Contains(p.FixedBy[0], "time-slicing with 4 replicas, fixed by device-plugin config \"default\" (dp.yaml:10)") {
		t.Errorf("FixedBy %q", p.FixedBy)
	}
}

func TestApplyDevicePluginConflictNamesBothPositions(t *testing.T) {
	compose := `x-internal-integrations:
  multiTenantGpu:
    instanceType: g4dn.xlarge
    timeSlicingReplicas: 2
services:
  web:
    image: nginx
`
	_, diags := readFiles(t, "compose.yaml", compose, "dp.yaml", dp4)
	wantDiag(t, diags, "E dp.yaml:10 time-slicing with 2 replicas on whole GPUs at compose.yaml:4|device-plugin config \"default\" (dp.yaml:10) sets time-slicing with 4 replicas")

	// Agreeing is fine, and the spec's setting stays.
	s, diags := readFiles(t, "compose.yaml", strings.Replace(compose, "2\n", "4\n", 1), "dp.yaml", dp4)
	wantDiag(t, diags)
	if s.Pools[0].DevicePlugin == nil || len(s.Pools[0].FixedBy) != 0 {
		t.Errorf("an agreeing config is attached without fixing anything: %+v", s.Pools[0])
	}

	// No timeSlicingReplicas in compose means one replica per GPU, decided
	// there: a config that time-slices conflicts.
	_, diags = readFiles(t, "compose.yaml", strings.Replace(compose, "    timeSlicingReplicas: 2\n", "", 1), "dp.yaml", dp4)
	wantDiag(t, diags, "E dp.yaml:10 no sharing (one replica per device)|compose.yaml:3")
}

const cmMulti = `apiVersion: v1
kind: ConfigMap
metadata: {name: dp}
data:
  t4: |
    version: v1
    sharing:
      timeSlicing:
        failRequestsGreaterThanOne: true
        resources: [{name: nvidia.com/gpu, replicas: 3}]
  shared-l4: |
    version: v1
    sharing:
      mps:
        resources: [{name: nvidia.com/gpu, replicas: 6}]
  spare: |
    version: v1
`

func TestApplyDevicePluginMatching(t *testing.T) {
	pools := t4Pool + `  - name: l4
    instanceType: g6.xlarge
    labels: {nvidia.com/device-plugin.config: shared-l4}
`
	s, diags := readFiles(t, "pools.yaml", pools, "cm.yaml", cmMulti)
	wantDiag(t, diags, `W cm.yaml:16 no pool uses device-plugin config "spare"`)
	if s.Pools[0].Sharing.Replicas != 3 || s.Pools[0].DevicePlugin.Key != "t4" {
		t.Errorf("t4 is matched by its name: %+v", s.Pools[0])
	}
	if s.Pools[1].Sharing != (alloc.Sharing{Mode: alloc.MPS, MaxClients: 6, DefaultThreadPercent: 16}) || s.Pools[1].DevicePlugin.Key != "shared-l4" {
		t.Errorf("l4 is matched by its label: %+v", s.Pools[1])
	}

	// A label naming a config no input has.
	bad := strings.Replace(pools, "shared-l4}", "nope}", 1)
	_, diags = readFiles(t, "pools.yaml", bad, "cm.yaml", cmMulti)
	wantDiag(t, diags, "E pools.yaml:6 label nvidia.com/device-plugin.config=nope|have: t4, shared-l4, spare",
		`W cm.yaml:11 no pool uses device-plugin config "shared-l4"`, `W cm.yaml:16 no pool uses device-plugin config "spare"`)

	// Two default configs for one pool are ambiguous.
	_, diags = readFiles(t, "pool.yaml", t4Pool, "a.yaml", dp4, "b.yaml", dp4)
	wantDiag(t, diags, `E pool.yaml:4 2 configs apply as the default config, ambiguous|a.yaml:1|b.yaml:1`,
		`E a.yaml:1 no pool uses`, `E b.yaml:1 no pool uses`)

	// A file none of whose configs applies.
	_, diags = readFiles(t, "pool.yaml", strings.Replace(t4Pool, "name: t4", "name: gpu", 1), "cm.yaml", cmMulti)
	wantDiag(t, diags, `E cm.yaml:5 no pool uses the nvidia-device-plugin data keys "t4", "shared-l4", "spare" of this file|pools: gpu`)
}

const a100Pool = `apiVersion: gpuslice.dev/v1alpha1
kind: Spec
pools:
  - name: a100
    instanceType: p4d.24xlarge
`

func TestApplyDevicePluginMIGPerProfile(t *testing.T) {
	pool := a100Pool + "    mig: {1g.5gb: 3, 2g.10gb: 2}\n"
	cfg := `version: v1
flags: {migStrategy: mixed}
sharing:
  timeSlicing:
    failRequestsGreaterThanOne: true
    resources: [{name: nvidia.com/mig-1g.5gb, replicas: 4}]
`
	s, diags := readFiles(t, "pool.yaml", pool, "dp.yaml", cfg)
	wantDiag(t, diags)
	want := map[string]alloc.Sharing{"1g.5gb": {Mode: alloc.TimeSlice, Replicas: 4}, "2g.10gb": {Mode: alloc.Exclusive}}
	if !reflect.DeepEqual(s.Pools[0].MIGSharingByProfile, want) {
		t.Errorf("per profile %v, want %v", s.Pools[0].MIGSharingByProfile, want)
	}
	// Dynamic MIG cannot keep per-profile sharing.
	_, diags = readFiles(t, "pool.yaml", a100Pool+"    mig: dynamic\n", "dp.yaml", cfg)
	wantDiag(t, diags, "E dp.yaml:1 mig dynamic at pool.yaml:6|shares MIG devices per profile")
	// migStrategy none advertises no MIG device.
	_, diags = readFiles(t, "pool.yaml", pool, "dp.yaml", "version: v1\nflags: {migStrategy: none}\n")
	wantDiag(t, diags, "E dp.yaml:1 uses MIG (pool.yaml:6)|migStrategy none")
}

const mpAll4g = `version: v1
mig-configs:
  two-4g:
    - devices: all
      mig-enabled: true
      mig-devices:
        "4g.20gb": 2
`

// Issue #11 item 2: an entry without a device filter is checked against
// every GPU model it could meet in the spec's pools.
func TestApplyMIGPartedChecksEntriesWithoutFilter(t *testing.T) {
	_, diags := readFiles(t, "pool.yaml", a100Pool, "mp.yaml", mpAll4g)
	wantDiag(t, diags, `E mp.yaml:7 mig-parted config "two-4g" (mp.yaml:3)|reaches A100-40GB GPUs|2× 4g.20gb do not fit|needs 8 compute slices, the GPU has 7`)

	// Also when no pool selects the config (here another one is selected).
	two := mpAll4g + `  gpuslice-a100:
    - devices: all
      mig-enabled: true
      mig-devices: {"3g.20gb": 2}
`
	_, diags = readFiles(t, "pool.yaml", a100Pool, "mp.yaml", two)
	wantDiag(t, diags, `E mp.yaml:7 "two-4g"|A100-40GB|needs 8 compute slices`)

	// A profile the model lacks names the profiles it has; an H100 pool
	// next to it checks the same entry against H100 too.
	h := `version: v1
mig-configs:
  a:
    - devices: all
      mig-enabled: true
      mig-devices: {"1g.5gb": 7}
`
	pools := a100Pool + "  - name: h100\n    gpu: H100-80GB-SXM\n    gpusPerNode: 8\n    labels: {nvidia.com/mig.config: b}\n"
	_, diags = readFiles(t, "pools.yaml", pools, "mp.yaml", h+"  b:\n    - devices: all\n      mig-enabled: false\n")
	wantDiag(t, diags, `E mp.yaml:6 H100-80GB-SXM has no MIG profile 1g.5gb|its profiles: 1g.10gb`)
}

func TestApplyMIGPartedFixesLayout(t *testing.T) {
	cfg := `version: v1
mig-configs:
  all-balanced:
    - device-filter: ["0x20B010DE"]
      devices: all
      mig-enabled: true
      mig-devices: {"1g.5gb": 2, "2g.10gb": 1, "3g.20gb": 1}
    - device-filter: "0x233010DE"
      devices: all
      mig-enabled: true
      mig-devices: {"3g.40gb": 2}
`
	pool := a100Pool + "    labels: {nvidia.com/mig.config: all-balanced}\n"
	s, diags := readFiles(t, "pool.yaml", pool, "mp.yaml", cfg)
	wantDiag(t, diags)
	p := s.Pools[0]
	if p.MIG != "fixed" || !reflect.DeepEqual(p.MIGLayout, map[string]int{"1g.5gb": 2, "2g.10gb": 1, "3g.20gb": 1}) || p.MIGParted == nil {
		t.Errorf("layout %s %v", p.MIG, p.MIGLayout)
	}
	if len(p.FixedBy) != 1 || !strings.Contains(p.FixedBy[0], `fixed by mig-parted config "all-balanced" (mp.yaml:3)`) {
		t.Errorf("FixedBy %q", p.FixedBy)
	}

	// The spec's own layout that differs is a conflict naming both.
	_, diags = readFiles(t, "pool.yaml", pool+"    mig: {3g.20gb: 2}\n", "mp.yaml", cfg)
	wantDiag(t, diags, "E mp.yaml:4 the spec sets MIG instances 2× 3g.20gb at pool.yaml:7|sets MIG instances 2× 1g.5gb + 1× 2g.10gb + 1× 3g.20gb")

	// GPUs set up differently, GPUs left out, no entry for the model.
	half := "version: v1\nmig-configs:\n  a100:\n    - devices: [0, 1, 2, 3]\n      mig-enabled: true\n      mig-devices: {\"7g.40gb\": 1}\n    - devices: [4, 5, 6, 7]\n      mig-enabled: false\n"
	_, diags = readFiles(t, "pool.yaml", a100Pool, "mp.yaml", half)
	wantDiag(t, diags, "E mp.yaml:3 GPU 0, 1, 2, 3: 1× 7g.40gb; GPU 4, 5, 6, 7: MIG off|one layout per pool")
	_, diags = readFiles(t, "pool.yaml", a100Pool, "mp.yaml", half[:strings.Index(half, "    - devices: [4")])
	wantDiag(t, diags, "E mp.yaml:3 no entry for GPU 4, 5, 6, 7 of its 8")
	h100Only := "version: v1\nmig-configs:\n  a100:\n    - device-filter: \"0x233010DE\"\n      devices: all\n      mig-enabled: true\n      mig-devices: {\"3g.40gb\": 2}\n"
	_, diags = readFiles(t, "pool.yaml", a100Pool, "mp.yaml", h100Only)
	wantDiag(t, diags, "E mp.yaml:3 has no entry for its GPU, A100-40GB")

	// MIG on without instances leaves them to gpuslice.
	s, diags = readFiles(t, "pool.yaml", a100Pool, "mp.yaml", "version: v1\nmig-configs:\n  x:\n    - devices: all\n      mig-enabled: true\n      mig-devices: {}\n")
	wantDiag(t, diags)
	if s.Pools[0].MIG != "dynamic" || s.Pools[0].Labels[MIGConfigLabel] != "x" {
		t.Errorf("all-enabled: %s %v", s.Pools[0].MIG, s.Pools[0].Labels)
	}
}
