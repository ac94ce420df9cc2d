package cpumgr

import (
	"fmt"
	"maps"
	"slices"

	"k8s.io/utils/cpuset"

	"github.com/hotplugd/hotplugd/pkg/topology"
)

// Validate returns what the CPU manager Start of the kubelet cfg describes
// (its release, cfg.Release, and gates) says about the state s on the
// machine snap: nil when the kubelet starts, else a *StartError with the
// kubelet's own message. The checks, in the kubelet's order:
//
//  1. the configured policy is one the kubelet knows (else "unknown
//     policy: ..."); then the file loads for cfg's release under its
//     PodLevelResourceManagers setting (see Parse), its V4 baselines parse
//     for a 1.37 kubelet with InPlacePodVerticalScalingExclusiveCPUs, and
//     its policy is the configured one, each failing as "could not restore
//     state from checkpoint: ..., please drain this node and delete the CPU
//     manager checkpoint file ...";
//  2. the none policy checks nothing more. The static policy:
//  3. an empty default set is an error when there are assignments
//     ("default cpuset cannot be empty"), else the kubelet fills it with
//     every CPU (but the reserved ones with strict-cpu-reservation) and
//     starts;
//  4. the reserved CPUs are all in the default set, or, with
//     strict-cpu-reservation, none of them is;
//  5. no assignment overlaps the default set;
//  6. the default set and every assignment (pod-level ones too with the
//     gate) add up to exactly the online CPUs (without the reserved ones
//     with strict-cpu-reservation): the check that fails after CPUs are
//     added or removed.
//
// The CPUs are those the kubelet sees (snap.OnlineCPUs). Where several
// assignments overlap the default set the kubelet names whichever its map
// iteration meets first; Validate names the first by pod UID and container.
func Validate(s *State, snap *topology.Snapshot, cfg Config) error {
	if err := validate(s, kubeletCPUs(snap), cfg); err != nil {
		return err
	}
	return nil
}

// restoreError is the kubelet's NewCheckpointState error.
func restoreError(rule Rule, reason string, cfg Config) *StartError {
	return &StartError{Rule: rule, Kubelet: fmt.Sprintf("could not restore state from checkpoint: %s, please drain this node and delete the CPU manager checkpoint file %q before restarting Kubelet", reason, cfg.path())}
}

func validate(s *State, online cpuset.CPUSet, cfg Config) *StartError {
	policy := cfg.policy()
	if policy != PolicyNone && policy != PolicyStatic {
		return &StartError{Rule: RulePolicy, Kubelet: fmt.Sprintf("unknown policy: \"%s\"", policy)}
	}
	r := cfg.reader()
	if msg := s.loadErr[r]; msg != "" {
		return restoreError(RuleLoad, msg, cfg)
	}
	if (r == readV4Off || r == readV4On) && cfg.InPlaceExclusiveCPUs && s.baselineErr != "" {
		return restoreError(RuleLoad, s.baselineErr, cfg)
	}
	if s.PolicyName != policy {
		return restoreError(RulePolicy, fmt.Sprintf("configured policy %q differs from state checkpoint policy %q", policy, s.PolicyName), cfg)
	}
	if policy == PolicyNone {
		return nil
	}

	def := s.DefaultCPUSet
	if def.IsEmpty() {
		if len(s.Entries) != 0 {
			return &StartError{Rule: RuleEmptyDefault, Kubelet: "default cpuset cannot be empty"}
		}
		return nil
	}
	if cfg.StrictReservation {
		if in := cfg.Reserved.Intersection(def); !in.IsEmpty() {
			return &StartError{Rule: RuleReserved, Kubelet: fmt.Sprintf("some of strictly reserved cpus: %q are present in defaultCpuSet: %q", in.String(), def.String())}
		}
	} else if !cfg.Reserved.IsSubsetOf(def) {
		return &StartError{Rule: RuleReserved, Kubelet: fmt.Sprintf("not all reserved cpus: %q are present in defaultCpuSet: %q", cfg.Reserved.String(), def.String())}
	}
	// One pass over the assignments, in map order; the sorted pass for the
	// message only when one overlaps.
	defBits := toBits(def)
	known := toBits(def)
	overlap := false
	for _, containers := range s.Entries {
		for _, set := range containers {
			for _, cpu := range set.UnsortedList() {
				overlap = overlap || defBits.has(cpu)
				known.add(cpu)
			}
		}
	}
	if overlap {
		for _, a := range containerAssignments(s) {
			if !disjoint(a.CPUs, def) {
				return &StartError{Rule: RuleOverlap, Kubelet: fmt.Sprintf("pod: %s, container: %s cpuset: %q overlaps with default cpuset %q", a.PodUID, a.Container, a.CPUs.String(), def.String())}
			}
		}
	}
	if cfg.PodLevelResourceManagers {
		for _, set := range s.PodEntries {
			known.addSet(set)
		}
	}
	all := toBits(online)
	if cfg.StrictReservation {
		all = all.without(cfg.Reserved)
	}
	if !known.equal(all) {
		return &StartError{Rule: RuleCPUs, Kubelet: fmt.Sprintf("current set of available CPUs %q doesn't match with CPUs in state %q", all.set().String(), known.set().String())}
	}
	return nil
}

// knownCPUs is the union of the default set and every assignment, with the
// pod-level ones when the gate is on (the kubelet does not load them
// otherwise).
func knownCPUs(s *State, podLevel bool) cpuset.CPUSet { return knownBits(s, podLevel).set() }

func knownBits(s *State, podLevel bool) bitset {
	known := toBits(s.DefaultCPUSet)
	for _, containers := range s.Entries {
		for _, set := range containers {
			known.addSet(set)
		}
	}
	if podLevel {
		for _, set := range s.PodEntries {
			known.addSet(set)
		}
	}
	return known
}

// Assignment is one exclusive assignment: a container's CPUs, or, with
// Container "", a pod's pod-level CPUs (V3 podEntries).
type Assignment struct {
	PodUID    string
	Container string
	CPUs      cpuset.CPUSet
}

func (a Assignment) String() string { return "pod " + a.PodUID + " " + a.what() }

// what is the assignment without its pod: "container app 2-3",
// "(pod-level) 2-3".
func (a Assignment) what() string {
	if a.Container == "" {
		return fmt.Sprintf("(pod-level) %s", a.CPUs)
	}
	return fmt.Sprintf("container %s %s", a.Container, a.CPUs)
}

// containerAssignments lists the container assignments sorted by pod UID
// and container name.
func containerAssignments(s *State) []Assignment {
	var out []Assignment
	for _, pod := range slices.Sorted(maps.Keys(s.Entries)) {
		containers := s.Entries[pod]
		for _, c := range slices.Sorted(maps.Keys(containers)) {
			out = append(out, Assignment{PodUID: pod, Container: c, CPUs: containers[c]})
		}
	}
	return out
}

// podAssignments lists the pod-level assignments sorted by pod UID.
func podAssignments(s *State) []Assignment {
	var out []Assignment
	for _, pod := range slices.Sorted(maps.Keys(s.PodEntries)) {
		out = append(out, Assignment{PodUID: pod, CPUs: s.PodEntries[pod]})
	}
	return out
}

// disjoint reports whether small and big share no CPU, looking up each CPU
// of small in big (cheaper than an intersection when small is small).
func disjoint(small, big cpuset.CPUSet) bool {
	for _, c := range small.UnsortedList() {
		if big.Contains(c) {
			return false
		}
	}
	return true
}
