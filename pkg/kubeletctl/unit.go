package kubeletctl

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"path"
	"slices"
	"strings"

	"github.com/godbus/dbus/v5"
)

// Unit is what systemd says of the kubelet's unit, as read over D-Bus: the
// configuration systemd has loaded, which is what a restart uses even when
// the unit's files changed since (NeedDaemonReload).
type Unit struct {
	// Name is the unit's primary name (its Id), which the name asked for
	// may be an alias of.
	Name string
	// LoadState, ActiveState, SubState and UnitFileState are systemd's, as
	// `systemctl show` prints them.
	LoadState, ActiveState, SubState, UnitFileState string
	// NeedDaemonReload is set when the unit's files changed on disk since
	// systemd loaded them.
	NeedDaemonReload bool
	// MainPID is the main process, 0 when there is none.
	MainPID uint32
	// ExecStart is the (last) ExecStart= command: Path and Argv as systemd
	// keeps them (unexpanded). It is zero for a unit without one, such as
	// a unit masked before it was loaded (one masked while it runs still
	// shows its commands: check Masked).
	ExecStart ExecCommand
	// ExecStartPre are the ExecStartPre= commands, in order.
	ExecStartPre []ExecCommand
	// Environment are the unit's Environment= assignments ("K=V"),
	// EnvironmentFiles its EnvironmentFile= entries, in order.
	Environment      []string
	EnvironmentFiles []EnvFile
	// UnsetEnvironment are the unit's UnsetEnvironment= entries ("K" or
	// "K=V"), removed from the environment before expansion.
	UnsetEnvironment []string
	// PassEnvironment are the names of the unit's PassEnvironment=, whose
	// values come from systemd's own process environment, which hotplugd
	// does not read.
	PassEnvironment []string
	// DropInPaths are the unit's drop-in files, FragmentPath its unit file.
	DropInPaths  []string
	FragmentPath string
}

// ExecCommand is one Exec*= command of a unit, as systemd keeps it.
type ExecCommand struct {
	// Path is the executable; Argv the command line, Argv[0] included
	// (usually Path, another name with the "@" prefix), with quotes and
	// specifiers resolved but $VARIABLES not expanded.
	Path string
	Argv []string
	// IgnoreFailure is the "-" prefix: a failure does not fail the unit.
	IgnoreFailure bool
	// NoEnvExpand is the ":" prefix: Argv is used as it is.
	NoEnvExpand bool
	// ViaShell is the "|" prefix (systemd v258): Argv is run by the user's
	// shell.
	ViaShell bool
}

// EnvFile is one EnvironmentFile= entry.
type EnvFile struct {
	// Path is the file, or a glob pattern.
	Path string
	// Optional is the "-" prefix: a file that cannot be read is skipped
	// rather than failing the start.
	Optional bool
}

// ParseUnitName names a unit as systemctl does: a name without a unit type
// suffix is a service ("kubelet" is kubelet.service). It does not check or
// escape the name otherwise.
func ParseUnitName(s string) string {
	if s == "" || unitSuffix(s) {
		return s
	}
	return s + ".service"
}

// unitSuffix tells whether name ends in a unit type's suffix.
func unitSuffix(name string) bool {
	switch path.Ext(name) {
	case ".service", ".socket", ".target", ".device", ".mount", ".automount",
		".swap", ".timer", ".path", ".slice", ".scope":
		return true
	}
	return false
}

// Masked tells whether the unit is masked, for good or until the next boot
// (UnitFileState "masked-runtime"): systemd refuses to start it.
func (u *Unit) Masked() bool {
	return u.LoadState == "masked" || u.UnitFileState == "masked" || u.UnitFileState == "masked-runtime"
}

// Preflight returns the first ExecStartPre= command that runs `hotplugd
// preflight`: its executable, or its Argv[0], is named hotplugd, and its
// first argument is "preflight". The second result is false when there is
// none, i.e. a restart would start the kubelet without its repair step.
func (u *Unit) Preflight() (ExecCommand, bool) {
	for _, c := range u.ExecStartPre {
		if len(c.Argv) < 2 || c.Argv[1] != "preflight" {
			continue
		}
		if path.Base(c.Path) == "hotplugd" || path.Base(c.Argv[0]) == "hotplugd" {
			return c, true
		}
	}
	return ExecCommand{}, false
}

// CommandLine returns the kubelet's command line as systemd would start it
// now: ExecStart's Argv with its variables expanded, as
// /proc/<MainPID>/cmdline shows it. It is ExpandCommand(u.ExecStart, ...).
func (u *Unit) CommandLine(readFile func(string) ([]byte, error), procEnv map[string]string) ([]string, error) {
	return u.ExpandCommand(u.ExecStart, readFile, procEnv)
}

