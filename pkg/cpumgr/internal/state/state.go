// Package state declares the layouts of the kubelet's cpu_manager_state
// checkpoint under the kubelet's own package, type and field names (those of
// k8s.io/kubernetes/pkg/kubelet/cm/cpumanager/state at v1.36.3), and nothing
// else.
//
// The names matter twice. The kubelet's checksum is FNV-32a over a spew
// "%#v" dump of the checkpoint struct, which prints
// "(*state.CPUManagerCheckpoint){PolicyName:(string)static ...}": package
// name, type names, field names, field order and field types are all part of
// the hashed text. And encoding/json names the Go struct in its errors
// ("json: cannot unmarshal object into Go struct field
// CPUManagerCheckpointV1.entries of type string"), which the kubelet reports
// verbatim. Declaring the same shapes here makes both come out the same
// without reimplementing either.
package state

import (
	"encoding/json"
	"fmt"

	"github.com/hotplugd/hotplugd/internal/checksum"
	"k8s.io/utils/cpuset"
)

// CPUManagerCheckpoint is the V3 layout (kubelet 1.36 with the
// PodLevelResourceManagers feature gate): V2 plus pod-level assignments.
type CPUManagerCheckpoint struct {
	PolicyName    string                       `json:"policyName"`
	DefaultCPUSet string                       `json:"defaultCpuSet"`
	Entries       map[string]map[string]string `json:"entries,omitempty"`
	PodEntries    PodCPUAssignments            `json:"podEntries,omitempty"`
	Checksum      checksum.Checksum            `json:"checksum"`
}

// CPUManagerCheckpointV2 is the V2 layout: entries keyed by pod UID, then
// container name.
type CPUManagerCheckpointV2 struct {
	PolicyName    string                       `json:"policyName"`
	DefaultCPUSet string                       `json:"defaultCpuSet"`
	Entries       map[string]map[string]string `json:"entries,omitempty"`
	Checksum      checksum.Checksum            `json:"checksum"`
}

// CPUManagerCheckpointV1 is the V1 layout (kubelets before 1.18): entries
// keyed by container ID.
type CPUManagerCheckpointV1 struct {
	PolicyName    string            `json:"policyName"`
	DefaultCPUSet string            `json:"defaultCpuSet"`
	Entries       map[string]string `json:"entries,omitempty"`
	Checksum      checksum.Checksum `json:"checksum"`
}

// PodCPUAssignments are the pod-level assignments by pod UID.
type PodCPUAssignments map[string]PodEntry

// PodEntry is one pod's pod-level CPU set. In JSON it is
// {"cpuSet":"2-3"}; the set itself is held parsed, as in the kubelet, so
// that the dump (and so the checksum) shows the set's internal form.
type PodEntry struct {
	CPUSet cpuset.CPUSet `json:"cpuSet,omitempty"`
}

type podEntryJSON struct {
	CPUSet string `json:"cpuSet,omitempty"`
}

// MarshalJSON writes the set as a canonical CPU list string.
func (p PodEntry) MarshalJSON() ([]byte, error) {
	return json.Marshal(podEntryJSON{CPUSet: p.CPUSet.String()})
}

// UnmarshalJSON reads a CPU list string.
func (p *PodEntry) UnmarshalJSON(b []byte) error {
	var e podEntryJSON
	if err := json.Unmarshal(b, &e); err != nil {
		return err
	}
	set, err := cpuset.Parse(e.CPUSet)
	if err != nil {
		return fmt.Errorf("failed to parse cpuset: %w", err)
	}
	p.CPUSet = set
	return nil
}
