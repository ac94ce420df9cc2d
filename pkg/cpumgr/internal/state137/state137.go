// Package state137 declares kubelet 1.37's cpu_manager_state layout (V4)
// under the kubelet's own type and field names
// (k8s.io/kubernetes/pkg/kubelet/cm/cpumanager/state at v1.37.2), and nothing
// else. As for package state, the names matter: encoding/json names the Go
// struct in the errors the kubelet reports ("Go struct field
// CPUManagerCheckpoint.data of type string"), and the embedded V2 fields are
// hashed as the V2 checkpoint of package state. It is a package of its own
// because 1.37 gives the name CPUManagerCheckpoint to V4, which 1.36 gave to
// V3.
package state137

import (
	"github.com/hotplugd/hotplugd/internal/checksum"
	"github.com/hotplugd/hotplugd/pkg/cpumgr/internal/state"
)

// CPUManagerCheckpoint is the V4 layout: the V2 fields, kept for kubelets
// before 1.37, and the authoritative payload as a JSON string with its own
// checksum.
type CPUManagerCheckpoint struct {
	state.CPUManagerCheckpointV2 `json:",inline"`

	// Data is the JSON of CheckpointData.
	Data string `json:"data"`
	// DataChecksum is FNV-32a of the dump of Data.
	DataChecksum checksum.Checksum `json:"dataChecksum"`

	// CheckpointData is Data decoded; never serialised itself.
	CheckpointData CPUManagerCheckpointData `json:"-"`
}

// CPUManagerCheckpointData is the V4 payload.
type CPUManagerCheckpointData struct {
	PolicyName    string                              `json:"policyName"`
	DefaultCPUSet string                              `json:"defaultCpuSet"`
	Entries       map[string]map[string]string        `json:"entries,omitempty"`
	PodEntries    state.PodCPUAssignments             `json:"podEntries,omitempty"`
	Baselines     map[string]map[string]ContainerCPUs `json:"baselines,omitempty"`
}

// ContainerCPUs is a container's admission-time CPUs
// (InPlacePodVerticalScalingExclusiveCPUs).
type ContainerCPUs struct {
	Baseline string `json:"baseline"`
}

// New returns the checkpoint as the kubelet allocates it before decoding
// into it (newCPUManagerCheckpointV4): maps made, so that absent fields stay
// empty.
func New() *CPUManagerCheckpoint {
	return &CPUManagerCheckpoint{
		CPUManagerCheckpointV2: state.CPUManagerCheckpointV2{Entries: map[string]map[string]string{}},
		CheckpointData: CPUManagerCheckpointData{
			Entries:    map[string]map[string]string{},
			PodEntries: state.PodCPUAssignments{},
			Baselines:  map[string]map[string]ContainerCPUs{},
		},
	}
}
