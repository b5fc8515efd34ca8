package spec

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/gpuslice/gpuslice/internal/alloc"
)

func readComposeFile(t *testing.T, name string) (*Spec, Diagnostics) {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("testdata", "compose", name))
	if err != nil {
		t.Fatal(err)
	}
	return ReadCompose(name, data)
}

// mustCompose reads src and fails on any error diagnostic.
func mustCompose(t *testing.T, src string) (*Spec, Diagnostics) {
	t.Helper()
	s, ds := ReadCompose("compose.yaml", []byte(src))
	if err := ds.Err(); err != nil {
		t.Fatal(err)
	}
	return s, ds
}

func TestComposeSeedTimeSlicing(t *testing.T) {
	s, ds := readComposeFile(t, "seed-timeslicing.yaml")
	if len(ds) != 1 || ds[0].Severity != Warning {
		t.Fatalf("want only the equal-share warning, got %v", ds)
	}
	d := ds[0]
	if d.Message != "no memory given: assuming an equal 1/2 share = 8192 MiB; time-slicing does not enforce it" ||
		d.Pos.Line != 13 || d.Pos.Column != 3 || d.Path != "services.gpuinfo.x-gpuslice.memory" || !strings.Contains(d.Hint, "16384 MiB of one T4") {
		t.Errorf("warning: %v", d)
	}
	if len(s.Pools) != 1 {
		t.Fatalf("pools: %+v", s.Pools)
	}
	p := s.Pools[0]
	if p.Name != "gpu-slicing-example-hosted-tier" || p.InstanceType != "g4dn.xlarge" || p.GPU != "T4" || p.GPUsPerNode != 1 ||
		p.Sharing != (alloc.Sharing{Mode: alloc.TimeSlice, Replicas: 2}) || p.MIG != "" {
		t.Errorf("pool: %+v", p)
	}
	if p.Where.Line != 9 || p.Where.Column != 5 {
		t.Errorf("pool position %+v", p.Where)
	}
	if len(s.Workloads) != 1 {
		t.Fatalf("workloads: %+v", s.Workloads)
	}
	wl := s.Workloads[0]
	want := Workload{
		Name: "gpuinfo", Tenant: "gpu-slicing-example-hosted-tier", Replicas: 3, MinReplicas: 1, Pool: p.Name,
		Requests: []alloc.Request{{Name: "gpu", MemoryMiB: 8192, Mode: alloc.TimeSlice}},
		Image:    "ghcr.io/omnistrate-community/gpu-slicing-example:0.0.3",
		Ports:    []int{5000}, CPU: "1", Mem: "100M", CPURequest: "100m", MemRequest: "50M",
		Autoscaling: &Autoscaling{MinReplicas: 1, MaxReplicas: 3, IdleMinutesBeforeScalingDown: 2, IdleThreshold: 20,
			OverUtilizedMinutesBeforeScalingUp: 3, OverUtilizedThreshold: 80, TargetPort: 5000, EnableAutoStop: true, MinimumNodesInPool: 1},
		Where: Pos{File: "seed-timeslicing.yaml", Line: 13, Column: 3},
	}
	if !reflect.DeepEqual(wl, want) {
		t.Errorf("workload:\n got %+v\nwant %+v", wl, want)
	}
	if len(s.Tenants) != 1 || s.Tenants[0].Name != wl.Tenant {
		t.Errorf("tenants: %+v", s.Tenants)
	}
}

func TestComposeSeedMIG(t *testing.T) {
	s, ds := readComposeFile(t, "seed-mig.yaml")
	if len(ds) != 0 {
		t.Fatalf("want no diagnostics, got %v", ds)
	}
	p := s.Pools[0]
	if p.Name != "gpu-mig-example-hosted-tier" || p.InstanceType != "p4d.24xlarge" || p.GPU != "A100-40GB" || p.GPUsPerNode != 8 ||
		p.MIG != "fixed" || !reflect.DeepEqual(p.MIGLayout, map[string]int{"1g.5gb": 7}) || p.MIGSharing.Mode != "" || p.Sharing.Mode != "" {
		t.Errorf("pool: %+v", p)
	}
	wl := s.Workloads[0]
	if wl.Replicas != 5 || wl.MinReplicas != 1 || wl.CPU != "2" || wl.Mem != "500M" || !reflect.DeepEqual(wl.Ports, []int{5000}) ||
		wl.Autoscaling == nil || wl.Autoscaling.MaxReplicas != 5 || wl.Autoscaling.TargetPort != 5000 {
		t.Errorf("workload: %+v", wl)
	}
	if want := []alloc.Request{{Name: "gpu", Mode: alloc.MIG, Profile: "1g.5gb"}}; !reflect.DeepEqual(wl.Requests, want) {
		t.Errorf("requests: %+v", wl.Requests)
	}
}

