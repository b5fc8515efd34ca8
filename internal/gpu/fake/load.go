package fake

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"

	"gopkg.in/yaml.v3"

	"github.com/gpuslice/gpuslice/internal/catalog"
	"github.com/gpuslice/gpuslice/internal/gpu"
	"github.com/gpuslice/gpuslice/internal/mig"
)

// maxSpecBytes bounds the size of a machine spec file.
const maxSpecBytes = 1 << 20

// SpecError is one problem in a machine spec file, with where it is.
type SpecError struct {
	File string
	// Line and Column are 1-based; 0 when unknown.
	Line, Column int
	// Path names the entry, e.g. "gpus[1].instances[2]".
	Path string
	Msg  string
	// Err is the underlying error, such as a *catalog.NotFoundError for an
	// unknown model; nil when there is none.
	Err error
}

func (e *SpecError) Error() string {
	var b strings.Builder
	switch {
	case e.File != "" && e.Line > 0:
		fmt.Fprintf(&b, "%s:%d:%d: ", e.File, e.Line, e.Column)
	case e.File != "":
		b.WriteString(e.File + ": ")
	case e.Line > 0:
		fmt.Fprintf(&b, "line %d: ", e.Line)
	}
	if e.Path != "" {
		b.WriteString(e.Path + ": ")
	}
	b.WriteString(e.Msg)
	return b.String()
}

func (e *SpecError) Unwrap() error { return e.Err }

// LoadSpec reads a machine spec from YAML; file names it in errors:
//
//	driverVersion: "580.00-sim"   # optional
//	gpus:
//	  - model: A100-40GB          # catalog id or NVML name; required
//	    count: 4                  # 1..MaxGPUs, default 1
//	    mig: true                 # default false
//	    instances: [3g.20gb@0, 2g.10gb@4, 1g.5gb]   # or "3g.20gb@0,2g.10gb@4"
//	    healthy: true             # default true
//
// Unknown keys, wrong types, unknown models (a *catalog.NotFoundError with
// the valid names), MIG on a model without it and instances that break the
// model's placement rules are all reported, joined, each as a *SpecError
// with its line. A spec LoadSpec accepts always builds with New.
func LoadSpec(file string, data []byte) (spec MachineSpec, err error) {
	defer func() {
		if r := recover(); r != nil {
			spec, err = MachineSpec{}, &SpecError{File: file, Msg: fmt.Sprintf("cannot parse: %v", r)}
		}
	}()
	if len(data) > maxSpecBytes {
		return MachineSpec{}, &SpecError{File: file, Msg: fmt.Sprintf("%d bytes; a machine spec is at most %d", len(data), maxSpecBytes)}
	}
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var doc yaml.Node
	if err := dec.Decode(&doc); err != nil {
		if errors.Is(err, io.EOF) {
			return MachineSpec{}, &SpecError{File: file, Msg: "empty machine spec; want gpus: [{model: ..., count: ...}]"}
		}
		return MachineSpec{}, &SpecError{File: file, Msg: strings.TrimPrefix(err.Error(), "yaml: "), Err: err}
	}
	var extra yaml.Node
	if err := dec.Decode(&extra); !errors.Is(err, io.EOF) {
		return MachineSpec{}, &SpecError{File: file, Line: extra.Line, Column: extra.Column,
			Msg: "more than one YAML document"}
	}
	l := &loader{file: file}
	spec = l.machine(&doc)
	if len(l.errs) > 0 {
		return MachineSpec{}, errors.Join(l.errs...)
	}
	return spec, nil
}

// loader walks a spec's YAML nodes and collects every problem.
type loader struct {
	file  string
	errs  []error
	total int // GPUs so far, counts expanded
}

func (l *loader) fail(n *yaml.Node, path string, err error, format string, args ...any) {
	e := &SpecError{File: l.file, Path: path, Msg: fmt.Sprintf(format, args...), Err: err}
	if n != nil {
		e.Line, e.Column = n.Line, n.Column
	}
	l.errs = append(l.errs, e)
}

