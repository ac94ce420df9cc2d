package topology

import (
	"slices"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
)

// Capacity returns what a freshly started kubelet puts in
// node.status.capacity for cpu, memory and every hugepage size, with the
// kubelet's own quantity formats: cpu in DecimalSI ("2", "448"), memory and
// hugepages in BinarySI ("24684092Ki", "1Gi", "0").
func (s *Snapshot) Capacity() v1.ResourceList {
	c := v1.ResourceList{
		v1.ResourceCPU:    *resource.NewMilliQuantity(int64(s.kubeletCPUs()*1000), resource.DecimalSI),
		v1.ResourceMemory: *resource.NewQuantity(int64(s.Memory.MemTotalBytes), resource.BinarySI),
	}
	for _, hp := range s.HugePages {
		c[HugePageResourceName(hp.PageSizeKiB)] = *resource.NewQuantity(int64(hp.Bytes()), resource.BinarySI)
	}
	return c
}

// HugePageResourceName returns the resource name of a hugepage size,
// 2048 -> "hugepages-2Mi", 1048576 -> "hugepages-1Gi".
func HugePageResourceName(pageSizeKiB uint64) v1.ResourceName {
	// x86-64's sizes, named without a Quantity: every reconcile names
	// them, for capacity and for the diff.
	switch pageSizeKiB {
	case 2048:
		return v1.ResourceHugePagesPrefix + "2Mi"
	case 1048576:
		return v1.ResourceHugePagesPrefix + "1Gi"
	}
	size := resource.NewQuantity(int64(pageSizeKiB*1024), resource.BinarySI)
	return v1.ResourceName(v1.ResourceHugePagesPrefix + size.String())
}

// kubeletCPUs counts CPUs the way cAdvisor's machine info does, which is
// what the kubelet reports as cpu capacity.
func (s *Snapshot) kubeletCPUs() int {
	// Without NUMA nodes cAdvisor counts every cpuN directory, offline or not.
	if len(s.NUMANodes) == 0 {
		return len(s.CPUs.List)
	}
	// With NUMA nodes it walks each node's cpuN links and counts the CPUs
	// that are online and have core_id and physical_package_id files
	// (sysinfo.GetNodesInfo and getCoresInfo); an id that reads -1 counts.
	n := 0
	for _, node := range s.NUMANodes {
		for _, id := range node.CPUs.List() {
			if c, ok := s.CPU(id); ok && c.Online && c.HasTopology() {
				n++
			}
		}
	}
	return n
}

// CPU returns the CPU with the given id.
func (s *Snapshot) CPU(id int) (CPU, bool) {
	i, ok := slices.BinarySearchFunc(s.CPUs.List, id, func(c CPU, id int) int { return c.ID - id })
	if !ok {
		return CPU{}, false
	}
	return s.CPUs.List[i], true
}

// OnlineCPUs returns the CPUs the kubelet's CPU manager sees: those counted
// in the cpu capacity (online, linked under a NUMA node, with core_id and
// physical_package_id files). Their Package and Core may be -1, as cAdvisor
// reports them.
func (s *Snapshot) OnlineCPUs() []CPU {
	var out []CPU
	for _, c := range s.CPUs.List {
		if !c.Online || !c.HasTopology() {
			continue
		}
		if len(s.NUMANodes) > 0 && c.Node < 0 {
			continue
		}
		out = append(out, c)
	}
	return out
}
