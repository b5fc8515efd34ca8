package spec

import (
	"bytes"
	"fmt"
	"regexp"
	"strings"

	"gopkg.in/yaml.v3"

	"github.com/gpuslice/gpuslice/internal/alloc"
	"github.com/gpuslice/gpuslice/internal/catalog"
)

// ReadDRA reads Kubernetes Dynamic Resource Allocation objects —
// ResourceClaim, ResourceClaimTemplate and DeviceClass in
// resource.k8s.io/v1alpha3, v1beta1, v1beta2 and v1, with NVIDIA's
// GpuConfig/MigDeviceConfig as opaque config — into workloads. Other kinds
// are skipped with a warning; a Pod's spec.resourceClaims is read to count
// the claims each template makes. The Spec holds every claim read, also
// when there are errors; the Diagnostics say what is wrong.
//
// Mapping (see also dra_request.go and dra_config.go):
//
//   - Each ResourceClaim or ResourceClaimTemplate is one Workload: Name is
//     metadata.name, Tenant metadata.namespace or "default". A ResourceClaim
//     is one claim however many pods share it (the "shared-gpu" pattern):
//     Replicas 1. A template makes one claim per Pod reference, so Replicas
//     is the number of spec.resourceClaims entries naming it in the Pods
//     of the same file and namespace (1 when none).
//   - Each DRA request is one alloc.Request with the DRA name; Count is
//     count (ExactCount, default 1). allocationMode All cannot be sized
//     without the node: it is planned as 1 device, with a warning.
//     adminAccess requests allocate nothing (they watch devices in use)
//     and are left out, with a warning. Of firstAvailable's alternatives
//     the first (the preferred) is planned, with a warning naming the rest.
//   - Devices of a DRA claim are node-local, so all sit on the pod's node:
//     a claim with more than one device gets Constraint{Match: "node"} over
//     all its requests, unless a constraint over all of them (parentUUID,
//     requests: []) already pins them to one GPU or node.
//   - constraints[].matchAttribute gpu.nvidia.com/parentUUID is
//     Constraint{Match: "gpu"}; gpu.nvidia.com/driverVersion and
//     cudaDriverVersion are the same for every device of a node, so they
//     are Match "node". Any other attribute (productName, pcieRoot, ...)
//     cannot be expressed: a warning, not applied. requests: [] is all.
//
// Misplaced pieces (config or constraints at the wrong depth, parameters
// beside opaque instead of under it, sharing beside parameters, ...) are
// not applied: a warning names the line, what DRA expects and the fix,
// and the piece is still checked so every invalid value is reported.
func ReadDRA(file string, data []byte) (*Spec, Diagnostics) {
	r := &draReader{walker: walker{file: file}, classes: map[string]*draClass{}, refs: map[string]int{}}
	spec := &Spec{Sources: []string{file}}
	var claims []*draObj
	for _, root := range r.parseDocs(r.docEnds(data)) {
		o := r.header(root)
		switch {
		case o == nil:
		case o.kind == "DeviceClass":
			r.deviceClass(o)
		case o.kind == "Pod":
			r.pod(o)
		default:
			claims = append(claims, o)
		}
	}
	seen := map[string]*draObj{}
	for _, o := range claims {
		wl := r.claim(o)
		key := wl.Tenant + "/" + wl.Name
		if prev := seen[key]; prev != nil && wl.Name != "" {
			r.errorf(o.nameNode, "metadata.name", "rename one: gpuslice names the workload after the claim",
				"workload %q (namespace %s) is defined twice: %s at line %d and %s at line %d", wl.Name, wl.Tenant, prev.kind, prev.root.Line, o.kind, o.root.Line)
		}
		seen[key] = o
		if o.kind == "ResourceClaimTemplate" && r.refs[key] > 0 {
			wl.Replicas = r.refs[key]
		}
		spec.Workloads = append(spec.Workloads, *wl)
	}
	r.diags.Sort()
	return spec, r.diags
}

// DRA API groups, versions and kinds.
var (
	draVersions   = []string{"v1alpha3", "v1beta1", "v1beta2", "v1"}
	draKinds      = []string{"ResourceClaim", "ResourceClaimTemplate", "DeviceClass"}
	draOtherKinds = []string{"ResourceSlice", "DeviceTaintRule", "ResourceClaimList", "ResourceClaimTemplateList"}
)

// draAPIVersions lists the valid apiVersions for the hint.
func draAPIVersions() []string {
	out := make([]string, len(draVersions))
	for i, v := range draVersions {
		out[i] = "resource.k8s.io/" + v
	}
	return out
}

type draReader struct {
	walker
	classes map[string]*draClass
	// refs counts Pod references to templates by namespace/name.
	refs map[string]int
	// noted marks config nodes already warned about (not-carried limits),
	// so a config shared by several requests warns once.
	noted map[*yaml.Node]bool
}

// draObj is one DRA object's header.
type draObj struct {
	root, kindNode, nameNode *yaml.Node
	version, kind            string
}

