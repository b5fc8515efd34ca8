package packing

import (
	"fmt"
	"math/rand/v2"

	"github.com/gpuslice/gpuslice/internal/alloc"
	"github.com/gpuslice/gpuslice/internal/catalog"
)

// Kind is what a claim is for.
type Kind string

// Workload kinds.
const (
	// Inference replicas: small memory, low compute, several identical
	// replicas per service (auto mode, workload inference).
	Inference Kind = "inference"
	// Notebook: interactive and small (auto mode, workload interactive).
	Notebook Kind = "notebook"
	// Batch: bigger memory and at least 50% compute (auto mode, workload
	// batch).
	Batch Kind = "batch"
	// MIGRequest names a MIG profile (mode mig); memory and compute are the
	// profile's.
	MIGRequest Kind = "mig"
)

// Range is an inclusive range of integers; Max below Min means Min.
type Range struct{ Min, Max int64 }

func (r Range) draw(rng *rand.Rand) int64 {
	if r.Max <= r.Min {
		return r.Min
	}
	return r.Min + rng.Int64N(r.Max-r.Min+1)
}

// Workload is one kind of claim a tenant submits.
type Workload struct {
	Kind Kind
	// Count is how many claims, or for Inference how many services.
	Count Range
	// Replicas is, for Inference, how many identical replicas each service
	// has (one claim each); ignored otherwise.
	Replicas Range
	// MemoryMiB is drawn per claim (per service for Inference) and rounded
	// up to 256 MiB.
	MemoryMiB Range
	// ComputePercent is drawn like MemoryMiB unless ComputeChoices is set,
	// then uniformly from it.
	ComputePercent Range
	ComputeChoices []int
	// Profiles are the MIG profiles a MIGRequest draws from uniformly.
	Profiles []string
}

// Tenant is one team and what it runs.
type Tenant struct {
	Name string
	// Isolation of every claim of the tenant; empty means tenant.
	Isolation alloc.Isolation
	Workloads []Workload
}

// Mix is a named, seeded workload mix on one GPU model.
type Mix struct {
	Name        string
	Description string
	// GPU is a catalog GPU id.
	GPU     string
	Tenants []Tenant
	// StaticMIG is the layout every GPU gets in the static-mig baseline
	// (profile names, one entry per instance); nil when the model has no
	// MIG. StaticMIGWhy says why an admin would pick it.
	StaticMIG    []string
	StaticMIGWhy string
	// TimeSliceReplicas is N of the timeslice-N baseline; 0 means 4.
	TimeSliceReplicas int
}

// Replicas is the time-slicing baseline's replica count.
func (m Mix) Replicas() int {
	if m.TimeSliceReplicas > 0 {
		return m.TimeSliceReplicas
	}
	return 4
}

const memStep = 256

func roundMem(m int64) int64 { return (m + memStep - 1) / memStep * memStep }

