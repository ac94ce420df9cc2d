package fixturegen

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
)

// Machine describes a synthetic machine. CPU ids follow the Intel scheme:
// cpu = thread*Sockets*CoresPerSocket + socket*CoresPerSocket + core.
type Machine struct {
	Sockets        int
	DiesPerSocket  int // 0 means 1; must divide CoresPerSocket
	CoresPerSocket int
	ThreadsPerCore int
	OfflineCPUs    []int // must not contain 0 (x86 cannot offline cpu0)
	KernelMax      int   // cpu/kernel_max (NR_CPUS-1); 0 means 8191

	// UnknownPackageIDs and UnknownCoreIDs are online CPUs whose
	// topology/physical_package_id or topology/core_id reads -1, the
	// kernel's value for an id it does not know (physical_package_id on a
	// PowerVM LPAR, whose firmware gives no chip id). /proc/cpuinfo shows
	// the same -1 in "physical id" or "core id", as x86 prints the ids sysfs
	// has; sibling lists still follow the layout.
	UnknownPackageIDs []int
	UnknownCoreIDs    []int

	// NoNUMA omits /sys/devices/system/node, as a kernel without
	// CONFIG_NUMA does. Nodes must still hold one node: it supplies the
	// memory and hugepage counts behind the global files.
	NoNUMA bool
	// Nodes are the NUMA nodes; Nodes[i] is node i. Every CPU belongs to
	// exactly one node.
	Nodes []Node

	// MemTotalKB is MemTotal in /proc/meminfo; 0 means the sum of the
	// nodes' MemTotalKB.
	MemTotalKB uint64

	// MemoryBlockSize is block_size_bytes; 0 omits
	// /sys/devices/system/memory (no CONFIG_MEMORY_HOTPLUG).
	MemoryBlockSize  uint64
	MemoryBlocks     []MemoryBlock
	AutoOnlineBlocks string // "" means "offline"

	// HugePageSizesKB lists the supported hugepage sizes; empty means a
	// kernel without hugetlb support: no hugepages directories, no
	// HugePages lines, no /proc/sys/vm/nr_hugepages.
	HugePageSizesKB []int
}

// Node is one NUMA node.
type Node struct {
	CPUs       []int // all CPUs of the node, online or not
	MemTotalKB uint64
	HugePages  map[int]int // nr_hugepages by size in kB; missing sizes are 0
}

// MemoryBlock is one /sys/devices/system/memory/memoryN directory.
type MemoryBlock struct {
	Index   int
	Offline bool
}

// Blocks returns n memory blocks numbered 0..n-1, online except the listed
// indices.
func Blocks(n int, offline ...int) []MemoryBlock {
	b := make([]MemoryBlock, n)
	for i := range b {
		b[i] = MemoryBlock{Index: i, Offline: slices.Contains(offline, i)}
	}
	return b
}

// CPUs returns the CPU ids in the inclusive range [from, to], a helper for
// Node.CPUs.
func CPUs(from, to int) []int {
	var c []int
	for i := from; i <= to; i++ {
		c = append(c, i)
	}
	return c
}

// NumCPUs returns the number of present (and possible) CPUs.
func (m Machine) NumCPUs() int { return m.Sockets * m.CoresPerSocket * m.ThreadsPerCore }

// cpuLoc is where a CPU sits.
type cpuLoc struct{ socket, die, core, thread int }

func (m Machine) loc(cpu int) cpuLoc {
	perThread := m.Sockets * m.CoresPerSocket
	r := cpu % perThread
	core := r % m.CoresPerSocket
	return cpuLoc{socket: r / m.CoresPerSocket, die: core / (m.CoresPerSocket / m.dies()), core: core, thread: cpu / perThread}
}

func (m Machine) dies() int { return max(m.DiesPerSocket, 1) }

func (m Machine) online(cpu int) bool { return !slices.Contains(m.OfflineCPUs, cpu) }

// ids returns the package and core id the kernel shows for cpu: its
// location's, or -1 where the machine makes it unknown.
func (m Machine) ids(cpu int) (pkg, core int) {
	l := m.loc(cpu)
	pkg, core = l.socket, l.core
	if slices.Contains(m.UnknownPackageIDs, cpu) {
		pkg = -1
	}
	if slices.Contains(m.UnknownCoreIDs, cpu) {
		core = -1
	}
	return pkg, core
}

// onlineWhere returns the online CPUs for which keep is true.
func (m Machine) onlineWhere(keep func(int) bool) []int {
	var c []int
	for cpu := range m.NumCPUs() {
		if m.online(cpu) && keep(cpu) {
			c = append(c, cpu)
		}
	}
	return c
}

