package spec

import (
	"fmt"
	"regexp"
	"sort"
	"strings"

	"gopkg.in/yaml.v3"

	"github.com/gpuslice/gpuslice/internal/alloc"
	"github.com/gpuslice/gpuslice/internal/mig"
)

// SourceDevicePlugin is ImportedSharing.Source for NVIDIA k8s-device-plugin
// configs.
const SourceDevicePlugin = "nvidia-device-plugin"

// Resource names the device plugin advertises (without renaming).
const (
	DevicePluginGPUResource       = "nvidia.com/gpu"
	DevicePluginMIGResourcePrefix = "nvidia.com/mig-"
)

// DevicePluginMaxMPSReplicas is the most MPS replicas the device plugin's
// MPS control daemon accepts per GPU (Volta and later; 16 before).
const DevicePluginMaxMPSReplicas = 48

// The fields of the device plugin's config, version v1
// (k8s-device-plugin api/config/v1; sharedDevicesAllocationPolicy is new in
// v0.20.0).
var (
	dpTopKeys        = []string{"version", "flags", "resources", "sharing", "imex"}
	dpFlagKeys       = []string{"migStrategy", "failOnInitError", "mpsRoot", "nvidiaDriverRoot", "nvidiaDevRoot", "gdrcopyEnabled", "gdsEnabled", "mofedEnabled", "useNodeFeatureAPI", "deviceDiscoveryStrategy", "plugin", "gfd"}
	dpPluginKeys     = []string{"passDeviceSpecs", "deviceListStrategy", "deviceIDStrategy", "cdiAnnotationPrefix", "nvidiaCTKPath", "containerDriverRoot", "sharedDevicesAllocationPolicy"}
	dpGFDKeys        = []string{"oneshot", "noTimestamp", "sleepInterval", "outputFile", "machineTypeFile"}
	dpResourcesKeys  = []string{"gpus", "mig"}
	dpPatternKeys    = []string{"pattern", "name"}
	dpSharingKeys    = []string{"timeSlicing", "mps"}
	dpReplicatedKeys = []string{"renameByDefault", "failRequestsGreaterThanOne", "resources"}
	dpResourceKeys   = []string{"name", "rename", "devices", "replicas"}
	dpImexKeys       = []string{"channelIDs", "required"}
)

