// Package budget is hotplugd's cluster-wide restart budget: at most Slots
// nodes restart their kubelet at the same time, whatever their number, so
// that a change that reaches a whole node pool at once (a hugepage
// setting, a hypervisor resizing every VM of a tenant) does not restart
// every kubelet within seconds of each other.
//
// It is Kubernetes' own coordination object, as controllers use it to elect
// a leader, not a lock of hotplugd's: Slots coordination.k8s.io/v1 Leases
// named <Name>-0 ... <Name>-<Slots-1> in one namespace, each held by at
// most one node, written as client-go's resourcelock.LeaseLock writes
// them (read, then create or update with the resourceVersion read: of two
// nodes that try the same Lease at once, one gets a conflict and tries the
// next). A node takes a Lease that is free (no holder), expired (its
// renewTime plus its leaseDurationSeconds passed, by the taker's clock, as
// leader election judges it) or its own; renews it while its restart and
// the verification run; and gives it back (holder "") when done. A holder
// that dies frees its Lease by expiry. Acquire never waits: one LIST of the
// budget's Leases (by label) finds the candidates, so a node that finds
// none free made one request; it keeps reporting and asks again later (the
// control loop's wake), saying that it waits and for whom. Only a candidate
// is read again and written.
//
// Its own package because it is the one piece of hotplugd that writes
// cluster-scoped coordination state; the remedy only asks it.
package budget
