package memmgr

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/hotplugd/hotplugd/internal/kubeletstate"
	"github.com/hotplugd/hotplugd/pkg/memmgr/state"
	"github.com/hotplugd/hotplugd/pkg/statefile"
	"github.com/hotplugd/hotplugd/pkg/topology"
)

// Assignment is memory the state assigns to one container, or to a whole
// pod with pod-level resource managers (Container "").
type Assignment struct {
	PodUID    string
	Container string
	Blocks    []state.Block
	// Reason says why the assignment no longer fits (NeedsDrain, Dropped).
	Reason string
}

func (a Assignment) String() string { return a.describe(nil) }

// describe is String with the pods names knows named.
func (a Assignment) describe(names kubeletstate.PodNames) string {
	return kubeletstate.Drain{PodUID: a.PodUID, What: a.what(), Reason: a.Reason}.Describe(names)
}

// what is the assignment without its pod and reason: "container db: 8Gi
// of memory on NUMA [1]", "(pod-level): no blocks".
func (a Assignment) what() string {
	s := "container " + a.Container
	if a.Container == "" {
		s = "(pod-level)"
	}
	if len(a.Blocks) == 0 {
		return s + ": no blocks"
	}
	blocks := make([]string, len(a.Blocks))
	for i, b := range a.Blocks {
		blocks[i] = formatBlock(b)
	}
	return s + ": " + strings.Join(blocks, ", ")
}

// Plan is what PlanRebuild decided for a state file: a plain value to print
// (dry run), assert in tests, or apply with Write.
type Plan struct {
	// Path is the state file the plan is for.
	Path string
	// Changed is false when the kubelet accepts the file as it is.
	Changed bool
	// Why is the error the kubelet would fail with on the current file
	// (nil when unchanged).
	Why error
	// Old is the state as read; New the state to write (nil when
	// unchanged).
	Old, New *State
	// Kept are the assignments New keeps.
	Kept []Assignment
	// NeedsDrain are assignments that no longer fit the machine; while
	// there are any the plan is Blocked and Write refuses.
	NeedsDrain []Assignment
	// Dropped are assignments that no longer fit, left out of New because
	// Config.AllowDrop was set.
	Dropped []Assignment
	// Changes describe, per NUMA node and resource, how New's machine
	// state differs from Old's.
	Changes []string
}

// Blocked reports whether applying the plan would drop assignments the
// operator has not allowed to drop.
func (p *Plan) Blocked() bool { return len(p.NeedsDrain) > 0 }

var _ kubeletstate.Plan = (*Plan)(nil)

// Drains are NeedsDrain, or Dropped when the operator allowed the drop,
// in the plan's words.
func (p *Plan) Drains() []kubeletstate.Drain {
	var out []kubeletstate.Drain
	for _, a := range append(slices.Clip(p.NeedsDrain), p.Dropped...) {
		out = append(out, kubeletstate.Drain{PodUID: a.PodUID, What: a.what(), Reason: a.Reason})
	}
	return out
}

// NeedsRewrite says the file must be rewritten (Changed).
func (p *Plan) NeedsRewrite() bool { return p.Changed }

// Apply is Write.
func (p *Plan) Apply(now time.Time) (backup string, err error) { return p.Write(now) }

