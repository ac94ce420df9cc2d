package kubeletstart

import (
	"fmt"
	"strconv"

	kubeletv1beta1 "k8s.io/kubelet/config/v1beta1"

	"github.com/hotplugd/hotplugd/pkg/memmgr"
)

// The topology manager's policy options and the feature gates that let the
// kubelet take them.
const (
	optPreferClosestNUMANodes = "prefer-closest-numa-nodes"
	optMaxAllowableNUMANodes  = "max-allowable-numa-nodes"

	gateTopologyManagerPolicyOptions      = "TopologyManagerPolicyOptions"
	gateTopologyManagerPolicyAlphaOptions = "TopologyManagerPolicyAlphaOptions"
	gateTopologyManagerPolicyBetaOptions  = "TopologyManagerPolicyBetaOptions"

	// defaultMaxNUMANodes is the most NUMA nodes a topology manager policy
	// other than none accepts without max-allowable-numa-nodes, the same
	// in every release hotplugd knows.
	defaultMaxNUMANodes = 8
)

// topologyOptionStage is the stage of a topology manager policy option in
// the release 1.<minor> (pkg/kubelet/cm/topologymanager/policy_options.go);
// "" for an option it does not know. test/kubeletcompat checks it against
// each release.
func topologyOptionStage(minor int, option string) stage {
	switch option {
	case optPreferClosestNUMANodes:
		return ga
	case optMaxAllowableNUMANodes:
		if minor <= 34 {
			return beta
		}
		return ga
	}
	return 0
}

// topologyRefusals are the topology manager's: run() refuses options
// without TopologyManagerPolicyOptions; topologymanager.NewManager, for any
// policy but none, refuses an option it does not know, one whose level's
// gate is off, a value it cannot parse, a max-allowable-numa-nodes below 8,
// and a machine with more NUMA nodes than the maximum (8, or the option's).
// Options are taken in name order, where the kubelet takes its map's.
func topologyRefusals(in Input, kc *kubeletv1beta1.KubeletConfiguration, fg *featureGates) []*Refusal {
	refuse := func(format string, a ...any) []*Refusal {
		return []*Refusal{{Component: TopologyManager, Kubelet: fmt.Sprintf(format, a...)}}
	}
	opts := kc.TopologyManagerPolicyOptions
	if !fg.Enabled(gateTopologyManagerPolicyOptions) {
		if opts != nil {
			return refuse("topology manager policy options %v require feature gates %q enabled", opts, gateTopologyManagerPolicyOptions)
		}
	}
	if kc.TopologyManagerPolicy == kubeletv1beta1.NoneTopologyManagerPolicy {
		return nil
	}
	maxNodes := defaultMaxNUMANodes
	for _, name := range sortedKeys(opts) {
		value := opts[name]
		switch topologyOptionStage(in.Release.Minor, name) {
		case 0:
			return refuse("unknown Topology Manager Policy option: %q", name)
		case alpha:
			if !fg.Enabled(gateTopologyManagerPolicyAlphaOptions) {
				return refuse("topology manager policy alpha-level options not enabled, but option %q provided", name)
			}
		case beta:
			if !fg.Enabled(gateTopologyManagerPolicyBetaOptions) {
				return refuse("topology manager policy beta-level options not enabled, but option %q provided", name)
			}
		}
		switch name {
		case optPreferClosestNUMANodes:
			if _, err := strconv.ParseBool(value); err != nil {
				return refuse("bad value for option %q: %v", name, err)
			}
		case optMaxAllowableNUMANodes:
			n, err := strconv.Atoi(value)
			if err != nil {
				return refuse("unable to convert policy option to integer %q: %v", name, err)
			}
			if n < defaultMaxNUMANodes {
				return refuse("the minimum value of %q should not be less than %v", name, defaultMaxNUMANodes)
			}
			maxNodes = n
		}
	}
	if n := len(memmgr.NUMANodes(in.Snapshot)); n > maxNodes {
		return refuse("unsupported on machines with more than %v NUMA Nodes", maxNodes)
	}
	// An unknown policy or scope: validate refused it already.
	return nil
}
