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

// CPU is one logical CPU. Package, Die and Core are -1 when the kernel does
// not expose them (an offline CPU has no topology directory); Node is -1 when
// the CPU is linked under no NUMA node.
type CPU struct {
	ID      int  `json:"id"`
	Online  bool `json:"online"`
	Package int  `json:"package"`
	Die     int  `json:"die"`
	Core    int  `json:"core"`
	Node    int  `json:"node"`
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
