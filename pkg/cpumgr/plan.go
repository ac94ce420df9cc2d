package cpumgr

import (
	"errors"
	"fmt"
	"maps"
	"strings"
	"time"

	"k8s.io/utils/cpuset"

	"github.com/hotplugd/hotplugd/internal/kubeletstate"
	"github.com/hotplugd/hotplugd/pkg/statefile"
	"github.com/hotplugd/hotplugd/pkg/topology"
)

// Drain is an assignment a rebuild cannot keep: some of its CPUs are offline
// now or reserved now, or it belongs to a pod whose pod-level CPUs are.
type Drain struct {
	Assignment
	// Lost are its CPUs that are no longer online.
	Lost cpuset.CPUSet
	// Reserved are its CPUs that the static policy now reserves.
	Reserved cpuset.CPUSet
	// Reason says why, for people.
	Reason string
}

// Plan is what PlanRebuild decided for one cpu_manager_state. It is a plain
// value: String prints it (the dry run), Apply carries it out.
type Plan struct {
	// Path is the state file.
	Path string
	// Old is the state as read; New the state to write, nil when the plan
	// cannot be applied (see PlanRebuild's errors). When Changed is false
	// New is Old.
	Old, New *State
	// Changed says the file must be rewritten.
	Changed bool
	// Invalid is the kubelet's refusal of Old; nil when the kubelet starts
	// with it as it is.
	Invalid *StartError
	// Online are the CPUs the kubelet sees; Reserved the static policy's
	// reserved CPUs, kept out of the default set when Strict.
	Online, Reserved cpuset.CPUSet
	Strict           bool
	// Added are online CPUs Old did not know; they join the default set.
	Added cpuset.CPUSet
	// Removed are CPUs Old knew that are no longer online.
	Removed cpuset.CPUSet
	// Kept are the assignments New keeps as they are.
	Kept []Assignment
	// NeedsDrain are the assignments New cannot keep.
	NeedsDrain []Drain
	// Dropped says New leaves NeedsDrain out (Config.AllowDrop).
	Dropped bool
}