func (l *loader) machine(doc *yaml.Node) MachineSpec {
	var spec MachineSpec
	root := doc
	if doc.Kind == yaml.DocumentNode && len(doc.Content) > 0 {
		root = doc.Content[0]
	}
	if (root.Kind == yaml.ScalarNode && root.ShortTag() == "!!null") || root.Kind == yaml.DocumentNode {
		l.fail(root, "", nil, "empty machine spec; want gpus: [{model: ..., count: ...}]")
		return spec
	}
	var gpus *yaml.Node
	l.mapping(root, "", []string{"driverVersion", "gpus"}, func(key string, v *yaml.Node) {
		switch key {
		case "driverVersion":
			spec.DriverVersion, _ = l.str(v, key)
		case "gpus":
			gpus = v
		}
	})
	if gpus == nil {
		if root.Kind == yaml.MappingNode {
			l.fail(root, "", nil, "no gpus; want gpus: [{model: ..., count: ...}]")
		}
		return spec
	}
	if !l.kind(gpus, "gpus", yaml.SequenceNode, "a list of GPUs") {
		return spec
	}
	if len(gpus.Content) == 0 {
		l.fail(gpus, "gpus", nil, "empty; a machine needs at least one GPU")
	}
	for i, item := range gpus.Content {
		spec.GPUs = append(spec.GPUs, l.gpu(item, fmt.Sprintf("gpus[%d]", i))...)
	}
	return spec
}

// gpu reads one entry of gpus and returns it expanded by its count.
func (l *loader) gpu(n *yaml.Node, path string) []GPUSpec {
	var (
		s                        GPUSpec
		count                    = 1
		modelN, migN, instancesN *yaml.Node
		items                    []*yaml.Node // the node of each instance
	)
	before := len(l.errs)
	l.mapping(n, path, []string{"count", "healthy", "instances", "mig", "model"}, func(key string, v *yaml.Node) {
		p := path + "." + key
		switch key {
		case "model":
			modelN = v
			s.Model, _ = l.str(v, p)
		case "count":
			if c, good := l.int(v, p); good {
				if c < 1 || c > MaxGPUs {
					l.fail(v, p, nil, "%d; want 1..%d", c, MaxGPUs)
				} else {
					count = c
				}
			}
		case "mig":
			migN = v
			s.MIGEnabled, _ = l.bool(v, p)
		case "healthy":
			if h, good := l.bool(v, p); good {
				s.Healthy = &h
			}
		case "instances":
			instancesN = v
			s.Instances, items = l.instances(v, p)
		}
	})
	if n.Kind != yaml.MappingNode {
		return nil
	}
	if modelN == nil {
		l.fail(n, path, nil, "no model; want e.g. model: A100-40GB")
	}
	ok := len(l.errs) == before
	if l.total += count; l.total > MaxGPUs && l.total-count <= MaxGPUs {
		l.fail(n, path, nil, "the machine has %d GPUs so far; at most %d are allowed", l.total, MaxGPUs)
	}
	if !ok {
		return nil
	}
	model, _, err := resolveModel(s.Model)
	if err != nil {
		l.fail(modelN, path+".model", err, "%v", err)
		return nil
	}
	var geo *mig.Geometry
	if model.MIG != nil {
		if geo, err = mig.New(model); err != nil {
			l.fail(modelN, path+".model", err, "%v", err)
			return nil
		}
	}
	switch {
	case s.MIGEnabled && geo == nil:
		l.fail(migN, path+".mig", gpu.ErrNoMIG, "%s does not support MIG; MIG-capable models: %s",
			model.ID, strings.Join(migModels(), ", "))
		return nil
	case len(s.Instances) > 0 && !s.MIGEnabled:
		l.fail(instancesN, path+".instances", nil, "instances need mig: true")
		return nil
	case len(s.Instances) > 0:
		if _, err := layoutOf(geo, s.Instances); err != nil {
			var ie *itemError
			if errors.As(err, &ie) {
				l.fail(items[ie.item], fmt.Sprintf("%s.instances[%d]", path, ie.item), ie.err,
					"%s: %v", s.Instances[ie.item], ie.err)
			} else {
				l.fail(instancesN, path+".instances", err, "%v", err)
			}
			return nil
		}
	}
	out := make([]GPUSpec, count)
	for i := range out {
		out[i] = s
		out[i].Instances = slices.Clone(s.Instances)
	}
	return out
}

