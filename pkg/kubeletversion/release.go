package kubeletversion

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
)

// ErrUnknown is wrapped by Lookup's error for a kubelet hotplugd does not
// know: callers report and step aside.
var ErrUnknown = errors.New("a kubelet release hotplugd does not know")

// Stage is a feature gate's or a CPU manager option's maturity.
type Stage string

// The stages, as the kubelet's featuregate package names them.
const (
	Alpha Stage = "ALPHA"
	Beta  Stage = "BETA"
	GA    Stage = "GA"
	// Deprecated gates still exist and can be set; they go away later.
	Deprecated Stage = "DEPRECATED"
)

// Gate is one feature gate of a release: its stage and default there.
type Gate struct {
	Stage   Stage
	Default bool
	// Locked gates (LockToDefault) cannot be set to anything but Default.
	Locked bool
}

// CPUStateLayout is how a release reads and writes cpu_manager_state.
type CPUStateLayout string

// The CPU manager checkpoint generations.
const (
	// CPUStateV2: reads V1, else V2 (checksum 0, or FNV over the dump under
	// the name CPUManagerCheckpoint); writes V2. Kubelets 1.34, 1.35.
	CPUStateV2 CPUStateLayout = "V2"
	// CPUStateV2V3: without PodLevelResourceManagers reads V2 (a checksum
	// under the name CPUManagerCheckpointV2 is accepted too), else V1, and
	// writes V2; with it reads V3, else V2, else V1, and writes V3. Kubelet
	// 1.36.
	CPUStateV2V3 CPUStateLayout = "V2/V3"
	// CPUStateV4: reads V4 (the V2 fields for older kubelets plus "data",
	// the V3 payload with baselines as a JSON string, and "dataChecksum"),
	// else V3, else V2 (no V1); a V4 file that does not verify is refused
	// without falling back; writes V4 whatever the gates. Kubelet 1.37.
	CPUStateV4 CPUStateLayout = "V4"
)

// MemStateLayout is how a release reads and writes memory_manager_state.
type MemStateLayout string

// The memory manager checkpoint generations.
const (
	// MemStateV1: reads and writes V1 (policyName, machineState, entries,
	// checksum). Kubelets 1.34, 1.35.
	MemStateV1 MemStateLayout = "V1"
	// MemStateV1V2: V1; with PodLevelResourceManagers reads V2 (podEntries),
	// else V1, and writes V2. Kubelet 1.36.
	MemStateV1V2 MemStateLayout = "V1/V2"
	// MemStateV3: reads V3 (the V1 fields plus "data" and "dataChecksum"),
	// else V2, else V1; a V3 file that does not verify is refused; writes
	// V3 whatever the gates. Kubelet 1.37.
	MemStateV3 MemStateLayout = "V3"
)

// Release is what hotplugd knows of one minor release of the kubelet.
type Release struct {
	// Minor is the minor version: 37 for 1.37.
	Minor int
	// Tested is the patch release the oracle tests run (test/kubeletcompat):
	// every rule of the row is checked against that release's own code.
	Tested Version
	// CAdvisor is the cAdvisor release Tested is built with (capacity comes
	// from its machine.Info).
	CAdvisor string

	CPUState CPUStateLayout
	MemState MemStateLayout

	// Gates are the feature gates hotplugd consults, as the release
	// defines them (pkg/features/kube_features.go); a gate missing here
	// does not exist in the release and a kubelet that is given it refuses
	// to start.
	Gates map[string]Gate

	// CPUManagerOptions are the static policy options and their stage
	// (pkg/kubelet/cm/cpumanager/policy_options.go): alpha options need
	// CPUManagerPolicyAlphaOptions, beta ones CPUManagerPolicyBetaOptions.
	CPUManagerOptions map[string]Stage

	// EvictionHard is the hard eviction default a loaded configuration file
	// gets when it sets no evictionHard (pkg/kubelet/eviction/defaults_linux.go);
	// mergeDefaultEvictionSettings merges it into a partial one.
	EvictionHard map[string]string

	// InPlaceNodeResourceResize says whether the release has that feature
	// gate (a kubelet that resizes its node in place itself). None up to
	// 1.37 does; see ResizesInPlace.
	InPlaceNodeResourceResize bool

	// RestartResetsReadiness: a restart of this release's kubelet sets
	// every running container's ready status to false until its readiness
	// probe passes again, whatever its gates (1.34). From 1.35 the ready
	// status survives the restart unless
	// GateChangeContainerStatusOnKubeletRestart is on; see
	// ResetsReadinessOnRestart.
	RestartResetsReadiness bool
}

