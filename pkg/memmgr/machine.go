package memmgr

import (
	"fmt"
	"slices"
	"strings"

	v1 "k8s.io/api/core/v1"

	"github.com/hotplugd/hotplugd/pkg/memmgr/state"
	"github.com/hotplugd/hotplugd/pkg/topology"
)

// kubeletNodes returns the NUMA nodes the kubelet's memory manager works
// with: cAdvisor's MachineInfo.Topology, as sysinfo.GetNodesInfo builds it.
// With NUMA nodes in sysfs those are the nodes, with their MemTotal and
// hugepages. Without (a kernel without CONFIG_NUMA), cAdvisor's
// getCPUTopology makes one node per CPU package instead, its id the
// package id, with neither memory nor hugepages: Memory stays 0 and
// HugePages nil. The packages are those of every cpuN directory whose
// physical_package_id it can read (getCpusByPhysicalPackageID), which an
// offline CPU, having no topology directory, does not contribute; one that
// reads -1 (a PowerVM LPAR) makes a node -1. (A -1 read from a CPU without
// core_id is not told apart from a missing file by the snapshot: such a
// CPU is left out.)
func kubeletNodes(snap *topology.Snapshot) []topology.NUMANode {
	if len(snap.NUMANodes) > 0 {
		return snap.NUMANodes
	}
	var packages []int
	for _, c := range snap.CPUs.List {
		// A negative Package with UnknownIDs is the id as read.
		if (c.Package >= 0 || c.UnknownIDs) && !slices.Contains(packages, c.Package) {
			packages = append(packages, c.Package)
		}
	}
	slices.Sort(packages)
	nodes := make([]topology.NUMANode, len(packages))
	for i, id := range packages {
		nodes[i] = topology.NUMANode{ID: id}
	}
	return nodes
}

// defaultMachineState is the Static policy's accounting for an idle
// machine (getDefaultMachineState): per node of kubeletNodes, every
// hugepage size (total = pages x size) and memory (total = the node's
// MemTotal), each minus its reservedMemory; memory also minus the node's
// hugepages. The arithmetic is the kubelet's: unsigned, so a reservation
// above a node's memory wraps around as it does in the kubelet (always, on
// the memoryless nodes of a machine without NUMA nodes).
func defaultMachineState(snap *topology.Snapshot, reserved systemReserved) state.NUMANodeMap {
	ms := state.NUMANodeMap{}
	for _, n := range kubeletNodes(snap) {
		ns := &state.NUMANodeState{
			MemoryMap: map[v1.ResourceName]*state.MemoryTable{},
			Cells:     []int{n.ID},
		}
		var hugepages uint64
		for _, hp := range n.HugePages {
			name := topology.HugePageResourceName(hp.PageSizeKiB)
			total := hp.Pages * hp.PageSizeKiB * 1024
			sr := reserved.get(n.ID, name)
			ns.MemoryMap[name] = &state.MemoryTable{
				TotalMemSize:   total,
				SystemReserved: sr,
				Allocatable:    total - sr,
				Free:           total - sr,
			}
			hugepages += total
		}
		sr := reserved.get(n.ID, v1.ResourceMemory)
		alloc := n.MemTotalBytes - sr - hugepages
		ns.MemoryMap[v1.ResourceMemory] = &state.MemoryTable{
			TotalMemSize:   n.MemTotalBytes,
			SystemReserved: sr,
			Allocatable:    alloc,
			Free:           alloc,
		}
		ms[n.ID] = ns
	}
	return ms
}

// unit is what is assigned and released together: one container's blocks,
// or a pod's pod-level blocks (Container "").
type unit struct {
	PodUID    string
	Container string
	Blocks    []state.Block
}

func (u unit) String() string {
	if u.Container == "" {
		return fmt.Sprintf("pod %s (pod-level)", u.PodUID)
	}
	return fmt.Sprintf("pod %s container %s", u.PodUID, u.Container)
}

// units lists what the Static policy replays at start, in a fixed order
// (pod UID, then container name): every container of Entries, except that
// with pod-level resource managers a pod with pod-level blocks counts once,
// with those blocks. (A pod that has pod-level blocks but no container
// entries is not replayed by the kubelet either.)
func units(s *State, podLevel bool) []unit {
	var out []unit
	for _, pod := range sortedKeys(s.Entries) {
		if podLevel {
			if e, ok := s.PodEntries[pod]; ok && len(e.MemoryBlocks) > 0 {
				out = append(out, unit{PodUID: pod, Blocks: e.MemoryBlocks})
				continue
			}
		}
		containers := s.Entries[pod]
		for _, name := range sortedKeys(containers) {
			out = append(out, unit{PodUID: pod, Container: name, Blocks: containers[name]})
		}
	}
	return out
}

