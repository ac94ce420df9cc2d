// Package kubeletctl stops and starts the kubelet, so that hotplugd can
// repair the kubelet's state files while it is down. Pods keep running while
// the kubelet is stopped.
//
// There are two implementations of Controller:
//
//   - Systemd asks systemd to stop and start a unit (kubelet.service by
//     default) over its D-Bus API (org.freedesktop.systemd1.Manager StopUnit
//     and StartUnit, through github.com/coreos/go-systemd/v22/dbus) on the
//     system bus, /run/dbus/system_bus_socket unless DBUS_SYSTEM_BUS_ADDRESS
//     or an address says otherwise; a DaemonSet mounts the host's socket
//     there. This is how the kubelet is restarted on systemd hosts: systemd
//     keeps owning the process, its cgroup, its restart policy and its logs,
//     and hotplugd needs neither systemctl nor a shell in its image. The
//     calls need root (or a polkit rule granting manage-units).
//   - Commands runs two shell commands (/bin/sh -c) for hosts without
//     systemd, e.g. OpenRC's `rc-service kubelet stop`.
//
// Guarantees: Stop and Start return only once the operation has finished,
// or with an error. For Systemd that is when systemd reports the job as
// "done" and the unit's ActiveState is then "inactive" or "failed" (Stop) or
// "active" (Start; a unit still "activating" is polled until it settles or
// ctx ends); any other job result (failed, canceled, timeout, dependency,
// skipped) is an error naming the unit and the result. For Commands it is
// when the shell exits with status 0; a failure reports the exit status
// and the tail of the command's output. When ctx ends first, both return an
// error wrapping ctx.Err(): Commands kills the command's whole process group,
// while a systemd job already queued keeps running in systemd.
//
// Both are io.Closer (Controller embeds it), so that the caller closes
// whichever it built: Systemd's Close closes its bus connection, Commands'
// holds nothing and returns nil. Close is idempotent and does not stop a
// job or command already running.
//
// An unknown unit is reported by NewSystemd, or by Stop and Start when the
// unit disappeared later, as an error matching ErrNoSuchUnit that names the
// unit. The package neither enables, masks nor edits units, and Commands
// does not interpret the commands it runs.
package kubeletctl
