package spec

import (
	"fmt"
	"sort"
	"strings"

	"gopkg.in/yaml.v3"

	"github.com/gpuslice/gpuslice/internal/alloc"
	"github.com/gpuslice/gpuslice/internal/mig"
)

// target resolves a request name in a config entry or constraint:
// "req" or, for firstAvailable, "req/alternative". It returns nil, after
// a diagnostic, for a name that is unknown or an alternative not planned.
func (d *draDoc) target(n *yaml.Node, path string) *draReq {
	parent, sub, hasSub := strings.Cut(n.Value, "/")
	q := d.byName[parent]
	if q == nil {
		names := make([]string, 0, len(d.byName))
		for k := range d.byName {
			names = append(names, k)
		}
		sort.Strings(names)
		d.r.errorf(n, path, draDidYouMean(parent, names), "names request %q, which this claim does not have", n.Value)
		return nil
	}
	switch {
	case !hasSub:
	case len(q.subs) == 0:
		d.r.errorf(n, path, "name the request alone", "request %q has no firstAvailable alternatives, so %q names nothing", parent, n.Value)
		return nil
	case !contains(q.subs, sub):
		d.r.errorf(n, path, draDidYouMean(sub, q.subs), "request %q has no alternative %q", parent, sub)
		return nil
	case sub != q.sub:
		d.r.warnf(n, path, "", "%q is not the alternative gpuslice plans (%s/%s): not applied", n.Value, parent, q.sub)
		return nil
	}
	return q
}

// apply gives each request the last config entry that names it; dry
// entries are checked only.
func (d *draDoc) apply(entries []draEntry, dry bool) {
	for _, e := range entries {
		var targets []*draReq
		for j, n := range e.names {
			if q := d.target(n, index(join(e.path, "requests"), j)); q != nil {
				targets = append(targets, q)
			}
		}
		if len(e.names) == 0 {
			targets = d.reqs
		}
		if e.nv == nil {
			continue
		}
		for _, q := range targets {
			if q.class != nil && !d.fits(e.nv, q.class, fmt.Sprintf("request %q", q.name)) {
				continue
			}
			if !dry {
				q.cfg = e.nv
			}
		}
	}
}

// fits checks a config kind against a device class: NVIDIA's driver
// fails a claim whose config does not match its devices.
func (d *draDoc) fits(nv *draNV, c *draClass, what string) bool {
	kn := draChild(nv.node, "kind")
	switch {
	case c.typ == "" || nv.kind == draGpuCfg && c.typ == "gpu" || nv.kind == draMigCfg && c.typ == "mig":
		return true
	case c.typ == "mig":
		d.r.errorf(kn, join(nv.path, "kind"), "use kind MigDeviceConfig for MIG devices", "GpuConfig cannot apply to %s of MIG devices (%s): NVIDIA's driver fails the claim", what, c.name)
	default:
		d.r.errorf(kn, join(nv.path, "kind"), "use kind GpuConfig for whole GPUs", "%s cannot apply to %s of %s devices (%s): NVIDIA's driver fails the claim", nv.kind, what, c.typ, c.name)
	}
	return false
}

