package spec

import (
	"encoding/json"
	"os"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/gpuslice/gpuslice/internal/alloc"
	"github.com/gpuslice/gpuslice/schema"
)

func TestNativeExampleLoads(t *testing.T) {
	data, err := os.ReadFile("../../examples/gpuslice.yaml")
	if err != nil {
		t.Fatal(err)
	}
	s, diags := ReadNative("gpuslice.yaml", data)
	if len(diags) > 0 {
		t.Fatalf("diagnostics: %v", diags)
	}
	if len(s.Pools) != 2 || s.Pools[0].GPU != "A100-40GB" || s.Pools[0].GPUsPerNode != 8 || s.Pools[0].MIG != "dynamic" {
		t.Fatalf("pools: %+v", s.Pools)
	}
	if len(s.Workloads) != 5 || s.Workloads[0].Requests[0].MemoryMiB != 4096 || s.Tenants[0].MemoryMiB != 200*1024 {
		t.Fatalf("workloads: %+v tenants %+v", s.Workloads, s.Tenants)
	}
	if w := s.Workloads[0]; w.CPU != "2" || w.CPURequest != "500m" || w.Mem != "4Gi" || w.MemRequest != "" {
		t.Errorf("embedder's container resources: cpu %q/%q memory %q/%q", w.CPU, w.CPURequest, w.Mem, w.MemRequest)
	}
}

func TestNativeErrors(t *testing.T) {
	cases := map[string]struct {
		yaml string
		want []string
	}{
		"unknown key": {`apiVersion: gpuslice.dev/v1alpha1
pools:
  - name: a
    instanceTyp: p4d.24xlarge
`, []string{`x.yaml:4:5: error: pools[0].instanceTyp: unknown field "instanceTyp" (did you mean "instanceType"?`}},
		"mig on T4": {`apiVersion: gpuslice.dev/v1alpha1
pools:
  - {name: t4, instanceType: g4dn.xlarge, mig: {1g.5gb: 7}}
`, []string{`pools[0].mig: T4 has no MIG (MIG-capable instance types: `, `p4d.24xlarge`}},
		"profile not on H100": {`apiVersion: gpuslice.dev/v1alpha1
pools:
  - {name: h, instanceType: p5.48xlarge, mig: {1g.5gb: 7}}
`, []string{`H100-80GB-SXM has no profile "1g.5gb" (valid: 1g.10gb, 1g.10gb+me, 1g.20gb, 2g.20gb,`}},
		"layout does not fit": {`apiVersion: gpuslice.dev/v1alpha1
pools:
  - {name: a, instanceType: p4d.24xlarge, mig: {4g.20gb: 2}}
`, []string{`2× 4g.20gb but at most 1 fit`}},
		"all problems at once": {`apiVersion: gpuslice.dev/v1alpha1
pools:
  - {name: a, instanceType: p4d.24xlarge, sharing: {mode: timeslice, replicas: 0}}
workloads:
  - name: w
    pool: b
    gpu: {memory: 10 gigs, compute: 150, mode: turbo}
`, []string{`pools[0].sharing.replicas: 0 is out of range (want 1..64)`, `workloads[0].gpu.memory: "10 gigs" is not a size`,
			`workloads[0].gpu.compute: 150 is out of range (want 0..100)`, `workloads[0].gpu.mode: "turbo"`, `pool "b" does not exist (pools: [a])`}},
		"bad yaml": {"apiVersion: gpuslice.dev/v1alpha1\npools: [\n", []string{"x.yaml:2: error: YAML syntax"}},
		"container resources": {`apiVersion: gpuslice.dev/v1alpha1
pools: [{name: a, gpu: L4}]
workloads:
  - {name: w, cpu: "2", cpuRequest: 2500m, memory: 4GB, gpu: {memory: 1GiB}}
  - {name: v, cpu: "0.5", cpuRequest: 500m, memory: 1Gi, memoryRequest: 2Gi, gpu: {memory: 1GiB}}
`, []string{`workloads[0].cpuRequest: cpuRequest 2500m is more than cpu 2`, `workloads[0].memory: "4GB"`, `4Gi`,
			`workloads[1].memoryRequest: memoryRequest 2Gi is more than memory 1Gi`}},
		"hardware timeslice": {`apiVersion: gpuslice.dev/v1alpha1
pools: [{name: a, gpu: L4}]
workloads:
  - {name: w, isolation: hardware, gpu: {mode: timeslice}}
`, []string{`isolation hardware needs a MIG instance or a whole GPU alone`}},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			_, diags := ReadNative("x.yaml", []byte(tc.yaml))
			text := diags.Error()
			for _, w := range tc.want {
				if !strings.Contains(text, w) {
					t.Errorf("missing %q in:\n%s", w, text)
				}
			}
		})
	}
}

