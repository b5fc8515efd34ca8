// Package model is the one shape every input format is read into: node
// pools, tenants and workloads whose requests are allocator claims. It is
// pure data, so the planner and renderers depend on it without depending on
// the readers (compose-go and friends) in package spec.
package model
