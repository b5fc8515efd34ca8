package catalog

import (
	"fmt"
	"math"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"gopkg.in/yaml.v3"
)

// Limits the validator enforces beyond the data's own rules.
const (
	maxMemorySlices = 16 // the mig package keeps slice masks in a uint16
	maxNVMLProfile  = 31
	unstated        = "unstated"
)

var (
	profileNameRE = regexp.MustCompile(`^([0-9]+)g\.[0-9]+gb\S*$`)
	pciIDRE       = regexp.MustCompile(`^0x[0-9A-F]{4}$`)
	labelValueRE  = regexp.MustCompile(`^[A-Za-z0-9]([A-Za-z0-9._-]{0,61}[A-Za-z0-9])?$`)
)

// seg is one step of a path into the document: a mapping key, or a
// sequence index (idx >= 0) with an optional label such as the entry's id.
type seg struct {
	key   string
	idx   int
	label string
}

type path []seg

func (p path) k(key string) path { return append(p[:len(p):len(p)], seg{key: key, idx: -1}) }

func (p path) i(idx int, label string) path {
	return append(p[:len(p):len(p)], seg{idx: idx, label: label})
}

func (p path) String() string {
	var b strings.Builder
	for n, s := range p {
		switch {
		case s.idx >= 0:
			fmt.Fprintf(&b, "[%d]", s.idx)
			if s.label != "" {
				fmt.Fprintf(&b, " (%s)", s.label)
			}
		case n > 0:
			b.WriteString("." + s.key)
		default:
			b.WriteString(s.key)
		}
	}
	return b.String()
}

// line finds the line of the deepest node on p that exists.
func (p path) line(root *yaml.Node) int {
	n := root
	if n.Kind == yaml.DocumentNode && len(n.Content) > 0 {
		n = n.Content[0]
	}
	line := n.Line
	for _, s := range p {
		var next *yaml.Node
		switch {
		case s.idx >= 0 && n.Kind == yaml.SequenceNode && s.idx < len(n.Content):
			next = n.Content[s.idx]
		case s.idx < 0 && n.Kind == yaml.MappingNode:
			for j := 0; j+1 < len(n.Content); j += 2 {
				if n.Content[j].Value == s.key {
					next = n.Content[j+1]
					break
				}
			}
		}
		if next == nil {
			break
		}
		n, line = next, next.Line
	}
	return line
}

type validator struct {
	root  *yaml.Node
	f     *file
	probs []error
	ids   map[string]bool // exact GPU ids
}

func (v *validator) add(p path, format string, args ...any) {
	v.probs = append(v.probs, &Problem{Line: p.line(v.root), Path: p.String(), Msg: fmt.Sprintf(format, args...)})
}

func (v *validator) run() []error {
	v.validateSources()
	v.validateGPUs()
	v.validateInstanceTypes()
	return v.probs
}

func (v *validator) validateSources() {
	p := path{}.k("sources")
	if len(v.f.Sources) == 0 {
		v.add(p, "no sources listed")
	}
	keys := make([]string, 0, len(v.f.Sources))
	for k := range v.f.Sources {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		if k == "" || strings.ContainsAny(k, ", \t\n") {
			v.add(p, "source key %q must be non-empty without commas or spaces", k)
		}
		if strings.TrimSpace(v.f.Sources[k]) == "" {
			v.add(p.k(k), "source %s has no description", k)
		}
	}
}

// checkSource checks a comma-separated list of source keys.
func (v *validator) checkSource(p path, s string) {
	if strings.TrimSpace(s) == "" {
		v.add(p, "missing source")
		return
	}
	for _, k := range strings.Split(s, ",") {
		k = strings.TrimSpace(k)
		if k == "" {
			v.add(p, "empty key in source list %q", s)
		} else if _, ok := v.f.Sources[k]; !ok {
			v.add(p, "source key %s is not in sources", k)
		}
	}
}

func (v *validator) checkConfidence(p path, c Confidence) {
	switch c {
	case Verified, Inferred, Unconfirmed, Secondary, Unknown:
	case "":
		v.add(p, "missing confidence")
	default:
		v.add(p, "confidence %q is not one of verified, inferred, unconfirmed, secondary, unknown", string(c))
	}
}

func badFloat(f float64) bool { return math.IsNaN(f) || math.IsInf(f, 0) || f < 0 }