// ExpandCommand returns the command line systemd would run for c, a command
// of the unit, if it ran it now, with the environment systemd would give it
// (the order of exec_invoke in systemd's src/core/exec-invoke.c):
//
//  1. procEnv, the service manager's environment (Systemd.ManagerEnvironment;
//     what `systemctl show-environment` prints);
//  2. the variables systemd sets itself (INVOCATION_ID, MAINPID, USER, ...)
//     and those of PassEnvironment=, whose values cannot be known here;
//  3. the unit's Environment= assignments;
//  4. each EnvironmentFile= in order, later ones winning, read now with
//     readFile as systemd reads them at each start; an optional file that
//     does not exist, or that systemd would refuse (invalid UTF-8), is
//     skipped;
//  5. less UnsetEnvironment=.
//
// The command is then expanded with ExpandExecArgs, unless it has the ":"
// prefix; one with the "|" prefix is an error. It is also an error when
// systemd would fail the start (a required
// environment file it cannot read or refuses), when the command uses a
// variable of step 2 that steps 3 and 4 do not set, when an environment
// file reads differently between systemd versions (ErrVersionDependent), is
// a glob pattern, or cannot be read for another reason than its absence.
// An environment that PAMName= changes (pam_env) is not modelled: the
// kubelet's unit has no PAMName=.
func (u *Unit) ExpandCommand(c ExecCommand, readFile func(string) ([]byte, error), procEnv map[string]string) ([]string, error) {
	switch {
	case len(c.Argv) == 0:
		return nil, fmt.Errorf("kubeletctl: %s: no command to run (is the unit masked, or not loaded?)", u.Name)
	case c.ViaShell:
		return nil, fmt.Errorf("kubeletctl: %s: %s runs through the user's shell (the \"|\" prefix), whose command line is not predicted here", u.Name, c.Path)
	case c.NoEnvExpand:
		return slices.Clone(c.Argv), nil
	}
	env := map[string]string{}
	for k, v := range procEnv {
		if validEnvName(k) {
			env[k] = v
		}
	}
	// The values of systemd's own variables and of PassEnvironment= are
	// unknown here: a command may use them only where the unit sets them
	// itself, or unsets them.
	known := map[string]bool{}
	set := func(k, v string) {
		env[k] = v
		known[k] = true
	}
	for _, kv := range u.Environment {
		if k, v, ok := strings.Cut(kv, "="); ok && validEnvName(k) {
			set(k, v)
		}
	}
	for _, f := range u.EnvironmentFiles {
		vars, order, err := u.loadEnvFile(f, readFile)
		if err != nil {
			return nil, err
		}
		for _, k := range order {
			set(k, vars[k])
		}
	}
	for _, p := range u.UnsetEnvironment {
		k, v, byValue := strings.Cut(p, "=")
		if cur, ok := env[k]; ok && (!byValue || cur == v) {
			delete(env, k)
		}
		if !byValue {
			known[k] = true
		}
	}
	var unknown []string
	argv := ExpandExecArgs(c.Argv, func(name string) (string, bool) {
		switch {
		case known[name]:
		case systemdSets(name):
			unknown = append(unknown, "$"+name+" (set by systemd for each start)")
		case slices.Contains(u.PassEnvironment, name):
			unknown = append(unknown, "$"+name+" (PassEnvironment=, from systemd's own process environment)")
		}
		v, ok := env[name]
		return v, ok
	})
	if len(unknown) > 0 {
		slices.Sort(unknown)
		return nil, fmt.Errorf("kubeletctl: %s: %s uses %s, whose value cannot be known beforehand", u.Name, c.Path, strings.Join(slices.Compact(unknown), ", "))
	}
	return argv, nil
}

// systemdSets tells whether systemd sets name itself for a service's
// commands (build_environment in src/core/exec-invoke.c and service_spawn
// in src/core/service.c), overriding the manager's environment.
func systemdSets(name string) bool {
	switch name {
	case "LISTEN_PID", "LISTEN_PIDFDID", "LISTEN_FDS", "LISTEN_FDNAMES",
		"WATCHDOG_PID", "WATCHDOG_USEC", "SYSTEMD_NSS_DYNAMIC_BYPASS",
		"USER", "LOGNAME", "HOME", "SHELL", "TERM",
		"INVOCATION_ID", "JOURNAL_STREAM", "LOG_NAMESPACE",
		"RUNTIME_DIRECTORY", "STATE_DIRECTORY", "CACHE_DIRECTORY", "LOGS_DIRECTORY", "CONFIGURATION_DIRECTORY",
		"CREDENTIALS_DIRECTORY", "SYSTEMD_EXEC_PID", "MEMORY_PRESSURE_WATCH", "MEMORY_PRESSURE_WRITE",
		"NOTIFY_SOCKET", "TMPDIR", "MAINPID", "MANAGERPID", "PIDFILE", "FDSTORE",
		"REMOTE_ADDR", "REMOTE_PORT", "EXIT_CODE", "EXIT_STATUS", "SERVICE_RESULT":
		return true
	}
	return strings.HasPrefix(name, "MONITOR_") || strings.HasPrefix(name, "TRIGGER_")
}

