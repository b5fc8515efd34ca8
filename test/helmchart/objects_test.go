package helmchart

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"os/exec"
	"path"
	"reflect"
	"slices"
	"strings"
	"testing"

	admissionv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	resourcev1 "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	schedv1 "k8s.io/kube-scheduler/config/v1"
	"sigs.k8s.io/yaml"
)

// certificate is cert-manager's Certificate (cert-manager.io/v1), only the
// fields the chart sets; strict decoding refuses any other.
type certificate struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata"`
	Spec              struct {
		SecretName string   `json:"secretName"`
		DNSNames   []string `json:"dnsNames"`
		IssuerRef  struct {
			Name  string `json:"name"`
			Kind  string `json:"kind"`
			Group string `json:"group"`
		} `json:"issuerRef"`
	} `json:"spec"`
}

func (c *certificate) GetObjectMeta() metav1.Object { return &c.ObjectMeta }

// newObject is the k8s.io/api type of an apiVersion and kind.
func newObject(apiVersion, kind string) (metav1.ObjectMetaAccessor, bool) {
	switch apiVersion + " " + kind {
	case "v1 ServiceAccount":
		return &corev1.ServiceAccount{}, true
	case "v1 Secret":
		return &corev1.Secret{}, true
	case "v1 Service":
		return &corev1.Service{}, true
	case "v1 ConfigMap":
		return &corev1.ConfigMap{}, true
	case "apps/v1 DaemonSet":
		return &appsv1.DaemonSet{}, true
	case "apps/v1 Deployment":
		return &appsv1.Deployment{}, true
	case "rbac.authorization.k8s.io/v1 ClusterRole":
		return &rbacv1.ClusterRole{}, true
	case "rbac.authorization.k8s.io/v1 ClusterRoleBinding":
		return &rbacv1.ClusterRoleBinding{}, true
	case "rbac.authorization.k8s.io/v1 Role":
		return &rbacv1.Role{}, true
	case "rbac.authorization.k8s.io/v1 RoleBinding":
		return &rbacv1.RoleBinding{}, true
	case "resource.k8s.io/v1 DeviceClass":
		return &resourcev1.DeviceClass{}, true
	case "admissionregistration.k8s.io/v1 ValidatingWebhookConfiguration":
		return &admissionv1.ValidatingWebhookConfiguration{}, true
	case "admissionregistration.k8s.io/v1 MutatingWebhookConfiguration":
		return &admissionv1.MutatingWebhookConfiguration{}, true
	case "cert-manager.io/v1 Certificate":
		return &certificate{}, true
	}
	return nil, false
}

var clusterScoped = map[string]bool{"ClusterRole": true, "ClusterRoleBinding": true, "DeviceClass": true, "ValidatingWebhookConfiguration": true, "MutatingWebhookConfiguration": true}

// rendered is one render, decoded: objects by "Kind/name".
type rendered struct {
	ns   string
	objs map[string]any
}

func (r rendered) get(t *testing.T, kind, name string) any {
	t.Helper()
	o, ok := r.objs[kind+"/"+name]
	if !ok {
		t.Fatalf("no %s %s rendered; have %v", kind, name, keys(r.objs))
	}
	return o
}

func keys(m map[string]any) []string {
	var k []string
	for n := range m {
		k = append(k, n)
	}
	slices.Sort(k)
	return k
}

// decodeAll decodes every document strictly into its type; an unknown
// kind or field fails the test.
func decodeAll(t *testing.T, ns string, docs [][]byte) rendered {
	t.Helper()
	r := rendered{ns: ns, objs: map[string]any{}}
	for _, doc := range docs {
		var tm metav1.TypeMeta
		if err := yaml.Unmarshal(doc, &tm); err != nil {
			t.Fatalf("rendered document is not YAML: %v\n%s", err, doc)
		}
		obj, ok := newObject(tm.APIVersion, tm.Kind)
		if !ok {
			t.Fatalf("rendered %s %s: a kind this test does not know\n%s", tm.APIVersion, tm.Kind, doc)
		}
		if err := yaml.UnmarshalStrict(doc, obj); err != nil {
			t.Fatalf("rendered %s: strict decoding: %v\n%s", tm.Kind, err, doc)
		}
		m := obj.GetObjectMeta()
		if m.GetName() == "" {
			t.Errorf("rendered %s has no name", tm.Kind)
		}
		if clusterScoped[tm.Kind] != (m.GetNamespace() == "") && !(tm.Kind == "RoleBinding" && m.GetNamespace() == "kube-system") {
			if clusterScoped[tm.Kind] || m.GetNamespace() != ns {
				t.Errorf("%s %s: namespace %q (release namespace %q)", tm.Kind, m.GetName(), m.GetNamespace(), ns)
			}
		}
		if m.GetLabels()["app.kubernetes.io/instance"] == "" {
			t.Errorf("%s %s: no app.kubernetes.io/instance label", tm.Kind, m.GetName())
		}
		key := tm.Kind + "/" + m.GetName()
		if _, dup := r.objs[key]; dup {
			t.Errorf("%s rendered twice", key)
		}
		r.objs[key] = obj
	}
	return r
}

