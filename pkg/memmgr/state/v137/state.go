// Package state holds the memory_manager_state checkpoint types of kubelet
// 1.37 whose names clash with kubelet 1.36's (package
// github.com/hotplugd/hotplugd/pkg/memmgr/state), shaped and named exactly
// as kubelet v1.37's pkg/kubelet/cm/memorymanager/state types, so that both
// layouts coexist in hotplugd.
//
// The names are not a matter of taste, as in the parent package: the
// kubelet's JSON errors name the Go struct type ("Go struct field
// MemoryManagerCheckpoint.data of type string"), and its V1 checksum is a
// spew dump that prints the package and type names. The per-node and
// per-assignment types are the parent package's: they print as
// "state.NUMANodeMap" from either package.
package state

import (
	"github.com/hotplugd/hotplugd/internal/checksum"
	v136 "github.com/hotplugd/hotplugd/pkg/memmgr/state"
)

// MemoryManagerCheckpoint is the file's layout as kubelet 1.37 writes it
// (its MemoryManagerCheckpointV3, an alias of this name): the V1 fields, for
// older kubelets, with their checksum over the V1 struct under the legacy
// name; then Data, the JSON of CheckpointData, the authoritative payload,
// and DataChecksum, the FNV-32a hash of the dump of the Data string. Kubelet
// 1.37 reads Data only and verifies DataChecksum only.
type MemoryManagerCheckpoint struct {
	v136.MemoryManagerCheckpointV1 `json:",inline"`

	Data         string            `json:"data"`
	DataChecksum checksum.Checksum `json:"dataChecksum"`

	// CheckpointData is Data decoded; it is not in the file itself.
	CheckpointData MemoryManagerCheckpointData `json:"-"`
}

// MemoryManagerCheckpointData is what Data holds.
type MemoryManagerCheckpointData struct {
	PolicyName   string                          `json:"policyName"`
	MachineState v136.NUMANodeMap                `json:"machineState"`
	Entries      v136.ContainerMemoryAssignments `json:"entries,omitempty"`
	PodEntries   v136.PodMemoryAssignments       `json:"podEntries,omitempty"`
}
