package memmgr

import (
	"errors"
	"slices"
	"testing"

	"github.com/hotplugd/hotplugd/pkg/topology"
)

// TestCheckConfig: the memory manager's verdict on its configuration alone,
// in the kubelet's words.
func TestCheckConfig(t *testing.T) {
	s := snap(node{mem: 8 * gi}, node{mem: 8 * gi})
	for _, tt := range []struct {
		name string
		cfg  Config
		want string // the kubelet's words; "" accepts
	}{
		{"None", Config{Policy: PolicyNone}, ""},
		{"Static, reservations that add up", staticCfg(map[int]uint64{0: gi, 1: gi}), ""},
		{"BestEffort is Windows only", Config{Policy: "BestEffort"}, `policy "BestEffort" is not available for platform "linux"`},
		{"unknown", Config{Policy: "static"}, `unknown policy: "static"`},
		{"a node the machine does not have", staticCfg(map[int]uint64{2: gi}), "the reserved memory configuration references a NUMA node 2 that does not exist on this machine"},
		{"no memory reserved", Config{Policy: PolicyStatic}, "[memorymanager] you should specify the system reserved memory"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			err := CheckConfig(s, tt.cfg)
			var ke *KubeletError
			switch {
			case tt.want == "":
				if err != nil {
					t.Fatalf("CheckConfig() = %v", err)
				}
			case !errors.As(err, &ke) || ke.Kubelet != tt.want || !errors.Is(err, ErrConfig):
				t.Fatalf("CheckConfig() = %v, want the kubelet's %q", err, tt.want)
			}
		})
	}
}

// TestNUMANodes: the machine's NUMA nodes, or without any, one per CPU
// package, as cAdvisor gives them to the kubelet.
func TestNUMANodes(t *testing.T) {
	if got := NUMANodes(snap(node{mem: gi}, node{mem: gi}, node{mem: gi})); !slices.Equal(got, []int{0, 1, 2}) {
		t.Errorf("NUMANodes() = %v, want 0 1 2", got)
	}
	noNUMA := &topology.Snapshot{CPUs: topology.CPUs{List: []topology.CPU{
		{ID: 0, Online: true, Package: 1, Core: 0, Node: -1},
		{ID: 1, Online: true, Package: 0, Core: 0, Node: -1},
		{ID: 2, Online: true, Package: 1, Core: 1, Node: -1},
	}}}
	if got := NUMANodes(noNUMA); !slices.Equal(got, []int{0, 1}) {
		t.Errorf("NUMANodes() without NUMA nodes = %v, want one per package, 0 1", got)
	}
}
