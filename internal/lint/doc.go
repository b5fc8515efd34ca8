// Package lint holds the repository's structural tests: every package has
// exactly one doc comment, pure packages stay free of I/O, Kubernetes and
// NVML, main only wires, and the test kit (internal/testkit) stays in tests.
// It has no code of its own.
package lint
