// Package autoscale decides how many replicas a service runs and which node
// pools to grow, counting GPU slices rather than whole GPUs. Every decision
// is a pure function of a policy, the current state, a window of samples
// and the time passed in (no clock is read here): the controller in
// internal/services measures, calls Decide and applies the answer.
//
// Replicas: up by one after the metric stayed above the over-utilized
// threshold for the whole up period, down by one after it stayed below the
// idle threshold for the down period, always within [min, max]. Only the
// samples taken after the last change count, so each step waits a full
// period and a flapping metric never completes a period. With auto-stop a
// service drops to zero after a down period with no request at all, and
// wakes when a request waits. DecideZero is the half a proxy needs in
// front of replicas another autoscaler counts (a Kubernetes Deployment):
// wake from zero, stop after the idle period, nothing in between.
//
// Node pools (PlanNodes): the claims pending for lack of capacity are
// planned with the real allocator (plan.Make) on new nodes of each pool
// alone; the cheapest pool that places all of them wins, and when none
// can, the pools grow together as the planner places them. Nodes empty for
// their pool's TTL go, never below the pool's warm minimum, and a pool
// below that minimum grows to it. Each answer says what a whole-GPU
// autoscaler would have bought instead. internal/nodescale carries the
// decisions out through a provider.
package autoscale
