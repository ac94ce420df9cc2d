package main

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/hotplugd/hotplugd/pkg/kubeletctl"
	"github.com/hotplugd/hotplugd/pkg/kubeletwatch"
	"github.com/hotplugd/hotplugd/pkg/remedy"
)

// unitVerdict judges systemd's side of a kubelet restart before the remedy
// asks for it: that the restart starts the kubelet that runs now (the unit
// loaded as its files say, not masked, its command line with the
// environment files as they read now the running kubelet's), with hotplugd
// preflight in its start (prefixed "-", so that it never blocks) when a
// state file may need repair. Anything it cannot read or tell withholds the
// restart: stepping aside is always safe.
func unitVerdict(sd *kubeletctl.Systemd) func(context.Context, *kubeletwatch.Facts, bool) remedy.UnitVerdict {
	return func(ctx context.Context, f *kubeletwatch.Facts, needsRepair bool) remedy.UnitVerdict {
		u, err := sd.Inspect(ctx)
		if err != nil {
			return remedy.UnitVerdict{Why: fmt.Sprintf("the kubelet's unit cannot be read over D-Bus (%v)", err),
				Todo: "check that systemd answers on the system bus (systemctl status " + sd.Unit() + ")"}
		}
		return judgeUnit(u, f, needsRepair, readHostFile, func() (map[string]string, error) { return sd.ManagerEnvironment(ctx) })
	}
}

// readHostFile reads an environment file of the kubelet's unit as the host
// has it. A file that is absent here is absent on the host only when its
// directory is here: a pod sees the host's directories it mounts, and a
// file in one it does not mount (a change staged in /etc/sysconfig/kubelet)
// would read as absent and be restarted into unjudged. That is an error,
// which withholds the restart.
func readHostFile(path string) ([]byte, error) {
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		dir := filepath.Dir(path)
		if _, derr := os.Stat(dir); derr != nil {
			return nil, fmt.Errorf("cannot tell whether %s exists on the host: %s is not visible here (in a pod, mount it read-only at the same path): %v", path, dir, derr)
		}
	}
	return b, err
}

// judgeUnit is unitVerdict's judgement of a unit as read.
func judgeUnit(u *kubeletctl.Unit, f *kubeletwatch.Facts, needsRepair bool, readFile func(string) ([]byte, error), managerEnv func() (map[string]string, error)) remedy.UnitVerdict {
	switch {
	case u.Masked():
		return remedy.UnitVerdict{Why: "the kubelet's unit " + u.Name + " is masked: systemd would refuse the restart",
			Todo: "unmask it (systemctl unmask " + u.Name + ") if it is meant to run; hotplugd restarts nothing meanwhile"}
	case u.LoadState != "loaded":
		return remedy.UnitVerdict{Why: fmt.Sprintf("the kubelet's unit %s is not loaded (LoadState %q)", u.Name, u.LoadState),
			Todo: "check systemctl status " + u.Name}
	case u.NeedDaemonReload:
		return remedy.UnitVerdict{Why: "the kubelet's unit files changed on disk and systemd has not reloaded them: a restart would start what systemd loaded, not what the files say, and the next daemon-reload would change it again",
			Todo: "run systemctl daemon-reload when the change is meant to apply, then restart the kubelet yourself (draining first if the change needs it)"}
	}
	if needsRepair {
		pre, ok := u.Preflight()
		switch {
		case !ok:
			return remedy.UnitVerdict{Why: "the kubelet's start does not run hotplugd preflight, which repairs the state files with the machine as it is when the kubelet starts",
				Todo: "install deploy/systemd/kubelet.service.d/10-hotplugd-preflight.conf as /etc/systemd/system/" + u.Name + ".d/10-hotplugd-preflight.conf and run systemctl daemon-reload"}
		case !pre.IgnoreFailure:
			return remedy.UnitVerdict{Why: "the kubelet's unit runs hotplugd preflight without the \"-\" prefix: a failure of preflight would keep the kubelet from starting",
				Todo: "install the drop-in of this hotplugd release (ExecStartPre=-...) and run systemctl daemon-reload"}
		}
	}
	if f.Kubelet.PID == 0 {
		return remedy.UnitVerdict{} // --kubelet-config: the operator's word
	}
	if u.MainPID != 0 && int(u.MainPID) != f.Kubelet.PID {
		return remedy.UnitVerdict{Why: fmt.Sprintf("the kubelet hotplugd follows (PID %d) is not the main process of %s (PID %d)", f.Kubelet.PID, u.Name, u.MainPID),
			Todo: "set --kubelet-unit to the unit that runs this kubelet"}
	}
	env, err := managerEnv()
	if err != nil {
		return remedy.UnitVerdict{Why: fmt.Sprintf("systemd's environment cannot be read (%v): hotplugd cannot tell the command line a restart would start", err),
			Todo: "check that systemd answers on the system bus"}
	}
	argv, err := u.CommandLine(readFile, env)
	if err != nil {
		return remedy.UnitVerdict{Why: fmt.Sprintf("hotplugd cannot tell the command line a restart would start: %v", err),
			Todo: "restart the kubelet yourself when it is meant to start as its unit says now"}
	}
	if !slices.Equal(argv, f.Kubelet.Cmdline) {
		return remedy.UnitVerdict{Why: "a restart would start another command line than the running kubelet's (" + argvDiff(f.Kubelet.Cmdline, argv) + "): a change of the unit, its drop-ins or its environment files (kubeadm-flags.env, KUBELET_EXTRA_ARGS) is staged",
			Todo: "restart the kubelet yourself when the change is meant to apply (draining first if it needs that); hotplugd judges the kubelet that then runs"}
	}
	return remedy.UnitVerdict{}
}

// argvDiff says how two command lines differ, briefly: the words only one
// of them has.
func argvDiff(running, next []string) string {
	var gone, added []string
	for _, w := range running {
		if !slices.Contains(next, w) {
			gone = append(gone, w)
		}
	}
	for _, w := range next {
		if !slices.Contains(running, w) {
			added = append(added, w)
		}
	}
	var parts []string
	if len(gone) > 0 {
		parts = append(parts, "running only: "+strings.Join(gone, " "))
	}
	if len(added) > 0 {
		parts = append(parts, "next start only: "+strings.Join(added, " "))
	}
	if len(parts) == 0 {
		return "the same words in another order"
	}
	return strings.Join(parts, "; ")
}
