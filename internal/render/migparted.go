package render

import (
	"bytes"
	"fmt"
	"sort"
	"strconv"
	"strings"

	"github.com/gpuslice/gpuslice/internal/mig"
	"github.com/gpuslice/gpuslice/internal/model"
	"github.com/gpuslice/gpuslice/internal/plan"
)

// MIGPartedConfigPrefix starts the name of every mig-parted config the
// mig-parted target writes: gpuslice-<pool>.
const MIGPartedConfigPrefix = "gpuslice-"

// MIGConfigLabel is the node label with which the GPU operator's MIG
// manager selects a mig-parted config.
const MIGConfigLabel = "nvidia.com/mig.config"

func init() { register("mig-parted", renderMIGParted) }

// mpGPU is one GPU's MIG state as mig-parted sees it (counts) and as
// gpuslice plans it (explicit starts).
type mpGPU struct {
	node   string
	index  int
	mig    bool
	counts map[string]int
	layout mig.Layout // sorted by start
}

// key is what mig-parted can express: MIG on or off and the counts.
func (g mpGPU) key() string {
	if !g.mig {
		return "off"
	}
	var parts []string
	for _, p := range mpSortedProfiles(g.counts) {
		parts = append(parts, p+"="+strconv.Itoa(g.counts[p]))
	}
	return "on:" + strings.Join(parts, ",")
}

// mpSortedProfiles orders profiles biggest first (compute slices, then
// memory), then by name, as NVIDIA's examples list them.
func mpSortedProfiles(counts map[string]int) []string {
	names := make([]string, 0, len(counts))
	for p := range counts {
		names = append(names, p)
	}
	sort.Slice(names, func(i, j int) bool {
		a, errA := mig.ParseProfileName(names[i])
		b, errB := mig.ParseProfileName(names[j])
		if errA == nil && errB == nil {
			if a.ComputeSlices != b.ComputeSlices {
				return a.ComputeSlices > b.ComputeSlices
			}
			if a.MemoryGB != b.MemoryGB {
				return a.MemoryGB > b.MemoryGB
			}
		}
		return names[i] < names[j]
	})
	return names
}

// mpNode is one node of a pool: its GPUs by index.
type mpNode struct {
	name string
	gpus []mpGPU
}

func (n mpNode) key() string {
	parts := make([]string, len(n.gpus))
	for i, g := range n.gpus {
		parts[i] = strconv.Itoa(g.index) + ":" + g.key()
	}
	return strings.Join(parts, "|")
}

// mpPoolNodes groups a pool's GPUs by node, in plan order.
func mpPoolNodes(pp *plan.PoolPlan) []mpNode {
	var nodes []mpNode
	at := map[string]int{}
	for _, g := range pp.GPUs {
		i, ok := at[g.Node]
		if !ok {
			i = len(nodes)
			at[g.Node] = i
			nodes = append(nodes, mpNode{name: g.Node})
		}
		mg := mpGPU{node: g.Node, index: g.Index, mig: g.MIG, counts: map[string]int{}}
		for _, in := range g.Instances {
			mg.counts[in.Profile]++
			mg.layout = append(mg.layout, mig.Instance{Profile: in.Profile, Start: in.Start})
		}
		mg.layout = mg.layout.Sorted()
		nodes[i].gpus = append(nodes[i].gpus, mg)
	}
	for i := range nodes {
		sort.SliceStable(nodes[i].gpus, func(a, b int) bool { return nodes[i].gpus[a].index < nodes[i].gpus[b].index })
	}
	return nodes
}

// mpEntry is one entry of a mig-parted config: GPUs with the same counts.
type mpEntry struct {
	all     bool
	indexes []int
	gpu     mpGPU // a representative
}

func mpEntries(n mpNode) []mpEntry {
	var out []mpEntry
	at := map[string]int{}
	for _, g := range n.gpus {
		k := g.key()
		i, ok := at[k]
		if !ok {
			i = len(out)
			at[k] = i
			out = append(out, mpEntry{gpu: g})
		}
		out[i].indexes = append(out[i].indexes, g.index)
	}
	if len(out) == 1 {
		out[0].all = true
	}
	return out
}

// mpRanges writes GPU indexes compactly: 0-3, 6.
func mpRanges(xs []int) string {
	var parts []string
	for i := 0; i < len(xs); {
		j := i
		for j+1 < len(xs) && xs[j+1] == xs[j]+1 {
			j++
		}
		if j > i {
			parts = append(parts, fmt.Sprintf("%d-%d", xs[i], xs[j]))
		} else {
			parts = append(parts, strconv.Itoa(xs[i]))
		}
		i = j + 1
	}
	return strings.Join(parts, ", ")
}

// mpPlacementComments lists the explicit starts gpuslice's agent applies,
// one line per distinct layout with the GPUs that get it.
func mpPlacementComments(nodes []mpNode) []string {
	type where struct {
		layout string
		gpus   map[string][]int
		order  []string
	}
	var layouts []*where
	at := map[string]*where{}
	for _, n := range nodes {
		for _, g := range n.gpus {
			if !g.mig {
				continue
			}
			l := strings.ReplaceAll(g.layout.String(), ",", " ")
			if l == "" {
				l = "(MIG on, no instances)"
			}
			w := at[l]
			if w == nil {
				w = &where{layout: l, gpus: map[string][]int{}}
				at[l] = w
				layouts = append(layouts, w)
			}
			if _, ok := w.gpus[n.name]; !ok {
				w.order = append(w.order, n.name)
			}
			w.gpus[n.name] = append(w.gpus[n.name], g.index)
		}
	}
	var out []string
	for _, w := range layouts {
		var on []string
		for _, n := range w.order {
			on = append(on, n+" GPU "+mpRanges(w.gpus[n]))
		}
		out = append(out, "  "+w.layout+"  <- "+strings.Join(on, "; "))
	}
	return out
}

