package catalog

import (
	"errors"
	"slices"
	"strings"
	"testing"
)

func TestEmbeddedCatalogLoads(t *testing.T) {
	if _, err := Load(embedded); err != nil {
		t.Fatalf("embedded catalog is invalid:\n%v", err)
	}
	c := Default()
	if c != Default() {
		t.Fatal("Default() parsed twice")
	}
	var ids []string
	for _, g := range c.GPUs() {
		ids = append(ids, g.ID)
	}
	for _, want := range []string{"T4", "A10G", "L4", "L40S", "V100-16GB", "V100-32GB", "A100-40GB", "A100-80GB", "A30",
		"H100-80GB-SXM", "H100-80GB-PCIe", "H100-NVL-94GB", "H200-141GB", "GH200-96GB", "GH200-144GB", "B200-180GB",
		"RTX-PRO-6000-Blackwell", "GB200-186GB", "B300-288GB", "GB300"} {
		if !slices.Contains(ids, want) {
			t.Errorf("GPU %s missing from the catalog", want)
		}
	}
	if ids[0] != "T4" {
		t.Errorf("GPUs() not in file order: starts with %s", ids[0])
	}
}

func TestGPULookup(t *testing.T) {
	c := Default()
	for _, tc := range []struct{ name, want string }{
		{"A100-40GB", "A100-40GB"},
		{"a100-40gb", "A100-40GB"},
		{"  A100-40GB ", "A100-40GB"},
		{"NVIDIA A100-SXM4-40GB", "A100-40GB"},
		{"nvidia a100-sxm4-40gb", "A100-40GB"},
		{"NVIDIA A100-PCIE-40GB", "A100-40GB"},
		{"NVIDIA-A100-SXM4-40GB", "A100-40GB"},
		{"A100-PCIE-40GB", "A100-40GB"},
		{"A100-SXM4-40GB", "A100-40GB"},
		{"NVIDIA A100 80GB PCIe", "A100-80GB"},
		{"NVIDIA H100 80GB HBM3", "H100-80GB-SXM"},
		{"NVIDIA-H100-80GB-HBM3", "H100-80GB-SXM"},
		{"NVIDIA H100 PCIe", "H100-80GB-PCIe"},
		{"NVIDIA H100 NVL", "H100-NVL-94GB"},
		{"NVIDIA H200 NVL", "H200-141GB"},
		{"NVIDIA GH200 480GB", "GH200-96GB"},
		{"NVIDIA GH200 144G HBM3e", "GH200-144GB"},
		{"Tesla T4", "T4"},
		{"Tesla-T4", "T4"},
		{"Tesla V100-SXM2-32GB", "V100-32GB"},
		{"NVIDIA RTX PRO 6000 Blackwell Server Edition", "RTX-PRO-6000-Blackwell"},
		{"NVIDIA-A100-SXM4-40GB-MIG-1g.5gb", "A100-40GB"},
		{"NVIDIA-A100-SXM4-40GB-SHARED", "A100-40GB"},
		{"gb300", "GB300"},
	} {
		g, err := c.GPU(tc.name)
		if err != nil {
			t.Errorf("GPU(%q): %v", tc.name, err)
			continue
		}
		if g.ID != tc.want {
			t.Errorf("GPU(%q) = %s, want %s", tc.name, g.ID, tc.want)
		}
	}
}

