// Package catalog holds gpuslice's built-in facts about GPUs: the GPU models
// (memory, SMs, architecture, the names NVML and Kubernetes node labels use
// for them), each MIG-capable model's geometry (memory and compute slices,
// GPU-instance profiles with their allowed placements, as `nvidia-smi mig
// -lgipp` prints them) and the cloud instance types that carry them, with
// on-demand prices where a source gives one.
//
// The data lives in data/catalog.yaml, is embedded in the binary and is
// validated when loaded: Default returns the embedded catalog, Load parses and
// validates any other copy and reports every problem with its line and path.
// A loaded Catalog is immutable; its lookups return copies and are safe for
// concurrent use. Lookups resolve names case-insensitively and fail with a
// *NotFoundError that lists the valid names and suggests the closest one.
//
// Every entry names the sources it comes from (keys of the catalog's source
// list) and carries a confidence label:
//
//   - verified: from a primary source (an NVIDIA document, NVIDIA source code
//     or real nvidia-smi output);
//   - inferred: derived from verified facts about a sister part (for example
//     H200 placements from H100);
//   - unconfirmed: a datasheet value not checked against a primary source;
//   - secondary: taken from a third-party page or repository;
//   - unknown: no source gives the fact.
//
// Unknown facts are never invented: an unknown SM count is 0, an unknown GI
// profile ID or NVML profile is -1, an unknown price is a nil Price, and an
// unknown MIG profile memory size is an estimate flagged MemoryEstimated.
package catalog