// TestRender renders every value set and checks each part that is on.
func TestRender(t *testing.T) {
	for name, over := range valueSets {
		t.Run(name, func(t *testing.T) {
			vals := overrides(t, over)
			docs, err := render(t, "gs", "gpuslice-system", vals)
			if err != nil {
				t.Fatalf("render: %v", err)
			}
			r := decodeAll(t, "gpuslice-system", docs)
			on := func(part string) bool {
				p, _ := vals[part].(map[string]any)
				e, set := p["enabled"].(bool)
				return !set || e
			}
			count := 0
			if on("driver") {
				count += 4
				checkDriver(t, r, vals)
			}
			if on("deviceClasses") {
				count += 3
				checkDeviceClasses(t, r)
			}
			if on("webhook") {
				count += 5 // the Secret (auto) or Certificate (certManager)
				if strings.Contains(over, "mode: secret") {
					count-- // the user's Secret
				}
				if isolation(vals) {
					count += 3 // MutatingWebhookConfiguration, ClusterRole and binding for namespaces
				}
				if podWebhook(vals) {
					count++ // the pods' MutatingWebhookConfiguration
				}
				checkWebhook(t, r, vals)
			}
			if on("scheduler") {
				count += 10
				checkScheduler(t, r, vals)
			}
			if len(r.objs) != count {
				t.Errorf("%d objects rendered, want %d: %v", len(r.objs), count, keys(r.objs))
			}
			checkServiceAccounts(t, r)
		})
	}
}

// checkServiceAccounts: every pod's and every binding's service account
// is rendered too.
func checkServiceAccounts(t *testing.T, r rendered) {
	t.Helper()
	have := func(name string) bool { _, ok := r.objs["ServiceAccount/"+name]; return ok }
	for key, o := range r.objs {
		var sa string
		var subjects []rbacv1.Subject
		switch o := o.(type) {
		case *appsv1.Deployment:
			sa = o.Spec.Template.Spec.ServiceAccountName
		case *appsv1.DaemonSet:
			sa = o.Spec.Template.Spec.ServiceAccountName
		case *rbacv1.ClusterRoleBinding:
			subjects = o.Subjects
		case *rbacv1.RoleBinding:
			subjects = o.Subjects
		}
		for _, s := range subjects {
			if s.Kind == "ServiceAccount" {
				sa = s.Name
				if s.Namespace != r.ns {
					t.Errorf("%s: subject namespace %q", key, s.Namespace)
				}
			}
		}
		if sa != "" && !have(sa) {
			t.Errorf("%s names service account %s, which is not rendered", key, sa)
		}
	}
}

// flagsAccepted runs `gpuslice ARGS --help`: cobra parses every flag
// before printing help, so an unknown flag or bad value fails.
func flagsAccepted(t *testing.T, args []string) {
	t.Helper()
	var errOut bytes.Buffer
	cmd := exec.Command(bin, append(args, "--help")...)
	cmd.Stderr = &errOut
	if err := cmd.Run(); err != nil {
		t.Errorf("gpuslice %s: %v\n%s", strings.Join(args, " "), err, errOut.String())
	}
}

