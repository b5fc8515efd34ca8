package catalog

import (
	"bytes"
	"errors"
	"fmt"
	"strings"
	"testing"

	"gopkg.in/yaml.v3"
)

// parsed returns a fresh decoded copy of the embedded data.
func parsed(t *testing.T) *file {
	t.Helper()
	var f file
	if err := yaml.Unmarshal(embedded, &f); err != nil {
		t.Fatal(err)
	}
	return &f
}

func marshal(t *testing.T, f *file) []byte {
	t.Helper()
	out, err := yaml.Marshal(f)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func gpuByID(t *testing.T, f *file, id string) *GPU {
	t.Helper()
	for i := range f.GPUs {
		if f.GPUs[i].ID == id {
			return &f.GPUs[i]
		}
	}
	t.Fatalf("no GPU %s", id)
	return nil
}

func profileByName(t *testing.T, g *GPU, name string) *Profile {
	t.Helper()
	for i := range g.MIG.Profiles {
		if g.MIG.Profiles[i].Name == name {
			return &g.MIG.Profiles[i]
		}
	}
	t.Fatalf("no profile %s on %s", name, g.ID)
	return nil
}

func TestRoundTrip(t *testing.T) {
	if _, err := Load(marshal(t, parsed(t))); err != nil {
		t.Fatalf("re-marshalled embedded data does not load: %v", err)
	}
}

// TestPlacementMustFit moves a placement past the model's slices in the
// text of the data and expects the problem with its path and line.
func TestPlacementMustFit(t *testing.T) {
	old := "placement: {starts: [0, 2, 4, 6], size: 2}"
	i := bytes.Index(embedded, []byte(`name: "1g.10gb"`)) // A100-40GB's double-memory 1g
	j := bytes.Index(embedded[i:], []byte(old))
	if i < 0 || j < 0 {
		t.Fatal("fixture text not found")
	}
	data := bytes.Clone(embedded)
	copy(data[i+j:], "placement: {starts: [0, 2, 4, 7], size: 2}")
	line := bytes.Count(data[:i+j], []byte("\n")) + 1

	_, err := Load(data)
	want := fmt.Sprintf("line %d: gpus[6] (A100-40GB).mig.profiles[2] (1g.10gb).placement: placement start 7 + size 2 exceeds 8 memory slices", line)
	if err == nil || !strings.Contains(err.Error(), want) {
		t.Fatalf("Load error = %v\nwant it to contain %q", err, want)
	}
	var p *Problem
	if !errors.As(err, &p) || p.Line != line {
		t.Errorf("problem = %+v, want line %d", p, line)
	}
}

func TestLoadRejects(t *testing.T) {
	for _, tc := range []struct {
		name   string
		mutate func(t *testing.T, f *file)
		want   []string
	}{
		{"placement outside slices", func(t *testing.T, f *file) {
			p := profileByName(t, gpuByID(t, f, "H100-80GB-SXM"), "3g.40gb")
			p.Placement.Starts = []int{0, 5}
		}, []string{"(H100-80GB-SXM).mig.profiles[4] (3g.40gb).placement: placement start 5 + size 4 exceeds 8 memory slices"}},
		{"A30 placement outside 4 slices", func(t *testing.T, f *file) {
			p := profileByName(t, gpuByID(t, f, "A30"), "2g.12gb")
			p.Placement.Starts = []int{0, 2, 3}
		}, []string{"placement start 3 + size 2 exceeds 4 memory slices"}},
		{"unsorted starts", func(t *testing.T, f *file) {
			gpuByID(t, f, "A100-40GB").MIG.Profiles[0].Placement.Starts = []int{1, 0, 2}
		}, []string{"placement starts [1 0 2] are not sorted and unique"}},
		{"negative start", func(t *testing.T, f *file) {
			gpuByID(t, f, "A100-40GB").MIG.Profiles[0].Placement.Starts = []int{-1, 0}
		}, []string{"placement start -1 is negative"}},
		{"size differs from memory slices", func(t *testing.T, f *file) {
			profileByName(t, gpuByID(t, f, "A100-40GB"), "1g.10gb").MemorySlices = 1
		}, []string{"memorySlices 1 differs from placement size 2"}},
		{"maxCount above disjoint placements", func(t *testing.T, f *file) {
			profileByName(t, gpuByID(t, f, "A100-40GB"), "3g.20gb").MaxCount = 3
		}, []string{"maxCount 3 exceeds the 2 non-overlapping placements"}},
		{"zero maxCount", func(t *testing.T, f *file) {
			profileByName(t, gpuByID(t, f, "A100-40GB"), "7g.40gb").MaxCount = 0
		}, []string{"maxCount must be at least 1"}},
		{"+me count", func(t *testing.T, f *file) {
			profileByName(t, gpuByID(t, f, "A100-40GB"), "1g.5gb+me").MaxCount = 2
		}, []string{"a +me profile must have maxCount 1"}},
		{"+me flag", func(t *testing.T, f *file) {
			profileByName(t, gpuByID(t, f, "A100-40GB"), "1g.5gb").MediaExtensions = true
		}, []string{`mediaExtensions is true but the name lacks "+me"`}},
		{"name vs compute slices", func(t *testing.T, f *file) {
			profileByName(t, gpuByID(t, f, "A100-40GB"), "2g.10gb").ComputeSlices = 3
		}, []string{"name says 2g but computeSlices is 3"}},
		{"compute slices beyond spec", func(t *testing.T, f *file) {
			p := profileByName(t, gpuByID(t, f, "A30"), "4g.24gb")
			p.Name, p.ComputeSlices = "5g.24gb", 5
		}, []string{"computeSlices 5 must be 1..4"}},
		{"duplicate profile", func(t *testing.T, f *file) {
			g := gpuByID(t, f, "A100-40GB")
			g.MIG.Profiles[1].Name = "1G.5GB"
		}, []string{`profile name "1G.5GB" already used by profiles[0]`}},
		{"profile memory above GPU", func(t *testing.T, f *file) {
			profileByName(t, gpuByID(t, f, "A100-40GB"), "7g.40gb").MemoryMiB = 50000
		}, []string{"memoryMiB 50000 exceeds the GPU's 40960"}},
		{"wrong estimate", func(t *testing.T, f *file) {
			profileByName(t, gpuByID(t, f, "H200-141GB"), "1g.18gb").MemoryMiB = 18432
		}, []string{"memoryMiB 18432 is marked estimated but the estimate is 18048"}},
		{"duplicate GI id", func(t *testing.T, f *file) {
			profileByName(t, gpuByID(t, f, "A100-40GB"), "1g.5gb+me").GIProfileID = 19
		}, []string{"giProfileID 19 already used by 1g.5gb"}},
		{"unknown source key", func(t *testing.T, f *file) {
			gpuByID(t, f, "T4").Source = "S_DATASHEET, S_NOPE"
		}, []string{"gpus[0] (T4).source: source key S_NOPE is not in sources"}},
		{"bad confidence", func(t *testing.T, f *file) {
			gpuByID(t, f, "B200-180GB").MIG.PlacementConfidence = "probably"
		}, []string{`confidence "probably" is not one of`}},
		{"missing profile confidence", func(t *testing.T, f *file) {
			gpuByID(t, f, "A30").MIG.Profiles[0].Confidence = ""
		}, []string{"(A30).mig.profiles[0] (1g.6gb).confidence: missing confidence"}},
		{"duplicate id", func(t *testing.T, f *file) {
			f.GPUs[1].ID = "t4"
		}, []string{`id "t4" also names gpus[0] (T4)`}},
		{"product name on two GPUs", func(t *testing.T, f *file) {
			g := gpuByID(t, f, "A100-80GB")
			g.ProductNames = append(g.ProductNames, "NVIDIA A100-SXM4-40GB")
		}, []string{`product name "NVIDIA A100-SXM4-40GB" also names gpus[6] (A100-40GB)`}},
		{"node label with spaces", func(t *testing.T, f *file) {
			gpuByID(t, f, "L4").NodeLabels[0] = "NVIDIA L4 x"
		}, []string{`node label "NVIDIA L4 x" is not a valid label value`}},
		{"zero memory", func(t *testing.T, f *file) {
			gpuByID(t, f, "L4").MemoryMiB = 0
		}, []string{"(L4).memoryMiB: memoryMiB must be positive"}},
		{"instance type gpu", func(t *testing.T, f *file) {
			f.InstanceTypes[0].GPU = "T4-16GB"
		}, []string{`(g4dn.xlarge).gpu: gpu "T4-16GB" is not a GPU id in the catalog`}},
		{"instance type count and price", func(t *testing.T, f *file) {
			f.InstanceTypes[0].GPUCount = 0
			f.InstanceTypes[0].Price.USDPerHour = -1
			f.InstanceTypes[0].Price.Date = ""
			f.InstanceTypes[1].Price.Date = "Jan 2026"
			f.InstanceTypes[1].Price.Source = ""
		}, []string{"gpuCount must be positive", "usdPerHour must be positive", "price has no date",
			`date "Jan 2026" is not YYYY-MM-DD`, "(g4dn.2xlarge).price.source: missing source"}},
		{"provider", func(t *testing.T, f *file) {
			f.InstanceTypes[0].Provider = "AWS"
		}, []string{`provider "AWS" is not one of aws, azure, gcp`}},
		{"duplicate instance type", func(t *testing.T, f *file) {
			f.InstanceTypes[1].Name = f.InstanceTypes[0].Name
		}, []string{`name "g4dn.xlarge" already used by instanceTypes[0]`}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := parsed(t)
			tc.mutate(t, f)
			_, err := Load(marshal(t, f))
			if err == nil {
				t.Fatal("Load accepted broken data")
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error does not contain %q:\n%v", w, err)
				}
			}
			if !strings.HasPrefix(err.Error(), "line ") {
				t.Errorf("problem does not name its line: %v", err)
			}
		})
	}
}

