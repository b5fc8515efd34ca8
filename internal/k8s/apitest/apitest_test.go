package apitest

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/discovery"
)

const validManifests = `
# A ConfigMap in a namespace that does not exist yet.
apiVersion: v1
kind: ConfigMap
metadata:
  name: settings
  namespace: apitest
data:
  mode: mig
---
apiVersion: resource.k8s.io/v1
kind: DeviceClass
metadata:
  name: gpu.example.com
spec:
  selectors:
  - cel:
      expression: device.driver == "gpu.example.com"
---
apiVersion: resource.k8s.io/v1
kind: ResourceClaimTemplate
metadata:
  name: one-gpu
  namespace: apitest
spec:
  spec:
    devices:
      requests:
      - name: gpu
        exactly:
          deviceClassName: gpu.example.com
          allocationMode: ExactCount
          count: 1
---
apiVersion: resource.k8s.io/v1beta1
kind: ResourceClaim
metadata:
  name: shared-gpu
  namespace: apitest
spec:
  devices:
    requests:
    - name: gpu
      deviceClassName: gpu.example.com
---
apiVersion: apps/v1
kind: Deployment
metadata:
  name: trainer
  namespace: apitest
spec:
  replicas: 2
  selector:
    matchLabels:
      app: trainer
  template:
    metadata:
      labels:
        app: trainer
    spec:
      containers:
      - name: trainer
        image: registry.example.com/trainer:1
        resources:
          claims:
          - name: gpu
      resourceClaims:
      - name: gpu
        resourceClaimTemplateName: one-gpu
---
apiVersion: karpenter.sh/v1
kind: NodePool
metadata:
  name: gpu
spec:
  template:
    spec:
      nodeClassRef:
        group: karpenter.k8s.aws
        kind: EC2NodeClass
        name: default
      requirements:
      - key: node.kubernetes.io/instance-type
        operator: In
        values: ["p4d.24xlarge"]
      taints:
      - key: nvidia.com/gpu
        effect: NoSchedule
  limits:
    nvidia.com/gpu: "16"
  disruption:
    consolidationPolicy: WhenEmpty
    consolidateAfter: 5m
`

// migSlices is a MIG-style partitionable GPU (KEP-4815): shared counters in
// their own ResourceSlice, devices consuming them in another.
const migSlices = `
apiVersion: resource.k8s.io/v1
kind: ResourceSlice
metadata:
  name: node-a-gpu-0-counters
spec:
  driver: gpu.example.com
  nodeName: node-a
  pool: {name: node-a, generation: 1, resourceSliceCount: 2}
  sharedCounters:
  - name: gpu-0
    counters:
      memory: {value: 80Gi}
      slices: {value: "7"}
---
apiVersion: resource.k8s.io/v1
kind: ResourceSlice
metadata:
  name: node-a-gpu-0-devices
spec:
  driver: gpu.example.com
  nodeName: node-a
  pool: {name: node-a, generation: 1, resourceSliceCount: 2}
  devices:
  - name: gpu-0-mig-1g-10gb-0
    attributes:
      profile: {string: 1g.10gb}
    capacity:
      memory: {value: 10Gi}
    consumesCounters:
    - counterSet: gpu-0
      counters:
        memory: {value: 10Gi}
        slices: {value: "1"}
`

