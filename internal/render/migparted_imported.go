package render

import (
	"bytes"
	"fmt"
	"strconv"
	"strings"

	"github.com/gpuslice/gpuslice/internal/model"
	"github.com/gpuslice/gpuslice/internal/plan"
)

// An imported mig-parted config (model.Pool.MIGParted) fixes its pool's
// MIG layout: the mig-parted target writes it back under the name its
// nodes select (the pool's label nvidia.com/mig.config, else
// gpuslice-<pool>) with every entry as it was read (device filters, GPU
// indexes, MIG on or off, counts), and the other configs of the files it
// came from after the pools' (carried through, used by no pool).

// mpWriteImported writes a pool's imported config.
func mpWriteImported(b *bytes.Buffer, sp *model.Pool, pp *plan.PoolPlan, seen map[string]bool) error {
	imp := sp.MIGParted
	name := imp.Name // the pool's nodes carry it as nvidia.com/mig.config
	if seen[name] {
		// Pools labelled with the same config share it.
		b.WriteString("  # pool " + dpOneLine(sp.Name) + " uses config " + dpOneLine(name) + " above\n")
		return nil
	}
	if len(name) > 63 || !dpReLabelValue.MatchString(name) {
		return fmt.Errorf("mig-parted: config name %q cannot be a value of the node label %s (letters, digits, '-', '_', '.'; at most 63)", name, MIGConfigLabel)
	}
	seen[name] = true
	b.WriteString("  # pool " + dpOneLine(sp.Name) + " (" + dpOneLine(pp.GPU) + "): config " + strconv.Quote(imp.Name) + " imported from " + dpOneLine(dpPosText(imp.Where)) + ", written back unchanged\n")
	if pc := mpPlacementComments(mpPoolNodes(pp)); len(pc) > 0 {
		b.WriteString("  # explicit starts applied by gpuslice's agent:\n")
		for _, c := range pc {
			b.WriteString("  # " + c + "\n")
		}
	}
	mpWriteEntries(b, name, imp.Devices)
	return nil
}

// mpWriteUnused writes the configs of imported mig-parted files that no
// pool uses.
func mpWriteUnused(b *bytes.Buffer, s *model.Spec, seen map[string]bool) error {
	if s == nil {
		return nil
	}
	used := map[model.Pos]bool{}
	for _, p := range s.Pools {
		if p.MIGParted != nil {
			used[p.MIGParted.Where] = true
		}
	}
	for _, imp := range s.Imported {
		if imp.Source != "mig-parted" || used[imp.Where] {
			continue
		}
		if seen[imp.Name] {
			return fmt.Errorf("mig-parted: config name %q is written twice (an imported config no pool uses, and a pool's)", imp.Name)
		}
		seen[imp.Name] = true
		b.WriteString("  # imported from " + dpOneLine(dpPosText(imp.Where)) + ", used by no pool of the plan; written back unchanged\n")
		mpWriteEntries(b, imp.Name, imp.Devices)
	}
	return nil
}

// mpWriteEntries writes one named config from its entries.
func mpWriteEntries(b *bytes.Buffer, name string, entries []model.ImportedDevices) {
	b.WriteString("  " + dpYAMLKey(name) + ":\n")
	for _, d := range entries {
		lead := "    - "
		if len(d.DeviceFilter) > 0 {
			q := make([]string, len(d.DeviceFilter))
			for i, f := range d.DeviceFilter {
				q[i] = strconv.Quote(f)
			}
			b.WriteString(lead + "device-filter: [" + strings.Join(q, ", ") + "]\n")
			lead = "      "
		}
		if d.All {
			b.WriteString(lead + "devices: all\n")
		} else {
			parts := make([]string, len(d.Indexes))
			for i, x := range d.Indexes {
				parts[i] = strconv.Itoa(x)
			}
			b.WriteString(lead + "devices: [" + strings.Join(parts, ", ") + "]\n")
		}
		fmt.Fprintf(b, "      mig-enabled: %t\n", d.MIGEnabled)
		if !d.MIGEnabled {
			continue
		}
		if len(d.MIGDevices) == 0 {
			b.WriteString("      mig-devices: {}\n")
			continue
		}
		b.WriteString("      mig-devices:\n")
		for _, prof := range mpSortedProfiles(d.MIGDevices) {
			fmt.Fprintf(b, "        %q: %d\n", prof, d.MIGDevices[prof])
		}
	}
}
