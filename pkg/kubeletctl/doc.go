// Package kubeletctl asks the kubelet's supervisor to restart the kubelet,
// and reads what systemd says of the kubelet's unit, so that hotplugd can
// judge whether a restart would start the kubelet that runs now. hotplugd
// never stops the kubelet itself: the state files are repaired in the
// kubelet's own start, by `hotplugd preflight`, and the supervisor owns the
// restart. Pods keep running while the kubelet restarts.
//
// A Restarter asks for one restart. There are two:
//
//   - Systemd asks systemd to restart the unit (kubelet.service by default;
//     a name without a unit type's suffix is a service, see ParseUnitName)
//     with org.freedesktop.systemd1.Manager RestartUnit, mode "replace",
//     over D-Bus (github.com/coreos/go-systemd/v22/dbus). That is one job,
//     the stop, the unit's ExecStartPre= commands and the start, which
//     systemd carries through whatever becomes of hotplugd; systemd keeps
//     owning the process, its cgroup, its Restart= policy and its logs.
//     Restart returns nil once the job ends "done" and the unit's
//     ActiveState is "active" (a unit still "activating" is polled until it
//     settles). Any other job result (failed, canceled, timeout,
//     dependency, skipped) is an error naming the unit and the result, as
//     is a unit in another state once the job is done; a masked unit is
//     systemd's UnitMasked error, with the hint to unmask it. NewSystemd
//     checks that systemd has the unit loaded.
//   - Command runs one shell command (/bin/sh -c), for hosts without
//     systemd, e.g. `rc-service kubelet restart`. It runs in a session of
//     its own (setsid: its own process group, no controlling terminal), so
//     that no signal sent to hotplugd's process group reaches it, with stdin
//     from /dev/null and its stdout and stderr in one anonymous memory file
//     (memfd), not a pipe: a pipe would die with its reader, hotplugd, and
//     take the command's next write with it (SIGPIPE). Restart returns nil
//     when the shell exits with status 0; a failure reports the exit status
//     and the end of the output. A process the command leaves holding its
//     output (a kubelet started with `&`) is not waited for once the shell
//     has exited (it should redirect its output: the memory file grows with
//     what it writes).
//
// When ctx ends first, Restart returns an error wrapping ctx.Err(), and the
// restart goes on without the caller: a systemd job is not cancelled, and
// the command is not killed (the error says it goes on, detached, and gives
// its pid). A systemd job goes on whatever becomes of hotplugd, and so does
// a command (TestCommandOutlivesHotplugd), unless the service manager that
// runs hotplugd kills its whole control group when hotplugd ends (systemd's
// KillMode=control-group does, on a stop or a restart of hotplugd's unit):
// a restart command under systemd should hand the restart to the
// kubelet's supervisor, not be it.
//
// Close releases what a Restarter holds (Systemd's bus connection; Command
// holds nothing); it is idempotent and stops no job or command under way.
//
// Systemd keeps Start and Stop (StartUnit and StopUnit, with the same
// checks). hotplugd uses Start only for a journal record an earlier hotplugd
// left in the middle of its own stop and start, which may mean a stopped
// kubelet (StartUnit does nothing to a running unit).
//
// Systemd.Inspect reads the unit as systemd has it loaded: the properties of
// its org.freedesktop.systemd1.Unit and .Service interfaces (LoadState,
// UnitFileState, NeedDaemonReload, MainPID, ExecStart, ExecStartPre, the
// Environment=, EnvironmentFile=, UnsetEnvironment= and PassEnvironment=
// settings, drop-ins). ManagerEnvironment reads the service manager's own
// environment (`systemctl show-environment`). From both, Unit.CommandLine
// computes the command line systemd would start now: ExecStart with its
// $VARIABLES expanded in the environment systemd would build, the
// environment files read as they are now and parsed as systemd parses them
// (envfile.go, from systemd's source). hotplugd compares it with the
// running kubelet's /proc/<pid>/cmdline to judge that a restart starts the
// kubelet that runs now, not a change staged since; where the command line
// cannot be known beforehand (a variable systemd sets for each start, a
// glob, a file read differently across systemd versions:
// ErrVersionDependent), it is an error rather than a guess. Unit.Preflight
// finds the drop-in's `ExecStartPre=-/usr/local/bin/hotplugd preflight ...`
// (IgnoreFailure is its "-", which keeps a failing preflight from blocking
// the kubelet's start), and Unit.Masked tells whether systemd would refuse
// the restart.
//
// On the host, the package uses the system bus,
// /run/dbus/system_bus_socket unless DBUS_SYSTEM_BUS_ADDRESS or
// SystemdOptions.BusAddress says otherwise (a DaemonSet mounts the host's
// socket there). It reads properties and queues RestartUnit, StartUnit and
// StopUnit jobs, which need root (or a polkit rule granting
// org.freedesktop.systemd1.manage-units); it never enables, masks, edits or
// reloads units. It reads no file itself: CommandLine reads the environment
// files through the function it is given (hotplugd's os.ReadFile). Command
// runs /bin/sh with the configured command and does not interpret it. A unit
// systemd does not know is an error matching ErrNoSuchUnit that names it.
package kubeletctl
