// Package topology takes a snapshot of the machine's CPUs, memory and
// hugepages from sysfs and procfs, and predicts what a freshly started kubelet
// would report for them in node.status.capacity and node.status.allocatable.
//
// It reads, under a configurable sysfs root (default /sys):
//
//	devices/system/cpu/{possible,present,online}
//	devices/system/cpu/cpuN/topology/{physical_package_id,die_id,core_id}
//	devices/system/node/nodeN/{cpulist,meminfo}
//	devices/system/node/nodeN/hugepages/hugepages-<size>kB/nr_hugepages
//	devices/system/memory/{block_size_bytes,auto_online_blocks,memoryN/state}
//	kernel/mm/hugepages/hugepages-<size>kB/nr_hugepages
//
// and lists the directories whose entries are numbered or sized (cpuN,
// nodeN, hugepages-<size>kB, memoryN). Snapshot takes a node's CPUs from the
// cpuN links in its directory and reads every memoryN/state;
// CapacitySnapshot takes them from the node's cpulist, does not list the
// memoryN blocks and reads neither their state nor auto_online_blocks.
// Under a configurable procfs root (default /proc) it reads:
//
//	meminfo
//
// It never writes. CapacitySnapshot keeps the sysfs and procfs files it read
// open for the next call, which reads each again from its start: the kernel
// produces their content on every read, and fails every read of a file it
// removed (a CPU gone offline), which is then opened by its name again.
// What the kernel fixes at boot (cpu/possible, memory/block_size_bytes, the
// hugepage sizes) is read once. Files on any other file system (a fixture
// tree) are opened and read on every call.
//
// The kubelet takes its capacity from cAdvisor's machine info once, at start.
// Capacity reproduces cAdvisor's rules exactly, including their quirks: with
// NUMA nodes, cpu counts the online CPUs linked under a node that expose a core
// and package id (only a missing file leaves a CPU out: an id that reads -1,
// as on PowerVM LPARs, counts); without NUMA nodes (a kernel built without CONFIG_NUMA) it
// counts every cpuN directory, online or not. memory is MemTotal from
// /proc/meminfo, not the sum of the nodes. Every hugepage size directory gives
// a hugepages-<size> resource, even when its count is zero.
//
// Reading is separated from parsing: the parse functions are pure and
// table-tested; the FS methods only open files under the roots. Optional
// files (no NUMA directory, no hugepage support, no memory hotplug directory,
// offline CPUs without a topology directory) are absent the way the kernel
// leaves them absent; a malformed file is an error naming its path.
package topology