func (v *validator) validateGPUs() {
	p := path{}.k("gpus")
	if len(v.f.GPUs) == 0 {
		v.add(p, "no GPU models listed")
	}
	v.ids = map[string]bool{}
	owner := map[string]int{} // lower-cased name -> GPU index
	for i := range v.f.GPUs {
		g := &v.f.GPUs[i]
		gp := p.i(i, g.ID)
		claim := func(fp path, name, what string) {
			key := strings.ToLower(name)
			if j, ok := owner[key]; ok && j != i {
				v.add(fp, "%s %q also names gpus[%d] (%s)", what, name, j, v.f.GPUs[j].ID)
				return
			}
			owner[key] = i
		}
		switch {
		case g.ID == "":
			v.add(gp.k("id"), "missing id")
		case strings.ContainsAny(g.ID, ", \t\n"):
			v.add(gp.k("id"), "id %q must not contain spaces or commas", g.ID)
		default:
			v.ids[g.ID] = true
			claim(gp.k("id"), g.ID, "id")
		}
		if strings.TrimSpace(g.Name) == "" {
			v.add(gp.k("name"), "missing name")
		}
		seen := map[string]bool{}
		for j, n := range g.ProductNames {
			fp := gp.k("productNames").i(j, "")
			if strings.TrimSpace(n) == "" || seen[strings.ToLower(n)] {
				v.add(fp, "product name %q is empty or listed twice", n)
				continue
			}
			seen[strings.ToLower(n)] = true
			claim(fp, n, "product name")
		}
		seen = map[string]bool{}
		for j, l := range g.NodeLabels {
			fp := gp.k("nodeLabels").i(j, "")
			if !labelValueRE.MatchString(l) || seen[strings.ToLower(l)] {
				v.add(fp, "node label %q is not a valid label value or is listed twice", l)
				continue
			}
			seen[strings.ToLower(l)] = true
			claim(fp, l, "node label")
		}
		for j, id := range g.PCIDeviceIDs {
			if !pciIDRE.MatchString(id) {
				v.add(gp.k("pciDeviceIDs").i(j, ""), "PCI device id %q is not of the form 0x20B0", id)
			}
		}
		if g.MemoryMiB <= 0 {
			v.add(gp.k("memoryMiB"), "memoryMiB must be positive, got %d", g.MemoryMiB)
		}
		if g.SMs < 0 || g.MemBandwidthGBs < 0 || g.TDPWatts < 0 || badFloat(g.FP16DenseTFLOPS) {
			v.add(gp, "sms, memBandwidthGBs, tdpWatts and fp16DenseTFLOPS must not be negative")
		}
		v.checkSource(gp.k("source"), g.Source)
		v.checkConfidence(gp.k("confidence"), g.Confidence)
		if g.MIG != nil {
			v.validateMIG(gp.k("mig"), g)
		}
	}
}

func (v *validator) validateInstanceTypes() {
	p := path{}.k("instanceTypes")
	seen := map[string]int{}
	for i := range v.f.InstanceTypes {
		it := &v.f.InstanceTypes[i]
		ip := p.i(i, it.Name)
		if !slices.Contains(providers, it.Provider) {
			v.add(ip.k("provider"), "provider %q is not one of %s", it.Provider, strings.Join(providers, ", "))
		}
		key := strings.ToLower(it.Name)
		if strings.TrimSpace(it.Name) == "" {
			v.add(ip.k("name"), "missing name")
		} else if j, dup := seen[key]; dup {
			v.add(ip.k("name"), "name %q already used by instanceTypes[%d]", it.Name, j)
		} else {
			seen[key] = i
		}
		if !v.ids[it.GPU] {
			msg := fmt.Sprintf("gpu %q is not a GPU id in the catalog", it.GPU)
			ids := make([]string, 0, len(v.ids))
			for id := range v.ids {
				ids = append(ids, id)
			}
			slices.Sort(ids)
			if s := Suggest(it.GPU, ids); s != "" {
				msg += fmt.Sprintf("; did you mean %q?", s)
			}
			v.add(ip.k("gpu"), "%s", msg)
		}
		if it.GPUCount <= 0 {
			v.add(ip.k("gpuCount"), "gpuCount must be positive, got %d", it.GPUCount)
		}
		if it.VCPU <= 0 {
			v.add(ip.k("vcpu"), "vcpu must be positive, got %d", it.VCPU)
		}
		if badFloat(it.MemoryGiB) || it.MemoryGiB == 0 {
			v.add(ip.k("memoryGiB"), "memoryGiB must be positive, got %v", it.MemoryGiB)
		}
		if pr := it.Price; pr != nil {
			pp := ip.k("price")
			if badFloat(pr.USDPerHour) || pr.USDPerHour == 0 {
				v.add(pp.k("usdPerHour"), "usdPerHour must be positive, got %v", pr.USDPerHour)
			}
			if pr.Date == "" {
				v.add(pp, "price has no date (write %q if the source does not say)", unstated)
			} else if _, err := time.Parse(time.DateOnly, pr.Date); err != nil && pr.Date != unstated {
				v.add(pp.k("date"), "date %q is not YYYY-MM-DD or %q", pr.Date, unstated)
			}
			v.checkSource(pp.k("source"), pr.Source)
			v.checkConfidence(pp.k("confidence"), pr.Confidence)
		}
		v.checkSource(ip.k("source"), it.Source)
		v.checkConfidence(ip.k("confidence"), it.Confidence)
	}
}

// estimateMiB is the memory of a profile no source gives: the GPU's memory
// in proportion to the profile's memory slices, rounded down to 64 MiB.
func estimateMiB(gpuMiB int64, profileSlices, slices int) int64 {
	if slices <= 0 {
		return 0
	}
	return gpuMiB * int64(profileSlices) / int64(slices) / 64 * 64
}

// disjointPlacements is how many instances of size fit at the given starts
// without overlapping (greedy on sorted starts is optimal for equal sizes).
func disjointPlacements(starts []int, size int) int {
	s := slices.Clone(starts)
	slices.Sort(s)
	n, end := 0, math.MinInt
	for _, st := range s {
		if st >= end {
			n++
			end = st + size
		}
	}
	return n
}

// atoi parses the "<n>" of a "<n>g.…" profile name; -1 if it cannot.
func atoi(s string) int {
	n, err := strconv.Atoi(s)
	if err != nil {
		return -1
	}
	return n
}
