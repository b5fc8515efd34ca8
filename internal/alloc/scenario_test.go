package alloc

import (
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"

	"github.com/gpuslice/gpuslice/internal/testkit"
)

// A scenario file is a fleet and a list of steps; its .golden twin holds
// what the allocator answered at each step. Run with -update to rewrite the
// golden files after an intended change, and review the diff.
type scenario struct {
	Policy Policy         `json:"policy"`
	Nodes  []scenarioNode `json:"nodes"`
	Steps  []struct {
		Allocate *Claim `json:"allocate,omitempty"`
		Release  string `json:"release,omitempty"`
		// Try decides without committing.
		Try *Claim `json:"try,omitempty"`
	} `json:"steps"`
}

// scenarioNode is a shorthand for Count identical nodes (name-0, name-1, …
// when Count > 1) of GPUs of one model.
type scenarioNode struct {
	Name          string            `json:"name"`
	Count         int               `json:"count,omitempty"`
	Model         string            `json:"model"`
	GPUs          int               `json:"gpus"`
	MIG           string            `json:"mig,omitempty"` // "", "dynamic", or a layout on every GPU
	Sharing       Sharing           `json:"sharing,omitempty"`
	Labels        map[string]string `json:"labels,omitempty"`
	Unschedulable bool              `json:"unschedulable,omitempty"`
	Unhealthy     []int             `json:"unhealthy,omitempty"`
}

func (sn scenarioNode) expand() []Node {
	var out []Node
	count := max(sn.Count, 1)
	for i := range count {
		name := sn.Name
		if count > 1 {
			name = fmt.Sprintf("%s-%d", sn.Name, i)
		}
		n := Node{Name: name, Labels: sn.Labels, Unschedulable: sn.Unschedulable}
		for gi := range sn.GPUs {
			g := GPU{UUID: fmt.Sprintf("GPU-%s-%d", name, gi), Index: gi, Model: sn.Model, Healthy: true, Sharing: sn.Sharing}
			if g.Sharing.Mode == "" {
				g.Sharing.Mode = Dynamic
			}
			for _, u := range sn.Unhealthy {
				if u == gi {
					g.Healthy = false
				}
			}
			switch sn.MIG {
			case "":
			case "dynamic":
				g.MIGEnabled, g.DynamicMIG = true, true
			default:
				g.MIGEnabled = true
				for k, item := range strings.Split(sn.MIG, ",") {
					prof, start, _ := strings.Cut(item, "@")
					var st int
					fmt.Sscan(start, &st)
					g.Instances = append(g.Instances, MIGInstance{UUID: fmt.Sprintf("MIG-%s-%d-%d", name, gi, k),
						Profile: prof, Start: st, Sharing: sn.Sharing})
				}
			}
			n.GPUs = append(n.GPUs, g)
		}
		out = append(out, n)
	}
	return out
}

func TestScenarios(t *testing.T) {
	files, err := filepath.Glob("testdata/scenarios/*.yaml")
	if err != nil || len(files) == 0 {
		t.Fatalf("no scenarios: %v", err)
	}
	for _, file := range files {
		t.Run(strings.TrimSuffix(filepath.Base(file), ".yaml"), func(t *testing.T) {
			raw, err := os.ReadFile(file)
			if err != nil {
				t.Fatal(err)
			}
			var sc scenario
			if err := yaml.UnmarshalStrict(raw, &sc); err != nil {
				t.Fatalf("%s: %v", file, err)
			}
			var f Fleet
			f.Policy = sc.Policy
			for _, sn := range sc.Nodes {
				f.Nodes = append(f.Nodes, sn.expand()...)
			}
			var out strings.Builder
			s, err := NewState(f, nil, Options{})
			if err != nil {
				fmt.Fprintf(&out, "fleet: error: %v\n", err)
			}
			for i, st := range sc.Steps {
				if s == nil {
					break
				}
				switch {
				case st.Allocate != nil || st.Try != nil:
					c, verb := st.Allocate, "allocate"
					if c == nil {
						c, verb = st.Try, "try"
					}
					fmt.Fprintf(&out, "--- step %d: %s %s (tenant %s)\n", i+1, verb, c.Name, c.Tenant)
					a, err := s.Allocate(c)
					if err != nil {
						fmt.Fprintf(&out, "error: %v\n", err)
						break
					}
					writeAllocation(&out, a)
					if verb == "allocate" {
						if err := s.Apply(a); err != nil {
							t.Fatalf("step %d: apply: %v", i+1, err)
						}
					}
				case st.Release != "":
					fmt.Fprintf(&out, "--- step %d: release %s\n", i+1, st.Release)
					if err := s.Release(st.Release); err != nil {
						fmt.Fprintf(&out, "error: %v\n", err)
					}
				}
				if err := s.Check(); err != nil {
					t.Fatalf("step %d broke a rule: %v", i+1, err)
				}
			}
			testkit.Golden(t, strings.TrimSuffix(file, ".yaml")+".golden", []byte(out.String()))
		})
	}
}

func writeAllocation(w *strings.Builder, a *Allocation) {
	for _, ch := range a.Changes {
		fmt.Fprintf(w, "change: %s gpu=%s", ch.Kind, ch.GPU)
		if ch.Profile != "" {
			fmt.Fprintf(w, " %s@%d", ch.Profile, ch.Start)
		}
		if ch.Sharing != nil {
			fmt.Fprintf(w, " sharing=%s", sharingText(*ch.Sharing))
		}
		if ch.Disruptive {
			w.WriteString(" DISRUPTIVE")
		}
		w.WriteString("\n")
	}
	for _, d := range a.Devices {
		fmt.Fprintf(w, "device: %s node=%s dev=%s mode=%s mem=%dMiB compute=%d%% slot=%d", d.Request, d.Node, d.Device, d.Mode, d.MemoryMiB, d.ComputePercent, d.Slot)
		if d.MPS != nil {
			fmt.Fprintf(w, " mps(threads=%d%% pinned=%dMiB)", d.MPS.ActiveThreadPercent, d.MPS.PinnedMemoryMiB)
		}
		w.WriteString("\n")
	}
	keys := make([]string, 0, len(a.Env))
	for k := range a.Env {
		if strings.HasPrefix(k, "CUDA_") {
			keys = append(keys, k)
		}
	}
	sort.Strings(keys)
	for _, k := range keys {
		fmt.Fprintf(w, "env: %s=%s\n", k, a.Env[k])
	}
	for _, why := range a.Why {
		fmt.Fprintf(w, "why: %s\n", why)
	}
	for _, note := range a.Notes {
		fmt.Fprintf(w, "note: %s\n", note)
	}
}

func sharingText(s Sharing) string {
	switch s.Mode {
	case TimeSlice:
		return fmt.Sprintf("timeslice(replicas=%d)", s.Replicas)
	case MPS:
		return fmt.Sprintf("mps(clients=%d)", s.MaxClients)
	}
	return string(s.Mode)
}
