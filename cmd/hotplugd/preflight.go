package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime/debug"
	"strings"
	"time"

	"github.com/spf13/pflag"

	"github.com/hotplugd/hotplugd/pkg/kubeletconfig"
	"github.com/hotplugd/hotplugd/pkg/kubeletctl"
	"github.com/hotplugd/hotplugd/pkg/kubeletversion"
	"github.com/hotplugd/hotplugd/pkg/preflight"
	"github.com/hotplugd/hotplugd/pkg/topology"
)

// preflightOptions are the flags of `hotplugd preflight`.
type preflightOptions struct {
	RootDir       string
	KubeletConfig string
	SysfsRoot     string
	ProcfsRoot    string
	DryRun        bool
	AllowDrop     bool
	Output        string
	// KubeletBinary is the kubelet about to start, run with --version.
	KubeletBinary string
	// KubeletVersion states the version instead.
	KubeletVersion string
	// VersionCache is the file that keeps the kubelet binary's version with
	// the binary's identity, so that a start of the same binary does not
	// run it.
	VersionCache string
	// KubeletUnit is the kubelet's systemd unit, whose ExecStart (with its
	// environment as systemd would give it now) is the kubelet's command
	// line when none is given after "--".
	KubeletUnit string
}

// versionCacheName is the version cache's name in the state directory, as
// the drop-in's --version-cache gives it (/var/lib/hotplugd/...): the
// daemon reads it there.
const versionCacheName = "kubelet-version.json"

// defaultKubeletBinary is where distributions' packages put the kubelet.
const defaultKubeletBinary = "/usr/bin/kubelet"

// AddFlags registers the options on fs.
func (o *preflightOptions) AddFlags(fs *pflag.FlagSet) {
	fs.StringVar(&o.RootDir, "kubelet-root-dir", "", "shorthand for the kubelet argument --root-dir (prefer passing the kubelet's own arguments after --)")
	fs.StringVar(&o.KubeletConfig, "kubelet-config", "", "shorthand for the kubelet argument --config (prefer passing the kubelet's own arguments after --)")
	fs.StringVar(&o.SysfsRoot, "sysfs-root", "/sys", "sysfs mount to read the machine from")
	fs.StringVar(&o.ProcfsRoot, "procfs-root", "/proc", "procfs mount to read the machine from")
	fs.BoolVar(&o.DryRun, "dry-run", false, "print the plan and change nothing")
	fs.BoolVar(&o.AllowDrop, "allow-drop-assignments", false, "let a repair drop the assignments of containers whose CPUs or memory are gone (drain their pods first)")
	fs.StringVarP(&o.Output, "output", "o", "text", "report format: text or json")
	fs.StringVar(&o.KubeletBinary, "kubelet-binary", "", "the kubelet that is about to start; its --version decides the rules (state-file layouts, feature gates) hotplugd applies (default: the path before the kubelet's arguments when it is a kubelet, else "+defaultKubeletBinary+", else kubelet on PATH)")
	fs.StringVar(&o.KubeletUnit, "kubelet-unit", "", "the kubelet's systemd unit (the drop-in passes %n): read its command line from systemd over D-Bus, ExecStart with the unit's environment and environment files expanded as systemd expands them, whatever the unit's layout; the kubelet's arguments after -- win when given. When it cannot be read: a warning, checking nothing, changing nothing")
	fs.StringVar(&o.VersionCache, "version-cache", "", "a file that keeps the version --kubelet-binary printed, with the binary's device, inode, size, modification and change times: a later start of the very same file takes the version from it instead of running the binary, so the kubelet's start does not wait on its --version (the drop-in sets /var/lib/hotplugd/kubelet-version.json). Another file, or none: the binary is run. --dry-run reads the cache, never writes it")
	fs.StringVar(&o.KubeletVersion, "kubelet-version", "", "the kubelet's version (vX.Y.Z) instead of running --kubelet-binary. A kubelet hotplugd does not know (not 1.34 to 1.37, a pre-release) or none found: the files are left untouched with a warning, exit 0")
}