// ReadDevicePluginConfig reads an NVIDIA k8s-device-plugin config (YAML or
// JSON, version v1) or a Kubernetes ConfigMap holding one or several of
// them under data keys, as the GPU operator uses them: each key is a named
// config that nodes select with the label nvidia.com/device-plugin.config.
// Problems inside an embedded config are reported at their line in the
// ConfigMap.
//
// It returns one ImportedSharing per config (Source "nvidia-device-plugin",
// Name the data key, or "default" for a bare config):
//   - Sharing is how nvidia.com/gpu is shared: timeslice with Replicas, mps
//     with MaxClients = replicas and DefaultThreadPercent = 100/replicas
//     (what the device plugin's MPS daemon sets), or exclusive.
//   - With migStrategy mixed, MIGSharing is how nvidia.com/mig-<profile>
//     resources are shared (the largest replicas; DevicePlugin.Replicas
//     has each resource's own), and Devices holds one entry (All, MIGEnabled)
//     whose MIGDevices keys name the shared profiles ("1g.5gb+me" for
//     nvidia.com/mig-1g.5gb.me); its counts are 0 because the device plugin
//     does not set instance counts (mig-parted does). With migStrategy
//     single, MIG devices are nvidia.com/gpu and MIGSharing equals Sharing.
//   - MIGStrategy is flags.migStrategy as written ("" when not set; the
//     device plugin's command line or Helm value then decides).
//   - Text is the config as written and DevicePlugin its naming and
//     admission settings (renameByDefault, failRequestsGreaterThanOne, the
//     shared resources with their replicas); Key is the data key.
//
// It validates as the device plugin does (api/config/v1 and the plugin's
// start-up checks) and says so in each message; see the package tests for
// the full list. Unknown fields are errors here although the device plugin
// silently ignores them, because a misspelt field is a setting lost.
func ReadDevicePluginConfig(file string, data []byte) (*Spec, Diagnostics) {
	w := &walker{file: file}
	s := &Spec{Sources: []string{file}}
	data = trimBOM(data)
	docs := w.parseDocs(nvJSONTabs(data))
	if len(docs) == 0 && len(w.diags) == 0 {
		w.errorf(nil, "", "start with version: v1 and a sharing: section", "the file is empty")
	}
	lines := nvLines(data)
	w.nvBlockHint(lines)
	bare := 0
	for _, doc := range docs {
		if w.nvTooBig(doc) {
			continue
		}
		if nvIsConfigMap(doc) {
			first := len(s.Imported)
			w.nvEachConfig(doc, lines, "the device plugin", func(e *nvEmbedded, d *yaml.Node) {
				imp, at := e.w.devicePlugin(d, "", e.key)
				imp.Where = Pos{File: file, Line: e.keyNode.Line, Column: e.keyNode.Column}
				imp.Key, imp.Text = e.key, nvText(e.text)
				imp.SharingWhere = imp.Where
				if at != nil {
					imp.SharingWhere = e.pos(at)
				}
				s.Imported = append(s.Imported, imp)
			})
			if len(s.Imported) == first+1 {
				s.Imported[first].Single = true
			}
			continue
		}
		if top := nvDeref(doc); top.Kind == yaml.MappingNode {
			f := &fields{vals: map[string]*yaml.Node{}}
			for i := 0; i+1 < len(top.Content); i += 2 {
				f.vals[top.Content[i].Value] = top.Content[i+1]
			}
			if f.has("kind") || f.has("apiVersion") {
				w.errorf(doc, "", "want a device-plugin config (version, flags, sharing) or a ConfigMap holding configs under data",
					"this is not a device-plugin config (it has %s)", nvDescribeKind(f.get("kind"), f.get("apiVersion")))
				continue
			}
		}
		bare++
		if bare > 1 {
			w.errorf(doc, "", "one config per file, or a ConfigMap with one data key per config", "the device plugin reads only the first YAML document of a config file")
			continue
		}
		imp, at := w.devicePlugin(doc, "", "default")
		imp.Where = w.pos(doc)
		imp.Text = nvText(string(data))
		imp.SharingWhere = imp.Where
		if at != nil {
			imp.SharingWhere = w.pos(at)
		}
		s.Imported = append(s.Imported, imp)
	}
	return s, w.diags
}

func nvDescribeKind(kind, apiVersion *yaml.Node) string {
	var parts []string
	if kind != nil {
		parts = append(parts, fmt.Sprintf("kind %q", nvDeref(kind).Value))
	}
	if apiVersion != nil {
		parts = append(parts, fmt.Sprintf("apiVersion %q", nvDeref(apiVersion).Value))
	}
	return strings.Join(parts, " and ")
}

// dpMapping is mapping with a note on unknown fields: the device plugin
// itself would drop them without a word.
func (w *walker) dpMapping(n *yaml.Node, path string, allowed ...string) *fields {
	before := len(w.diags)
	f := w.mapping(n, path, allowed...)
	for i := before; i < len(w.diags); i++ {
		if strings.HasPrefix(w.diags[i].Message, "unknown field") {
			w.diags[i].Message += "; the device plugin would silently ignore it"
		}
	}
	return f
}

// dpReplicated is one parsed sharing.timeSlicing or sharing.mps section.
type dpReplicated struct {
	node *yaml.Node
	path string
	// failSet and fail are failRequestsGreaterThanOne; rename is
	// renameByDefault.
	failSet, fail bool
	rename        bool
	failNode      *yaml.Node
	resources     []dpResource
}

type dpResource struct {
	name     string // fully qualified
	replicas int
	node     *yaml.Node
	repNode  *yaml.Node
	nameNode *yaml.Node
	path     string
}

