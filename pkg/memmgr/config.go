package memmgr

import (
	"fmt"
	"slices"
	"strings"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	kubeletv1beta1 "k8s.io/kubelet/config/v1beta1"

	"github.com/hotplugd/hotplugd/pkg/kubeletversion"
	"github.com/hotplugd/hotplugd/pkg/topology"
)

// Memory manager policies, as memoryManagerPolicy spells them.
const (
	PolicyNone   = "None"
	PolicyStatic = "Static"
)

// Config is what the kubelet's memory manager is started with, plus the
// operator's choice for PlanRebuild.
type Config struct {
	// Policy is memoryManagerPolicy: PolicyNone or PolicyStatic.
	Policy string
	// ReservedMemory is reservedMemory: memory and hugepages held back per
	// NUMA node (the Static policy's systemReserved column).
	ReservedMemory []kubeletv1beta1.MemoryReservation
	// NodeAllocatableReservation is what the kubelet holds back from each
	// resource for node allocatable (systemReserved + kubeReserved + the
	// memory.available hard eviction threshold, the threshold left out
	// under --experimental-allocatable-ignore-eviction), as
	// topology.Snapshot.Reservation and ReservationIgnoringEviction compute
	// it. The Static policy requires the sum of ReservedMemory to equal it
	// for memory and every hugepage size.
	NodeAllocatableReservation v1.ResourceList
	// Release is the kubelet release whose memory manager this is: it
	// decides the layouts the kubelet reads, verifies and writes
	// (kubeletversion.Release.MemState) and the words of its refusals. nil
	// means kubelet 1.36, for callers written before releases were told
	// apart; NewConfig always sets it.
	Release *kubeletversion.Release
	// PodLevelResourceManagers is the kubelet's feature gate of that name,
	// as Release enables it: with it kubelet 1.36 reads and writes FormatV2,
	// and 1.37 restores and writes pod-level entries.
	PodLevelResourceManagers bool
	// Path is the state file's path, as the kubelet names it in its
	// messages; "" means DefaultPath.
	Path string
	// AllowDrop lets PlanRebuild drop the assignments that no longer fit
	// the machine (the operator drained their pods). Without it a plan
	// with such assignments is not applied.
	AllowDrop bool
}

// KubeletFlags are the kubelet's command-line flags that change what its
// memory manager is started with and have no KubeletConfiguration field
// (the kubelet keeps them in its options.KubeletFlags).
type KubeletFlags struct {
	// AllocatableIgnoresEviction is the deprecated
	// --experimental-allocatable-ignore-eviction
	// (kubeletconfig.Kubelet.AllocatableIgnoresEviction): the container
	// manager's node allocatable reservation, which reservedMemory must add
	// up to, then leaves out the hard eviction thresholds.
	AllocatableIgnoresEviction bool
}

// NewConfig returns the memory manager configuration of a kubelet of
// release rel running with kc, without any of KubeletFlags, on the machine
// snap, its state file at path ("" for DefaultPath). Its feature gates are
// enabled as that release's feature gate does (AllAlpha and AllBeta
// included). A nil rel (an unknown kubelet) is an error: hotplugd does not
// judge the files of a kubelet it does not know.
func NewConfig(kc *kubeletv1beta1.KubeletConfiguration, snap *topology.Snapshot, path string, rel *kubeletversion.Release) (Config, error) {
	return NewConfigWithFlags(kc, KubeletFlags{}, snap, path, rel)
}

