// Package server is gpuslice's control plane: the authenticated JSON API
// over HTTP (tenants, tokens, claims with their lifecycle, nodes and their
// GPUs, usage, events), the scheduler that decides with the allocator and
// commits to the store, the lost-node sweeper, and Prometheus metrics.
//
// Decisions are made in memory under one lock on the allocator's State
// (the authority on reservations) and made durable in the store outside
// it, so concurrent claims share the store's group commit; a failed commit
// gives its reservation back. The State is rebuilt from the store when
// nodes change, and on start, so a restart loses nothing acknowledged.
package server
