package spec

import (
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/gpuslice/gpuslice/internal/alloc"
)

// draWant is one expected diagnostic: severity, "line:column", path and a
// part of the message.
type draWant struct {
	sev  Severity
	at   string
	path string
	msg  string
}

func draW(at, path, msg string) draWant { return draWant{Warning, at, path, msg} }
func draE(at, path, msg string) draWant { return draWant{Error, at, path, msg} }

// draCheck compares diagnostics with want, in file order, exactly.
func draCheck(t *testing.T, got Diagnostics, want []draWant) {
	t.Helper()
	ok := len(got) == len(want)
	for i := 0; ok && i < len(want); i++ {
		g, w := got[i], want[i]
		at := fmt.Sprintf("%d:%d", g.Pos.Line, g.Pos.Column)
		ok = g.Severity == w.sev && at == w.at && g.Path == w.path && strings.Contains(g.Message+" ("+g.Hint+")", w.msg)
	}
	if !ok {
		var b strings.Builder
		for _, g := range got {
			fmt.Fprintf(&b, "\n  %s", g)
		}
		t.Errorf("diagnostics:%s\nwant %d: %+v", b.String(), len(want), want)
	}
}

func draReadFile(t *testing.T, name string) (*Spec, Diagnostics) {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("testdata", "dra", name))
	if err != nil {
		t.Fatal(err)
	}
	return ReadDRA(name, data)
}

// draSame compares the mapped parts of workloads.
func draSame(t *testing.T, got, want []Workload) {
	t.Helper()
	strip := func(ws []Workload) []Workload {
		out := make([]Workload, len(ws))
		for i, w := range ws {
			out[i] = Workload{Name: w.Name, Tenant: w.Tenant, Replicas: w.Replicas, Requests: w.Requests, Constraints: w.Constraints}
		}
		return out
	}
	if g, w := strip(got), strip(want); !reflect.DeepEqual(g, w) {
		t.Errorf("workloads:\n got %+v\nwant %+v", g, w)
	}
}

const draTypeGPU = "device.attributes['gpu.nvidia.com'].type == 'gpu'"

func draProfileSel(p string) string {
	return "device.attributes['gpu.nvidia.com'].profile == '" + p + "'"
}

func draWhole(name string) alloc.Request {
	return alloc.Request{Name: name, Count: 1, Mode: alloc.Exclusive}
}

func draMIGReq(name, profile string, mode alloc.Mode) alloc.Request {
	return alloc.Request{Name: name, Count: 1, Mode: mode, Profile: profile, Selector: draProfileSel(profile)}
}

func draOne(name string, reqs []alloc.Request, cons ...alloc.Constraint) []Workload {
	return []Workload{{Name: name, Tenant: "default", Replicas: 1, Requests: reqs, Constraints: cons}}
}

var draNode = alloc.Constraint{Match: "node"}