// docEnds turns a document end marker ("...") that is followed by another
// document into a start marker ("---", same length, so positions hold):
// YAML allows a bare document after "...", the YAML library does not. The
// slides separate objects this way; kubectl splits on "---" only, so it
// is a warning.
func (r *draReader) docEnds(data []byte) []byte {
	lines := bytes.SplitAfter(data, []byte("\n"))
	var out []byte
	for i, l := range lines {
		t := bytes.TrimRight(l, " \t\r\n")
		if bytes.Equal(t, []byte("...")) && draMoreAfter(lines[i+1:]) {
			r.warnf(&yaml.Node{Line: i + 1, Column: 1}, "", "write --- between objects",
				"`...` at line %d ends a document and another follows without `---`; read as a new document, but kubectl splits documents on `---` only", i+1)
			l = append([]byte("---"), l[3:]...)
		}
		out = append(out, l...)
	}
	return out
}

func draMoreAfter(lines [][]byte) bool {
	for _, l := range lines {
		t := bytes.TrimSpace(l)
		if len(t) == 0 || t[0] == '#' {
			continue
		}
		return !bytes.HasPrefix(t, []byte("---"))
	}
	return false
}

// header reads apiVersion and kind; it returns nil for objects that are
// not read (after a diagnostic).
func (r *draReader) header(root *yaml.Node) *draObj {
	if root.Kind != yaml.MappingNode {
		r.errorf(root, "", "each document is one Kubernetes object", "want an object (apiVersion, kind, metadata, spec), found %s", kindName(root))
		return nil
	}
	av, avNode := draScalar(root, "apiVersion")
	kind, kindNode := draScalar(root, "kind")
	valid := "valid: " + strings.Join(draAPIVersions(), ", ")
	if avNode == nil || kindNode == nil {
		missing := "apiVersion"
		if avNode != nil {
			missing = "kind"
		} else if kindNode == nil {
			missing = "apiVersion and kind"
		}
		r.errorf(root, "", valid+"; kinds: "+strings.Join(draKinds, ", "), "object has no %s", missing)
		return nil
	}
	group, version, _ := strings.Cut(av, "/")
	isDRA := contains(draKinds, kind)
	if group != "resource.k8s.io" {
		switch {
		case isDRA:
			r.errorf(avNode, "apiVersion", valid, "%s is in API group resource.k8s.io, not %q", kind, av)
		case kind == "Pod" && av == "v1":
			r.warnf(kindNode, "kind", "", "a Pod is not a DRA object: only its spec.resourceClaims is read, to count the claims each ResourceClaimTemplate makes")
			return &draObj{root: root, kindNode: kindNode, kind: kind, version: av}
		default:
			hint := ""
			if s := catalog.Suggest(av, draAPIVersions()); s != "" && strings.HasPrefix(av, "resource") {
				hint = fmt.Sprintf(`did you mean "%s"? %s`, s, valid)
			}
			r.warnf(kindNode, "kind", hint, "%s (%s) is not a DRA object: skipped", kind, av)
		}
		return nil
	}
	if !contains(draVersions, version) {
		hint := valid
		if s := catalog.Suggest(av, draAPIVersions()); s != "" {
			hint = fmt.Sprintf(`did you mean "%s"? %s`, s, valid)
		}
		msg := "apiVersion %q is not a DRA version gpuslice reads"
		if version == "v1alpha2" {
			msg += " (v1alpha2 is classic DRA with ResourceClass, removed in Kubernetes 1.31)"
		}
		r.errorf(avNode, "apiVersion", hint, msg, av)
		return nil
	}
	if contains(draOtherKinds, kind) {
		r.warnf(kindNode, "kind", "", "%s is not read: gpuslice plans from claims, not from published devices", kind)
		return nil
	}
	if !isDRA {
		hint := "valid: " + strings.Join(draKinds, ", ")
		if s := catalog.Suggest(kind, draKinds); s != "" {
			hint = fmt.Sprintf(`did you mean "%s"? %s`, s, hint)
		}
		r.errorf(kindNode, "kind", hint, "unknown kind %q", kind)
		return nil
	}
	return &draObj{root: root, kindNode: kindNode, kind: kind, version: version}
}

// draScalar finds key in a mapping without recording anything.
func draScalar(n *yaml.Node, key string) (string, *yaml.Node) {
	if n == nil || n.Kind != yaml.MappingNode {
		return "", nil
	}
	for i := 0; i+1 < len(n.Content); i += 2 {
		if n.Content[i].Value == key {
			v := n.Content[i+1]
			if v.Kind != yaml.ScalarNode {
				return "", v
			}
			return v.Value, v
		}
	}
	return "", nil
}

