// Package nodepatch makes the cluster see what hotplugd sees. It has the
// Node's three parts of the control loop (pkg/control decides): Watch, the
// source (one watch of the daemon's own Node, field-selected by name);
// Reported, pure, which compares what the
// kubelet reports in status.capacity and status.allocatable with what a
// freshly started kubelet would report on this machine (the Prediction), and
// reports the difference on the Node:
//
//   - the node condition KubeletCapacityStale (True while they differ, False
//     once they match), written with a strategic-merge patch of nodes/status;
//     the condition found on the Node at start is the starting point, so a
//     daemon restart keeps its lastTransitionTime and writes nothing when
//     nothing changed;
//   - annotations with the detected capacity and allocatable and the time
//     the detected capacity last changed (hotplugd.io/...);
//   - an Event on the Node, reason CapacityDrift, when a drift appears or
//     changes (the remedy adds Remediated, RemediationFailed, NeedsDrain,
//     KubeletWouldRefuse, RestartWithheld).
//
// It writes only when the desired condition or annotations differ from the
// Node's, so at idle it makes no request beyond the watch, and a settled
// change costs one status patch and one Event. It never writes capacity: a
// running kubelet reverts such a patch within one status sync (about 10 s),
// and the durable fix is the kubelet restart of pkg/remedy.
//
// A memory difference smaller than MinMemoryDelta is noise (balloon drivers
// and kernel reservations move MemTotal by a few MiB): it is logged, never
// reported as drift. CPU and hugepage differences always count.
//
// Writer executes: one status patch, Events. Writes that fail are retried
// by the control loop, level-triggered, with capped exponential backoff and
// jitter (Backoff), for as long as the API server is away; the next attempt
// after it returns converges. Writes refused for good (403, 401, 404, 400,
// 422) back off to minutes.
package nodepatch
