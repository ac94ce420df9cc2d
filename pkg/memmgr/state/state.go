// Package state holds the data of the kubelet's memory_manager_state
// checkpoint, shaped and named exactly as the kubelet's own
// pkg/kubelet/cm/memorymanager/state types (kubelet v1.36; the types of
// other releases whose names clash with these are in the subpackages v134
// and v137, also named state).
//
// The names are not a matter of taste: the kubelet's checksum is an FNV-32a
// hash over a spew dump of the checkpoint struct, and that dump prints the
// package name, the type names, the field names and the field types
// ("(*state.MemoryManagerCheckpoint){PolicyName:(string)Static
// MachineState:(state.NUMANodeMap)map[...]..."). Renaming a type, a field or
// this package, or changing a field's type, changes every checksum. Field
// order is the JSON key order of the file.
package state

import (
	v1 "k8s.io/api/core/v1"

	"github.com/hotplugd/hotplugd/internal/checksum"
)

// MemoryTable is one memory resource of one NUMA node, in bytes.
type MemoryTable struct {
	TotalMemSize   uint64 `json:"total"`
	SystemReserved uint64 `json:"systemReserved"`
	Allocatable    uint64 `json:"allocatable"`
	Reserved       uint64 `json:"reserved"`
	Free           uint64 `json:"free"`
}

// NUMANodeState is the memory state of one NUMA node.
type NUMANodeState struct {
	// NumberOfAssignments counts the memory blocks placed on the node (a
	// container with memory and hugepages counts twice).
	NumberOfAssignments int `json:"numberOfAssignments"`
	// MemoryMap has one table per resource: memory and every hugepage size.
	MemoryMap map[v1.ResourceName]*MemoryTable `json:"memoryMap"`
	// Cells is the group of NUMA nodes the node's assignments span: [N]
	// for a node used alone, [0,1] when assignments span nodes 0 and 1.
	Cells []int `json:"cells"`
}

// NUMANodeMap is the memory state of every NUMA node, by node id.
type NUMANodeMap map[int]*NUMANodeState

// Block is memory of one resource assigned to a container (or a pod) on a
// set of NUMA nodes.
type Block struct {
	NUMAAffinity []int           `json:"numaAffinity"`
	Type         v1.ResourceName `json:"type"`
	Size         uint64          `json:"size"`
}

// ContainerMemoryAssignments are the blocks of every container, by pod UID
// and container name.
type ContainerMemoryAssignments map[string]map[string][]Block

// PodMemoryAssignments are the pod-level blocks of pods managed as a whole
// (kubelet 1.36 with the PodLevelResourceManagers feature gate), by pod UID.
type PodMemoryAssignments map[string]PodEntry

// PodEntry is a pod's pod-level memory.
type PodEntry struct {
	MemoryBlocks []Block `json:"memoryBlocks,omitempty"`
}

// MemoryManagerCheckpoint is the file's layout as kubelet 1.36 writes it
// with the PodLevelResourceManagers feature gate on (the kubelet's
// MemoryManagerCheckpointV2, an alias of this name). Its checksum is over
// this struct, podEntries included. Kubelet 1.37 reads it as its own
// MemoryManagerCheckpointV2, whose dump it hashes under this name: the same
// checksum.
type MemoryManagerCheckpoint struct {
	PolicyName   string                     `json:"policyName"`
	MachineState NUMANodeMap                `json:"machineState"`
	Entries      ContainerMemoryAssignments `json:"entries,omitempty"`
	PodEntries   PodMemoryAssignments       `json:"podEntries,omitempty"`
	Checksum     checksum.Checksum          `json:"checksum"`
}

// MemoryManagerCheckpointV1 is the file's layout as kubelets write it
// without pod-level resource managers (the default). Its checksum is over
// this struct dumped under the legacy name MemoryManagerCheckpoint, which is
// what kubelets before 1.36 computed.
type MemoryManagerCheckpointV1 struct {
	PolicyName   string                     `json:"policyName"`
	MachineState NUMANodeMap                `json:"machineState"`
	Entries      ContainerMemoryAssignments `json:"entries,omitempty"`
	Checksum     checksum.Checksum          `json:"checksum"`
}