// metadata reads metadata: the name is required.
func (d *draDoc) metadata(n *yaml.Node) (name, ns string, nameNode *yaml.Node) {
	f := d.fields(n, "metadata", "inside `metadata`", "name", "namespace", "generateName", "labels", "annotations",
		"uid", "resourceVersion", "generation", "creationTimestamp", "deletionTimestamp", "deletionGracePeriodSeconds",
		"ownerReferences", "finalizers", "managedFields", "selfLink")
	name, _ = d.r.str(f, "name")
	ns, _ = d.r.str(f, "namespace")
	nameNode = f.get("name")
	if name == "" && !f.has("name") {
		hint := "gpuslice names the workload after the object"
		if f.has("generateName") {
			hint = "generateName is not enough: " + hint
		}
		d.r.errorf(draOr(n, d.obj.root), "metadata.name", hint, "%s has no metadata.name", d.obj.kind)
	}
	if ns == "" {
		ns = "default"
	}
	return name, ns, nameNode
}

func draOr(a, b *yaml.Node) *yaml.Node {
	if a != nil {
		return a
	}
	return b
}

// draDNSLabel is a Kubernetes DNS label (request and subrequest names).
var draDNSLabel = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`)

// pod counts a Pod's template references. A resourceClaims list beside
// spec (the slides' indentation) is not counted, with a warning.
func (r *draReader) pod(o *draObj) {
	_, nsNode := draScalar(draChild(o.root, "metadata"), "namespace")
	ns := "default"
	if nsNode != nil && nsNode.Value != "" {
		ns = nsNode.Value
	}
	for i := 0; i+1 < len(o.root.Content); i += 2 {
		if k := o.root.Content[i]; k.Value == "resourceClaims" {
			r.warnf(k, "resourceClaims", "indent it under spec",
				"`resourceClaims` at line %d column %d is a sibling of `spec`; Kubernetes reads `spec.resourceClaims` — not counted", k.Line, k.Column)
		}
	}
	items := draChild(draChild(o.root, "spec"), "resourceClaims")
	if items == nil || items.Kind != yaml.SequenceNode {
		return
	}
	for _, it := range items.Content {
		if t, _ := draScalar(it, "resourceClaimTemplateName"); t != "" {
			r.refs[ns+"/"+t]++
		}
	}
}

func draChild(n *yaml.Node, key string) *yaml.Node {
	if n == nil || n.Kind != yaml.MappingNode {
		return nil
	}
	for i := 0; i+1 < len(n.Content); i += 2 {
		if n.Content[i].Value == key {
			return n.Content[i+1]
		}
	}
	return nil
}

// draDoc is the state of one claim or template while it is read.
type draDoc struct {
	r       *draReader
	obj     *draObj
	devPath string // "spec.devices" or "spec.spec.devices"
	reqs    []*draReq
	byName  map[string]*draReq
	// later runs after the requests are known: checks of misplaced
	// pieces found before them.
	later []func()
	ready bool
	// strayOpaque is a misplaced opaque, for the hint of an entry without one.
	strayOpaque *yaml.Node
	cons        []alloc.Constraint
}

// claim reads a ResourceClaim or ResourceClaimTemplate into a workload.
func (r *draReader) claim(o *draObj) *Workload {
	d := &draDoc{r: r, obj: o, devPath: "spec.devices", byName: map[string]*draReq{}}
	if o.kind == "ResourceClaimTemplate" {
		d.devPath = "spec.spec.devices"
	}
	f := d.fields(o.root, "", "at the top level of the "+o.kind, "apiVersion", "kind", "metadata", "spec", "status")
	name, ns, nameNode := d.metadata(f.get("metadata"))
	o.nameNode = draOr(nameNode, o.root)
	wl := &Workload{Name: name, Tenant: ns, Replicas: 1, Requests: []alloc.Request{}, Where: r.pos(o.root)}
	spec := f.get("spec")
	if spec == nil {
		r.errorf(o.root, "spec", "", "%s has no spec", o.kind)
		return wl
	}
	var sf *fields
	if o.kind == "ResourceClaimTemplate" {
		sf = d.fields(spec, "spec", "inside `spec`", "metadata", "spec")
		inner := sf.get("spec")
		if inner == nil {
			r.errorf(spec, "spec.spec", "a template's claim spec sits under spec.spec", "%s has no spec.spec", o.kind)
			return wl
		}
		sf = d.fields(inner, "spec.spec", "inside `spec.spec`", "devices")
	} else {
		sf = d.fields(spec, "spec", "inside `spec`", "devices")
	}
	dev := sf.get("devices")
	if dev == nil {
		r.errorf(draOr(sf.node, spec), join(sf.path, "devices"), "", "the claim has no devices: nothing to allocate")
	}
	df := d.fields(dev, d.devPath, "inside `"+d.devPath+"`", "requests", "constraints", "config")
	d.requests(df.get("requests"), join(d.devPath, "requests"))
	for _, fn := range d.later {
		fn()
	}
	d.constraints(df.get("constraints"), join(d.devPath, "constraints"), true)
	entries := d.configs(df.get("config"), join(d.devPath, "config"), false)
	d.apply(entries, false)
	wl.Requests, wl.Constraints = d.build()
	return wl
}