// String names the release: "kubelet 1.37 (tested v1.37.2)".
func (r *Release) String() string {
	return fmt.Sprintf("kubelet 1.%d (tested %s)", r.Minor, r.Tested)
}

// Lookup returns the release row for the kubelet version v. Any patch
// release of a known minor is known; a pre-release (v1.38.0-alpha.0,
// v1.37.0-rc.1) and a minor outside the table are not: the error wraps
// ErrUnknown and says why.
func Lookup(v Version) (*Release, error) {
	if v.IsZero() {
		return nil, fmt.Errorf("kubeletversion: the kubelet's version is unknown: %w", ErrUnknown)
	}
	if v.Pre != "" {
		return nil, fmt.Errorf("kubeletversion: kubelet %s is a pre-release (hotplugd knows %s): %w", v, Known(), ErrUnknown)
	}
	if v.Major == 1 {
		for _, r := range releases {
			if r.Minor == v.Minor {
				return r, nil
			}
		}
	}
	return nil, fmt.Errorf("kubeletversion: kubelet %s (hotplugd knows %s): %w", v, Known(), ErrUnknown)
}

// Known lists the known minors: "1.34, 1.35, 1.36, 1.37".
func Known() string {
	s := make([]string, len(releases))
	for i, r := range releases {
		s[i] = fmt.Sprintf("1.%d", r.Minor)
	}
	return strings.Join(s, ", ")
}

// Releases returns the known releases, oldest first.
func Releases() []*Release { return slices.Clone(releases) }

// ByMinor returns the release row of 1.<minor>, or nil.
func ByMinor(minor int) *Release {
	for _, r := range releases {
		if r.Minor == minor {
			return r
		}
	}
	return nil
}

// The meta-gates of the kubelet's feature gate.
const (
	AllAlpha = "AllAlpha"
	AllBeta  = "AllBeta"
)

// Enabled says whether the feature gate name is on in a kubelet of this
// release given featureGates (the effective configuration's map, where
// --feature-gates is already merged), as the kubelet's feature gate decides:
// an explicit setting wins; else AllAlpha (AllBeta) sets every alpha (beta)
// gate that is not locked; else the release's default. A gate the release
// does not have is off.
func (r *Release) Enabled(featureGates map[string]bool, name string) bool {
	g, ok := r.Gates[name]
	if !ok {
		return false
	}
	if v, set := featureGates[name]; set && !g.Locked {
		return v
	}
	if !g.Locked {
		switch g.Stage {
		case Alpha:
			if v, set := featureGates[AllAlpha]; set {
				return v
			}
		case Beta:
			if v, set := featureGates[AllBeta]; set {
				return v
			}
		}
	}
	return g.Default
}

// EvictionHardDefault returns a copy of the release's hard eviction
// defaults.
func (r *Release) EvictionHardDefault() map[string]string { return maps.Clone(r.EvictionHard) }

// ResetsReadinessOnRestart says whether restarting a kubelet of this
// release with featureGates takes every running pod with a readiness probe
// out of its Services' endpoints until the probe passes again: always on
// 1.34, on 1.35 and later only with ChangeContainerStatusOnKubeletRestart
// (deprecated, off by default) turned on.
func (r *Release) ResetsReadinessOnRestart(featureGates map[string]bool) bool {
	return r.RestartResetsReadiness || r.Enabled(featureGates, GateChangeContainerStatusOnKubeletRestart)
}

// ResizesInPlace says whether a kubelet of this release with featureGates
// follows the machine's CPUs and memory itself, so that hotplugd steps
// aside (reports, never restarts). No release up to 1.37 has the
// InPlaceNodeResourceResize gate (KEP-3953), and a kubelet refuses a gate it
// does not know, so this is false for every known release today: it turns
// on when a release row sets InPlaceNodeResourceResize (with the gate in
// Gates) and the gate is enabled on the node.
func (r *Release) ResizesInPlace(featureGates map[string]bool) bool {
	return r.InPlaceNodeResourceResize && r.Enabled(featureGates, "InPlaceNodeResourceResize")
}
