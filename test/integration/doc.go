// Package integration runs the hotplugd binary on this machine's real
// kernel: it offlines cpu1, writes hugepage counts through every kind of
// file, sends bursts of real (synthetic) memory uevents, stalls the daemon
// with SIGSTOP, and reads what the daemon logged and counted. Every test
// that changes the machine holds internal/machinetest's lock and restores
// what it changed in t.Cleanup. Tests skip, saying why, when not run as root.
//
// The benchmarks here (make bench) measure the daemon as operators run it:
// detection latency, reconciles per burst, and its cost at idle.
package integration