// loadEnvFile reads one EnvironmentFile= as exec_context_load_environment
// (src/core/execute.c) does, returning no variables for a file it skips.
func (u *Unit) loadEnvFile(f EnvFile, readFile func(string) ([]byte, error)) (map[string]string, []string, error) {
	fail := func(err error) error {
		return fmt.Errorf("kubeletctl: %s: EnvironmentFile=%s: %w", u.Name, f.Path, err)
	}
	const failsStart = "systemd would fail the start (the file is required: no \"-\" before it)"
	switch {
	case !path.IsAbs(f.Path):
		if f.Optional {
			return nil, nil, nil
		}
		return nil, nil, fail(errors.New("not an absolute path: " + failsStart))
	case strings.ContainsAny(f.Path, "*?["):
		return nil, nil, fail(errors.New("a glob pattern: the files it matches are not read here"))
	}
	b, err := readFile(f.Path)
	switch {
	case err != nil && errors.Is(err, fs.ErrNotExist):
		if f.Optional {
			return nil, nil, nil
		}
		return nil, nil, fail(fmt.Errorf("%w: %s", err, failsStart))
	case err != nil:
		// systemd reads as root what this process may not.
		return nil, nil, fail(fmt.Errorf("%w: cannot tell whether systemd reads it", err))
	case len(b) > maxEnvFileSize:
		return nil, nil, fail(fmt.Errorf("larger than %d bytes", maxEnvFileSize))
	}
	vars, order, err := parseEnvironmentFile(b)
	switch {
	case err != nil && errors.Is(err, ErrVersionDependent):
		return nil, nil, fail(err)
	case err != nil && f.Optional:
		return nil, nil, nil // systemd skips it too
	case err != nil:
		return nil, nil, fail(fmt.Errorf("%w: %s", err, failsStart))
	}
	return vars, order, nil
}

// Inspect reads what systemd says of the unit: the properties of its
// org.freedesktop.systemd1.Unit and org.freedesktop.systemd1.Service
// interfaces. A unit systemd does not know is an error matching
// ErrNoSuchUnit; a masked unit is not an error (see Unit.Masked).
func (s *Systemd) Inspect(ctx context.Context) (*Unit, error) {
	conn, err := s.connection(ctx)
	if err != nil {
		return nil, err
	}
	props, err := conn.GetUnitPropertiesContext(ctx, s.unit)
	if err != nil {
		return nil, s.callError("inspect", err)
	}
	r := &propReader{unit: s.unit, iface: "org.freedesktop.systemd1.Unit", props: props}
	u := &Unit{
		Name:             prop[string](r, "Id", "s"),
		LoadState:        prop[string](r, "LoadState", "s"),
		ActiveState:      prop[string](r, "ActiveState", "s"),
		SubState:         prop[string](r, "SubState", "s"),
		UnitFileState:    prop[string](r, "UnitFileState", "s"),
		NeedDaemonReload: prop[bool](r, "NeedDaemonReload", "b"),
		DropInPaths:      prop[[]string](r, "DropInPaths", "as"),
		FragmentPath:     prop[string](r, "FragmentPath", "s"),
	}
	if r.err != nil {
		return nil, r.err
	}
	if u.LoadState == "not-found" {
		return nil, s.noSuchUnit("inspect", `systemd: LoadState "not-found"`)
	}
	if props, err = conn.GetUnitTypePropertiesContext(ctx, s.unit, "Service"); err != nil {
		return nil, s.callError("inspect", err)
	}
	r = &propReader{unit: s.unit, iface: "org.freedesktop.systemd1.Service", props: props}
	u.MainPID = prop[uint32](r, "MainPID", "u")
	u.Environment = prop[[]string](r, "Environment", "as")
	u.UnsetEnvironment = prop[[]string](r, "UnsetEnvironment", "as")
	u.PassEnvironment = prop[[]string](r, "PassEnvironment", "as")
	for _, e := range prop[[][]any](r, "EnvironmentFiles", "a(sb)") {
		var p string
		var opt, ok1, ok2 bool
		if len(e) == 2 {
			p, ok1 = e[0].(string)
			opt, ok2 = e[1].(bool)
		}
		if !ok1 || !ok2 {
			r.failElem("EnvironmentFiles", "a(sb)", e)
			break
		}
		u.EnvironmentFiles = append(u.EnvironmentFiles, EnvFile{Path: p, Optional: opt})
	}
	if start := r.execCommands("ExecStart"); len(start) > 0 {
		u.ExecStart = start[len(start)-1]
	}
	u.ExecStartPre = r.execCommands("ExecStartPre")
	if r.err != nil {
		return nil, r.err
	}
	return u, nil
}

