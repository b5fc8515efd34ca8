package apitest_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gpuslice/gpuslice/internal/k8s/apitest"
	"github.com/gpuslice/gpuslice/internal/plan"
	"github.com/gpuslice/gpuslice/internal/render"
	"github.com/gpuslice/gpuslice/internal/spec"
)

// Every Kubernetes object gpuslice renders is accepted by a real
// kube-apiserver (server-side dry-run, strict field validation), for every
// example and seed input.
func TestRenderedObjectsPassDryRun(t *testing.T) {
	t.Parallel()
	srv := apitest.Shared(t)
	inputs := []string{"../../../examples/gpuslice.yaml", "../../../examples/compose-timeslicing.yaml", "../../../examples/compose-mig.yaml"}
	for _, in := range inputs {
		data, err := os.ReadFile(in)
		if err != nil {
			t.Fatal(err)
		}
		s, diags := spec.Read(filepath.Base(in), data, "")
		if err := diags.Err(); err != nil {
			t.Fatal(err)
		}
		p, err := plan.Make(s, plan.Options{})
		if err != nil {
			t.Fatal(err)
		}
		// mig-parted is not a Kubernetes object; the others are. "dra
		// gpuslice" is the dra target for gpuslice's driver, with its
		// DeviceClasses (the CEL of the claims is compiled against them).
		for _, target := range []string{"dra", "dra gpuslice", "kubernetes", "karpenter", "nvidia-device-plugin", "hpa", "serverless"} {
			var opts render.Options
			if t, ok := strings.CutSuffix(target, " gpuslice"); ok {
				target, opts = t, render.Options{DRADriver: render.DRADriverGpuslice, DRADeviceClasses: true}
			}
			out, err := render.RenderWith(target, s, p, opts)
			if err != nil {
				t.Fatal(err)
			}
			if strings.TrimSpace(stripComments(string(out))) == "" {
				continue
			}
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			errs := srv.DryRun(ctx, out)
			cancel()
			for _, e := range errs {
				t.Errorf("%s --target %s: %v", filepath.Base(in), target, e)
			}
		}
	}
}

func stripComments(s string) string {
	var keep []string
	for _, l := range strings.Split(s, "\n") {
		if !strings.HasPrefix(strings.TrimSpace(l), "#") && strings.TrimSpace(l) != "---" {
			keep = append(keep, l)
		}
	}
	return strings.Join(keep, "\n")
}
