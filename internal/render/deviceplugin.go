package render

import (
	"bytes"
	"fmt"
	"regexp"
	"sort"
	"strings"

	"gopkg.in/yaml.v3"

	"github.com/gpuslice/gpuslice/internal/alloc"
	"github.com/gpuslice/gpuslice/internal/model"
	"github.com/gpuslice/gpuslice/internal/plan"
)

// The ConfigMap the nvidia-device-plugin target writes. The GPU operator
// finds the ConfigMap through its ClusterPolicy
// (spec.devicePlugin.config.name) in its own namespace; a device plugin
// installed by its own Helm chart (config.name) reads it from the chart's
// namespace, often kube-system: Options.Namespace (render --namespace)
// puts it there.
const (
	DevicePluginConfigMapName = "nvidia-device-plugin-configs"
	DevicePluginNamespace     = "gpu-operator"
	// DevicePluginConfigLabel is the node label that selects a config
	// (a data key) of the ConfigMap; the device plugin's config-manager
	// sidecar watches it.
	DevicePluginConfigLabel = "nvidia.com/device-plugin.config"
)

// The resource names the device plugin advertises without renaming (the
// same as spec.DevicePluginGPUResource and spec.DevicePluginMIGResourcePrefix;
// render stays free of the readers).
const (
	dpGPUResource       = "nvidia.com/gpu"
	dpMIGResourcePrefix = "nvidia.com/mig-"
)

func init() { register("nvidia-device-plugin", renderDevicePlugin) }

// dpConfig is one pool's device-plugin config.
type dpConfig struct {
	pool        string
	migStrategy string // none or mixed
	mode        alloc.Mode
	replicas    int
	mig         []dpMIGResource
	// notes become YAML comments in the embedded config.
	notes []string
	// about is the comment above the data key.
	about string
}

type dpMIGResource struct {
	profile  string
	replicas int
}

// dpTally counts how the devices of one kind are shared.
type dpTally struct {
	ts, mps, exclusive, dynamic int
	tsMin, tsMax                int
	mpsMin, mpsMax              int
	// mpsUsers is the most claims the plan puts on one MPS device.
	mpsUsers int
}

func (t *dpTally) add(sh alloc.Sharing) {
	switch sh.Mode {
	case alloc.TimeSlice:
		if sh.Replicas < 2 {
			t.exclusive++ // one replica is no sharing; the device plugin rejects replicas < 2
			return
		}
		if t.ts == 0 || sh.Replicas < t.tsMin {
			t.tsMin = sh.Replicas
		}
		t.tsMax = max(t.tsMax, sh.Replicas)
		t.ts++
	case alloc.MPS:
		n := sh.MaxClients
		if n < 2 {
			t.exclusive++
			return
		}
		if t.mps == 0 || n < t.mpsMin {
			t.mpsMin = n
		}
		t.mpsMax = max(t.mpsMax, n)
		t.mps++
	case alloc.Dynamic, "":
		t.dynamic++
	default:
		t.exclusive++
	}
}