// PlanRebuild plans the cpu_manager_state for the machine snap, keeping
// every assignment that is still valid:
//
//   - a state the kubelet starts with (Validate) is left alone: Changed is
//     false;
//   - a state the kubelet's loader refuses, or of another policy, cannot be
//     rebuilt: the error is its *StartError (the plan says why);
//   - otherwise, for the static policy, every assignment whose CPUs are all
//     online and none reserved is kept, and the default set becomes every
//     other online CPU: new CPUs join it, removed ones leave it, the
//     reserved CPUs stay in it (or out of it with strict-cpu-reservation);
//   - an assignment that lost a CPU, or holds one the policy now reserves,
//     is never dropped silently: it is listed in NeedsDrain, with the other
//     assignments of its pod when it is a pod-level one, and the error is
//     ErrNeedsDrain with a plan that cannot be applied, unless
//     cfg.AllowDrop, where New leaves them out.
//
// The new state is written in the layout the configured kubelet writes (V4
// for 1.37, with the kept assignments' baselines under
// InPlacePodVerticalScalingExclusiveCPUs; V3 for 1.36 with
// PodLevelResourceManagers; else V2) and is checked with Validate before it
// is returned; a rebuild that would still be refused fails with
// ErrUnrepairable. On error the plan, when not nil, says what blocks it.
func PlanRebuild(s *State, snap *topology.Snapshot, cfg Config) (*Plan, error) {
	online := kubeletCPUs(snap)
	p := &Plan{
		Path:     cfg.path(),
		Old:      s,
		Online:   online,
		Reserved: cfg.Reserved,
		Strict:   cfg.StrictReservation,
	}
	onlineBits, reservedBits := toBits(online), toBits(cfg.Reserved)
	// The CPUs the default set and the assignments must add up to.
	all := onlineBits
	if cfg.StrictReservation {
		all = all.andNot(reservedBits)
	}
	if cfg.policy() == PolicyStatic && s.PolicyName == PolicyStatic {
		known := knownBits(s, true)
		p.Added = all.andNot(known).set()
		p.Removed = known.andNot(onlineBits).set()
	}

	invalid := validate(s, online, cfg)
	if invalid == nil {
		p.New = s
		p.Kept = append(podAssignments(s), containerAssignments(s)...)
		return p, nil
	}
	p.Invalid = invalid
	if invalid.Rule == RuleLoad || invalid.Rule == RulePolicy {
		return p, invalid
	}
	// Only the static policy validates anything past the policy name.
	// A kubelet without the gate that still loads the file (1.37) does not
	// restore pod-level assignments: it would hand their CPUs out again.
	// Their pods need a drain (or the gate), never a silent drop.
	gateOn := cfg.PodLevelResourceManagers

	n := &State{Format: cfg.writes(), PolicyName: s.PolicyName, Entries: map[string]map[string]cpuset.CPUSet{}}
	if gateOn {
		n.PodEntries = map[string]cpuset.CPUSet{}
	}
	var assigned bitset
	check := func(a Assignment) (Drain, bool) {
		var lost, reserved []int
		for _, cpu := range a.CPUs.UnsortedList() {
			if !onlineBits.has(cpu) {
				lost = append(lost, cpu)
			}
			if reservedBits.has(cpu) {
				reserved = append(reserved, cpu)
			}
		}
		d := Drain{Assignment: a, Lost: cpuset.New(lost...), Reserved: cpuset.New(reserved...)}
		var why []string
		if len(lost) > 0 {
			why = append(why, fmt.Sprintf("CPUs %s are offline", d.Lost))
		}
		if len(reserved) > 0 {
			why = append(why, fmt.Sprintf("CPUs %s are reserved", d.Reserved))
		}
		if a.Container == "" && !gateOn {
			why = append(why, "the kubelet runs without the "+podLevelResourceManagers+" feature gate and does not restore pod-level CPUs")
		}
		d.Reason = strings.Join(why, ", ")
		return d, len(why) > 0
	}
	drainedPods := map[string]string{}
	for _, a := range podAssignments(s) {
		if d, bad := check(a); bad {
			p.NeedsDrain = append(p.NeedsDrain, d)
			drainedPods[a.PodUID] = d.Reason
			continue
		}
		p.Kept = append(p.Kept, a)
		n.PodEntries[a.PodUID] = a.CPUs
		assigned.addSet(a.CPUs)
		// (gateOn here: without it every pod-level assignment is drained.)
	}
	for _, a := range containerAssignments(s) {
		d, bad := check(a)
		if why, ok := drainedPods[a.PodUID]; ok {
			if bad {
				d.Reason += "; "
			}
			d.Reason += "its pod's pod-level " + why
			bad = true
		}
		if bad {
			p.NeedsDrain = append(p.NeedsDrain, d)
			continue
		}
		p.Kept = append(p.Kept, a)
		if n.Entries[a.PodUID] == nil {
			n.Entries[a.PodUID] = map[string]cpuset.CPUSet{}
		}
		n.Entries[a.PodUID][a.Container] = a.CPUs
		assigned.addSet(a.CPUs)
	}
	// A pod without containers left keeps its (empty) entry, as the kubelet
	// writes it, unless the pod is drained.
	for pod, containers := range s.Entries {
		if _, drained := drainedPods[pod]; len(containers) == 0 && !drained {
			n.Entries[pod] = map[string]cpuset.CPUSet{}
		}
	}

	n.DefaultCPUSet = all.andNot(assigned).set()
	if n.Format == FormatV4 && cfg.InPlaceExclusiveCPUs {
		n.Baselines = keptBaselines(s, n)
	}

	if len(p.NeedsDrain) > 0 {
		if !cfg.AllowDrop {
			return p, fmt.Errorf("cpumgr: %w: %d assignment(s)", ErrNeedsDrain, len(p.NeedsDrain))
		}
		p.Dropped = true
	}
	if err := validate(n, online, cfg); err != nil {
		return p, fmt.Errorf("cpumgr: %w: the rebuilt state would be refused too: %s", ErrUnrepairable, err.Kubelet)
	}
	p.New = n
	p.Changed = true
	return p, nil
}

// keptBaselines are the baselines a 1.37 kubelet with
// InPlacePodVerticalScalingExclusiveCPUs holds after reading old and would
// write for n: the file's own when it has any (all of them: its
// restoreState keeps them as they are), less those of the assignments n
// drops; else each kept assignment's CPUs, as its restoreState derives them.
func keptBaselines(old, n *State) map[string]map[string]cpuset.CPUSet {
	out := map[string]map[string]cpuset.CPUSet{}
	if len(old.Baselines) > 0 {
		for pod, containers := range old.Baselines {
			for c, b := range containers {
				if _, had := old.Entries[pod][c]; had {
					if _, kept := n.Entries[pod][c]; !kept {
						continue
					}
				}
				if out[pod] == nil {
					out[pod] = map[string]cpuset.CPUSet{}
				}
				out[pod][c] = b
			}
		}
		return out
	}
	for pod, containers := range n.Entries {
		out[pod] = maps.Clone(containers)
	}
	return out
}

// String describes the plan for people, one fact per line.
func (p *Plan) String() string { return p.Describe(nil) }

