package server_test

import "github.com/gpuslice/gpuslice/internal/server"

// streamCaps sets BenchmarkHostileStreams' caps: the defaults, or none.
// (Kept apart so that the benchmark runs on the code before the caps with
// this file replaced by a no-op.)
func streamCaps(cfg *server.Config, capped bool) {
	if !capped {
		cfg.MaxStreamsPerToken, cfg.MaxStreamsPerTenant = -1, -1
	}
}
