package spec

import (
	"fmt"
	"strings"

	"gopkg.in/yaml.v3"

	"github.com/gpuslice/gpuslice/internal/alloc"
	"github.com/gpuslice/gpuslice/internal/catalog"
	"github.com/gpuslice/gpuslice/internal/mig"
)

// NativeAPIVersion is the apiVersion of gpuslice's own YAML.
const NativeAPIVersion = "gpuslice.dev/v1alpha1"

// The keys of gpuslice's own YAML; schema_test.go holds the JSON Schema to
// the same lists.
var (
	nativeTopKeys      = []string{"apiVersion", "kind", "policy", "pools", "tenants", "workloads"}
	nativePolicyKeys   = []string{"placement", "allowModeSwitch", "preferMIG", "defaultReplicas", "defaultMaxClients"}
	nativePoolKeys     = []string{"name", "instanceType", "gpu", "gpusPerNode", "nodes", "maxNodes", "sharing", "mig", "migSharing", "labels", "taints"}
	nativeSharingKeys  = []string{"mode", "replicas", "interval", "maxClients", "defaultThreadPercent", "defaultPinnedMemory"}
	nativeTaintKeys    = []string{"key", "value", "effect"}
	nativeTenantKeys   = []string{"name", "quota"}
	nativeQuotaKeys    = []string{"memory", "compute"}
	nativeWorkloadKeys = []string{"name", "tenant", "replicas", "pool", "isolation", "priority", "image", "ports", "cpu", "memory", "cpuRequest", "memoryRequest", "env", "gpu", "requests", "constraints"}
	nativeRequestKeys  = []string{"name", "count", "memory", "compute", "mode", "profile", "selector", "workload", "latencySensitive"}
	nativeConstrKeys   = []string{"requests", "match"}
)

// ReadNative reads gpuslice's own YAML (see schema/gpuslice.schema.json).
func ReadNative(file string, data []byte) (*Spec, Diagnostics) {
	w := &walker{file: file}
	s := &Spec{Sources: []string{file}}
	docs := w.parseDocs(data)
	if len(docs) == 0 && len(w.diags) == 0 {
		w.errorf(nil, "", "start with apiVersion: "+NativeAPIVersion, "the file is empty")
	}
	for _, doc := range docs {
		w.native(doc, s)
	}
	w.crossCheck(s)
	return s, w.diags
}

func (w *walker) native(doc *yaml.Node, s *Spec) {
	top := w.mapping(doc, "", nativeTopKeys...)
	if v, ok := w.str(top, "apiVersion"); !ok || v != NativeAPIVersion {
		w.errorf(top.get("apiVersion"), "apiVersion", "want "+NativeAPIVersion, "apiVersion %q is not gpuslice's", v)
	}
	if v, ok := w.str(top, "kind"); ok && v != "Spec" {
		w.errorf(top.get("kind"), "kind", "want Spec (or leave it out)", "kind %q", v)
	}
	if n := top.get("policy"); n != nil {
		f := w.mapping(n, "policy", nativePolicyKeys...)
		if v, ok := w.str(f, "placement"); ok {
			if v != "binpack" && v != "spread" {
				w.errorf(f.get("placement"), "policy.placement", "want binpack or spread", "%q", v)
			}
			s.Policy.Placement = v
		}
		s.Policy.AllowModeSwitch, _ = w.boolean(f, "allowModeSwitch")
		s.Policy.PreferMIG, _ = w.boolean(f, "preferMIG")
		r, _ := w.integer(f, "defaultReplicas", 1, 64)
		c, _ := w.integer(f, "defaultMaxClients", 1, alloc.MaxMPSClients)
		s.Policy.DefaultReplicas, s.Policy.DefaultMaxClients = int(r), int(c)
	}
	for i, n := range w.seq(top.get("pools"), "pools") {
		s.Pools = append(s.Pools, w.nativePool(n, index("pools", i)))
	}
	for i, n := range w.seq(top.get("tenants"), "tenants") {
		path := index("tenants", i)
		f := w.mapping(n, path, nativeTenantKeys...)
		t := Tenant{}
		t.Name, _ = w.str(f, "name")
		if t.Name == "" {
			w.errorf(n, join(path, "name"), "", "a tenant needs a name")
		}
		if q := f.get("quota"); q != nil {
			qf := w.mapping(q, join(path, "quota"), nativeQuotaKeys...)
			t.MemoryMiB = w.memory(qf, "memory")
			c, _ := w.integer(qf, "compute", 1, 100000)
			t.ComputePercent = int(c)
		}
		s.Tenants = append(s.Tenants, t)
	}
	for i, n := range w.seq(top.get("workloads"), "workloads") {
		s.Workloads = append(s.Workloads, w.nativeWorkload(n, index("workloads", i)))
	}
}

