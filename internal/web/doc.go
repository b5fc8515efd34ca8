// Package web is gpuslice's dashboard: the page itself (plain HTML, CSS and
// JavaScript embedded with go:embed, no build step, nothing from a CDN) and
// the pure views the server answers for it — the fleet drawn with its MIG
// geometry from the catalog, the tenants' cost from catalog prices, and a
// bounded ring of samples for the charts. It reads no store and no clock of
// its own: internal/server passes in what it read and serves the results
// with the same bearer tokens as the rest of the API.
package web