func checkDriver(t *testing.T, r rendered, vals map[string]any) {
	t.Helper()
	ds := r.get(t, "DaemonSet", "gs-gpuslice-driver").(*appsv1.DaemonSet)
	pod := ds.Spec.Template.Spec
	c := pod.Containers[0]
	if c.SecurityContext == nil || c.SecurityContext.Privileged == nil || !*c.SecurityContext.Privileged {
		t.Error("driver container is not privileged")
	}
	var nodeFromDownward bool
	for _, e := range c.Env {
		if e.Name == "NODE_NAME" && e.ValueFrom != nil && e.ValueFrom.FieldRef != nil && e.ValueFrom.FieldRef.FieldPath == "spec.nodeName" {
			nodeFromDownward = true
		}
	}
	if !nodeFromDownward {
		t.Error("driver: NODE_NAME is not spec.nodeName from the downward API")
	}
	kubelet := "/var/lib/kubelet"
	if d, ok := vals["driver"].(map[string]any); ok && d["kubeletDir"] != nil {
		kubelet = d["kubeletDir"].(string)
	}
	hostPaths := map[string]string{}
	for _, v := range pod.Volumes {
		if v.HostPath != nil {
			hostPaths[v.Name] = v.HostPath.Path
		}
	}
	mounts := map[string]string{}
	for _, m := range c.VolumeMounts {
		if hostPaths[m.Name] == "" {
			t.Errorf("driver mount %s: no hostPath volume of that name", m.Name)
		}
		mounts[hostPaths[m.Name]] = m.MountPath
	}
	for _, p := range []string{kubelet + "/plugins_registry", kubelet + "/plugins/gpu.gpuslice.dev", "/var/run/cdi", "/run/gpuslice/mps"} {
		if mounts[p] != p {
			t.Errorf("driver: host %s mounted at %q, want the same path", p, mounts[p])
		}
	}
	// Every argument must be a flag `gpuslice dra-driver` knows, and the
	// directories it is told must be the mounted ones.
	args := slices.Clone(c.Args)
	for i, a := range args {
		args[i] = strings.ReplaceAll(a, "$(NODE_NAME)", "node-1")
		for flag, want := range map[string]string{"--registrar-dir=": kubelet + "/plugins_registry", "--state-dir=": kubelet + "/plugins/gpu.gpuslice.dev", "--cdi-dir=": "/var/run/cdi", "--mps-root=": "/run/gpuslice/mps"} {
			if v, ok := strings.CutPrefix(a, flag); ok && v != want {
				t.Errorf("driver %s%s, want %s", flag, v, want)
			}
		}
	}
	if want := fmt.Sprintf("--tenant-isolation=%v", isolation(vals)); !slices.Contains(args, want) {
		t.Errorf("driver args %v: want %s", args, want)
	}
	if d, ok := vals["driver"].(map[string]any); ok && d["tenants"] != nil && isolation(vals) && !slices.Contains(args, "--tenants=team-a,team-b") {
		t.Errorf("driver args %v: want --tenants=team-a,team-b", args)
	}
	if isolation(vals) && !slices.Contains(args, "--no-tenant-namespaces="+noTenantNamespaces(vals, r.ns)) {
		t.Errorf("driver args %v: want --no-tenant-namespaces=%s", args, noTenantNamespaces(vals, r.ns))
	}
	if !isolation(vals) && slices.ContainsFunc(args, func(a string) bool { return strings.HasPrefix(a, "--no-tenant-namespaces") }) {
		t.Errorf("driver args %v: --no-tenant-namespaces without tenant isolation", args)
	}
	if d, ok := vals["driver"].(map[string]any); ok && d["xidNoSchedule"] != nil && !slices.Contains(args, "--xid-noschedule=63,92") {
		t.Errorf("driver args %v: want --xid-noschedule=63,92", args)
	}
	wantMIG := "--mig-profiles=all"
	if d, ok := vals["driver"].(map[string]any); ok && d["migProfiles"] != nil {
		wantMIG = "--mig-profiles=1g.5gb,3g.20gb,7g.40gb"
	}
	if !slices.Contains(args, wantMIG) {
		t.Errorf("driver args %v: want %s", args, wantMIG)
	}
	if args[0] != "dra-driver" {
		t.Fatalf("driver args %v: want dra-driver first", args)
	}
	flagsAccepted(t, args)
	if d, ok := vals["driver"].(map[string]any); ok && d["runtimeClassName"] != nil {
		if pod.RuntimeClassName == nil || *pod.RuntimeClassName != d["runtimeClassName"] {
			t.Errorf("driver runtimeClassName %v, want %v", pod.RuntimeClassName, d["runtimeClassName"])
		}
	}
	role := r.get(t, "ClusterRole", "gs-gpuslice-driver").(*rbacv1.ClusterRole)
	need := map[string][]string{
		"resource.k8s.io/resourceslices":        {"get", "list", "watch", "create", "update", "delete"},
		"resource.k8s.io/resourceclaims":        {"get", "list", "watch"},
		"resource.k8s.io/resourceclaims/status": {"update", "patch"},
		"resource.k8s.io/resourceclaims/driver": {"associated-node:update", "associated-node:patch"},
		"/nodes":                                {"get"},
	}
	checkRules(t, "driver ClusterRole", role.Rules, need)
	// status.devices is authorized per driver: the rule names ours.
	for _, rule := range role.Rules {
		if slices.Contains(rule.Resources, "resourceclaims/driver") && !slices.Equal(rule.ResourceNames, []string{"gpu.gpuslice.dev"}) {
			t.Errorf("driver ClusterRole: resourceclaims/driver for %v, want [gpu.gpuslice.dev]", rule.ResourceNames)
		}
	}
}