// PlanRebuild plans the repair of state s for the machine snap under the
// kubelet configuration cfg. When the kubelet accepts s (see Validate) the
// plan is unchanged. Otherwise it rebuilds the machine state the way the
// kubelet builds it at start (per-node MemTotal and hugepages minus
// reservedMemory) and replays every assignment that still fits, in pod UID
// and container name order, as the kubelet accounts it. An assignment on a
// NUMA node or resource the machine no longer has, or larger than what is
// left of its nodes' allocatable memory after the assignments before it, is
// NeedsDrain, or Dropped with cfg.AllowDrop. The assignments are those the
// configured kubelet restores from s (for kubelet 1.37 from data, migrating
// a FormatV1 or FormatV2 file as it does). New is written in the layout that
// kubelet writes (FormatV3 for 1.37, FormatV2 for 1.36 with
// PodLevelResourceManagers, else FormatV1); pod-level assignments cannot be
// carried to a kubelet without that gate and need a drain.
//
// It fails, leaving the file to a person, when the configuration itself is
// refused (ErrConfig), the policy changed (ErrPolicy), or the kubelet
// refuses the file as undecodable or corrupted (ErrInvalid, ErrCorrupt),
// except a FormatV2 file under a kubelet that does not read that layout:
// that one is rewritten in the kubelet's layout from what verified.
func PlanRebuild(s *State, snap *topology.Snapshot, cfg Config) (*Plan, error) {
	reserved, err := checkConfig(snap, cfg)
	if err != nil {
		return nil, err
	}
	src, podLevel, err := restored(s, cfg)
	if err != nil {
		if !unreadLayout(s, cfg) {
			return nil, err
		}
		src, podLevel = s, true
	}
	if src.PolicyName != cfg.Policy {
		return nil, policyError(src, cfg)
	}
	p := &Plan{Path: cfg.path(), Old: s}
	why := Validate(s, snap, cfg)
	if why == nil {
		p.Kept = assignments(units(src, podLevel))
		return p, nil
	}
	p.Changed, p.Why = true, why
	if !podLevel && s.Format != FormatV1 && len(s.PodEntries) > 0 {
		// Pod-level entries the file holds (and verified) stay pod-level
		// in the rebuild even where this kubelet does not restore them
		// (1.37 without the gate; an older kubelet reading a 1.37 file's V1
		// fields): carried where it keeps them, else a drain, never turned
		// silently into container entries that lose the pod's reservation.
		src = &State{PolicyName: src.PolicyName, MachineState: src.MachineState, Entries: src.Entries, PodEntries: s.PodEntries, Format: src.Format}
		podLevel = true
	}

	target := formatFor(cfg)
	n := &State{
		PolicyName:   s.PolicyName,
		MachineState: state.NUMANodeMap{},
		Entries:      state.ContainerMemoryAssignments{},
		Format:       target,
	}
	pods := writesPods(cfg)
	if pods {
		n.PodEntries = state.PodMemoryAssignments{}
	}
	if cfg.Policy == PolicyNone {
		// Nothing to account: only the layout can be wrong.
		n.MachineState = cloneNodes(src.MachineState)
		n.Entries = kubeletEntries(src.Entries)
		if pods && src.PodEntries != nil {
			n.PodEntries = clonePodEntries(src.PodEntries)
		}
	} else {
		n.MachineState = defaultMachineState(snap, reserved)
		p.rebuild(src, podLevel, n, cfg)
	}
	p.Changes = machineStateChanges(src.MachineState, n.MachineState)
	if s.Format != n.Format {
		p.Changes = append(p.Changes, fmt.Sprintf("format %s -> %s", s.Format, n.Format))
	}
	p.New = n
	// A plan is only as good as the check the kubelet will run on it.
	if err := Validate(n, snap, cfg); err != nil {
		return nil, fmt.Errorf("memmgr: internal error: the rebuilt state does not validate: %w", err)
	}
	return p, nil
}

