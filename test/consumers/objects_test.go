package consumers

import (
	"context"
	"fmt"
	"strings"
	"testing"

	mpv1 "github.com/NVIDIA/mig-parted/api/spec/v1"
	appsv1 "k8s.io/api/apps/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer/json"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/kubernetes/scheme"
	karpv1 "sigs.k8s.io/karpenter/pkg/apis/v1"
	"sigs.k8s.io/yaml"
)

// strictScheme knows Kubernetes' built-in types and, registered by the
// import of karpv1 (its doc.go adds them to client-go's scheme), Karpenter's.
var strictScheme = scheme.Scheme

// strictDecoder fails on unknown and duplicate fields, as kubectl's
// server-side field validation does.
var strictDecoder = json.NewSerializerWithOptions(json.DefaultMetaFactory, strictScheme, strictScheme,
	json.SerializerOptions{Yaml: true, Strict: true})

// strictDecode decodes one document into into, which must be of
// apiVersion/kind.
func strictDecode(t *testing.T, doc []byte, apiVersion, kind string, into runtime.Object) {
	t.Helper()
	obj, gvk, err := strictDecoder.Decode(doc, nil, into)
	if err != nil {
		t.Fatalf("strict decoding: %v\n%s", err, doc)
	}
	if gvk.GroupVersion().String() != apiVersion || gvk.Kind != kind {
		t.Fatalf("%s %s, want %s %s", gvk.GroupVersion(), gvk.Kind, apiVersion, kind)
	}
	_ = obj
}

// decodeAny strictly decodes a document of any known kind.
func decodeAny(t *testing.T, doc []byte) runtime.Object {
	t.Helper()
	obj, _, err := strictDecoder.Decode(doc, nil, nil)
	if err != nil {
		t.Fatalf("strict decoding: %v\n%s", err, doc)
	}
	return obj
}

// checkMIGParted: mig-parted's own types (their UnmarshalJSON rejects
// unknown fields, missing required ones and bad profiles), and every config
// name can be the value of the label nvidia.com/mig.config.
func checkMIGParted(t *testing.T, out []byte) {
	var spec mpv1.Spec
	if err := yaml.Unmarshal(out, &spec); err != nil {
		t.Fatalf("mig-parted refuses it: %v\n%s", err, out)
	}
	if spec.Version != mpv1.Version {
		t.Errorf("version %q", spec.Version)
	}
	for name, entries := range spec.MigConfigs {
		if errs := validation.IsValidLabelValue(name); len(errs) > 0 {
			t.Errorf("config %q cannot be the value of nvidia.com/mig.config: %v", name, errs)
		}
		if len(entries) == 0 {
			t.Errorf("config %q is empty", name)
		}
	}
}

// checkKubernetes: Namespaces and Deployments, strictly decoded, with
// valid resource names.
func checkKubernetes(t *testing.T, out []byte) {
	for _, doc := range documents(out) {
		switch o := decodeAny(t, doc).(type) {
		case *corev1.Namespace:
		case *appsv1.Deployment:
			for _, c := range o.Spec.Template.Spec.Containers {
				for name := range c.Resources.Limits {
					if errs := validation.IsQualifiedName(string(name)); len(errs) > 0 {
						t.Errorf("deployment %s: resource %s: %v", o.Name, name, errs)
					}
				}
			}
		default:
			t.Errorf("unexpected %T", o)
		}
	}
}

// checkHPA: autoscaling/v2 HorizontalPodAutoscalers, strictly decoded,
// aimed at a Deployment, with sane bounds and one Pods metric.
func checkHPA(t *testing.T, out []byte) {
	for _, doc := range documents(out) {
		h, ok := decodeAny(t, doc).(*autoscalingv2.HorizontalPodAutoscaler)
		if !ok {
			t.Errorf("not a HorizontalPodAutoscaler:\n%s", doc)
			continue
		}
		if h.Spec.ScaleTargetRef.Kind != "Deployment" || h.Spec.MinReplicas == nil || *h.Spec.MinReplicas < 1 ||
			h.Spec.MaxReplicas < *h.Spec.MinReplicas || len(h.Spec.Metrics) != 1 || h.Spec.Metrics[0].Pods == nil {
			t.Errorf("HPA %s: %+v", h.Name, h.Spec)
		}
	}
}

// checkKarpenter: Karpenter's NodePool types, strictly decoded, and its
// RuntimeValidate (pools without an instance type get no NodePool).
func checkKarpenter(t *testing.T, out []byte) {
	for _, doc := range documents(out) {
		np, ok := decodeAny(t, doc).(*karpv1.NodePool)
		if !ok {
			t.Errorf("not a NodePool:\n%s", doc)
			continue
		}
		if err := np.RuntimeValidate(context.Background()); err != nil {
			t.Errorf("NodePool %s: %v", np.Name, err)
		}
	}
}

// checkDRA: resource.k8s.io/v1 objects strictly decoded; each opaque
// config checked against NVIDIA's DRA driver rules (draconfig_test.go),
// and the header names the feature gates the configs need.
func checkDRA(t *testing.T, out []byte) { checkDRAFor(t, out, "gpu.nvidia.com") }

// checkDRAGpuslice: the dra target for gpuslice's driver (render
// --dra-driver gpuslice): the same checks, its DeviceClasses, and every
// opaque config a SliceConfig with only the fields the render writes.
func checkDRAGpuslice(t *testing.T, out []byte) { checkDRAFor(t, out, "gpu.gpuslice.dev") }

