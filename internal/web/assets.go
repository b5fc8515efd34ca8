package web

import (
	"bytes"
	"compress/gzip"
	"embed"
	"net/http"
	"path"
	"strings"
	"sync"
)

//go:embed assets
var assets embed.FS

// contentSecurityPolicy lets the page load only what the binary serves:
// no inline script, nothing from another origin.
const contentSecurityPolicy = "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; " +
	"connect-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'self'"

// Assets serves the dashboard: "/" is the page (which shows only the login
// until a token is given) and "/ui/NAME" its script and style sheet. No
// asset holds data: everything shown comes from the API with the token.
func Assets() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		name := "index.html"
		if r.URL.Path != "/" {
			name = path.Base(r.URL.Path)
			if path.Dir(r.URL.Path) != "/ui" || name == "index.html" {
				http.NotFound(w, r)
				return
			}
		}
		data, err := assets.ReadFile("assets/" + name)
		if err != nil {
			http.NotFound(w, r)
			return
		}
		h := w.Header()
		h.Add("Vary", "Accept-Encoding")
		if strings.Contains(r.Header.Get("Accept-Encoding"), "gzip") {
			data = gzipped(name, data)
			h.Set("Content-Encoding", "gzip")
		}
		switch path.Ext(name) {
		case ".html":
			h.Set("Content-Type", "text/html; charset=utf-8")
		case ".js":
			h.Set("Content-Type", "text/javascript; charset=utf-8")
		case ".css":
			h.Set("Content-Type", "text/css; charset=utf-8")
		}
		h.Set("Content-Security-Policy", contentSecurityPolicy)
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("Referrer-Policy", "no-referrer")
		h.Set("Cache-Control", "no-cache")
		_, _ = w.Write(data)
	})
}

var (
	zipMu  sync.Mutex
	zipped = map[string][]byte{}
)

// gzipped is an asset compressed, once.
func gzipped(name string, data []byte) []byte {
	zipMu.Lock()
	defer zipMu.Unlock()
	if z, ok := zipped[name]; ok {
		return z
	}
	var buf bytes.Buffer
	zw, _ := gzip.NewWriterLevel(&buf, gzip.BestCompression)
	_, _ = zw.Write(data)
	_ = zw.Close()
	zipped[name] = buf.Bytes()
	return zipped[name]
}
