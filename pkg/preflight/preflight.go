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

	"github.com/hotplugd/hotplugd/internal/kubeletstate"
	"github.com/hotplugd/hotplugd/pkg/allocated"
	"github.com/hotplugd/hotplugd/pkg/cpumgr"
	"github.com/hotplugd/hotplugd/pkg/kubeletconfig"
	"github.com/hotplugd/hotplugd/pkg/kubeletstart"
	"github.com/hotplugd/hotplugd/pkg/kubeletversion"
	"github.com/hotplugd/hotplugd/pkg/memmgr"
	"github.com/hotplugd/hotplugd/pkg/podnames"
	"github.com/hotplugd/hotplugd/pkg/statefile"
	"github.com/hotplugd/hotplugd/pkg/topology"
)

// The state files, as the kubelet names them under its root directory.
const (
	CPUManagerState    = "cpu_manager_state"
	MemoryManagerState = "memory_manager_state"
)

// KubeletConfiguration is the File of the result that judges the kubelet's
// configuration itself on this machine (pkg/kubeletstart). Run reports it
// only when the kubelet would refuse to start (NeedsPerson) or when it
// cannot be judged (Unknown).
const KubeletConfiguration = "kubelet configuration"

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
	// /var/lib/kubelet, where hotplugd reaches it.
	RootDir string
	// Config is the kubelet's effective configuration (file, drop-ins and
	// flags, as kubeletconfig builds it); nil is a kubelet without a
	// config file.
	Config *kubeletv1beta1.KubeletConfiguration
	// ConfigPath names the kubelet's configuration in the report (its
	// --config file); "" names none.
	ConfigPath string
	// Release is the release row of the kubelet about to start; nil when its
	// version is unknown (Version says what was found): then Run checks
	// nothing and rewrites nothing, and every file gets the verdict Unknown.
	Release *kubeletversion.Release
	// Version is the kubelet's version as found (zero when none was).
	Version kubeletversion.Version
	// PodLogsDir is the kubelet's pod log directory (podLogsDir) where
	// hotplugd reads it: a report of pods to drain names them from it
	// (pkg/podnames). "" names them by UID only.
	PodLogsDir string
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

// OptionsFor returns the options that describe the kubelet k, as
// kubeletconfig.Discover or kubeletconfig.FromArgs read it from its
// command line: its root directory where hotplugd reaches it
// (Kubelet.StateDir), its pod log directory (Kubelet.PodLogsDir), its
// effective configuration and --experimental-allocatable-ignore-eviction.
// The release, the version and what may be done are the caller's to set.
// The CLI (`hotplugd preflight -- <kubelet arguments>`) and the daemon's
// remedy build their options with it, so both judge the kubelet by the
// same reading of its command line.
func OptionsFor(k *kubeletconfig.Kubelet) (Options, error) {
	dir, err := k.StateDir()
	if err != nil {
		return Options{}, fmt.Errorf("preflight: %w", err)
	}
	return Options{
		RootDir:                    dir,
		PodLogsDir:                 k.PodLogsDir(),
		Config:                     k.Config,
		ConfigPath:                 k.ConfigPath,
		AllocatableIgnoresEviction: k.AllocatableIgnoresEviction,
	}, nil
}

// Result is the outcome for one state file, or for the kubelet's
// configuration (File KubeletConfiguration).
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
	// Drain lists the pods to drain before the file can be repaired, in the
	// plan's order, each once: named where the kubelet's pod log
	// directory names them (Options.PodLogsDir), else by UID alone.
	Drain []podnames.Pod `json:"drain,omitempty"`
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
			what := res.Path
			if what == "" {
				what = res.File
			}
			out = append(out, fmt.Sprintf("%s: not checked, left as it is: %s", what, res.Why))
		}
	}
	return out
}

