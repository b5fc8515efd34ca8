package spec

import (
	"errors"
	"fmt"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"

	"gopkg.in/yaml.v3"

	"github.com/gpuslice/gpuslice/internal/catalog"
	"github.com/gpuslice/gpuslice/internal/mig"
)

// SourceMIGParted is ImportedSharing.Source for mig-parted configs.
const SourceMIGParted = "mig-parted"

// The fields of a mig-parted config (mig-parted api/spec/v1).
var (
	mpTopKeys   = []string{"version", "mig-configs"}
	mpEntryKeys = []string{"device-filter", "devices", "mig-enabled", "mig-devices"}
)

// mpMaxInstances bounds the instance counts a fit check expands; no GPU
// holds more than 16 memory slices, so larger counts fail on limits alone.
const mpMaxInstances = 64

// ReadMIGPartedConfig reads an NVIDIA mig-parted config (version v1,
// mig-configs), or a Kubernetes ConfigMap holding one under a data key as
// the GPU operator's MIG manager uses it. It returns one ImportedSharing
// per named config (Source "mig-parted", Name the config name) whose
// Devices mirror its entries.
//
// It validates as mig-parted does (api/spec/v1): version v1 is required,
// mig-configs and each config must not be empty, devices ("all" or GPU
// indexes) and mig-enabled are required, mig-devices is required when MIG
// is enabled and forbidden when it is disabled, profile names must parse,
// counts must not be negative and not all be 0, and unknown fields are
// errors. When an entry's device-filter names a PCI device id the catalog
// knows ("0x20B010DE": device 0x20B0, vendor 10DE), it also checks that the
// counts fit that GPU (mig.Geometry.Fit) and gives the exact reason when
// they do not. ReadMIGPartedConfigFor checks every entry against a model.
func ReadMIGPartedConfig(file string, data []byte) (*Spec, Diagnostics) {
	return readMIGParted(file, data, nil)
}

// ReadMIGPartedConfigFor is ReadMIGPartedConfig that also checks that every
// MIG-enabled entry without a device-filter of another GPU fits model (a
// catalog GPU id, NVML product name or node label).
func ReadMIGPartedConfigFor(file string, data []byte, model string) (*Spec, Diagnostics) {
	g, err := catalog.Default().GPU(model)
	if err != nil {
		s := &Spec{Sources: []string{file}}
		return s, Diagnostics{{Severity: Error, Pos: Pos{File: file}, Message: err.Error(), Hint: "name a catalog GPU, e.g. A100-40GB"}}
	}
	if g.MIG == nil {
		s := &Spec{Sources: []string{file}}
		return s, Diagnostics{{Severity: Error, Pos: Pos{File: file}, Message: fmt.Sprintf("GPU model %s does not support MIG", g.ID),
			Hint: "mig-parted configs apply to MIG-capable GPUs: " + strings.Join(migModels(), ", ")}}
	}
	return readMIGParted(file, data, g)
}

func migModels() []string {
	var out []string
	for _, g := range catalog.Default().GPUs() {
		if g.MIG != nil {
			out = append(out, g.ID)
		}
	}
	return out
}

func readMIGParted(file string, data []byte, hint *catalog.GPU) (*Spec, Diagnostics) {
	w := &walker{file: file}
	s := &Spec{Sources: []string{file}}
	data = trimBOM(data)
	docs := w.parseDocs(nvJSONTabs(data))
	if len(docs) == 0 && len(w.diags) == 0 {
		w.errorf(nil, "", "start with version: v1 and mig-configs:", "the file is empty")
	}
	mc := &mpChecker{hint: hint}
	lines := nvLines(data)
	w.nvBlockHint(lines)
	for i, doc := range docs {
		if w.nvTooBig(doc) {
			continue
		}
		if nvIsConfigMap(doc) {
			w.nvEachConfig(doc, lines, "mig-parted", func(e *nvEmbedded, d *yaml.Node) {
				mc.pos = e.pos
				for _, imp := range e.w.migParted(d, mc) {
					imp.Where = e.pos(imp.whereNode)
					imp.File, imp.Key = file, e.key
					s.Imported = append(s.Imported, imp.ImportedSharing)
				}
			})
			continue
		}
		if i > 0 {
			w.errorf(doc, "", "one config per file", "mig-parted reads only the first YAML document")
			continue
		}
		mc.pos = w.pos
		for _, imp := range w.migParted(doc, mc) {
			imp.Where = w.pos(imp.whereNode)
			imp.File = file
			s.Imported = append(s.Imported, imp.ImportedSharing)
		}
	}
	return s, w.diags
}

