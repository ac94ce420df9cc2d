// Package remedy makes the kubelet's view current when reporting is not
// enough. A running kubelet never re-reads the machine (it caches cAdvisor's
// machine info at start) and reverts outside patches of its capacity, so the
// durable fix is a restart with state files that fit the machine. With
// --remedy=restart-kubelet, once a drift has outlasted the settle time with
// no further event, and no burst is arriving, it:
//
//  1. plans the state-file repair without writing (pkg/preflight, dry run);
//     if a person is needed (pinned containers would lose their CPUs or
//     memory) it stops there: the kubelet keeps running, an Event NeedsDrain
//     and the condition say what to do;
//  2. stops the kubelet (pkg/kubeletctl: systemd over D-Bus, or commands),
//     repairs the state files (each old file kept as a backup), starts it;
//  3. waits for the kubelet's healthz and for the Node to show the
//     predicted capacity, within a timeout;
//  4. on failure restores the backups, restarts the kubelet as it was, and
//     reports RemediationFailed on the condition and in an Event.
//
// Decide is the whole policy as a pure function over explicit inputs (a
// Plan can be printed and asserted); the Remedier only executes plans, from
// one goroutine, so two remedies never overlap. Attempts are rate-limited
// (one per Interval, whatever the outcome), and a kubelet that resizes its
// node in place (the InPlaceNodeResourceResize feature gate, which no release
// up to 1.37 has; keyed by release in pkg/kubeletversion) is only reported
// on: it follows the machine itself. A kubelet of a release hotplugd does not
// know gets no remedy at all (cmd/hotplugd reports only). In dry-run mode the plan is logged and nothing is changed.
//
// On the host it touches: the kubelet's service (stop, start), the state
// files under the kubelet's root directory, and the kubelet's healthz.
package remedy
