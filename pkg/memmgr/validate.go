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
//  2. restoring the checkpoint, as cfg.Release's loader does with its
//     feature gates (see Parse): a file it cannot decode (ErrInvalid), a
//     checksum it does not accept (ErrCorrupt: e.g. a FormatV2 file under a
//     kubelet without PodLevelResourceManagers, a FormatV3 file whose
//     dataChecksum does not verify under kubelet 1.37), a policy name other
//     than the configured one (ErrPolicy);
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
	v, podLevel, err := restored(s, cfg)
	if err != nil {
		return err
	}
	if v.PolicyName != cfg.Policy {
		return policyError(v, cfg)
	}
	if cfg.Policy == PolicyNone {
		return nil // the None policy checks nothing
	}
	return validateStatic(v, snap, reserved, podLevel)
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

func policyError(s *State, cfg Config) error {
	return restoreError(ErrPolicy,
		fmt.Sprintf("[memorymanager] configured policy %q differs from state checkpoint policy %q", cfg.Policy, s.PolicyName), cfg.path(),
		"the memoryManagerPolicy changed: drain the node, then remove the file (its assignments belong to the old policy)", nil)
}

// validateStatic is step 3 of Validate, on the state the kubelet restored;
// podLevel says it restored pod-level entries.
func validateStatic(s *State, snap *topology.Snapshot, reserved systemReserved, podLevel bool) error {
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
