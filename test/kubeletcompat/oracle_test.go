package kubeletcompat_test

import (
	"slices"
	"testing"

	"github.com/google/go-cmp/cmp"
	"k8s.io/kubernetes/pkg/kubelet/cadvisor"

	"github.com/hotplugd/hotplugd/test/kubeletcompat/oracle"
)

// threads is the machine's logical CPUs per NUMA node, as cAdvisor groups them.
func threads(info *oracle.MachineInfo) map[int][]int {
	out := map[int][]int{}
	for _, n := range info.Topology {
		for _, c := range n.Cores {
			out[n.Id] = append(out[n.Id], c.Threads...)
		}
		slices.Sort(out[n.Id])
	}
	return out
}

// TestOracleMachineInfoFromRoot checks that the oracle's rooted view of
// cAdvisor reads a tree as cAdvisor reads the machine, so that trees and
// fixtures are fair stand-ins for real machines.
func TestOracleMachineInfoFromRoot(t *testing.T) {
	t.Run("this machine", func(t *testing.T) {
		want, err := oracle.HostMachineInfo()
		if err != nil {
			t.Skipf("cAdvisor machine.Info fails on this machine: %v", err)
		}
		got, err := oracle.MachineInfoFromRoot("/sys", "/proc")
		if err != nil {
			t.Fatalf("MachineInfoFromRoot() error: %v", err)
		}
		if diff := cmp.Diff(quantities(cadvisor.CapacityFromMachineInfo(want)), quantities(cadvisor.CapacityFromMachineInfo(got))); diff != "" {
			t.Errorf("capacity differs (-machine.Info +MachineInfoFromRoot):\n%s", diff)
		}
		if diff := cmp.Diff(threads(want), threads(got)); diff != "" {
			t.Errorf("topology differs (-machine.Info +MachineInfoFromRoot):\n%s", diff)
		}
		if got.NumSockets != want.NumSockets {
			t.Errorf("NumSockets = %d, machine.Info says %d", got.NumSockets, want.NumSockets)
		}
	})
	t.Run("tree of the hand-built machine", func(t *testing.T) {
		root := t.TempDir()
		treeMachine{
			nodes:          [][]int{{0, 1, 2, 3, 4, 5, 6, 7}, {8, 9, 10, 11, 12, 13, 14, 15}},
			threadsPerCore: 2,
			nodeMemKiB:     []uint64{65503232, 65503232},
			memTotalKiB:    131006464,
			hugePages:      map[uint64]uint64{2048: 768, 1048576: 6},
		}.write(t, root)
		got, err := oracle.MachineInfoFromRoot(root+"/sys", root+"/proc")
		if err != nil {
			t.Fatalf("MachineInfoFromRoot() error: %v", err)
		}
		want := handBuiltInfo()
		want.MemoryCapacity -= 512 // a tree has whole kB
		if diff := cmp.Diff(quantities(cadvisor.CapacityFromMachineInfo(want)), quantities(cadvisor.CapacityFromMachineInfo(got))); diff != "" {
			t.Errorf("capacity differs (-hand-built +tree):\n%s", diff)
		}
		if diff := cmp.Diff(threads(want), threads(got)); diff != "" {
			t.Errorf("topology differs (-hand-built +tree):\n%s", diff)
		}
	})
	t.Run("offline cpu", func(t *testing.T) {
		root := t.TempDir()
		treeMachine{
			nodes: [][]int{{0, 1, 2, 3}}, offline: []int{2}, threadsPerCore: 1,
			nodeMemKiB: []uint64{1048576}, memTotalKiB: 1048576,
		}.write(t, root)
		got, err := oracle.MachineInfoFromRoot(root+"/sys", root+"/proc")
		if err != nil {
			t.Fatalf("MachineInfoFromRoot() error: %v", err)
		}
		want := map[string]string{"cpu": "3", "memory": "1Gi"}
		if diff := cmp.Diff(want, quantities(cadvisor.CapacityFromMachineInfo(got))); diff != "" {
			t.Errorf("capacity differs (-want +got):\n%s", diff)
		}
	})
}
