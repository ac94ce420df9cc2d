//go:build kubelet_1_35

package oracle

import (
	"context"

	v1 "k8s.io/api/core/v1"
	"k8s.io/kubernetes/pkg/kubelet/allocation"
	"k8s.io/kubernetes/pkg/kubelet/cm"
	"k8s.io/kubernetes/pkg/kubelet/lifecycle"
)

// Kubelet 1.35: NewManager takes the node config and allocatable.
type allocationManager struct{ m allocation.Manager }

// newAllocationManager is allocation.NewManager as the kubelet calls it
// with its root directory; what re-admission does not use is nil.
func newAllocationManager(dir string) allocationManager {
	return allocationManager{allocation.NewManager(dir, cm.NodeConfig{}, nil, nil, nil, nil, nil, nil, nil)}
}

func (a allocationManager) set(pod *v1.Pod) error { return a.m.SetAllocatedResources(pod) }

func (a allocationManager) addPod(active []*v1.Pod, pod *v1.Pod) (bool, string, string) {
	return a.m.AddPod(active, pod)
}

func (a allocationManager) addPredicateHandler(node *v1.Node) {
	getNode := func(context.Context, bool) (*v1.Node, error) { return node, nil }
	a.m.AddPodAdmitHandlers(lifecycle.PodAdmitHandlers{
		lifecycle.NewPredicateAdmitHandler(getNode, failureHandler{}, noPluginResources),
	})
}

type failureHandler struct{ notCritical }

func (f failureHandler) HandleAdmissionFailure(ctx context.Context, pod *v1.Pod, reasons []lifecycle.PredicateFailureReason) ([]lifecycle.PredicateFailureReason, error) {
	return f.failure(ctx, pod, reasons)
}

func (a allocationManager) podLevel(pod *v1.Pod) *v1.ResourceRequirements {
	rr, _ := a.m.GetPodLevelResourceAllocation(pod.UID)
	return rr
}