// mpMapping is mapping for mig-parted, which rejects every unknown field,
// including x- extensions.
func (w *walker) mpMapping(n *yaml.Node, path string, allowed ...string) *fields {
	before := len(w.diags)
	f := w.mapping(n, path, allowed...)
	for i := before; i < len(w.diags); i++ {
		d := &w.diags[i]
		if strings.HasPrefix(d.Message, "unknown field") {
			d.Message += "; mig-parted rejects it (\"unexpected field\")"
			if strings.HasSuffix(d.Path, "apiVersion") {
				d.Hint = "mig-parted wants version: v1, not apiVersion: v1"
			}
		}
	}
	var keep []string
	for _, k := range f.keys {
		if strings.HasPrefix(k, "x-") && !contains(allowed, k) {
			w.errorf(f.knode[k], join(path, k), "remove it", "unknown field %q; mig-parted rejects it (\"unexpected field\")", k)
			continue
		}
		keep = append(keep, k)
	}
	f.keys = keep
	return f
}

type mpImported struct {
	ImportedSharing
	whereNode *yaml.Node
}

// mpChecker checks counts against GPU models.
type mpChecker struct {
	hint *catalog.GPU
	// pos maps a node to its file position (inside a ConfigMap value).
	pos func(*yaml.Node) Pos
}

// mpGeometries caches the MIG geometry of each catalog model (the default
// catalog is immutable); nil marks a model without MIG.
var mpGeometries sync.Map

func (mc *mpChecker) geometry(g *catalog.GPU) *mig.Geometry {
	if geo, ok := mpGeometries.Load(g.ID); ok {
		return geo.(*mig.Geometry)
	}
	geo, err := mig.New(g)
	if err != nil {
		geo = nil
	}
	mpGeometries.Store(g.ID, geo)
	return geo
}

// migParted reads one config file's top level.
func (w *walker) migParted(doc *yaml.Node, mc *mpChecker) []mpImported {
	top := w.mpMapping(doc, "", mpTopKeys...)
	if vn := top.get("version"); vn == nil {
		if len(top.keys) > 0 || (nvDeref(doc).Kind == yaml.MappingNode && len(nvDeref(doc).Content) > 0) {
			w.errorf(doc, "version", "add version: v1", "version is missing; mig-parted rejects a config without it")
		}
	} else if v, ok := w.nvStr(vn, "version"); ok && v != "v1" {
		w.errorf(vn, "version", "want version: v1", "unknown version %q: mig-parted reads only v1", v)
	}
	cn := nvDeref(top.get("mig-configs"))
	if cn == nil {
		if top.has("version") {
			w.errorf(doc, "mig-configs", "add mig-configs: {<name>: [{devices: all, mig-enabled: true, mig-devices: {...}}]}", "mig-configs is missing")
		}
		return nil
	}
	configs := w.mpMapping(cn, "mig-configs")
	if len(configs.keys) == 0 && cn.Kind == yaml.MappingNode || nvNull(cn) {
		w.errorf(cn, "mig-configs", "add at least one named config", "mig-configs is empty; mig-parted requires at least one entry")
		return nil
	}
	var out []mpImported
	for _, name := range configs.keys {
		path := join("mig-configs", name)
		imp := mpImported{ImportedSharing: ImportedSharing{Source: SourceMIGParted, Name: name}, whereNode: configs.knode[name]}
		list := nvDeref(configs.get(name))
		items := w.seq(list, path)
		if list != nil && list.Kind == yaml.SequenceNode && len(items) == 0 || nvNull(list) {
			w.errorf(list, path, "add an entry: - devices: all", "config %q is empty; mig-parted requires at least one entry", name)
		}
		type cover struct {
			filter string
			all    bool
			idx    map[int]bool
			i      int
		}
		var covers []cover
		for i, item := range items {
			ip := index(path, i)
			d, filter, ok := w.mpEntry(item, ip, mc)
			if !ok {
				continue
			}
			imp.Devices = append(imp.Devices, d)
			c := cover{filter: filter, all: d.All, idx: map[int]bool{}, i: i}
			for _, x := range d.Indexes {
				c.idx[x] = true
			}
			for _, prev := range covers {
				if prev.filter != c.filter {
					continue
				}
				var both []int
				for x := range c.idx {
					if prev.all || prev.idx[x] {
						both = append(both, x)
					}
				}
				if c.all {
					for x := range prev.idx {
						both = append(both, x)
					}
				}
				if len(both) > 0 || (c.all && prev.all) {
					sort.Ints(both)
					which := "every GPU"
					if len(both) > 0 {
						which = "GPUs " + intList(both)
					}
					w.warnf(item, ip, "list each GPU in one entry",
						"%s also matched by %s: mig-parted applies both entries in order, so the later one wins", which, index(path, prev.i))
					break
				}
			}
			covers = append(covers, c)
		}
		out = append(out, imp)
	}
	return out
}

