// Package services runs services in standalone `gpuslice serve`: each is
// N replicas of one claim and one command. The controller measures the
// replicas (the GPUs their claims hold, the requests at the proxy, or a
// Prometheus query), asks internal/autoscale for a decision, and applies
// it through the API like any client: a replica is a claim pinned to the
// serving node (created and released through the server's one transaction
// path), and a process started with the claim's environment. A reverse
// proxy on the service's targetPort spreads requests over the ready
// replicas, holds them (bounded) while a stopped service wakes, and takes
// a replica out of rotation and lets its requests finish before it stops.
// A Gate is that proxy in front of replicas another system runs (a
// Kubernetes Deployment, internal/k8s/scalezero): it wakes and stops them
// through a Scaler and leaves the count in between to others.
package services
