//go:build kubelet_1_36 || !(kubelet_1_34 || kubelet_1_35 || kubelet_1_37)

package oracle

import (
	"maps"
	"testing"
	"time"

	"github.com/go-logr/logr"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	utilfeature "k8s.io/apiserver/pkg/util/feature"
	"k8s.io/component-base/featuregate"
	featuregatetesting "k8s.io/component-base/featuregate/testing"
	kubeletconfig "k8s.io/kubernetes/pkg/kubelet/apis/config"
	"k8s.io/kubernetes/pkg/kubelet/cm/containermap"
	"k8s.io/kubernetes/pkg/kubelet/cm/cpumanager"
	cpustate "k8s.io/kubernetes/pkg/kubelet/cm/cpumanager/state"
	"k8s.io/kubernetes/pkg/kubelet/cm/cpumanager/topology"
	"k8s.io/kubernetes/pkg/kubelet/cm/memorymanager"
	memstate "k8s.io/kubernetes/pkg/kubelet/cm/memorymanager/state"
	"k8s.io/kubernetes/pkg/kubelet/cm/topologymanager"
	"k8s.io/kubernetes/pkg/kubelet/nodestatus"
	"k8s.io/utils/cpuset"
)

// Kubelet 1.36 (go.mod's release: the build without a kubelet_1_* tag).

// discover is topology.Discover, as getReservedCPUs calls it.
func discover(info *MachineInfo) (*topology.CPUTopology, error) {
	return topology.Discover(logr.Discard(), info)
}

// reservedQuantity is a reservation quantity as parseResourceList keeps it.
func reservedQuantity(_ v1.ResourceName, q resource.Quantity) resource.Quantity { return q }

// machineInfoSetter is nodestatus.MachineInfo for a kubelet with the
// machine info info, the container manager's capacity and reservation, no
// device plugins and local storage capacity isolation off.
func machineInfoSetter(maxPods, podsPerCore int, info *MachineInfo, capacity, reservation v1.ResourceList) nodestatus.Setter {
	return nodestatus.MachineInfo("oracle", maxPods, podsPerCore,
		func() (*MachineInfo, error) { return info, nil },
		// containerManagerImpl.GetCapacity(false) returns cm.capacity.
		func(bool) v1.ResourceList { return maps.Clone(capacity) },
		func() (v1.ResourceList, v1.ResourceList, []string) { return nil, nil, nil },
		func() v1.ResourceList { return reservation },
		func(string, string, string) {},
		false,
	)
}

// NewCPUManager is cpumanager.NewManager with a reconcile period of an hour.
func NewCPUManager(policy string, options map[string]string, info *MachineInfo, specific cpuset.CPUSet, reservation v1.ResourceList, dir string, affinity topologymanager.Store) (cpumanager.Manager, error) {
	return cpumanager.NewManager(logr.Discard(), policy, options, time.Hour, info, specific, reservation, dir, affinity)
}

// StartCPUManager runs mgr.Start with nothing running.
func StartCPUManager(mgr cpumanager.Manager) error {
	return mgr.Start(startContext(), noActivePods, sourcesNeverReady{}, noPodStatus{}, noRuntime{}, containermap.NewContainerMap())
}

// CPUCheckpointState is cpustate.NewCheckpointState with no containers.
func CPUCheckpointState(dir, name, policy string) (cpustate.State, error) {
	return cpustate.NewCheckpointState(logr.Discard(), dir, name, policy, containermap.NewContainerMap())
}

// SetPodCPUAssignments sets the pod-level assignments (PodLevelResourceManagers).
func SetPodCPUAssignments(st cpustate.State, pods map[string]cpuset.CPUSet) error {
	pe := cpustate.PodCPUAssignments{}
	for pod, set := range pods {
		pe[pod] = cpustate.PodEntry{CPUSet: set}
	}
	st.SetPodCPUAssignments(pe)
	return nil
}

// NewMemoryManager is memorymanager.NewManager.
func NewMemoryManager(policy string, info *MachineInfo, reservation v1.ResourceList, reserved []kubeletconfig.MemoryReservation, dir string, affinity topologymanager.Store) (memorymanager.Manager, error) {
	return memorymanager.NewManager(logr.Discard(), policy, info, reservation, reserved, dir, affinity)
}

// StartMemoryManager runs mgr.Start with nothing running.
func StartMemoryManager(mgr memorymanager.Manager) error {
	return mgr.Start(startContext(), noActivePods, sourcesNeverReady{}, noPodStatus{}, noRuntime{}, containermap.NewContainerMap())
}

// AllocateMemory admits a container of pod, as pod admission does.
func AllocateMemory(mgr memorymanager.Manager, pod *v1.Pod, c *v1.Container) error {
	return mgr.Allocate(pod, c)
}

// AllocateMemoryPod admits a pod with pod-level resources as a whole.
func AllocateMemoryPod(mgr memorymanager.Manager, pod *v1.Pod) error {
	return mgr.AllocatePod(pod)
}

// SetPodMemoryAssignments sets the pod-level assignments
// (PodLevelResourceManagers); pods has the JSON form of
// state.PodMemoryAssignments.
func SetPodMemoryAssignments(st memstate.State, pods any) error {
	var pa memstate.PodMemoryAssignments
	if err := fromJSON(pods, &pa); err != nil {
		return err
	}
	st.SetPodMemoryAssignments(pa)
	return nil
}

// NoTopologyManager is the topology manager of a kubelet without one.
func NoTopologyManager() topologymanager.Store { return topologymanager.NewFakeManager() }

// GetAffinity is part of topologymanager.Store.
func (a Affinity) GetAffinity(podUID, _ string) topologymanager.TopologyHint { return a[podUID] }

// SetFeatureGates sets the kubelet's feature gates for the rest of the test,
// together (a gate and the gates it depends on).
func SetFeatureGates(tb testing.TB, gates map[string]bool) {
	tb.Helper()
	o := featuregatetesting.FeatureOverrides{}
	for name, on := range gates {
		o[featuregate.Feature(name)] = on
	}
	featuregatetesting.SetFeatureGatesDuringTest(tb, utilfeature.DefaultFeatureGate, o)
}

// NewTopologyManager is topologymanager.NewManager for the machine info, as
// NewContainerManager calls it.
func NewTopologyManager(info *MachineInfo, policy, scope string, options map[string]string) (topologymanager.Manager, error) {
	return topologymanager.NewManager(info.Topology, policy, scope, options)
}

// gateDependencies are the gates each gate of fg depends on.
func gateDependencies(fg featuregate.MutableVersionedFeatureGate) map[string][]string {
	out := map[string][]string{}
	for name, deps := range fg.Dependencies() {
		for _, d := range deps {
			out[string(name)] = append(out[string(name)], string(d))
		}
	}
	return out
}