func checkRules(t *testing.T, what string, rules []rbacv1.PolicyRule, need map[string][]string) {
	t.Helper()
	for res, verbs := range need {
		for _, verb := range verbs {
			ok := false
			for _, rule := range rules {
				for _, g := range rule.APIGroups {
					for _, rr := range rule.Resources {
						if g+"/"+rr == res && slices.Contains(rule.Verbs, verb) {
							ok = true
						}
					}
				}
			}
			if !ok {
				t.Errorf("%s: no %s on %s", what, verb, res)
			}
		}
	}
}

// checkDeviceClasses: the rendered classes equal `gpuslice dra classes`
// (name and spec; the chart adds its labels).
func checkDeviceClasses(t *testing.T, r rendered) {
	t.Helper()
	var want []resourcev1.DeviceClass
	for _, doc := range bytes.Split(runGpuslice(t, "dra", "classes"), []byte("\n---\n")) {
		if len(bytes.TrimSpace(bytes.TrimPrefix(doc, []byte("---")))) == 0 {
			continue
		}
		var dc resourcev1.DeviceClass
		if err := yaml.UnmarshalStrict(doc, &dc); err != nil {
			t.Fatalf("gpuslice dra classes: %v\n%s", err, doc)
		}
		want = append(want, dc)
	}
	if len(want) != 3 {
		t.Fatalf("gpuslice dra classes printed %d classes, want 3", len(want))
	}
	for _, w := range want {
		got := r.get(t, "DeviceClass", w.Name).(*resourcev1.DeviceClass)
		if !reflect.DeepEqual(got.Spec, w.Spec) {
			g, _ := json.Marshal(got.Spec)
			ws, _ := json.Marshal(w.Spec)
			t.Errorf("DeviceClass %s: chart\n%s\ngpuslice dra classes\n%s", w.Name, g, ws)
		}
	}
}

