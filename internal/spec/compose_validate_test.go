package spec

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/gpuslice/gpuslice/internal/testkit"
)

// gpuPool is a top-level multiTenantGpu block; service is one service.
const (
	gpuPool = "x-internal-integrations:\n  multiTenantGpu:\n"
	service = "services:\n  a:\n    image: x\n"
)

func TestComposeValidation(t *testing.T) {
	cases := []struct {
		name, src string
		sev       Severity
		path      string
		line, col int
		msg, hint string // hint: a substring
	}{
		{"unknown instance type", gpuPool + "    instanceType: g4dn.xlarg\n    timeSlicingReplicas: 2\n" + service,
			Error, "x-internal-integrations.multiTenantGpu.instanceType", 3, 19,
			`unknown instance type "g4dn.xlarg"`, `did you mean "g4dn.xlarge"? valid: g4dn.xlarge, g4dn.2xlarge,`},
		{"unknown multiTenantGpu key", gpuPool + "    instanceType: g4dn.xlarge\n    timeSlicingReplica: 2\n" + service,
			Error, "x-internal-integrations.multiTenantGpu.timeSlicingReplica", 4, 5,
			`unknown field "timeSlicingReplica"`, `did you mean "timeSlicingReplicas"?`},
		{"MIG on a T4", gpuPool + "    instanceType: g4dn.xlarge\n    migProfile: 1g.5gb\n" + service,
			Error, "x-internal-integrations.multiTenantGpu.migProfile", 4, 17,
			"g4dn.xlarge has T4 GPUs, which have no MIG: migProfile 1g.5gb cannot be used",
			"MIG-capable instance types: p4d.24xlarge, p4de.24xlarge, p5.4xlarge, p5.48xlarge"},
		{"profile not on H100", gpuPool + "    instanceType: p5.48xlarge\n    migProfile: 1g.5gb\n" + service,
			Error, "x-internal-integrations.multiTenantGpu.migProfile", 4, 17,
			`H100-80GB-SXM (p5.48xlarge) has no MIG profile "1g.5gb"`, "1g.10gb, 1g.10gb+me, 1g.20gb, 2g.20gb, 3g.40gb, 4g.40gb, 7g.80gb"},
		{"timeSlicingReplicas 0", gpuPool + "    instanceType: g4dn.xlarge\n    timeSlicingReplicas: 0\n" + service,
			Error, "x-internal-integrations.multiTenantGpu.timeSlicingReplicas", 4, 26,
			"timeSlicingReplicas 0 is less than 1", "want 1..64"},
		{"timeSlicingReplicas 65", gpuPool + "    instanceType: g4dn.xlarge\n    timeSlicingReplicas: 65\n" + service,
			Error, "x-internal-integrations.multiTenantGpu.timeSlicingReplicas", 4, 26,
			"timeSlicingReplicas 65 is more than 64", "want 1..64"},
		{"activeThreadPercent 150", "x-gpuslice:\n  mode: mps\n  mps:\n    activeThreadPercent: 150\n" + service,
			Error, "x-gpuslice.mps.activeThreadPercent", 4, 26,
			"activeThreadPercent 150 is more than 100", "want 1..100"},
		{"MPS with 64 clients", gpuPool + "    instanceType: g4dn.xlarge\n    timeSlicingReplicas: 64\nx-gpuslice:\n  mode: mps\n" + service,
			Error, "x-internal-integrations.multiTenantGpu.timeSlicingReplicas", 4, 26,
			"MPS takes at most 48 clients per device", "timeSlicingReplicas 64 implies 64 MPS clients per device; want at most 48"},
		{"MPS clients implied by memory", gpuPool + "    instanceType: g4dn.xlarge\nx-gpuslice:\n  mode: mps\n  memory: 256MiB\n" + service,
			Error, "x-gpuslice.memory", 6, 11,
			"MPS takes at most 48 clients per device", "16384 MiB of T4 / memory 256 MiB implies 64 MPS clients per device"},
		{"reservation above limit", gpuPool + "    instanceType: g4dn.xlarge\n" + service + "    deploy:\n      resources:\n        limits: {cpus: '0.5', memory: 100M}\n        reservations: {cpus: '1', memory: 50M}\n",
			Error, "services.a.deploy.resources.reservations.cpus", 10, 30,
			"reservations.cpus 1 is more than limits.cpus 0.5; Kubernetes refuses a request above its limit", "at most the limit, 0.5"},
		{"memory times replicas", gpuPool + "    instanceType: g4dn.xlarge\n    timeSlicingReplicas: 4\n" + service + "    x-gpuslice:\n      memory: 6GiB\n",
			Warning, "services.a.x-gpuslice.memory", 9, 15,
			"timeSlicingReplicas 4 × memory 6144 MiB = 24576 MiB is more than the 16384 MiB of one T4",
			"only 2 of the 4 replicas fit: lower memory to ≤ 4096 MiB or timeSlicingReplicas to 2"},
		{"memory over the device", gpuPool + "    instanceType: p4d.24xlarge\n    migProfile: 1g.5gb\n" + service + "    x-gpuslice: {memory: 8GiB}\n",
			Error, "services.a.x-gpuslice.memory", 8, 26,
			"memory 8192 MiB is more than the 4864 MiB of one 1g.5gb instance of A100-40GB", "want at most 4864 MiB"},
		{"bad size", "x-gpuslice:\n  memory: 10 gigs\n" + service,
			Error, "x-gpuslice.memory", 2, 11, `memory "10 gigs" is not a size`, "10GiB, 512MiB, 8G"},
		{"minReplicas over maxReplicas", service + "    x-omnistrate-capabilities:\n      autoscaling:\n        maxReplicas: 3\n        minReplicas: 5\n",
			Error, "services.a.x-omnistrate-capabilities.autoscaling.minReplicas", 7, 22,
			"minReplicas 5 is more than maxReplicas 3", "lower minReplicas to 3 or raise maxReplicas to 5"},
		{"negative minutes", service + "    x-omnistrate-capabilities:\n      autoscaling: {maxReplicas: 2, idleMinutesBeforeScalingDown: -1}\n",
			Error, "services.a.x-omnistrate-capabilities.autoscaling.idleMinutesBeforeScalingDown", 5, 67,
			"idleMinutesBeforeScalingDown -1 is negative", "want 0..100000"},
		{"negative replicas", "x-gpuslice: {replicas: -3}\n" + service,
			Error, "x-gpuslice.replicas", 1, 24, "replicas -3 is negative", "want 0..100000"},
		{"hardware isolation on time-slicing", gpuPool + "    instanceType: g4dn.xlarge\n    timeSlicingReplicas: 2\n" + service + "    x-gpuslice: {isolation: hardware, memory: 4GiB}\n",
			Error, "services.a.x-gpuslice.isolation", 8, 29,
			"isolation hardware with mode timeslice (pool default shares each device 2 ways): time-sliced and MPS devices are shared without hardware isolation",
			"use migProfile without timeSlicingReplicas, mode exclusive, or isolation tenant"},
		{"unknown x-gpuslice key", "x-gpuslice:\n  memroy: 4GiB\n" + service,
			Error, "x-gpuslice.memroy", 2, 3, `unknown field "memroy"`, `did you mean "memory"?`},
		{"unknown mode", "x-gpuslice: {mode: timeslicing}\n" + service,
			Error, "x-gpuslice.mode", 1, 20, `unknown mode "timeslicing"`, `did you mean "timeslice"? valid: auto, exclusive, timeslice, mps, mig`},
		{"compute 0", "x-gpuslice: {compute: 0}\n" + service,
			Error, "x-gpuslice.compute", 1, 23, "compute 0 is less than 1", "want 1..100"},
		{"mode mig without MIG", gpuPool + "    instanceType: g4dn.xlarge\n    timeSlicingReplicas: 2\n" + service + "    x-gpuslice: {mode: mig}\n",
			Error, "services.a.x-gpuslice.mode", 8, 24, "mode mig, but pool default has no MIG instances", "MIG-capable instance types: p4d.24xlarge"},
		{"mode mps on a time-sliced pool", gpuPool + "    instanceType: g4dn.xlarge\n    timeSlicingReplicas: 2\n" + service + "    x-gpuslice: {mode: mps}\n",
			Error, "services.a.x-gpuslice.mode", 8, 24, "mode mps, but pool default runs timeslice devices", "set mode: mps in the x-gpuslice beside the multiTenantGpu"},
		{"compose-go rejects a key", "services:\n  a:\n    image: x\n    imagee: y\n",
			Error, "services.a.imagee", 4, 5, `compose: unknown field "imagee" in services.a`, `did you mean "image"?`},
		{"compose-go rejects a value", "services:\n  a:\n    image: x\n    deploy:\n      replicas: lots\n",
			Error, "services.a.deploy.replicas", 5, 17, `compose: error while interpolating services.a.deploy.replicas: failed to cast to expected type: strconv.Atoi: parsing "lots": invalid syntax`, "compose-go"},
		{"duplicate key", service + "services:\n  b:\n    image: y\n",
			Error, "", 4, 1, `compose: YAML: mapping key "services" already defined at line 1`, "compose-go"},
		{"multiTenantGpu not a mapping", gpuPool[:len(gpuPool)-1] + " g4dn.xlarge\n" + service,
			Error, "x-internal-integrations.multiTenantGpu", 2, 19, `want a mapping (key: value), found "g4dn.xlarge"`, "instanceType: g4dn.xlarge"},
		{"every GPU of a node", "services:\n  a:\n    image: x\n    gpus: all\n",
			Warning, "services.a", 4, 11, "a GPU device request without a count takes every GPU of a node: read as 1 whole GPU(s) per replica", "count: 1"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, ds := ReadCompose("compose.yaml", []byte(tc.src))
			for _, d := range ds {
				if d.Path == tc.path && d.Severity == tc.sev {
					if d.Message != tc.msg || !strings.Contains(d.Hint, tc.hint) || d.Pos.Line != tc.line || d.Pos.Column != tc.col {
						t.Errorf("got  %s\nwant %d:%d %s (%s)", d, tc.line, tc.col, tc.msg, tc.hint)
					}
					return
				}
			}
			t.Errorf("no %s at %s in:\n%v", tc.sev, tc.path, ds)
		})
	}
}

// TestComposeAllAtOnce: every problem of one broken file is reported in one
// read, in file order (testdata/compose/broken.golden; -update).
func TestComposeAllAtOnce(t *testing.T) {
	_, ds := readComposeFile(t, "broken.yaml")
	ds.Sort()
	var b strings.Builder
	for _, d := range ds {
		b.WriteString(d.String())
		b.WriteByte('\n')
	}
	testkit.Golden(t, filepath.Join("testdata", "compose", "broken.golden"), []byte(b.String()))
	if n := len(ds.Errors()); n < 10 {
		t.Errorf("want at least 10 errors at once, got %d", n)
	}
}