// Validate checks the option values.
func (o *preflightOptions) Validate() error {
	if o.Output != "text" && o.Output != "json" {
		return fmt.Errorf("--output must be text or json, not %q", o.Output)
	}
	if o.KubeletVersion != "" {
		if o.KubeletBinary != "" {
			return errors.New("give --kubelet-version or --kubelet-binary, not both")
		}
		if _, err := kubeletversion.Parse(o.KubeletVersion); err != nil {
			return fmt.Errorf("--kubelet-version: %w", err)
		}
	}
	return nil
}

// kubeletArgs is the kubelet's command line as preflight reads it: the
// shorthand flags first, then the kubelet's own arguments, whose later
// flags win as they do for the kubelet. A leading path whose base name is
// "kubelet" (ExecStart's binary) is taken as --kubelet-binary.
func (o *preflightOptions) kubeletArgs(rest []string) []string {
	if len(rest) > 0 && !strings.HasPrefix(rest[0], "-") && filepath.Base(rest[0]) == "kubelet" {
		if o.KubeletBinary == "" && o.KubeletVersion == "" {
			o.KubeletBinary = rest[0]
		}
		rest = rest[1:]
	}
	var args []string
	if o.KubeletConfig != "" {
		args = append(args, "--config="+o.KubeletConfig)
	}
	if o.RootDir != "" {
		args = append(args, "--root-dir="+o.RootDir)
	}
	return append(args, rest...)
}

// kubeletRelease finds the version of the kubelet about to start and its
// release row. The row is nil when the version is unknown; warning then says
// why, for stderr. cacheWarning says why --version-cache was not used or
// kept (the version then comes from running the binary, as without it).
func (o *preflightOptions) kubeletRelease(ctx context.Context) (v kubeletversion.Version, rel *kubeletversion.Release, warning, cacheWarning string) {
	if o.KubeletVersion != "" {
		v = kubeletversion.MustParse(o.KubeletVersion)
	} else {
		bin := o.KubeletBinary
		if bin == "" {
			bin = defaultKubeletBinary
			if _, err := os.Stat(bin); err != nil {
				if p, err := exec.LookPath("kubelet"); err == nil {
					bin = p
				} else {
					return v, nil, "no kubelet binary at " + defaultKubeletBinary + " or on PATH to ask its version: give --kubelet-binary or --kubelet-version", ""
				}
			}
		}
		c, err := kubeletversion.FromBinaryCached(ctx, bin, o.VersionCache, o.DryRun)
		cacheWarning = c.Warning
		if err != nil {
			return v, nil, fmt.Sprintf("cannot tell the kubelet's version: %v", err), cacheWarning
		}
		v = c.Version
	}
	rel, err := kubeletversion.Lookup(v)
	if err != nil {
		return v, nil, err.Error(), cacheWarning
	}
	return v, rel, "", cacheWarning
}

const preflightUsage = `Usage: hotplugd preflight [flags] [-- <the kubelet's arguments>]

Checks the kubelet's cpu_manager_state and memory_manager_state, and its
configuration, against the machine as it is now, before the kubelet starts
(its ExecStartPre), and its allocated_pods_state, which it never writes (a
corrupt one makes the kubelet panic at every start). It reads the kubelet's command line from the kubelet's
systemd unit (--kubelet-unit; the drop-in passes %%n), or from the words after
"--": --config, --config-dir, --root-dir, --feature-gates and every flag that
overrides the configuration are read as the kubelet reads them (the same code
as the daemon's kubelet discovery).
  valid or absent                      exit 0
  stale and safely repairable          back up, rewrite, report, exit 0
  the kubelet would refuse to start and no safe repair exists (an
  assignment lost its CPUs or memory, a corrupt file, a changed policy, a
  configuration it refuses on this machine)
                                       files untouched, report why and what to do, exit 2
  anything hotplugd cannot judge (a kubelet version or file layout it does
  not know, a machine or configuration it cannot read, its own flags wrong)
                                       files untouched, a warning that says why, exit 0
  an internal error (a panic)          exit 3
The drop-in runs it with systemd's "-" prefix: no exit status, crash or
missing binary of preflight keeps the kubelet from starting; the kubelet is
the only judge, and preflight's report stands just above its words in
journalctl -u kubelet. Run by a person, the exit status says what it found. The
kubelet's version (--kubelet-binary's --version, or --kubelet-version)
decides the rules: hotplugd knows kubelet 1.34 to 1.37. With --version-cache
(the drop-in's), a binary already asked is not run again: a restart does not
wait on the kubelet's --version.

Flags:
%s`