func checkWebhook(t *testing.T, r rendered, vals map[string]any) {
	t.Helper()
	const name = "gs-gpuslice-webhook"
	mode := "auto"
	if w, ok := vals["webhook"].(map[string]any); ok {
		if tl, ok := w["tls"].(map[string]any); ok && tl["mode"] != nil {
			mode = tl["mode"].(string)
		}
	}
	dep := r.get(t, "Deployment", name).(*appsv1.Deployment)
	c := dep.Spec.Template.Spec.Containers[0]
	want := []string{"dra-webhook", "--tls-cert=/tls/tls.crt", "--tls-key=/tls/tls.key", "--listen=:8443"}
	if isolation(vals) {
		want = append(want, "--kubeconfig=in-cluster")
		if d, ok := vals["driver"].(map[string]any); ok && d["tenants"] != nil {
			want = append(want, "--tenants=team-a,team-b")
		}
		want = append(want, "--no-tenant-namespaces="+noTenantNamespaces(vals, r.ns))
		checkTenantWebhook(t, r, name)
	}
	if schedulerOn(vals) {
		sn := "gpuslice-scheduler"
		if sc, ok := vals["scheduler"].(map[string]any); ok && sc["schedulerName"] != nil {
			sn = sc["schedulerName"].(string)
		}
		want = append(want, "--scheduler-name="+sn)
	} else {
		want = append(want, "--scheduler-name=")
	}
	if podWebhook(vals) {
		checkPodWebhook(t, r, name)
	} else if _, ok := r.objs["MutatingWebhookConfiguration/"+name+"-pods"]; ok {
		t.Error("a pod webhook without gpuslice-scheduler or with podWebhook.enabled false")
	}
	if !slices.Equal(c.Args, want) {
		t.Errorf("webhook args %v, want %v", c.Args, want)
	}
	flagsAccepted(t, c.Args)
	if len(c.VolumeMounts) != 1 || c.VolumeMounts[0].MountPath != "/tls" {
		t.Errorf("webhook mounts %+v, want the TLS secret at /tls", c.VolumeMounts)
	}
	secretName := dep.Spec.Template.Spec.Volumes[0].Secret.SecretName
	svc := r.get(t, "Service", name).(*corev1.Service)
	if p := svc.Spec.Ports[0]; p.Port != 443 || p.TargetPort.String() != "https" || c.Ports[0].Name != "https" || c.Ports[0].ContainerPort != 8443 {
		t.Errorf("webhook service port %+v, container port %+v: want 443 -> https (8443)", p, c.Ports[0])
	}
	for k, v := range svc.Spec.Selector {
		if dep.Spec.Template.Labels[k] != v {
			t.Errorf("webhook service selector %s=%s does not select the pods (%v)", k, v, dep.Spec.Template.Labels)
		}
	}
	vwc := r.get(t, "ValidatingWebhookConfiguration", name).(*admissionv1.ValidatingWebhookConfiguration)
	if len(vwc.Webhooks) != 1 {
		t.Fatalf("%d webhooks, want 1", len(vwc.Webhooks))
	}
	wh := vwc.Webhooks[0]
	s := wh.ClientConfig.Service
	if s == nil || s.Name != name || s.Namespace != r.ns || s.Path == nil || *s.Path != "/validate" || s.Port == nil || *s.Port != 443 {
		t.Errorf("webhook clientConfig.service %+v: want %s/%s:443/validate", s, r.ns, name)
	}
	rule := wh.Rules[0]
	if !slices.Equal(rule.APIGroups, []string{"resource.k8s.io"}) || !slices.Equal(rule.APIVersions, []string{"v1"}) ||
		!slices.Equal(rule.Resources, []string{"resourceclaims", "resourceclaimtemplates"}) ||
		!slices.Equal(rule.Operations, []admissionv1.OperationType{admissionv1.Create, admissionv1.Update}) {
		t.Errorf("webhook rule %+v", rule)
	}
	if wh.SideEffects == nil || *wh.SideEffects != admissionv1.SideEffectClassNone {
		t.Error("webhook sideEffects is not None")
	}
	// The webhook decodes resource.k8s.io/v1 only and refuses any other
	// version: the API server must convert (matchPolicy: Equivalent).
	if wh.MatchPolicy == nil || *wh.MatchPolicy != admissionv1.Equivalent {
		t.Errorf("webhook matchPolicy %v, want Equivalent", wh.MatchPolicy)
	}
	host := name + "." + r.ns + ".svc"
	switch mode {
	case "auto":
		sec := r.get(t, "Secret", secretName).(*corev1.Secret)
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(wh.ClientConfig.CABundle) {
			t.Fatalf("webhook caBundle is not a PEM certificate: %q", wh.ClientConfig.CABundle)
		}
		pair, err := tls.X509KeyPair(sec.Data["tls.crt"], sec.Data["tls.key"])
		if err != nil {
			t.Fatalf("webhook secret: %v", err)
		}
		leaf, err := x509.ParseCertificate(pair.Certificate[0])
		if err != nil {
			t.Fatal(err)
		}
		if _, err := leaf.Verify(x509.VerifyOptions{DNSName: host, Roots: pool}); err != nil {
			t.Errorf("the webhook's certificate does not verify for %s with the caBundle: %v", host, err)
		}
	case "certManager":
		cert := r.get(t, "Certificate", name).(*certificate)
		if cert.Spec.SecretName != secretName || !slices.Contains(cert.Spec.DNSNames, host) || cert.Spec.IssuerRef.Name == "" {
			t.Errorf("Certificate %+v: want secret %s, dns name %s and an issuer", cert.Spec, secretName, host)
		}
		if got := vwc.Annotations["cert-manager.io/inject-ca-from"]; got != r.ns+"/"+name {
			t.Errorf("inject-ca-from %q, want %s/%s", got, r.ns, name)
		}
		if len(wh.ClientConfig.CABundle) != 0 {
			t.Error("certManager mode: caBundle set by the chart (cert-manager's cainjector sets it)")
		}
	case "secret":
		if secretName != "my-tls" {
			t.Errorf("webhook mounts secret %s, want my-tls", secretName)
		}
		if b, _ := pem.Decode(wh.ClientConfig.CABundle); b == nil || b.Type != "CERTIFICATE" {
			t.Errorf("caBundle %q is not PEM", wh.ClientConfig.CABundle)
		}
	}
}

