// Package packing is gpuslice's packing benchmark: it measures how many
// GPUs the real allocator (internal/alloc) needs for seeded, reproducible
// workload mixes, against a lower bound that nothing can beat and against
// the ways users share GPUs today.
//
// A Mix (see Mixes) describes tenants and the claims they submit on one GPU
// model: inference replicas (small memory, low compute, several identical
// replicas per service), notebooks (interactive, small), batch jobs (large
// memory, at least half a GPU of compute) and explicit MIG requests (a
// profile named). Mix.Claims expands it, for a seed, into alloc.Claims in a
// shuffled arrival order; the same mix and seed always give the same claims.
//
// Run places those claims seven ways and returns a Report:
//
//   - gpuslice-plan: the real allocator as a capacity plan uses it,
//     knowing every claim. Pass 1 sorts with alloc.SortForPlacement
//     (priority, then biggest first) and places with
//     alloc.State.PlaceAll, i.e. AllocateAhead over the claims after each
//     one (a new shared device is sized for the tenant's claims still to
//     come) then Apply; each next pass places in the RefineOrder of the
//     pass before (first-fit decreasing over the devices it chose), up to
//     Passes; the pass with the fewest GPUs is kept. Binpack policy, on a
//     fleet of twice as many GPUs as claims, every GPU with dynamic sharing
//     and, on MIG-capable models, dynamic MIG. A GPU counts when it holds
//     at least one allocation. State.Check must hold afterwards (no
//     overcommit, isolation intact) and the promised memory and compute of
//     every device are re-added from the allocations and compared with the
//     device as a second check.
//   - gpuslice: the same allocator online, as a running cluster meets the
//     claims: one at a time in arrival order with Allocate, no look-ahead.
//   - whole-gpu: one claim per GPU (what a plain nvidia.com/gpu: 1 gives).
//   - timeslice-N: the NVIDIA device plugin's time-slicing with N replicas
//     per GPU: every claim takes one replica whatever its memory, packed
//     first-fit, tenants not separated, memory and compute unchecked.
//     Devices whose promised memory exceeds the GPU's memory are reported as
//     overcommitted.
//   - static-mig: every GPU pre-partitioned into the mix's fixed layout (as
//     mig-parted would apply it); each claim takes the smallest free
//     instance that fits it; claims that fit no instance of the layout get
//     a whole un-partitioned GPU from a separate pool. Not applicable on
//     models without MIG.
//   - first-fit: whole-GPU first-fit on memory and compute, one tenant per
//     GPU, no MIG and no replica limit, in arrival order.
//   - ffd: the same first-fit over the claims sorted as gpuslice-plan sorts
//     them (first-fit decreasing): the plan-time baseline.
//
// The lower bounds are defined in bounds.go: LowerBound is the classic
// per-dimension volume bound (memory, compute, MIG memory slices) and
// IsolationLowerBound also charges every isolation group (a tenant's
// tenant-isolated claims, a claim that holds its device alone, or the pool
// of tenants whose claims all chose isolation none) for at least one device,
// counted in MIG memory slices, compute slices and instances; without MIG a
// group is a bin-packing instance and is charged Martello and Toth's L2
// bound on its bins. Both are valid for any placement that honours the claims'
// memory, compute, profiles and isolation, so no method can use fewer GPUs.
//
// Everything here is pure: no I/O, no clocks, no global randomness.
package packing
