package render

import (
	"fmt"
	"strings"

	"github.com/gpuslice/gpuslice/internal/catalog"
	"github.com/gpuslice/gpuslice/internal/model"
	"github.com/gpuslice/gpuslice/internal/plan"
)

func init() { register("karpenter", renderKarpenter) }

// nodeClasses maps a cloud to the Karpenter provider's node class.
var nodeClasses = map[string]obj{
	"aws":   {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"},
	"azure": {"group": "karpenter.azure.com", "kind": "AKSNodeClass", "name": "default"},
}

// renderKarpenter writes a karpenter.sh/v1 NodePool per pool with an
// instance type: the instance type requirement, the pool and NVIDIA config
// labels (so the device plugin and MIG manager pick the rendered configs),
// the labels pods select GPU nodes by (nvidia.com/gpu: "true", GPU feature
// discovery's nvidia.com/gpu.product and others: gpuNodeLabels),
// the GPU taint, a GPU limit from the plan (or maxNodes), and consolidation
// of empty nodes. A pool whose workloads ask compose minimumNodesInPool
// also gets a static NodePool of that many warm nodes (Karpenter static
// capacity, alpha): a dynamic NodePool has no minimum, it provisions only
// for pending pods and consolidates empty nodes away.
func renderKarpenter(s *model.Spec, p *plan.Plan) ([]byte, error) {
	return renderKarpenterFor(s, p, false)
}

// renderKarpenterFor is the karpenter target; with dra (render
// --dra-driver gpuslice) its NodePools are for the claims of the dra
// target on gpuslice's driver (karpenterdra.go).
func renderKarpenterFor(s *model.Spec, p *plan.Plan, dra bool) ([]byte, error) {
	var objs []obj
	var comments [][]string
	cat := catalog.Default()
	warm := karpenterWarm(s, p)
	for i := range p.Pools {
		pp := &p.Pools[i]
		if pp.InstanceType == "" {
			objs, comments = append(objs, nil), append(comments, []string{"WARNING: " + karpenterNoInstanceType(pp.Name)})
			continue
		}
		it, err := cat.InstanceType(pp.InstanceType)
		if err != nil {
			return nil, err
		}
		class, ok := nodeClasses[it.Provider]
		if !ok {
			comments = append(comments, []string{fmt.Sprintf("pool %s: Karpenter has no %s provider; skipped", pp.Name, it.Provider)})
			objs = append(objs, nil)
			continue
		}
		sp := specPool(s, pp.Name)
		g, _ := cat.GPU(it.GPU)
		labels := gpuNodeLabels(s, pp, g, dra)
		if !dra {
			// The config the nvidia-device-plugin target writes for the
			// pool: its own data key, or the key of the config it
			// imported (which the target writes back under that key).
			labels[devicePluginLabel] = pp.Name
			if sp != nil && sp.DevicePlugin != nil && sp.DevicePlugin.Key != "" {
				labels[devicePluginLabel] = sp.DevicePlugin.Key
			}
			if usesMIG(pp) {
				labels[migConfigLabel] = "gpuslice-" + pp.Name
			}
		}
		instanceTypes := []string{pp.InstanceType}
		var draNotes []string
		if dra {
			// gpuslice's driver reads neither NVIDIA config label.
			if instanceTypes, draNotes, err = draInstanceTypes(p, pp, it, cat); err != nil {
				return nil, err
			}
			// A node may be any admitted type: only the labels all of
			// them share.
			for _, name := range instanceTypes {
				other, err := cat.InstanceType(name)
				if err != nil {
					return nil, err
				}
				og, _ := cat.GPU(other.GPU)
				ol := gpuNodeLabels(s, &plan.PoolPlan{Name: pp.Name, GPUsPerNode: other.GPUCount}, og, true)
				for k, v := range labels {
					if ol[k] != v {
						delete(labels, k)
					}
				}
			}
		}
		labels[plan.PoolLabel] = pp.Name
		taints := []obj{{"key": gpuTaint, "value": "true", "effect": "NoSchedule"}}
		maxNodes := pp.Nodes
		if sp != nil {
			for k, v := range sp.Labels {
				labels[k] = v
			}
			for _, t := range sp.Taints {
				taints = append(taints, obj{"key": t.Key, "value": t.Value, "effect": t.Effect})
			}
			if sp.MaxNodes > maxNodes {
				maxNodes = sp.MaxNodes
			}
		}
		template := func() obj {
			return obj{
				"metadata": obj{"labels": labels},
				"spec": obj{
					"nodeClassRef": class,
					"requirements": []obj{
						{"key": instanceTypeLabel, "operator": "In", "values": instanceTypes},
						{"key": "karpenter.sh/capacity-type", "operator": "In", "values": []string{"on-demand"}},
					},
					"taints":      taints,
					"expireAfter": "720h",
				},
			}
		}
		w := warm[pp.Name]
		// The warm nodes count toward a maxNodes the spec sets: the
		// dynamic NodePool may add the rest. Without one, its limit stays
		// the plan's need, headroom over the warm nodes.
		dynamic := maxNodes
		if w.nodes > 0 && sp != nil && sp.MaxNodes > 0 {
			dynamic = max(maxNodes-w.nodes, 0)
		}
		objs = append(objs, obj{"apiVersion": "karpenter.sh/v1", "kind": "NodePool",
			"metadata": obj{"name": dnsName("gpuslice-" + pp.Name)},
			"spec": obj{
				"template":   template(),
				"limits":     obj{"nvidia.com/gpu": fmt.Sprint(dynamic * pp.GPUsPerNode)},
				"disruption": obj{"consolidationPolicy": "WhenEmpty", "consolidateAfter": "5m"},
			}})
		comments = append(comments, append([]string{fmt.Sprintf("pool %s: the plan needs %d × %s (%d GPUs, %d in use)",
			pp.Name, pp.Nodes, pp.InstanceType, pp.Nodes*pp.GPUsPerNode, pp.GPUsUsed)}, draNotes...))
		if w.nodes > 0 {
			objs = append(objs, obj{"apiVersion": "karpenter.sh/v1", "kind": "NodePool",
				"metadata": obj{"name": dnsName("gpuslice-" + pp.Name + "-warm")},
				"spec": obj{
					"replicas": w.nodes,
					"template": template(),
					"limits":   obj{"nodes": fmt.Sprint(w.nodes)},
				}})
			comments = append(comments, []string{fmt.Sprintf("pool %s: %d node(s) kept warm for minimumNodesInPool of %s (static capacity: Karpenter's StaticCapacity feature gate, alpha)",
				pp.Name, w.nodes, w.workload)})
		}
	}
	var keep []obj
	var keepC [][]string
	header := []string{"Karpenter NodePools rendered by gpuslice from " + strings.Join(s.Sources, ", "),
		"nodeClassRef names a node class called default: create it for your account"}
	if dra {
		header = append(header, karpenterDRAHeader...)
	}
	for i, o := range objs {
		if o != nil {
			keep = append(keep, o)
			keepC = append(keepC, comments[i])
			continue
		}
		header = append(header, comments[i]...) // why a pool has no NodePool
	}
	return documents(header, keep, keepC)
}

// warmPool is the most minimumNodesInPool asked of a pool, and by whom.
type warmPool struct {
	nodes    int
	workload string
}

// karpenterWarm is, per planned pool, the largest minimumNodesInPool of
// the workloads placed on it.
func karpenterWarm(s *model.Spec, p *plan.Plan) map[string]warmPool {
	asked := map[string]int{}
	for _, wl := range s.Workloads {
		if wl.Autoscaling != nil && wl.Autoscaling.MinimumNodesInPool > 0 {
			asked[wl.Name] = wl.Autoscaling.MinimumNodesInPool
		}
	}
	out := map[string]warmPool{}
	for _, pl := range p.Placements {
		if n := asked[pl.Workload]; n > out[pl.Pool].nodes {
			out[pl.Pool] = warmPool{nodes: n, workload: pl.Workload}
		}
	}
	return out
}

func specPool(s *model.Spec, name string) *model.Pool {
	for i := range s.Pools {
		if s.Pools[i].Name == name {
			return &s.Pools[i]
		}
	}
	return nil
}

func usesMIG(pp *plan.PoolPlan) bool {
	for _, g := range pp.GPUs {
		if g.MIG {
			return true
		}
	}
	return false
}

func init() {
	registerWarnings("karpenter", func(s *model.Spec, p *plan.Plan) []string {
		var out []string
		warm := karpenterWarm(s, p)
		for i := range p.Pools {
			if p.Pools[i].InstanceType == "" {
				out = append(out, karpenterNoInstanceType(p.Pools[i].Name))
				continue
			}
			if w := warm[p.Pools[i].Name]; w.nodes > 0 {
				out = append(out, fmt.Sprintf("pool %s: minimumNodesInPool %d (%s) is rendered as the static NodePool %s (replicas %d), which needs Karpenter's alpha StaticCapacity feature gate; without it no NodePool keeps nodes warm",
					p.Pools[i].Name, w.nodes, w.workload, dnsName("gpuslice-"+p.Pools[i].Name+"-warm"), w.nodes))
			}
		}
		return out
	})
}

// karpenterNoInstanceType is what the karpenter target says of a pool
// described by GPU model and count instead of an instance type.
func karpenterNoInstanceType(pool string) string {
	return fmt.Sprintf("pool %s has no instanceType (it names a GPU model and count), so no NodePool is written for it: "+
		"Karpenter provisions instance types; set the pool's instanceType (gpuslice catalog instances lists them)", pool)
}
