// Package admit holds the admission rules gpuslice serve and
// gpuslice-scheduler share, as pure decisions with typed outcomes: what a
// claim counts against its tenant's quota (what it is given, not only what
// it asked), whether the quota has room (OverQuota), the per-tenant queue
// bound (QueueFull), a claim that no registered node could ever hold
// (NeverFits), and the reserve-after rule: when a waiting claim is due a
// hold (Due), which claim holds (Yields), which node is held (Nominate) and
// whom a hold keeps off (Binds, Held). Callers gather the numbers under
// their own locks and map the outcomes to their answers: the server to
// HTTP statuses, the scheduler plugin to framework statuses. Each outcome's
// Reason is the text the user reads.
package admit
