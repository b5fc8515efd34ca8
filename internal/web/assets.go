package web

import (
	"embed"
	"net/http"
	"path"
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