func TestLoadReportsAllProblems(t *testing.T) {
	f := parsed(t)
	f.GPUs[0].MemoryMiB = -1
	f.InstanceTypes[0].VCPU = 0
	gpuByID(t, f, "A30").MIG.Profiles[0].Placement.Size = 9
	_, err := Load(marshal(t, f))
	if err == nil {
		t.Fatal("no error")
	}
	if n := strings.Count(err.Error(), "\n") + 1; n < 3 {
		t.Errorf("want at least 3 problems, got %d:\n%v", n, err)
	}
}

func TestLoadStrictDecoding(t *testing.T) {
	for _, tc := range []struct{ name, data, want string }{
		{"unknown key", "sources: {S: x}\ngpus:\n  - id: X\n    bogus: 1\n", "line 4: field bogus not found"},
		{"unknown top key", "sources: {S: x}\nextra: 1\n", "line 2: field extra not found"},
		{"wrong type", "sources: {S: x}\ngpus:\n  - id: X\n    memoryMiB: lots\n", "line 4"},
		{"empty", "", "empty document"},
		{"two documents", "sources: {S: x}\n---\nsources: {S: y}\n", "more than one YAML document"},
		{"not yaml", "{[", "catalog:"},
		{"no gpus", "sources: {S: x}\n", "no GPU models listed"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Load([]byte(tc.data))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("Load error = %v, want it to contain %q", err, tc.want)
			}
		})
	}
}
