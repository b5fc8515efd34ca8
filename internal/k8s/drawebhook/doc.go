// Package drawebhook is the validating admission webhook of driver
// gpu.gpuslice.dev: for every ResourceClaim and ResourceClaimTemplate
// created or updated it checks the opaque configs for the driver with
// internal/k8s/draconfig — the same decoders the kubelet plugin runs at
// prepare — and denies a claim that prepare would refuse, with the
// field's path and what would be valid, before a pod waits on it.
package drawebhook