func intList(xs []int) string {
	s := make([]string, len(xs))
	for i, x := range xs {
		s[i] = strconv.Itoa(x)
	}
	return strings.Join(s, ", ")
}

// mpEntry reads one entry of a config.
func (w *walker) mpEntry(item *yaml.Node, path string, mc *mpChecker) (ImportedDevices, string, bool) {
	var d ImportedDevices
	if mc.pos != nil {
		d.Where, d.DevicesWhere = mc.pos(item), mc.pos(item)
	}
	f := w.mpMapping(item, path, mpEntryKeys...)
	if nvDeref(item).Kind != yaml.MappingNode {
		return d, "", false
	}
	// models are the GPUs the counts must fit: those the device-filter
	// names, or the caller's model when there is no filter.
	var models []*catalog.GPU
	var filterKey string
	if fn := nvDeref(f.get("device-filter")); fn != nil {
		var vals []*yaml.Node
		if fn.Kind == yaml.SequenceNode {
			vals = fn.Content
		} else {
			vals = []*yaml.Node{fn}
		}
		var keys []string
		for i, v := range vals {
			vp := join(path, "device-filter")
			if fn.Kind == yaml.SequenceNode {
				vp = index(vp, i)
			}
			s, ok := w.nvStr(v, vp)
			if !ok {
				continue
			}
			d.DeviceFilter = append(d.DeviceFilter, s)
			id, ok := mpDeviceID(s)
			if !ok {
				w.warnf(v, vp, "write a PCI device id as 0x<device><vendor>, e.g. 0x20B010DE for an A100-SXM4-40GB",
					"device-filter %q is not a PCI device id; mig-parted accepts it but it matches no GPU", s)
				continue
			}
			keys = append(keys, id)
			if g := gpuByPCI(id); g != nil && !slices.ContainsFunc(models, func(m *catalog.GPU) bool { return m.ID == g.ID }) {
				models = append(models, g)
			}
		}
		sort.Strings(keys)
		filterKey = strings.Join(keys, ",")
	}
	if mc.hint != nil && len(d.DeviceFilter) == 0 {
		models = append(models, mc.hint)
	}

	hasDevices := f.has("devices")
	if !hasDevices {
		w.errorf(item, join(path, "devices"), "devices: all, or a list of GPU indexes such as [0, 1]", "devices is required (mig-parted: \"missing required field\")")
	} else {
		dn := nvDeref(f.get("devices"))
		dp := join(path, "devices")
		switch {
		case dn.Kind == yaml.ScalarNode && (dn.Tag == "!!str" || nvQuoted(dn)):
			if dn.Value == "all" {
				d.All = true
			} else {
				w.errorf(dn, dp, "want all or a list of GPU indexes", "devices %q: the only string mig-parted accepts is all", dn.Value)
			}
		case dn.Kind == yaml.SequenceNode:
			seen := map[int64]bool{}
			for i, x := range dn.Content {
				v, ok := w.nvInt(x, index(dp, i))
				if !ok {
					continue
				}
				if v < 0 {
					w.warnf(x, index(dp, i), "GPU indexes start at 0", "GPU index %d matches no GPU", v)
					continue
				}
				if seen[v] {
					w.warnf(x, index(dp, i), "", "GPU %d is listed twice", v)
					continue
				}
				seen[v] = true
				d.Indexes = append(d.Indexes, int(v))
			}
			if len(dn.Content) == 0 {
				w.warnf(dn, dp, "list GPU indexes or write all", "devices is empty: this entry matches no GPU")
			}
		default:
			w.errorf(dn, dp, "want all or a list of GPU indexes such as [0, 1]", "%s is not a devices value", kindName(dn))
		}
	}
	enabledSet := false
	if !f.has("mig-enabled") {
		w.errorf(item, join(path, "mig-enabled"), "mig-enabled: true or false", "mig-enabled is required (mig-parted: \"missing required field\")")
	} else {
		d.MIGEnabled, enabledSet = w.nvBool(f.get("mig-enabled"), join(path, "mig-enabled"))
	}
	mdn := nvDeref(f.get("mig-devices"))
	mdp := join(path, "mig-devices")
	if mdn != nil && mc.pos != nil {
		d.DevicesWhere = mc.pos(mdn)
	}
	switch {
	case enabledSet && d.MIGEnabled && (mdn == nil || nvNull(mdn)):
		at := item
		if mdn != nil {
			at = mdn
		}
		w.errorf(at, mdp, "e.g. mig-devices: {\"1g.5gb\": 7}", "mig-devices is required when mig-enabled is true (mig-parted rejects the entry)")
	case enabledSet && !d.MIGEnabled && mdn != nil && !nvNull(mdn) && !(mdn.Kind == yaml.MappingNode && len(mdn.Content) == 0):
		w.errorf(f.knode["mig-devices"], mdp, "remove mig-devices, or set mig-enabled: true",
			"mig-devices is not allowed when mig-enabled is false (mig-parted: \"MIG devices included when 'mig-enabled' is false\")")
	case mdn != nil && !nvNull(mdn):
		d.MIGDevices = w.mpDevices(mdn, mdp, d.MIGEnabled && enabledSet, models, mc)
	}
	return d, filterKey, true
}

