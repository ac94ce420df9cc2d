package memmgr

import (
	"fmt"
	"strings"

	"github.com/hotplugd/hotplugd/pkg/memmgr/state"
	"github.com/hotplugd/hotplugd/pkg/topology"
)

// Validate returns nil when a kubelet configured with cfg would start its
// memory manager with state s on the machine snap, and otherwise the
// *KubeletError it would fail with. It follows the kubelet's start-up in
// order:
//
//  1. creating the policy (NewManager): an unknown policy; for Static,
//     reservedMemory naming a NUMA node the machine lacks, not adding up to
//     the node allocatable reservation, or reserving no memory (ErrConfig);
//  2. restoring the checkpoint: a checksum the kubelet's loader does not
//     accept with its feature gates (ErrCorrupt: a FormatV2 file under a
//     kubelet without PodLevelResourceManagers), a policy name other than
//     the configured one (ErrPolicy);
//  3. the Static policy's state check: assignments with an empty machine
//     state, assignments on a NUMA node or a resource the machine lacks
//     (ErrAssignment), or a machineState that differs from the one rebuilt
//     from the machine and the assignments (ErrMachineState, with the
//     differing nodes and resources in Detail).
//
// An empty machineState without assignments is valid: the kubelet fills it
// in itself.
func Validate(s *State, snap *topology.Snapshot, cfg Config) error {
	reserved, err := checkConfig(snap, cfg)
	if err != nil {
		return err
	}
	if err := checkRestore(s, cfg); err != nil {
		return err
	}
	if cfg.Policy == PolicyNone {
		return nil // the None policy checks nothing
	}
	return validateStatic(s, snap, cfg, reserved)
}

// checkConfig is step 1 of Validate.
func checkConfig(snap *topology.Snapshot, cfg Config) (systemReserved, error) {
	if err := checkPolicy(cfg); err != nil {
		return nil, err
	}
	if cfg.Policy != PolicyStatic {
		return nil, nil
	}
	return staticReservation(snap, cfg)
}

// checkRestore is step 2 of Validate.
func checkRestore(s *State, cfg Config) error {
	gate := cfg.PodLevelResourceManagers
	v := s.verified
	if v == notParsed || (v == verifiedV2) != (s.Format == FormatV2) {
		// A state built in memory (or whose Format was changed after it
		// was read) is judged as Marshal writes it.
		v = verifiedLegacy
		if s.Format == FormatV2 {
			v = verifiedV2
		}
	}
	// Without the gate the kubelet loads the V1 layout only and accepts a
	// zero checksum or either V1 hash; with it, the V2 layout, then V1 with
	// a zero checksum or the legacy hash.
	switch {
	case v == verifiedV2 && !gate:
		return restoreError(ErrCorrupt, "checkpoint is corrupted", cfg.path(),
			"the file is in format V2 (podEntries), written by a kubelet with the PodLevelResourceManagers feature gate, which this kubelet does not have", nil)
	case v == verifiedV1Name && gate:
		return restoreError(ErrCorrupt, "checkpoint is corrupted", cfg.path(),
			"the checksum is over the V1 layout under its own type name, which a kubelet with PodLevelResourceManagers does not accept", nil)
	}
	if s.PolicyName != cfg.Policy {
		return policyError(s, cfg)
	}
	return nil
}

func policyError(s *State, cfg Config) error {
	return restoreError(ErrPolicy,
		fmt.Sprintf("[memorymanager] configured policy %q differs from state checkpoint policy %q", cfg.Policy, s.PolicyName), cfg.path(),
		"the memoryManagerPolicy changed: drain the node, then remove the file (its assignments belong to the old policy)", nil)
}

// validateStatic is step 3 of Validate.
func validateStatic(s *State, snap *topology.Snapshot, cfg Config, reserved systemReserved) error {
	podLevel := cfg.PodLevelResourceManagers && s.Format == FormatV2
	if len(s.MachineState) == 0 {
		if len(s.Entries) != 0 {
			return &KubeletError{Kind: ErrMachineState,
				Kubelet: "[memorymanager] machine state can not be empty when it has memory assignments",
				Detail:  fmt.Sprintf("the state has %d assignments but no machineState", len(units(s, podLevel)))}
		}
		return nil
	}
	want := defaultMachineState(snap, reserved)
	for _, u := range units(s, podLevel) {
		if err := replay(want, u); err != nil {
			return err
		}
	}
	if diffs := compareMachineStates(s.MachineState, want); len(diffs) > 0 {
		return &KubeletError{Kind: ErrMachineState,
			Kubelet: "[memorymanager] the expected machine state is different from the real one",
			Detail:  strings.Join(diffs, "; ")}
	}
	return nil
}

// New returns the state a kubelet configured with cfg writes when it starts
// on the machine snap without a state file: for None an empty machine
// state, for Static the idle machine's accounting. It fails where such a
// kubelet would fail to start.
func New(snap *topology.Snapshot, cfg Config) (*State, error) {
	reserved, err := checkConfig(snap, cfg)
	if err != nil {
		return nil, err
	}
	s := &State{
		PolicyName:   cfg.Policy,
		MachineState: state.NUMANodeMap{},
		Entries:      state.ContainerMemoryAssignments{},
		Format:       formatFor(cfg),
	}
	if s.Format == FormatV2 {
		s.PodEntries = state.PodMemoryAssignments{}
	}
	if cfg.Policy == PolicyStatic {
		s.MachineState = defaultMachineState(snap, reserved)
	}
	return s, nil
}

func formatFor(cfg Config) Format {
	if cfg.PodLevelResourceManagers {
		return FormatV2
	}
	return FormatV1
}
