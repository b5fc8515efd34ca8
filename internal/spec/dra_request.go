package spec

import (
	"fmt"
	"sort"
	"strings"

	"gopkg.in/yaml.v3"

	"github.com/gpuslice/gpuslice/internal/alloc"
	"github.com/gpuslice/gpuslice/internal/catalog"
)

// Requests and device classes.
//
// Device classes: gpu.nvidia.com selects whole GPUs, so a request of it is
// Mode exclusive (the GPU belongs to the claim, as in DRA); mig.nvidia.com
// selects MIG devices: Mode mig. vfio.gpu.nvidia.com (passthrough to a VM)
// is planned as an exclusive whole GPU, with a warning. A DeviceClass in
// the same file is used by its selectors, which are ANDed into the
// request's Selector (class first, as DRA does); its type is taken from a
// `device.attributes['gpu.nvidia.com'].type == 'gpu'|'mig'` conjunct, and
// without one its requests are Mode auto. Any other name is an error with
// a did-you-mean (the slides' `migu.nvidia.com` is not guessed).
//
// Selectors: the CEL expressions of a request are ANDed, each in
// parentheses, into Request.Selector and each is compiled with
// alloc.CompileSelector. When a top-level conjunct is
// `device.attributes['gpu.nvidia.com'].profile == 'X'`, Request.Profile is
// X so the allocator can create that MIG instance; a profile inside || or
// ?: is not taken.

// draReq is one DRA request while a claim is read.
type draReq struct {
	name  string
	node  *yaml.Node
	class *draClass // nil when missing or unknown
	sels  []string
	count int
	all   bool
	admin bool
	// subs are firstAvailable's alternatives; sub, the first, is planned.
	subs []string
	sub  string
	cfg  *draNV // the last claim config that applies
}

// draClass is a device class: built in or from a DeviceClass object.
type draClass struct {
	name    string
	typ     string // "gpu", "mig", "vfio" or "" (not known)
	builtin bool
	sels    []string
	cfgs    []*draNV
}

var draBuiltinClasses = map[string]*draClass{
	"gpu.nvidia.com":      {name: "gpu.nvidia.com", typ: "gpu", builtin: true},
	"mig.nvidia.com":      {name: "mig.nvidia.com", typ: "mig", builtin: true},
	"vfio.gpu.nvidia.com": {name: "vfio.gpu.nvidia.com", typ: "vfio", builtin: true},
}

// DRA limits (resource.k8s.io validation).
const (
	draMaxList     = 32
	draMaxSubs     = 8
	draMaxCELBytes = 10 << 10
)

var draDeviceFields = []string{"deviceClassName", "selectors", "allocationMode", "count", "adminAccess", "tolerations", "capacity"}

func (d *draDoc) requests(n *yaml.Node, path string) {
	items := d.r.seq(n, path)
	if n == nil {
		d.r.warnf(d.obj.root, path, "", "the claim has no requests: nothing to allocate")
	}
	if len(items) > draMaxList {
		d.r.errorf(n, path, "", "%d requests; Kubernetes allows at most %d", len(items), draMaxList)
	}
	for i, it := range items {
		d.request(it, index(path, i))
	}
	d.ready = true
}

