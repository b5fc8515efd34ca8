// Package buildlist holds only a test: that this module compiles every
// package kube-scheduler needs from the same module versions as the control
// plane tools module (test/controlplane), so that scripts/controlplane.sh
// and scripts/gpuslice-scheduler.sh share the Go build cache's compiled
// packages instead of compiling kube-scheduler twice. See the exclude block
// in ../go.mod.
package buildlist