func checkScheduler(t *testing.T, r rendered, vals map[string]any) {
	t.Helper()
	const name = "gs-gpuslice-scheduler"
	sv, _ := vals["scheduler"].(map[string]any)
	str := func(k, def string) string {
		if v, ok := sv[k]; ok {
			return fmt.Sprint(v)
		}
		return def
	}
	cm := r.get(t, "ConfigMap", name).(*corev1.ConfigMap)
	dep := r.get(t, "Deployment", name).(*appsv1.Deployment)
	c := dep.Spec.Template.Spec.Containers[0]
	var cfgPath string
	for _, a := range c.Args {
		if v, ok := strings.CutPrefix(a, "--config="); ok {
			cfgPath = v
		}
	}
	var mounted bool
	for _, m := range c.VolumeMounts {
		for _, v := range dep.Spec.Template.Spec.Volumes {
			if v.Name == m.Name && v.ConfigMap != nil && v.ConfigMap.Name == name && path.Join(m.MountPath, path.Base(cfgPath)) == cfgPath {
				mounted = true
			}
		}
	}
	if !mounted {
		t.Errorf("scheduler --config=%s is not the mounted ConfigMap %s", cfgPath, name)
	}
	raw := cm.Data[path.Base(cfgPath)]
	var cfg schedv1.KubeSchedulerConfiguration
	if err := yaml.UnmarshalStrict([]byte(raw), &cfg); err != nil {
		t.Fatalf("KubeSchedulerConfiguration: strict decoding: %v\n%s", err, raw)
	}
	if cfg.APIVersion != "kubescheduler.config.k8s.io/v1" || cfg.Kind != "KubeSchedulerConfiguration" {
		t.Errorf("config is %s %s", cfg.APIVersion, cfg.Kind)
	}
	// kube-scheduler's client defaults (qps 50, burst 100) cap binds near
	// 12 pods/s: the chart raises them (values scheduler.clientConnection).
	cv, _ := sv["clientConnection"].(map[string]any)
	wantQPS, wantBurst := "1000", "2000"
	if v, ok := cv["qps"]; ok {
		wantQPS = fmt.Sprint(v)
	}
	if v, ok := cv["burst"]; ok {
		wantBurst = fmt.Sprint(v)
	}
	if got := fmt.Sprint(cfg.ClientConnection.QPS); got != wantQPS {
		t.Errorf("clientConnection.qps %s, want %s", got, wantQPS)
	}
	if got := fmt.Sprint(cfg.ClientConnection.Burst); got != wantBurst {
		t.Errorf("clientConnection.burst %s, want %s", got, wantBurst)
	}
	le := cfg.LeaderElection
	if le.LeaderElect == nil || fmt.Sprint(*le.LeaderElect) != str("leaderElect", "true") || le.ResourceNamespace != r.ns || le.ResourceLock != "leases" {
		t.Errorf("leaderElection %+v: want leaderElect %s on a lease in %s", le, str("leaderElect", "true"), r.ns)
	}
	if len(cfg.Profiles) != 1 {
		t.Fatalf("%d profiles, want 1", len(cfg.Profiles))
	}
	p := cfg.Profiles[0]
	if p.SchedulerName == nil || *p.SchedulerName != str("schedulerName", "gpuslice-scheduler") {
		t.Errorf("schedulerName %v", p.SchedulerName)
	}
	mp := p.Plugins.MultiPoint
	if len(mp.Enabled) != 1 || mp.Enabled[0].Name != "GpusliceDynamicResources" || len(mp.Disabled) != 1 || mp.Disabled[0].Name != "DynamicResources" {
		t.Errorf("multiPoint %+v: want GpusliceDynamicResources in place of DynamicResources", mp)
	}
	if len(p.PluginConfig) != 1 || p.PluginConfig[0].Name != "GpusliceDynamicResources" {
		t.Fatalf("pluginConfig %+v", p.PluginConfig)
	}
	// The plugin's args: only placement (cmd/gpuslice-scheduler/plugin
	// refuses other fields).
	var args struct {
		Placement string `json:"placement"`
	}
	if err := yaml.UnmarshalStrict(p.PluginConfig[0].Args.Raw, &args); err != nil {
		t.Errorf("GpusliceDynamicResources args %s: %v", p.PluginConfig[0].Args.Raw, err)
	}
	if args.Placement != str("placement", "binpack") {
		t.Errorf("placement %q, want %s", args.Placement, str("placement", "binpack"))
	}
	for _, b := range []struct{ binding, role string }{
		{name + "-kube-scheduler", "system:kube-scheduler"},
		{name + "-volume-scheduler", "system:volume-scheduler"},
		{name, name},
	} {
		crb := r.get(t, "ClusterRoleBinding", b.binding).(*rbacv1.ClusterRoleBinding)
		if crb.RoleRef.Kind != "ClusterRole" || crb.RoleRef.Name != b.role {
			t.Errorf("ClusterRoleBinding %s binds %+v, want ClusterRole %s", b.binding, crb.RoleRef, b.role)
		}
	}
	role := r.get(t, "ClusterRole", name).(*rbacv1.ClusterRole)
	checkRules(t, "scheduler ClusterRole", role.Rules, map[string][]string{
		"resource.k8s.io/resourceclaims":         {"get", "list", "watch", "update"},
		"resource.k8s.io/resourceclaims/status":  {"update"},
		"resource.k8s.io/resourceslices":         {"get", "list", "watch"},
		"resource.k8s.io/deviceclasses":          {"get", "list", "watch"},
		"resource.k8s.io/resourceclaimtemplates": {"get", "list", "watch"},
	})
	leases := r.get(t, "Role", name+"-leases").(*rbacv1.Role)
	checkRules(t, "scheduler leases Role", leases.Rules, map[string][]string{"coordination.k8s.io/leases": {"create", "get", "update"}})
	r.get(t, "RoleBinding", name+"-leases")
	if rb := r.get(t, "RoleBinding", name+"-auth-reader").(*rbacv1.RoleBinding); rb.Namespace != "kube-system" {
		t.Errorf("auth-reader RoleBinding in %s, want kube-system", rb.Namespace)
	}
	if fmt.Sprint(*dep.Spec.Replicas) != str("replicas", "1") {
		t.Errorf("scheduler replicas %d", *dep.Spec.Replicas)
	}
}