// replay adds u's blocks to ms the way the kubelet's Static policy does
// (updateExpectedMachineState): each block counts one assignment on every
// node of its affinity and makes that group the node's cells; its size is
// taken from the nodes' free memory in affinity order, a node's free never
// going below zero. It fails, with the kubelet's message, on a node or a
// resource ms does not have.
func replay(ms state.NUMANodeMap, u unit) error {
	for _, b := range u.Blocks {
		size := b.Size
		for _, id := range b.NUMAAffinity {
			ns, ok := ms[id]
			if !ok {
				return &KubeletError{Kind: ErrAssignment,
					Kubelet: fmt.Sprintf("[memorymanager] (pod: %s, container: %s) the memory assignment uses the NUMA that does not exist", u.PodUID, u.Container),
					Detail:  fmt.Sprintf("%s has %s; the machine has no NUMA node %d", u, formatBlock(b), id)}
			}
			ns.NumberOfAssignments++
			ns.Cells = b.NUMAAffinity
			mt, ok := ns.MemoryMap[b.Type]
			if !ok {
				return &KubeletError{Kind: ErrAssignment,
					Kubelet: fmt.Sprintf("[memorymanager] (pod: %s, container: %s) the memory assignment uses memory resource that does not exist", u.PodUID, u.Container),
					Detail:  fmt.Sprintf("%s has %s; NUMA node %d has no %s", u, formatBlock(b), id, b.Type)}
			}
			if size == 0 || mt.Free == 0 {
				continue
			}
			take := min(size, mt.Free)
			mt.Reserved += take
			mt.Free -= take
			size -= take
		}
	}
	return nil
}

// fits reports whether u's blocks can all be placed on ms in full, and if
// not, why. ms is not changed.
func fits(ms state.NUMANodeMap, u unit) (bool, string) {
	free := map[int]map[v1.ResourceName]uint64{}
	for _, b := range u.Blocks {
		var avail uint64
		for _, id := range b.NUMAAffinity {
			ns, ok := ms[id]
			if !ok || ns == nil {
				return false, fmt.Sprintf("NUMA node %d no longer exists", id)
			}
			mt, ok := ns.MemoryMap[b.Type]
			if !ok || mt == nil {
				return false, fmt.Sprintf("NUMA node %d no longer has %s", id, b.Type)
			}
			if free[id] == nil {
				free[id] = map[v1.ResourceName]uint64{}
			}
			if _, ok := free[id][b.Type]; !ok {
				free[id][b.Type] = mt.Free
			}
			avail += free[id][b.Type]
		}
		if b.Size == 0 || len(b.NUMAAffinity) == 0 {
			// Nothing to place (the kubelet places nothing for a block
			// without affinity either).
			continue
		}
		if avail < b.Size {
			return false, fmt.Sprintf("needs %s of %s on NUMA %s, only %s is free there (allocatable %s)",
				fmtBytes(b.Size), b.Type, affinityString(b.NUMAAffinity), fmtBytes(avail), fmtBytes(allocatableOf(ms, b)))
		}
		// Take it, node by node, as replay will.
		size := b.Size
		for _, id := range b.NUMAAffinity {
			take := min(size, free[id][b.Type])
			free[id][b.Type] -= take
			size -= take
		}
	}
	return true, ""
}

func allocatableOf(ms state.NUMANodeMap, b state.Block) uint64 {
	var sum uint64
	for _, id := range b.NUMAAffinity {
		if ns := ms[id]; ns != nil {
			if mt := ns.MemoryMap[b.Type]; mt != nil {
				sum += mt.Allocatable
			}
		}
	}
	return sum
}

