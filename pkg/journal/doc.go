// Package journal is hotplugd's record of kubelet restarts, on disk
// (--state-dir/remedy.json): the restart under way (asked of the kubelet's
// supervisor, or being verified), and the attempts made, each with what the
// Node should say about it.
//
// It is a package of its own because it is the one place where the two
// halves of the daemon meet without calling each other: the remedy
// (pkg/remedy) writes it as it acts, and the control loop (pkg/control)
// reads it like a source, for the condition's note, the remedy's Events,
// the rate limit and budget, and holding the Node's writes while the
// kubelet restarts. It survives hotplugd's
// restarts, so that a restart whose hotplugd was killed is verified by the
// next hotplugd (never repeated, never stopped: the supervisor owns it), a
// failed attempt is not repeated by a crash-looping one, and the daily
// restart budget holds across restarts.
package journal
