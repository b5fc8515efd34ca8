package catalog

import (
	"strings"
)

// validateMIG checks a GPU's MIG geometry: slice counts, and for every
// profile its name, IDs, placement, memory, SMs and counts.
func (v *validator) validateMIG(p path, g *GPU) {
	m := g.MIG
	if m.MemorySlices < 1 || m.MemorySlices > maxMemorySlices {
		v.add(p.k("memorySlices"), "memorySlices must be 1..%d, got %d", maxMemorySlices, m.MemorySlices)
	}
	if m.ComputeSlices < 1 || m.ComputeSlices > maxMemorySlices {
		v.add(p.k("computeSlices"), "computeSlices must be 1..%d, got %d", maxMemorySlices, m.ComputeSlices)
	}
	if m.MaxInstances < 1 || m.MaxInstances > max(m.MemorySlices, 1) {
		v.add(p.k("maxInstances"), "maxInstances must be 1..memorySlices (%d), got %d", m.MemorySlices, m.MaxInstances)
	}
	if m.SMsInMIGMode < 0 || (g.SMs > 0 && m.SMsInMIGMode > g.SMs) {
		v.add(p.k("smsInMIGMode"), "smsInMIGMode %d must be 0..sms (%d)", m.SMsInMIGMode, g.SMs)
	}
	v.checkConfidence(p.k("profileIDConfidence"), m.ProfileIDConfidence)
	v.checkConfidence(p.k("placementConfidence"), m.PlacementConfidence)
	v.checkSource(p.k("source"), m.Source)
	if len(m.Profiles) == 0 {
		v.add(p.k("profiles"), "no profiles listed")
	}
	names := map[string]int{}
	giIDs := map[int]string{}
	nvmlIDs := map[int]string{}
	for j := range m.Profiles {
		pr := &m.Profiles[j]
		pp := p.k("profiles").i(j, pr.Name)
		if k, dup := names[strings.ToLower(pr.Name)]; dup {
			v.add(pp.k("name"), "profile name %q already used by profiles[%d]", pr.Name, k)
		}
		names[strings.ToLower(pr.Name)] = j
		if sm := profileNameRE.FindStringSubmatch(pr.Name); sm == nil {
			v.add(pp.k("name"), "profile name %q is not of the form <n>g.<m>gb[suffix]", pr.Name)
		} else if n := atoi(sm[1]); n != pr.ComputeSlices {
			v.add(pp.k("computeSlices"), "name says %dg but computeSlices is %d", n, pr.ComputeSlices)
		}
		switch {
		case pr.GIProfileID < -1:
			v.add(pp.k("giProfileID"), "giProfileID must be -1 (unknown) or >= 0, got %d", pr.GIProfileID)
		case pr.GIProfileID >= 0:
			if other, dup := giIDs[pr.GIProfileID]; dup {
				v.add(pp.k("giProfileID"), "giProfileID %d already used by %s", pr.GIProfileID, other)
			}
			giIDs[pr.GIProfileID] = pr.Name
		}
		switch {
		case pr.NVMLProfile < -1 || pr.NVMLProfile > maxNVMLProfile:
			v.add(pp.k("nvmlProfile"), "nvmlProfile must be -1 (unknown) or 0..%d, got %d", maxNVMLProfile, pr.NVMLProfile)
		case pr.NVMLProfile >= 0:
			if other, dup := nvmlIDs[pr.NVMLProfile]; dup {
				v.add(pp.k("nvmlProfile"), "nvmlProfile %d already used by %s", pr.NVMLProfile, other)
			}
			nvmlIDs[pr.NVMLProfile] = pr.Name
		}
		if pr.ComputeSlices < 1 || pr.ComputeSlices > m.ComputeSlices {
			v.add(pp.k("computeSlices"), "computeSlices %d must be 1..%d", pr.ComputeSlices, m.ComputeSlices)
		}
		v.validatePlacement(pp, m, pr)
		v.validateProfileMemory(pp, g, pr)
		if pr.SMs < 0 || (m.SMsInMIGMode > 0 && pr.SMs > m.SMsInMIGMode) {
			v.add(pp.k("sms"), "sms %d must be 0..smsInMIGMode (%d)", pr.SMs, m.SMsInMIGMode)
		}
		me := strings.Contains(pr.Name, "+me")
		if me != pr.MediaExtensions {
			v.add(pp.k("mediaExtensions"), "mediaExtensions is %v but the name %s \"+me\"", pr.MediaExtensions,
				map[bool]string{true: "contains", false: "lacks"}[me])
		}
		if me && pr.MaxCount != 1 {
			v.add(pp.k("maxCount"), "a +me profile must have maxCount 1, got %d", pr.MaxCount)
		}
		if pr.CopyEngines < 0 || pr.Decoders < 0 || pr.Encoders < 0 || pr.JPEG < 0 || pr.OFA < 0 {
			v.add(pp, "engine counts must not be negative")
		}
		v.checkSource(pp.k("source"), pr.Source)
		v.checkConfidence(pp.k("confidence"), pr.Confidence)
	}
}

