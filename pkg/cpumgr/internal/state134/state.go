// Package state declares kubelet 1.34's and 1.35's V2 cpu_manager_state
// layout under those releases' own names: their V2 type is
// CPUManagerCheckpoint (CPUManagerCheckpointV2 is an alias), so their JSON
// errors say "Go struct field CPUManagerCheckpoint.checksum", and its dump,
// hashed for the checksum, is "(*state.CPUManagerCheckpoint){...}". The
// package is named state, as theirs is, for that dump.
package state

import "github.com/hotplugd/hotplugd/internal/checksum"

// CPUManagerCheckpoint is the V2 layout of kubelets 1.34 and 1.35.
type CPUManagerCheckpoint struct {
	PolicyName    string                       `json:"policyName"`
	DefaultCPUSet string                       `json:"defaultCpuSet"`
	Entries       map[string]map[string]string `json:"entries,omitempty"`
	Checksum      checksum.Checksum            `json:"checksum"`
}
