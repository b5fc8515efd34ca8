//go:build tools

// Package controlplane pins the Kubernetes control-plane binaries that
// scripts/controlplane.sh builds. The build tag keeps this file out of every
// build; it only exists so that `go mod tidy` keeps the requirements.
package controlplane

import (
	_ "go.etcd.io/etcd/server/v3"
	_ "k8s.io/kubernetes/cmd/kube-apiserver"
	_ "k8s.io/kubernetes/cmd/kube-controller-manager"
	_ "k8s.io/kubernetes/cmd/kubectl"
	_ "k8s.io/kubernetes/cmd/kubelet"
)