// NeedsPerson reports whether some file, or the kubelet's configuration,
// needs a person: the kubelet about to start would refuse to start, and
// hotplugd cannot safely make it start.
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
		if res.Path == "" {
			fmt.Fprintf(&b, "%s: %s\n", res.File, res.Verdict)
		} else {
			fmt.Fprintf(&b, "%s: %s (%s)\n", res.File, res.Verdict, res.Path)
		}
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
// o.Release, and the kubelet's configuration on this machine
// (kubeletstart.Check). A file the kubelet refuses is repaired when that is
// safe, and needs a person otherwise; a configuration the kubelet refuses
// needs a person (hotplugd changes no configuration), and is reported as a
// third result, in the kubelet's words. Where hotplugd cannot judge (a file
// it cannot read safely, a layout or a choice of reserved CPUs it does not
// know) the verdict is Unknown: a warning, never a block.
//
// Without a release (a kubelet version hotplugd does not know, or none
// found) it reads nothing but whether each file exists, and reports the
// files that do as Unknown: hotplugd never blocks or rewrites the files of
// a kubelet whose rules it does not know.
func Run(snap *topology.Snapshot, o Options) Report {
	if o.Now.IsZero() {
		o.Now = time.Now()
	}
	if o.Release == nil {
		return Report{Results: []Result{unknownKubelet(CPUManagerState, o), unknownKubelet(MemoryManagerState, o)}}
	}
	if o.Config == nil {
		o.Config = kubeletconfig.Default()
	}
	kr, judged := kubeletResult(snap, o)
	if judged && kr.Verdict == NeedsPerson {
		// The kubelet does not start with this configuration whatever
		// its files hold, and a repair planned for it may not be the one
		// for the configuration the operator settles on: plan, write
		// nothing.
		o.DryRun = true
	}
	rep := Report{}
	for _, f := range stateFiles {
		rep.Results = append(rep.Results, check(f, snap, o))
	}
	if res, ok := allocatedResult(o); ok {
		rep.Results = append(rep.Results, res)
	}
	if judged {
		rep.Results = append(rep.Results, kr)
	}
	return rep
}

// allocatedResult judges the kubelet's checkpoint of the pods it admitted,
// allocated_pods_state (pkg/allocated), which no change of the machine
// makes stale but which the kubelet refuses at its start when it is
// corrupt: its allocation manager panics ("please drain this node and
// delete pod resource information checkpoint file ... before restarting
// Kubelet"), every start, whatever hotplugd repairs. hotplugd never writes
// it. A result only when the kubelet would refuse it (NeedsPerson: a
// remedy must not restart the kubelet into it, and the report stands above
// the kubelet's panic in its journal) or hotplugd cannot tell (Unknown: a
// file it cannot read safely). No file, a release or gates with which the
// kubelet keeps none, and a file the kubelet's loader accepts (even one in
// a layout the release does not write) give no result.
func allocatedResult(o Options) (Result, bool) {
	res := Result{File: allocated.FileName, Path: filepath.Join(o.RootDir, allocated.FileName)}
	_, err := allocated.Read(o.RootDir, o.Release, o.Config.FeatureGates)
	switch {
	case err == nil, errors.Is(err, allocated.ErrNotExist), errors.Is(err, allocated.ErrGateOff), errors.Is(err, allocated.ErrUnknownFormat):
		return res, false
	case errors.Is(err, allocated.ErrCorrupt):
		res.Verdict = NeedsPerson
		res.Why = fmt.Sprintf("kubelet 1.%d would refuse it at its start and panic", o.Release.Minor)
		if ce := (*allocated.CorruptError)(nil); errors.As(err, &ce) {
			res.Why += " (" + ce.Kubelet + ")"
		}
		res.Todo = "drain the node, delete " + res.Path + " and start the kubelet (the kubelet's own advice: it writes the file again as it admits pods); hotplugd never writes this file"
	default:
		res.Verdict = Unknown
		res.Why = err.Error()
		res.Todo = "nothing: the kubelet judges the file at its start"
	}
	return res, true
}