func TestAPIServer(t *testing.T) {
	t.Parallel()
	begin := time.Now()
	s := Shared(t)
	t.Logf("shared control plane ready in %v at %s", time.Since(begin).Round(time.Millisecond), s.URL)
	ctx := t.Context()

	t.Run("version", func(t *testing.T) {
		dc, err := discovery.NewDiscoveryClientForConfig(s.Config)
		if err != nil {
			t.Fatal(err)
		}
		v, err := dc.ServerVersion()
		if err != nil {
			t.Fatal(err)
		}
		want, err := SelectedVersion()
		if err != nil {
			t.Fatal(err)
		}
		if v.GitVersion != want.Git || s.Version != want {
			t.Errorf("server version %q (Server.Version %+v), want %q", v.GitVersion, s.Version, want)
		}
		// Every resource.k8s.io version is served.
		for _, gv := range []string{"resource.k8s.io/v1", "resource.k8s.io/v1beta1", "resource.k8s.io/v1beta2", "resource.k8s.io/v1alpha3", "karpenter.sh/v1"} {
			if _, err := dc.ServerResourcesForGroupVersion(gv); err != nil {
				t.Errorf("%s not served: %v", gv, err)
			}
		}
	})

	t.Run("valid", func(t *testing.T) {
		for _, err := range s.DryRun(ctx, []byte(validManifests)) {
			t.Error(err)
		}
		// A second run sees the same objects as valid (nothing was persisted).
		for _, err := range s.DryRun(ctx, []byte(validManifests)) {
			t.Error("second run:", err)
		}
		// Dry-run persisted nothing but the namespace it needed.
		if _, err := s.Get(ctx, "v1", "ConfigMap", "apitest", "settings"); !apierrors.IsNotFound(err) {
			t.Errorf("dry-run ConfigMap: Get = %v, want NotFound", err)
		}
		if _, err := s.Get(ctx, "karpenter.sh/v1", "NodePool", "", "gpu"); !apierrors.IsNotFound(err) {
			t.Errorf("dry-run NodePool: Get = %v, want NotFound", err)
		}
		if _, err := s.Get(ctx, "v1", "Namespace", "", "apitest"); err != nil {
			t.Errorf("namespace apitest was not created: %v", err)
		}
	})

	t.Run("mig-slices-keep-counters", func(t *testing.T) {
		for _, err := range s.DryRun(ctx, []byte(migSlices)) {
			t.Error(err)
		}
		for _, err := range s.Apply(ctx, []byte(migSlices)) {
			t.Fatal(err)
		}
		got, err := s.Get(ctx, "resource.k8s.io/v1", "ResourceSlice", "", "node-a-gpu-0-counters")
		if err != nil {
			t.Fatal(err)
		}
		sets, _, _ := unstructured.NestedSlice(got.Object, "spec", "sharedCounters")
		if len(sets) != 1 {
			t.Errorf("sharedCounters dropped by the server: %v", got.Object["spec"])
		}
		dev, err := s.Get(ctx, "resource.k8s.io/v1", "ResourceSlice", "", "node-a-gpu-0-devices")
		if err != nil {
			t.Fatal(err)
		}
		devices, _, _ := unstructured.NestedSlice(dev.Object, "spec", "devices")
		if len(devices) != 1 || !strings.Contains(fmt.Sprint(devices[0]), "consumesCounters") {
			t.Errorf("consumesCounters dropped by the server: %v", devices)
		}
		// Applied objects validate again as updates.
		for _, err := range s.DryRun(ctx, []byte(migSlices)) {
			t.Error("existing:", err)
		}
	})

	for _, tc := range []struct {
		name, yaml string
		want       []string // substrings of the single error
	}{
		{
			name: "unknown-field-core",
			yaml: `
apiVersion: apps/v1
kind: Deployment
metadata: {name: typo, namespace: apitest}
spec:
  replica: 2
  selector: {matchLabels: {app: typo}}
  template:
    metadata: {labels: {app: typo}}
    spec:
      containers: [{name: c, image: busybox}]
`,
			want: []string{"Deployment/typo", "unknown field", "spec.replica"},
		},
		{
			name: "unknown-field-dra",
			yaml: `
apiVersion: resource.k8s.io/v1
kind: ResourceClaimTemplate
metadata: {name: old-shape, namespace: apitest}
spec:
  spec:
    devices:
      requests:
      - name: gpu
        deviceClassName: gpu.example.com
`,
			// v1beta1's shape is not v1's: requests[].exactly is needed.
			want: []string{"ResourceClaimTemplate/old-shape", "unknown field", "deviceClassName"},
		},
		{
			name: "unknown-field-crd",
			yaml: `
apiVersion: karpenter.sh/v1
kind: NodePool
metadata: {name: typo}
spec:
  template:
    spec:
      nodeClassRef: {group: karpenter.k8s.aws, kind: EC2NodeClass, name: default}
      requirements: []
      gpuSlices: 7
`,
			want: []string{"NodePool/typo", "unknown field", "spec.template.spec.gpuSlices"},
		},
		{
			name: "bad-value-replicas",
			yaml: `
apiVersion: apps/v1
kind: Deployment
metadata: {name: negative, namespace: apitest}
spec:
  replicas: -1
  selector: {matchLabels: {app: negative}}
  template:
    metadata: {labels: {app: negative}}
    spec:
      containers: [{name: c, image: busybox}]
`,
			want: []string{"Deployment/negative", "spec.replicas", "Invalid value"},
		},
		{
			name: "bad-value-cel",
			yaml: `
apiVersion: resource.k8s.io/v1
kind: DeviceClass
metadata: {name: broken.example.com}
spec:
  selectors:
  - cel:
      expression: device.driver ==
`,
			want: []string{"DeviceClass/broken.example.com", "spec.selectors[0].cel.expression", "Invalid value"},
		},
		{
			name: "bad-value-crd-enum",
			yaml: `
apiVersion: karpenter.sh/v1
kind: NodePool
metadata: {name: enum}
spec:
  disruption: {consolidationPolicy: Sometimes, consolidateAfter: 5m}
  template:
    spec:
      nodeClassRef: {group: karpenter.k8s.aws, kind: EC2NodeClass, name: default}
      requirements: []
`,
			want: []string{"NodePool/enum", "spec.disruption.consolidationPolicy", "Unsupported value"},
		},
		{
			name: "bad-value-configmap-name",
			yaml: `
apiVersion: v1
kind: ConfigMap
metadata: {name: Not_A_DNS_Name, namespace: apitest}
`,
			want: []string{"ConfigMap/Not_A_DNS_Name", "metadata.name", "Invalid value"},
		},
		{
			name: "missing-required-dra",
			yaml: `
apiVersion: resource.k8s.io/v1
kind: ResourceClaimTemplate
metadata: {name: no-class, namespace: apitest}
spec:
  spec:
    devices:
      requests:
      - name: gpu
        exactly: {count: 1}
`,
			want: []string{"ResourceClaimTemplate/no-class", "deviceClassName", "Required value"},
		},
		{
			name: "missing-required-crd",
			yaml: `
apiVersion: karpenter.sh/v1
kind: NodePool
metadata: {name: no-class-ref}
spec:
  template:
    spec:
      requirements: []
`,
			want: []string{"NodePool/no-class-ref", "spec.template.spec.nodeClassRef", "Required value"},
		},
		{
			name: "missing-required-core",
			yaml: `
apiVersion: apps/v1
kind: Deployment
metadata: {name: no-selector, namespace: apitest}
spec:
  template:
    metadata: {labels: {app: x}}
    spec:
      containers: [{name: c, image: busybox}]
`,
			want: []string{"Deployment/no-selector", "spec.selector", "Required value"},
		},
		{
			name: "unknown-kind",
			yaml: `
apiVersion: gpuslice.dev/v1
kind: Slice
metadata: {name: nope}
`,
			want: []string{"Slice/nope", "does not serve"},
		},
	} {
		t.Run("invalid/"+tc.name, func(t *testing.T) {
			errs := s.DryRun(ctx, []byte(tc.yaml))
			if len(errs) != 1 {
				t.Fatalf("got %d errors, want 1: %v", len(errs), errs)
			}
			msg := errs[0].Error()
			t.Log(msg)
			for _, w := range tc.want {
				if !strings.Contains(msg, w) {
					t.Errorf("error %q\ndoes not mention %q", msg, w)
				}
			}
			var oe *ObjectError
			if !errors.As(errs[0], &oe) || oe.Document != 1 {
				t.Errorf("error is not an *ObjectError for document 1: %#v", errs[0])
			}
		})
	}

	t.Run("one-error-per-failing-object", func(t *testing.T) {
		yaml := validManifests + `
---
apiVersion: v1
kind: ConfigMap
metadata: {name: Bad, namespace: apitest}
---
# just a comment
---
apiVersion: v1
kind: ConfigMap
metadata: {name: fine, namespace: other}
---
apiVersion: apps/v1
kind: Deployment
metadata: {name: bad, namespace: other}
spec: {bogus: true}
`
		errs := s.DryRun(ctx, []byte(yaml))
		if len(errs) != 2 {
			t.Fatalf("got %d errors, want 2: %v", len(errs), errs)
		}
		var first, second *ObjectError
		errors.As(errs[0], &first)
		errors.As(errs[1], &second)
		if first == nil || second == nil || first.Document != 7 || second.Document != 9 {
			t.Errorf("errors name the wrong documents: %v", errs)
		}
		if !apierrors.IsInvalid(errs[0]) {
			t.Errorf("first error is not an Invalid API status: %v", errs[0])
		}
	})

	t.Run("decode-errors", func(t *testing.T) {
		errs := s.DryRun(ctx, []byte("kind: ConfigMap\nmetadata: {name: x}\n---\n[1, 2]\n"))
		if len(errs) != 2 {
			t.Fatalf("got %d errors, want 2: %v", len(errs), errs)
		}
		if !strings.Contains(errs[0].Error(), "apiVersion and kind are required") {
			t.Errorf("error %q", errs[0])
		}
	})
}

