package kubeletstart

import (
	"errors"
	"fmt"
	"strings"

	kubeletv1beta1 "k8s.io/kubelet/config/v1beta1"

	"github.com/hotplugd/hotplugd/pkg/kubeletconfig"
	"github.com/hotplugd/hotplugd/pkg/kubeletversion"
	"github.com/hotplugd/hotplugd/pkg/topology"
)

// Input is the kubelet about to start and the machine it starts on.
type Input struct {
	// Config is the kubelet's effective configuration, as
	// kubeletconfig.Kubelet.Config holds it (file, drop-ins, flags); nil is
	// a kubelet without a config file.
	Config *kubeletv1beta1.KubeletConfiguration
	// AllocatableIgnoresEviction is the kubelet's
	// --experimental-allocatable-ignore-eviction.
	AllocatableIgnoresEviction bool
	// Release is the release row of the kubelet; nil (a kubelet hotplugd
	// does not know) is not judged: Check fails with
	// kubeletversion.ErrUnknown.
	Release *kubeletversion.Release
	// Snapshot is the machine.
	Snapshot *topology.Snapshot
}

// Component names the part of the kubelet's start that refuses.
type Component string

// The components, in the order the kubelet's start meets them.
const (
	// FeatureGates: the kubelet's feature gate refuses the gates
	// (featureGate.SetFromMap), one Refusal per error. The kubelet exits
	// with "failed to set feature gates from initial flags-based config: "
	// and the words (several joined as one, in brackets).
	FeatureGates Component = "feature gates"
	// Configuration: ValidateKubeletConfiguration refuses a field, one
	// Refusal per error. The kubelet exits with "failed to validate kubelet configuration, error:
	// " and the words (several joined as one, in brackets).
	Configuration Component = "configuration"
	// ReservedCPUs: reservedSystemCPUs names CPUs the machine does not
	// have online (cmd/kubelet/app getReservedCPUs, any CPU manager
	// policy). The kubelet exits with "failed to run Kubelet: " and the
	// words.
	ReservedCPUs Component = "reserved CPUs"
	// Reservations: systemReserved, kubeReserved or evictionHard do not
	// parse (run(), and the eviction manager's ParseThresholdConfig).
	Reservations Component = "reservations"
	// TopologyManager: the topology manager refuses its policy, scope or
	// options on this machine (topologymanager.NewManager; the options
	// without their gate in run()).
	TopologyManager Component = "topology manager"
	// CPUManager: the CPU manager refuses its configuration
	// (cpumanager.NewManager, see cpumgr.NewConfig).
	CPUManager Component = "CPU manager"
	// MemoryManager: the memory manager refuses its configuration
	// (memorymanager.NewManager, see memmgr.CheckConfig).
	MemoryManager Component = "memory manager"
	// NodeAllocatable: the reservations exceed the capacity
	// (containerManagerImpl.validateNodeAllocatable, at the container
	// manager's Start: the kubelet logs "Failed to start ContainerManager"
	// with the words and exits).
	NodeAllocatable Component = "node allocatable"
)

// Refusal is one reason the kubelet refuses to start.
type Refusal struct {
	Component Component
	// Kubelet is the error the kubelet's code returns, in its words (see
	// Component for how the kubelet wraps it before it exits), unless
	// Paraphrase.
	Kubelet string
	// Paraphrase says Kubelet is hotplugd's account of a refusal whose
	// exact words it does not reproduce (an evictionHard statement the
	// kubelet's eviction code refuses).
	Paraphrase bool
}

func (r *Refusal) Error() string { return string(r.Component) + ": " + r.Kubelet }

// ErrRefused is wrapped by Check's error when the kubelet would refuse to
// start: the error is an *Error that lists why.
var ErrRefused = errors.New("the kubelet would refuse to start")

// Error is the kubelet's refusal to start: every reason Check found, in the
// order the kubelet's start meets them; the first is the one the kubelet
// exits with.
type Error struct {
	Release  *kubeletversion.Release
	Refusals []*Refusal
}

func (e *Error) Error() string {
	parts := make([]string, len(e.Refusals))
	for i, r := range e.Refusals {
		parts[i] = r.Error()
	}
	return fmt.Sprintf("kubeletstart: kubelet 1.%d would refuse to start: %s", e.Release.Minor, strings.Join(parts, "; "))
}

// Is reports ErrRefused.
func (e *Error) Is(target error) bool { return target == ErrRefused }

// Refusals returns the refusals of err when it is (or wraps) Check's
// *Error, nil otherwise.
func Refusals(err error) []*Refusal {
	var e *Error
	if errors.As(err, &e) {
		return e.Refusals
	}
	return nil
}

// Check says whether the kubelet of in.Release, started with in.Config on
// the machine in.Snapshot, would refuse to start for a reason this package
// knows (see the package documentation): nil when it starts as far as
// these rules go, an *Error wrapping ErrRefused that lists every refusal
// found, or, for a kubelet it cannot judge (no release), an error wrapping
// kubeletversion.ErrUnknown.
//
// The refusals come in the kubelet's order. Feature gates the kubelet
// refuses end the check there (everything else depends on them); so does a
// configuration its validation refuses. The steps after those, which depend
// on the machine, are each checked, those that need the reservations only
// when they parse: each refusal listed would stop the kubelet on its own.
func Check(in Input) error {
	if in.Release == nil {
		return fmt.Errorf("kubeletstart: no kubelet release to judge by: %w", kubeletversion.ErrUnknown)
	}
	t := gateTableFor(in.Release.Minor)
	if t == nil {
		return fmt.Errorf("kubeletstart: no feature gate table for %s: %w", in.Release, kubeletversion.ErrUnknown)
	}
	if in.Snapshot == nil {
		return errors.New("kubeletstart: no machine snapshot (programmer error)")
	}
	kc := in.Config
	if kc == nil {
		kc = kubeletconfig.Default()
	}
	refused := func(rs []*Refusal) error {
		if len(rs) == 0 {
			return nil
		}
		return &Error{Release: in.Release, Refusals: rs}
	}
	each := func(c Component, msgs []string) []*Refusal {
		rs := make([]*Refusal, len(msgs))
		for i, m := range msgs {
			rs[i] = &Refusal{Component: c, Kubelet: m}
		}
		return rs
	}
	fg, errs := t.set(kc.FeatureGates)
	if errs != nil {
		return refused(each(FeatureGates, errs))
	}
	if msgs := validate(kc); len(msgs) > 0 {
		return refused(each(Configuration, msgs))
	}
	return refused(machineRefusals(in, kc, fg))
}
