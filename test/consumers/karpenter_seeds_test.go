package consumers

// The seeds' pods on the karpenter target's NodePools, decided by
// Karpenter's own provisioning scheduler (v1.15.0): a pod that selects a
// node label the NodePool does not carry never gets a node, however the
// node would be labelled once it runs (GPU feature discovery's labels
// come after the node joins).

import (
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/uuid"
	karpv1 "sigs.k8s.io/karpenter/pkg/apis/v1"
	"sigs.k8s.io/karpenter/pkg/test"
	"sigs.k8s.io/yaml"
)

// seedPod is a pending pod of the seeds: one nvidia.com/gpu (when gpu),
// the GPU taint tolerated, and the given node selector and required
// affinity.
func seedPod(name string, gpu bool, selector map[string]string, required ...corev1.NodeSelectorRequirement) *corev1.Pod {
	opts := test.PodOptions{
		ObjectMeta:       metav1.ObjectMeta{Name: name, Namespace: "gpu-demo", UID: uuid.NewUUID()},
		NodeSelector:     selector,
		NodeRequirements: required,
		// The EKS/Karpenter seed's toleration.
		Tolerations: []corev1.Toleration{{Key: "nvidia.com/gpu", Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule}},
	}
	if gpu {
		opts.ResourceRequirements = corev1.ResourceRequirements{Limits: corev1.ResourceList{gpuResource: resource.MustParse("1")},
			Requests: corev1.ResourceList{gpuResource: resource.MustParse("1")}}
	}
	return test.UnschedulablePod(opts)
}

func renderedNodePools(t *testing.T, files ...string) []*karpv1.NodePool {
	t.Helper()
	var out []*karpv1.NodePool
	for _, doc := range documents(render(t, input{name: files[0], files: files}, "karpenter")) {
		np := &karpv1.NodePool{}
		if err := yaml.UnmarshalStrict(doc, np); err != nil {
			t.Fatal(err)
		}
		if np.Spec.Replicas != nil {
			continue // the static warm NodePool: not for pending pods
		}
		out = append(out, np)
	}
	return out
}

// The EKS/Karpenter seed's pods select nvidia.com/gpu (Exists, or "true" as
// its NodeTemplate labels nodes); the study's select GPU feature
// discovery's nvidia.com/gpu.product. On the NodePools rendered from the
// seeds' compose files, Karpenter launches the pool's instance type for
// each; a product no pool has gets no node.
func TestKarpenterLaunchesForTheSeedsPods(t *testing.T) {
	its := gpusliceInstanceTypes(t, "g4dn.xlarge", "p4d.24xlarge")
	exists := corev1.NodeSelectorRequirement{Key: "nvidia.com/gpu", Operator: corev1.NodeSelectorOpExists}
	for _, tc := range []struct {
		name, compose, instanceType string
		pod                         *corev1.Pod
	}{
		{"affinity nvidia.com/gpu Exists", "seed-timeslicing.yaml", "g4dn.xlarge", seedPod("eks-affinity", true, nil, exists)},
		{"nodeSelector nvidia.com/gpu=true", "seed-timeslicing.yaml", "g4dn.xlarge", seedPod("eks-label", true, map[string]string{"nvidia.com/gpu": "true"})},
		// GFD's product of a time-sliced T4 the device plugin does not
		// rename: Tesla-T4-SHARED.
		{"nodeSelector gpu.product of a shared T4", "seed-timeslicing.yaml", "g4dn.xlarge",
			seedPod("gfd-t4", true, map[string]string{"nvidia.com/gpu.product": "Tesla-T4-SHARED", "nvidia.com/gpu.family": "turing"})},
		{"nodeSelector gpu.product of an A100 (MIG)", "seed-mig.yaml", "p4d.24xlarge",
			seedPod("gfd-a100", false, map[string]string{"nvidia.com/gpu.product": "NVIDIA-A100-SXM4-40GB", "nvidia.com/mig.capable": "true"})},
		{"affinity nvidia.com/gpu Exists (MIG)", "seed-mig.yaml", "p4d.24xlarge", seedPod("eks-affinity-mig", false, nil, exists)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			nps := renderedNodePools(t, root+"/internal/spec/testdata/compose/"+tc.compose)
			res := solve(t, nps, its, nil, []*corev1.Pod{tc.pod})
			if len(res.PodErrors) > 0 || len(res.NewNodeClaims) != 1 {
				t.Fatalf("%d NodeClaims, errors %v; want one node of the rendered NodePool", len(res.NewNodeClaims), res.PodErrors)
			}
			if opts := optionNames(res.NewNodeClaims[0]); !slices.Equal(opts, []string{tc.instanceType}) {
				t.Errorf("launches as %v, want %s", opts, tc.instanceType)
			}
		})
	}
	nps := renderedNodePools(t, root+"/internal/spec/testdata/compose/seed-timeslicing.yaml")
	res := solve(t, nps, its, nil, []*corev1.Pod{seedPod("h100", true, map[string]string{"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"})})
	if len(res.NewNodeClaims) != 0 || len(res.PodErrors) != 1 {
		t.Errorf("a pod selecting an H100 on the T4 pool: %d NodeClaims, %d errors; want none and one", len(res.NewNodeClaims), len(res.PodErrors))
	}
}