// mpDevices reads mig-devices and checks them against models.
func (w *walker) mpDevices(n *yaml.Node, path string, enabled bool, models []*catalog.GPU, mc *mpChecker) map[string]int {
	f := w.mapping(n, path)
	out := map[string]int{}
	if n.Kind != yaml.MappingNode {
		return out
	}
	type prof struct {
		name, gi string
		count    int
		node     *yaml.Node
	}
	var profs []prof
	positive := false
	valid := true
	for _, k := range f.keys {
		kn, v := f.knode[k], f.get(k)
		kp := join(path, k)
		p, err := mig.ParseProfileName(k)
		if err != nil {
			w.errorf(kn, kp, "", "%v (mig-parted rejects the entry)", err)
			valid = false
			continue
		}
		c, ok := w.nvInt(v, kp)
		if !ok {
			valid = false
			continue
		}
		if c < 0 {
			w.errorf(v, kp, "want 0 or more", "count %d is negative (mig-parted rejects the entry)", c)
			valid = false
			continue
		}
		out[k] = int(c)
		positive = positive || c > 0
		gi := k
		if p.ComputeInstanceSlices > 0 {
			// "1c.2g.10gb" is a compute instance on its own 2g.10gb GPU instance.
			gi = fmt.Sprintf("%dg.%dgb%s", p.ComputeSlices, p.MemoryGB, p.Suffix)
		}
		profs = append(profs, prof{name: k, gi: gi, count: int(c), node: kn})
	}
	if len(f.keys) > 0 && valid && !positive {
		w.errorf(n, path, "give at least one profile a count above 0, or set mig-enabled: false",
			"all counts are 0 (mig-parted rejects the entry)")
		return out
	}
	// An empty mig-devices with MIG on is valid (mig-parted's own
	// all-enabled config): MIG mode on, no instance.
	if !enabled || !valid {
		return out
	}
	for _, g := range models {
		geo := mc.geometry(g)
		if geo == nil {
			w.errorf(n, path, "", "GPU model %s does not support MIG", g.ID)
			continue
		}
		var want []string
		total := 0
		ok := true
		for _, p := range profs {
			if _, found := geo.Lookup(p.gi); !found {
				names := geo.ProfileNames()
				hint := "valid: " + strings.Join(names, ", ")
				if s := catalog.Suggest(p.gi, names); s != "" {
					hint = fmt.Sprintf("did you mean %q? %s", s, hint)
				}
				of := ""
				if p.gi != p.name {
					of = " (the GPU instance of " + p.name + ")"
				}
				w.errorf(p.node, join(path, p.name), hint, "%s has no MIG profile %s%s", g.ID, p.gi, of)
				ok = false
				continue
			}
			total += p.count
			for i := 0; i < p.count && total <= mpMaxInstances; i++ {
				want = append(want, p.gi)
			}
		}
		if !ok {
			continue
		}
		var parts []string
		for _, p := range profs {
			if p.count > 0 {
				parts = append(parts, fmt.Sprintf("%d× %s", p.count, p.name))
			}
		}
		what := strings.Join(parts, " + ")
		if total > mpMaxInstances {
			w.errorf(n, path, "", "%s do not fit on %s: %d instances, the GPU holds at most %d", what, g.ID, total, geo.MaxInstances)
			continue
		}
		if _, err := geo.Fit(want); err != nil {
			var nf *mig.NoFitError
			if errors.As(err, &nf) {
				w.errorf(n, path, "", "%s do not fit on %s: %s", what, g.ID, strings.Join(nf.Reasons, "; "))
			} else {
				w.errorf(n, path, "", "%v", err)
			}
		}
	}
	return out
}

