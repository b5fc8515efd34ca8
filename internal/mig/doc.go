// Package mig is gpuslice's pure model of Multi-Instance GPU geometry.
//
// A MIG-capable GPU has a fixed number of memory slices (8 on A100/H100/H200/
// B200, 4 on A30 and RTX PRO). A GPU instance of a profile occupies the memory
// slices [start, start+size) and may only start at the profile's allowed
// starts, exactly as `nvidia-smi mig -lgipp` prints them ("{0,4}:4"). A set of
// instances is valid when every instance uses an allowed start, no two
// instances overlap, at most one "+me" profile is present and every count
// limit holds.
//
// On top of that rule the package answers the questions dynamic
// partitioning asks: is this layout valid (and if not, which instance
// conflicts with which), which maximal layouts exist, where should a new
// instance go so the most arrival orders still to come can be placed (see
// BestStart and arrivals.go), which
// explicit placements realise a multiset of profiles (Fit), and which idle
// instances are the cheapest to destroy so a profile fits (Evict).
//
// Every function is pure: it takes a Geometry built from the catalog and a
// layout value and returns a value. Nothing here touches a GPU.
package mig
