// Package state holds the memory_manager_state checkpoint type of kubelets
// 1.34 and 1.35, whose name clashes with kubelet 1.36's (package
// github.com/hotplugd/hotplugd/pkg/memmgr/state), named exactly as their
// pkg/kubelet/cm/memorymanager/state.MemoryManagerCheckpoint.
//
// Its fields are 1.36's MemoryManagerCheckpointV1, so its checksum (the
// FNV-32a hash of its spew dump) is the V1 checksum under the legacy name
// that every later kubelet writes. It exists for the JSON errors, which name
// the struct: "Go struct field MemoryManagerCheckpoint.policyName of type
// string" where kubelet 1.36 says MemoryManagerCheckpointV1.
package state

import (
	"github.com/hotplugd/hotplugd/internal/checksum"
	v136 "github.com/hotplugd/hotplugd/pkg/memmgr/state"
)

// MemoryManagerCheckpoint is the only layout kubelets 1.34 and 1.35 read
// and write.
type MemoryManagerCheckpoint struct {
	PolicyName   string                          `json:"policyName"`
	MachineState v136.NUMANodeMap                `json:"machineState"`
	Entries      v136.ContainerMemoryAssignments `json:"entries,omitempty"`
	Checksum     checksum.Checksum               `json:"checksum"`
}
