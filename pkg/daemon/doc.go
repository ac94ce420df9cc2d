// Package daemon is hotplugd's event loop: kernel uevents (pkg/uevent),
// hugepage file writes (pkg/hugepagewatch), overflows, a slow periodic resync
// and SIGHUP all feed one debounced trigger (pkg/debounce); each batch takes
// a fresh topology snapshot (pkg/topology), diffs it with the last one, and
// reports every real difference: a log entry per changed resource (to
// journald with structured fields under systemd), Prometheus metrics, and
// the sd_notify status line.
//
// Data flows one way: sources -> debounced trigger -> snapshot -> diff ->
// report. It reads sysfs and procfs under configurable roots and writes
// nothing on the host; acting on the Node and the kubelet comes in later
// stages of the same loop.
package daemon