// defaultHugePageKB is the default hugepage size: 2048 kB when supported,
// else the first size, else 0.
func (m Machine) defaultHugePageKB() int {
	switch {
	case len(m.HugePageSizesKB) == 0:
		return 0
	case slices.Contains(m.HugePageSizesKB, 2048):
		return 2048
	}
	return m.HugePageSizesKB[0]
}

// globalHugePages sums nr_hugepages of one size over the nodes.
func (m Machine) globalHugePages(sizeKB int) int {
	n := 0
	for _, nd := range m.Nodes {
		n += nd.HugePages[sizeKB]
	}
	return n
}

func (m Machine) validate() error {
	if m.Sockets < 1 || m.CoresPerSocket < 1 || m.ThreadsPerCore < 1 {
		return fmt.Errorf("fixturegen: sockets, cores and threads must be positive")
	}
	if m.CoresPerSocket%m.dies() != 0 {
		return fmt.Errorf("fixturegen: %d dies do not divide %d cores", m.dies(), m.CoresPerSocket)
	}
	n := m.NumCPUs()
	for _, c := range m.OfflineCPUs {
		if c <= 0 || c >= n {
			return fmt.Errorf("fixturegen: offline cpu %d: not in 1..%d", c, n-1)
		}
	}
	for _, c := range slices.Concat(m.UnknownPackageIDs, m.UnknownCoreIDs) {
		// An offline CPU has no topology directory to hold the -1.
		if c < 0 || c >= n || !m.online(c) {
			return fmt.Errorf("fixturegen: unknown topology id of cpu %d: not an online cpu", c)
		}
	}
	if len(m.Nodes) == 0 {
		return fmt.Errorf("fixturegen: no nodes")
	}
	seen := make([]bool, n)
	for i, nd := range m.Nodes {
		for _, c := range nd.CPUs {
			if c < 0 || c >= n || seen[c] {
				return fmt.Errorf("fixturegen: node %d: cpu %d out of range or in two nodes", i, c)
			}
			seen[c] = true
		}
		for size := range nd.HugePages {
			if !slices.Contains(m.HugePageSizesKB, size) {
				return fmt.Errorf("fixturegen: node %d: unsupported hugepage size %d kB", i, size)
			}
		}
	}
	if i := slices.Index(seen, false); i >= 0 {
		return fmt.Errorf("fixturegen: cpu %d is in no node", i)
	}
	return nil
}

// tree maps slash-separated paths to file contents or symlink targets.
type tree struct {
	files map[string][]byte
	links map[string]string
}

func (t *tree) file(path, format string, args ...any) {
	t.files[path] = fmt.Appendf(nil, format, args...)
}

// build renders the machine into a tree.
func (m Machine) build() (*tree, error) {
	if err := m.validate(); err != nil {
		return nil, err
	}
	t := &tree{files: map[string][]byte{}, links: map[string]string{}}
	m.buildCPU(t)
	if !m.NoNUMA {
		m.buildNodes(t)
	}
	m.buildMemory(t)
	for _, size := range m.HugePageSizesKB {
		d := fmt.Sprintf("sys/kernel/mm/hugepages/hugepages-%dkB/", size)
		nr := m.globalHugePages(size)
		t.file(d+"nr_hugepages", "%d\n", nr)
		t.file(d+"free_hugepages", "%d\n", nr)
		t.file(d+"resv_hugepages", "0\n")
		t.file(d+"surplus_hugepages", "0\n")
		t.file(d+"nr_overcommit_hugepages", "0\n")
	}
	if def := m.defaultHugePageKB(); def != 0 {
		t.file("proc/sys/vm/nr_hugepages", "%d\n", m.globalHugePages(def))
	}
	t.files["proc/meminfo"] = m.meminfo()
	t.files["proc/cpuinfo"] = m.cpuinfo()
	return t, nil
}

func (m Machine) buildCPU(t *tree) {
	const d = "sys/devices/system/cpu/"
	n := m.NumCPUs()
	all := CPUs(0, n-1)
	t.file(d+"possible", "%s", rangeList(all))
	t.file(d+"present", "%s", rangeList(all))
	t.file(d+"online", "%s", rangeList(m.onlineWhere(func(int) bool { return true })))
	t.file(d+"offline", "%s", rangeList(m.OfflineCPUs))
	km := m.KernelMax
	if km == 0 {
		km = 8191
	}
	t.file(d+"kernel_max", "%d\n", km)
	for cpu := range n {
		c := fmt.Sprintf("%scpu%d/", d, cpu)
		if cpu != 0 {
			t.file(c+"online", "%d\n", boolInt(m.online(cpu)))
		}
		if !m.online(cpu) {
			continue
		}
		l := m.loc(cpu)
		pkg, core := m.ids(cpu)
		t.file(c+"topology/physical_package_id", "%d\n", pkg)
		t.file(c+"topology/die_id", "%d\n", l.die)
		t.file(c+"topology/core_id", "%d\n", core)
		t.file(c+"topology/thread_siblings_list", "%s", rangeList(m.onlineWhere(func(o int) bool {
			ol := m.loc(o)
			return ol.socket == l.socket && ol.core == l.core
		})))
		t.file(c+"topology/core_siblings_list", "%s", rangeList(m.onlineWhere(func(o int) bool {
			return m.loc(o).socket == l.socket
		})))
	}
}