// NewConfigWithFlags is NewConfig for a kubelet started with flags. The
// node allocatable reservation is the one the kubelet's container manager
// hands its memory manager (GetNodeAllocatableReservation, passed to
// memorymanager.NewManager by NewContainerManager), which follows
// --experimental-allocatable-ignore-eviction as node allocatable does.
func NewConfigWithFlags(kc *kubeletv1beta1.KubeletConfiguration, flags KubeletFlags, snap *topology.Snapshot, path string, rel *kubeletversion.Release) (Config, error) {
	if rel == nil {
		return Config{}, fmt.Errorf("memmgr: no kubelet release: %w", kubeletversion.ErrUnknown)
	}
	cfg := Config{
		Policy:                   kc.MemoryManagerPolicy,
		ReservedMemory:           kc.ReservedMemory,
		Release:                  rel,
		PodLevelResourceManagers: rel.Enabled(kc.FeatureGates, kubeletversion.GatePodLevelResourceManagers),
		Path:                     path,
	}
	if cfg.Policy == "" {
		cfg.Policy = PolicyNone
	}
	if cfg.Policy == PolicyStatic {
		reservation := snap.Reservation
		if flags.AllocatableIgnoresEviction {
			reservation = snap.ReservationIgnoringEviction
		}
		r, err := reservation(kc)
		if err != nil {
			// Refused by the kubelet before its memory manager (a
			// reservation it cannot parse, reservedSystemCPUs offline).
			return Config{}, fmt.Errorf("memmgr: %w: %w", ErrConfig, err)
		}
		cfg.NodeAllocatableReservation = r
	}
	return cfg, nil
}

// release is c.Release, kubelet 1.36 when unset.
func (c Config) release() *kubeletversion.Release {
	if c.Release == nil {
		return kubeletversion.ByMinor(36)
	}
	return c.Release
}

func (c Config) path() string {
	if c.Path == "" {
		return DefaultPath
	}
	return c.Path
}

// systemReserved maps NUMA node -> resource -> bytes held back, the Static
// policy's view of reservedMemory.
type systemReserved map[int]map[v1.ResourceName]uint64

func (r systemReserved) get(node int, name v1.ResourceName) uint64 {
	return r[node][name]
}

// CheckConfig returns what the kubelet's memory manager says of cfg on the
// machine snap when the kubelet creates it (memorymanager.NewManager), before
// it reads any state file: nil when it accepts it, else a *KubeletError of
// Kind ErrConfig with the kubelet's words (an unknown policy; for the
// Static policy, reservedMemory naming a NUMA node the machine does not
// have, not adding up to the node allocatable reservation, or reserving no
// memory).
func CheckConfig(snap *topology.Snapshot, cfg Config) error {
	_, err := checkConfig(snap, cfg)
	return err
}

// NUMANodes are the ids of the NUMA nodes the kubelet knows on snap (its
// machine info's topology, which its topology and memory managers take):
// the machine's NUMA nodes, or, on a machine without any, one per CPU
// package, as cAdvisor makes them.
func NUMANodes(snap *topology.Snapshot) []int {
	nodes := kubeletNodes(snap)
	ids := make([]int, len(nodes))
	for i, n := range nodes {
		ids[i] = n.ID
	}
	return ids
}

// checkPolicy returns the kubelet's error for a policy it does not know.
func checkPolicy(cfg Config) error {
	switch cfg.Policy {
	case PolicyNone, PolicyStatic:
		return nil
	case "BestEffort":
		// Windows only: on Linux the kubelet knows it and refuses it.
		return &KubeletError{Kind: ErrConfig, Kubelet: fmt.Sprintf("policy %q is not available for platform %q", cfg.Policy, "linux")}
	}
	return &KubeletError{Kind: ErrConfig, Kubelet: fmt.Sprintf("unknown policy: %q", cfg.Policy)}
}

