// Package api holds the wire types of gpuslice's HTTP API: tenants, tokens,
// claims and their lifecycle, nodes with their GPU inventory, usage and
// events. The server, the agent, the CLI and the store share them; they
// carry no logic beyond validation of their own fields.
package api