// constraints reads spec.devices.constraints; use says whether they are
// applied (not when misplaced).
func (d *draDoc) constraints(n *yaml.Node, path string, use bool) {
	items := d.r.seq(n, path)
	if len(items) > draMaxList {
		d.r.errorf(n, path, "", "%d constraints; Kubernetes allows at most %d", len(items), draMaxList)
	}
	for i, it := range items {
		p := index(path, i)
		f := d.fields(it, p, fmt.Sprintf("inside constraint %d", i), "requests", "matchAttribute", "distinctAttribute")
		var names []string
		rs := d.r.seq(f.get("requests"), join(p, "requests"))
		for j, r := range rs {
			if q := d.target(r, index(join(p, "requests"), j)); q != nil && !q.admin && !contains(names, q.name) {
				names = append(names, q.name)
			}
		}
		attr, ok := d.r.str(f, "matchAttribute")
		an := f.get("matchAttribute")
		match := ""
		switch {
		case f.has("distinctAttribute"):
			d.r.warnf(f.knode["distinctAttribute"], join(p, "distinctAttribute"), "", "distinctAttribute cannot be expressed in gpuslice: not applied")
		case !ok:
			d.r.errorf(it, join(p, "matchAttribute"), "e.g. matchAttribute: gpu.nvidia.com/parentUUID", "constraint has no matchAttribute")
		case !strings.Contains(attr, "/"):
			d.r.errorf(an, join(p, "matchAttribute"), "e.g. gpu.nvidia.com/parentUUID", "matchAttribute %q is not a fully qualified attribute (<domain>/<name>)", attr)
		case attr == "gpu.nvidia.com/parentUUID":
			match = "gpu"
		case attr == "gpu.nvidia.com/driverVersion" || attr == "gpu.nvidia.com/cudaDriverVersion":
			match = "node"
		default:
			known := []string{"gpu.nvidia.com/parentUUID", "gpu.nvidia.com/driverVersion", "gpu.nvidia.com/cudaDriverVersion"}
			d.r.warnf(an, join(p, "matchAttribute"), draDidYouMean(attr, known),
				"matchAttribute %q cannot be expressed in gpuslice (parentUUID is the same GPU; driverVersion and cudaDriverVersion the same node): not applied", attr)
		}
		if !use || match == "" || (len(rs) > 0 && len(names) == 0) {
			continue
		}
		d.cons = append(d.cons, alloc.Constraint{Requests: names, Match: match})
	}
}

// build turns the requests into alloc requests and constraints.
func (d *draDoc) build() ([]alloc.Request, []alloc.Constraint) {
	out := []alloc.Request{}
	devices, mpsDevices := 0, 0
	var firstMPS *yaml.Node
	for _, q := range d.reqs {
		if q.admin {
			continue
		}
		r := alloc.Request{Name: q.name, Count: q.count}
		typ, sels := "", append([]string(nil), q.sels...)
		nv := q.cfg
		if c := q.class; c != nil {
			typ = c.typ
			sels = append(append([]string(nil), c.sels...), sels...)
			if nv == nil && len(c.cfgs) > 0 {
				nv = c.cfgs[len(c.cfgs)-1]
			}
		}
		switch typ {
		case "gpu", "vfio":
			r.Mode = alloc.Exclusive
		case "mig":
			r.Mode = alloc.MIG
		}
		profiles := draEquals(sels, "profile")
		switch {
		case len(profiles) > 1:
			d.r.errorf(q.node, "", "keep one profile per request", "request %q selects profiles %s at once: no device matches", q.name, strings.Join(profiles, " and "))
		case len(profiles) == 1 && (typ == "gpu" || typ == "vfio"):
			d.r.warnf(q.node, "", "use deviceClassName mig.nvidia.com for MIG devices", "request %q compares profile, which whole GPUs (%s) do not have: no device matches", q.name, q.class.name)
		case len(profiles) == 1:
			if _, err := mig.ParseProfileName(profiles[0]); err != nil {
				d.r.errorf(q.node, "", "e.g. 1g.5gb, 3g.20gb", "request %q: %v", q.name, err)
			} else {
				r.Profile = profiles[0]
			}
		}
		if nv != nil && nv.strategy != "" {
			r.Mode = alloc.TimeSlice
			if nv.strategy == draMPS {
				r.Mode = alloc.MPS
				mpsDevices += max(q.count, 1)
				firstMPS = draOr(firstMPS, nv.stratNode)
			}
			if q.class != nil && q.class.builtin && r.Profile == "" && (typ == "gpu" || typ == "mig") {
				sels = append([]string{draGuard(typ)}, sels...)
			}
			d.carry(&r, nv, typ)
		}
		if len(sels) > 0 {
			r.Selector = draAnd(sels)
		}
		instanceForProfile(&r)
		devices += max(q.count, 1)
		out = append(out, r)
	}
	if mpsDevices > 1 {
		d.r.errorf(firstMPS, "", "split the claim: one MPS device per claim", "the claim would take %d MPS devices; gpuslice gives a claim at most one (one MPS control daemon per claim)", mpsDevices)
	}
	cons := d.cons
	covered := false
	for _, c := range cons {
		covered = covered || len(c.Requests) == 0
	}
	if devices > 1 && !covered {
		cons = append(cons, alloc.Constraint{Match: "node"})
	}
	return out, cons
}

