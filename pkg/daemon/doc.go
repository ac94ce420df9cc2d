// Package daemon is hotplugd's event loop: kernel uevents (pkg/uevent),
// hugepage file writes (pkg/hugepagewatch), overflows, a slow periodic resync
// and SIGHUP all feed one debounced trigger (pkg/debounce); each batch takes
// a fresh topology snapshot (pkg/topology), diffs it with the last one, and
// reports every real difference: a log entry per changed resource (to
// journald with structured fields under systemd), Prometheus metrics, and
// the sd_notify status line.
//
// Busy is true from a trigger until its reconcile (hooks included) has
// returned, and Idle wakes a consumer when that ends, so that the remedy
// never acts on a machine that is being re-read and needs no polling. Run
// returns only once every goroutine it started has returned, whatever it
// returns with, and closes the sources after them.
//
// Data flows one way: sources -> debounced trigger -> snapshot -> diff ->
// report. It reads sysfs and procfs under configurable roots and writes
// nothing on the host; its hooks hand each snapshot to the control loop
// (pkg/control), which decides what the Node and the kubelet get.
package daemon
