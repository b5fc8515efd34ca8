package spec

import (
	"fmt"
	"strings"

	"gopkg.in/yaml.v3"
)

// Misplaced pieces. The slides this reader was first written against put
// config, opaque, parameters, sharing and constraints at the wrong depth.
// Kubernetes would reject such an object or, for pieces a driver reads,
// ignore them; gpuslice does not move them where they probably belong
// (that would be a guess). Each misplaced key is a warning that says where
// it is, where DRA or NVIDIA's driver reads it and how to fix it; the
// piece is not applied, and its content is still checked so that every
// invalid value is an error now, not after the indentation is fixed.

// fields reads a mapping like walker.mapping, except that keys DRA reads
// elsewhere (see draStrayRule) are warnings, checked but not applied.
// where says where the mapping is, for the message ("inside `spec`").
func (d *draDoc) fields(n *yaml.Node, path, where string, allowed ...string) *fields {
	if n != nil && n.Kind == yaml.AliasNode && n.Alias != nil {
		n = n.Alias
	}
	if n == nil || n.Kind != yaml.MappingNode {
		return d.r.mapping(n, path, allowed...)
	}
	kept := make([]*yaml.Node, 0, len(n.Content))
	var strays []*yaml.Node
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		if _, _, _, ok := d.strayRule(k.Value, n); ok && !contains(allowed, k.Value) {
			strays = append(strays, k, v)
			continue
		}
		kept = append(kept, k, v)
	}
	cp := *n
	cp.Content = kept
	f := d.r.mapping(&cp, path, allowed...)
	f.node = n
	for i := 0; i+1 < len(strays); i += 2 {
		d.stray(n, strays[i], strays[i+1], path, where)
	}
	return f
}

// strayRule says, for a key DRA reads at one place only, the key it
// belongs under (for "a sibling of `opaque`"), where DRA reads it, and
// where to move it when that parent is not beside it.
func (d *draDoc) strayRule(key string, in *yaml.Node) (parent, home, dest string, ok bool) {
	dev := d.devPath
	switch key {
	case "config", "constraints":
		if d.obj.kind == "DeviceClass" {
			return "", "", "", false
		}
		return "devices", fmt.Sprintf("DRA reads `%s.%s`", dev, key), dev + "." + key, true
	case "opaque":
		return "config", fmt.Sprintf("DRA reads `opaque` inside an entry of `%s.config`", dev), "an entry of " + dev + ".config", true
	case "driver":
		return "opaque", "DRA reads `opaque.driver`", "opaque", true
	case "parameters":
		return "opaque", "NVIDIA's config must sit under `opaque.parameters`", "opaque", true
	case "sharing":
		return "parameters", "NVIDIA's GpuConfig/MigDeviceConfig reads `opaque.parameters.sharing`", "opaque.parameters", true
	case "strategy", "timeSlicingConfig", "mpsConfig":
		return "sharing", fmt.Sprintf("NVIDIA's config reads `parameters.sharing.%s`", key), "parameters.sharing", true
	case "apiVersion", "kind":
		return "parameters", fmt.Sprintf("NVIDIA's config reads `opaque.parameters.%s`", key), "opaque.parameters", true
	case "deviceClassName", "selectors", "allocationMode", "count", "adminAccess":
		at := dev + ".requests[]"
		if d.obj.version == "v1beta2" || d.obj.version == "v1" {
			at += ".exactly"
		}
		return "", fmt.Sprintf("DRA reads `%s` in a request (`%s`)", key, at), "a request (" + at + ")", true
	}
	return "", "", "", false
}

// stray reports a misplaced key and checks its content.
func (d *draDoc) stray(in, k, v *yaml.Node, path, where string) {
	parent, home, dest, _ := d.strayRule(k.Value, in)
	rel := "is " + where
	fix := "move it into " + dest
	switch {
	case parent != "" && draChild(in, parent) != nil:
		rel = fmt.Sprintf("is a sibling of `%s`", parent)
		fix = "indent it under " + parent
		if parent == "config" {
			fix = "indent it into the entry under config (`- requests: [...]`)"
		}
	case parent == "":
		reqs := draChild(in, "requests")
		if reqs == nil {
			reqs = draChild(draChild(in, "devices"), "requests")
		}
		if reqs != nil && reqs.Kind == yaml.SequenceNode && len(reqs.Content) > 0 {
			last := reqs.Content[len(reqs.Content)-1]
			fix = fmt.Sprintf("indent it under the request at line %d", last.Line)
		}
	}
	if k.Value == "opaque" {
		d.strayOpaque = k
	}
	d.r.warnf(k, join(path, k.Value), fix, "`%s` at line %d column %d %s; %s — not applied", k.Value, k.Line, k.Column, rel, home)
	d.whenReady(func() { d.check(k.Value, v, join(path, k.Value)) })
}

// whenReady runs fn once the claim's requests are known.
func (d *draDoc) whenReady(fn func()) {
	if d.ready {
		fn()
		return
	}
	d.later = append(d.later, fn)
}

// check validates a piece that is not applied, by what it is.
func (d *draDoc) check(key string, v *yaml.Node, path string) {
	switch key {
	case "config":
		d.configs(v, path, true)
	case "constraints":
		d.constraints(v, path, false)
	case "opaque":
		d.opaque(v, path, true)
	case "driver":
		d.driver(v, path)
	case "parameters":
		d.params(v, path, true)
	case "sharing":
		d.sharing(v, path, "", &draNV{})
	case "strategy":
		d.strategy(v, path)
	case "timeSlicingConfig":
		d.timeSlicing(v, path, &draNV{})
	case "mpsConfig":
		d.mps(v, path, &draNV{})
	case "apiVersion":
		d.paramsAPIVersion(v, path)
	case "kind":
		d.paramsKind(v, path)
	case "deviceClassName":
		if v.Kind == yaml.ScalarNode {
			d.class(v, path)
		}
	case "selectors":
		d.selectors(v, path)
	case "allocationMode", "count", "adminAccess":
		q := &draReq{}
		m := &yaml.Node{Kind: yaml.MappingNode, Content: []*yaml.Node{{Kind: yaml.ScalarNode, Value: key}, v}}
		d.device(q, d.r.mapping(m, strings.TrimSuffix(path, "."+key), key), path, false)
	}
}

// moved reports keys that this apiVersion puts elsewhere (request fields
// directly on a v1 request; exactly on a v1beta1 request) as errors,
// checks them, and returns the mapping without them.
func (d *draDoc) moved(n *yaml.Node, path string, keys []string, msg, hint string) (*yaml.Node, bool) {
	if n == nil || n.Kind != yaml.MappingNode {
		return n, false
	}
	cp := *n
	cp.Content = nil
	found := false
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		if !contains(keys, k.Value) {
			cp.Content = append(cp.Content, k, v)
			continue
		}
		found = true
		d.r.errorf(k, join(path, k.Value), hint, "`%s` at line %d column %d: %s", k.Value, k.Line, k.Column, msg)
		if k.Value == "exactly" {
			ef := d.fields(v, join(path, "exactly"), "inside `exactly`", draDeviceFields...)
			d.whenReady(func() { d.device(&draReq{}, ef, join(path, "exactly"), false) })
			continue
		}
		d.whenReady(func() { d.check(k.Value, v, join(path, k.Value)) })
	}
	return &cp, found
}