func (d *draDoc) request(it *yaml.Node, path string) {
	name, _ := draScalar(it, "name")
	where := fmt.Sprintf("inside request %q", name)
	q := &draReq{node: it, count: 1}
	v := d.obj.version
	var misplaced bool
	if v == "v1beta2" || v == "v1" {
		it, misplaced = d.moved(it, path, draDeviceFields[:5], "resource.k8s.io/"+v+" puts a request's device fields under `exactly:`",
			"write `exactly: {deviceClassName: ..., count: ...}` or use firstAvailable")
	} else {
		it, misplaced = d.moved(it, path, []string{"exactly"}, "`exactly` is resource.k8s.io/v1beta2 and v1; in "+v+" deviceClassName, selectors, allocationMode and count sit directly on the request",
			"move its fields up onto the request")
	}
	var f *fields
	switch v {
	case "v1alpha3":
		f = d.fields(it, path, where, append([]string{"name"}, draDeviceFields[:5]...)...)
	case "v1beta1":
		f = d.fields(it, path, where, append([]string{"name", "firstAvailable"}, draDeviceFields...)...)
	default:
		f = d.fields(it, path, where, "name", "exactly", "firstAvailable")
	}
	q.name = d.reqName(f, path, d.byName)
	if q.name != "" && d.byName[q.name] == nil {
		d.byName[q.name] = q
	}
	d.reqs = append(d.reqs, q)
	fa := f.get("firstAvailable")
	switch {
	case v == "v1alpha3":
		d.device(q, f, path, !misplaced)
	case v == "v1beta1" && fa == nil:
		d.device(q, f, path, !misplaced)
	case v == "v1beta1":
		for _, k := range draDeviceFields[:5] {
			if f.has(k) {
				d.r.errorf(f.knode[k], join(path, k), "put it in each firstAvailable entry", "%s cannot be used with firstAvailable", k)
			}
		}
		d.alternatives(q, fa, join(path, "firstAvailable"))
	case f.has("exactly") && fa != nil:
		d.r.errorf(f.knode["firstAvailable"], path, "keep one", "a request has exactly or firstAvailable, not both")
	case f.has("exactly"):
		ef := d.fields(f.get("exactly"), join(path, "exactly"), "inside `exactly`", draDeviceFields...)
		d.device(q, ef, join(path, "exactly"), true)
	case fa != nil:
		d.alternatives(q, fa, join(path, "firstAvailable"))
	case !misplaced:
		d.r.errorf(it, path, "write `exactly: {deviceClassName: gpu.nvidia.com}`", "request %q has neither exactly nor firstAvailable", q.name)
	}
}

// reqName reads and checks a request or subrequest name.
func (d *draDoc) reqName(f *fields, path string, seen map[string]*draReq) string {
	name, ok := d.r.str(f, "name")
	n := f.get("name")
	switch {
	case !ok:
		d.r.errorf(draOr(f.node, nil), join(path, "name"), "", "request has no name")
	case name == "":
	case len(name) > 63 || !draDNSLabel.MatchString(name):
		d.r.errorf(n, join(path, "name"), "lower-case letters, digits and '-', starting and ending alphanumeric, at most 63", "request name %q is not a DNS label", name)
	case seen[name] != nil:
		d.r.errorf(n, join(path, "name"), "request names must be unique in a claim", "request name %q is used twice (first at line %d)", name, seen[name].node.Line)
	}
	return name
}

// device reads a request's (or exactly's, or an alternative's) device
// fields into q. need says whether deviceClassName is required here.
func (d *draDoc) device(q *draReq, f *fields, path string, need bool) {
	if _, ok := d.r.str(f, "deviceClassName"); ok {
		q.class = d.class(f.get("deviceClassName"), join(path, "deviceClassName"))
	} else if need {
		d.r.errorf(draOr(f.node, nil), join(path, "deviceClassName"), "e.g. deviceClassName: gpu.nvidia.com (whole GPUs) or mig.nvidia.com", "request %q has no deviceClassName", q.name)
	}
	q.sels = d.selectors(f.get("selectors"), join(path, "selectors"))
	mode, _ := d.r.str(f, "allocationMode")
	switch mode {
	case "", "ExactCount":
	case "All":
		q.all = true
		d.r.warnf(f.get("allocationMode"), join(path, "allocationMode"), "use allocationMode ExactCount with a count",
			"allocationMode All takes every matching device on the node; gpuslice cannot know how many: planned as 1 device")
	default:
		d.r.errorf(f.get("allocationMode"), join(path, "allocationMode"), draDidYouMean(mode, []string{"ExactCount", "All"}), "unknown allocationMode %q", mode)
	}
	if n := f.get("count"); n != nil {
		c, ok := draInt(n)
		switch {
		case q.all:
			d.r.errorf(n, join(path, "count"), "drop count, or use allocationMode ExactCount", "count is only for allocationMode ExactCount")
		case !ok:
			d.r.errorf(n, join(path, "count"), "want a whole number of devices", "count %s is not a whole number", kindName(n))
		case c < 1:
			d.r.errorf(n, join(path, "count"), "want at least 1", "count %d: a request needs at least one device", c)
		case c > alloc.MaxDevicesPerClaim:
			d.r.errorf(n, join(path, "count"), fmt.Sprintf("at most %d devices per claim", alloc.MaxDevicesPerClaim), "count %d is more than a claim can take", c)
		default:
			q.count = int(c)
		}
	}
	if admin, ok := d.r.boolean(f, "adminAccess"); ok && admin {
		q.admin = true
		d.r.warnf(f.get("adminAccess"), join(path, "adminAccess"), "", "adminAccess sees devices in use without allocating them: request %q is left out of the plan", q.name)
	}
	for _, k := range []string{"tolerations", "capacity"} {
		if f.has(k) {
			d.r.warnf(f.knode[k], join(path, k), "", "%s is not read by gpuslice: ignored", k)
		}
	}
}