func TestGPUNotFound(t *testing.T) {
	c := Default()
	for _, tc := range []struct{ name, suggestion string }{
		{"a100-40g", "A100-40GB"},
		{"A100-40G", "A100-40GB"},
		{"H100-80GB-SXM5", "H100-80GB-SXM"},
		{"NVIDIA A100-SXM4-40G", "NVIDIA A100-SXM4-40GB"},
		{"RTX-PRO-6000", "RTX-PRO-6000-Blackwell"},
		{"MI300X", ""},
		{"", ""},
	} {
		_, err := c.GPU(tc.name)
		var nf *NotFoundError
		if !errors.As(err, &nf) || !IsNotFound(err) {
			t.Errorf("GPU(%q) error = %v, want a NotFoundError", tc.name, err)
			continue
		}
		if nf.Suggestion != tc.suggestion {
			t.Errorf("GPU(%q) suggestion = %q, want %q", tc.name, nf.Suggestion, tc.suggestion)
		}
		if !slices.Contains(nf.Valid, "A100-40GB") || nf.Kind != "GPU model" {
			t.Errorf("GPU(%q) error lists %v (kind %q)", tc.name, nf.Valid, nf.Kind)
		}
	}
	_, err := c.GPU("A100-40G")
	want := `unknown GPU model "A100-40G"; did you mean "A100-40GB"? valid: A10G, A30, A100-40GB, A100-80GB, B200-180GB,`
	if err == nil || !strings.HasPrefix(err.Error(), want) {
		t.Errorf("error = %v, want prefix %q", err, want)
	}
}

func TestProfileLookup(t *testing.T) {
	c := Default()
	a100, err := c.GPU("A100-40GB")
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"1g.5gb", "1G.5GB", "3g.20gb", "1g.5gb+me"} {
		p, err := a100.Profile(name)
		if err != nil || !strings.EqualFold(p.Name, name) {
			t.Errorf("Profile(%q) = %v, %v", name, p, err)
		}
	}
	_, err = a100.Profile("1g.5g")
	var nf *NotFoundError
	if !errors.As(err, &nf) || nf.Suggestion != "1g.5gb" {
		t.Errorf("Profile(1g.5g) error = %v, want suggestion 1g.5gb", err)
	}

	h100, err := c.GPU("NVIDIA H100 80GB HBM3")
	if err != nil {
		t.Fatal(err)
	}
	_, err = h100.Profile("1g.5gb")
	if !errors.As(err, &nf) {
		t.Fatalf("H100 Profile(1g.5gb) error = %v, want a NotFoundError", err)
	}
	if nf.Kind != "MIG profile of H100-80GB-SXM" {
		t.Errorf("kind = %q", nf.Kind)
	}
	for _, v := range []string{"1g.10gb", "1g.20gb", "2g.20gb", "3g.40gb", "7g.80gb"} {
		if !slices.Contains(nf.Valid, v) || !strings.Contains(err.Error(), v) {
			t.Errorf("error %q does not list %s", err, v)
		}
	}
	if got := h100.ProfileNames(); !slices.Equal(got, nf.Valid) {
		t.Errorf("ProfileNames() = %v, error lists %v", got, nf.Valid)
	}

	t4, _ := c.GPU("T4")
	if _, err := t4.Profile("1g.5gb"); !errors.Is(err, ErrNoMIG) {
		t.Errorf("T4 Profile error = %v, want ErrNoMIG", err)
	}
	if t4.ProfileNames() != nil {
		t.Errorf("T4 has profile names %v", t4.ProfileNames())
	}
}

