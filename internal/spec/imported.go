package spec

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"sort"
	"strconv"
	"strings"

	"github.com/gpuslice/gpuslice/internal/alloc"
	"github.com/gpuslice/gpuslice/internal/catalog"
	"github.com/gpuslice/gpuslice/internal/mig"
)

// Node labels with which NVIDIA's GPU operator selects a config per node;
// a pool that carries one selects the imported config of that name.
const (
	DevicePluginConfigLabel = "nvidia.com/device-plugin.config"
	MIGConfigLabel          = "nvidia.com/mig.config"
	// MIGPartedConfigPrefix is what render's mig-parted target puts before
	// a pool's name; a config named gpuslice-<pool> applies to <pool>.
	MIGPartedConfigPrefix = "gpuslice-"
)

// ApplyImported makes every imported NVIDIA config (Spec.Imported) the
// fixed configuration of the pools it applies to: what the cluster's nodes
// have, or must have. It is pure: it changes s and returns what it found.
//
// Which config applies to a pool, first rule that names one:
//
//   - device-plugin config: the one whose ConfigMap data key (or name) is
//     the pool's label nvidia.com/device-plugin.config; else the one named
//     after the pool (render's nvidia-device-plugin target writes one data
//     key per pool); else the config named "default" (a bare config file,
//     which every node's device plugin runs with, or data key "default");
//     else the only data key of a ConfigMap that has one. The last two are
//     the device plugin's own fallbacks ("named", then "single", its Helm
//     chart's config.fallbackStrategies) for a node whose label selects
//     no config: a single-key ConfigMap, as NVIDIA's and AWS's guides
//     write them (data key "any", "config.json"), is every node's config.
//   - mig-parted config: the one named by the pool's label
//     nvidia.com/mig.config; else the one named <pool> or gpuslice-<pool>
//     (render's mig-parted target); else, when the inputs hold exactly one
//     mig-parted config and exactly one pool has MIG-capable GPUs, that one.
//     Within the config, the entries that apply are those without a
//     device-filter and those whose device-filter names the pool's GPU.
//
// Two configs that a rule finds for one pool are an error (ambiguous), and
// so is a config file none of whose configs applies to any pool
// (unmatched); a config a pool's label names but no input has is an error.
//
// What a config fixes: a device-plugin config, the sharing of whole GPUs
// (time-slicing replicas, MPS clients, or none) and of MIG devices per
// profile (migStrategy mixed: nvidia.com/mig-<profile> resources; single:
// every MIG device as nvidia.com/gpu); a mig-parted config, whether MIG is
// on and the instance counts on every GPU of the pool (empty mig-devices
// with MIG on leaves the instances to gpuslice: mig dynamic). Where the spec
// set the same thing (Pool.SharingWhere, MIGWhere, MIGSharingWhere) and the
// config says otherwise, that is an error naming both positions; where the
// spec left it to the planner, the config fills it and Pool.FixedBy says
// so. The planner then places onto that configuration and says when a
// replica does not fit it.
//
// Every mig-parted entry is also checked against every GPU model it could
// meet in the spec's pools (mig.Geometry.Fit): the pool's model for an
// applied config, every MIG-capable model of the pools for one no pool
// selects, unless a device-filter names other GPUs.
func ApplyImported(s *Spec) Diagnostics {
	a := &applier{s: s, used: map[int]bool{}, checked: map[string]bool{}}
	var dps, mps []int
	for i, imp := range s.Imported {
		switch imp.Source {
		case SourceDevicePlugin:
			dps = append(dps, i)
		case SourceMIGParted:
			mps = append(mps, i)
		}
	}
	migPools := 0
	for i := range s.Pools {
		if g := poolGPU(&s.Pools[i]); g != nil && g.MIG != nil {
			migPools++
		}
	}
	for i := range s.Pools {
		p := &s.Pools[i]
		g := poolGPU(p)
		if j, ok := a.matchMIGParted(p, mps, migPools); ok {
			a.used[j] = true
			a.applyMIGParted(p, g, &s.Imported[j])
		}
		if j, ok := a.matchDevicePlugin(p, dps); ok {
			a.used[j] = true
			a.applyDevicePlugin(p, g, &s.Imported[j])
		}
	}
	a.unmatched(dps, "nvidia-device-plugin", "data key")
	a.unmatched(mps, "mig-parted", "config")
	a.checkUnselected(mps)
	return a.diags
}