// noTenantNamespaces is the --no-tenant-namespaces the driver and the
// webhook get: driver.noTenantNamespaces and the release's namespace ns
// (unless default), sorted.
func noTenantNamespaces(vals map[string]any, ns string) string {
	var out []string
	if d, ok := vals["driver"].(map[string]any); ok {
		if l, ok := d["noTenantNamespaces"].([]any); ok {
			for _, n := range l {
				out = append(out, n.(string))
			}
		}
	}
	if ns != "default" {
		out = append(out, ns)
	}
	slices.Sort(out)
	return strings.Join(slices.Compact(out), ",")
}

// A release in default leaves default's tenant its copies (users' pods
// live there); one elsewhere excludes its own namespace.
func TestNoTenantNamespacesRelease(t *testing.T) {
	for ns, want := range map[string]string{"default": "--no-tenant-namespaces=infra", "gpu-ops": "--no-tenant-namespaces=gpu-ops,infra"} {
		vals := overrides(t, "driver: {noTenantNamespaces: [infra, infra]}")
		docs, err := render(t, "gs", ns, vals)
		if err != nil {
			t.Fatalf("render: %v", err)
		}
		r := decodeAll(t, ns, docs)
		for _, key := range []string{"DaemonSet/gs-gpuslice-driver", "Deployment/gs-gpuslice-webhook"} {
			var args []string
			switch o := r.objs[key].(type) {
			case *appsv1.DaemonSet:
				args = o.Spec.Template.Spec.Containers[0].Args
			case *appsv1.Deployment:
				args = o.Spec.Template.Spec.Containers[0].Args
			default:
				t.Fatalf("%s: %T", key, o)
			}
			if !slices.Contains(args, want) {
				t.Errorf("release in %s: %s args %v, want %s", ns, key, args, want)
			}
		}
	}
}