// The JSON Schema must describe exactly the keys the reader accepts.
func TestSchemaMatchesReader(t *testing.T) {
	var sc map[string]any
	if err := json.Unmarshal(schema.JSON, &sc); err != nil {
		t.Fatal(err)
	}
	defs := sc["$defs"].(map[string]any)
	props := func(m any) []string {
		var out []string
		for k := range m.(map[string]any)["properties"].(map[string]any) {
			out = append(out, k)
		}
		sort.Strings(out)
		return out
	}
	sorted := func(xs []string) []string { out := slices.Clone(xs); sort.Strings(out); return out }
	check := func(where string, got, want []string) {
		if !slices.Equal(got, sorted(want)) {
			t.Errorf("%s: schema has %v, reader accepts %v", where, got, sorted(want))
		}
	}
	check("top", props(sc), nativeTopKeys)
	check("policy", props(sc["properties"].(map[string]any)["policy"]), nativePolicyKeys)
	check("pool", props(defs["pool"]), nativePoolKeys)
	check("sharing", props(defs["sharing"]), nativeSharingKeys)
	check("tenant", props(defs["tenant"]), nativeTenantKeys)
	check("workload", props(defs["workload"]), nativeWorkloadKeys)
	check("request", props(defs["request"]), nativeRequestKeys)
}

func TestParseMemoryMiB(t *testing.T) {
	for in, want := range map[string]int64{"10GiB": 10240, "512MiB": 512, "8G": 7629, "1.5Gi": 1536, "4096": 4096, "100M": 95, " 2 GiB ": 2048} {
		if got, err := ParseMemoryMiB(in); err != nil || got != want {
			t.Errorf("ParseMemoryMiB(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
	for _, bad := range []string{"", "ten", "-1GiB", "1e30GiB", "GiB", "NaN"} {
		if _, err := ParseMemoryMiB(bad); err == nil {
			t.Errorf("ParseMemoryMiB(%q) accepted", bad)
		}
	}
}

func FuzzReadNative(f *testing.F) {
	if data, err := os.ReadFile("../../examples/gpuslice.yaml"); err == nil {
		f.Add(data)
	}
	f.Add([]byte("apiVersion: gpuslice.dev/v1alpha1\npools: [{name: a, gpu: A100-40GB, mig: {3g.20gb: 2}}]\n"))
	f.Add([]byte("a: &x [*x]"))
	f.Fuzz(func(t *testing.T, data []byte) {
		_, _ = ReadNative("f.yaml", data)
	})
}

func FuzzParseMemoryMiB(f *testing.F) {
	for _, s := range []string{"10GiB", "512MiB", "8G", "1.5Gi", "4096", "", "-1", "1e9TiB", "NaN"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if v, err := ParseMemoryMiB(s); err == nil && (v < 0 || v > 1<<40) {
			t.Fatalf("ParseMemoryMiB(%q) = %d", s, v)
		}
	})
}

// Issue #11 item 7: a request naming a profile without memory asks for the
// instance; with memory, or a mode, it stays as written.
func TestNativeProfileWithoutMemoryIsTheInstance(t *testing.T) {
	in := `apiVersion: gpuslice.dev/v1alpha1
kind: Spec
pools: [{name: a, instanceType: p4d.24xlarge, mig: dynamic}]
workloads:
  - {name: whole, tenant: t, replicas: 1, gpu: {profile: 3g.20gb}}
  - {name: shared, tenant: t, replicas: 1, gpu: {profile: 3g.20gb, memory: 4GiB}}
  - {name: sliced, tenant: t, replicas: 1, gpu: {profile: 3g.20gb, mode: timeslice}}
`
	s, diags := ReadNative("p.yaml", []byte(in))
	if err := diags.Err(); err != nil {
		t.Fatal(err)
	}
	for i, want := range []alloc.Mode{alloc.MIG, "", alloc.TimeSlice} {
		if got := s.Workloads[i].Requests[0].Mode; got != want {
			t.Errorf("%s: mode %q, want %q", s.Workloads[i].Name, got, want)
		}
	}
}
