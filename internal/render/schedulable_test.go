package render

import (
	"strings"
	"testing"

	"github.com/gpuslice/gpuslice/internal/alloc"
)

// Every device-plugin resource the Kubernetes render's pods request fits,
// per pool, in what the device-plugin config advertises for the planned
// GPUs (MPS on MIG included: the plugin cannot run MPS there, so the
// instances must be advertised time-sliced). The scheduling itself is
// proven on a real kube-scheduler in internal/k8s/apitest.
func TestKubernetesRequestsFitAdvertised(t *testing.T) {
	for name, in := range goldenInputs {
		s, p := planFor(t, in)
		kp := newKubePlan(s, p)
		for i := range p.Pools {
			pp := &p.Pools[i]
			c := dpPoolConfig(pp)
			replicas := map[string]int{}
			if c.mode != "" {
				replicas[dpGPUResource] = c.replicas
			}
			for _, m := range c.mig {
				replicas[migResourceName(m.profile)] = m.replicas
			}
			have := map[string]int{}
			for _, g := range pp.GPUs {
				devs := []string{dpGPUResource}
				if g.MIG {
					devs = nil
					for _, in := range g.Instances {
						devs = append(devs, migResourceName(in.Profile))
					}
				}
				for _, d := range devs {
					have[d] += max(replicas[d], 1)
				}
			}
			want := map[string]int{}
			for wi := range s.Workloads {
				wl := &s.Workloads[wi]
				if pl := poolOf(p, wl); pl == nil || pl.Name != pp.Name {
					continue
				}
				for _, r := range wl.Requests {
					want[kp.resourceOf(wl, r)] += max(r.Count, 1) * wl.Replicas
				}
			}
			for res, n := range want {
				if n > have[res] {
					t.Errorf("%s pool %s: pods request %d %s, the device plugin advertises %d", name, pp.Name, n, res, have[res])
				}
			}
		}
	}
}

// The DRA render has one ResourceClaim per device the plan shares, and
// every replica planned on it references it: never more claims than
// devices of that kind.
func TestDRASharedClaimsMatchDevices(t *testing.T) {
	s, p := planFor(t, "../../examples/gpuslice.yaml")
	dp := newDRAPlan(nvidiaDRA, s, p)
	devices := map[string]bool{}
	users := 0
	for _, pl := range p.Placements {
		for _, d := range pl.Devices {
			if d.Mode == alloc.TimeSlice || d.Mode == alloc.MPS {
				devices[d.Device] = true
				users++
			}
		}
	}
	if len(dp.claims) != len(devices) {
		t.Errorf("%d shared claims for %d shared devices", len(dp.claims), len(devices))
	}
	n := 0
	for _, c := range dp.claims {
		n += len(c.users)
	}
	if n != users {
		t.Errorf("shared claims name %d users, the plan puts %d replicas on shared devices", n, users)
	}
	out, err := Render("dra", s, p)
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Count(string(out), "kind: ResourceClaim\n"); got != len(devices) {
		t.Errorf("the render has %d ResourceClaims for %d shared devices", got, len(devices))
	}
}

// Two tenants time-slicing one pool get a required anti-affinity on the
// shared resource against other tenants; a same-GPU constraint on a
// multi-GPU node is a warning.
func TestKubernetesKeepsTenantsApart(t *testing.T) {
	s, p := planFor(t, "../k8s/apitest/testdata/two-tenants-timeslicing.yaml")
	out, err := Render("kubernetes", s, p)
	if err != nil {
		t.Fatal(err)
	}
	text := string(out)
	for _, want := range []string{"shared.gpuslice.dev/gpu: \"true\"", "requiredDuringSchedulingIgnoredDuringExecution", "operator: NotIn"} {
		if strings.Count(text, want) != 2 {
			t.Errorf("want %q once per Deployment (2), got %d in:\n%s", want, strings.Count(text, want), text)
		}
	}
	s, p = planFor(t, "../../examples/gpuslice.yaml")
	ws := Warnings("kubernetes", s, p)
	if len(ws) == 0 || !strings.Contains(strings.Join(ws, "\n"), "workload train: its requests must share one GPU") {
		t.Errorf("no same-GPU warning for train: %q", ws)
	}
}
