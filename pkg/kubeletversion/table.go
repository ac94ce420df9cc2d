package kubeletversion

// The feature gates and CPU manager options hotplugd consults.
const (
	GatePodLevelResourceManagers               = "PodLevelResourceManagers"
	GatePodLevelResources                      = "PodLevelResources"
	GateInPlacePodVerticalScalingExclusiveCPUs = "InPlacePodVerticalScalingExclusiveCPUs"
	GateCPUManagerPolicyAlphaOptions           = "CPUManagerPolicyAlphaOptions"
	GateCPUManagerPolicyBetaOptions            = "CPUManagerPolicyBetaOptions"
	// GateChangeContainerStatusOnKubeletRestart (1.35 on, deprecated and
	// off by default) brings back what every 1.34 kubelet does at a
	// restart: every running container's ready status is reset to false
	// until its readiness probe passes again (KEP-4781's fix changed it).
	GateChangeContainerStatusOnKubeletRestart = "ChangeContainerStatusOnKubeletRestart"

	OptFullPCPUsOnly             = "full-pcpus-only"
	OptDistributeCPUsAcrossNUMA  = "distribute-cpus-across-numa"
	OptAlignBySocket             = "align-by-socket"
	OptDistributeCPUsAcrossCores = "distribute-cpus-across-cores"
	OptStrictCPUReservation      = "strict-cpu-reservation"
	OptPreferAlignByUncoreCache  = "prefer-align-cpus-by-uncorecache"
)

// evictionHard is pkg/kubelet/eviction/defaults_linux.go, the same in every
// known release.
var evictionHard = map[string]string{
	"memory.available":   "100Mi",
	"nodefs.available":   "10%",
	"nodefs.inodesFree":  "5%",
	"imagefs.available":  "15%",
	"imagefs.inodesFree": "5%",
}

// releases is the table: one row per known minor, oldest first. Each value
// is read off that release's source (the file named in the field's doc) and
// checked by the oracle tests against Tested.
var releases = []*Release{
	{
		Minor:    34,
		Tested:   MustParse("v1.34.4"),
		CAdvisor: "v0.52.1",
		CPUState: CPUStateV2,
		MemState: MemStateV1,
		Gates: map[string]Gate{
			GatePodLevelResources:                      {Beta, true, false},
			GateInPlacePodVerticalScalingExclusiveCPUs: {Alpha, false, false},
			GateCPUManagerPolicyAlphaOptions:           {Alpha, false, false},
			GateCPUManagerPolicyBetaOptions:            {Beta, true, false},
		},
		CPUManagerOptions: map[string]Stage{
			OptAlignBySocket:             Alpha,
			OptDistributeCPUsAcrossCores: Alpha,
			OptStrictCPUReservation:      Beta,
			OptDistributeCPUsAcrossNUMA:  Beta,
			OptPreferAlignByUncoreCache:  Beta,
			OptFullPCPUsOnly:             GA,
		},
		EvictionHard: evictionHard,
		// A 1.34 kubelet resets the readiness of every running container
		// when it restarts (pkg/kubelet/prober: a new prober manager starts
		// every result at its initial value; KEP-4781 fixed it in 1.35).
		RestartResetsReadiness: true,
	},
	{
		Minor:    35,
		Tested:   MustParse("v1.35.4"),
		CAdvisor: "v0.53.0",
		CPUState: CPUStateV2,
		MemState: MemStateV1,
		Gates: map[string]Gate{
			GatePodLevelResources:                      {Beta, true, false},
			GateInPlacePodVerticalScalingExclusiveCPUs: {Alpha, false, false},
			GateCPUManagerPolicyAlphaOptions:           {Alpha, false, false},
			GateCPUManagerPolicyBetaOptions:            {Beta, true, false},
			GateChangeContainerStatusOnKubeletRestart:  {Deprecated, false, false},
		},
		CPUManagerOptions: map[string]Stage{
			OptAlignBySocket:             Alpha,
			OptDistributeCPUsAcrossCores: Alpha,
			OptDistributeCPUsAcrossNUMA:  Beta,
			OptPreferAlignByUncoreCache:  Beta,
			OptFullPCPUsOnly:             GA,
			OptStrictCPUReservation:      GA,
		},
		EvictionHard: evictionHard,
	},
	{
		Minor:    36,
		Tested:   MustParse("v1.36.3"),
		CAdvisor: "v0.56.2",
		CPUState: CPUStateV2V3,
		MemState: MemStateV1V2,
		Gates: map[string]Gate{
			GatePodLevelResourceManagers:               {Alpha, false, false},
			GatePodLevelResources:                      {Beta, true, false},
			GateInPlacePodVerticalScalingExclusiveCPUs: {Alpha, false, false},
			GateCPUManagerPolicyAlphaOptions:           {Alpha, false, false},
			GateCPUManagerPolicyBetaOptions:            {Beta, true, false},
			GateChangeContainerStatusOnKubeletRestart:  {Deprecated, false, false},
		},
		CPUManagerOptions: map[string]Stage{
			OptAlignBySocket:             Alpha,
			OptDistributeCPUsAcrossCores: Alpha,
			OptDistributeCPUsAcrossNUMA:  Beta,
			OptFullPCPUsOnly:             GA,
			OptStrictCPUReservation:      GA,
			OptPreferAlignByUncoreCache:  GA,
		},
		EvictionHard: evictionHard,
	},
	{
		Minor:    37,
		Tested:   MustParse("v1.37.2"),
		CAdvisor: "lib v0.60.5",
		CPUState: CPUStateV4,
		MemState: MemStateV3,
		Gates: map[string]Gate{
			// Beta in 1.37, but off by default.
			GatePodLevelResourceManagers:               {Beta, false, false},
			GatePodLevelResources:                      {Beta, true, false},
			GateInPlacePodVerticalScalingExclusiveCPUs: {Alpha, false, false},
			GateCPUManagerPolicyAlphaOptions:           {Alpha, false, false},
			GateCPUManagerPolicyBetaOptions:            {Beta, true, false},
			GateChangeContainerStatusOnKubeletRestart:  {Deprecated, false, false},
		},
		CPUManagerOptions: map[string]Stage{
			OptAlignBySocket:             Alpha,
			OptDistributeCPUsAcrossCores: Alpha,
			OptDistributeCPUsAcrossNUMA:  Beta,
			OptFullPCPUsOnly:             GA,
			OptStrictCPUReservation:      GA,
			OptPreferAlignByUncoreCache:  GA,
		},
		EvictionHard: evictionHard,
	},
}
