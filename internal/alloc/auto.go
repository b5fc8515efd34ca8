package alloc

import "fmt"

// choice is one mechanism a request may be served by, in preference order.
type choice struct {
	mode Mode
	// inMIG requires a MIG instance (a profile was asked for, or the mode
	// is MIG, or hardware isolation chose MIG).
	inMIG bool
}

// decision is the ordered list of mechanisms for a request and why.
type decision struct {
	choices []choice
	why     string
}

// The Auto decision table, after the benchmark study in the seed (Klues &
// Chen, KubeCon NA 2024) and the MIG user guide's comparison of mechanisms.
// Rows are tried top to bottom; the first that matches gives the order in
// which mechanisms are tried. The allocator then takes the cheapest
// candidate across all allowed mechanisms (it will not lock a whole GPU for
// a small request when a MIG instance will do — "multi-tenant: MIG" falls
// out of that, because tenant isolation keeps other tenants off a shared
// device), and breaks ties by this order.
//
//	| # | when                                     | mechanisms, preferred first   | finding                                   |
//	|---|------------------------------------------|-------------------------------|-------------------------------------------|
//	| 1 | isolation hardware                       | mig, exclusive                | only MIG or a whole GPU isolate faults    |
//	| 2 | compute ≥ 100%                           | exclusive, mig                | needs a whole GPU                         |
//	| 3 | latency-sensitive, or heavy inference    | mps (with limits), mig, excl. | MPS+limits degrades least; MIG isolates   |
//	|   | (inference with compute ≥ 50%)           |                               |                                           |
//	| 4 | GPU-intensive batch/training (≥ 50%)     | mps (with limits), mig, excl. | time-slicing is not ideal for these jobs  |
//	| 5 | light inference, small batch (< 50%)     | mps, timeslice, mig, excl.    | both add utilisation without hurting;     |
//	|   |                                          |                               | MPS has the lower overhead                |
//	| 6 | notebooks, dev, CI; unknown work (< 50%) | timeslice, mps, mig, excl.    | time-slicing is simplest, starts fastest  |
//	|   |                                          |                               | and keeps one crash from hitting others   |
var autoTable = []struct {
	name    string
	match   func(r *Request, iso Isolation) bool
	choices []choice
	why     string
}{
	{"hardware", func(r *Request, iso Isolation) bool { return iso == IsolationHardware },
		[]choice{{MIG, true}, {Exclusive, false}},
		"hardware isolation: a MIG instance, else a whole GPU (only these isolate faults and memory bandwidth)"},
	{"whole", func(r *Request, iso Isolation) bool { return r.ComputePercent >= 100 },
		[]choice{{Exclusive, false}, {MIG, true}},
		"asks for 100% compute: a whole GPU"},
	{"latency", func(r *Request, iso Isolation) bool {
		return r.LatencySensitive || (r.Workload == WorkloadInference && r.ComputePercent >= 50)
	}, []choice{{MPS, false}, {MIG, true}, {Exclusive, false}},
		"latency-sensitive or heavy inference: MPS with limits (least degradation), else MIG for isolation"},
	{"intensive", func(r *Request, iso Isolation) bool {
		return (r.Workload == WorkloadBatch || r.Workload == WorkloadTraining) && r.ComputePercent >= 50
	}, []choice{{MPS, false}, {MIG, true}, {Exclusive, false}},
		"GPU-intensive batch: MPS with limits or MIG (time-slicing cannot cap usage)"},
	{"light", func(r *Request, iso Isolation) bool {
		return r.Workload == WorkloadInference || r.Workload == WorkloadBatch || r.Workload == WorkloadTraining
	}, []choice{{MPS, false}, {TimeSlice, false}, {MIG, true}, {Exclusive, false}},
		"light inference or small batch: MPS (lowest overhead) or time-slicing add utilisation without hurting it; MIG when a new device is needed"},
	{"interactive", func(r *Request, iso Isolation) bool { return true },
		[]choice{{TimeSlice, false}, {MPS, false}, {MIG, true}, {Exclusive, false}},
		"notebooks, dev and unknown light work: time-slicing (simplest, fastest start, a crash stays in its process) or MPS; MIG when a new device is needed"},
}

// decide returns the mechanisms a request may use. Explicit modes give one
// choice; Auto consults the table.
func decide(r *Request, iso Isolation) decision {
	withProfile := r.Profile != ""
	switch r.Mode {
	case Exclusive:
		if withProfile {
			return decision{choices: exclusiveInMIG, why: "mode exclusive"}
		}
		return decision{choices: exclusiveWhole, why: "mode exclusive"}
	case MIG:
		return decision{choices: migOnly, why: "mode mig"}
	case TimeSlice, MPS:
		return decision{choices: []choice{{r.Mode, withProfile}}, why: "mode " + string(r.Mode)}
	}
	for i := range autoTable {
		row := &autoTable[i]
		if !row.match(r, iso) {
			continue
		}
		if iso != IsolationHardware && !withProfile {
			return decision{choices: row.choices, why: autoWhy[i]}
		}
		var out []choice
		for _, c := range row.choices {
			if iso == IsolationHardware && (c.mode == TimeSlice || c.mode == MPS) {
				continue
			}
			if withProfile {
				c.inMIG = true
			}
			out = append(out, c)
		}
		return decision{choices: out, why: autoWhy[i]}
	}
	return decision{} // unreachable: the last row matches everything
}

// Fixed choice lists, shared read-only by every decision.
var (
	exclusiveWhole = []choice{{Exclusive, false}}
	exclusiveInMIG = []choice{{Exclusive, true}}
	migOnly        = []choice{{MIG, true}}
	autoWhy        = func() []string {
		out := make([]string, len(autoTable))
		for i, row := range autoTable {
			out[i] = fmt.Sprintf("auto row %d (%s): %s", i+1, row.name, row.why)
		}
		return out
	}()
)