// instances reads a list of "PROFILE@START" items, or one string of them
// separated by commas.
func (l *loader) instances(v *yaml.Node, path string) ([]string, []*yaml.Node) {
	var items []string
	var nodes []*yaml.Node
	switch {
	case v.Kind == yaml.ScalarNode && v.ShortTag() == "!!str":
		for _, it := range strings.Split(v.Value, ",") {
			if it = strings.TrimSpace(it); it != "" {
				items, nodes = append(items, it), append(nodes, v)
			}
		}
	case v.Kind == yaml.ScalarNode && v.ShortTag() == "!!null":
	case l.kind(v, path, yaml.SequenceNode, `a list such as [3g.20gb@0, 2g.10gb@4]`):
		for i, it := range v.Content {
			if s, ok := l.str(it, fmt.Sprintf("%s[%d]", path, i)); ok {
				items, nodes = append(items, strings.TrimSpace(s)), append(nodes, it)
			}
		}
	}
	return items, nodes
}

// mapping calls fn for each key of a mapping node, reporting keys that are
// not in allowed (sorted) or that repeat.
func (l *loader) mapping(n *yaml.Node, path string, allowed []string, fn func(key string, v *yaml.Node)) {
	if !l.kind(n, path, yaml.MappingNode, "a mapping") {
		return
	}
	seen := map[string]bool{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		if k.Kind != yaml.ScalarNode {
			l.fail(k, path, nil, "keys must be plain names")
			continue
		}
		key := k.Value
		if !slices.Contains(allowed, key) {
			msg := fmt.Sprintf("unknown key %q", key)
			if s := catalog.Suggest(key, allowed); s != "" {
				msg += fmt.Sprintf("; did you mean %q?", s)
			}
			l.fail(k, path, nil, "%s; valid keys: %s", msg, strings.Join(allowed, ", "))
			continue
		}
		if seen[key] {
			l.fail(k, path, nil, "key %q appears twice", key)
			continue
		}
		seen[key] = true
		if v.Kind == yaml.AliasNode {
			l.fail(v, join(path, key), nil, "aliases are not supported")
			continue
		}
		fn(key, v)
	}
}

func join(path, key string) string {
	if path == "" {
		return key
	}
	return path + "." + key
}

var kindNames = map[yaml.Kind]string{
	yaml.DocumentNode: "a document", yaml.SequenceNode: "a list",
	yaml.MappingNode: "a mapping", yaml.ScalarNode: "a value", yaml.AliasNode: "an alias",
}

// kind checks a node's kind.
func (l *loader) kind(n *yaml.Node, path string, want yaml.Kind, what string) bool {
	if n.Kind == want {
		return true
	}
	got := kindNames[n.Kind]
	if n.Kind == yaml.ScalarNode && n.ShortTag() == "!!null" {
		got = "nothing"
	} else if n.Kind == yaml.ScalarNode {
		got = fmt.Sprintf("%q", n.Value)
	}
	l.fail(n, path, nil, "want %s, got %s", what, got)
	return false
}

// str reads a scalar as text (numbers included: driverVersion: 580.65).
func (l *loader) str(n *yaml.Node, path string) (string, bool) {
	if n.Kind != yaml.ScalarNode || n.ShortTag() == "!!null" || strings.TrimSpace(n.Value) == "" {
		l.fail(n, path, nil, "want a non-empty string, got %s", describe(n))
		return "", false
	}
	return n.Value, true
}

func (l *loader) int(n *yaml.Node, path string) (int, bool) {
	var v int
	if n.Kind != yaml.ScalarNode || n.ShortTag() != "!!int" || n.Decode(&v) != nil {
		l.fail(n, path, nil, "want a whole number, got %s", describe(n))
		return 0, false
	}
	return v, true
}

func (l *loader) bool(n *yaml.Node, path string) (bool, bool) {
	var v bool
	if n.Kind != yaml.ScalarNode || n.ShortTag() != "!!bool" || n.Decode(&v) != nil {
		l.fail(n, path, nil, "want true or false, got %s", describe(n))
		return false, false
	}
	return v, true
}

func describe(n *yaml.Node) string {
	if n.Kind == yaml.ScalarNode && n.ShortTag() != "!!null" {
		return fmt.Sprintf("%q", n.Value)
	}
	if n.Kind == yaml.ScalarNode {
		return "nothing"
	}
	return kindNames[n.Kind]
}

// migModels lists the catalog's MIG-capable models.
func migModels() []string {
	var out []string
	for _, g := range catalog.Default().GPUs() {
		if g.MIG != nil {
			out = append(out, g.ID)
		}
	}
	return out
}