// sliceConfig is gpuslice's SliceConfig as the dra target writes it;
// strict decoding refuses any other field.
type sliceConfig struct {
	APIVersion    string  `json:"apiVersion"`
	Kind          string  `json:"kind"`
	Mode          string  `json:"mode"`
	ThreadPercent *int    `json:"threadPercent"`
	PinnedMemory  *string `json:"pinnedMemory"`
	MemoryPolicy  string  `json:"memoryPolicy"`
}

func checkSliceConfig(raw []byte) error {
	var c sliceConfig
	if err := strictJSON(raw, &c); err != nil {
		return err
	}
	if c.APIVersion != "gpu.gpuslice.dev/v1alpha1" || c.Kind != "SliceConfig" {
		return fmt.Errorf("%s %s, want gpu.gpuslice.dev/v1alpha1 SliceConfig", c.APIVersion, c.Kind)
	}
	switch c.Mode {
	case "timeslice":
		if c.ThreadPercent != nil || c.PinnedMemory != nil {
			return fmt.Errorf("threadPercent and pinnedMemory need mode mps")
		}
	case "mps":
		if p := c.ThreadPercent; p != nil && (*p < 1 || *p > 100) {
			return fmt.Errorf("threadPercent %d: valid is 1..100", *p)
		}
		if q := c.PinnedMemory; q != nil {
			v, err := resource.ParseQuantity(*q)
			if err != nil || v.Sign() <= 0 {
				return fmt.Errorf("pinnedMemory %q: want a positive quantity", *q)
			}
		}
	default:
		return fmt.Errorf("mode %q: the render writes timeslice or mps", c.Mode)
	}
	if c.MemoryPolicy != "" && c.MemoryPolicy != "warn" && c.MemoryPolicy != "kill" {
		return fmt.Errorf("memoryPolicy %q: valid are warn, kill", c.MemoryPolicy)
	}
	return nil
}

func checkDRAFor(t *testing.T, out []byte, driver string) {
	var strategies []string
	claims, templates := map[string]bool{}, map[string]bool{} // namespace/name
	var deployments []*appsv1.Deployment
	for _, doc := range documents(out) {
		var configs []resourcev1.DeviceClaimConfiguration
		switch o := decodeAny(t, doc).(type) {
		case *corev1.Namespace:
		case *resourcev1.DeviceClass:
			if !strings.HasSuffix(o.Name, "."+strings.TrimPrefix(driver, "gpu.")) {
				t.Errorf("DeviceClass %s is not %s's", o.Name, driver)
			}
		case *resourcev1.ResourceClaimTemplate:
			configs = o.Spec.Spec.Devices.Config
			templates[o.Namespace+"/"+o.Name] = true
		case *resourcev1.ResourceClaim:
			configs = o.Spec.Devices.Config
			claims[o.Namespace+"/"+o.Name] = true
		case *appsv1.Deployment:
			deployments = append(deployments, o)
		default:
			t.Errorf("unexpected %T", o)
		}
		for _, c := range configs {
			if c.Opaque == nil || c.Opaque.Driver != driver {
				t.Errorf("config %+v is not for %s", c, driver)
				continue
			}
			if driver == "gpu.gpuslice.dev" {
				if err := checkSliceConfig(c.Opaque.Parameters.Raw); err != nil {
					t.Errorf("SliceConfig %s: %v", c.Opaque.Parameters.Raw, err)
				}
				continue
			}
			s, err := checkNVIDIAConfig(c.Opaque.Parameters.Raw)
			if err != nil {
				t.Errorf("NVIDIA's DRA driver (%s) would reject %s: %v", draDriverVersion, c.Opaque.Parameters.Raw, err)
			}
			strategies = append(strategies, s)
		}
	}
	// Every claim a pod references is in the render, in the pod's
	// namespace, and every container claim names one of the pod's.
	for _, d := range deployments {
		pod := d.Spec.Template.Spec
		names := map[string]bool{}
		for _, rc := range pod.ResourceClaims {
			names[rc.Name] = true
			switch {
			case rc.ResourceClaimName != nil:
				if !claims[d.Namespace+"/"+*rc.ResourceClaimName] {
					t.Errorf("Deployment %s/%s references ResourceClaim %s, which the render lacks", d.Namespace, d.Name, *rc.ResourceClaimName)
				}
			case rc.ResourceClaimTemplateName != nil:
				if !templates[d.Namespace+"/"+*rc.ResourceClaimTemplateName] {
					t.Errorf("Deployment %s/%s references ResourceClaimTemplate %s, which the render lacks", d.Namespace, d.Name, *rc.ResourceClaimTemplateName)
				}
			default:
				t.Errorf("Deployment %s/%s: pod claim %s names neither a claim nor a template", d.Namespace, d.Name, rc.Name)
			}
		}
		for _, c := range pod.Containers {
			for _, cc := range c.Resources.Claims {
				if !names[cc.Name] {
					t.Errorf("Deployment %s/%s container %s uses claim %s, not one of the pod's", d.Namespace, d.Name, c.Name, cc.Name)
				}
			}
		}
	}
	header := string(out)
	for _, s := range strategies {
		gate := featureGateOf[s]
		if gate != "" && !strings.Contains(header, gate) {
			t.Errorf("a %s config is rendered but the output never names the feature gate %s", s, gate)
		}
	}
}