func (v *validator) validatePlacement(pp path, m *MIGSpec, pr *Profile) {
	pl := pr.Placement
	lp := pp.k("placement")
	if pr.MemorySlices != pl.Size {
		v.add(pp.k("memorySlices"), "memorySlices %d differs from placement size %d", pr.MemorySlices, pl.Size)
	}
	if pl.Size <= 0 {
		v.add(lp, "placement size must be positive, got %d", pl.Size)
	}
	if len(pl.Starts) == 0 {
		v.add(lp, "placement has no starts")
	}
	for k, st := range pl.Starts {
		switch {
		case st < 0:
			v.add(lp, "placement start %d is negative", st)
		case st+pl.Size > m.MemorySlices:
			v.add(lp, "placement start %d + size %d exceeds %d memory slices", st, pl.Size, m.MemorySlices)
		}
		if k > 0 && st <= pl.Starts[k-1] {
			v.add(lp, "placement starts %v are not sorted and unique", pl.Starts)
			break
		}
	}
	switch disjoint := disjointPlacements(pl.Starts, max(pl.Size, 1)); {
	case pr.MaxCount < 1:
		v.add(pp.k("maxCount"), "maxCount must be at least 1, got %d", pr.MaxCount)
	case pr.MaxCount > disjoint:
		v.add(pp.k("maxCount"), "maxCount %d exceeds the %d non-overlapping placements", pr.MaxCount, disjoint)
	case pr.MaxCount > m.MaxInstances:
		v.add(pp.k("maxCount"), "maxCount %d exceeds maxInstances %d", pr.MaxCount, m.MaxInstances)
	case pr.ComputeSlices > 0 && pr.MaxCount*pr.ComputeSlices > m.ComputeSlices:
		v.add(pp.k("maxCount"), "maxCount %d x %d compute slices exceeds %d compute slices",
			pr.MaxCount, pr.ComputeSlices, m.ComputeSlices)
	}
}

func (v *validator) validateProfileMemory(pp path, g *GPU, pr *Profile) {
	switch {
	case pr.MemoryMiB <= 0:
		v.add(pp.k("memoryMiB"), "memoryMiB must be positive, got %d", pr.MemoryMiB)
	case g.MemoryMiB > 0 && pr.MemoryMiB > g.MemoryMiB:
		v.add(pp.k("memoryMiB"), "memoryMiB %d exceeds the GPU's %d", pr.MemoryMiB, g.MemoryMiB)
	}
	if pr.MemoryEstimated {
		if want := estimateMiB(g.MemoryMiB, pr.MemorySlices, g.MIG.MemorySlices); pr.MemoryMiB != want {
			v.add(pp.k("memoryMiB"), "memoryMiB %d is marked estimated but the estimate is %d (GPU memory x %d/%d slices, rounded down to 64 MiB)",
				pr.MemoryMiB, want, pr.MemorySlices, g.MIG.MemorySlices)
		}
	}
}