// Claims expands the mix for a seed: every tenant's workloads drawn in a
// fixed order, then shuffled into an arrival order. Same mix and seed, same
// claims, names included.
func (m Mix) Claims(seed uint64) ([]alloc.Claim, error) {
	model, err := catalog.Default().GPU(m.GPU)
	if err != nil {
		return nil, fmt.Errorf("mix %s: %w", m.Name, err)
	}
	rng := rand.New(rand.NewPCG(seed, 0x9e3779b97f4a7c15))
	var out []alloc.Claim
	for _, t := range m.Tenants {
		seq := 0
		add := func(kind Kind, mem int64, comp int, mode alloc.Mode, profile string, wl alloc.Workload) {
			seq++
			out = append(out, alloc.Claim{
				Name:      fmt.Sprintf("%s-%s-%03d", t.Name, kind, seq),
				Tenant:    t.Name,
				Isolation: t.Isolation,
				Requests: []alloc.Request{{Name: "gpu", MemoryMiB: mem, ComputePercent: comp,
					Mode: mode, Profile: profile, Workload: wl}},
			})
		}
		for _, w := range t.Workloads {
			n := int(w.Count.draw(rng))
			for i := 0; i < n; i++ {
				switch w.Kind {
				case MIGRequest:
					if len(w.Profiles) == 0 {
						return nil, fmt.Errorf("mix %s tenant %s: a MIG request needs profiles", m.Name, t.Name)
					}
					name := w.Profiles[rng.IntN(len(w.Profiles))]
					p, err := model.Profile(name)
					if err != nil {
						return nil, fmt.Errorf("mix %s tenant %s: %w", m.Name, t.Name, err)
					}
					add(w.Kind, p.MemoryMiB, p.ComputeSlices*100/model.MIG.ComputeSlices, alloc.MIG, p.Name, "")
				case Inference:
					mem, comp := roundMem(w.MemoryMiB.draw(rng)), w.compute(rng)
					reps := max(int(w.Replicas.draw(rng)), 1)
					for r := 0; r < reps; r++ {
						add(w.Kind, mem, comp, alloc.Auto, "", alloc.WorkloadInference)
					}
				case Notebook:
					add(w.Kind, roundMem(w.MemoryMiB.draw(rng)), w.compute(rng), alloc.Auto, "", alloc.WorkloadInteractive)
				case Batch:
					add(w.Kind, roundMem(w.MemoryMiB.draw(rng)), w.compute(rng), alloc.Auto, "", alloc.WorkloadBatch)
				default:
					return nil, fmt.Errorf("mix %s tenant %s: unknown workload kind %q", m.Name, t.Name, w.Kind)
				}
			}
		}
	}
	for i := range out {
		r := &out[i].Requests[0]
		if r.MemoryMiB > model.MemoryMiB || r.ComputePercent > 100 {
			return nil, fmt.Errorf("mix %s: claim %s asks for %d MiB / %d%%, more than one %s", m.Name, out[i].Name,
				r.MemoryMiB, r.ComputePercent, model.ID)
		}
	}
	rng.Shuffle(len(out), func(i, j int) { out[i], out[j] = out[j], out[i] })
	return out, nil
}

func (w Workload) compute(rng *rand.Rand) int {
	if len(w.ComputeChoices) > 0 {
		return w.ComputeChoices[rng.IntN(len(w.ComputeChoices))]
	}
	return int(w.ComputePercent.draw(rng))
}

// Helpers that keep the mix table readable. Memory in GiB.

func gib(lo, hi int64) Range { return Range{lo * 1024, hi * 1024} }
func pct(lo, hi int64) Range { return Range{lo, hi} }
func n(lo, hi int64) Range   { return Range{lo, hi} }

func inference(services, replicas Range, mem, comp Range) Workload {
	return Workload{Kind: Inference, Count: services, Replicas: replicas, MemoryMiB: mem, ComputePercent: comp}
}

func notebooks(count Range, mem, comp Range) Workload {
	return Workload{Kind: Notebook, Count: count, MemoryMiB: mem, ComputePercent: comp}
}

func batch(count Range, mem Range, comp ...int) Workload {
	return Workload{Kind: Batch, Count: count, MemoryMiB: mem, ComputeChoices: comp}
}

func migRequests(count Range, profiles ...string) Workload {
	return Workload{Kind: MIGRequest, Count: count, Profiles: profiles}
}