// devicePlugin reads one config and returns what it imports, and the node
// that sets its whole-GPU sharing (nil when none does).
func (w *walker) devicePlugin(doc *yaml.Node, path, name string) (ImportedSharing, *yaml.Node) {
	imp := ImportedSharing{Source: SourceDevicePlugin, Name: name, DevicePlugin: &DevicePluginSettings{}}
	top := w.dpMapping(doc, path, dpTopKeys...)
	if n := top.get("version"); !nvNull(n) {
		if v, ok := w.nvStr(n, join(path, "version")); ok && v != "v1" && v != "" {
			w.errorf(n, join(path, "version"), "want version: v1", "unknown version %q: the device plugin reads only v1", v)
		}
	}
	strategy, strategyNode := w.dpFlags(top.get("flags"), join(path, "flags"))
	imp.MIGStrategy = strategy
	w.dpResources(top, path)
	w.dpImex(top.get("imex"), join(path, "imex"))

	var ts, mps *dpReplicated
	if n := top.get("sharing"); !nvNull(n) {
		sp := join(path, "sharing")
		sh := w.dpMapping(n, sp, dpSharingKeys...)
		if sh.has("timeSlicing") {
			ts = w.dpReplicatedResources(sh.get("timeSlicing"), join(sp, "timeSlicing"))
		}
		if sh.has("mps") {
			mps = w.dpReplicatedResources(sh.get("mps"), join(sp, "mps"))
		}
		if ts != nil && mps != nil && len(ts.resources) > 0 && len(mps.resources) > 0 {
			w.errorf(sh.knode["mps"], join(sp, "mps"), "keep one: the device plugin shares every GPU of a node the same way",
				"timeSlicing and mps cannot both be set: the device plugin would use mps and silently ignore timeSlicing")
		}
	}
	imp.Sharing = alloc.Sharing{Mode: alloc.Exclusive}
	if strategy == "single" || strategy == "mixed" {
		imp.MIGSharing = alloc.Sharing{Mode: alloc.Exclusive}
	}
	// Like the device plugin, MPS wins when both are set (an error above).
	mpsWins := mps != nil && len(mps.resources) > 0
	if ts != nil {
		w.dpTimeSlicingChecks(ts)
		target := &imp
		if mpsWins {
			target = &ImportedSharing{}
		}
		w.dpApply(target, ts, alloc.TimeSlice, strategy)
	}
	if mps != nil {
		w.dpMPSChecks(mps, strategy, strategyNode)
		w.dpApply(&imp, mps, alloc.MPS, strategy)
	}
	// The section in force, as the device plugin picks it.
	var inForce *dpReplicated
	switch {
	case mpsWins:
		inForce, imp.DevicePlugin.Mode = mps, "mps"
	case ts != nil && len(ts.resources) > 0:
		inForce, imp.DevicePlugin.Mode = ts, "timeSlicing"
	}
	var at *yaml.Node
	if inForce != nil {
		dp := imp.DevicePlugin
		dp.RenameByDefault = inForce.rename
		if inForce.failSet {
			v := inForce.fail
			dp.FailRequestsGreaterThanOne = &v
		}
		dp.Replicas = map[string]int{}
		for _, r := range inForce.resources {
			dp.Replicas[r.name] = r.replicas
			if r.name == DevicePluginGPUResource {
				at = r.repNode
			}
		}
		if at == nil {
			at = inForce.node
		}
	}
	return imp, at
}

