package preflight

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"

	kubeletv1beta1 "k8s.io/kubelet/config/v1beta1"

	"github.com/hotplugd/hotplugd/pkg/cpumgr"
	"github.com/hotplugd/hotplugd/pkg/kubeletversion"
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
	// Unknown: hotplugd cannot judge the file (a kubelet version or a
	// layout it does not know). The file is left untouched and the kubelet
	// starts as it would without hotplugd: a warning, never a block.
	Unknown Verdict = "unknown"
)

// Options say where the files are and what may be done.
type Options struct {
	// RootDir is the kubelet's root directory (--root-dir), e.g.
	// /var/lib/kubelet.
	RootDir string
	// Config is the kubelet's configuration.
	Config *kubeletv1beta1.KubeletConfiguration
	// Release is the release row of the kubelet about to start; nil when its
	// version is unknown (Version says what was found): then Run checks
	// nothing and rewrites nothing, and every file gets the verdict Unknown.
	Release *kubeletversion.Release
	// Version is the kubelet's version as found (zero when none was).
	Version kubeletversion.Version
	// AllocatableIgnoresEviction is the kubelet's
	// --experimental-allocatable-ignore-eviction: the memory manager's
	// reservation check then leaves the hard eviction thresholds out.
	AllocatableIgnoresEviction bool
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
	// Why and Todo explain a NeedsPerson or Unknown verdict.
	Why  string `json:"why,omitempty"`
	Todo string `json:"todo,omitempty"`
}

// Report is the outcome for both files.
type Report struct {
	Results []Result `json:"results"`
}