// isolation is the chart's tenantIsolation value (default true).
func isolation(vals map[string]any) bool {
	v, set := vals["tenantIsolation"].(bool)
	return !set || v
}

// checkTenantWebhook: with tenant isolation the webhook mutates claims and
// templates at CREATE on /mutate-claims (failing closed) and may read
// namespaces.
func checkTenantWebhook(t *testing.T, r rendered, name string) {
	t.Helper()
	mwc := r.get(t, "MutatingWebhookConfiguration", name+"-tenants").(*admissionv1.MutatingWebhookConfiguration)
	if len(mwc.Webhooks) != 1 {
		t.Fatalf("%d tenant webhooks, want 1", len(mwc.Webhooks))
	}
	wh := mwc.Webhooks[0]
	s := wh.ClientConfig.Service
	if s == nil || s.Name != name || s.Path == nil || *s.Path != "/mutate-claims" {
		t.Errorf("tenant webhook service %+v: want %s /mutate-claims", s, name)
	}
	rule := wh.Rules[0]
	if !slices.Equal(rule.Resources, []string{"resourceclaims", "resourceclaimtemplates"}) ||
		!slices.Equal(rule.Operations, []admissionv1.OperationType{admissionv1.Create}) {
		t.Errorf("tenant webhook rule %+v", rule)
	}
	if wh.FailurePolicy == nil || *wh.FailurePolicy != admissionv1.Fail {
		t.Error("tenant webhook does not fail closed")
	}
	if wh.MatchPolicy == nil || *wh.MatchPolicy != admissionv1.Equivalent {
		t.Errorf("tenant webhook matchPolicy %v, want Equivalent (it decodes resource.k8s.io/v1 only)", wh.MatchPolicy)
	}
	cr := r.get(t, "ClusterRole", name).(*rbacv1.ClusterRole)
	if len(cr.Rules) != 1 || !slices.Equal(cr.Rules[0].Resources, []string{"namespaces"}) || !slices.Equal(cr.Rules[0].Verbs, []string{"get"}) {
		t.Errorf("webhook ClusterRole rules %+v: want get namespaces", cr.Rules)
	}
}

// schedulerOn is scheduler.enabled (default true).
func schedulerOn(vals map[string]any) bool {
	sc, _ := vals["scheduler"].(map[string]any)
	e, set := sc["enabled"].(bool)
	return !set || e
}

// podWebhook: the pods' webhook is registered with gpuslice-scheduler on
// and scheduler.podWebhook.enabled (default true).
func podWebhook(vals map[string]any) bool {
	if !schedulerOn(vals) {
		return false
	}
	sc, _ := vals["scheduler"].(map[string]any)
	pw, _ := sc["podWebhook"].(map[string]any)
	e, set := pw["enabled"].(bool)
	return !set || e
}

// checkPodWebhook: GPU pods of the namespaces labelled
// gpuslice.dev/scheduler=gpuslice-scheduler are sent to /mutate-pods at
// CREATE.
func checkPodWebhook(t *testing.T, r rendered, name string) {
	t.Helper()
	mwc := r.get(t, "MutatingWebhookConfiguration", name+"-pods").(*admissionv1.MutatingWebhookConfiguration)
	if len(mwc.Webhooks) != 1 {
		t.Fatalf("%d pod webhooks, want 1", len(mwc.Webhooks))
	}
	wh := mwc.Webhooks[0]
	s := wh.ClientConfig.Service
	if s == nil || s.Name != name || s.Path == nil || *s.Path != "/mutate-pods" {
		t.Errorf("pod webhook service %+v: want %s /mutate-pods", s, name)
	}
	rule := wh.Rules[0]
	if !slices.Equal(rule.APIGroups, []string{""}) || !slices.Equal(rule.Resources, []string{"pods"}) ||
		!slices.Equal(rule.Operations, []admissionv1.OperationType{admissionv1.Create}) {
		t.Errorf("pod webhook rule %+v", rule)
	}
	if wh.NamespaceSelector == nil || wh.NamespaceSelector.MatchLabels["gpuslice.dev/scheduler"] != "gpuslice-scheduler" {
		t.Errorf("pod webhook namespaceSelector %+v: want gpuslice.dev/scheduler=gpuslice-scheduler", wh.NamespaceSelector)
	}
}
