// Package gpu is the narrow device layer the node agent drives: enumerate
// GPUs with their MIG layout, create and destroy GPU instances at explicit
// placements, set MIG and compute modes, list processes and their memory,
// sample utilization and watch health events. Implementations: gpu/nvml
// (go-nvml, the real thing) and gpu/fake (a simulated machine built from
// the catalog that enforces real placement rules and injects faults).
package gpu