func TestInstanceTypes(t *testing.T) {
	c := Default()
	p4d, err := c.InstanceType("P4D.24xlarge")
	if err != nil {
		t.Fatal(err)
	}
	if p4d.GPU != "A100-40GB" || p4d.GPUCount != 8 || p4d.Provider != "aws" {
		t.Errorf("p4d.24xlarge = %+v", p4d)
	}
	if p4d.Price == nil || p4d.Price.USDPerHour != 21.957642 || p4d.Price.Date != "2026-01-21" ||
		p4d.Price.Region != "us-east-1" || p4d.Price.Confidence != Secondary {
		t.Errorf("p4d.24xlarge price = %+v", p4d.Price)
	}
	a2, err := c.InstanceType("a2-highgpu-1g")
	if err != nil || a2.Price != nil || a2.Provider != "gcp" {
		t.Errorf("a2-highgpu-1g = %+v, %v; want a GCP type without price", a2, err)
	}
	nc, err := c.InstanceType("Standard_NC24ads_A100_v4")
	if err != nil || nc.GPU != "A100-80GB" {
		t.Errorf("Standard_NC24ads_A100_v4 = %+v, %v", nc, err)
	}
	if _, err := c.InstanceType("p4d.24xlarg"); !IsNotFound(err) || !strings.Contains(err.Error(), `did you mean "p4d.24xlarge"`) {
		t.Errorf("InstanceType(p4d.24xlarg) error = %v", err)
	}

	all, err := c.InstanceTypes("")
	if err != nil {
		t.Fatal(err)
	}
	total := 0
	for _, prov := range []string{"aws", "AZURE", "gcp"} {
		its, err := c.InstanceTypes(prov)
		if err != nil || len(its) == 0 {
			t.Errorf("InstanceTypes(%q) = %d types, %v", prov, len(its), err)
		}
		for _, it := range its {
			if it.Provider != strings.ToLower(prov) {
				t.Errorf("InstanceTypes(%q) returned %s of %s", prov, it.Name, it.Provider)
			}
			if it.Provider == "gcp" && it.Price != nil {
				t.Errorf("GCP type %s has a price; GCP totals are unknown", it.Name)
			}
		}
		total += len(its)
	}
	if total != len(all) {
		t.Errorf("providers hold %d types, all = %d", total, len(all))
	}
	_, err = c.InstanceTypes("oracle")
	if !IsNotFound(err) || !strings.Contains(err.Error(), "aws, azure, gcp") {
		t.Errorf("InstanceTypes(oracle) error = %v", err)
	}

	mig := c.InstanceTypesWithGPU(func(g *GPU) bool { return g.MIG != nil })
	var names []string
	for _, it := range mig {
		names = append(names, it.Name)
	}
	if !slices.Contains(names, "p4d.24xlarge") || !slices.Contains(names, "Standard_NC40ads_H100_v5") ||
		slices.Contains(names, "g4dn.xlarge") || slices.Contains(names, "g6e.xlarge") {
		t.Errorf("MIG-capable instance types = %v", names)
	}
}

func TestAccessorsReturnCopies(t *testing.T) {
	c := Default()
	g, _ := c.GPU("A100-40GB")
	g.MIG.Profiles[0].Placement.Starts[0] = 99
	g.ProductNames[0] = "x"
	c.GPUs()[6].MIG.Profiles[0].Name = "y"
	p4d, _ := c.InstanceType("p4d.24xlarge")
	p4d.Price.USDPerHour = 1
	c.Sources()["S_MIGGUIDE"] = "z"

	g2, _ := c.GPU("A100-40GB")
	if g2.MIG.Profiles[0].Placement.Starts[0] != 0 || g2.ProductNames[0] != "NVIDIA A100-SXM4-40GB" || g2.MIG.Profiles[0].Name != "1g.5gb" {
		t.Error("mutating a returned GPU changed the catalog")
	}
	if p, _ := c.InstanceType("p4d.24xlarge"); p.Price.USDPerHour != 21.957642 {
		t.Error("mutating a returned instance type changed the catalog")
	}
	if c.Sources()["S_MIGGUIDE"] == "z" {
		t.Error("mutating Sources() changed the catalog")
	}
}

func TestSuggest(t *testing.T) {
	cands := []string{"1g.5gb", "1g.5gb+me", "1g.10gb", "2g.10gb", "3g.20gb", "4g.20gb", "7g.40gb"}
	for _, tc := range []struct{ in, want string }{
		{"1g.5g", "1g.5gb"},
		{"1G.5GB", "1g.5gb"},
		{"3g.20", "3g.20gb"},
		{"3g.21gb", "3g.20gb"},
		{"7g", ""}, // too short for prefix matching, too far for edits
		{"7g.", "7g.40gb"},
		{"1g", ""},
		{"2g.1", "2g.10gb"},
		{"banana", ""},
		{"", ""},
		{strings.Repeat("x", 500), ""},
	} {
		if got := Suggest(tc.in, cands); got != tc.want {
			t.Errorf("Suggest(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
	if got := Suggest("1g.5gb", []string{"1g.10gb", "1g.20gb", "2g.20gb"}); got != "" {
		t.Errorf("ambiguous Suggest = %q, want none", got)
	}
}
