package cpumgr

import (
	"errors"
	"fmt"
	"maps"
	"math"
	"slices"
	"strconv"

	v1 "k8s.io/api/core/v1"
	kubeletv1beta1 "k8s.io/kubelet/config/v1beta1"
	"k8s.io/utils/cpuset"

	"github.com/hotplugd/hotplugd/pkg/kubeletversion"
	"github.com/hotplugd/hotplugd/pkg/topology"
)

// CPU manager policies, as cpuManagerPolicy spells them.
const (
	PolicyNone   = "none"
	PolicyStatic = "static"
)

// DefaultPath is the kubelet's cpu_manager_state under the default root
// directory.
const DefaultPath = "/var/lib/kubelet/cpu_manager_state"

// The static policy options (cpuManagerPolicyOptions) that matter here.
const (
	optStrictCPUReservation      = "strict-cpu-reservation"
	optDistributeCPUsAcrossCores = "distribute-cpus-across-cores"
	optDistributeCPUsAcrossNUMA  = "distribute-cpus-across-numa"
	optPreferAlignByUncoreCache  = "prefer-align-cpus-by-uncorecache"
	optFullPCPUsOnly             = "full-pcpus-only"
	optAlignBySocket             = "align-by-socket"
)

// podLevelResourceManagers is the kubelet feature gate that switches a 1.36
// CPU manager to FormatV3 and makes a 1.37 one keep pod-level assignments.
const podLevelResourceManagers = kubeletversion.GatePodLevelResourceManagers

// Config is what the kubelet's CPU manager is started with, plus the
// operator's choice for PlanRebuild.
type Config struct {
	// Release is the kubelet's release row: which layouts it reads and
	// writes. nil means kubelet 1.36, for callers that predate the table;
	// NewConfig always sets it.
	Release *kubeletversion.Release
	// Policy is cpuManagerPolicy: PolicyNone or PolicyStatic.
	Policy string
	// Reserved are the CPUs the static policy keeps for the system: see
	// ReservedCPUs.
	Reserved cpuset.CPUSet
	// StrictReservation is the strict-cpu-reservation policy option: the
	// reserved CPUs are left out of the default set instead of kept in it.
	StrictReservation bool
	// PodLevelResourceManagers is the kubelet's feature gate of that name
	// (as Release.Enabled expands it, AllAlpha/AllBeta included): with it a
	// 1.36 kubelet reads FormatV3 (falling back to V2) and writes V3, and
	// without it a V3 file does not load; a 1.37 kubelet keeps pod-level
	// assignments in its V4 payload only with it.
	PodLevelResourceManagers bool
	// InPlaceExclusiveCPUs is the InPlacePodVerticalScalingExclusiveCPUs
	// gate: a 1.37 kubelet with it keeps each container's admission-time
	// CPUs (baselines) in its V4 payload.
	InPlaceExclusiveCPUs bool
	// Path is the state file's path, as the kubelet names it in its
	// messages; "" means DefaultPath.
	Path string
	// AllowDrop lets PlanRebuild drop the assignments that lost CPUs (the
	// operator drained their pods). Without it such a plan is not applied.
	AllowDrop bool
}

func (c Config) path() string {
	if c.Path == "" {
		return DefaultPath
	}
	return c.Path
}

func (c Config) release() *kubeletversion.Release {
	if c.Release == nil {
		return kubeletversion.ByMinor(36)
	}
	return c.Release
}

func (c Config) policy() string {
	if c.Policy == "" {
		return PolicyNone
	}
	return c.Policy
}

