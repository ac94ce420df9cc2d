package cpumgr

import (
	"errors"
	"fmt"

	"github.com/hotplugd/hotplugd/internal/kubeletstate"
)

// The verdicts; those shared with pkg/memmgr are package kubeletstate's.
var (
	// ErrCorrupt is a file the kubelet would not load: not JSON, a field of
	// the wrong type, an unparsable CPU list, or a checksum that does not
	// verify ("checkpoint is corrupted" in the kubelet's words). See
	// LoadError.
	ErrCorrupt = kubeletstate.ErrCorrupt
	// ErrUnknownFormat is JSON that is not a cpu_manager_state checkpoint at
	// all: not an object, or an object with no policyName, data or
	// dataChecksum key. See FormatError.
	ErrUnknownFormat = errors.New("not a cpu_manager_state checkpoint")
	// ErrUnsupportedFormat is a checkpoint in a format hotplugd recognises
	// but does not read (from Parse and ReadFile: V1 with assignments), or
	// a State whose Format Marshal does not write (one that is none of
	// FormatV1 to FormatV4 nor ""). See FormatError.
	ErrUnsupportedFormat = kubeletstate.ErrUnsupportedFormat
	// ErrInvalidState is a state the kubelet would refuse to start with.
	// See StartError.
	ErrInvalidState = kubeletstate.ErrInvalidState
	// ErrPolicyChanged is a checkpoint written under another CPU manager
	// policy than the one configured. It is also an ErrInvalidState.
	ErrPolicyChanged = kubeletstate.ErrPolicyChanged
	// ErrNeedsDrain is a rebuild that would drop an assignment whose CPUs
	// are gone or now reserved: the plan that comes with it lists the pods
	// to drain before planning again with Config.AllowDrop.
	ErrNeedsDrain = kubeletstate.ErrNeedsDrain
	// ErrUnrepairable is a state no rebuild can make valid for the kubelet
	// (the kubelet's own choice of CPUs leaves nothing valid to write).
	ErrUnrepairable = errors.New("state cannot be rebuilt")
	// ErrConfig is a CPU manager configuration the kubelet refuses to start
	// with, whatever its state file holds (NewConfig). See ConfigError.
	ErrConfig = kubeletstate.ErrConfig
	// ErrCannotPredict is a configuration the kubelet may well start with
	// but whose reserved CPUs hotplugd does not predict (NewConfig): the
	// state file cannot be judged. Not a refusal.
	ErrCannotPredict = kubeletstate.ErrCannotPredict
)

// ConfigError is a CPU manager configuration the kubelet refuses: Kubelet
// is the error the kubelet returns, word for word (from getReservedCPUs in
// cmd/kubelet/app for reservedSystemCPUs, else from cpumanager.NewManager;
// the kubelet exits with it, wrapped as "failed to run Kubelet: ...").
type ConfigError struct {
	Kubelet string
}

func (e *ConfigError) Error() string {
	return "cpumgr: the kubelet would refuse its configuration: " + e.Kubelet
}

// Is reports ErrConfig.
func (e *ConfigError) Is(target error) bool { return target == ErrConfig }

// LoadError is a checkpoint the kubelet's loader refuses. Kubelet is the
// reason in the kubelet's words, e.g. "checkpoint is corrupted" or
// "json: cannot unmarshal object into Go struct field
// CPUManagerCheckpointV1.entries of type string".
type LoadError struct {
	Kubelet string
	err     error
	// byReader is each kubelet loader's wording, when Parse refused the
	// file for all of them.
	byReader [numReaders]string
}

// KubeletFor is the refusal in the words of the kubelet cfg describes.
func (e *LoadError) KubeletFor(cfg Config) string {
	if m := e.byReader[cfg.reader()]; m != "" {
		return m
	}
	return e.Kubelet
}

func (e *LoadError) Error() string { return "corrupt checkpoint: " + e.Kubelet }

// Unwrap returns the underlying JSON or parse error, if any.
func (e *LoadError) Unwrap() error { return e.err }

// Is reports ErrCorrupt.
func (e *LoadError) Is(target error) bool { return target == ErrCorrupt }

// FormatError is a checkpoint hotplugd recognises and refuses (Parse: a V1
// file with assignments), a file that is not a checkpoint (Parse: Format
// ""), or a State in a format hotplugd does not write (Marshal).
type FormatError struct {
	// Format is the refused format: FormatV1 from Parse, the State's from
	// Marshal; "" for a file that is not a cpu_manager_state checkpoint.
	Format Format
	// Reason says why it is refused.
	Reason string
}

func (e *FormatError) Error() string {
	if e.Format == "" {
		return "not a cpu_manager_state checkpoint: " + e.Reason
	}
	return fmt.Sprintf("unsupported cpu_manager_state format %s: %s", e.Format, e.Reason)
}

// Is reports ErrUnknownFormat or ErrUnsupportedFormat.
func (e *FormatError) Is(target error) bool {
	if e.Format == "" {
		return target == ErrUnknownFormat
	}
	return target == ErrUnsupportedFormat
}

// Rule names the start-up check a state fails.
type Rule string

// The kubelet's start-up checks, in the order it makes them.
const (
	// RuleLoad: the kubelet's checkpoint loader refuses the file (under the
	// configured feature gates).
	RuleLoad Rule = "load"
	// RulePolicy: the checkpoint's policy is not the configured one, or the
	// configured policy is unknown.
	RulePolicy Rule = "policy"
	// RuleEmptyDefault: an empty default set with assignments.
	RuleEmptyDefault Rule = "empty-default"
	// RuleReserved: reserved CPUs missing from the default set (present in
	// it with strict-cpu-reservation).
	RuleReserved Rule = "reserved"
	// RuleOverlap: an assignment overlaps the default set.
	RuleOverlap Rule = "overlap"
	// RuleCPUs: the default set and the assignments do not add up to the
	// online CPUs.
	RuleCPUs Rule = "cpus"
)

// StartError is the kubelet's refusal of a state at start. Kubelet is the
// error the kubelet's cpumanager Start returns, word for word (the kubelet
// logs it as "start cpu manager error: " + Kubelet and exits).
type StartError struct {
	Rule    Rule
	Kubelet string
}

func (e *StartError) Error() string { return "cpumgr: kubelet would not start: " + e.Kubelet }

// Is reports ErrInvalidState; also ErrPolicyChanged for RulePolicy and
// ErrCorrupt for RuleLoad.
func (e *StartError) Is(target error) bool {
	switch target {
	case ErrInvalidState:
		return true
	case ErrPolicyChanged:
		return e.Rule == RulePolicy
	case ErrCorrupt:
		return e.Rule == RuleLoad
	}
	return false
}