type applier struct {
	s     *Spec
	diags Diagnostics
	// used marks the imported configs some pool applies.
	used map[int]bool
	// checked marks entry position + model pairs already fitted.
	checked map[string]bool
}

func (a *applier) errorf(at Pos, hint, format string, args ...any) {
	a.diags = append(a.diags, Diagnostic{Severity: Error, Pos: at, Message: fmt.Sprintf(format, args...), Hint: hint})
}

func (a *applier) warnf(at Pos, hint, format string, args ...any) {
	a.diags = append(a.diags, Diagnostic{Severity: Warning, Pos: at, Message: fmt.Sprintf(format, args...), Hint: hint})
}

// posText writes a position as file:line.
func posText(p Pos) string {
	if p.File == "" {
		return "(unknown position)"
	}
	if p.Line == 0 {
		return p.File
	}
	return p.File + ":" + strconv.Itoa(p.Line)
}

// poolGPU is the catalog GPU of a pool, or nil when the reader reported it.
func poolGPU(p *Pool) *catalog.GPU {
	cat := catalog.Default()
	model := p.GPU
	if model == "" && p.InstanceType != "" {
		if it, err := cat.InstanceType(p.InstanceType); err == nil {
			model = it.GPU
		}
	}
	g, err := cat.GPU(model)
	if err != nil {
		return nil
	}
	return g
}

// pick applies one matching rule: the candidates among idx that match,
// an error when several do.
func (a *applier) pick(p *Pool, idx []int, how string, match func(*ImportedSharing) bool) (int, bool, bool) {
	var found []int
	for _, j := range idx {
		if match(&a.s.Imported[j]) {
			found = append(found, j)
		}
	}
	switch len(found) {
	case 0:
		return 0, false, false
	case 1:
		return found[0], true, true
	}
	var at []string
	for _, j := range found {
		imp := a.s.Imported[j]
		at = append(at, fmt.Sprintf("%s config %q at %s", imp.Source, imp.Name, posText(imp.Where)))
	}
	a.errorf(p.Where, "keep one of them, or label the pool with the one it should use",
		"pool %s: %d configs apply %s, ambiguous: %s", p.Name, len(found), how, strings.Join(at, "; "))
	return 0, false, true
}

func (a *applier) matchDevicePlugin(p *Pool, dps []int) (int, bool) {
	if want, ok := p.Labels[DevicePluginConfigLabel]; ok {
		j, ok, decided := a.pick(p, dps, "by the label "+DevicePluginConfigLabel+"="+want, func(imp *ImportedSharing) bool {
			return imp.Key == want || imp.Key == "" && imp.Name == want
		})
		if !decided {
			a.errorf(p.Where, "give the device-plugin config that has it, or remove the label",
				"pool %s: its label %s=%s names a device-plugin config that no input has%s", p.Name, DevicePluginConfigLabel, want, a.have(dps))
		}
		return j, ok
	}
	if j, ok, decided := a.pick(p, dps, "by name", func(imp *ImportedSharing) bool { return imp.Name == p.Name }); decided {
		return j, ok
	}
	if j, ok, decided := a.pick(p, dps, "as the default config", func(imp *ImportedSharing) bool { return imp.Name == "default" }); decided {
		return j, ok
	}
	j, ok, _ := a.pick(p, dps, "as the only data key of its ConfigMap (the device plugin's default)", func(imp *ImportedSharing) bool { return imp.Single })
	return j, ok
}

func (a *applier) matchMIGParted(p *Pool, mps []int, migPools int) (int, bool) {
	if want, ok := p.Labels[MIGConfigLabel]; ok {
		j, ok, decided := a.pick(p, mps, "by the label "+MIGConfigLabel+"="+want, func(imp *ImportedSharing) bool { return imp.Name == want })
		if !decided {
			a.errorf(p.Where, "give the mig-parted config that has it, or remove the label",
				"pool %s: its label %s=%s names a mig-parted config that no input has%s", p.Name, MIGConfigLabel, want, a.have(mps))
		}
		return j, ok
	}
	if j, ok, decided := a.pick(p, mps, "by name", func(imp *ImportedSharing) bool {
		return imp.Name == p.Name || imp.Name == MIGPartedConfigPrefix+p.Name
	}); decided {
		return j, ok
	}
	if g := poolGPU(p); len(mps) == 1 && migPools == 1 && g != nil && g.MIG != nil {
		return mps[0], true
	}
	return 0, false
}

// have lists the names of the configs idx, for messages.
func (a *applier) have(idx []int) string {
	if len(idx) == 0 {
		return ""
	}
	var names []string
	for _, j := range idx {
		names = append(names, a.s.Imported[j].Name)
	}
	return " (have: " + strings.Join(names, ", ") + ")"
}