// dpFlags reads flags and returns migStrategy ("" when not set).
func (w *walker) dpFlags(n *yaml.Node, path string) (string, *yaml.Node) {
	if nvNull(n) {
		return "", nil
	}
	f := w.dpMapping(n, path, dpFlagKeys...)
	strategy := ""
	if v := f.get("migStrategy"); !nvNull(v) {
		strategy, _ = w.nvOneOf(v, join(path, "migStrategy"), "none", "single", "mixed")
	}
	for _, k := range []string{"failOnInitError", "gdrcopyEnabled", "gdsEnabled", "mofedEnabled", "useNodeFeatureAPI"} {
		if v := f.get(k); !nvNull(v) {
			w.nvBool(v, join(path, k))
		}
	}
	for _, k := range []string{"mpsRoot", "nvidiaDriverRoot", "nvidiaDevRoot"} {
		if v := f.get(k); !nvNull(v) {
			if s, ok := w.nvStr(v, join(path, k)); ok && s != "" && !strings.HasPrefix(s, "/") {
				w.errorf(v, join(path, k), "e.g. /run/nvidia/mps or /", "%s must be an absolute path", k)
			}
		}
	}
	if v := f.get("deviceDiscoveryStrategy"); !nvNull(v) {
		w.nvOneOf(v, join(path, "deviceDiscoveryStrategy"), "auto", "nvml", "tegra")
	}
	if v := f.get("plugin"); !nvNull(v) {
		pp := join(path, "plugin")
		p := w.dpMapping(v, pp, dpPluginKeys...)
		if x := p.get("passDeviceSpecs"); !nvNull(x) {
			w.nvBool(x, join(pp, "passDeviceSpecs"))
		}
		if x := nvDeref(p.get("deviceListStrategy")); !nvNull(x) {
			valid := []string{"envvar", "volume-mounts", "cdi-annotations", "cdi-cri"}
			if x.Kind == yaml.SequenceNode {
				for i, item := range x.Content {
					w.nvOneOf(item, index(join(pp, "deviceListStrategy"), i), valid...)
				}
			} else {
				w.nvOneOf(x, join(pp, "deviceListStrategy"), valid...)
			}
		}
		if x := p.get("deviceIDStrategy"); !nvNull(x) {
			w.nvOneOf(x, join(pp, "deviceIDStrategy"), "uuid", "index")
		}
		for _, k := range []string{"cdiAnnotationPrefix", "nvidiaCTKPath", "containerDriverRoot"} {
			if x := p.get(k); !nvNull(x) {
				w.nvStr(x, join(pp, k))
			}
		}
		if x := p.get("sharedDevicesAllocationPolicy"); !nvNull(x) {
			w.nvOneOf(x, join(pp, "sharedDevicesAllocationPolicy"), "distributed", "packed")
		}
	}
	if v := f.get("gfd"); !nvNull(v) {
		gp := join(path, "gfd")
		g := w.dpMapping(v, gp, dpGFDKeys...)
		for _, k := range []string{"oneshot", "noTimestamp"} {
			if x := g.get(k); !nvNull(x) {
				w.nvBool(x, join(gp, k))
			}
		}
		for _, k := range []string{"outputFile", "machineTypeFile"} {
			if x := g.get(k); !nvNull(x) {
				w.nvStr(x, join(gp, k))
			}
		}
		if x := nvDeref(g.get("sleepInterval")); !nvNull(x) {
			if x.Kind != yaml.ScalarNode || (x.Tag != "!!int" && x.Tag != "!!float" && x.Tag != "!!str") {
				w.errorf(x, join(gp, "sleepInterval"), "e.g. 60s, 5m or infinite", "%s is not a duration", kindName(x))
			} else if x.Tag == "!!str" && x.Value != "infinite" && !dpReGoDuration.MatchString(x.Value) {
				w.errorf(x, join(gp, "sleepInterval"), "e.g. 60s, 5m or infinite", "%q is not a duration", x.Value)
			}
		}
	}
	return strategy, f.get("migStrategy")
}

// dpReGoDuration matches what time.ParseDuration accepts.
var dpReGoDuration = regexp.MustCompile(`^[-+]?(0|(\d+(\.\d*)?|\.\d+)(ns|us|µs|μs|ms|s|m|h))+$`)