func mpSpecPool(s *model.Spec, name string) *model.Pool {
	if s == nil {
		return nil
	}
	for i := range s.Pools {
		if s.Pools[i].Name == name {
			return &s.Pools[i]
		}
	}
	return nil
}

func renderMIGParted(s *model.Spec, p *plan.Plan) ([]byte, error) {
	if p == nil || len(p.Pools) == 0 {
		return nil, fmt.Errorf("mig-parted: the plan has no pools")
	}
	var b bytes.Buffer
	for _, l := range []string{
		"mig-parted config written by gpuslice: one config per pool, named " + MIGPartedConfigPrefix + "<pool>.",
		"Apply it with the GPU operator's MIG manager (node label " + MIGConfigLabel + "=" + MIGPartedConfigPrefix + "<pool>)",
		"or by hand: nvidia-mig-parted apply -f <this file> -c " + MIGPartedConfigPrefix + "<pool>",
		"mig-parted re-creates the instances from these counts by trying permutations of the profile list",
		"and ignores placements; gpuslice's agent creates them at the explicit starts listed in the comments",
		"(profile@start, start = first memory slice), which is what the plan's capacity assumes.",
	} {
		b.WriteString("# " + l + "\n")
	}
	b.WriteString("version: v1\nmig-configs:\n")
	seen := map[string]bool{}
	for i := range p.Pools {
		pp := &p.Pools[i]
		if sp := mpSpecPool(s, pp.Name); sp != nil && sp.MIGParted != nil {
			if err := mpWriteImported(&b, sp, pp, seen); err != nil {
				return nil, err
			}
			continue
		}
		if len(pp.GPUs) == 0 {
			continue
		}
		base := MIGPartedConfigPrefix + pp.Name
		nodes := mpPoolNodes(pp)
		// Nodes whose GPUs differ need configs of their own: a config is
		// applied per node and addresses GPUs by index.
		type group struct {
			name  string
			nodes []mpNode
		}
		var groups []*group
		at := map[string]*group{}
		for _, n := range nodes {
			k := n.key()
			g := at[k]
			if g == nil {
				name := base
				if len(groups) > 0 {
					name = fmt.Sprintf("%s-%d", base, len(groups)+1)
				}
				g = &group{name: name}
				at[k] = g
				groups = append(groups, g)
			}
			g.nodes = append(g.nodes, n)
		}
		dynamic := false
		if sp := mpSpecPool(s, pp.Name); sp != nil && sp.MIG == "dynamic" {
			dynamic = true
		}
		for _, g := range groups {
			if len(g.name) > 63 || !dpReLabelValue.MatchString(g.name) {
				return nil, fmt.Errorf("mig-parted: config name %q cannot be a value of the node label %s (letters, digits, '-', '_', '.'; at most 63)", g.name, MIGConfigLabel)
			}
			if seen[g.name] {
				return nil, fmt.Errorf("mig-parted: config name %q is used twice; rename pool %q", g.name, pp.Name)
			}
			seen[g.name] = true
			var names []string
			for _, n := range g.nodes {
				names = append(names, n.name)
			}
			b.WriteString("  # pool " + dpOneLine(pp.Name) + " (" + dpOneLine(pp.GPU) + "), nodes " + strings.Join(names, ", ") + "\n")
			if len(groups) > 1 {
				b.WriteString("  # the pool's nodes are planned with different layouts; label each node with its own config\n")
			}
			if dynamic {
				b.WriteString("  # dynamic MIG: this is the planned layout; gpuslice's agent changes it as claims come and go\n")
			}
			if pc := mpPlacementComments(g.nodes); len(pc) > 0 {
				b.WriteString("  # explicit starts applied by gpuslice's agent:\n")
				for _, c := range pc {
					b.WriteString("  # " + c + "\n")
				}
			}
			b.WriteString("  " + dpYAMLKey(g.name) + ":\n")
			for _, e := range mpEntries(g.nodes[0]) {
				if e.all {
					b.WriteString("    - devices: all\n")
				} else {
					parts := make([]string, len(e.indexes))
					for i, x := range e.indexes {
						parts[i] = strconv.Itoa(x)
					}
					b.WriteString("    - devices: [" + strings.Join(parts, ", ") + "]\n")
				}
				if !e.gpu.mig {
					b.WriteString("      mig-enabled: false\n")
					continue
				}
				b.WriteString("      mig-enabled: true\n")
				if len(e.gpu.counts) == 0 {
					b.WriteString("      mig-devices: {}\n")
					continue
				}
				b.WriteString("      mig-devices:\n")
				for _, prof := range mpSortedProfiles(e.gpu.counts) {
					fmt.Fprintf(&b, "        %q: %d\n", prof, e.gpu.counts[prof])
				}
			}
		}
	}
	if err := mpWriteUnused(&b, s, seen); err != nil {
		return nil, err
	}
	return b.Bytes(), nil
}
