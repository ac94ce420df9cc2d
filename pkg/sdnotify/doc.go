// Package sdnotify tells systemd about hotplugd's state over the sd_notify
// protocol (sd_notify(3)), for a Type=notify unit with WatchdogSec=: READY=1
// once the first topology snapshot is taken, STATUS= lines with the current
// capacity, STOPPING=1 on shutdown, and WATCHDOG=1 pings while the event loop
// is healthy, so that systemd restarts a daemon that is stuck.
//
// It reads NOTIFY_SOCKET, WATCHDOG_USEC and WATCHDOG_PID (set by systemd)
// through github.com/coreos/go-systemd/v22/daemon and writes datagrams to the
// NOTIFY_SOCKET unix socket; it leaves the variables set. Outside systemd
// (no NOTIFY_SOCKET) every method is a no-op.
package sdnotify