// kubeletResult judges the kubelet's configuration on snap: a result only
// when the kubelet would refuse to start (NeedsPerson) or hotplugd cannot
// tell (Unknown).
func kubeletResult(snap *topology.Snapshot, o Options) (Result, bool) {
	res := Result{File: KubeletConfiguration, Path: o.ConfigPath}
	err := kubeletstart.Check(kubeletstart.Input{Config: o.Config, AllocatableIgnoresEviction: o.AllocatableIgnoresEviction, Release: o.Release, Snapshot: snap})
	switch rs := kubeletstart.Refusals(err); {
	case err == nil:
		return res, false
	case rs != nil:
		why := make([]string, len(rs))
		for i, r := range rs {
			why[i] = r.Error()
		}
		res.Verdict = NeedsPerson
		res.Why = fmt.Sprintf("kubelet 1.%d would refuse to start on this machine: %s", o.Release.Minor, strings.Join(why, "; "))
		res.Todo = "fix the kubelet's configuration (its file, drop-ins or flags) for this machine, or bring back what it expects of the machine, then run hotplugd preflight again; hotplugd changes no configuration, and writes no state file while the kubelet refuses its configuration"
	default:
		res.Verdict = Unknown
		res.Why = err.Error()
		res.Todo = "nothing: the kubelet judges its configuration itself"
	}
	return res, true
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

// stateFile is one of the kubelet's state files as preflight handles it:
// both go through the same steps (check), each through its package
// (cpumgr, memmgr), whose plans and verdicts have one shape
// (internal/kubeletstate).
type stateFile struct {
	name string
	// configTodo says what to fix when the configuration is refused.
	configTodo string
	// plan reads the file at path (fs.ErrNotExist when it is absent) and
	// plans it for the kubelet o describes on snap: a plan that needs no
	// rewrite when the kubelet starts with the file as it is.
	plan func(snap *topology.Snapshot, o Options, path string) (kubeletstate.Plan, error)
}

// stateFiles are the files Run checks, in its report's order.
var stateFiles = []stateFile{
	{
		name:       CPUManagerState,
		configTodo: "fix the kubelet configuration (cpuManagerPolicy, reservedSystemCPUs, cpuManagerPolicyOptions)",
		plan:       planCPU,
	},
	{
		name:       MemoryManagerState,
		configTodo: "fix the kubelet configuration (memoryManagerPolicy, reservedMemory, systemReserved, kubeReserved, evictionHard)",
		plan:       planMemory,
	},
}

func planCPU(snap *topology.Snapshot, o Options, path string) (kubeletstate.Plan, error) {
	st, err := cpumgr.ReadFile(path)
	var le *cpumgr.LoadError
	if errors.As(err, &le) {
		// Refused by every release: in the words of this one.
		if cfg, cerr := cpumgr.NewConfig(o.Config, snap, path, o.Release); cerr == nil {
			err = fmt.Errorf("cpumgr: %s: kubelet 1.%d would refuse it: %s: %w", path, o.Release.Minor, le.KubeletFor(cfg), cpumgr.ErrCorrupt)
		}
	}
	if err != nil {
		return nil, err
	}
	cfg, err := cpumgr.NewConfig(o.Config, snap, path, o.Release)
	if err != nil {
		return nil, err
	}
	cfg.AllowDrop = o.AllowDrop
	p, err := cpumgr.PlanRebuild(st, snap, cfg)
	if p == nil {
		return nil, err
	}
	return p, err
}

func planMemory(snap *topology.Snapshot, o Options, path string) (kubeletstate.Plan, error) {
	st, err := memmgr.ReadFile(path)
	if err != nil {
		return nil, err
	}
	cfg, err := memmgr.NewConfigWithFlags(o.Config, memmgr.KubeletFlags{AllocatableIgnoresEviction: o.AllocatableIgnoresEviction}, snap, path, o.Release)
	if err != nil {
		return nil, err
	}
	cfg.AllowDrop = o.AllowDrop
	p, err := memmgr.PlanRebuild(st, snap, cfg)
	if p == nil {
		return nil, err
	}
	return p, err
}

// check runs one state file through read, plan and apply.
func check(f stateFile, snap *topology.Snapshot, o Options) Result {
	path := filepath.Join(o.RootDir, f.name)
	res := Result{File: f.name, Path: path}
	p, err := f.plan(snap, o, path)
	var drain []podnames.Pod
	var names kubeletstate.PodNames
	if p != nil {
		drain, names = drainPods(p.Drains(), o.PodLogsDir)
	}
	if p != nil && (err != nil || p.NeedsRewrite()) {
		res.Plan = p.Describe(names)
	}
	if p != nil && p.Blocked() {
		if err == nil {
			err = fmt.Errorf("%s: %w (see the plan)", path, kubeletstate.ErrNeedsDrain)
		}
		// The why names what to drain: it is all a NeedsDrain Event
		// says of the file.
		var lines []string
		for _, d := range p.Drains() {
			lines = append(lines, d.Describe(names))
		}
		err = fmt.Errorf("%w: %s", err, strings.Join(lines, "; "))
		res.Drain = drain
	}
	switch {
	case errors.Is(err, fs.ErrNotExist):
		res.Verdict = Absent
		return res
	case errors.Is(err, kubeletstate.ErrUnsupportedFormat):
		res.Verdict = Unknown
		res.Why = fmt.Sprintf("a layout hotplugd cannot read, for %s: %v", o.Release, err)
		res.Todo = "nothing: the kubelet validates the file itself"
		return res
	case errors.Is(err, statefile.ErrNotRegular), errors.Is(err, statefile.ErrTooLarge):
		// A symlink the kubelet would follow, a file larger than any it
		// writes: hotplugd does not read or rewrite such a thing.
		res.Verdict = Unknown
		res.Why = fmt.Sprintf("hotplugd does not read it: %v", err)
		res.Todo = "nothing: the kubelet judges the file itself; to have hotplugd check it, make it a regular file"
		return res
	case errors.Is(err, kubeletstate.ErrCannotPredict):
		res.Verdict = Unknown
		res.Why = err.Error()
		res.Todo = "nothing: the kubelet judges the file itself; to have hotplugd check it, set reservedSystemCPUs"
		return res
	case errors.Is(err, kubeletstate.ErrConfig):
		return needsPerson(res, err, f.configTodo)
	case errors.Is(err, kubeletstate.ErrNeedsDrain):
		return needsPerson(res, err, drainTodo)
	case errors.Is(err, kubeletstate.ErrPolicyChanged):
		return needsPerson(res, err, "the "+f.name+" policy changed: drain the node, then delete "+path+" before starting the kubelet")
	case err != nil:
		return needsPerson(res, err, unreadableTodo(path))
	case !p.NeedsRewrite():
		res.Verdict = Valid
		return res
	case o.DryRun:
		res.Verdict = WouldRepair
		return res
	}
	backup, err := p.Apply(o.Now)
	res.Backup = backup
	if err != nil {
		return needsPerson(res, err, "check the file system under "+o.RootDir+" (the error says whether the file changed), then run hotplugd preflight again")
	}
	res.Verdict = Repaired
	return res
}

// drainPods are the pods of drains, each once, in their order, named from
// the kubelet's pod log directory podLogsDir where it names them (read
// only when there are drains), and those names for a plan.
func drainPods(drains []kubeletstate.Drain, podLogsDir string) ([]podnames.Pod, kubeletstate.PodNames) {
	if len(drains) == 0 {
		return nil, nil
	}
	var uids []string
	seen := map[string]bool{}
	for _, d := range drains {
		if !seen[d.PodUID] {
			seen[d.PodUID] = true
			uids = append(uids, d.PodUID)
		}
	}
	found := podnames.Resolve(podLogsDir, uids)
	pods := make([]podnames.Pod, len(uids))
	names := kubeletstate.PodNames{}
	for i, uid := range uids {
		pod, ok := found[uid]
		if !ok {
			pod = podnames.Pod{UID: uid}
		} else {
			names[uid] = pod.String()
		}
		pods[i] = pod
	}
	return pods, names
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
