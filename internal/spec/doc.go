// Package spec reads the configurations users already have — compose.yaml
// with x-internal-integrations.multiTenantGpu, Kubernetes DRA
// ResourceClaims with NVIDIA's GpuConfig, NVIDIA device-plugin and
// mig-parted configs — and gpuslice's own YAML, into one model: a Spec of
// node pools, tenants and workloads whose requests are alloc claims.
//
// Every reader validates fully and reports every problem at once as
// Diagnostics carrying file:line:column, the field path, what is wrong and
// what would be valid. Warnings do not stop a load; errors do. No reader
// panics on any input (each has a fuzz target).
package spec
