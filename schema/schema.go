// Package schema publishes the JSON Schema of gpuslice's own YAML so
// editors can complete and check it (yaml-language-server, VS Code).
package schema

import _ "embed"

// JSON is the schema, as served by `gpuslice schema`.
//
//go:embed gpuslice.schema.json
var JSON []byte