// alternatives reads firstAvailable: the first entry is planned.
func (d *draDoc) alternatives(q *draReq, n *yaml.Node, path string) {
	items := d.r.seq(n, path)
	if n != nil && len(items) == 0 {
		d.r.errorf(n, path, "", "firstAvailable is empty")
	}
	if len(items) > draMaxSubs {
		d.r.errorf(n, path, "", "%d alternatives; Kubernetes allows at most %d", len(items), draMaxSubs)
	}
	seen := map[string]*draReq{}
	for i, it := range items {
		p := index(path, i)
		sf := d.fields(it, p, "inside firstAvailable", "name", "deviceClassName", "selectors", "allocationMode", "count", "tolerations", "capacity")
		sub := &draReq{node: it, count: 1}
		sub.name = d.reqName(sf, p, seen)
		if sub.name != "" && seen[sub.name] == nil {
			seen[sub.name] = sub
		}
		d.device(sub, sf, p, true)
		q.subs = append(q.subs, sub.name)
		if i == 0 {
			q.class, q.sels, q.count, q.all, q.sub = sub.class, sub.sels, sub.count, sub.all, sub.name
		}
	}
	if len(items) > 1 {
		rest := make([]string, 0, len(q.subs)-1)
		for _, s := range q.subs[1:] {
			rest = append(rest, fmt.Sprintf("%q", s))
		}
		d.r.warnf(n, path, "", "firstAvailable lists %d alternatives; gpuslice plans the first, %q, and not %s", len(items), q.sub, strings.Join(rest, ", "))
	}
}

// class resolves a device class name.
func (d *draDoc) class(n *yaml.Node, path string) *draClass {
	if c := d.r.classes[n.Value]; c != nil {
		return c
	}
	if c := draBuiltinClasses[n.Value]; c != nil {
		if c.typ == "vfio" {
			d.r.warnf(n, path, "", "%s passes a whole GPU to a VM: planned as an exclusive whole GPU", c.name)
		}
		return c
	}
	names := []string{}
	for k := range draBuiltinClasses {
		names = append(names, k)
	}
	for k := range d.r.classes {
		names = append(names, k)
	}
	sort.Strings(names)
	d.r.errorf(n, path, draDidYouMean(n.Value, names)+" (or a DeviceClass defined in this file)", "unknown device class %q", n.Value)
	return nil
}

// selectors reads CEL selectors and compiles each.
func (d *draDoc) selectors(n *yaml.Node, path string) []string {
	items := d.r.seq(n, path)
	if len(items) > draMaxList {
		d.r.errorf(n, path, "", "%d selectors; Kubernetes allows at most %d", len(items), draMaxList)
	}
	var out []string
	for i, it := range items {
		p := index(path, i)
		cel := d.fields(it, p, "inside a selector", "cel").get("cel")
		if cel == nil {
			d.r.errorf(it, p, "write `- cel: {expression: \"...\"}`", "selector has no cel")
			continue
		}
		cf := d.fields(cel, join(p, "cel"), "inside `cel`", "expression")
		expr, ok := d.r.str(cf, "expression")
		en := cf.get("expression")
		switch {
		case !ok:
			d.r.errorf(cel, join(p, "cel.expression"), "", "cel has no expression")
		case len(expr) > draMaxCELBytes:
			d.r.errorf(en, join(p, "cel.expression"), "", "expression is %d bytes; Kubernetes allows %d", len(expr), draMaxCELBytes)
		case strings.TrimSpace(expr) == "":
			d.r.errorf(en, join(p, "cel.expression"), "", "expression is empty")
		default:
			if _, err := alloc.CompileSelector(expr); err != nil {
				d.r.errorf(en, join(p, "cel.expression"), "selectors see device.driver, device.attributes['gpu.nvidia.com'].<name> and device.capacity['gpu.nvidia.com'].memory (bytes)", "CEL: %v", err)
				continue
			}
			out = append(out, expr)
		}
	}
	return out
}

func draDidYouMean(got string, valid []string) string {
	hint := "valid: " + strings.Join(valid, ", ")
	if s := catalog.Suggest(got, valid); s != "" {
		hint = fmt.Sprintf(`did you mean "%s"? %s`, s, hint)
	}
	return hint
}
