// Command gpuslice-scheduler is the stock kube-scheduler (v1.36.3) with
// one more plugin, GpusliceDynamicResources: a profile that enables it in
// place of DynamicResources has gpuslice's allocator decide the
// ResourceClaims of gpuslice's DeviceClasses, while every other claim and
// every other plugin stays stock. Flags, configuration, leader election
// and serving are kube-scheduler's own.
package main

import (
	"context"
	"os"

	k8sruntime "k8s.io/apimachinery/pkg/runtime"
	fwk "k8s.io/kube-scheduler/framework"

	utilfeature "k8s.io/apiserver/pkg/util/feature"
	"k8s.io/component-base/cli"
	_ "k8s.io/component-base/logs/json/register"
	_ "k8s.io/component-base/metrics/prometheus/clientgo"
	_ "k8s.io/component-base/metrics/prometheus/version"
	"k8s.io/kubernetes/cmd/kube-scheduler/app"
	"k8s.io/kubernetes/pkg/scheduler/framework/plugins/feature"

	"github.com/gpuslice/gpuslice/cmd/gpuslice-scheduler/plugin"
)

func main() {
	// The feature gates are read when the plugin is built, after the
	// flags (--feature-gates) are parsed, as the in-tree registry does.
	factory := func(ctx context.Context, args k8sruntime.Object, fh fwk.Handle) (fwk.Plugin, error) {
		return plugin.New(ctx, args, fh, feature.NewSchedulerFeaturesFromGates(utilfeature.DefaultFeatureGate))
	}
	command := app.NewSchedulerCommand(app.WithPlugin(plugin.Name, factory))
	os.Exit(cli.Run(command))
}