// dpPoolConfig decides one pool's config from the plan's per-GPU sharing.
func dpPoolConfig(pp *plan.PoolPlan) dpConfig {
	c := dpConfig{pool: pp.Name, migStrategy: "none"}
	var whole dpTally
	perProfile := map[string]*dpTally{}
	var profiles []string
	migGPUs := 0
	for _, g := range pp.GPUs {
		if !g.MIG {
			whole.add(g.Sharing)
			continue
		}
		migGPUs++
		for _, in := range g.Instances {
			t := perProfile[in.Profile]
			if t == nil {
				t = &dpTally{}
				perProfile[in.Profile] = t
				profiles = append(profiles, in.Profile)
			}
			t.add(in.Sharing)
			if in.Sharing.Mode == alloc.MPS {
				t.mpsUsers = max(t.mpsUsers, len(in.Claims))
			}
		}
	}
	if migGPUs > 0 {
		c.migStrategy = "mixed"
	}
	c.about = fmt.Sprintf("pool %s: %d node(s) × %d %s", pp.Name, pp.Nodes, pp.GPUsPerNode, pp.GPU)
	if migGPUs > 0 {
		c.about += fmt.Sprintf(", %d with MIG", migGPUs)
	}

	// Whole GPUs: one strategy and one replica count for the whole node.
	switch {
	case whole.ts > 0 && whole.mps > 0:
		if whole.mps > whole.ts {
			c.mode, c.replicas = alloc.MPS, whole.mpsMax
		} else {
			c.mode, c.replicas = alloc.TimeSlice, whole.tsMax
		}
		c.notes = append(c.notes, fmt.Sprintf("the plan time-slices %d GPU(s) and uses MPS on %d; the device plugin shares every GPU of a node the same way, so all use %s (gpuslice's agent can share per GPU)",
			whole.ts, whole.mps, dpModeName(c.mode)))
	case whole.ts > 0:
		c.mode, c.replicas = alloc.TimeSlice, whole.tsMax
	case whole.mps > 0:
		c.mode, c.replicas = alloc.MPS, whole.mpsMax
	}
	if c.mode == alloc.MPS && migGPUs > 0 {
		c.notes = append(c.notes, fmt.Sprintf("the plan uses MPS on %d whole GPU(s) next to MIG GPUs; the device plugin rejects MPS with migStrategy mixed, so those GPUs are not shared here (gpuslice's agent runs their MPS daemons)", whole.mps))
		c.mode, c.replicas = "", 0
	}
	if c.mode == alloc.MPS && c.replicas > alloc.MaxMPSClients {
		c.notes = append(c.notes, fmt.Sprintf("MPS takes at most %d clients per GPU; %d lowered to %d", alloc.MaxMPSClients, c.replicas, alloc.MaxMPSClients))
		c.replicas = alloc.MaxMPSClients
	}
	switch c.mode {
	case alloc.TimeSlice:
		if whole.tsMin != whole.tsMax {
			c.notes = append(c.notes, fmt.Sprintf("GPUs of this pool are planned with %d to %d replicas; the device plugin takes one value per node, so all get the largest, %d", whole.tsMin, whole.tsMax, c.replicas))
		}
	case alloc.MPS:
		if whole.mpsMin != whole.mpsMax {
			c.notes = append(c.notes, fmt.Sprintf("GPUs of this pool are planned with %d to %d MPS clients; the device plugin takes one value per node, so all get the largest, %d", whole.mpsMin, whole.mpsMax, c.replicas))
		}
	}
	if c.mode != "" && whole.exclusive > 0 {
		c.notes = append(c.notes, fmt.Sprintf("%d whole GPU(s) are planned exclusive but the device plugin shares every GPU of the node (its devices field is ignored)", whole.exclusive))
	}

	// MIG instances: time-slicing per profile; MPS is not supported on MIG.
	sort.Strings(profiles)
	for _, prof := range profiles {
		t := perProfile[prof]
		replicas := t.tsMax
		if t.mps > 0 {
			replicas = dpMPSOnMIG(&c, prof, t)
		}
		if replicas < 2 {
			continue
		}
		c.mig = append(c.mig, dpMIGResource{profile: prof, replicas: replicas})
		if t.tsMin != t.tsMax {
			c.notes = append(c.notes, fmt.Sprintf("%s instances are planned with %d to %d replicas; all get the largest, %d", prof, t.tsMin, t.tsMax, t.tsMax))
		}
		if t.exclusive > 0 {
			c.notes = append(c.notes, fmt.Sprintf("%d %s instance(s) are planned exclusive but the device plugin shares every %s instance the same way", t.exclusive, prof, prof))
		}
	}
	return c
}

func dpModeName(m alloc.Mode) string {
	if m == alloc.MPS {
		return "MPS"
	}
	return "time-slicing"
}

