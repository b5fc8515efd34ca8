// Package cli is the gpuslice command tree: it parses flags, calls the pure
// packages and prints their answers as a table, JSON or YAML. It holds no
// logic of its own beyond presentation; cmd/gpuslice only wires it to the
// process.
package cli
