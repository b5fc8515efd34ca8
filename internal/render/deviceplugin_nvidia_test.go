package render

import (
	"strings"
	"testing"

	dpv1 "github.com/NVIDIA/k8s-device-plugin/api/config/v1"
	"sigs.k8s.io/yaml"
)

// TestDevicePluginParsesWithNVIDIATypes reads every config of the output
// with NVIDIA's own published config types (k8s-device-plugin
// api/config/v1): strict decoding (no unknown field), the version check the
// plugin makes, DisableResourceNamingInConfig as the plugin calls it, the
// sharing strategy it derives, and its start-up rule against MPS with
// migStrategy mixed.
func TestDevicePluginParsesWithNVIDIATypes(t *testing.T) {
	out := renderDP(t)
	var cm struct {
		APIVersion string `json:"apiVersion"`
		Kind       string `json:"kind"`
		Metadata   struct {
			Name      string            `json:"name"`
			Namespace string            `json:"namespace"`
			Labels    map[string]string `json:"labels"`
		} `json:"metadata"`
		Data map[string]string `json:"data"`
	}
	if err := yaml.UnmarshalStrict(out, &cm); err != nil {
		t.Fatal(err)
	}
	if cm.APIVersion != "v1" || cm.Kind != "ConfigMap" || cm.Metadata.Name != DevicePluginConfigMapName || cm.Metadata.Namespace != DevicePluginNamespace {
		t.Errorf("ConfigMap header: %+v %+v", cm.Kind, cm.Metadata)
	}
	if len(cm.Data) != len(nvWantDP) {
		t.Fatalf("%d configs, want %d", len(cm.Data), len(nvWantDP))
	}
	for pool, text := range cm.Data {
		want, ok := nvWantDP[pool]
		if !ok {
			t.Errorf("unexpected config %q", pool)
			continue
		}
		var c dpv1.Config
		if err := yaml.UnmarshalStrict([]byte(text), &c); err != nil {
			t.Errorf("%s: NVIDIA's types reject the config: %v\n%s", pool, err, text)
			continue
		}
		if c.Version != dpv1.Version {
			t.Errorf("%s: version %q", pool, c.Version)
		}
		dpv1.DisableResourceNamingInConfig(&c)
		if c.Flags.MigStrategy == nil || *c.Flags.MigStrategy != want.migStrategy {
			t.Errorf("%s: migStrategy %v, want %s", pool, c.Flags.MigStrategy, want.migStrategy)
		}
		strategy := c.Sharing.SharingStrategy()
		if strategy == dpv1.SharingStrategyMPS && *c.Flags.MigStrategy == dpv1.MigStrategyMixed {
			t.Errorf("%s: the device plugin refuses MPS with migStrategy mixed", pool)
		}
		wantStrategy := dpv1.SharingStrategyNone
		switch {
		case want.mode == "mps":
			wantStrategy = dpv1.SharingStrategyMPS
		case want.mode != "" || len(want.mig) > 0:
			wantStrategy = dpv1.SharingStrategyTimeSlicing
		}
		if strategy != wantStrategy {
			t.Errorf("%s: sharing strategy %q, want %q", pool, strategy, wantStrategy)
		}
		if wantStrategy == dpv1.SharingStrategyNone {
			continue
		}
		rr := c.Sharing.ReplicatedResources()
		if !rr.FailRequestsGreaterThanOne || rr.RenameByDefault {
			t.Errorf("%s: failRequestsGreaterThanOne %v renameByDefault %v", pool, rr.FailRequestsGreaterThanOne, rr.RenameByDefault)
		}
		got := map[string]int{}
		for _, r := range rr.Resources {
			if !r.Devices.All || r.Rename != "" {
				t.Errorf("%s: %s devices %+v rename %q", pool, r.Name, r.Devices, r.Rename)
			}
			got[string(r.Name)] = r.Replicas
		}
		wantRes := map[string]int{}
		if want.mode != "" {
			wantRes["nvidia.com/gpu"] = want.replicas
		}
		for p, n := range want.mig {
			wantRes["nvidia.com/mig-"+strings.ReplaceAll(p, "+", ".")] = n
		}
		if len(got) != len(wantRes) {
			t.Errorf("%s: resources %v, want %v", pool, got, wantRes)
		}
		for name, n := range wantRes {
			if got[name] != n {
				t.Errorf("%s: %s replicas %d, want %d", pool, name, got[name], n)
			}
		}
	}
}
