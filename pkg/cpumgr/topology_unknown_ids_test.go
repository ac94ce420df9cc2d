package cpumgr

import (
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/hotplugd/hotplugd/internal/fixturegen"
)

// TestKubeletTopologyUnknownIDs checks the CPU manager's topology on
// machines whose physical_package_id or core_id read -1: cAdvisor lists
// those CPUs with SocketID or Core.Id -1 (sysinfo.getCoresInfo), and
// topology.Discover takes the ids as they are, so -1 is a socket (and,
// without NUMA nodes, a node) like any other, and CPUs of one node with the
// same (core -1, package) are one core.
func TestKubeletTopologyUnknownIDs(t *testing.T) {
	noNUMA := fixturegen.PowerVMLPAR()
	noNUMA.NoNUMA = true
	noNUMA.UnknownCoreIDs = noNUMA.UnknownPackageIDs

	type summary struct {
		NumCPUs, NumCores, NumSockets, NumNUMANodes int
		// Groups are the CPUs of each NUMA node, socket and core.
		Groups [numLevels]map[int][]int
		// Reserved2 is what the static policy reserves for 2 CPUs
		// (takeByTopology, packed).
		Reserved2 string
	}
	tests := []struct {
		name    string
		machine fixturegen.Machine
		want    summary
	}{
		{
			name:    "PowerVM LPAR",
			machine: fixturegen.PowerVMLPAR(),
			want: summary{
				NumCPUs: 15, NumCores: 4, NumSockets: 1, NumNUMANodes: 2,
				Groups: [numLevels]map[int][]int{
					lvlNUMA:   {0: {0, 1, 4, 5, 8, 9, 12}, 1: {2, 3, 6, 7, 10, 11, 14, 15}},
					lvlSocket: {-1: {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 14, 15}},
					lvlCore:   {0: {0, 4, 8, 12}, 1: {1, 5, 9}, 2: {2, 6, 10, 14}, 3: {3, 7, 11, 15}},
				},
				// Fewer sockets than nodes: socket -1 (not free for 2),
				// then node0 (7 free CPUs, before node1's 8), then its
				// fullest-free core last: core 1 (3 free) before core 0.
				Reserved2: "1,5",
			},
		},
		{
			// Without NUMA nodes cAdvisor makes a node of each package id
			// and counts every cpuN directory (16 with the offline cpu13).
			name:    "PowerVM LPAR without NUMA, core ids -1",
			machine: noNUMA,
			want: summary{
				NumCPUs: 16, NumCores: 1, NumSockets: 1, NumNUMANodes: 1,
				Groups: [numLevels]map[int][]int{
					lvlNUMA:   {-1: {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 14, 15}},
					lvlSocket: {-1: {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 14, 15}},
					lvlCore:   {0: {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 14, 15}},
				},
				Reserved2: "0-1",
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			snap := snapshot(t, tt.machine)
			topo := kubeletTopology(snap)
			got := summary{
				NumCPUs: topo.numCPUs, NumCores: topo.numCores, NumSockets: topo.numSockets, NumNUMANodes: topo.numNUMANodes,
				Groups: topo.groups,
			}
			reserved, err := takeByTopology(topo, topo.all(), 2, sortPacked)
			if err != nil {
				t.Fatalf("takeByTopology() error: %v", err)
			}
			got.Reserved2 = reserved.String()
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("unexpected topology (-want +got):\n%s", diff)
			}
		})
	}
}