// carry puts MPS limits on the request, and warns once per config about
// what cannot be carried.
func (d *draDoc) carry(r *alloc.Request, nv *draNV, typ string) {
	if nv.strategy == draMPS {
		r.MemoryMiB = nv.pinnedMiB
		if nv.thread != nil && typ == "gpu" {
			r.ComputePercent = nv.threadPct
		}
	}
	if d.r.noted == nil {
		d.r.noted = map[*yaml.Node]bool{}
	}
	note := func(n *yaml.Node, sub, format string, args ...any) {
		if n != nil && !d.r.noted[n] {
			d.r.noted[n] = true
			d.r.warnf(n, join(nv.path, sub), "", format, args...)
		}
	}
	if nv.strategy == draMPS && typ != "gpu" {
		note(nv.thread, "sharing.mpsConfig.defaultActiveThreadPercentage", "defaultActiveThreadPercentage %d is a share of the %s device, not of a whole GPU: not carried into the request's computePercent", nv.threadPct, draTypeWord(typ))
	}
	if nv.strategy == draMPS {
		note(nv.perDevice, "sharing.mpsConfig.defaultPerDevicePinnedMemoryLimit", "defaultPerDevicePinnedMemoryLimit cannot be expressed per device on a request: not carried (defaultPinnedDeviceMemoryLimit is)")
	}
	if nv.strategy == draTimeSlic && nv.interval != nil && nv.interval.Value != "Default" {
		note(nv.interval, "sharing.timeSlicingConfig.interval", "time-slice interval %s is a device setting gpuslice does not take from claims: not carried (set it on the pool's sharing)", nv.interval.Value)
	}
}

func draTypeWord(typ string) string {
	if typ == "mig" {
		return "MIG"
	}
	return "selected"
}

// deviceClass reads a DeviceClass; its requests' type comes from a
// `type == 'gpu'|'mig'` conjunct of its selectors.
func (r *draReader) deviceClass(o *draObj) {
	d := &draDoc{r: r, obj: o, devPath: "spec", byName: map[string]*draReq{}, ready: true}
	f := d.fields(o.root, "", "at the top level of the DeviceClass", "apiVersion", "kind", "metadata", "spec", "status")
	name, _, nameNode := d.metadata(f.get("metadata"))
	extra := "extendedResourceName"
	if o.version == "v1alpha3" {
		extra = "suitableNodes"
	}
	sf := d.fields(f.get("spec"), "spec", "inside `spec`", "selectors", "config", extra)
	if sf.has("suitableNodes") {
		r.warnf(sf.knode["suitableNodes"], "spec.suitableNodes", "", "suitableNodes is not read by gpuslice: ignored")
	}
	c := &draClass{name: name, sels: d.selectors(sf.get("selectors"), "spec.selectors")}
	if t := draEquals(c.sels, "type"); len(t) == 1 && (t[0] == "gpu" || t[0] == "mig") {
		c.typ = t[0]
	} else if name != "" {
		r.warnf(draOr(nameNode, o.root), "metadata.name", "add a selector device.attributes['gpu.nvidia.com'].type == 'gpu' (or 'mig')",
			"DeviceClass %q does not say whether it selects whole GPUs or MIG devices: its requests get mode auto", name)
	}
	for _, e := range d.configs(sf.get("config"), "spec.config", false) {
		if e.nv != nil && d.fits(e.nv, c, fmt.Sprintf("DeviceClass %q", name)) {
			c.cfgs = append(c.cfgs, e.nv)
		}
	}
	if name == "" {
		return
	}
	if r.classes[name] != nil {
		r.errorf(nameNode, "metadata.name", "", "DeviceClass %q is defined twice", name)
	}
	r.classes[name] = c
}