// unmatched reports config files none of whose configs applies to a pool,
// and device-plugin configs beside those that apply.
func (a *applier) unmatched(idx []int, what, unit string) {
	byFile := map[string][]int{}
	var files []string
	for _, j := range idx {
		f := a.s.Imported[j].Where.File
		if _, ok := byFile[f]; !ok {
			files = append(files, f)
		}
		byFile[f] = append(byFile[f], j)
	}
	var pools []string
	for _, p := range a.s.Pools {
		pools = append(pools, p.Name)
	}
	hint := "label a pool with " + DevicePluginConfigLabel + "=<" + unit + ">, name the " + unit + " after a pool, or name it \"default\" (every unlabelled node's config, as is a ConfigMap's only data key)"
	if what == "mig-parted" {
		hint = "label a pool with " + MIGConfigLabel + "=<config>, or name the config after a pool (<pool> or " + MIGPartedConfigPrefix + "<pool>)"
	}
	for _, f := range files {
		js := byFile[f]
		any := slices.ContainsFunc(js, func(j int) bool { return a.used[j] })
		first := a.s.Imported[js[0]]
		switch {
		case len(a.s.Pools) == 0:
			a.warnf(first.Where, "read it together with the spec that defines the pools",
				"the %s configs of this file apply to no pool: the inputs define none", what)
		case !any:
			var names []string
			for _, j := range js {
				names = append(names, strconv.Quote(a.s.Imported[j].Name))
			}
			a.errorf(first.Where, hint, "no pool uses the %s %s %s of this file, so it changes nothing (pools: %s)",
				what, plural(len(names), unit), strings.Join(names, ", "), strings.Join(pools, ", "))
		case what != "mig-parted":
			// mig-parted files usually hold many configs (NVIDIA's default
			// file has dozens); a device-plugin ConfigMap holds one per
			// node type, so one that no pool uses is worth a word.
			for _, j := range js {
				if !a.used[j] {
					imp := a.s.Imported[j]
					a.warnf(imp.Where, hint, "no pool uses device-plugin config %q; it is written back unchanged but changes nothing in the plan", imp.Name)
				}
			}
		}
	}
}

func plural(n int, unit string) string {
	if n == 1 {
		return unit
	}
	return unit + "s"
}

// sameSharing reports whether two sharings set up a device the same way
// (mode and slot count; the finer MPS defaults are the spec's own).
func sameSharing(a, b alloc.Sharing) bool {
	if a.Mode == "" {
		a.Mode = alloc.Exclusive
	}
	if b.Mode == "" {
		b.Mode = alloc.Exclusive
	}
	if a.Mode != b.Mode {
		return false
	}
	switch a.Mode {
	case alloc.TimeSlice:
		return a.Replicas == b.Replicas
	case alloc.MPS:
		return a.MaxClients == b.MaxClients
	}
	return true
}

// sharingText describes a sharing for messages.
func sharingText(sh alloc.Sharing) string {
	switch sh.Mode {
	case alloc.TimeSlice:
		return fmt.Sprintf("time-slicing with %d replicas", sh.Replicas)
	case alloc.MPS:
		return fmt.Sprintf("MPS with %d clients", sh.MaxClients)
	case alloc.Dynamic:
		return "sharing decided by the planner"
	}
	return "no sharing (one replica per device)"
}