// NewConfig returns the CPU manager configuration of a kubelet of release
// rel running with kc on the machine snap, its state file at path ("" for
// DefaultPath). It checks what the kubelet checks when it creates its CPU
// manager (cpumanager.NewManager and, for the static policy,
// NewStaticPolicy, in their order): the policy, the reservation, the policy
// options as that release knows them and how they fit the machine and the
// topology manager's policy, and the reserved CPUs (ReservedCPUs). A
// configuration the kubelet refuses is a *ConfigError (ErrConfig) with the
// kubelet's words, or, for a reservation the kubelet cannot even parse, an
// error wrapping ErrConfig in hotplugd's words; one whose reserved CPUs
// hotplugd cannot predict wraps ErrCannotPredict.
func NewConfig(kc *kubeletv1beta1.KubeletConfiguration, snap *topology.Snapshot, path string, rel *kubeletversion.Release) (Config, error) {
	if rel == nil {
		return Config{}, errors.New("cpumgr: no kubelet release (programmer error)")
	}
	cfg := Config{
		Release:                  rel,
		Policy:                   kc.CPUManagerPolicy,
		PodLevelResourceManagers: rel.Enabled(kc.FeatureGates, podLevelResourceManagers),
		InPlaceExclusiveCPUs:     rel.Enabled(kc.FeatureGates, kubeletversion.GateInPlacePodVerticalScalingExclusiveCPUs),
		Path:                     path,
	}
	cfg.Policy = cfg.policy()
	switch cfg.Policy {
	case PolicyNone:
		if len(kc.CPUManagerPolicyOptions) > 0 {
			return Config{}, &ConfigError{Kubelet: fmt.Sprintf("new none policy error: None policy: received unsupported options=%v", kc.CPUManagerPolicyOptions)}
		}
		return cfg, nil
	case PolicyStatic:
	default:
		return Config{}, &ConfigError{Kubelet: fmt.Sprintf("unknown policy: \"%s\"", cfg.Policy)}
	}
	opts, err := staticOptions(kc, rel)
	if err != nil {
		return Config{}, err
	}
	cfg.StrictReservation = opts[optStrictCPUReservation]
	if cfg.Reserved, err = ReservedCPUs(kc, snap, rel); err != nil {
		return Config{}, err
	}
	return cfg, nil
}

// staticError is NewStaticPolicy's error as NewManager returns it.
func staticError(format string, a ...any) *ConfigError {
	return &ConfigError{Kubelet: "new static policy error: " + fmt.Sprintf(format, a...)}
}

// staticOptions parses cpuManagerPolicyOptions with the rules of release
// rel (NewStaticPolicyOptions): known names, options of alpha and beta level
// (the release's table) only with their feature gates, boolean values, no
// incompatible pairs. The kubelet takes the options in its map's order;
// they are taken here in name order, so of two bad options the one named
// may differ.
func staticOptions(kc *kubeletv1beta1.KubeletConfiguration, rel *kubeletversion.Release) (map[string]bool, error) {
	opts := map[string]bool{}
	for _, name := range slices.Sorted(maps.Keys(kc.CPUManagerPolicyOptions)) {
		value := kc.CPUManagerPolicyOptions[name]
		stage, known := rel.CPUManagerOptions[name]
		switch {
		case known && stage == kubeletversion.Alpha:
			if !rel.Enabled(kc.FeatureGates, kubeletversion.GateCPUManagerPolicyAlphaOptions) {
				return nil, staticError("CPU Manager Policy Alpha-level Options not enabled, but option %q provided", name)
			}
		case known && stage == kubeletversion.Beta:
			if !rel.Enabled(kc.FeatureGates, kubeletversion.GateCPUManagerPolicyBetaOptions) {
				return nil, staticError("CPU Manager Policy Beta-level Options not enabled, but option %q provided", name)
			}
		case known:
		default:
			return nil, staticError("unknown CPU Manager Policy option: %q", name)
		}
		b, err := strconv.ParseBool(value)
		if err != nil {
			return nil, staticError("bad value for option %q: %v", name, err)
		}
		opts[name] = b
	}
	for _, pair := range [][2]string{
		{optFullPCPUsOnly, optDistributeCPUsAcrossCores},
		{optDistributeCPUsAcrossNUMA, optDistributeCPUsAcrossCores},
		{optPreferAlignByUncoreCache, optDistributeCPUsAcrossCores},
		{optPreferAlignByUncoreCache, optDistributeCPUsAcrossNUMA},
	} {
		if opts[pair[0]] && opts[pair[1]] {
			return nil, staticError("static policy options %s and %s can not be used at the same time", pair[0], pair[1])
		}
	}
	return opts, nil
}

// checkOptionsFit is ValidateStaticPolicyOptions: align-by-socket does not
// go with the topology manager's single-numa-node policy, nor with a machine
// that has more sockets than NUMA nodes.
func checkOptionsFit(opts map[string]bool, kc *kubeletv1beta1.KubeletConfiguration, topo *cpuTopology) error {
	if !opts[optAlignBySocket] {
		return nil
	}
	if kc.TopologyManagerPolicy == kubeletv1beta1.SingleNumaNodeTopologyManagerPolicy {
		// (sic: the kubelet's spelling.)
		return staticError("Topolgy manager %s policy is incompatible with CPUManager %s policy option", kubeletv1beta1.SingleNumaNodeTopologyManagerPolicy, optAlignBySocket)
	}
	if topo.numSockets > topo.numNUMANodes {
		return staticError("Align by socket is not compatible with hardware where number of sockets are more than number of NUMA")
	}
	return nil
}