// rebuild replays the assignments of s, the state the kubelet restored
// (with pod-level entries if podLevel), onto n's fresh machine state.
func (p *Plan) rebuild(s *State, podLevel bool, n *State, cfg Config) {
	pods := writesPods(cfg)
	drain := func(u unit, reason string) {
		a := Assignment{PodUID: u.PodUID, Container: u.Container, Blocks: u.Blocks, Reason: reason}
		if cfg.AllowDrop {
			p.Dropped = append(p.Dropped, a)
		} else {
			p.NeedsDrain = append(p.NeedsDrain, a)
		}
	}
	for _, u := range units(s, podLevel) {
		if u.Container == "" && !pods {
			drain(u, "a pod-level assignment needs the PodLevelResourceManagers feature gate, which the kubelet does not have")
			continue
		}
		if ok, reason := fits(n.MachineState, u); !ok {
			drain(u, reason)
			continue
		}
		if err := replay(n.MachineState, u); err != nil {
			drain(u, err.Error()) // fits checked this; kept for safety
			continue
		}
		p.Kept = append(p.Kept, Assignment{PodUID: u.PodUID, Container: u.Container, Blocks: u.Blocks})
		if u.Container == "" {
			n.Entries[u.PodUID] = kubeletContainers(s.Entries[u.PodUID])
			n.PodEntries[u.PodUID] = s.PodEntries[u.PodUID]
			continue
		}
		if n.Entries[u.PodUID] == nil {
			n.Entries[u.PodUID] = map[string][]state.Block{}
		}
		n.Entries[u.PodUID][u.Container] = kubeletBlocks(u.Blocks)
	}
	// What the kubelet keeps without accounting it: pods without
	// containers, and pod-level entries of pods without container entries.
	for pod, containers := range s.Entries {
		if len(containers) == 0 {
			n.Entries[pod] = map[string][]state.Block{}
		}
	}
	if pods {
		for pod, e := range s.PodEntries {
			if _, ok := s.Entries[pod]; !ok {
				n.PodEntries[pod] = state.PodEntry{MemoryBlocks: kubeletBlocks(e.MemoryBlocks)}
			}
		}
	}
}

// kubeletEntries copies assignments the way the kubelet's state does
// before writing them: every pod has a container map and every container a
// block list (no nulls); the blocks' affinities are kept as they are.
func kubeletEntries(m state.ContainerMemoryAssignments) state.ContainerMemoryAssignments {
	out := state.ContainerMemoryAssignments{}
	for pod, containers := range m {
		out[pod] = kubeletContainers(containers)
	}
	return out
}

func kubeletContainers(m map[string][]state.Block) map[string][]state.Block {
	out := map[string][]state.Block{}
	for name, blocks := range m {
		out[name] = kubeletBlocks(blocks)
	}
	return out
}

func kubeletBlocks(b []state.Block) []state.Block {
	out := cloneBlocks(b)
	if out == nil {
		out = []state.Block{}
	}
	return out
}

func assignments(us []unit) []Assignment {
	var out []Assignment
	for _, u := range us {
		out = append(out, Assignment{PodUID: u.PodUID, Container: u.Container, Blocks: u.Blocks})
	}
	return out
}

// machineStateChanges describes how b differs from a, node by node.
func machineStateChanges(a, b state.NUMANodeMap) []string {
	var out []string
	ids := map[int]bool{}
	for id := range a {
		ids[id] = true
	}
	for id := range b {
		ids[id] = true
	}
	for _, id := range sortedKeys(ids) {
		x, y := a[id], b[id]
		switch {
		case x == nil && y != nil:
			if _, ok := a[id]; ok {
				out = append(out, fmt.Sprintf("NUMA node %d: null -> rebuilt", id))
			} else {
				out = append(out, fmt.Sprintf("NUMA node %d: added (%s)", id, describeNode(y)))
			}
			continue
		case y == nil:
			out = append(out, fmt.Sprintf("NUMA node %d: removed", id))
			continue
		}
		if x.NumberOfAssignments != y.NumberOfAssignments {
			out = append(out, fmt.Sprintf("NUMA node %d: assignments %d -> %d", id, x.NumberOfAssignments, y.NumberOfAssignments))
		}
		if !sameGroup(x.Cells, y.Cells) {
			out = append(out, fmt.Sprintf("NUMA node %d: cells %v -> %v", id, x.Cells, y.Cells))
		}
		for _, name := range resourceNames(x.MemoryMap, y.MemoryMap) {
			xt, yt := x.MemoryMap[name], y.MemoryMap[name]
			switch {
			case xt == nil && yt == nil:
			case xt == nil:
				out = append(out, fmt.Sprintf("NUMA node %d %s: added (%s)", id, name, describeTable(yt)))
			case yt == nil:
				out = append(out, fmt.Sprintf("NUMA node %d %s: removed", id, name))
			default:
				if d := tableChanges(xt, yt); d != "" {
					out = append(out, fmt.Sprintf("NUMA node %d %s: %s", id, name, d))
				}
			}
		}
	}
	return out
}

