package server

import (
	_ "embed"
	"net/http"
)

// openAPI documents every route of Handler; a test holds the two together.
//
//go:embed openapi.json
var openAPI []byte

func serveOpenAPI(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write(openAPI)
}