func (a *applier) applyDevicePlugin(p *Pool, g *catalog.GPU, imp *ImportedSharing) {
	from := fmt.Sprintf("device-plugin config %q (%s)", imp.Name, posText(imp.SharingWhere))
	before := len(a.diags.Errors())
	// Whole GPUs.
	want := imp.Sharing
	if want.Mode == "" {
		want.Mode = alloc.Exclusive
	}
	explicit := p.SharingWhere != (Pos{}) && p.Sharing.Mode != alloc.Dynamic && p.Sharing.Mode != ""
	switch {
	case explicit && !sameSharing(p.Sharing, want):
		a.errorf(imp.SharingWhere, "make them agree: change the spec or the config",
			"pool %s: the spec sets %s on whole GPUs at %s, but %s sets %s", p.Name, sharingText(p.Sharing), posText(p.SharingWhere), from, sharingText(want))
	case explicit:
		// Same setup; the spec's finer MPS defaults stay.
	default:
		p.Sharing = want
		if p.MIG != "fixed" { // a fixed layout leaves no whole GPU to share
			p.FixedBy = append(p.FixedBy, fmt.Sprintf("whole GPUs: %s, fixed by %s", sharingText(want), from))
		}
	}
	// MIG devices.
	if p.MIG != "" && imp.MIGStrategy == "none" {
		a.errorf(imp.Where, "set flags.migStrategy: mixed, or turn MIG off for the pool",
			"pool %s uses MIG (%s), but %s sets migStrategy none: the device plugin then advertises no MIG device", p.Name, posText(p.MIGWhere), from)
	}
	if p.MIG == "fixed" && imp.MIGStrategy == "single" && len(p.MIGLayout) > 1 {
		a.errorf(imp.Where, "use migStrategy mixed, or one profile per GPU",
			"pool %s has MIG instances of %d profiles (%s), but %s sets migStrategy single, which needs every MIG device of a node to be of one profile", p.Name, len(p.MIGLayout), strings.Join(slices.Sorted(maps.Keys(p.MIGLayout)), ", "), from)
	}
	perProfile := map[string]alloc.Sharing{}
	if imp.DevicePlugin != nil && imp.MIGStrategy != "single" {
		for name, n := range imp.DevicePlugin.Replicas {
			if prof, ok := strings.CutPrefix(name, DevicePluginMIGResourcePrefix); ok {
				sh := alloc.Sharing{Mode: alloc.TimeSlice, Replicas: n}
				if imp.DevicePlugin.Mode == "mps" {
					sh = alloc.Sharing{Mode: alloc.MPS, MaxClients: n, DefaultThreadPercent: 100 / n}
				}
				perProfile[dpProfile(prof)] = sh
			}
		}
	}
	migOf := func(prof string) alloc.Sharing {
		if imp.MIGStrategy == "single" {
			return want
		}
		if sh, ok := perProfile[prof]; ok {
			return sh
		}
		return alloc.Sharing{Mode: alloc.Exclusive}
	}
	switch {
	case p.MIG == "dynamic" && (len(perProfile) > 0 || imp.MIGStrategy == "single" && want.Mode != alloc.Exclusive):
		a.errorf(imp.Where, "fix the pool's MIG layout (mig: {profile: count} or a mig-parted config), or remove the MIG resources from the config's sharing",
			"pool %s makes MIG instances as claims need them (mig dynamic at %s), but %s shares MIG devices per profile, which only a fixed layout keeps", p.Name, posText(p.MIGWhere), from)
	case p.MIG == "fixed":
		explicitMIG := p.MIGSharingWhere != (Pos{}) && p.MIGSharing.Mode != "" && p.MIGSharing.Mode != alloc.Dynamic
		byProfile := map[string]alloc.Sharing{}
		var fixed []string
		for _, prof := range slices.Sorted(maps.Keys(p.MIGLayout)) {
			sh := migOf(prof)
			if explicitMIG && !sameSharing(p.MIGSharing, sh) {
				a.errorf(imp.SharingWhere, "make them agree: change the spec or the config",
					"pool %s: the spec sets %s on its %s instances at %s, but %s sets %s", p.Name, sharingText(p.MIGSharing), prof, posText(p.MIGSharingWhere), from, sharingText(sh))
				continue
			}
			byProfile[prof] = sh
			fixed = append(fixed, prof+": "+sharingText(sh))
		}
		if !explicitMIG && len(fixed) > 0 {
			p.MIGSharingByProfile = byProfile
			p.FixedBy = append(p.FixedBy, fmt.Sprintf("MIG instances: %s, fixed by %s", strings.Join(fixed, "; "), from))
		}
	}
	if g != nil && g.MIG == nil && len(perProfile) > 0 {
		a.warnf(imp.Where, "", "pool %s: %s shares MIG devices, but %s has no MIG", p.Name, from, g.ID)
	}
	if len(a.diags.Errors()) > before {
		return
	}
	c := *imp
	p.DevicePlugin = &c
	if imp.Key != "" && imp.Key != p.Name {
		if p.Labels == nil {
			p.Labels = map[string]string{}
		}
		p.Labels[DevicePluginConfigLabel] = imp.Key
	}
}

// gpuState is what a mig-parted config leaves on one GPU.
type gpuState struct {
	on     bool
	counts map[string]int
	entry  *ImportedDevices
}

func (s gpuState) key() string {
	if !s.on {
		return "MIG off"
	}
	if len(s.counts) == 0 {
		return "MIG on, no instances"
	}
	var parts []string
	for _, p := range slices.Sorted(maps.Keys(s.counts)) {
		parts = append(parts, fmt.Sprintf("%d× %s", s.counts[p], p))
	}
	return strings.Join(parts, " + ")
}

