// Package control is hotplugd's one control loop. It exists because the
// decision about the Node and the decision about the kubelet are one
// decision over the same inputs: the prediction the Node is compared with
// is the one a remedy is keyed by, a kubelet that has just started holds
// both the Node's writes and a restart back, and a restart under way holds
// the writes. Split across a reporter and a remedier, each goroutine read
// the other's state, and the grace was applied twice with two clocks.
//
// One goroutine (Loop.Run) owns every input: the daemon's snapshots and
// machine activity, memory offline uevents, the kubelet's facts
// (pkg/kubeletwatch), the Node (nodepatch.Watch), the remedy journal
// (pkg/journal), whether a burst is being debounced (the daemon's Busy and
// Idle), the results of what it executed, and time. On any change it calls
// Decide, a pure function of those inputs, which returns the Plan: the
// prediction and its key, the drift, the Node patch and Events to write,
// the remedy's action (report, wait, check, restart) and when to wake.
// The loop then only executes: the Node writer (nodepatch.Writer) sends
// the patch and the Events, the remedy executor (remedy.Remedier) judges,
// asks the kubelet's supervisor for a restart and verifies it. Neither
// decides when; the executor reads the Node through the Observations the
// loop publishes, never the loop's state.
//
// Data flows one way: sources -> debounced trigger -> snapshot -> Decide ->
// Plan -> writer and executor. A Plan is a value that prints (the log line
// "remedy plan", --dry-run) and is asserted in table tests.
package control