func tableChanges(x, y *state.MemoryTable) string {
	var parts []string
	for _, f := range []struct {
		name string
		a, b uint64
	}{
		{"total", x.TotalMemSize, y.TotalMemSize},
		{"systemReserved", x.SystemReserved, y.SystemReserved},
		{"allocatable", x.Allocatable, y.Allocatable},
		{"reserved", x.Reserved, y.Reserved},
		{"free", x.Free, y.Free},
	} {
		if f.a != f.b {
			parts = append(parts, fmt.Sprintf("%s %s -> %s", f.name, fmtBytes(f.a), fmtBytes(f.b)))
		}
	}
	return strings.Join(parts, ", ")
}

func describeTable(t *state.MemoryTable) string {
	return fmt.Sprintf("total %s, allocatable %s, free %s", fmtBytes(t.TotalMemSize), fmtBytes(t.Allocatable), fmtBytes(t.Free))
}

func describeNode(n *state.NUMANodeState) string {
	var parts []string
	for _, name := range resourceNames(n.MemoryMap, nil) {
		if t := n.MemoryMap[name]; t != nil {
			parts = append(parts, fmt.Sprintf("%s %s", name, fmtBytes(t.TotalMemSize)))
		}
	}
	return strings.Join(parts, ", ")
}

// String renders the plan for a person (dry run, logs).
func (p *Plan) String() string { return p.Describe(nil) }

// Describe is String with the pods names knows named ("pod
// default/db-0 (uid ...)"), the others by UID.
func (p *Plan) Describe(names kubeletstate.PodNames) string {
	var b strings.Builder
	if !p.Changed {
		fmt.Fprintf(&b, "%s: valid for this machine, nothing to do (%d assignments)\n", p.Path, len(p.Kept))
		return b.String()
	}
	switch {
	case p.Blocked():
		fmt.Fprintf(&b, "%s: needs a drain before it can be rebuilt for this machine\n", p.Path)
	default:
		fmt.Fprintf(&b, "%s: rebuild for this machine\n", p.Path)
	}
	fmt.Fprintf(&b, "  because: %v\n", p.Why)
	for _, c := range p.Changes {
		fmt.Fprintf(&b, "  change: %s\n", c)
	}
	for _, a := range p.Kept {
		fmt.Fprintf(&b, "  keep: %s\n", a.describe(names))
	}
	for _, a := range p.Dropped {
		fmt.Fprintf(&b, "  drop (allowed): %s\n", a.describe(names))
	}
	for _, a := range p.NeedsDrain {
		fmt.Fprintf(&b, "  NEEDS DRAIN: %s\n", a.describe(names))
	}
	if p.Blocked() {
		fmt.Fprintf(&b, "  not applied: drain these pods, then allow dropping their assignments\n")
	}
	return b.String()
}

// Write applies the plan: it writes New to Path with statefile.Write (a
// timestamped backup of the old file next to it, then an atomic replace)
// and returns the backup's path. An unchanged plan writes nothing; a
// blocked one fails with ErrNeedsDrain and leaves the file untouched.
func (p *Plan) Write(now time.Time) (backup string, err error) {
	if !p.Changed {
		return "", nil
	}
	if p.Blocked() {
		return "", fmt.Errorf("memmgr: %s: %w: %d assignments no longer fit", p.Path, ErrNeedsDrain, len(p.NeedsDrain))
	}
	if p.New == nil {
		return "", errors.New("memmgr: plan has no state to write")
	}
	b, err := p.New.Marshal()
	if err != nil {
		return "", err
	}
	backup, err = statefile.Write(p.Path, b, now)
	if err != nil {
		return backup, fmt.Errorf("memmgr: %w", err)
	}
	return backup, nil
}
