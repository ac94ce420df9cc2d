package cpumgr

import (
	"fmt"
	"maps"
	"slices"

	"k8s.io/utils/cpuset"

	"github.com/hotplugd/hotplugd/pkg/topology"
)

// The levels a CPU sits at in the CPU manager's topology.
const (
	lvlNUMA = iota
	lvlSocket
	lvlCore
	numLevels
)

// cpuInfo is where the kubelet's CPU manager places one CPU: its NUMA node,
// socket and core, indexed by level.
type cpuInfo [numLevels]int

// cpuTopology is the CPU manager's view of the machine (its
// topology.CPUTopology, built by topology.Discover from cAdvisor's machine
// info): the online CPUs under NUMA nodes, each core named by its lowest
// CPU id.
type cpuTopology struct {
	numCPUs, numCores, numSockets, numNUMANodes int
	// cpus are the CPUs, ascending; details[cpu] places each of them.
	cpus    []int
	details []cpuInfo
	// groups[level][id] are the CPUs of one NUMA node, socket or core,
	// ascending.
	groups [numLevels]map[int][]int
}

// kubeletCPUs are the CPUs the kubelet's CPU manager sees on snap (its
// topology.CPUDetails.CPUs()).
func kubeletCPUs(snap *topology.Snapshot) cpuset.CPUSet {
	online := snap.OnlineCPUs()
	ids := make([]int, len(online))
	for i, c := range online {
		ids[i] = c.ID
	}
	return cpuset.New(ids...)
}

// kubeletTopology builds the CPU manager's topology from a snapshot the way
// cAdvisor and the kubelet build it: cAdvisor lists, per NUMA node, the
// online CPUs that have a core and package id and groups them into cores by
// (core id, package id); without NUMA nodes it uses one node per package.
// An id the kernel writes as -1 (PowerVM's physical_package_id) is an id
// like any other: a package, core or node -1.
// The kubelet names each core by its lowest CPU. The socket count is
// cAdvisor's, the distinct package ids of the online CPUs.
func kubeletTopology(snap *topology.Snapshot) *cpuTopology {
	t := &cpuTopology{}
	type coreKey struct{ node, pkg, core int }
	online := snap.OnlineCPUs()
	coreMin := make(map[coreKey]int, len(online))
	nodeOf := func(c topology.CPU) int {
		if len(snap.NUMANodes) == 0 {
			return c.Package
		}
		return c.Node
	}
	maxID := -1
	for _, c := range online {
		// Ascending ids: the first CPU of a core is its lowest.
		if k := (coreKey{nodeOf(c), c.Package, c.Core}); !hasKey(coreMin, k) {
			coreMin[k] = c.ID
		}
		maxID = max(maxID, c.ID)
	}
	for l := range t.groups {
		t.groups[l] = map[int][]int{}
	}
	t.details = make([]cpuInfo, maxID+1)
	t.cpus = make([]int, 0, len(online))
	for _, c := range online {
		info := cpuInfo{lvlNUMA: nodeOf(c), lvlSocket: c.Package, lvlCore: coreMin[coreKey{nodeOf(c), c.Package, c.Core}]}
		t.details[c.ID] = info
		for l, id := range info {
			t.groups[l][id] = append(t.groups[l][id], c.ID)
		}
		t.cpus = append(t.cpus, c.ID)
	}
	t.numCPUs = len(online)
	if len(snap.NUMANodes) == 0 {
		// Without NUMA nodes cAdvisor counts every cpuN directory.
		t.numCPUs = len(snap.CPUs.List)
	}
	t.numCores = len(t.groups[lvlCore])
	t.numSockets = len(t.groups[lvlSocket])
	t.numNUMANodes = len(t.groups[lvlNUMA])
	return t
}

func hasKey[K comparable, V any](m map[K]V, k K) bool {
	_, ok := m[k]
	return ok
}

// cpusPerCore and cpusPerSocket are the kubelet's: integer divisions of the
// CPU count, so on a machine with a core or socket partly offline they are
// not the size of any real core or socket.
func (t *cpuTopology) cpusPerCore() int {
	if t.numCores == 0 {
		return 0
	}
	return t.numCPUs / t.numCores
}

func (t *cpuTopology) cpusPerSocket() int {
	if t.numSockets == 0 {
		return 0
	}
	return t.numCPUs / t.numSockets
}

// Sorting strategies of the static policy's takeByTopology.
const (
	sortPacked = "packed"
	sortSpread = "spread"
)

// accumulator is the static policy's CPU accumulator (cpu_assignment.go),
// reduced to what choosing reserved CPUs needs: the NUMA-packed algorithm
// with the packed or spread CPU order, without the uncore-cache step.
type accumulator struct {
	topo *cpuTopology
	// free[cpu] says the CPU is still free; nFree counts them.
	free  []bool
	nFree int
	// freeCount[level][id] is the number of free CPUs of a group; groups
	// without free CPUs are absent.
	freeCount [numLevels]map[int]int
	needed    int
	result    []int
	numaFirst bool
	spread    bool
}

// all returns the topology's CPUs.
func (t *cpuTopology) all() cpuset.CPUSet { return cpuset.New(t.cpus...) }

