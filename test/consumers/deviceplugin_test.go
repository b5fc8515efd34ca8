package consumers

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	dpv1 "github.com/NVIDIA/k8s-device-plugin/api/config/v1"
	"github.com/urfave/cli/v2"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/validation"
)

// pluginFlags are the device plugin's command-line flags that feed its
// config, with the defaults of cmd/nvidia-device-plugin/main.go (v0.19.3);
// mps-root is what NVIDIA's Helm chart passes.
func pluginFlags() []cli.Flag {
	return []cli.Flag{
		&cli.StringFlag{Name: "mig-strategy", Value: dpv1.MigStrategyNone},
		&cli.BoolFlag{Name: "fail-on-init-error", Value: true},
		&cli.StringFlag{Name: "driver-root", Aliases: []string{"nvidia-driver-root"}, Value: "/"},
		&cli.StringFlag{Name: "dev-root", Aliases: []string{"nvidia-dev-root"}},
		&cli.BoolFlag{Name: "pass-device-specs", Value: false},
		&cli.StringSliceFlag{Name: "device-list-strategy", Value: cli.NewStringSlice(dpv1.DeviceListStrategyEnvVar)},
		&cli.StringFlag{Name: "device-id-strategy", Value: dpv1.DeviceIDStrategyUUID},
		&cli.BoolFlag{Name: "gdrcopy-enabled"},
		&cli.BoolFlag{Name: "gds-enabled"},
		&cli.BoolFlag{Name: "mofed-enabled"},
		&cli.StringFlag{Name: "cdi-annotation-prefix", Value: dpv1.DefaultCDIAnnotationPrefix},
		&cli.StringFlag{Name: "nvidia-cdi-hook-path", Aliases: []string{"nvidia-ctk-path"}, Value: dpv1.DefaultNvidiaCTKPath},
		&cli.StringFlag{Name: "driver-root-ctr-path", Aliases: []string{"container-driver-root"}, Value: dpv1.DefaultContainerDriverRoot},
		&cli.StringFlag{Name: "mps-root", Value: "/run/nvidia/mps"},
		&cli.StringFlag{Name: "device-discovery-strategy", Value: "auto"},
		&cli.IntSliceFlag{Name: "imex-channel-ids"},
		&cli.BoolFlag{Name: "imex-required"},
		&cli.StringFlag{Name: "config-file"},
	}
}

// loadPluginConfig loads a config file the way the device plugin starts:
// dpv1.NewConfig (file, then flags and their defaults), resource renaming
// disabled, then the checks of its main package's validateFlags, which
// cannot be imported (package main) and are restated here from v0.19.3.
func loadPluginConfig(path string) (*dpv1.Config, error) {
	var config *dpv1.Config
	flags := pluginFlags()
	app := &cli.App{Name: "nvidia-device-plugin", Flags: flags, Action: func(c *cli.Context) error {
		var err error
		config, err = dpv1.NewConfig(c, flags)
		if err != nil {
			return err
		}
		dpv1.DisableResourceNamingInConfig(config)
		return validatePluginFlags(config)
	}}
	if err := app.Run([]string{"nvidia-device-plugin", "--config-file", path}); err != nil {
		return nil, err
	}
	return config, nil
}

// validatePluginFlags restates cmd/nvidia-device-plugin validateFlags
// (v0.19.3), less its NVML probe (CDI strategies need NVML, which every
// GPU node the configs are for has).
func validatePluginFlags(config *dpv1.Config) error {
	if _, err := dpv1.NewDeviceListStrategies(*config.Flags.Plugin.DeviceListStrategy); err != nil {
		return fmt.Errorf("invalid --device-list-strategy option: %v", err)
	}
	if s := *config.Flags.Plugin.DeviceIDStrategy; s != dpv1.DeviceIDStrategyUUID && s != dpv1.DeviceIDStrategyIndex {
		return fmt.Errorf("invalid --device-id-strategy option: %v", s)
	}
	if config.Sharing.SharingStrategy() == dpv1.SharingStrategyMPS {
		if *config.Flags.MigStrategy == dpv1.MigStrategyMixed {
			return fmt.Errorf("using --mig-strategy=mixed is not supported with MPS")
		}
		if config.Flags.MpsRoot == nil || *config.Flags.MpsRoot == "" {
			return fmt.Errorf("using MPS requires --mps-root to be specified")
		}
	}
	switch *config.Flags.DeviceDiscoveryStrategy {
	case "auto", "nvml", "tegra":
	default:
		return fmt.Errorf("invalid --device-discovery-strategy option %v", *config.Flags.DeviceDiscoveryStrategy)
	}
	switch *config.Flags.MigStrategy {
	case dpv1.MigStrategyNone, dpv1.MigStrategySingle, dpv1.MigStrategyMixed:
	default:
		return fmt.Errorf("unknown MIG strategy: %v", *config.Flags.MigStrategy)
	}
	if err := dpv1.AssertChannelIDsValid(config.Imex.ChannelIDs); err != nil {
		return fmt.Errorf("invalid IMEX channel IDs: %w", err)
	}
	return nil
}

// checkDevicePlugin: one ConfigMap (strict k8s.io/api decoding, valid
// keys), each data value a config the device plugin loads and accepts.
func checkDevicePlugin(t *testing.T, out []byte) {
	docs := documents(out)
	if len(docs) != 1 {
		t.Fatalf("%d documents, want one ConfigMap", len(docs))
	}
	var cm corev1.ConfigMap
	strictDecode(t, docs[0], "v1", "ConfigMap", &cm)
	if len(cm.Data) == 0 {
		t.Fatal("the ConfigMap has no data")
	}
	for key, text := range cm.Data {
		if errs := validation.IsConfigMapKey(key); len(errs) > 0 {
			t.Errorf("data key %q: %v", key, errs)
		}
		if errs := validation.IsValidLabelValue(key); len(errs) > 0 {
			t.Errorf("data key %q cannot be the value of nvidia.com/device-plugin.config: %v", key, errs)
		}
		path := filepath.Join(t.TempDir(), "config.yaml")
		if err := os.WriteFile(path, []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
		c, err := loadPluginConfig(path)
		if err != nil {
			t.Errorf("data key %s: the device plugin refuses it: %v\n%s", key, err, text)
			continue
		}
		if c.Version != dpv1.Version {
			t.Errorf("data key %s: version %q", key, c.Version)
		}
		for _, r := range c.Sharing.ReplicatedResources().Resources {
			for _, name := range []string{string(r.Name), string(r.Rename)} {
				if name == "" {
					continue
				}
				if errs := validation.IsQualifiedName(name); len(errs) > 0 {
					t.Errorf("data key %s: resource %s is not a valid resource name: %v", key, name, errs)
				}
			}
			if r.Replicas < 2 {
				t.Errorf("data key %s: %s replicas %d", key, r.Name, r.Replicas)
			}
			if strings.HasPrefix(string(r.Name), "nvidia.com/mig-") && c.Sharing.SharingStrategy() == dpv1.SharingStrategyMPS {
				t.Errorf("data key %s: MPS on MIG resource %s", key, r.Name)
			}
		}
	}
}