// fakeTB records Skip and Fatal instead of ending the test.
type fakeTB struct {
	testing.TB
	skipped, fatal string
}

type stopped struct{}

func (f *fakeTB) Helper()           {}
func (f *fakeTB) Skip(args ...any)  { f.skipped = fmt.Sprint(args...); panic(stopped{}) }
func (f *fakeTB) Fatal(args ...any) { f.fatal = fmt.Sprint(args...); panic(stopped{}) }

func runStart(f *fakeTB) {
	defer func() {
		if r := recover(); r != nil {
			if _, ok := r.(stopped); !ok {
				panic(r)
			}
		}
	}()
	Start(f)
}

func TestStartWithoutBinaries(t *testing.T) {
	t.Setenv(EnvBinDir, t.TempDir())

	t.Setenv(EnvRequire, "")
	f := &fakeTB{TB: t}
	runStart(f)
	if !strings.Contains(f.skipped, "kube-apiserver not built: run scripts/controlplane.sh") || f.fatal != "" {
		t.Errorf("without %s: skip %q, fatal %q; want a skip", EnvRequire, f.skipped, f.fatal)
	}

	t.Setenv(EnvRequire, "1")
	f = &fakeTB{TB: t}
	runStart(f)
	if !strings.Contains(f.fatal, "kube-apiserver not built: run scripts/controlplane.sh") || f.skipped != "" {
		t.Errorf("with %s=1: skip %q, fatal %q; want a fatal", EnvRequire, f.skipped, f.fatal)
	}
}
