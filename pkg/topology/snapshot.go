package topology

import (
	"encoding/json"

	"k8s.io/utils/cpuset"
)

// CPUList is a set of CPU ids that marshals to JSON in the kernel's list
// format ("0-3,8-11").
type CPUList struct {
	cpuset.CPUSet
}

// MarshalJSON writes the set as a kernel CPU list string.
func (l CPUList) MarshalJSON() ([]byte, error) { return json.Marshal(l.String()) }

// UnmarshalJSON reads a kernel CPU list string.
func (l *CPUList) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return err
	}
	set, err := cpuset.Parse(s)
	if err != nil {
		return err
	}
	l.CPUSet = set
	return nil
}

// Snapshot is the machine's CPUs, memory and hugepages at one moment.
type Snapshot struct {
	CPUs      CPUs       `json:"cpus"`
	NUMANodes []NUMANode `json:"numaNodes"`
	Memory    Memory     `json:"memory"`
	// HugePages are the global persistent hugepages per size, ascending.
	HugePages []HugePages `json:"hugepages"`
	// DefaultHugePageSizeKiB is Hugepagesize of /proc/meminfo, the size
	// /proc/sys/vm/nr_hugepages counts; 0 without hugepage support.
	DefaultHugePageSizeKiB uint64 `json:"defaultHugePageSizeKiB"`
}

// CPUs describes the logical CPUs the kernel knows.
type CPUs struct {
	// Possible, Present and Online are the kernel's cpu/{possible,present,online} lists.
	Possible CPUList `json:"possible"`
	Present  CPUList `json:"present"`
	Online   CPUList `json:"online"`
	// List has one entry per cpuN directory, ordered by id.
	List []CPU `json:"list"`
}

// CPU is one logical CPU. Package, Die and Core are the ids the kernel writes
// in topology/{physical_package_id,die_id,core_id}. Two cases give -1: the
// file is absent (an offline CPU has no topology directory), or the kernel
// writes -1 because it does not know the id (physical_package_id on PowerVM
// LPARs, whose firmware gives no chip id; die_id without dies). For Package
// and Core, the ids cAdvisor reads, UnknownIDs and HasTopology tell the two
// apart; Die's -1 stays ambiguous (nothing here depends on it). Node is -1
// when the CPU is linked under no NUMA node.
type CPU struct {
	ID      int  `json:"id"`
	Online  bool `json:"online"`
	Package int  `json:"package"`
	Die     int  `json:"die"`
	Core    int  `json:"core"`
	Node    int  `json:"node"`
	// UnknownIDs is true when both topology/physical_package_id and
	// topology/core_id exist and at least one reads a negative id, which
	// Package or Core then holds as read. When it is false, a negative
	// Package or Core means that one of the two files is absent (the other
	// may have read -1): the CPU has no topology for cAdvisor.
	UnknownIDs bool `json:"unknownIDs,omitempty"`
}

// HasTopology reports whether the CPU has both topology/physical_package_id
// and topology/core_id, whatever they read. cAdvisor lists and counts such a
// CPU (with its ids as read, -1 included) and skips one where either file is
// absent (sysinfo.getCoresInfo: only os.IsNotExist makes it continue).
func (c CPU) HasTopology() bool {
	return c.UnknownIDs || (c.Package >= 0 && c.Core >= 0)
}

// NUMANode is one /sys/devices/system/node/nodeN.
type NUMANode struct {
	ID int `json:"id"`
	// CPUs are the CPUs linked under the node (cpuN entries), online or not.
	CPUs CPUList `json:"cpus"`
	// MemTotalBytes is the node's MemTotal; 0 when the node has no meminfo.
	MemTotalBytes uint64      `json:"memTotalBytes"`
	HugePages     []HugePages `json:"hugepages"`
}

// Memory describes the machine's memory.
type Memory struct {
	// MemTotalBytes is MemTotal of /proc/meminfo, what the kubelet reports.
	MemTotalBytes uint64 `json:"memTotalBytes"`
	// BlockSizeBytes is the memory hotplug block size; 0 without memory hotplug support.
	BlockSizeBytes uint64 `json:"blockSizeBytes"`
	// BlockCount is the number of memory blocks (memoryN directories);
	// 0 when not read (CapacitySnapshot).
	BlockCount int `json:"blockCount"`
	// Blocks counts memory blocks by state (online, offline,
	// going-offline); nil when not read (CapacitySnapshot).
	Blocks map[string]int `json:"blocks,omitempty"`
	// AutoOnlineBlocks is the policy for hot-added blocks (offline, online, online_movable ...).
	AutoOnlineBlocks string `json:"autoOnlineBlocks,omitempty"`

	defaultHugePageSizeKiB uint64
}

// HugePages is the number of persistent hugepages of one size.
type HugePages struct {
	PageSizeKiB uint64 `json:"pageSizeKiB"`
	Pages       uint64 `json:"pages"`
}

// Bytes returns the memory the pages take.
func (h HugePages) Bytes() uint64 { return h.PageSizeKiB * 1024 * h.Pages }