// staticReservation checks the configuration as the kubelet's memory
// manager does when it creates the Static policy (NewManager: reservedMemory
// against the machine and node allocatable, then at least some memory
// reserved) and returns the reservation per node.
//
// The nodes are kubeletNodes: on a machine without NUMA nodes, one per CPU
// package, where the kubelet starts and accounts every node's memory from
// zero (see defaultMachineState).
func staticReservation(snap *topology.Snapshot, cfg Config) (systemReserved, error) {
	nodes := map[int]bool{}
	for _, n := range kubeletNodes(snap) {
		nodes[n.ID] = true
	}

	// Totals per resource, summed in the kubelet's way (a Quantity keeps
	// the format of the first non-zero term, which shows in the message).
	totals := map[v1.ResourceName]resource.Quantity{}
	for _, r := range cfg.ReservedMemory {
		if !nodes[int(r.NumaNode)] {
			return nil, &KubeletError{Kind: ErrConfig,
				Kubelet: fmt.Sprintf("the reserved memory configuration references a NUMA node %d that does not exist on this machine", r.NumaNode),
				Detail:  nodeList(snap) + "; fix reservedMemory"}
		}
		for _, name := range sortedResourceNames(r.Limits) {
			q := r.Limits[name].DeepCopy()
			if v, ok := totals[name]; ok {
				q.Add(v)
			}
			totals[name] = q
		}
	}
	types := map[v1.ResourceName]bool{}
	for name := range totals {
		types[name] = true
	}
	for name := range cfg.NodeAllocatableReservation {
		if name == v1.ResourceMemory || strings.HasPrefix(string(name), v1.ResourceHugePagesPrefix) {
			types[name] = true
		}
	}
	for _, name := range sortedKeys(types) {
		allocatable := resource.NewQuantity(0, resource.DecimalSI)
		if q, ok := cfg.NodeAllocatableReservation[name]; ok {
			allocatable.Add(q)
		}
		reserved := resource.NewQuantity(0, resource.DecimalSI)
		if q, ok := totals[name]; ok {
			reserved.Add(q)
		}
		if !allocatable.Equal(*reserved) {
			return nil, &KubeletError{Kind: ErrConfig,
				Kubelet: fmt.Sprintf("the total amount %q of type %q is not equal to the value %q determined by Node Allocatable feature", reserved.String(), name, allocatable.String()),
				Detail:  "reservedMemory must add up to systemReserved + kubeReserved + the memory.available hard eviction threshold (without the threshold under --experimental-allocatable-ignore-eviction)"}
		}
	}

	out := systemReserved{}
	for _, n := range kubeletNodes(snap) {
		out[n.ID] = map[v1.ResourceName]uint64{}
	}
	for _, r := range cfg.ReservedMemory {
		for name, q := range r.Limits {
			v, ok := q.AsInt64()
			if !ok {
				return nil, &KubeletError{Kind: ErrConfig, Kubelet: "could not covert a variable of type Quantity to int64",
					Detail: fmt.Sprintf("reservedMemory %s on NUMA node %d", name, r.NumaNode)}
			}
			out[int(r.NumaNode)][name] = uint64(v)
		}
	}
	var memory uint64
	for _, n := range out {
		memory += n[v1.ResourceMemory]
	}
	if memory == 0 {
		return nil, &KubeletError{Kind: ErrConfig, Kubelet: "[memorymanager] you should specify the system reserved memory",
			Detail: "the Static policy needs reservedMemory with memory on at least one NUMA node"}
	}
	return out, nil
}

// nodeList says which nodes the kubelet knows on snap.
func nodeList(snap *topology.Snapshot) string {
	nodes := kubeletNodes(snap)
	ids := make([]string, len(nodes))
	for i, n := range nodes {
		ids[i] = fmt.Sprint(n.ID)
	}
	switch {
	case len(snap.NUMANodes) > 0:
		return "the machine has NUMA nodes " + strings.Join(ids, ",")
	case len(nodes) == 0:
		return "the machine has no NUMA nodes and no CPU with a package id, so the kubelet knows no node"
	}
	return "the machine has no NUMA nodes; the kubelet (cAdvisor) makes one node per CPU package: " + strings.Join(ids, ",")
}

func sortedResourceNames(l v1.ResourceList) []v1.ResourceName {
	names := make([]v1.ResourceName, 0, len(l))
	for n := range l {
		names = append(names, n)
	}
	slices.Sort(names)
	return names
}

func sortedKeys[K ~string | ~int, V any](m map[K]V) []K {
	keys := make([]K, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}