// ManagerEnvironment returns the service manager's environment (the
// Environment property of org.freedesktop.systemd1.Manager, what `systemctl
// show-environment` prints), on which systemd builds every command's: the
// procEnv of Unit.CommandLine. It is read on a connection of its own, as
// go-systemd has no call for a manager property of a type other than string.
func (s *Systemd) ManagerEnvironment(ctx context.Context) (map[string]string, error) {
	conn, err := dial(ctx, s.address)
	if err != nil {
		return nil, fmt.Errorf("kubeletctl: read systemd's environment: connect to the bus at %s: %w", s.address, err)
	}
	defer conn.Close()
	var v dbus.Variant
	err = conn.Object("org.freedesktop.systemd1", "/org/freedesktop/systemd1").
		CallWithContext(ctx, "org.freedesktop.DBus.Properties.Get", 0, "org.freedesktop.systemd1.Manager", "Environment").Store(&v)
	if err != nil {
		return nil, fmt.Errorf("kubeletctl: read systemd's environment: %w", err)
	}
	list, ok := v.Value().([]string)
	if !ok {
		return nil, fmt.Errorf("kubeletctl: read systemd's environment: property Environment of org.freedesktop.systemd1.Manager is %s, want as", v.Signature())
	}
	env := make(map[string]string, len(list))
	for _, kv := range list {
		if k, v, ok := strings.Cut(kv, "="); ok {
			env[k] = v
		}
	}
	return env, nil
}

// propReader reads properties from a GetAll answer, keeping the first
// error.
type propReader struct {
	unit, iface string
	props       map[string]any
	err         error
}

func (r *propReader) fail(name, want string, got any) {
	if r.err == nil {
		r.err = fmt.Errorf("kubeletctl: inspect %s: property %s of %s is %T, want %s", r.unit, name, r.iface, got, want)
	}
}

func (r *propReader) failElem(name, want string, elem []any) {
	if r.err == nil {
		r.err = fmt.Errorf("kubeletctl: inspect %s: property %s of %s has an element %v, want %s", r.unit, name, r.iface, elem, want)
	}
}

// prop returns the property name, which must be a T (D-Bus type want).
func prop[T any](r *propReader, name, want string) T {
	var zero T
	v, ok := r.props[name]
	if !ok {
		if r.err == nil {
			r.err = fmt.Errorf("kubeletctl: inspect %s: systemd did not send property %s of %s", r.unit, name, r.iface)
		}
		return zero
	}
	t, ok := v.(T)
	if !ok {
		r.fail(name, want, v)
	}
	return t
}

// execCommands reads the commands of name, from its Ex form when systemd
// has one (v243 and later: the prefixes as flags, among them the ":"
// prefix's no-env-expand), else from the older a(sasbttttuii) one.
func (r *propReader) execCommands(name string) []ExecCommand {
	ex := name + "Ex"
	_, hasEx := r.props[ex]
	want := "a(sasbttttuii)"
	if hasEx {
		name, want = ex, "a(sasasttttuii)"
	}
	var cmds []ExecCommand
	for _, e := range prop[[][]any](r, name, want) {
		var c ExecCommand
		var ok1, ok2, ok3 bool
		if len(e) >= 3 {
			c.Path, ok1 = e[0].(string)
			c.Argv, ok2 = e[1].([]string)
			if hasEx {
				var flags []string
				flags, ok3 = e[2].([]string)
				c.IgnoreFailure = slices.Contains(flags, "ignore-failure")
				c.NoEnvExpand = slices.Contains(flags, "no-env-expand")
				c.ViaShell = slices.Contains(flags, "via-shell")
			} else {
				c.IgnoreFailure, ok3 = e[2].(bool)
			}
		}
		if !ok1 || !ok2 || !ok3 {
			r.failElem(name, want, e)
			return nil
		}
		cmds = append(cmds, c)
	}
	return cmds
}