// appliesTo reports whether an entry's device-filter lets it reach g.
func appliesTo(d *ImportedDevices, g *catalog.GPU) bool {
	if len(d.DeviceFilter) == 0 {
		return true
	}
	for _, f := range d.DeviceFilter {
		if id, ok := mpDeviceID(f); ok {
			if m := gpuByPCI(id); m != nil && m.ID == g.ID {
				return true
			}
		}
	}
	return false
}

func (a *applier) applyMIGParted(p *Pool, g *catalog.GPU, imp *ImportedSharing) {
	from := fmt.Sprintf("mig-parted config %q (%s)", imp.Name, posText(imp.Where))
	if g == nil {
		return // the reader reported the pool's GPU
	}
	per := max(p.GPUsPerNode, 1)
	if p.InstanceType != "" && p.GPUsPerNode == 0 {
		if it, err := catalog.Default().InstanceType(p.InstanceType); err == nil {
			per = it.GPUCount
		}
	}
	state := make([]*gpuState, per)
	applied := 0
	for k := range imp.Devices {
		d := &imp.Devices[k]
		if !appliesTo(d, g) {
			continue
		}
		applied++
		if d.MIGEnabled && len(d.DeviceFilter) == 0 && !a.fits(d, g, from) {
			return
		}
		st := &gpuState{on: d.MIGEnabled, counts: map[string]int{}, entry: d}
		for prof, n := range d.MIGDevices {
			if n > 0 {
				st.counts[prof] = n
			}
		}
		for i := range state {
			if d.All || slices.Contains(d.Indexes, i) {
				state[i] = st
			}
		}
	}
	if applied == 0 {
		a.errorf(imp.Where, "add an entry without device-filter, or one whose device-filter names "+strings.Join(g.PCIDeviceIDs, " or "),
			"pool %s: %s has no entry for its GPU, %s (every entry's device-filter names other GPUs)", p.Name, from, g.ID)
		return
	}
	groups := map[string][]int{}
	var order []string
	var uncovered []int
	for i, st := range state {
		if st == nil {
			uncovered = append(uncovered, i)
			continue
		}
		k := st.key()
		if _, ok := groups[k]; !ok {
			order = append(order, k)
		}
		groups[k] = append(groups[k], i)
	}
	if len(uncovered) > 0 {
		a.errorf(imp.Where, "add an entry with devices: all, or list every GPU index",
			"pool %s: %s sets up no entry for GPU %s of its %d (mig-parted leaves them as they are, so the plan cannot know their layout)", p.Name, from, intList(uncovered), per)
		return
	}
	if len(order) > 1 {
		var parts []string
		for _, k := range order {
			parts = append(parts, "GPU "+intList(groups[k])+": "+k)
		}
		a.errorf(imp.Where, "split the pool into pools of GPUs set up alike, or make the entries agree",
			"pool %s: %s sets its GPUs up differently (%s); gpuslice plans one layout per pool", p.Name, from, strings.Join(parts, "; "))
		return
	}
	st := state[0]
	mode, layout := "", map[string]int(nil)
	switch {
	case st.on && len(st.counts) == 0:
		mode = "dynamic"
	case st.on:
		mode, layout = "fixed", st.counts
		for prof := range layout {
			if pr, err := mig.ParseProfileName(prof); err == nil && pr.ComputeInstanceSlices > 0 {
				a.errorf(st.entry.DevicesWhere, "use GPU-instance profiles (such as 2g.10gb)",
					"pool %s: %s creates %s, a compute instance sharing its GPU instance; gpuslice plans GPU instances only, and the device plugin does not advertise it", p.Name, from, prof)
				return
			}
		}
	}
	if st.on && g.MIG == nil {
		a.errorf(st.entry.Where, "turn MIG off for this pool's GPUs", "pool %s: %s turns MIG on, but %s has no MIG", p.Name, from, g.ID)
		return
	}
	explicit := p.MIGWhere != (Pos{})
	if explicit && (p.MIG != mode || mode == "fixed" && !maps.Equal(p.MIGLayout, layout)) {
		a.errorf(st.entry.Where, "make them agree: change the spec or the config",
			"pool %s: the spec sets %s at %s, but %s sets %s", p.Name, migText(p.MIG, p.MIGLayout), posText(p.MIGWhere), from, migText(mode, layout))
		return
	}
	if !explicit {
		p.MIG, p.MIGLayout = mode, layout
		p.FixedBy = append(p.FixedBy, fmt.Sprintf("MIG: %s, fixed by %s", migText(mode, layout), from))
	}
	c := *imp
	p.MIGParted = &c
	if imp.Name != MIGPartedConfigPrefix+p.Name {
		if p.Labels == nil {
			p.Labels = map[string]string{}
		}
		p.Labels[MIGConfigLabel] = imp.Name
	}
}

