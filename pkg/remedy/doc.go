// Package remedy makes the kubelet's view current when reporting is not
// enough. A running kubelet never re-reads the machine (it caches cAdvisor's
// machine info at start) and reverts outside patches of its capacity, so the
// durable fix is a restart with state files that fit the machine. With
// --remedy=restart-kubelet, once a drift's burst of events is quiet and
// the kernel says the change is complete (nothing still arriving: no
// hot-added memory block waiting to be onlined, no CPU device just added;
// otherwise it waits until the machine has had no event for the settle
// time), it:
//
//  1. discovers the kubelet again (pkg/kubeletwatch) and asks whether it
//     would start on this machine with its configuration (pkg/kubeletstart);
//     if not, it restarts nothing and reports KubeletWouldRefuse in the
//     kubelet's words;
//  2. plans the state-file repair without writing (pkg/preflight, dry run);
//     if a person is needed (pinned containers would lose their CPUs or
//     memory) it stops there: an Event NeedsDrain and the condition name
//     the pods to drain;
//  3. judges that the restart starts exactly the kubelet that runs now and
//     does to pods only what the operator accepted, else withholds it
//     (RestartWithheld, saying why and what to do): no configuration file or
//     drop-in changed since the kubelet started, the binary unchanged, the
//     unit not masked nor awaiting daemon-reload, the command line systemd
//     would start the running one, hotplugd preflight in the kubelet's start
//     where a state file may need repair (systemd: the unit's ExecStartPre,
//     prefixed "-"), every state file judged, room to write the repair, and
//     no readiness reset (kubelet 1.34, or ChangeContainerStatusOnKubeletRestart
//     on) unless --allow-readiness-reset;
//  4. writes the restart down in its Journal (with the kubelet process that
//     runs) and asks the kubelet's supervisor for one restart: systemd's
//     RestartUnit over D-Bus, or one restart command run detached
//     (pkg/kubeletctl). The supervisor owns it from there: the stop, the
//     repair (hotplugd preflight in the kubelet's start, with the machine as
//     it is at that moment) and the start happen whatever becomes of
//     hotplugd, and the supervisor's restart policy covers a failed start;
//  5. verifies within a timeout: a new kubelet process, its healthz, the
//     Node showing the predicted capacity. A Node that cannot be read is
//     "unverified", never a kubelet failure. There is no rollback: the old
//     state files fit the old machine only, and the kubelet is its
//     supervisor's.
//
// Decide is the remedy's half of the policy as a pure function over
// explicit inputs; pkg/control's one loop calls it from its own Decide and
// hands the resulting plan to the Remedier, which only executes (Restart,
// Check, Recover), one at a time, so two remedies never overlap. One
// attempt per (prediction, kubelet configuration) (Key): one that failed,
// was refused, withheld or needed a person is not repeated until either
// changes; attempts are rate-limited (one per Interval) and bounded
// (MaxPerDay restarts in any 24 hours); all are read from the Journal, so
// they hold across hotplugd's restarts. The waits hold restarts back, not
// findings: within them a new drift gets steps 1 to 3 once (ActionCheck),
// so a refusal, a NeedsDrain or a withheld restart is reported at once.
//
// Crash safety by construction: no hotplugd process stands between the
// kubelet's stop and its start. A hotplugd killed before asking leaves the
// old kubelet running; one killed after asking leaves the restart to the
// supervisor. The next hotplugd only verifies a record under way (never
// stops or restarts anything for it), and closes one older than
// UnderwayBound as interrupted. A record of an earlier hotplugd that
// stopped and started the kubelet itself gets a start from the supervisor
// (a no-op when the kubelet runs).
//
// A kubelet of a release hotplugd does not know, or whose state files it
// cannot reach, gets no remedy; a kubelet that resizes its node in place
// (the InPlaceNodeResourceResize gate, which no release up to 1.37 has;
// keyed by release in pkg/kubeletversion) is only reported on. In dry-run
// mode the plan is logged and nothing is changed.
//
// On the host it touches: the kubelet's supervisor (one restart; systemd's
// unit properties are read), the kubelet's healthz, its own journal
// (--state-dir); it reads the state files, the kubelet's binary's metadata
// and the pod log directory's listing, and writes nothing of the kubelet's.
package remedy
