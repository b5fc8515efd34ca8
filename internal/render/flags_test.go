package render

import "flag"

// update rewrites the golden files under testdata/ instead of comparing
// with them: go test ./internal/render/ -update. Every render test in the
// package shares this one flag.
var update = flag.Bool("update", false, "rewrite the golden files in testdata/")
