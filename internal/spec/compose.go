package spec

import (
	"context"
	"fmt"
	"regexp"
	"sort"
	"strconv"
	"strings"

	"github.com/compose-spec/compose-go/v2/loader"
	"github.com/compose-spec/compose-go/v2/types"
	"gopkg.in/yaml.v3"
)

// ReadCompose reads a Docker Compose file with Omnistrate's GPU slicing
// extensions into a Spec. It returns the Spec (partial when Diagnostics hold
// errors) and every problem found, each with file:line:column.
//
// The file is loaded by compose-go the way docker compose loads it, from
// data only: interpolation sees an empty environment (so ${VAR:-default}
// takes its default), env_file and label_file are not read, include is not
// followed and extends.file is refused. Kubernetes-style CPU counts in
// deploy.resources ("100m", as Omnistrate accepts) are read as 0.1 CPU.
// The same bytes are walked with yaml.v3 to place every diagnostic.
//
// Extensions read:
//
//	x-omnistrate-service-plan: {name, tenancyType}
//	x-internal-integrations.multiTenantGpu: {instanceType, timeSlicingReplicas, migProfile}
//	services.*.x-omnistrate-capabilities: {autoscaling: {...}, serverlessConfiguration: {...}}
//	services.*.x-internal-integrations.multiTenantGpu: a pool for that service only
//	x-gpuslice, services.*.x-gpuslice: gpuslice's own settings (see below)
//
// Each multiTenantGpu becomes a Pool: named after the plan (slug) or
// "default"; a service-level one is named "<pool>-<service>" and wins over
// the top-level one for its service. timeSlicingReplicas alone time-slices
// whole GPUs; migProfile alone partitions every GPU into as many instances
// of the profile as fit; both together time-slice each MIG instance.
//
// x-gpuslice (top level: defaults for every service; per service: overrides
// key by key) takes:
//
//	tenant            tenant name (default: the plan name's slug, else "default")
//	isolation         none | tenant | hardware
//	mode              auto | exclusive | timeslice | mps | mig; at the top
//	                  level (or beside a service-level multiTenantGpu),
//	                  mode mps runs the pool's devices under MPS with
//	                  timeSlicingReplicas clients each
//	memory            GPU memory per replica: "10GiB", "512MiB", "8G" or whole MiB
//	compute           percent of a GPU's SMs, 1..100
//	workload          inference | interactive | batch | training
//	latencySensitive  true | false
//	priority          whole number
//	mps               {activeThreadPercent: 1..100, pinnedMemory: size}
//	replicas          replica count, overriding autoscaling and deploy.replicas
//	metric            what a service of it scales on (gpuslice services put):
//	                  gpu (or compute; the default), memory, requests
//	targetConcurrency requests in flight per replica that count as 100%
//	                  for metric requests (1..10000; default 10)
//
// Every service becomes a Workload when a top-level pool exists; otherwise
// only services with GPU settings (x-gpuslice, a service-level
// multiTenantGpu, a compose GPU device reservation or gpus:) do.
func ReadCompose(file string, data []byte) (*Spec, Diagnostics) {
	w := &walker{file: file}
	s := &Spec{Sources: []string{file}}
	docs := w.parseDocs(data)
	switch {
	case len(w.diags) > 0:
		return s, w.diags
	case len(docs) == 0:
		w.errorf(nil, "", "start with services:", "the compose file is empty")
		return s, w.diags
	case len(docs) > 1:
		w.errorf(docs[1], "", "keep one YAML document per compose file", "%d YAML documents; compose files hold one", len(docs))
		return s, w.diags
	}
	root := docs[0]
	if root.Kind != yaml.MappingNode {
		w.errorf(root, "", "start with services:", "want a mapping at the top, found %s", kindName(root))
		return s, w.diags
	}
	c := &composeFile{w: w, root: root, top: w.mapping(root, "")}
	w.diags = w.diags[:0] // duplicate keys: compose-go reports them with both lines
	opts := c.refuseOutside()
	project := c.load(data, opts)
	c.read(project, s)
	return s, composeDedupe(w.diags)
}

// composeDedupe drops repeats of a diagnostic at the same place (a
// top-level setting checked once per service).
func composeDedupe(ds Diagnostics) Diagnostics {
	type key struct {
		pos  Pos
		path string
		sev  Severity
	}
	seen := map[key]bool{}
	out := ds[:0]
	for _, d := range ds {
		k := key{d.Pos, d.Path, d.Severity}
		if !seen[k] {
			seen[k] = true
			out = append(out, d)
		}
	}
	return out
}

// composeFile is one compose file being read.
type composeFile struct {
	w    *walker
	root *yaml.Node
	top  *fields
}

// refuseOutside reports what would make compose-go read other files and
// returns loader options that skip it.
func (c *composeFile) refuseOutside() func(*loader.Options) {
	skipExtends := false
	if n := c.top.get("include"); n != nil {
		c.w.errorf(c.top.knode["include"], "include", "merge the included files into this one", "include is not followed: only this file is read")
	}
	svcs := c.services()
	for _, name := range svcs.keys {
		if k := composeKey(composeDig(svcs.get(name), "extends"), "file"); k != nil {
			c.w.errorf(k, "services."+name+".extends.file", "copy the base service into this file", "extends.file is not followed: only this file is read")
			skipExtends = true
		}
	}
	return func(o *loader.Options) {
		o.SetProjectName("gpuslice", false)
		o.SkipInclude = true
		o.SkipExtends = skipExtends
		o.ResolvePaths = false
		o.SkipResolveEnvironment = true
		o.SkipResolveLabels = true
		o.ResourceLoaders = []loader.ResourceLoader{composeNoFiles{}}
	}
}