func (m Machine) buildNodes(t *tree) {
	const d = "sys/devices/system/node/"
	var ids, withCPU, withMem []int
	for i, nd := range m.Nodes {
		ids = append(ids, i)
		if slices.ContainsFunc(nd.CPUs, m.online) {
			withCPU = append(withCPU, i)
		}
		if nd.MemTotalKB > 0 {
			withMem = append(withMem, i)
		}
	}
	t.file(d+"online", "%s", rangeList(ids))
	t.file(d+"possible", "%s", rangeList(ids))
	t.file(d+"has_cpu", "%s", rangeList(withCPU))
	t.file(d+"has_memory", "%s", rangeList(withMem))
	t.file(d+"has_normal_memory", "%s", rangeList(withMem))
	for i, nd := range m.Nodes {
		p := fmt.Sprintf("%snode%d/", d, i)
		online := m.onlineWhere(func(c int) bool { return slices.Contains(nd.CPUs, c) })
		t.file(p+"cpulist", "%s", rangeList(online))
		t.file(p+"cpumap", "%s\n", cpumap(online, m.NumCPUs()))
		for _, c := range nd.CPUs {
			t.links[fmt.Sprintf("%scpu%d", p, c)] = fmt.Sprintf("../../cpu/cpu%d", c)
		}
		dist := make([]string, len(m.Nodes))
		for j := range dist {
			dist[j] = "21"
		}
		dist[i] = "10"
		t.file(p+"distance", "%s\n", strings.Join(dist, " "))
		t.files[p+"meminfo"] = m.nodeMeminfo(i)
		for _, size := range m.HugePageSizesKB {
			h := fmt.Sprintf("%shugepages/hugepages-%dkB/", p, size)
			t.file(h+"nr_hugepages", "%d\n", nd.HugePages[size])
			t.file(h+"free_hugepages", "%d\n", nd.HugePages[size])
			t.file(h+"surplus_hugepages", "0\n")
		}
	}
}

func (m Machine) buildMemory(t *tree) {
	if m.MemoryBlockSize == 0 {
		return
	}
	const d = "sys/devices/system/memory/"
	t.file(d+"block_size_bytes", "%x\n", m.MemoryBlockSize)
	auto := m.AutoOnlineBlocks
	if auto == "" {
		auto = "offline"
	}
	t.file(d+"auto_online_blocks", "%s\n", auto)
	for _, b := range m.MemoryBlocks {
		p := fmt.Sprintf("%smemory%d/", d, b.Index)
		state, zones := "online", "Normal"
		if b.Offline {
			state, zones = "offline", "Normal Movable"
		}
		t.file(p+"state", "%s\n", state)
		t.file(p+"online", "%d\n", boolInt(!b.Offline))
		t.file(p+"phys_device", "0\n")
		t.file(p+"valid_zones", "%s\n", zones)
	}
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

// rangeList formats CPUs or node ids the way the kernel's %*pbl does, with
// the trailing newline: "0-3,8-11\n"; an empty set is "\n".
func rangeList(ids []int) string {
	s := slices.Clone(ids)
	slices.Sort(s)
	s = slices.Compact(s)
	var parts []string
	for i := 0; i < len(s); {
		j := i
		for j+1 < len(s) && s[j+1] == s[j]+1 {
			j++
		}
		if i == j {
			parts = append(parts, strconv.Itoa(s[i]))
		} else {
			parts = append(parts, fmt.Sprintf("%d-%d", s[i], s[j]))
		}
		i = j + 1
	}
	return strings.Join(parts, ",") + "\n"
}

// cpumap formats a CPU set the way the kernel's %*pb does for nbits bits:
// 32-bit hex chunks separated by commas, most significant first, the first
// chunk only as wide as its bits need ("3" for 2 bits, "0f0f" for 16).
func cpumap(cpus []int, nbits int) string {
	var parts []string
	for hi := (nbits+31)/32*32 - 32; hi >= 0; hi -= 32 {
		width := min(nbits-hi, 32)
		var v uint32
		for _, c := range cpus {
			if c >= hi && c < hi+32 {
				v |= 1 << (c - hi)
			}
		}
		parts = append(parts, fmt.Sprintf("%0*x", (width+3)/4, v))
	}
	return strings.Join(parts, ",")
}