// Mixes returns the named benchmark mixes.
//
//   - inference-a100: six product teams serving small models on
//     A100-40GB, several replicas each, a few notebooks and MIG requests;
//     one shared platform tenant with isolation none.
//   - mixed-h100: an H100-80GB-SXM cluster shared by eight teams running
//     inference, notebooks, batch jobs and explicit MIG requests; two
//     tenants with isolation none, one with hardware isolation.
//   - notebooks-a100: a teaching / dev cluster on A100-40GB: many small
//     notebooks across twelve tenants (three course tenants with isolation
//     none).
//   - inference-l4: inference, notebooks and a little batch on L4 (no MIG:
//     tenant isolation can only separate tenants by GPU).
//   - training-h100: batch-heavy H100-80GB-SXM mix with some inference.
func Mixes() []Mix {
	return []Mix{
		{
			Name:        "inference-a100",
			Description: "small-model inference replicas, some notebooks and MIG requests, 7 tenants on A100-40GB",
			GPU:         "A100-40GB",
			Tenants: []Tenant{
				team("search", 3, gib(2, 6), pct(5, 20)),
				team("ads", 2, gib(3, 8), pct(10, 25)),
				team("chat", 3, gib(4, 9), pct(10, 25)),
				team("vision", 2, gib(2, 5), pct(5, 15)),
				team("fraud", 2, gib(1, 4), pct(5, 12)),
				{Name: "ml-research", Workloads: []Workload{
					notebooks(n(4, 8), gib(2, 8), pct(5, 12)),
					migRequests(n(2, 4), "1g.5gb", "2g.10gb", "3g.20gb"),
				}},
				{Name: "platform", Isolation: alloc.IsolationNone, Workloads: []Workload{
					inference(n(2, 3), n(2, 4), gib(1, 3), pct(3, 8)),
				}},
			},
			StaticMIG:    []string{"3g.20gb", "2g.10gb", "1g.5gb", "1g.5gb"},
			StaticMIGWhy: "mig-parted all-balanced for A100-40GB: a 3g for the big requests, 2g and 1g for replicas",
		},
		{
			Name:        "mixed-h100",
			Description: "inference, notebooks, batch and MIG requests from 8 tenants on H100-80GB-SXM",
			GPU:         "H100-80GB-SXM",
			Tenants: []Tenant{
				{Name: "llm-serving", Workloads: []Workload{
					inference(n(2, 3), n(2, 4), gib(8, 18), pct(10, 25)),
					batch(n(1, 2), gib(30, 60), 50, 75, 100),
				}},
				{Name: "recsys", Workloads: []Workload{
					inference(n(2, 3), n(3, 6), gib(4, 10), pct(5, 15)),
					batch(n(1, 3), gib(20, 40), 50, 50, 75),
				}},
				{Name: "speech", Workloads: []Workload{
					inference(n(1, 2), n(2, 4), gib(6, 12), pct(10, 20)),
					notebooks(n(1, 3), gib(4, 12), pct(5, 15)),
				}},
				{Name: "vision", Workloads: []Workload{
					inference(n(1, 2), n(2, 5), gib(4, 8), pct(5, 15)),
					migRequests(n(1, 3), "1g.10gb", "2g.20gb"),
				}},
				{Name: "research", Workloads: []Workload{
					notebooks(n(4, 8), gib(4, 16), pct(5, 15)),
					batch(n(1, 3), gib(20, 70), 50, 100),
					migRequests(n(1, 2), "3g.40gb"),
				}},
				{Name: "finance", Isolation: alloc.IsolationHardware, Workloads: []Workload{
					inference(n(1, 1), n(2, 3), gib(6, 12), pct(10, 20)),
				}},
				{Name: "interns", Isolation: alloc.IsolationNone, Workloads: []Workload{
					notebooks(n(3, 6), gib(2, 8), pct(3, 10)),
				}},
				{Name: "ci", Isolation: alloc.IsolationNone, Workloads: []Workload{
					notebooks(n(3, 6), gib(2, 6), pct(5, 10)),
				}},
			},
			StaticMIG:    []string{"3g.40gb", "2g.20gb", "1g.10gb", "1g.10gb"},
			StaticMIGWhy: "mig-parted all-balanced for H100-80GB: one 3g for batch and 3g requests, 2g and 1g for serving",
		},
		{
			Name:        "notebooks-a100",
			Description: "teaching/dev cluster: many small notebooks across 12 tenants on A100-40GB",
			GPU:         "A100-40GB",
			Tenants: func() []Tenant {
				var ts []Tenant
				for i := 1; i <= 9; i++ {
					ts = append(ts, Tenant{Name: fmt.Sprintf("lab%d", i), Workloads: []Workload{
						notebooks(n(2, 6), gib(1, 4), pct(2, 10)),
					}})
				}
				for i := 1; i <= 3; i++ {
					ts = append(ts, Tenant{Name: fmt.Sprintf("course%d", i), Isolation: alloc.IsolationNone, Workloads: []Workload{
						notebooks(n(6, 12), gib(1, 3), pct(2, 6)),
					}})
				}
				return ts
			}(),
			StaticMIG:    []string{"1g.5gb", "1g.5gb", "1g.5gb", "1g.5gb", "1g.5gb", "1g.5gb", "1g.5gb"},
			StaticMIGWhy: "mig-parted all-1g.5gb: every notebook fits a 1g.5gb, seven per GPU",
		},
		{
			Name:        "inference-l4",
			Description: "inference replicas, notebooks and a little batch from 6 tenants on L4 (no MIG)",
			GPU:         "L4",
			Tenants: []Tenant{
				{Name: "search", Workloads: []Workload{inference(n(2, 3), n(2, 4), gib(2, 6), pct(10, 25))}},
				{Name: "ads", Workloads: []Workload{inference(n(1, 2), n(3, 5), gib(3, 8), pct(10, 30))}},
				{Name: "chat", Workloads: []Workload{
					inference(n(1, 2), n(2, 4), gib(6, 10), pct(15, 30)),
					batch(n(1, 2), gib(12, 20), 50, 100),
				}},
				{Name: "vision", Workloads: []Workload{
					inference(n(1, 2), n(2, 4), gib(2, 5), pct(5, 20)),
					notebooks(n(1, 3), gib(2, 6), pct(5, 15)),
				}},
				{Name: "research", Workloads: []Workload{
					notebooks(n(3, 6), gib(2, 8), pct(5, 15)),
					batch(n(1, 2), gib(10, 20), 50, 75),
				}},
				{Name: "platform", Isolation: alloc.IsolationNone, Workloads: []Workload{
					inference(n(2, 3), n(2, 3), gib(1, 3), pct(3, 8)),
				}},
			},
		},
		{
			Name:        "training-h100",
			Description: "batch/training-heavy H100-80GB-SXM mix with some inference, 6 tenants",
			GPU:         "H100-80GB-SXM",
			Tenants: []Tenant{
				{Name: "pretrain", Workloads: []Workload{batch(n(4, 8), gib(40, 78), 100)}},
				{Name: "finetune", Workloads: []Workload{batch(n(4, 8), gib(20, 40), 50, 50, 100)}},
				{Name: "eval", Workloads: []Workload{
					batch(n(3, 6), gib(10, 30), 50),
					inference(n(1, 2), n(2, 4), gib(8, 16), pct(10, 25)),
				}},
				{Name: "serving", Workloads: []Workload{inference(n(2, 3), n(2, 4), gib(10, 20), pct(10, 25))}},
				{Name: "research", Workloads: []Workload{
					notebooks(n(3, 6), gib(4, 16), pct(5, 15)),
					migRequests(n(1, 3), "1g.10gb", "3g.40gb"),
				}},
				{Name: "shared", Isolation: alloc.IsolationNone, Workloads: []Workload{
					notebooks(n(2, 4), gib(2, 8), pct(5, 10)),
				}},
			},
			StaticMIG:    []string{"4g.40gb", "3g.40gb"},
			StaticMIGWhy: "half-GPU split (4g.40gb + 3g.40gb): batch jobs of ≤40 GiB and 50% compute take the 4g",
		},
	}
}

// team is an inference team: services with replicas and a notebook or two.
func team(name string, services int64, mem, comp Range) Tenant {
	return Tenant{Name: name, Workloads: []Workload{
		inference(n(services-1, services), n(2, 5), mem, comp),
		notebooks(n(0, 2), gib(2, 6), pct(5, 10)),
	}}
}

// MixByName finds a mix of Mixes.
func MixByName(name string) (Mix, bool) {
	for _, m := range Mixes() {
		if m.Name == name {
			return m, true
		}
	}
	return Mix{}, false
}
