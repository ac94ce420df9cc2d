package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/spf13/pflag"

	"github.com/hotplugd/hotplugd/pkg/kubeletconfig"
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
}

// AddFlags registers the options on fs.
func (o *preflightOptions) AddFlags(fs *pflag.FlagSet) {
	fs.StringVar(&o.RootDir, "kubelet-root-dir", "/var/lib/kubelet", "the kubelet's --root-dir, where cpu_manager_state and memory_manager_state are")
	fs.StringVar(&o.KubeletConfig, "kubelet-config", "", "the kubelet's KubeletConfiguration file (its --config), for the CPU and memory manager policies and reservations (default: a kubelet with no config file, i.e. policies none and None)")
	fs.StringVar(&o.SysfsRoot, "sysfs-root", "/sys", "sysfs mount to read the machine from")
	fs.StringVar(&o.ProcfsRoot, "procfs-root", "/proc", "procfs mount to read the machine from")
	fs.BoolVar(&o.DryRun, "dry-run", false, "print the plan and change nothing")
	fs.BoolVar(&o.AllowDrop, "allow-drop-assignments", false, "let a repair drop the assignments of containers whose CPUs or memory are gone (drain their pods first)")
	fs.StringVarP(&o.Output, "output", "o", "text", "report format: text or json")
}

// Validate checks the option values.
func (o *preflightOptions) Validate() error {
	if o.RootDir == "" {
		return errors.New("--kubelet-root-dir must not be empty")
	}
	if o.Output != "text" && o.Output != "json" {
		return fmt.Errorf("--output must be text or json, not %q", o.Output)
	}
	return nil
}

func runPreflight(args []string, stdout, stderr io.Writer) int {
	var o preflightOptions
	if code, done := parseFlags("preflight", `Usage: hotplugd preflight [flags]

Checks the kubelet's cpu_manager_state and memory_manager_state against the
machine as it is now, before the kubelet starts (its ExecStartPre):
  valid or absent                      exit 0
  stale and safely repairable          back up, rewrite, report, exit 0
  needs a person (an assignment lost its CPUs or memory, unknown format,
  corrupt file, policy changed)        files untouched, report why and what to do, exit 2
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
	rep := preflight.Run(snap, preflight.Options{
		RootDir: o.RootDir, Config: cfg, DryRun: o.DryRun, AllowDrop: o.AllowDrop, Now: time.Now(),
	})
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