// ReservedCPUs returns the CPUs the kubelet's static policy reserves on the
// machine snap: reservedSystemCPUs when set (it must name online CPUs);
// otherwise the kubelet's own choice of ceil(systemReserved.cpu +
// kubeReserved.cpu) CPUs, taken with the static policy's topology-aware
// order (whole NUMA nodes and sockets, then whole cores, lowest first: 2 CPUs
// on 4 cores x 2 threads with siblings n and n+4 are {0,4}). The static
// policy requires a cpu reservation. Its errors are NewConfig's, in the
// kubelet's order: reservedSystemCPUs (getReservedCPUs), the reservation
// (NewManager), the options and how they fit (NewStaticPolicy), the reserved
// CPUs taken.
//
// The choice depends on the machine, so it can move when CPUs are added or
// removed; PlanRebuild handles that. hotplugd does not predict the choice
// under the distribute-cpus-across-numa and prefer-align-cpus-by-uncorecache
// options (an error wrapping ErrCannotPredict asks for reservedSystemCPUs
// instead).
func ReservedCPUs(kc *kubeletv1beta1.KubeletConfiguration, snap *topology.Snapshot, rel *kubeletversion.Release) (cpuset.CPUSet, error) {
	topo := kubeletTopology(snap)
	var specific cpuset.CPUSet
	if kc.ReservedSystemCPUs != "" {
		reserved, err := cpuset.Parse(kc.ReservedSystemCPUs)
		if err != nil {
			return cpuset.New(), &ConfigError{Kubelet: fmt.Sprintf("unable to parse reserved-cpus list: %s", err)}
		}
		if all := topo.all(); !reserved.IsSubsetOf(all) {
			return cpuset.New(), &ConfigError{Kubelet: fmt.Sprintf("reserved-cpus: %s is not a subset of online-cpus: %s", kc.ReservedSystemCPUs, all)}
		}
		specific = reserved
	}
	reservation, err := snap.Reservation(kc)
	if err != nil {
		return cpuset.New(), fmt.Errorf("cpumgr: %w: %w", ErrConfig, err)
	}
	q, ok := reservation[v1.ResourceCPU]
	switch {
	case !ok:
		// GetNodeAllocatableReservation leaves out what adds up to zero.
		return cpuset.New(), &ConfigError{Kubelet: "[cpumanager] unable to determine reserved CPU resources for static policy"}
	case q.IsZero():
		return cpuset.New(), &ConfigError{Kubelet: "[cpumanager] the static policy requires systemreserved.cpu + kubereserved.cpu to be greater than zero"}
	}
	n := int(math.Ceil(float64(q.MilliValue()) / 1000))
	opts, err := staticOptions(kc, rel)
	if err != nil {
		return cpuset.New(), err
	}
	if err := checkOptionsFit(opts, kc, topo); err != nil {
		return cpuset.New(), err
	}
	if specific.Size() > 0 {
		// (n is specific's size: it replaced the cpu reservations.)
		return specific, nil
	}
	for _, o := range []string{optDistributeCPUsAcrossNUMA, optPreferAlignByUncoreCache} {
		if opts[o] {
			return cpuset.New(), fmt.Errorf("cpumgr: %w with the %s option: set reservedSystemCPUs", ErrCannotPredict, o)
		}
	}
	strategy := sortPacked
	if opts[optDistributeCPUsAcrossCores] {
		strategy = sortSpread
	}
	// NewStaticPolicy ignores takeByTopology's error and checks the size.
	reserved, _ := takeByTopology(topo, topo.all(), n, strategy)
	if reserved.Size() != n {
		return cpuset.New(), staticError("[cpumanager] unable to reserve the required amount of CPUs (size of %s did not equal %d)", reserved, n)
	}
	return reserved, nil
}

// KubeletCPUs are the CPUs the kubelet sees on snap: what getReservedCPUs
// and the CPU manager take as the online CPUs (cpumanager/topology
// Discover's CPUDetails.CPUs()).
func KubeletCPUs(snap *topology.Snapshot) cpuset.CPUSet { return kubeletCPUs(snap) }
