//go:build tools

// Package noderuntime pins the container runtime that scripts/realnode.sh
// builds. The build tag keeps this file out of every build; it only exists
// so that `go mod tidy` keeps the requirements.
package noderuntime

import (
	_ "github.com/containerd/containerd/v2/cmd/containerd"
	_ "github.com/containerd/containerd/v2/cmd/containerd-shim-runc-v2"
	_ "github.com/containerd/containerd/v2/cmd/ctr"
)
