package render

import (
	"bytes"
	"fmt"
	"strconv"
	"strings"

	"github.com/gpuslice/gpuslice/internal/alloc"
	"github.com/gpuslice/gpuslice/internal/model"
	"github.com/gpuslice/gpuslice/internal/plan"
)

// An imported device-plugin config (model.Pool.DevicePlugin) fixes its
// pool's sharing, so the plan has nothing to change in it: the
// nvidia-device-plugin target writes it back as it was read, under the data
// key its nodes select (the pool's label nvidia.com/device-plugin.config,
// else the pool's name), with comments where the plan needs more than it
// gives. Flags, renameByDefault, failRequestsGreaterThanOne, MPS settings
// and everything else the planner does not decide survive unchanged.

// dpImportedEntry is the data key, the comments above it and the text of a
// pool's imported config.
func dpImportedEntry(sp *model.Pool, pp *plan.PoolPlan, planned dpConfig) (string, []string, string) {
	imp := sp.DevicePlugin
	key := sp.Name // a bare config file: the pool's own key
	if imp.Key != "" {
		key = imp.Key // the pool's nodes carry it as nvidia.com/device-plugin.config
	}
	about := []string{planned.about + "; config imported from " + dpPosText(imp.Where) + " (" + strconv.Quote(imp.Name) + "), written back unchanged"}
	if planned.migStrategy == "mixed" && imp.MIGStrategy != "mixed" && imp.MIGStrategy != "single" {
		s := imp.MIGStrategy
		if s == "" {
			s = "not set here (the device plugin's --mig-strategy or Helm value decides)"
		}
		about = append(about, "the plan uses MIG instances on this pool but the config's migStrategy is "+s+"; pods asking for nvidia.com/mig-<profile> need migStrategy mixed")
	}
	if planned.mode == alloc.MPS && imp.DevicePlugin != nil && imp.DevicePlugin.Mode != "mps" {
		about = append(about, "the plan uses MPS on whole GPUs of this pool, which this config does not set up")
	}
	return key, about, imp.Text
}

// dpWriteBlock writes one data entry as a literal block scalar.
func dpWriteBlock(b *bytes.Buffer, key, text string) {
	header := "|"
	if strings.HasPrefix(text, " ") || strings.HasPrefix(text, "\n") {
		header = "|2" // the content is indented 2 past the key
	}
	if !strings.HasSuffix(text, "\n") {
		header += "-"
	}
	b.WriteString("  " + dpYAMLKey(key) + ": " + header + "\n")
	for _, l := range strings.Split(strings.TrimSuffix(text, "\n"), "\n") {
		if l == "" {
			b.WriteString("\n")
			continue
		}
		b.WriteString("    " + l + "\n")
	}
}

// dpUnusedImports lists the imported device-plugin configs no pool uses.
func dpUnusedImports(s *model.Spec) []*model.ImportedSharing {
	if s == nil {
		return nil
	}
	used := map[model.Pos]bool{}
	for _, p := range s.Pools {
		if p.DevicePlugin != nil {
			used[p.DevicePlugin.Where] = true
		}
	}
	var out []*model.ImportedSharing
	for i := range s.Imported {
		imp := &s.Imported[i]
		if imp.Source == "nvidia-device-plugin" && !used[imp.Where] && imp.Text != "" {
			out = append(out, imp)
		}
	}
	return out
}

func dpPosText(p model.Pos) string {
	if p.Line > 0 {
		return fmt.Sprintf("%s:%d", p.File, p.Line)
	}
	return p.File
}