func (w *walker) nativePool(n *yaml.Node, path string) Pool {
	f := w.mapping(n, path, nativePoolKeys...)
	p := Pool{Where: w.pos(n)}
	p.Name, _ = w.str(f, "name")
	if p.Name == "" {
		w.errorf(n, join(path, "name"), "", "a pool needs a name")
	}
	p.InstanceType, _ = w.str(f, "instanceType")
	p.GPU, _ = w.str(f, "gpu")
	per, _ := w.integer(f, "gpusPerNode", 1, 64)
	nodes, _ := w.integer(f, "nodes", 0, 100000)
	maxNodes, _ := w.integer(f, "maxNodes", 0, 100000)
	p.GPUsPerNode, p.Nodes, p.MaxNodes = int(per), int(nodes), int(maxNodes)
	cat := catalog.Default()
	var gpu *catalog.GPU
	switch {
	case p.InstanceType != "" && p.GPU != "":
		w.errorf(f.get("gpu"), join(path, "gpu"), "give instanceType or gpu + gpusPerNode", "both instanceType and gpu are set")
	case p.InstanceType != "":
		it, err := cat.InstanceType(p.InstanceType)
		if err != nil {
			w.errorf(f.get("instanceType"), join(path, "instanceType"), "see gpuslice catalog instances", "%v", err)
			break
		}
		gpu, _ = cat.GPU(it.GPU)
		if p.GPUsPerNode == 0 {
			p.GPUsPerNode = it.GPUCount
		}
	case p.GPU != "":
		g, err := cat.GPU(p.GPU)
		if err != nil {
			w.errorf(f.get("gpu"), join(path, "gpu"), "see gpuslice catalog gpus", "%v", err)
			break
		}
		gpu = g
		p.GPU = g.ID
		if p.GPUsPerNode == 0 {
			p.GPUsPerNode = 1
		}
	default:
		w.errorf(n, path, "add instanceType: p4d.24xlarge, or gpu: A100-40GB with gpusPerNode", "pool %q says neither instanceType nor gpu", p.Name)
	}
	if gpu != nil {
		p.GPU = gpu.ID
	}
	if p.MaxNodes > 0 && p.Nodes > p.MaxNodes {
		w.errorf(f.get("nodes"), join(path, "nodes"), fmt.Sprintf("at most maxNodes (%d)", p.MaxNodes), "%d nodes", p.Nodes)
	}
	if sh := f.get("sharing"); sh != nil {
		p.Sharing, p.SharingWhere = w.sharing(sh, join(path, "sharing")), w.pos(sh)
	}
	if sh := f.get("migSharing"); sh != nil {
		p.MIGSharing, p.MIGSharingWhere = w.sharing(sh, join(path, "migSharing")), w.pos(sh)
	}
	if m := f.get("mig"); m != nil {
		p.MIGWhere = w.pos(m)
		w.nativeMIG(m, join(path, "mig"), gpu, &p)
	}
	if l := f.get("labels"); l != nil {
		lf := w.mapping(l, join(path, "labels"))
		p.Labels = map[string]string{}
		for _, k := range lf.keys {
			p.Labels[k], _ = w.str(lf, k)
		}
	}
	for i, tn := range w.seq(f.get("taints"), join(path, "taints")) {
		tp := index(join(path, "taints"), i)
		tf := w.mapping(tn, tp, nativeTaintKeys...)
		var t Taint
		t.Key, _ = w.str(tf, "key")
		t.Value, _ = w.str(tf, "value")
		t.Effect, _ = w.str(tf, "effect")
		if t.Key == "" || !contains([]string{"NoSchedule", "PreferNoSchedule", "NoExecute"}, t.Effect) {
			w.errorf(tn, tp, "want key and effect NoSchedule, PreferNoSchedule or NoExecute", "incomplete taint")
		}
		p.Taints = append(p.Taints, t)
	}
	return p
}