// text is the embedded config, as YAML.
func (c dpConfig) text() string {
	var b strings.Builder
	for _, n := range c.notes {
		b.WriteString("# " + dpOneLine(n) + "\n")
	}
	b.WriteString("version: v1\n")
	b.WriteString("flags:\n  migStrategy: " + c.migStrategy + "\n")
	type res struct {
		name     string
		replicas int
	}
	var list []res
	if c.mode != "" {
		list = append(list, res{dpGPUResource, c.replicas})
	}
	for _, m := range c.mig {
		list = append(list, res{migResourceName(m.profile), m.replicas})
	}
	if len(list) == 0 {
		return b.String()
	}
	section := "timeSlicing"
	if c.mode == alloc.MPS {
		section = "mps"
	}
	b.WriteString("sharing:\n  " + section + ":\n")
	b.WriteString("    renameByDefault: false\n")
	b.WriteString("    failRequestsGreaterThanOne: true\n")
	b.WriteString("    resources:\n")
	for _, r := range list {
		fmt.Fprintf(&b, "    - name: %s\n      replicas: %d\n", r.name, r.replicas)
	}
	return b.String()
}

// dpYAMLKey writes s as a YAML mapping key, quoted when YAML (1.1 or 1.2)
// would read it as something other than that string.
func dpYAMLKey(s string) string {
	out, err := yaml.Marshal(s)
	if err != nil {
		return fmt.Sprintf("%q", s)
	}
	return strings.TrimSuffix(string(out), "\n")
}

// dpOneLine keeps a comment on one line.
func dpOneLine(s string) string { return strings.Join(strings.Fields(s), " ") }

// dpReLabelValue is Kubernetes' rule for label values; ConfigMap keys are a
// superset, so a pool name that passes is both.
var dpReLabelValue = regexp.MustCompile(`^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$`)

func renderDevicePlugin(s *model.Spec, p *plan.Plan) ([]byte, error) {
	return renderDevicePluginIn(s, p, DevicePluginNamespace)
}