func TestDRASeedFiles(t *testing.T) {
	sharedGPU := draOne("shared-gpu", []alloc.Request{draWhole("gpu")})
	sharedMIG := draOne("shared-mig", []alloc.Request{draMIGReq("mig-1g-5gb-0", "1g.5gb", alloc.MIG)})
	noClass := []alloc.Request{{Name: "ts-gpu", Count: 1}}
	// An unknown class leaves the mode open, but naming a profile without
	// memory asks for the instance (issue #11 item 7), not a 1/16 share.
	migu := draOne("mig-devices", []alloc.Request{draMIGReq("mig-1g-5gb", "1g.5gb", alloc.MIG), draMIGReq("mig-3g-20gb", "3g.20gb", alloc.MIG)}, draNode)
	miguErrs := []draWant{
		draE("9:26", "spec.devices.requests[0].deviceClassName", `unknown device class "migu.nvidia.com" (did you mean "mig.nvidia.com"?`),
		draE("14:26", "spec.devices.requests[1].deviceClassName", `unknown device class "migu.nvidia.com"`),
	}
	cases := []struct {
		file  string
		want  []Workload
		diags []draWant
	}{
		{"unique-gpu.yaml", draOne("unique-gpu", []alloc.Request{draWhole("gpu")}), []draWant{
			draW("11:1", "", "`...` at line 11 ends a document"),
			draW("13:7", "kind", "a Pod is not a DRA object"),
			draW("26:1", "resourceClaims", "`resourceClaims` at line 26 column 1 is a sibling of `spec`; Kubernetes reads `spec.resourceClaims` — not counted (indent it under spec)"),
		}},
		{"shared-gpu.yaml", sharedGPU, nil},
		{"shared-gpu-timeslicing.yaml", sharedGPU, []draWant{
			draW("10:3", "spec.config", "`config` at line 10 column 3 is a sibling of `devices`; DRA reads `spec.devices.config` — not applied (indent it under devices)"),
			draW("14:7", "spec.config[0].parameters", "`parameters` at line 14 column 7 is a sibling of `opaque`; NVIDIA's config must sit under `opaque.parameters` — not applied (indent it under opaque)"),
			draE("20:23", "spec.config[0].parameters.sharing.timeSlicingConfig.interval", `"<Short | Medium | Long>" is a placeholder from the slides, not a value (valid: Default, Short, Medium, Long)`),
		}},
		{"shared-gpu-mps.yaml", sharedGPU, []draWant{
			draW("10:3", "spec.config", "is a sibling of `devices`"),
			draW("14:7", "spec.config[0].parameters", "is a sibling of `opaque`"),
			draE("20:44", "spec.config[0].parameters.sharing.mpsConfig.defaultActiveThreadPercentage", `"<fraction>" is a placeholder`),
			draE("21:45", "spec.config[0].parameters.sharing.mpsConfig.defaultPinnedDeviceMemoryLimit", `"<limit>" is a placeholder`),
		}},
		{"shared-mig.yaml", sharedMIG, nil},
		{"shared-mig-timeslicing.yaml", sharedMIG, []draWant{
			draW("13:9", "spec.devices.requests[0].config", "`config` at line 13 column 9 is inside request \"mig-1g-5gb-0\"; DRA reads `spec.devices.config` — not applied (move it into spec.devices.config)"),
			draE("19:23", "spec.devices.requests[0].config[0].opaque.parameters.kind", `GpuConfig cannot apply to request "mig-1g-5gb-0" of MIG devices (mig.nvidia.com): NVIDIA's driver fails the claim (use kind MigDeviceConfig`),
			draE("23:31", "spec.devices.requests[0].config[0].opaque.parameters.sharing.timeSlicingConfig.interval", "placeholder"),
		}},
		{"shared-mig-mps.yaml", sharedMIG, []draWant{
			draW("13:9", "spec.devices.requests[0].config", "not applied"),
			draE("19:23", "spec.devices.requests[0].config[0].opaque.parameters.kind", "GpuConfig cannot apply"),
			draE("23:52", "spec.devices.requests[0].config[0].opaque.parameters.sharing.mpsConfig.defaultActiveThreadPercentage", `"<fraction>"`),
			draE("24:53", "spec.devices.requests[0].config[0].opaque.parameters.sharing.mpsConfig.defaultPinnedDeviceMemoryLimit", `"<limit>"`),
		}},
		{"inference-timeslicing.yaml", draOne("shared-gpu", []alloc.Request{draWhole("ts-gpu")}), []draWant{
			draW("10:9", "spec.devices.requests[0].config", "inside request \"ts-gpu\""),
			draW("12:9", "spec.devices.requests[0].opaque", "`opaque` at line 12 column 9 is a sibling of `config`; DRA reads `opaque` inside an entry of `spec.devices.config` — not applied"),
			draW("14:9", "spec.devices.requests[0].parameters", "is a sibling of `opaque`"),
			draW("17:9", "spec.devices.requests[0].sharing", "`sharing` at line 17 column 9 is a sibling of `parameters`"),
			draE("18:21", "spec.devices.requests[0].sharing.strategy", `unknown sharing strategy "Time-Slicing" (did you mean "TimeSlicing"? valid: TimeSlicing, MPS)`),
		}},
		{"inference-mps.yaml", draOne("shared-gpu", []alloc.Request{draWhole("mps-gpu")}), []draWant{
			draW("10:9", "spec.devices.requests[0].config", "not applied"),
			draW("12:9", "spec.devices.requests[0].opaque", "is a sibling of `config`"),
		}},
		{"inference-mps-limits.yaml", draOne("shared-gpu", []alloc.Request{draWhole("mps-gpu")}), []draWant{
			draW("10:9", "spec.devices.requests[0].config", "not applied"),
			draW("12:9", "spec.devices.requests[0].opaque", "not applied"),
			draW("14:9", "spec.devices.requests[0].parameters", "not applied"),
			draW("17:9", "spec.devices.requests[0].sharing", "not applied"),
		}},
		{"batch-timeslicing.yaml", draOne("shared-gpu", noClass), []draWant{
			draE("8:9", "spec.devices.requests[0].deviceClassName", `request "ts-gpu" has no deviceClassName`),
			draW("9:3", "spec.deviceClassName", "`deviceClassName` at line 9 column 3 is inside `spec`; DRA reads `deviceClassName` in a request (`spec.devices.requests[]`) — not applied (indent it under the request at line 8)"),
			draW("10:3", "spec.config", "is a sibling of `devices`"),
			draW("12:3", "spec.opaque", "is a sibling of `config`"),
			draE("18:19", "spec.opaque.parameters.sharing.strategy", `"Time-Slicing"`),
		}},
		{"batch-mps.yaml", draOne("shared-gpu", noClass), []draWant{
			draE("8:9", "spec.devices.requests[0].deviceClassName", "has no deviceClassName"),
			draW("9:5", "spec.devices.deviceClassName", "is inside `spec.devices`"),
			draE("11:9", "spec.devices.config[0].opaque", "config entry has no opaque (indent the `opaque` at line 12 into this entry)"),
			draE("11:20", "spec.devices.config[0].requests[0]", `names request "mps-gpu", which this claim does not have (did you mean "ts-gpu"?`),
			draW("12:5", "spec.devices.opaque", "is a sibling of `config`"),
		}},
		{"intensive-timeslicing.yaml", draOne("shared-gpu", []alloc.Request{draWhole("ts-gpu")}), []draWant{
			draW("10:9", "spec.devices.requests[0].config", "not applied"),
			draW("14:13", "spec.devices.requests[0].config[0].parameters", "is a sibling of `opaque`"),
			draE("18:27", "spec.devices.requests[0].config[0].parameters.sharing.strategy", `"Time-Slicing"`),
		}},
		{"intensive-mps.yaml", draOne("shared-gpu", []alloc.Request{draWhole("mps-gpu")}), []draWant{
			draW("10:9", "spec.devices.requests[0].config", "not applied"),
			draW("14:13", "spec.devices.requests[0].config[0].parameters", "is a sibling of `opaque`"),
		}},
		{"intensive-mps-limits.yaml", draOne("shared-gpu", []alloc.Request{draWhole("ts-gpu")}), []draWant{
			draW("10:9", "spec.devices.requests[0].config", "not applied"),
			draE("11:24", "spec.devices.requests[0].config[0].requests[0]", `names request "mps-gpu"`),
			draW("14:13", "spec.devices.requests[0].config[0].parameters", "is a sibling of `opaque`"),
			draE("21:51", "spec.devices.requests[0].config[0].parameters.sharing.mpsConfig.defaultPinnedDeviceMemoryLimit", `"5G1" is not a Kubernetes quantity: unknown suffix "G1"`),
		}},
		{"mig-devices-template.yaml", draOne("mig-devices", []alloc.Request{
			draMIGReq("mig-1g-5gb-0", "1g.5gb", alloc.MIG), draMIGReq("mig-1g-5gb-1", "1g.5gb", alloc.MIG),
			draMIGReq("mig-2g-10gb", "2g.10gb", alloc.MIG), draMIGReq("mig-3g-20gb", "3g.20gb", alloc.MIG),
		}, draNode), []draWant{
			draW("29:1", "constraints", "`constraints` at line 29 column 1 is at the top level of the ResourceClaimTemplate; DRA reads `spec.spec.devices.constraints` — not applied"),
		}},
		{"mig-devices.yaml", migu, append(miguErrs, draW("19:3", "spec.constraints", "`constraints` at line 19 column 3 is a sibling of `devices`"))},
		{"mig-devices-noconstraints.yaml", migu, miguErrs},
	}
	for _, c := range cases {
		t.Run(c.file, func(t *testing.T) {
			s, ds := draReadFile(t, c.file)
			draSame(t, s.Workloads, c.want)
			draCheck(t, ds, c.diags)
			if len(s.Sources) != 1 || s.Sources[0] != c.file {
				t.Errorf("sources %v", s.Sources)
			}
		})
	}
	// Every seed file is in the table.
	files, _ := filepath.Glob(filepath.Join("testdata", "dra", "*.yaml"))
	n := 0
	for _, f := range files {
		if !strings.HasPrefix(filepath.Base(f), "clean-") {
			n++
		}
	}
	if n != len(cases) {
		t.Errorf("%d seed files, %d in the table", n, len(cases))
	}
}

