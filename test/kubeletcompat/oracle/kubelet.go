package oracle

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/go-logr/logr"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	utilfeature "k8s.io/apiserver/pkg/util/feature"
	"k8s.io/component-base/featuregate"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/klog/v2"
	"k8s.io/kubernetes/pkg/kubelet/cm/topologymanager"
)

// The kubelet's CPU and memory managers and their checkpoints, called as the
// release in the build calls them. Their signatures changed between
// releases (a logger argument from 1.35, pod-level admission from 1.36, the
// topology manager's logger and a lifecycle operation in 1.37); the files
// kubelet_1_<minor>.go hold what differs, behind the build tag
// kubelet_1_<minor> (1.36, go.mod's release, builds without a tag), so that
// the tests call one API whatever the release:
//
//	NewCPUManager, StartCPUManager, CPUCheckpointState, SetPodCPUAssignments,
//	NewMemoryManager, StartMemoryManager, AllocateMemory, AllocateMemoryPod,
//	SetPodMemoryAssignments, NoTopologyManager, Affinity, SetFeatureGates.

// Affinity is a topology manager store that has placed each pod (by UID)
// on fixed NUMA nodes; its GetAffinity is in the release's file.
type Affinity map[string]topologymanager.TopologyHint

// GetPolicy is part of topologymanager.Store; the managers do not call it.
func (Affinity) GetPolicy() topologymanager.Policy { return nil }

// Name is part of topologymanager.Store from 1.36.
func (Affinity) Name() string { return "oracle" }

// ErrNotInRelease is returned by an adapter for something the release in the
// build does not have (pod-level admission before 1.36).
var ErrNotInRelease = errors.New("oracle: not in this kubelet release")

// KnownGate says whether the release in the build has the feature gate
// name; a kubelet refuses to start with a gate it does not know.
func KnownGate(name string) bool {
	_, ok := utilfeature.DefaultMutableFeatureGate.GetAll()[featuregate.Feature(name)]
	return ok
}

// fromJSON copies from into to through their JSON form (hotplugd's state
// types and the kubelet's share it).
func fromJSON(from, to any) error {
	b, err := json.Marshal(from)
	if err != nil {
		return fmt.Errorf("oracle: %w", err)
	}
	if err := json.Unmarshal(b, to); err != nil {
		return fmt.Errorf("oracle: %w", err)
	}
	return nil
}

// What the managers' Start gets in the tests: no active pods, sources that
// never become ready (so nothing is removed as stale), no pod status, and a
// runtime that accepts every update. The reconcile loop stays idle, so a
// state file changes only if Start itself writes it.

func noActivePods() []*v1.Pod { return nil }

// startContext is the context the managers' Start gets: logging discarded.
func startContext() context.Context {
	return klog.NewContext(context.Background(), logr.Discard())
}

type sourcesNeverReady struct{}

func (sourcesNeverReady) AddSource(string) {}
func (sourcesNeverReady) AllReady() bool   { return false }

type noPodStatus struct{}

func (noPodStatus) GetPodStatus(types.UID) (v1.PodStatus, bool) { return v1.PodStatus{}, false }

type noRuntime struct{}

func (noRuntime) UpdateContainerResources(context.Context, string, *runtimeapi.ContainerResources) error {
	return nil
}
