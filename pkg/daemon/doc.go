// Package daemon is hotplugd's event loop: kernel uevents (pkg/uevent),
// hugepage file writes (pkg/hugepagewatch), overflows, a slow periodic resync
// and SIGHUP all feed one debounced trigger (pkg/debounce); each batch takes
// a fresh topology snapshot (pkg/topology), diffs it with the last one, and
// reports every real difference: a log entry per changed resource (to
// journald with structured fields under systemd), Prometheus metrics, and
// the sd_notify status line.
//
// Busy is true from a trigger until its reconcile (hooks included) has
// returned, and Idle wakes a consumer when that ends, so that the control
// loop (pkg/control) holds the remedy while the machine is being re-read,
// without polling. Run returns only once every goroutine it started has
// returned, whatever it returns with, and closes the sources after them.
//
// At debug level each reconcile also logs "reconcile timing" after its
// changes: when its batch's triggers arrived and when it was due, and how
// long the reconcile started late (the debounce timer and the scheduler),
// read, diffed and reported. test/integration's BenchmarkDetectionLatency
// splits the detection latency with it.
//
// Data flows one way: sources -> debounced trigger -> snapshot -> diff ->
// report -> hooks. The package reads sysfs and procfs under configurable
// roots and itself writes nothing on the host. What acts is handed to it
// before Run and runs under Run, with its cancellation: hooks (AddHook) get
// every reconcile's result, uevent hooks (AddUeventHook) every relevant
// uevent, and tasks (AddTask) run alongside the loop once the hooks have
// seen the first snapshot. In cmd/hotplugd a hook hands each snapshot to the
// control loop (pkg/control), a task, which patches the Node and, with
// --remedy=restart-kubelet, has the kubelet restarted; with
// --online-new-cpus a uevent hook and a task of pkg/cpuonline online
// hot-added CPUs.
package daemon