func TestDRACleanFiles(t *testing.T) {
	ts := []Workload{{Name: "shared-gpu", Tenant: "team-a", Replicas: 1,
		Requests: []alloc.Request{{Name: "ts-gpu", Count: 1, Mode: alloc.TimeSlice, Selector: draTypeGPU}}}}
	mps := []Workload{{Name: "shared-gpu", Tenant: "team-a", Replicas: 1,
		Requests: []alloc.Request{{Name: "mps-gpu", Count: 1, Mode: alloc.MPS, MemoryMiB: 10240, ComputePercent: 50, Selector: draTypeGPU}}}}
	mig := draOne("mig-devices", []alloc.Request{
		draMIGReq("mig-1g-5gb-0", "1g.5gb", alloc.MIG), draMIGReq("mig-1g-5gb-1", "1g.5gb", alloc.MIG),
		draMIGReq("mig-2g-10gb", "2g.10gb", alloc.MIG), draMIGReq("mig-3g-20gb", "3g.20gb", alloc.MIG),
	}, alloc.Constraint{Match: "gpu"})
	for _, v := range []string{"v1beta1", "v1beta2", "v1"} {
		line := "22:27"
		if v == "v1beta1" {
			line = "21:27"
		}
		for _, c := range []struct {
			file  string
			want  []Workload
			diags []draWant
		}{
			{"clean-" + v + "-timeslicing.yaml", ts, []draWant{draW(line, "spec.devices.config[0].opaque.parameters.sharing.timeSlicingConfig.interval", "time-slice interval Long is a device setting")}},
			{"clean-" + v + "-mps-limits.yaml", mps, nil},
			{"clean-" + v + "-mig-devices.yaml", mig, nil},
		} {
			t.Run(c.file, func(t *testing.T) {
				s, ds := draReadFile(t, c.file)
				draSame(t, s.Workloads, c.want)
				draCheck(t, ds, c.diags)
			})
		}
	}
	t.Run("clean-v1-extras.yaml", func(t *testing.T) {
		s, ds := draReadFile(t, "clean-v1-extras.yaml")
		draSame(t, s.Workloads, []Workload{
			{Name: "notebook", Tenant: "team-b", Replicas: 2, Requests: []alloc.Request{{Name: "gpu", Count: 1, Mode: alloc.TimeSlice,
				Selector: "(device.driver == 'gpu.nvidia.com' && device.attributes['gpu.nvidia.com'].type == 'gpu') && (device.attributes['gpu.nvidia.com'].productName.startsWith('NVIDIA A100'))"}}},
			{Name: "mig-mps", Tenant: "team-b", Replicas: 1, Requests: []alloc.Request{{Name: "mig", Count: 1, Mode: alloc.MPS, Profile: "3g.20gb", MemoryMiB: 4096, Selector: draProfileSel("3g.20gb")}}},
		})
		draCheck(t, ds, []draWant{
			draW("31:13", "spec.spec.devices.requests[0].firstAvailable", `firstAvailable lists 2 alternatives; gpuslice plans the first, "a100", and not "any"`),
			draW("61:48", "spec.devices.config[0].opaque.parameters.sharing.mpsConfig.defaultActiveThreadPercentage", "defaultActiveThreadPercentage 25 is a share of the MIG device, not of a whole GPU: not carried"),
			draW("65:7", "kind", "a Pod is not a DRA object"),
			draW("81:7", "kind", "a Pod is not a DRA object"),
		})
	})
}
