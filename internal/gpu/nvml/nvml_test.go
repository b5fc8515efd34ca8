package nvml

import (
	"testing"

	"github.com/gpuslice/gpuslice/internal/catalog"
	"github.com/gpuslice/gpuslice/internal/gpu/fake"
)

func TestResolveModel(t *testing.T) {
	cat := catalog.Default()
	for _, tc := range []struct {
		name string
		pci  uint32
		want string
	}{
		{"NVIDIA A100-SXM4-40GB", 0, "A100-40GB"},
		{"NVIDIA A100-PCIE-40GB", 0x20F110DE, "A100-40GB"},
		{"NVIDIA A100-SXM4-80GB", 0, "A100-80GB"},
		{"NVIDIA H100 80GB HBM3", 0x233010DE, "H100-80GB-SXM"},
		{"NVIDIA H100 PCIe", 0, "H100-80GB-PCIe"},
		{"NVIDIA L4", 0, "L4"},
		{"Tesla T4", 0, "T4"},
		// go-nvml's mock name is no product name; its PCI id is A100's.
		{"Mock NVIDIA A100-SXM4-40GB", 0x20B010DE, "A100-40GB"},
		{"Mock NVIDIA A100-SXM4-40GB", 0, ""},
		// A PCI id from another vendor is ignored.
		{"Some GPU", 0x20B01002, ""},
		{"NVIDIA Future GPU", 0xFFFF10DE, ""},
	} {
		got := ""
		if m := resolveModel(cat, tc.name, tc.pci); m != nil {
			got = m.ID
		}
		if got != tc.want {
			t.Errorf("resolveModel(%q, %#x) = %q, want %q", tc.name, tc.pci, got, tc.want)
		}
	}
}

// TestProfileNames maps NVML profile constants and GI profile ids to the
// catalog's names for A100-40GB and H100-80GB-SXM, and back.
func TestProfileNames(t *testing.T) {
	type row struct {
		name            string
		nvmlConst, giID int
	}
	for model, rows := range map[string][]row{
		"A100-40GB": {
			{"1g.5gb", 0, 19}, {"1g.5gb+me", 7, 20}, {"1g.10gb", 9, 15}, {"2g.10gb", 1, 14},
			{"3g.20gb", 2, 9}, {"4g.20gb", 3, 5}, {"7g.40gb", 4, 0},
		},
		"H100-80GB-SXM": {
			{"1g.10gb", 0, 19}, {"1g.10gb+me", 7, 20}, {"1g.20gb", 9, 15}, {"2g.20gb", 1, 14},
			{"3g.40gb", 2, 9}, {"4g.40gb", 3, 5}, {"7g.80gb", 4, 0},
		},
	} {
		m, err := catalog.Default().GPU(model)
		if err != nil {
			t.Fatal(err)
		}
		// Without NVML constants the GI profile ids alone name them.
		byID, mig := *m, *m.MIG
		byID.MIG = &mig
		byID.MIG.Profiles = append([]catalog.Profile(nil), m.MIG.Profiles...)
		for i := range byID.MIG.Profiles {
			byID.MIG.Profiles[i].NVMLProfile = -1
		}
		for _, r := range rows {
			// As on real hardware: constant and GI id agree.
			if got := profileName(m, r.nvmlConst, r.giID); got != r.name {
				t.Errorf("%s: profileName(const %d, GI %d) = %q, want %q", model, r.nvmlConst, r.giID, got, r.name)
			}
			// As on go-nvml's mock: the GI id is the constant.
			if got := profileName(m, r.nvmlConst, r.nvmlConst); got != r.name {
				t.Errorf("%s: profileName(const %d, GI %d) = %q, want %q", model, r.nvmlConst, r.nvmlConst, got, r.name)
			}
			if got := profileName(&byID, r.nvmlConst, r.giID); got != r.name {
				t.Errorf("%s without NVML constants: GI %d names %q, want %q", model, r.giID, got, r.name)
			}
			p, err := m.Profile(r.name)
			if err != nil || p.NVMLProfile != r.nvmlConst || p.GIProfileID != r.giID {
				t.Errorf("%s: profile %s = %+v, %v; want const %d GI %d", model, r.name, p, err, r.nvmlConst, r.giID)
			}
		}
		if got := profileName(m, 13, 99); got != "" {
			t.Errorf("%s: an unknown constant names %q", model, got)
		}
		if got := profileName(&byID, 13, 99); got != "" {
			t.Errorf("%s: an unknown GI id names %q", model, got)
		}
	}
	l4, _ := catalog.Default().GPU("L4")
	if got := profileName(l4, 0, 19); got != "" {
		t.Errorf("L4 names profile %q", got)
	}
	if got := profileName(nil, 0, 19); got != "" {
		t.Errorf("an unknown model names profile %q", got)
	}
	if got := unnamedProfile(42); got != "nvml-gi-profile-42" {
		t.Errorf("unnamedProfile(42) = %q", got)
	}
}

func TestFatalXIDMatchesFake(t *testing.T) {
	for xid := range 256 {
		if FatalXID(xid) != fake.FatalXID(xid) {
			t.Errorf("XID %d: fatal %v here, %v in gpu/fake", xid, FatalXID(xid), fake.FatalXID(xid))
		}
	}
	if got := xidMessage(79); got != "XID 79: GPU has fallen off the bus" {
		t.Errorf("xidMessage(79) = %q", got)
	}
	if got := xidMessage(1000); got != "XID 1000: XID error" {
		t.Errorf("xidMessage(1000) = %q", got)
	}
}
