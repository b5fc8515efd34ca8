// Package testkit is the one test kit every gpuslice test uses: one
// golden-file helper (with -update), one Eventually wait, and the gpuslice
// binary built once per run. It imports testing, so only _test.go files and
// test harness packages may import it (internal/lint checks that).
package testkit