// services is the services mapping (empty when absent).
func (c *composeFile) services() *fields {
	n := c.top.get("services")
	if n == nil || n.Kind != yaml.MappingNode {
		return &fields{vals: map[string]*yaml.Node{}, knode: map[string]*yaml.Node{}}
	}
	saved := len(c.w.diags)
	f := c.w.mapping(n, "services")
	c.w.diags = c.w.diags[:saved] // duplicate keys are reported by compose-go
	return f
}

// composeNoFiles is the only resource loader compose-go gets: it refuses
// every path, so nothing outside the given bytes is read.
type composeNoFiles struct{}

func (composeNoFiles) Accept(string) bool { return true }
func (composeNoFiles) Load(_ context.Context, p string) (string, error) {
	return "", fmt.Errorf("%s not read: ReadCompose reads only the given bytes", p)
}
func (composeNoFiles) Dir(p string) string { return p }

// load runs compose-go over data (with millicore CPU counts rewritten) and
// turns its error, if any, into a placed diagnostic.
func (c *composeFile) load(data []byte, opts func(*loader.Options)) (project *types.Project) {
	details := types.ConfigDetails{
		WorkingDir:  ".",
		ConfigFiles: []types.ConfigFile{{Filename: c.w.file, Content: append([]byte{}, c.patchMillicores(data)...)}},
		Environment: types.Mapping{},
	}
	var err error
	func() {
		defer func() {
			if r := recover(); r != nil {
				err = fmt.Errorf("compose-go failed: %v", r)
			}
		}()
		project, err = loader.LoadWithContext(context.Background(), details, opts)
	}()
	if err != nil {
		c.composeError(err)
		return nil
	}
	return project
}

var composeMillicores = regexp.MustCompile(`^([0-9]+)m$`)

// patchMillicores rewrites deploy.resources.*.cpus values such as '100m'
// into decimal CPUs on their own line, so compose-go (which wants a float)
// accepts what Omnistrate accepts. Other bytes are left alone.
func (c *composeFile) patchMillicores(data []byte) []byte {
	type patch struct {
		line, col int
		old, new  string
	}
	var patches []patch
	seen := map[*yaml.Node]bool{}
	svcs := c.services()
	for _, name := range svcs.keys {
		res := composeDig(svcs.get(name), "deploy", "resources")
		for _, part := range []string{"limits", "reservations"} {
			n := composeDig(res, part, "cpus")
			if n == nil || n.Kind != yaml.ScalarNode || seen[n] {
				continue
			}
			m := composeMillicores.FindStringSubmatch(n.Value)
			if m == nil {
				continue
			}
			seen[n] = true
			milli, _ := strconv.ParseFloat(m[1], 64)
			old := n.Value
			switch n.Style {
			case yaml.SingleQuotedStyle:
				old = "'" + old + "'"
			case yaml.DoubleQuotedStyle:
				old = `"` + old + `"`
			}
			patches = append(patches, patch{n.Line, n.Column, old, `"` + strconv.FormatFloat(milli/1000, 'f', -1, 64) + `"`})
		}
	}
	if len(patches) == 0 {
		return data
	}
	sort.Slice(patches, func(i, j int) bool {
		if patches[i].line != patches[j].line {
			return patches[i].line < patches[j].line
		}
		return patches[i].col > patches[j].col
	})
	lines := strings.Split(string(data), "\n")
	for _, p := range patches {
		if p.line < 1 || p.line > len(lines) {
			continue
		}
		l := lines[p.line-1]
		from := min(max(p.col-1, 0), len(l))
		if i := strings.Index(l[from:], p.old); i >= 0 {
			lines[p.line-1] = l[:from+i] + p.new + l[from+i+len(p.old):]
		}
	}
	return []byte(strings.Join(lines, "\n"))
}

// composeDig follows mapping keys from n; nil when any is missing.
func composeDig(n *yaml.Node, keys ...string) *yaml.Node {
	for _, k := range keys {
		if n != nil && n.Kind == yaml.AliasNode {
			n = n.Alias
		}
		if n == nil || n.Kind != yaml.MappingNode {
			return nil
		}
		var next *yaml.Node
		for i := 0; i+1 < len(n.Content); i += 2 {
			if n.Content[i].Value == k {
				next = n.Content[i+1]
			}
		}
		n = next
	}
	if n != nil && n.Kind == yaml.AliasNode {
		n = n.Alias
	}
	return n
}

// composeKey is the key node of key in mapping n, or nil.
func composeKey(n *yaml.Node, key string) *yaml.Node {
	if n == nil || n.Kind != yaml.MappingNode {
		return nil
	}
	for i := 0; i+1 < len(n.Content); i += 2 {
		if n.Content[i].Value == key {
			return n.Content[i]
		}
	}
	return nil
}
