// Package plan answers "what would it take to run this?": it builds a
// simulated fleet from a spec's pools, places every workload replica with
// the real allocator (no second algorithm), grows pools that are sized "as
// needed" until everything fits, and reports nodes and GPUs per pool, the
// MIG layout and sharing of every GPU, which replica lands where, cost per
// hour against dedicated whole GPUs, and warnings.
package plan