// compareMachineStates returns the differences the kubelet's
// areMachineStatesEqual looks at between the file's state (got) and the one
// expected for the machine (want): the set of nodes; per node the number of
// assignments, the cells, the set of resources, and per resource total,
// systemReserved and allocatable, and free and reserved summed over the
// node's cells. None means the kubelet finds them equal. Unlike the kubelet
// it does not stop at the first difference, and it does not crash on nulls
// in the file (the kubelet would).
func compareMachineStates(got, want state.NUMANodeMap) []string {
	var diffs []string
	seen := map[string]bool{} // a group's sums are reported once, not per node
	group := func(d string) {
		if !seen[d] {
			seen[d] = true
			diffs = append(diffs, d)
		}
	}
	for _, id := range sortedKeys(got) {
		if _, ok := want[id]; !ok {
			diffs = append(diffs, fmt.Sprintf("NUMA node %d is in the state but not on the machine", id))
		}
	}
	for _, id := range sortedKeys(want) {
		if _, ok := got[id]; !ok {
			diffs = append(diffs, fmt.Sprintf("NUMA node %d is on the machine but not in the state", id))
		}
	}
	for _, id := range sortedKeys(got) {
		g, w := got[id], want[id]
		if w == nil {
			continue
		}
		if g == nil {
			diffs = append(diffs, fmt.Sprintf("NUMA node %d is null in the state (the kubelet would crash on it)", id))
			continue
		}
		if g.NumberOfAssignments != w.NumberOfAssignments {
			diffs = append(diffs, fmt.Sprintf("NUMA node %d: %d assignments in the state, %d expected from the entries", id, g.NumberOfAssignments, w.NumberOfAssignments))
		}
		if !sameGroup(g.Cells, w.Cells) {
			diffs = append(diffs, fmt.Sprintf("NUMA node %d: cells %v in the state, %v expected from the entries", id, g.Cells, w.Cells))
			// The kubelet stops here; the sums below need equal groups.
			continue
		}
		for _, name := range resourceNames(g.MemoryMap, w.MemoryMap) {
			gt, gok := g.MemoryMap[name]
			wt, wok := w.MemoryMap[name]
			switch {
			case !wok:
				diffs = append(diffs, fmt.Sprintf("NUMA node %d: %s is in the state but not on the machine", id, name))
				continue
			case !gok:
				diffs = append(diffs, fmt.Sprintf("NUMA node %d: %s is on the machine but not in the state", id, name))
				continue
			case gt == nil:
				diffs = append(diffs, fmt.Sprintf("NUMA node %d: %s is null in the state (the kubelet would crash on it)", id, name))
				continue
			}
			for _, f := range []struct {
				field      string
				got, want  uint64
				changeHint string
			}{
				{"total", gt.TotalMemSize, wt.TotalMemSize, totalHint(name)},
				{"systemReserved", gt.SystemReserved, wt.SystemReserved, "reservedMemory changed"},
				{"allocatable", gt.Allocatable, wt.Allocatable, ""},
			} {
				if f.got != f.want {
					d := fmt.Sprintf("NUMA node %d %s: %s %s in the state, %s on the machine", id, name, f.field, fmtBytes(f.got), fmtBytes(f.want))
					if f.changeHint != "" {
						d += " (" + f.changeHint + ")"
					}
					diffs = append(diffs, d)
				}
			}
			gf, gr, ok1 := cellSums(got, g.Cells, name)
			wf, wr, ok2 := cellSums(want, g.Cells, name)
			switch {
			case !ok1 || !ok2:
				diffs = append(diffs, fmt.Sprintf("NUMA node %d: %s is missing on a node of cells %v (the kubelet would crash on it)", id, name, g.Cells))
			case gf != wf:
				group(fmt.Sprintf("NUMA %s %s: free %s in the state, %s expected", affinityString(g.Cells), name, fmtBytes(gf), fmtBytes(wf)))
			case gr != wr:
				group(fmt.Sprintf("NUMA %s %s: reserved %s in the state, %s expected", affinityString(g.Cells), name, fmtBytes(gr), fmtBytes(wr)))
			}
		}
	}
	return diffs
}

func totalHint(name v1.ResourceName) string {
	if name == v1.ResourceMemory {
		return "memory added or removed"
	}
	return "hugepages changed"
}

// cellSums sums free and reserved of one resource over a group of nodes.
func cellSums(ms state.NUMANodeMap, cells []int, name v1.ResourceName) (free, reserved uint64, ok bool) {
	for _, id := range cells {
		ns := ms[id]
		if ns == nil {
			return 0, 0, false
		}
		mt := ns.MemoryMap[name]
		if mt == nil {
			return 0, 0, false
		}
		free += mt.Free
		reserved += mt.Reserved
	}
	return free, reserved, true
}

// sameGroup compares two cell lists as sets in the kubelet's way (sorted,
// duplicates kept), without sorting the callers' slices.
func sameGroup(a, b []int) bool {
	return slices.Equal(slices.Sorted(slices.Values(a)), slices.Sorted(slices.Values(b)))
}

func resourceNames(a, b map[v1.ResourceName]*state.MemoryTable) []v1.ResourceName {
	seen := map[v1.ResourceName]bool{}
	for n := range a {
		seen[n] = true
	}
	for n := range b {
		seen[n] = true
	}
	names := sortedKeys(seen)
	slices.SortFunc(names, func(x, y v1.ResourceName) int { return topology.CompareResources(string(x), string(y)) })
	return names
}

func affinityString(ids []int) string {
	s := make([]string, len(ids))
	for i, id := range ids {
		s[i] = fmt.Sprint(id)
	}
	return "[" + strings.Join(s, ",") + "]"
}

func fmtBytes(b uint64) string {
	if b > 1<<62 {
		return fmt.Sprint(b) // a wrapped-around value: print it raw
	}
	return topology.FormatBytes(b)
}

func formatBlock(b state.Block) string {
	return fmt.Sprintf("%s of %s on NUMA %s", fmtBytes(b.Size), b.Type, affinityString(b.NUMAAffinity))
}