func TestComposeMIGWithTimeSlicing(t *testing.T) {
	s, ds := mustCompose(t, `services:
  a:
    image: x
x-internal-integrations:
  multiTenantGpu:
    instanceType: p4d.24xlarge
    migProfile: 1g.5gb
    timeSlicingReplicas: 2
`)
	p := s.Pools[0]
	if p.Name != "default" || p.MIGLayout["1g.5gb"] != 7 || p.MIGSharing != (alloc.Sharing{Mode: alloc.TimeSlice, Replicas: 2}) || p.Sharing.Mode != "" {
		t.Errorf("pool: %+v", p)
	}
	r := s.Workloads[0].Requests[0]
	if r.Mode != alloc.TimeSlice || r.Profile != "1g.5gb" || r.MemoryMiB != 4864/2 {
		t.Errorf("request: %+v", r)
	}
	if len(ds) != 1 || !strings.Contains(ds[0].Hint, "1g.5gb instance of A100-40GB") {
		t.Errorf("diagnostics: %v", ds)
	}
	if s.Workloads[0].Tenant != "default" {
		t.Errorf("tenant %q", s.Workloads[0].Tenant)
	}
}

func TestComposeGPUSliceExtension(t *testing.T) {
	s, ds := mustCompose(t, `x-internal-integrations:
  multiTenantGpu:
    instanceType: g5.xlarge
    timeSlicingReplicas: 4
x-gpuslice:
  tenant: team-a
  mode: mps
  mps: {activeThreadPercent: 25, pinnedMemory: 4GiB}
services:
  infer:
    image: x
    deploy: {replicas: 6}
    x-gpuslice:
      memory: 5GiB
      workload: inference
      latencySensitive: true
      priority: 10
      isolation: tenant
  notebook:
    image: y
    x-gpuslice: {tenant: team-b, replicas: 2, compute: 30}
`)
	if len(ds) != 0 {
		t.Errorf("diagnostics: %v", ds)
	}
	want := alloc.Sharing{Mode: alloc.MPS, MaxClients: 4, DefaultThreadPercent: 25, DefaultPinnedMiB: 4096}
	if s.Pools[0].Sharing != want {
		t.Errorf("sharing %+v", s.Pools[0].Sharing)
	}
	a, b := s.Workloads[0], s.Workloads[1]
	if a.Tenant != "team-a" || a.Replicas != 6 || a.Priority != 10 || a.Isolation != alloc.IsolationTenant {
		t.Errorf("infer: %+v", a)
	}
	if r := a.Requests[0]; r != (alloc.Request{Name: "gpu", MemoryMiB: 5120, ComputePercent: 25, Mode: alloc.MPS, Workload: alloc.WorkloadInference, LatencySensitive: true}) {
		t.Errorf("infer request: %+v", r)
	}
	if r := b.Requests[0]; b.Tenant != "team-b" || b.Replicas != 2 || r.ComputePercent != 30 || r.MemoryMiB != 4096 || r.Mode != alloc.MPS {
		t.Errorf("notebook: %+v", b)
	}
	if len(s.Tenants) != 2 {
		t.Errorf("tenants %+v", s.Tenants)
	}
}

func TestComposeServiceLevelPoolWins(t *testing.T) {
	s, _ := mustCompose(t, `x-omnistrate-service-plan: {name: My Plan}
x-internal-integrations:
  multiTenantGpu: {instanceType: g4dn.xlarge, timeSlicingReplicas: 2}
services:
  web:
    image: nginx
  train:
    image: t
    x-internal-integrations:
      multiTenantGpu: {instanceType: p4d.24xlarge, migProfile: 3g.20gb}
`)
	if len(s.Pools) != 2 || s.Pools[0].Name != "my-plan" || s.Pools[1].Name != "my-plan-train" || s.Pools[1].MIGLayout["3g.20gb"] != 2 {
		t.Fatalf("pools: %+v", s.Pools)
	}
	if s.Workloads[0].Pool != "my-plan" || s.Workloads[1].Pool != "my-plan-train" || s.Workloads[1].Requests[0].Profile != "3g.20gb" {
		t.Errorf("workloads: %+v", s.Workloads)
	}
}

func TestComposeWithoutPool(t *testing.T) {
	s, _ := mustCompose(t, `services:
  db:
    image: postgres
  gpu:
    image: cuda
    deploy:
      resources:
        reservations:
          devices:
            - capabilities: [gpu]
              count: 2
`)
	if len(s.Pools) != 0 || len(s.Workloads) != 1 {
		t.Fatalf("spec: %+v", s)
	}
	if wl := s.Workloads[0]; wl.Name != "gpu" || wl.Pool != "" || wl.Requests[0].Count != 2 || wl.Tenant != "default" {
		t.Errorf("workload: %+v", wl)
	}
}