// dpResources reads the top-level resources section, which the device
// plugin parses and then drops.
func (w *walker) dpResources(top *fields, path string) {
	n := top.get("resources")
	if nvNull(n) {
		return
	}
	rp := join(path, "resources")
	f := w.dpMapping(n, rp, dpResourcesKeys...)
	count := 0
	for _, k := range dpResourcesKeys {
		for i, item := range w.seq(nvDeref(f.get(k)), join(rp, k)) {
			ip := index(join(rp, k), i)
			r := w.dpMapping(item, ip, dpPatternKeys...)
			for _, req := range dpPatternKeys {
				if !r.has(req) {
					w.errorf(item, join(ip, req), "", "%s is required (the device plugin rejects a resource without it)", req)
				}
			}
			if x := r.get("pattern"); x != nil {
				w.nvStr(x, join(ip, "pattern"))
			}
			if x := r.get("name"); x != nil {
				if s, ok := w.nvStr(x, join(ip, "name")); ok {
					if _, why := dpResourceName(s); why != "" {
						w.errorf(x, join(ip, "name"), "", "%s", why)
					}
				}
			}
			count++
		}
	}
	if count > 0 {
		w.warnf(top.knode["resources"], rp, "remove it; share or rename through sharing.timeSlicing or sharing.mps",
			"resources is ignored: the device plugin parses it and then drops it (\"not yet supported\")")
	}
}

func (w *walker) dpImex(n *yaml.Node, path string) {
	if nvNull(n) {
		return
	}
	f := w.dpMapping(n, path, dpImexKeys...)
	if x := f.get("required"); !nvNull(x) {
		w.nvBool(x, join(path, "required"))
	}
	x := nvDeref(f.get("channelIDs"))
	if nvNull(x) {
		return
	}
	var ids []int64
	for i, item := range w.seq(x, join(path, "channelIDs")) {
		if v, ok := w.nvInt(item, index(join(path, "channelIDs"), i)); ok {
			ids = append(ids, v)
		}
	}
	if len(ids) > 1 || (len(ids) == 1 && ids[0] != 0) {
		w.errorf(x, join(path, "channelIDs"), "want [] or [0]", "the device plugin accepts only channelIDs [] or [0]")
	}
}

