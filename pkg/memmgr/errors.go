package memmgr

import (
	"fmt"

	"github.com/hotplugd/hotplugd/internal/kubeletstate"
)

// Errors a KubeletError unwraps to, to tell apart with errors.Is what a
// person has to do about it.
var (
	// ErrCorrupt: the kubelet's checkpoint loader refuses the file: it
	// cannot decode it (ErrInvalid), or the checksum does not verify.
	ErrCorrupt = kubeletstate.ErrCorrupt
	// ErrInvalid: the file is not a memory_manager_state the kubelet can
	// decode (truncated, not JSON, wrong types). Also an ErrCorrupt.
	ErrInvalid = fmt.Errorf("not a valid memory_manager_state: %w", kubeletstate.ErrCorrupt)
	// ErrUnsupportedFormat: a layout no known kubelet writes (Parse: a file
	// none of them accepts, with a field none of them knows; Marshal: an
	// unknown Format), or a Config whose release has a layout hotplugd does
	// not know. Callers step aside: the kubelet judges such a file itself.
	ErrUnsupportedFormat = kubeletstate.ErrUnsupportedFormat
	// ErrPolicyChanged: the file was written under another
	// memoryManagerPolicy.
	ErrPolicyChanged = kubeletstate.ErrPolicyChanged
	// ErrPolicy is ErrPolicyChanged, under its older name.
	ErrPolicy = ErrPolicyChanged
	// ErrConfig: the kubelet's memory manager configuration does not fit
	// this machine; no state file can fix it.
	ErrConfig = kubeletstate.ErrConfig
	// ErrInvalidState: a state the kubelet refuses at start; the Kinds
	// ErrMachineState and ErrAssignment are ones.
	ErrInvalidState = kubeletstate.ErrInvalidState
	// ErrMachineState: the file's machineState is not what the kubelet
	// computes for this machine and these assignments. PlanRebuild repairs
	// it.
	ErrMachineState = fmt.Errorf("machine state differs from the machine: %w", kubeletstate.ErrInvalidState)
	// ErrAssignment: an assignment names a NUMA node or a memory resource
	// the machine no longer has. PlanRebuild marks it NeedsDrain.
	ErrAssignment = fmt.Errorf("assignment no longer fits the machine: %w", kubeletstate.ErrInvalidState)
	// ErrNeedsDrain: a plan that would drop assignments was not allowed to.
	ErrNeedsDrain = kubeletstate.ErrNeedsDrain
)

// KubeletError is a state (or configuration) the kubelet's memory manager
// refuses at start. Kubelet is what the kubelet of the Config (its release
// and feature gates) says, verbatim (it logs it wrapped as "start memory
// manager error: ..." and exits); Detail is hotplugd's explanation of what
// differs.
type KubeletError struct {
	// Kind is one of the Err* values above.
	Kind error
	// Kubelet is the error the kubelet's memory manager returns.
	Kubelet string
	// Detail explains the error in terms of NUMA nodes and resources.
	Detail string
	// Cause is the underlying error (a JSON decoding error), if any.
	Cause error
}

func (e *KubeletError) Error() string {
	msg := "memmgr: the kubelet would refuse to start: " + e.Kubelet
	if e.Detail != "" {
		msg += ": " + e.Detail
	}
	return msg
}

// Unwrap returns Kind and Cause.
func (e *KubeletError) Unwrap() []error {
	if e.Cause != nil {
		return []error{e.Kind, e.Cause}
	}
	return []error{e.Kind}
}

// restoreError is the kubelet's message when it cannot restore its state
// from the checkpoint (state.NewCheckpointState).
func restoreError(kind error, reason, path, detail string, cause error) *KubeletError {
	return &KubeletError{
		Kind: kind,
		Kubelet: fmt.Sprintf("could not restore state from checkpoint: %s, please drain this node and delete the memory manager checkpoint file %q before restarting Kubelet",
			reason, path),
		Detail: detail,
		Cause:  cause,
	}
}
