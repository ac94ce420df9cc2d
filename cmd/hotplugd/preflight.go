package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"time"

	"github.com/spf13/pflag"

	"github.com/hotplugd/hotplugd/pkg/kubeletconfig"
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
}

// defaultKubeletBinary is where distributions' packages put the kubelet.
const defaultKubeletBinary = "/usr/bin/kubelet"

// AddFlags registers the options on fs.
func (o *preflightOptions) AddFlags(fs *pflag.FlagSet) {
	fs.StringVar(&o.RootDir, "kubelet-root-dir", "/var/lib/kubelet", "the kubelet's --root-dir, where cpu_manager_state and memory_manager_state are")
	fs.StringVar(&o.KubeletConfig, "kubelet-config", "", "the kubelet's KubeletConfiguration file (its --config), for the CPU and memory manager policies and reservations (default: a kubelet with no config file, i.e. policies none and None)")
	fs.StringVar(&o.SysfsRoot, "sysfs-root", "/sys", "sysfs mount to read the machine from")
	fs.StringVar(&o.ProcfsRoot, "procfs-root", "/proc", "procfs mount to read the machine from")
	fs.BoolVar(&o.DryRun, "dry-run", false, "print the plan and change nothing")
	fs.BoolVar(&o.AllowDrop, "allow-drop-assignments", false, "let a repair drop the assignments of containers whose CPUs or memory are gone (drain their pods first)")
	fs.StringVarP(&o.Output, "output", "o", "text", "report format: text or json")
	fs.StringVar(&o.KubeletBinary, "kubelet-binary", "", "the kubelet that is about to start; its --version decides the rules (state-file layouts, feature gates) hotplugd applies (default "+defaultKubeletBinary+", else kubelet on PATH)")
	fs.StringVar(&o.KubeletVersion, "kubelet-version", "", "the kubelet's version (vX.Y.Z) instead of running --kubelet-binary. A kubelet hotplugd does not know (not 1.34 to 1.37, a pre-release) or none found: the files are left untouched with a warning, exit 0")
}

// Validate checks the option values.
func (o *preflightOptions) Validate() error {
	if o.RootDir == "" {
		return errors.New("--kubelet-root-dir must not be empty")
	}
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

// kubeletRelease finds the version of the kubelet about to start and its
// release row. The row is nil when the version is unknown; warning then says
// why, for stderr.
func (o *preflightOptions) kubeletRelease(ctx context.Context) (v kubeletversion.Version, rel *kubeletversion.Release, warning string) {
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
					return v, nil, "no kubelet binary at " + defaultKubeletBinary + " or on PATH to ask its version: give --kubelet-binary or --kubelet-version"
				}
			}
		}
		var err error
		if v, err = kubeletversion.FromBinary(ctx, bin); err != nil {
			return v, nil, fmt.Sprintf("cannot tell the kubelet's version: %v", err)
		}
	}
	rel, err := kubeletversion.Lookup(v)
	if err != nil {
		return v, nil, err.Error()
	}
	return v, rel, ""
}

func runPreflight(args []string, stdout, stderr io.Writer) int {
	var o preflightOptions
	if code, done := parseFlags("preflight", `Usage: hotplugd preflight [flags]

Checks the kubelet's cpu_manager_state and memory_manager_state against the
machine as it is now, before the kubelet starts (its ExecStartPre):
  valid or absent                      exit 0
  stale and safely repairable          back up, rewrite, report, exit 0
  needs a person (an assignment lost its CPUs or memory, corrupt file,
  policy changed)                      files untouched, report why and what to do, exit 2
  a kubelet version or file layout hotplugd does not know
                                       files untouched, a warning that says why, exit 0
The kubelet's version (--kubelet-binary's --version, or --kubelet-version)
decides the rules: hotplugd knows kubelet 1.34 to 1.37.
Errors reading the machine or the configuration exit 1.

Flags:
%s`, &o, args, stderr); done {
		return code
	}
	cfg := kubeletconfig.Default()
	if o.KubeletConfig != "" {
		var err error
		if cfg, err = kubeletconfig.Load(o.KubeletConfig); err != nil {
			fmt.Fprintf(stderr, "hotplugd preflight: %v\n", err)
			return 1
		}
	}
	snap, err := topology.NewFS(o.SysfsRoot, o.ProcfsRoot).CapacitySnapshot()
	if err != nil {
		fmt.Fprintf(stderr, "hotplugd preflight: %v\n", err)
		return 1
	}
	v, rel, warning := o.kubeletRelease(context.Background())
	if warning != "" {
		fmt.Fprintf(stderr, "hotplugd preflight: warning: %s: checking nothing, changing nothing\n", warning)
	}
	rep := preflight.Run(snap, preflight.Options{
		RootDir: o.RootDir, Config: cfg, Release: rel, Version: v, DryRun: o.DryRun, AllowDrop: o.AllowDrop, Now: time.Now(),
	})
	for _, w := range rep.Warnings() {
		fmt.Fprintf(stderr, "hotplugd preflight: warning: %s\n", w)
	}
	if o.Output == "json" {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		enc.Encode(rep)
	} else {
		fmt.Fprint(stdout, rep.String())
	}
	if rep.NeedsPerson() {
		return 2
	}
	return 0
}