// Warnings are the Unknown verdicts, one line each, for the log: the file,
// the kubelet's version and why hotplugd stepped aside.
func (r Report) Warnings() []string {
	var out []string
	for _, res := range r.Results {
		if res.Verdict == Unknown {
			out = append(out, fmt.Sprintf("%s: not checked, left as it is: %s", res.Path, res.Why))
		}
	}
	return out
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

// Run checks both state files against snap, for the kubelet release
// o.Release. Without a release (a kubelet version hotplugd does not know, or
// none found) it reads nothing but whether each file exists, and reports
// the files that do as Unknown: hotplugd never blocks or rewrites the files
// of a kubelet whose rules it does not know.
func Run(snap *topology.Snapshot, o Options) Report {
	if o.Now.IsZero() {
		o.Now = time.Now()
	}
	if o.Release == nil {
		return Report{Results: []Result{unknownKubelet(CPUManagerState, o), unknownKubelet(MemoryManagerState, o)}}
	}
	return Report{Results: []Result{check(cpuManager(snap, o), o), check(memoryManager(snap, o), o)}}
}

func unknownKubelet(file string, o Options) Result {
	path := filepath.Join(o.RootDir, file)
	res := Result{File: file, Path: path, Verdict: Absent}
	if _, err := os.Lstat(path); errors.Is(err, fs.ErrNotExist) {
		return res
	}
	version := "of unknown version"
	if !o.Version.IsZero() {
		version = o.Version.String()
	}
	res.Verdict = Unknown
	res.Why = fmt.Sprintf("the kubelet is %s and hotplugd knows kubelet %s only", version, kubeletversion.Known())
	res.Todo = "nothing: the kubelet validates the file itself; to have hotplugd check it, give the kubelet's version (--kubelet-binary or --kubelet-version) or use a hotplugd release that knows it"
	return res
}

const drainTodo = "drain the node (kubectl drain), then run hotplugd preflight --allow-drop-assignments; or restore the CPUs or memory the pods were using"

// manager is what preflight needs of one state file's package (cpumgr,
// memmgr), so both files go through the same steps.
type manager struct {
	file string
	// configTodo says what to fix when the configuration is refused.
	configTodo string
	// load reads the file and the manager's configuration; fs.ErrNotExist
	// when the file is absent, errConfig-wrapped when the configuration is
	// refused.
	load func(path string) (loaded, error)
}

// loaded is one state file read, with its configuration.
type loaded struct {
	// validate is the kubelet's start-up verdict.
	validate func() error
	// plan plans the rebuild: the plan's text (empty when none), whether
	// it changes the file, and the error that blocks it.
	plan func() (text string, changed bool, apply func(time.Time) (string, error), err error)
}

// errConfig marks a configuration the manager refuses.
var errConfig = errors.New("configuration refused")

// errPolicy marks a changed policy.
var errPolicy = errors.New("policy changed")

// errDrain marks assignments that need a drain.
var errDrain = errors.New("needs drain")

func cpuManager(snap *topology.Snapshot, o Options) manager {
	return manager{
		file:       CPUManagerState,
		configTodo: "fix the kubelet configuration (cpuManagerPolicy, reservedSystemCPUs, cpuManagerPolicyOptions)",
		load: func(path string) (loaded, error) {
			st, err := cpumgr.ReadFile(path)
			var le *cpumgr.LoadError
			if errors.As(err, &le) {
				// Refused by every release: in the words of this one.
				if cfg, cerr := cpumgr.NewConfig(o.Config, snap, path, o.Release); cerr == nil {
					err = fmt.Errorf("cpumgr: %s: kubelet 1.%d would refuse it: %s: %w", path, o.Release.Minor, le.KubeletFor(cfg), cpumgr.ErrCorrupt)
				}
			}
			if err != nil {
				return loaded{}, err
			}
			cfg, err := cpumgr.NewConfig(o.Config, snap, path, o.Release)
			if err != nil {
				return loaded{}, fmt.Errorf("%w: %w", errConfig, err)
			}
			cfg.AllowDrop = o.AllowDrop
			return loaded{
				validate: func() error { return cpumgr.Validate(st, snap, cfg) },
				plan: func() (string, bool, func(time.Time) (string, error), error) {
					p, err := cpumgr.PlanRebuild(st, snap, cfg)
					text := ""
					if p != nil {
						text = p.String()
					}
					switch {
					case errors.Is(err, cpumgr.ErrNeedsDrain):
						err = fmt.Errorf("%w: %w", errDrain, err)
					case errors.Is(err, cpumgr.ErrPolicyChanged):
						err = fmt.Errorf("%w: %w", errPolicy, err)
					}
					if err != nil {
						return text, false, nil, err
					}
					return text, p.Changed, func(now time.Time) (string, error) { return cpumgr.Apply(p, now) }, nil
				},
			}, nil
		},
	}
}

func memoryManager(snap *topology.Snapshot, o Options) manager {
	return manager{
		file:       MemoryManagerState,
		configTodo: "fix the kubelet configuration (memoryManagerPolicy, reservedMemory, systemReserved, kubeReserved, evictionHard)",
		load: func(path string) (loaded, error) {
			st, err := memmgr.ReadFile(path)
			if err != nil {
				return loaded{}, err
			}
			cfg, err := memmgr.NewConfigWithFlags(o.Config, memmgr.KubeletFlags{AllocatableIgnoresEviction: o.AllocatableIgnoresEviction}, snap, path, o.Release)
			if err != nil {
				return loaded{}, fmt.Errorf("%w: %w", errConfig, err)
			}
			cfg.AllowDrop = o.AllowDrop
			return loaded{
				validate: func() error { return memmgr.Validate(st, snap, cfg) },
				plan: func() (string, bool, func(time.Time) (string, error), error) {
					p, err := memmgr.PlanRebuild(st, snap, cfg)
					text := ""
					if p != nil {
						text = p.String()
					}
					switch {
					case errors.Is(err, memmgr.ErrPolicy):
						err = fmt.Errorf("%w: %w", errPolicy, err)
					case errors.Is(err, memmgr.ErrConfig):
						err = fmt.Errorf("%w: %w", errConfig, err)
					case err == nil && p.Blocked():
						err = fmt.Errorf("%w: %d assignments no longer fit the machine", errDrain, len(p.NeedsDrain))
					}
					if err != nil {
						return text, false, nil, err
					}
					return text, p.Changed, p.Write, nil
				},
			}, nil
		},
	}
}

// check runs one state file through read, validate, plan and apply.
func check(m manager, o Options) Result {
	path := filepath.Join(o.RootDir, m.file)
	res := Result{File: m.file, Path: path}
	l, err := m.load(path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		res.Verdict = Absent
		return res
	case errors.Is(err, errConfig):
		return needsPerson(res, err, m.configTodo)
	case errors.Is(err, cpumgr.ErrUnsupportedFormat), errors.Is(err, memmgr.ErrUnsupportedFormat):
		res.Verdict = Unknown
		res.Why = fmt.Sprintf("a layout hotplugd cannot read, for %s: %v", o.Release, err)
		res.Todo = "nothing: the kubelet validates the file itself"
		return res
	case err != nil:
		return needsPerson(res, err, unreadableTodo(path))
	}
	if l.validate() == nil {
		res.Verdict = Valid
		return res
	}
	text, changed, apply, err := l.plan()
	res.Plan = text
	switch {
	case errors.Is(err, errDrain):
		return needsPerson(res, err, drainTodo)
	case errors.Is(err, errPolicy):
		return needsPerson(res, err, "the "+m.file+" policy changed: drain the node, then delete "+path+" before starting the kubelet")
	case errors.Is(err, errConfig):
		return needsPerson(res, err, m.configTodo)
	case err != nil:
		return needsPerson(res, err, unreadableTodo(path))
	case !changed:
		res.Verdict = Valid
		return res
	case o.DryRun:
		res.Verdict = WouldRepair
		return res
	}
	backup, err := apply(o.Now)
	res.Backup = backup
	if err != nil {
		return needsPerson(res, err, "check the file system under "+o.RootDir+" (the error says whether the file changed), then run hotplugd preflight again")
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