// mpDeviceID reads a device-filter value ("0x20B010DE", any case; newer
// mig-parted may append a subsystem id, which is kept out of the match)
// into "0x<DEVICE>" when the vendor is NVIDIA (10DE).
func mpDeviceID(s string) (string, bool) {
	t := strings.ToUpper(strings.TrimSpace(s))
	if !strings.HasPrefix(t, "0X") || len(t) < 10 {
		return "", false
	}
	hex := t[2:10]
	for _, c := range hex {
		if !strings.ContainsRune("0123456789ABCDEF", c) {
			return "", false
		}
	}
	if len(t) > 10 {
		if rest := t[10:]; !strings.ContainsAny(rest[:1], ":-_.") {
			return "", false
		}
	}
	if hex[4:] != "10DE" {
		return "0x" + hex, true // another vendor: a valid id no catalog GPU has
	}
	return "0x" + hex[:4], true
}

// mpByPCI maps PCI device ids ("0X20B0") to default-catalog GPUs.
var mpByPCI = sync.OnceValue(func() map[string]*catalog.GPU {
	out := map[string]*catalog.GPU{}
	for _, g := range catalog.Default().GPUs() {
		for _, p := range g.PCIDeviceIDs {
			out[strings.ToUpper(p)] = &g
		}
	}
	return out
})

// gpuByPCI finds the catalog GPU with a PCI device id ("0x20B0").
func gpuByPCI(id string) *catalog.GPU { return mpByPCI()[strings.ToUpper(id)] }
