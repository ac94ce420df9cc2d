package oracle

import (
	"context"
	"sort"

	v1 "k8s.io/api/core/v1"
	"k8s.io/kubernetes/pkg/kubelet/lifecycle"
	"k8s.io/kubernetes/pkg/kubelet/util/sliceutils"
	schedulerframework "k8s.io/kubernetes/pkg/scheduler/framework"
)

// The allocation manager (pkg/kubelet/allocation) is oracle for the
// allocated pods checkpoint and for the re-admission of running pods at a
// kubelet's start; allocation_1_<minor>.go calls each release's code.

// Rejection is a pod the kubelet's admission refused, in its words.
type Rejection struct {
	Pod     *v1.Pod
	Reason  string // "OutOfcpu"
	Message string
}

// WriteAllocations checkpoints pods as a kubelet with the current feature
// gates does when it admits them: each through the allocation manager's
// SetAllocatedResources, into dir/allocated_pods_state.
func WriteAllocations(dir string, pods []*v1.Pod) error {
	m := newAllocationManager(dir)
	for _, p := range pods {
		if err := m.set(p); err != nil {
			return err
		}
	}
	return nil
}

// Readmit is a restarted kubelet's admission of pods, the pods the API
// server holds for its node: a new allocation manager that loads
// dir/allocated_pods_state, with the predicate admit handler (noderesources
// fit, as the kubelet's lifecycle package runs it) against node; the pods
// in creation order (HandlePodAdditions sorts them with PodsByCreationTime),
// each checked against the pods admitted before it (GetActivePods: a
// rejected pod is failed and no longer active). It returns the rejected
// pods; a load error of the checkpoint is returned as the kubelet's panic
// value.
func Readmit(dir string, node *v1.Node, pods []*v1.Pod) (rejected []Rejection, loadErr any) {
	defer func() {
		if r := recover(); r != nil {
			loadErr = r
		}
	}()
	m := newAllocationManager(dir)
	m.addPredicateHandler(node)
	sorted := append([]*v1.Pod(nil), pods...)
	sort.Sort(sliceutils.PodsByCreationTime(sorted))
	var active []*v1.Pod
	for _, p := range sorted {
		ok, reason, msg := m.addPod(active, p)
		if !ok {
			rejected = append(rejected, Rejection{Pod: p, Reason: reason, Message: msg})
			continue
		}
		active = append(active, p)
	}
	return rejected, nil
}

// noPluginResources is the predicate handler's plugin resource update
// (the container manager's UpdatePluginResources): no device plugins here.
func noPluginResources(*schedulerframework.NodeInfo, *lifecycle.PodAdmitAttributes) error { return nil }

// notCritical is the admission failure handler for pods that are not
// critical: the reasons stand (the kubelet's preemption handler evicts
// other pods only for a critical pod).
type notCritical struct{}

func (notCritical) failure(_ context.Context, _ *v1.Pod, reasons []lifecycle.PredicateFailureReason) ([]lifecycle.PredicateFailureReason, error) {
	return reasons, nil
}

// Loaded is one pod's allocation as a kubelet that loaded the checkpoint
// holds it.
type Loaded struct {
	// Containers are the allocations the manager has, by container name,
	// for the containers of the pod's spec (app and init).
	Containers map[string]v1.ResourceRequirements
	// PodLevel is the pod-level allocation (nil in 1.34, which has none).
	PodLevel *v1.ResourceRequirements
	// Pod is the pod as admission sees it: its spec overwritten with the
	// allocation (UpdatePodFromAllocation).
	Pod *v1.Pod
}

// LoadAllocations is what a kubelet starting with dir as its root directory
// loads for pods; a load error is the kubelet's panic value.
func LoadAllocations(dir string, pods []*v1.Pod) (loaded map[string]Loaded, loadErr any) {
	defer func() {
		if r := recover(); r != nil {
			loadErr = r
		}
	}()
	m := newAllocationManager(dir)
	loaded = map[string]Loaded{}
	for _, p := range pods {
		l := Loaded{Containers: map[string]v1.ResourceRequirements{}}
		for _, cs := range [][]v1.Container{p.Spec.InitContainers, p.Spec.Containers} {
			for _, c := range cs {
				if rr, ok := m.m.GetContainerResourceAllocation(p.UID, c.Name); ok {
					l.Containers[c.Name] = rr
				}
			}
		}
		l.PodLevel = m.podLevel(p)
		l.Pod, _ = m.m.UpdatePodFromAllocation(p)
		loaded[string(p.UID)] = l
	}
	return loaded, nil
}