// takeByTopology returns numCPUs CPUs of available chosen as the kubelet's
// static policy chooses them (takeByTopologyNUMAPacked): whole NUMA nodes
// and sockets first (NUMA nodes first when there are at least as many
// sockets as NUMA nodes), then whole cores (unless spread), then single
// CPUs, each level sorted by its number of free CPUs, ascending, then id.
func takeByTopology(topo *cpuTopology, available cpuset.CPUSet, numCPUs int, strategy string) (cpuset.CPUSet, error) {
	a := &accumulator{
		topo:      topo,
		free:      make([]bool, len(topo.details)),
		needed:    numCPUs,
		numaFirst: topo.numSockets >= topo.numNUMANodes,
		spread:    strategy == sortSpread,
	}
	for l := range a.freeCount {
		a.freeCount[l] = map[int]int{}
	}
	for _, cpu := range topo.cpus {
		if available.Contains(cpu) {
			a.free[cpu] = true
			a.nFree++
			for l, id := range topo.details[cpu] {
				a.freeCount[l][id]++
			}
		}
	}
	if a.satisfied() {
		return cpuset.New(), nil
	}
	if a.needed > a.nFree {
		return cpuset.New(), fmt.Errorf("not enough cpus available to satisfy request: requested=%d, available=%d", numCPUs, available.Size())
	}
	first, second := lvlNUMA, lvlSocket
	if !a.numaFirst {
		first, second = lvlSocket, lvlNUMA
	}
	for _, l := range []int{first, second} {
		a.takeFull(l)
		if a.satisfied() {
			return cpuset.New(a.result...), nil
		}
	}
	if !a.spread {
		a.takeFull(lvlCore)
		if a.satisfied() {
			return cpuset.New(a.result...), nil
		}
	}
	order := a.sortCPUsPacked()
	if a.spread {
		order = a.sortCPUsSpread()
	}
	for _, cpu := range order {
		a.take([]int{cpu})
		if a.satisfied() {
			return cpuset.New(a.result...), nil
		}
	}
	return cpuset.New(), fmt.Errorf("failed to allocate cpus")
}

func (a *accumulator) satisfied() bool { return a.needed < 1 }

// take claims cpus. Like the kubelet's, it counts every CPU given as
// needed, taken before or not.
func (a *accumulator) take(cpus []int) {
	for _, cpu := range cpus {
		if !a.free[cpu] {
			continue
		}
		a.free[cpu] = false
		a.nFree--
		for l, id := range a.topo.details[cpu] {
			if a.freeCount[l][id]--; a.freeCount[l][id] == 0 {
				delete(a.freeCount[l], id)
			}
		}
	}
	a.result = append(a.result, cpus...)
	a.needed -= len(cpus)
}

// isFree is the kubelet's isNUMANodeFree, isSocketFree and isCoreFree: a
// NUMA node is free when all its CPUs are; a socket or core when its free
// CPUs number cpusPerSocket or cpusPerCore.
func (a *accumulator) isFree(l, id int) bool {
	n := a.freeCount[l][id]
	switch l {
	case lvlNUMA:
		return n == len(a.topo.groups[l][id])
	case lvlSocket:
		return n == a.topo.cpusPerSocket()
	default:
		return n == a.topo.cpusPerCore()
	}
}

// takeFull takes every free group of level l, in sorted order, whose size
// the accumulator still needs in full. The list is made once, before
// taking, as the kubelet's is.
func (a *accumulator) takeFull(l int) {
	var free []int
	for _, id := range a.sorted(l) {
		if a.isFree(l, id) {
			free = append(free, id)
		}
	}
	for _, id := range free {
		if cpus := a.topo.groups[l][id]; a.needed >= len(cpus) {
			a.take(cpus)
		}
	}
}

// sortByFree sorts ids of level l by their number of free CPUs, then id.
func (a *accumulator) sortByFree(ids []int, l int) {
	slices.SortFunc(ids, func(x, y int) int {
		if c := a.freeCount[l][x] - a.freeCount[l][y]; c != 0 {
			return c
		}
		return x - y
	})
}

// within lists the ids of level l that have free CPUs in each of the
// groups of level parent (in their order), each group's ids sorted by free
// CPUs.
func (a *accumulator) within(parents []int, parent, l int) []int {
	var out []int
	for _, p := range parents {
		seen := map[int]bool{}
		var ids []int
		for _, cpu := range a.topo.groups[parent][p] {
			if id := a.topo.details[cpu][l]; a.free[cpu] && !seen[id] {
				seen[id] = true
				ids = append(ids, id)
			}
		}
		a.sortByFree(ids, l)
		out = append(out, ids...)
	}
	return out
}

// sorted is the kubelet's sortAvailableNUMANodes, sortAvailableSockets and
// sortAvailableCores: the groups with free CPUs, the higher of NUMA node
// and socket sorted by free CPUs, each lower level sorted within its
// parent.
func (a *accumulator) sorted(l int) []int {
	top, below := lvlNUMA, lvlSocket
	if !a.numaFirst {
		top, below = lvlSocket, lvlNUMA
	}
	switch l {
	case top:
		ids := slices.Collect(maps.Keys(a.freeCount[l]))
		a.sortByFree(ids, l)
		return ids
	case below:
		return a.within(a.sorted(top), top, l)
	default:
		return a.within(a.sorted(below), below, lvlCore)
	}
}

func (a *accumulator) sortCPUsPacked() []int {
	var out []int
	for _, core := range a.sorted(lvlCore) {
		for _, cpu := range a.topo.groups[lvlCore][core] {
			if a.free[cpu] {
				out = append(out, cpu)
			}
		}
	}
	return out
}

func (a *accumulator) sortCPUsSpread() []int {
	var out []int
	for _, socket := range a.sorted(lvlSocket) {
		for _, cpu := range a.topo.groups[lvlSocket][socket] {
			if a.free[cpu] {
				out = append(out, cpu)
			}
		}
	}
	return out
}