func TestComposeMillicoresAndStrings(t *testing.T) {
	s, _ := mustCompose(t, `x-internal-integrations:
  multiTenantGpu: {instanceType: g4dn.xlarge, timeSlicingReplicas: 2}
services:
  a:
    image: x
    deploy: {resources: {limits: {cpus: "250m", memory: 1G}, reservations: {cpus: 100m}}}
`)
	if wl := s.Workloads[0]; wl.CPU != "250m" || wl.Mem != "1G" {
		t.Errorf("cpu %q mem %q", wl.CPU, wl.Mem)
	}
}

// TestComposeReadsOnlyTheBytes: no environment, no env_file, no include, no
// extends.file is read.
func TestComposeReadsOnlyTheBytes(t *testing.T) {
	dir := t.TempDir()
	t.Chdir(dir)
	t.Setenv("GPUSLICE_COMPOSE_TAG", "leaked")
	for name, body := range map[string]string{
		".env":       "GPUSLICE_COMPOSE_TAG=leaked\n",
		"app.env":    "FROM_FILE=leaked\n",
		"base.yaml":  "services:\n  base:\n    image: leaked\n",
		"other.yaml": "services:\n  other:\n    image: leaked\n",
	} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	src := `include: [other.yaml]
x-internal-integrations:
  multiTenantGpu: {instanceType: g4dn.xlarge, timeSlicingReplicas: 2}
services:
  a:
    image: "repo:${GPUSLICE_COMPOSE_TAG:-safe}"
    env_file: app.env
    environment: {KEEP: "1"}
  b:
    image: b
    extends: {file: base.yaml, service: base}
`
	s, ds := ReadCompose("compose.yaml", []byte(src))
	var msgs []string
	for _, d := range ds.Errors() {
		msgs = append(msgs, d.String())
	}
	want := []string{
		"compose.yaml:1:1: error: include: include is not followed: only this file is read (merge the included files into this one)",
		"compose.yaml:11:15: error: services.b.extends.file: extends.file is not followed: only this file is read (copy the base service into this file)",
	}
	if !reflect.DeepEqual(msgs, want) {
		t.Errorf("errors:\n%s", strings.Join(msgs, "\n"))
	}
	if len(s.Workloads) != 2 {
		t.Fatalf("workloads %+v", s.Workloads)
	}
	a, b := s.Workloads[0], s.Workloads[1]
	if a.Image != "repo:safe" || !reflect.DeepEqual(a.Env, map[string]string{"KEEP": "1"}) || b.Image != "b" {
		t.Errorf("a %+v\nb %+v", a, b)
	}
}

// x-gpuslice.metric chooses what a compose service scales on; requests
// needs the proxy's targetPort, and targetConcurrency applies to requests
// only.
func TestComposeScaleMetric(t *testing.T) {
	seed, err := os.ReadFile("testdata/compose/seed-mig.yaml")
	if err != nil {
		t.Fatal(err)
	}
	withMetric := strings.Replace(string(seed), "    x-omnistrate-capabilities:", "    x-gpuslice: {metric: requests, targetConcurrency: 4}\n    x-omnistrate-capabilities:", 1)
	s, diags := ReadCompose("seed-mig.yaml", []byte(withMetric))
	if err := diags.Err(); err != nil {
		t.Fatal(err)
	}
	if wl := s.Workloads[0]; wl.ScaleMetric != "requests" || wl.TargetConcurrency != 4 {
		t.Fatalf("metric %q target %d, want requests and 4", wl.ScaleMetric, wl.TargetConcurrency)
	}
	noPort := strings.Replace(withMetric, "        targetPort: 5000\n", "", 1)
	_, diags = ReadCompose("seed-mig.yaml", []byte(noPort))
	if err := diags.Err(); err == nil || !strings.Contains(err.Error(), "metric requests counts requests at the service's proxy") {
		t.Fatalf("requests without targetPort: %v", err)
	}
	bad := strings.Replace(withMetric, "metric: requests", "metric: latency", 1)
	if _, diags = ReadCompose("seed-mig.yaml", []byte(bad)); diags.Err() == nil || !strings.Contains(diags.Err().Error(), "valid: gpu, compute, memory, requests") {
		t.Fatalf("unknown metric: %v", diags.Err())
	}
	gpuTarget := strings.Replace(withMetric, "metric: requests, ", "", 1)
	_, diags = ReadCompose("seed-mig.yaml", []byte(gpuTarget))
	found := false
	for _, d := range diags {
		found = found || (d.Severity == Warning && strings.Contains(d.Message, "targetConcurrency applies to metric requests only"))
	}
	if !found {
		t.Fatalf("targetConcurrency without requests: no warning in %v", diags)
	}
}