// nativeMIG reads mig: dynamic | none | {profile: count, ...}.
func (w *walker) nativeMIG(n *yaml.Node, path string, gpu *catalog.GPU, p *Pool) {
	if n.Kind == yaml.ScalarNode {
		switch n.Value {
		case "none", "off", "":
			return
		case "dynamic":
			p.MIG = "dynamic"
		default:
			w.errorf(n, path, "want dynamic, none, or a mapping of profile: count such as {3g.20gb: 1, 2g.10gb: 2}", "%q", n.Value)
			return
		}
	} else {
		f := w.mapping(n, path)
		p.MIG, p.MIGLayout = "fixed", map[string]int{}
		for _, k := range f.keys {
			c, _ := w.integer(f, k, 1, 7)
			p.MIGLayout[k] = int(c)
		}
	}
	if gpu == nil {
		return
	}
	if gpu.MIG == nil {
		var names []string
		for _, it := range catalog.Default().InstanceTypesWithGPU(func(g *catalog.GPU) bool { return g.MIG != nil }) {
			names = append(names, it.Name)
		}
		w.errorf(n, path, "MIG-capable instance types: "+shortList(names, 12), "%s has no MIG", gpu.ID)
		return
	}
	if p.MIG != "fixed" {
		return
	}
	geo, err := mig.New(gpu)
	if err != nil {
		return
	}
	var want []string
	for prof, c := range p.MIGLayout {
		if _, err := geo.Profile(prof); err != nil {
			w.errorf(n, join(path, prof), "valid: "+strings.Join(geo.ProfileNames(), ", "), "%s has no profile %q", gpu.ID, prof)
			return
		}
		for range c {
			want = append(want, prof)
		}
	}
	if _, err := geo.Fit(want); err != nil {
		w.errorf(n, path, "see gpuslice mig layouts "+gpu.ID, "%v", err)
	}
}

func shortList(xs []string, n int) string {
	if len(xs) <= n {
		return strings.Join(xs, ", ")
	}
	return strings.Join(xs[:n], ", ") + fmt.Sprintf(", … (%d more)", len(xs)-n)
}

// sharing reads a sharing block.
func (w *walker) sharing(n *yaml.Node, path string) alloc.Sharing {
	f := w.mapping(n, path, nativeSharingKeys...)
	var sh alloc.Sharing
	mode, _ := w.str(f, "mode")
	sh.Mode = alloc.Mode(mode)
	switch sh.Mode {
	case alloc.Exclusive, alloc.TimeSlice, alloc.MPS, alloc.Dynamic:
	default:
		w.errorf(f.get("mode"), join(path, "mode"), "want exclusive, timeslice, mps or dynamic", "mode %q", mode)
	}
	r, hasR := w.integer(f, "replicas", 1, 64)
	c, hasC := w.integer(f, "maxClients", 1, alloc.MaxMPSClients) // MPS: at most 48 clients per device
	sh.Replicas, sh.MaxClients = int(r), int(c)
	sh.Interval, _ = w.str(f, "interval")
	if sh.Interval != "" && !contains([]string{"Default", "Short", "Medium", "Long"}, sh.Interval) {
		w.errorf(f.get("interval"), join(path, "interval"), "want Default, Short, Medium or Long", "%q", sh.Interval)
	}
	t, _ := w.integer(f, "defaultThreadPercent", 1, 100)
	sh.DefaultThreadPercent = int(t)
	sh.DefaultPinnedMiB = w.memory(f, "defaultPinnedMemory")
	if sh.Mode == alloc.TimeSlice && !hasR {
		w.errorf(n, join(path, "replicas"), "e.g. replicas: 4", "time-slicing needs replicas")
	}
	if sh.Mode == alloc.MPS && !hasC {
		w.errorf(n, join(path, "maxClients"), "1..48", "MPS needs maxClients")
	}
	return sh
}

// memory reads a size field in MiB.
func (w *walker) memory(f *fields, key string) int64 {
	n := f.get(key)
	if n == nil {
		return 0
	}
	v, err := ParseMemoryMiB(n.Value)
	if n.Kind != yaml.ScalarNode || err != nil {
		msg := "not a size"
		if err != nil {
			msg = err.Error()
		}
		w.errorf(n, join(f.path, key), sizeHint, "%s", msg)
		return 0
	}
	return v
}