// Describe is String with the pods names knows named ("pod
// default/db-0 (uid ...)"), the others by UID.
func (p *Plan) Describe(names kubeletstate.PodNames) string {
	var b strings.Builder
	old := p.Old
	fmt.Fprintf(&b, "%s: format %s, policy %q\n", p.Path, old.Format, old.PolicyName)
	switch {
	case p.Invalid == nil:
		fmt.Fprintf(&b, "  valid: the kubelet starts with it; no change\n")
	case p.New == nil:
		fmt.Fprintf(&b, "  the kubelet would refuse it: %s\n", p.Invalid.Kubelet)
		fmt.Fprintf(&b, "  no change: it needs a person\n")
	default:
		fmt.Fprintf(&b, "  the kubelet would refuse it: %s\n", p.Invalid.Kubelet)
		fmt.Fprintf(&b, "  rewrite as %s\n", p.New.Format)
	}
	fmt.Fprintf(&b, "  online CPUs: %s; reserved: %s\n", orNone(p.Online), orNone(p.Reserved))
	if p.Strict {
		fmt.Fprintf(&b, "  strict-cpu-reservation: the reserved CPUs are not in the default set\n")
	}
	if !p.Added.IsEmpty() {
		fmt.Fprintf(&b, "  CPUs added: %s\n", p.Added)
	}
	if !p.Removed.IsEmpty() {
		fmt.Fprintf(&b, "  CPUs removed: %s\n", p.Removed)
	}
	if p.New != nil && p.Changed {
		fmt.Fprintf(&b, "  default set: %s -> %s\n", orNone(old.DefaultCPUSet), orNone(p.New.DefaultCPUSet))
	} else {
		fmt.Fprintf(&b, "  default set: %s\n", orNone(old.DefaultCPUSet))
	}
	for _, a := range p.Kept {
		fmt.Fprintf(&b, "  keep: %s %s\n", names.Pod(a.PodUID), a.what())
	}
	for _, d := range p.Drains() {
		verb := "needs drain"
		if p.Dropped {
			verb = "drop"
		}
		fmt.Fprintf(&b, "  %s: %s\n", verb, d.Describe(names))
	}
	if len(p.NeedsDrain) > 0 && !p.Dropped {
		fmt.Fprintf(&b, "  drain these pods, then plan again allowing the drop of their assignments\n")
	}
	return b.String()
}

func orNone(s cpuset.CPUSet) string {
	if s.IsEmpty() {
		return `""`
	}
	return s.String()
}

// ReadFile reads and parses the cpu_manager_state at path (see Parse). The
// file is read with statefile.Read: a symlink, a non-regular file or one
// larger than statefile.MaxSize is refused. A missing file matches
// errors.Is(err, fs.ErrNotExist).
func ReadFile(path string) (*State, error) {
	b, err := statefile.Read(path)
	if err != nil {
		return nil, fmt.Errorf("cpumgr: %w", err)
	}
	s, err := parse(b)
	if err != nil {
		return nil, fmt.Errorf("cpumgr: %s: %w", path, err)
	}
	return s, nil
}

// Apply writes the plan's new state to its path, after a timestamped backup
// of the file there, atomically (statefile.Write). It returns the backup's
// path; a plan without change writes nothing and returns "".
func Apply(p *Plan, now time.Time) (backup string, err error) { return p.Apply(now) }

var _ kubeletstate.Plan = (*Plan)(nil)

// NeedsRewrite says the file must be rewritten (Changed).
func (p *Plan) NeedsRewrite() bool { return p.Changed }

// Drains are NeedsDrain in the plan's words: the assignments to drain
// first, or, Dropped, those the rebuild drops.
func (p *Plan) Drains() []kubeletstate.Drain {
	var out []kubeletstate.Drain
	for _, d := range p.NeedsDrain {
		out = append(out, kubeletstate.Drain{PodUID: d.PodUID, What: d.what(), Reason: d.Reason})
	}
	return out
}

// Blocked says the plan would drop assignments the operator has not
// allowed to drop (NeedsDrain without Dropped).
func (p *Plan) Blocked() bool { return len(p.NeedsDrain) > 0 && !p.Dropped }

// Apply writes the plan's new state to its path, after a timestamped backup
// of the file there, atomically (statefile.Write), and returns the backup's
// path. A plan without change writes nothing and returns ""; a blocked one
// fails with ErrNeedsDrain.
func (p *Plan) Apply(now time.Time) (backup string, err error) {
	if !p.Changed {
		return "", nil
	}
	if p.Blocked() {
		return "", fmt.Errorf("cpumgr: %s: %w: %d assignment(s)", p.Path, ErrNeedsDrain, len(p.NeedsDrain))
	}
	if p.New == nil {
		return "", errors.New("cpumgr: the plan cannot be applied")
	}
	b, err := p.New.Marshal()
	if err != nil {
		return "", err
	}
	return statefile.Write(p.Path, b, now)
}
