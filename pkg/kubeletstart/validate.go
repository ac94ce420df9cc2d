package kubeletstart

import (
	"fmt"
	"slices"
	"strings"

	v1 "k8s.io/api/core/v1"
	kubeletv1beta1 "k8s.io/kubelet/config/v1beta1"
	"k8s.io/utils/cpuset"
)

// The topology manager's policies and scopes, as the configuration spells
// them.
var (
	topologyPolicies = []string{
		kubeletv1beta1.NoneTopologyManagerPolicy, kubeletv1beta1.BestEffortTopologyManagerPolicy,
		kubeletv1beta1.RestrictedTopologyManagerPolicy, kubeletv1beta1.SingleNumaNodeTopologyManagerPolicy,
	}
	topologyScopes = []string{kubeletv1beta1.ContainerTopologyManagerScope, kubeletv1beta1.PodTopologyManagerScope}
)

// topologyScope is topologyManagerScope with the kubelet's default, which
// pkg/kubeletconfig does not apply.
func topologyScope(kc *kubeletv1beta1.KubeletConfiguration) string {
	if kc.TopologyManagerScope == "" {
		return kubeletv1beta1.ContainerTopologyManagerScope
	}
	return kc.TopologyManagerScope
}

// validate is the part of ValidateKubeletConfiguration
// (pkg/kubelet/apis/config/validation) that judges the fields hotplugd
// reads, with its words and in its order: healthzPort, maxPods,
// podsPerCore, the topology manager's policy and scope, reservedSystemCPUs
// and reservedMemory. The same in every release hotplugd knows.
func validate(kc *kubeletv1beta1.KubeletConfiguration) []string {
	var errs []string
	add := func(format string, a ...any) {
		errs = append(errs, fmt.Sprintf("invalid configuration: "+format, a...))
	}
	if kc.HealthzPort != nil && *kc.HealthzPort != 0 && (*kc.HealthzPort < 1 || *kc.HealthzPort > 65535) {
		add("healthzPort (--healthz-port) %v must be between 1 and 65535, inclusive", *kc.HealthzPort)
	}
	if kc.MaxPods < 0 {
		add("maxPods (--max-pods) %v must not be a negative number", kc.MaxPods)
	}
	if kc.PodsPerCore < 0 {
		add("podsPerCore (--pods-per-core) %v must not be a negative number", kc.PodsPerCore)
	}
	if !slices.Contains(topologyPolicies, kc.TopologyManagerPolicy) {
		add("topologyManagerPolicy (--topology-manager-policy) %q must be one of: %q", kc.TopologyManagerPolicy, topologyPolicies)
	}
	if scope := topologyScope(kc); !slices.Contains(topologyScopes, scope) {
		add("topologyManagerScope (--topology-manager-scope) %q must be one of: %q, or %q", scope, topologyScopes[0], topologyScopes[1])
	}
	if kc.ReservedSystemCPUs != "" {
		if kc.SystemReservedCgroup != "" || kc.KubeReservedCgroup != "" {
			add("can't use reservedSystemCPUs (--reserved-cpus) with systemReservedCgroup (--system-reserved-cgroup) or kubeReservedCgroup (--kube-reserved-cgroup)")
		}
		if _, err := cpuset.Parse(kc.ReservedSystemCPUs); err != nil {
			add("unable to parse reservedSystemCPUs (--reserved-cpus) %v, error: %v", kc.ReservedSystemCPUs, err)
		}
	}
	// validateReservedMemoryConfiguration; a reservation's resources in
	// name order, where the kubelet takes its map's.
	seen := map[int32]map[v1.ResourceName]bool{}
	for _, r := range kc.ReservedMemory {
		node := r.NumaNode
		if seen[node] == nil {
			seen[node] = map[v1.ResourceName]bool{}
		}
		for _, rn := range sortedKeys(r.Limits) {
			q := r.Limits[rn]
			if rn != v1.ResourceMemory && !strings.HasPrefix(string(rn), v1.ResourceHugePagesPrefix) {
				add("the limit type %q for NUMA node %d is not supported, only %v is accepted", rn, node, []v1.ResourceName{v1.ResourceMemory, v1.ResourceHugePagesPrefix + "<HugePageSize>"})
			}
			if q.IsZero() {
				add("reserved memory may not be zero for NUMA node %d and resource %q", node, rn)
			}
			if seen[node][rn] {
				add("the reserved memory has a duplicate value for NUMA node %d and resource %q", node, rn)
			}
			seen[node][rn] = true
		}
	}
	return errs
}