// dpReNamespace is Kubernetes' rule for a namespace name (an RFC 1123
// label).
var dpReNamespace = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`)

// checkNamespace refuses what Kubernetes would not take as a namespace.
func checkNamespace(ns string) error {
	if len(ns) > 63 || !dpReNamespace.MatchString(ns) {
		return fmt.Errorf("namespace %q: want lowercase letters, digits and '-', at most 63, starting and ending with a letter or digit (e.g. kube-system, gpu-operator)", ns)
	}
	return nil
}

// renderDevicePluginIn writes the ConfigMap in namespace ns.
func renderDevicePluginIn(s *model.Spec, p *plan.Plan, ns string) ([]byte, error) {
	if p == nil || len(p.Pools) == 0 {
		return nil, fmt.Errorf("nvidia-device-plugin: the plan has no pools")
	}
	var b bytes.Buffer
	for _, l := range []string{
		"NVIDIA k8s-device-plugin configs written by gpuslice, one per pool (data key = pool name).",
		"A node uses its pool's config through the node label " + DevicePluginConfigLabel + "=<pool>, e.g.",
		"  kubectl label nodes -l " + plan.PoolLabel + "=<pool> " + DevicePluginConfigLabel + "=<pool>",
		"The GPU operator reads this ConfigMap (in its namespace) when its ClusterPolicy sets",
		"  spec.devicePlugin.config.name: " + DevicePluginConfigMapName + " (Helm: --set devicePlugin.config.name=" + DevicePluginConfigMapName + ");",
		"the device plugin's own Helm chart reads it from the chart's namespace with --set config.name=" + DevicePluginConfigMapName + ".",
		"The device plugin shares every GPU of a node the same way and cannot share per GPU; where the plan",
		"differs between GPUs of a pool, the config says so in a comment and uses the largest replicas.",
	} {
		b.WriteString("# " + l + "\n")
	}
	b.WriteString("apiVersion: v1\nkind: ConfigMap\nmetadata:\n")
	fmt.Fprintf(&b, "  name: %s\n  namespace: %s\n", DevicePluginConfigMapName, ns)
	b.WriteString("  labels:\n    app.kubernetes.io/managed-by: gpuslice\n")
	b.WriteString("data:\n")
	seen := map[string]bool{}
	written := map[string]string{} // data key -> text, for imported configs pools share
	for i := range p.Pools {
		pp := &p.Pools[i]
		if len(pp.Name) > 63 || !dpReLabelValue.MatchString(pp.Name) {
			return nil, fmt.Errorf("nvidia-device-plugin: pool name %q cannot be a ConfigMap key and label value (letters, digits, '-', '_', '.'; at most 63; starting and ending with a letter or digit)", pp.Name)
		}
		if seen[pp.Name] {
			return nil, fmt.Errorf("nvidia-device-plugin: pool %q appears twice in the plan", pp.Name)
		}
		seen[pp.Name] = true
		c := dpPoolConfig(pp)
		if sp := mpSpecPool(s, pp.Name); sp != nil && sp.DevicePlugin != nil {
			key, about, text := dpImportedEntry(sp, pp, c)
			if prev, ok := written[key]; ok {
				if prev != text {
					return nil, fmt.Errorf("nvidia-device-plugin: two pools use data key %q with different configs", key)
				}
				b.WriteString("  # pool " + dpOneLine(pp.Name) + " uses data key " + dpOneLine(key) + " above\n")
				continue
			}
			written[key] = text
			for _, l := range about {
				b.WriteString("  # " + dpOneLine(l) + "\n")
			}
			dpWriteBlock(&b, key, text)
			continue
		}
		if _, ok := written[pp.Name]; ok {
			return nil, fmt.Errorf("nvidia-device-plugin: data key %q is both an imported config and pool %s", pp.Name, pp.Name)
		}
		written[pp.Name] = c.text()
		b.WriteString("  # " + dpOneLine(c.about) + "\n")
		dpWriteBlock(&b, pp.Name, c.text())
	}
	// Imported configs no pool uses are carried through too.
	for _, imp := range dpUnusedImports(s) {
		key := imp.Key
		if key == "" {
			key = imp.Name
		}
		if _, ok := written[key]; ok {
			return nil, fmt.Errorf("nvidia-device-plugin: data key %q is written twice (an imported config no pool uses, and a pool's)", key)
		}
		written[key] = imp.Text
		b.WriteString("  # imported from " + dpOneLine(dpPosText(imp.Where)) + ", used by no pool of the plan; written back unchanged\n")
		dpWriteBlock(&b, key, imp.Text)
	}
	return b.Bytes(), nil
}

// dpMPSOnMIG decides how MIG instances the plan shares with MPS are
// advertised: the device plugin runs no MPS on MIG devices (its MPS daemon
// skips them, and MPS is refused with migStrategy mixed), so they are
// time-sliced with as many replicas as the plan puts clients on one
// instance — the planned pods then schedule, each request of
// nvidia.com/mig-<profile> taking one replica. It returns the replicas
// (below 2: advertised unshared) and notes what changes.
func dpMPSOnMIG(c *dpConfig, prof string, t *dpTally) int {
	replicas := max(t.tsMax, t.mpsUsers)
	if replicas < 2 {
		c.notes = append(c.notes, fmt.Sprintf("%d %s instance(s) are planned with MPS for one client each; the device plugin advertises them unshared", t.mps, prof))
		return replicas
	}
	c.notes = append(c.notes, fmt.Sprintf("%d %s instance(s) are planned with MPS; the device plugin runs no MPS on MIG devices, so they are time-sliced with %d replicas and the pods' CUDA_MPS_* limits apply only where gpuslice's agent runs their MPS daemons",
		t.mps, prof, replicas))
	return replicas
}