// dpReDNS is Kubernetes' DNS-1123 subdomain rule, which the device
// plugin applies to the part of a resource name after "nvidia.com/".
var dpReDNS = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$`)

// dpResourceName qualifies a resource name as the device plugin does
// (adding "nvidia.com/" when missing) and says what is wrong with it.
func dpResourceName(s string) (string, string) {
	full := s
	if !strings.HasPrefix(full, "nvidia.com/") {
		full = "nvidia.com/" + full
	}
	if len(full) > 63 {
		return full, fmt.Sprintf("resource name %q has %d characters; the device plugin allows at most 63 (with the nvidia.com/ prefix)", full, len(full))
	}
	name := strings.TrimPrefix(full, "nvidia.com/")
	if len(name) > 253 || !dpReDNS.MatchString(name) {
		return full, fmt.Sprintf("resource name %q: the part after nvidia.com/ must be a DNS subdomain (lower-case letters, digits, '-' and '.'), as the device plugin requires", full)
	}
	return full, ""
}

// dpReplicatedResources reads sharing.timeSlicing or sharing.mps.
func (w *walker) dpReplicatedResources(n *yaml.Node, path string) *dpReplicated {
	rr := &dpReplicated{node: nvDeref(n), path: path}
	f := w.dpMapping(n, path, dpReplicatedKeys...)
	if x := f.get("renameByDefault"); x != nil {
		rr.rename, _ = w.nvBool(x, join(path, "renameByDefault"))
	}
	if x := f.get("failRequestsGreaterThanOne"); x != nil {
		rr.fail, rr.failSet = w.nvBool(x, join(path, "failRequestsGreaterThanOne"))
		rr.failNode = x
	}
	list := nvDeref(f.get("resources"))
	if list == nil || nvNull(list) || (list.Kind == yaml.SequenceNode && len(list.Content) == 0) {
		at := n
		if list != nil {
			at = list
		}
		w.errorf(at, join(path, "resources"), "e.g. resources: [{name: nvidia.com/gpu, replicas: 4}]",
			"resources is required and must not be empty (the device plugin fails with \"no resources specified\")")
		return rr
	}
	seen := map[string]string{}
	for i, item := range w.seq(list, join(path, "resources")) {
		ip := index(join(path, "resources"), i)
		r := w.dpMapping(item, ip, dpResourceKeys...)
		res := dpResource{node: nvDeref(item), path: ip, nameNode: r.get("name"), repNode: r.get("replicas")}
		if !r.has("name") {
			w.errorf(item, join(ip, "name"), "e.g. name: nvidia.com/gpu", "name is required (the device plugin fails with \"no resource name specified\")")
		} else if s, ok := w.nvStr(r.get("name"), join(ip, "name")); ok {
			full, why := dpResourceName(s)
			if why != "" {
				w.errorf(r.get("name"), join(ip, "name"), "", "%s", why)
			} else {
				res.name = full
				if prev, dup := seen[full]; dup {
					w.errorf(r.get("name"), join(ip, "name"), "merge the two entries", "%s is listed twice (also at %s)", full, prev)
				}
				seen[full] = ip
			}
		}
		if !r.has("replicas") {
			w.errorf(item, join(ip, "replicas"), "e.g. replicas: 4", "replicas is required (the device plugin fails with \"no replicas specified\")")
		} else if v, ok := w.nvInt(r.get("replicas"), join(ip, "replicas")); ok {
			if v < 2 {
				w.errorf(r.get("replicas"), join(ip, "replicas"), "want 2 or more; to stop sharing, remove the entry",
					"replicas %d is rejected by the device plugin (NVIDIA's own rule: number of replicas must be >= 2)", v)
			} else {
				res.replicas = int(v)
			}
		}
		if x := r.get("rename"); x != nil {
			if s, ok := w.nvStr(x, join(ip, "rename")); ok {
				if full, why := dpResourceName(s); why != "" {
					w.errorf(x, join(ip, "rename"), "", "%s", why)
				} else {
					w.warnf(r.knode["rename"], join(ip, "rename"), "remove it; renameByDefault: true names it <name>.shared",
						"rename %s is parsed but ignored by the device plugin (\"not yet supported\"): the resource keeps its name, or <name>.shared with renameByDefault", full)
				}
			}
		}
		if x := r.get("devices"); x != nil {
			if all, ok := w.dpDevices(x, join(ip, "devices")); ok && !all {
				w.warnf(r.knode["devices"], join(ip, "devices"), "remove it; gpuslice's agent can share only some GPUs",
					"devices is parsed but ignored by the device plugin (\"not yet supported\"): it shares every device of the node (devices: all)")
			}
		}
		if res.name != "" && res.replicas > 0 {
			rr.resources = append(rr.resources, res)
		}
	}
	return rr
}

// dpReUUID is the textual form of a UUID.
var dpReUUID = regexp.MustCompile(`^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$`)

// dpDevices checks a resource's devices union as the device plugin does:
// "all", a count > 0, or a list of GPU indexes, MIG indexes ("0:1") and
// GPU or MIG UUIDs. It reports whether the value is "all" and whether it
// is valid.
func (w *walker) dpDevices(n *yaml.Node, path string) (all, valid bool) {
	n = nvDeref(n)
	before := len(w.diags)
	defer func() { valid = len(w.diags) == before }()
	const hint = "want all, a count, or a list of GPU indexes, MIG indexes (0:1) or GPU-/MIG- UUIDs"
	switch {
	case n.Kind == yaml.ScalarNode && n.Tag == "!!int":
		if v, ok := w.nvInt(n, path); ok && v <= 0 {
			w.errorf(n, path, hint, "devices %d: the device plugin requires a count > 0", v)
		}
		return false, false
	case n.Kind == yaml.ScalarNode && n.Tag == "!!str":
		if n.Value != "all" {
			w.errorf(n, path, hint, "devices %q: the only string the device plugin accepts is all", n.Value)
		}
		return n.Value == "all", false
	case n.Kind == yaml.SequenceNode:
		for i, item := range n.Content {
			item = nvDeref(item)
			if item.Kind == yaml.ScalarNode && item.Tag == "!!int" && !strings.HasPrefix(item.Value, "-") {
				continue
			}
			if item.Kind == yaml.ScalarNode && item.Tag == "!!str" && dpDeviceRef(item.Value) {
				continue
			}
			w.errorf(item, index(path, i), hint, "%s is not a device the device plugin understands", kindName(item))
		}
		return false, false
	}
	w.errorf(n, path, hint, "%s is not a devices value", kindName(n))
	return false, false
}

func dpDeviceRef(s string) bool {
	isIndex := func(x string) bool {
		if x == "" {
			return false
		}
		for _, c := range x {
			if c < '0' || c > '9' {
				return false
			}
		}
		return true
	}
	if isIndex(s) {
		return true
	}
	if a, b, ok := strings.Cut(s, ":"); ok && isIndex(a) && isIndex(b) {
		return true
	}
	gpuUUID := func(x string) bool { u, ok := strings.CutPrefix(x, "GPU-"); return ok && dpReUUID.MatchString(u) }
	if gpuUUID(s) {
		return true
	}
	if m, ok := strings.CutPrefix(s, "MIG-"); ok {
		if dpReUUID.MatchString(m) {
			return true
		}
		parts := strings.SplitN(m, "/", 3)
		return len(parts) == 3 && gpuUUID(parts[0]) && isIndex(parts[1]) && isIndex(parts[2])
	}
	return false
}

func (w *walker) dpTimeSlicingChecks(ts *dpReplicated) {
	if len(ts.resources) == 0 {
		return
	}
	const hint = "set failRequestsGreaterThanOne: true; the device plugin then fails such pods with UnexpectedAdmissionError"
	const why = "a container asking for 2 or more replicas is admitted and may get several replicas of the same GPU, which gives it no more memory or compute"
	switch {
	case !ts.failSet && ts.failNode == nil:
		w.warnf(ts.node, join(ts.path, "failRequestsGreaterThanOne"), hint, "failRequestsGreaterThanOne is not set and defaults to false for time-slicing: %s", why)
	case ts.failSet && !ts.fail:
		w.warnf(ts.failNode, join(ts.path, "failRequestsGreaterThanOne"), hint, "failRequestsGreaterThanOne is false: %s", why)
	}
}

func (w *walker) dpMPSChecks(mps *dpReplicated, strategy string, strategyNode *yaml.Node) {
	if mps.failSet && !mps.fail {
		w.warnf(mps.failNode, join(mps.path, "failRequestsGreaterThanOne"), "remove it",
			"failRequestsGreaterThanOne: false is ignored for MPS: the device plugin always rejects requests for more than one MPS replica")
	}
	if len(mps.resources) == 0 {
		return
	}
	switch strategy {
	case "mixed":
		w.errorf(strategyNode, "flags.migStrategy", "use time-slicing for MIG devices, or migStrategy none for MPS on whole GPUs",
			"MPS with migStrategy mixed is rejected by the device plugin (\"using --mig-strategy=mixed is not supported with MPS\")")
	case "single":
		w.errorf(strategyNode, "flags.migStrategy", "use time-slicing for MIG devices, or migStrategy none for MPS on whole GPUs",
			"MPS with migStrategy single is an error: every nvidia.com/gpu is then a MIG device and the device plugin does not support MPS on MIG devices")
	}
	for _, r := range mps.resources {
		if r.replicas > DevicePluginMaxMPSReplicas {
			w.errorf(r.repNode, join(r.path, "replicas"), fmt.Sprintf("want 2..%d", DevicePluginMaxMPSReplicas),
				"MPS replicas %d exceed the %d clients an MPS server takes per GPU (16 before Volta); the device plugin's MPS daemon rejects it", r.replicas, DevicePluginMaxMPSReplicas)
		}
		if strings.HasPrefix(r.name, DevicePluginMIGResourcePrefix) {
			w.errorf(r.nameNode, join(r.path, "name"), "share MIG devices with time-slicing",
				"MPS on MIG devices is not supported by the device plugin (\"sharing using MPS is not supported for MIG devices\")")
		}
	}
}

// dpProfile turns the profile part of nvidia.com/mig-<profile> back into
// a profile name: the device plugin writes "+" as ".".
func dpProfile(s string) string {
	for _, suf := range []string{".me.all", ".me", ".gfx"} {
		if strings.HasSuffix(s, suf) {
			return strings.TrimSuffix(s, suf) + "+" + suf[1:]
		}
	}
	return s
}

// dpApply records a section's resources in imp.
func (w *walker) dpApply(imp *ImportedSharing, rr *dpReplicated, mode alloc.Mode, strategy string) {
	sharing := func(n int) alloc.Sharing {
		if mode == alloc.MPS {
			return alloc.Sharing{Mode: alloc.MPS, MaxClients: n, DefaultThreadPercent: 100 / n}
		}
		return alloc.Sharing{Mode: alloc.TimeSlice, Replicas: n}
	}
	migReplicas := map[string]int{}
	for _, r := range rr.resources {
		switch {
		case r.name == DevicePluginGPUResource:
			imp.Sharing = sharing(r.replicas)
			if strategy == "single" {
				imp.MIGSharing = imp.Sharing
			}
		case strings.HasPrefix(r.name, DevicePluginMIGResourcePrefix) && mode == alloc.MPS:
			// reported by dpMPSChecks
		case strings.HasPrefix(r.name, DevicePluginMIGResourcePrefix):
			prof := dpProfile(strings.TrimPrefix(r.name, DevicePluginMIGResourcePrefix))
			p, err := mig.ParseProfileName(prof)
			switch {
			case err != nil:
				w.warnf(r.nameNode, join(r.path, "name"), "write nvidia.com/mig-<profile>, e.g. nvidia.com/mig-1g.5gb",
					"%s matches no MIG device, so nothing is shared: %v", r.name, err)
				continue
			case p.ComputeInstanceSlices > 0:
				w.warnf(r.nameNode, join(r.path, "name"), "share the whole GPU instance's profile instead",
					"%s matches no device: the device plugin advertises only MIG devices whose compute instance spans the GPU instance", r.name)
				continue
			case strategy == "none" || strategy == "single":
				w.warnf(r.nameNode, join(r.path, "name"), "set flags.migStrategy: mixed",
					"%s exists only with migStrategy mixed; with migStrategy %s this entry shares nothing", r.name, strategy)
				continue
			case strategy == "":
				w.warnf(r.nameNode, join(r.path, "name"), "set flags.migStrategy: mixed here or in the device plugin's Helm values",
					"%s exists only with migStrategy mixed, which this config does not set", r.name)
			}
			migReplicas[prof] = r.replicas
		default:
			w.warnf(r.nameNode, join(r.path, "name"), "use nvidia.com/gpu or nvidia.com/mig-<profile>",
				"%s matches no device: the device plugin advertises only nvidia.com/gpu and nvidia.com/mig-<profile>", r.name)
		}
	}
	if len(migReplicas) == 0 {
		return
	}
	profiles := make([]string, 0, len(migReplicas))
	largest := 0
	for p, n := range migReplicas {
		profiles = append(profiles, p)
		largest = max(largest, n)
	}
	sort.Strings(profiles)
	dev := ImportedDevices{All: true, MIGEnabled: true, MIGDevices: map[string]int{}}
	for _, p := range profiles {
		dev.MIGDevices[p] = 0
	}
	imp.Devices = append(imp.Devices, dev)
	// MIGSharing summarizes (the largest); each profile's own replicas are
	// in DevicePlugin.Replicas, which ApplyImported gives its instances.
	imp.MIGSharing = sharing(largest)
}
