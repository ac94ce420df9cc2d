// Package remedy makes the kubelet's view current when reporting is not
// enough. A running kubelet never re-reads the machine (it caches cAdvisor's
// machine info at start) and reverts outside patches of its capacity, so the
// durable fix is a restart with state files that fit the machine. With
// --remedy=restart-kubelet, once a drift has outlasted the settle time with
// no further event, and no burst is arriving, it:
//
//  1. discovers the kubelet again (pkg/kubeletwatch) and asks whether it
//     would start on this machine with its configuration (pkg/kubeletstart);
//     if not, it restarts nothing and reports KubeletWouldRefuse in the
//     kubelet's words;
//  2. plans the state-file repair without writing (pkg/preflight, dry run);
//     if a person is needed (pinned containers would lose their CPUs or
//     memory) it stops there: the kubelet keeps running, an Event NeedsDrain
//     and the condition say what to do, naming the pods to drain
//     (namespace/name from the kubelet's pod log directory, pkg/podnames,
//     else the UID);
//  3. writes the restart down in its Journal, stops the kubelet
//     (pkg/kubeletctl: systemd over D-Bus, or commands), repairs the state
//     files (each old file kept as a backup), starts it;
//  4. waits for the kubelet's healthz and for the Node to show the
//     predicted capacity, within a timeout;
//  5. on failure restores the backups, restarts the kubelet as it was, and
//     reports RemediationFailed on the condition and in an Event.
//
// Decide is the whole policy as a pure function over explicit inputs (a
// Plan can be printed and asserted); the Remedier only executes plans, from
// one goroutine, so two remedies never overlap. One attempt per (prediction,
// kubelet configuration) (Key): one that failed, was refused or needed a
// person is not repeated until either changes, and attempts are
// rate-limited (one per Interval); both are read from the Journal, so they
// hold across hotplugd's restarts. The rate limit holds restarts back, not
// findings: within it a new drift gets steps 1 and 2 once (ActionCheck),
// so a refusal or a NeedsDrain is reported at once.
//
// Crash safety: from the stop on, nothing depends on the daemon's
// cancellation (the kubelet's stop, start and rollback have their own
// timeouts), so SIGTERM ends a restart with the kubelet started. Each phase
// is journaled before it begins, with the backup names fixed before any
// write; Run first finishes a restart a killed hotplugd left under way
// (carried out again from the stop, verified, or rolled back). The
// controller's stop and start must therefore be idempotent.
//
// A kubelet of a release hotplugd does not know, or whose state files it
// cannot reach, gets no remedy; a kubelet that resizes its node in place
// (the InPlaceNodeResourceResize gate, which no release up to 1.37 has;
// keyed by release in pkg/kubeletversion) is only reported on. In dry-run
// mode the plan is logged and nothing is changed.
//
// On the host it touches: the kubelet's service (stop, start), the state
// files under the kubelet's root directory, the kubelet's healthz, and its
// own journal (--state-dir); it lists the kubelet's pod log directory when a
// drain is needed.
package remedy