func migText(mode string, layout map[string]int) string {
	switch mode {
	case "":
		return "MIG off"
	case "dynamic":
		return "MIG on, instances made as claims need them"
	}
	return "MIG instances " + gpuState{on: true, counts: layout}.key()
}

// fits checks an enabled entry's counts on model g, once per entry and
// model, and reports why they do not fit.
func (a *applier) fits(d *ImportedDevices, g *catalog.GPU, from string) bool {
	if len(d.MIGDevices) == 0 {
		return true
	}
	why, hint := mpFitProblem(d.MIGDevices, g)
	k := posText(d.DevicesWhere) + ":" + strconv.Itoa(d.DevicesWhere.Column) + "@" + g.ID
	if why == "" || a.checked[k] {
		return why == ""
	}
	a.checked[k] = true
	{
		filter := "devices: all"
		if !d.All {
			filter = "devices " + intList(d.Indexes)
		}
		a.errorf(d.DevicesWhere, hint, "%s: this entry (%s, no device-filter) reaches %s GPUs of the spec's pools: %s", from, filter, g.ID, why)
	}
	return false
}

// mpFitProblem says why counts do not fit one GPU of model g ("" when they
// do), and what would.
func mpFitProblem(counts map[string]int, g *catalog.GPU) (string, string) {
	if g.MIG == nil {
		return fmt.Sprintf("%s has no MIG", g.ID), "give the entry a device-filter of a MIG-capable GPU"
	}
	geo, err := mig.New(g)
	if err != nil {
		return err.Error(), ""
	}
	var want, parts []string
	total := 0
	for _, prof := range slices.Sorted(maps.Keys(counts)) {
		n := counts[prof]
		gi := prof
		if p, err := mig.ParseProfileName(prof); err == nil && p.ComputeInstanceSlices > 0 {
			gi = fmt.Sprintf("%dg.%dgb%s", p.ComputeSlices, p.MemoryGB, p.Suffix)
		}
		if _, ok := geo.Lookup(gi); !ok {
			return fmt.Sprintf("%s has no MIG profile %s", g.ID, gi), "its profiles: " + strings.Join(geo.ProfileNames(), ", ")
		}
		if n <= 0 {
			continue
		}
		total += n
		if total > mpMaxInstances {
			return fmt.Sprintf("%d instances; %s holds at most %d", total, g.ID, geo.MaxInstances), ""
		}
		parts = append(parts, fmt.Sprintf("%d× %s", n, prof))
		for range n {
			want = append(want, gi)
		}
	}
	if _, err := geo.Fit(want); err != nil {
		var nf *mig.NoFitError
		why := err.Error()
		if errors.As(err, &nf) {
			why = strings.Join(nf.Reasons, "; ")
		}
		return fmt.Sprintf("%s do not fit: %s", strings.Join(parts, " + "), why), "see gpuslice mig layouts " + g.ID + " for what fits, or add a device-filter for the GPUs this entry is meant for"
	}
	return "", ""
}

// checkUnselected checks the entries of mig-parted configs no pool applies
// against every MIG-capable model of the spec's pools that they could
// meet (entries without a device-filter).
func (a *applier) checkUnselected(mps []int) {
	var models []*catalog.GPU
	seen := map[string]bool{}
	for i := range a.s.Pools {
		if g := poolGPU(&a.s.Pools[i]); g != nil && g.MIG != nil && !seen[g.ID] {
			seen[g.ID] = true
			models = append(models, g)
		}
	}
	sort.Slice(models, func(i, j int) bool { return models[i].ID < models[j].ID })
	for _, j := range mps {
		if a.used[j] {
			continue
		}
		imp := &a.s.Imported[j]
		from := fmt.Sprintf("mig-parted config %q (%s)", imp.Name, posText(imp.Where))
		for k := range imp.Devices {
			d := &imp.Devices[k]
			if !d.MIGEnabled || len(d.DeviceFilter) > 0 {
				continue
			}
			for _, g := range models {
				a.fits(d, g, from)
			}
		}
	}
}
