// Package render writes the files the rest of a user's stack consumes from
// a spec and its plan: an NVIDIA device-plugin ConfigMap, a mig-parted
// config, DRA DeviceClasses and ResourceClaimTemplates, Kubernetes
// Deployments with the right requests, selectors and tolerations, and
// Karpenter NodePools. Output is YAML; tests parse it back with the
// consumers' own Go types where they exist and validate Kubernetes objects
// against a real kube-apiserver.
package render
