// Package daemontest runs the hotplugd binary the way operators do, for
// tests: it builds cmd/hotplugd, starts `hotplugd run` as a child process
// with JSON logs on stderr and /metrics on a free loopback port, and reads
// back what the daemon logged and counted.
//
// On the host it touches nothing itself: the daemon it starts reads /sys
// and /proc, and SyntheticUevents writes "online" to memory blocks' uevent
// files, which sends real uevents and changes nothing else.
//
// Guarantees: a Daemon is stopped by its PID (SIGTERM, then SIGKILL after
// 5 s) when its test ends, also on failure, and a test fails when the daemon
// exited with an error. The daemon's environment is the test's without
// systemd's variables (NOTIFY_SOCKET, JOURNAL_STREAM, WATCHDOG_*,
// LISTEN_*), so a test run under systemd does not make it talk to systemd.
package daemontest
