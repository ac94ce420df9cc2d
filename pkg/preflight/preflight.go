package preflight

import (
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"
	"strings"
	"time"

	kubeletv1beta1 "k8s.io/kubelet/config/v1beta1"

	"github.com/hotplugd/hotplugd/pkg/cpumgr"
	"github.com/hotplugd/hotplugd/pkg/memmgr"
	"github.com/hotplugd/hotplugd/pkg/topology"
)

// The state files, as the kubelet names them under its root directory.
const (
	CPUManagerState    = "cpu_manager_state"
	MemoryManagerState = "memory_manager_state"
)

// Verdict is the outcome for one state file.
type Verdict string

// The verdicts.
const (
	Absent      Verdict = "absent"       // no file: the kubelet writes a fresh one
	Valid       Verdict = "valid"        // the kubelet starts with it as it is
	Repaired    Verdict = "repaired"     // backed up and rewritten for this machine
	WouldRepair Verdict = "would repair" // DryRun: repairable, nothing written
	NeedsPerson Verdict = "needs a person"
)

// Options say where the files are and what may be done.
type Options struct {
	// RootDir is the kubelet's root directory (--root-dir), e.g.
	// /var/lib/kubelet.
	RootDir string
	// Config is the kubelet's configuration.
	Config *kubeletv1beta1.KubeletConfiguration
	// DryRun plans without writing.
	DryRun bool
	// AllowDrop lets a repair drop the assignments that lost their CPUs or
	// no longer fit (their pods were drained).
	AllowDrop bool
	// Now stamps backups.
	Now time.Time
}

// Result is the outcome for one state file.
type Result struct {
	File    string  `json:"file"`
	Path    string  `json:"path"`
	Verdict Verdict `json:"verdict"`
	// Plan is the printable repair plan, when one was made.
	Plan string `json:"plan,omitempty"`
	// Backup is the copy of the old file, when it was rewritten.
	Backup string `json:"backup,omitempty"`
	// Why and Todo explain a NeedsPerson verdict.
	Why  string `json:"why,omitempty"`
	Todo string `json:"todo,omitempty"`
}

// Report is the outcome for both files.
type Report struct {
	Results []Result `json:"results"`
}

// NeedsPerson reports whether some file needs a person.
func (r Report) NeedsPerson() bool {
	for _, res := range r.Results {
		if res.Verdict == NeedsPerson {
			return true
		}
	}
	return false
}

// String is the report for people.
func (r Report) String() string {
	var b strings.Builder
	for _, res := range r.Results {
		fmt.Fprintf(&b, "%s: %s (%s)\n", res.File, res.Verdict, res.Path)
		if res.Why != "" {
			fmt.Fprintf(&b, "  why: %s\n", res.Why)
		}
		if res.Plan != "" {
			for _, line := range strings.Split(strings.TrimRight(res.Plan, "\n"), "\n") {
				fmt.Fprintf(&b, "  %s\n", line)
			}
		}
		if res.Backup != "" {
			fmt.Fprintf(&b, "  backup: %s\n", res.Backup)
		}
		if res.Todo != "" {
			fmt.Fprintf(&b, "  what to do: %s\n", res.Todo)
		}
	}
	return b.String()
}

// Run checks both state files against snap.
func Run(snap *topology.Snapshot, o Options) Report {
	if o.Now.IsZero() {
		o.Now = time.Now()
	}
	return Report{Results: []Result{checkCPU(snap, o), checkMemory(snap, o)}}
}

const drainTodo = "drain the node (kubectl drain), then run hotplugd preflight --allow-drop-assignments; or restore the CPUs or memory the pods were using"

func checkCPU(snap *topology.Snapshot, o Options) Result {
	path := filepath.Join(o.RootDir, CPUManagerState)
	res := Result{File: CPUManagerState, Path: path}
	st, err := cpumgr.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		res.Verdict = Absent
		return res
	}
	if err != nil {
		return needsPerson(res, err, unreadableTodo(path))
	}
	cfg, err := cpumgr.NewConfig(o.Config, snap, path)
	if err != nil {
		return needsPerson(res, err, "fix the kubelet configuration (cpuManagerPolicy, reservedSystemCPUs, cpuManagerPolicyOptions)")
	}
	cfg.AllowDrop = o.AllowDrop
	if cpumgr.Validate(st, snap, cfg) == nil {
		res.Verdict = Valid
		return res
	}
	plan, err := cpumgr.PlanRebuild(st, snap, cfg)
	if plan != nil {
		res.Plan = plan.String()
	}
	switch {
	case errors.Is(err, cpumgr.ErrNeedsDrain):
		return needsPerson(res, err, drainTodo)
	case errors.Is(err, cpumgr.ErrPolicyChanged):
		return needsPerson(res, err, "the CPU manager policy changed: drain the node, then delete "+path+" before starting the kubelet")
	case err != nil:
		return needsPerson(res, err, unreadableTodo(path))
	case !plan.Changed:
		res.Verdict = Valid
		return res
	case o.DryRun:
		res.Verdict = WouldRepair
		return res
	}
	backup, err := cpumgr.Apply(plan, o.Now)
	res.Backup = backup
	if err != nil {
		return needsPerson(res, err, "check the file system under "+o.RootDir+"; the state file is unchanged")
	}
	res.Verdict = Repaired
	return res
}

func checkMemory(snap *topology.Snapshot, o Options) Result {
	path := filepath.Join(o.RootDir, MemoryManagerState)
	res := Result{File: MemoryManagerState, Path: path}
	st, err := memmgr.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		res.Verdict = Absent
		return res
	}
	if err != nil {
		return needsPerson(res, err, unreadableTodo(path))
	}
	cfg, err := memmgr.NewConfig(o.Config, snap, path)
	if err != nil {
		return needsPerson(res, err, "fix the kubelet configuration (memoryManagerPolicy, reservedMemory)")
	}
	cfg.AllowDrop = o.AllowDrop
	if memmgr.Validate(st, snap, cfg) == nil {
		res.Verdict = Valid
		return res
	}
	plan, err := memmgr.PlanRebuild(st, snap, cfg)
	if plan != nil {
		res.Plan = plan.String()
	}
	switch {
	case errors.Is(err, memmgr.ErrPolicy):
		return needsPerson(res, err, "the memory manager policy changed: drain the node, then delete "+path+" before starting the kubelet")
	case errors.Is(err, memmgr.ErrConfig):
		return needsPerson(res, err, "fix the kubelet configuration (memoryManagerPolicy, reservedMemory, systemReserved, kubeReserved, evictionHard)")
	case err != nil:
		return needsPerson(res, err, unreadableTodo(path))
	case plan.Blocked():
		return needsPerson(res, fmt.Errorf("%d assignments no longer fit the machine", len(plan.NeedsDrain)), drainTodo)
	case !plan.Changed:
		res.Verdict = Valid
		return res
	case o.DryRun:
		res.Verdict = WouldRepair
		return res
	}
	backup, err := plan.Write(o.Now)
	res.Backup = backup
	if err != nil {
		return needsPerson(res, err, "check the file system under "+o.RootDir+"; the state file is unchanged")
	}
	res.Verdict = Repaired
	return res
}

func needsPerson(res Result, err error, todo string) Result {
	res.Verdict = NeedsPerson
	res.Why = err.Error()
	res.Todo = todo + " (the file was left untouched)"
	return res
}

func unreadableTodo(path string) string {
	return "the file is corrupt or in a format hotplugd does not know: drain the node, then move " + path + " aside before starting the kubelet"
}