// runPreflightReport is preflight.Run; a seam for the test of a panic.
var runPreflightReport = preflight.Run

// exitPanic is preflight's exit status after a panic: not 2 (the kubelet
// would refuse to start) nor 0, so that a person sees it failed; the
// drop-in's "-" prefix keeps it from blocking the kubelet, as any status.
const exitPanic = 3

func runPreflight(args []string, stdout, stderr io.Writer) (code int) {
	defer func() {
		if r := recover(); r != nil {
			fmt.Fprintf(stderr, "hotplugd preflight: internal error (a bug, please report it): %v\n%s\nhotplugd preflight: the state files may be untouched or repaired (each write is atomic, with a backup); the kubelet judges them at its start\n", r, debug.Stack())
			code = exitPanic
		}
	}()
	var o preflightOptions
	rest, err := parseFlagSet("preflight", preflightUsage, &o, args, stderr, true)
	switch {
	case errors.Is(err, pflag.ErrHelp):
		return 0
	case err != nil:
		// preflight runs before the kubelet: its own misconfiguration must
		// not keep the kubelet from starting.
		warnf(stderr, "%v: checking nothing, changing nothing", err)
		return 0
	}
	if len(rest) == 0 && o.KubeletUnit != "" {
		argv, err := unitCommandLine(o.KubeletUnit)
		if err != nil {
			warnf(stderr, "cannot read the kubelet's command line from its unit %s: %v: checking nothing, changing nothing", o.KubeletUnit, err)
			return 0
		}
		rest = argv
	}
	k, err := kubeletconfig.FromArgs(o.kubeletArgs(rest), "/")
	if err != nil {
		warnf(stderr, "cannot read the kubelet's configuration (the kubelet will say what it makes of it): %v: checking nothing, changing nothing", err)
		return 0
	}
	snap, err := topology.NewFS(o.SysfsRoot, o.ProcfsRoot).CapacitySnapshot()
	if err != nil {
		warnf(stderr, "cannot read the machine: %v: checking nothing, changing nothing", err)
		return 0
	}
	v, rel, warning, cacheWarning := o.kubeletRelease(context.Background())
	if cacheWarning != "" {
		warnf(stderr, "%s", cacheWarning)
	}
	if warning != "" {
		warnf(stderr, "%s: checking nothing, changing nothing", warning)
	}
	opts, err := preflight.OptionsFor(k)
	if err != nil {
		warnf(stderr, "%v: checking nothing, changing nothing", err)
		return 0
	}
	opts.Release, opts.Version, opts.DryRun, opts.AllowDrop, opts.Now = rel, v, o.DryRun, o.AllowDrop, time.Now()
	rep := runPreflightReport(snap, opts)
	for _, w := range rep.Warnings() {
		warnf(stderr, "%s", w)
	}
	if err := writeReport(stdout, rep, o.Output); err != nil {
		// The report must reach the kubelet's journal whatever happens to
		// stdout: the text goes to stderr instead.
		fmt.Fprintf(stderr, "hotplugd preflight: writing the report to stdout failed: %v; the report:\n%s", err, rep.String())
	}
	if rep.NeedsPerson() {
		return 2
	}
	return 0
}

// unitCommandLine is the command line systemd starts the unit's main
// process with, as it would start it now.
func unitCommandLine(unit string) ([]string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	sd, err := kubeletctl.NewSystemd(ctx, kubeletctl.SystemdOptions{Unit: unit})
	if err != nil {
		return nil, err
	}
	defer sd.Close()
	u, err := sd.Inspect(ctx)
	if err != nil {
		return nil, err
	}
	env, err := sd.ManagerEnvironment(ctx)
	if err != nil {
		return nil, err
	}
	return u.CommandLine(os.ReadFile, env)
}

// writeReport writes the report in the chosen format.
func writeReport(w io.Writer, rep preflight.Report, format string) error {
	if format == "json" {
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		return enc.Encode(rep)
	}
	_, err := io.WriteString(w, rep.String())
	return err
}

func warnf(stderr io.Writer, format string, args ...any) {
	fmt.Fprintf(stderr, "hotplugd preflight: warning: "+format+"\n", args...)
}
